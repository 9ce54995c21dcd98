"""The ``fxpsim`` command line: ``demo``, ``simulate``, ``sweep``, ``inspect``, ``presets`` (also
``python -m fxpsim``).

``--model`` takes a trained model saved by ``fxpsim.train.save_model``, an integer graph saved by
``IntegerGraph.save``, or a quantized ``.tflite`` / ``.onnx`` file.

Exit codes: 0 success, 2 usage errors (bad arguments, unknown preset, invalid config, missing file) with a
one-line ``fxpsim: error: ...`` message, 1 for unexpected failures.
"""
from __future__ import annotations

import argparse
import os
import sys

from ._cli_commands import (DEMO_ACC_BITS, DEMO_EPOCHS, DEMO_WEIGHT_BITS, UsageError, cmd_compare,  # noqa: F401
                           cmd_demo, cmd_export_vectors, cmd_formats, cmd_inspect, cmd_presets, cmd_simulate, cmd_sweep,
                           demo_model)

__all__ = ["main", "build_parser", "DEMO_EPOCHS"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the whole usage otherwise)
        raise UsageError(f"{message} (see '{self.prog} --help')")


MAX_BITS = 64


def _int_list(text: str) -> list[int]:
    """Bit widths: ``"8"``, ``"4,6,8"`` or inclusive ranges ``"10:32"`` / ``"10:32:2"``, each in 1..64
    (checked before a range is expanded)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            bits = [int(p) for p in part.split(":")]
            if len(bits) not in (1, 2, 3) or (len(bits) == 3 and bits[2] < 1) or bits[-1 if len(bits) < 3 else 1] < bits[0]:
                raise ValueError
            if not all(1 <= b <= MAX_BITS for b in bits[:2]):
                raise argparse.ArgumentTypeError(f"bit widths must lie in 1..{MAX_BITS}, got {part!r}")
            out += list(range(bits[0], bits[1] + 1, bits[2] if len(bits) == 3 else 1)) if len(bits) > 1 else bits
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like '8', '4,8' or '10:32[:2]' (inclusive), "
                                         f"got {text!r}") from None
    return out


def _checked(parse, ok, expected: str):
    """An argparse type: ``parse(text)`` where ``ok`` accepts it, else the one-line error
    ``expected <expected>, got '<text>'`` (NaN and infinities fail every float check below)."""
    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return convert


_positive_int = _checked(int, lambda v: v >= 1, "a positive integer")
#: A random seed: an integer in 0..2^32 - 1 (numpy's legacy seeding range).
_seed = _checked(int, lambda v: 0 <= v < 1 << 32, f"an integer seed in 0..{(1 << 32) - 1}")
#: An accuracy: a finite number in [0, 1].
_fraction = _checked(float, lambda v: 0.0 <= v <= 1.0, "an accuracy in [0, 1] (e.g. 0.97)")
_positive_float = _checked(float, lambda v: 0.0 < v < float("inf"), "a positive finite number")
_non_negative_float = _checked(float, lambda v: 0.0 <= v < float("inf"), "a finite number >= 0")


def _str_list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__
    parser = _Parser(prog="fxpsim", description="Bit-accurate simulation of quantized neural networks on "
                     "fixed-point accelerators: per-layer error and overflow reports, accumulator sweeps.")
    parser.add_argument("--version", action="version", version=f"fxpsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = sub.add_parser("demo", help="train a small QAT CNN on digits, simulate it, sweep accumulators, "
                          "write an HTML report", description="Train a small quantization-aware CNN on the "
                          "digits data set (seeded), simulate it on a preset, sweep accumulator widths with "
                          "saturation and wrap-around, and write fxpsim-report/ (HTML, JSON, PNG plots).")
    demo.add_argument("--out", default="fxpsim-report", help="output directory (default: fxpsim-report)")
    demo.add_argument("--config", default="tflite-int8", help="preset name or TOML file (default: tflite-int8)")
    demo.add_argument("--epochs", type=int, default=DEMO_EPOCHS, help=f"training epochs (default {DEMO_EPOCHS})")
    demo.add_argument("--seed", type=_seed, default=0, help="seed of weights, data split and batches")
    demo.add_argument("--acc-bits", type=_int_list, default=_int_list(DEMO_ACC_BITS),
                      help=f"accumulator widths to sweep (default {DEMO_ACC_BITS})")
    demo.add_argument("--processes", type=_positive_int, default=None, help="sweep worker processes (default: all cores)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")

    simulate = sub.add_parser("simulate", help="simulate a model on a hardware config",
                              description="Simulate a model (fxpsim model or graph .npz, .tflite, .onnx) on a "
                              "preset or TOML config and print the per-node report (a float .onnx or .tflite model on "
                              "a float datapath config: the per-layer float report). Nothing is written "
                              "unless --out is given.")
    simulate.add_argument("--model", required=True, help=_MODEL_HELP)
    simulate.add_argument("--config", default=None, help="preset name or TOML file (default: tflite-int8)")
    simulate.add_argument("--hls4ml-config", default=None, metavar="CFG", help="an hls4ml config (.json, or .yml "
                          "with PyYAML): the model runs as hls4ml's io_parallel C simulation with these types "
                          "(instead of --config)")
    _data_args(simulate)
    simulate.add_argument("--out", default=None, help="write report.html/json/md and plots here (default: "
                          "write nothing)")
    simulate.add_argument("--json", action="store_true", help="print the JSON report instead of the table")

    sweep = sub.add_parser("sweep", help="sweep weight/activation/accumulator bits, overflow and rounding",
                           description="Simulate a saved model on every combination of the given settings "
                           "(other settings from --config) and report the Pareto front.")
    sweep.add_argument("--model", required=True, help=_MODEL_HELP)
    sweep.add_argument("--config", default="tflite-int8", help="base preset name or TOML file (default: tflite-int8)")
    sweep.add_argument("--weight-bits", type=_int_list, default=None, help="e.g. 4,6,8 (fxpsim models only)")
    sweep.add_argument("--activation-bits", type=_int_list, default=None, help="e.g. 8 (fxpsim models only)")
    sweep.add_argument("--acc-bits", type=_int_list, default=None, help="e.g. 12:32:2 (a:b[:step], inclusive)")
    sweep.add_argument("--overflow", type=_str_list, default=None, help="e.g. saturate,wrap")
    sweep.add_argument("--rounding", type=_str_list, default=None, help="e.g. half_up,half_even")
    sweep.add_argument("--per-layer", action="store_true", help="mixed precision: search per-node weight, activation "
                       "and accumulator widths (fxpsim models only) for --target accuracy and/or under --budget")
    sweep.add_argument("--target", type=_fraction, default=None, help="with --per-layer: the accuracy to keep, e.g. "
                       "0.97 (default: float accuracy - 0.01)")
    sweep.add_argument("--budget", type=_positive_float, default=None, help="with --per-layer: largest bit-ops per sample")
    sweep.add_argument("--grid", nargs="+", action="extend", default=None, metavar="KEY=VALUES",
                       help="axes as KEY=VALUES (a:b[:step] inclusive, or a,b,c): on a float datapath "
                       "accumulator.fraction_bits=8:25 promote_every=32,128,inf chunk=16,32 (also preset, "
                       "weights.format, activations.format); on an integer one any HardwareConfig field")
    sweep.add_argument("--tolerance", type=_non_negative_float, default=None,
                       help="how far below the exact accumulation's accuracy (agreement without labels) a float "
                       "datapath may lie and fit the conclusion (default 0.005); for an integer sweep, metric "
                       "differences counted as ties (default 0)")
    sweep.add_argument("--processes", type=_positive_int, default=None, help="worker processes (default: all cores)")
    sweep.add_argument("--no-progress", action="store_true")
    _data_args(sweep)
    sweep.add_argument("--out", default=None, help="write sweep.csv/json and the report here")

    inspect = sub.add_parser("inspect", help="print a model's integer graph: nodes, shapes, types, scales, "
                             "MACs, accumulator bits needed", description="Print the integer graph of a model "
                             "(fxpsim model or graph .npz, .tflite, .onnx): one row per node.")
    inspect.add_argument("model", help=_MODEL_HELP)
    inspect.add_argument("--config", default="tflite-int8", help="target used to convert an fxpsim model "
                         "(default: tflite-int8)")
    inspect.add_argument("--data", default="digits", help="calibration data for an fxpsim model (as simulate)")
    inspect.add_argument("--seed", type=_seed, default=0, help=argparse.SUPPRESS)
    inspect.add_argument("--calibration", type=_positive_int, default=500, help=argparse.SUPPRESS)
    inspect.add_argument("--coverage", action="store_true", help="for a .tflite or .onnx file: which operators "
                         "import (per TFLite kernel set), listing every unsupported one with its nodes; never fails "
                         "on an unsupported model")

    vectors = sub.add_parser("export-vectors", help="write golden vectors of every node for RTL verification",
                             description="Run inputs through a model's integer graph on a config and write, per "
                             "node, input codes, weights, biases, requantization parameters, accumulators and "
                             "outputs ($readmemh .hex, .npy, .csv), manifest.json, fxpsim_params.svh, and for "
                             "fully connected nodes the inputs of examples/rtl/tb_dense.v (NN_node/tb_dense/).")
    vectors.add_argument("--model", required=True, help=_MODEL_HELP)
    vectors.add_argument("--config", default=None, help="preset name or TOML file (default: an imported model's "
                         "own runtime arithmetic, so the vectors equal the runtime's outputs; tflite-int8 for an "
                         "fxpsim model or graph)")
    _data_args(vectors)
    vectors.add_argument("--samples", type=_positive_int, default=None,
                         help="use the first N inputs of --data (default: all)")
    vectors.add_argument("--out", required=True, help="output directory")
    vectors.add_argument("--format", default="hex,npy", help="comma-separated: hex ($readmemh), mem ($readmemb), "
                         "npy, csv (default: hex,npy)")
    vectors.add_argument("--mac-trace", action="append", default=[], metavar="NODE:IDX[,IDX..]",
                         help="also write the running accumulator after every add of these outputs of NODE (flat "
                         "indices, batch included; NODE alone: the first --limit outputs); repeatable")
    vectors.add_argument("--limit", type=_positive_int, default=None,
                         help="at most N traced outputs per node (default 64)")

    comp = sub.add_parser("compare", help="compare an RTL dump with golden vectors: the first mismatch and its "
                          "pattern", description="Compare the files an RTL simulation wrote with the golden "
                          "vectors of 'fxpsim export-vectors' and report the first mismatch in dataflow order. "
                          "Exit status 0: match, 1: mismatch, 2: usage error (unreadable or malformed files).")
    comp.add_argument("--golden", required=True, help="directory written by 'fxpsim export-vectors'")
    comp.add_argument("--rtl", required=True, action="append", metavar="DUMP",
                      help="dump directory (golden layout, or tb_dense folders with acc_out.hex/y_out.hex; the "
                      "golden directory itself picks up every testbench run in it), or NODE/ROLE=FILE (repeatable)")
    comp.add_argument("--html", default=None, metavar="PAGE", help="also write an HTML page with mismatch maps")

    sub.add_parser("formats", help="list the named float formats: max, min normal, min subnormal, specials",
                   description="List the float formats fxpsim knows by name (FP8/FP6/FP4, bfloat16, float16, "
                               "tf32, E8M0, P3109): bits, exponent and mantissa widths, bias, max finite, min "
                               "normal, min subnormal, and how each encodes Inf and NaN.")
    presets = sub.add_parser("presets", help="list the shipped hardware presets",
                             description="List the hardware presets, or print one as TOML.")
    presets.add_argument("--show", metavar="NAME", default=None, help="print this preset as TOML")
    return parser


_MODEL_HELP = ("fxpsim model (.npz from fxpsim.train.save_model), integer graph (.npz from IntegerGraph.save), "
               "a quantized .tflite / .onnx file, or (with a float datapath --config) a float .onnx / .tflite file")


def _data_args(p):
    p.add_argument("--data", default="digits", help="'digits' (scikit-learn's, test split), an .npy of inputs, or "
                   "an .npz with arrays x, y (and optionally x_calibration); inputs in the model's input dtype")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the digits train/test split")
    p.add_argument("--calibration", type=_positive_int, default=500,
                   help="digits training images used to calibrate activation ranges (default 500)")


_COMMANDS = {"export-vectors": cmd_export_vectors, "compare": cmd_compare, "demo": cmd_demo, "simulate": cmd_simulate, "sweep": cmd_sweep, "inspect": cmd_inspect,
             "presets": cmd_presets, "formats": cmd_formats}


def main(argv=None) -> int:
    """Entry point of the ``fxpsim`` script; returns the exit code."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        return _COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"fxpsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        print("fxpsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (e.g. '| head'): the command did not finish; say so
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("fxpsim: error: standard output was closed before the command finished (nothing after that point "
              "was done or written)", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

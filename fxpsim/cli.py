"""The ``fxpsim`` command line: ``demo``, ``simulate``, ``sweep``, ``presets`` (also ``python -m fxpsim``).

Exit codes: 0 success, 2 usage errors (bad arguments, unknown preset, invalid config, missing file) with a
one-line ``fxpsim: error: ...`` message, 1 for unexpected failures.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

__all__ = ["main", "build_parser", "DEMO_EPOCHS"]

DEMO_EPOCHS = 15
DEMO_ACC_BITS = "10:32"
DEMO_WEIGHT_BITS = (4, 6)


class UsageError(Exception):
    """A user mistake: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the whole usage otherwise)
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _int_list(text: str) -> list[int]:
    """``"8"``, ``"4,6,8"`` or ranges ``"10:32"`` / ``"10:32:2"`` (inclusive)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ":" in part:
                bits = [int(p) for p in part.split(":")]
                if len(bits) not in (2, 3):
                    raise ValueError
                lo, hi, step = bits[0], bits[1], bits[2] if len(bits) == 3 else 1
                if step < 1 or hi < lo:
                    raise ValueError
                out += list(range(lo, hi + 1, step))
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like '8', '4,8' or '10:32[:2]', got {text!r}") from None
    return out


def _str_list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
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
    demo.add_argument("--seed", type=int, default=0, help="seed of weights, data split and batches")
    demo.add_argument("--acc-bits", type=_int_list, default=_int_list(DEMO_ACC_BITS),
                      help=f"accumulator widths to sweep (default {DEMO_ACC_BITS})")
    demo.add_argument("--processes", type=int, default=None, help="sweep worker processes (default: all cores)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")

    simulate = sub.add_parser("simulate", help="simulate a saved model on a hardware config",
                              description="Simulate a model saved with fxpsim.train.save_model on a preset "
                              "or TOML config and write a report.")
    simulate.add_argument("--model", required=True, help="model file (.npz from fxpsim.train.save_model)")
    simulate.add_argument("--config", default="tflite-int8", help="preset name or TOML file")
    _data_args(simulate)
    simulate.add_argument("--out", default=None, help="write report.html/json/md and plots here")
    simulate.add_argument("--json", action="store_true", help="print the JSON report instead of the table")

    sweep = sub.add_parser("sweep", help="sweep weight/activation/accumulator bits, overflow and rounding",
                           description="Simulate a saved model on every combination of the given settings "
                           "(other settings from --config) and report the Pareto front.")
    sweep.add_argument("--model", required=True, help="model file (.npz from fxpsim.train.save_model)")
    sweep.add_argument("--config", default="tflite-int8", help="base preset name or TOML file")
    sweep.add_argument("--weight-bits", type=_int_list, default=None, help="e.g. 4,6,8")
    sweep.add_argument("--activation-bits", type=_int_list, default=None, help="e.g. 8")
    sweep.add_argument("--acc-bits", type=_int_list, default=None, help="e.g. 12:32:2")
    sweep.add_argument("--overflow", type=_str_list, default=None, help="e.g. saturate,wrap")
    sweep.add_argument("--rounding", type=_str_list, default=None, help="e.g. half_up,half_even")
    sweep.add_argument("--processes", type=int, default=None, help="worker processes (default: all cores)")
    sweep.add_argument("--no-progress", action="store_true")
    _data_args(sweep)
    sweep.add_argument("--out", default=None, help="write sweep.csv/json and the report here")

    presets = sub.add_parser("presets", help="list the shipped hardware presets",
                             description="List the hardware presets, or print one as TOML.")
    presets.add_argument("--show", metavar="NAME", default=None, help="print this preset as TOML")
    return parser


def _data_args(p):
    p.add_argument("--data", default="digits", help="'digits' (scikit-learn's, test split) or an .npz with "
                   "arrays x, y (and optionally x_calibration)")
    p.add_argument("--seed", type=int, default=0, help="seed of the digits train/test split")
    p.add_argument("--calibration", type=int, default=500,
                   help="digits training images used to calibrate activation ranges (default 500)")


# ----- helpers ---------------------------------------------------------------------------------------
def _load_model(path: str):
    from .nn.train import load_model
    if not os.path.isfile(path):
        raise UsageError(f"model file not found: {path}")
    try:
        return load_model(path)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"cannot load model {path}: {exc}") from None


def _wants_flat(model) -> bool:
    from . import nn
    for layer in model.layers:
        if isinstance(layer, nn.Quantize):
            continue
        return isinstance(layer, nn.Dense)
    return False


def _load_data(args, model):
    """(x, y, x_calibration) for --data."""
    import numpy as np
    if args.data == "digits":
        from .nn.datasets import load_digits
        flat = _wants_flat(model)
        x, y = load_digits("test", seed=args.seed, flatten=flat)
        xc, _ = load_digits("train", seed=args.seed, flatten=flat)
        return x, y, xc[:max(1, args.calibration)]
    if not os.path.isfile(args.data):
        raise UsageError(f"data file not found: {args.data} (use 'digits' or an .npz with x and y)")
    try:
        with np.load(args.data, allow_pickle=False) as d:
            if "x" not in d.files:
                raise UsageError(f"{args.data}: no array 'x' (found {', '.join(d.files)})")
            x = d["x"].astype(np.float32)
            y = d["y"] if "y" in d.files else None
            xc = d["x_calibration"].astype(np.float32) if "x_calibration" in d.files else x
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {args.data}: {exc}") from None
    return x, y, xc


def _load_config(spec: str):
    from .hardware.simulation import ConfigError, load_config
    try:
        return load_config(spec)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ConfigError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None


def _say(*lines):
    print(*lines, sep="\n", flush=True)


# ----- commands --------------------------------------------------------------------------------------
def cmd_presets(args) -> int:
    from .hardware.simulation import preset, preset_names
    if args.show:
        _say(_load_config(args.show).to_toml().rstrip())
        return 0
    from .report.render import format_table
    rows = [[n, preset(n).summary()] for n in preset_names()]
    _say(format_table(rows, ["preset", "datapath"]))
    return 0


def cmd_simulate(args) -> int:
    from .hardware.simulation import simulate
    config = _load_config(args.config)
    model = _load_model(args.model)
    x, y, xc = _load_data(args, model)
    try:
        report = simulate(model, config, x, y, calibration_x=xc)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    _say(report.to_json() if args.json else report.to_text())
    if args.out:
        paths = report.save(args.out)
        if not args.json:
            _say("", f"report written to {paths['html']}")
    return 0


def cmd_sweep(args) -> int:
    from .hardware.simulation import ConfigError, simulate
    from .hardware.sweeps import sweep
    config = _load_config(args.config)
    model = _load_model(args.model)
    x, y, xc = _load_data(args, model)
    grid = {k: v for k, v in (("weight_bits", args.weight_bits), ("activation_bits", args.activation_bits),
                              ("accumulator_bits", args.acc_bits), ("accumulator_overflow", args.overflow),
                              ("rounding", args.rounding)) if v}
    if not grid:
        raise UsageError("give at least one axis: --weight-bits, --activation-bits, --acc-bits, --overflow "
                         "or --rounding (see 'fxpsim sweep --help')")
    try:
        result = sweep(model, (x, y), grid, config=config, calibration_x=xc, processes=args.processes,
                       progress=not args.no_progress)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    from .report.render import format_table
    _say(result.table(), "", f"Pareto front, {result.metric} vs accumulator bits:")
    cols = ["weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding", result.metric]
    _say(format_table([[r.get(c) for c in cols] for r in result.pareto_accumulator], cols))
    if args.out:
        report = simulate(model, config, x, y, calibration_x=xc, title=f"fxpsim sweep on {config.name}")
        report.sweep = result.to_dict()
        paths = report.save(args.out)
        _say("", f"sweep written to {paths['sweep_csv']} and {paths['html']}")
    return 0


def demo_model(epochs: int = DEMO_EPOCHS, seed: int = 0, progress: bool = False):
    """The demo's network: a small CNN (conv 16, pool, conv 32, pool, dense 10) trained on digits with
    8-bit fake quantization of weights (min/max observer, narrow range) and activations (moving average)."""
    from . import nn
    from .nn import train
    from .nn.datasets import load_digits
    x, y = load_digits("train", seed=seed)
    wq = {"class_name": "fake_quant", "num_bits": 8, "narrow_range": True, "observer": "minmax"}
    aq = {"class_name": "fake_quant", "num_bits": 8, "observer": {"class_name": "moving_average", "decay": 0.9}}
    model = nn.small_cnn((8, 8, 1), weight_quantizer=wq, activation_quantizer=aq, seed=seed)
    history = train.fit(model, (x, y), epochs=epochs, batch_size=32, optimizer=train.Adam(3e-3), seed=seed,
                        progress=progress)
    return model, history


def cmd_demo(args) -> int:
    from .nn.datasets import load_digits
    from .hardware.simulation import preset, preset_names, simulate
    from .report.render import format_table
    from .hardware.sweeps import sweep
    from .nn.train import save_model
    t0 = time.perf_counter()
    if args.epochs < 1:
        raise UsageError(f"--epochs must be at least 1, got {args.epochs}")
    config = _load_config(args.config)
    progress = not args.no_progress
    _say(f"[1/4] training a QAT CNN on digits ({args.epochs} epochs, seed {args.seed}) ...")
    model, history = demo_model(args.epochs, args.seed, progress)
    x, y = load_digits("test", seed=args.seed)
    xc = load_digits("train", seed=args.seed)[0][:500]
    _say(f"      training accuracy {history['accuracy'][-1]:.4f} ({sum(history['time']):.1f} s)")
    _say(f"[2/4] simulating on {config.name}: {config.summary()}")
    report = simulate(model, config, x, y, calibration_x=xc, title=f"fxpsim demo: QAT CNN on {config.name}")
    rows = []
    for name in preset_names():
        r = report if name == config.name else simulate(model, preset(name), x, y, calibration_x=xc)
        n = r.network
        rows.append([name, n["accuracy"], n["agreement"], n["output_sqnr_db"], n["overflow_count"]])
    tflite = any(s.startswith("tflite") for s in (config.requantization, config.dense_requantization or ""))
    acc_bits = [b for b in args.acc_bits if 2 <= b <= (32 if tflite else 62)]
    if not acc_bits:
        raise UsageError(f"--acc-bits: no width in 2..32 for {config.name}")
    w_bits = [b for b in DEMO_WEIGHT_BITS if b != config.weight_bits and b <= 8]
    grid = [{"accumulator_bits": acc_bits, "accumulator_overflow": ["saturate", "wrap"]},
            {"weight_bits": w_bits, "accumulator_bits": acc_bits[::2], "accumulator_overflow": ["saturate"]}]
    n_points = 2 * len(acc_bits) + len(w_bits) * len(acc_bits[::2])
    _say(f"[3/4] sweeping {n_points} datapaths: accumulator {acc_bits[0]}..{acc_bits[-1]} bits x saturate/wrap, "
         f"and weight bits {w_bits} ...")
    result = sweep(model, (x, y), grid, config=config, calibration_x=xc, processes=args.processes,
                   progress=progress)
    report.sweep = result.to_dict()
    report.notes.append(f"presets: {'; '.join(f'{r[0]} accuracy {r[1]:.4f}' for r in rows)}")
    _say(f"[4/4] writing {args.out}/ ...")
    paths = report.save(args.out)
    save_model(model, os.path.join(args.out, "model.npz"))
    _say("", report.to_text(), "", "Accuracy on every preset:",
         format_table(rows, ["preset", "accuracy", "agreement", "output SQNR dB", "overflows"]))
    fits = [r for r in result.records if r["accuracy"] >= report.network["float_accuracy"] - 0.005
            and r["weight_bits"] == config.weight_bits]
    by_mode = {}
    for r in fits:
        by_mode.setdefault(r["accumulator_overflow"], r["accumulator_bits"])
        by_mode[r["accumulator_overflow"]] = min(by_mode[r["accumulator_overflow"]], r["accumulator_bits"])
    for mode, bits in sorted(by_mode.items()):
        _say(f"narrowest accumulator within 0.5 points of float accuracy ({mode}): {bits} bits")
    _say("", f"report: {paths['html']}  (JSON: {paths['json']}, plots: {os.path.join(args.out, 'plots')}, "
         f"model: {os.path.join(args.out, 'model.npz')})", f"done in {time.perf_counter() - t0:.1f} s")
    return 0


_COMMANDS = {"demo": cmd_demo, "simulate": cmd_simulate, "sweep": cmd_sweep, "presets": cmd_presets}


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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

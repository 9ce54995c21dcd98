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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


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
    demo.add_argument("--seed", type=int, default=0, help="seed of weights, data split and batches")
    demo.add_argument("--acc-bits", type=_int_list, default=_int_list(DEMO_ACC_BITS),
                      help=f"accumulator widths to sweep (default {DEMO_ACC_BITS})")
    demo.add_argument("--processes", type=int, default=None, help="sweep worker processes (default: all cores)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")

    simulate = sub.add_parser("simulate", help="simulate a model on a hardware config",
                              description="Simulate a model (fxpsim model or graph .npz, .tflite, .onnx) on a "
                              "preset or TOML config and print the per-node report. Nothing is written "
                              "unless --out is given.")
    simulate.add_argument("--model", required=True, help=_MODEL_HELP)
    simulate.add_argument("--config", default="tflite-int8", help="preset name or TOML file (default: tflite-int8)")
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
    sweep.add_argument("--target", type=float, default=None, help="with --per-layer: the accuracy to keep, e.g. "
                       "0.97 (default: float accuracy - 0.01)")
    sweep.add_argument("--budget", type=float, default=None, help="with --per-layer: largest bit-ops per sample")
    sweep.add_argument("--processes", type=int, default=None, help="worker processes (default: all cores)")
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
    inspect.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    inspect.add_argument("--calibration", type=_positive_int, default=500, help=argparse.SUPPRESS)

    vectors = sub.add_parser("export-vectors", help="write golden vectors of every node for RTL verification",
                             description="Run inputs through a model's integer graph on a config and write, per "
                             "node, input codes, weights, biases, requantization parameters, accumulators and "
                             "outputs ($readmemh .hex, .npy, .csv), manifest.json, fxpsim_params.svh, and for "
                             "fully connected nodes the inputs of examples/rtl/tb_dense.v (NN_node/tb_dense/).")
    vectors.add_argument("--model", required=True, help=_MODEL_HELP)
    vectors.add_argument("--config", default="tflite-int8", help="preset name or TOML file (default: tflite-int8)")
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

    presets = sub.add_parser("presets", help="list the shipped hardware presets",
                             description="List the hardware presets, or print one as TOML.")
    presets.add_argument("--show", metavar="NAME", default=None, help="print this preset as TOML")
    return parser


_MODEL_HELP = ("fxpsim model (.npz from fxpsim.train.save_model), integer graph (.npz from IntegerGraph.save), "
               "or a quantized .tflite / .onnx file")


def _data_args(p):
    p.add_argument("--data", default="digits", help="'digits' (scikit-learn's, test split), an .npy of inputs, or "
                   "an .npz with arrays x, y (and optionally x_calibration); inputs in the model's input dtype")
    p.add_argument("--seed", type=int, default=0, help="seed of the digits train/test split")
    p.add_argument("--calibration", type=_positive_int, default=500,
                   help="digits training images used to calibrate activation ranges (default 500)")


# ----- helpers ---------------------------------------------------------------------------------------
def _load_model(path: str):
    """An fxpsim.nn model or an IntegerGraph, whatever the file holds."""
    import zipfile
    if not os.path.isfile(path):
        raise UsageError(f"model file not found: {path}")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                is_graph = "graph.json.npy" in z.namelist()
            if is_graph:
                from .graph.ir import load_graph
                return load_graph(path)
            from .nn.train import load_model
            return load_model(path)
        from .frontends import import_model
        return import_model(path)
    except ImportError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except (ValueError, KeyError, OSError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot load model {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def _wants_flat(model) -> bool:
    from . import nn
    for layer in model.layers:
        if isinstance(layer, nn.Quantize):
            continue
        return isinstance(layer, nn.Dense)
    return False


def _is_graph(model) -> bool:
    from .graph.ir import IntegerGraph
    return isinstance(model, IntegerGraph)


def _load_data(args, model):
    """(x, y, x_calibration) for --data (graphs take their inputs in their own dtype)."""
    import numpy as np
    graph = _is_graph(model)
    if args.data == "digits":
        from .nn.datasets import load_digits
        if graph:
            shape = model.tensors[model.inputs[0]].shape
            if shape not in ((8, 8, 1), (64,)) or not model.tensors[model.inputs[0]].is_float:
                raise UsageError(f"the model's input is {model.tensors[model.inputs[0]].type_name}{list(shape)}, "
                                 "not digits images: give --data inputs.npy (or .npz with x, y)")
            flat = shape == (64,)
        else:
            flat = _wants_flat(model)
        x, y = load_digits("test", seed=args.seed, flatten=flat)
        xc, _ = load_digits("train", seed=args.seed, flatten=flat)
        return x, y, xc[:args.calibration]
    if not os.path.isfile(args.data):
        raise UsageError(f"data file not found: {args.data} (use 'digits', an .npy, or an .npz with x and y)")
    try:
        loaded = np.load(args.data, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            x, y, xc = loaded, None, None
        else:
            with loaded as d:
                if "x" not in d.files:
                    raise UsageError(f"{args.data}: no array 'x' (found {', '.join(d.files)})")
                x = d["x"]
                y = d["y"] if "y" in d.files else None
                xc = d["x_calibration"] if "x_calibration" in d.files else None
    except (OSError, ValueError, EOFError) as exc:
        raise UsageError(f"cannot read {args.data}: {str(exc).splitlines()[0]}") from None
    if not graph:
        if x.dtype.kind not in "fiu":
            raise UsageError(f"{args.data}: x must be numeric, got dtype {x.dtype}")
        x = x.astype(np.float32)
        xc = x if xc is None else xc.astype(np.float32)
    return x, y, xc


def _load_config(spec: str):
    from .hardware.simulation import ConfigError, load_config
    try:
        return load_config(spec)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ConfigError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None


def _check_out(path):
    """Fail before any computation when ``--out`` cannot become a report folder."""
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--out {path}: exists and is not a folder")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {path}: cannot write in {parent}")


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


def cmd_inspect(args) -> int:
    from .hardware.conversion import convert
    model = _load_model(args.model)
    if not _is_graph(model):
        config = _load_config(args.config)
        x, _, xc = _load_data(args, model)
        try:
            model = convert(model, config, xc)
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc).splitlines()[0]) from None
    _say(model.summary())
    return 0


def cmd_simulate(args) -> int:
    from .hardware.simulation import simulate
    _check_out(args.out)
    config = _load_config(args.config)
    model = _load_model(args.model)
    x, y, xc = _load_data(args, model)
    try:
        report = simulate(model, config, x, y, calibration_x=None if _is_graph(model) else xc)
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
    _check_out(args.out)
    config = _load_config(args.config)
    model = _load_model(args.model)
    x, y, xc = _load_data(args, model)
    if args.per_layer:
        return _per_layer_search(args, config, model, x, y, xc)
    grid = {k: v for k, v in (("weight_bits", args.weight_bits), ("activation_bits", args.activation_bits),
                              ("accumulator_bits", args.acc_bits), ("accumulator_overflow", args.overflow),
                              ("rounding", args.rounding)) if v}
    if not grid:
        raise UsageError("give at least one axis: --weight-bits, --activation-bits, --acc-bits, --overflow "
                         "or --rounding (see 'fxpsim sweep --help')")
    try:
        result = sweep(model, (x, y), grid, config=config, calibration_x=None if _is_graph(model) else xc,
                       processes=args.processes, progress=not args.no_progress)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    from .report.render import format_table
    _say(result.table(), "", f"Pareto front, {result.metric} vs accumulator bits:")
    cols = ["weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding", result.metric]
    _say(format_table([[r.get(c) for c in cols] for r in result.pareto_accumulator], cols))
    if args.out:
        report = simulate(model, config, x, y, calibration_x=None if _is_graph(model) else xc,
                          title=f"fxpsim sweep on {config.name}")
        report.sweep = result.to_dict()
        paths = report.save(args.out)
        _say("", f"sweep written to {paths['sweep_csv']} and {paths['html']}")
    return 0


def _per_layer_search(args, config, model, x, y, xc) -> int:
    """``fxpsim sweep --per-layer``: :func:`fxpsim.search` with the axes given (or its defaults)."""
    import numpy as np
    from .hardware.mixed_precision import search
    if _is_graph(model):
        raise UsageError("--per-layer needs an fxpsim model (a graph's widths are fixed)")
    if y is None:
        raise UsageError("--per-layer needs labels: --data digits or an .npz with x and y")
    candidates = {k: v for k, v in (("weight_bits", args.weight_bits), ("activation_bits", args.activation_bits),
                                    ("accumulator_bits", args.acc_bits)) if v} or None
    target = args.target
    if target is None and args.budget is None:
        from .nn.train import predict
        target = float(np.mean(predict(model, x).argmax(axis=1) == y)) - 0.01
    try:
        result = search(model, (x, y), budget=args.budget, candidates=candidates, target=target, config=config,
                        calibration_x=xc, processes=args.processes or 1)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    _say(result.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "per_layer.toml")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(result.config.to_toml())
        _say("", f"the chosen per-layer config: {path}")
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
    _check_out(args.out)
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
        _say(f"narrowest accumulator within 0.5 points of float accuracy with {config.weight_bits}-bit weights "
             f"and {config.activation_bits}-bit activations ({mode}): {bits} bits")
    model_path = os.path.join(args.out, "model.npz")
    _say("", f"wrote {args.out}/:",
         f"  {paths['html']}  the report with every plot embedded: open it in a browser",
         f"  {paths['markdown']}  the same as Markdown (links to plots/*.png)",
         f"  {paths['json']}  every number, machine-readable (schema in fxpsim.report.render)",
         f"  {paths['sweep_csv']}, {paths['sweep_json']}  one row per swept datapath",
         f"  {os.path.join(args.out, 'plots')}/  the plots as PNG",
         f"  {model_path}  the trained model: fxpsim simulate --model {model_path} --config int8-acc16-sat",
         f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_export_vectors(args) -> int:
    from .hardware.conversion import convert
    from .rtl.vectors import export_vectors
    _check_out(args.out)
    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    traces = []                          # --mac-trace NODE:IDX[,IDX..] (node names may contain ':') or NODE
    for spec in args.mac_trace:
        node, sep, idx = spec.rpartition(":")
        outputs = None
        if sep and idx.strip() and all(p.strip().isdigit() for p in idx.split(",")):
            outputs = [int(p) for p in idx.split(",")]
        else:
            node = spec
        if not node.strip():
            raise UsageError(f"--mac-trace {spec!r}: expected NODE:IDX[,IDX..] (flat output indices) or NODE")
        traces.append({"node": node, "outputs": outputs, **({"limit": args.limit} if args.limit else {})})
    config = _load_config(args.config)
    model = _load_model(args.model)
    x, _, xc = _load_data(args, model)
    if args.samples:
        x = x[:args.samples]
    try:
        graph = model if _is_graph(model) else convert(model, config, xc)
        manifest = export_vectors(graph, args.out, x, config, formats=formats, mac_trace=traces or None)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    n_files = sum(1 for f in manifest["files"] if f.get("set") == "golden")
    _say(f"wrote {n_files} golden vector files for {len(manifest['nodes'])} nodes ({manifest['batch']} inputs, "
         f"{config.name}) to {args.out}/: manifest.json, fxpsim_params.svh, one folder per node")
    for n in manifest["nodes"]:
        tb = n.get("tb_dense")
        if tb:
            _say(f"  node {n['name']!r}: testbench inputs in {os.path.join(args.out, tb['dir'])}/  "
                 f"(run: examples/rtl/run.sh {os.path.join(args.out, tb['dir'])})")
        for note in n["notes"]:
            _say(f"  node {n['name']!r}: {note}")
    return 0


def cmd_compare(args) -> int:
    from .rtl.compare import compare
    pairs = [r for r in args.rtl if "=" in r and not os.path.isdir(r)]
    if pairs and len(pairs) != len(args.rtl) or (not pairs and len(args.rtl) != 1):
        raise UsageError("--rtl takes one dump directory, or one or more NODE/ROLE=FILE entries")
    dump = dict(p.split("=", 1) for p in pairs) if pairs else args.rtl[0]
    try:
        result = compare(args.golden, dump, html=args.html)
    except ValueError as exc:
        raise UsageError(" ".join(str(exc).split())) from None
    _say(result.to_text().rstrip())
    if args.html:
        _say("", f"HTML report written to {args.html}")
    return result.exit_code


_COMMANDS = {"export-vectors": cmd_export_vectors, "compare": cmd_compare, "demo": cmd_demo, "simulate": cmd_simulate, "sweep": cmd_sweep, "inspect": cmd_inspect,
             "presets": cmd_presets}


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
    except BrokenPipeError:  # the reader went away (e.g. '| head'): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

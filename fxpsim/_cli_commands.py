"""The bodies of the ``fxpsim`` commands (``demo``, ``simulate``, ``sweep``, ``inspect``, ``presets``,
``export-vectors``, ``compare``) and the helpers they share: loading ``--model``, ``--data`` and ``--config``,
checking ``--out``. :mod:`fxpsim.cli` holds the parser and ``main``, which calls these.

Each ``cmd_*`` takes the parsed arguments and returns the exit code; a user mistake raises
:class:`UsageError` (one line, exit code 2).
"""
from __future__ import annotations

import os
import time

DEMO_EPOCHS = 15
DEMO_ACC_BITS = "10:32"
DEMO_WEIGHT_BITS = (4, 6)


class UsageError(Exception):
    """A user mistake: printed as one line, exit code 2."""


# ----- helpers ---------------------------------------------------------------------------------------
def _load_model(path: str):
    """An fxpsim.nn model or an IntegerGraph, whatever the file holds."""
    import struct
    import zipfile
    import zlib
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
    except (ValueError, KeyError, OSError, TypeError, EOFError, zipfile.BadZipFile, IndexError, NotImplementedError,
            RuntimeError, OverflowError, AttributeError, RecursionError, struct.error, zlib.error) as exc:
        # a damaged file: one line whatever layer noticed (the readers' own messages name the damage)
        text = str(exc).splitlines()[0] if str(exc) else ""
        kind = "" if type(exc) in (ValueError, UsageError) else f"{type(exc).__name__}: "
        raise UsageError(f"cannot load model {path}: {kind}{text}") from None


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
    from .graph.extract import FloatGraph
    graph = _is_graph(model)
    if args.data == "digits" and isinstance(model, FloatGraph):
        from ._cli_float import digits_for
        return digits_for(model, args.seed, args.calibration)
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


def _run_inputs(args):
    """What a command that runs a model reads, in this order: ``--out`` checked, ``--config``, ``--model``,
    ``--data``; returns ``(config, model, x, y, x_calibration)``."""
    _check_out(args.out)
    from ._cli_float import load_model_for
    config = _load_config(args.config or "tflite-int8")
    model = load_model_for(args.model, config)        # a float .onnx / .tflite file on a float target: its FloatGraph
    x, y, xc = _load_data(args, model)
    return config, model, x, y, xc


def _say(*lines):
    print(*lines, sep="\n", flush=True)


# ----- commands --------------------------------------------------------------------------------------
def cmd_formats(args) -> int:
    from .core.float_format import float_format_table
    _say(float_format_table())
    return 0


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
    if args.coverage:
        from .frontends import model_coverage
        if not str(args.model).lower().endswith((".tflite", ".onnx")):
            raise UsageError(f"--coverage reads a .tflite or .onnx file, not {args.model}")
        try:
            _say(str(model_coverage(args.model)))
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc).splitlines()[0]) from None
        return 0
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


def _hls4ml_inputs(args):
    """``simulate --hls4ml-config``: the model's hls4ml graph on the datapath of its ``accum_t`` types."""
    from .hardware import hls4ml_config as h
    if args.config is not None:
        raise UsageError("--config and --hls4ml-config both set the datapath: give one")
    _check_out(args.out)
    try:
        cfg = h.load_hls4ml_config(args.hls4ml_config)
        model = _load_model(args.model)
        graph = h.apply_hls4ml_config(model, cfg, None if _is_graph(model) else _load_data(args, model)[2])
        config = h.hls4ml_hardware_config(graph)
    except (OSError, ImportError, ValueError, TypeError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    return (config, graph) + _load_data(args, graph)[:2] + (None,)


def cmd_simulate(args) -> int:
    from .hardware.simulation import simulate
    config, model, x, y, xc = _hls4ml_inputs(args) if args.hls4ml_config else _run_inputs(args)
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
    from ._cli_float import float_sweep, parse_grid
    from .graph.extract import FloatGraph
    from .hardware.float_config import is_float_datapath
    config, model, x, y, xc = _run_inputs(args)
    extra = parse_grid(args.grid)
    if is_float_datapath(config) or isinstance(model, FloatGraph):
        return float_sweep(args, config, model, x, y, xc, extra)
    if args.per_layer:
        if extra:
            raise UsageError("--grid and --per-layer: --per-layer searches its own axes; give one")
        return _per_layer_search(args, config, model, x, y, xc)
    grid = {k: v for k, v in (("weight_bits", args.weight_bits), ("activation_bits", args.activation_bits),
                              ("accumulator_bits", args.acc_bits), ("accumulator_overflow", args.overflow),
                              ("rounding", args.rounding)) if v}
    both = sorted(set(grid) & set(extra))
    if both:
        raise UsageError(f"{', '.join(both)}: given both as an option and in --grid; give one")
    grid.update(extra)
    if not grid:
        raise UsageError("give at least one axis: --weight-bits, --activation-bits, --acc-bits, --overflow, "
                         "--rounding or --grid KEY=VALUES (see 'fxpsim sweep --help')")
    try:
        result = sweep(model, (x, y), grid, config=config, calibration_x=None if _is_graph(model) else xc,
                       processes=args.processes, progress=not args.no_progress, tolerance=args.tolerance)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    from .report.render import format_table
    _say(result.table(), "", f"Pareto front, {result.metric} vs accumulator bits:")
    cols = ["weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding", result.metric]
    _say(format_table([[r.get(c) for c in cols] for r in result.pareto_accumulator], cols))
    _say(result.to_text().splitlines()[0])          # the recommendation, naming its metric
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
    fits = [r for r in result.records if r["accuracy"] >= report.network["float_accuracy"] - 0.005
            and r["weight_bits"] == config.weight_bits]
    by_mode = {}
    for r in fits:
        by_mode.setdefault(r["accumulator_overflow"], r["accumulator_bits"])
        by_mode[r["accumulator_overflow"]] = min(by_mode[r["accumulator_overflow"]], r["accumulator_bits"])
    report.conclusion = [f"narrowest accumulator within 0.5 points of float accuracy with {config.weight_bits}-bit "
                         f"weights and {config.activation_bits}-bit activations ({mode}): {bits} bits"
                         for mode, bits in sorted(by_mode.items())]
    _say(f"[4/4] writing {args.out}/ ...")
    paths = report.save(args.out)
    save_model(model, os.path.join(args.out, "model.npz"))
    _say("", report.to_text(), "", "Accuracy on every preset:",
         format_table(rows, ["preset", "accuracy", "agreement", "output SQNR dB", "overflows"]))
    _say(*report.conclusion)
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
    model = _load_model(args.model)
    # an imported graph's default is its runtime's own arithmetic (the datapath its import recorded): the golden
    # outputs are then the runtime's outputs; an fxpsim model or graph uses tflite-int8 unless told otherwise
    imported = _is_graph(model) and isinstance(model.meta, dict) and bool(model.meta.get("datapath"))
    config = model.default_datapath if imported and args.config is None else _load_config(args.config or "tflite-int8")
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

"""Simulation of a network on a target datapath, bit for bit, with a per-node report.

:func:`simulate` takes an ``fxpsim.nn`` model (converted for the target by :func:`~fxpsim.hardware.convert`
and compared with the float model) or any :class:`~fxpsim.graph.IntegerGraph` (an imported model, a graph
built by hand; compared with the graph's dequantized float execution and with the same graph on its exact
datapath). Sweeps over many datapaths live in :mod:`fxpsim.hardware.sweeps`.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ..graph.extract import _LINEAR_KINDS, FloatGraph, FloatStage, _check_x, _float_trace, _stage_ends, extract
from ..graph.ir import IntegerGraph
from ..graph.mac_view import MAC_VIEWS, mac_operands, mac_sums
from ..graph.ops import exact_accumulator
from ..report.render import LayerRecord, Report
from .config import REQUANTIZATION_SCHEMES, ConfigError, HardwareConfig, load_config, preset, preset_names
from .conversion import activation_params, convert, layer_requantizer, quantize_weights

__all__ = ["HardwareConfig", "ConfigError", "preset", "preset_names", "load_config", "REQUANTIZATION_SCHEMES",
           "convert", "extract", "simulate", "FloatGraph", "FloatStage", "activation_params", "quantize_weights",
           "layer_requantizer", "network_metrics"]

_MAC_OPS = ("fully_connected", "conv2d", "depthwise_conv2d")


def _signed_bits(lo: int, hi: int) -> int:
    """Smallest two's complement width holding every integer in [lo, hi]."""
    return max(int(hi).bit_length() if hi >= 0 else 0, int(-lo - 1).bit_length() if lo < 0 else 0) + 1


def _signed_log2_histogram(values: np.ndarray, bits: int, bins: int):
    r"""Histogram of :math:`\mathrm{sign}(v)\log_2(1 + |v|)` over ``[-bits, bits]`` (a value that needs
    :math:`b` bits sits near :math:`\pm(b - 1)`), in an even number of bins (symmetric about 0): ``bins`` rounded
    down to even, and 2 for ``bins = 1`` (which ``simulate`` accepts)."""
    t = np.sign(values) * np.log2(1.0 + np.abs(values.astype(np.float64)))
    counts, edges = np.histogram(t, bins=2 * max(bins // 2, 1), range=(-float(bits), float(bits)))
    return counts, edges


def _errors(hw: np.ndarray, ref: np.ndarray, lsb: float) -> tuple[float, float, float]:
    """(MSE, SQNR dB, max |error| in LSBs) of dequantized hardware outputs against a float reference."""
    err = hw - ref
    noise = float(np.sum(err * err))
    signal = float(np.sum(ref * ref))
    mse = noise / max(err.size, 1)
    if noise == 0.0:
        sqnr = math.inf
    elif signal == 0.0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    return mse, sqnr, float(np.max(np.abs(err)) / lsb) if err.size else 0.0


def _check_labels(y, n: int, n_classes: int | None = None):
    """Integer labels [n], each in 0..n_classes-1 when the number of classes is known."""
    if y is None:
        return None
    y = np.asarray(y)
    if y.dtype.kind not in "iu" or y.shape != (n,):
        raise ValueError(f"y must be integer labels of shape ({n},), got dtype {y.dtype} and shape {y.shape}")
    if n_classes is not None and y.size and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"y holds labels outside 0..{n_classes - 1} (the model has {n_classes} outputs): "
                         f"min {int(y.min())}, max {int(y.max())}")
    return y


def _lut_notes(graph, config) -> list:
    """Which nodes run as lookup tables (``activation_lut_entries``), or that the knob changes nothing."""
    tables = config.lut_nodes(graph)
    if tables:
        kinds = sorted({f"{e} entries, {i} interpolation" for e, i in tables.values()})
        return [f"lookup-table activations on {len(tables)} node(s) ({', '.join(tables)}): {'; '.join(kinds)}"]
    if config.activation_lut_entries or any(o.get("activation_lut_entries")
                                            for o in (config.layers or {}).values()):
        return ["activation_lut_entries is set but the graph has no sigmoid/tanh/hard-swish/softmax node: "
                "it changes nothing"]
    return []


def _check_positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def run_collect(graph: IntegerGraph, x, datapath, batch_size: int = 4096, exact: bool = True):
    """Run ``graph`` on ``datapath`` in chunks, keeping every tensor: ``(values, traces, exact_acc)``.

    ``values``: tensor name -> codes over the whole batch; ``traces``: node name -> summed ``overflows``,
    ``adds``, ``clipped``, the largest ``bias_clipped`` (biases saturated into the accumulator) and
    ``partial_peak`` (largest exact |running sum|) and ``partial_range`` (its smallest and largest value, signed;
    None where the node's trace has no partial sums); ``exact_acc``: MAC node name -> infinite-precision
    accumulator values (with ``exact``).
    """
    feeds = graph._feeds(x)
    n = len(next(iter(feeds.values())))
    parts: dict = {}
    traces: dict = {nd.name: {"overflows": 0, "adds": 0, "clipped": 0, "bias_clipped": 0, "partial_peak": None,
                              "partial_range": None, "has_acc": False} for nd in graph.nodes}
    accs: dict = {}
    for start in range(0, n, batch_size):
        chunk = [f[start:start + batch_size] for f in feeds.values()]
        _, tr, values = graph.run(chunk, datapath, trace="peaks" if exact else True, keep=True)
        for name, v in values.items():
            parts.setdefault(name, []).append(v)
        for nd in graph.nodes:
            info = tr[nd.name] or {}
            for key in ("overflows", "adds", "clipped"):
                traces[nd.name][key] += int(info.get(key, 0))
            traces[nd.name]["bias_clipped"] = max(traces[nd.name]["bias_clipped"], int(info.get("bias_clipped", 0)))
            if info.get("partial_peak") is not None:     # the largest |running sum| of the MAC sequence
                peak = traces[nd.name]["partial_peak"]
                traces[nd.name]["partial_peak"] = max(int(info["partial_peak"]), peak or 0)
                _merge_range(traces[nd.name], info.get("partial_range"))
            traces[nd.name]["has_acc"] |= info.get("acc") is not None
            if exact and nd.op in _MAC_OPS:
                ins = [values[t] if t in values else graph.tensors[t].data for t in nd.inputs if t]
                accs.setdefault(nd.name, []).append(exact_accumulator(graph, nd, ins))
            elif exact and nd.op in MAC_VIEWS and info.get("acc") is not None:
                # an importer's MAC op that ran an integer accumulator: its exact sums and partial-sum peak
                # from its core view (its own kernel traces neither)
                ins = [values[t] if t in values else graph.tensors[t].data for t in nd.inputs if t]
                ops = mac_operands(graph, nd, ins)
                if ops is None and info.get("exact_acc") is not None:
                    accs.setdefault(nd.name, []).append(info["exact_acc"])   # sums the op traced itself
                elif ops is not None:
                    dp = _node_datapath(datapath, nd, graph)
                    sums, peak, span = mac_sums(ops, preload=getattr(dp, "bias_add", "preload") == "preload",
                                                order=getattr(dp, "accumulator_order", "sequential"),
                                                zero_point=getattr(dp, "zero_point", "subtract"), with_range=True)
                    accs.setdefault(nd.name, []).append(sums)
                    if info.get("partial_peak") is None:
                        traces[nd.name]["partial_peak"] = max(peak, traces[nd.name]["partial_peak"] or 0)
                        _merge_range(traces[nd.name], span)
    values = {k: np.concatenate(v) for k, v in parts.items()}
    return values, traces, {k: np.concatenate(v) for k, v in accs.items()}


def _merge_range(trace: dict, span) -> None:
    """Widen ``trace["partial_range"]`` to hold ``span`` (a ``(low, high)`` of exact partial sums, or None)."""
    if span is None:
        return
    old = trace["partial_range"]
    trace["partial_range"] = tuple(int(v) for v in span) if old is None else \
        (min(old[0], int(span[0])), max(old[1], int(span[1])))


def _bits_needed(trace: dict, peak: int) -> int:
    """Signed width holding every exact partial sum: from their signed range when the trace has it (a sum of
    exactly :math:`-2^{n-1}` fits ``n`` bits), else from the largest magnitude."""
    span = trace.get("partial_range")
    if span is not None:
        return _signed_bits(*span)
    return _signed_bits(-peak, peak) if peak else 1


def _node_datapath(datapath, node, graph):
    """The datapath one node runs on: a config's per-node override, or the datapath itself."""
    for_node = getattr(datapath, "for_node", None)
    return for_node(node, graph.nodes.index(node)) if for_node is not None else datapath


def exact_datapath(config: HardwareConfig, keep=()) -> HardwareConfig:
    """The exact datapath of ``config`` (:meth:`HardwareConfig.exact_datapath`): an accumulator that never
    overflows (32 bits for the TFLite schemes, else 62), the full bias, the full multiplier, no tiles, no
    lookup tables; ``keep`` names what the user pins."""
    from .exact import exact_datapath_of
    return exact_datapath_of(config, keep)


def simulate(model, config="tflite-int8", x=None, y=None, *, calibration_x=None, histogram_bins: int = 60,
             title: str | None = None, batch_size: int = 4096):
    """Run a network on the target datapath, bit for bit, and report per node where it differs.

    Parameters
    ----------
    model : fxpsim.nn.Sequential or IntegerGraph
        A trained model (float or QAT; batch norm is folded and it is converted for ``config``), or an
        integer graph (imported or built by hand), which runs as it is on ``config``'s datapath knobs
        (accumulator, overflow, order, bias placement, requantization; its own widths and scales).
    config : HardwareConfig, preset name, TOML path or mapping
    x : ndarray, [N, ...]
        Inputs (float for a model; the graph input's dtype for a graph); ``y`` optional integer labels [N].
    calibration_x : ndarray, optional
        Inputs that calibrate a model's activation ranges not fixed by its quantizers (default ``x``).
    histogram_bins : int
        Bins of the exact-accumulator histograms in the report (an even number, symmetric about 0: an odd count
        rounds down, 1 gives 2).

    Returns
    -------
    fxpsim.report.Report
        Per node: MSE, SQNR and max error (in output LSBs) against the reference (the float model's layer
        output, or the graph's float execution), the fraction of outputs not equal to the exact datapath,
        overflow count and rate, exact accumulator peak, bits needed and headroom, clipped fraction; for the
        network: accuracy, reference accuracy, top-1 agreement, output SQNR, bit-ops.
    """
    t0 = time.perf_counter()
    config = load_config(config)
    if config.accumulator_preset is not None:      # a float datapath: fxpsim.hardware.float_datapath
        from .float_datapath import simulate_float
        return simulate_float(model, config, x, y, calibration_x=calibration_x, title=title)
    histogram_bins = _check_positive(histogram_bins, "histogram_bins")
    batch_size = _check_positive(batch_size, "batch_size")
    notes = []
    if isinstance(model, IntegerGraph):
        graph = model
        feeds = graph._feeds(x)
        n = len(next(iter(feeds.values())))
        y = _check_labels(y, n, int(np.prod(graph.tensors[graph.outputs[0]].shape)))
        _, refs = graph.run_float(list(feeds.values()), keep=True)
        ref_names = [t for nd in graph.nodes for t in nd.outputs]
        notes.append("reference: the graph's dequantized float execution (every op in float64 on dequantized "
                     "constants); 'not exact' compares with the same graph on an exact accumulator")
        notes.append("the graph keeps its own widths and scales; of the config only the datapath knobs apply "
                     "(accumulator bits/overflow/order/overflow_at, tiles, zero-point handling, bias add, "
                     "requantization scheme, multiplier bits and rounding, rounding, lookup-table activations)")
        model_repr = graph.name
    else:
        x = _check_x(x, "x")
        y = _check_labels(y, x.shape[0])
        fgraph = extract(model, x if calibration_x is None else calibration_x)
        graph = convert(fgraph, config)
        _check_labels(y, x.shape[0], int(np.prod(graph.tensors[graph.outputs[0]].shape)))
        outs = _float_trace(fgraph.folded, _stage_ends(fgraph.stages), x)
        if fgraph.stages[0].model_layers[0] > 0:
            outs.pop(0)  # output of the leading Quantize: the float input of the first stage
        ref_names = list(graph.meta["stage_outputs"])
        refs = dict(zip(ref_names, outs))
        feeds = {"input": x}
        sources = {s.range_source for s in fgraph.stages if s.kind in _LINEAR_KINDS}
        notes.append("activation ranges from " + " and ".join(sorted(
            {"the model's quantizers" if s == "quantizer" else "calibration data" for s in sources})))
        model_repr = fgraph.model_repr
    notes += list(graph.meta.get("notes", []))       # what conversion or import had to decide
    notes += _lut_notes(graph, config)
    notes += _runtime_notes(graph)
    values, traces, accs = run_collect(graph, list(feeds.values()), config, batch_size)
    exact_cfg = exact_datapath(config)
    # the exact datapath: an fxpsim.nn model converted again for it (its biases stored in full), a graph as is
    egraph = graph if isinstance(model, IntegerGraph) else convert(fgraph, exact_cfg)
    exact_values, exact_traces, _ = run_collect(egraph, list(feeds.values()), exact_cfg, batch_size)
    records = []
    producer = {t: nd for nd in graph.nodes for t in nd.outputs}
    for i, name in enumerate(ref_names):
        node, spec = producer[name], graph.tensors[name]
        tr = traces[node.name]
        codes = values[name]
        hw = spec.dequantize(codes) if not spec.is_float else codes.astype(np.float64)
        lsb = float(spec.scale[0]) if spec.scale is not None else 1.0
        mse, sqnr, max_lsb = _errors(hw, refs[name].reshape(hw.shape), lsb)
        rec = LayerRecord(index=i, name=node.name, kind=node.op, output_shape=tuple(codes.shape[1:]),
                          macs=graph.macs(node), mse=mse, sqnr_db=sqnr, max_abs_error_lsb=max_lsb,
                          overflow_count=tr["overflows"], overflow_rate=tr["overflows"] / tr["adds"] if tr["adds"] else 0.0,
                          clipped_fraction=tr["clipped"] / max(codes.size, 1),
                          not_exact_fraction=_differs(codes, exact_values[name]),
                          output_scale=None if spec.scale is None else float(spec.scale[0]),
                          output_zero_point=None if spec.scale is None else int(spec.zero_point[0]))
        if node.op in _MAC_OPS or (node.name in accs and exact_traces[node.name]["partial_peak"] is not None):
            exact = accs[node.name]
            lo, hi = int(exact.min()), int(exact.max())
            bits = config.for_node(node, graph.nodes.index(node)).accumulator_bits
            # peak and bits needed from the partial sums: the largest |running sum| of the MAC sequence
            peak = tr["partial_peak"] if tr["partial_peak"] is not None else max(abs(lo), abs(hi))
            counts, edges = _signed_log2_histogram(exact, max(bits, _signed_bits(-peak, peak)), histogram_bins)
            rec.accumulator_bits = bits
            rec.acc_peak = peak
            rec.acc_limit = 1 << (bits - 1)
            rec.acc_bits_needed_cumulative = _bits_needed(tr, peak)
            epeak = exact_traces[node.name]["partial_peak"] or 0     # the exact datapath, fed exact inputs
            rec.acc_bits_needed = _bits_needed(exact_traces[node.name], epeak)
            rec.headroom_bits = bits - rec.acc_bits_needed
            iso_out, iso_tr = _isolated_on_exact_inputs(graph, node, exact_values, config)
            rec.overflow_count_isolated = int(iso_tr["overflows"])
            rec.not_exact_isolated = _differs(iso_out, exact_values[name])
            rec.bias_clipped = tr["bias_clipped"] + int(graph.meta.get("bias_clipped", {}).get(node.name, 0))
            rec.acc_histogram = {"scale": "signed_log2", "edges": edges.tolist(), "counts": counts.tolist()}
            isolated = _isolated_output(graph, node, refs, feeds, config)
            iso_hw = spec.dequantize(isolated)
            _, rec.isolated_sqnr_db, rec.isolated_max_abs_error_lsb = _errors(iso_hw, refs[name].reshape(iso_hw.shape),
                                                                               lsb)
        records.append(rec)
    out_name = graph.outputs[0]
    network = network_metrics(graph, values[out_name], refs[out_name], y,
                              sum(tr["overflows"] for tr in traces.values()))
    network["seconds"] = time.perf_counter() - t0
    return Report(layers=records, network=network, config=config.to_dict(), model=model_repr,
                  title=title or f"fxpsim simulation on {config.name}", notes=notes)


def _differs(codes: np.ndarray, exact: np.ndarray) -> float:
    """Fraction of output codes that differ from the exact datapath's."""
    return float(np.mean(codes != exact)) if codes.size else 0.0


def _isolated_on_exact_inputs(graph: IntegerGraph, node, exact_values: dict, config):
    """The node alone on ``config`` (its own constants: a clipped bias stays clipped) fed the exact
    datapath's tensors: ``(output codes, trace)``."""
    from ..graph.ops import run_node
    index = graph.nodes.index(node)
    ins = [None if not t else (graph.tensors[t].data if graph.tensors[t].is_constant else exact_values[t])
           for t in node.inputs]
    outs, tr = run_node(graph, node, ins, config.for_node(node, index), True)
    return outs[0], tr


def _runtime_notes(graph: IntegerGraph) -> list:
    """Which runtime's arithmetic (kernel set) an imported graph reproduces on its own datapath."""
    dp = graph.meta.get("datapath")
    if not isinstance(dp, dict) or not dp.get("name"):
        return []
    name = str(dp["name"])
    note = f"runtime flavour: the graph's own datapath is {name!r}"
    if name.startswith("litert-"):
        others = [k for k in ("reference", "builtin", "xnnpack") if f"litert-{k}" != name]
        note += (f" (LiteRT's {name[7:]} kernels); the other kernel sets ({', '.join(others)}) round some ops "
                 "differently (import with kernels=... to reproduce them): see docs/tflite_kernels.md")
    return [note]


def _isolated_output(graph: IntegerGraph, node, refs: dict, feeds: dict, config) -> np.ndarray:
    """The node's output codes when fed the reference (float) values of its inputs (the error of the node
    in isolation, not of the nodes before it)."""
    from ..graph.ops import run_node_isolated
    ref_in = []
    for t in node.inputs:
        if not t or graph.tensors[t].is_constant:
            ref_in.append(None)
        elif t in refs:
            ref_in.append(refs[t])
        else:   # the codes of a quantized graph input: its float input is the reference
            src = graph.producer(t)
            ref_in.append(refs.get(src.inputs[0], feeds.get(src.inputs[0])) if src is not None else feeds.get(t))
    outs, _ = run_node_isolated(graph, node, ref_in, config.for_node(node, graph.nodes.index(node)), trace=False)
    return outs[0]


def network_metrics(graph: IntegerGraph, out_codes: np.ndarray, ref: np.ndarray, y, overflows: int) -> dict:
    """Network-level numbers of a report from the output codes and the reference outputs."""
    spec = graph.tensors[graph.outputs[0]]
    hw = out_codes.reshape(len(out_codes), -1)
    hw = spec.dequantize(hw) if not spec.is_float else hw.astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64).reshape(hw.shape)
    hw_top, ref_top = hw.argmax(axis=1), ref.argmax(axis=1)
    bit_ops = 0
    for nd in graph.nodes:
        if nd.op in _MAC_OPS or nd.op in MAC_VIEWS:
            bit_ops += graph.macs(nd) * graph.tensors[nd.inputs[1]].bits * graph.tensors[nd.inputs[0]].bits
    lsb = float(spec.scale[0]) if spec.scale is not None else 1.0
    return {"n_samples": int(hw.shape[0]),
            "accuracy": float(np.mean(hw_top == y)) if y is not None else None,
            "float_accuracy": float(np.mean(ref_top == y)) if y is not None else None,
            "agreement": float(np.mean(hw_top == ref_top)),
            "output_sqnr_db": _errors(hw, ref, lsb)[1],
            "overflow_count": int(overflows),
            "bit_ops": int(bit_ops)}

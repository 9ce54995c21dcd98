"""Design-space sweeps: one simulation per point of a grid of hardware settings, in parallel.

``sweep(model, (x, y), {"accumulator_bits": range(10, 33), "accumulator_overflow": ["saturate", "wrap"]})``
converts the model once (batch-norm folding, activation ranges), then simulates every grid point on local
processes (:class:`concurrent.futures.ProcessPoolExecutor`, spawned, so no OpenMP/fork hazards) or on any
:class:`concurrent.futures.Executor` given as ``executor=`` (e.g. ``dask.distributed.Client().get_executor()``
to run the same grid on a cluster). Each task carries the float graph, the data and a chunk of configs (all
plain picklable objects, a few hundred kB for the digits data); results come back as records.

Every record holds exactly what :func:`fxpsim.hardware.simulate` reports for the network with that config
(the same code computes both): ``accuracy``, ``float_accuracy``, ``agreement``, ``output_sqnr_db``,
``overflow_count``, ``bit_ops`` and ``layer_overflows`` (per accumulating layer, ``name=count`` joined by ``;``).
"""
from __future__ import annotations

import itertools
import json
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..graph.ir import IntegerGraph
from .simulation import ConfigError, HardwareConfig, _check_labels, _check_x, _float_trace, convert, extract, \
    load_config, network_metrics

__all__ = ["sweep", "SweepResult", "pareto_front", "DEFAULT_AXES", "METRICS"]

AUTO_POOL_SECONDS = 5.0     # processes=None: below this estimated serial time, no process pool
DEFAULT_AXES = ("weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding")
_AXIS_ALIASES = {"overflow": "accumulator_overflow", "acc_bits": "accumulator_bits", "order": "accumulator_order",
                 "requant": "requantization", "scheme": "requantization"}


METRICS = ("accuracy", "agreement", "output_sqnr_db")


def pareto_front(records: Sequence[dict], x_key: str, y_key: str, tolerance: float = 0.0) -> list[dict]:
    """Records not dominated when minimising the cost ``x_key`` and maximising ``y_key``, sorted by cost.

    Walking from the cheapest record up, a record joins the front only when it beats the best ``y`` so far
    by more than ``tolerance``: ties (and differences within the tolerance, e.g. noise above the float
    model's accuracy) go to the cheaper record. Of records with equal cost the best ``y`` is taken.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    pts = [r for r in records if r.get(x_key) is not None and r.get(y_key) is not None]
    pts.sort(key=lambda r: (r[x_key], -r[y_key]))
    front, best = [], -float("inf")
    for r in pts:
        if r[y_key] > best + tolerance:
            front.append(r)
            best = r[y_key]
    return front


@dataclass
class SweepResult:
    """Records of a sweep (one dict per grid point, in grid order) and their Pareto fronts."""

    grid: "dict | list"
    records: list
    metric: str = "accuracy"
    float_accuracy: float | None = None
    seconds: float = 0.0
    tolerance: float = 0.0
    notes: list = field(default_factory=list)
    pareto_accumulator: list = field(default_factory=list)
    pareto_bitops: list = field(default_factory=list)

    def __post_init__(self):
        self.pareto_accumulator = pareto_front(self.records, "accumulator_bits", self.metric, self.tolerance)
        self.pareto_bitops = pareto_front(self.records, "bit_ops", self.metric, self.tolerance)

    def to_dict(self) -> dict:
        """The ``sweep`` member of a report (see :mod:`fxpsim.report`)."""
        return {"grid": self.grid, "metric": self.metric, "float_accuracy": self.float_accuracy,
                "seconds": self.seconds, "tolerance": self.tolerance, "notes": list(self.notes),
                "records": self.records, "pareto_accumulator": self.pareto_accumulator,
                "pareto_bitops": self.pareto_bitops}

    def to_text(self) -> str:
        """The records as a table, the Pareto front against accumulator bits, and the notes."""
        from ..report.render import format_table
        cols = [c for c in DEFAULT_AXES + (self.metric,) if any(r.get(c) is not None for r in self.records)]
        out = [f"sweep: {len(self.records)} configurations, metric {self.metric}", self.table(), "",
               f"Pareto front ({self.metric} vs accumulator bits, ties to the cheaper within {self.tolerance}):",
               format_table([[r.get(c) for c in cols] for r in self.pareto_accumulator], cols)]
        return "\n".join(out + [f"note: {n}" for n in self.notes])

    def save(self, out_dir: str | os.PathLike) -> dict:
        """Write ``sweep.csv`` and ``sweep.json`` into ``out_dir``; returns their paths."""
        os.makedirs(out_dir, exist_ok=True)
        return {"sweep_csv": self.to_csv(os.path.join(out_dir, "sweep.csv")),
                "sweep_json": self.to_json(os.path.join(out_dir, "sweep.json")) and
                os.path.join(os.fspath(out_dir), "sweep.json")}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        from ..report.render import _json_safe
        text = json.dumps(_json_safe(self.to_dict()), indent=2, allow_nan=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def to_csv(self, path: str | os.PathLike) -> str:
        from ..report.render import write_csv
        return write_csv(self.records, path)

    def table(self) -> str:
        from ..report.render import format_table
        cols = [c for c in DEFAULT_AXES + ("accuracy", "agreement", "output_sqnr_db", "overflow_count")
                if any(r.get(c) is not None for r in self.records)]
        return format_table([[r.get(c) for c in cols] for r in self.records], cols)


def _normalise_grid(grid: Mapping[str, Any], base: HardwareConfig) -> dict:
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError("grid must be a non-empty mapping {axis: [values]}, e.g. {'accumulator_bits': [16, 32]}")
    out = {}
    fields = set(base.to_flat_dict())
    for key, values in grid.items():
        name = _AXIS_ALIASES.get(key, key)
        if "." in name:
            from .config import _FIELD_TO_TOML_REVERSE
            name = _FIELD_TO_TOML_REVERSE.get(name, name)
        if name not in fields:
            raise ConfigError(f"grid: unknown axis {key!r}; allowed: {', '.join(DEFAULT_AXES)} or any "
                              f"HardwareConfig field ({', '.join(sorted(fields))})")
        values = [values] if isinstance(values, (str, int)) else list(values)
        if not values:
            raise ValueError(f"grid: axis {key!r} has no values")
        out[name] = [v.value if hasattr(v, "value") else (int(v) if isinstance(v, np.integer) else v)
                     for v in values]
    return out


def _point_record(point: dict, config: HardwareConfig) -> dict:
    rec = {"config": config.name}
    for axis in DEFAULT_AXES:
        value = getattr(config, axis)
        rec[axis] = value.value if hasattr(value, "value") else value
    for axis, value in point.items():
        rec[axis] = value
    return rec


def _run_chunk(graph, x, y, reference, configs: list) -> list:
    """Worker: simulate each config; returns the network metrics (+ seconds) for each."""
    return [_run_point(graph, x, y, reference, config)[0] for config in configs]


def _run_point(graph, x, y, reference, config, keep: bool = False, start=None):
    """Simulate one config: ``(metrics, (tensors, traces) or None)``.  ``keep``: also return every tensor
    and trace; ``start = (j, tensors, traces)``: nodes before ``j`` are provably the same as in the run those
    tensors and traces come from, so only nodes ``j`` on run (the rest as :meth:`IntegerGraph.run` does)."""
    from ..graph.ir import node_datapath
    from ..graph.ops import run_node
    t0 = time.perf_counter()
    net = graph if isinstance(graph, IntegerGraph) else convert(graph, config)
    if start is None:
        codes, traces, kept = net.run(x, config, trace=True, keep=keep)
    else:
        j, tensors, ref_traces = start
        values = {**{k: t.data for k, t in net.tensors.items() if t.is_constant}, **tensors}
        traces = {}
        for i, node in enumerate(net.nodes):
            if i < j:
                traces[node.name] = ref_traces[node.name]
                continue
            ins = [values[t] if t else None for t in node.inputs]
            outs, traces[node.name] = run_node(net, node, ins, node_datapath(config, node, i), True)
            for t, v in zip(node.outputs, outs):
                values[t] = v
        outputs = [values[t] for t in net.outputs]
        codes, kept = (outputs[0] if len(outputs) == 1 else outputs), None
    metrics = network_metrics(net, codes, reference, y, sum(t["overflows"] for t in traces.values()))
    metrics["layer_overflows"] = ";".join(f"{name}={t['overflows']}" for name, t in traces.items()
                                          if t["acc"] is not None)
    metrics["seconds"] = time.perf_counter() - t0
    return metrics, ((kept, traces) if keep else None)


#: Fields that may differ between a point and the run it reuses (see ``sweep(skip_exact=...)``).
_ACC_FIELDS = ("name", "description", "accumulator_bits", "accumulator_overflow", "bias_bits", "tile_accumulator_bits")
#: Modules whose ops (but ``avg_pool2d`` and the TFLite-native MAC ops) never read the accumulator settings.
_ACC_FREE_MODULES = ("fxpsim.graph.ops", "fxpsim.graph.elementwise_ops", "fxpsim.graph.lut_ops",
                     "fxpsim.frontends.tflite.ops", "fxpsim.frontends.tflite.activation_ops",
                     "fxpsim.frontends.tflite.mac_ops")


def _node_needs(net, exact: dict) -> dict | None:
    """Per node that reads the accumulator settings, the width from which it is provably exact on the sweep's
    inputs: ``exact_widths`` for the core MAC nodes, the worst case of the type for the other accumulating
    ops (average pooling, importer-native MAC ops); ``None`` when some op may depend on the accumulator in a
    way no bound covers (e.g. an ONNX-native kernel that only runs on a 32-bit wrapping accumulator)."""
    from ..graph.mac_ops import MAC_OPS
    from ..graph.ops import OPS
    need = {}
    for idx, nd in enumerate(net.nodes):
        if nd.op in MAC_OPS:
            need[idx] = exact[nd.name]
            continue
        run = OPS[nd.op].run
        if run.__module__ in _ACC_FREE_MODULES and nd.op != "avg_pool2d" and run.__name__ != "_native_mac_run":
            continue
        bound = net.accumulator_bits_needed(nd) if nd.op == "avg_pool2d" or run.__name__ == "_native_mac_run" \
            else None
        if bound is None:
            return None
        need[idx] = bound
    return need


def _provably_exact(graph, x, configs: list, is_graph: bool):
    """``(reuse, prefix)``: ``reuse = {point index: (index of the point it reuses, its number of nodes)}`` for
    points equal to the
    widest accumulator of their group (same config but for :data:`_ACC_FIELDS`) at which every node that
    reads the accumulator is provably exact (and so is the widest point); ``prefix = {point index: (index of
    that point, j)}`` for the others whose first ``j > 0`` nodes are (in graph order: their inputs are then
    the exact run's too)."""
    from .width_sweep import exact_widths
    groups: dict = {}
    for i, c in enumerate(configs):
        flat = c.to_flat_dict()
        key = repr(sorted((k, repr(v)) for k, v in flat.items() if k not in _ACC_FIELDS))
        groups.setdefault(key, []).append(i)
    reuse, prefix = {}, {}
    for members in groups.values():
        if len(members) < 2:
            continue
        ref = max(members, key=lambda i: (configs[i].accumulator_bits, -i))
        rc = configs[ref]
        try:
            net = graph if is_graph else convert(graph, rc)
            need = _node_needs(net, exact_widths(net, x, rc))
        except Exception:               # the point itself fails: its own run reports why, nothing reused
            continue
        if need is None:
            continue
        clipped = any(int(v) for v in net.meta.get("bias_clipped", {}).values())

        def first_inexact(c, ref_self=False):
            """Index of the first node (graph order) not provably exact on ``c``; len(nodes) if none."""
            for idx in sorted(need):
                bits, nd = need[idx], net.nodes[idx]
                nc, nr = c.for_node(nd, idx), rc.for_node(nd, idx)
                if nc.tile_k or nc.zero_point != "subtract" or nc.accumulator_bits < bits:
                    return idx          # tiles / a folded bias: not what the bounds cover; or too narrow
                if not ref_self and nc.bias_bits != nr.bias_bits and (clipped or nc.bias_bits < bits):
                    return idx          # a bias register that could hold the bias differently
            return len(net.nodes)

        if first_inexact(rc, True) < len(net.nodes):
            continue
        for i in members:
            if i == ref:
                continue
            j = first_inexact(configs[i])
            if j == len(net.nodes):
                reuse[i] = (ref, j)
            elif j > 0:
                prefix[i] = (ref, j)
    return reuse, prefix


def _fail(message: str):
    raise ValueError(message)


def sweep(model, data, grid: "Mapping[str, Sequence] | Sequence[Mapping[str, Sequence]]", *,
          config="tflite-int8", calibration_x=None, executor: Executor | None = None, processes: int | None = None,
          progress: bool = True, chunks_per_worker: int = 3, metric: str | None = None,
          tolerance: float = 0.0, skip_exact: bool = True) -> SweepResult:
    """Simulate ``model`` on every point of ``grid`` (the Cartesian product of its axes).

    Parameters
    ----------
    model : fxpsim.nn.Sequential or IntegerGraph
        A model is converted for each point; a graph (imported or built by hand) keeps its widths and
        scales, so only the datapath axes (accumulator, overflow, order, bias add, requantization,
        rounding) may be swept on it.
    data : (x, y) or x
        Evaluation inputs and optional labels.
    grid : mapping axis -> values, or a list of such mappings
        The points are the Cartesian product of the axes (the union of the products for a list). Axes
        are :class:`~fxpsim.hardware.HardwareConfig` fields (``weight_bits``, ``activation_bits``,
        ``accumulator_bits``, ``accumulator_overflow``, ``rounding``, ... or dotted TOML names); every
        other setting comes from ``config`` (a new ``accumulator_bits`` also sets
        ``bias_bits = min(bias_bits, accumulator_bits)``, see :meth:`HardwareConfig.replace`).
    config : base configuration (preset name, path, mapping or HardwareConfig)
    calibration_x : inputs that calibrate activation ranges (default: ``x``)
    executor : concurrent.futures.Executor, optional
        Runs the tasks (not shut down here). Default: a ProcessPoolExecutor (spawned workers) with
        ``processes`` workers; ``processes=1`` runs in this process; ``processes=None`` uses every core,
        unless the first point, simulated here, shows the whole sweep takes under ``AUTO_POOL_SECONDS``
        serially (then starting workers would cost more than it saves).
    progress : bool
        tqdm progress bar over grid points.
    metric : {"accuracy", "agreement", "output_sqnr_db"}, optional
        What the Pareto fronts maximise (default: accuracy with labels, agreement without).
    tolerance : float
        Differences in ``metric`` up to this much count as ties, which go to the cheaper point.
    skip_exact : bool
        Points that differ only in their accumulator (``accumulator_bits``, ``accumulator_overflow``, the bias
        register narrowed with it) from the widest such point are not simulated when
        :func:`~fxpsim.hardware.width_sweep.exact_widths` proves every MAC node exact at their width on
        these inputs (every partial sum and bias fits, so no add overflows and the network equals the widest
        point's, which then is exact too): their records are the widest point's, with ``seconds`` 0 and
        ``reused_from`` naming it (empty for simulated points), and a note says how many.  ``False``
        simulates every point.  Points run in this process (``processes=1``, or a small sweep) also start
        from the first node that is not provably exact at their width: the nodes before it (all provably
        exact, so fed the exact tensors) take the widest point's tensors and traces (``reused_nodes`` counts
        them; 0 for a point simulated from the start, every node for a reused one).

    Sweeping ``accumulator_bits`` narrows the bias register with it (``bias_bits = min(bias_bits,
    accumulator_bits)``): a bias that no longer fits saturates, and the result's notes say so.

    Returns
    -------
    SweepResult
    """
    t0 = time.perf_counter()
    base = load_config(config)
    if metric is None:
        metric = "accuracy" if (isinstance(data, (tuple, list)) and len(data) == 2 and data[1] is not None) \
            else "agreement"
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError("data must be x or a pair (x, y)")
        x, y = data
    else:
        x, y = data, None
    is_graph = isinstance(model, IntegerGraph)
    if is_graph:
        x = model._feeds(x)[model.inputs[0]] if len(model.inputs) == 1 else \
            _fail("sweep: graphs with several inputs are not supported yet")
    else:
        x = _check_x(x, "x")
    y = _check_labels(y, x.shape[0])
    grids = [_normalise_grid(g, base) for g in (grid if isinstance(grid, (list, tuple)) else [grid])]
    if not grids:
        raise ValueError("grid must be a mapping {axis: [values]} or a non-empty list of them")
    points = [dict(zip(axes, combo)) for axes in grids for combo in itertools.product(*axes.values())]
    configs = []
    for p in points:
        try:
            configs.append(base.replace(**p))
        except ConfigError as exc:
            raise ConfigError(f"grid point {p}: {exc}") from None
    if is_graph:
        fixed = {"weight_bits", "activation_bits", "weight_format", "activation_format", "weight_signed",
                 "activation_signed", "weight_scales", "weight_narrow_range", "activation_symmetric", "bias_bits"}
        bad = sorted({k for g in grids for k in g} & fixed)
        if bad:
            raise ConfigError(f"grid: {', '.join(bad)} cannot be swept on an integer graph (its widths and scales "
                              "are fixed); sweep an fxpsim.nn model to vary them")
        graph = model
        reference = np.asarray(model.run_float(x), dtype=np.float64).reshape(len(x), -1)
    else:
        graph = extract(model, x if calibration_x is None else calibration_x)
        reference = _float_trace(graph.folded, [graph.stages[-1].model_layers[-1]], x)[0]
    float_acc = float(np.mean(reference.argmax(axis=1) == y)) if y is not None else None
    if processes is not None and (not isinstance(processes, int) or processes < 1):
        raise ValueError(f"processes must be a positive int, got {processes!r}")
    workers = processes or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    reuse, prefix = _provably_exact(graph, x, configs, is_graph) if skip_exact else ({}, {})
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(configs), desc="sweep", unit="config")
    results: list = [None] * len(configs)
    pending = [i for i in range(len(configs)) if i not in reuse]
    refs = {ref for ref, _ in prefix.values()}      # in-process runs keep these points' tensors
    kept: dict = {}
    started: dict = {}                              # point -> (point, j): nodes before j taken from that run
    if bar is not None and reuse:
        bar.update(len(reuse))
    try:
        if executor is None and processes is None:
            # auto: time one point here; small sweeps stay in this process (a worker costs ~1 s to start)
            first = next((i for i in pending if i in refs), pending[0])    # a point others start from
            pending.remove(first)
            results[first], kept[first] = _run_point(graph, x, y, reference, configs[first], keep=first in refs)
            if bar is not None:
                bar.update(1)
            if workers == 1 or results[first]["seconds"] * len(pending) < AUTO_POOL_SECONDS:
                workers = 1
        if executor is None and (workers == 1 or len(pending) <= 1):
            # in this process: the points others start from first, keeping their tensors and traces
            for i in sorted(pending, key=lambda i: i not in refs):
                start = None
                if i in prefix and kept.get(prefix[i][0]) is not None:
                    start = (prefix[i][1],) + kept[prefix[i][0]]
                    started[i] = prefix[i]
                results[i], kept[i] = _run_point(graph, x, y, reference, configs[i], keep=i in refs, start=start)
                if bar is not None:
                    bar.update(1)
            kept.clear()
        elif pending:
            own = executor is None
            if own:
                import multiprocessing
                executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
            try:
                n_chunks = max(1, min(len(pending), workers * chunks_per_worker))
                chunks = [pending[i::n_chunks] for i in range(n_chunks)]
                futures = {executor.submit(_run_chunk, graph, x, y, reference, [configs[i] for i in idx]): idx
                           for idx in chunks if idx}
                for fut in as_completed(futures):
                    for i, res in zip(futures[fut], fut.result()):
                        results[i] = res
                    if bar is not None:
                        bar.update(len(futures[fut]))
            finally:
                if own:
                    executor.shutdown()
    finally:
        if bar is not None:
            bar.close()
    for i, (ref, _) in reuse.items():
        results[i] = dict(results[ref], seconds=0.0)
    records = [{**_point_record(p, c), **r} for p, c, r in zip(points, configs, results)]
    if skip_exact:
        taken = {**reuse, **started}
        for i, rec in enumerate(records):
            rec["reused_from"] = configs[taken[i][0]].name if i in taken else ""
            rec["reused_nodes"] = taken[i][1] if i in taken else 0
    notes = []
    if reuse:
        names = sorted({configs[r].name for r, _ in reuse.values()})
        notes.append(f"{len(reuse)} of {len(configs)} points not simulated: every node that reads the accumulator "
                     f"is provably exact at their width on these inputs (exact_widths: all partial sums and biases "
                     f"fit), so their records are those of {', '.join(map(repr, names))} (column reused_from)")
    if started:
        notes.append(f"{len(started)} points ran from the first node not provably exact on: the nodes before it "
                     "(column reused_nodes) take the exact run's tensors")
    if any("accumulator_bits" in g for g in grids):
        narrowed = sorted({c.bias_bits for c in configs if c.bias_bits < base.bias_bits})
        if narrowed:
            notes.append(f"the bias register narrows with the accumulator (bias_bits = min(bias_bits, "
                         f"accumulator_bits)): {base.bias_bits} -> {', '.join(map(str, narrowed))} bits at the "
                         "narrow points; biases that do not fit saturate")
    if is_graph:
        notes.append("an integer graph keeps its own widths: the weight/activation bits columns are the config's "
                     "labels, not the graph's")
    return SweepResult(grid=grids[0] if len(grids) == 1 else grids, records=records, metric=metric,
                       float_accuracy=float_acc, seconds=time.perf_counter() - t0, tolerance=tolerance, notes=notes)

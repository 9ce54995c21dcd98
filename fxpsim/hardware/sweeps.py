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
from .sweep_metrics import MAXIMISED_METRICS, exactness, metric_problem, recommend
from .sweep_reuse import provably_exact

__all__ = ["sweep", "SweepResult", "pareto_front", "DEFAULT_AXES", "METRICS"]

AUTO_POOL_SECONDS = 5.0     # processes=None: below this estimated serial time, no process pool
DEFAULT_AXES = ("weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding")
_AXIS_ALIASES = {"overflow": "accumulator_overflow", "acc_bits": "accumulator_bits", "order": "accumulator_order",
                 "requant": "requantization", "scheme": "requantization"}


METRICS = MAXIMISED_METRICS


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
    recommendation: dict = field(default_factory=dict)

    def __post_init__(self):
        self.pareto_accumulator = pareto_front(self.records, "accumulator_bits", self.metric, self.tolerance)
        self.pareto_bitops = pareto_front(self.records, "bit_ops", self.metric, self.tolerance)

    def to_dict(self) -> dict:
        """The ``sweep`` member of a report (see :mod:`fxpsim.report`)."""
        return {"grid": self.grid, "metric": self.metric, "float_accuracy": self.float_accuracy,
                "seconds": self.seconds, "tolerance": self.tolerance, "notes": list(self.notes),
                "records": self.records, "pareto_accumulator": self.pareto_accumulator,
                "pareto_bitops": self.pareto_bitops, "recommendation": self.recommendation}

    def to_text(self) -> str:
        """The records as a table, the Pareto front against accumulator bits, and the notes."""
        from ..report.render import format_table
        cols = [c for c in DEFAULT_AXES + (self.metric,) if any(r.get(c) is not None for r in self.records)]
        rec = self.recommendation or {}
        head = (f"recommendation ({rec.get('metric')}): accumulator_bits = {rec['accumulator_bits']} ({rec['reason']})"
                if rec.get("accumulator_bits") is not None else f"recommendation: none ({rec.get('reason', '')})")
        out = [head, f"sweep: {len(self.records)} configurations, metric {self.metric}", self.table(), "",
               f"Pareto front ({self.metric} vs accumulator bits, ties to the cheaper within {self.tolerance}):",
               format_table([[r.get(c) for c in cols] for r in self.pareto_accumulator], cols)]
        from ..report.render import SWEEP_COLUMN_DEFINITIONS
        defs = [f"  {k}: {d}" for k, d in SWEEP_COLUMN_DEFINITIONS if any(k in r for r in self.records)]
        return "\n".join(out + [f"note: {n}" for n in self.notes] + (["columns:"] + defs if defs else []))

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
        cols = [c for c in DEFAULT_AXES + ("exact_fraction", "max_lsb_error", "accuracy", "agreement",
                                           "output_sqnr_db", "overflow_count", "bias_clipped")
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


def _run_chunk(graph, x, y, reference, configs: list, exact=None) -> list:
    """Worker: simulate each config; returns the network metrics (+ seconds) for each."""
    exact = exact or [None] * len(configs)
    return [_run_point(graph, x, y, reference, config, exact=e)[0] for config, e in zip(configs, exact)]


def _exact_outputs(graph, x, y, reference, configs: list) -> tuple:
    """Per config, the output codes of its exact datapath and that run's network metrics (one run per
    distinct exact datapath)."""
    cache, codes, metrics = {}, [], []
    for c in configs:
        ec = c.exact_datapath()
        key = repr(sorted((k, repr(v)) for k, v in ec.to_flat_dict().items() if k != "name"))
        if key not in cache:
            net = graph if isinstance(graph, IntegerGraph) else convert(graph, ec)
            out = net.run(x, ec)
            m = network_metrics(net, out[0] if isinstance(out, list) else out, reference, y, 0)
            cache[key] = (out, dict(m, exact_fraction=1.0))
        codes.append(cache[key][0])
        metrics.append(cache[key][1])
    return codes, metrics


def _run_point(graph, x, y, reference, config, keep: bool = False, start=None, exact=None):
    """Simulate one config: ``(metrics, (tensors, traces) or None)``.  ``keep``: also return every tensor
    and trace; ``start = (flags, tensors, traces)``: the run of the widest point of the config's group
    (:func:`~fxpsim.hardware.sweep_reuse.provably_exact`), whose tensors are the exact datapath's.  A node
    whose inputs all equal that run's (compared bit for bit as the run goes: a node may overflow and still
    give the exact codes) and which is provably exact here (``flags``) takes that run's outputs and trace
    instead of running; every other node runs as :meth:`IntegerGraph.run` runs it, node by node (no plan:
    a plan compiled for one point would serve no other).  ``metrics["reused_nodes"]`` counts the nodes
    taken."""
    from ..graph.ir import node_datapath
    from ..graph.ops import run_node
    t0 = time.perf_counter()
    net = graph if isinstance(graph, IntegerGraph) else convert(graph, config)
    reused = 0
    if start is None:
        codes, traces, kept = net.run(x, config, trace=True, keep=keep)
    else:
        flags, tensors, ref_traces = start
        constants = {k: t.data for k, t in net.tensors.items() if t.is_constant}
        values = {**constants, **{t: tensors[t] for t in net.inputs}}
        same = set(constants) | set(net.inputs)     # tensors equal to the reference run's
        traces = {}
        for i, node in enumerate(net.nodes):
            fed = all(not t or t in same for t in node.inputs)
            if fed and flags[i]:
                traces[node.name] = ref_traces[node.name]
                for t in node.outputs:
                    values[t] = tensors[t]
                    same.add(t)
                reused += 1
                continue
            ins = [values[t] if t else None for t in node.inputs]
            outs, traces[node.name] = run_node(net, node, ins, node_datapath(config, node, i), True)
            for t, v in zip(node.outputs, outs):
                values[t] = v
                ref = tensors.get(t)
                if ref is not None and v.shape == ref.shape and v.dtype == ref.dtype and np.array_equal(v, ref):
                    same.add(t)
        outputs = [values[t] for t in net.outputs]
        codes = outputs[0] if len(outputs) == 1 else outputs
        kept = {k: v for k, v in values.items() if k not in constants} if keep else None
    metrics = network_metrics(net, codes[0] if isinstance(codes, list) else codes, reference, y,
                              sum(t["overflows"] for t in traces.values()))
    if exact is not None:
        metrics.update(exactness(codes, exact))
    metrics["bias_clipped"] = sum(int(v) for v in net.meta.get("bias_clipped", {}).values()) + \
        sum(int((t or {}).get("bias_clipped", 0)) for t in traces.values())
    metrics["layer_overflows"] = ";".join(f"{name}={t['overflows']}" for name, t in traces.items()
                                          if t["acc"] is not None)
    metrics["reused_nodes"] = reused
    metrics["seconds"] = time.perf_counter() - t0
    return metrics, ((kept, traces) if keep else None)


def _fail(message: str):
    raise ValueError(message)


def sweep(model, data, grid: "Mapping[str, Sequence] | Sequence[Mapping[str, Sequence]]", *,
          config="tflite-int8", calibration_x=None, executor: Executor | None = None, processes: int | None = None,
          progress: bool = True, chunks_per_worker: int = 3, metric: str | None = None,
          tolerance: float | None = None, skip_exact: bool = True) -> SweepResult:
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
        Differences in ``metric`` up to this much count as ties, which go to the cheaper point (default 0; for
        a float datapath the tolerance of its conclusion, default
        :data:`fxpsim.hardware.float_sweep.DEFAULT_TOLERANCE`).
    skip_exact : bool
        Points that differ only in their accumulator (``accumulator_bits``, ``accumulator_overflow``, the bias
        register narrowed with it) from the widest such point are not simulated when
        :func:`~fxpsim.hardware.width_sweep.exact_widths` proves every MAC node exact at their width on
        these inputs (every partial sum and bias fits, so no add overflows and the network equals the widest
        point's, which then is exact too): their records are the widest point's, with ``seconds`` 0 and
        ``reused_from`` naming it (empty for simulated points), and a note says how many.  ``False``
        simulates every point.  Points run in this process (``processes=1``, or a small sweep) are also
        simulated only where they can differ: a node whose inputs equal the widest point's tensors (the
        exact ones; compared bit for bit during the run, so a node that overflows without changing its
        codes leaves the next nodes on the exact tensors) and which is provably exact at their width takes
        the widest point's outputs and trace; the others run (``reused_nodes`` counts the nodes taken; 0 for
        a point simulated throughout, every node for a reused one; ``reused_from`` names the point taken
        from whenever it is not 0).

    Sweeping ``accumulator_bits`` narrows the bias register with it (``bias_bits = min(bias_bits,
    accumulator_bits)``): a bias that no longer fits saturates, and the result's notes say so.

    A float datapath ``config`` (or a :class:`~fxpsim.graph.extract.FloatGraph` ``model``) runs
    :func:`fxpsim.hardware.float_sweep.sweep_float` in this process: its axes are ``accumulator.fraction_bits``,
    ``promote_every``, ``chunk``, ``preset`` and the operand formats, and ``executor`` / ``processes`` > 1
    are refused.

    Returns
    -------
    SweepResult, or FloatSweepResult for a float datapath
    """
    t0 = time.perf_counter()
    base = load_config(config)
    from ..graph.extract import FloatGraph
    from .float_config import is_float_datapath
    if is_float_datapath(base) or isinstance(model, FloatGraph):
        from .float_sweep import sweep_float
        if executor is not None or processes not in (None, 1):
            raise ValueError("a float-datapath sweep runs in this process: leave executor and processes out")
        return sweep_float(model, data, grid, config=base, calibration_x=calibration_x, metric=metric,
                           tolerance=tolerance, progress=progress)
    tolerance = 0.0 if tolerance is None else tolerance
    if metric is None:
        metric = "accuracy" if (isinstance(data, tuple) or (isinstance(data, list) and not (
            isinstance(model, IntegerGraph) and len(model.inputs) > 1))) and len(data) == 2 and data[1] is not None \
            else "exact_fraction"
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    is_graph = isinstance(model, IntegerGraph)
    several = is_graph and len(model.inputs) > 1
    if isinstance(data, (tuple, list)) and not (several and isinstance(data, list)):
        if len(data) != 2:
            raise ValueError("data must be x or a pair (x, y) (for a graph with several inputs: a list of arrays, "
                             "one per input, or a tuple (that list, y))")
        x, y = data
    else:
        x, y = data, None
    if is_graph:
        x = list(model._feeds(x).values())     # one array per graph input
        n = len(x[0])
    else:
        x = _check_x(x, "x")
        n = x.shape[0]
    y = _check_labels(y, n)
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
        ref_out = model.run_float(x)
        ref_out = ref_out[0] if isinstance(ref_out, list) else ref_out
        reference = np.asarray(ref_out, dtype=np.float64).reshape(n, -1)
    else:
        graph = extract(model, x if calibration_x is None else calibration_x)
        reference = _float_trace(graph.folded, [graph.stages[-1].model_layers[-1]], x)[0]
    float_acc = float(np.mean(reference.argmax(axis=1) == y)) if y is not None else None
    if processes is not None and (not isinstance(processes, int) or processes < 1):
        raise ValueError(f"processes must be a positive int, got {processes!r}")
    workers = processes or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    reuse, partial = provably_exact(graph, x, configs, is_graph) if skip_exact else ({}, {})
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(configs), desc="sweep", unit="config")
    results: list = [None] * len(configs)
    pending = [i for i in range(len(configs)) if i not in reuse]
    refs = {ref for ref, _ in partial.values()}     # in-process runs keep these points' tensors
    kept: dict = {}
    started: dict = {}                              # point -> (point, n): n nodes taken from that run
    exact_outs, exact_metrics = _exact_outputs(graph, x, y, reference, configs)
    if bar is not None and reuse:
        bar.update(len(reuse))
    try:
        if executor is None and processes is None:
            # auto: time one point here; small sweeps stay in this process (a worker costs ~1 s to start)
            first = next((i for i in pending if i in refs), pending[0])    # a point others start from
            pending.remove(first)
            results[first], kept[first] = _run_point(graph, x, y, reference, configs[first], keep=first in refs,
                                                     exact=exact_outs[first])
            if bar is not None:
                bar.update(1)
            if workers == 1 or results[first]["seconds"] * len(pending) < AUTO_POOL_SECONDS:
                workers = 1
        if executor is None and (workers == 1 or len(pending) <= 1):
            # in this process: the points others start from first, keeping their tensors and traces
            for i in sorted(pending, key=lambda i: i not in refs):
                start = None
                if i in partial and kept.get(partial[i][0]) is not None:
                    start = (partial[i][1],) + kept[partial[i][0]]
                results[i], kept[i] = _run_point(graph, x, y, reference, configs[i], keep=i in refs, start=start,
                                                 exact=exact_outs[i])
                if results[i]["reused_nodes"]:
                    started[i] = (partial[i][0], results[i]["reused_nodes"])
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
                futures = {executor.submit(_run_chunk, graph, x, y, reference, [configs[i] for i in idx],
                                           [exact_outs[i] for i in idx]): idx
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
    for r in results:
        if r is not None:
            r.pop("reused_nodes", None)
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
        notes.append(f"{len(started)} points were simulated in part: their nodes fed the exact run's tensors and "
                     "provably exact at their width (column reused_nodes counts them) took the exact run's outputs "
                     "and traces instead of running; every other node ran")
    if any("accumulator_bits" in g for g in grids):
        widths = sorted({c.bias_bits for c in configs} - {base.bias_bits})
        if widths:
            notes.append(f"the bias register follows the accumulator it is as wide as (a narrower one, pinned, "
                         f"keeps its width where it fits): {base.bias_bits} -> {', '.join(map(str, widths))} bits "
                         "at the swept points; biases that do not fit saturate (column bias_clipped)")
    notes.append("every point is compared with the exact datapath of its configuration (an accumulator that "
                 "never overflows, the full bias, the full 31-bit multiplier, no tiles, no lookup tables): "
                 "exact_fraction, max_lsb_error, mean_lsb_error over every output code")
    if is_graph:
        notes.append("an integer graph keeps its own widths: the weight/activation bits columns are the config's "
                     "labels, not the graph's")
    out_values = int(np.prod(graph.tensors[graph.outputs[0]].shape)) if is_graph else reference.shape[1]
    problem = metric_problem(metric, out_values, reference.argmax(axis=1))
    result = SweepResult(grid=grids[0] if len(grids) == 1 else grids, records=records, metric=metric,
                         float_accuracy=float_acc, seconds=time.perf_counter() - t0, tolerance=tolerance, notes=notes)
    result.recommendation = recommend(records, metric, [m.get(metric) for m in exact_metrics], tolerance, problem)
    if problem:
        notes.append(problem)
    return result

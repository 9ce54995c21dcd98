"""Accumulator-width sweeps of every MAC node at about the cost of one inference.

:func:`node_sweep` answers, for every MAC node of an integer graph and every accumulator width and overflow
mode: how many adds overflow, what fraction of the node's outputs differ from the exact datapath's, and by
how many output LSBs -- each node fed the exact datapath's tensors (``graph.run(x, exact_datapath_of(datapath),
keep=True)``), every other knob of ``datapath`` unchanged.  The numbers are those of running the node on
``dataclasses.replace(datapath, accumulator_bits=W, accumulator_overflow=mode)`` width by width, without the
redundant work:

* once per node: the exact accumulators :math:`E` (BLAS), and a bound on every partial sum, the second GEMM
  :math:`U = |x - z_x|\\,|w - z_w|` (so :math:`|s| \\le |b| + U` for every running sum and adder-tree node);
  a depthwise node (a few adds per output) has the exact peak of its running sums instead (sequential order);
* an output whose bound fits ``W`` bits cannot overflow: its accumulator is :math:`E - b + b_W` (``b_W`` the
  bias saturated into ``W`` bits, as the datapath stores it);
* the others go through the per-add kernels (AVX2 or AVX-512BW 16/32-bit lanes, the rows of the node that need it,
  named by a row index: nothing is copied), and an output without an overflow event at ``W`` -- all its exact
  partial sums within range -- has none at any wider width (the exact partial sums do not depend on ``W``,
  and neither does a saturated bias get further from them), so it leaves the per-add work for good; wrapping,
  saturation and ``saturate_zero`` overflow on exactly the same outputs (the first event is the first
  partial sum out of range), so each mode learns it on its own at no extra cost, and the modes of a node run
  as separate tasks on a small thread pool (``workers``) while the exact inference goes on (the
  kernels release the GIL and run on one thread each, so the numbers never depend on the threads);
* ``overflow_at="end"``: the exact accumulators fitted once (no per-add work at all);
* requantization (the node's own :func:`~fxpsim.graph.mac_ops.requantizer_for`) only for accumulators that
  differ from the exact ones, through a per-channel table of every ``W``-bit accumulator's output code while
  that table is no larger than the node's outputs.

:func:`exact_widths` is the cheap part alone: per MAC node, the width from which the node is provably exact
on the given inputs (every partial sum and the bias fit), so that a full-network sweep can skip every wider
point of that node (and every point at which all nodes are exact: the network then equals the exact one).
:func:`fxpsim.hardware.sweep` does both (``skip_exact``): it reuses the widest run at the points where every
node is provably exact, and at the other points runs only the nodes that are not fed the exact run's tensors
(compared bit for bit as the point's run goes) or not provably exact at the point's width.

Knobs the fast path does not model (``zero_point="fold"``, K-tiling, an accumulator LSB coarser than the
products', a datapath that differs from its exact one beyond the accumulator -- a short multiplier --, modes
other than saturate / wrap / saturate_zero) make that node fall back to running it with
:func:`fxpsim.graph.ops.run_node` at every point -- the same numbers, at the cost of one node run per point.

This module schedules the nodes (the exact inference, the thread pool, the fallback) and holds the public
API; one node's layout and its fast sweep live in :mod:`fxpsim.hardware.width_sweep_node`.
"""
from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..datapath.accumulate import matmul as _matmul
from ..datapath.partial_sums import mac_rows
from ..graph.ir import node_datapath
from ..graph.ops import _overflow_name, _pads, _padding, _pair, _spec, run_node
from ..graph.mac_ops import MAC_OPS      # (after graph.ops, which imports it)
from .exact import exact_datapath_of, same_but_accumulator
from .width_sweep_node import (_FAST_MODES, SWEEP_THREAD_WORK, _depthwise_sums, _fit_np,  # noqa: F401
                               _Node, _node_knobs, _signed_bits, _sweep_node)

__all__ = ["node_sweep", "exact_widths", "NodeSweepResult"]



@dataclass
class NodeSweepResult:
    """What :func:`node_sweep` found.

    Attributes
    ----------
    records : list of dict
        One per (MAC node, width, overflow mode): ``node``, ``op``, ``width``, ``overflow``,
        ``overflow_count`` (adds that overflowed, the bias add after the sum included),
        ``not_exact_fraction`` (outputs whose code differs from the exact datapath's),
        ``max_abs_error_lsb`` and ``mean_abs_error_lsb`` (output LSBs, over all the node's outputs),
        ``outputs``, ``adds`` (per-add steps of the node on this batch), ``method`` (``"fast"`` or
        ``"run_node"``: the fallback).
    exact_from : dict
        MAC node name -> the smallest swept width from which the node was exact at every swept width
        (None: not exact at the widest).
    bound_bits : dict
        MAC node name -> the width from which :math:`|b| + U` (a depthwise node in sequential order: the
        exact peak of its running sums) proves the node exact on these inputs.
    seconds : float
        Wall time of the whole sweep, the exact inference it runs included.
    """

    records: list = field(default_factory=list)
    exact_from: dict = field(default_factory=dict)
    bound_bits: dict = field(default_factory=dict)
    seconds: float = 0.0

    def table(self) -> str:
        from ..report.render import format_table
        rows = [[r["node"], r["width"], r["overflow"], r["overflow_count"], f"{r['not_exact_fraction']:.4f}",
                 r["max_abs_error_lsb"], f"{r['mean_abs_error_lsb']:.4f}"] for r in self.records]
        return format_table(rows, ["node", "W", "overflow", "overflows", "not exact", "max |err| LSB",
                                   "mean |err| LSB"])

    def record(self, node: str, width: int, overflow: str) -> dict:
        for r in self.records:
            if r["node"] == node and r["width"] == width and r["overflow"] == overflow:
                return r
        raise KeyError((node, width, overflow))


# ----------------------------------------------------------------------------------------- the sweep
def _mac_nodes(graph):
    return [(i, nd) for i, nd in enumerate(graph.nodes) if nd.op in MAC_OPS]


def _is_swept(node) -> bool:
    """A node the per-node sweep covers: a core MAC op (fast path), or an importer's MAC op with a view
    (:mod:`fxpsim.graph.mac_view`: LiteRT's kernel-set ops, ONNX QLinearConv ...), run per width by run_node."""
    from ..graph.mac_view import MAC_VIEWS
    from ..graph.registry import find_op
    find_op(node.op)
    return node.op in MAC_OPS or node.op in MAC_VIEWS


def _replace(dp, **changes):
    """``dp`` with other accumulator settings (a HardwareConfig through its own ``replace``, which narrows
    its bias register with the accumulator as the config requires)."""
    if hasattr(dp, "replace") and hasattr(dp, "to_flat_dict"):
        return dp.replace(**changes)
    return dataclasses.replace(dp, **changes)


def _fallback(graph, node, ins, dp, widths, modes, ref_out):
    """Every point by running the node (knobs the fast path does not model)."""
    recs = []
    ref = np.asarray(ref_out).astype(np.int64)
    for width in widths:
        for mode in modes:
            outs, tr = run_node(graph, node, ins, _replace(dp, accumulator_bits=width, accumulator_overflow=mode),
                                True)
            diff = np.abs(outs[0].astype(np.int64) - ref)
            recs.append(dict(overflow_count=int(tr["overflows"]), not_exact=int(np.count_nonzero(diff)),
                             max_err=int(diff.max(initial=0)), sum_err=int(diff.sum()), width=width, overflow=mode))
    return recs


def node_sweep(graph, x, widths=range(8, 33), overflows=("saturate", "wrap"), datapath=None, *,
               nodes=None, workers: int | None = None) -> NodeSweepResult:
    """Per MAC node, every accumulator width and overflow mode, without running the node at every point.

    Parameters
    ----------
    graph : IntegerGraph
    x : ndarray or list of ndarrays
        A batch of graph inputs (as :meth:`IntegerGraph.run` takes them).
    widths : iterable of int
        Accumulator widths (signed bits, 2..64; ``tflite-*`` requantization needs <= 32).
    overflows : iterable of str
        Overflow modes (``saturate``, ``wrap``, ``saturate_zero`` on the fast path; any other mode runs
        the node at every point).
    datapath : Datapath or HardwareConfig, optional
        The datapath whose accumulator is swept (order, bias add, overflow at add/end, requantization,
        multiplier, per-node overrides); default the graph's :attr:`~fxpsim.graph.IntegerGraph.default_datapath`.
        One meaning, whatever its width: the reference is **its exact datapath**
        (:func:`fxpsim.hardware.exact.exact_datapath_of`: an accumulator that never overflows, the full
        bias, the full multiplier, no tiles), every node is fed the tensors
        ``graph.run(x, exact_datapath_of(datapath), keep=True)`` gives, and the point ``(W, mode)`` is
        the node on ``datapath`` with ``accumulator_bits=W, accumulator_overflow=mode`` (its bias register
        following the accumulator as :meth:`HardwareConfig.replace` says).  A narrow NPU config is
        therefore never its own reference: a short multiplier keeps every width "not exact" and
        ``exact_from`` None.  (A graph converted from an ``fxpsim.nn`` model holds the biases conversion
        stored; :func:`fxpsim.hardware.sweep` of the model re-converts them per point.)
    nodes : iterable of str, optional
        Only these MAC nodes (default all).
    workers : int, optional
        Threads sweeping nodes (one task per node and overflow mode) while this thread runs the exact
        inference; default :data:`SWEEP_WORKERS` (1: no pool).  More help where cores are idle; the numbers
        never change, the memory grows (up to ``SWEEP_INFLIGHT`` nodes' data alive at once).

    Returns
    -------
    NodeSweepResult
        One record per (node, width, mode); the numbers equal running the node on the point's datapath
        (above) fed the exact datapath's inputs, compared with the node's output on the exact datapath.
    """
    t0 = time.perf_counter()
    datapath = graph.default_datapath if datapath is None else datapath
    widths = sorted({int(w) for w in widths})
    modes = [_overflow_name(m) for m in overflows]
    if not widths or min(widths) < 2 or max(widths) > 64:
        raise ValueError(f"widths must be accumulator widths in 2..64, got {widths}")
    if not modes:
        raise ValueError("overflows must name at least one overflow mode")
    if nodes is not None:
        nodes = [nodes] if isinstance(nodes, str) else list(nodes)
        macs = [nd.name for nd in graph.nodes if _is_swept(nd)]
        unknown = [n for n in nodes if n not in macs]
        if unknown or not nodes:
            raise ValueError(f"nodes: {unknown or 'an empty list'} name no MAC node of the graph (its MAC nodes: "
                             f"{', '.join(macs[:12])}{' ...' if len(macs) > 12 else ''})")
    with _one_blas_thread():
        res = _node_sweep(graph, x, widths, modes, datapath, nodes, _workers(workers))
    res.seconds = time.perf_counter() - t0
    return res


def _one_blas_thread():
    """BLAS on one thread while the sweep runs: its products are small and many, and the BLAS pool
    spinning between them takes the core the per-add kernels need (measured: MobileNetV2 on 2 cores,
    0.86 s with the pool, 0.35 s without)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                         # pragma: no cover - a scikit-learn dependency
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _workers(workers) -> int:
    """Threads that sweep nodes while the exact inference goes on (the per-add kernels release the GIL;
    each call then runs on one thread, so the thread count never changes a number)."""
    workers = SWEEP_WORKERS if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):          # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(workers, cores))


#: Default ``workers`` of :func:`node_sweep`: 1, the sweep in the calling thread.  More threads overlap the
#: modes of a node and the next node's inference; on the 2-core shared machine of this round's measurements
#: that was no faster (MobileNetV2: 284 ms on one thread, 311 ms on two) and held more memory (61 vs 35 MiB).
SWEEP_WORKERS = 1
#: Nodes whose sweeps may be under way while the inference goes on (each holds its operands and exact sums).
SWEEP_INFLIGHT = 2


def _node_sweep(graph, x, widths, modes, datapath, nodes, workers) -> NodeSweepResult:
    want = None if nodes is None else set(nodes)
    res = NodeSweepResult()
    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    pending, inflight = [], []
    try:
        # the exact inference, node by node: a swept MAC node's output comes from the exact accumulators the
        # sweep needs anyway (when its own datapath provably cannot overflow), every other node runs as usual;
        # the sweep of each MAC node (one task per overflow mode: the modes share nothing but the read-only
        # exact data) runs on the pool meanwhile
        values = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
        values.update(graph._feeds(x))
        exact = exact_datapath_of(datapath)
        for index, node in enumerate(graph.nodes):
            dp = node_datapath(datapath, node, index)          # the swept points start from this one
            edp = node_datapath(exact, node, index)            # the reference, and what feeds the next nodes
            ins = [values[t] if t else None for t in node.inputs]
            swept = _is_swept(node) and (want is None or node.name in want)
            fast = swept and node.op in MAC_OPS and _node_knobs(node, dp) is None and same_but_accumulator(dp, edp)
            # the fast path: the point's datapath at the exact width (its exact sums are the exact datapath's)
            nd = _Node(graph, node, ins, _replace(dp, accumulator_bits=edp.accumulator_bits,
                                                  accumulator_overflow="wrap")) if fast else None
            if nd is not None and nd.base_exact and nd.ref is not None:
                outs = [nd.ref.reshape(nd.out_shape).astype(_spec(graph, node.outputs[0]).dtype)]
            else:
                outs, _ = run_node(graph, node, ins, edp, False)
            for t, v in zip(node.outputs, outs):
                values[t] = v
            if not swept:
                continue
            out = values[node.outputs[0]]
            if nd is not None and nd.ref is None:       # exact sums the requantizer refuses: the node's own run
                nd.ref = np.asarray(out).reshape(nd.r, nd.n).astype(np.int32)
            fast_modes = [m for m in modes if m in _FAST_MODES]
            tasks = []
            if nd is not None and fast_modes:
                if pool is not None:
                    nd.threads = 1
                    tasks = [pool.submit(_sweep_node, nd, widths, [m]) for m in fast_modes]
                    inflight.append(tasks)
                    while len(inflight) > SWEEP_INFLIGHT:   # bounded memory: a few nodes' data alive at once
                        for t in inflight.pop(0):
                            t.result()
                else:
                    tasks = [_Done(_sweep_node(nd, widths, fast_modes))]
            slow = modes if nd is None else [m for m in modes if m not in _FAST_MODES]
            slow_recs = _fallback(graph, node, ins, dp, widths, slow, out) if slow else []
            pending.append((node, None if nd is None else nd.bound_max, tasks, slow_recs, int(out.size), len(out)))
            del nd
        for node, bound, tasks, slow_recs, n_outputs, n_first in pending:
            recs = [dict(r, method="fast") for t in tasks for r in t.result()]
            recs += [dict(r, method="run_node") for r in slow_recs]
            recs.sort(key=lambda r: (r["width"], modes.index(r["overflow"])))
            adds = int(graph.macs(node)) * n_first
            for r in recs:
                res.records.append({"node": node.name, "op": node.op, "width": r["width"], "overflow": r["overflow"],
                                    "overflow_count": r["overflow_count"],
                                    "not_exact_fraction": r["not_exact"] / n_outputs,
                                    "max_abs_error_lsb": r["max_err"], "mean_abs_error_lsb": r["sum_err"] / n_outputs,
                                    "outputs": n_outputs, "adds": adds, "method": r["method"]})
            exact = None
            for wdt in reversed(widths):
                if all(r["overflow_count"] == 0 and r["not_exact"] == 0 for r in recs if r["width"] == wdt):
                    exact = wdt
                else:
                    break
            res.exact_from[node.name] = exact
            if bound is not None:
                res.bound_bits[node.name] = bound
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return res


class _Done:
    """A finished task (no pool)."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def exact_widths(graph, x, datapath=None) -> dict:
    """Per MAC node, the accumulator width from which the node is provably exact on these inputs.

    Each node is fed the exact graph's inputs; at width ``W`` it cannot overflow and stores its bias
    unchanged when :math:`|b_o| + \\sum_k |x_k - z_x|\\,|w_{o,k} - z_w|` fits ``W`` signed bits for every output
    (every running sum, every adder-tree node and the bias are within that bound; a depthwise node in
    sequential order uses the exact peak of its running sums, a few adds each, instead), so its outputs are the
    exact datapath's at every ``W`` and wider.  A full-network sweep over ``accumulator_bits`` can therefore
    reuse the exact run's tensors up to the first node (in graph order) whose width here exceeds ``W``, and
    the exact network's result outright at widths no smaller than the largest value.

    Returns ``{node name: width}`` (one BLAS product per node on the absolute operands, and the inference).
    """
    datapath = graph.default_datapath if datapath is None else datapath
    exact = exact_datapath_of(datapath)
    _, _, values = graph.run(x, exact, keep=True)
    constants = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    out = {}
    for index, node in _mac_nodes(graph):
        dp = node_datapath(datapath, node, index)
        ins = [(values[t] if t in values else constants[t]) if t else None for t in node.inputs]
        knob = _node_knobs(node, dp)
        if knob == "zero_point='fold'":                 # data-driven: the folded running sums and b'
            out[node.name] = _fold_bits(graph, node, ins, node_datapath(exact, node, index))
            continue
        if knob is not None:                            # tiles / shifted LSB: the type's worst case
            out[node.name] = graph.accumulator_bits_needed(node)
            continue
        xspec, wspec = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
        xo = ins[0].astype(np.int32) - int(xspec.zero_point[0])
        wo = ins[1].astype(np.int32) - wspec.zero_point.reshape(wspec.channel_shape(ins[1].ndim))
        if node.op != "depthwise_conv2d":
            xo, wo = np.abs(xo), np.abs(wo)
        geometry = {}
        if node.op != "fully_connected":
            stride, dilation = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation")
            geometry = dict(stride=stride, dilation=dilation,
                            pads=_pads(xo.shape[1:3], wo.shape[1:3], stride, dilation, _padding(node.attrs)))
        a, w2, _ = mac_rows(node.op, xo, wo, **geometry)
        has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
        b = np.asarray(ins[2], np.int64) << int(node.attrs.get("bias_shift", 0)) if has_bias else \
            np.zeros(w2.shape[0], np.int64)
        if node.op == "depthwise_conv2d":                # a few adds per output: the exact peaks
            peak = int(_depthwise_sums(a, w2, b, has_bias, dp)[2].max(initial=0))
        else:
            u = _matmul(np.ascontiguousarray(a[:, 0, :]), np.ascontiguousarray(w2.T)).raw
            peak = int((u + np.abs(b)).max(initial=0))
        out[node.name] = int(_signed_bits(np.array([peak]))[0])
    return out


def _fold_bits(graph, node, ins, edp) -> int:
    """Width from which a ``zero_point="fold"`` node is exact on these inputs: every exact running sum of
    :math:`b' + \\sum_k x_k (w_k - z_w)` (padded taps hold :math:`z_x`) and the folded bias
    :math:`b' = b - z_x \\sum_k (w_k - z_w)` itself fit (the register holds :math:`b'` before any add, or
    adds it after the products)."""
    _, tr = run_node(graph, node, ins, edp, "peaks")
    peak = int(tr["partial_peak"] or 0)
    xspec, wspec = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    wo = ins[1].astype(np.int64) - wspec.zero_point.reshape(wspec.channel_shape(ins[1].ndim))
    axes = tuple(a for a in range(wo.ndim) if a != (3 if node.op == "depthwise_conv2d" else 0))
    wsum = wo.sum(axis=axes).reshape(-1)
    b = (np.asarray(ins[2], np.int64) << int(node.attrs.get("bias_shift", 0))) if len(node.inputs) > 2 and \
        node.inputs[2] else np.zeros_like(wsum)
    folded = b - int(xspec.zero_point[0]) * wsum
    peak = max(peak, int(np.abs(folded).max(initial=0)))
    return int(_signed_bits(np.array([peak]))[0])

"""Compiled execution plans of an :class:`~fxpsim.graph.ir.IntegerGraph`: what a run derives from the graph, the
datapath and the input shapes alone, derived once.

``plan = graph.compile(datapath, batch_shape)`` resolves, for every node in order, its datapath settings
(:func:`~fxpsim.graph.datapath_settings.node_datapath`, per-node overrides of a
:class:`~fxpsim.HardwareConfig` included, its selectors checked once), its op, where its inputs come from, and,
for the ops that offer one (``Op.prepare``: the MAC ops), a step with the validated constants, requantization
constants and kernel choice fixed; ``plan.run(x)`` then calls those steps directly. The result is the node-by-node
run's, bit for bit, traces and ``keep=True`` included. Where a feature needs it, a step falls back to the op's full
``run`` (today's path, its arguments derived again) for that call: a MAC call the fused int8 kernel declines (its
exactness bound is data dependent; other dtypes, K-tiling, zero-point folding, product shifts), an active
:func:`fxpsim.overflow_log`, ``trace="peaks"`` and ``overflow_at="end"`` on MAC nodes, and every op without a
``prepare`` (all but the MAC ops, TFLite's int8 ADD and the ONNX ops of :mod:`fxpsim.frontends.onnx.prepared`
and ``onnx_quantize`` / ``onnx_dequantize``: their steps still skip the dispatch, the datapath and selector
resolution and the constants' collection).

:meth:`IntegerGraph.run` uses a plan implicitly: the graph keeps the plans of its last few
``(datapath, input shapes)``; a datapath that cannot be a dictionary key (not hashable, so possibly mutable)
runs node by node (:func:`run_node_by_node`, also ``graph.run(x, plan=False)``). A plan is valid while no edit
of any graph happened since it was compiled (:data:`fxpsim.graph.edits.EDITS`, bumped by every change to
nodes, tensors, attributes or meta) and while every constant array it read is still the same read-only array;
otherwise the graph compiles a new one, and calling a stale plan object directly raises. Compiling a graph with a
constant made writeable again counts as an edit (the array may have been written): it retires the older plans
even once the new plan has made the array read-only again.
"""
from __future__ import annotations

import numpy as np

from .datapath_settings import node_datapath
from .edits import EDITS, bump, frozen, refresh_caches

__all__ = ["ExecutionPlan", "compile_plan", "plan_for", "run_node_by_node", "feeds_of", "untraced_step"]

#: Plans a graph keeps (the most recently used ``(datapath, shapes)`` pairs).
MAX_PLANS = 8


def _generic_step(op, graph, node, dp):
    """A node's run as the op defines it, with its datapath fixed: ``step(ins, trace) -> (outs, info)``."""
    run = op.run
    return lambda ins, trace: run(graph, node, ins, dp, trace)


def untraced_step(graph, node, dp, fast, shape=None):
    """A prepared step that computes ``[fast(ins)]`` when no trace is asked for, and the node's op's full ``run``
    (its trace with it) when one is, or while an :func:`fxpsim.overflow_log` is active (the full ``run`` records
    its events): what an ``Op.prepare`` returns for an op whose speed-up has neither. With ``shape``, ``fast`` is
    only called on a first input of that shape (the full ``run`` takes others)."""
    from ..core.overflow_logging import _logging
    from .registry import find_op
    run = find_op(node.op).run

    def step(ins, trace):
        if trace or _logging() or (shape is not None and ins[0].shape != shape):
            return run(graph, node, ins, dp, trace)
        return [fast(ins)], None
    return step


class ExecutionPlan:
    """The nodes of ``graph`` ready to run on ``datapath`` for inputs of ``shapes`` (batch axis included).

    Attributes
    ----------
    graph, datapath, shapes
        What it was compiled for.
    steps : list of ``(node, step, input slots, output slots)``
        ``step(ins, trace) -> (outs, info)``; slots index the plan's value table.
    """

    def __init__(self, graph, datapath, shapes):
        from .registry import _check_selectors, find_op
        if any(t.data.flags.writeable for t in graph.tensors.values() if t.is_constant):
            bump()        # a constant made writeable may have been written: an edit (older plans and caches retire)
        refresh_caches(graph)
        self.graph, self.datapath, self.shapes = graph, datapath, tuple(tuple(s) for s in shapes)
        self.edits = EDITS[0]
        self.constants = [(k, t, t.data) for k, t in graph.tensors.items() if t.is_constant]
        for _, _, data in self.constants:      # (a constant made writeable again: read-only from now on)
            if data.flags.writeable:
                frozen(data, copy=False)
        names = [k for k, _, _ in self.constants] + list(graph.inputs)
        slot = {name: i for i, name in enumerate(names)}
        shape_of = {name: s for name, s in zip(graph.inputs, self.shapes)}
        self.steps = []
        for i, node in enumerate(graph.nodes):
            dp = node_datapath(datapath, node, i)
            if i == 0:
                _check_selectors(graph, datapath)
            op = find_op(node.op)
            if op is None:
                raise ValueError(f"node {node.name!r}: unknown op {node.op!r}")
            prepare = getattr(op, "prepare", None)
            in_shapes = [shape_of.get(t) if t else None for t in node.inputs]
            step = prepare(graph, node, dp, in_shapes) if prepare is not None else None
            if step is None:
                step = _generic_step(op, graph, node, dp)
            for t in node.outputs:
                slot[t] = len(slot)
            self.steps.append((node, step, [slot[t] if t else None for t in node.inputs],
                               [slot[t] for t in node.outputs]))
            shape_of.update(_output_shapes(graph, node, in_shapes))
        self.slots, self.n_constants = slot, len(self.constants)
        self.output_slots = [slot[t] for t in graph.outputs]
        self.edits = EDITS[0]          # (preparing may have filled caches: no edit)

    def valid(self) -> bool:
        """No graph edit since compiling (a constant's ``data`` reassigned is one), and each constant array still
        read-only."""
        if self.edits != EDITS[0]:
            return False
        for _, _, data in self.constants:
            if data.flags.writeable:
                return False
        return True

    def run(self, x, *, trace: bool | str = False, keep: bool = False):
        """Run ``x`` (validated as :meth:`IntegerGraph.run` does) through the plan; the same results as
        ``graph.run(x, datapath, trace=trace, keep=keep)``."""
        if trace not in (False, True, "peaks"):
            raise ValueError(f"trace must be False, True or 'peaks', got {trace!r}")
        if not self.valid():
            raise ValueError(f"this plan of graph {self.graph.name!r} is stale: the graph (or a constant array) "
                             "changed since it was compiled; compile a new one (graph.compile)")
        feeds = feeds_of(self.graph, self.graph._with_state(x))
        return self.run_feeds(feeds, trace, keep)

    def run_feeds(self, feeds: dict, trace, keep: bool):
        """The plan on validated feeds (one array per graph input, in order), once :meth:`valid` said yes."""
        arrays = list(feeds.values())
        got = tuple(a.shape for a in arrays)
        if got != self.shapes:
            raise ValueError(f"the plan was compiled for input shapes {list(self.shapes)}, got {list(got)}")
        values = [data for _, _, data in self.constants] + arrays
        values += [None] * (len(self.slots) - len(values))
        traces = {} if trace else None
        for node, step, ins_at, outs_at in self.steps:
            outs, info = step([values[j] if j is not None else None for j in ins_at], trace)
            for j, v in zip(outs_at, outs):
                values[j] = v
            if trace:
                traces[node.name] = info
        outputs = [values[j] for j in self.output_slots]
        result = outputs[0] if len(outputs) == 1 else outputs
        if trace or keep:
            kept = None
            if keep:
                kept = {name: values[j] for name, j in self.slots.items() if j >= self.n_constants}
            return result, traces, kept
        return result


def _output_shapes(graph, node, in_shapes) -> dict:
    """Batch shapes of a node's outputs: the batch of its first activation input, then the declared shape."""
    batch = next((s[0] for s in in_shapes if s is not None), None)
    if batch is None:
        return {}
    return {t: (batch,) + graph.tensors[t].shape for t in node.outputs}


def _key(datapath, shapes):
    try:
        hash(datapath)
    except TypeError:
        return None
    return (datapath, tuple(tuple(s) for s in shapes))


def compile_plan(graph, datapath, shapes) -> ExecutionPlan:
    """A new plan (see :meth:`IntegerGraph.compile`)."""
    return ExecutionPlan(graph, datapath, shapes)


def plan_for(graph, datapath, feeds: dict) -> ExecutionPlan | None:
    """The graph's valid plan for ``datapath`` and the feeds' shapes, compiled when there is none; ``None`` when
    the datapath cannot key one (the run goes node by node)."""
    key = _key(datapath, [a.shape for a in feeds.values()])
    if key is None:
        return None
    refresh_caches(graph)
    plans = graph.__dict__.setdefault("_plans", {})
    plan = plans.get(key)
    if plan is None or not plan.valid():
        plan = compile_plan(graph, datapath, key[1])
        plans.pop(key, None)
        plans[key] = plan
        while len(plans) > MAX_PLANS:
            plans.pop(next(iter(plans)))
    return plan


def run_node_by_node(graph, feeds: dict, datapath, trace, keep: bool):
    """The uncompiled run: every node dispatched through :func:`~fxpsim.graph.registry.run_node`, its settings
    and arguments derived again (the reference a plan is tested against)."""
    from .registry import run_node
    refresh_caches(graph)
    constants = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    values = {**constants, **feeds}
    traces = {}
    for i, node in enumerate(graph.nodes):
        ins = [values[t] if t else None for t in node.inputs]
        outs, info = run_node(graph, node, ins, node_datapath(datapath, node, i), trace)
        for t, v in zip(node.outputs, outs):
            values[t] = v
        if trace:
            traces[node.name] = info
    outputs = [values[t] for t in graph.outputs]
    result = outputs[0] if len(outputs) == 1 else outputs
    if trace or keep:
        kept = {k: v for k, v in values.items() if k not in constants} if keep else None
        return result, (traces if trace else None), kept
    return result


def feeds_of(graph, x) -> dict:
    """The graph inputs of ``x`` checked and cast (see :meth:`IntegerGraph.run`): name -> array."""
    arrays = [x] if isinstance(x, np.ndarray) or not isinstance(x, (list, tuple)) else list(x)
    if not graph.inputs:
        raise ValueError(f"graph {graph.name!r} has no inputs to feed")
    if len(arrays) != len(graph.inputs):
        raise ValueError(f"the graph has {len(graph.inputs)} input(s) ({', '.join(graph.inputs)}), "
                         f"got {len(arrays)} array(s)")
    feeds, n = {}, None
    for name, a in zip(graph.inputs, arrays):
        spec = graph.tensors[name]
        a = np.asarray(a)
        where = f"input {name!r}"
        if a.ndim != len(spec.shape) + 1 or tuple(a.shape[1:]) != spec.shape:
            raise ValueError(f"{where} must have shape (N, {', '.join(map(str, spec.shape))}), got {a.shape}")
        if a.shape[0] == 0:
            raise ValueError(f"{where} is an empty batch")
        if n is not None and a.shape[0] != n:
            raise ValueError(f"graph inputs have different batch sizes ({n} and {a.shape[0]})")
        n = a.shape[0]
        if spec.is_float:
            if a.dtype.kind not in "fiu" or a.dtype == np.bool_:
                raise TypeError(f"{where} must be a float array, got dtype {a.dtype}")
            a = a.astype(np.float32)
            if not np.isfinite(a).all():
                raise ValueError(f"{where} holds {int(a.size - np.isfinite(a).sum())} NaN/inf value(s)")
        else:
            if a.dtype.kind not in "iu":
                raise TypeError(f"{where} holds {spec.type_name} codes; got dtype {a.dtype} "
                                f"(quantize float data first, e.g. with the graph's quantize node)")
            lo, hi = spec.code_range
            if int(a.min()) < lo or int(a.max()) > hi:
                raise ValueError(f"{where}: codes outside the {spec.type_name} range [{lo}, {hi}]")
            a = a.astype(spec.dtype, copy=False)
        feeds[name] = a
    return feeds

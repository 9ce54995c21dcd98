"""The op registry of the integer graph: :class:`Op` (an op's semantics), :data:`OPS`, :func:`register_op`,
:func:`find_op` (which loads the modules of :data:`OP_PROVIDERS` on demand), the dispatch of one node
(:func:`run_node`, :func:`run_node_float`), and the small helpers every op family shares (output clamps,
paddings, strides). The op families themselves live in :mod:`.ops` (the core set), :mod:`.mac_ops`,
:mod:`.elementwise_ops`, :mod:`.lut_ops` and each frontend's ``ops`` module; they import this module, never
each other's registration.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..core.fixed import Overflow
from ..datapath.requantize import activation_range

__all__ = ["Op", "OPS", "OP_PROVIDERS", "find_op", "register_op", "run_node", "run_node_float"]


@dataclass(frozen=True)
class Op:
    """An op's semantics (see the module docstring)."""

    name: str
    run: Callable
    run_float: Callable
    check: Callable = lambda graph, node: None
    macs: Callable = lambda graph, node: 0
    worst_case_sum: Callable = lambda graph, node: None
    #: ``prepare(graph, node, datapath, input_shapes) -> step | None``: a compiled plan's step of the node,
    #: ``step(inputs, trace) -> (outputs, trace)`` with what depends on the graph and datapath alone derived
    #: once (:mod:`fxpsim.graph.plan`); ``None`` (or no ``prepare``): the plan calls ``run``.
    prepare: Callable | None = None


OPS: dict[str, Op] = {}


#: The modules that register op families: the core set (:mod:`fxpsim.graph.ops`) and each frontend's
#: ``ops``. The graph imports no frontend: :func:`find_op` loads these by name, in order, on demand, when a
#: graph names an op no loaded module registered (a saved imported graph read back by ``load_graph``, a
#: graph unpickled in a worker process). A new frontend adds its line here.
OP_PROVIDERS = ("fxpsim.graph.ops", "fxpsim.frontends.tflite.ops", "fxpsim.frontends.onnx.ops",
                "fxpsim.frontends.qonnx.ops", "fxpsim.frontends.qonnx.ops_float", "fxpsim.frontends.hls4ml.ops")


def find_op(name: str) -> Op | None:
    """The :class:`Op` called ``name``, loading the importers' op modules when needed (``None`` if unknown)."""
    if name not in OPS:
        for module in OP_PROVIDERS:
            importlib.import_module(module)
            if name in OPS:
                break
    return OPS.get(name)


def register_op(op: Op) -> Op:
    """Add ``op`` to :data:`OPS` (an importer's ops register when its module is imported)."""
    if not isinstance(op, Op):
        raise TypeError(f"register_op takes an Op, got {type(op).__name__}")
    OPS[op.name] = op
    return op


def run_node(graph, node, inputs, datapath, trace: bool):
    """Integer outputs (list) and trace of one node on ``datapath``.

    A datapath with per-node overrides (:class:`fxpsim.HardwareConfig` ``layers``) has its selectors checked
    against the graph first: one that selects no node raises :class:`~fxpsim.hardware.ConfigError`."""
    _check_selectors(graph, datapath)
    return _op(node).run(graph, node, inputs, datapath, trace)


def _check_selectors(graph, datapath) -> None:
    root = getattr(datapath, "_selector_root", datapath)
    check = getattr(root, "check_selectors", None)
    if check is None or not getattr(root, "layers", None):
        return
    done = graph.__dict__.setdefault("_checked_selectors", set())
    key = hash(root.layers)
    if key not in done:
        check(graph)
        done.add(key)


def run_node_float(graph, node, inputs):
    """Float64 outputs (list) of one node from float64 inputs."""
    return _op(node).run_float(graph, node, inputs)


def _op(node) -> Op:
    op = OPS.get(node.op) or find_op(node.op)
    if op is None:
        raise ValueError(f"node {node.name!r}: unknown op {node.op!r}")
    return op


# ----------------------------------------------------------------------------------------- helpers
def _spec(graph, name):
    return graph.tensors[name]


def _overflow_name(value) -> str:
    return value.value if isinstance(value, Overflow) else str(value)


def _rounding_name(value) -> str:
    return getattr(value, "value", value)


def _no_trace() -> dict:
    return {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def _clamp_codes(graph, node, out_name: str, activation: str, datapath=None) -> tuple[int, int]:
    """The output clamp of a node: its fused activation's range inside the output type's range, narrowed to
    the node's ``clip`` attribute (``[lo, hi]`` codes: a trained quantizer's range) when it has one."""
    out = _spec(graph, out_name)
    lo, hi = out.code_range
    if activation and activation != "none":
        a_lo, a_hi = activation_range(activation, float(out.scale[0]), int(out.zero_point[0]), out.dtype)
        lo, hi = max(lo, a_lo), min(hi, a_hi)
    clip = node.attrs.get("clip")
    if clip is not None:
        lo, hi = max(lo, int(clip[0])), min(hi, int(clip[1]))
        hi = max(hi, lo)
    return lo, hi


def _float_clip(graph, node, y):
    """The float counterpart of a node's ``clip`` attribute: real values outside the clip's range clamp."""
    clip = node.attrs.get("clip")
    if clip is None:
        return y
    out = _spec(graph, node.outputs[0])
    s, z = float(out.scale[0]), int(out.zero_point[0])
    return np.clip(y, s * (int(clip[0]) - z), s * (int(clip[1]) - z))


def _float_activation(y: np.ndarray, activation: str | None) -> np.ndarray:
    if not activation or activation == "none":
        return y
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "relu6":
        return np.clip(y, 0.0, 6.0)
    if activation == "relu_n1_to_1":
        return np.clip(y, -1.0, 1.0)
    raise ValueError(f"unknown activation {activation!r}")


def _padding(attrs):
    p = attrs.get("padding", "VALID")
    return p if isinstance(p, str) else tuple(tuple(int(v) for v in side) for side in p)


def _pair(attrs, key, default=1) -> tuple[int, int]:
    v = attrs.get(key, default)
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[1]))


def _pads(in_hw, k_hw, stride, dilation, padding):
    """Explicit ((top, bottom), (left, right)) paddings (TensorFlow SAME rules)."""
    if not isinstance(padding, str):
        return padding
    out = []
    for n, k, s, d in zip(in_hw, k_hw, stride, dilation):
        ke = (k - 1) * d + 1
        if padding == "VALID":
            out.append((0, 0))
        else:
            o = -(-n // s)
            total = max((o - 1) * s + ke - n, 0)
            out.append((total // 2, total - total // 2))
    return tuple(out)

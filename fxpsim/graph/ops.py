"""What each op of an :class:`~fxpsim.graph.ir.IntegerGraph` computes: integer semantics on the
:mod:`fxpsim.datapath` kernels, and a float64 reference of the same op for the graph's float execution.

An op is an :class:`Op` registered in :data:`OPS` by :func:`register_op`: ``run(graph, node, inputs,
datapath, trace) -> (outputs, trace)`` computes the codes on a datapath; ``run_float(graph, node, inputs)``
the real values from real inputs; ``check(graph, node)`` validates the node when the graph is built;
``macs`` and ``worst_case_sum`` describe its cost and accumulator needs. Importers register the ops of their
formats in their own modules (e.g. :mod:`fxpsim.frontends.tflite.ops`); this module holds the core set:

=====================  =========================================================================
op                     attributes
=====================  =========================================================================
``quantize``           ``rounding`` (optional; default: the datapath's): float -> codes
``dequantize``         codes -> float32 :math:`s (q - z)`
``fully_connected``    ``activation``; inputs ``x [N, K]``, ``w [O, K]``, optional ``bias [O]``
``conv2d``             ``stride``, ``padding``, ``dilation``, ``activation``; ``w [O, KH, KW, C]``
``depthwise_conv2d``   as conv2d; ``w [1, KH, KW, C*M]``
``max_pool2d``         ``pool_size``, ``stride``, ``padding``
``avg_pool2d``         ``pool_size``, ``stride``, ``padding``
``reshape``            ``shape`` (per sample)
``clamp``              ``activation`` (relu, relu6, relu_n1_to_1): a separate integer max/min
``add``                ``activation``: TFLite's integer ADD (two inputs, broadcasting)
=====================  =========================================================================

``activation`` is ``"none"``, ``"relu"``, ``"relu6"`` or ``"relu_n1_to_1"``; ``padding`` is ``"SAME"``,
``"VALID"`` or ``[[top, bottom], [left, right]]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..core.fixed import Format, Overflow, from_float
from ..datapath.integer_ops import quantized_average_pool2d
from ..datapath.requantize import activation_range
from ..nn import conv as float_conv

__all__ = ["Op", "OPS", "find_op", "register_op", "run_node", "run_node_float", "exact_accumulator", "requantizer_for",
           "run_node_isolated"]


@dataclass(frozen=True)
class Op:
    """An op's semantics (see the module docstring)."""

    name: str
    run: Callable
    run_float: Callable
    check: Callable = lambda graph, node: None
    macs: Callable = lambda graph, node: 0
    worst_case_sum: Callable = lambda graph, node: None


OPS: dict[str, Op] = {}


#: The modules that register the op families of imported formats (each frontend's ``ops``). The graph
#: imports none of them: :func:`find_op` loads them by name, on demand, when a graph names an op no loaded
#: module registered (a saved imported graph read back by ``load_graph``, a graph unpickled in a worker).
#: A new frontend adds its line here.
OP_PROVIDERS = ("fxpsim.frontends.tflite.ops", "fxpsim.frontends.onnx.ops")


def find_op(name: str) -> Op | None:
    """The :class:`Op` called ``name``, loading the importers' op modules when needed (``None`` if unknown)."""
    if name not in OPS:
        import importlib
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
    return OPS[node.op].run(graph, node, inputs, datapath, trace)


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
    return OPS[node.op].run_float(graph, node, inputs)


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


# ----------------------------------------------------------------------------------------- other ops
def _quantize_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    lo, hi = _clamp_codes(graph, node, node.outputs[0], "none")
    rounding = node.attrs.get("rounding") or _rounding_name(dp.rounding)
    x = np.asarray(ins[0], dtype=np.float64)
    codes = from_float(x / float(y.scale[0]), Format.integer(62), rounding=rounding).raw
    out = np.clip(codes + int(y.zero_point[0]), lo, hi)
    info = {**_no_trace(), "clipped": int(np.count_nonzero((codes + int(y.zero_point[0]) < lo)
                                                                | (codes + int(y.zero_point[0]) > hi)))}
    return [out.astype(y.dtype)], info


def _dequantize_run(graph, node, ins, dp, trace):
    x = _spec(graph, node.inputs[0])
    return [x.dequantize(ins[0]).astype(np.float32)], _no_trace()


def _identity_float(graph, node, ins):
    return [ins[0]]


def _max_pool_run(graph, node, ins, dp, trace):
    h = ins[0]
    k, s = _pair(node.attrs, "pool_size"), _pair(node.attrs, "stride", node.attrs.get("pool_size"))
    pads = _pads(h.shape[1:3], k, s, (1, 1), _padding(node.attrs))
    xp = float_conv.pad_nhwc(h, (pads[0][0], pads[0][1], pads[1][0], pads[1][1]), np.iinfo(h.dtype).min)
    out = float_conv.extract_patches(xp, k, s).max(axis=(3, 4))
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    return [np.clip(out, lo, hi).astype(h.dtype)], _no_trace()


def _max_pool_float(graph, node, ins):
    k, s = _pair(node.attrs, "pool_size"), _pair(node.attrs, "stride", node.attrs.get("pool_size"))
    pads = _pads(ins[0].shape[1:3], k, s, (1, 1), _padding(node.attrs))
    xp = float_conv.pad_nhwc(ins[0], (pads[0][0], pads[0][1], pads[1][0], pads[1][1]), -np.inf)
    y = float_conv.extract_patches(xp, k, s).max(axis=(3, 4))
    return [_float_activation(y, node.attrs.get("activation"))]


def _avg_pool_run(graph, node, ins, dp, trace):
    h = ins[0]
    k, s = _pair(node.attrs, "pool_size"), _pair(node.attrs, "stride", node.attrs.get("pool_size"))
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    res = quantized_average_pool2d(h, k, stride=s, padding=_padding(node.attrs), act_min=lo, act_max=hi,
                                   acc=Format.integer(min(dp.accumulator_bits, 62)),
                                   overflow=_overflow_name(dp.accumulator_overflow))
    info = {"overflows": int(res.overflows), "acc": res.acc, "clipped": 0,
            "adds": int(res.out.size) * k[0] * k[1]}
    return [res.out], info


def _avg_pool_float(graph, node, ins):
    k, s = _pair(node.attrs, "pool_size"), _pair(node.attrs, "stride", node.attrs.get("pool_size"))
    padding = _padding(node.attrs)
    if not isinstance(padding, str):
        raise ValueError(f"node {node.name!r}: the float reference supports SAME/VALID pooling only")
    y = float_conv.avg_pool2d_forward(ins[0], k, s, padding)[0]
    return [_float_activation(y, node.attrs.get("activation"))]


def _pool_macs(graph, node):
    k = _pair(node.attrs, "pool_size")
    return int(np.prod(_spec(graph, node.outputs[0]).shape)) * k[0] * k[1] if node.op == "avg_pool2d" else 0


def _avg_pool_bound(graph, node):
    lo, hi = _spec(graph, node.inputs[0]).code_range
    k = _pair(node.attrs, "pool_size")
    return max(abs(lo), abs(hi)) * k[0] * k[1]


def _reshape_run(graph, node, ins, dp, trace):
    return [ins[0].reshape((len(ins[0]),) + _spec(graph, node.outputs[0]).shape)], _no_trace()


def _reshape_float(graph, node, ins):
    return [ins[0].reshape((len(ins[0]),) + _spec(graph, node.outputs[0]).shape)]


def _clamp_run(graph, node, ins, dp, trace):
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    return [np.clip(ins[0], lo, hi).astype(ins[0].dtype)], _no_trace()


def _clamp_float(graph, node, ins):
    return [_float_activation(ins[0], node.attrs.get("activation"))]


def _one_to_one(graph, node):
    if len([t for t in node.inputs if t]) < 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs an input and one output")


def _quantize_float(graph, node, ins):
    return [_float_clip(graph, node, ins[0])]


register_op(Op("quantize", _quantize_run, _quantize_float, _one_to_one))
register_op(Op("dequantize", _dequantize_run, _identity_float, _one_to_one))
register_op(Op("max_pool2d", _max_pool_run, _max_pool_float, _one_to_one, _pool_macs))
register_op(Op("avg_pool2d", _avg_pool_run, _avg_pool_float, _one_to_one, _pool_macs, _avg_pool_bound))
register_op(Op("reshape", _reshape_run, _reshape_float, _one_to_one))
register_op(Op("clamp", _clamp_run, _clamp_float, _one_to_one))

# the MAC ops (fully_connected, conv2d, depthwise_conv2d) live in their own module; importing it registers them
from .mac_ops import exact_accumulator, requantizer_for, run_node_isolated  # noqa: E402,F401
from . import elementwise_ops  # noqa: E402,F401  (add, mul, concat with their own requantization)
from . import lut_ops  # noqa: E402,F401  (sigmoid, tanh, hard_swish as integer table lookups)

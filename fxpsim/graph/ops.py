"""What each op of an :class:`~fxpsim.graph.ir.IntegerGraph` computes: integer semantics on the
:mod:`fxpsim.datapath` kernels, and a float64 reference of the same op for the graph's float execution.

An op is an :class:`Op` registered in :data:`OPS` by :func:`register_op`: ``run(graph, node, inputs,
datapath, trace) -> (outputs, trace)`` computes the codes on a datapath; ``run_float(graph, node, inputs)``
the real values from real inputs; ``check(graph, node)`` validates the node when the graph is built;
``macs`` and ``worst_case_sum`` describe its cost and accumulator needs. Importers register the ops of their
formats in their own modules (e.g. :mod:`fxpsim.graph.tflite_ops`); this module holds the core set:

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

from ..core.fixed import FixedArray, Format, Overflow, from_float
from ..datapath.integer_ops import (quantized_add, quantized_average_pool2d, quantized_conv2d,
                                    quantized_depthwise_conv2d, quantized_fully_connected)
from ..datapath.requantize import Requantizer, activation_range
from ..nn import conv as float_conv

__all__ = ["Op", "OPS", "find_op", "register_op", "run_node", "run_node_float", "exact_accumulator", "requantizer_for"]


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


# Modules of this package that register the ops of imported formats; loaded when a graph names one of
# their ops (e.g. a saved imported graph read back by ``load_graph``).
_OP_MODULES = ("tflite_ops", "onnx_ops")


def find_op(name: str) -> Op | None:
    """The :class:`Op` called ``name``, loading the importers' op modules when needed (``None`` if unknown)."""
    if name not in OPS:
        import importlib
        for module in _OP_MODULES:
            try:
                importlib.import_module(f"{__package__}.{module}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__package__}.{module}":
                    raise
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
    """Integer outputs (list) and trace of one node on ``datapath``."""
    return OPS[node.op].run(graph, node, inputs, datapath, trace)


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
    """The output clamp of a node: its fused activation's range inside the output type's range."""
    out = _spec(graph, out_name)
    lo, hi = out.code_range
    if activation and activation != "none":
        a_lo, a_hi = activation_range(activation, float(out.scale[0]), int(out.zero_point[0]), out.dtype)
        lo, hi = max(lo, a_lo), min(hi, a_hi)
    return lo, hi


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


# ----------------------------------------------------------------------------------------- MAC ops
_MAC_OPS = ("fully_connected", "conv2d", "depthwise_conv2d")

def requantizer_for(graph, node, datapath) -> Requantizer:
    """The requantizer of a MAC node on ``datapath``: the configured scheme for
    :math:`M_c = s_{in} s_{w,c} / s_{out}` (scales as float32, as TFLite stores them)."""
    scheme = datapath.requantization
    if node.op == "fully_connected" and getattr(datapath, "dense_requantization", None):
        scheme = datapath.dense_requantization
    rounding = _rounding_name(datapath.rounding)
    cache = graph.__dict__.setdefault("_requantizers", {})   # per graph: tensors never change after build
    key = (node.name, scheme, rounding)
    rq = cache.get(key)
    if rq is None:
        x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
        kinds = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}
        if scheme not in kinds:
            raise ValueError(f"node {node.name!r}: requantization scheme {scheme!r} is not one of {sorted(kinds)}")
        rq = Requantizer.tflite(float(x.scale[0]), w.scale, float(y.scale[0]), kind=kinds[scheme], rounding=rounding)
        cache[key] = rq
    return rq


def _mac_run(graph, node, ins, dp, trace):
    from ..datapath.requantize import Requantizer as _R
    x, w = ins[0], ins[1]
    wspec, bspec = _spec(graph, node.inputs[1]), (_spec(graph, node.inputs[2]) if len(node.inputs) > 2
                                                  and node.inputs[2] else None)
    xspec, yspec = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    act = node.attrs.get("activation", "none")
    lo, hi = _clamp_codes(graph, node, node.outputs[0], act)
    wz = wspec.zero_point
    common = dict(requant=requantizer_for(graph, node, dp), x_zp=int(xspec.zero_point[0]),
                  w_zp=(wz if wz.size > 1 else int(wz[0])) if np.any(wz) else 0, out_zp=int(yspec.zero_point[0]),
                  act_min=lo, act_max=hi, out_dtype=yspec.dtype, acc=Format.integer(dp.accumulator_bits),
                  overflow=_overflow_name(dp.accumulator_overflow), order=dp.accumulator_order,
                  bias_at="init" if dp.bias_add == "preload" else "end")
    at_end = dp.overflow_at == "end"
    if at_end:
        common.update(acc=Format.integer(62), overflow="wrap", requant=_R("shift", shift=(0,)),
                      act_min=None, act_max=None, out_dtype=np.int8)
    bias, bias_clipped = ins[2] if bspec is not None else None, 0
    if bias is not None and not at_end:
        # a bias wider than the accumulator saturates into it (the hardware's bias register is no wider)
        lo_acc, hi_acc = -(1 << (dp.accumulator_bits - 1)), (1 << (dp.accumulator_bits - 1)) - 1
        clipped_bias = np.clip(bias, lo_acc, hi_acc)
        bias_clipped = int(np.count_nonzero(clipped_bias != bias))
        bias = clipped_bias
    if node.op == "fully_connected":
        res = quantized_fully_connected(x, w, bias, **common)
    else:
        fn = quantized_conv2d if node.op == "conv2d" else quantized_depthwise_conv2d
        res = fn(x, w, bias, stride=_pair(node.attrs, "stride"), padding=_padding(node.attrs),
                 dilation=_pair(node.attrs, "dilation"), **common)
    out, acc, overflows = res.out, res.acc, res.overflows
    info = None
    if at_end or trace:
        if at_end:
            fitted = FixedArray(acc, Format.integer(62)).cast(Format.integer(dp.accumulator_bits),
                                                              overflow=_overflow_name(dp.accumulator_overflow))
            overflows, acc = int(fitted.overflows), fitted.raw
        pre = requantizer_for(graph, node, dp)(acc, axis=-1) + int(yspec.zero_point[0])
        if at_end:
            out = np.clip(pre, lo, hi).astype(yspec.dtype)
        if trace:
            k = int(np.prod(w.shape[1:]))
            clipped = (pre > hi) if act not in (None, "none") else (pre > hi) | (pre < lo)
            info = {"overflows": int(overflows), "acc": acc, "clipped": int(np.count_nonzero(clipped)),
                    "bias_clipped": bias_clipped,
                    "adds": int(out.size) * (k + (bias is not None and dp.bias_add == "after"))}
    return [out], info


def exact_accumulator(graph, node, ins) -> np.ndarray:
    """Infinite-precision accumulator values :math:`\\sum (x - z_x)(w - z_w) + b` of a MAC node (float64
    BLAS, exact while every partial sum stays below :math:`2^{53}`, which 32-bit-or-narrower codes with
    K below 2^20 guarantee)."""
    xspec, wspec = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    xo = ins[0].astype(np.float64) - int(xspec.zero_point[0])
    w = ins[1].astype(np.float64) - wspec.zero_point.reshape(wspec.channel_shape(ins[1].ndim))
    acc = _float_mac(node, xo, w, ins[0].shape)
    if len(node.inputs) > 2 and node.inputs[2]:
        acc = acc + ins[2].astype(np.float64)
    return acc.astype(np.int64)


def _float_mac(node, x, w, x_shape):
    """The MAC op on float64 values without bias (w in the graph's layout)."""
    if node.op == "fully_connected":
        return x @ w.T
    stride, dilation, padding = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation"), _padding(node.attrs)
    if dilation != (1, 1):
        raise ValueError(f"node {node.name!r}: the float reference does not support dilation")
    pads = _pads(x_shape[1:3], w.shape[1:3], stride, dilation, padding)
    xp = float_conv.pad_nhwc(x, (pads[0][0], pads[0][1], pads[1][0], pads[1][1]))
    if node.op == "conv2d":
        return float_conv.conv2d_forward(xp, np.transpose(w, (1, 2, 3, 0)), stride, "VALID")[0]
    c = x.shape[3]
    kh, kw = w.shape[1:3]
    return float_conv.depthwise_conv2d_forward(xp, w[0].reshape(kh, kw, c, -1), stride, "VALID")[0]


def _mac_float(graph, node, ins):
    wspec = _spec(graph, node.inputs[1])
    w = wspec.dequantize(wspec.data)
    y = _float_mac(node, ins[0], w, ins[0].shape)
    if len(node.inputs) > 2 and node.inputs[2]:
        # the bias codes live in the accumulator's scale s_x s_w,c, whatever the tensor records
        s_acc = float(_spec(graph, node.inputs[0]).scale[0]) * np.broadcast_to(wspec.scale, (y.shape[-1],))
        y = y + _spec(graph, node.inputs[2]).data.astype(np.float64) * s_acc
    return [_float_activation(y, node.attrs.get("activation"))]


def _mac_check(graph, node):
    if len(node.inputs) not in (2, 3) or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs inputs (x, w[, bias]) and one output")
    w = _spec(graph, node.inputs[1])
    if not w.is_constant:
        raise ValueError(f"node {node.name!r}: the weights {w.name!r} must be a constant tensor")
    for t in (node.inputs[0], node.outputs[0]):
        if _spec(graph, t).scale is None or _spec(graph, t).per_channel:
            raise ValueError(f"node {node.name!r}: tensor {t!r} needs a per-tensor scale and zero point")
    if w.scale is None:
        raise ValueError(f"node {node.name!r}: the weights need a scale")


def _mac_count(graph, node) -> int:
    w = _spec(graph, node.inputs[1]).data
    out = _spec(graph, node.outputs[0]).shape
    if node.op == "depthwise_conv2d":
        return int(np.prod(out)) * int(w.shape[1] * w.shape[2])
    return int(np.prod(out)) * int(np.prod(w.shape[1:]))


def _mac_bound(graph, node) -> int:
    xs, ws = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    lo, hi = xs.code_range
    z = int(xs.zero_point[0])
    xmax = max(abs(lo - z), abs(hi - z))
    w = np.abs(ws.data.astype(np.int64) - ws.zero_point.reshape(ws.channel_shape(ws.data.ndim)))
    per_out = w.reshape(w.shape[0], -1).sum(axis=1) if node.op != "depthwise_conv2d" else \
        w.reshape(-1, w.shape[-1]).sum(axis=0)
    bound = per_out.astype(object) * xmax
    if len(node.inputs) > 2 and node.inputs[2]:
        bound = bound + np.abs(_spec(graph, node.inputs[2]).data.astype(np.int64)).astype(object)
    return int(max(bound))


for _name in _MAC_OPS:
    register_op(Op(_name, _mac_run, _mac_float, _mac_check, _mac_count, _mac_bound))


# ----------------------------------------------------------------------------------------- other ops
def _quantize_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    lo, hi = y.code_range
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


def _add_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    single = dp.requantization == "tflite-single"
    out = quantized_add(ins[0], ins[1], scale1=float(a.scale[0]), zp1=int(a.zero_point[0]),
                        scale2=float(b.scale[0]), zp2=int(b.zero_point[0]), out_scale=float(y.scale[0]),
                        out_zp=int(y.zero_point[0]), act_min=lo, act_max=hi, out_dtype=y.dtype,
                        rounding="single" if single else "double")
    return [out], _no_trace()


def _add_float(graph, node, ins):
    return [_float_activation(ins[0] + ins[1], node.attrs.get("activation"))]


def _one_to_one(graph, node):
    if len([t for t in node.inputs if t]) < 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs an input and one output")


register_op(Op("quantize", _quantize_run, _identity_float, _one_to_one))
register_op(Op("dequantize", _dequantize_run, _identity_float, _one_to_one))
register_op(Op("max_pool2d", _max_pool_run, _max_pool_float, _one_to_one, _pool_macs))
register_op(Op("avg_pool2d", _avg_pool_run, _avg_pool_float, _one_to_one, _pool_macs, _avg_pool_bound))
register_op(Op("reshape", _reshape_run, _reshape_float, _one_to_one))
register_op(Op("clamp", _clamp_run, _clamp_float, _one_to_one))
register_op(Op("add", _add_run, _add_float))

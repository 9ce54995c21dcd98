"""What each op of an :class:`~fxpsim.graph.ir.IntegerGraph` computes: integer semantics on the
:mod:`fxpsim.datapath` kernels, and a float64 reference of the same op for the graph's float execution.

An op is an :class:`~fxpsim.graph.registry.Op` registered in :data:`OPS` by :func:`register_op` (:mod:`.registry`): ``run(graph, node, inputs,
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
``transpose``          ``perm`` (per sample): codes (or floats) moved, scale and zero point kept
``clamp``              ``activation`` (relu, relu6, relu_n1_to_1): a separate integer max/min
``add``                ``activation``: TFLite's integer ADD (two inputs, broadcasting)
=====================  =========================================================================

``activation`` is ``"none"``, ``"relu"``, ``"relu6"`` or ``"relu_n1_to_1"``; ``padding`` is ``"SAME"``,
``"VALID"`` or ``[[top, bottom], [left, right]]``.
"""
from __future__ import annotations

import numpy as np

from ..core.fixed import Format, from_float
from ..datapath.integer_ops import quantized_average_pool2d
from ..nn import conv as float_conv
from . import elementwise_ops  # noqa: F401  (add, mul, concat with their own requantization)
from . import lut_ops  # noqa: F401  (sigmoid, tanh, hard_swish as integer table lookups)
# the MAC ops (fully_connected, conv2d, depthwise_conv2d) live in their own module; importing it registers them
from .mac_ops import exact_accumulator, requantizer_for, run_node_isolated  # noqa: F401
from .registry import (OP_PROVIDERS, OPS, Op, _check_selectors, _clamp_codes, _float_activation,  # noqa: F401
                       _float_clip, _no_trace, _overflow_name, _pads, _padding, _pair, _rounding_name, _spec,
                       find_op, register_op, run_node, run_node_float)

__all__ = ["Op", "OPS", "find_op", "register_op", "run_node", "run_node_float", "exact_accumulator", "requantizer_for",
           "run_node_isolated"]


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


def _max_pool_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step of ``max_pool2d`` for inputs of the plan's shape and the input tensor's dtype:
    the paddings, the output clamp and the window taps derived once. The maximum over a window is exact and
    independent of the order its taps are taken in, so

    .. math:: y[n, i, j, c] = \\mathrm{clip}\\big(\\max_{a < K_h,\\, b < K_w} x_p[n, i S_h + a, j S_w + b, c],
              \\ \\mathrm{lo}, \\mathrm{hi}\\big)

    is computed as a running ``np.maximum`` over the :math:`K_h K_w` strided tap slices of :math:`x_p` (``x``
    padded with the dtype's minimum, which no maximum over a window holding a real input can return), then
    clipped only where ``[lo, hi]`` is narrower than the dtype. Another input dtype runs :func:`_max_pool_run`."""
    from .plan import untraced_step
    x_spec = _spec(graph, node.inputs[0])
    if in_shapes[0] is None or len(in_shapes[0]) != 4 or np.dtype(x_spec.dtype).kind not in "iu":
        return None
    shape, dtype = tuple(in_shapes[0]), np.dtype(x_spec.dtype)
    n, h, w, c = shape
    (kh, kw), (sh, sw) = _pair(node.attrs, "pool_size"), _pair(node.attrs, "stride", node.attrs.get("pool_size"))
    (pt, pb), (pl, pr) = _pads((h, w), (kh, kw), (sh, sw), (1, 1), _padding(node.attrs))
    hp, wp = h + pt + pb, w + pl + pr
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    if oh < 1 or ow < 1 or kh < 1 or kw < 1:
        return None
    taps = [(slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw))
            for i in range(kh) for j in range(kw)]
    info = np.iinfo(dtype)
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    if lo > info.max or hi < info.min:
        return None
    lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
    clamp = (lo, hi) != (int(info.min), int(info.max))
    dlo, dhi = dtype.type(lo), dtype.type(hi)
    padded = bool(pt or pb or pl or pr)

    def fast(ins):
        x = ins[0]
        if x.dtype != dtype:
            return _max_pool_run(graph, node, ins, dp, False)[0][0]
        if padded:
            xp = np.full((n, hp, wp, c), info.min, dtype)
            xp[:, pt:pt + h, pl:pl + w] = x
        else:
            xp = x
        rows, cols = taps[0]
        out = np.array(xp[:, rows, cols])
        for rows, cols in taps[1:]:
            np.maximum(out, xp[:, rows, cols], out=out)
        if clamp:
            np.maximum(out, dlo, out=out)
            np.minimum(out, dhi, out=out)
        return out
    return untraced_step(graph, node, dp, fast, shape)


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


def _perm(node):
    return (0,) + tuple(int(p) + 1 for p in node.attrs["perm"])


def _transpose_run(graph, node, ins, dp, trace):
    return [np.ascontiguousarray(np.transpose(ins[0], _perm(node)))], _no_trace()


def _transpose_float(graph, node, ins):
    return [np.transpose(ins[0], _perm(node))]


def _transpose_check(graph, node):
    """``perm`` a permutation of the per-sample axes; the output the permuted shape, with the input's type,
    scale and zero point (a transpose moves codes, it never requantizes)."""
    _one_to_one(graph, node)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    perm = node.attrs.get("perm")
    if not isinstance(perm, (list, tuple)) or sorted(int(p) for p in perm) != list(range(len(x.shape))):
        raise ValueError(f"node {node.name!r} (transpose): perm {perm!r} is not a permutation of the "
                         f"{len(x.shape)} per-sample axes")
    known = x.scale is not None and y.scale is not None      # (an ONNX graph input may carry none)
    same_q = x.is_float == y.is_float and (x.is_float or not known or (
        np.array_equal(x.scale, y.scale) and np.array_equal(x.zero_point, y.zero_point)))
    if not same_q or tuple(x.shape[int(p)] for p in perm) != tuple(y.shape):
        raise ValueError(f"node {node.name!r} (transpose): the output must have shape "
                         f"{[x.shape[int(p)] for p in perm]} and the input's type, scale and zero point")


def _quantize_float(graph, node, ins):
    return [_float_clip(graph, node, ins[0])]


register_op(Op("quantize", _quantize_run, _quantize_float, _one_to_one))
register_op(Op("dequantize", _dequantize_run, _identity_float, _one_to_one))
register_op(Op("max_pool2d", _max_pool_run, _max_pool_float, _one_to_one, _pool_macs,
               prepare=_max_pool_prepare))
register_op(Op("avg_pool2d", _avg_pool_run, _avg_pool_float, _one_to_one, _pool_macs, _avg_pool_bound))
register_op(Op("reshape", _reshape_run, _reshape_float, _one_to_one))
register_op(Op("transpose", _transpose_run, _transpose_float, _transpose_check))
register_op(Op("clamp", _clamp_run, _clamp_float, _one_to_one))

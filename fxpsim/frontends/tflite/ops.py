"""Graph ops of imported TFLite models (:func:`fxpsim.import_tflite`): the ops the core set of
:mod:`fxpsim.graph.ops` lacks, with LiteRT's integer semantics from :mod:`fxpsim.datapath.tflite`.

Every op here computes what LiteRT's kernel computes, with the parameters TFLite derives in the op's
``Prepare`` from the tensors' scales and zero points (cached per node). The kernel set is the graph's
``meta["kernels"]`` (``"reference"``, ``"builtin"`` or ``"xnnpack"``; reference when absent). These ops do
not depend on the datapath a graph runs on: they are the runtime's own arithmetic (the MAC ops and the core
``add``/``avg_pool2d`` are where the datapath's accumulator and requantization apply).

=========================  =====================================================================
op                         TFLite op, attributes
=========================  =====================================================================
``tflite_quantize``        QUANTIZE float32 -> int8 (float32 division, round half away)
``tflite_dequantize``      DEQUANTIZE int8 -> float32
``tflite_requantize``      QUANTIZE int8 -> int8
``tflite_add``             ADD of the ``xnnpack`` kernel set (XNNPACK's ``qs8-vadd`` on the graph's
                           ``"native"`` datapath; the core ``add``, TFLite's ADD, otherwise); ``activation``
``tflite_sub``             SUB; ``activation``
``tflite_mul``             MUL; ``activation``
``tflite_mean``            MEAN; ``axes`` (per sample), ``keep_dims``
``tflite_pad``             PAD / PADV2; ``paddings`` (per sample, [[before, after], ...]), ``value`` (PADV2)
``tflite_concat``          CONCATENATION; ``axis`` (per sample)
``tflite_softmax``         SOFTMAX (last axis); ``beta``
``tflite_logistic``        LOGISTIC
``tflite_tanh``            TANH
``tflite_hard_swish``      HARD_SWISH
``tflite_leaky_relu``      LEAKY_RELU; ``alpha``
``tflite_strided_slice``   STRIDED_SLICE on run-time data; ``slices`` (per sample axis [start, stop, step]),
                           ``shrink`` (axes removed)
``tflite_split``           SPLIT / SPLIT_V; ``axis`` (per sample), ``sizes``
``tflite_gather``          GATHER; ``axis``, ``batch_dims`` (TFLite's, of the batch-1 tensors); params and
                           indices each constant or run-time; run-time indices out of range raise
``tflite_resize_nearest``  RESIZE_NEAREST_NEIGHBOR; ``size`` [H, W], ``align_corners``, ``half_pixel_centers``
``tflite_batch_matmul``    BATCH_MATMUL (int8); ``adj_x``, ``adj_y`` (XNNPACK's fp32 requantization under
                           ``xnnpack`` when the right operand's zero point is 0)
``tflite_transpose_conv``  TRANSPOSE_CONV (int8); ``stride``, ``pads``, ``activation``, ``xnnpack_delegated``: the
                           core ``conv2d`` of the equivalent stride-1 convolution on the datapath, each kernel
                           set's requantization on the ``"native"`` one (:mod:`.transpose_conv_ops`)
``tflite_resize_bilinear`` RESIZE_BILINEAR; ``size``, ``align_corners``, ``half_pixel_centers`` (LiteRT's integer
                           kernel, XNNPACK's 11-bit one under ``xnnpack``)
``tflite_maximum``,        MAXIMUM / MINIMUM on the codes; ``tflite_reduce_max`` REDUCE_MAX (``axes``,
``tflite_minimum``         ``keep_dims``); ``tflite_squared_difference``, ``tflite_rsqrt``, ``tflite_prelu``,
                           ``tflite_elu``, ``tflite_sum`` (``axes``, ``keep_dims``), ``tflite_log_softmax``:
                           :mod:`.math_kernels`
``tflite_relu``            RELU / RELU6 / RELU_N1_TO_1 (``activation``): requantizes input -> output
                           scale, then clamps (LiteRT's ``QuantizedReluX``)
``tflite_conv2d``,         CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED of the ``builtin`` and
``tflite_depthwise_conv2d``,  ``xnnpack`` kernel sets: the core MAC op's accumulation on the datapath,
``tflite_fully_connected``    requantized as that kernel set does when the datapath's ``requantization``
                           is ``"native"`` (the default datapath of such graphs), else as the core op
=========================  =====================================================================

(SQUEEZE, EXPAND_DIMS and folded RESHAPEs are the core ``reshape``; SLICE on run-time data is ``tflite_strided_slice``; ADD, AVERAGE_POOL_2D and MAX_POOL_2D
the core ``add``, ``avg_pool2d``, ``max_pool2d``.) Each op also has a float64 reference (``run_float``).

Lookup-table activations: on a datapath that sets ``activation_lut_entries`` (:class:`fxpsim.HardwareConfig`,
per node with overrides), ``tflite_logistic``, ``tflite_tanh``, ``tflite_hard_swish`` and ``tflite_softmax``
compute through :mod:`fxpsim.datapath.lut` instead of LiteRT's arithmetic (whatever the kernel set): an
integer table of that many entries over the input's code range (``activation_lut_interpolation``), rounded
to the output codes with the datapath's ``rounding``; softmax as an exp table on code differences, a 32-bit
saturating integer sum and an exact integer division rounded half up (:func:`fxpsim.datapath.lut.lut_softmax`).
Their trace then carries ``"lut"`` (the table, e.g. ``"256 entries, none interpolation"``), and softmax's
``overflows``/``adds`` count the saturating adds of its sum.

This module holds QUANTIZE / DEQUANTIZE, the element-wise ops, MEAN, PAD and CONCATENATION; the activations
live in :mod:`.activation_ops`, the MAC ops in :mod:`.mac_ops`, on the helpers of :mod:`.op_support`.
"""
from __future__ import annotations

import numpy as np

from ...datapath import tflite as K
from ...graph.ops import OPS, Op, register_op
from .op_support import (_cached, _call, _check_io, _code_move_check, _float_activation, _identity_float, _kernels, _no_trace, _q,
                         _spec)

__all__ = ["TFLITE_OPS", "kernel_support", "KERNEL_LIMITS"]

TFLITE_OPS = ("tflite_quantize", "tflite_dequantize", "tflite_requantize", "tflite_add", "tflite_sub", "tflite_mul",
              "tflite_mean", "tflite_pad", "tflite_concat", "tflite_softmax", "tflite_logistic", "tflite_tanh",
              "tflite_hard_swish", "tflite_leaky_relu", "tflite_relu", "tflite_conv2d",
              "tflite_depthwise_conv2d", "tflite_fully_connected", "tflite_strided_slice", "tflite_split",
              "tflite_gather", "tflite_resize_nearest", "tflite_resize_bilinear",
              "tflite_batch_matmul", "tflite_maximum", "tflite_minimum", "tflite_reduce_max",
              "tflite_squared_difference", "tflite_rsqrt", "tflite_prelu", "tflite_elu", "tflite_sum",
              "tflite_log_softmax", "tflite_transpose_conv")

#: TFLite ops whose arithmetic in a kernel set fxpsim does not reproduce: kernel set -> {op: why}.
KERNEL_LIMITS: dict[str, dict[str, str]] = {"reference": {
    "ELU": "LiteRT's reference op resolver (BUILTIN_REF) has no ELU kernel (the model does not load there); "
           "kernels='builtin' or 'xnnpack' import it",
    "SUM": "LiteRT 2.3.0's reference int8 SUM (BUILTIN_REF) writes codes that do not follow its input (seen live: "
           "-1 for most outputs) and is not reproduced; kernels='builtin' or 'xnnpack' import it"},
    "builtin": {}, "xnnpack": {}}


def kernel_support(tflite_op: str, kernels: str) -> str | None:
    """Why ``tflite_op`` cannot be reproduced bit for bit with the kernel set ``kernels`` (None if it can)."""
    return KERNEL_LIMITS.get(kernels, {}).get(tflite_op)


# ----------------------------------------------------------------------------------------- QUANTIZE / DEQUANTIZE
def _per_sample(kernel_set, fn, x, *args, **kw):
    """``fn`` applied as LiteRT applies it: to one sample (one invoke, batch 1) at a time where the kernel
    set's arithmetic can depend on an element's position in the tensor (LiteRT's optimized x86-64 kernels run
    whole SIMD blocks of the flat tensor one way and the remainder another; XNNPACK falls back to them where
    it does not take an op); at once for the reference kernels."""
    if kernel_set == "reference" or len(x) == 1:
        return fn(x, *args, **kw)
    return np.stack([fn(x[i:i + 1], *args, **kw)[0] for i in range(len(x))])


def _quantize_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    s, z = _q(y)
    kern = _kernels(graph)
    return [_call(node, kern, _per_sample, kern, K.quantize_tflite, ins[0], s, z, y.dtype, kernels=kern)], \
        _no_trace()


def _quantize_check(graph, node):
    _check_io(1, quantized_in=False)(graph, node)
    if not _spec(graph, node.inputs[0]).is_float:
        raise ValueError(f"node {node.name!r} (tflite_quantize): the input must be a float tensor")


def _dequantize_run(graph, node, ins, dp, trace):
    x = _spec(graph, node.inputs[0])
    s, z = _q(x)
    kern = _kernels(graph)
    kw = {} if kern == "reference" else {"kernels": kern}
    return [_call(node, kern, _per_sample, kern, K.dequantize_tflite, ins[0], s, z, **kw)], _no_trace()


def _requantize_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    params = _cached(graph, node, "requantize", lambda: K.requantize_params(
        *_q(x), *_q(y), input_dtype=x.dtype, output_dtype=y.dtype))
    kern = _kernels(graph)
    return [_call(node, kern, _per_sample, kern, K.requantize_tflite, ins[0], params, kernels=kern)], _no_trace()


def _quantize_float(graph, node, ins):
    """Float reference of QUANTIZE: the real values the output codes can hold (clipped to their range)."""
    y = _spec(graph, node.outputs[0])
    lo, hi = y.dequantize(np.array(y.code_range))
    return [np.clip(ins[0], lo, hi)]


register_op(Op("tflite_quantize", _quantize_run, _quantize_float, _quantize_check))
register_op(Op("tflite_dequantize", _dequantize_run, _identity_float, _check_io(1, quantized_out=False)))
register_op(Op("tflite_requantize", _requantize_run, _identity_float, _check_io(1)))


# ----------------------------------------------------------------------------------------- SUB / MUL
def _binary_params(graph, node, factory):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    return _cached(graph, node, factory.__name__, lambda: factory(
        *_q(a), *_q(b), *_q(y), activation=node.attrs.get("activation", "none"), dtype=y.dtype))


def _mul_run(graph, node, ins, dp, trace):
    kern = _kernels(graph)
    params = _binary_params(graph, node, K.mul_params)
    return [_call(node, kern, K.quantized_mul, ins[0], ins[1], params, kernels=kern)], _no_trace()


def _sub_float(graph, node, ins):
    return [_float_activation(ins[0] - ins[1], node.attrs.get("activation"))]


def _mul_float(graph, node, ins):
    return [_float_activation(ins[0] * ins[1], node.attrs.get("activation"))]


def _elementwise_macs(graph, node):
    return 0


def _xnn_act_range(activation, scale, zero_point, dtype):
    r"""XNNPACK's output clamp: ``xnn_qs8_quantize`` of the activation's float bounds,
    :math:`\mathrm{rne}(\mathrm{fl}_{32}(v / s + z))` clamped to the type."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    bounds = {"none": (None, None), "relu": (0.0, None), "relu6": (0.0, 6.0), "relu_n1_to_1": (-1.0, 1.0)}
    f_lo, f_hi = bounds[activation or "none"]

    def q(v):
        r = np.float32(np.float32(v) / np.float32(scale)) + np.float32(zero_point)
        return int(np.rint(np.clip(r, np.float32(lo), np.float32(hi))))
    return (lo if f_lo is None else q(f_lo)), (hi if f_hi is None else q(f_hi))


def _add_sub_run(sign_b):
    def run(graph, node, ins, dp, trace):
        kern = _kernels(graph)
        if kern != "xnnpack" or getattr(dp, "requantization", None) != "native":
            kern = "reference"                 # TFLite's ADD/SUB (the core add follows the datapath's rounding)
        if sign_b < 0:
            params = _binary_params(graph, node, K.sub_params)
            return [K.quantized_sub(ins[0], ins[1], params, kernels=kern)], _no_trace()
        if kern == "reference":
            return OPS["add"].run(graph, node, ins, dp, trace)
        return [K.quantized_add_xnnpack(ins[0], ins[1], **_xnn_add_args(graph, node))], _no_trace()
    return run


def _xnn_add_args(graph, node) -> dict:
    """The keyword arguments of :func:`~fxpsim.datapath.tflite.quantized_add_xnnpack` for an ADD node."""
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    (sa, za), (sb, zb), (so, zo) = _q(a), _q(b), _q(y)
    lo, hi = _cached(graph, node, "xnn_act", lambda: _xnn_act_range(node.attrs.get("activation", "none"),
                                                                     so, zo, y.dtype))
    return dict(scale1=sa, zp1=za, scale2=sb, zp2=zb, out_scale=so, out_zp=zo, act_min=lo, act_max=hi)


def _add_prepare(graph, node, dp, in_shapes):
    r"""A compiled plan's step of ``tflite_add`` (:mod:`fxpsim.graph.plan`): where the node runs XNNPACK's
    ``qs8-vadd`` on int8 codes, a read of its table :math:`t[(a + 128) 256 + b + 128] = y(a, b)`, the node's own
    arithmetic evaluated once on all 65536 code pairs (an elementwise op: each output depends on its two codes
    alone); otherwise the core ``add``'s step (the node then runs as ``add``). Other inputs run the node."""
    if None in in_shapes[:2]:
        return None
    if _kernels(graph) != "xnnpack" or getattr(dp, "requantization", None) != "native":
        prepare = OPS["add"].prepare
        return None if prepare is None else prepare(graph, node, dp, in_shapes)
    if any(_spec(graph, t).dtype != np.int8 for t in (node.inputs[0], node.inputs[1], node.outputs[0])):
        return None
    from ...datapath import conv_int8
    from ...datapath.integer_add import TableAdd
    if not conv_int8.available():
        return None

    def table():
        codes = np.arange(-128, 128, dtype=np.int8)
        t = K.quantized_add_xnnpack(np.repeat(codes, 256), np.tile(codes, 256), **_xnn_add_args(graph, node))
        t.flags.writeable = False
        return t
    shape = np.broadcast_shapes(tuple(in_shapes[0]), tuple(in_shapes[1]))
    call = TableAdd(_cached(graph, node, "xnn_add_table", table), in_shapes[0], in_shapes[1], shape)
    run = OPS["tflite_add"].run

    def step(ins, trace):
        out = call(ins[0], ins[1])
        return ([out], _no_trace()) if out is not None else run(graph, node, ins, dp, trace)
    return step


def _add_float(graph, node, ins):
    return [_float_activation(ins[0] + ins[1], node.attrs.get("activation"))]


register_op(Op("tflite_add", _add_sub_run(1), _add_float, _check_io(2), prepare=_add_prepare))
register_op(Op("tflite_sub", _add_sub_run(-1), _sub_float, _check_io(2)))
register_op(Op("tflite_mul", _mul_run, _mul_float, _check_io(2)))


# ----------------------------------------------------------------------------------------- MEAN
def _batch_axes(node):
    return tuple(int(a) + 1 for a in node.attrs.get("axes", []))


def _mean_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    kern = _kernels(graph)
    params = _cached(graph, node, "mean", lambda: K.mean_params(*_q(x), *_q(y), dtype=y.dtype))
    out = _call(node, kern, K.quantized_mean, ins[0], _batch_axes(node), params,
                keepdims=bool(node.attrs.get("keep_dims", False)), kernels=kern)
    return [out], _no_trace()


def _mean_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step of ``tflite_mean``: :func:`~fxpsim.datapath.tflite.mean_plan` built once for the
    input's shape (the element count, the folded multiplier, the checks); another input runs the node."""
    if in_shapes[0] is None:
        return None
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    kern = _kernels(graph)
    params = _cached(graph, node, "mean", lambda: K.mean_params(*_q(x), *_q(y), dtype=y.dtype))
    shape = tuple(in_shapes[0])
    try:
        plan = K.mean_plan(shape, _batch_axes(node), params, keepdims=bool(node.attrs.get("keep_dims", False)),
                           kernels=kern)
    except (ValueError, NotImplementedError):
        return None                                   # the node's run raises it, named

    def step(ins, trace):
        a = ins[0]
        if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != params.dtype:
            return _mean_run(graph, node, ins, dp, trace)
        return [plan(a)], _no_trace()
    return step


def _mean_float(graph, node, ins):
    return [np.mean(ins[0], axis=_batch_axes(node), keepdims=bool(node.attrs.get("keep_dims", False)))]


register_op(Op("tflite_mean", _mean_run, _mean_float, _check_io(1), prepare=_mean_prepare))


# ----------------------------------------------------------------------------------------- PAD / CONCATENATION
def _pads(node, ndim):
    return [(0, 0)] + [tuple(int(v) for v in p) for p in node.attrs["paddings"]][:ndim - 1]


def _pad_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    value = node.attrs.get("value")
    out = K.quantized_pad(ins[0], _pads(node, ins[0].ndim), zero_point=int(y.zero_point[0]),
                          constant=None if value is None else int(value))
    return [out], _no_trace()


def _pad_float(graph, node, ins):
    y = _spec(graph, node.outputs[0])
    value = node.attrs.get("value")
    fill = 0.0 if value is None else float(y.dequantize(np.array(int(value))))
    return [np.pad(ins[0], _pads(node, ins[0].ndim), constant_values=fill)]


def _pad_check(graph, node):
    _code_move_check(graph, node, "paddings", "one [before, after] pair of paddings")


def _concat_run(graph, node, ins, dp, trace):
    return [K.quantized_concatenation(ins, int(node.attrs["axis"]) + 1)], _no_trace()


def _concat_float(graph, node, ins):
    return [np.concatenate(ins, axis=int(node.attrs["axis"]) + 1)]


def _concat_check(graph, node):
    _check_io((-1,))(graph, node)
    y = _q(_spec(graph, node.outputs[0]))
    for t in node.inputs:
        if _q(_spec(graph, t)) != y:
            raise ValueError(f"node {node.name!r} (tflite_concat): input {t!r} has another scale or zero point "
                             f"than the output (TFLite's int8 CONCATENATION copies codes and requires them equal)")
    if node.attrs.get("activation", "none") != "none":
        raise ValueError(f"node {node.name!r} (tflite_concat): a fused activation is not allowed (TFLite)")


register_op(Op("tflite_pad", _pad_run, _pad_float, _pad_check))
register_op(Op("tflite_concat", _concat_run, _concat_float, _concat_check))

# The activation and MAC ops live in their own modules; importing this module (the graph loads it by name,
# :data:`fxpsim.graph.ops.OP_PROVIDERS`) registers them after the ops above.
from . import activation_ops  # noqa: E402,F401  (tflite_softmax, tflite_logistic, tflite_tanh, ...)
from . import mac_ops  # noqa: E402,F401  (tflite_conv2d, tflite_depthwise_conv2d, tflite_fully_connected)
from . import move_ops  # noqa: E402,F401  (tflite_strided_slice)
from . import gather_ops  # noqa: E402,F401  (tflite_gather, tflite_batch_matmul)
from . import resize_ops  # noqa: E402,F401  (tflite_resize_nearest, tflite_resize_bilinear)
from . import int16_ops  # noqa: E402,F401  (tflite_int16_add, tflite_int16_sub, tflite_int16_mul, ...)
from . import math_kernels  # noqa: E402,F401  (tflite_maximum, tflite_rsqrt, tflite_prelu, tflite_sum, ...)
from . import transpose_conv_ops  # noqa: E402,F401  (tflite_transpose_conv)

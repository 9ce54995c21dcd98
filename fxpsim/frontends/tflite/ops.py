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
``tflite_relu``            RELU / RELU6 / RELU_N1_TO_1 (``activation``): requantizes input -> output
                           scale, then clamps (LiteRT's ``QuantizedReluX``)
``tflite_conv2d``,         CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED of the ``builtin`` and
``tflite_depthwise_conv2d``,  ``xnnpack`` kernel sets: the core MAC op's accumulation on the datapath,
``tflite_fully_connected``    requantized as that kernel set does when the datapath's ``requantization``
                           is ``"native"`` (the default datapath of such graphs), else as the core op
=========================  =====================================================================

(SQUEEZE, EXPAND_DIMS and folded RESHAPEs are the core ``reshape``; ADD, AVERAGE_POOL_2D and MAX_POOL_2D
the core ``add``, ``avg_pool2d``, ``max_pool2d``.) Each op also has a float64 reference (``run_float``).

Lookup-table activations: on a datapath that sets ``activation_lut_entries`` (:class:`fxpsim.HardwareConfig`,
per node with overrides), ``tflite_logistic``, ``tflite_tanh``, ``tflite_hard_swish`` and ``tflite_softmax``
compute through :mod:`fxpsim.datapath.lut` instead of LiteRT's arithmetic (whatever the kernel set): an
integer table of that many entries over the input's code range (``activation_lut_interpolation``), rounded
to the output codes with the datapath's ``rounding``; softmax as an exp table on code differences, a 32-bit
saturating integer sum and an exact integer division rounded half up (:func:`fxpsim.datapath.lut.lut_softmax`).
Their trace then carries ``"lut"`` (the table, e.g. ``"256 entries, none interpolation"``), and softmax's
``overflows``/``adds`` count the saturating adds of its sum.
"""
from __future__ import annotations

import numpy as np

from ...datapath import lut as _lut
from ...datapath import tflite as K
from ...datapath.integer_ops import (quantized_conv2d, quantized_depthwise_conv2d, quantized_fully_connected)
from ...datapath.requantize import (Requantizer, _srdhm, _wrap_int32, activation_range,
                                   multiply_by_quantized_multiplier, quantize_multiplier)
from ...core.fixed import Format
from ...graph.ops import OPS, Op, register_op
from ...graph.mac_ops import refuse_unmodelled_knobs  # noqa: E402

__all__ = ["TFLITE_OPS", "kernel_support", "KERNEL_LIMITS"]

TFLITE_OPS = ("tflite_quantize", "tflite_dequantize", "tflite_requantize", "tflite_add", "tflite_sub", "tflite_mul",
              "tflite_mean", "tflite_pad", "tflite_concat", "tflite_softmax", "tflite_logistic", "tflite_tanh",
              "tflite_hard_swish", "tflite_leaky_relu", "tflite_relu", "tflite_conv2d",
              "tflite_depthwise_conv2d", "tflite_fully_connected")

#: TFLite ops whose arithmetic in a kernel set fxpsim does not reproduce: kernel set -> {op: why}.
KERNEL_LIMITS: dict[str, dict[str, str]] = {"reference": {}, "builtin": {}, "xnnpack": {}}


def kernel_support(tflite_op: str, kernels: str) -> str | None:
    """Why ``tflite_op`` cannot be reproduced bit for bit with the kernel set ``kernels`` (None if it can)."""
    return KERNEL_LIMITS.get(kernels, {}).get(tflite_op)


# ----------------------------------------------------------------------------------------- helpers
def _spec(graph, name):
    return graph.tensors[name]


def _kernels(graph) -> str:
    return graph.meta.get("kernels", "reference") if isinstance(graph.meta, dict) else "reference"


def _q(spec):
    """(float32 scale, int zero point) of a per-tensor quantized tensor."""
    return np.float32(spec.scale[0]), int(spec.zero_point[0])


def _no_trace(clipped: int = 0) -> dict:
    return {"overflows": 0, "adds": 0, "clipped": clipped, "acc": None}


def _cached(graph, node, key, make):
    cache = graph.__dict__.setdefault("_tflite_params", {})
    k = (node.name, key)
    v = cache.get(k)
    if v is None:
        v = cache[k] = make()
    return v


def _float_activation(y, activation):
    if not activation or activation == "none":
        return y
    lo, hi = {"relu": (0.0, np.inf), "relu6": (0.0, 6.0), "relu_n1_to_1": (-1.0, 1.0)}[activation]
    return np.clip(y, lo, hi)


def _unavailable(node, kernels, exc):
    return ValueError(f"node {node.name!r} ({node.attrs.get('tflite_op', node.op)}): LiteRT's "
                      f"kernels={kernels!r} arithmetic is not reproduced by fxpsim ({exc})")


def _call(node, kernel_set, fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except NotImplementedError as exc:
        raise _unavailable(node, kernel_set, exc) from None


def _check_io(n_in: int | tuple, n_out: int = 1, quantized_in=True, quantized_out=True):
    counts = (n_in,) if isinstance(n_in, int) else n_in

    def check(graph, node):
        ins = [t for t in node.inputs if t]
        if (counts[0] >= 0 and len(ins) not in counts) or len(node.outputs) != n_out:
            raise ValueError(f"node {node.name!r} ({node.op}): needs {' or '.join(map(str, counts))} input(s) and "
                             f"{n_out} output(s)")
        for t in (ins if quantized_in else []) + (list(node.outputs) if quantized_out else []):
            s = _spec(graph, t)
            if s.is_float or s.scale is None or s.per_channel:
                raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} needs integer codes with one "
                                 f"scale and zero point")
    return check


def _identity_float(graph, node, ins):
    return [ins[0]]


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
        a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
        (sa, za), (sb, zb), (so, zo) = _q(a), _q(b), _q(y)
        lo, hi = _cached(graph, node, "xnn_act", lambda: _xnn_act_range(node.attrs.get("activation", "none"),
                                                                         so, zo, y.dtype))
        return [K.quantized_add_xnnpack(ins[0], ins[1], scale1=sa, zp1=za, scale2=sb, zp2=zb, out_scale=so,
                                        out_zp=zo, act_min=lo, act_max=hi)], _no_trace()
    return run


def _add_float(graph, node, ins):
    return [_float_activation(ins[0] + ins[1], node.attrs.get("activation"))]


register_op(Op("tflite_add", _add_sub_run(1), _add_float, _check_io(2)))
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


def _mean_float(graph, node, ins):
    return [np.mean(ins[0], axis=_batch_axes(node), keepdims=bool(node.attrs.get("keep_dims", False)))]


register_op(Op("tflite_mean", _mean_run, _mean_float, _check_io(1)))


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
    _check_io(1)(graph, node)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    if _q(x) != _q(y):
        raise ValueError(f"node {node.name!r} (tflite_pad): TFLite's quantized PAD needs the same scale and zero "
                         f"point in and out")
    if len(node.attrs.get("paddings", [])) != len(x.shape):
        raise ValueError(f"node {node.name!r} (tflite_pad): paddings must have one pair per axis of "
                         f"{list(x.shape)}")


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


# ----------------------------------------------------------------------------------------- activations
#: TFLite activation op -> the real function of its lookup table (:func:`fxpsim.datapath.lut.lut_functions`)
_LUT_FUNCTION = {"tflite_logistic": "logistic", "tflite_tanh": "tanh", "tflite_hard_swish": "hard_swish"}


def _lut_knobs(dp):
    """``(entries, interpolation)`` of a datapath that sets ``activation_lut_entries``, else ``None``."""
    entries = getattr(dp, "activation_lut_entries", None)
    if not entries:
        return None
    return int(entries), str(getattr(dp, "activation_lut_interpolation", "none") or "none")


def _lut_check_entries(node, x, entries, interpolation):
    try:
        _lut.check_entries(entries, x.bits, interpolation, where="activations.lut_entries")
    except ValueError as exc:
        raise ValueError(f"node {node.name!r} ({node.op}, input {x.bits}-bit codes): {exc}") from None


def _lut_unary_run(graph, node, ins, dp, knobs):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    entries, interpolation = knobs
    rounding = getattr(dp.rounding, "value", dp.rounding)
    _lut_check_entries(node, x, entries, interpolation)

    def make():
        (sx, zx), (sy, zy) = _q(x), _q(y)
        lo, hi = y.code_range
        return _lut.build_table(_lut.lut_functions()[_LUT_FUNCTION[node.op]], input_bits=x.bits,
                                input_min=x.code_range[0], input_scale=float(sx), input_zero_point=zx,
                                output_scale=float(sy), output_zero_point=zy, output_lo=lo, output_hi=hi,
                                entries=entries, interpolation=interpolation, rounding=rounding)
    table = _cached(graph, node, ("lut", entries, interpolation, rounding), make)
    return [_lut.lut_lookup(ins[0], table).astype(y.dtype)], {**_no_trace(), "lut": table.describe()}


def _lut_softmax_run(graph, node, ins, dp, knobs):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    entries, interpolation = knobs
    rounding = getattr(dp.rounding, "value", dp.rounding)
    _lut_check_entries(node, x, entries, interpolation)
    (sx, _), (sy, zy) = _q(x), _q(y)
    lo, hi = y.code_range
    beta = float(node.attrs.get("beta", 1.0))
    try:
        table = _cached(graph, node, ("lut", entries, interpolation, rounding), lambda: _lut.softmax_exp_table(
            input_bits=x.bits, input_scale=float(sx), beta=beta, entries=entries, interpolation=interpolation,
            rounding=rounding))
        out, info = _lut.lut_softmax(ins[0], input_bits=x.bits, input_scale=float(sx), beta=beta,
                                     output_scale=float(sy), output_zero_point=zy, output_lo=lo, output_hi=hi,
                                     entries=entries, interpolation=interpolation, rounding=rounding, table=table)
    except ValueError as exc:
        raise ValueError(f"node {node.name!r} ({node.op}): {exc}") from None
    return [out.astype(y.dtype)], {**_no_trace(), "overflows": info["overflows"], "adds": info["adds"],
                                   "lut": info["table"].describe()}


def _softmax_run(graph, node, ins, dp, trace):
    knobs = _lut_knobs(dp)
    if knobs is not None:
        return _lut_softmax_run(graph, node, ins, dp, knobs)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    sx, _ = _q(x)
    sy, zy = _q(y)
    params = _cached(graph, node, "softmax", lambda: K.softmax_params(
        sx, beta=float(node.attrs.get("beta", 1.0)), output_scale=sy, output_zero_point=zy,
        input_dtype=x.dtype, output_dtype=y.dtype))
    kern = _kernels(graph)
    return [_call(node, kern, K.quantized_softmax, ins[0], params, kernels=kern)], _no_trace()


def _softmax_float(graph, node, ins):
    z = float(node.attrs.get("beta", 1.0)) * ins[0]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return [e / e.sum(axis=-1, keepdims=True)]


def _unary_run(factory, kernel_fn, with_kernels=True, extra=()):
    def run(graph, node, ins, dp, trace):
        knobs = _lut_knobs(dp) if factory in (K.logistic_params, K.tanh_params, K.hard_swish_params) else None
        if knobs is not None:
            return _lut_unary_run(graph, node, ins, dp, knobs)
        x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
        kw = {k: node.attrs[k] for k in extra}
        params = _cached(graph, node, factory.__name__, lambda: factory(*_q(x), *_q(y), **kw, dtype=y.dtype)
                         if factory not in (K.logistic_params, K.tanh_params) else
                         factory(*_q(x), output_scale=_q(y)[0], output_zero_point=_q(y)[1], dtype=y.dtype))
        kern = _kernels(graph)
        if with_kernels:
            return [_call(node, kern, kernel_fn, ins[0], params, kernels=kern)], _no_trace()
        return [kernel_fn(ins[0], params)], _no_trace()
    return run


def _relu_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])

    def make():
        (sx, zx), (sy, zy) = _q(x), _q(y)
        m, s = quantize_multiplier(float(np.float32(sx / sy)))      # float32 quotient, as ReluPrepare
        lo, hi = activation_range(node.attrs.get("activation", "relu"), float(sy), zy, y.dtype)
        return m, s, zx, zy, lo, hi
    m, s, zx, zy, lo, hi = _cached(graph, node, "relu", make)
    v = multiply_by_quantized_multiplier(ins[0].astype(np.int64) - zx, m, s) + zy
    return [np.clip(v, lo, hi).astype(y.dtype)], _no_trace()


def _relu_float(graph, node, ins):
    return [_float_activation(ins[0], node.attrs.get("activation", "relu"))]


def _logistic_float(graph, node, ins):
    return [1.0 / (1.0 + np.exp(-ins[0]))]


def _tanh_float(graph, node, ins):
    return [np.tanh(ins[0])]


def _hard_swish_float(graph, node, ins):
    return [ins[0] * np.clip(ins[0] + 3.0, 0.0, 6.0) / 6.0]


def _leaky_relu_float(graph, node, ins):
    a = float(node.attrs.get("alpha", 0.2))
    return [np.where(ins[0] >= 0, ins[0], a * ins[0])]


register_op(Op("tflite_softmax", _softmax_run, _softmax_float, _check_io(1)))
register_op(Op("tflite_logistic", _unary_run(K.logistic_params, K.quantized_logistic), _logistic_float,
               _check_io(1)))
register_op(Op("tflite_tanh", _unary_run(K.tanh_params, K.quantized_tanh), _tanh_float, _check_io(1)))
register_op(Op("tflite_hard_swish", _unary_run(K.hard_swish_params, K.quantized_hard_swish, with_kernels=False),
               _hard_swish_float, _check_io(1)))
register_op(Op("tflite_leaky_relu", _unary_run(K.leaky_relu_params, K.quantized_leaky_relu, extra=("alpha",)),
               _leaky_relu_float, _check_io(1)))
register_op(Op("tflite_relu", _relu_run, _relu_float, _check_io(1)))
for _op_name in ("tflite_logistic", "tflite_tanh", "tflite_hard_swish", "tflite_softmax"):
    _lut.register_lut_op(_op_name)


# ----------------------------------------------------------------------------------------- MAC ops (builtin/xnnpack)
_CORE_MAC = {"tflite_conv2d": "conv2d", "tflite_depthwise_conv2d": "depthwise_conv2d",
             "tflite_fully_connected": "fully_connected"}


def _mbqm_tie_up(acc, m, s):
    """LiteRT's optimized ``MultiplyByQuantizedMultiplier`` (x86-64): gemmlowp's SRDHM, then a right shift
    that rounds ties toward :math:`+\\infty` (``(v + 2^{e-1}) >> e``) instead of away from zero."""
    acc = np.asarray(acc, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    v = _srdhm(_wrap_int32(acc << left) if np.any(left) else acc, m)
    return (v + ((np.int64(1) << right) >> 1)) >> right


def _shadow(graph, node):
    """The node as the core MAC op (same tensors and attributes)."""
    cache = graph.__dict__.setdefault("_tflite_shadow", {})
    n = cache.get(node.name)
    if n is None:
        from ...graph.ir import Node
        n = cache[node.name] = Node(node.name, _CORE_MAC[node.op], node.inputs, node.outputs, node.attrs)
    return n


def _native_requant(graph, node, acc, kernels):
    """Output codes (before the clamp) of the kernel set's own requantization of int32 accumulators."""
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    sx, sy = np.float32(x.scale[0]), np.float32(y.scale[0])
    sw = w.scale.astype(np.float32)
    zy = int(y.zero_point[0])
    if kernels == "xnnpack":
        scale = _cached(graph, node, "xnn_scale", lambda: (sx * sw / sy).astype(np.float32))
        f = acc.astype(np.float32) * scale
        lo, hi = np.float32(-128 - zy), np.float32(127 - zy)
        return np.rint(np.clip(f, lo, hi)).astype(np.int64) + zy

    def params():
        if node.op == "tflite_fully_connected" and sw.size == 1:
            real = np.float64(np.float32(sx * sw[0])) / np.float64(sy)     # GetQuantizedConvolutionMultipler
            m, s = quantize_multiplier(np.atleast_1d(real))
        else:
            m, s = quantize_multiplier(np.float64(sx) * sw.astype(np.float64) / np.float64(sy))
        return np.asarray(m, np.int64), np.asarray(s, np.int64)
    m, s = _cached(graph, node, "builtin_mult", params)
    return _mbqm_tie_up(acc, m, s) + zy


def _native_mac_run(graph, node, ins, dp, trace):
    shadow = _shadow(graph, node)
    if getattr(dp, "requantization", None) != "native":
        return OPS[shadow.op].run(graph, shadow, ins, dp, trace)
    refuse_unmodelled_knobs(node, dp, f"LiteRT {_kernels(graph)} kernels")
    kernels = _kernels(graph)
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    bias = ins[2] if len(node.inputs) > 2 and node.inputs[2] else None
    wz = w.zero_point
    act = node.attrs.get("activation", "none")
    lo, hi = y.code_range
    if act != "none":
        a_lo, a_hi = activation_range(act, float(y.scale[0]), int(y.zero_point[0]), y.dtype)
        lo, hi = max(lo, a_lo), min(hi, a_hi)
    overflow = getattr(dp.accumulator_overflow, "value", dp.accumulator_overflow)
    bias_clipped = 0
    if bias is not None:     # a bias wider than the accumulator saturates into it (as the core MAC ops)
        lo_acc, hi_acc = -(1 << (dp.accumulator_bits - 1)), (1 << (dp.accumulator_bits - 1)) - 1
        clipped_bias = np.clip(bias, lo_acc, hi_acc)
        bias_clipped = int(np.count_nonzero(clipped_bias != bias))
        bias = clipped_bias
    common = dict(requant=Requantizer("float", scale=(1.0,)), x_zp=int(x.zero_point[0]),
                  w_zp=(wz if wz.size > 1 else int(wz[0])) if np.any(wz) else 0, out_zp=0,
                  out_dtype=np.int32, acc=Format.integer(dp.accumulator_bits), overflow=overflow,
                  order=dp.accumulator_order, bias_at="init" if dp.bias_add == "preload" else "end")
    if shadow.op == "fully_connected":
        res = quantized_fully_connected(ins[0], ins[1], bias, **common)
    else:
        from ...graph.ops import _pair, _padding
        fn = quantized_conv2d if shadow.op == "conv2d" else quantized_depthwise_conv2d
        res = fn(ins[0], ins[1], bias, stride=_pair(node.attrs, "stride"), padding=_padding(node.attrs),
                 dilation=_pair(node.attrs, "dilation"), **common)
    pre = _native_requant(graph, node, res.acc, kernels)
    out = np.clip(pre, lo, hi).astype(y.dtype)
    info = None
    if trace:
        k = int(np.prod(ins[1].shape[1:])) if shadow.op != "depthwise_conv2d" else int(np.prod(ins[1].shape[1:3]))
        clipped = (pre > hi) if act != "none" else (pre > hi) | (pre < lo)
        info = {"overflows": int(res.overflows), "acc": res.acc, "clipped": int(np.count_nonzero(clipped)),
                "bias_clipped": bias_clipped,
                "adds": int(out.size) * (k + (bias is not None and dp.bias_add == "after"))}
    return [out], info


for _name, _core in _CORE_MAC.items():
    _c = OPS[_core]
    register_op(Op(_name, _native_mac_run,
                   (lambda core: lambda graph, node, ins: OPS[core].run_float(graph, _shadow(graph, node), ins))(_core),
                   (lambda core: lambda graph, node: OPS[core].check(graph, _shadow(graph, node)))(_core),
                   (lambda core: lambda graph, node: OPS[core].macs(graph, _shadow(graph, node)))(_core),
                   (lambda core: lambda graph, node: OPS[core].worst_case_sum(graph, _shadow(graph, node)))(_core)))

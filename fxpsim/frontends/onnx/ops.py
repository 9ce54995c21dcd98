"""The ops of graphs imported from ONNX (:func:`fxpsim.import_onnx`), registered in :data:`fxpsim.graph.ops.OPS`.

Every op computes integer codes on any datapath. With ``requantization="native"`` (the datapath an imported
graph records in ``meta["datapath"]``) it is exactly what onnxruntime's CPU execution provider computes
(:mod:`fxpsim.datapath.onnxruntime.mlas`); with another scheme (``tflite-double``, ``tflite-single``, ``shift``,
``float``) the MAC ops requantize through :func:`fxpsim.graph.ops.requantizer_for`. Accumulation always goes
through :mod:`fxpsim.datapath.accumulate` with the datapath's accumulator width, overflow mode, order and
bias placement (onnxruntime: int32 that wraps, bias added after the sum).

====================  =================================================================================
op                    inputs / attributes
====================  =================================================================================
``onnx_quantize``     float x -> codes (QuantizeLinear, the output tensor's scale and zero point)
``onnx_dequantize``   codes -> float32 (DequantizeLinear)
``onnx_reinterpret``  codes -> the same codes, read with other quantization parameters (a tensor two
                      consumers dequantize differently)
``onnx_requantize``   codes -> codes: ``Q(clip(DQ(x), clip_min, clip_max))`` in float32 (a DQ -> Q pair,
                      or a Relu / Clip onnxruntime runs in float between them); ``clip_min``, ``clip_max``
``transpose``         ``perm`` (per sample, the batch axis excluded)
``qlinear_conv``      x (NHWC), w [O, KH, KW, C/group], optional int32 bias [O]; ``stride``, ``padding``
                      ``[[top, bottom], [left, right]]``, ``dilation``, ``group``, ``ort_kernel``
``qlinear_matmul``    x [..., K], w [O, K], optional int32 bias [O]; ``alpha``, ``ort_kernel``, ``onnx_op``
``conv_integer``      ConvInteger: as ``qlinear_conv`` without requantization (int32 out); ``x_zero_point``,
                      ``w_zero_point``
``matmul_integer``    MatMulInteger: as ``qlinear_matmul`` without requantization; zero points as above
``qlinear_add``       a, b (numpy broadcasting); ``ort_kernel``, ``broadcast``, ``u8_shift``
``qlinear_mul``       a, b; ``ort_kernel``, ``u8_shift``
``qlinear_avg_pool``  ``pool_size``, ``stride``, ``padding``, ``count_include_pad``, ``global_path``,
                      ``u8_shift``
``qlinear_concat``    inputs of any quantization; ``axis`` (per sample)
====================  =================================================================================

``ort_kernel``: ``"qlinear"`` when onnxruntime runs the node as its fused integer kernel, ``"float"`` when its
graph optimizer leaves the QDQ group unfused (x86 does not fuse int8-activation Conv/MatMul, nor groups whose
operand types differ after its int8 -> uint8 conversion) and it runs DequantizeLinear, the float32 op and
QuantizeLinear. A ``"float"`` node follows that float32 path only on the native int32 datapath; on any other
datapath it is an integer MAC like the others. ``u8_shift``: onnxruntime converted the node's int8 tensors to
uint8 (code + 128) before fusing it, which changes the float32 rounding of QLinearAdd, QLinearMul and
QLinearAveragePool (their output zero point is added before rounding).
``broadcast``: which operand is constant along onnxruntime's innermost broadcast span (``"none"``,
``"a_scalar"``, ``"b_scalar"``): QLinearAdd's formula depends on it.

``u8s8_pairs`` (MAC ops that onnxruntime runs with its uint8 x int8 integer kernel): ``"exact"`` (the
default; CPUs with VNNI, ARM) or ``"saturate16"`` (x86-64 with AVX2 and no VNNI: the raw products of
adjacent reduction elements summed in int16 with saturation,
:math:`\\mathrm{acc} = \\sum_j \\mathrm{sat}_{16}(a_{2j} w_{2j} + a_{2j+1} w_{2j+1}) - z_a \\sum w - z_w \\sum a
+ K z_a z_w`, :mod:`fxpsim.datapath.onnxruntime.x86_pairs`). ``"saturate16"`` is onnxruntime's kernel, not a datapath
knob: it runs only on onnxruntime's datapath (native requantization, int32 wrapping accumulator) and is
refused with a ValueError on any other. On a MAC node, ``u8_shift`` means that onnxruntime multiplies the
int8 activation codes + 128 (its int8 -> uint8 rewrite), which matters only for the pair saturation.
"""
from __future__ import annotations

import numpy as np

from ...core.fixed import FixedArray, Format, Overflow, from_float, from_raw
from ...datapath import accumulate as _acc
from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import x86_pairs as _x86
from ...datapath.integer_ops import quantized_add
from ...datapath.requantize import (Requantizer, multiply_by_quantized_multiplier, quantize_multiplier,
                                   requantize_float, requantize_shift)
from ...graph.ops import Op, register_op as _register_op, requantizer_for
from ...graph.mac_ops import refuse_unmodelled_knobs  # noqa: E402

__all__ = ["ONNX_OPS", "is_native", "is_onnxruntime_datapath"]

F32 = np.float32


# ----------------------------------------------------------------------------------------- helpers
def _representable(graph, node, outs):
    """Real values clamped to each quantized output's representable range :math:`s\\,[q_{min} - z, q_{max} - z]`
    (what the QuantizeLinear of a QDQ model implements, e.g. a ReLU that quantize_static folded into it)."""
    res = []
    for name, y in zip(node.outputs, outs):
        spec = graph.tensors[name]
        if spec.is_float or spec.scale is None:
            res.append(y)
            continue
        lo, hi = spec.code_range
        shape = spec.channel_shape(np.ndim(y))
        z, s = spec.zero_point.reshape(shape), spec.scale.reshape(shape)
        res.append(np.clip(y, (lo - z) * s, (hi - z) * s))
    return res


def register_op(op: Op) -> Op:
    """Register ``op`` with a float reference that saturates quantized outputs to their real range."""
    inner = op.run_float

    def run_float(graph, node, ins):
        return _representable(graph, node, inner(graph, node, ins))

    return _register_op(Op(op.name, op.run, run_float, op.check, op.macs, op.worst_case_sum))


def _spec(graph, name):
    return graph.tensors[name]


def _no_trace() -> dict:
    return {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def _name(value) -> str:
    return str(getattr(value, "value", value))


def is_native(dp) -> bool:
    """The datapath asks for the source runtime's own arithmetic."""
    return getattr(dp, "requantization", None) == "native"


def is_onnxruntime_datapath(dp) -> bool:
    """Native requantization on onnxruntime's int32 wrapping accumulator: the datapath on which nodes that
    onnxruntime runs in float32 (``ort_kernel="float"``) follow its float32 kernels."""
    return (is_native(dp) and int(dp.accumulator_bits) == 32
            and Overflow.parse(dp.accumulator_overflow) is Overflow.WRAP)


def _zp(spec) -> int:
    return int(spec.zero_point[0]) if spec.zero_point is not None else 0


def _scale(spec) -> float:
    return float(spec.scale[0])


def _pair(attrs, key, default=1):
    v = attrs.get(key, default)
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[1]))


def _pads(attrs):
    p = attrs.get("padding", [[0, 0], [0, 0]])
    return (int(p[0][0]), int(p[0][1])), (int(p[1][0]), int(p[1][1]))


def _wzp(spec):
    """Weight zero points as an int (per tensor) or an array over the output channels."""
    z = np.asarray(spec.zero_point if spec.zero_point is not None else [0], np.int64)
    return int(z[0]) if z.size == 1 else z


def _overflow_at(dp) -> str:
    return "end" if getattr(dp, "overflow_at", "add") == "end" else "every"


def _acc_format(dp) -> Format:
    return Format.integer(min(int(dp.accumulator_bits), 62))


def _bias_codes(bias, dp, fmt: Format):
    """The int32 bias in the datapath's bias register: saturated to ``bias_bits`` (a HardwareConfig field;
    default the accumulator width), which the accumulator always holds."""
    b = np.asarray(bias, np.int64)
    bits = min(int(getattr(dp, "bias_bits", None) or fmt.word), fmt.word)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(b, lo, hi)


def _finish_bias(acc: FixedArray, bias, dp):
    """Bias added after the sum: one more add through the accumulator's overflow mode."""
    raw, overflows = acc.raw, int(acc.overflows)
    if bias is None:
        return raw, overflows
    total = raw + bias
    if int(total.min()) < acc.fmt.min_code or int(total.max()) > acc.fmt.max_code:
        full = from_raw(np.broadcast_to(bias, raw.shape).copy(), Format.integer(acc.fmt.word))
        fitted = (acc + full).cast(acc.fmt, overflow=_name(dp.accumulator_overflow))
        return fitted.raw, overflows + int(fitted.overflows)
    return total, overflows


def _integer_mac(graph, node, ins, dp, x_zp, w_zp, bias):
    """Accumulator codes (channels last, int64) and overflow count of a conv / matmul node on ``dp``."""
    x, w = ins[0], ins[1]
    fmt = _acc_format(dp)
    overflow = _name(dp.accumulator_overflow)
    preload = getattr(dp, "bias_add", "after") == "preload"
    b = None if bias is None else _bias_codes(bias, dp, fmt)
    xo = x.astype(np.int64) - int(x_zp)
    wz = np.asarray(w_zp, np.int64)
    wo = w.astype(np.int64) - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim else wz)
    xo = xo.astype(np.int32 if max(abs(int(xo.min(initial=0))), int(xo.max(initial=0))) >= 1 << 15 else np.int16)
    wo = wo.astype(np.int32 if max(abs(int(wo.min(initial=0))), int(wo.max(initial=0))) >= 1 << 15 else np.int16)
    common = dict(acc=fmt, overflow=overflow, order=dp.accumulator_order, overflow_at=_overflow_at(dp))
    if node.op in ("qlinear_conv", "conv_integer"):
        groups = int(node.attrs.get("group", 1))
        out_shape = _conv_out_shape(node, x.shape, w.shape)
        init = np.broadcast_to(b, out_shape).copy() if (b is not None and preload) else None
        res = _acc.conv2d(xo, np.ascontiguousarray(np.transpose(wo, (1, 2, 3, 0))), stride=_pair(node.attrs, "stride"),
                          padding=_pads(node.attrs), dilation=_pair(node.attrs, "dilation"), groups=groups,
                          init=init, **common)
    else:
        out_shape = x.shape[:-1] + (w.shape[0],)
        init = np.broadcast_to(b, out_shape).copy() if (b is not None and preload) else None
        res = _acc.matmul(xo, np.ascontiguousarray(wo.T), init=init, **common)
    return _finish_bias(res, None if (b is None or preload) else b, dp)


def _conv_out_shape(node, x_shape, w_shape):
    (pt, pb), (pl, pr) = _pads(node.attrs)
    sh, sw = _pair(node.attrs, "stride")
    dh, dw = _pair(node.attrs, "dilation")
    oh = (x_shape[1] + pt + pb - dh * (w_shape[1] - 1) - 1) // sh + 1
    ow = (x_shape[2] + pl + pr - dw * (w_shape[2] - 1) - 1) // sw + 1
    return (x_shape[0], oh, ow, w_shape[0])


def _scheme(dp, dense: bool) -> str:
    scheme = dp.requantization
    if dense and getattr(dp, "dense_requantization", None):
        scheme = dp.dense_requantization
    return scheme


class _SchemeView:
    """A datapath seen with another requantization scheme (dense layers' ``dense_requantization``)."""

    def __init__(self, dp, scheme):
        self._dp, self.requantization = dp, scheme

    def __getattr__(self, item):
        return getattr(self._dp, item)


def _generic_requant(graph, node, dp, acc, y):
    """Requantize a MAC node's accumulator with the datapath's (non-native) scheme, add the zero point and
    clamp to the output type's range; returns (codes, pre-clamp values)."""
    dense = node.op == "qlinear_matmul"
    view = _SchemeView(dp, _scheme(dp, dense)) if dense else dp
    alpha = float(node.attrs.get("alpha", 1.0))
    if alpha == 1.0:
        rq = requantizer_for(graph, node, view)
    else:
        x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
        kinds = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}
        scheme = view.requantization
        if scheme not in kinds:
            raise ValueError(f"node {node.name!r}: requantization scheme {scheme!r} is not one of {sorted(kinds)}")
        rq = Requantizer.tflite(float(F32(alpha) * F32(_scale(x))), w.scale, _scale(y), kind=kinds[scheme],
                                rounding=_name(dp.rounding))
    pre = rq(acc, axis=-1) + _zp(y)
    lo, hi = y.code_range
    return np.clip(pre, lo, hi).astype(y.dtype), pre


def _requant_real(acc, real, dp):
    """``acc * real`` (real > 0, float64, broadcast against ``acc``) rounded with the datapath's scheme."""
    scheme = dp.requantization
    acc = np.asarray(acc, np.int64)
    real = np.broadcast_to(np.asarray(real, np.float64), acc.shape)
    out = np.empty(acc.shape, np.int64)
    for r in np.unique(real):
        sel = real == r
        a = acc[sel]
        if scheme in ("tflite-double", "tflite-single"):
            kind = "single" if scheme == "tflite-single" else "double"
            m, s = quantize_multiplier(np.atleast_1d(r), single_rounding=kind == "single")
            out[sel] = multiply_by_quantized_multiplier(a, int(m[0]), int(s[0]), kind)
        elif scheme == "shift":
            out[sel] = requantize_shift(a, -int(np.round(np.log2(r))), _name(dp.rounding))
        elif scheme == "float":
            out[sel] = requantize_float(a, float(r), _name(dp.rounding))
        else:
            raise ValueError(f"requantization scheme {scheme!r} is not one of native, tflite-double, "
                             "tflite-single, shift, float")
    return out


def _clipped(pre, lo, hi) -> int:
    return int(np.count_nonzero((pre < lo) | (pre > hi)))


def _dequant_weights(spec, data):
    """DequantizeLinear of constant codes per output channel (axis 0) in float32."""
    return K.dequantize_linear(data, spec.scale if spec.per_channel else _scale(spec),
                               spec.zero_point if spec.per_channel else _zp(spec), axis=0 if spec.per_channel else None)


def _float64_weights(spec, data):
    return spec.dequantize(data)


# ----------------------------------------------------------------------------------------- Q / DQ / layout
def _qparams(spec, ndim):
    """(scale, zero point) broadcastable against an array of ``ndim`` dims (batch first)."""
    shape = spec.channel_shape(ndim)
    return spec.scale.astype(F32).reshape(shape), spec.zero_point.reshape(shape)


def _quantize_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    lo, hi = y.code_range
    x = np.asarray(ins[0], F32)
    s, z = _qparams(y, x.ndim)
    if is_native(dp):
        out = K.quantize_linear(x, s, z, y.dtype)
        clipped = 0
        if trace:
            with np.errstate(all="ignore"):
                v = np.rint(x / s).astype(np.float64) + z
            clipped = _clipped(v, lo, hi)
        return [out], {**_no_trace(), "clipped": clipped}
    codes = from_float(x.astype(np.float64) / s.astype(np.float64), Format.integer(62),
                       rounding=_name(dp.rounding)).raw
    pre = codes + z
    return [np.clip(pre, lo, hi).astype(y.dtype)], {**_no_trace(), "clipped": _clipped(pre, lo, hi)}


def _dequantize_run(graph, node, ins, dp, trace):
    x = _spec(graph, node.inputs[0])
    s, z = _qparams(x, np.ndim(ins[0]))
    return [K.dequantize_linear(ins[0], s, z)], _no_trace()


def _reinterpret_run(graph, node, ins, dp, trace):
    return [ins[0]], _no_trace()


def _reinterpret_float(graph, node, ins):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    codes = np.asarray(ins[0], np.float64) / _scale(x) + _zp(x)
    return [(codes - _zp(y)) * _scale(y)]


def _requantize_codes(graph, node, x_codes):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    v = K.dequantize_linear(x_codes, _scale(x), _zp(x))
    lo_c, hi_c = node.attrs.get("clip_min"), node.attrs.get("clip_max")
    if lo_c is not None:
        v = np.maximum(v, F32(lo_c))
    if hi_c is not None:
        v = np.minimum(v, F32(hi_c))
    return K.quantize_linear(v, _scale(y), _zp(y), y.dtype)


def _requantize_run(graph, node, ins, dp, trace):
    return [_requantize_codes(graph, node, ins[0])], _no_trace()


def _identity_float(graph, node, ins):
    return [np.asarray(ins[0], np.float64)]


def _clip_float(graph, node, ins):
    v = np.asarray(ins[0], np.float64)
    if node.attrs.get("clip_min") is not None:
        v = np.maximum(v, float(F32(node.attrs["clip_min"])))
    if node.attrs.get("clip_max") is not None:
        v = np.minimum(v, float(F32(node.attrs["clip_max"])))
    return [v]


def _perm(node):
    return (0,) + tuple(int(p) + 1 for p in node.attrs["perm"])


def _transpose_run(graph, node, ins, dp, trace):
    return [np.ascontiguousarray(np.transpose(ins[0], _perm(node)))], _no_trace()


def _transpose_float(graph, node, ins):
    return [np.transpose(ins[0], _perm(node))]


def _concat_axis(graph, node):
    return int(node.attrs["axis"]) + 1


def _concat_float(graph, node, ins):
    return [np.concatenate(ins, axis=_concat_axis(graph, node))]


def _one_in_one_out(graph, node):
    if len([t for t in node.inputs if t]) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs one input and one output")


def _quantized_io(graph, node, names, per_channel=False):
    for t in names:
        spec = _spec(graph, t)
        if spec.is_float or spec.scale is None or (spec.per_channel and not per_channel):
            raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} must be an integer tensor with a "
                             "per-tensor scale and zero point")


def _check_quantize(graph, node):
    _one_in_one_out(graph, node)
    if not _spec(graph, node.inputs[0]).is_float:
        raise ValueError(f"node {node.name!r}: onnx_quantize reads a float tensor")
    _quantized_io(graph, node, node.outputs, per_channel=True)


def _check_dequantize(graph, node):
    _one_in_one_out(graph, node)
    _quantized_io(graph, node, node.inputs, per_channel=True)
    if not _spec(graph, node.outputs[0]).is_float:
        raise ValueError(f"node {node.name!r}: onnx_dequantize writes a float tensor")


def _check_requantize(graph, node):
    _one_in_one_out(graph, node)
    _quantized_io(graph, node, node.inputs + node.outputs)


def _check_transpose(graph, node):
    _one_in_one_out(graph, node)
    perm = node.attrs.get("perm")
    x = _spec(graph, node.inputs[0])
    if perm is None or sorted(int(p) for p in perm) != list(range(len(x.shape))):
        raise ValueError(f"node {node.name!r}: transpose needs a per-sample 'perm' of {len(x.shape)} axes, "
                         f"got {perm!r}")


def _check_concat(graph, node):
    if not node.inputs or len(node.outputs) != 1 or "axis" not in node.attrs:
        raise ValueError(f"node {node.name!r}: concat needs inputs, one output and an 'axis'")


register_op(Op("onnx_quantize", _quantize_run, _identity_float, _check_quantize))
register_op(Op("onnx_dequantize", _dequantize_run, _identity_float, _check_dequantize))
register_op(Op("onnx_requantize", _requantize_run, _clip_float, _check_requantize))
register_op(Op("onnx_reinterpret", _reinterpret_run, _reinterpret_float, _check_requantize))
register_op(Op("transpose", _transpose_run, _transpose_float, _check_transpose))


# ----------------------------------------------------------------------------------------- MAC ops
def _bias_input(node, ins):
    return ins[2] if len(node.inputs) > 2 and node.inputs[2] else None


def _mac_zero_points(graph, node):
    if node.op in ("conv_integer", "matmul_integer"):
        wz = np.asarray(node.attrs.get("w_zero_point", 0), np.int64)
        return int(node.attrs.get("x_zero_point", 0)), (int(wz.reshape(-1)[0]) if wz.size == 1 else wz)
    x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    return _zp(x), _wzp(w)


def _float_kernel_run(graph, node, ins):
    """onnxruntime's float32 path of an unfused QDQ group: DequantizeLinear, the float op, QuantizeLinear."""
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    xf = K.dequantize_linear(ins[0], _scale(x), _zp(x))
    wf = _dequant_weights(w, ins[1])
    bias = _bias_input(node, ins)
    bf = None
    if bias is not None:
        b = _spec(graph, node.inputs[2])
        bf = K.dequantize_linear(bias, b.scale if b.per_channel else _scale(b), 0, axis=0 if b.per_channel else None)
    if node.op == "qlinear_conv":
        yf = K.mlas_conv2d(np.transpose(xf, (0, 3, 1, 2)), np.transpose(wf, (0, 3, 1, 2)), bf,
                           _pair(node.attrs, "stride"), _pads(node.attrs), _pair(node.attrs, "dilation"),
                           int(node.attrs.get("group", 1)))
        yf = np.transpose(yf, (0, 2, 3, 1))
    else:
        lead = xf.shape[:-1]
        x2 = xf.reshape(-1, xf.shape[-1])
        if node.attrs.get("onnx_op") == "Gemm":
            yf = _float_gemm(x2, wf, bf)
        else:
            yf = K.mlas_gemm(x2, np.ascontiguousarray(wf.T))
        yf = yf.reshape(lead + (wf.shape[0],))
    return K.quantize_linear(yf, _scale(y), _zp(y), y.dtype)


def _float_gemm(x2, wf, bf):
    """onnxruntime's float Gemm (transB = 1, alpha = beta = 1): Y preloaded with the bias, then MlasGemm
    accumulating onto it (one-row products use MLAS's transposed-B kernel)."""
    c = None if bf is None else np.broadcast_to(np.asarray(bf, F32), (x2.shape[0], wf.shape[0])).copy()
    return K.mlas_gemm(x2, np.ascontiguousarray(wf.T), c, trans_b=True)


def _mac_run(graph, node, ins, dp, trace):
    integer_out = node.op in ("conv_integer", "matmul_integer")
    y = _spec(graph, node.outputs[0])
    if (not integer_out and node.attrs.get("ort_kernel") == "float" and is_onnxruntime_datapath(dp)):
        out = _float_kernel_run(graph, node, ins)
        info = {**_no_trace(), "adds": 0} if trace else None
        return [out], info
    refuse_unmodelled_knobs(node, dp, "onnxruntime semantics")
    x_zp, w_zp = _mac_zero_points(graph, node)
    acc, overflows = _integer_mac(graph, node, ins, dp, x_zp, w_zp, _bias_input(node, ins))
    if node.attrs.get("u8s8_pairs", "exact") == "saturate16":
        acc = _saturate_pairs(node, ins, dp, x_zp, acc)
    if integer_out:
        out = K.wrap_int32(acc).astype(y.dtype)
        pre, lo, hi = None, None, None
    elif is_native(dp):
        x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
        m = K.requant_multiplier(_scale(x), w.scale, _scale(y), float(node.attrs.get("alpha", 1.0)))
        out = K.requantize_output(acc, m, _zp(y), y.dtype)
        lo, hi = y.code_range
        pre = (np.rint(acc.astype(F32) * m).astype(np.float64) + _zp(y)) if trace else None
    else:
        out, pre = _generic_requant(graph, node, dp, acc, y)
        lo, hi = y.code_range
    info = None
    if trace:
        k = int(np.prod(ins[1].shape[1:]))
        bias = _bias_input(node, ins) is not None
        info = {"overflows": int(overflows), "acc": acc,
                "clipped": 0 if pre is None else _clipped(pre, lo, hi),
                "adds": int(acc.size) * (k + (bias and getattr(dp, "bias_add", "after") != "preload"))}
    return [out], info


def _saturate_pairs(node, ins, dp, x_zp, acc):
    """The accumulator of onnxruntime's AVX2 uint8 x int8 kernel (``u8s8_pairs="saturate16"``): the exact
    int32 sum plus the excess of the int16-saturated pair sums (:mod:`fxpsim.datapath.onnxruntime.x86_pairs`) on the raw
    codes onnxruntime multiplies (activation codes + 128 where it converted int8 to uint8, ``u8_shift``),
    wrapped to int32. Only on onnxruntime's own datapath: the saturation belongs to its kernel."""
    if not is_onnxruntime_datapath(dp):
        raise ValueError(f"node {node.name!r} ({node.op}) reproduces onnxruntime's x86 AVX2 uint8 x int8 kernel "
                         "(u8s8_pairs='saturate16'), which exists only on onnxruntime's datapath (native "
                         "requantization, int32 wrapping accumulator); import the model with cpu='exact' to run "
                         "it on other datapaths")
    shift = 128 if node.attrs.get("u8_shift") else 0
    a = ins[0].astype(np.int32) + shift
    if node.op in ("qlinear_conv", "conv_integer"):
        exc = _x86.conv2d_excess(a, ins[1], stride=_pair(node.attrs, "stride"), padding=_pads(node.attrs),
                                 dilation=_pair(node.attrs, "dilation"), groups=int(node.attrs.get("group", 1)),
                                 pad_value=int(x_zp) + shift)
    else:
        exc = _x86.matmul_excess(a, ins[1])
    return K.wrap_int32(acc + exc)


def _check_pairs(graph, node):
    pairs = node.attrs.get("u8s8_pairs", "exact")
    if pairs not in _x86.U8S8_PAIRS:
        raise ValueError(f"node {node.name!r}: u8s8_pairs must be one of {_x86.U8S8_PAIRS}, got {pairs!r}")
    if pairs == "exact":
        return
    x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    x_u8 = x.bits == 8 and (not x.signed or bool(node.attrs.get("u8_shift")))
    if node.attrs.get("ort_kernel", "qlinear") == "float" or not x_u8 or not (w.bits == 8 and w.signed):
        raise ValueError(f"node {node.name!r}: u8s8_pairs='saturate16' applies to onnxruntime's integer kernel "
                         "with uint8 activations (or int8 ones it shifted to uint8, u8_shift) and int8 weights")


def _mac_float(graph, node, ins):
    w = _spec(graph, node.inputs[1])
    if node.op in ("conv_integer", "matmul_integer"):
        x_zp, w_zp = _mac_zero_points(graph, node)
        wz = np.asarray(w_zp, np.int64)
        wf = w.data.astype(np.float64) - (wz.reshape((-1,) + (1,) * (w.data.ndim - 1)) if wz.ndim else wz)
        xf = np.asarray(ins[0], np.float64) - x_zp
    else:
        wf = _float64_weights(w, w.data)
        xf = np.asarray(ins[0], np.float64)
    if node.op in ("qlinear_conv", "conv_integer"):
        y = _float_conv_nhwc(xf, wf, node)
    else:
        y = xf @ wf.T * float(node.attrs.get("alpha", 1.0))
    if len(node.inputs) > 2 and node.inputs[2]:
        b = _spec(graph, node.inputs[2])
        y = y + (b.dequantize(b.data) if b.scale is not None else b.data.astype(np.float64))
    return [y]


def _float_conv_nhwc(x, w, node):
    """float64 grouped convolution, NHWC x, OHWI w."""
    (pt, pb), (pl, pr) = _pads(node.attrs)
    sh, sw = _pair(node.attrs, "stride")
    dh, dw = _pair(node.attrs, "dilation")
    g = int(node.attrs.get("group", 1))
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    xp = np.zeros((n, h + pt + pb, wd + pl + pr, c))
    xp[:, pt:pt + h, pl:pl + wd] = x
    oh, ow = _conv_out_shape(node, x.shape, w.shape)[1:3]
    out = np.zeros((n, oh, ow, o))
    og = o // g
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            for gi in range(g):
                out[..., gi * og:(gi + 1) * og] += patch[..., gi * cg:(gi + 1) * cg] @ w[gi * og:(gi + 1) * og, i, j].T
    return out


def _mac_check(graph, node):
    if len(node.inputs) not in (2, 3) or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs inputs (x, w[, bias]) and one output")
    w = _spec(graph, node.inputs[1])
    if not w.is_constant:
        raise ValueError(f"node {node.name!r}: the weights {w.name!r} must be a constant tensor")
    if node.op in ("qlinear_conv", "qlinear_matmul"):
        _quantized_io(graph, node, [node.inputs[0], node.outputs[0]])
        if w.scale is None:
            raise ValueError(f"node {node.name!r}: the weights need a scale")
    conv = node.op in ("qlinear_conv", "conv_integer")
    if conv and (w.data.ndim != 4 or len(_spec(graph, node.inputs[0]).shape) != 3):
        raise ValueError(f"node {node.name!r}: {node.op} needs NHWC x and [O, KH, KW, C/group] weights")
    if not conv and w.data.ndim != 2:
        raise ValueError(f"node {node.name!r}: {node.op} needs [O, K] weights")
    if len(node.inputs) > 2 and node.inputs[2]:
        b = _spec(graph, node.inputs[2])
        if not b.is_constant or b.shape != (w.data.shape[0],):
            raise ValueError(f"node {node.name!r}: the bias must be a constant of shape ({w.data.shape[0]},)")
    if node.attrs.get("ort_kernel", "qlinear") not in ("qlinear", "float"):
        raise ValueError(f"node {node.name!r}: ort_kernel must be 'qlinear' or 'float'")
    _check_pairs(graph, node)


def _mac_count(graph, node) -> int:
    w = _spec(graph, node.inputs[1]).data
    out = _spec(graph, node.outputs[0]).shape
    return int(np.prod(out)) * int(np.prod(w.shape[1:]))


def _mac_bound(graph, node) -> int:
    xs, ws = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    x_zp, w_zp = _mac_zero_points(graph, node)
    lo, hi = xs.code_range
    xmax = max(abs(lo - x_zp), abs(hi - x_zp))
    wz = np.asarray(w_zp, np.int64)
    w = np.abs(ws.data.astype(np.int64) - (wz.reshape((-1,) + (1,) * (ws.data.ndim - 1)) if wz.ndim else wz))
    bound = w.reshape(w.shape[0], -1).sum(axis=1).astype(object) * xmax
    if len(node.inputs) > 2 and node.inputs[2]:
        bound = bound + np.abs(_spec(graph, node.inputs[2]).data.astype(np.int64)).astype(object)
    return int(max(bound))


for _op in ("qlinear_conv", "qlinear_matmul", "conv_integer", "matmul_integer"):
    register_op(Op(_op, _mac_run, _mac_float, _mac_check, _mac_count, _mac_bound))


# ----------------------------------------------------------------------------------------- elementwise
def _binary_specs(graph, node):
    return tuple(_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))


def _shifted(codes, spec, shift):
    return (codes.astype(np.int64) + 128, _zp(spec) + 128) if shift else (codes, _zp(spec))


def _add_run(graph, node, ins, dp, trace):
    a, b, y = _binary_specs(graph, node)
    native = is_native(dp)
    if native and node.attrs.get("ort_kernel") == "float":
        af = K.dequantize_linear(ins[0], _scale(a), _zp(a))
        bf = K.dequantize_linear(ins[1], _scale(b), _zp(b))
        yf = (af + bf).astype(F32) if node.op == "qlinear_add" else (af * bf).astype(F32)
        return [K.quantize_linear(yf, _scale(y), _zp(y), y.dtype)], _no_trace()
    if native:
        shift = bool(node.attrs.get("u8_shift", False))
        ac, za = _shifted(ins[0], a, shift)
        bc, zb = _shifted(ins[1], b, shift)
        zy = _zp(y) + (128 if shift else 0)
        dtype = np.uint8 if shift else y.dtype
        if node.op == "qlinear_add":
            out = K.qlinear_add(ac, bc, _scale(a), za, _scale(b), zb, _scale(y), zy, dtype,
                                broadcast=node.attrs.get("broadcast", "none"))
        else:
            out = K.qlinear_mul(ac, bc, _scale(a), za, _scale(b), zb, _scale(y), zy, dtype)
        if shift:
            out = (out.astype(np.int64) - 128).astype(y.dtype)
        return [out], _no_trace()
    lo, hi = y.code_range
    if node.op == "qlinear_mul":
        p = (ins[0].astype(np.int64) - _zp(a)) * (ins[1].astype(np.int64) - _zp(b))
        pre = _requant_real(p, _scale(a) * _scale(b) / _scale(y), dp) + _zp(y)
        return [np.clip(pre, lo, hi).astype(y.dtype)], {**_no_trace(), "clipped": _clipped(pre, lo, hi)}
    if dp.requantization in ("tflite-double", "tflite-single"):
        out = quantized_add(ins[0], ins[1], scale1=_scale(a), zp1=_zp(a), scale2=_scale(b), zp2=_zp(b),
                            out_scale=_scale(y), out_zp=_zp(y), out_dtype=y.dtype,
                            rounding="single" if dp.requantization == "tflite-single" else "double")
        return [out], _no_trace()
    real = (_scale(a) / _scale(y) * (ins[0].astype(np.float64) - _zp(a))
            + _scale(b) / _scale(y) * (ins[1].astype(np.float64) - _zp(b)))
    pre = from_float(real, Format.integer(62), rounding=_name(dp.rounding)).raw + _zp(y)
    return [np.clip(pre, lo, hi).astype(y.dtype)], {**_no_trace(), "clipped": _clipped(pre, lo, hi)}


def _add_float(graph, node, ins):
    return [ins[0] + ins[1] if node.op == "qlinear_add" else ins[0] * ins[1]]


def _check_binary(graph, node):
    if len(node.inputs) != 2 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs two inputs and one output")
    _quantized_io(graph, node, node.inputs + node.outputs)
    if node.attrs.get("broadcast", "none") not in ("none", "a_scalar", "b_scalar"):
        raise ValueError(f"node {node.name!r}: broadcast must be 'none', 'a_scalar' or 'b_scalar'")


register_op(Op("qlinear_add", _add_run, _add_float, _check_binary))
register_op(Op("qlinear_mul", _add_run, _add_float, _check_binary))


# ----------------------------------------------------------------------------------------- pooling
def _pool_geometry(node, x_shape):
    k = _pair(node.attrs, "pool_size")
    s = _pair(node.attrs, "stride")
    pads = _pads(node.attrs)
    oh = (x_shape[1] + pads[0][0] + pads[0][1] - k[0]) // s[0] + 1
    ow = (x_shape[2] + pads[1][0] + pads[1][1] - k[1]) // s[1] + 1
    return k, s, pads, oh, ow


def _window_counts(node, x_shape):
    k, s, pads, oh, ow = _pool_geometry(node, x_shape)
    if node.attrs.get("count_include_pad"):
        return np.full((oh, ow), k[0] * k[1], np.int64)
    valid = np.ones((1, x_shape[1], x_shape[2], 1), np.int64)
    res = _acc.conv2d(valid, np.ones(k + (1, 1), np.int64), acc=Format.integer(32), stride=s, padding=pads)
    return res.raw[0, :, :, 0]


def _avg_pool_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    h = ins[0]
    k, s, pads, oh, ow = _pool_geometry(node, h.shape)
    native = is_native(dp)
    if native and not node.attrs.get("global_path"):
        shift = bool(node.attrs.get("u8_shift", False))
        hc, zx = _shifted(h, x, shift)
        zy = _zp(y) + (128 if shift else 0)
        out = K.qlinear_average_pool(hc.astype(np.uint8) if shift else hc, k, s, pads,
                                     bool(node.attrs.get("count_include_pad")), _scale(x), zx, _scale(y), zy)
        if shift:
            out = (out.astype(np.int64) - 128).astype(y.dtype)
        return [out], _no_trace()
    c = h.shape[3]
    fmt = _acc_format(dp)
    res = _acc.conv2d(h.astype(np.int64), np.ones(k + (1, c), np.int64), acc=fmt, stride=s, padding=pads,
                      groups=c, overflow=_name(dp.accumulator_overflow), order=dp.accumulator_order,
                      overflow_at=_overflow_at(dp))
    sums = res.raw
    counts = _window_counts(node, h.shape)
    lo, hi = y.code_range
    if native:
        out = K.qlinear_global_average_pool(sums, int(counts.reshape(-1)[0]), _scale(x), _zp(x), _scale(y),
                                            _zp(y), y.dtype)
        pre = None
    else:
        cnt = counts[None, :, :, None]
        acc = sums - _zp(x) * cnt
        pre = _requant_real(acc, _scale(x) / (cnt * _scale(y)), dp) + _zp(y)
        out = np.clip(pre, lo, hi).astype(y.dtype)
    info = {"overflows": int(res.overflows), "acc": sums, "clipped": 0 if pre is None else _clipped(pre, lo, hi),
            "adds": int(sums.size) * k[0] * k[1]}
    return [out], info


def _avg_pool_float(graph, node, ins):
    x = np.asarray(ins[0], np.float64)
    k, s, pads, oh, ow = _pool_geometry(node, x.shape)
    (pt, pb), (pl, pr) = pads
    xp = np.zeros((x.shape[0], x.shape[1] + pt + pb, x.shape[2] + pl + pr, x.shape[3]))
    xp[:, pt:pt + x.shape[1], pl:pl + x.shape[2]] = x
    acc = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for i in range(k[0]):
        for j in range(k[1]):
            acc += xp[:, i: i + s[0] * (oh - 1) + 1: s[0], j: j + s[1] * (ow - 1) + 1: s[1]]
    return [acc / _window_counts(node, x.shape)[None, :, :, None]]


def _avg_pool_macs(graph, node):
    k = _pair(node.attrs, "pool_size")
    return int(np.prod(_spec(graph, node.outputs[0]).shape)) * k[0] * k[1]


def _avg_pool_bound(graph, node):
    lo, hi = _spec(graph, node.inputs[0]).code_range
    k = _pair(node.attrs, "pool_size")
    return max(abs(lo), abs(hi)) * k[0] * k[1]


def _check_pool(graph, node):
    _one_in_one_out(graph, node)
    _quantized_io(graph, node, node.inputs + node.outputs)
    if "pool_size" not in node.attrs:
        raise ValueError(f"node {node.name!r}: qlinear_avg_pool needs 'pool_size'")


register_op(Op("qlinear_avg_pool", _avg_pool_run, _avg_pool_float, _check_pool, _avg_pool_macs, _avg_pool_bound))


# ----------------------------------------------------------------------------------------- concat
def _qconcat_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    parts = []
    for name, codes in zip(node.inputs, ins):
        x = _spec(graph, name)
        if _scale(x) == _scale(y) and _zp(x) == _zp(y) and x.dtype == y.dtype:
            parts.append(codes.astype(y.dtype))
            continue
        lo = x.code_range[0]
        table = K.concat_table(_scale(x), _zp(x), _scale(y), _zp(y), y.dtype) if x.dtype == y.dtype else \
            K.quantize_linear(K.dequantize_linear(np.arange(lo, x.code_range[1] + 1), _scale(x), _zp(x)),
                              _scale(y), _zp(y), y.dtype)
        parts.append(table[codes.astype(np.int64) - lo])
    return [np.concatenate(parts, axis=_concat_axis(graph, node))], _no_trace()


def _check_qconcat(graph, node):
    _check_concat(graph, node)
    _quantized_io(graph, node, node.inputs + node.outputs)


register_op(Op("qlinear_concat", _qconcat_run, _concat_float, _check_qconcat))

#: The ops this module registers.
ONNX_OPS = ("onnx_quantize", "onnx_dequantize", "onnx_requantize", "onnx_reinterpret", "transpose", "qlinear_conv",
            "qlinear_matmul", "conv_integer", "matmul_integer", "qlinear_add", "qlinear_mul", "qlinear_avg_pool",
            "qlinear_concat")

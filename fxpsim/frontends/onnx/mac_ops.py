"""The MAC ops of imported ONNX graphs: ``qlinear_conv``, ``qlinear_matmul`` (QLinearConv, QLinearMatMul, QGemm
and the QDQ groups fused into them), ``conv_integer`` and ``matmul_integer``. The integer accumulation on any
datapath (bias after the sum or preloaded), onnxruntime's own requantization or the datapath's scheme,
onnxruntime's float32 MLAS path for the QDQ groups it leaves unfused (``ort_kernel="float"``), the x86 AVX2
int16 pair saturation (``u8s8_pairs="saturate16"``) and the float64 reference (registered when
:mod:`fxpsim.frontends.onnx.ops` is imported)."""
from __future__ import annotations

import numpy as np

from ...core.fixed import FixedArray, Format, from_raw
from ...datapath import accumulate as _acc
from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import x86_pairs as _x86
from ...datapath.integer_ops import quantized_conv2d, quantized_depthwise_conv2d, quantized_fully_connected
from ...datapath.requantize import Requantizer
from ...graph.mac_ops import check_mac_operands, refuse_unmodelled_knobs
from ...graph.mac_view import MacOperands, register_mac_view
from ...graph.ops import Op, requantizer_for
from .prepared import mac_prepare
from .op_support import (F32, _acc_format, _clipped, _name, _no_trace, _overflow_at, _pads, _pair, _quantized_io,
                         _scale, _spec, _wzp, _zp, is_native, is_onnxruntime_datapath, register_op)


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


def _core_kernel_mac(node, x, w, dp, x_zp, w_zp, bias):
    """The accumulation through fxpsim's core MAC kernels (:mod:`fxpsim.datapath.integer_ops`), for the knobs
    they model and onnxruntime has not: ``zero_point="fold"`` (raw codes into the multipliers, the accumulator
    preloaded with :math:`b' = b - z_x \\sum_k w_k`, saturated to ``bias_bits``) and K tiles (``tile_k``, each
    tile summed in a ``tile_accumulator_bits`` register). The bias is saturated into the accumulator first, as
    on the core MAC ops. Returns ``(acc, overflows, biases clipped)``."""
    fmt = _acc_format(dp)
    at_end = _overflow_at(dp) == "end"
    common = dict(requant=Requantizer("float", scale=(1.0,)), x_zp=int(x_zp), w_zp=w_zp, out_zp=0,
                  out_dtype=np.int32, acc=Format.integer(62) if at_end else fmt,
                  overflow="wrap" if at_end else _name(dp.accumulator_overflow), order=dp.accumulator_order,
                  bias_at="init" if getattr(dp, "bias_add", "after") == "preload" else "end",
                  zero_point=getattr(dp, "zero_point", "subtract"), bias_bits=getattr(dp, "bias_bits", None),
                  tile_k=getattr(dp, "tile_k", None),
                  tile_acc=getattr(dp, "tile_accumulator_bits", None) or dp.accumulator_bits, need_acc=True)
    clipped = 0
    if bias is not None:
        b = np.asarray(bias, np.int64).reshape(-1)
        bias = b if at_end else np.clip(b, fmt.min_code, fmt.max_code)
        clipped = int(np.count_nonzero(bias != b))
    if node.op in ("qlinear_matmul", "matmul_integer"):
        res = quantized_fully_connected(x.reshape(-1, x.shape[-1]), w, bias, **common)
        acc = res.acc.reshape(x.shape[:-1] + (w.shape[0],))
    else:
        groups = int(node.attrs.get("group", 1))
        geometry = dict(stride=_pair(node.attrs, "stride"), padding=_pads(node.attrs),
                        dilation=_pair(node.attrs, "dilation"))
        if groups == 1:
            res = quantized_conv2d(x, w, bias, **geometry, **common)
        elif groups == x.shape[3] and w.shape[3] == 1:          # depthwise: [C*M, KH, KW, 1] -> [1, KH, KW, C*M]
            res = quantized_depthwise_conv2d(x, np.ascontiguousarray(np.transpose(w, (3, 1, 2, 0))), bias,
                                             **geometry, **common)
        else:
            raise ValueError(f"node {node.name!r} ({node.op}): zero_point='fold' and tile_k are modelled on plain "
                             f"and depthwise convolutions, not on {groups} groups of {x.shape[3] // groups} "
                             "channels; leave them at their defaults for this model")
        acc = res.acc
    overflows = int(res.overflows)
    if at_end:
        fitted = from_raw(np.asarray(acc, np.int64), Format.integer(62)).cast(fmt, overflow=_name(dp.accumulator_overflow))
        acc, overflows = fitted.raw, int(fitted.overflows)
    return np.asarray(acc, np.int64), overflows, clipped + int(res.bias_clipped)


def _integer_mac(graph, node, ins, dp, x_zp, w_zp, bias):
    """Accumulator codes (channels last, int64), overflow count and biases clipped into the bias register of a
    conv / matmul node on ``dp``."""
    x, w = ins[0], ins[1]
    if getattr(dp, "zero_point", "subtract") != "subtract" or getattr(dp, "tile_k", None):
        return _core_kernel_mac(node, x, w, dp, x_zp, w_zp, bias)
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
    clipped = 0 if b is None else int(np.count_nonzero(b != np.asarray(bias, np.int64)))
    return (*_finish_bias(res, None if (b is None or preload) else b, dp), clipped)


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


def _dequant_weights(spec, data):
    """DequantizeLinear of constant codes per output channel (axis 0) in float32."""
    return K.dequantize_linear(data, spec.scale if spec.per_channel else _scale(spec),
                               spec.zero_point if spec.per_channel else _zp(spec), axis=0 if spec.per_channel else None)


def _float64_weights(spec, data):
    return spec.dequantize(data)


def _bias_input(node, ins):
    return ins[2] if len(node.inputs) > 2 and node.inputs[2] else None


def _mac_zero_points(graph, node):
    if node.op in ("conv_integer", "matmul_integer"):
        wz = np.asarray(node.attrs.get("w_zero_point", 0), np.int64)
        return int(node.attrs.get("x_zero_point", 0)), (int(wz.reshape(-1)[0]) if wz.size == 1 else wz)
    x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    return _zp(x), _wzp(w)


def _float_constants(graph, node, ins, x_shape=None):
    """What :func:`_float_kernel_run` derives from the node alone: the dequantized weights (NCHW for a
    convolution, transposed for a matmul, contiguous), bias (``None`` without one), the input's
    DequantizeLinear, the output's QuantizeLinear and, for a convolution, ``conv(x_nchw)``: MlasConv with
    those weights and bias, prepared for inputs of ``x_shape`` (NHWC) when it is given
    (:func:`~fxpsim.datapath.onnxruntime.mlas.mlas_conv2d_prepared`, the same bits)."""
    w = _spec(graph, node.inputs[1])
    wf = _dequant_weights(w, ins[1])
    bias = _bias_input(node, ins)
    bf = None
    if bias is not None:
        b = _spec(graph, node.inputs[2])
        bf = K.dequantize_linear(bias, b.scale if b.per_channel else _scale(b), 0, axis=0 if b.per_channel else None)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    dequantize = K.dequantize_linear_plan(F32(_scale(x)), np.int64(_zp(x)))
    quantize = K.quantize_linear_plan(F32(_scale(y)), np.int64(_zp(y)), y.dtype)
    wf = np.ascontiguousarray(np.transpose(wf, (0, 3, 1, 2)) if node.op == "qlinear_conv" else wf.T)
    conv = None
    if node.op == "qlinear_conv":
        geometry = (_pair(node.attrs, "stride"), _pads(node.attrs), _pair(node.attrs, "dilation"),
                    int(node.attrs.get("group", 1)))
        if x_shape is not None:
            n, h, wd, c = x_shape
            conv = K.mlas_conv2d_prepared((n, c, h, wd), wf, bf, *geometry)
        else:
            def conv(xc):
                return K.mlas_conv2d(xc, wf, bf, *geometry)
    return wf, bf, dequantize, quantize, conv


def _float_kernel_run(graph, node, ins, constants=None):
    """onnxruntime's float32 path of an unfused QDQ group: DequantizeLinear, the float op, QuantizeLinear
    (``constants``: :func:`_float_constants` of the node, derived once by a compiled plan)."""
    wf, bf, dequantize, quantize, conv = _float_constants(graph, node, ins) if constants is None else constants
    if node.op == "qlinear_conv":       # the codes moved to NCHW, then dequantized (elementwise: the same values)
        xf = dequantize(np.ascontiguousarray(np.transpose(np.asarray(ins[0]), (0, 3, 1, 2))))
        yf = np.transpose(conv(xf), (0, 2, 3, 1))
    else:
        xf = dequantize(np.asarray(ins[0]))
        lead = xf.shape[:-1]
        x2 = xf.reshape(-1, xf.shape[-1])
        if node.attrs.get("onnx_op") == "Gemm":
            yf = _float_gemm(x2, wf, bf)
        else:
            yf = K.mlas_gemm(x2, wf)
        yf = yf.reshape(lead + (wf.shape[1],))
    return quantize(np.asarray(yf, F32))


def _float_gemm(x2, wt, bf):
    """onnxruntime's float Gemm (transB = 1, alpha = beta = 1) of ``x2 @ wt`` (``wt``: the weights transposed):
    Y preloaded with the bias, then MlasGemm accumulating onto it (one-row products use MLAS's transposed-B
    kernel)."""
    c = None if bf is None else np.broadcast_to(np.asarray(bf, F32), (x2.shape[0], wt.shape[1])).copy()
    return K.mlas_gemm(x2, wt, c, trans_b=True)


def _mac_run(graph, node, ins, dp, trace):
    integer_out = node.op in ("conv_integer", "matmul_integer")
    y = _spec(graph, node.outputs[0])
    if (not integer_out and node.attrs.get("ort_kernel") == "float" and is_onnxruntime_datapath(dp)):
        out = _float_kernel_run(graph, node, ins)
        info = {**_no_trace(), "adds": 0} if trace else None
        return [out], info
    refuse_unmodelled_knobs(node, dp, "onnxruntime semantics", allow=("zero_point", "tile_k"))
    x_zp, w_zp = _mac_zero_points(graph, node)
    acc, overflows, bias_clipped = _integer_mac(graph, node, ins, dp, x_zp, w_zp, _bias_input(node, ins))
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
        tile_k = getattr(dp, "tile_k", None)
        tiles = -(-k // tile_k) if tile_k and tile_k < k else 0
        bias = _bias_input(node, ins) is not None or getattr(dp, "zero_point", "subtract") == "fold"
        info = {"overflows": int(overflows), "acc": acc, "bias_clipped": bias_clipped,
                "clipped": 0 if pre is None else _clipped(pre, lo, hi),
                "adds": int(acc.size) * (k + tiles + (bias and getattr(dp, "bias_add", "after") != "preload"))}
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
    w = check_mac_operands(graph, node)
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


def _mac_view(graph, node, ins):
    """The node's integer MAC in a core op's layout (:mod:`fxpsim.graph.mac_view`): a plain convolution as
    ``conv2d``, one group per input channel as ``depthwise_conv2d``, a matmul as ``fully_connected``; other
    group counts have no view."""
    x_zp, w_zp = _mac_zero_points(graph, node)
    xo = ins[0].astype(np.int64) - int(x_zp)
    wz = np.asarray(w_zp, np.int64)
    wo = ins[1].astype(np.int64) - (wz.reshape((-1,) + (1,) * (ins[1].ndim - 1)) if wz.ndim else wz)
    bias = _bias_input(node, ins)
    bias = None if bias is None else np.asarray(bias, np.int64).reshape(-1)
    if node.op in ("qlinear_matmul", "matmul_integer"):
        return MacOperands("fully_connected", xo, wo, bias, x_zero_point=int(x_zp))
    geometry = dict(stride=_pair(node.attrs, "stride"), dilation=_pair(node.attrs, "dilation"), pads=_pads(node.attrs))
    groups = int(node.attrs.get("group", 1))
    if groups == 1:
        return MacOperands("conv2d", xo, wo, bias, geometry, int(x_zp))
    if groups == xo.shape[3] and wo.shape[3] == 1:      # [C*M, KH, KW, 1] -> [1, KH, KW, C*M]
        return MacOperands("depthwise_conv2d", xo, np.transpose(wo, (3, 1, 2, 0)), bias, geometry, int(x_zp))
    return None


for _op in ("qlinear_conv", "qlinear_matmul", "conv_integer", "matmul_integer"):
    register_op(Op(_op, _mac_run, _mac_float, _mac_check, _mac_count, _mac_bound, prepare=mac_prepare))
    register_mac_view(_op, _mac_view)

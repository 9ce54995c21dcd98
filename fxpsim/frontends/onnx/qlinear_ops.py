"""The ONNX graph ops without weights that requantize: ``qlinear_add`` and ``qlinear_mul`` (QLinearAdd,
QLinearMul and the Add / Mul QDQ groups), ``qlinear_avg_pool`` (QLinearAveragePool,
QLinearGlobalAveragePool) and ``qlinear_concat`` (QLinearConcat), in onnxruntime's arithmetic on its own
datapath and in the datapath's scheme on any other (registered when :mod:`fxpsim.frontends.onnx.ops` is
imported)."""
from __future__ import annotations

import numpy as np

from ...core.fixed import Format, from_float
from ...datapath import accumulate as _acc
from ...datapath.integer_ops import quantized_add
from ...datapath.onnxruntime import mlas as K
from ...graph.ops import Op
from .prepared import avg_pool_prepare, binary_table_prepare
from .op_support import (F32, _acc_format, _clipped, _name, _no_trace, _one_in_one_out, _overflow_at, _pads, _pair,
                         _quantized_io, _requant_real, _scale, _spec, _zp, is_native, register_op)


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


register_op(Op("qlinear_add", _add_run, _add_float, _check_binary, prepare=binary_table_prepare))
register_op(Op("qlinear_mul", _add_run, _add_float, _check_binary, prepare=binary_table_prepare))


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


def window_pool(graph, node, shape):
    """``f(codes)``: onnxruntime's QLinearAveragePool of inputs of ``shape`` (float32 window sums,
    :func:`~fxpsim.datapath.onnxruntime.mlas.qlinear_average_pool_plan`); with ``u8_shift`` the int8 codes are
    shifted to the uint8 ones onnxruntime rewrote the model to, and the output back."""
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    shift = bool(node.attrs.get("u8_shift", False))
    k, s, pads, _, _ = _pool_geometry(node, shape)
    zx, zy = _zp(x) + (128 if shift else 0), _zp(y) + (128 if shift else 0)
    pool = K.qlinear_average_pool_plan(shape, np.dtype(np.uint8) if shift else x.dtype, k, s, pads,
                                       bool(node.attrs.get("count_include_pad")), _scale(x), zx, _scale(y), zy)
    if not shift:
        return pool

    def shifted(h):
        if h.dtype == np.int8 and y.dtype == np.int8:     # h + 128 (in [0, 255]) is h's bits with bit 7 flipped
            return np.bitwise_xor(pool(np.bitwise_xor(h.view(np.uint8), np.uint8(0x80))), np.uint8(0x80)).view(np.int8)
        return (pool((h.astype(np.int64) + 128).astype(np.uint8)).astype(np.int64) - 128).astype(y.dtype)
    return shifted


def _avg_pool_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    h = ins[0]
    k, s, pads, oh, ow = _pool_geometry(node, h.shape)
    native = is_native(dp)
    if native and not node.attrs.get("global_path"):
        return [window_pool(graph, node, h.shape)(h)], _no_trace()
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


register_op(Op("qlinear_avg_pool", _avg_pool_run, _avg_pool_float, _check_pool, _avg_pool_macs, _avg_pool_bound,
               prepare=avg_pool_prepare))

# ----------------------------------------------------------------------------------------- concat
def _concat_axis(graph, node):
    return int(node.attrs["axis"]) + 1


def _concat_float(graph, node, ins):
    return [np.concatenate(ins, axis=_concat_axis(graph, node))]


def _check_concat(graph, node):
    if not node.inputs or len(node.outputs) != 1 or "axis" not in node.attrs:
        raise ValueError(f"node {node.name!r}: concat needs inputs, one output and an 'axis'")


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

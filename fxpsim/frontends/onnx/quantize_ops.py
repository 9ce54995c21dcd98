"""The ONNX graph ops that move codes between float and integer tensors or between quantizations, and the
layout op: ``onnx_quantize`` (QuantizeLinear), ``onnx_dequantize`` (DequantizeLinear), ``onnx_requantize``
(a DQ -> Q pair, optionally clipped in float32), ``onnx_reinterpret`` and ``transpose`` (registered when
:mod:`fxpsim.frontends.onnx.ops` is imported)."""
from __future__ import annotations

import numpy as np

from ...core.fixed import Format, from_float
from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime.mlas import _channel
from ...graph.ops import Op
from ...graph.plan import untraced_step
from .op_support import (F32, _clipped, _name, _no_trace, _one_in_one_out, _quantized_io, _scale, _spec, _zp,
                         is_native, register_op)


def _qparams(spec, ndim):
    """(scale, zero point) broadcastable against an array of ``ndim`` dims (batch first)."""
    shape = spec.channel_shape(ndim)
    return spec.scale.astype(F32).reshape(shape), spec.zero_point.reshape(shape)


def _linear_quantize(x, s, z, spec):
    """onnxruntime's QuantizeLinear onto ``spec``'s codes: MLAS saturates to the dtype's range, and a code
    narrower than its dtype (4, 12 bits: ONNX int4 saturates the same way) is clamped to its own
    :math:`[q_{min}, q_{max}]` (clamping before or after the rounding gives the same integer)."""
    return _linear_quantize_plan(_channel_free(s), _channel_free(z), spec)(x)


def _channel_free(v):
    """A scale or zero point as :func:`~fxpsim.datapath.onnxruntime.mlas.quantize_linear` takes it per
    tensor (``axis=None``)."""
    return _channel(np.asarray(v), 0, None)


def _linear_quantize_plan(s, z, spec):
    """:func:`_linear_quantize` with ``s``, ``z`` (broadcastable against the input) and ``spec`` fixed."""
    lo, hi = spec.code_range
    quantize = K.quantize_linear_plan(np.asarray(s, F32), np.asarray(z, np.int64), spec.dtype)
    info = np.iinfo(spec.dtype)
    if (lo, hi) == (info.min, info.max):
        return lambda x: quantize(np.asarray(x, F32))
    return lambda x: np.clip(quantize(np.asarray(x, F32)), lo, hi).astype(spec.dtype)


def _quantize_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step (:mod:`fxpsim.graph.plan`) of a native ``onnx_quantize``: the quantizer of the
    output's parameters built once."""
    if in_shapes[0] is None or not is_native(dp):
        return None
    y = _spec(graph, node.outputs[0])
    quantize = _linear_quantize_plan(*_qparams(y, len(in_shapes[0])), y)
    return untraced_step(graph, node, dp, lambda ins: quantize(ins[0]), tuple(in_shapes[0]))


def _dequantize_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step of ``onnx_dequantize``: the input's parameters laid out once."""
    if in_shapes[0] is None:
        return None
    dequantize = K.dequantize_linear_plan(*(_channel_free(v) for v in _qparams(_spec(graph, node.inputs[0]),
                                                                                 len(in_shapes[0]))))
    return untraced_step(graph, node, dp, lambda ins: dequantize(np.asarray(ins[0])), tuple(in_shapes[0]))


def _quantize_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    lo, hi = y.code_range
    x = np.asarray(ins[0], F32)
    s, z = _qparams(y, x.ndim)
    if is_native(dp):
        out = _linear_quantize(x, s, z, y)
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
    return _linear_quantize(v, _scale(y), _zp(y), y)


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


register_op(Op("onnx_quantize", _quantize_run, _identity_float, _check_quantize, prepare=_quantize_prepare))
register_op(Op("onnx_dequantize", _dequantize_run, _identity_float, _check_dequantize, prepare=_dequantize_prepare))
register_op(Op("onnx_requantize", _requantize_run, _clip_float, _check_requantize))
register_op(Op("onnx_reinterpret", _reinterpret_run, _reinterpret_float, _check_requantize))

"""The TFLite activation ops of imported graphs: ``tflite_softmax``, ``tflite_logistic``, ``tflite_tanh``,
``tflite_hard_swish``, ``tflite_leaky_relu`` and ``tflite_relu`` in LiteRT's arithmetic, or through the integer
lookup tables of :mod:`fxpsim.datapath.lut` on a datapath that sets ``activation_lut_entries`` (registered, and
the four table ops marked as LUT ops, when :mod:`fxpsim.frontends.tflite.ops` is imported)."""
from __future__ import annotations

import numpy as np

from ...datapath import lut as _lut
from ...datapath import tflite as K
from ...datapath.requantize import activation_range, multiply_by_quantized_multiplier, quantize_multiplier
from ...graph.ops import Op, register_op
from .op_support import _cached, _call, _check_io, _float_activation, _kernels, _no_trace, _q, _spec


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
    kern = _kernels(graph)
    params = _softmax_params(graph, node, x, y, kern)
    return [_call(node, kern, K.quantized_softmax, ins[0], params, kernels=kern)], _no_trace()


def _softmax_prepare(graph, node, dp, in_shapes):
    r"""A compiled plan's step of ``tflite_softmax`` for the optimized kernels (``builtin`` / ``xnnpack``, no look-up
    table knobs): :func:`~fxpsim.datapath.tflite.float_table_plan` made once, read with :math:`\max x - x` of the
    int8 / uint8 codes; anything else runs the node."""
    if _lut_knobs(dp) is not None or _kernels(graph) == "reference" or in_shapes[0] is None or not in_shapes[0]:
        return None
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    try:
        params = _softmax_params(graph, node, x, y, _kernels(graph))
    except ValueError:
        return None                                  # the node's run raises it, named
    plan, shape = K.float_table_plan(params), tuple(in_shapes[0])

    def step(ins, trace):
        a = ins[0]
        if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != params.input_dtype or not a.shape[-1]:
            return _softmax_run(graph, node, ins, dp, trace)
        return [plan(np.subtract(a.max(axis=-1, keepdims=True), a, dtype=np.int16))], _no_trace()
    return step


def _softmax_params(graph, node, x, y, kern):
    sx, _ = _q(x)
    sy, zy = _q(y)
    return _cached(graph, node, ("softmax", kern), lambda: K.softmax_params(
        sx, beta=float(node.attrs.get("beta", 1.0)), output_scale=sy, output_zero_point=zy,
        input_dtype=x.dtype, output_dtype=y.dtype, kernels=kern))


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


register_op(Op("tflite_softmax", _softmax_run, _softmax_float, _check_io(1), prepare=_softmax_prepare))
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

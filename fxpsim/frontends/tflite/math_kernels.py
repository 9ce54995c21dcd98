"""TFLite graph ops of the int8 math operators on run-time data (LiteRT's arithmetic from
:mod:`fxpsim.datapath.tflite.elementwise_math`, :mod:`fxpsim.datapath.tflite.reduce_sum_max` and
:mod:`fxpsim.datapath.tflite.log_softmax`).

=============================  ===============================================================================
op                             TFLite op, attributes
=============================  ===============================================================================
``tflite_maximum``             MAXIMUM (codes, numpy broadcasting)
``tflite_minimum``             MINIMUM (codes, numpy broadcasting)
``tflite_reduce_max``          REDUCE_MAX; ``axes`` (per sample), ``keep_dims``
``tflite_squared_difference``  SQUARED_DIFFERENCE (broadcasting)
``tflite_rsqrt``               RSQRT (a code below the input zero point raises, as LiteRT fails the invoke)
``tflite_prelu``               PRELU (input, alpha: a constant in its TFLite shape or a run-time tensor)
``tflite_elu``                 ELU (``builtin`` and ``xnnpack`` kernel sets)
``tflite_sum``                 SUM; ``axes`` (per sample), ``keep_dims`` (``builtin`` and ``xnnpack``)
``tflite_log_softmax``         LOG_SOFTMAX (last axis)
=============================  ===============================================================================

Each has a float64 reference (``run_float``).  Registered when :mod:`fxpsim.frontends.tflite.ops` is imported.
"""
from __future__ import annotations

import numpy as np

from ...datapath import tflite as K
from ...graph.ops import Op, register_op
from .op_support import _cached, _call, _check_io, _kernels, _no_trace, _q, _spec

MATH_OPS = ("tflite_maximum", "tflite_minimum", "tflite_reduce_max", "tflite_squared_difference", "tflite_rsqrt",
            "tflite_prelu", "tflite_elu", "tflite_sum", "tflite_log_softmax")


def _axes(node):
    """The node's per-sample ``axes`` as axes of the batched arrays (the batch on axis 0)."""
    return tuple(int(a) + 1 for a in node.attrs.get("axes", []))


def _keep(node) -> bool:
    return bool(node.attrs.get("keep_dims", False))


def _named(node, fn, *args, **kw):
    """``fn(*args)``, with a ``ValueError`` of the kernel (a run-time condition LiteRT fails on) naming the node."""
    try:
        return fn(*args, **kw)
    except ValueError as exc:
        raise ValueError(f"node {node.name!r} ({node.attrs.get('tflite_op', node.op)}): {exc}") from None


# ----------------------------------------------------------------------------------------- code comparisons
def _maximum_run(graph, node, ins, dp, trace):
    return [K.quantized_maximum(ins[0], ins[1])], _no_trace()


def _minimum_run(graph, node, ins, dp, trace):
    return [K.quantized_minimum(ins[0], ins[1])], _no_trace()


def _reduce_max_run(graph, node, ins, dp, trace):
    return [K.quantized_reduce_max(ins[0], _axes(node), keepdims=_keep(node))], _no_trace()


def _maximum_float(graph, node, ins):
    return [np.maximum(ins[0], ins[1])]


def _minimum_float(graph, node, ins):
    return [np.minimum(ins[0], ins[1])]


def _reduce_max_float(graph, node, ins):
    axes = _axes(node)
    return [np.max(ins[0], axis=axes, keepdims=_keep(node)) if axes else ins[0]]


# ----------------------------------------------------------------------------------------- arithmetic
def _squared_difference_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    params = _cached(graph, node, "squared_difference", lambda: K.squared_difference_params(*_q(a), *_q(b), *_q(y)))
    return [K.quantized_squared_difference(ins[0], ins[1], params)], _no_trace()


def _squared_difference_float(graph, node, ins):
    return [(ins[0] - ins[1]) ** 2]


def _rsqrt_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    params = _cached(graph, node, "rsqrt", lambda: K.rsqrt_params(*_q(x), *_q(y)))
    return [_named(node, K.quantized_rsqrt, ins[0], params)], _no_trace()


def _rsqrt_float(graph, node, ins):
    with np.errstate(divide="ignore", invalid="ignore"):
        return [1.0 / np.sqrt(ins[0])]


def _prelu_run(graph, node, ins, dp, trace):
    """A constant alpha keeps its TFLite shape (it broadcasts from the right against the batched input, as against
    TFLite's batch-1 input); a run-time alpha has the batch on axis 0 like the input."""
    x, a, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    params = _cached(graph, node, "prelu", lambda: K.prelu_params(*_q(x), *_q(a), *_q(y)))
    return [K.quantized_prelu(ins[0], ins[1], params)], _no_trace()


def _prelu_float(graph, node, ins):
    return [np.where(ins[0] >= 0, ins[0], ins[0] * ins[1])]


def _elu_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    params = _cached(graph, node, "elu", lambda: K.elu_params(*_q(x), *_q(y)))
    kern = _kernels(graph)
    return [_call(node, kern, K.quantized_elu, ins[0], params, kernels=kern)], _no_trace()


def _elu_float(graph, node, ins):
    return [np.where(ins[0] < 0, np.expm1(np.minimum(ins[0], 0.0)), ins[0])]


def _sum_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    params = _cached(graph, node, "sum", lambda: K.sum_params(*_q(x), *_q(y)))
    kern = _kernels(graph)
    return [_call(node, kern, K.quantized_sum, ins[0], _axes(node), params, keepdims=_keep(node), kernels=kern)], \
        _no_trace()


def _sum_float(graph, node, ins):
    axes = _axes(node)
    return [np.sum(ins[0], axis=axes, keepdims=_keep(node)) if axes else ins[0]]


register_op(Op("tflite_maximum", _maximum_run, _maximum_float, _check_io(2)))
register_op(Op("tflite_minimum", _minimum_run, _minimum_float, _check_io(2)))
register_op(Op("tflite_reduce_max", _reduce_max_run, _reduce_max_float, _check_io(1)))
register_op(Op("tflite_squared_difference", _squared_difference_run, _squared_difference_float, _check_io(2)))
register_op(Op("tflite_rsqrt", _rsqrt_run, _rsqrt_float, _check_io(1)))
register_op(Op("tflite_prelu", _prelu_run, _prelu_float, _check_io(2)))
register_op(Op("tflite_elu", _elu_run, _elu_float, _check_io(1)))
register_op(Op("tflite_sum", _sum_run, _sum_float, _check_io(1)))


def _log_softmax_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    kern = _kernels(graph)
    params = _cached(graph, node, ("log_softmax", kern), lambda: _named(
        node, K.log_softmax_params, float(_q(x)[0]), float(_q(y)[0]), _q(y)[1], kernels=kern))
    return [K.quantized_log_softmax(ins[0], params, kernels=kern)], _no_trace()


def _log_softmax_float(graph, node, ins):
    z = ins[0] - ins[0].max(axis=-1, keepdims=True)
    return [z - np.log(np.exp(z).sum(axis=-1, keepdims=True))]


register_op(Op("tflite_log_softmax", _log_softmax_run, _log_softmax_float, _check_io(1)))

r"""``qlinear_softmax``: onnxruntime's QLinearSoftmax (and the DequantizeLinear -> Softmax -> QuantizeLinear groups
it fuses into one), registered when :mod:`fxpsim.frontends.onnx.ops` is imported.

The arithmetic is :mod:`fxpsim.datapath.onnxruntime.softmax` (a table of float32 exponentials of code
differences, a float32 sum, a float32 division and an int8 output that wraps), the same on every datapath:
it is onnxruntime's kernel, not a MAC (no accumulator of the datapath takes part).

Attributes: ``axis`` (per-sample axis of the ONNX layout), ``opset13`` (True: one softmax along ``axis``;
False, opset 12 and earlier: one over all axes from ``axis`` on, flattened in the ONNX layout), ``in_perm``
(graph layout -> ONNX layout of the tensor; absent when they agree). onnxruntime's int8 -> uint8 rewrite of
the Q/DQ pairs around a fused Softmax shifts the codes and the zero point by 128, which gives the same output.
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import softmax as S
from ...graph.ops import Op
from .op_support import _no_trace, _quantized_io, _scale, _spec, _zp, register_op


def _to_rows(node, x):
    """``x`` (batch first, graph layout) as softmax rows, and the function that puts rows back."""
    perm = node.attrs.get("in_perm")
    full = (0,) + tuple(int(p) + 1 for p in perm) if perm else None
    xo = np.transpose(x, full) if full else x
    axis = int(node.attrs["axis"]) + 1
    if node.attrs.get("opset13", True):
        moved = np.moveaxis(xo, axis, -1)
        rows = moved.reshape(-1, moved.shape[-1])

        def back(r):
            y = np.moveaxis(r.reshape(moved.shape), -1, axis)
            return np.transpose(y, np.argsort(full)) if full else y
    else:
        rows = xo.reshape(int(np.prod(xo.shape[:axis])), -1)

        def back(r):
            y = r.reshape(xo.shape)
            return np.transpose(y, np.argsort(full)) if full else y
    return rows, back


def _softmax_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    rows, back = _to_rows(node, np.asarray(ins[0]))
    out = S.qlinear_softmax_rows(rows, _scale(x), _scale(y), _zp(y), y.dtype)
    return [np.ascontiguousarray(back(out))], _no_trace()


def _softmax_float(graph, node, ins):
    rows, back = _to_rows(node, np.asarray(ins[0], np.float64))
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    return [back(e / e.sum(axis=1, keepdims=True))]


def _check_softmax(graph, node):
    if len([t for t in node.inputs if t]) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (qlinear_softmax): needs one input and one output")
    _quantized_io(graph, node, node.inputs + node.outputs)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    if x.bits != 8 or y.bits != 8 or x.signed != y.signed:
        raise ValueError(f"node {node.name!r} (qlinear_softmax): input and output must both be uint8 or both int8")
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"node {node.name!r} (qlinear_softmax): output shape {list(y.shape)} is not the input's "
                         f"{list(x.shape)}")
    axis = node.attrs.get("axis")
    if not isinstance(axis, int) or not 0 <= axis < len(x.shape):
        raise ValueError(f"node {node.name!r} (qlinear_softmax): axis {axis!r} is not a per-sample axis of "
                         f"{list(x.shape)}")
    perm = node.attrs.get("in_perm")
    if perm and sorted(int(p) for p in perm) != list(range(len(x.shape))):
        raise ValueError(f"node {node.name!r} (qlinear_softmax): in_perm {perm!r} is not a permutation")


register_op(Op("qlinear_softmax", _softmax_run, _softmax_float, _check_softmax))

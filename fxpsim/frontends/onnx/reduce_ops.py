r"""``onnx_reduce_mean``: a DequantizeLinear -> ReduceMean -> QuantizeLinear group as onnxruntime runs it
(DequantizeLinear, its float32 mean over one block of adjacent axes, QuantizeLinear), registered when
:mod:`fxpsim.frontends.onnx.ops` is imported.

.. math:: y = Q\big(\mathrm{fl}(S(DQ(x)) / n)\big)

with :math:`S` onnxruntime's float32 sum of the :math:`n` values of the reduced axes of the ONNX layout
(:mod:`fxpsim.datapath.onnxruntime.reduce`: Eigen's four-lane sums for trailing axes; for a block before kept
axes, MLAS's SGEMM by a row of ones or a sequential sum, as onnxruntime runs them with one intra-op thread).
Attributes: ``reduce_from`` (the first reduced per-sample axis of the ONNX layout), ``reduce_to`` (one past the
last; absent: every axis after ``reduce_from``), ``in_perm`` (graph layout -> ONNX layout of the input; absent when
they agree), ``out_perm`` (ONNX layout -> graph layout of the output; absent when they agree).
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import reduce as RD
from ...graph.ops import Op
from .op_support import _no_trace, _quantized_io, _scale, _spec, _zp, register_op


def _onnx_in(node, x):
    perm = node.attrs.get("in_perm")
    return np.transpose(x, (0,) + tuple(int(p) + 1 for p in perm)) if perm else x


def _to_graph(node, y, batch, n_out_shape):
    perm = node.attrs.get("out_perm")
    y = y.reshape((batch,) + tuple(n_out_shape))
    return np.transpose(y, (0,) + tuple(int(p) + 1 for p in perm)) if perm else y


def _block(node, rank):
    k = int(node.attrs["reduce_from"])
    end = node.attrs.get("reduce_to")
    return k, rank if end is None else int(end)


def _onnx_out_shape(node, xo_shape, y_rank):
    k, end = _block(node, len(xo_shape))
    keep = len(xo_shape) == y_rank
    return tuple(xo_shape[:k]) + ((1,) * (end - k) if keep else ()) + tuple(xo_shape[end:])


def _mean(graph, node, xf, mean):
    """``mean(x, first, end)``: the means of the whole ONNX-layout tensor over its axes ``first`` .. ``end - 1``."""
    y = _spec(graph, node.outputs[0])
    xo = _onnx_in(node, xf)
    k, end = _block(node, xo.ndim - 1)
    m = mean(xo, k + 1, end + 1)
    return _to_graph(node, m, len(xo), _onnx_out_shape(node, xo.shape[1:], len(y.shape)))


def _reduce_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    xf = K.dequantize_linear(np.asarray(ins[0]), np.float32(_scale(x)), _zp(x))
    m = _mean(graph, node, xf, RD.reduce_mean_block)
    out = K.quantize_linear(m, np.float32(_scale(y)), _zp(y), y.dtype)
    return [np.ascontiguousarray(out)], _no_trace()


def _reduce_float(graph, node, ins):
    return [_mean(graph, node, np.asarray(ins[0], np.float64),
                  lambda x, a, e: x.mean(axis=tuple(range(a, e))))]


def _check_reduce(graph, node):
    if len([t for t in node.inputs if t]) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (onnx_reduce_mean): needs one input and one output")
    _quantized_io(graph, node, node.inputs + node.outputs)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    rank = len(x.shape)
    k = node.attrs.get("reduce_from")
    if not isinstance(k, int) or not 0 <= k < rank:
        raise ValueError(f"node {node.name!r} (onnx_reduce_mean): reduce_from {k!r} is not a per-sample axis of "
                         f"{list(x.shape)}")
    for key, r in (("in_perm", rank), ("out_perm", len(y.shape))):
        p = node.attrs.get(key)
        if p and sorted(int(a) for a in p) != list(range(r)):
            raise ValueError(f"node {node.name!r} (onnx_reduce_mean): {key} {p!r} is not a permutation of {r} axes")
    perm = node.attrs.get("in_perm")
    xo = tuple(x.shape[int(p)] for p in perm) if perm else tuple(x.shape)
    end = node.attrs.get("reduce_to", rank)
    if not isinstance(end, int) or not k < end <= rank:
        raise ValueError(f"node {node.name!r} (onnx_reduce_mean): reduce_to {end!r} is not an axis after "
                         f"reduce_from {k} of {list(x.shape)} (or its end)")
    if len(y.shape) not in (rank, rank - (end - k)):
        raise ValueError(f"node {node.name!r} (onnx_reduce_mean): an output of rank {len(y.shape)} for a rank-{rank} "
                         f"input reduced over axes {k} .. {end - 1}")
    want = _onnx_out_shape(node, xo, len(y.shape))
    op = node.attrs.get("out_perm")
    got = tuple(y.shape[int(p)] for p in np.argsort(op)) if op else tuple(y.shape)
    if got != want:
        raise ValueError(f"node {node.name!r} (onnx_reduce_mean): output shape {list(y.shape)} is not the mean of "
                         f"{list(xo)} over axes {k} .. {end - 1}")


register_op(Op("onnx_reduce_mean", _reduce_run, _reduce_float, _check_reduce))

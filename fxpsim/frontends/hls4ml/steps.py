"""Compiled-plan steps of the hls4ml ops (``Op.prepare``, :mod:`fxpsim.graph.plan`): types parsed once, and Dense /
Conv2D on the graph's own datapath (``requantization = "native"``: each node's ``accum_t``) by a product table.

Dense / Conv2D: :class:`fxpsim.datapath.hls4ml.table_mac.TableMac` (each product :math:`A(v\\,w_{kj})` cast
once for every input code :math:`v`, then hls4ml's fitted sequential sums; Conv2D on each output pixel's patch,
padded taps code 0), when the table has at most :data:`MAX_TABLE` entries.  :math:`y = R(s)` and the
activations are tables over every code of their input type (computed by the reference casts) when it has at
most :math:`2^{20}` codes.  Any other datapath, an ``accum_t`` the table does not model, and ``trace`` run the
op's ``run``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...core.fixed import FixedArray
from ...datapath.hls4ml import relu, linear
from ...datapath.hls4ml.layers import conv_patches
from ...datapath.hls4ml.table_mac import TableMac, product_table
from ...graph.plan import untraced_step
from ...graph.registry import OPS
from .types import conv_geometry, fixed_codes, node_accum_t, tensor_format, type_attr

__all__ = ["PREPARED_OPS", "MAX_TABLE"]

#: The most entries (input codes x K x N) a product table may have.
MAX_TABLE = 1 << 22


def _input_prepare(graph, node, dp, in_shapes):
    t, dtype = type_attr(node, "type"), graph.tensors[node.outputs[0]].dtype
    return untraced_step(graph, node, dp, lambda ins: t.from_float(np.asarray(ins[0], np.float64)).raw
                          .astype(dtype))


def _activation_prepare(graph, node, dp, in_shapes):
    fn = {"relu": relu, "linear": linear}.get(node.attrs.get("function"))
    if fn is None:
        return None
    t, dtype = type_attr(node, "result_t"), graph.tensors[node.outputs[0]].dtype
    apply = _code_map(tensor_format(graph, node.inputs[0]), t, fn)
    return untraced_step(graph, node, dp, lambda ins: apply(ins[0]).astype(dtype))


def _mac_prepare(graph, node, dp, in_shapes):
    if getattr(dp, "requantization", None) != "native" or in_shapes[0] is None:
        return None
    accum_t, result_t = node_accum_t(node, dp), type_attr(node, "result_t")
    lo, hi = graph.tensors[node.inputs[0]].code_range
    w = fixed_codes(graph, node.inputs[1], graph.tensors[node.inputs[1]].data)
    w2 = w.reshape(-1, w.shape[-1])
    k, n = w2.shape
    if (hi - lo + 1) * k * n > MAX_TABLE:
        return None
    x_fmt = tensor_format(graph, node.inputs[0])
    b = accum_t.cast(fixed_codes(graph, node.inputs[2], graph.tensors[node.inputs[2]].data)).raw
    try:
        mac = TableMac(product_table(x_fmt, (lo, hi), w2, accum_t), (lo, hi), b, accum_t)
    except ValueError:
        return None
    cast = _code_map(accum_t.fmt, result_t)
    dtype, out_shape = graph.tensors[node.outputs[0]].dtype, graph.tensors[node.outputs[0]].shape
    if node.op == "hls4ml_dense":
        return untraced_step(graph, node, dp, lambda ins: cast(mac(ins[0])).reshape((len(ins[0]),) + out_shape)
                              .astype(dtype))
    stride, pads = conv_geometry(node)

    def fast(ins):
        p = conv_patches(FixedArray(ins[0].astype(np.int64), x_fmt), w, stride, pads).raw
        return cast(mac(p)).reshape((len(ins[0]),) + out_shape).astype(dtype)
    return untraced_step(graph, node, dp, fast)


def _code_map(fmt, result_t, fn=None):
    """``codes -> R(codes)`` (``fn(FixedArray, result_t)``, default ``result_t.cast``) for codes of ``fmt``: a
    table over every code of ``fmt`` when it has at most :data:`MAX_TABLE` of them, else the cast itself."""
    apply = fn or (lambda x, t: t.cast(x))
    if fmt.word <= 20:
        lo = fmt.min_code
        lut = apply(FixedArray(np.arange(lo, fmt.max_code + 1, dtype=np.int64), fmt), result_t).raw
        return lambda codes: lut[codes.astype(np.int64, copy=False) - lo] if lo else lut[codes]
    return lambda codes: apply(FixedArray(codes.astype(np.int64), fmt), result_t).raw


#: The ops given a prepared step here.
PREPARED_OPS = {"hls4ml_input": _input_prepare, "hls4ml_activation": _activation_prepare,
                "hls4ml_dense": _mac_prepare, "hls4ml_conv2d": _mac_prepare}

for _name, _prepare in PREPARED_OPS.items():
    OPS[_name] = dataclasses.replace(OPS[_name], prepare=_prepare)

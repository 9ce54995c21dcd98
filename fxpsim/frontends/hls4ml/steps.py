"""Compiled-plan steps of the hls4ml ops (``Op.prepare``, :mod:`fxpsim.graph.plan`): types parsed once, and Dense /
Conv2D on the graph's own datapath (``requantization = "native"``: each node's ``accum_t``) by a product table.

**The product table.**  hls4ml's Dense is :math:`s_j = A(\\cdots A(A(b_j) + m_{0j}) \\cdots + m_{K-1,j})` with
:math:`m_{kj} = A(x_k w_{kj})` (:mod:`fxpsim.datapath.hls4ml.layers`).  :math:`m_{kj}` depends on the input code
:math:`x_k` alone once the weights are fixed, so the plan computes, with the datapath's own cast
(:func:`fxpsim.core.fixed.mul` into ``accum_t``: every quantization and overflow mode),

.. math::

    T_{k, v, j} = A(v\\, w_{kj}) \\quad \\text{for every code } v \\text{ of the input's type,}

and checks that no partial sum can leave ``accum_t``: per output,
:math:`A(b_j) + \\sum_k \\min(0, \\min_v T_{kvj})` and :math:`A(b_j) + \\sum_k \\max(0, \\max_v T_{kvj})` within
its range.  Then every fitted add is exact and :math:`s_j = A(b_j) + \\sum_k T_{k, x_k, j}` (a gather and a sum
in int64).  Otherwise a wrapping ``accum_t`` wraps that sum once (reduction modulo :math:`2^W` commutes with the
adds), and a saturating one (``AP_SAT``, ``AP_SAT_SYM``, ``AP_SAT_ZERO``) takes the exact partial sums
(a cumulative sum): the sums none of whose partial sums leaves ``accum_t`` are exact, and the others fit the
:math:`K` adds in order, vectorized over those sums alone.  :math:`y = R(s)` and the activations are tables over every code of
their input type (computed by the reference casts) when it has at most :math:`2^{20}` codes.  Conv2D is that
Dense on each output pixel's patch (padded taps are code 0).
A node whose bound fails, whose table would exceed :data:`MAX_TABLE` entries, any other datapath, and
``trace`` run the op's ``run``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...core.fixed import FixedArray, Overflow, mul
from ...datapath.hls4ml import relu, linear
from ...datapath.hls4ml.layers import conv_patches
from ...graph.registry import OPS
from . import ops as _ops

__all__ = ["PREPARED_OPS", "MAX_TABLE"]

#: The most entries (input codes x K x N) a product table may have.
MAX_TABLE = 1 << 22


def _with_fallback(graph, node, dp, fast):
    run = OPS[node.op].run

    def step(ins, trace):
        if trace:
            return run(graph, node, ins, dp, trace)
        return [fast(ins)], None
    return step


def _input_prepare(graph, node, dp, in_shapes):
    t, dtype = _ops._type_attr(node, "type"), graph.tensors[node.outputs[0]].dtype
    return _with_fallback(graph, node, dp, lambda ins: t.from_float(np.asarray(ins[0], np.float64)).raw
                          .astype(dtype))


def _activation_prepare(graph, node, dp, in_shapes):
    fn = {"relu": relu, "linear": linear}.get(node.attrs.get("function"))
    if fn is None:
        return None
    t, dtype = _ops._type_attr(node, "result_t"), graph.tensors[node.outputs[0]].dtype
    apply = _code_map(_ops.tensor_format(graph, node.inputs[0]), t, fn)
    return _with_fallback(graph, node, dp, lambda ins: apply(ins[0]).astype(dtype))


def product_table(x_fmt, code_range, weight: FixedArray, accum_t) -> np.ndarray:
    """:math:`T_{k,v,j} = A(v\\,w_{kj})` for the codes :math:`v` of ``code_range`` (``[K, V, N]``, int64), the cast
    into ``accum_t`` as hls4ml's ``product()`` assignment (:func:`fxpsim.core.fixed.mul`)."""
    lo, hi = code_range
    v = FixedArray(np.arange(lo, hi + 1, dtype=np.int64).reshape(-1, 1, 1), x_fmt)
    t = mul(v, weight.reshape(1, *weight.shape), accum_t.fmt, accum_t.rounding, accum_t.overflow)
    return np.ascontiguousarray(np.transpose(t.raw, (1, 0, 2)))


def _fit(fmt, overflow):
    """``v -> fit(v)`` into ``fmt`` for one ``accum_t`` add (``v`` int64 within twice the range), or ``None``."""
    lo, hi = fmt.min_code, fmt.max_code
    if overflow in (Overflow.SATURATE, Overflow.SATURATE_SYMMETRIC):
        low = -hi if fmt.signed and overflow == Overflow.SATURATE_SYMMETRIC else lo
        return lambda v: np.minimum(np.maximum(v, low, out=v), hi, out=v)
    if overflow == Overflow.SATURATE_ZERO:
        return lambda v: np.where((v < lo) | (v > hi), 0, v)
    return None


def _wrap(fmt):
    """``v -> v`` reduced into ``fmt`` modulo :math:`2^W` (two's complement)."""
    lo, mask = fmt.min_code, np.int64((1 << fmt.word) - 1)
    return lambda v: ((v - lo) & mask) + lo


def _mac_prepare(graph, node, dp, in_shapes):
    if getattr(dp, "requantization", None) != "native" or in_shapes[0] is None:
        return None
    accum_t, result_t = _ops.node_accum_t(node, dp), _ops._type_attr(node, "result_t")
    if accum_t.n_bits or accum_t.fmt.word > 62:
        return None
    x_spec = graph.tensors[node.inputs[0]]
    lo, hi = x_spec.code_range
    w = _ops._fixed(graph, node.inputs[1], graph.tensors[node.inputs[1]].data)
    w2 = w.reshape(-1, w.shape[-1])
    k, n = w2.shape
    if (hi - lo + 1) * k * n > MAX_TABLE:
        return None
    table = product_table(_ops.tensor_format(graph, node.inputs[0]), (lo, hi), w2, accum_t)
    b = accum_t.cast(_ops._fixed(graph, node.inputs[2], graph.tensors[node.inputs[2]].data)).raw.astype(np.int64)
    acc_fmt = accum_t.fmt
    low = b + np.minimum(table.min(axis=1), 0).sum(axis=0)
    high = b + np.maximum(table.max(axis=1), 0).sum(axis=0)
    if int(low.min()) >= acc_fmt.min_code and int(high.max()) <= acc_fmt.max_code:
        def accumulate(g):                      # no partial sum can leave accum_t: the exact sum
            return g.sum(axis=0, dtype=np.int64) + b
    elif accum_t.overflow == Overflow.WRAP:
        wrap = _wrap(acc_fmt)

        def accumulate(g):                      # wrapping at every add = wrapping the exact sum once
            return wrap(g.sum(axis=0, dtype=np.int64) + b)
    else:
        fit = _fit(acc_fmt, accum_t.overflow)
        if fit is None:
            return None

        a_lo, a_hi = acc_fmt.min_code, acc_fmt.max_code

        def accumulate(g):                      # every add fitted, in input order
            partial = np.cumsum(g, axis=0, dtype=np.int64)
            partial += b
            acc = partial[-1]
            out = (partial.min(axis=0) < a_lo) | (partial.max(axis=0) > a_hi)
            if out.any():                       # only sums some partial sum of which left accum_t
                seq = np.array(np.broadcast_to(b, out.shape)[out])
                terms = g[:, out].astype(np.int64)
                for i in range(k):
                    seq = fit(np.add(seq, terms[i], out=seq))
                acc[out] = seq
            return acc
    narrow = np.int16 if acc_fmt.word <= 16 else np.int32 if acc_fmt.word <= 32 else np.int64
    table = table.reshape(k * (hi - lo + 1), n).astype(narrow)     # (narrow: the gather is memory bound)
    rows = (np.arange(k, dtype=np.int64) * (hi - lo + 1) - lo)          # row of (k, v): k V + v - lo
    cast = _code_map(acc_fmt, result_t)
    dtype, out_shape = graph.tensors[node.outputs[0]].dtype, graph.tensors[node.outputs[0]].shape
    if node.op == "hls4ml_dense":
        def fast(ins):
            x = ins[0]
            acc = accumulate(table[x.reshape(-1, k).T.astype(np.int64) + rows[:, None]])   # [K, rows, N]
            return cast(acc).reshape((len(x),) + out_shape).astype(dtype)
        return _with_fallback(graph, node, dp, fast)
    stride, pads = _ops._conv_geometry(node)
    x_fmt = _ops.tensor_format(graph, node.inputs[0])

    def fast(ins):
        x = ins[0]
        p = conv_patches(FixedArray(x.astype(np.int64), x_fmt), w, stride, pads).raw
        acc = accumulate(table[p.reshape(-1, k).T + rows[:, None]])
        return cast(acc).reshape((len(x),) + out_shape).astype(dtype)
    return _with_fallback(graph, node, dp, fast)


def _code_map(fmt, result_t, fn=None):
    """``codes -> R(codes)`` (``fn(FixedArray, result_t)``, default ``result_t.cast``) for codes of ``fmt``: a
    table over every code of ``fmt`` when it has at most :data:`MAX_TABLE` of them, else the cast itself."""
    apply = fn or (lambda x, t: t.cast(x))
    if fmt.word <= 20:
        lo = fmt.min_code
        lut = apply(FixedArray(np.arange(lo, fmt.max_code + 1, dtype=np.int64), fmt), result_t).raw
        return lambda codes: lut[codes.astype(np.int64) - lo] if lo else lut[codes]
    return lambda codes: apply(FixedArray(codes.astype(np.int64), fmt), result_t).raw


#: The ops given a prepared step here.
PREPARED_OPS = {"hls4ml_input": _input_prepare, "hls4ml_activation": _activation_prepare,
                "hls4ml_dense": _mac_prepare, "hls4ml_conv2d": _mac_prepare}

for _name, _prepare in PREPARED_OPS.items():
    OPS[_name] = dataclasses.replace(OPS[_name], prepare=_prepare)

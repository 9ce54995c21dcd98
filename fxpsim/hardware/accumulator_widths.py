"""How wide each MAC accumulator of a graph must be, three ways, computed exactly.

For every MAC node -- QONNX's ``qonnx_matmul`` / ``qonnx_conv``, the core MAC ops, and every importer op with a
MAC view (:mod:`fxpsim.graph.mac_view`: LiteRT's kernel-set ops, ONNX ``QLinearConv`` ...) -- with ``K``
products per output (the operands as the multipliers see them: codes minus zero points; the bias left out, as
FINN leaves it out):

* ``finn_datatypes``: FINN's ``MinimizeAccumulatorWidth`` rule for runtime-writeable weights, from the input and
  weight datatypes alone (every weight at the datatype's minimum, then at its maximum);
* ``finn_weights``: the same rule on the actual weights (qonnx's ``calculate_matvec_accumulator_range``):
  :math:`\\max_j \\sum_k w_{kj}\\,(x_{max}\\text{ if } w_{kj} > 0 \\text{ else } x_{min})` and the minimum alike;
* ``finn_float32``: the same rule evaluated on float32 numbers (weights, products, sums, ``log2``), as FINN's
  thresholding op did before finn#1517 was fixed: a bit short once the range passes :math:`2^{24}`;
* ``observed``: the largest exact running partial sum on the data given (sequential order, ``(kh, kw, c)`` for
  convolutions), as a signed width.

An hls4ml MAC whose ``accum_t`` rounds the products (:math:`F_{acc} < F_x + F_w`) adds
:math:`p_{kj} = R(x_k w_{kj} 2^{d})` (:mod:`fxpsim.datapath.hls4ml.partial_sums`), not integer products: its
three FINN columns apply the rule to those products (each at the larger / smaller of its values at the ends of
the input range, the weights at the datatype's ends for ``finn_datatypes``), in the accumulator's LSB, and
``observed`` is the range of their running sums.

FINN's width from a range :math:`[a, b]`: :math:`\\lceil\\log_2(b + 1)\\rceil` unsigned when :math:`a \\ge 0`,
else :math:`\\lceil\\log_2 \\max(-a, b + 1)\\rceil + 1`; here with integers only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..datapath.partial_sums import mac_rows, running_sum_peak

__all__ = ["AccumulatorWidth", "accumulator_widths", "finn_width", "matvec_range"]


@dataclass(frozen=True)
class AccumulatorWidth:
    node: str
    op: str
    k: int
    finn_datatypes: int
    finn_weights: int
    finn_float32: int
    observed: int | None
    weights_range: tuple


def _observed_bits(peaks: dict) -> int:
    """Signed width holding every exact running sum of :func:`running_sum_peak`'s result (its signed range:
    a sum of exactly :math:`-2^{n-1}` fits ``n`` bits)."""
    from .simulation import _signed_bits
    return _signed_bits(peaks["low"], peaks["high"])


def finn_width(acc_min: int, acc_max: int) -> int:
    """FINN's accumulator width of the range ``[acc_min, acc_max]``, exactly."""
    acc_min, acc_max = int(acc_min), int(acc_max)
    if acc_min >= 0:
        return max(acc_max.bit_length(), 1)
    return (max(-acc_min, 1 + acc_max) - 1).bit_length() + 1


def matvec_range(w, x_min: int, x_max: int) -> tuple[int, int]:
    """qonnx's ``calculate_matvec_accumulator_range`` of ``w [K, M]`` in Python integers."""
    w = np.asarray(w).astype(object)
    hi = np.where(w > 0, w * x_max, w * x_min).sum(axis=0)
    lo = np.where(w > 0, w * x_min, w * x_max).sum(axis=0)
    return int(min(lo)), int(max(hi))


def _finn_float32(w, x_min, x_max) -> int:
    m = np.asarray(w, np.float32)
    f = np.float32
    max_v = np.where(m > 0, f(x_max), f(x_min)).astype(f)
    min_v = np.where(m > 0, f(x_min), f(x_max)).astype(f)
    return _float32_rule(f((m * min_v).sum(axis=0, dtype=f).min()), f((m * max_v).sum(axis=0, dtype=f).max()))


def _float32_rule(acc_min, acc_max) -> int:
    """FINN's width of a float32 range, in float32 (``log2`` and the ``+ 1`` included); at least 1 bit, as
    :func:`finn_width` (the range ``[0, 0]`` of all-zero weights is 1 bit, not 0)."""
    f = np.float32
    if acc_min >= 0:
        return max(int(np.ceil(np.log2(acc_max + f(1)))), 1)
    return int(np.ceil(np.log2(max(-acc_min, f(1) + acc_max)))) + 1


def _matrix(graph, node) -> np.ndarray:
    w = np.asarray(graph.tensors[node.inputs[1]].data).astype(np.int64)
    return w if node.op == "qonnx_matmul" else w.reshape(w.shape[0], -1).T


def _observed(graph, node, kept) -> int:
    x = np.asarray(kept[node.inputs[0]]).astype(np.int64) - int(node.attrs["x_zp"])
    w = np.asarray(graph.tensors[node.inputs[1]].data).astype(np.int64)
    if node.op == "qonnx_matmul":
        a, wr, _ = mac_rows("fully_connected", x, w.T)
        return _observed_bits(running_sum_peak(a, wr))
    a_ = node.attrs
    p = a_["pads"]
    if int(a_["group"]) != 1:
        raise ValueError(f"node {node.name!r}: observed partial sums of grouped convolutions are not modelled")
    a, wr, _ = mac_rows("conv2d", np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1))),
                        np.ascontiguousarray(np.transpose(w, (0, 2, 3, 1))), stride=tuple(a_["strides"]),
                        dilation=tuple(a_["dilations"]), pads=((p[0], p[2]), (p[1], p[3])))
    return _observed_bits(running_sum_peak(a, wr))


def _view(graph, node, kept):
    """The node's MAC as core-layout operands (bias dropped), or None for a node that does not accumulate."""
    from ..graph.mac_ops import MAC_OPS
    from ..graph.mac_view import MAC_VIEWS, MacOperands, core_operands, mac_operands
    from ..graph.registry import find_op
    find_op(node.op)                                     # loads the op's frontend (its view)
    if node.op not in MAC_OPS and node.op not in MAC_VIEWS:
        return None
    ins = []
    for t in node.inputs:
        spec = graph.tensors[t] if t else None
        if spec is None:
            ins.append(None)
        elif spec.is_constant:
            ins.append(spec.data)
        else:
            ins.append(kept[t] if kept is not None else np.zeros((1,) + tuple(spec.shape), spec.dtype))
    ins = [v for v in ins if v is not None]
    ops = core_operands(graph, node, ins) if node.op in MAC_OPS else mac_operands(graph, node, ins)
    return None if ops is None else MacOperands(ops.op, ops.x, ops.w, None, ops.geometry, ops.x_zero_point)


def _view_width(graph, node, ops, observed: bool) -> AccumulatorWidth:
    xs, ws = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    zx = int(xs.zero_point[0]) if xs.zero_point is not None else 0
    x_lo, x_hi = (int(v) - zx for v in xs.code_range)
    zw = np.asarray(ws.zero_point if ws.zero_point is not None else [0], np.int64)
    w_lo, w_hi = int(ws.code_range[0]) - int(zw.max()), int(ws.code_range[1]) - int(zw.min())
    a, w2, _ = mac_rows(ops.op, ops.x, ops.w, **ops.geometry)
    w = w2.T                                               # [K, outputs], the matvec layout
    lo1, hi1 = matvec_range(np.full(w.shape, w_lo, np.int64), x_lo, x_hi)
    lo2, hi2 = matvec_range(np.full(w.shape, w_hi, np.int64), x_lo, x_hi)
    obs = _observed_bits(running_sum_peak(a, w2)) if observed else None
    return AccumulatorWidth(node.name, node.op, int(w.shape[0]), finn_width(min(lo1, lo2), max(hi1, hi2)),
                            finn_width(*matvec_range(w, x_lo, x_hi)), _finn_float32(w, x_lo, x_hi), obs,
                            matvec_range(w, x_lo, x_hi))


def _rounded_products(x_fmt, lo, hi, w, accum_t):
    """Each rounded product's smaller and larger value over inputs in ``[lo, hi]``: two ``[K, N]`` int arrays."""
    from ..core.fixed import FixedArray
    from ..datapath.hls4ml.partial_sums import rounded_products
    p = rounded_products(FixedArray(np.array([[lo], [hi]], np.int64), x_fmt), w, accum_t)
    return np.minimum(p[0], p[1]), np.maximum(p[0], p[1])


def _rounded_range(x_fmt, lo, hi, w, accum_t):
    """Per output, the smallest and largest sum of rounded products over inputs in ``[lo, hi]``."""
    pmin, pmax = _rounded_products(x_fmt, lo, hi, w, accum_t)
    return pmin.astype(object).sum(axis=0), pmax.astype(object).sum(axis=0)


def _float32_width(pmin, pmax) -> int:
    """FINN's rule on float32 sums of the products (as :func:`_finn_float32`)."""
    f = np.float32
    return _float32_rule(f(pmin.astype(f).sum(axis=0, dtype=f).min()), f(pmax.astype(f).sum(axis=0, dtype=f).max()))


def _hls4ml_rounded(graph, node, kept) -> AccumulatorWidth | None:
    """The entry of an hls4ml MAC node whose ``accum_t`` rounds its products (None for any other node)."""
    if node.op not in ("hls4ml_dense", "hls4ml_conv2d"):
        return None
    from ..core.fixed import FixedArray
    from ..datapath.hls4ml.layers import conv_patches
    from ..datapath.hls4ml.partial_sums import partial_sums
    from ..frontends.hls4ml.ops import node_accum_t, tensor_format
    xs, ws, bs = (graph.tensors[t] for t in node.inputs[:3])
    x_fmt, w_fmt, acc = tensor_format(graph, xs.name), tensor_format(graph, ws.name), node_accum_t(node, None)
    if acc.fmt.frac >= x_fmt.frac + w_fmt.frac:
        return None
    w4 = FixedArray(np.asarray(ws.data).astype(np.int64), w_fmt)
    w = w4.reshape(-1, w4.shape[-1])
    lo, hi = (int(v) for v in xs.code_range)
    mins, maxs = _rounded_range(x_fmt, lo, hi, w, acc)
    span = (int(min(mins)), int(max(maxs)))
    ends = [_rounded_range(x_fmt, lo, hi, FixedArray(np.full(w.shape, c, np.int64), w_fmt), acc)
            for c in (w_fmt.min_code, w_fmt.max_code)]
    observed = None
    if kept is not None:
        xa = FixedArray(np.asarray(kept[xs.name]).astype(np.int64), x_fmt)
        if node.op == "hls4ml_conv2d":
            xa = conv_patches(xa, w4, node.attrs["stride"], node.attrs["pads"])
        no_bias = FixedArray(np.zeros(w.shape[-1], np.int64), tensor_format(graph, bs.name))   # as FINN: no bias
        _, low, high = partial_sums(xa, w, no_bias, acc)
        observed = _observed_bits({"low": low, "high": high})
    return AccumulatorWidth(node.name, node.op, int(w.shape[0]),
                            finn_width(min(int(min(e[0])) for e in ends), max(int(max(e[1])) for e in ends)),
                            finn_width(*span), _float32_width(*_rounded_products(x_fmt, lo, hi, w, acc)), observed,
                            span)


def accumulator_widths(graph, x=None) -> list[AccumulatorWidth]:
    """One :class:`AccumulatorWidth` per MAC node of ``graph`` (``observed`` when ``x`` is given), in run order."""
    kept = graph.run(x, keep=True)[2] if x is not None else None
    out = []
    for node in graph.nodes:
        rounded = _hls4ml_rounded(graph, node, kept)
        if rounded is not None:
            out.append(rounded)
            continue
        if node.op not in ("qonnx_matmul", "qonnx_conv"):
            ops = _view(graph, node, kept)
            if ops is not None:
                out.append(_view_width(graph, node, ops, kept is not None))
            continue
        a = node.attrs
        x_lo, x_hi, w_lo, w_hi = (int(a[k]) for k in ("x_lo", "x_hi", "w_lo", "w_hi"))
        w = _matrix(graph, node)
        lo1, hi1 = matvec_range(np.full(w.shape, w_lo, np.int64), x_lo, x_hi)
        lo2, hi2 = matvec_range(np.full(w.shape, w_hi, np.int64), x_lo, x_hi)
        out.append(AccumulatorWidth(
            node.name, node.op, int(w.shape[0]), finn_width(min(lo1, lo2), max(hi1, hi2)),
            finn_width(*matvec_range(w, x_lo, x_hi)), _finn_float32(w, x_lo, x_hi),
            None if kept is None else _observed(graph, node, kept), matvec_range(w, x_lo, x_hi)))
    return out

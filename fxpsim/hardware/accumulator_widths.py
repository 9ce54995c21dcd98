"""How wide each MAC accumulator of an imported QONNX graph must be, three ways, computed exactly.

For every ``qonnx_matmul`` / ``qonnx_conv`` node, with ``K`` products per output:

* ``finn_datatypes``: FINN's ``MinimizeAccumulatorWidth`` rule for runtime-writeable weights, from the input and
  weight datatypes alone (every weight at the datatype's minimum, then at its maximum);
* ``finn_weights``: the same rule on the actual weights (qonnx's ``calculate_matvec_accumulator_range``):
  :math:`\\max_j \\sum_k w_{kj}\\,(x_{max}\\text{ if } w_{kj} > 0 \\text{ else } x_{min})` and the minimum alike;
* ``finn_float32``: the same rule evaluated on float32 numbers (weights, products, sums, ``log2``), as FINN's
  thresholding op did before finn#1517 was fixed: a bit short once the range passes :math:`2^{24}`;
* ``observed``: the largest exact running partial sum on the data given (sequential order, ``(kh, kw, c)`` for
  convolutions), as a signed width.

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
    acc_max = f((m * max_v).sum(axis=0, dtype=f).max())
    acc_min = f((m * min_v).sum(axis=0, dtype=f).min())
    if acc_min >= 0:
        return int(np.ceil(np.log2(acc_max + f(1))))
    return int(np.ceil(np.log2(max(-acc_min, f(1) + acc_max)))) + 1


def _matrix(graph, node) -> np.ndarray:
    w = np.asarray(graph.tensors[node.inputs[1]].data).astype(np.int64)
    return w if node.op == "qonnx_matmul" else w.reshape(w.shape[0], -1).T


def _observed(graph, node, kept) -> int:
    x = np.asarray(kept[node.inputs[0]]).astype(np.int64) - int(node.attrs["x_zp"])
    w = np.asarray(graph.tensors[node.inputs[1]].data).astype(np.int64)
    if node.op == "qonnx_matmul":
        a, wr, _ = mac_rows("fully_connected", x, w.T)
        return int(running_sum_peak(a, wr)["peak"]).bit_length() + 1
    a_ = node.attrs
    p = a_["pads"]
    if int(a_["group"]) != 1:
        raise ValueError(f"node {node.name!r}: observed partial sums of grouped convolutions are not modelled")
    a, wr, _ = mac_rows("conv2d", np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1))),
                        np.ascontiguousarray(np.transpose(w, (0, 2, 3, 1))), stride=tuple(a_["strides"]),
                        dilation=tuple(a_["dilations"]), pads=((p[0], p[2]), (p[1], p[3])))
    return int(running_sum_peak(a, wr)["peak"]).bit_length() + 1


def accumulator_widths(graph, x=None) -> list[AccumulatorWidth]:
    """One :class:`AccumulatorWidth` per MAC node of an imported QONNX graph (``observed`` when ``x`` is given)."""
    kept = graph.run(x, keep=True)[2] if x is not None else None
    out = []
    for node in graph.nodes:
        if node.op not in ("qonnx_matmul", "qonnx_conv"):
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

"""Any accumulating node seen as one of the core MAC ops, so that every analysis -- exact accumulator values,
partial-sum peaks, bits needed, headroom, bit-ops -- reads an importer's MAC ops (LiteRT's runtime-native
kernels, ONNX ``QLinearConv``/``ConvInteger``/``QLinearMatMul``/``MatMulInteger``) as it reads the core ones.

A view is :class:`MacOperands`: the offset codes the multipliers see, laid out as the core op takes them
(``x`` NHWC or ``[..., K]``; ``w`` ``[O, KH, KW, C]`` for ``conv2d``, ``[1, KH, KW, C*M]`` for
``depthwise_conv2d``, ``[O, K]`` for ``fully_connected``), the bias in the accumulator's LSB and the convolution
geometry, so that output ``o`` of row ``r`` accumulates

.. math::

    s_{r,o} = b_o + \\sum_{k=1}^{K} (x_{r,k} - z_x)(w_{o,k} - z_{w,o}).

Frontends register a view per op name (:func:`register_mac_view`); :func:`mac_operands` gives ``None`` for a node
without one (its analysis columns stay empty rather than wrong). The core MAC ops keep their own path
(:func:`fxpsim.graph.mac_ops.exact_accumulator` and their traced peaks); :func:`core_operands` is their view for
frontends whose node is a core op in another name.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..datapath.partial_sums import mac_rows, running_sum_peak
from .registry import _pads, _padding, _pair, _spec

__all__ = ["MacOperands", "register_mac_view", "mac_operands", "core_operands", "mac_sums", "MAC_VIEWS"]

#: Op name -> ``view(graph, node, ins) -> MacOperands | None``.
MAC_VIEWS: dict = {}


@dataclass(frozen=True)
class MacOperands:
    """One MAC node's operands in a core op's layout (see the module docstring)."""
    op: str                                 # "fully_connected", "conv2d" or "depthwise_conv2d"
    x: np.ndarray                           # offset input codes (int64)
    w: np.ndarray                           # offset weight codes (int64), the core layout
    bias: np.ndarray | None = None          # [O] codes in the accumulator's LSB
    geometry: dict = field(default_factory=dict)    # stride, dilation, pads (convolutions)
    x_zero_point: int = 0                   # z_x: what zero_point="fold" feeds the multipliers back

    def __post_init__(self):
        if self.op not in ("fully_connected", "conv2d", "depthwise_conv2d"):
            raise ValueError(f"MacOperands: op must be a core MAC op, got {self.op!r}")


def register_mac_view(op_name: str, view) -> None:
    """Register ``view(graph, node, ins) -> MacOperands | None`` for the nodes of op ``op_name``."""
    MAC_VIEWS[op_name] = view


def mac_operands(graph, node, ins) -> MacOperands | None:
    """The node's MAC as core-layout operands, or ``None`` (not an accumulating op, or one without a view)."""
    view = MAC_VIEWS.get(node.op)
    return None if view is None else view(graph, node, ins)


def core_operands(graph, node, ins) -> MacOperands:
    """A core MAC node's view: :math:`x - z_x`, :math:`w - z_w` (per output channel), the stored bias."""
    xspec, wspec = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    xo = ins[0].astype(np.int64) - int(xspec.zero_point[0])
    wo = ins[1].astype(np.int64) - wspec.zero_point.reshape(wspec.channel_shape(ins[1].ndim))
    bias = ins[2].astype(np.int64) if len(node.inputs) > 2 and node.inputs[2] else None
    geometry = {}
    if node.op != "fully_connected":
        stride, dilation = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation")
        geometry = dict(stride=stride, dilation=dilation,
                        pads=_pads(xo.shape[1:3], wo.shape[1:3], stride, dilation, _padding(node.attrs)))
    return MacOperands(node.op, xo, wo, bias, geometry, int(xspec.zero_point[0]))


def mac_sums(ops: MacOperands, *, preload: bool = True, order: str = "sequential",
             zero_point: str = "subtract", with_range: bool = False) -> tuple:
    """``(s, peak)``: the exact accumulator values (the layer's output shape, int64) and the largest exact
    :math:`|\\text{partial sum}|` of the MAC sequence, with the bias preloaded (the accumulator starts at
    :math:`b`) or added after the sum (one more partial sum), summed in ``order`` ("sequential" or "tree").
    ``zero_point="fold"``: the multipliers see raw codes :math:`x` (padded taps :math:`z_x`) and the bias is
    :math:`b' = b - z_x \\sum_k w_k` (unsaturated): the same final values, other partial sums.
    ``with_range``: ``(s, peak, (low, high))``, the smallest and largest exact partial sums as well."""
    a, w2, out_shape = mac_rows(ops.op, ops.x, ops.w, **ops.geometry)
    bias = ops.bias
    if zero_point == "fold" and ops.x_zero_point:
        a = a + ops.x_zero_point
        folded = -ops.x_zero_point * w2.sum(axis=1)
        bias = folded if bias is None else np.asarray(bias, np.int64) + folded
    r = running_sum_peak(a, w2, bias if preload else None, order=order,
                         after=None if preload else bias, keep_sums=True)
    if with_range:
        return r["sums"].reshape(out_shape), r["peak"], (r["low"], r["high"])
    return r["sums"].reshape(out_shape), r["peak"]

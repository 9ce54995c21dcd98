"""The ops of hls4ml graphs (:meth:`Hls4mlModel.to_graph <fxpsim.frontends.hls4ml.Hls4mlModel.to_graph>`),
registered in :data:`fxpsim.graph.registry.OPS` (and listed in its ``OP_PROVIDERS``, so that a saved graph or a
sweep's worker process finds them).

Every tensor between two ops holds the codes :math:`c` of an ``ap_fixed`` type, worth :math:`c\\,2^{-F}`: the
tensor's ``bits`` / ``signed`` and its scale :math:`2^{-F}` (zero point 0) are the type's format; the type's
quantization and overflow modes are the casting node's ``result_t``.  The arithmetic is
:mod:`fxpsim.datapath.hls4ml` (hls4ml's io_parallel C simulation, bit for bit).

====================  ==========================================================================================
op                    inputs / attributes
====================  ==========================================================================================
``hls4ml_input``      float x -> ``type`` (``input_t``): ``nnet::convert_data``, the ``ap_fixed(double)`` cast
``hls4ml_dense``      x [..., K], weight [K, N] (``weight_t`` codes), bias [N] (``bias_t`` codes);
                      ``accum_t``, ``result_t``
``hls4ml_conv2d``     x [H, W, C], weight [fh, fw, C, F], bias [F]; ``accum_t``, ``result_t``, ``stride``
                      [s_h, s_w], ``pads`` [top, bottom, left, right]
``hls4ml_activation`` ``function`` (``relu`` / ``linear``), ``result_t``
``hls4ml_reshape``    the same codes in the output's shape (Flatten)
====================  ==========================================================================================

**The accumulator.**  On the graph's own datapath (``requantization = "native"``, its default: hls4ml's C
simulation) each MAC node accumulates in its ``accum_t``.  On any other datapath (a
:class:`fxpsim.HardwareConfig`: a simulation, a sweep, the exact reference) the datapath's knobs replace the
type's: ``accum_t = ap_fixed<B, B - F, Q, O>`` with :math:`B` = ``accumulator_bits``, :math:`O` =
``accumulator_overflow``, :math:`F` = ``accumulator_frac_bits`` and :math:`Q` = ``product_rounding`` where given,
else the node's ``accum_t``'s; ``bias_add = "after"`` adds the bias last.  hls4ml's arithmetic has no tree order,
no K-tiles, no final-only overflow and no bias register of its own: a datapath asking for one raises
``ValueError`` naming the node.  The requantization knobs (scheme, multiplier, ``rounding``, lookup tables) have
nothing to act on: every result is its node's ``result_t`` cast (the graph's notes say so).

**Traces.**  ``overflows`` counts every overflow of an ``accum_t`` cast (each product, the bias, each add),
``adds`` the fitted adds, ``clipped`` the overflows of the ``result_t`` cast (of the input cast for
``hls4ml_input``); ``product_overflows``, ``bias_overflows``, ``add_overflows`` split the first.  MAC nodes
register a MAC view (:func:`fxpsim.graph.mac_view.register_mac_view`) in their accumulator's LSB when the
products are exact there (:math:`F \\ge F_x + F_w`); with fewer fraction bits the products are rounded before
they are added, which no core MAC op models, and the view is ``None``; ``trace="peaks"`` then gives the
partial sums of the rounded products (:mod:`fxpsim.datapath.hls4ml.partial_sums`: ``partial_peak``,
``partial_range``, ``exact_acc``), and the worst case (``accumulator_bits_needed``) is theirs.
"""
from __future__ import annotations

import numpy as np

from ...core.fixed import FixedArray, Format, Overflow
from ...datapath.hls4ml import ApType, conv2d, dense, linear, relu
from ...datapath.hls4ml.layers import conv_patches
from ...datapath.hls4ml.partial_sums import partial_sums, worst_case_sum
from ...graph.mac_view import MacOperands, register_mac_view
from ...graph.registry import Op, register_op
from .types import (conv_geometry as _conv_geometry, fixed_codes as _fixed, node_accum_t, tensor_format,
                    type_attr as _type_attr, where as _where)

__all__ = ["HLS4ML_OPS", "HLS4ML_DATAPATH", "tensor_format", "node_accum_t"]

HLS4ML_OPS = ("hls4ml_input", "hls4ml_dense", "hls4ml_conv2d", "hls4ml_activation", "hls4ml_reshape")

#: The datapath an hls4ml graph records: each node's own ``accum_t`` (hls4ml's C simulation).
HLS4ML_DATAPATH = {"name": "hls4ml-csim", "accumulator_bits": 64, "accumulator_overflow": "wrap",
                   "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "preload",
                   "requantization": "native", "rounding": "floor", "activation_clamp": True}
_ACTIVATIONS = {"relu": relu, "linear": linear}


def _no_trace() -> dict:
    return {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def _codes(graph, node, y: FixedArray) -> np.ndarray:
    return y.raw.astype(graph.tensors[node.outputs[0]].dtype)


# ----------------------------------------------------------------------------------------- input / activations
def _input_run(graph, node, ins, dp, trace):
    y = _type_attr(node, "type").from_float(np.asarray(ins[0], np.float64))
    return [_codes(graph, node, y)], {**_no_trace(), "clipped": int(y.overflows)}


def _identity_float(graph, node, ins):
    return [np.asarray(ins[0], np.float64)]


def _activation_run(graph, node, ins, dp, trace):
    y = _ACTIVATIONS[node.attrs["function"]](_fixed(graph, node.inputs[0], ins[0]), _type_attr(node, "result_t"))
    return [_codes(graph, node, y)], {**_no_trace(), "clipped": int(y.overflows)}


def _activation_float(graph, node, ins):
    x = np.asarray(ins[0], np.float64)
    return [np.maximum(x, 0.0) if node.attrs["function"] == "relu" else x]


def _activation_check(graph, node):
    if node.attrs.get("function") not in _ACTIVATIONS:
        raise ValueError(f"{_where(node)}: function must be one of {', '.join(_ACTIVATIONS)}, "
                         f"got {node.attrs.get('activation')!r}")
    _type_attr(node, "result_t")


def _reshape_run(graph, node, ins, dp, trace):
    x = np.asarray(ins[0])
    return [x.reshape((len(x),) + graph.tensors[node.outputs[0]].shape)], _no_trace()


def _reshape_float(graph, node, ins):
    return [np.asarray(ins[0], np.float64).reshape((len(ins[0]),) + graph.tensors[node.outputs[0]].shape)]


def _reshape_check(graph, node):
    a, b = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    if int(np.prod(a.shape)) != int(np.prod(b.shape)):
        raise ValueError(f"{_where(node)}: reshapes {list(a.shape)} to {list(b.shape)}")


# ----------------------------------------------------------------------------------------- MACs
def _mac_run(graph, node, ins, dp, trace):
    x = _fixed(graph, node.inputs[0], ins[0])
    w, b = _fixed(graph, node.inputs[1], ins[1]), _fixed(graph, node.inputs[2], ins[2])
    accum_t, result_t = node_accum_t(node, dp), _type_attr(node, "result_t")
    stats: dict = {}
    bias_add = getattr(dp, "bias_add", "preload") if getattr(dp, "requantization", None) != "native" else "preload"
    try:
        if node.op == "hls4ml_dense":
            y, acc = dense(x, w, b, accum_t, result_t, return_accumulator=True, bias_add=bias_add, stats=stats)
        else:
            stride, pads = _conv_geometry(node)
            y, acc = conv2d(x, w, b, accum_t, result_t, stride=stride, padding=pads, bias_add=bias_add,
                            stats=stats, return_accumulator=True)
    except ValueError as err:
        raise ValueError(f"{_where(node)}: {err}") from None
    casts = stats["product_overflows"] + stats["bias_overflows"] + stats["add_overflows"]
    info = {"overflows": casts, "adds": stats["adds"], "clipped": stats["result_overflows"],
            "acc": acc.raw if trace else None, **{k: stats[k] for k in
                                                  ("product_overflows", "bias_overflows", "add_overflows")}}
    if trace == "peaks" and accum_t.fmt.frac < x.fmt.frac + w.fmt.frac:
        info.update(_rounded_peaks(node, x, w, b, accum_t, bias_add))
    return [_codes(graph, node, y)], info


def _rounded_peaks(node, x, w, b, accum_t, bias_add) -> dict:
    """Products rounded by ``accum_t`` (no MAC view holds them): the unfitted partial sums of those products
    (:func:`fxpsim.datapath.hls4ml.partial_sums.partial_sums`) as ``partial_peak`` / ``partial_range`` and the
    final sums as ``exact_acc``."""
    if node.op == "hls4ml_conv2d":
        stride, pads = _conv_geometry(node)
        x = conv_patches(x, w, stride, pads)
        w = w.reshape(-1, w.shape[-1])
    final, low, high = partial_sums(x, w, b, accum_t, bias_add)
    return {"partial_peak": max(-low, high), "partial_range": (low, high), "exact_acc": final}


def _dense_float(graph, node, ins):
    """:math:`x W + b` in float64 (``run_float`` hands the constants over dequantized)."""
    return [ins[0] @ ins[1] + ins[2]]


def _conv_float(graph, node, ins):
    (sh, sw), (top, bottom, left, right) = _conv_geometry(node)
    w = np.asarray(ins[1], np.float64)
    fh, fw, c, f = w.shape
    x = np.pad(np.asarray(ins[0], np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(x, (fh, fw), axis=(1, 2))[:, ::sh, ::sw]   # [B,OH,OW,C,fh,fw]
    return [np.einsum("bhwcij,ijcf->bhwf", win, w) + ins[2]]


def _mac_check(graph, node):
    for key in ("accum_t", "result_t"):
        _type_attr(node, key)
    x, w, b = (graph.tensors[t] for t in node.inputs[:3])
    if not (w.is_constant and b.is_constant):
        raise ValueError(f"{_where(node)}: weight and bias must be constants")
    if node.op == "hls4ml_dense":
        if len(w.shape) != 2 or not x.shape or x.shape[-1] != w.shape[0] or b.shape != (w.shape[1],):
            raise ValueError(f"{_where(node)}: x {list(x.shape)}, weight {list(w.shape)}, bias {list(b.shape)} do "
                             "not align (x [..., K], weight [K, N], bias [N])")
    else:
        a = node.attrs
        if not (isinstance(a.get("stride"), list) and len(a["stride"]) == 2 and isinstance(a.get("pads"), list)
                and len(a["pads"]) == 4):
            raise ValueError(f"{_where(node)}: needs stride [s_h, s_w] and pads [top, bottom, left, right]")
        if len(x.shape) != 3 or len(w.shape) != 4 or w.shape[2] != x.shape[2] or b.shape != (w.shape[3],):
            raise ValueError(f"{_where(node)}: x {list(x.shape)}, weight {list(w.shape)}, bias {list(b.shape)} do "
                             "not align (x [H, W, C], weight [fh, fw, C, F], bias [F])")


def _mac_count(graph, node) -> int:
    w = graph.tensors[node.inputs[1]]
    out = graph.tensors[node.outputs[0]]
    return int(np.prod(out.shape)) * (w.shape[0] if node.op == "hls4ml_dense" else int(np.prod(w.shape[:3])))


def _product_shift(graph, node) -> int:
    """:math:`F_{acc} - (F_x + F_w)`: how far the exact products sit above the accumulator's LSB."""
    fx, fw = tensor_format(graph, node.inputs[0]).frac, tensor_format(graph, node.inputs[1]).frac
    return _type_attr(node, "accum_t").fmt.frac - (fx + fw)


def _mac_bound(graph, node):
    """:math:`|A(b)| + \\sum_k \\max|x|\\,|w_k|` in the accumulator's LSB; with products rounded by ``accum_t``
    (:math:`F_{acc} < F_x + F_w`) the bound of the rounded products
    (:func:`fxpsim.datapath.hls4ml.partial_sums.worst_case_sum`)."""
    d = _product_shift(graph, node)
    if d < 0:
        xs, ws, bs = (graph.tensors[t] for t in node.inputs[:3])
        w = _fixed(graph, ws.name, ws.data)
        return worst_case_sum(tensor_format(graph, xs.name), xs.code_range, w.reshape(-1, w.shape[-1]),
                              _fixed(graph, bs.name, bs.data), _type_attr(node, "accum_t"))
    lo, hi = graph.tensors[node.inputs[0]].code_range
    w = np.abs(np.asarray(graph.tensors[node.inputs[1]].data).astype(object))
    per_out = w.reshape(-1, w.shape[-1]).sum(axis=0) << d
    bias = np.abs(_exact_bias(graph, node).astype(object))
    return int(max((per_out * max(abs(lo), abs(hi)) + bias).ravel(), default=0))


def _exact_bias(graph, node) -> np.ndarray:
    """The bias in the accumulator's LSB, rounded as ``accum_t`` rounds, never overflowing."""
    own = _type_attr(node, "accum_t")
    wide = ApType(Format(62, own.fmt.frac, own.fmt.signed), own.rounding, Overflow.WRAP)
    b = graph.tensors[node.inputs[2]]
    return wide.cast(_fixed(graph, b.name, b.data)).raw.astype(np.int64)


def _mac_view(graph, node, ins):
    d = _product_shift(graph, node)
    if d < 0:
        return None
    x = np.asarray(ins[0]).astype(np.int64)
    w = np.asarray(ins[1]).astype(np.int64) << d
    if node.op == "hls4ml_dense":
        return MacOperands("fully_connected", x, np.ascontiguousarray(w.T), _exact_bias(graph, node))
    (sh, sw), (top, bottom, left, right) = _conv_geometry(node)
    return MacOperands("conv2d", x, np.ascontiguousarray(np.transpose(w, (3, 0, 1, 2))), _exact_bias(graph, node),
                       dict(stride=(sh, sw), dilation=(1, 1), pads=((top, bottom), (left, right))))


def _input_check(graph, node):
    _type_attr(node, "type")


register_op(Op("hls4ml_input", _input_run, _identity_float, _input_check))
register_op(Op("hls4ml_dense", _mac_run, _dense_float, _mac_check, _mac_count, _mac_bound))
register_op(Op("hls4ml_conv2d", _mac_run, _conv_float, _mac_check, _mac_count, _mac_bound))
register_op(Op("hls4ml_activation", _activation_run, _activation_float, _activation_check))
register_op(Op("hls4ml_reshape", _reshape_run, _reshape_float, _reshape_check))
register_mac_view("hls4ml_dense", _mac_view)
register_mac_view("hls4ml_conv2d", _mac_view)
from . import steps  # noqa: E402,F401  (the compiled-plan steps of these ops)

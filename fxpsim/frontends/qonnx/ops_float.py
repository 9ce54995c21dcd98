"""The graph op of QONNX's ``FloatQuant`` (registered on import):

======================  ==============================================================================
``qonnx_floatquant``    unit codes of :math:`\\mathrm{FloatQuant}(x)` (:mod:`fxpsim.datapath.qonnx.minifloat`):
                        float x (``float_in``; ``scale``: float32 values) or codes (``x_zp``, ``num``/``den``:
                        input scale over the quantizer's scale); ``exp_bits``, ``man_bits``, ``bias``, ``top``
                        (largest unit code), ``rounding_mode`` (qonnx's names)
======================  ==============================================================================
"""
from __future__ import annotations

import numpy as np

from ...datapath.qonnx import minifloat as MF
from ...graph.registry import Op, register_op
from .ops import _NP_ROUND, _arr, _centred, _no_trace, _out, _real_scale

__all__ = ["FLOAT_OPS"]

FLOAT_OPS = ("qonnx_floatquant",)


def _fmt(a):
    return MF.minifloat_format(a["exp_bits"], a["man_bits"], a["bias"])


def _floatquant_run(graph, node, ins, dp, trace):
    a = node.attrs
    fmt, top, mode = _fmt(a), int(a["top"]), a["rounding_mode"]
    if a.get("float_in"):
        x = np.asarray(ins[0], np.float32)
        u = MF.minifloat_units_float(x, np.broadcast_to(_arr(a["scale"], np.float64), x.shape), fmt, top, mode)
    else:
        v = _centred(ins[0], a["x_zp"]).astype(object)
        u = MF.minifloat_units(v * _arr(a["num"]), _arr(a["den"]), fmt, top, mode)
    return [_out(graph, node, u)], _no_trace()


def _floatquant_float(graph, node, ins):
    """qonnx's float formula in float64 (the float reading of the graph)."""
    a = node.attrs
    unit = _real_scale(graph, node.outputs[0])                  # s 2^(emin - m)
    m, emin = int(a["man_bits"]), 1 - int(a["bias"])
    s = unit * 2.0 ** (m - emin)
    y = ins[0] / s
    with np.errstate(divide="ignore"):
        q = np.maximum(np.floor(np.log2(np.abs(y))), emin) - m
    q = np.where(y == 0, emin - m, q)
    xq = _NP_ROUND[a["rounding_mode"]](y / 2.0 ** q) * 2.0 ** q
    vmax = int(a["top"]) * 2.0 ** (emin - m)
    return [np.clip(xq, -vmax, vmax) * s]


register_op(Op("qonnx_floatquant", _floatquant_run, _floatquant_float))

"""Elementwise nonlinearities of an :class:`~fxpsim.graph.ir.IntegerGraph` as integer table lookups:
``sigmoid``, ``tanh`` and ``hard_swish`` (the ops :func:`fxpsim.convert` emits for ``nn.Sigmoid``,
``nn.Tanh`` and ``nn.HardSwish``), registered in :data:`fxpsim.graph.ops.OPS` when this module is imported.

An NPU computes these as a table indexed by the input code. With input codes :math:`c` on the grid
:math:`(s_x, z_x)` and output codes on :math:`(s_y, z_y)`, the table this op uses by default holds one entry per
input code,

.. math:: T[c] = \\mathrm{clamp}\\big(\\mathrm{round}(f(s_x (c - z_x)) / s_y) + z_y,\\ lo,\\ hi\\big),

with the datapath's ``rounding`` (:func:`fxpsim.from_float`, exact on the float64 value :math:`f(\\cdot)/s_y`)
and :math:`[lo, hi]` the output code range narrowed to the node's trained ``clip``. A datapath that sets
``activation_lut_entries`` (a smaller table, optionally interpolated, as many NPUs build them) uses
:mod:`fxpsim.datapath.lut` instead.
"""
from __future__ import annotations

import numpy as np

from ..core.fixed import Format, from_float
from ..nn.layers import HardSwish, Sigmoid, Tanh
from .ops import Op, _clamp_codes, _float_clip, _no_trace, _rounding_name, _spec, register_op

__all__ = ["LUT_FUNCTIONS", "exact_table"]

#: The real functions (float64 in and out), the same as the float layers'.
LUT_FUNCTIONS = {"sigmoid": Sigmoid.function, "tanh": Tanh.function, "hard_swish": HardSwish.function}


def exact_table(op: str, x_spec, y_spec, lo: int, hi: int, rounding) -> tuple[np.ndarray, int]:
    """``(T, c_min)``: the one-entry-per-code table :math:`T[c - c_{min}]` of the module docstring over the
    input's whole code range :math:`[c_{min}, c_{max}]` (at most :math:`2^{16}` entries)."""
    c_lo, c_hi = x_spec.code_range
    if c_hi - c_lo >= 1 << 16:
        raise ValueError(f"{op}: a table over {x_spec.bits}-bit input codes is too large (at most 16-bit inputs)")
    codes = np.arange(c_lo, c_hi + 1, dtype=np.int64)
    real = float(x_spec.scale[0]) * (codes - int(x_spec.zero_point[0])).astype(np.float64)
    y = LUT_FUNCTIONS[op](real) / float(y_spec.scale[0])
    out = from_float(y, Format.integer(62), rounding=rounding).raw + int(y_spec.zero_point[0])
    return np.clip(out, lo, hi), c_lo


def _lut_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    lo, hi = _clamp_codes(graph, node, node.outputs[0], "none")
    rounding = _rounding_name(dp.rounding)
    cache = graph.__dict__.setdefault("_lut_tables", {})
    key = (node.name, rounding)
    if key not in cache:
        cache[key] = exact_table(node.op, x, y, lo, hi, rounding)
    table, c_lo = cache[key]
    return [table[ins[0].astype(np.int64) - c_lo].astype(y.dtype)], _no_trace()


def _lut_float(graph, node, ins):
    return [_float_clip(graph, node, LUT_FUNCTIONS[node.op](np.asarray(ins[0], dtype=np.float64)))]


def _lut_check(graph, node):
    ins = [t for t in node.inputs if t]
    if len(ins) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs one input and one output")
    for t in (ins[0], node.outputs[0]):
        s = _spec(graph, t)
        if s.is_float or s.scale is None or s.per_channel:
            raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} needs integer codes with one scale "
                             "and zero point")


for _name in LUT_FUNCTIONS:
    register_op(Op(_name, _lut_run, _lut_float, _lut_check))

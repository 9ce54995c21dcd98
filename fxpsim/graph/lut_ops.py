r"""Elementwise nonlinearities of an :class:`~fxpsim.graph.ir.IntegerGraph` as integer table lookups:
``sigmoid``, ``tanh`` and ``hard_swish`` (the ops :func:`fxpsim.convert` emits for ``nn.Sigmoid``,
``nn.Tanh`` and ``nn.HardSwish``), registered in :data:`fxpsim.graph.ops.OPS` when this module is imported.

An NPU computes these as a table indexed by the input code (:mod:`fxpsim.datapath.lut`). By default the
table has one entry per input code, exact per code: with input codes :math:`c` on :math:`(s_x, z_x)` and
output codes on :math:`(s_y, z_y)`,

.. math:: T[c] = \mathrm{clamp}\big(\mathrm{round}(\mathrm{fl}_{64}(f(\mathrm{fl}_{64}(s_x (c - z_x))) / s_y))
          + z_y,\ lo,\ hi\big),

with the datapath's ``rounding`` and :math:`[lo, hi]` the output code range narrowed to the node's trained
``clip``. A datapath that sets ``activation_lut_entries`` (and ``activation_lut_interpolation``) uses a table of
that many entries instead, as :func:`fxpsim.datapath.lut.build_table` defines it.
"""
from __future__ import annotations

import numpy as np

from ..datapath import lut as _lut
from .registry import Op, _clamp_codes, _float_clip, _no_trace, _rounding_name, _spec, register_op

__all__ = ["LUT_FUNCTION"]

#: graph op -> the real function of its table (:func:`fxpsim.datapath.lut.lut_functions`)
LUT_FUNCTION = {"sigmoid": "logistic", "tanh": "tanh", "hard_swish": "hard_swish"}


def _lut_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    entries = getattr(dp, "activation_lut_entries", None) or (1 << x.bits)
    interpolation = str(getattr(dp, "activation_lut_interpolation", "none") or "none") \
        if getattr(dp, "activation_lut_entries", None) else "none"
    rounding = _rounding_name(dp.rounding)
    cache = graph.__dict__.setdefault("_lut_tables", {})
    key = (node.name, entries, interpolation, rounding)
    if key not in cache:
        lo, hi = _clamp_codes(graph, node, node.outputs[0], "none")
        try:
            cache[key] = _lut.build_table(
                _lut.lut_functions()[LUT_FUNCTION[node.op]], input_bits=x.bits, input_min=x.code_range[0],
                input_scale=float(x.scale[0]), input_zero_point=int(x.zero_point[0]), output_scale=float(y.scale[0]),
                output_zero_point=int(y.zero_point[0]), output_lo=lo, output_hi=hi, entries=int(entries),
                interpolation=interpolation, rounding=rounding)
        except ValueError as exc:
            raise ValueError(f"node {node.name!r} ({node.op}, {x.bits}-bit input codes): {exc}") from None
    table = cache[key]
    return [_lut.lut_lookup(ins[0], table).astype(y.dtype)], {**_no_trace(), "lut": table.describe()}


def _lut_float(graph, node, ins):
    fn = _lut.lut_functions()[LUT_FUNCTION[node.op]]
    return [_float_clip(graph, node, fn(np.asarray(ins[0], dtype=np.float64)))]


def _lut_check(graph, node):
    ins = [t for t in node.inputs if t]
    if len(ins) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs one input and one output")
    for t in (ins[0], node.outputs[0]):
        s = _spec(graph, t)
        if s.is_float or s.scale is None or s.per_channel:
            raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} needs integer codes with one scale "
                             "and zero point")
    if _spec(graph, ins[0]).bits > 16:
        raise ValueError(f"node {node.name!r} ({node.op}): a table over {_spec(graph, ins[0]).bits}-bit input "
                         "codes is too large (at most 16-bit inputs)")


for _name in LUT_FUNCTION:
    register_op(Op(_name, _lut_run, _lut_float, _lut_check))
    _lut.register_lut_op(_name)

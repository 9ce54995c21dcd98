r"""``onnx_lut``: an elementwise function of one quantized tensor as a table indexed by its codes (registered when
:mod:`fxpsim.frontends.onnx.ops` is imported).

What onnxruntime computes for QLinearSigmoid / QLinearLeakyRelu (QOperator), for the DequantizeLinear ->
Sigmoid / LeakyRelu -> QuantizeLinear groups it fuses into them, and for any chain of elementwise float ops
with scalar constants between a per-tensor DequantizeLinear and a QuantizeLinear (HardSigmoid, HardSwish,
Div / Sub / Mul / Add by a constant, Pow by 2 or 3, Relu, Clip: onnxruntime runs these in float32): for every
input code :math:`c` on :math:`(s_x, z_x)` and output :math:`(s_y, z_y)`,

.. math:: T[c] = \mathrm{QuantizeLinear}\big(P(\mathrm{fl}(\mathrm{fl}(c - z_x) \cdot s_x)),\ s_y, z_y\big)

with :math:`P` the node's ``program`` of float32 steps as onnxruntime's kernels compute them
(:func:`fxpsim.datapath.onnxruntime.elementwise.run_program`) and QuantizeLinear onnxruntime's (float32
division, round half to even, saturation). The table is the same on every datapath (an NPU implements the
function as a table too) except for the final rounding, which follows the datapath's ``rounding`` when it is
not onnxruntime's (``requantization != "native"``). A datapath that sets ``activation_lut_entries`` (a table
narrower than one entry per code) is refused: ``onnx_lut`` models one entry per code only.

Attributes: ``program`` (list of steps ``{"op": ..., parameters}``), ``onnx_ops`` (the ONNX nodes it
replaces, for the report).
"""
from __future__ import annotations

import numpy as np

from ...core.fixed import Format, from_float
from ...datapath.onnxruntime import elementwise as E
from ...datapath.onnxruntime import mlas as K
from ...graph.ops import Op
from .op_support import F32, _name, _no_trace, _one_in_one_out, _quantized_io, _scale, _spec, _zp, \
    is_native, register_op

__all__ = ["lut_table"]


def lut_table(graph, node, dp=None) -> np.ndarray:
    """The node's table: output code for each input code ``lo .. hi`` (index ``c - lo``), and which entries
    saturated (the value rounds outside the output code range; NaN counts as saturated)."""
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    native = dp is None or is_native(dp)
    key = (node.name, "native" if native else _name(dp.rounding))
    cache = graph.__dict__.setdefault("_onnx_lut_tables", {})
    if key not in cache:
        lo, hi = x.code_range
        codes = np.arange(lo, hi + 1, dtype=np.int64)
        v = E.run_program(K.dequantize_linear(codes, F32(_scale(x)), _zp(x)), node.attrs["program"])
        ylo, yhi = y.code_range
        if native:
            table = K.quantize_linear(v, F32(_scale(y)), _zp(y), y.dtype)
            with np.errstate(all="ignore"):
                pre = np.rint(v / F32(_scale(y))).astype(np.float64) + _zp(y)
        else:
            with np.errstate(all="ignore"):
                r = np.nan_to_num(v.astype(np.float64) / float(F32(_scale(y))), nan=0.0, posinf=2.0 ** 40,
                                  neginf=-2.0 ** 40)
            pre = from_float(r, Format.integer(62), rounding=_name(dp.rounding)).raw + _zp(y)
            table = np.clip(pre, ylo, yhi).astype(y.dtype)
        pre = np.nan_to_num(pre, nan=ylo - 1)
        cache[key] = (table, (pre < ylo) | (pre > yhi))
    return cache[key]


def _lut_run(graph, node, ins, dp, trace):
    if getattr(dp, "activation_lut_entries", None):
        raise ValueError(f"node {node.name!r} (onnx_lut): the datapath's activation_lut_entries="
                         f"{dp.activation_lut_entries} is not modelled for imported ONNX tables (one entry per code)")
    x = _spec(graph, node.inputs[0])
    table, saturated = lut_table(graph, node, dp)
    idx = np.asarray(ins[0]).astype(np.int64) - x.code_range[0]
    out = table[idx]
    clipped = int(np.count_nonzero(saturated[idx])) if trace else 0
    return [out], {**_no_trace(), "clipped": clipped}


def _lut_float(graph, node, ins):
    return [E.run_program_float64(ins[0], node.attrs["program"])]


def _check_lut(graph, node):
    _one_in_one_out(graph, node)
    _quantized_io(graph, node, node.inputs + node.outputs)
    program = node.attrs.get("program")
    if not isinstance(program, (list, tuple)) or not program:
        raise ValueError(f"node {node.name!r} (onnx_lut): 'program' must be a non-empty list of steps")
    for st in program:
        try:
            E.check_step(st)
        except ValueError as exc:
            raise ValueError(f"node {node.name!r} (onnx_lut): {exc}") from None
    if _spec(graph, node.inputs[0]).bits > 16:
        raise ValueError(f"node {node.name!r} (onnx_lut): input codes wider than 16 bits")


register_op(Op("onnx_lut", _lut_run, _lut_float, _check_lut))

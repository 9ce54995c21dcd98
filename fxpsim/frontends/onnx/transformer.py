"""Transformer-block ops (a mixin of the ONNX importer, :mod:`fxpsim.frontends.onnx.importer`; the graph ops are
:mod:`fxpsim.frontends.onnx.transformer_ops`), as ``onnxruntime.quantization.quantize_static`` leaves an encoder
layer and onnxruntime 1.32 runs it at its default optimization level:

* a MatMul of two run-time operands (:math:`QK^T`, attention times V): QLinearMatMul whose B is not a constant
  (QOperator), or DequantizeLinear(a), DequantizeLinear(b) -> MatMul -> QuantizeLinear (QDQ), which onnxruntime
  fuses into QLinearMatMul when both operands and the output have one element type after its int8 -> uint8
  rewrite (measured: with int8 activations it fuses them, both Q/DQ pairs becoming uint8), else runs in
  float32 (``ort_kernel="float"``): ``onnx_matmul_ab``;
* LayerNormalization: not fused on the CPU; DequantizeLinear, the float32 kernel of
  :mod:`fxpsim.datapath.onnxruntime.layer_norm`, then QuantizeLinear, or a float32 graph output (a QOperator model
  ends so). ``gamma`` / ``beta`` are float32 constants or DequantizeLinear of constants (QDQ), evaluated once in
  float32 as onnxruntime's DequantizeLinear does. Rows of n < 8 values run its scalar kernel (any CPU); rows of
  n >= 8 its AVX2 vector kernel (any n), imported with ``cpu="avx2"`` or ``"vnni"`` (or ``"host"`` on such a CPU). Refused
  with a ValueError naming the node: those rows on another ``cpu``, images (per-sample rank 3), a float output
  that is not a graph output.

The other ops of such a block (Split / Reshape / Transpose of the heads, QLinearSoftmax, Add residuals, Div / Mul
by constants, Relu folded into the QuantizeLinear) are the importer's existing conversions.
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import layer_norm as LN
from ...datapath.onnxruntime import mlas as K
from .nodes import _unsupported, _Val

_IN_PERM, _OUT_PERM = [2, 0, 1], [1, 2, 0]


class TransformerConversions:
    """LayerNormalization and MatMuls of two activations (methods of
    :class:`fxpsim.frontends.onnx.importer._Importer`); placed first among the mixins, its :meth:`_convert` takes
    these nodes and hands every other one on."""

    def _convert(self, n):
        if id(n) not in self.claimed and self._transformer(n):
            return None
        return super()._convert(n)

    def _transformer(self, n) -> bool:
        if n.domain == "" and n.op == "LayerNormalization":
            self._layer_norm(n)
            return True
        if n.domain == "" and n.op == "MatMul" and self._runtime_operand(n.inputs[1]):
            self._matmul_ab(n)
            return True
        if n.domain == "" and n.op == "QLinearMatMul" and len(n.inputs) > 3 and n.inputs[3] not in self.consts:
            self._qlinear_matmul_ab(n)
            return True
        return False

    def _u8s8_pairs(self):
        from .importer import ONNXRUNTIME_CPUS
        return ONNXRUNTIME_CPUS[self.cpu]

    def _runtime_operand(self, name) -> bool:
        v = self.env.get(name)
        return v is not None and v.kind == "dq" and v.src not in self.consts

    @staticmethod
    def _perm_attrs(shapes, out_shape):
        attrs = {}
        if any(len(s) == 3 for s in shapes):
            attrs["in_perm"] = [_IN_PERM if len(s) == 3 else None for s in shapes]
        if len(out_shape) == 3:
            attrs["out_perm"] = _OUT_PERM
        return attrs

    def _ab_shape(self, n, a_shape, b_shape):
        if len(a_shape) < 2 or len(b_shape) != len(a_shape) or a_shape[:-2] != b_shape[:-2] or \
                a_shape[-1] != b_shape[-2]:
            raise _unsupported(n, f"a MatMul of two activations of per-sample shapes {list(a_shape)} x "
                                  f"{list(b_shape)} (equal leading axes, no broadcasting)")
        return tuple(a_shape[:-1]) + (b_shape[-1],)

    def _emit_ab(self, n, a, b, out_name, scale, zp, dtype, kernel, a_type=None, b_type=None):
        """``a_type`` / ``b_type``: the element types onnxruntime's kernel multiplies (after its int8 -> uint8
        rewrite); uint8 x int8 is the kernel whose pair sums saturate on AVX2 (``u8s8_pairs``)."""
        out_shape = self._ab_shape(n, a.shape, b.shape)
        g = self._int_value(out_name, out_shape, dtype, scale, zp)
        attrs = {"ort_kernel": kernel, **self._perm_attrs((a.shape, b.shape), out_shape)}
        a_type, b_type = a_type or a.dtype, b_type or b.dtype
        if kernel == "qlinear" and a_type == np.uint8 and b_type == np.int8:
            attrs["u8s8_pairs"] = self._u8s8_pairs()
            if a.dtype == np.int8:
                attrs["a_shift"] = 128
        self._add_node("onnx_matmul_ab", [a.g, b.g], [g], attrs, name=n.name)

    # ---------------- MatMul of two activations
    def _matmul_ab(self, n):
        av, a = self._activation_dq(n, n.inputs[0])
        bv, b = self._activation_dq(n, n.inputs[1])
        q, _ = self._group_q(n)
        if q is None:
            raise _unsupported(n, "a MatMul of two activations whose output no single QuantizeLinear reads "
                                  "(onnxruntime would compute it in float)")
        scale, zp, dtype = self._claim(q)
        types = (self._dq_type(av), self._dq_type(bv), self._q_type(q))
        # onnxruntime's selector: uint8 a (after its int8 -> uint8 rewrite) of the output's type, b uint8 or
        # int8 (measured: int8 a that it could not convert leaves the group in float32)
        fused = types[0] == types[2] == np.uint8 and not (av.float_only or bv.float_only)
        self._emit_ab(n, a, b, q.outputs[0], scale, zp, dtype, "qlinear" if fused else "float", types[0], types[1])
        self._note(n.name, n, fused, "" if fused else f"operand / output types {', '.join(map(str, types))} differ")

    def _qlinear_matmul_ab(self, n):
        i = n.inputs
        a = self._int_input(n, i[0], i[1], i[2])
        b = self._int_input(n, i[3], i[4], i[5])
        scale, zp, dtype = self._out_params(n, i[6], i[7], a.dtype)
        if a.dtype == np.int8 and b.dtype == np.uint8:
            raise _unsupported(n, "a QLinearMatMul of int8 a and uint8 b")
        self._emit_ab(n, a, b, n.outputs[0], scale, zp, dtype, "qlinear")

    # ---------------- LayerNormalization
    def _ln_constant(self, n, name, what):
        v = self.val(name, n)
        if v.kind == "const":
            data = v.data
        elif v.kind == "dq" and v.src in self.consts:
            data = K.dequantize_linear(self.consts[v.src], v.scale if v.scale.size > 1 else v.scale[0],
                                       v.zp if v.zp.size > 1 else v.zp[0], axis=v.axis if v.scale.size > 1 else None)
        else:
            raise _unsupported(n, f"a LayerNormalization {what} that is not a constant")
        data = np.asarray(data)
        if data.dtype != np.float32:
            raise _unsupported(n, f"a {data.dtype} LayerNormalization {what} (float32 only)")
        return data

    def _layer_norm(self, n):
        if len(n.outputs) > 1 and any(n.outputs[1:]):
            raise _unsupported(n, "the Mean / InvStdDev outputs of LayerNormalization")
        if int(n.attrs.get("stash_type", 1)) != 1:
            raise _unsupported(n, f"stash_type {n.attrs['stash_type']} (float32 statistics only)")
        xv, src = self._activation_dq(n, n.inputs[0])
        shape = tuple(src.shape)
        if len(shape) == 3:
            raise _unsupported(n, "a LayerNormalization of an image (per-sample rank 3)")
        full = len(shape) + 1
        axis = int(n.attrs.get("axis", -1))
        if not -full <= axis < full:
            raise ValueError(f"LayerNormalization node {n.name!r}: axis {axis} is outside the {full} axes of the input")
        axis = axis + full if axis < 0 else axis
        if axis == 0:
            raise _unsupported(n, "a LayerNormalization over the batch axis")
        rows = int(np.prod(shape[axis - 1:]))
        gamma = self._ln_constant(n, n.inputs[1], "scale")
        beta = self._ln_constant(n, n.inputs[2], "bias") if len(n.inputs) > 2 and n.inputs[2] else None
        if gamma.shape != shape[axis - 1:] or (beta is not None and beta.shape != shape[axis - 1:]):
            raise _unsupported(n, f"scale {list(gamma.shape)} / bias {None if beta is None else list(beta.shape)} "
                                  f"that do not have the normalized shape {list(shape[axis - 1:])} (broadcasting)")
        kernel = LN.layer_norm_kernel(rows)
        from .importer import VECTOR_LAYER_NORM_CPUS
        if kernel == "avx2" and self.cpu not in VECTOR_LAYER_NORM_CPUS:
            raise _unsupported(n, f"a LayerNormalization over rows of {rows} values: onnxruntime runs them with its "
                                  "vectorized float32 kernel, reproduced as measured on x86-64 CPUs with AVX2 "
                                  "(without AVX-512, or AVX-512 with VNNI); import with cpu='avx2' or 'vnni' (or "
                                  f"cpu='host' on such a CPU), not {self.cpu!r}")
        attrs = {"axis": axis - 1, "epsilon": float(np.float32(n.attrs.get("epsilon", 1e-5))), "kernel": kernel,
                 "gamma": [float(v) for v in gamma.reshape(-1)],
                 "beta": None if beta is None else [float(v) for v in beta.reshape(-1)]}
        q = self._single_q(n.outputs[0])
        if q is not None:
            scale, zp, dtype = self._claim(q)
            g = self._int_value(q.outputs[0], shape, dtype, scale, zp)
        elif n.outputs[0] in self.outputs:
            g = self._new_tensor(n.outputs[0], 0, True, shape)
            self.env[n.outputs[0]] = _Val("float", g=g, shape=shape, dtype=np.dtype(np.float32))
        else:
            raise _unsupported(n, "a LayerNormalization whose float output is neither quantized by one "
                                  "QuantizeLinear nor a graph output")
        self._add_node("onnx_layer_norm", [src.g], [g], attrs, name=n.name)
        self._note(n.name, n, False, "onnxruntime runs LayerNormalization in float32 between DequantizeLinear and "
                                     "QuantizeLinear")


"""Elementwise float ops between a DequantizeLinear and a QuantizeLinear as one table per code (a mixin of the ONNX
importer, :mod:`fxpsim.frontends.onnx.importer`; the graph op is ``onnx_lut``, :mod:`fxpsim.frontends.onnx.lut_ops`).

``quantize_static`` leaves Sigmoid, LeakyRelu, HardSigmoid, HardSwish, Div / Sub / Pow by constants between a
DequantizeLinear and a QuantizeLinear, and not always one op per pair (HardSigmoid -> HardSwish, Div -> Sub ->
Pow come out as one chain). onnxruntime fuses DQ -> Sigmoid / LeakyRelu -> Q into QLinearSigmoid /
QLinearLeakyRelu, which build a 256-entry table from the same float32 kernel, and runs the rest in float32;
either way every output code is a function of one input code, computed here as that table. The chain starts at
a per-tensor DequantizeLinear of an activation, may hold any number of elementwise steps with scalar constants
(:data:`fxpsim.datapath.onnxruntime.elementwise.STEP_OPS`), and must end at a QuantizeLinear.
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import elementwise as E
from .nodes import _MS, _ONode, _unsupported, _Val

#: ONNX ops read as table steps (Relu / Clip / Add / Mul only inside a chain or with a raw float constant).
CHAIN_OPS = ("Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Div", "Sub", "Pow", "Relu", "Clip", "Add", "Mul",
             "Erf")
_BINARY = ("Div", "Sub", "Pow", "Add", "Mul")


class ElementwiseConversions:
    """Table conversions (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _elementwise(self, n: _ONode) -> bool:
        """Convert ``n`` if it is a table op or a step of an elementwise chain; False when it is not."""
        if n.domain == _MS and n.op in ("QLinearSigmoid", "QLinearLeakyRelu"):
            self._qlinear_lut(n)
            return True
        if n.domain != "" or n.op not in CHAIN_OPS:
            return False
        if n.op in _BINARY:
            return self._chain_binary(n)
        x = self.val(n.inputs[0], n) if n.inputs else None
        if x is None or x.kind not in ("dq", "fchain") or (x.kind == "dq" and n.op in ("Relu", "Clip")):
            return False
        if n.op == "Clip":
            b = self._clip_bounds(n)
            if b is None:
                raise _unsupported(n, "Clip bounds that are not constants")
            step = {"op": "Clip", "lo": b[0], "hi": b[1]}
        elif n.op in ("HardSigmoid", "LeakyRelu"):
            alpha = n.attrs.get("alpha", 0.2 if n.op == "HardSigmoid" else 0.01)
            step = {"op": n.op, "alpha": float(np.float32(alpha))}
            if n.op == "HardSigmoid":
                step["beta"] = float(np.float32(n.attrs.get("beta", 0.5)))
        else:
            step = {"op": n.op}
        self._chain_step(n, x, step)
        return True

    def _chain_binary(self, n) -> bool:
        if len(n.inputs) != 2:
            raise _unsupported(n, "needs two inputs")
        a, b = (self.val(t, n) for t in n.inputs)
        ca, cb = self._scalar_value(n.inputs[0], a), self._scalar_value(n.inputs[1], b)
        if b.kind in ("dq", "fchain") and not self._is_const_dq(b) and ca is not None and n.op != "Pow":
            x, c, const_first, raw = b, ca, True, a.kind == "const"
        elif a.kind in ("dq", "fchain") and not self._is_const_dq(a) and cb is not None:
            x, c, const_first, raw = a, cb, False, b.kind == "const"
        else:
            if n.op in ("Add", "Mul"):
                return False
            raise _unsupported(n, "an elementwise op of one quantized activation and a scalar constant only "
                                  "(onnxruntime runs it in float32)")
        if n.op in ("Add", "Mul") and x.kind == "dq" and not raw:
            return False      # DQ(x) + DQ(const): the QLinearAdd / QLinearMul group (qdq_groups)
        if n.op == "Pow":
            if float(c) not in E.POW_EXPONENTS:
                raise _unsupported(n, f"Pow by {float(c)}: only exponents {E.POW_EXPONENTS} are reproduced "
                                      "(onnxruntime calls the C library's pow for others)")
            step = {"op": "Pow", "exponent": float(c)}
        else:
            step = {"op": n.op, "c": float(c), "const_first": const_first}
        self._chain_step(n, x, step)
        return True

    def _is_const_dq(self, v):
        return v.kind == "dq" and v.src in self.consts

    def _scalar_value(self, name, v):
        """The float32 value of a scalar constant operand (a raw float constant or a DequantizeLinear of one)."""
        if v.kind == "const" and v.data.size == 1 and np.dtype(v.data.dtype).kind == "f":
            return np.float32(v.data.reshape(()))
        if self._is_const_dq(v) and v.scale.size == 1 and self.consts[v.src].size == 1:
            q = np.asarray(self.consts[v.src]).astype(np.int64).reshape(())
            return np.float32(np.float32(q - int(v.zp[0])) * np.float32(v.scale[0]))
        return None

    def _chain_step(self, n, x: _Val, step: dict):
        E.check_step(step)
        if x.kind == "dq":
            if x.scale.size != 1:
                raise _unsupported(n, f"per-channel quantization of the activation {n.inputs[0]!r}")
            src = self.env[x.src]
            if src.kind != "int":
                raise ValueError(f"{n.op} node {n.name!r} reads {n.inputs[0]!r}, not a dequantized integer tensor")
            g = self._check_params(n, x.src, src.g, x.scale, x.zp)
            program, ops = [], []
        else:
            g, program, ops = x.g, list(x.data["program"]), list(x.data["ops"])
        self.env[n.outputs[0]] = _Val("fchain", g=g, shape=x.shape, dtype=np.dtype(np.float32),
                                      data={"program": program + [step], "ops": ops + [n.name]})
        if n.op not in ("Sigmoid", "LeakyRelu") or program:
            self._note(n.name, n, False, "elementwise float32 op between DequantizeLinear and QuantizeLinear "
                                         "(a table per code)")

    def _emit_lut(self, node_name, g_in, shape, program, ops, out_name, scale, zp, dtype):
        g = self._int_value(out_name, shape, dtype, scale, zp)
        self._add_node("onnx_lut", [g_in], [g], {"program": program, "onnx_ops": ops}, name=node_name)

    def _quantize_chain(self, q, v: _Val):
        """A QuantizeLinear ending an elementwise chain: the ``onnx_lut`` node."""
        scale, zp, dtype = self._q_params(q)
        self._emit_lut(v.data["ops"][-1], v.g, v.shape, v.data["program"], v.data["ops"], q.outputs[0],
                       scale, zp, dtype)

    def _qlinear_lut(self, n):
        i = n.inputs + [""] * (5 - len(n.inputs))
        xv = self._int_input(n, i[0], i[1], i[2])
        scale, zp, dtype = self._out_params(n, i[3], i[4], xv.dtype)
        step = {"op": "Sigmoid"} if n.op == "QLinearSigmoid" else \
            {"op": "LeakyRelu", "alpha": float(np.float32(n.attrs.get("alpha", 0.01)))}
        self._emit_lut(n.name, xv.g, xv.shape, [step], [n.name], n.outputs[0], scale, zp, dtype)

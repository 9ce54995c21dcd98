"""Read a QONNX model into an :class:`~fxpsim.graph.IntegerGraph` that computes the exact answer of its
quantized arithmetic.

QONNX (Brevitas, QKeras, HAWQ exports; FINN's ``MultiThreshold`` graphs) is a float graph whose ``Quant`` nodes
put values on integer grids :math:`s\\,(q - z)`. Between quantizers, qonnx's ``execute_onnx`` computes in float32;
fxpsim computes the same ops on the integer codes **exactly**: every scale is an exact rational
:math:`m\\,2^e/d` (a float32 scale is one; so are their products, common scales and averages over a window), a
power-of-two scale is plain fixed point, any other an integer multiplier and shift, and each quantizer rounds
the exact rational with its own mode. Where float32 is exact (power-of-two scales, sums within 24 bits) the two
agree bit for bit; elsewhere fxpsim's answer is the exact one and float32 differs by its own rounding.

Supported: :data:`SUPPORTED_OPS`. ``Quant``/``IntQuant`` (any bit width, integer or fractional, signed, narrow,
every rounding mode, per-tensor or per-channel scale and zero point), ``BipolarQuant``, ``FloatQuant``
(minifloat, :mod:`fxpsim.datapath.qonnx.minifloat`), ``Trunc`` (v1: 5 inputs, v2: 6 inputs), ``MultiThreshold`` (``out_scale``, ``out_bias``, ``data_layout``); ``BatchNormalization``
reads as qonnx's ``BatchNormToAffine`` (:math:`A = \\gamma/\\sqrt{\\sigma^2 + \\epsilon}`, :math:`B = \\beta - A\\mu` in
float32), then :math:`Ax + B` exactly; ``Div`` by a positive scalar constant (exact: the scale divides). Anything else
(an op, an attribute value, a float tensor reaching an op other than a quantizer) raises ``ValueError`` naming
the node; an unsupported op anywhere is reported with every other one at once. There is no float fallback.

A fractional bit width's bounds are qonnx's ``min_int`` / ``max_int`` evaluated in the width's own dtype; an
integer width's bounds are exact (qonnx's float32 evaluation of :math:`2^{31} - 1` rounds to :math:`2^{31}`).

``graph.run(x)`` takes the model's float32 input (batch first, any batch size) and returns float32 outputs:
each the float32 nearest to the exact value. ``graph.meta["qonnx"]`` maps every ONNX tensor to its graph
tensor (``tensors``) and every graph tensor to its exact scale and zero point (``scales``), so
``graph.run(x, keep=True)`` gives the exact value of every tensor (:func:`exact_values`).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...datapath.qonnx.scales import ExactScale
from ...graph.ir import IntegerGraph, Node, TensorSpec
from . import ops as _qonnx_ops  # noqa: F401  (registers the QONNX graph ops)
from . import ops_float as _qonnx_float_ops  # noqa: F401  (registers qonnx_floatquant)
from .convert import Conversions, V, bits_for
from .convert_float import FloatConversions
from .convert_std import StandardConversions
from .reader import QONNX_CUSTOM_OPS, read_qonnx

__all__ = ["import_qonnx", "SUPPORTED_OPS", "QONNX_DATAPATH", "exact_values", "float32_reading"]

#: The standard ONNX ops :func:`import_qonnx` reads between the qonnx custom ops.
STANDARD_OPS = ("MatMul", "Gemm", "Conv", "Add", "Sub", "Mul", "Div", "Relu", "Sign", "MaxPool", "AveragePool",
                "GlobalAveragePool", "Flatten", "Reshape", "Transpose", "BatchNormalization", "Identity", "Constant")
SUPPORTED_OPS = QONNX_CUSTOM_OPS + STANDARD_OPS

#: The datapath an imported graph records: exact accumulation (a register as wide as each MAC's worst case).
QONNX_DATAPATH = {"name": "qonnx-exact", "accumulator_bits": 64, "accumulator_overflow": "saturate",
                  "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "after",
                  "requantization": "native", "rounding": "half_even", "activation_clamp": True}


class _Importer(Conversions, FloatConversions, StandardConversions):
    def __init__(self, model):
        self.model = model
        self.path = model.path
        self.env: dict[str, V] = {}
        self.specs: list[TensorSpec] = []
        self.names: set = set()
        self.gnodes: list[Node] = []
        self.scales: dict = {}
        self.tensors: dict = {}
        self.notes: list = []

    # ------------------------------------------------------------------ graph building
    def fresh(self, hint: str) -> str:
        name, i = hint, 1
        while name in self.names:
            name, i = f"{hint}#{i}", i + 1
        self.names.add(name)
        return name

    def new_act(self, onnx_name: str, shape, lo: int, hi: int, scale: ExactScale, zp: int = 0) -> V:
        lo, hi = int(lo), int(hi)
        bits, signed = bits_for(lo, hi, onnx_name)
        g = self.fresh(onnx_name)
        scale = scale.compact()
        f, axis = _reading(scale)
        self.specs.append(TensorSpec(g, bits, signed, tuple(shape), f, None if f is None else [zp] * len(f), axis))
        self.scales[g] = {**scale.to_json(), "zp": int(zp)}
        return V("act", g=g, shape=tuple(shape), scale=scale, zp=int(zp), lo=lo, hi=hi)

    def new_const(self, hint: str, codes, scale: ExactScale | None = None) -> str:
        codes = np.asarray(codes)
        if codes.dtype == object:
            codes = codes.astype(np.int64)
        lo, hi = (int(codes.min()), int(codes.max())) if codes.size else (0, 0)
        bits, signed = bits_for(min(lo, 0), hi, hint)
        g = self.fresh(hint)
        self.specs.append(TensorSpec(g, bits, signed, codes.shape, data=codes.astype(np.int64)))
        self.scales[g] = {**(scale or ExactScale.one(codes.ndim)).to_json(), "zp": 0}
        return g

    def add_node(self, onnx_node, op: str, inputs, outputs, **attrs):
        self.gnodes.append(Node(self.fresh(f"{onnx_node.name}/{op}" if any(n.name == onnx_node.name for n in
                                                                             self.gnodes) else onnx_node.name),
                                op, inputs, outputs, attrs))

    # ------------------------------------------------------------------ driver
    def run(self, name=None) -> IntegerGraph:
        m = self.model
        bad = [f"{n.op} in node {n.name!r}" for n in m.nodes if n.op not in SUPPORTED_OPS
               or (n.op not in QONNX_CUSTOM_OPS and n.domain not in ("", "ai.onnx"))]
        if bad:
            raise ValueError(f"{self.path}: unsupported op(s): {'; '.join(bad)}. fxpsim.import_qonnx supports: "
                             f"{', '.join(SUPPORTED_OPS)} (never a float fallback)")
        for cname, value in m.consts.items():
            self.env[cname] = V("const", raw=np.asarray(value), shape=np.shape(value))
        inputs = []
        for iname, shape in m.inputs:
            if len(shape) < 1 or any(d is None for d in shape[1:]):
                raise ValueError(f"{self.path}: input {iname!r} needs a batch axis and fixed sizes, got {shape}")
            g = self.fresh(iname)
            self.specs.append(TensorSpec(g, 0, True, tuple(shape[1:])))
            self.env[iname] = V("float", g=g, shape=tuple(shape[1:]))
            self.tensors[iname] = g
            inputs.append(g)
        for n in m.nodes:
            self.convert(n)
            for o in n.outputs:
                if o in self.env and self.env[o].kind != "const":
                    self.tensors[o] = self.env[o].g
        outputs = []
        for oname in m.outputs:
            v = self.env.get(oname)
            if v is None or v.kind == "const":
                raise ValueError(f"{self.path}: graph output {oname!r} is a constant or not computed")
            if v.kind == "float":
                raise ValueError(f"{self.path}: graph output {oname!r} is the float input itself")
            out = self.fresh(f"{oname}:float32")
            self.specs.append(TensorSpec(out, 0, True, v.shape))
            s = v.scale
            self.gnodes.append(Node(self.fresh(f"dequantize:{oname}"), "qonnx_dequantize", [v.g], [out],
                                    {"zp": v.zp, "m": s.m.tolist(), "e": s.e, "d": s.d}))
            outputs.append(out)
        meta = {"source": self.path, "format": "qonnx", "datapath": QONNX_DATAPATH,
                "qonnx": {"tensors": self.tensors, "scales": self.scales}}
        if self.notes:
            meta["notes"] = list(self.notes)
        return IntegerGraph(self.specs, self.gnodes, inputs, outputs, name or _stem(self.path), meta)

    def convert(self, n):
        fn = getattr(self, f"_c_{n.op}", None)
        if fn is None:
            raise self.refuse(n, "no conversion")
        fn(n)


def _stem(path: str) -> str:
    import os
    return os.path.splitext(os.path.basename(path))[0] or "qonnx"


def _reading(scale: ExactScale):
    """The float64 reading of a scale as TensorSpec holds it: per tensor, or per channel along one axis;
    ``(None, None)`` for a scale that varies along several axes."""
    f = scale.float64()
    varying = [i for i, n in enumerate(f.shape) if n > 1]
    if not varying:
        return [float(f.ravel()[0])], None
    if len(varying) == 1:
        return f.ravel().tolist(), varying[0]
    return None, None


def import_qonnx(path, *, name: str | None = None) -> IntegerGraph:
    """Read a QONNX model (a path or an ``onnx.ModelProto``) into an :class:`~fxpsim.graph.IntegerGraph`
    (see the module docstring for what is exact and what is refused)."""
    return _Importer(read_qonnx(path)).run(name)


def exact_values(graph: IntegerGraph, tensor: str, codes) -> np.ndarray:
    """The exact real values (``Fraction`` object array) of a graph tensor's codes: :math:`s\\,(q - z)`."""
    info = graph.meta["qonnx"]["scales"][tensor]
    s = ExactScale.from_json(info).fractions()
    s = s[None] if s.ndim else s
    return (np.asarray(codes).astype(object) - int(info["zp"])) * s


def float32_reading(graph: IntegerGraph, tensor: str, codes) -> np.ndarray:
    """The float32 nearest to each exact value of a graph tensor (what a float32 engine gives where exact)."""
    from ...datapath.qonnx.arithmetic import to_float32
    vals = exact_values(graph, tensor, codes)
    num = np.vectorize(lambda f: Fraction(f).numerator, otypes=[object])(vals)
    den = np.vectorize(lambda f: Fraction(f).denominator, otypes=[object])(vals)
    return to_float32(num, den)

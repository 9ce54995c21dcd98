"""An independent exact model of QONNX: every value a ``fractions.Fraction``, every op written from qonnx's
specification (``docs/qonnx-custom-ops/*.md`` and the ONNX operator docs), sharing no code with fxpsim.

:func:`quant`, :func:`trunc_v1`, :func:`trunc_v2`, :func:`multithreshold` are the custom ops on single
numbers; :func:`evaluate` runs an ``onnx.ModelProto`` of the ops fxpsim imports on numpy object arrays of
Fractions and returns every tensor. Used by the QONNX tests only; no production code imports it.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


def rnd(y: Fraction, mode: str) -> int:
    """QONNX's rounding functions on an exact number (``resolve_rounding_mode``)."""
    mode = mode.upper()
    sign = 1 if y > 0 else -1 if y < 0 else 0
    if mode in ("ROUND", "HALF_EVEN"):
        return round(y)                                   # Fraction.__round__: ties to even
    if mode == "CEIL":
        return math.ceil(y)
    if mode == "FLOOR":
        return math.floor(y)
    if mode == "UP":
        return sign * math.ceil(abs(y))
    if mode == "DOWN":
        return sign * math.floor(abs(y))
    if mode == "HALF_UP":
        return sign * math.floor(abs(y) + Fraction(1, 2))
    if mode == "HALF_DOWN":
        return sign * math.ceil(abs(y) - Fraction(1, 2))
    raise ValueError(mode)


def int_range(signed: bool, narrow: bool, bw) -> tuple[Fraction, Fraction]:
    """qonnx's min_int / max_int: exact for an integer width, in the width's dtype for a fractional one."""
    b = np.asarray(bw)
    if float(b) == int(float(b)):
        w = int(float(b))
        lo = -(2 ** (w - 1)) + (1 if narrow else 0) if signed else 0
        hi = 2 ** (w - 1) - 1 if signed else 2 ** w - (2 if narrow else 1)
        return Fraction(lo), Fraction(hi)
    lo = (-(2 ** (b - 1)) + 1) if (signed and narrow) else (-(2 ** (b - 1))) if signed else 0 * b
    hi = (2 ** b - 1) if (not signed and not narrow) else (2 ** b - 2) if not signed else (2 ** (b - 1) - 1)
    return Fraction(float(lo)), Fraction(float(hi))


def quant(x: Fraction, s: Fraction, z: Fraction, bw, signed: bool, narrow: bool, mode: str) -> Fraction:
    """IntQuant: :math:`s\\,(\\mathrm{round}(\\mathrm{clamp}(x/s + z)) - z)` (clamp first; 1-bit signed: bipolar)."""
    y = x / s + z
    if float(np.asarray(bw)) == 1 and signed:
        q = Fraction(1 if y >= 0 else -1)
    else:
        lo, hi = int_range(signed, narrow, bw)
        q = Fraction(rnd(min(max(y, lo), hi), mode))
    return (q - z) * s


def float_quant(x: Fraction, s: Fraction, e: int, m: int, bias: int, max_val: Fraction, mode: str) -> Fraction:
    """FloatQuant (qonnx's ``float_quant`` with exact arithmetic): quantum :math:`2^{\\max(\\lfloor\\log_2|y|\\rfloor,
    1-b) - m}` of :math:`y = x/s`, round in ``mode``, then clamp to the smaller of ``max_val`` and
    :math:`(2 - 2^{-m})\\,2^{2^e - 1 - b}`. The binade is found by halving / doubling, not from bit lengths."""
    y = x / s
    emin = 1 - bias
    L = 0
    if y != 0:
        a = abs(y)
        while Fraction(2) ** L > a:
            L -= 1
        while Fraction(2) ** (L + 1) <= a:
            L += 1
    quantum = Fraction(2) ** (max(L, emin) - m)
    v = rnd(y / quantum, mode) * quantum
    top = min(sum(Fraction(1, 2 ** i) for i in range(m + 1)) * Fraction(2) ** (2 ** e - 1 - bias), max_val)
    return min(max(v, -top), top) * s


def bipolar(x: Fraction, s: Fraction) -> Fraction:
    return (1 if x >= 0 else -1) * s


def trunc_v1(x, s, z, in_bw, out_bw, mode):
    y = Fraction(rnd(x / s + z, "ROUND"))
    y = y / Fraction(2) ** int(float(in_bw) - float(out_bw))
    return (Fraction(rnd(y, mode)) - z) * s


def trunc_v2(x, s, z, in_bw, out_s, out_bw, signed, narrow, mode):
    y = Fraction(rnd(x / s + z, "ROUND"))
    k = Fraction(2) ** int(round(math.log2(Fraction(out_s) / Fraction(s))))
    y = y / k
    lo, hi = int_range(signed, narrow, out_bw)
    y = Fraction(rnd(min(max(y, lo), hi), mode))
    return (y - z / k) * out_s


def multithreshold(x: Fraction, thresholds, out_scale, out_bias) -> Fraction:
    return Fraction(out_scale) * sum(1 for t in thresholds if x >= t) + Fraction(out_bias)


# ----------------------------------------------------------------------------------------- graph evaluation
def F(a) -> np.ndarray:
    """An array of exact Fractions from numbers (floats exactly as stored)."""
    a = np.asarray(a)
    conv = (lambda v: Fraction(float(v))) if a.dtype.kind == "f" else (lambda v: Fraction(int(v)))
    return np.array([conv(v) for v in a.ravel()], dtype=object).reshape(a.shape)


def _attrs(node):
    from onnx import helper
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _conv(x, w, pads, strides, group, dilations=(1, 1)):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    dh, dw = dilations
    xp = np.full((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), Fraction(0), object)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh, ow = (xp.shape[2] - dh * (kh - 1) - 1) // strides[0] + 1, (xp.shape[3] - dw * (kw - 1) - 1) // strides[1] + 1
    out = np.full((n, o, oh, ow), Fraction(0), object)
    og = o // group
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                r, q = i * strides[0], j * strides[1]
                patch = xp[:, g * cg:(g + 1) * cg, r:r + dh * (kh - 1) + 1:dh, q:q + dw * (kw - 1) + 1:dw]
                out[:, oc, i, j] = (patch * w[oc]).reshape(n, -1).sum(axis=1)
    return out


def _pool(x, k, s, p, fn, fill):
    n, c, h, w = x.shape
    xp = np.full((n, c, h + p[0] + p[2], w + p[1] + p[3]), fill, object)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    out = np.empty((n, c, oh, ow), object)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].reshape(n, c, -1)
            out[:, :, i, j] = np.array([[fn(list(win[a, b])) for b in range(c)] for a in range(n)], object)
    return out


def evaluate(model, feeds: dict) -> dict:
    """Every tensor of ``model`` (name -> object array of Fractions) for float inputs ``feeds``."""
    from onnx import numpy_helper
    env = {i.name: F(numpy_helper.to_array(i)) for i in model.graph.initializer}
    raw = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    env.update({k: F(v) for k, v in feeds.items()})
    vq = np.vectorize(quant, otypes=[object])
    for node in model.graph.node:
        a, op, ins = _attrs(node), node.op_type, [env.get(t) for t in node.input]
        if op in ("Quant", "IntQuant"):
            bw = raw[node.input[3]]
            y = vq(ins[0], ins[1], ins[2], bw, bool(a.get("signed", 1)), bool(a.get("narrow", 0)),
                   a.get("rounding_mode", "ROUND"))
        elif op == "FloatQuant":
            e, mb, b = (int(raw[t].reshape(())) for t in node.input[2:5])
            y = np.vectorize(float_quant, otypes=[object])(ins[0], ins[1], e, mb, b, ins[5].reshape(()).item(),
                                                           a.get("rounding_mode", "ROUND"))
        elif op == "BipolarQuant":
            y = np.vectorize(bipolar, otypes=[object])(ins[0], ins[1])
        elif op == "Trunc" and len(ins) == 5:
            y = np.vectorize(trunc_v1, otypes=[object])(ins[0], ins[1], ins[2], raw[node.input[3]],
                                                        raw[node.input[4]], a.get("rounding_mode", "FLOOR"))
        elif op == "Trunc":
            y = np.vectorize(trunc_v2, otypes=[object])(ins[0], ins[1], ins[2], raw[node.input[3]], ins[4],
                                                        raw[node.input[5]], bool(a.get("signed", 1)),
                                                        bool(a.get("narrow", 0)), a.get("rounding_mode", "FLOOR"))
        elif op == "MultiThreshold":
            x, t = ins[0], ins[1]
            layout = a.get("data_layout") or {2: "NC", 3: "NWC", 4: "NCHW"}.get(x.ndim)
            ax = layout.index("C")
            xm = np.moveaxis(x, ax, -1)
            y = np.empty(xm.shape, object)
            for idx in np.ndindex(xm.shape):
                row = t[0] if t.shape[0] == 1 else t[idx[-1]]
                y[idx] = multithreshold(xm[idx], list(row), Fraction(float(np.float32(a.get("out_scale", 1.0)))),
                                        Fraction(float(np.float32(a.get("out_bias", 0.0)))))
            y = np.moveaxis(y, -1, ax)
        elif op == "MatMul":
            y = np.matmul(ins[0], ins[1])
        elif op == "Gemm":
            b = ins[1].T if a.get("transB", 0) else ins[1]
            y = np.matmul(ins[0], b) + (ins[2] if len(ins) > 2 else 0)
        elif op == "Conv":
            y = _conv(ins[0], ins[1], list(a.get("pads", [0, 0, 0, 0])), list(a.get("strides", [1, 1])),
                      int(a.get("group", 1)), list(a.get("dilations", [1, 1])))
            if len(ins) > 2:
                y = y + ins[2].reshape(-1, 1, 1)
        elif op in ("Add", "Sub", "Mul", "Div"):
            y = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](ins[0], ins[1])
        elif op == "Relu":
            y = np.vectorize(lambda v: max(v, Fraction(0)), otypes=[object])(ins[0])
        elif op == "Sign":
            y = np.vectorize(lambda v: Fraction((v > 0) - (v < 0)), otypes=[object])(ins[0])
        elif op == "MaxPool":
            y = _pool(ins[0], a["kernel_shape"], a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0]), max,
                      Fraction(-10 ** 30))
        elif op == "AveragePool":
            k = a["kernel_shape"]
            y = _pool(ins[0], k, a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0]),
                      lambda w: sum(w) / (k[0] * k[1]), Fraction(0))
        elif op == "GlobalAveragePool":
            x = ins[0]
            y = (x.reshape(x.shape[0], x.shape[1], -1).sum(axis=2) / (x.shape[2] * x.shape[3]))[:, :, None, None]
        elif op == "Flatten":
            y = ins[0].reshape(ins[0].shape[0], -1)
        elif op == "Reshape":
            shape = [int(v) for v in raw[node.input[1]]]
            y = ins[0].reshape([ins[0].shape[i] if v == 0 else v for i, v in enumerate(shape)])
        elif op == "Transpose":
            y = np.transpose(ins[0], a["perm"])
        elif op == "BatchNormalization":
            g, b, m, v = (raw[t].astype(np.float32) for t in node.input[1:5])
            A = g / np.sqrt(np.float32(a.get("epsilon", 1e-5)) + v)       # qonnx's BatchNormToAffine, float32
            B = b - A * m
            shape = (1, -1) + (1,) * (ins[0].ndim - 2)
            y = ins[0] * F(A).reshape(shape) + F(B).reshape(shape)
        elif op == "Identity":
            y = ins[0]
        else:
            raise NotImplementedError(op)
        env[node.output[0]] = y
    return env

"""The node conversions of :func:`fxpsim.import_qonnx`: each ONNX / qonnx node onto the QONNX graph ops
(:mod:`.ops`), with the exact scales and integer multipliers computed here, once."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...datapath.qonnx import arithmetic as A
from ...datapath.qonnx.scales import ExactScale, common

__all__ = ["V", "Conversions", "bits_for"]

_QUANT_ATTRS = {"signed", "narrow", "rounding_mode"}


@dataclass
class V:
    """What an ONNX tensor is in the graph being built."""
    kind: str                       # "float" (the model's input), "act" (codes), "const"
    g: str = ""
    shape: tuple = ()               # per sample (float / act), full (const)
    scale: ExactScale | None = None  # act: per-sample rank; const in exact form: full rank
    zp: int = 0
    lo: int = 0
    hi: int = 0
    raw: object = None              # const: the value as the model holds it
    codes: object = None            # const in exact form: centred integer codes, real = scale * codes
    qrange: tuple | None = None     # const from a quantizer: its centred code range (the weights' datatype)
    relu: bool = False              # float: the model's input after a Relu (see Conversions._c_Quant)


def bits_for(lo: int, hi: int, what: str) -> tuple[int, bool]:
    """The narrowest integer type holding ``[lo, hi]``: ``(bits, signed)``."""
    if lo >= 0:
        bits, signed = max(1, int(hi).bit_length()), False
    else:
        bits, signed = max((-lo - 1).bit_length(), max(hi, 0).bit_length()) + 1, True
    if bits > 64:
        raise ValueError(f"tensor {what!r}: its values span {bits} bits, more than the 64 fxpsim holds")
    if bits == 64 and not signed:        # codes above 32 bits are held in int64 (TensorSpec.dtype): < 2^63
        raise ValueError(f"tensor {what!r}: its values span 64 unsigned bits; codes above 32 bits are held in "
                         "int64, 63 unsigned bits at most")
    return bits, signed


def _range_of_products(lo: int, hi: int, k) -> tuple[int, int]:
    ks = [int(v) for v in np.asarray(k, dtype=object).ravel()]
    cands = [a * b for a in (lo, hi) for b in (min(ks), max(ks))]
    return min(cands), max(cands)


class Conversions:
    """Mixin of the importer: one ``_c_<Op>`` per supported op."""

    # ------------------------------------------------------------------ helpers
    def refuse(self, n, why: str) -> ValueError:
        return ValueError(f"{self.path}: node {n.name!r} ({n.op}): {why}")

    def val(self, n, i: int) -> V:
        name = n.inputs[i] if i < len(n.inputs) else ""
        if not name:
            raise self.refuse(n, f"input {i} is missing")
        return self.env[name]

    def const(self, n, i: int, what: str) -> np.ndarray:
        v = self.val(n, i)
        if v.kind != "const" or v.raw is None:
            raise self.refuse(n, f"its {what} (input {i}) must be a constant initializer")
        return np.asarray(v.raw)

    def float_input(self, n, v: V) -> None:
        """Refuse a Relu'd float input where the Relu does not fold (only a Quant takes one, see :meth:`_c_Quant`)."""
        if v.relu:
            raise self.refuse(n, "reads a Relu of the float input, which folds only into a Quant whose codes start "
                                 "at its zero point (no float fallback)")

    def act(self, n, i: int = 0) -> V:
        v = self.val(n, i)
        if v.kind == "float":
            raise self.refuse(n, "reads the float input directly; fxpsim needs a Quant, BipolarQuant or "
                                 "MultiThreshold first (no float fallback)")
        if v.kind != "act":
            raise self.refuse(n, f"input {i} is a constant where an activation is expected")
        return v

    def attrs(self, n, allowed: dict):
        """Attributes with defaults; any attribute not in ``allowed`` or with a refused value raises."""
        out = {}
        for k, v in n.attrs.items():
            if k not in allowed:
                raise self.refuse(n, f"attribute {k!r} is not supported (supported: {', '.join(allowed) or 'none'})")
        for k, default in allowed.items():
            out[k] = n.attrs.get(k, default)
        return out

    def mode(self, n, name) -> str:
        try:
            return A.rounding_mode(name)
        except ValueError as exc:
            raise self.refuse(n, str(exc)) from None

    def set(self, n, v: V, i: int = 0):
        self.env[n.outputs[i]] = v

    def exact_const(self, v: V) -> tuple[np.ndarray, ExactScale]:
        """A constant's centred codes and scale (its float values as exact binary numbers)."""
        if v.codes is None:
            codes, e = A.dyadic_codes(v.raw)
            v.codes, v.scale = codes.astype(object), ExactScale(np.ones((1,) * codes.ndim, object), e)
        return np.asarray(v.codes, dtype=object), v.scale

    def per_sample(self, n, arr, rank: int) -> np.ndarray:
        """A constant broadcast against a per-sample tensor of ``rank`` dims, as an array of that rank."""
        a = np.asarray(arr)
        if a.ndim == rank + 1:
            if a.shape[0] != 1:
                raise self.refuse(n, f"a constant of shape {a.shape} varies along the batch axis")
            a = a[0]
        if a.ndim > rank:
            raise self.refuse(n, f"a constant of shape {a.shape} does not broadcast against the activation")
        return a.reshape((1,) * (rank - a.ndim) + a.shape)

    def per_sample_scale(self, n, s: ExactScale, rank: int) -> ExactScale:
        return ExactScale(self.per_sample(n, s.m, rank), s.e, s.d)

    def uniform_zp(self, n, zp) -> int:
        z = np.asarray(zp)
        if z.size == 0 or not np.all(z == z.ravel()[0]):
            raise self.refuse(n, "a per-channel zero point on an activation is not supported")
        return int(z.ravel()[0])

    def integer_zp(self, n, zp) -> np.ndarray:
        z = np.asarray(zp, np.float64)
        if not np.all(np.isfinite(z)) or not np.all(z == np.round(z)):
            raise self.refuse(n, f"zero point {zp!r} is not an integer")
        return np.round(z).astype(np.int64)

    # ------------------------------------------------------------------ qonnx custom ops
    def _c_Quant(self, n):
        at = self.attrs(n, {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"})
        mode = self.mode(n, at["rounding_mode"])
        scale_raw = self.const(n, 1, "scale")
        zp = self.integer_zp(n, self.const(n, 2, "zero point"))
        bw = self.const(n, 3, "bit width")
        if bw.size != 1:
            raise self.refuse(n, "the bit width must be a scalar")
        signed, narrow = bool(at["signed"]), bool(at["narrow"])
        bipolar = float(bw.ravel()[0]) == 1 and signed
        if float(bw.ravel()[0]) < 1 or float(bw.ravel()[0]) > 32:
            raise self.refuse(n, f"bit width {bw.ravel()[0]} outside 1..32")
        lo, hi = (-1, 1) if bipolar else A.int_bounds(bw.reshape(()), signed, narrow, mode)
        x = self.val(n, 0)
        if np.any(scale_raw <= 0):
            raise self.refuse(n, "scales must be positive")
        if x.kind == "const":
            s32 = np.asarray(scale_raw, np.float32)
            raw = np.asarray(x.raw)
            if bipolar:
                q = np.where(A.quantize_float(raw, s32, zp, -(1 << 32), 1 << 32, "FLOOR") >= 0, 1, -1)
            else:
                q = A.quantize_float(raw, s32, zp, lo, hi, mode)
            codes = q - np.broadcast_to(zp, q.shape)
            full = ExactScale.from_float(np.broadcast_to(s32, q.shape))
            deq = A.to_float32(codes.astype(object) * full.m * (1 << max(full.e, 0)), full.d << max(-full.e, 0))
            self.set(n, V("const", raw=deq, shape=q.shape, codes=codes.astype(object), scale=full,
                          qrange=(lo - int(np.max(zp)), hi - int(np.min(zp)))))
            return
        rank = len(x.shape)
        s32 = self.per_sample(n, np.asarray(scale_raw, np.float32), rank)
        S = ExactScale.from_float(s32)
        z = self.uniform_zp(n, zp)
        common_attrs = dict(zp=z, lo=lo, hi=hi, rounding_mode=mode, bipolar=bipolar)
        out = self.new_act(n.outputs[0], x.shape, lo, hi, S, z)
        if x.kind == "float":
            # Quant(Relu(x)) = Quant(x) when the codes start at the zero point: a negative x gives a value below
            # z, which the clamp lifts to lo, as Relu's 0 gives max(z, lo) = lo (QKeras' quantized_relu exports so)
            if x.relu and lo < z:
                raise self.refuse(n, f"quantizes a Relu of the float input with codes [{lo}, {hi}] below its zero "
                                     f"point {z}: the Relu does not fold into it (no float fallback)")
            self.add_node(n, "qonnx_quant", [x.g], [out.g], float_in=True, scale=s32.astype(np.float64).tolist(),
                          **common_attrs)
        else:
            num, den = x.scale.ratio(S)
            self.add_node(n, "qonnx_quant", [x.g], [out.g], x_zp=x.zp, num=num.tolist(), den=den.tolist(),
                          **common_attrs)
        self.set(n, out)

    _c_IntQuant = _c_Quant

    def _c_BipolarQuant(self, n):
        self.attrs(n, {})
        scale_raw = np.asarray(self.const(n, 1, "scale"), np.float32)
        if np.any(scale_raw <= 0):
            raise self.refuse(n, "scales must be positive")
        x = self.val(n, 0)
        if x.kind == "const":
            codes = np.where(np.asarray(x.raw) >= 0, 1, -1)
            full = ExactScale.from_float(np.broadcast_to(scale_raw, codes.shape))
            self.set(n, V("const", raw=(codes * scale_raw).astype(np.float32), shape=codes.shape,
                          codes=codes.astype(object), scale=full, qrange=(-1, 1)))
            return
        S = ExactScale.from_float(self.per_sample(n, scale_raw, len(x.shape)))
        out = self.new_act(n.outputs[0], x.shape, -1, 1, S, 0)
        if x.kind == "float":
            self.float_input(n, x)
            self.add_node(n, "qonnx_bipolar", [x.g], [out.g], float_in=True)
        else:
            self.add_node(n, "qonnx_bipolar", [x.g], [out.g], x_zp=x.zp)
        self.set(n, out)

    def _c_Trunc(self, n):
        x = self.act(n, 0)
        rank = len(x.shape)
        scale_raw = np.asarray(self.const(n, 1, "scale"), np.float32)
        zp_arr = self.integer_zp(n, self.const(n, 2, "zero point"))
        z = self.uniform_zp(n, zp_arr)
        in_bw = self.const(n, 3, "input bit width")
        S = ExactScale.from_float(self.per_sample(n, scale_raw, rank))
        num, den = x.scale.ratio(S)
        r_max = max(Fraction(int(a), int(b)) for a, b in zip(num.ravel(), den.ravel()))
        big = max(abs(x.lo - x.zp), abs(x.hi - x.zp))
        y0 = int(big * r_max) + 1 + abs(z)
        if len(n.inputs) == 5:
            at = self.attrs(n, {"rounding_mode": "FLOOR"})
            mode = self.mode(n, at["rounding_mode"])
            out_bw = self.const(n, 4, "output bit width")
            k = float(np.asarray(in_bw).ravel()[0]) - float(np.asarray(out_bw).ravel()[0])
            if k != int(k):
                raise self.refuse(n, f"a fractional truncation width {k}")
            k = int(k)
            bounds, out_scale, out_zp = None, S, z
        elif len(n.inputs) == 6:
            at = self.attrs(n, {"rounding_mode": "FLOOR", "narrow": 0, "signed": 1})
            mode = self.mode(n, at["rounding_mode"])
            out_scale_raw = np.asarray(self.const(n, 4, "output scale"), np.float32)
            out_bw = self.const(n, 5, "output bit width")
            ts = 2 ** np.round(np.log2(out_scale_raw / scale_raw))     # qonnx's trunc_scale, as qonnx computes it
            ts = np.asarray(ts).ravel()
            if not np.all(ts == ts[0]) or not float(ts[0]) > 0:
                raise self.refuse(n, "the truncation scale must be one power of two")
            mant, k = np.frexp(np.float64(ts[0]))
            if mant != 0.5:
                raise self.refuse(n, f"truncation scale {ts[0]} is not a power of two")
            k = int(k) - 1
            if (Fraction(z) / Fraction(2) ** k).denominator != 1:
                raise self.refuse(n, "the zero point over the truncation scale is not an integer")
            out_zp = int(Fraction(z) / Fraction(2) ** k)
            bounds = A.int_bounds(np.asarray(out_bw).reshape(()), bool(at["signed"]), bool(at["narrow"]), mode)
            out_scale = ExactScale.from_float(self.per_sample(n, out_scale_raw, rank))
        else:
            raise self.refuse(n, f"Trunc takes 5 (v1) or 6 (v2) inputs, got {len(n.inputs)}")
        if bounds is None:
            lo, hi = -((y0 >> k) + 2) if k >= 0 else -(y0 << -k), ((y0 >> k) + 2) if k >= 0 else (y0 << -k)
        else:
            lo, hi = bounds
        out = self.new_act(n.outputs[0], x.shape, lo, hi, out_scale, out_zp)
        self.add_node(n, "qonnx_trunc", [x.g], [out.g], x_zp=x.zp, num=num.tolist(), den=den.tolist(), zp=z,
                      shift=k, rounding_mode=mode, bounds=None if bounds is None else list(bounds))
        self.set(n, out)

    def _c_MultiThreshold(self, n):
        at = self.attrs(n, {"out_dtype": "", "out_scale": 1.0, "out_bias": 0.0, "data_layout": ""})
        x = self.val(n, 0)
        if x.kind == "const":
            raise self.refuse(n, "thresholding a constant is not supported")
        t = np.asarray(self.const(n, 1, "thresholds"), np.float32)
        rank = len(x.shape) + 1
        layout = at["data_layout"] or {2: "NC", 3: "NWC", 4: "NCHW"}.get(rank)
        cdim = layout.index("C") if layout and "C" in layout else 1
        axis = cdim - 1
        if t.ndim != 2 or (t.shape[0] not in (1, x.shape[axis])):
            raise self.refuse(n, f"thresholds of shape {t.shape} for {x.shape[axis]} channels")
        os_, ob = Fraction(float(np.float32(at["out_scale"]))), Fraction(float(np.float32(at["out_bias"])))
        if os_ <= 0:
            raise self.refuse(n, "out_scale must be positive")
        zq = -ob / os_
        if zq.denominator != 1:
            raise self.refuse(n, f"out_bias / out_scale = {-zq} is not an integer")
        S = ExactScale.from_float(np.full((1,) * len(x.shape), np.float32(at["out_scale"])))
        out = self.new_act(n.outputs[0], x.shape, 0, t.shape[1], S, int(zq))
        if x.kind == "float":
            self.float_input(n, x)
            tc = self.new_const(f"{n.name}/thresholds", t.view(np.int32))
            self.add_node(n, "qonnx_threshold", [x.g, tc], [out.g], float_in=True, channel_axis=axis)
        else:
            s = x.scale
            if not s.is_uniform_along([i for i in range(len(x.shape)) if i != axis]):
                raise self.refuse(n, "the input's scale varies along a non-channel axis")
            sc = np.moveaxis(np.broadcast_to(s.m, tuple(x.shape)), axis, 0).reshape(x.shape[axis], -1)[:, 0]
            tm, te = A.float_parts(t)
            ti = np.empty((x.shape[axis] if t.shape[0] == 1 and len(set(sc.tolist())) > 1 else t.shape[0],
                           t.shape[1]), object)
            for c in range(ti.shape[0]):
                tr = 0 if t.shape[0] == 1 else c
                for j in range(t.shape[1]):
                    f = Fraction(int(tm[tr, j])) * Fraction(2) ** int(te[tr, j]) * s.d / (int(sc[c]) * Fraction(2) ** s.e)
                    ceil = -((-f.numerator) // f.denominator)            # (q - z) s >= t  <=>  q >= ceil(t / s) + z
                    ti[c, j] = min(max(ceil + x.zp, x.lo), x.hi + 1)
            tc = self.new_const(f"{n.name}/thresholds", ti.astype(np.int64))
            self.add_node(n, "qonnx_threshold", [x.g, tc], [out.g], x_zp=x.zp, channel_axis=axis)
        self.set(n, out)

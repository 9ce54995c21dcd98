"""A MAC node's golden inputs, weights, bias and parameters, recomputed under alternative datapaths
(:class:`_NodeModel`): the accumulator under another width, overflow rule, weight layout, bias placement,
zero-point handling, padding or order, and the output under requantization variants.  :mod:`.mismatch` tests
these hypotheses against an RTL's tensors."""
from __future__ import annotations

import numpy as np

from .golden import _Golden
from .mac_model import fit_value, mac_products, mac_run

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


# ----------------------------------------------------------------------------------------- node model
def _wrap(v, bits: int):
    lo = -(1 << (bits - 1))
    return (np.asarray(v, dtype=np.int64) - lo) % (1 << bits) + lo if bits < 63 else np.asarray(v, np.int64)


class _NodeModel:
    """A MAC node's golden inputs, weights, bias and parameters, to recompute elements under alternatives."""

    @classmethod
    def make(cls, g: _Golden, node: str):
        n = g.nodes[node]
        if not n.get("mac"):
            return None
        try:
            return cls(g, n)
        except (KeyError, ValueError, StopIteration):
            return None

    def __init__(self, g: _Golden, n: dict):
        self.node, self.mac = n, n["mac"]
        get = lambda stem: g.array(f"{n['dir']}/{stem}") if f"{n['dir']}/{stem}" in g.keys else None  # noqa
        self.x, self.w = get("input"), get("weights")
        if self.x is None or self.w is None:
            raise KeyError("input/weights")
        self.bias, self.A, self.y = get("bias"), get("accumulator"), get("output")
        self.mult, self.shift = get("multiplier"), get("shift")
        rq = self.mac["requantization"]
        self.kind = rq["kind"]
        self.W = int(self.mac["acc_bits"])
        self.mode = self.mac["overflow"]
        self.preload = self.mac["bias_add"] == "preload"
        self.tr = n.get("mac_trace")

    # ---------------------------------------------------------------- accumulator
    def bias_for(self, coords):
        if self.bias is None:
            return None
        return self.bias[np.asarray(coords)[:, -1]].astype(np.int64)

    def acc(self, coords, *, bits=None, mode=None, w=None, bias_mode=None, x_zp=None, order=None, pad_code=None,
            trace=False):
        mac = dict(self.mac)
        if x_zp is not None:
            mac["x_zp"] = x_zp
        P = mac_products(mac, self.x, self.w if w is None else w, coords, pad_code)
        b = self.bias_for(coords)
        bits = self.W if bits is None else bits
        mode = self.mode if mode is None else mode
        bias_mode = (("preload" if self.preload else "after") if b is not None else "none") \
            if bias_mode is None else bias_mode
        init = b if bias_mode == "preload" else None
        if init is not None and bits != self.W:     # a narrower/wider register holds the preloaded bias
            init = np.array([fit_value(int(v), bits, mode) for v in init], dtype=np.int64)
        end = b if bias_mode == "after" else None
        return mac_run(P, init=init, bias_end=end, bits=bits, mode=mode, order=order or self.mac["order"],
                       overflow_at=self.mac["overflow_at"], trace=trace)

    def transposed_weights(self):
        w = self.w
        if self.mac["op"] == "fully_connected":
            M, K = w.shape
            return w.reshape(-1).reshape(K, M).T.copy(), "weights transposed (read as [K][M], w[k*M + m], " \
                "instead of [M][K])"
        if self.mac["op"] == "conv2d":
            O, KH, KW, C = w.shape
            return w.reshape(-1).reshape(KH, KW, C, O).transpose(3, 0, 1, 2).copy(), \
                "weights transposed (read as HWIO instead of OHWI)"
        return None, ""

    def acc_hypotheses(self) -> list:
        """``[(description, kwargs for acc(), kind)]`` of alternative accumulator datapaths."""
        H = []
        W, mode = self.W, self.mode
        other = {"saturate": "wrap", "wrap": "saturate"}.get(mode)
        if other == "wrap":
            H.append(("wrapped where saturation was expected", dict(mode="wrap"), "overflow"))
        elif other == "saturate":
            H.append(("saturated where wrapping was expected", dict(mode="saturate"), "overflow"))
        for b in (W - 1, W + 1):
            if 2 <= b <= 62:
                for m in (mode, other):
                    if m:
                        H.append((f"accumulator {b} bits wide instead of {W}: width off by one "
                                  f"({b}-bit {m})", dict(bits=b, mode=m), "width"))
        wt, text = self.transposed_weights()
        if wt is not None:
            H.append((text, dict(w=wt), "layout"))
        if self.bias is not None:
            if self.preload:
                H.append(("bias added after the products instead of preloaded", dict(bias_mode="after"), "bias"))
            else:
                H.append(("bias preloaded instead of added after the products", dict(bias_mode="preload"), "bias"))
            H.append(("bias not added", dict(bias_mode="none"), "bias"))
        if self.mac["x_zp"] != 0:
            H.append(("input zero point not subtracted", dict(x_zp=0), "zp"))
            if self.mac["op"] != "fully_connected" and any(map(any, self.mac["pads"])):
                H.append(("padded taps read the code 0 instead of the input zero point (padding with 0, "
                          f"x_zp = {self.mac['x_zp']})", dict(pad_code=0), "zp"))
        if self.mac["order"] == "sequential":
            H.append(("adder-tree order instead of sequential", dict(order="tree"), "order"))
        return H

    # ---------------------------------------------------------------- requantization
    def requant(self, acc, ch, variant: str = "ref"):
        """Output codes of accumulators ``acc`` [E] in channels ``ch`` [E] (double/single kinds)."""
        acc = np.asarray(acc, dtype=np.int64)
        m = self.mult[ch].astype(np.int64)
        s = self.shift[ch].astype(np.int64)
        kind = self.kind
        if variant == "single":
            kind = "single"
        elif variant == "double":
            kind = "double"
        if kind == "single":
            scaled = np.array([(((int(a) * int(mm) + (1 << (30 - int(ss)))) >> (31 - int(ss))) - INT32_MIN)
                               % (1 << 32) + INT32_MIN for a, mm, ss in zip(acc, m, s)], dtype=np.int64)
        else:
            left, right = np.maximum(s, 0), np.maximum(-s, 0)
            a = _wrap(acc << left, 32)
            ab = a * m                                              # |ab| <= 2^62
            nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
            t = ab + nudge
            if variant == "srdhm_floor":
                q = t >> 31
            else:
                q = np.where(t >= 0, t >> 31, -((-t) >> 31))        # truncation toward zero
            sat = (a == INT32_MIN) & (m == INT32_MIN)
            srdhm = _wrap(q, 32) if variant == "srdhm_nosat" else np.where(sat, INT32_MAX, _wrap(q, 32))
            mask = (np.int64(1) << right) - 1
            rem = srdhm & mask
            thr = (mask >> 1) + (0 if variant == "tie_up" else (srdhm < 0))
            scaled = (srdhm >> right) + (rem > thr)
        zp, lo, hi = self.mac["out_zp"], self.mac["act_min"], self.mac["act_max"]
        if variant == "no_zp":
            zp = 0
        y = scaled + zp
        if variant == "no_clamp":
            return _wrap(y, 8)
        return np.clip(y, lo, hi)

    def requant_variants(self) -> list:
        if self.kind not in ("double", "single") or self.mult is None or self.shift is None:
            return []
        V = []
        if self.kind == "double":
            V += [("round-half-up vs half-away tie at the rounding shift (RoundingDivideByPOT without its sign "
                   "term: negative ties rounded toward +inf)", "tie_up"),
                  ("SRDHM divides by 2^31 with floor instead of truncation toward zero (negative products one "
                   "LSB low before the rounding shift)", "srdhm_floor"),
                  ("SRDHM misses its INT32_MIN x INT32_MIN saturation", "srdhm_nosat"),
                  ("single rounding (TFLITE_SINGLE_ROUNDING) instead of double", "single")]
        else:
            V.append(("double rounding (gemmlowp) instead of single", "double"))
        V += [("output zero point not added", "no_zp"), ("activation clamp missing (output wraps)", "no_clamp")]
        return V

    def chain(self, acc: int, ch: int) -> list:
        """Text lines of the requantization of one accumulator value (double rounding)."""
        m, s = int(self.mult[ch]), int(self.shift[ch])
        zp, lo, hi = self.mac["out_zp"], self.mac["act_min"], self.mac["act_max"]
        if self.kind == "single":
            total = 31 - s
            v = (acc * m + (1 << (total - 1))) >> total
            return [f"acc {acc} * multiplier {m} + 2^{total - 1}, >> {total} (single rounding) = {v}",
                    f"+ out_zp {zp} = {v + zp}, clamp [{lo}, {hi}] -> {min(max(v + zp, lo), hi)}"]
        left, right = max(s, 0), max(-s, 0)
        a = (acc << left) - INT32_MIN
        a = a % (1 << 32) + INT32_MIN
        ab = a * m
        t = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
        q = t >> 31 if t >= 0 else -((-t) >> 31)
        srdhm = INT32_MAX if a == m == INT32_MIN else (q - INT32_MIN) % (1 << 32) + INT32_MIN
        mask = (1 << right) - 1
        rem, thr = srdhm & mask, (mask >> 1) + (srdhm < 0)
        scaled = (srdhm >> right) + (rem > thr)
        tie = right > 0 and rem == (1 << (right - 1))
        y = min(max(scaled + zp, lo), hi)
        return [f"acc {acc}, multiplier {m}, shift {s} (left {left}, right {right})",
                f"a = int32(acc << {left}) = {a}; a*m = {ab}; SRDHM = trunc((a*m {'+' if ab >= 0 else '-'} nudge) / "
                f"2^31) = {srdhm}",
                f"RoundingDivideByPOT({srdhm}, {right}): remainder {rem}, threshold {thr} "
                f"({'mask/2 + 1: negative' if srdhm < 0 else 'mask/2'}) -> {scaled}"
                + (f"   [a tie: remainder = 2^{right - 1} exactly]" if tie else ""),
                f"+ out_zp {zp} = {scaled + zp}, clamp [{lo}, {hi}] -> {y}"]

"""An independent model of one conv2d / depthwise_conv2d node of fxpsim's golden vectors, with the bugs the
RTL tests plant: Python-integer loops over the golden input, weights and bias (taps row-major, padding), the
overflow rule at every add, gemmlowp requantization from ``tests/reference.py``.  Used by
``test_cocotb_conv.py`` (where the RTL must fail first) and ``test_diagnosis.py`` (what outputs a bug gives)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from reference import ref_srdhm, ref_wrap32


def fit(v, bits, mode):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if lo <= v <= hi:
        return v
    return (hi if v > hi else lo) if mode == "saturate" else (v - lo) % (1 << bits) + lo


class Model:
    """One conv2d / depthwise node from its golden files, with optional bugs (see ``sums`` and ``y``)."""

    def __init__(self, d, manifest, node):
        e = next(n for n in manifest["nodes"] if n["name"] == node)
        self.mac, self.dir = e["mac"], Path(d) / e["dir"]
        ld = lambda r: np.load(self.dir / f"{r}.npy").astype(np.int64)   # noqa: E731
        self.x, self.w, self.b = ld("input"), ld("weights"), ld("bias")
        self.mult, self.shift, self.acc, self.out = ld("multiplier"), ld("shift"), ld("accumulator"), ld("output")
        self.trace = ld("mac_trace") if (self.dir / "mac_trace.npy").exists() else None
        self.dw = self.mac["op"] == "depthwise_conv2d"

    def sums(self, n, oh, ow, m, bits=None, mode=None, pad_code=None, hwio=False):
        """s_0 .. the accumulator of output (n, oh, ow, m): taps (i, j, c) row-major, padded taps adding
        (pad_code - x_zp) * w (pad_code None: 0), weights read as HWIO when ``hwio``."""
        mac = self.mac
        bits, mode = bits or mac["acc_bits"], mode or mac["overflow"]
        (sh, sw), (dh, dwl), (pt, pl) = mac["stride"], mac["dilation"], (mac["pads"][0][0], mac["pads"][1][0])
        H, W, C = self.x.shape[1:]
        KH, KW = mac["kernel"]
        M = self.out.shape[3]
        wf = self.w.reshape(-1)
        preload = mac["bias_add"] == "preload"
        s = [fit(int(self.b[m]), bits, mode) if preload else 0]
        t = 0
        for i in range(KH):
            for j in range(KW):
                for c in ([m // mac.get("depth_multiplier", 1)] if self.dw else range(C)):
                    ih, iw = oh * sh + i * dh - pt, ow * sw + j * dwl - pl
                    if 0 <= ih < H and 0 <= iw < W:
                        xo = int(self.x[n, ih, iw, c]) - mac["x_zp"]
                    else:
                        xo = 0 if pad_code is None else pad_code - mac["x_zp"]
                    wv = int(wf[t * M + m]) if (self.dw or hwio) else int(wf[m * len(wf) // M + t])
                    s.append(fit(s[-1] + xo * wv, bits, mode))
                    t += 1
        if not preload:
            s.append(fit(s[-1] + int(self.b[m]), bits, mode))
        return s

    def y(self, acc, m, tie_up=False):
        """gemmlowp MultiplyByQuantizedMultiplier, out_zp, clamp; ``tie_up``: RoundingDivideByPOT rounds
        negative ties up (the bug)."""
        mlt, sh = int(self.mult[m]), int(self.shift[m])
        srdhm = ref_srdhm(ref_wrap32(acc << max(sh, 0)), mlt)
        right = max(-sh, 0)
        mask = (1 << right) - 1
        thr = (mask >> 1) + (0 if tie_up or srdhm >= 0 else 1)
        v = (srdhm >> right) + int((srdhm & mask) > thr) + self.mac["out_zp"]
        return min(max(v, self.mac["act_min"]), self.mac["act_max"])

    def first_wrong_word(self, tie_up=False, traced=True, **bug):
        """The first beat the buggy engine sends that differs from the golden one, in its beat order:
        ``(role, index, value, sums)``, or None."""
        for flat, (n, oh, ow, m) in enumerate(np.ndindex(*self.out.shape)):
            s = self.sums(n, oh, ow, m, **bug)
            if traced and self.trace is not None and flat < len(self.trace):
                for k, v in enumerate(s):
                    if v != self.trace[flat, k]:
                        return "mac_trace", (flat, k), v, s
            y = self.y(s[-1], m, tie_up)
            if s[-1] != self.acc[n, oh, ow, m]:
                return "accumulator", (n, oh, ow, m), s[-1], s
            if y != self.out[n, oh, ow, m]:
                return "output", (n, oh, ow, m), y, s
        return None

    def outputs(self, tie_up=False, **bug):
        """The node's output codes (and accumulators) with the bug: ``(y, acc)`` arrays of the output's shape."""
        y, acc = np.zeros_like(self.out), np.zeros_like(self.acc)
        for idx in np.ndindex(*self.out.shape):
            acc[idx] = self.sums(*idx, **bug)[-1]
            y[idx] = self.y(int(acc[idx]), idx[3], tie_up)
        return y, acc

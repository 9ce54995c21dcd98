"""An independent Fraction model of an FP8 tensor core's dot product (test-only; fxpsim never imports it), as
MMA-Sim describes Hopper's wgmma: per chunk of ``chunk`` products, E_max over the products' exponents (E4M3:
max(floor log2, -6) per factor; a zero: -126) and C's; every term truncated to F bits below E_max; the integer
sum rounded toward zero to 13 fraction bits; with ``promote`` the chunk results go to a float32 total (round
half to even) every ``promote`` products, C then in the total.  Also the E4M3 operand rule of the float
datapath: codes fl(v / 2^e), e the smallest with amax / 2^e <= 448.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def floor_log2(v: Fraction) -> int:
    v = abs(v)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    return e if Fraction(2) ** e <= v else e - 1


def round_f32(v: Fraction, man: int, nearest: bool) -> Fraction:
    """v rounded to ``man`` fraction bits on float32's exponent range (toward zero, or half to even)."""
    if v == 0:
        return Fraction(0)
    q = Fraction(2) ** (max(floor_log2(v), -126) - man)
    n = v / q
    return (round(n) if nearest else Fraction(int(n))) * q


def fused_chunk(a, b, c, F, man=13):
    ex = lambda v, emin: max(floor_log2(v), emin) if v else -126  # noqa: E731
    emax = max([ex(x, -6) + ex(y, -6) for x, y in zip(a, b)] + [ex(c, -126)])
    unit = Fraction(2) ** (emax - F)
    total = sum(int(x * y / unit) for x, y in zip(a, b)) + int(c / unit)
    return round_f32(total * unit, man, nearest=False)


def tensor_core(a, b, c, chunk, F, promote, man=13):
    """One output: row ``a`` . column ``b`` + ``c`` (Fractions); ``promote`` 0/None: never promoted; ``man``
    the fraction bits each fused dot rounds to (toward zero)."""
    if not promote:
        d = c
        for k in range(0, len(a), chunk):
            d = fused_chunk(a[k:k + chunk], b[k:k + chunk], d, F, man)
        return d
    total, d = c, Fraction(0)
    for k in range(0, len(a), chunk):
        d = fused_chunk(a[k:k + chunk], b[k:k + chunk], d, F, man)
        if (k + chunk) % promote == 0 or k + chunk >= len(a):      # the last (zero-padded) chunk too
            total, d = round_f32(total + d, 23, nearest=True), Fraction(0)
    return total


def pow2_exponent(amax: float) -> int:
    """The smallest e with amax / 2^e <= 448 (0 for amax 0), by exact search on powers of two."""
    if amax == 0:
        return 0
    e = math.floor(math.log2(amax / 448.0)) - 2
    while amax / 2.0 ** e > 448.0:
        e += 1
    return e


def e4m3(v: np.ndarray) -> np.ndarray:
    """``v`` rounded to E4M3 (ml_dtypes, half to even), saturated at ±448."""
    import ml_dtypes
    return np.clip(np.asarray(v, np.float64), -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def dense(x, w, b, x_amax, chunk=32, F=13, promote=128):
    """A dense layer on the float datapath: E4M3 codes of x / 2^ex (per tensor) and w / 2^ew (per output
    column), the bias as float32 C = fl32(b / 2^(ex+ew)), the tensor core, the result times 2^(ex+ew)."""
    ex = pow2_exponent(x_amax)
    out = np.zeros((x.shape[0], w.shape[1]))
    xa = e4m3(x / 2.0 ** ex)
    for j in range(w.shape[1]):
        ew = pow2_exponent(float(np.abs(w[:, j]).max()))
        col = [Fraction(float(v)) for v in e4m3(w[:, j] / 2.0 ** ew)]
        s = 2.0 ** (ex + ew)
        c = Fraction(float(np.float32(b[j] / s)))
        for i in range(x.shape[0]):
            out[i, j] = float(tensor_core([Fraction(float(v)) for v in xa[i]], col, c, chunk, F, promote)) * s
    return out

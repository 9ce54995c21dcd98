"""Per-add IEEE accumulation: :math:`s_k = \\mathrm{round}_{acc}(s_{k-1} + p_k)` in any float format.

Each add is one correctly rounded operation on the exact sum of two floats.  The sum is formed in
float64 as :math:`x + y = s + t` exactly (TwoSum, Knuth TAOCP vol. 2 §4.2.2), then :math:`s` is
replaced by the round-to-odd value :math:`\\mathrm{RO}_{53}(x + y)` (``s`` moved one float64 ulp
toward ``t`` when ``t != 0`` and ``s`` is even) and rounded once more into the accumulator format by
:func:`fxpsim.core.float_codec.encode`.  Rounding to odd at 53 bits and then to ``p <= 51`` bits in
any mode equals one rounding of the exact value (Boldo & Melquiond, *Emulation of FMA and correctly
rounded sums: proved algorithms using rounding to odd*, IEEE TC 2008), so there is no double
rounding.  The FMA product :math:`a_k b_k` of inputs with at most 26-bit significands is exact in
float64.
"""
from __future__ import annotations

import numpy as np

from ...core.float_codec import decode, encode
from ...core.float_format import FloatFormat

__all__ = ["round_to_odd_sum", "add_values", "MAX_PRODUCT_SIG_BITS"]

MAX_PRODUCT_SIG_BITS = 26


def round_to_odd_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:math:`\\mathrm{RO}_{53}(x + y)` for float64 arrays (IEEE specials as float64 gives them)."""
    s = x + y
    bb = s - x
    t = (x - (s - bb)) + (y - bb)
    fin = np.isfinite(s)
    t = np.where(fin, t, 0.0)
    even = (s.view(np.int64) & 1) == 0
    fix = (t != 0) & even
    return np.where(fix, np.nextafter(s, np.where(t > 0, np.inf, -np.inf)), s)


def add_values(x: np.ndarray, y: np.ndarray, fmt: FloatFormat, rounding: str, overflow: str, stats):
    """Codes of ``round_fmt(x + y)`` for exact float64 values ``x``, ``y`` (IEEE 754 addition:
    an exact zero sum of opposite signs is +0, -0 under ``floor``), and the NaN mask (NaN results
    get the code with every magnitude bit set, which decodes as NaN)."""
    s = round_to_odd_sum(x, y)
    if rounding == "floor":
        zero = (s == 0) & ~((x == 0) & (y == 0) & ~np.signbit(x) & ~np.signbit(y))
        s = np.where(zero, -0.0, s)
    nan = np.isnan(s)
    ovf = "inf" if overflow == "ieee" else "saturate"
    if not fmt.has_inf:
        ovf = "saturate"
    q = encode(np.where(nan, 0.0, s), fmt, rounding=rounding, overflow=ovf)
    codes = q.bits.astype(np.int64)
    stats["overflows"] += int(q.overflows - np.isinf(s).sum() * (ovf == "saturate"))
    stats["underflows"] += int(q.underflows)
    nan_code = ((1 << fmt.mag_bits) - 1) if fmt.has_nan else int(fmt.max_mag_code)
    return np.where(nan, nan_code, codes), nan


def per_add_dot(av: np.ndarray, bv: np.ndarray, c_codes: np.ndarray, acc, stats) -> np.ndarray:
    """Sequential per-add accumulation of ``av`` (M, K) x ``bv`` (K, N) exact float64 values
    into ``acc.output`` starting from ``c_codes`` (M, N); returns the codes."""
    fmt, rnd = acc.output, acc.output_rounding
    codes = c_codes.astype(np.int64)
    nan_out = np.isnan(decode(codes, fmt))
    for k in range(av.shape[1]):
        p = av[:, k][:, None] * bv[k, :][None, :]
        if not acc.fma:
            pnan = np.isnan(p)
            pq = encode(np.where(pnan, 0.0, p), fmt, rounding=rnd,
                        overflow="inf" if fmt.has_inf and acc.overflow == "ieee" else "saturate")
            stats["overflows"] += int(pq.overflows)
            p = np.where(pnan, np.nan, decode(pq.bits, fmt))
        s = decode(codes, fmt)
        codes, nan_out = add_values(s, p, fmt, rnd, acc.overflow, stats)
    stats["nans"] += int(nan_out.sum())
    return np.where(nan_out, acc.nan, codes)

"""One rounding of an exact scaled integer :math:`N \\cdot 2^{q}` into a float format's codes.

For :math:`N \\ne 0` let :math:`L = \\lfloor \\log_2 |N| \\rfloor`; the result's quantum is
:math:`2^{Q}`, :math:`Q = \\max(L + q, e_{min}) - m` (``m`` mantissa bits of the *precision* format,
:math:`e_{min}` its smallest normal exponent), the kept integer is
:math:`n = \\mathrm{round}(|N| \\cdot 2^{q - Q})` and the magnitude code is :math:`n + (Q - e_{min} + m) 2^m`
(a carry out of the mantissa moves into the next binade by itself; ``n < 2^m`` is a subnormal).
A magnitude code above the largest finite one is an overflow:

* ``overflow="inf"``: ±Inf whatever the rounding -- what a float64 -> float32 cast does after a
  truncation (MMA-Sim's ``torch.tensor(s * 2**e, dtype=float32)``);
* ``"ieee"``: IEEE 754 -- ±Inf, except the largest finite value when rounding toward zero
  (``toward_zero``, ``floor`` of a positive, ``ceil`` of a negative value);
* ``"saturate"``: the largest finite value.

``precision`` may have fewer mantissa bits than ``storage`` (same exponent width and bias: Hopper's
FP8 ``f32_e8m13`` output keeps 13 fraction bits in a float32 word); the code is widened exactly.
Zero results are +0 unless ``zero_sign`` says otherwise.
"""
from __future__ import annotations

import numpy as np

from ...core.float_codec import parse_float_rounding
from ...core.float_format import FloatFormat

__all__ = ["round_scaled", "OUTPUT_ROUNDINGS", "parse_output_rounding", "OVERFLOWS"]

OUTPUT_ROUNDINGS = ("toward_zero", "half_even", "half_away", "floor", "ceil")
OVERFLOWS = ("inf", "ieee", "saturate")


def parse_output_rounding(rounding, where: str) -> str:
    try:
        r = parse_float_rounding(rounding)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if r not in OUTPUT_ROUNDINGS:
        raise ValueError(f"{where}: rounding {r!r} is not supported here; use one of "
                         f"{', '.join(OUTPUT_ROUNDINGS)}")
    return r


def _bitlen(x: np.ndarray) -> np.ndarray:
    """floor(log2 x) + 1 for int64 x >= 0 (0 for 0), exact (no float rounding)."""
    out = np.zeros(x.shape, np.int64)
    y = x.copy()
    for k in (32, 16, 8, 4, 2, 1):
        big = y >= (np.int64(1) << k)
        out += np.where(big, k, 0)
        y = np.where(big, y >> k, y)
    return out + (y > 0)


def _increment(n, rem, half, beyond, neg, rounding):
    """Whether |result| goes up by one ulp: ``rem`` the dropped bits, ``half`` the half ulp;
    ``beyond`` marks shifts so large that every bit is dropped and rem < half."""
    nz = rem != 0
    gt = (rem > half) & ~beyond
    tie = (rem == half) & ~beyond & (half != 0)
    if rounding == "toward_zero":
        return np.zeros(n.shape, bool)
    if rounding == "half_even":
        return gt | (tie & ((n & 1) == 1))
    if rounding == "half_away":
        return gt | tie
    if rounding == "floor":
        return nz & neg
    return nz & ~neg                                       # ceil


def round_scaled(N, q, precision: FloatFormat, rounding: str, overflow: str = "ieee",
                 storage: FloatFormat | None = None, zero_sign=None):
    """Codes of ``storage`` (default ``precision``) nearest ``N * 2^q`` under ``rounding``.

    Parameters
    ----------
    N : int64 array (``|N| < 2^62``) or object array of Python ints (any size)
    q : int64 array or int, broadcast against ``N``
    precision, storage : FloatFormat (``ieee`` or ``fn`` encodings)
    rounding : one of :data:`OUTPUT_ROUNDINGS`
    overflow : one of :data:`OVERFLOWS`
    zero_sign : bool array, optional -- the sign of zero results (default +0)

    Returns
    -------
    (codes int64, overflow mask, underflow mask)
    """
    storage = precision if storage is None else storage
    N = np.asarray(N)
    q = np.broadcast_to(np.asarray(q, dtype=np.int64), N.shape)
    if N.dtype == object:
        return _round_big(N, q, precision, rounding, overflow, storage, zero_sign)
    N = N.astype(np.int64)
    neg = N < 0
    mag = np.abs(N)
    m, emin = precision.man_bits, precision._min_exponent
    L = _bitlen(mag) - 1
    Q = np.maximum(L + q, emin) - m
    s = Q - q
    beyond = s > 62
    sr = np.clip(s, 0, 62)
    sl = np.clip(-s, 0, 62)
    n = np.where(s > 0, mag >> sr, mag << sl)
    rem = np.where(s > 0, mag & ((np.int64(1) << sr) - 1), 0)
    half = np.where(s > 0, (np.int64(1) << sr) >> 1, 0)
    n = np.where(beyond, 0, n)
    rem = np.where(beyond, mag, rem)
    n = n + _increment(n, rem, half, beyond, neg, rounding)
    k = Q - emin + m
    code = n + np.where(n > 0, k, 0) * (np.int64(1) << m)
    return _finish(code, neg, mag == 0, precision, rounding, overflow, storage, zero_sign, n == 0)


def _finish(code, neg, zero_in, precision, rounding, overflow, storage, zero_sign, n_zero):
    maxc = precision.max_mag_code
    ovf = (code > maxc) & ~zero_in
    to_max = np.zeros(code.shape, bool)
    if overflow == "saturate" or not precision.has_inf:
        to_max = ovf
    elif overflow == "ieee":
        toward0 = (rounding == "toward_zero") | ((rounding == "floor") & ~neg) | ((rounding == "ceil") & neg)
        to_max = ovf & toward0
    inf_code = precision.inf_code if precision.has_inf else maxc
    code = np.where(ovf, np.where(to_max, maxc, inf_code), code)
    unf = n_zero & ~zero_in
    sign = neg & ~n_zero
    if zero_sign is not None:
        sign = np.where(n_zero, zero_sign, sign)
    # widen precision -> storage (same exponent field and bias, more mantissa bits)
    shift = storage.man_bits - precision.man_bits
    out = (code << shift) | np.where(sign, storage.sign_bit, 0)
    return out.astype(np.int64), ovf, unf


def _round_big(N, q, precision, rounding, overflow, storage, zero_sign):
    """The same rounding on Python ints, element by element (the exact kind's wide sums)."""
    flat_n, flat_q = N.reshape(-1), q.reshape(-1)
    m, emin = precision.man_bits, precision._min_exponent
    codes = np.zeros(flat_n.size, np.int64)
    neg = np.zeros(flat_n.size, bool)
    zero_in = np.zeros(flat_n.size, bool)
    n_zero = np.zeros(flat_n.size, bool)
    for i in range(flat_n.size):
        v, qi = int(flat_n[i]), int(flat_q[i])
        neg[i] = v < 0
        a = -v if v < 0 else v
        if a == 0:
            zero_in[i] = n_zero[i] = True
            continue
        L = a.bit_length() - 1
        Q = max(L + qi, emin) - m
        s = Q - qi
        if s <= 0:
            n, rem, half = a << -s, 0, 0
        else:
            n, rem, half = a >> s, a & ((1 << s) - 1), 1 << (s - 1)
        if rounding == "half_even":
            inc = rem > half or (rem == half and rem and n & 1)
        elif rounding == "half_away":
            inc = rem >= half and rem != 0
        elif rounding == "floor":
            inc = rem != 0 and v < 0
        elif rounding == "ceil":
            inc = rem != 0 and v > 0
        else:
            inc = False
        n += int(inc)
        n_zero[i] = n == 0
        codes[i] = min(n + (Q - emin + m << m if n else 0), precision.max_mag_code + 1)
    zs = None if zero_sign is None else np.asarray(zero_sign).reshape(-1)
    out, ovf, unf = _finish(codes, neg, zero_in, precision, rounding, overflow, storage, zs, n_zero)
    return out.reshape(N.shape), ovf.reshape(N.shape), unf.reshape(N.shape)

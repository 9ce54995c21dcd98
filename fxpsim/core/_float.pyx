# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Scalar C loop of ``fxpsim.core.float_codec`` encode: float64 -> FloatFormat codes, exactly.

The same integer algorithm as the numpy path (``float_codec._encode_flat``, which documents it and
which the tests compare this kernel with element for element): the 53-bit significand of the
float64 bit pattern is shifted right by ``s`` (always >= 21 here) and rounded on its integer
remainder.  Every shift is below 64, every intermediate fits int64 (binade index below 2^12 times
2^31), so there is no undefined behaviour.  Validation lives in Python.
"""
from libc.stdint cimport int64_t, uint64_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy

ctypedef fused code_t:
    uint8_t
    uint16_t
    uint32_t

cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil

# rounding modes (float_codec._RND_CODES) and overflow modes (float_codec._OVF_CODES)
cdef enum:
    R_HALF_EVEN = 0
    R_HALF_AWAY = 1
    R_HALF_UP = 2
    R_HALF_DOWN = 3
    R_HALF_TOWARD_ZERO = 4
    R_TOWARD_ZERO = 5
    R_FLOOR = 6
    R_CEIL = 7
    R_ODD = 8
    R_STOCHASTIC = 9
    O_SATURATE = 0
    O_INF = 1
    O_NAN = 2


cdef inline int64_t encode_one(double xd, int64_t scale_exp, int m, int64_t emin, bint fnu, bint flush,
                               int64_t maxc, int64_t inf_code, int64_t nan_code, int64_t sign_bit,
                               bint is_signed, bint has_neg_zero, bint signed_nan, bint has_nan,
                               bint has_zero, int rnd, int ovf, bint daz, double tiny_in,
                               uint64_t u, int R, int64_t* counts) noexcept nogil:
    """One element; counts = [overflows, underflows, ties, nans]."""
    cdef uint64_t b
    memcpy(&b, &xd, 8)
    cdef bint neg = (b >> 63) != 0
    cdef uint64_t E = (b >> 52) & 0x7FF
    cdef uint64_t F = b & ((<uint64_t>1 << 52) - 1)
    cdef int64_t M, L, q, s, k, base, trunc, rem, half, ct, code, d
    cdef bint tie = 0, gt = 0, nz = 0, inc = 0, down, over, bad
    cdef int bl
    if E == 0x7FF:
        if F != 0:                                                   # NaN
            counts[3] += 1
            if not has_nan:
                return 0
            return (sign_bit if (neg and signed_nan) else 0) | nan_code
        if not is_signed and neg:                                    # -inf, unsigned
            counts[0] += 1
            if has_nan and (ovf != O_SATURATE or not has_zero):
                return nan_code
            return 0
        if ovf == O_INF:
            return (sign_bit if neg else 0) | inf_code
        counts[0] += 1
        if ovf == O_NAN:
            return (sign_bit if (neg and signed_nan) else 0) | nan_code
        return (sign_bit if neg else 0) | maxc
    if (E == 0 and F == 0) or (daz and (xd < tiny_in and -xd < tiny_in)):   # zero (or flushed input)
        if fnu:
            counts[0] += 1
            return nan_code
        if neg and not is_signed:
            return 0
        return sign_bit if (neg and has_neg_zero) else 0
    if not is_signed and neg and fnu:
        counts[0] += 1
        return nan_code
    if E == 0:                                                       # float64 subnormal: normalise
        bl = 64 - __builtin_clzll(F)
        M = <int64_t>(F << (53 - bl))
        L = -1075 + bl
    else:
        M = <int64_t>(F | (<uint64_t>1 << 52))
        L = <int64_t>E - 1023
    L -= scale_exp
    q = (L if L > emin else emin) - m
    s = q - (L - 52)
    k = q - (emin - m)
    base = (k << m) - ((<int64_t>1 << m) if fnu else 0)
    if s > 62:
        trunc = 0
        nz = 1
        rem = 0
    else:
        trunc = M >> s
        rem = M & ((<int64_t>1 << s) - 1)
        half = <int64_t>1 << (s - 1)
        tie = rem == half
        gt = rem > half
        nz = rem != 0
    ct = base + trunc
    if rnd == R_HALF_EVEN:
        inc = gt or (tie and (ct & 1))
    elif rnd == R_HALF_AWAY:
        inc = gt or tie
    elif rnd == R_HALF_UP:
        inc = gt or (tie and not neg)
    elif rnd == R_HALF_DOWN:
        inc = gt or (tie and neg)
    elif rnd == R_HALF_TOWARD_ZERO:
        inc = gt
    elif rnd == R_FLOOR:
        inc = nz and neg
    elif rnd == R_CEIL:
        inc = nz and not neg
    elif rnd == R_STOCHASTIC:
        if s > 62:                                                   # rem = M, M < 2^53
            d = (M >> (s - R)) if s - R < 63 else 0
        elif s >= R:
            d = rem >> (s - R)
        else:
            d = rem << (R - s)
        inc = (<uint64_t>d + u) >= ((<uint64_t>1) << R)
    code = ct + inc
    if rnd == R_ODD and nz:
        code |= 1
    over = code > maxc
    if fnu:
        if code < 0:
            counts[1] += 1
            code = 0
    elif code == 0:
        counts[1] += 1
    elif flush and code < (<int64_t>1 << m):
        counts[1] += 1
        code = 0
    if not is_signed and neg:                                        # negative, unsigned
        if code == 0:
            counts[2] += tie
            return 0
        counts[0] += 1
        if has_nan and (ovf != O_SATURATE or not has_zero):
            return nan_code
        return 0
    if tie:
        counts[2] += 1
    if over:
        counts[0] += 1
        down = rnd == R_TOWARD_ZERO or rnd == R_ODD or (rnd == R_FLOOR and not neg) or \
            (rnd == R_CEIL and neg)
        if down or ovf == O_SATURATE:
            code = maxc
        elif ovf == O_INF:
            code = inf_code
        else:
            return (sign_bit if (neg and signed_nan) else 0) | nan_code
    if neg and (code != 0 or has_neg_zero):
        code |= sign_bit
    return code


def encode_kernel(const double[::1] x, code_t[::1] out, const int64_t[::1] scale_exp,
                  const uint64_t[::1] rand, int R, int m, int64_t emin, bint fnu, bint flush,
                  int64_t maxc, int64_t inf_code, int64_t nan_code, int64_t sign_bit, bint is_signed,
                  bint has_neg_zero, bint signed_nan, bint has_nan, bint has_zero, int rnd, int ovf,
                  bint daz, double tiny_in):
    """Encode ``x`` into ``out``; returns (overflows, underflows, ties, nans).

    ``scale_exp`` (length n, or empty): encode x * 2^-scale_exp; ``rand`` (length n, or empty):
    the stochastic draws.  Special codes absent from the format are passed as 0 (never used:
    Python has checked the modes)."""
    cdef Py_ssize_t i, n = x.shape[0]
    cdef int64_t counts[4]
    cdef bint has_scale = scale_exp.shape[0] == n and n > 0
    cdef bint has_rand = rand.shape[0] == n and n > 0
    counts[0] = counts[1] = counts[2] = counts[3] = 0
    with nogil:
        for i in range(n):
            out[i] = <code_t>encode_one(x[i], scale_exp[i] if has_scale else 0, m, emin, fnu, flush,
                                        maxc, inf_code, nan_code, sign_bit, is_signed, has_neg_zero,
                                        signed_nan, has_nan, has_zero, rnd, ovf, daz, tiny_in,
                                        rand[i] if has_rand else 0, R, counts)
    return counts[0], counts[1], counts[2], counts[3]

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Scalar C loop of ``fxpsim.core.float_codec`` encode: float64 -> FloatFormat codes, exactly.

The same integer algorithm as the numpy path (``float_codec._encode_flat``, which documents it and
which the tests compare this kernel with element for element): the 53-bit significand of the
float64 bit pattern is shifted right by ``s`` (always >= 21 here) and rounded on its integer
remainder.  Every shift is below 64, every intermediate fits int64 (binade index below 2^12 times
2^31), so there is no undefined behaviour.  Validation lives in Python.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t, uint8_t, uint16_t, uint32_t
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

cdef int64_t F_OVERFLOW = <int64_t>1 << 40
cdef int64_t F_UNDERFLOW = <int64_t>1 << 41
cdef int64_t F_TIE = <int64_t>1 << 42
cdef int64_t F_NAN = <int64_t>1 << 43
cdef int64_t CODE_MASK = (<int64_t>1 << 40) - 1


cdef inline int64_t encode_one(double xd, int64_t scale_exp, int m, int64_t emin, bint fnu, bint flush,
                               int64_t maxc, int64_t inf_code, int64_t nan_code, int64_t sign_bit,
                               bint is_signed, bint has_neg_zero, bint signed_nan, bint has_nan,
                               bint has_zero, int rnd, int ovf, bint daz, double tiny_in,
                               uint64_t u, int R) noexcept nogil:
    """One element: the code, with the events in bits 40.. (F_OVERFLOW, F_UNDERFLOW, F_TIE, F_NAN)."""
    cdef int64_t fl = 0
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
            fl |= F_NAN
            if not has_nan:
                return fl | (0)
            return fl | ((sign_bit if (neg and signed_nan) else 0) | nan_code)
        if not is_signed and neg:                                    # -inf, unsigned
            fl |= F_OVERFLOW
            if has_nan and (ovf != O_SATURATE or not has_zero):
                return fl | (nan_code)
            return fl | (0)
        if ovf == O_INF:
            return fl | ((sign_bit if neg else 0) | inf_code)
        fl |= F_OVERFLOW
        if ovf == O_NAN:
            return fl | ((sign_bit if (neg and signed_nan) else 0) | nan_code)
        return fl | ((sign_bit if neg else 0) | maxc)
    if (E == 0 and F == 0) or (daz and (xd < tiny_in and -xd < tiny_in)):   # zero (or flushed input)
        if fnu:
            fl |= F_OVERFLOW
            return fl | (nan_code)
        if neg and not is_signed:
            return fl | (0)
        return fl | (sign_bit if (neg and has_neg_zero) else 0)
    if not is_signed and neg and fnu:
        fl |= F_OVERFLOW
        return fl | (nan_code)
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
            fl |= F_UNDERFLOW
            code = 0
    elif code == 0:
        fl |= F_UNDERFLOW
    elif flush and code < (<int64_t>1 << m):
        fl |= F_UNDERFLOW
        code = 0
    if not is_signed and neg:                                        # negative, unsigned
        if code == 0:
            fl |= F_TIE if tie else 0
            return fl | (0)
        fl |= F_OVERFLOW
        if has_nan and (ovf != O_SATURATE or not has_zero):
            return fl | (nan_code)
        return fl | (0)
    if tie:
        fl |= F_TIE
    if over:
        fl |= F_OVERFLOW
        down = rnd == R_TOWARD_ZERO or rnd == R_ODD or (rnd == R_FLOOR and not neg) or \
            (rnd == R_CEIL and neg)
        if down or ovf == O_SATURATE:
            code = maxc
        elif ovf == O_INF:
            code = inf_code
        else:
            return fl | ((sign_bit if (neg and signed_nan) else 0) | nan_code)
    if neg and (code != 0 or has_neg_zero):
        code |= sign_bit
    return fl | (code)


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
    cdef int64_t r, n_ovf = 0, n_unf = 0, n_tie = 0, n_nan = 0
    cdef bint has_scale = scale_exp.shape[0] == n and n > 0
    cdef bint has_rand = rand.shape[0] == n and n > 0
    # Fast path (no scale, deterministic rounding): a finite input whose result is a normal number
    # of the target.  Its code is ((|bits| - off + add) >> sh) with sh = 52 - m and
    # off = (1023 - bias) << 52: the float64 exponent field re-biased lands in the code's exponent
    # field, a carry out of the mantissa moves to the next binade by itself.
    cdef int sh = 52 - m
    cdef uint64_t mask = ((<uint64_t>1) << sh) - 1, half = (<uint64_t>1) << (sh - 1)
    cdef uint64_t lo_fast = (<uint64_t>(1023 + emin)) << 52 if 1023 + emin >= 1 else (<uint64_t>1) << 52
    cdef uint64_t hi_fast = (<uint64_t>0x7FF) << 52
    cdef uint64_t off = (<uint64_t>(1023 + emin - (0 if fnu else 1))) << 52
    cdef uint64_t b, bm, rem, add, c, bt
    cdef bint fast = not has_scale and rnd != R_STOCHASTIC and sh >= 1
    cdef bint sgn
    cdef double tiny_abs = tiny_in
    if daz:
        memcpy(&bt, &tiny_abs, 8)
        if bt > lo_fast:
            lo_fast = bt
    with nogil:
        for i in range(n):
            if fast:
                memcpy(&b, &x[i], 8)
                bm = b & ~((<uint64_t>1) << 63)
                sgn = (b >> 63) != 0
                if lo_fast <= bm < hi_fast and (is_signed or not sgn):
                    rem = bm & mask
                    if rnd == R_HALF_EVEN:
                        add = half - 1 + (((bm - off) >> sh) & 1)
                    elif rnd == R_HALF_AWAY:
                        add = half
                    elif rnd == R_HALF_TOWARD_ZERO:
                        add = half - 1
                    elif rnd == R_HALF_UP:
                        add = half - 1 if sgn else half
                    elif rnd == R_HALF_DOWN:
                        add = half if sgn else half - 1
                    elif rnd == R_FLOOR:
                        add = mask if sgn else 0
                    elif rnd == R_CEIL:
                        add = 0 if sgn else mask
                    else:                                            # toward_zero, odd
                        add = 0
                    c = (bm - off + add) >> sh
                    if rnd == R_ODD and rem != 0:
                        c |= 1
                    n_tie += rem == half
                    if c > <uint64_t>maxc:                           # overflow of a finite value
                        n_ovf += 1
                        if ovf == O_SATURATE or rnd == R_TOWARD_ZERO or rnd == R_ODD or \
                                (rnd == R_FLOOR and not sgn) or (rnd == R_CEIL and sgn):
                            c = <uint64_t>maxc
                        elif ovf == O_INF:
                            c = <uint64_t>inf_code
                        else:
                            out[i] = <code_t>(<uint64_t>nan_code | (<uint64_t>sign_bit if (sgn and signed_nan) else 0))
                            continue
                    out[i] = <code_t>(c | (<uint64_t>sign_bit if sgn else 0))
                    continue
            r = encode_one(x[i], scale_exp[i] if has_scale else 0, m, emin, fnu, flush,
                           maxc, inf_code, nan_code, sign_bit, is_signed, has_neg_zero,
                           signed_nan, has_nan, has_zero, rnd, ovf, daz, tiny_in,
                           rand[i] if has_rand else 0, R)
            out[i] = <code_t>(r & CODE_MASK)
            n_ovf += (r >> 40) & 1
            n_unf += (r >> 41) & 1
            n_tie += (r >> 42) & 1
            n_nan += (r >> 43) & 1
    return n_ovf, n_unf, n_tie, n_nan


# --------------------------------------------------------------------------- MX blocks of float32
def block_abs_max_f32(const uint32_t[:, ::1] bits, uint32_t[::1] out):
    """``out[b] := max_i (bits[b, i] & 0x7FFFFFFF)``: the float32 pattern of ``max_i |x[b, i]|``.

    For float32 patterns without the sign bit, integer order is magnitude order, and every NaN
    pattern lies above +Inf (0x7F800000): a block holds a NaN or an Inf iff its result is >= 0x7F800000."""
    cdef Py_ssize_t b, i, nb = bits.shape[0], k = bits.shape[1]
    cdef uint32_t acc, v
    with nogil:
        for b in range(nb):
            acc = 0
            for i in range(k):
                v = bits[b, i] & 0x7FFFFFFF
                acc = v if v > acc else acc
            out[b] = acc
    return None


def encode_blocks_f32(const uint32_t[:, ::1] x, const int64_t[::1] scale_exp, const uint8_t[::1] skip,
                      uint8_t[:, ::1] out, int m, int64_t emin, bint flush, int64_t maxc, int64_t inf_code,
                      int64_t nan_code, int64_t sign_bit, bint has_neg_zero, bint signed_nan, bint has_nan,
                      bint has_zero, int rnd):
    """``out[b, i] := code(x[b, i] * 2^-scale_exp[b])`` (``x``: float32 bit patterns) for a signed,
    saturating element format of at most 8 bits; ``out[b, :] := 0`` where ``skip[b]``.  Returns the
    count of elements beyond the largest finite value (after rounding), which became it.

    The rounding of ``encode_kernel`` with one scale exponent per row, on the float32 pattern: a
    normal float32 whose scaled value is normal in the target is rounded on its pattern with the
    exponent field lowered by ``scale_exp`` (``bm = |bits| - (scale_exp << 23)``, exact), branch-free
    in 32-bit integers: ``code = (bm - off + add) >> sh`` with ``add = half - 1 + lsb`` (half_even),
    ``half`` (half_away), ``half - 1`` / ``half`` by sign (half_toward_zero, half_up, half_down), ``mask``
    or 0 by sign (floor, ceil), 0 (toward_zero, odd: then ``code |= inexact``).  The other elements
    (zeros, float32 subnormals, results below the target's normal range, a scaled exponent field out of
    31 bits) are marked in that pass and redone by ``encode_one`` on the float64 value.  Validation
    lives in Python: every value of a row not skipped is finite, ``rnd`` is deterministic,
    ``|scale_exp| <= 127``, ``-126 <= emin`` and ``m <= 22``."""
    cdef Py_ssize_t b, i, nb = x.shape[0], k = x.shape[1]
    cdef int64_t n_ovf = 0, r, E
    cdef int sh = 23 - m
    cdef uint32_t mask = ((<uint32_t>1) << sh) - 1, half = (<uint32_t>1) << (sh - 1)
    cdef int32_t lo_fast = <int32_t>((127 + emin) << 23)
    cdef uint32_t off = <uint32_t>((127 + emin - 1) << 23)
    # add = add_pos or add_neg by the sign, + the code's lowest bit where `parity`; `odd`: code |= inexact
    cdef uint32_t add_pos = 0, add_neg = 0, parity = rnd == R_HALF_EVEN, odd = rnd == R_ODD
    cdef uint32_t bits, a, bm, c, shift, neg, over, slow, any_slow, n_blk, sbit = <uint32_t>sign_bit
    cdef uint32_t top = <uint32_t>maxc
    cdef const uint32_t* row
    cdef uint8_t* dst
    cdef float f
    if rnd == R_HALF_EVEN or rnd == R_HALF_TOWARD_ZERO:
        add_pos = add_neg = half - 1
    elif rnd == R_HALF_AWAY:
        add_pos = add_neg = half
    elif rnd == R_HALF_UP:
        add_pos, add_neg = half, half - 1
    elif rnd == R_HALF_DOWN:
        add_pos, add_neg = half - 1, half
    elif rnd == R_FLOOR:
        add_neg = mask
    elif rnd == R_CEIL:
        add_pos = mask
    with nogil:
        for b in range(nb):
            dst = &out[b, 0]
            if skip[b]:
                for i in range(k):
                    dst[i] = 0
                continue
            row = &x[b, 0]
            E = scale_exp[b]
            shift = (<uint32_t>E) << 23                     # unsigned: bm wraps to |bits| - E 2^23
            any_slow = 0
            n_blk = 0
            for i in range(k):
                bits = row[i]
                neg = bits >> 31
                a = bits & 0x7FFFFFFF
                bm = a - shift
                slow = (<int32_t>bm < lo_fast) | (a < 0x00800000)
                c = (bm - off + (add_pos ^ ((add_pos ^ add_neg) & (0 - neg))) +
                     (parity & ((bm - off) >> sh))) >> sh
                c |= odd & ((bm & mask) != 0)
                over = c > top
                n_blk += over & (slow ^ 1)
                c = top if over else c
                dst[i] = <uint8_t>(c | (sbit & (0 - neg)))
                any_slow |= slow
            n_ovf += n_blk
            if any_slow:
                for i in range(k):
                    bits = row[i]
                    a = bits & 0x7FFFFFFF
                    if (<int32_t>(a - shift) < lo_fast) | (a < 0x00800000):
                        memcpy(&f, &bits, 4)
                        r = encode_one(<double>f, E, m, emin, 0, flush, maxc, inf_code, nan_code, sign_bit,
                                       1, has_neg_zero, signed_nan, has_nan, has_zero, rnd, O_SATURATE, 0,
                                       0.0, 0, 0)
                        dst[i] = <uint8_t>(r & CODE_MASK)
                        n_ovf += (r >> 40) & 1
    return n_ovf

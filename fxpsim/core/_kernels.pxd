# cython: language_level=3
"""Inline integer kernels shared by every Cython module of fxpsim.

Mode numbers below are the contract between Python (``fixed.Rounding.code``,
``fixed.Overflow.code``) and C.  All helpers are ``noexcept nogil`` and free of
undefined behaviour: signed overflow is avoided by construction or done in
unsigned arithmetic, shifts are always by 0..63 (int64) or 0..127 (int128).
"""
from libc.stdint cimport int64_t, uint64_t, int32_t, uint32_t

cdef extern from *:
    """
    typedef __int128 fx_i128;
    typedef unsigned __int128 fx_u128;
    """
    ctypedef long long fx_i128      # Cython only needs a name; C sees __int128
    ctypedef unsigned long long fx_u128

# ---- rounding modes (value of fixed.Rounding.code) -------------------------
cdef enum:
    RND_HALF_UP = 0           # ties -> +inf            SC_RND
    RND_HALF_TOWARD_ZERO = 1  # ties -> 0               SC_RND_ZERO
    RND_HALF_DOWN = 2         # ties -> -inf            SC_RND_MIN_INF
    RND_HALF_AWAY = 3         # ties away from 0        SC_RND_INF
    RND_HALF_EVEN = 4         # ties to even            SC_RND_CONV
    RND_FLOOR = 5             # toward -inf             SC_TRN
    RND_TOWARD_ZERO = 6       # toward 0                SC_TRN_ZERO
    RND_CEIL = 7              # toward +inf
    RND_STOCHASTIC = 8        # up with probability = discarded fraction

# ---- overflow modes (value of fixed.Overflow.code) -------------------------
cdef enum:
    OVF_SATURATE = 0          # clamp to [min, max]                 SC_SAT
    OVF_SATURATE_ZERO = 1     # out of range -> 0                   SC_SAT_ZERO
    OVF_SATURATE_SYMMETRIC = 2  # clamp to [-max, max]              SC_SAT_SYM
    OVF_WRAP = 3              # two's complement wrap               SC_WRAP
    OVF_WRAP_SIGN_MAGNITUDE = 4  # sign-magnitude wrap              SC_WRAP_SM
    OVF_ERROR = 5             # like saturate; Python raises if any overflow


cdef inline uint64_t splitmix64(uint64_t x) noexcept nogil:
    """Counter-based hash: one 64-bit random word per (seed + index)."""
    x = x + <uint64_t>0x9E3779B97F4A7C15ULL
    x = (x ^ (x >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    x = (x ^ (x >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline int round_up_decision(int mode, bint negative, uint64_t rem, int s,
                                  bint floor_is_odd, uint64_t rnd) noexcept nogil:
    """1 when floor(v / 2^s) must be incremented, for v = floor*2^s + rem.

    ``rem`` holds the ``s`` discarded bits (0 <= rem < 2^s, 1 <= s <= 64);
    ``rnd`` is a random word (stochastic rounding only).
    """
    cdef uint64_t half
    if rem == 0:
        return 0
    if mode == RND_FLOOR:
        return 0
    if mode == RND_CEIL:
        return 1
    if mode == RND_TOWARD_ZERO:
        return negative
    if mode == RND_STOCHASTIC:
        if s < 64:
            rnd = rnd >> (64 - s)
        return rnd < rem
    half = (<uint64_t>1) << (s - 1)
    if rem != half:
        return rem > half
    if mode == RND_HALF_UP:
        return 1
    if mode == RND_HALF_DOWN:
        return 0
    if mode == RND_HALF_EVEN:
        return floor_is_odd
    if mode == RND_HALF_AWAY:
        return not negative
    return negative            # RND_HALF_TOWARD_ZERO


cdef inline int64_t shift_round(int64_t v, int s, int mode, uint64_t rnd) noexcept nogil:
    """round(v / 2^s) for 0 <= s <= 63 with rounding ``mode``; never overflows.

    Branch-free in the data: q = floor(v / 2^s) (arithmetic shift), rem = the s dropped bits,
    half = 2^(s-1); the increment is a comparison of rem with half per mode.
    """
    cdef int64_t q
    cdef uint64_t rem, half
    cdef int up
    if s <= 0:
        return v
    q = v >> s
    rem = (<uint64_t>v) & (((<uint64_t>1) << s) - 1)
    half = (<uint64_t>1) << (s - 1)
    if mode == RND_HALF_UP:
        up = rem >= half
    elif mode == RND_FLOOR:
        up = 0
    elif mode == RND_HALF_EVEN:
        up = (rem > half) | ((rem == half) & <int>(q & 1))
    elif mode == RND_HALF_AWAY:
        up = (rem > half) | ((rem == half) & (v >= 0))
    elif mode == RND_HALF_DOWN:
        up = rem > half
    elif mode == RND_HALF_TOWARD_ZERO:
        up = (rem > half) | ((rem == half) & (v < 0))
    elif mode == RND_CEIL:
        up = rem != 0
    elif mode == RND_TOWARD_ZERO:
        up = (rem != 0) & (v < 0)
    else:
        up = (rnd >> (64 - s)) < rem
    return q + up


cdef inline fx_i128 shift_round_far(fx_i128 v, int s, int mode, uint64_t rnd) noexcept nogil:
    """round(v / 2^s) for s >= 128 and |v| < 2^127: |v / 2^s| < 1/2, so the result is -1, 0 or 1.

    Deterministic modes see a non-tie below half: only the sign of ``v`` matters.  Stochastic
    rounding goes up when rnd / 2^64 < frac(v / 2^s), i.e. with k = s - 64 >= 64:
    v > 0: rnd * 2^k < v, i.e. rnd <= (v - 1) >> k;  v < 0 (floor -1): rnd * 2^k < 2^s + v,
    i.e. rnd + (|v| >> k) <= 2^64 - 1.
    """
    cdef int k
    cdef fx_u128 t
    if v == 0:
        return 0
    if mode == RND_FLOOR:
        return -1 if v < 0 else 0
    if mode == RND_CEIL:
        return 0 if v < 0 else 1
    if mode != RND_STOCHASTIC:
        return 0                           # toward zero and the half modes (no tie possible)
    k = s - 64
    if v > 0:
        t = (<fx_u128>(v - 1)) >> k if k < 128 else 0
        return 1 if (<fx_u128>rnd) <= t else 0
    t = (<fx_u128>(-v)) >> k if k < 128 else 0
    return -1 + ((<fx_u128>rnd) + t <= <fx_u128>0xFFFFFFFFFFFFFFFFULL)


cdef inline fx_i128 shift_round128(fx_i128 v, int s, int mode, uint64_t rnd) noexcept nogil:
    """round(v / 2^s) for any s >= 0 on 128-bit integers, |v| < 2^127 (s >= 128: ``shift_round_far``)."""
    cdef fx_i128 q
    cdef fx_u128 rem, half, mask
    cdef int up
    if s <= 0:
        return v
    if s >= 128:
        return shift_round_far(v, s, mode, rnd)
    q = v >> s
    mask = ((<fx_u128>1) << s) - 1
    rem = (<fx_u128>v) & mask
    if rem == 0 or mode == RND_FLOOR:
        return q
    if s <= 64:
        return q + round_up_decision(mode, v < 0, <uint64_t>rem, s, <int>(q & 1), rnd)
    # s > 64: compare the discarded part against half on 128 bits
    half = (<fx_u128>1) << (s - 1)
    if mode == RND_CEIL:
        up = 1
    elif mode == RND_TOWARD_ZERO:
        up = v < 0
    elif mode == RND_STOCHASTIC:
        up = ((<fx_u128>rnd) << (s - 64)) < rem
    elif rem != half:
        up = rem > half
    elif mode == RND_HALF_UP:
        up = 1
    elif mode == RND_HALF_DOWN:
        up = 0
    elif mode == RND_HALF_EVEN:
        up = <int>(q & 1)
    elif mode == RND_HALF_AWAY:
        up = v >= 0
    else:
        up = v < 0
    return q + up


cdef inline int64_t overflow128(fx_i128 v, int word, bint is_signed, int mode,
                                int n_bits, int* ovf) noexcept nogil:
    """Fit the exact integer ``v`` into a ``word``-bit code (1 <= word <= 64).

    Returns the code as int64 bit pattern (unsigned 64-bit codes are stored as
    their two's-complement reinterpretation).  Sets ``ovf[0] = 1`` when ``v``
    is out of range (and for ``saturate_symmetric``, when v == min).
    """
    cdef fx_i128 lo, hi
    cdef fx_u128 m, mask
    cdef int sign
    if is_signed:
        hi = ((<fx_i128>1) << (word - 1)) - 1
        lo = -hi - 1
    else:
        hi = ((<fx_i128>1) << word) - 1
        lo = 0
    if mode == OVF_SATURATE_SYMMETRIC and is_signed:
        lo = -hi
    if lo <= v <= hi:
        ovf[0] = 0
        return <int64_t>v
    ovf[0] = 1
    if mode == OVF_SATURATE or mode == OVF_ERROR or mode == OVF_SATURATE_SYMMETRIC:
        return <int64_t>(lo if v < lo else hi)
    if mode == OVF_SATURATE_ZERO:
        return 0
    return wrap_bits(v, word, is_signed, mode, n_bits, v < lo)


cdef inline int64_t sign_extend(fx_i128 v, int word, bint is_signed) noexcept nogil:
    """Two's-complement wrap of ``v`` to ``word`` bits (v mod 2^word, sign-extended if signed)."""
    cdef fx_u128 m = (<fx_u128>v) & (((<fx_u128>1) << word) - 1)
    if is_signed and (m >> (word - 1)) & 1:
        return <int64_t>(<fx_i128>m - ((<fx_i128>1) << word))
    return <int64_t>(<uint64_t>m)


cdef inline int64_t wrap_bits(fx_i128 v, int word, bint is_signed, int mode, int n_bits,
                              bint under) noexcept nogil:
    """SystemC ``SC_WRAP`` / ``SC_WRAP_SM`` with ``n_bits`` saturated MSBs, for an out-of-range ``v``.

    In code units (W = word, bit W-1 is the kept sign bit, bit W the lowest deleted bit):
    SC_WRAP, n=0: v mod 2^W.  0 < n < W: (v mod 2^(W-n)) + (low if under else top - 2^(W-n)).
    SC_WRAP_SM, n=0: invert (v -> -v-1) when bit_W(v) != bit_{W-1}(v), then wrap;
    n=1: invert when sign(v) != bit_{W-1}(v), then wrap; 1 < n < W: invert when
    sign(v) == bit_{W-n}(v), then as SC_WRAP with n.  n >= W saturates.
    """
    cdef fx_i128 lo, top, x
    cdef bint neg = v < 0
    if is_signed:
        lo = -((<fx_i128>1) << (word - 1))
        top = (<fx_i128>1) << (word - 1)
    else:
        lo = 0
        top = (<fx_i128>1) << word
    if n_bits >= word:
        return <int64_t>(lo if under else top - 1)
    if mode == OVF_WRAP_SIGN_MAGNITUDE:
        if n_bits == 0:
            if ((v >> word) & 1) != ((v >> (word - 1)) & 1):
                v = -v - 1
        elif n_bits == 1:
            if neg != <bint>((v >> (word - 1)) & 1):
                v = -v - 1
        elif neg == <bint>((v >> (word - n_bits)) & 1):
            v = -v - 1
    if n_bits == 0:
        return sign_extend(v, word, is_signed)
    x = <fx_i128>((<fx_u128>v) & (((<fx_u128>1) << (word - n_bits)) - 1))
    if under:
        return <int64_t>(x + lo)
    return <int64_t>(x + top - ((<fx_i128>1) << (word - n_bits)))

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
    """round(v / 2^s) for 0 <= s <= 63 with rounding ``mode`` (never overflows)."""
    cdef int64_t q
    cdef uint64_t rem
    if s <= 0:
        return v
    q = v >> s                                   # arithmetic shift == floor
    rem = (<uint64_t>v) & (((<uint64_t>1) << s) - 1)
    return q + round_up_decision(mode, v < 0, rem, s, q & 1, rnd)


cdef inline fx_i128 shift_round128(fx_i128 v, int s, int mode, uint64_t rnd) noexcept nogil:
    """round(v / 2^s) for 0 <= s <= 127 on 128-bit integers, |v| < 2^126."""
    cdef fx_i128 q
    cdef fx_u128 rem, half, mask
    cdef int up
    if s <= 0:
        return v
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
    mask = ((<fx_u128>1) << word) - 1
    m = (<fx_u128>v) & mask
    if mode == OVF_WRAP or not is_signed:
        if is_signed and (m >> (word - 1)) & 1:
            return <int64_t>(<fx_i128>m - ((<fx_i128>1) << word))
        return <int64_t>(<uint64_t>m)
    return wrap_sign_magnitude(v, word, n_bits)


cdef int64_t wrap_sign_magnitude(fx_i128 v, int word, int n_bits) noexcept nogil

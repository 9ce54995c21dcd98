# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Element-wise fixed-point kernels: float -> code, code -> code, exact binary ops.

Everything here is ``nogil`` C on int64 codes; validation and messages live in
``fxpsim.fixed``.  Codes of unsigned 64-bit formats travel as the int64 bit
pattern and are reinterpreted with ``src_u64``.  Exact intermediate values use
128-bit integers, so no step can overflow or lose a bit.
"""
from libc.math cimport floor, frexp, ldexp, fabs, isinf
from libc.stdint cimport int64_t, uint64_t, uint8_t, int8_t

from fxpsim._kernels cimport (
    fx_i128, fx_u128, RND_HALF_UP, RND_HALF_TOWARD_ZERO, RND_HALF_DOWN, RND_HALF_AWAY,
    RND_HALF_EVEN, RND_FLOOR, RND_TOWARD_ZERO, RND_CEIL, RND_STOCHASTIC,
    splitmix64, shift_round128, overflow128,
)

cdef enum:
    OP_ADD = 0
    OP_SUB = 1
    OP_MUL = 2
    OP_CMP = 3

cdef double TWO62 = 4611686018427387904.0
cdef double TINY = 2.2250738585072014e-308 * 4.0     # a little above the smallest normal


cdef inline int magnitude_round_up(int mode, bint neg, double r, double fa, uint64_t rnd) noexcept nogil:
    """1 when the magnitude floor(|y|) must grow by one; r = |y| - floor(|y|) in [0, 1), exact.

    Working on |y| keeps r exact for every |y| < 2^62 (y - floor(y) is not, for y in (-1, 0)).
    """
    if r == 0.0 or mode == RND_TOWARD_ZERO:
        return 0
    if mode == RND_FLOOR:
        return neg
    if mode == RND_CEIL:
        return not neg
    if mode == RND_STOCHASTIC:             # P(|y| grows) = r  <=>  P(round up) = frac(y)
        return (<double>(rnd >> 11)) * 1.1102230246251565e-16 < r
    if r != 0.5:
        return r > 0.5
    if mode == RND_HALF_EVEN:
        return fa != 2.0 * floor(0.5 * fa)
    if mode == RND_HALF_AWAY:
        return 1
    if mode == RND_HALF_TOWARD_ZERO:
        return 0
    if mode == RND_HALF_UP:
        return not neg
    return neg                              # RND_HALF_DOWN


cdef inline fx_i128 huge(bint negative) noexcept nogil:
    """A stand-in for |v| >= 2^70: out of every range, low 70 bits zero, sign kept."""
    return -((<fx_i128>1) << 100) if negative else ((<fx_i128>1) << 100)


cdef inline fx_i128 exact_scaled(double x, int frac, int mode, uint64_t rnd) noexcept nogil:
    """round(x * 2^frac) exactly, for finite x (slow path, any exponent)."""
    cdef int e, k
    cdef double m
    cdef int64_t mant
    if x == 0.0:
        return 0
    m = frexp(x, &e)                      # x = m * 2^e, 0.5 <= |m| < 1
    mant = <int64_t>ldexp(m, 53)          # exact integer, |mant| < 2^53
    k = e - 53 + frac
    if k >= 0:
        return scale_up(<fx_i128>mant, k)
    k = -k
    if k > 127:
        k = 127                           # |value| < 2^-74: only sign and rem != 0 matter
    return shift_round128(<fx_i128>mant, k, mode, rnd)


def from_float(const double[::1] x, int64_t[::1] out, uint8_t[::1] flags, int frac, int word,
               bint is_signed, int rounding, int overflow, int n_bits, uint64_t seed):
    """out[i] := fit(round(x[i] * 2^frac)); returns (n_overflow, n_nan, first_nan).

    ``flags`` is empty or has one overflow flag per element.  NaN gives code 0.
    """
    cdef Py_ssize_t i, n = x.shape[0], first_nan = -1, n_nan = 0, n_ovf = 0
    cdef bint want_flags = flags.shape[0] == n and n > 0
    cdef bint fast = -1000 <= frac <= 1000
    cdef double scale = ldexp(1.0, frac) if fast else 1.0
    cdef double xi, y, a, fa
    cdef fx_i128 v
    cdef int o
    cdef uint64_t rnd = 0
    with nogil:
        for i in range(n):
            xi = x[i]
            if xi != xi:
                n_nan += 1
                if first_nan < 0:
                    first_nan = i
                out[i] = 0
                if want_flags:
                    flags[i] = 0
                continue
            if rounding == RND_STOCHASTIC:
                rnd = splitmix64(seed + <uint64_t>i)
            y = xi * scale
            a = fabs(y)
            if fast and a < TWO62 and (a >= TINY or xi == 0.0):
                fa = floor(a)
                v = <fx_i128>(<int64_t>fa) + magnitude_round_up(rounding, y < 0.0, a - fa, fa, rnd)
                if y < 0.0:
                    v = -v
            elif isinf(xi):
                v = huge(xi < 0.0)
            else:
                v = exact_scaled(xi, frac, rounding, rnd)
            out[i] = overflow128(v, word, is_signed, overflow, n_bits, &o)
            n_ovf += o
            if want_flags:
                flags[i] = o
    return n_ovf, n_nan, first_nan


cdef inline fx_i128 load(int64_t c, bint u64) noexcept nogil:
    return <fx_i128>(<uint64_t>c) if u64 else <fx_i128>c


cdef inline fx_i128 scale_up(fx_i128 v, int k) noexcept nogil:
    """v * 2^k (k >= 0) when it stays below 2^125 in magnitude; otherwise a stand-in that is
    out of every range, keeps the sign and agrees with v * 2^k modulo 2^70 (all that wrap needs)."""
    cdef fx_i128 mag
    cdef fx_u128 low
    if k <= 0 or v == 0:
        return v
    mag = v if v >= 0 else -v
    if k < 125 and mag < ((<fx_i128>1) << (125 - k)):
        return v * ((<fx_i128>1) << k)
    if k >= 70:
        return huge(v < 0)
    low = ((<fx_u128>v) & (((<fx_u128>1) << (70 - k)) - 1)) << k
    return huge(v < 0) + <fx_i128>low


def cast(const int64_t[::1] src, int64_t[::1] out, uint8_t[::1] flags, bint src_u64, int shift,
         int word, bint is_signed, int rounding, int overflow, int n_bits, uint64_t seed):
    """out[i] := fit(round(src[i] * 2^-shift)); shift = src_frac - dst_frac.  Returns n_overflow."""
    cdef Py_ssize_t i, n = src.shape[0], n_ovf = 0
    cdef bint want_flags = flags.shape[0] == n and n > 0
    cdef fx_i128 v
    cdef int o, s = shift if shift < 127 else 127
    cdef uint64_t rnd = 0
    with nogil:
        for i in range(n):
            v = load(src[i], src_u64)
            if s > 0:
                if rounding == RND_STOCHASTIC:
                    rnd = splitmix64(seed + <uint64_t>i)
                v = shift_round128(v, s, rounding, rnd)
            elif s < 0:
                v = scale_up(v, -s)
            out[i] = overflow128(v, word, is_signed, overflow, n_bits, &o)
            n_ovf += o
            if want_flags:
                flags[i] = o
    return n_ovf


def binary(int op, const int64_t[::1] a, const int64_t[::1] b, int64_t[::1] out,
           bint a_u64, bint b_u64, int shift_a, int shift_b, int shift_out, int word,
           bint is_signed, int rounding, int overflow, int n_bits, uint64_t seed):
    """out[i] := fit(round((a[i]*2^shift_a OP b[i]*2^shift_b) * 2^-shift_out)).

    OP is +, -, * (shifts 0 for *) or a three-way compare (out in {-1, 0, 1}).
    The exact value is formed on 128 bits; callers guarantee it stays below 2^126.
    Returns n_overflow.
    """
    cdef Py_ssize_t i, n = out.shape[0], n_ovf = 0
    cdef fx_i128 va, vb, v
    cdef int o
    cdef uint64_t rnd = 0
    if shift_out > 127:
        shift_out = 127
    with nogil:
        for i in range(n):
            va = load(a[i], a_u64) * ((<fx_i128>1) << shift_a)
            vb = load(b[i], b_u64) * ((<fx_i128>1) << shift_b)
            if op == OP_ADD:
                v = va + vb
            elif op == OP_SUB:
                v = va - vb
            elif op == OP_MUL:
                v = va * vb
            else:
                out[i] = (va > vb) - (va < vb)
                continue
            if shift_out > 0:
                if rounding == RND_STOCHASTIC:
                    rnd = splitmix64(seed + <uint64_t>i)
                v = shift_round128(v, shift_out, rounding, rnd)
            elif shift_out < 0:
                v = scale_up(v, -shift_out)
            out[i] = overflow128(v, word, is_signed, overflow, n_bits, &o)
            n_ovf += o
    return n_ovf


def to_float(const int64_t[::1] src, double[::1] out, bint src_u64, int frac):
    """out[i] := src[i] * 2^-frac (rounded to nearest double when not exact)."""
    cdef Py_ssize_t i, n = src.shape[0]
    cdef double scale
    if -1000 <= frac <= 1000:
        scale = ldexp(1.0, -frac)
        with nogil:
            if src_u64:
                for i in range(n):
                    out[i] = (<double>(<uint64_t>src[i])) * scale
            else:
                for i in range(n):
                    out[i] = (<double>src[i]) * scale
    else:
        with nogil:
            for i in range(n):
                out[i] = ldexp(<double>(<uint64_t>src[i]) if src_u64 else <double>src[i], -frac)

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Element-wise fixed-point kernels: float -> code, code -> code, exact binary ops.

Everything here is ``nogil`` C on int64 codes; validation and messages live in
``fxpsim.fixed``.  Codes of unsigned 64-bit formats travel as the int64 bit
pattern and are reinterpreted with ``src_u64``.  Exact intermediate values use
128-bit integers, so no step can overflow or lose a bit.

Code arrays (operands and results) may be stored in any 1-, 2-, 4- or 8-byte integer dtype
(``Format.storage_dtype``): the vector kernels widen blocks of 1024 codes to int64 on the stack and
narrow the results on store (``_core_narrow.h``); the rare paths (128-bit values, stochastic
rounding, per-element flags, sign-magnitude wrap) widen the whole array to int64 and narrow the
result once.  A result dtype must hold every code of the result format (the caller's contract);
all-int64 arrays take the int64 kernels directly, as before.
"""
import numpy as np

from libc.math cimport frexp, ldexp, fabs, isinf
from libc.stdint cimport int64_t, uint64_t, uint8_t, int8_t

from fxpsim.core._kernels cimport (
    fx_i128, fx_u128, RND_HALF_UP, RND_HALF_TOWARD_ZERO, RND_HALF_DOWN, RND_HALF_AWAY,
    RND_HALF_EVEN, RND_FLOOR, RND_TOWARD_ZERO, RND_CEIL, RND_STOCHASTIC,
    OVF_SATURATE, OVF_SATURATE_ZERO, OVF_SATURATE_SYMMETRIC, OVF_WRAP, OVF_WRAP_SIGN_MAGNITUDE, OVF_ERROR, splitmix64, shift_round, shift_round128, overflow128,
)

cdef extern from "_core_round.h":
    int64_t fxc_round(double y, int mode, uint64_t rnd) noexcept nogil

cdef extern from "_core_binary.h":
    enum:
        FXB_CAST
        FXB_FIT_SAT
        FXB_FIT_ZERO
        FXB_FIT_WRAP_S
        FXB_FIT_WRAP_U
        FXB_FIT_NONE

cdef extern from "_core_narrow.h":
    int64_t fxn_binary(int op, const void* a, int ka, const void* b, int kb, void* out, int ko, int64_t n,
                       int sa, int sb, int s, int mode, int fit, int64_t lo, int64_t hi, int sh,
                       int calc32) noexcept nogil
    int64_t fxn_quantize_vector(const double* x, void* out, int ko, int64_t n, double scale, int mode,
                                int fit, int64_t lo, int64_t hi, int sh, int64_t* n_special) noexcept nogil
    void fxn_to_float(const void* src, int ks, double* out, int64_t n, double scale) noexcept nogil
    enum:
        FXN_UNSIGNED

cdef enum:
    OP_ADD = 0
    OP_SUB = 1
    OP_MUL = 2
    OP_CMP = 3

cdef double TWO51 = 2251799813685248.0
cdef double TINY = 2.2250738585072014e-308 * 4.0     # a little above the smallest normal


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
    return shift_round128(<fx_i128>mant, -k, mode, rnd)      # any shift: see _kernels.pxd




cdef inline int vector_fit(int overflow, int n_bits, bint is_signed) noexcept nogil:
    """The FXB_FIT_* of an overflow mode for the vector kernels, or -1 (sign-magnitude wrap, n_bits)."""
    if n_bits != 0 or overflow == OVF_WRAP_SIGN_MAGNITUDE:
        return -1
    if overflow == OVF_WRAP:
        return FXB_FIT_WRAP_S if is_signed else FXB_FIT_WRAP_U
    if overflow == OVF_SATURATE_ZERO:
        return FXB_FIT_ZERO
    return FXB_FIT_SAT                  # saturate, saturate_symmetric (lo = -hi), error


cdef inline int64_t fit_int64(int64_t c, int64_t lo, int64_t hi, int word, bint is_signed,
                              int overflow, int n_bits, int* ov) noexcept nogil:
    """fit() for a code already in int64: branch-free for saturate*, error and plain wrap;
    sign-magnitude wrap and n_bits go through overflow128 (only when out of range)."""
    cdef int sh = 64 - word
    ov[0] = (c < lo) | (c > hi)
    if overflow == OVF_WRAP and n_bits == 0:
        if is_signed:
            return (<int64_t>((<uint64_t>c) << sh)) >> sh
        return <int64_t>(((<uint64_t>c) << sh) >> sh)
    if overflow == OVF_WRAP or overflow == OVF_WRAP_SIGN_MAGNITUDE:
        return overflow128(<fx_i128>c, word, is_signed, overflow, n_bits, ov) if ov[0] else c
    c = lo if c < lo else c
    c = hi if c > hi else c
    if overflow == OVF_SATURATE_ZERO:
        c = 0 if ov[0] else c
    return c


cdef inline void code_limits(int word, bint is_signed, int overflow, int64_t* lo, int64_t* hi) noexcept nogil:
    """[lo, hi] of a format whose codes fit int64 (saturate_symmetric drops the min code)."""
    hi[0] = <int64_t>(((<uint64_t>1) << (word - 1)) - 1) if is_signed else <int64_t>(((<uint64_t>1) << word) - 1)
    lo[0] = (-hi[0] - 1) if is_signed else 0
    if overflow == OVF_SATURATE_SYMMETRIC and is_signed:
        lo[0] = -hi[0]


cdef inline bint quantize_loop(const double* x, int64_t* out, uint8_t* flags, Py_ssize_t n,
                               int frac, int word, bint is_signed, int rounding, int overflow,
                               int n_bits, uint64_t seed, Py_ssize_t* counts) noexcept nogil:
    # The fast path needs 2^frac as an exact double and int64 code limits (not ufix64).
    cdef bint fast = -1000 <= frac <= 1000 and (is_signed or word < 64)
    """The exact scalar from_float loop (128-bit integers where double arithmetic cannot be exact)."""
    cdef Py_ssize_t i
    cdef double scale = ldexp(1.0, frac) if fast else 1.0, xi, y, a
    cdef int64_t lo, hi, c
    cdef fx_i128 v
    cdef int o
    cdef uint64_t rnd = 0
    lo = hi = 0
    if fast:
        code_limits(word, is_signed, overflow, &lo, &hi)
    for i in range(n):
        xi = x[i]
        y = xi * scale
        a = fabs(y)
        if rounding == RND_STOCHASTIC:
            rnd = splitmix64(seed + <uint64_t>i)
        if fast and a < TWO51 and (a >= TINY or xi == 0.0):
            c = fxc_round(y, rounding, rnd)
            if lo <= c <= hi:
                out[i] = c
                if flags != NULL:
                    flags[i] = 0
                continue
            v = c
        elif xi != xi:
            counts[1] += 1
            if counts[2] < 0:
                counts[2] = i
            out[i] = 0
            if flags != NULL:
                flags[i] = 0
            continue
        elif isinf(xi):
            v = huge(xi < 0.0)
        else:
            v = exact_scaled(xi, frac, rounding, rnd)
        out[i] = overflow128(v, word, is_signed, overflow, n_bits, &o)
        counts[0] += o
        if flags != NULL:
            flags[i] = o
    return 0


cdef int kind(arr) except -1:
    """The dtype of a contiguous 1-D code array as _core_narrow.h names it (size + FXN_UNSIGNED)."""
    dt = arr.dtype
    if dt.kind not in "iu" or dt.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"fxpsim._core: code arrays must have an integer dtype of 1, 2, 4 or 8 bytes, "
                        f"got {dt}")
    return dt.itemsize + (FXN_UNSIGNED if dt.kind == "u" else 0)


cdef inline bint fits32(int ka, int kb, int ko, int sa, int sb, int s, int word, bint is_signed,
                        int exact_word) noexcept:
    """The vector kernels may compute on int32: exact values of at most 32 two's-complement bits,
    operands stored in at most 4 bytes but not uint32, results' [lo, hi] and 2^s within int32."""
    return (exact_word <= 32 and (ka & 15) <= 4 and (kb & 15) <= 4 and (ko & 15) <= 4
            and ka != 4 + FXN_UNSIGNED and kb != 4 + FXN_UNSIGNED and 0 <= sa <= 31 and 0 <= sb <= 31
            and 0 <= s <= 31 and (word <= 32 if is_signed else word <= 31))


cdef inline const void* addr(const uint8_t[::1] bytes_) noexcept:
    return <const void*>&bytes_[0]


cdef inline void* out_addr(uint8_t[::1] bytes_) noexcept:
    return <void*>&bytes_[0]


def as_int64(arr):
    """``arr`` as int64 codes: a view of 8-byte codes (uint64: the bit pattern), else an exact widening."""
    return arr.view(np.int64) if arr.dtype.itemsize == 8 else arr.astype(np.int64)


cdef object wide_out(out):
    """An int64 buffer for results destined to ``out``: ``out`` itself (viewed) when 8-byte, else new."""
    return out.view(np.int64) if out.dtype.itemsize == 8 else np.empty(out.shape[0], dtype=np.int64)


cdef inline void store(out, wide):
    if out.dtype.itemsize != 8:
        out[...] = wide            # the result format's codes fit out's dtype: exact


def from_float(const double[::1] x, out, uint8_t[::1] flags, int frac, int word,
               bint is_signed, int rounding, int overflow, int n_bits, uint64_t seed):
    """out[i] := fit(round(x[i] * 2^frac)); returns (n_overflow, n_nan, first_nan).

    ``out``: any integer dtype that holds the format's codes.  ``flags`` is empty or has one
    overflow flag per element.  NaN gives code 0.
    The fast path (|x * 2^frac| < 2^51, -1000 <= frac <= 1000, codes fitting int64) rounds
    with double arithmetic proven exact; everything else goes through 128-bit integers.
    """
    cdef Py_ssize_t n = x.shape[0]
    cdef int ko = kind(out)
    cdef Py_ssize_t counts[3]
    cdef uint8_t* f = &flags[0] if (flags.shape[0] == n and n > 0) else NULL
    counts[0] = 0
    counts[1] = 0
    counts[2] = -1
    cdef Py_ssize_t ovf = 0
    cdef bint vector_final = (overflow == OVF_SATURATE or overflow == OVF_SATURATE_SYMMETRIC
                              or overflow == OVF_SATURATE_ZERO or overflow == OVF_ERROR
                              or (overflow == OVF_WRAP and n_bits == 0))
    if n == 0:
        return 0, 0, -1
    cdef int64_t lo, hi, n_special = 0
    cdef void* po
    cdef int fit = 1 if overflow == OVF_SATURATE_ZERO else (0 if overflow != OVF_WRAP else (2 if is_signed else 3))
    if (f == NULL and rounding != RND_STOCHASTIC and -1000 <= frac <= 1000
            and (is_signed or word < 64)):
        code_limits(word, is_signed, overflow, &lo, &hi)
        po = out_addr(out.view(np.uint8))
        with nogil:
            ovf = fxn_quantize_vector(&x[0], po, ko, n, ldexp(1.0, frac), rounding, fit, lo, hi,
                                      64 - word, &n_special)
        if n_special == 0 and (ovf == 0 or vector_final):
            return ovf, 0, -1
    wide = wide_out(out)
    cdef int64_t[::1] w = wide
    with nogil:      # the exact scalar path: rare values, stochastic rounding, per-element flags
        quantize_loop(&x[0], &w[0], f, n, frac, word, is_signed, rounding, overflow, n_bits,
                      seed, counts)
    store(out, wide)
    return counts[0], counts[1], counts[2]


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


cdef inline int64_t requantize128(fx_i128 v, int shift, int word, bint is_signed, int rounding,
                                  int overflow, int n_bits, uint64_t counter, int* ovf) noexcept nogil:
    """fit(round(v * 2^-shift)) for an exact 128-bit v (shift < 0 scales up exactly)."""
    if shift > 0:
        v = shift_round128(v, shift, rounding,
                           splitmix64(counter) if rounding == RND_STOCHASTIC else 0)
    elif shift < 0:
        v = scale_up(v, -shift)
    return overflow128(v, word, is_signed, overflow, n_bits, ovf)


def cast(src_codes, out_codes, uint8_t[::1] flags, bint src_u64, int shift,
         int word, bint is_signed, int rounding, int overflow, int n_bits, uint64_t seed):
    """out[i] := fit(round(src[i] * 2^-shift)); shift = src_frac - dst_frac.  Returns n_overflow.

    ``src_codes``, ``out_codes``: any integer dtypes (``out_codes``' holds the format's codes)."""
    cdef Py_ssize_t i, n = src_codes.shape[0], n_ovf = 0
    cdef int ks = kind(src_codes), ko = kind(out_codes)
    cdef const void* ps
    cdef void* po
    cdef bint calc32
    cdef bint want_flags = flags.shape[0] == n and n > 0
    cdef fx_i128 v
    cdef int o, s = shift
    cdef uint64_t rnd = 0
    cdef int64_t c, lo, hi
    cdef bint small = (not src_u64) and 0 <= s <= 63 and (is_signed or word < 64)
    cdef int fit = vector_fit(overflow, n_bits, is_signed)
    if small:
        code_limits(word, is_signed, overflow, &lo, &hi)
        if not want_flags and rounding != RND_STOCHASTIC and fit >= 0 and n > 0:
            ps, po = addr(src_codes.view(np.uint8)), out_addr(out_codes.view(np.uint8))
            calc32 = fits32(ks, ks, ko, 0, 0, s, word, is_signed, 32)      # codes within int32: exact
            with nogil:
                n_ovf = fxn_binary(FXB_CAST, ps, ks, ps, ks, po, ko, n, 0, 0, s, rounding, fit, lo, hi,
                                   (32 if calc32 else 64) - word, calc32)
            return n_ovf
    cdef const int64_t[::1] src = as_int64(src_codes)
    wide = wide_out(out_codes)
    cdef int64_t[::1] out = wide
    with nogil:
        for i in range(n):
            if small:
                if rounding == RND_STOCHASTIC:
                    rnd = splitmix64(seed + <uint64_t>i)
                out[i] = fit_int64(shift_round(src[i], s, rounding, rnd), lo, hi, word, is_signed,
                                   overflow, n_bits, &o)
                n_ovf += o
                if want_flags:
                    flags[i] = o
                continue
            out[i] = requantize128(load(src[i], src_u64), s, word, is_signed, rounding, overflow,
                                   n_bits, seed + <uint64_t>i, &o)
            n_ovf += o
            if want_flags:
                flags[i] = o
    store(out_codes, wide)
    return n_ovf


cdef inline void binary_small(int op, const int64_t* a, const int64_t* b, int64_t* out, Py_ssize_t n,
                              int shift_a, int shift_b, int shift_out, int word, bint is_signed,
                              int rounding, int overflow, int n_bits, uint64_t seed,
                              Py_ssize_t* n_ovf) noexcept nogil:
    """binary() when the exact value fits 63 bits and 0 <= shift_out <= 63: int64 arithmetic."""
    cdef Py_ssize_t i
    cdef int64_t va, vb, v, lo, hi, ma = (<int64_t>1) << shift_a, mb = (<int64_t>1) << shift_b
    cdef int o
    cdef uint64_t rnd = 0
    code_limits(word, is_signed, overflow, &lo, &hi)
    for i in range(n):
        va = a[i] * ma
        vb = b[i] * mb
        if op == OP_ADD:
            v = va + vb
        elif op == OP_SUB:
            v = va - vb
        else:
            v = va * vb
        if rounding == RND_STOCHASTIC:
            rnd = splitmix64(seed + <uint64_t>i)
        out[i] = fit_int64(shift_round(v, shift_out, rounding, rnd), lo, hi, word, is_signed,
                           overflow, n_bits, &o)
        n_ovf[0] += o


def binary(int op, a_codes, b_codes, out_codes,
           bint a_u64, bint b_u64, int shift_a, int shift_b, int shift_out, int word,
           bint is_signed, int rounding, int overflow, int n_bits, uint64_t seed, int exact_word=127,
           bint fits=False):
    """out[i] := fit(round((a[i]*2^shift_a OP b[i]*2^shift_b) * 2^-shift_out)).

    OP is +, -, * (shifts 0 for *) or a three-way compare (out in {-1, 0, 1}).
    The exact value (``exact_word`` bits as a two's-complement integer: one more than an unsigned
    format's word) is formed on 32 bits when it fits 32 and every code array is stored in at most 4
    bytes, on 64 bits when it fits 63, else on
    128 bits; callers guarantee |value| < 2^127 (a 64 x 64-bit product reaches 2^126); any shift_out.
    ``fits``: the caller proved every result fits the format (exact results in their grown format), so
    no overflow check is made.  Returns n_overflow.  The code arrays may have any integer dtypes
    (``out_codes``' holds the format's codes; int64 for the compare).
    """
    cdef Py_ssize_t i, n = out_codes.shape[0], n_ovf = 0
    cdef int ka = kind(a_codes), kb = kind(b_codes), ko = kind(out_codes)
    cdef const void* pa
    cdef const void* pb
    cdef void* po
    cdef int sa, sb
    cdef bint calc32
    cdef fx_i128 va, vb, v
    cdef int o
    cdef uint64_t rnd = 0
    cdef int64_t lo, hi
    cdef int fit
    cdef bint small = (op != OP_CMP and exact_word <= 63 and not a_u64 and not b_u64
                       and 0 <= shift_out <= 63 and (is_signed or word < 64))
    if n == 0:
        return 0
    if small:
        fit = FXB_FIT_NONE if fits else vector_fit(overflow, n_bits, is_signed)
        if rounding != RND_STOCHASTIC and fit >= 0:
            code_limits(word, is_signed, overflow, &lo, &hi)
            pa, pb = addr(a_codes.view(np.uint8)), addr(b_codes.view(np.uint8))
            po = out_addr(out_codes.view(np.uint8))
            sa = shift_a if op != OP_MUL else 0
            sb = shift_b if op != OP_MUL else 0
            calc32 = fits32(ka, kb, ko, sa, sb, shift_out, word, is_signed, exact_word)
            with nogil:
                n_ovf = fxn_binary(op, pa, ka, pb, kb, po, ko, n, sa, sb, shift_out, rounding, fit, lo, hi,
                                   (32 if calc32 else 64) - word, calc32)
            return n_ovf
    cdef const int64_t[::1] a = as_int64(a_codes), b = as_int64(b_codes)
    wide = wide_out(out_codes)
    cdef int64_t[::1] out = wide
    if small:
        with nogil:
            if op == OP_ADD:
                binary_small(OP_ADD, &a[0], &b[0], &out[0], n, shift_a, shift_b, shift_out, word,
                             is_signed, rounding, overflow, n_bits, seed, &n_ovf)
            elif op == OP_SUB:
                binary_small(OP_SUB, &a[0], &b[0], &out[0], n, shift_a, shift_b, shift_out, word,
                             is_signed, rounding, overflow, n_bits, seed, &n_ovf)
            else:
                binary_small(OP_MUL, &a[0], &b[0], &out[0], n, 0, 0, shift_out, word,
                             is_signed, rounding, overflow, n_bits, seed, &n_ovf)
        store(out_codes, wide)
        return n_ovf
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
            out[i] = requantize128(v, shift_out, word, is_signed, rounding, overflow, n_bits,
                                   seed + <uint64_t>i, &o)
            n_ovf += o
    store(out_codes, wide)
    return n_ovf


def to_float(src_codes, double[::1] out, bint src_u64, int frac):
    """out[i] := src[i] * 2^-frac (rounded to nearest double when not exact); any integer dtype."""
    cdef Py_ssize_t i, n = src_codes.shape[0]
    cdef double scale
    cdef int ks = kind(src_codes)
    cdef const void* ps
    if (ks & 15) != 8 and n > 0 and -1000 <= frac <= 1000:
        ps, scale = addr(src_codes.view(np.uint8)), ldexp(1.0, -frac)
        with nogil:
            fxn_to_float(ps, ks, &out[0], n, scale)
        return
    cdef const int64_t[::1] src = as_int64(src_codes)
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
                out[i] = scaled_double(<uint64_t>src[i] if (src_u64 or src[i] >= 0)
                                       else <uint64_t>0 - <uint64_t>src[i],
                                       not src_u64 and src[i] < 0, frac)


cdef inline double scaled_double(uint64_t mag, bint negative, int frac) noexcept nogil:
    """Correctly rounded (nearest-even) double of (-1)^negative * mag * 2^-frac, for any frac.

    The integer is first rounded to the precision the result has (53 bits, fewer when it is
    subnormal), so the final ldexp is exact: no double rounding.
    """
    cdef int bits = 64, p, d, e
    cdef uint64_t m, rem, half
    cdef double r
    if mag == 0:
        return -0.0 if negative else 0.0
    while not (mag >> (bits - 1)) & 1:
        bits -= 1
    e = bits - 1 - frac                       # value in [2^e, 2^(e+1))
    p = 53 if e >= -1022 else e + 1075         # significant bits the double can hold
    d = bits - p
    if d <= 0:
        r = ldexp(<double>mag, -frac)
    elif d > 64:
        r = 0.0                                # below half the smallest subnormal
    else:
        m = mag >> d if d < 64 else 0
        rem = mag & ((<uint64_t>1 << d) - 1) if d < 64 else mag
        half = (<uint64_t>1) << (d - 1)
        m = m + ((rem > half) | ((rem == half) & <int>(m & 1)))
        r = ldexp(<double>m, d - frac)
    return -r if negative else r

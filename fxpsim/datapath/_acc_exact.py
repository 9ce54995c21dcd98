"""Exact sums of the accumulating kernels, used when no partial sum can leave the accumulator's range (or
the sum is wrapped once, modulo :math:`2^{64}`): float32/float64 BLAS in K chunks whose partial sums are exact
integers, AVX512-VNNI int16 sums, the int32 ``VPMULDQ`` kernel, the 64-bit wrapping kernel; and the one-time
fit (saturate or wrap) of an exact sum into the accumulator."""
from __future__ import annotations


import numpy as np

from . import _accumulate as _k
from ..core.fixed import Format, Overflow
from ._acc_operands import _I32, _product_range, last
from ._acc_scratch import _TLS, _run_sequential, _scratch, _temp_limit
from . import _acc_scratch as _buf

#: MACs up to which exact sums use the int32 SIMD kernel instead of BLAS.  Measured on the reference
#: machine (AVX-512, OpenBLAS, one thread): float32 BLAS beats the int32 kernel at every size, from
#: 1x1x1 (2.2 vs 6.0 us) through skinny convolutions (16384x27x8: 13 vs 2.4 GMAC/s) to 512^3
#: (49 vs 23 GMAC/s), so only empty problems (K = 0) take the kernel.
_SMALL_EXACT = 0

_VNNI = _k.vnni_level() > 0         # AVX512-VNNI: exact int16 sums (vpdpwssd), see _vnni_sums
_MUL32_LEVEL = _k.mul32_level()     # 1: AVX-512 VPMULDQ kernel for int32 operands (0: portable), see _mul32_sums
_VNNI_MIN_ROWS = 16                 # fewer output rows: packing b costs more than the products
_VNNI_THREAD_MACS = 1 << 25         # fewer MACs: one thread (a parallel region costs more)

def _fit_numpy(s: np.ndarray, acc: Format, ovf: Overflow):
    """Overflow mode applied to exact int64 sums (accumulator of at most 63 bits).

    Returns ``(codes, overflowed)``; ``wrap_sign_magnitude`` is left to the kernels.
    """
    lo, hi = acc.min_code, acc.max_code
    if ovf is Overflow.SATURATE_SYMMETRIC and acc.signed:
        lo = -hi
    bad = (s < lo) | (s > hi)
    if ovf in (Overflow.SATURATE, Overflow.SATURATE_SYMMETRIC, Overflow.ERROR):
        return np.clip(s, lo, hi), bad
    if ovf is Overflow.SATURATE_ZERO:
        return np.where(bad, 0, s), bad
    v = (s.view(np.uint64) & np.uint64((1 << acc.word) - 1)).astype(np.int64)   # s mod 2^W
    if acc.signed:
        half = np.int64(-(1 << (acc.word - 1)))
        v = np.where(v >= -half, v + half + half, v)
    return v, bad



_MIN_BLAS_CHUNK = 32
_F32_CHUNK_MACS = 1 << 24     # MACs per float32 K chunk below which float64 (fewer chunks) runs instead


def _exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, threads, mod64=False):
    """init + (a @ b) * 2^shift, exact (the caller proved every partial sum fits int64), or with ``mod64``
    its low 64 bits for any data (int64 two's complement: wrapping commutes with summation, so the sum
    reduced modulo 2^W once equals the per-add wrapped accumulator of any width W <= 64).

    Float BLAS computes sums that are exact in any summation order: float32 while the partial sums of a
    K chunk stay within 2^24; int16 operands beyond that, on a CPU with AVX512-VNNI: exact integer sums
    (``_vnni_sums``); float64 within 2^53 (chunk sums added in int64, wrapping); otherwise integer kernels
    (path "int64"): int32-range operands by ``mac_mul32`` (``_mul32_sums``: VPMULDQ, an exact 64-bit product
    of two int32, and VPADDQ on register-blocked int64 lanes; measured 1.4-1.7x float64 BLAS on one thread
    at 256^3 and 1024x1024 @ 1024x256, where ``mac_wrap64`` reached 0.5x), wider ones by ``mac_wrap64``
    (unsigned 64 x 64-bit products, VPMULLQ).  ``last_int64_kernel`` names the one that ran.
    """
    nb, m, kk = a3.shape
    n = b3.shape[2]
    pmax = max(abs(p) for p in _product_range(a_rng, b_rng, 0))
    amax, bmax = max(-a_rng[0], a_rng[1]), max(-b_rng[0], b_rng[1])
    small = nb * m * kk * n <= _SMALL_EXACT and threads == 1
    exact_k32 = (1 << 24) // pmax if pmax else kk       # products per chunk exact in float32 / float64
    exact_k64 = (1 << 53) // pmax if pmax else kk
    # float32 (twice float64's speed) when all of K is exact in it, or in chunks big enough that the
    # extra BLAS calls and int64 additions cost nothing (long-K, few-column products stay float64)
    f32_chunks_ok = exact_k32 >= kk or (exact_k32 >= _MIN_BLAS_CHUNK and nb * m * n * exact_k32 >= _F32_CHUNK_MACS)
    f32 = f32_chunks_ok and max(amax, bmax) <= 1 << 24
    if kk * pmax <= _I32 and max(amax, bmax) <= _I32 and small and not mod64:
        last.path = "exact32"  # see _SMALL_EXACT
        out, _ = _run_sequential(_k.mac_fast, a3, b3, rpb, None, 0, np.int32, _k.FAST_EXACT, 0, 0, 0, threads,
                                 counts=False)
        out = out.reshape(nb, m, n)
    elif (_VNNI and not f32 and nb * m >= _VNNI_MIN_ROWS and n and kk and _fits_int16(a_rng)
          and _fits_int16(b_rng) and kk < 1 << 32):
        # int16 operands whose sums float32 cannot hold (in K chunks worth a BLAS call): exact integer sums
        # at several times float64 BLAS's rate (two vpdpwssd streams, b split into high and low bytes)
        last.path = "vnni16"
        out = _vnni_sums(a3, b3, threads)
    elif min(exact_k64, kk) >= min(kk, _MIN_BLAS_CHUNK) and max(amax, bmax) <= 1 << 53:
        ftype = np.float32 if f32 else np.float64
        exact_k = max(1, min(kk, exact_k32 if ftype is np.float32 else exact_k64))
        last.path = f"blas{np.dtype(ftype).itemsize * 8}"
        # float copies of a and b: K in chunks when they would exceed the temporaries' limit or the float
        # type's exact range (each chunk's sum is exact; their total is added in int64)
        per_k = (nb * m + b3.shape[0] * n) * np.dtype(ftype).itemsize
        limit = _temp_limit(a3, b3)
        kc = max(kk, 1) if per_k * kk <= limit else max(_buf._MIN_K_CHUNK, limit // per_k)
        kc = min(kc, exact_k) if kk else kc
        out = np.empty((nb, m, n), np.int64)
        part = out if kc >= kk else _scratch("blas_part", (nb, m, n), np.int64)
        _TLS.arena = {} if kc < kk else None
        try:
            for k0 in range(0, max(kk, 1), kc):
                k1 = min(kk, k0 + kc)
                af = _scratch("blas_a", (nb, m, k1 - k0), ftype)
                np.copyto(af, a3[:, :, k0:k1], casting="unsafe")   # integers of at most 2^24 / 2^53: exact
                bf = b3[:, k0:k1, :].astype(ftype, copy=False) if kc >= kk else \
                    _scratch("blas_b", (b3.shape[0], k1 - k0, n), ftype)
                if kc < kk:
                    np.copyto(bf, b3[:, k0:k1, :], casting="unsafe")
                prod = _scratch("blas_out", (nb, m, n), ftype)
                if b3.shape[0] == 1:
                    np.matmul(af.reshape(nb * m, k1 - k0), bf[0], out=prod.reshape(nb * m, n))
                else:
                    np.matmul(af, bf, out=prod)
                if part is out or k0 == 0:
                    np.copyto(out, prod, casting="unsafe")
                else:
                    np.copyto(part, prod, casting="unsafe")
                    out += part                                    # int64: wraps modulo 2^64
        finally:
            _TLS.arena = None
    elif _fits_int32(a_rng) and _fits_int32(b_rng):
        # int32 operands: every product exact on 64 bits, summed modulo 2^64 by the register-blocked
        # VPMULDQ kernel (1.4-1.7x float64 BLAS on one thread; the kernel below multiplies with VPMULLQ: 0.5x)
        last.path = "int64"
        out = _mul32_sums(a3, b3, rpb, threads)
    else:
        last.path = "int64"
        last.int64_kernel = "wrap64"
        out, _ = _run_sequential(_wrap64_kernel, a3, b3, rpb, None, 0, np.int64, _k.FAST_EXACT, 0, 0, 0, threads,
                                 counts=False)
        out = out.reshape(nb, m, n)
    if shift:
        out <<= shift                       # an exact product of 2^shift (modulo 2^64 with ``mod64``)
    if init3 is not None:
        out += init3
    return out


def _fits_int16(rng) -> bool:
    return -(1 << 15) <= rng[0] and rng[1] < 1 << 15


def _fits_int32(rng) -> bool:
    return -(1 << 31) <= rng[0] and rng[1] < 1 << 31


def _mul32_sums(a3, b3, rpb, threads):
    """Sums a @ b modulo 2^64 of int32-range operands by ``mac_mul32`` ([nb, m, n] int64; AVX-512 kernel where
    ``_MUL32_LEVEL``, else the portable one: same bits).  Which of the two ran: ``last_int64_kernel``.

    Temporaries: b's int64 column slabs [B, N / S, K, S] and, unless a is C-contiguous int32, an int32 copy of
    a; when they would exceed :func:`_temp_limit`, K runs in chunks whose sums the kernel adds into ``out``.
    """
    nb, m, kk = a3.shape
    nbb, _, n = b3.shape
    sw = _k.mul32_slab_width()
    nblk, full = -(-n // sw), n // sw
    a_view = a3.dtype == np.int32 and a3.flags.c_contiguous
    per_k = (0 if a_view else nb * m * 4) + nbb * nblk * sw * 8
    limit = _temp_limit(a3, b3)
    kc = max(kk, 1) if per_k * kk <= limit else max(_buf._MIN_K_CHUNK, limit // per_k)
    out = np.empty((nb * m, n), np.int64)
    level = _MUL32_LEVEL
    last.int64_kernel = "mul32" if level else "mul32-portable"
    _TLS.arena = {} if kc < kk else None     # the chunks share their temporaries
    try:
        for k0 in range(0, max(kk, 1), kc):
            k1 = min(kk, k0 + kc)
            if a_view:
                a2 = a3.reshape(nb * m, kk)[:, k0:k1]                  # rows strided, elements contiguous
            else:
                a2 = _scratch("mul32_a", (nb * m, k1 - k0), np.int32)
                np.copyto(a2.reshape(nb, m, k1 - k0), a3[:, :, k0:k1], casting="unsafe")   # int32 range: exact
            bc = b3[:, k0:k1, :]
            packed = _scratch("mul32_b", (nbb, nblk, k1 - k0, sw), np.int64)   # [B, N / S, K, S] column slabs
            if full:
                packed[:, :full] = bc[:, :, :full * sw].reshape(nbb, k1 - k0, full, sw).transpose(0, 2, 1, 3)
            if full < nblk:
                packed[:, full] = 0
                packed[:, full, :, :n - full * sw] = bc[:, :, full * sw:]
            _k.mac_mul32(a2, packed.reshape(nbb, nblk * (k1 - k0) * sw), out, rpb, threads, level, k0 > 0)
    finally:
        _TLS.arena = None
    return out.reshape(nb, m, n)


def _vnni_pairs_b(b2: np.ndarray):
    """b [K, N] (int16 values) -> its high and low parts ``(b - (b & 255)) >> 8`` and ``b & 255`` as
    ``mac_vnni16`` reads them: [N' / 16, K' / 2, 16] int32 pairs of k, K' even, N' a multiple of 32."""
    k, n = b2.shape
    kp, npad = (k + 1) // 2, -(-n // 32) * 32
    # [slab, kp, 16 columns, 2 (k even / odd)] int16, filled from b in one strided copy each
    low = np.zeros((npad // 16, kp, 16, 2), np.int16)
    src = np.zeros((2 * kp, npad), np.int16) if (k % 2 or n != npad) else None
    if src is not None:
        src[:k, :n] = b2
    else:
        src = b2 if b2.dtype == np.int16 else b2.astype(np.int16)
    low[...] = src.reshape(kp, 2, npad // 16, 16).transpose(2, 0, 3, 1)
    high = low >> 8                                     # (b - (b & 255)) >> 8 == b >> 8 (arithmetic)
    low &= np.int16(255)
    return high.view(np.int32).reshape(npad // 16, kp, 16), low.view(np.int32).reshape(npad // 16, kp, 16), npad


def _vnni_sums(a3, b3, threads):
    """Exact int64 sums a @ b of int16-range operands by ``mac_vnni16`` ([nb, m, n])."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    kp = (kk + 1) // 2
    shared = b3.shape[0] == 1
    rows = nb * m if shared else m
    nthreads = 1 if nb * m * kk * n < _VNNI_THREAD_MACS else int(threads)
    npad = -(-n // 32) * 32
    out = np.zeros((nb, m, n), np.int64)
    for i in range(1 if shared else nb):
        high, low, _ = _vnni_pairs_b(b3[i])
        a2 = a3.reshape(nb * m, kk) if shared else a3[i]
        if a2.dtype == np.int16 and a2.flags.c_contiguous and kk % 2 == 0:
            ap = a2
        else:
            ap = _scratch("vnni_a", (rows, 2 * kp), np.int16)
            ap[:, :kk] = a2
            ap[:, kk:] = 0
        if npad == n:                                   # the kernel adds into the result itself
            acc = out.reshape(nb * m, n) if shared else out[i]
        else:
            acc = _scratch("vnni_out", (rows, npad), np.int64)
            acc.fill(0)
        _k.mac_vnni16(ap.view(np.int32), high, low, acc, nthreads)
        if npad != n:
            if shared:
                out.reshape(nb * m, n)[...] = acc[:, :n]
            else:
                out[i] = acc[:, :n]
    return out

def _wrap64_kernel(a2, bs, ini, out, cnt, rpb, mode, lo, hi, sh, nthreads):
    """``mac_wrap64`` in the calling convention of ``_run_sequential`` (int64 lanes; K chunks add up through
    ``ini``, the previous chunk's sums)."""
    _k.mac_wrap64(a2.view(np.uint64), bs.view(np.uint64), out, rpb, nthreads)
    if ini.shape[0]:
        out += ini


def _wrap_codes(s: np.ndarray, acc: Format) -> np.ndarray:
    """Sums modulo 2^64 (int64 bit patterns) reduced modulo 2^W and read in the accumulator's encoding,
    in place: the low W bits, sign-extended (signed) or zero-extended (unsigned)."""
    if acc.word == 64:
        return s
    u = s.view(np.uint64)
    if acc.signed:
        u <<= np.uint64(64 - acc.word)          # unsigned shift: the discarded bits are just dropped
        s >>= 64 - acc.word                     # arithmetic shift: the sign extension
    else:
        u &= np.uint64((1 << acc.word) - 1)
    return s


#: ``counts`` of :func:`_accumulate` when they were not asked for (``count=False``)

"""Accumulating datapath kernels: dot / matmul / conv / sum with a finite accumulator.

A MAC array does not add with infinite precision.  Every function here models an
accumulator register of a given :class:`~fxpsim.fixed.Format` that receives one
exact product per step and applies its overflow mode after **every** add:

.. math::

    s_0 = \\mathrm{init}, \\qquad
    s_{k+1} = \\mathrm{fit}\\big(s_k + \\mathrm{round}(a_k b_k \\, 2^{f_{acc} - f_a - f_b})\\big),
    \\qquad k = 0, \\dots, K-1

``round`` (the ``rounding`` mode) acts only when the accumulator has fewer fraction bits than
the products (:math:`f_{acc} < f_a + f_b`); otherwise products are shifted left exactly.
``fit`` is the ``overflow`` mode.  ``order="tree"`` replaces the sequential chain by a balanced
pairwise adder tree (neighbours ``(0, 1), (2, 3), ...`` at each level, an odd last element passed
up unchanged, every node fitted), whose root is then added to ``init`` through one more fitted
add.  ``overflow_at="end"`` models a wide adder: the rounded products and ``init`` are summed
exactly and fitted once.

Inputs are :class:`~fxpsim.fixed.FixedArray` or integer numpy arrays (integer codes, format
``Format.integer(bits)`` with the smallest width holding the data, unsigned for unsigned dtypes).
Results are ``FixedArray`` in the accumulator format; ``result.overflows`` counts adds that
overflowed (each add at most once).  ``per_output=True`` returns ``(result, counts)`` with
``counts`` an int64 array of per-output overflow counts (also ``result.overflow_mask``).

Speed: when the data prove that no partial sum can leave the accumulator's range
(:math:`|{\\rm init}| + K \\max|a| \\max|b|` within range), the exact sum is computed with
float32/float64 BLAS (K cut into chunks whose partial sums are integers of at most :math:`2^{24}` /
:math:`2^{53}`, hence exact in any summation order; chunk sums added in int64) or integer kernels: exact
int16 sums by AVX512-VNNI, int32 operands by a register-blocked AVX-512 ``VPMULDQ`` loop (6 rows x 32 int64
columns in registers; exact 64-bit products, sums modulo :math:`2^{64}`), wider ones by an unsigned 64-bit
kernel.  ``count=False`` with ``overflow="wrap"`` takes the same exact sum modulo :math:`2^{64}` and
reduces it once (wrapping commutes with summation; see :func:`matmul`).  Otherwise per-add SIMD
kernels run: with AVX-512BW, register-blocked loops on 16-bit lanes (native saturating adds, int16
operands and products) or 32-bit lanes (exact VPMADDWD products of int16 operands), each counting
overflows with one mask compare and one masked add per vector (no horizontal work; lane counters
flushed once per k tile), and loops without counters for ``count=False``; with AVX2 or wider operands,
16/32/64-bit-lane loops vectorised by the compiler (AVX-512/AVX2 variants chosen at run time).  The
adder tree is vectorised across output columns (a problem with few output columns and many rows runs
transposed, to fill the lanes), and rounded products and ``wrap_sign_magnitude`` use a generic 128-bit
kernel.  Rows run in parallel (``threads``), never the reduction, so the thread count never changes a bit.

Memory: kernel temporaries (lane copies of ``a``, the right operand packed in 64-column slabs, float
copies for BLAS, int64 copies for the generic kernel) stay within max(64 MiB, the inputs plus outputs)
(``_temp_limit``): larger problems run in chunks along the reduction axis, each starting from the
previous chunk's fitted accumulators as ``init`` (per-add fitting is sequential, so the bits are those
of one pass), or, for the adder tree, in row and column blocks of the generic kernel.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from . import _accumulate as _k
from ..core.fixed import FixedArray, Format, Overflow, Rounding, record_overflow
from ..core.fixed import _logging as _overflow_log_active

__all__ = ["matmul", "dot", "conv1d", "conv2d", "sum", "cumsum"]

_I32 = (1 << 31) - 1
_I63 = (1 << 63) - 1
#: MACs up to which exact sums use the int32 SIMD kernel instead of BLAS.  Measured on the reference
#: machine (AVX-512, OpenBLAS, one thread): float32 BLAS beats the int32 kernel at every size, from
#: 1x1x1 (2.2 vs 6.0 us) through skinny convolutions (16384x27x8: 13 vs 2.4 GMAC/s) to 512^3
#: (49 vs 23 GMAC/s), so only empty problems (K = 0) take the kernel.
_SMALL_EXACT = 0
_TLS = threading.local()      # per-thread scratch (overflow counts, im2col patches, BLAS operands)
_SCRATCH_BYTES = 1 << 22      # temporaries up to this size reuse per-thread buffers
_COUNT_SCRATCH_BYTES = 1 << 26  # overflow counts up to this size reuse a per-thread buffer
#: Kernel the last call used ("exact32", "blas32", "blas64", "int64", "simd16", "simd32", "simd32w",
#: "simd64", "tree32", "tree64", "generic"), for tests and benchmarks that check a path is really taken.
#: (``count=False`` wrapping reports the path of its exact sum: "blas32", "blas64", "vnni16" or "int64";
#: ``last_int64_kernel`` says which integer kernel "int64" ran.)
last_path = ""
#: Which integer kernel the last "int64" path ran: "mul32" (int32 operands: register-blocked AVX-512 VPMULDQ),
#: "mul32-portable" (the same sums in portable C, CPUs without AVX-512) or "wrap64" (operands beyond int32:
#: ``mac_wrap64``, 64 x 64-bit products).
last_int64_kernel = ""
_SIMD16 = _k.simd16_level() > 0      # 16-bit-lane kernel usable on this CPU
_SIMD512 = _k.simd16_level() >= 2    # the AVX-512BW kernels (16-bit and int16-operand 32-bit lanes)
_VNNI = _k.vnni_level() > 0         # AVX512-VNNI: exact int16 sums (vpdpwssd), see _vnni_sums
_MUL32_LEVEL = _k.mul32_level()     # 1: AVX-512 VPMULDQ kernel for int32 operands (0: portable), see _mul32_sums
_VNNI_MIN_ROWS = 16                 # fewer output rows: packing b costs more than the products
_VNNI_THREAD_MACS = 1 << 25         # fewer MACs: one thread (a parallel region costs more)
_FAST_MODES = {
    Overflow.SATURATE: _k.FAST_SATURATE, Overflow.ERROR: _k.FAST_SATURATE,
    Overflow.SATURATE_SYMMETRIC: _k.FAST_SATURATE, Overflow.SATURATE_ZERO: _k.FAST_ZERO,
    Overflow.WRAP: None,    # signed or unsigned wrap, decided with the format
}


# --------------------------------------------------------------------------- operands
def _operand(x, name: str) -> tuple[np.ndarray, Format]:
    """Integer codes (the caller's array itself when possible, never written to) and format.

    Integer arrays keep their dtype (int8 stays int8: conversions happen once, per kernel).
    """
    if isinstance(x, FixedArray):
        if x.fmt._u64:
            raise ValueError(f"{name}: unsigned 64-bit formats are not supported by the datapath "
                             f"kernels (got {x.fmt}); cast to at most 63 bits first")
        return x.raw, x.fmt
    arr = np.asarray(x)
    if arr.dtype.kind in "fc":
        raise TypeError(f"{name}: got a {arr.dtype} array; the datapath takes integer codes or "
                        f"FixedArray -- convert real values with fxpsim.from_float(x, fmt)")
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name}: expected an integer array or FixedArray, got dtype {arr.dtype}")
    signed = arr.dtype.kind == "i"
    lo, hi = _data_range(arr)
    if hi > _I63:
        raise ValueError(f"{name}: code {hi} does not fit int64")
    hi_bits = max(hi, 0).bit_length()                 # all-negative data: hi < 0 needs no bits
    bits = max(hi_bits, (-lo - 1).bit_length() if lo < 0 else 0) + 1 if signed else max(hi_bits, 1)
    if arr.dtype.kind == "b" or arr.dtype == np.uint64:
        arr = arr.astype(np.int64)
    return arr, Format.integer(bits, signed)


def _data_range(codes: np.ndarray) -> tuple[int, int]:
    """(min, max) of the codes; a broadcast view is reduced over its distinct elements only."""
    if not codes.size:
        return 0, 0
    if 0 in codes.strides:
        codes = codes[tuple(slice(0, 1) if st == 0 else slice(None) for st in codes.strides)]
    return int(codes.min()), int(codes.max())


def _parse_acc(acc, frac: int) -> Format | None:
    if acc is None:
        return None
    if isinstance(acc, (bool, np.bool_)):
        raise TypeError(f"acc must be a Format, a format string, an int (bits) or None, got {acc!r}")
    if isinstance(acc, (int, np.integer)):
        if not 1 <= int(acc) <= 64:
            raise ValueError(f"acc={acc}: an accumulator has 1..64 bits")
        return Format(int(acc), frac, True)
    fmt = Format.parse(acc) if isinstance(acc, str) else acc
    if not isinstance(fmt, Format):
        raise TypeError(f"acc must be a Format, a format string, an int (bits) or None, got {acc!r}")
    if fmt._u64:
        raise ValueError(f"acc={fmt}: unsigned 64-bit accumulators are not supported; use 63 bits")
    return fmt


def _init_codes(init, out_shape, frac: int, name: str = "init"):
    """Raw start values at LSB 2^-frac, int64, broadcast to the output shape (or None)."""
    if init is None:
        return None
    if isinstance(init, FixedArray):
        if init.fmt._u64:
            raise ValueError(f"{name}: unsigned 64-bit formats are not supported")
        shift = frac - init.fmt.frac
        if shift < 0:
            raise ValueError(f"{name} has {init.fmt.frac} fraction bits, more than the accumulator's "
                             f"{frac}; cast it to the accumulator format first")
        lo, hi = _data_range(init.raw)
        if max(abs(lo), abs(hi)) << shift > _I63:
            raise ValueError(f"{name} ({init.fmt}) does not fit 64 bits at the accumulator's LSB")
        codes = init.raw * (1 << shift) if shift and (lo or hi) else init.raw
    else:
        codes, _ = _operand(init, name)
    try:
        return np.broadcast_to(codes, out_shape)
    except ValueError:
        raise ValueError(f"{name} of shape {np.shape(codes)} does not broadcast to the output "
                         f"shape {tuple(out_shape)}") from None


def _exact_format(lo: int, hi: int, frac: int, what: str, op: str) -> Format:
    """Smallest format with LSB 2^-frac holding every integer in [lo, hi] (the exact accumulator)."""
    signed = lo < 0
    bits = max(hi.bit_length(), (-lo - 1).bit_length() if signed else 0, 1) + signed
    if bits > 63 + signed:
        raise ValueError(f"{op}: an exact accumulator for {what} needs {bits} bits (> 64); "
                         f"pass acc= explicitly")
    return Format(bits, frac, signed)


def _available_cores() -> int:
    """Cores this process may run on now (its affinity can shrink after import, e.g. a pinned benchmark
    or pool worker: more threads than cores would time-slice one core and spin in OpenMP barriers)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_CORES = _available_cores()     # at import (benchmarks report it)
_WORK_PER_THREAD = 1 << 18     # MACs below which an extra thread costs more than it saves


#: ``threads`` may be at most this many times the machine's CPU count (``os.cpu_count()``): the OpenMP
#: runtime starts every thread asked for, and tens of thousands of them exhaust the process (libgomp
#: aborts, or the process crashes).  Threads never change a bit, so more than the cores buy nothing.
THREADS_PER_CPU_LIMIT = 4


def _max_threads() -> int:
    return THREADS_PER_CPU_LIMIT * (os.cpu_count() or 1)


def _check_threads(threads) -> None:
    """``threads``: None or an int in 1..``THREADS_PER_CPU_LIMIT`` x CPU count (checked up front)."""
    if threads is None:
        return
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"threads must be a positive int or None, got {type(threads).__name__} {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if threads > _max_threads():
        raise ValueError(f"threads={threads} is more than {_max_threads()} ({THREADS_PER_CPU_LIMIT} x the "
                         f"{os.cpu_count() or 1} CPUs of this machine); threads never change a bit, so pass "
                         f"None (all cores for large problems) or at most the core count")


def _threads(threads, work: int) -> int:
    """Thread count: ``threads`` as given, or (None) all cores for large problems, 1 for tiny ones."""
    if threads is None:
        if work < 2 * _WORK_PER_THREAD:
            return 1
        return max(1, min(_available_cores(), work // _WORK_PER_THREAD))
    _check_threads(threads)
    return int(threads)


def _modes(rounding, overflow, overflow_at, order, threads=None, count=True, per_output=False):
    """Parse the modes and check ``threads`` and ``count``: everything a public function validates first."""
    _check_threads(threads)
    r, o = Rounding.parse(rounding), Overflow.parse(overflow)
    if not isinstance(count, (bool, np.bool_)):
        raise TypeError(f"count must be True or False, got {count!r}")
    if not count and per_output:
        raise ValueError("per_output=True needs the overflow counts; drop count=False")
    if not count and o is Overflow.ERROR:
        raise ValueError("overflow='error' needs the overflow counts; drop count=False")
    if r is Rounding.STOCHASTIC:
        raise ValueError("rounding='stochastic' is not supported for accumulated products; "
                         "pick a deterministic rounding mode")
    if overflow_at not in ("every", "end"):
        raise ValueError(f"overflow_at must be 'every' or 'end', got {overflow_at!r}")
    if order not in ("sequential", "tree"):
        raise ValueError(f"order must be 'sequential' or 'tree', got {order!r}")
    return r, o


# --------------------------------------------------------------------------- core
def _product_range(fa_rng, fb_rng, shift: int) -> tuple[int, int]:
    """Smallest and largest aligned product (rounding is monotonic: floor/ceil bound it)."""
    corners = [x * y for x in fa_rng for y in fb_rng]
    lo, hi = min(corners), max(corners)
    if shift >= 0:
        return lo << shift, hi << shift
    return lo >> -shift, -((-hi) >> -shift)


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


def _pack_slabs(b3: np.ndarray, dtype, scale: int = 1) -> np.ndarray:
    """b [B, K, N] -> [B, ceil(N/JB)*K*JB]: column slabs [N/JB, K, JB] (zero padded), times ``scale``."""
    nb, kk, n = b3.shape
    jb = _k.slab_width()
    nblk, full = -(-n // jb), n // jb
    packed = _scratch("slabs", (nb, nblk, kk, jb), dtype)      # consumed by one kernel call
    if full:            # one strided copy (b3 may be a transposed view: see _transposed)
        packed[:, :full] = b3[:, :, :full * jb].reshape(nb, kk, full, jb).transpose(0, 2, 1, 3)
    if full < nblk:     # last slab, zero padded
        packed[:, full] = 0
        packed[:, full, :, :n - full * jb] = b3[:, :, full * jb:]
    if scale != 1 and scale <= np.iinfo(dtype).max:
        packed *= dtype(scale)
    # (a scale beyond the lanes happens only for an all-zero b: the caller bounds |b| * scale)
    return packed.reshape(nb, nblk * kk * jb)


#: Kernel temporaries (lane copies of a, the padded column slabs of b) may take this many bytes, or
#: ``_TEMP_FACTOR`` times the inputs plus outputs when that is more; larger problems run in chunks
#: along the reduction axis (the sequential kernels), or on the generic kernel (the adder tree).
_TEMP_BYTES = 64 << 20
_TEMP_FACTOR = 1
_MIN_K_CHUNK = 256          # shortest reduction chunk (each chunk re-reads the [R, N] outputs)


def _temp_limit(a3, b3, init3=None) -> int:
    """Bytes the kernel temporaries of one problem may take (see ``_TEMP_BYTES``)."""
    rows, n = a3.shape[0] * a3.shape[1], b3.shape[2]
    io = a3.size * a3.itemsize + b3.size * b3.itemsize + rows * n * 8 * (2 if init3 is not None else 1)
    return max(_TEMP_BYTES, _TEMP_FACTOR * io)


def _k_chunk(rows: int, n: int, kk: int, itemsize: int, limit: int) -> int:
    """Reduction steps per kernel call: all of K unless the lane copy of a and the padded slabs
    of b (``(rows + N padded to the slab width) * itemsize`` bytes per step) exceed ``limit``."""
    npad = -(-n // _k.slab_width()) * _k.slab_width()
    per_k = (rows + npad) * itemsize
    if per_k * kk <= limit:
        return max(kk, 1)
    return max(_MIN_K_CHUNK, limit // per_k)


def _run_sequential(kernel, a3, b3, rpb, init3, shift, dtype, mode, lo, hi, sh, nthreads, counts=True,
                    transposed=False, init_dtype=None):
    """One sequential SIMD kernel (``mac_fast`` / ``mac_fast16`` / ``mac_fast32m``) over a3 [B, M, K] @ b3
    -> (out, cnt) [R, N] (``cnt`` None without ``counts``).

    ``dtype``: lane type of the operands; ``init_dtype``: of the start values and of ``lo``/``hi``
    (default ``dtype``; ``mac_fast32m`` takes int16 operands and int32 accumulators).
    When the lane copies would exceed :func:`_temp_limit`, K is cut into chunks run one after the
    other, each starting from the previous chunk's (fitted) accumulators as its ``init``: per-add
    fitting is sequential, and the kernels fit after every add, so the chunked result and counts
    equal the unchunked ones bit for bit.
    """
    nb, m, kk = a3.shape
    n = b3.shape[2]
    rows = nb * m
    idt = np.dtype(init_dtype or dtype).type
    kc = _k_chunk(rows, n, kk, np.dtype(dtype).itemsize, _temp_limit(a3, b3, init3))
    if kc >= kk:
        a2, bs, ini, out, cnt = _lane_buffers(a3, b3, init3, shift, dtype, counts=counts, transposed=transposed,
                                              init_dtype=idt)
        kernel(a2, bs, ini, out, cnt, rpb, mode, idt(lo), idt(hi), sh, nthreads)
        return out, (cnt if counts else None)
    out = np.empty((rows, n), np.int64)
    total = np.zeros((rows, n), np.int64) if counts else None
    start = init3
    _TLS.arena = {}                        # the chunks' lane buffers: allocated once, by the first
    try:
        for k0 in range(0, kk, kc):
            k1 = min(kk, k0 + kc)
            a2, bs, ini, _, cnt = _lane_buffers(a3[:, :, k0:k1], b3[:, k0:k1, :], start, shift, dtype,
                                                counts=counts, out=out, init_dtype=idt)
            kernel(a2, bs, ini, out, cnt, rpb, mode, idt(lo), idt(hi), sh, nthreads)
            if counts:
                total += cnt
            start = out.reshape(nb, m, n)  # copied into the lane buffer ``ini`` of the next chunk
    finally:
        _TLS.arena = None
    return out, total


#: Shortest reduction chunk worth a float32 BLAS call of its own: float32 is exact while every partial sum
#: of a chunk stays within 2^24, so K is cut into chunks of 2^24 / max|product| products (each chunk's
#: exact sum is added into int64); below this chunk length float64 (2^53) or the integer kernel runs.
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
    global last_path, last_int64_kernel
    amax, bmax = max(-a_rng[0], a_rng[1]), max(-b_rng[0], b_rng[1])
    small = nb * m * kk * n <= _SMALL_EXACT and threads == 1
    exact_k32 = (1 << 24) // pmax if pmax else kk       # products per chunk exact in float32 / float64
    exact_k64 = (1 << 53) // pmax if pmax else kk
    # float32 (twice float64's speed) when all of K is exact in it, or in chunks big enough that the
    # extra BLAS calls and int64 additions cost nothing (long-K, few-column products stay float64)
    f32_chunks_ok = exact_k32 >= kk or (exact_k32 >= _MIN_BLAS_CHUNK and nb * m * n * exact_k32 >= _F32_CHUNK_MACS)
    f32 = f32_chunks_ok and max(amax, bmax) <= 1 << 24
    if kk * pmax <= _I32 and max(amax, bmax) <= _I32 and small and not mod64:
        last_path = "exact32"  # see _SMALL_EXACT
        out, _ = _run_sequential(_k.mac_fast, a3, b3, rpb, None, 0, np.int32, _k.FAST_EXACT, 0, 0, 0, threads,
                                 counts=False)
        out = out.reshape(nb, m, n)
    elif (_VNNI and not f32 and nb * m >= _VNNI_MIN_ROWS and n and kk and _fits_int16(a_rng)
          and _fits_int16(b_rng) and kk < 1 << 32):
        # int16 operands whose sums float32 cannot hold (in K chunks worth a BLAS call): exact integer sums
        # at several times float64 BLAS's rate (two vpdpwssd streams, b split into high and low bytes)
        last_path = "vnni16"
        out = _vnni_sums(a3, b3, threads)
    elif min(exact_k64, kk) >= min(kk, _MIN_BLAS_CHUNK) and max(amax, bmax) <= 1 << 53:
        ftype = np.float32 if f32 else np.float64
        exact_k = max(1, min(kk, exact_k32 if ftype is np.float32 else exact_k64))
        last_path = f"blas{np.dtype(ftype).itemsize * 8}"
        # float copies of a and b: K in chunks when they would exceed the temporaries' limit or the float
        # type's exact range (each chunk's sum is exact; their total is added in int64)
        per_k = (nb * m + b3.shape[0] * n) * np.dtype(ftype).itemsize
        limit = _temp_limit(a3, b3)
        kc = max(kk, 1) if per_k * kk <= limit else max(_MIN_K_CHUNK, limit // per_k)
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
        last_path = "int64"
        out = _mul32_sums(a3, b3, rpb, threads)
    else:
        last_path = "int64"
        last_int64_kernel = "wrap64"
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
    global last_int64_kernel
    nb, m, kk = a3.shape
    nbb, _, n = b3.shape
    sw = _k.mul32_slab_width()
    nblk, full = -(-n // sw), n // sw
    a_view = a3.dtype == np.int32 and a3.flags.c_contiguous
    per_k = (0 if a_view else nb * m * 4) + nbb * nblk * sw * 8
    limit = _temp_limit(a3, b3)
    kc = max(kk, 1) if per_k * kk <= limit else max(_MIN_K_CHUNK, limit // per_k)
    out = np.empty((nb * m, n), np.int64)
    level = _MUL32_LEVEL
    last_int64_kernel = "mul32" if level else "mul32-portable"
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
UNCOUNTED = "uncounted"


def _accumulate(a3, b3, fa: Format, fb: Format, acc, init, r: Rounding, o: Overflow, order: str,
                at_end: bool, threads, op: str, init_shape, to_internal, a_rng=None, count=True):
    """Per-add accumulation of a3 [B, M, K] @ b3 [1 or B, K, N] -> (codes, counts, acc, exact range).

    ``codes`` and ``counts`` are [B, M, N] (``counts`` is None when no add can overflow, ``UNCOUNTED``
    when ``count`` is false: then wrapping is the exact sum reduced once, see :func:`matmul`);
    ``exact range`` is (min, max) of the exact sums when an overflow log is active and known.

    ``init`` (None, FixedArray or raw codes) is broadcast to the caller's output shape
    ``init_shape`` and brought to the internal [B, M, N] layout by ``to_internal`` (a view: broadcast
    starts stay unmaterialised until a kernel needs them).  ``a_rng``: bounds (lo, hi) known to hold
    every code of ``a3`` (default: its min and max); a wider range only picks a wider, equally exact kernel.
    """
    nb, m, kk = a3.shape
    n = b3.shape[2]
    frac_p = fa.frac + fb.frac
    acc = _parse_acc(acc, frac_p)
    init3 = _init_codes(init, init_shape, frac_p if acc is None else acc.frac)
    if init3 is not None:
        init3 = to_internal(init3)
        if init3.dtype != np.int64:
            init3 = init3.astype(np.int64)
    if a_rng is None:
        a_rng = _data_range(a3)
    b_rng = _data_range(b3)
    i_rng = _data_range(init3) if init3 is not None else (0, 0)
    if acc is None:             # exact accumulator sized from the formats
        p_lo, p_hi = _product_range((fa.min_code, fa.max_code), (fb.min_code, fb.max_code), 0)
        acc = _exact_format(min(i_rng[0], 0) + kk * min(p_lo, 0), max(i_rng[1], 0) + kk * max(p_hi, 0),
                            frac_p, f"K={kk} products of {fa} x {fb}", op)
    if o is Overflow.WRAP_SIGN_MAGNITUDE and not acc.signed:
        raise ValueError(f"overflow='wrap_sign_magnitude' needs a signed accumulator, got {acc}")
    shift = acc.frac - frac_p
    if shift < -63:
        raise ValueError(f"{op}: products have {-shift} more fraction bits than the accumulator {acc}; "
                         f"at most 63 can be rounded away")
    pf = max(abs(x) for x in _product_range((fa.min_code, fa.max_code), (fb.min_code, fb.max_code),
                                            max(shift, 0)))
    if pf > _I63:
        raise ValueError(f"{op}: products of {fa} x {fb} aligned to the accumulator {acc} need more than "
                         f"64 bits (the kernels form every product on 64 bits); use narrower operand "
                         f"formats or fewer accumulator fraction bits")
    if init3 is not None and (i_rng[0] < acc.min_code or i_rng[1] > acc.max_code):
        raise ValueError(f"{op}: init codes {i_rng[0]}..{i_rng[1]} do not fit the accumulator {acc}")
    nthreads = _threads(threads, nb * m * max(kk, 1) * n)
    rpb = m if b3.shape[0] > 1 else nb * m

    lo_acc, hi_acc = acc.min_code, acc.max_code
    if o is Overflow.SATURATE_SYMMETRIC and acc.signed:
        lo_acc = -hi_acc
    p_lo, p_hi = _product_range(a_rng, b_rng, shift)
    s_lo = min(i_rng[0], 0) + kk * min(p_lo, 0)          # every partial sum (any order) lies in
    s_hi = max(i_rng[1], 0) + kk * max(p_hi, 0)          # [s_lo, s_hi]
    never = lo_acc <= s_lo and s_hi <= hi_acc
    counts = exact_range = None
    done = False
    count = count or _overflow_log_active()         # the overflow log always gets its counts
    if not count and not never and o is Overflow.WRAP and shift >= 0 and not (
            order == "sequential" and not at_end and _fits_simd16(acc, a_rng, b_rng, p_lo, p_hi, shift)):
        # two's-complement wrapping commutes with summation: the sum modulo 2^64 (BLAS where exact),
        # reduced modulo 2^W once, is the per-add (or adder-tree, or end-fitted) wrapped accumulator.
        # (A 16-bit register on int16 operands keeps its per-add loop: without counters it is one
        # vpmullw and one vpaddw per 32 adds, faster than BLAS.)
        out = _wrap_codes(_exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, nthreads, mod64=True), acc)
        return out, UNCOUNTED, acc, None
    if shift >= 0 and -_I63 <= s_lo and s_hi <= _I63 and (never or at_end):
        out = _exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, nthreads)
        if _overflow_log_active():
            exact_range = _data_range(out)
        done = never or o is not Overflow.WRAP_SIGN_MAGNITUDE
        if not never and done:
            out, bad = _fit_numpy(out, acc, o)
            counts = bad.astype(np.int64)
    if not done:
        out, counts = _per_add(a3, b3, rpb, init3, acc, shift, r, o, order, at_end,
                               a_rng, b_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc, nthreads, count)
        if _overflow_log_active() and shift >= 0 and -_I63 <= s_lo and s_hi <= _I63:
            exact_range = _data_range(_exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, nthreads))
    if not count:
        counts = UNCOUNTED
    return out, counts, acc, exact_range


def _count_scratch(rows: int, n: int) -> np.ndarray:
    """Per-output overflow counts [rows, n] in a per-thread reusable buffer.

    Fresh large arrays cost a page fault per 4 KiB on first touch; the counts are only summed
    (or copied when the caller wants them), so one buffer per thread is reused.
    """
    if rows * n * 8 > _COUNT_SCRATCH_BYTES:              # not kept alive after the call
        return np.empty((rows, n), np.int64)
    buf = getattr(_TLS, "counts", None)
    if buf is None or buf.size < rows * n:
        buf = _TLS.counts = np.empty(max(rows * n, 1 << 12), np.int64)
    return buf[:rows * n].reshape(rows, n)


def _scratch(name: str, shape, dtype) -> np.ndarray:
    """An uninitialised temporary of ``shape``/``dtype`` from a per-thread buffer named ``name``.

    Fresh arrays of a few hundred KiB can cost a page fault per 4 KiB every call (the allocator
    returns them to the system on free); internal temporaries that die before the public
    function returns reuse one buffer per name and thread instead.  Large ones are allocated, except
    inside a chunk loop (``_TLS.arena`` set by :func:`_run_sequential`), whose chunks share them.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes > _SCRATCH_BYTES:
        bufs = getattr(_TLS, "arena", None)
        if bufs is None:
            return np.empty(shape, dtype)
    else:
        bufs = _TLS.__dict__.setdefault("scratch", {})
    buf = bufs.get(name)
    if buf is None or buf.size < nbytes:
        buf = bufs[name] = np.empty(max(nbytes, 1 << 16), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def _lane_buffers(a3, b3, init3, shift, dtype, counts=True, transposed=False, out=None, init_dtype=None):
    """Operands (lane type) and int64 outputs of the SIMD kernels: a [R, K], packed b, init, out, cnt.

    ``transposed``: the output is a temporary (the caller transposes it into a fresh array);
    ``out``: an existing [R, N] int64 output to reuse; ``init_dtype``: lane type of the start values
    (default ``dtype``)."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    a2 = a3.reshape(nb * m, kk)
    if a2.dtype != dtype or not a2.flags.c_contiguous:
        a2 = _scratch("lane_a", a2.shape, dtype)
        np.copyto(a2, a3.reshape(nb * m, kk), casting="unsafe")   # the caller checked the lanes hold a
    bs = _pack_slabs(b3, dtype, 1 << shift)
    idt = dtype if init_dtype is None else init_dtype
    if init3 is None:
        ini = np.empty((0, n), idt)
    else:
        ini = _scratch("lane_init", (nb * m, n), idt)
        np.copyto(ini, init3.reshape(nb * m, n), casting="unsafe")
    cnt = _count_scratch(nb * m, n) if counts else np.empty((0, n), np.int64)
    if out is None:
        out = _scratch("out_t", (nb * m, n), np.int64) if transposed else np.empty((nb * m, n), np.int64)
    return a2, bs, ini, out, cnt


def _transpose_wins(b3, rows: int, n: int, shift: int, nthreads: int = 1) -> bool:
    """Whether the SIMD kernels should run the transposed problem ``out.T = b.T @ a.T``.

    The kernels hold ``FXA_JB`` output columns per slab (64), so a layer with few output channels
    (a conv with 8 filters, a dense layer with 10 outputs) fills a few of the lanes; transposed,
    the many rows (pixels, images) become the columns.  Each output still sees the same products
    in the same k order, so the bits (codes and overflow counts) are identical.  Chosen when it
    needs less than half the lane work per thread (threads take chunks of 32 rows).
    """
    jb = _k.slab_width()
    if b3.shape[0] != 1 or shift != 0 or n % jb == 0:
        return False
    plain = -(-n // jb) * jb * rows / min(nthreads, -(-rows // 32))
    transposed = -(-rows // jb) * jb * n / min(nthreads, -(-n // 32))
    return plain > 2 * transposed


def _transposed(a3, b3, init3):
    """Operands of the transposed problem: a' = b.T [1, N, K], b' = a.T [1, K, R], init' [N, R]."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    rows = nb * m
    it = None if init3 is None else init3.reshape(rows, n).T[None]
    return b3[0].T[None], a3.reshape(1, rows, kk).transpose(0, 2, 1), it


def _per_add(a3, b3, rpb, init3, acc, shift, r, o, order, at_end, a_rng, b_rng, p_lo, p_hi, i_rng,
             lo_acc, hi_acc, nthreads, count=True):
    """Per-add kernels: ``(codes, counts)`` [B, M, N]; ``counts`` may be None when ``count`` is false."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    if not at_end and _transpose_wins(b3, nb * m, n, shift, nthreads):
        at, bt, it = _transposed(a3, b3, init3)
        res = _simd(at, bt, n, it, acc, shift, o, order, b_rng, a_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc,
                    nthreads, transposed=True, count=count)
        if res is not None:
            out = np.empty((nb * m, n), np.int64)
            out[...] = res[0].T
            return out.reshape(nb, m, n), None if res[1] is None else res[1].T.reshape(nb, m, n)
    res = _simd(a3, b3, rpb, init3, acc, shift, o, order, a_rng, b_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc,
                nthreads, count=count) if not at_end else None
    if res is not None:
        return res[0].reshape(nb, m, n), None if res[1] is None else res[1].reshape(nb, m, n)
    return _generic(a3, b3, rpb, init3, acc, shift, r, o, order, at_end, nthreads)


def _fits_simd16(acc, a_rng, b_rng, p_lo, p_hi, shift) -> bool:
    """Whether the AVX-512BW 16-bit kernel takes a (signed, <= 16-bit) wrapping accumulator of these data
    in its loop without counters (``count=False``)."""
    return (_SIMD512 and acc.signed and acc.word <= 16 and shift >= 0
            and min(a_rng[0], b_rng[0] << shift, p_lo) >= -(1 << 15)
            and max(a_rng[1], b_rng[1] << shift, p_hi) < 1 << 15)


def _simd(a3, b3, rpb, init3, acc, shift, o, order, a_rng, b_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc,
          nthreads, transposed=False, count=True):
    """The 16/32/64-bit-lane sequential or adder-tree kernels: ``(out, counts)`` [R, N], or None when
    no lane width holds the data (or the mode needs the generic kernel).  ``count`` false: counts may
    be skipped (None) where a kernel has a loop without them (the AVX-512BW 16/32-bit kernels)."""
    global last_path
    kk = a3.shape[2]
    fast = _FAST_MODES.get(o, -1)
    if fast is None:
        fast = _k.FAST_WRAP_SIGNED if acc.signed else _k.FAST_WRAP_UNSIGNED
    head = max(abs(acc.min_code), acc.max_code, abs(i_rng[0]), abs(i_rng[1])) + max(abs(p_lo), abs(p_hi))
    b_max = max(abs(b_rng[0]), abs(b_rng[1])) << max(shift, 0)
    a_max = max(abs(a_rng[0]), abs(a_rng[1]))
    if fast != -1 and order == "sequential" and shift >= 0:
        b_lo, b_hi = b_rng[0] << shift, b_rng[1] << shift
        in16 = min(a_rng[0], b_lo) >= -(1 << 15) and max(a_rng[1], b_hi) < 1 << 15   # int16 operands
        # (path name, operand lanes, accumulator lanes, kernel, usable, counts optional)
        lanes = [
            # 16-bit lanes, native saturating adds: any |acc + p| (see the kernel), products in int16
            ("simd16", np.int16, np.int16, _k.mac_fast16,
             _SIMD16 and acc.signed and acc.word <= 16 and fast != _k.FAST_WRAP_UNSIGNED and in16
             and p_lo >= -(1 << 15) and p_hi < 1 << 15, _SIMD512),
            # 32-bit lanes from int16 operands (exact vpmaddwd products); a full signed 32-bit register
            # may wrap in the lanes (the kernel tests the signs), narrower ones must not
            ("simd32", np.int16, np.int32, _k.mac_fast32m,
             _SIMD512 and in16 and acc.word <= 32 and kk <= _I32
             and (head <= _I32 or (acc.signed and acc.word == 32 and lo_acc == acc.min_code
                                   and fast != _k.FAST_WRAP_UNSIGNED)), True),
            ("simd32w", np.int32, np.int32, _k.mac_fast,
             head <= _I32 and a_max <= _I32 and b_max <= _I32 and kk <= _I32, False),
            ("simd64", np.int64, np.int64, _k.mac_fast,
             head <= _I63 and a_max <= _I63 and b_max <= _I63 and kk <= _I32, False),
        ]
        for name, dtype, idt, kernel, usable, optional in lanes:
            if usable:
                last_path = name
                return _run_sequential(kernel, a3, b3, rpb, init3, shift, dtype, fast, lo_acc, hi_acc,
                                       8 * np.dtype(idt).itemsize - acc.word, nthreads, transposed=transposed,
                                       init_dtype=idt, counts=count or not optional)
    if fast != -1 and order == "tree" and shift >= 0:
        # a tree node adds two products or accumulator codes: twice the largest must fit the lanes
        node = 2 * max(max(abs(p_lo), abs(p_hi)), abs(acc.min_code), acc.max_code, abs(i_rng[0]), abs(i_rng[1]))
        for dtype, limit in ((np.int32, _I32), (np.int64, _I63)):
            # the tree holds all K products of FXA_JB columns per thread: no K chunks; when that and
            # the padded slabs exceed the temporaries' limit, the generic kernel (K + 1 per thread) runs
            slabs = (nthreads * max(kk, 1) + -(-b3.shape[2] // _k.slab_width()) * kk) * _k.slab_width()
            if slabs * np.dtype(dtype).itemsize > _temp_limit(a3, b3, init3):
                break
            if node <= limit and a_max <= limit and b_max <= limit and kk <= _I32:
                bits = 8 * np.dtype(dtype).itemsize
                a2, bs, ini, out, cnt = _lane_buffers(a3, b3, init3, shift, dtype, transposed=transposed)
                scratch = np.empty((nthreads, max(kk, 1) * _k.slab_width()), dtype)
                last_path = f"tree{bits}"
                _k.tree_fast(a2, bs, ini, out, cnt, scratch, rpb, fast, dtype(lo_acc), dtype(hi_acc),
                             bits - acc.word, nthreads)
                return out, cnt
    return None


def _generic(a3, b3, rpb, init3, acc, shift, r, o, order, at_end, nthreads):
    """The generic int128 kernel (any width, mode, rounding, order)."""
    global last_path
    nb, m, kk = a3.shape
    n = b3.shape[2]
    rows = nb * m
    scratch = np.empty((nthreads, kk + 1), np.int64)
    last_path = "generic"
    args = (shift, r.code, acc.word, acc.signed, o.code, 1 if order == "tree" else 0, at_end, nthreads)
    # int64 copies of a [R, K] and b.T [B, N, K]: in blocks of rows (whole batches when b is batched)
    # and of columns when they would exceed the temporaries' limit (outputs are independent)
    limit, per = _temp_limit(a3, b3, init3) // 2, 8 * max(kk, 1)      # half for a, half for b
    step = 1 if b3.shape[0] == 1 else m
    rc = rows if rows * per <= limit else max(step, limit // per // step * step)
    nc = n if n * per * b3.shape[0] <= limit else max(1, limit // (per * b3.shape[0]))
    a_rows = a3.reshape(rows, kk)
    i_rows = None if init3 is None else init3.reshape(rows, n)
    if rc >= rows and nc >= n:
        out, cnt = np.empty((rows, n), np.int64), _count_scratch(rows, n)
        ini = np.empty((0, n), np.int64) if i_rows is None else np.ascontiguousarray(i_rows, dtype=np.int64)
        _k.mac_generic(np.ascontiguousarray(a_rows, dtype=np.int64),
                       np.ascontiguousarray(np.swapaxes(b3, 1, 2), dtype=np.int64), ini, out, cnt, scratch,
                       rpb, *args)
        return out.reshape(nb, m, n), cnt.reshape(nb, m, n)
    out, cnt = np.empty((rows, n), np.int64), np.empty((rows, n), np.int64)
    for c0 in range(0, n, nc):
        c1 = min(n, c0 + nc)
        bt = np.ascontiguousarray(np.swapaxes(b3[:, :, c0:c1], 1, 2), dtype=np.int64)
        for r0 in range(0, rows, rc):
            r1 = min(rows, r0 + rc)
            ini = np.empty((0, c1 - c0), np.int64) if i_rows is None else \
                np.ascontiguousarray(i_rows[r0:r1, c0:c1], dtype=np.int64)
            o_c, c_c = np.empty((r1 - r0, c1 - c0), np.int64), np.empty((r1 - r0, c1 - c0), np.int64)
            _k.mac_generic(np.ascontiguousarray(a_rows[r0:r1], dtype=np.int64),
                           bt if b3.shape[0] == 1 else bt[r0 // m:r1 // m], ini, o_c, c_c, scratch,
                           r1 - r0 if b3.shape[0] == 1 else m, *args)
            out[r0:r1, c0:c1], cnt[r0:r1, c0:c1] = o_c, c_c
    return out.reshape(nb, m, n), cnt.reshape(nb, m, n)


def _reshaped(counts, shape):
    return counts if counts is None or isinstance(counts, str) else counts.reshape(shape)


def _finish(out, counts, acc: Format, o: Overflow, op: str, per_output: bool, exact_range=None):
    """Wrap codes into a FixedArray, log, raise for overflow='error'.

    The overflow log gets the range of the exact sums (``exact_range``, codes) when known,
    else of the results.
    """
    if isinstance(counts, str):                 # UNCOUNTED (count=False): nothing known about overflows
        res = FixedArray(out, acc, _trusted=True)
        res.overflows = None
        return res
    total = 0 if counts is None else int(counts.sum(dtype=np.int64))
    if _overflow_log_active():
        lo, hi = exact_range if exact_range is not None else _data_range(out)
        record_overflow(op, total, lo * acc.lsb, hi * acc.lsb)
    if o is Overflow.ERROR and total:
        first = np.unravel_index(int(np.argmax(counts.reshape(-1) > 0)), counts.shape)
        raise ValueError(f"{op}: {total} add(s) overflowed the accumulator {acc} "
                         f"[{acc.min_code}, {acc.max_code}] (first at output index "
                         f"{tuple(int(i) for i in first)}) and overflow='error'; use a wider acc")
    res = FixedArray(out, acc, overflows=total, _trusted=True,
                     overflow_mask=(counts > 0 if counts is not None else np.zeros(out.shape, bool))
                     if per_output else None)
    if not per_output:
        return res
    return res, np.zeros(out.shape, np.int64) if counts is None else np.array(counts, np.int64)


_COMMON_DOC = """
    acc : Format, str, int or None
        Accumulator format.  An int ``B`` means a signed ``B``-bit register with the products'
        LSB (``Format(B, f_a + f_b)``; for integer inputs ``Format.integer(B)``).  ``None``:
        exact, wide enough for every possible sum of these formats (error above 64 bits).
    overflow : str
        ``saturate``, ``wrap``, ``saturate_symmetric``, ``saturate_zero``,
        ``wrap_sign_magnitude`` or ``error`` (saturate, then raise ``ValueError`` naming the
        number of overflowing adds and the first output index); aliases as in
        :class:`~fxpsim.fixed.Overflow`.
    rounding : str
        How a product is rounded to the accumulator LSB when the accumulator has fewer
        fraction bits (any deterministic :class:`~fxpsim.fixed.Rounding`).
    order : {"sequential", "tree"}
        ``sequential``: :math:`k = 0, \\\\dots, K-1` (MAC unit, systolic array).  ``tree``:
        balanced pairwise adder tree, every node at accumulator width, then ``+ init``.
    overflow_at : {"every", "end"}
        Fit after every add, or sum exactly and fit once (a wide adder).
    init : FixedArray, int array or None
        Accumulator start value (e.g. a preloaded bias), broadcast to the output; raw codes of
        the accumulator format, or a FixedArray with at most the accumulator's fraction bits.
    per_output : bool
        Also return an int64 array of per-output overflow counts: ``(result, counts)``.
    threads : int or None
        Threads over independent output rows (None: all cores for large problems, one for
        small ones).  Never changes a bit.  The exact BLAS path uses numpy's BLAS threads.
        At most ``THREADS_PER_CPU_LIMIT`` (4) times ``os.cpu_count()`` (ValueError above).
    count : bool
        Count the adds that overflowed (default).  ``count=False`` returns the same codes with
        ``.overflows = None`` and costs less:

        * ``overflow="wrap"``: two's-complement wrapping commutes with summation, so the
          per-add (or adder-tree, or end-fitted) wrapped accumulator is the exact sum reduced
          modulo :math:`2^W` once.  The sum is computed modulo :math:`2^{64}` by float32/float64
          BLAS (exact in K chunks whose partial sums stay within :math:`2^{24}` / :math:`2^{53}`),
          exact int16 sums (AVX512-VNNI), for int32-range operands a register-blocked AVX-512
          ``VPMULDQ`` kernel (about 1.4-1.7x float64 BLAS on one thread), or an unsigned 64-bit
          kernel for wider operands (about 0.4-0.9x BLAS): BLAS speed or better instead of the
          per-add kernel's.
        * saturating modes: the per-add kernel still runs (saturation does not commute), on its
          loops without counters where it has them (AVX-512BW 16/32-bit lanes: about 2x / 1.5x
          faster than counting).

        With ``count=True`` every add is fitted and tested in the per-add kernels (16-bit lanes:
        one mask compare and one masked add per 32 adds; 32-bit lanes: per 16 adds), also for wrap.
        Not with ``per_output=True`` or ``overflow="error"`` (both need the counts).  Inside an
        :func:`~fxpsim.core.fixed.overflow_log` the counts are always taken.

    Returns
    -------
    FixedArray (or ``(FixedArray, ndarray)`` with ``per_output=True``)
        Codes in the accumulator format; ``.overflows`` = adds that overflowed (None with
        ``count=False``).
"""


def matmul(a, b, acc=None, *, overflow="saturate", rounding="half_up", order="sequential",
           overflow_at="every", init=None, per_output=False, threads=None, count=True):
    """Matrix product through a finite accumulator, with numpy ``matmul`` broadcasting.

    .. math::

        y_{\\dots ij} = \\mathrm{fit}\\Big(\\cdots \\mathrm{fit}\\big(\\mathrm{init}_{\\dots ij}
        + \\mathrm{round}(a_{\\dots i0} b_{\\dots 0j})\\big) \\cdots
        + \\mathrm{round}(a_{\\dots i,K-1} b_{\\dots K-1,j})\\Big)

    Parameters
    ----------
    a, b : FixedArray or integer ndarray
        ``[..., M, K]`` and ``[..., K, N]`` (1-D operands as in :func:`numpy.matmul`).
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    ca, fa = _operand(a, "a")
    cb, fb = _operand(b, "b")
    if ca.ndim == 0 or cb.ndim == 0:
        raise ValueError("matmul: operands must have at least 1 dimension (use * for scalars)")
    a2 = ca[None, :] if ca.ndim == 1 else ca
    b2 = cb[:, None] if cb.ndim == 1 else cb
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: shapes {ca.shape} and {cb.shape} do not align: a has K={a2.shape[-1]} "
                         f"(last axis), b has K={b2.shape[-2]} ({'first' if cb.ndim == 1 else 'second-to-last'} axis)")
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dimensions of {ca.shape} and {cb.shape} do not broadcast") from None
    m, kk, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    nb = int(np.prod(batch, dtype=np.int64))
    user = batch + ((m,) if ca.ndim > 1 else ()) + ((n,) if cb.ndim > 1 else ())
    a3 = np.broadcast_to(a2, batch + (m, kk)).reshape(nb, m, kk)
    if int(np.prod(b2.shape[:-2], dtype=np.int64)) == 1:
        b3 = b2.reshape(1, kk, n)
    else:
        b3 = np.broadcast_to(b2, batch + (kk, n)).reshape(nb, kk, n)
    out, counts, accf, rng = _accumulate(a3, b3, fa, fb, acc, init, r, o, order, overflow_at == "end",
                                         threads, "matmul", user, lambda t: t.reshape(nb, m, n), count=count)
    return _finish(out.reshape(user), _reshaped(counts, user), accf, o, "matmul", per_output, rng)


def dot(a, b, acc=None, *, overflow="saturate", rounding="half_up", order="sequential",
        overflow_at="every", init=None, per_output=False, threads=None, count=True):
    """Inner product of two 1-D vectors through a finite accumulator (a 0-d result).

    .. math:: y = \\mathrm{fit}(\\cdots\\mathrm{fit}(\\mathrm{init} + \\mathrm{round}(a_0 b_0))
              \\cdots + \\mathrm{round}(a_{K-1} b_{K-1}))

    Parameters
    ----------
    a, b : FixedArray or integer ndarray, 1-D of equal length
    {common}"""
    for name, v in (("a", a), ("b", b)):
        shape = v.shape if isinstance(v, FixedArray) else np.shape(v)
        if len(shape) != 1:
            raise ValueError(f"dot: {name} must be 1-D, got shape {shape}; use matmul for matrices")
    return matmul(a, b, acc, overflow=overflow, rounding=rounding, order=order, overflow_at=overflow_at,
                  init=init, per_output=per_output, threads=threads, count=count)


def _positive_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 1


def _pair(value, name: str, op: str) -> tuple[int, int]:
    """A positive int or a pair of them (stride, dilation), checked before any work."""
    if _positive_int(value):
        return int(value), int(value)
    try:
        vals = tuple(value) if not isinstance(value, (str, bytes)) else ()
    except TypeError:                                   # 1.5, None, ...
        vals = ()
    if len(vals) != 2 or not all(_positive_int(v) for v in vals):
        raise ValueError(f"{op}: {name} must be a positive int or a pair of them, got {value!r}")
    return int(vals[0]), int(vals[1])


def _check_groups(groups, op: str) -> None:
    if not _positive_int(groups):
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")


def _same_pad(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _paddings(padding, hw, khw, strides, dils, op: str):
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return ((0, 0), (0, 0))
        if mode == "SAME":
            return tuple(_same_pad(*t) for t in zip(hw, khw, strides, dils))
        raise ValueError(f"{op}: padding must be 'VALID', 'SAME' or ((top, bottom), (left, right)), got {padding!r}")
    try:
        pads = tuple((int(p[0]), int(p[1])) for p in padding)
        ok = len(pads) == 2 and all(len(p) == 2 for p in padding) and min(min(p) for p in pads) >= 0
    except (TypeError, ValueError, IndexError):
        ok = False
    if not ok:
        raise ValueError(f"{op}: padding must be 'VALID', 'SAME' or ((top, bottom), (left, right)) of "
                         f"non-negative ints, got {padding!r}")
    return pads


def _conv(cx, fx, cw, fw, acc, stride, padding, dilation, groups, r, o, order, at_end, init, threads, op,
          one_d: bool, count=True):
    """conv2d on codes (NHWC x HWIO) via im2col and the grouped, batched accumulation."""
    if cx.ndim != 4 or cw.ndim != 4:
        raise ValueError(f"{op}: x must be NHWC (4-D) and w [KH, KW, Cin/groups, Cout] (4-D), got shapes "
                         f"{cx.shape} and {cw.shape}")
    nbatch, h, wd, cin = cx.shape
    kh, kw, cg, cout = cw.shape
    _check_groups(groups, op)
    if cin % groups or cout % groups or cg != cin // groups:
        raise ValueError(f"{op}: with groups={groups}, x has {cin} channels and w expects Cin/groups={cg} "
                         f"input and {cout} output channels; need Cin = groups*{cg} and Cout divisible by groups")
    strides, dils = _pair(stride, "stride", op), _pair(dilation, "dilation", op)
    pads = _paddings(padding, (h, wd), (kh, kw), strides, dils, op)
    oh, ow = ((size + p[0] + p[1] - d * (k - 1) - 1) // s + 1
              for size, p, k, s, d in zip((h, wd), pads, (kh, kw), strides, dils))
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: the kernel ({kh}x{kw}, dilation {dils}) does not fit the padded input "
                         f"({h}x{wd}, padding {pads}); output would be {oh}x{ow}")
    a_rng = _data_range(cx)
    if any(pads[0] + pads[1]):
        a_rng = (min(a_rng[0], 0), max(a_rng[1], 0))            # padded taps are zeros
    dtype = cx.dtype
    if dtype.itemsize > 2:                                     # narrow lanes: less memory traffic
        dtype = next(t for t in (np.int16, np.int32, np.int64)
                     if np.iinfo(t).min <= a_rng[0] and a_rng[1] <= np.iinfo(t).max)
    xp = np.pad(cx, ((0, 0), pads[0], pads[1], (0, 0)))
    # one strided copy: windows [N, OH, OW, C, KH, KW] -> patches [N, OH, OW, KH, KW, C]
    windows = np.lib.stride_tricks.sliding_window_view(
        xp, ((kh - 1) * dils[0] + 1, (kw - 1) * dils[1] + 1), axis=(1, 2))
    windows = windows[:, ::strides[0], ::strides[1], :, ::dils[0], ::dils[1]][:, :oh, :ow]
    patches = _scratch("patches", (nbatch, oh, ow, kh, kw, cin), dtype)
    np.copyto(patches, windows.transpose(0, 1, 2, 4, 5, 3), casting="unsafe")
    npos, cog, kk = nbatch * oh * ow, cout // groups, kh * kw * cg
    a3 = patches.reshape(npos, kh, kw, groups, cg).transpose(3, 0, 1, 2, 4).reshape(groups, npos, kk)
    b3 = cw.reshape(kh, kw, cg, groups, cog).transpose(3, 0, 1, 2, 4).reshape(groups, kk, cog)
    user = (nbatch, ow, cout) if one_d else (nbatch, oh, ow, cout)

    def to_internal(t):
        return t.reshape(npos, groups, cog).transpose(1, 0, 2)

    out, counts, accf, rng = _accumulate(a3, b3, fx, fw, acc, init, r, o, order, at_end, threads, op, user,
                                         to_internal, a_rng, count=count)
    out = out.transpose(1, 0, 2).reshape(user)
    counts = counts if counts is None or isinstance(counts, str) else counts.transpose(1, 0, 2).reshape(user)
    return out, counts, accf, rng


def conv2d(x, w, acc=None, *, stride=1, padding="VALID", dilation=1, groups=1, overflow="saturate",
           rounding="half_up", order="sequential", overflow_at="every", init=None, per_output=False,
           threads=None, count=True):
    """2-D convolution (cross-correlation, as TensorFlow) through a finite accumulator.

    .. math::

        y_{n,p,q,o} = \\mathrm{acc}_{(i,j,c)}\\Big(\\mathrm{init}_{n,p,q,o};\\;
        x_{n,\\,p s_h + i d_h - t,\\, q s_w + j d_w - l,\\, g C_g + c}\\; w_{i,j,c,o}\\Big)

    with :math:`g = \\lfloor o / (C_{out}/G) \\rfloor`; the reduction runs over
    :math:`(i, j, c)` in row-major order (``i`` slowest, ``c`` fastest), padded taps included
    as zero products.  Depthwise: ``groups = Cin`` and ``w`` of shape ``[KH, KW, 1, Cin*mult]``
    (TensorFlow's ``[KH, KW, Cin, mult]`` reshaped), output channel ``c*mult + m``.

    Parameters
    ----------
    x : FixedArray or integer ndarray, NHWC
    w : FixedArray or integer ndarray, ``[KH, KW, Cin/groups, Cout]`` (HWIO)
    stride, dilation : int or (int, int)
    padding : "VALID", "SAME" (TensorFlow's split, extra row/column at the bottom/right) or
        ``((top, bottom), (left, right))``
    groups : int
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    _pair(stride, "stride", "conv2d"), _pair(dilation, "dilation", "conv2d"), _check_groups(groups, "conv2d")
    cx, fx = _operand(x, "x")
    cw, fw = _operand(w, "w")
    out, counts, accf, rng = _conv(cx, fx, cw, fw, acc, stride, padding, dilation, groups, r, o, order,
                                   overflow_at == "end", init, threads, "conv2d", False, count)
    return _finish(out, counts, accf, o, "conv2d", per_output, rng)


def conv1d(x, w, acc=None, *, stride=1, padding="VALID", dilation=1, groups=1, overflow="saturate",
           rounding="half_up", order="sequential", overflow_at="every", init=None, per_output=False,
           threads=None, count=True):
    """1-D convolution (NWC input, ``[K, Cin/groups, Cout]`` weights) through a finite accumulator.

    .. math:: y_{n,q,o} = \\mathrm{acc}_{(j,c)}\\big(\\mathrm{init}_{n,q,o};\\;
              x_{n,\\,q s + j d - l,\\, g C_g + c}\\, w_{j,c,o}\\big)

    Same conventions as :func:`conv2d`; ``padding`` is "VALID", "SAME" or ``(left, right)``.

    Parameters
    ----------
    x : FixedArray or integer ndarray, NWC
    w : FixedArray or integer ndarray, ``[K, Cin/groups, Cout]``
    stride, dilation : int
    padding : "VALID", "SAME" or ``(left, right)``
    groups : int
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    for name, value in (("stride", stride), ("dilation", dilation)):
        if not _positive_int(value):
            raise ValueError(f"conv1d: {name} must be a positive int, got {value!r}")
    _check_groups(groups, "conv1d")
    cx, fx = _operand(x, "x")
    cw, fw = _operand(w, "w")
    if cx.ndim != 3 or cw.ndim != 3:
        raise ValueError(f"conv1d: x must be NWC (3-D) and w [K, Cin/groups, Cout] (3-D), got shapes "
                         f"{cx.shape} and {cw.shape}")
    if not isinstance(padding, str):
        try:
            padding = ((0, 0), tuple(padding))
        except TypeError:
            raise ValueError(f"conv1d: padding must be 'VALID', 'SAME' or (left, right), got {padding!r}") from None
    out, counts, accf, rng = _conv(cx[:, None], fx, cw[None], fw, acc, (1, int(stride)), padding,
                                   (1, int(dilation)), groups, r, o,
                                   order, overflow_at == "end", init, threads, "conv1d", True, count)
    return _finish(out, counts, accf, o, "conv1d", per_output, rng)


def _axes(axis, ndim: int, op: str):
    if axis is None:
        return tuple(range(ndim))
    try:
        return np.lib.array_utils.normalize_axis_tuple(axis, ndim)
    except (np.exceptions.AxisError, TypeError) as exc:
        raise ValueError(f"{op}: bad axis {axis!r} for a {ndim}-D input ({exc})") from None


def sum(x, axis=None, acc=None, *, overflow="saturate", rounding="half_up", order="sequential",
        overflow_at="every", init=None, per_output=False, threads=None, count=True):
    """Sum over ``axis`` through a finite accumulator (each element is one add).

    .. math:: y = \\mathrm{fit}(\\cdots\\mathrm{fit}(\\mathrm{init} + \\mathrm{round}(x_0))
              \\cdots + \\mathrm{round}(x_{K-1}))

    Parameters
    ----------
    x : FixedArray or integer ndarray
    axis : None, int or tuple of ints
        Axes to reduce (None: all); reduced elements are added in C order.
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    cx, fx = _operand(x, "x")
    axes = _axes(axis, cx.ndim, "sum")
    keep = [i for i in range(cx.ndim) if i not in axes]
    user = tuple(cx.shape[i] for i in keep)
    kk = int(np.prod([cx.shape[i] for i in axes], dtype=np.int64))
    rows = int(np.prod(user, dtype=np.int64))
    a3 = np.transpose(cx, keep + list(axes)).reshape(1, rows, kk)
    ones = np.ones((1, kk, 1), np.int64)
    out, counts, accf, rng = _accumulate(a3, ones, fx, Format(1, 0, False), acc, init, r, o, order,
                                         overflow_at == "end", threads, "sum", user,
                                         lambda t: t.reshape(1, rows, 1), count=count)
    return _finish(out.reshape(user), _reshaped(counts, user), accf, o, "sum", per_output, rng)


def cumsum(x, axis=-1, acc=None, *, overflow="saturate", rounding="half_up", init=None,
           per_output=False, threads=None):
    """Running sums along ``axis`` through a finite accumulator: every step is one output.

    .. math:: y_k = \\mathrm{fit}(y_{k-1} + \\mathrm{round}(x_k)), \\qquad y_{-1} = \\mathrm{init}

    ``init`` broadcasts to ``x``'s shape without ``axis``.  ``per_output=True`` returns
    ``(result, flags)`` where ``flags[..., k]`` is 1 when step ``k`` overflowed (a per-step
    trace, as SystemC's overflow flag).  Other parameters as in :func:`matmul` (cumsum is
    sequential by nature: no ``order`` / ``overflow_at``).
    """
    r, o = _modes(rounding, overflow, "every", "sequential", threads)
    cx, fx = _operand(x, "x")
    if cx.ndim == 0:
        raise ValueError("cumsum: x must have at least 1 dimension")
    (ax,) = _axes(axis, cx.ndim, "cumsum")
    moved = np.moveaxis(cx, ax, -1)
    kk, rows = moved.shape[-1], int(np.prod(moved.shape[:-1], dtype=np.int64))
    accf = _parse_acc(acc, fx.frac)
    frac = fx.frac if accf is None else accf.frac
    init_r = _init_codes(init, moved.shape[:-1], frac)
    i_rng = _data_range(init_r) if init_r is not None else (0, 0)
    if accf is None:
        accf = _exact_format(min(i_rng[0], 0) + kk * min(fx.min_code, 0),
                             max(i_rng[1], 0) + kk * max(fx.max_code, 0), frac, f"{kk} values of {fx}",
                             "cumsum")
    shift = accf.frac - fx.frac
    if shift < -63 or max(abs(fx.min_code), fx.max_code) << max(shift, 0) > _I63:
        raise ValueError(f"cumsum: values of {fx} cannot be aligned to the accumulator {accf} within 64 bits")
    if o is Overflow.WRAP_SIGN_MAGNITUDE and not accf.signed:
        raise ValueError(f"overflow='wrap_sign_magnitude' needs a signed accumulator, got {accf}")
    if init_r is not None and (i_rng[0] < accf.min_code or i_rng[1] > accf.max_code):
        raise ValueError(f"cumsum: init codes {i_rng[0]}..{i_rng[1]} do not fit the accumulator {accf}")
    x2 = np.ascontiguousarray(moved.reshape(rows, kk), dtype=np.int64)
    ini = np.zeros(rows, np.int64) if init_r is None else np.ascontiguousarray(init_r, np.int64).reshape(rows)
    out = np.empty((rows, kk), np.int64)
    flags = np.empty((rows, kk), np.int64)
    _k.cumsum_rows(x2, ini, out, flags, shift, r.code, accf.word, accf.signed, o.code, _threads(threads, x2.size))
    out = np.moveaxis(out.reshape(moved.shape), -1, ax)
    flags = np.moveaxis(flags.reshape(moved.shape), -1, ax)
    return _finish(np.ascontiguousarray(out), np.ascontiguousarray(flags), accf, o, "cumsum", per_output)


for _f in (matmul, dot, conv1d, conv2d, sum):
    _f.__doc__ = _f.__doc__.replace("{common}", _COMMON_DOC.strip("\n").lstrip())
del _f

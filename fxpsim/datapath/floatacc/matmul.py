"""``float_matmul``: a float/block-scaled matrix product on a :class:`~.accumulator.FloatAccumulator`.

.. math::

    D_{ij} = \\mathrm{acc}\\big(C_{ij};\\; A_{i1} B_{1j}, \\dots, A_{iK} B_{Kj}\\big)

with the accumulator's formula; codes in, codes out, with the counts of what happened.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.float_codec import decode, encode
from ...core.float_format import FloatFormat
from .accumulator import FloatAccumulator
from .amd import rd_step
from .blas import blas_exact
from .block_blas import block_blas
from .exact import count_pairs, exact_dot
from .fused import block_step, fused_step
from .kernel import run_c
from .operands import Operand, as_format, split_codes
from .per_add import add_values, per_add_dot

__all__ = ["FloatMatmulResult", "float_matmul", "float_dot"]

_TILE = 1 << 20                      # int64 elements per (rows x N x chunk) temporary


@dataclass(frozen=True)
class FloatMatmulResult:
    """Result codes and counts.

    Attributes
    ----------
    bits : ndarray (M, N) of ``format.dtype``
    format : FloatFormat
    overflows : int -- finite sums rounded to ±Inf or saturated (every chunk/add step counted)
    nans : int -- NaN outputs
    underflows : int -- nonzero sums rounded to zero (every step)
    terms_inexact : int -- products (and C) whose alignment dropped nonzero bits (fused/block)
    """

    bits: np.ndarray
    format: FloatFormat
    overflows: int = 0
    nans: int = 0
    underflows: int = 0
    terms_inexact: int = 0

    def to_float(self) -> np.ndarray:
        return decode(self.bits, self.format)


def _codes(x, fmt: FloatFormat, what: str, shape=None) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        q = encode(arr, fmt, rounding="half_even", overflow="inf" if fmt.has_inf else "saturate")
        back = decode(q.bits, fmt)
        same = (back == arr) | (np.isnan(back) & np.isnan(arr))
        if not same.all():
            raise ValueError(f"float_matmul: {what} holds values that are not exact {fmt} values; "
                             f"pass codes (bit patterns) or values of {fmt}")
        arr = q.bits
    if arr.dtype.kind not in "iu":
        raise TypeError(f"float_matmul: {what} must be integer codes of {fmt}, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or int(arr.max()) >> fmt.bits):
        raise ValueError(f"float_matmul: {what} codes must be in 0..{(1 << fmt.bits) - 1} for {fmt}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"float_matmul: {what} must have shape {shape}, got {arr.shape}")
    return arr.astype(np.int64)


def _check_threads(threads, where: str) -> int:
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"{where}: threads must be an int >= 1, got {threads!r}")
    return int(threads)


def float_matmul(a_codes, b_codes, a_fmt, b_fmt, acc: FloatAccumulator, c=None, *,
                 scale_a=None, scale_b=None, scale_fmt=None, threads: int = 1) -> FloatMatmulResult:
    """``C + A @ B`` on the datapath ``acc``.

    Parameters
    ----------
    a_codes : (M, K) integer codes of ``a_fmt``; b_codes : (K, N) codes of ``b_fmt``
    a_fmt, b_fmt : FloatFormat or name (``e4m3``, ``e5m2``, ``e2m1``, ``float16``, ``bfloat16``, ``tf32``)
    acc : FloatAccumulator
    c : (M, N) codes (or exact values) of ``acc.output``; None: +0 for fused/block/fused_rd
        (the tensor cores' zero), -0 (the IEEE additive identity) for exact/per_add.
    scale_a, scale_b : (M, K / block), (K / block, N) codes of ``scale_fmt`` (``e8m0``, or
        ``ue4m3`` = E4M3 codes whose sign bit is ignored), for ``fused`` with scales and ``block``.
    threads : OpenMP threads of the fused/block C kernel (default 1: on a loaded machine more
        threads only wait; each output is computed by one thread, so the count never changes a bit).

    Returns
    -------
    FloatMatmulResult
    """
    if not isinstance(acc, FloatAccumulator):
        raise TypeError(f"float_matmul: acc must be a FloatAccumulator, got {type(acc).__name__}")
    threads = _check_threads(threads, "float_matmul")
    a_fmt, b_fmt = as_format(a_fmt, "float_matmul a_fmt"), as_format(b_fmt, "float_matmul b_fmt")
    A, B = _codes(a_codes, a_fmt, "a_codes"), _codes(b_codes, b_fmt, "b_codes")
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"float_matmul: shapes {A.shape} @ {B.shape} do not chain (need (M, K) @ (K, N))")
    M, K = A.shape
    N = B.shape[1]
    out = acc.output
    if c is None:
        zero = 0 if acc.kind in ("fused", "block", "fused_rd") else out.sign_bit
        C = np.full((M, N), zero, np.int64)
    else:
        C = _codes(c, out, "c", (M, N))
    scaled = scale_a is not None or scale_b is not None
    if acc.kind == "fused_rd" and scaled:
        raise ValueError("float_matmul: kind 'fused_rd' takes no block scales")
    if acc.block is not None and not scaled:
        raise ValueError(f"float_matmul: the accumulator expects block scales (block={acc.block}): pass "
                         f"scale_a, scale_b and scale_fmt")
    if acc.kind == "block" and not scaled:
        raise ValueError("float_matmul: kind 'block' needs scale_a and scale_b")
    if scaled and acc.kind not in ("fused", "block"):
        raise ValueError(f"float_matmul: block scales are read by kinds 'fused' and 'block', not {acc.kind!r}")
    chunk = acc.chunk or K
    if K % chunk:
        raise ValueError(f"float_matmul: K={K} is not a multiple of the accumulator's chunk={chunk}")
    sa = sb = None
    if scaled:
        if scale_a is None or scale_b is None or scale_fmt is None:
            raise ValueError("float_matmul: scale_a, scale_b and scale_fmt go together")
        sname = scale_fmt.strip().lower() if isinstance(scale_fmt, str) else None
        ignore_sign = sname == "ue4m3"
        sfmt = as_format("e4m3" if ignore_sign else scale_fmt, "float_matmul scale_fmt")
        SA, SB = _codes(scale_a, sfmt, "scale_a"), _codes(scale_b, sfmt, "scale_b")
        if SA.ndim != 2 or SA.shape[0] != M or SB.ndim != 2 or SB.shape[1] != N or SA.shape[1] != SB.shape[0] \
                or SA.shape[1] == 0 or K % SA.shape[1]:
            raise ValueError(f"float_matmul: scale_a {SA.shape} / scale_b {SB.shape} must be (M, K/block), "
                             f"(K/block, N) for A {A.shape}, B {B.shape}")
        block = K // SA.shape[1]
        if acc.block is not None and block != acc.block:
            raise ValueError(f"float_matmul: scales give block {block}, the accumulator says block={acc.block}")
        sa = split_codes(SA, sfmt, acc.zero_exponent, ignore_sign)
        sb = split_codes(SB.T, sfmt, acc.zero_exponent, ignore_sign)     # rows: (N, K/block)
    stats = dict(overflows=0, nans=0, underflows=0, terms_inexact=0)
    if acc.kind == "per_add":
        av, bv = decode(A, a_fmt), decode(B, b_fmt)
        D = per_add_dot(av, bv, C, acc, stats)
    elif acc.kind == "exact":
        D = _exact(A, B, a_fmt, b_fmt, C, acc, stats)
    else:
        D = _chunked(A, B, a_fmt, b_fmt, C, acc, stats, sa, sb, block if scaled else None, threads=threads)
    stats["nans"] = int(np.isnan(decode(D, out)).sum())          # NaN outputs (not steps)
    return FloatMatmulResult(D.astype(out.dtype), out, **stats)


def float_dot(a_codes, b_codes, a_fmt, b_fmt, acc: FloatAccumulator, c=None, *,
              scale_a=None, scale_b=None, scale_fmt=None, threads: int = 1) -> FloatMatmulResult:
    """Batched dot products: ``D[i] = acc(C[i]; a[i, k] * b[i, k])`` for rows ``a``, ``b`` (M, K),
    ``c`` (M,), scales (M, K / block) each -- one output element per row (a tensor-core test case).

    The fused and block kinds run vectorised over the rows; exact and per_add run
    :func:`float_matmul` row by row.  Returns a result whose ``bits`` has shape (M,).
    """
    if not isinstance(acc, FloatAccumulator):
        raise TypeError(f"float_dot: acc must be a FloatAccumulator, got {type(acc).__name__}")
    threads = _check_threads(threads, "float_dot")
    a_fmt, b_fmt = as_format(a_fmt, "float_dot a_fmt"), as_format(b_fmt, "float_dot b_fmt")
    A, B = _codes(a_codes, a_fmt, "a_codes"), _codes(b_codes, b_fmt, "b_codes")
    if A.ndim != 2 or A.shape != B.shape:
        raise ValueError(f"float_dot: a_codes {A.shape} and b_codes {B.shape} must both be (M, K)")
    M, K = A.shape
    cc = None if c is None else np.asarray(c).reshape(-1)
    if cc is not None and cc.shape != (M,):
        raise ValueError(f"float_dot: c must have shape ({M},), got {np.asarray(c).shape}")
    scaled = scale_a is not None or scale_b is not None
    if acc.kind in ("exact", "per_add"):
        if scaled:
            raise ValueError(f"float_dot: block scales are read by kinds 'fused' and 'block', not {acc.kind!r}")
        rows = [float_matmul(A[i:i + 1], B[i][:, None], a_fmt, b_fmt, acc,
                             None if cc is None else cc[i:i + 1, None]) for i in range(M)]
        bits = np.array([int(r.bits[0, 0]) for r in rows], acc.output.dtype)
        tot = {k: sum(getattr(r, k) for r in rows) for k in ("overflows", "nans", "underflows", "terms_inexact")}
        return FloatMatmulResult(bits, acc.output, **tot)
    # fused / block: the same validation as float_matmul on one row, then all rows at once
    probe = float_matmul(A[:1], B[:1].T, a_fmt, b_fmt, acc, None if cc is None else cc[:1, None],
                         scale_a=None if scale_a is None else np.asarray(scale_a)[:1],
                         scale_b=None if scale_b is None else np.asarray(scale_b)[:1].T, scale_fmt=scale_fmt)
    del probe
    out = acc.output
    C = np.zeros((M, 1), np.int64) if cc is None else _codes(cc, out, "c")[:, None]
    sa = sb = None
    block = None
    if scaled:
        ignore_sign = isinstance(scale_fmt, str) and scale_fmt.strip().lower() == "ue4m3"
        sfmt = as_format("e4m3" if ignore_sign else scale_fmt, "float_dot scale_fmt")
        SA, SB = _codes(scale_a, sfmt, "scale_a"), _codes(scale_b, sfmt, "scale_b")
        if SA.shape != SB.shape or SA.shape[0] != M:
            raise ValueError(f"float_dot: scale_a {SA.shape} and scale_b {SB.shape} must both be (M, K/block)")
        block = K // SA.shape[1]
        sa = split_codes(SA, sfmt, acc.zero_exponent, ignore_sign)
        sb = split_codes(SB, sfmt, acc.zero_exponent, ignore_sign)
    stats = dict(overflows=0, nans=0, underflows=0, terms_inexact=0)
    D = _chunked(A, B, a_fmt, b_fmt, C, acc, stats, sa, sb, block, batched=True, threads=threads)[:, 0]
    stats["nans"] = int(np.isnan(decode(D, out)).sum())
    return FloatMatmulResult(D.astype(out.dtype), out, **stats)


def _exact(A, B, a_fmt, b_fmt, C, acc, stats):
    D = blas_exact(A, B, a_fmt, b_fmt, C, acc, stats)       # one BLAS call + one cast, where it applies
    if D is not None:
        return D
    a, b = split_codes(A, a_fmt), split_codes(B, b_fmt)
    c = split_codes(C, acc.output)
    D = exact_dot(a, b, a_fmt, b_fmt, c, acc, stats)
    # IEEE specials of the whole sum, from counts of (row, column) pairs (0/1 matmuls)
    if a.nan.any() or b.nan.any() or a.inf.any() or b.inf.any() or c.nan.any() or c.inf.any():
        bad = count_pairs(a.nan, np.ones(b.nan.shape, bool)) + count_pairs(np.ones(a.nan.shape, bool), b.nan) \
            + count_pairs(a.inf, b.zero) + count_pairs(a.zero, b.inf)
        pnan = (bad > 0) | c.nan
        ok_a, ok_b = ~(a.nan | a.zero), ~(b.nan | b.zero)             # an Inf times a nonzero number
        ia, ib = a.inf & ok_a, b.inf & ok_b
        pos = (count_pairs(ia & ~a.neg, ok_b & ~b.neg) + count_pairs(ia & a.neg, ok_b & b.neg)
               + count_pairs(ok_a & ~a.neg, ib & ~b.neg) + count_pairs(ok_a & a.neg, ib & b.neg)) > 0
        neg = (count_pairs(ia & ~a.neg, ok_b & b.neg) + count_pairs(ia & a.neg, ok_b & ~b.neg)
               + count_pairs(ok_a & ~a.neg, ib & b.neg) + count_pairs(ok_a & a.neg, ib & ~b.neg)) > 0
        pos, neg = pos | (c.inf & ~c.neg), neg | (c.inf & c.neg)
    else:
        pnan = pos = neg = np.zeros(C.shape, bool)
    nan = pnan | (pos & neg)
    out = acc.output
    if out.has_inf:
        D = np.where(pos & ~nan, out.inf_code, np.where(neg & ~nan, out.sign_bit | out.inf_code, D))
    D = np.where(nan, acc.nan, D)
    stats["nans"] += int(nan.sum())
    return D


def _rows(M, N, chunk):
    return max(1, _TILE // max(1, N * chunk))


def _sub(op: Operand, idx) -> Operand:
    return Operand(op.sig[idx], op.exp[idx], op.man_bits, op.nan[idx], op.inf[idx], op.zero[idx],
                   op.neg[idx], op.value[idx])


def _chunked(A, B, a_fmt, b_fmt, C, acc, stats, sa, sb, block, batched=False, threads=1, kernel=True):
    """The fused/block kinds over row tiles.  Matmul: A (M, K), B (K, N); ``batched``: A and B
    (M, K), output M x 1 (row i of A with row i of B).  ``kernel``: the C kernel
    (:mod:`.kernel`) where it applies, else (and with ``kernel=False``) the numpy steps."""
    if kernel and not batched and sa is not None:
        D = block_blas(A, B, a_fmt, b_fmt, C, acc, stats, sa, sb, block)    # group sums by DGEMM, where proven
        if D is not None:
            return D
    if kernel:
        D = run_c(A, B, a_fmt, b_fmt, C, acc, stats, sa, sb, block, batched, threads)
        if D is not None:
            return D
    M, K = A.shape
    N = 1 if batched else B.shape[1]
    ze = acc.zero_exponent
    b_all = split_codes(B if batched else B.T, b_fmt, ze)            # rows: (N or M, K)
    D = np.empty((M, N), np.int64)
    step = _rows(M, N, acc.chunk or K)
    for r0 in range(0, M, step):
        r1 = min(M, r0 + step)
        rows = slice(r0, r1)
        a3 = _sub(split_codes(A[rows], a_fmt, ze), (slice(None), None, slice(None)))
        b3 = _sub(b_all, (rows, None, slice(None))) if batched else _sub(b_all, (None, slice(None), slice(None)))
        s3 = None
        if sa is not None:
            s3 = (_sub(sa, (rows, None, slice(None))),
                  _sub(sb, (rows, None, slice(None))) if batched else _sub(sb, (None, slice(None), slice(None))))
        D[rows] = _run_chunks(a3, b3, s3, C[rows], acc, stats, a_fmt, b_fmt, block, K)
    return D


def _run_chunks(a3, b3, s3, C, acc, stats, a_fmt, b_fmt, block, K):
    """K in chunks, each chunk's result the next one's C; with ``promote_every`` the partial sums
    go to a float32 accumulator (one RNE add) every N elements and restart at +0."""
    chunk = acc.chunk or K
    out = acc.output
    f32 = FloatFormat.parse("float32")
    promote = acc.promote_every
    last = (slice(None), slice(None))
    if promote is None:
        d = C
    else:
        total = decode(C, out)
        d = np.zeros(C.shape, np.int64)
    for k0 in range(0, K, chunk):
        k1 = k0 + chunk
        a = _sub(a3, last + (slice(k0, k1),))
        b = _sub(b3, last + (slice(k0, k1),))
        if acc.kind == "fused_rd":
            d = rd_step(a, b, d, acc, stats)
        elif acc.kind == "fused":
            if s3 is not None:
                ib = np.arange(k0, k1) // block
                d = fused_step(a, b, d, acc, stats, _sub(s3[0], last + (ib,)), _sub(s3[1], last + (ib,)))
            else:
                d = fused_step(a, b, d, acc, stats)
        else:
            ig = (np.arange(k0, k1, acc.group)) // block
            d = block_step(a, b, d, acc, stats, _sub(s3[0], last + (ig,)), _sub(s3[1], last + (ig,)),
                           a_fmt._min_exponent, b_fmt._min_exponent)
        if promote is not None and (k1 % promote == 0 or k1 == K):
            codes, nan = add_values(total, decode(d, out), f32, "half_even", "ieee", stats)
            total = np.where(nan, np.nan, decode(codes, f32))
            d = np.zeros_like(d)
    if promote is not None:
        d = np.where(np.isnan(total), acc.nan, codes)
    return d

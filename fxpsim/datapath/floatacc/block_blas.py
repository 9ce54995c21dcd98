"""The block-scaled kind (Blackwell ``mxf4nvf4``) with each chunk's group sums from one DGEMM.

The kind's chunk step (:func:`~.fused.block_step`, float32 output rounded toward zero) is, per output
and chunk, with :math:`u = 2^{E_{max} - F}` and group terms :math:`t_g = G_g s_{a,g} s_{b,g}` at
exponents :math:`P_g = E_{s_a} + E_{s_b}`:

.. math::

    E_{max} = \\max(\\max_g P_g, E_d), \\qquad
    d' = \\mathrm{RZ}_{f32}\\Big(u \\big[\\mathrm{trunc}(d / u) + \\textstyle\\sum_g \\mathrm{trunc}(t_g / u)\\big]\\Big).

Every :math:`t_g` is a multiple of :math:`2^{\\lambda + P_g}` (:math:`\\lambda` the element grids' and
the scale mantissas' LSB, ``lsb`` of the kind), so when :math:`E_{max} - F \\le \\lambda + \\min_g P_g`
no term loses a bit and :math:`\\sum_g \\mathrm{trunc}(t_g / u) = S / u` with
:math:`S = \\sum_{k \\in chunk} (a_k s_{a,k}) (b_k s_{b,k})`: one float64 GEMM per chunk on the operands
with their scales folded in, exact whatever the summation order, because every partial sum is a
multiple of :math:`2^{\\lambda + P_{min}}` below :math:`2^{53}` of it (:func:`_span_bits`, checked over the
whole problem).  Outputs where the condition fails take the groups' exact sums (a gather, per group
``trunc``) for that chunk.  :math:`\\mathrm{trunc}(d/u)` and the sum are float64 integers below
:math:`2^{53}` (:func:`_sum_bits`); the RZ rounding clears the 29 low bits of the float64 (a float32 normal
keeps 24 significant bits).  :func:`block_blas` returns None where this is not proven: other
roundings/outputs/alignments, a ``zero_exponent`` other than -126 (float32's emin, the exponent this reads
from a zero's bits), NaN/Inf operands, scales or C, a chunk result that overflows or falls below float32's
normals, or a bound above; the caller then runs the C kernel, which gives the same bits more slowly.
"""
from __future__ import annotations

import numpy as np

from ...core.float_format import FloatFormat
from .blas import code_tables
from .exact import integer_width
from .operands import Operand

try:                                             # the compiled chunk step (absent in a bare source tree)
    from ...core import _blockchunk
except ImportError:                              # pragma: no cover - exercised without the build
    _blockchunk = None

__all__ = ["block_blas"]

_F32 = FloatFormat.parse("float32")
_LOW29 = np.int64((1 << 29) - 1)


def _pow2(e: np.ndarray) -> np.ndarray:
    """:math:`2^e` as float64 from its exponent field (exact for -1022 <= e <= 1023)."""
    return ((e.astype(np.int64) + 1023) << 52).view(np.float64)


def _applies(acc, a_fmt, b_fmt, block) -> bool:
    chunk, g = acc.chunk, acc.group
    return (acc.kind == "block" and acc.align == "truncate" and acc.output == _F32 and acc.precision == _F32
            and acc.output_rounding == "toward_zero" and acc.overflow == "inf" and acc.zero_exponent == -126
            and acc.promote_every is None and a_fmt.bits <= 8 and b_fmt.bits <= 8 and chunk is not None
            and g is not None and block % g == 0 and chunk % block == 0)


def _span_bits(a_fmt, b_fmt, sa: Operand, sb: Operand, chunk: int, block: int) -> int:
    """Bits from the grid :math:`2^{\\lambda + P_{min}}` to the bound of any partial sum of a chunk."""
    nb = chunk // block
    spread = 0
    for s in (sa, sb):
        e = s.exp.reshape(s.exp.shape[0], -1, nb)
        spread += int((e.max(axis=-1) - e.min(axis=-1)).max(initial=0))
    return (integer_width(a_fmt) + integer_width(b_fmt) + sa.man_bits + sb.man_bits + 2
            + max(0, chunk - 1).bit_length() + spread)


def _sum_bits(a_fmt, b_fmt, chunk: int, F: int) -> int:
    """Bits of :math:`|S / u|` when :math:`E_{max} \\ge P_g` (scale mantissas cancel against ``lsb``)."""
    lab = a_fmt._min_exponent - a_fmt.man_bits + b_fmt._min_exponent - b_fmt.man_bits
    return integer_width(a_fmt) + integer_width(b_fmt) + 2 + max(0, chunk - 1).bit_length() + lab + F


def _elems(S, d, P, F: int, lam: int, groups):
    """The chunk step on arrays of outputs (numpy): exact sums ``S``, float32 ``d``, block exponents ``P``
    (list over the chunk's blocks); ``groups(mask)``: exact group sums (n, G) of the outputs in ``mask``.
    Returns (new d as float32, inexact alignments, failed, outputs whose groups may truncate)."""
    pmax, pmin = P[0], P[0]
    for p in P[1:]:
        pmax, pmin = np.maximum(pmax, p), np.minimum(pmin, p)
    ec = np.maximum((d.view(np.int32) >> 23) & 0xFF, 1) - 127              # E_d (zeros: -126)
    emax = np.maximum(pmax, ec)
    pw = _pow2(F - emax)                                                   # 1 / u
    dq = d * pw                                                            # float32 * float64: exact
    ct = np.trunc(dq)
    inexact = int((ct != dq).sum())
    s = S * pw + ct
    bad = emax > F + lam + pmin
    n_bad = int(np.count_nonzero(bad))
    if n_bad:
        q = groups(bad) * pw[bad][:, None]
        tq = np.trunc(q)
        inexact += int((tq != q).sum())
        s[bad] = tq.sum(axis=-1) + ct[bad]
    y = s / pw
    ay = np.abs(y)
    if ay.max(initial=0.0) >= 2.0 ** 128 or ((ay < 2.0 ** -126) & (y != 0)).any():
        return d, inexact, True, n_bad                                     # overflow / subnormal: the kernel
    return (y.view(np.int64) & ~_LOW29).view(np.float64).astype(np.float32), inexact, False, n_bad


def block_blas(A, B, a_fmt: FloatFormat, b_fmt: FloatFormat, C, acc, stats, sa: Operand, sb: Operand, block: int):
    """Codes (M, N) of the block kind's ``C + A @ B`` (A (M, K), B (K, N) codes; ``sa`` (M, K/block), ``sb``
    (N, K/block) split scales), or None where the module's conditions do not hold."""
    if not _applies(acc, a_fmt, b_fmt, block):
        return None
    M, K = A.shape
    chunk, g, F = acc.chunk, acc.group, acc.fraction_bits
    va, _, spa = code_tables(a_fmt)
    vb, _, spb = code_tables(b_fmt)
    if spa[A].any() or spb[B].any() or sa.nan.any() or sb.nan.any() or (sa.sig == 0).any() or (sb.sig == 0).any():
        return None
    if ((C & 0x7F800000) == 0x7F800000).any():
        return None
    if _span_bits(a_fmt, b_fmt, sa, sb, chunk, block) > 53 or max(_sum_bits(a_fmt, b_fmt, chunk, F), F + 1) > 52:
        return None
    sval_a = np.ldexp(sa.sig.astype(np.float64), (sa.exp - sa.man_bits).astype(np.int32))
    sval_b = np.ldexp(sb.sig.astype(np.float64), (sb.exp - sb.man_bits).astype(np.int32))
    Af = va[A] * np.repeat(sval_a, block, axis=1)                       # a_k s_a, exact (few bits each)
    Bf = np.ascontiguousarray(vb[B] * np.repeat(sval_b, block, axis=1).T)
    lam = (a_fmt._min_exponent - a_fmt.man_bits + b_fmt._min_exponent - b_fmt.man_bits
           - sa.man_bits - sb.man_bits)
    ea, eb = (np.ascontiguousarray(x.exp, dtype=np.int32) for x in (sa, sb))
    d = np.ascontiguousarray(C, dtype=np.int64).astype(np.uint32).view(np.float32).copy()
    nb = chunk // block
    inexact = 0
    bad = np.empty(d.shape, np.uint8)
    for k0 in range(0, K, chunk):
        b0 = k0 // block
        S = np.ascontiguousarray(Af[:, k0:k0 + chunk] @ Bf[k0:k0 + chunk])   # exact (module docstring)

        def groups(ii, jj, k0=k0):                                       # exact group sums of outputs (ii, jj)
            return (Af[ii, k0:k0 + chunk].reshape(-1, chunk // g, g)
                    * Bf[k0:k0 + chunk, jj].T.reshape(-1, chunk // g, g)).sum(axis=-1)
        if _blockchunk is not None:
            n_c, fail, n_bad = _blockchunk.block_chunk_step(S, d, ea, eb, b0, nb, F, lam, bad)
            if fail or n_bad > bad.size // 64 + 64:
                return None
            inexact += n_c
            if n_bad:
                bi, bj = np.nonzero(bad)
                P = [ea[bi, b0 + t] + eb[bj, b0 + t] for t in range(nb)]
                d[bi, bj], n_c, fail, _ = _elems(S[bi, bj], d[bi, bj], P, F, lam, lambda m: groups(bi[m], bj[m]))
                inexact += n_c
        else:
            P = [ea[:, b0 + t][:, None] + eb[:, b0 + t][None, :] for t in range(nb)]
            d, n_c, fail, n_bad = _elems(S, d, P, F, lam, lambda m: groups(*np.nonzero(m)))
            inexact += n_c
            if n_bad > bad.size // 64 + 64:
                return None
        if fail:
            return None
    stats["terms_inexact"] += inexact
    codes = d.view(np.uint32).astype(np.int64)
    return np.where(codes == 0x80000000, 0, codes)                       # a zero result is +0

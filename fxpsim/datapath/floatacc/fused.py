"""The fused-dot (tensor core) and block-scaled chunk steps, vectorised over a tile of outputs.

One step computes, for every output ``(i, j)`` of a row tile, the formula of
:class:`~.accumulator.FloatAccumulator` ``kind="fused"`` / ``"block"`` on one K-chunk: exact integer
products, the chunk's largest exponent (C included), alignment of every term to ``fraction_bits``
below it (:func:`align`), an exact int64 sum and one rounding into the output
(:func:`~.rounding.round_scaled`).  Specials first, as IEEE sums do (and MMA-Sim, which tests
the float64 sum): any NaN, ``Inf * 0`` or ``+Inf`` with ``-Inf`` gives NaN, else an Inf gives it.
"""
from __future__ import annotations

import numpy as np

from .operands import Operand, split_codes
from .rounding import round_scaled

__all__ = ["align", "fused_step", "block_step"]


def align(v: np.ndarray, shift: np.ndarray, mode: str):
    """``v * 2^shift`` made an integer: exact for ``shift >= 0``, else rounded by ``mode``
    (``truncate``: toward zero; ``floor``; ``half_even``).  Returns (int64, inexact mask)."""
    neg = v < 0
    mag = np.abs(v)
    sl = np.clip(shift, 0, 62)
    r = np.clip(-shift, 0, 62)
    beyond = shift < -62
    q = np.where(beyond, 0, mag >> r)
    rem = np.where(beyond, mag, mag & ((np.int64(1) << r) - 1))
    inexact = rem != 0
    if mode == "floor":
        q = q + (neg & inexact)
    elif mode == "half_even":
        half = np.where(beyond, np.int64(1) << 62, (np.int64(1) << r) >> 1)
        up = (rem > half) | ((rem == half) & (half != 0) & ((q & 1) == 1))
        q = q + (up & ~beyond)
    q = np.where(shift >= 0, mag << sl, q)
    return np.where(neg, -q, q), inexact & (shift < 0)


def _specials(pnan, ppos, pneg, c: Operand):
    """(nan, inf, inf_negative) per output from per-term masks (..., K) and C."""
    anypos = ppos.any(axis=-1) | (c.inf & ~c.neg)
    anyneg = pneg.any(axis=-1) | (c.inf & c.neg)
    nan = pnan.any(axis=-1) | c.nan | (anypos & anyneg)
    return nan, (anypos | anyneg) & ~nan, anyneg


def _product_specials(a: Operand, b: Operand, extra_nan=None):
    """Masks (..., K) of NaN and ±Inf products of broadcastable 3-d operands."""
    pnan = a.nan | b.nan | (a.inf & b.zero) | (a.zero & b.inf)
    if extra_nan is not None:
        pnan = pnan | extra_nan
    pinf = (a.inf | b.inf) & ~pnan
    sign = a.neg ^ b.neg
    return pnan, pinf & ~sign, pinf & sign


def _finish(acc, s, emax, c: Operand, spec, stats, zero_sign=None):
    """Round the int64 sums ``s * 2^(emax - F)`` and apply the specials; a zero result is +0
    unless ``zero_sign`` (bool array) says otherwise."""
    F = acc.fraction_bits
    codes, ovf, unf = round_scaled(s, emax - F, acc.precision, acc.output_rounding, acc.overflow,
                                   storage=acc.output, zero_sign=zero_sign)
    nan, inf, ineg = spec
    out = acc.output
    if out.has_inf:
        infc = np.where(ineg, out.sign_bit | out.inf_code, out.inf_code)
    else:
        infc = acc.nan
    codes = np.where(inf, infc, codes)
    codes = np.where(nan, acc.nan, codes)
    normal = ~(nan | inf)
    stats["overflows"] += int((ovf & normal).sum())
    stats["underflows"] += int((unf & normal).sum())
    stats["nans"] += int(nan.sum())
    return codes


def fused_step(a: Operand, b: Operand, c_codes: np.ndarray, acc, stats,
               sa: Operand | None = None, sb: Operand | None = None):
    """One fused chunk: operands ``a``, ``b`` with arrays broadcastable to (R, N, K) (a matmul
    passes ``a[:, None, :]`` and ``b.T[None]``), ``c_codes`` (R, N) codes of ``acc.output``;
    optional scale operands ``sa``, ``sb`` of the same layout (each element's block scale).
    Returns the (R, N) int64 codes."""
    F = acc.fraction_bits
    c = split_codes(c_codes, acc.output, acc.zero_exponent)
    P = a.exp + b.exp
    prod = a.sig * b.sig
    fm = a.man_bits + b.man_bits
    extra_nan = None
    if sa is not None:
        P = P + sa.exp + sb.exp
        prod = prod * sa.sig * sb.sig
        fm += sa.man_bits + sb.man_bits
        extra_nan = sa.nan | sb.nan
    spec = _specials(*_product_specials(a, b, extra_nan), c)
    emax = np.maximum(P.max(axis=-1), c.exp)
    terms, lost = align(prod, F - fm + P - emax[..., None], acc.align)
    ct, clost = align(c.sig, F - c.man_bits + c.exp - emax, acc.align)
    s = terms.sum(axis=-1) + ct
    ok = ~(spec[0] | spec[1])
    stats["terms_inexact"] += int(((lost & (prod != 0)).sum(axis=-1) * ok).sum() + (clost & ok).sum())
    return _finish(acc, s, emax, c, spec, stats)


def block_step(a: Operand, b: Operand, c_codes: np.ndarray, acc, stats, sa: Operand, sb: Operand,
               a_emin: int, b_emin: int):
    """One block-scaled chunk: groups of ``acc.group`` elements summed exactly, each group's sum
    times its scales aligned by the scales' exponents.  ``sa``, ``sb`` are the scale
    operands of each group (G = K / group), all broadcastable to (R, N, K) and (R, N, G)."""
    F, g = acc.fraction_bits, acc.group
    c = split_codes(c_codes, acc.output, acc.zero_exponent)
    # exact element products at the fixed LSB 2^(a_emin - m_a + b_emin - m_b)
    ea = np.where(a.zero, 0, a.exp - a_emin)
    eb = np.where(b.zero, 0, b.exp - b_emin)
    ia = a.sig << ea                                   # a = ia * 2^(a_emin - m_a), exact
    ib = b.sig << eb
    prod = ia * ib
    gsum = prod.reshape(prod.shape[:-1] + (prod.shape[-1] // g, g)).sum(axis=-1)
    val = gsum * sa.sig * sb.sig
    P = sa.exp + sb.exp
    lsb = a_emin - a.man_bits + b_emin - b.man_bits - sa.man_bits - sb.man_bits
    pnan, ppos, pneg = _product_specials(a, b)
    gnan = np.asarray((sa.nan | sb.nan).any(axis=-1), bool)
    spec = _specials(pnan, ppos, pneg, c)
    spec = (spec[0] | gnan, spec[1] & ~gnan, spec[2])
    emax = np.maximum(P.max(axis=-1), c.exp)
    terms, lost = align(val, F + lsb + P - emax[..., None], acc.align)
    ct, clost = align(c.sig, F - c.man_bits + c.exp - emax, acc.align)
    s = terms.sum(axis=-1) + ct
    ok = ~(spec[0] | spec[1])
    stats["terms_inexact"] += int(((lost & (val != 0)).sum(axis=-1) * ok).sum() + (clost & ok).sum())
    return _finish(acc, s, emax, c, spec, stats)

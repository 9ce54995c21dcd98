"""AMD CDNA3 matrix cores: the fused dot with round-down (floor) accumulation (``kind="fused_rd"``).

MMA-Sim's ``amd_fused_dot_rd_add`` (mmasim/simulator/arithmetic.py, c785138), per group of
``chunk`` elements (8 for f16/bf16, 16 for fp8/bf8), with ``F = fraction_bits`` (24),
``S = sum_bits`` (31), ``F_c = c_fraction_bits`` (24):

1. products exact; :math:`T = \\sum_k \\mathrm{trunc}(p_k / 2^{e_1 - F})`,
   :math:`e_1 = \\max_k (E_{a_k} + E_{b_k})` (C not included);
   ``even_odd=True`` (fp8): even and odd k are summed apart this way (:math:`T_0, e_0`;
   :math:`T_1, e_1`), then each is floored to F bits below :math:`\\max(e_0, e_1)` and added;
2. :math:`e = \\max(e_1, E_c)`: the sum is floored to S fraction bits below ``e`` and C to
   :math:`F_c` bits (fp8: C is dropped when :math:`E_c < e - 25`);
3. one rounding to nearest even into float32 (IEEE overflow to ±Inf); a negative sum that
   rounds to zero gives -0, an exact zero sum +0.

Specials as an IEEE sum of the operands; when that sum is finite, a product of magnitude
:math:`\\ge 2^{128}` counts as ±Inf (both signs: NaN).
"""
from __future__ import annotations

import numpy as np

from .fused import _finish, _product_specials, _specials, align
from .operands import Operand, split_codes

from .rounding import _bitlen

__all__ = ["rd_step"]


def _stage1(prod, P, F, fm, mask):
    """(T, e1, inexact) over the k where ``mask``: trunc-aligned sum at F bits below e1."""
    Pm = np.where(mask, P, np.iinfo(np.int64).min // 4)
    e1 = Pm.max(axis=-1)
    t, lost = align(np.where(mask, prod, 0), F - fm + P - e1[..., None], "truncate")
    return t.sum(axis=-1), e1, (lost & (prod != 0) & mask).sum(axis=-1)


def rd_step(a: Operand, b: Operand, c_codes: np.ndarray, acc, stats):
    """One CDNA3 group (arrays broadcastable to (R, N, K)); returns (R, N) float32 codes."""
    F, S, Fc = acc.fraction_bits, acc.sum_bits, acc.c_fraction_bits
    c = split_codes(c_codes, acc.output, acc.zero_exponent)
    P = a.exp + b.exp
    prod = a.sig * b.sig
    fm = a.man_bits + b.man_bits
    pnan, ppos, pneg = _product_specials(a, b)
    # first the float64 sum's specials (real Inf/NaN operands); only where it is finite do
    # products of magnitude >= 2^128 count as +-Inf (MMA-Sim's order of the two checks)
    nan, inf, ineg = _specials(pnan, ppos, pneg, c)
    big = (prod != 0) & (_bitlen(np.abs(prod)) - 1 + P - fm >= 128)
    bpos, bneg = (big & (prod > 0)).any(axis=-1), (big & (prod < 0)).any(axis=-1)
    fin = ~(nan | inf)
    spec = (nan | (fin & bpos & bneg), inf | (fin & (bpos ^ bneg)), np.where(fin, bneg & ~bpos, ineg))
    K = prod.shape[-1]
    k = np.arange(K)
    if acc.even_odd:
        T0, e0, l0 = _stage1(prod, P, F, fm, (k % 2 == 0))
        T1, e1, l1 = _stage1(prod, P, F, fm, (k % 2 == 1))
        e = np.maximum(e0, e1)
        s0, m0 = align(T0, e0 - e, "floor")
        s1, m1 = align(T1, e1 - e, "floor")
        T, lost = s0 + s1, l0 + l1 + (m0 & (T0 != 0)) + (m1 & (T1 != 0))
    else:
        T, e, lost = _stage1(prod, P, F, fm, np.ones(K, bool))
    emax = np.maximum(e, c.exp)
    s2, m2 = align(T, S - F + e - emax, "floor")
    sc, mc = align(c.sig, Fc - c.man_bits + c.exp - emax, "floor")
    if acc.even_odd:
        drop = c.exp < emax - 25
        mc = np.where(drop, c.sig != 0, mc)
        sc = np.where(drop, 0, sc)
    total = s2 + (sc << (S - Fc))
    ok = ~(spec[0] | spec[1])
    stats["terms_inexact"] += int(((lost + (m2 & (T != 0)) + (mc & (c.sig != 0))) * ok).sum())
    # _finish rounds total * 2^(emax - fraction_bits): pass the sum's own scale.  The sum is a
    # float64 that MMA-Sim converts to float32 with RNE: a negative sum that rounds to zero is -0
    # (an exact zero sum is +0).
    return _finish(_Scaled(acc, S), total, emax, c, spec, stats, zero_sign=total < 0)


class _Scaled:
    """``acc`` seen with ``fraction_bits = S`` (the scale of the final sum)."""

    def __init__(self, acc, S):
        self._acc, self.fraction_bits = acc, S

    def __getattr__(self, name):
        return getattr(self._acc, name)

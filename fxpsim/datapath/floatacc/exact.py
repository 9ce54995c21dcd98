"""Kulisch-exact dot products: :math:`d = \\mathrm{round}_{out}(c + \\sum_k a_k b_k)`, one rounding.

Every finite code of ``fmt`` is an integer on the format's finest grid,
:math:`a = I_a \\cdot 2^{\\ell_a}` with :math:`\\ell_a = e_{min} - m` and
:math:`|I_a| < 2^{w_a}`, :math:`w_a = e_{max} - e_{min} + m + 2`.  The dot product is then the
integer :math:`T = \\sum_k I_{a_k} I_{b_k}` times :math:`2^{\\ell_a + \\ell_b}` (a fixed-point
Kulisch accumulator).  ``T`` is computed

* with float64 BLAS when :math:`w_a + w_b + \\lceil \\log_2 K \\rceil \\le 53` (every partial sum of
  integers below :math:`2^{53}` is exact, whatever order or thread count BLAS uses) -- E4M3, E2M1,
  E2M3, E3M2 inputs, in K-slices that keep the bound;
* with an int64 matmul when the bound is 62 bits;
* with Python integers otherwise (E5M2, float16, bfloat16: exact, slow).

``c`` is added as an exact integer, and the sum is rounded once (:func:`~.rounding.round_scaled`).
"""
from __future__ import annotations

import numpy as np

from ...core.float_format import FloatFormat
from .operands import Operand
from .rounding import round_scaled

__all__ = ["grid_integers", "exact_dot", "integer_width", "count_pairs", "zero_signs"]


def count_pairs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r""":math:`\#\{k : x_{ik} \wedge y_{kj}\}` for bool (M, K) and (K, N): a 0/1 float64 matmul,
    exact while K < 2^53."""
    return np.rint(x.astype(np.float64) @ y.astype(np.float64)).astype(np.int64)


def integer_width(fmt: FloatFormat) -> int:
    """:math:`w` with :math:`|I| < 2^w` for every finite code of ``fmt`` on its finest grid."""
    return fmt._max_exponent - fmt._min_exponent + fmt.man_bits + 2


def grid_integers(op: Operand, fmt: FloatFormat) -> np.ndarray:
    """:math:`I` with value :math:`= I \\cdot 2^{e_{min} - m}` (0 for zeros and specials): int64
    when the format's width allows (:func:`integer_width` <= 62), else Python ints."""
    e = np.where(op.sig == 0, 0, op.exp - fmt._min_exponent)
    if integer_width(fmt) <= 62:
        return op.sig << e
    out = np.empty(op.sig.shape, object)                  # float16 and wider: Python ints
    for idx in np.ndindex(op.sig.shape):
        out[idx] = int(op.sig[idx]) << int(e[idx])
    return out


def _matmul_int(ia: np.ndarray, ib: np.ndarray, bits: int) -> np.ndarray:
    K = ia.shape[1]
    if bits <= 53:
        step = max(1, 1 << (53 - bits))
        out = np.zeros((ia.shape[0], ib.shape[1]), np.int64)
        fa, fb = ia.astype(np.float64), ib.astype(np.float64)
        for k0 in range(0, K, step):
            out += (fa[:, k0:k0 + step] @ fb[k0:k0 + step]).astype(np.int64)
        return out
    if bits <= 62:
        step = max(1, 1 << (62 - bits))
        out = np.zeros((ia.shape[0], ib.shape[1]), np.int64)
        for k0 in range(0, K, step):
            out += ia[:, k0:k0 + step] @ ib[k0:k0 + step]
        return out
    return ia.astype(object) @ ib.astype(object)


def _row_ids(x: np.ndarray, y: np.ndarray):
    """Ids of the rows of ``x`` (M, K) and ``y`` (N, K), bool: equal rows get equal ids."""
    packed = np.packbits(np.concatenate([x, y]), axis=1)
    if packed.shape[1] == 0:                                  # K = 0: every (empty) row is the same
        ids = np.zeros(packed.shape[0], np.int64)
    else:
        ids = np.unique(packed, axis=0, return_inverse=True)[1].reshape(-1)
    return ids[:x.shape[0]], ids[x.shape[0]:]


def zero_signs(codes, zero, a_neg, b_neg, c_neg, acc, c_zero=None):
    """``codes`` with the IEEE zero sign on the ``zero`` results: -0 when every addend is -0 (every
    product's sign negative and ``c`` a -0; ``floor``: +0 only when every addend is +0).  Every
    product :math:`a_{ik} b_{kj}` is negative iff row i of the sign mask of A equals the complement of
    column j of B's (positive iff it equals column j), compared as packed bit rows.  ``c_neg``: bool
    mask or the (M, N) codes of ``acc.output`` (their sign bit); ``c_zero`` defaults to all True."""
    out = acc.output
    zi, zj = np.nonzero(zero)
    rows, ri = np.unique(zi, return_inverse=True)
    cols, ci = np.unique(zj, return_inverse=True)
    cn = c_neg[zi, zj]
    if cn.dtype != bool:
        cn = (cn & np.int64(out.sign_bit)) != 0
    cz = True if c_zero is None else c_zero[zi, zj]
    bn = b_neg[:, cols].T
    if acc.output_rounding == "floor":
        ida, idb = _row_ids(a_neg[rows], bn)
        zsign = ~((ida[ri] == idb[ci]) & ~cn & cz)
    else:
        ida, idb = _row_ids(a_neg[rows], ~bn)
        zsign = (ida[ri] == idb[ci]) & cn & cz
    codes[zi, zj] = np.where(zsign, np.int64(out.sign_bit), 0)
    return codes


def exact_dot(a: Operand, b: Operand, a_fmt: FloatFormat, b_fmt: FloatFormat, c: Operand, acc, stats):
    """Codes of ``acc.output`` for the exact ``c + a @ b`` (finite part; specials by the caller)."""
    ia, ib = grid_integers(a, a_fmt), grid_integers(b, b_fmt)
    wa, wb = integer_width(a_fmt), integer_width(b_fmt)
    T = _matmul_int(ia, ib, wa + wb)
    lab = a_fmt._min_exponent - a.man_bits + b_fmt._min_exponent - b.man_bits
    out = acc.output
    # C = sig * 2^qc; common grid 2^L, L = min(lab, smallest qc): every shift below is exact
    qc = c.exp - c.man_bits
    nz = c.sig != 0
    L = min(lab, int(qc[nz].min())) if nz.any() else lab
    width_t = wa + wb + max(1, int(a.sig.shape[1]).bit_length()) + (lab - L)
    width_c = c.man_bits + 1 + (int(qc[nz].max()) - L if nz.any() else 0)
    if T.dtype != object and max(width_t, width_c) <= 61:
        N = (T << (lab - L)) + np.where(nz, c.sig << np.clip(qc - L, 0, 62), 0)
    else:
        N = np.empty(T.shape, object)
        for idx in np.ndindex(T.shape):
            cv = int(c.sig[idx]) << int(qc[idx] - L) if nz[idx] else 0
            N[idx] = (int(T[idx]) << (lab - L)) + cv
    q = L
    codes, ovf, unf = round_scaled(N, q, acc.precision, acc.output_rounding, acc.overflow, storage=out)
    zero = (codes & ~np.int64(out.sign_bit)) == 0
    if zero.any():
        codes = zero_signs(codes, zero, a.neg, b.neg, c.neg, acc, c.zero)
    stats["overflows"] += int(ovf.sum())
    stats["underflows"] += int(unf.sum())
    return codes

"""Matrix products whose bits do not depend on the BLAS: the same on any CPU, kernel and thread count.

A float32 BLAS product sums in an order set by its kernel (AVX2 and AVX-512 kernels block differently) and by
its thread count, so the last bits of every product, and after a few thousand training steps the trained
weights, depend on the machine. :func:`matmul` makes every sum exact instead, so that order cannot matter:

each row of ``a`` and each column of ``b`` is rounded (to nearest, ties to even) to an integer mantissa on its own
power-of-two scale,

.. math:: a_{mk} \\approx A_{mk}\\, 2^{e_m - p_a}, \\qquad b_{kn} \\approx B_{kn}\\, 2^{f_n - p_b}, \\qquad
          |A_{mk}| \\le 2^{p_a},\\ |B_{kn}| \\le 2^{p_b},

where :math:`2^{e_m}` bounds row :math:`m` (``frexp`` of its largest magnitude) and
:math:`p_a + p_b = 53 - \\lceil \\log_2 K \\rceil`. Every product and every partial sum of
:math:`S_{mn} = \\sum_k A_{mk} B_{kn}` is then an integer of magnitude at most :math:`K 2^{p_a + p_b} \\le 2^{53}`,
exactly representable in float64, so float64 BLAS (any blocking, any FMA use, any thread count) returns the exact
integer :math:`S_{mn}`; the result is :math:`S_{mn}\\, 2^{e_m + f_n - p_a - p_b}` rounded once to the output dtype.

float64 operands are cut into three such pieces each (:func:`matmul`), about 60 bits of every row and column.

Accuracy: for :math:`K \\le 2^{11}` each float32 operand keeps at least 21 bits relative to its row/column maximum,
and the sum itself is exact (a float32 BLAS sum carries up to :math:`K \\cdot 2^{-24}` relative rounding error instead).
Cost: one float64 product plus a few elementwise passes (``benchmarks/bench_repro_matmul.py``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["matmul", "mantissa_bits"]

_EXACT = 53                                    # float64 integers are exact up to 2^53


def mantissa_bits(k: int) -> tuple[int, int]:
    """``(p_a, p_b)`` for a sum of ``k`` products: :math:`p_a + p_b = 53 - \\lceil \\log_2 k \\rceil`."""
    if k < 1:
        raise ValueError(f"mantissa_bits: the sum needs k >= 1 terms, got {k}")
    room = _EXACT - (int(k) - 1).bit_length()
    return room - room // 2, room // 2


def _pieces(x: np.ndarray, axis: int, bits: int, n: int):
    """``n`` integer-valued float64 mantissa arrays and their scales, :math:`x \\approx \\sum_i X_i 2^{e - (i+1)p}`,
    one power-of-two scale per slice along ``axis`` (the bound :math:`2^e` of an all-zero slice is 1): the first
    holds ``bits`` bits of ``x``, each next one the next ``bits`` bits of what is left (exact subtractions)."""
    top = np.maximum(x.max(axis=axis, keepdims=True), -x.min(axis=axis, keepdims=True))
    if not np.isfinite(top).all():             # NaN and inf reach the slice maxima
        raise ValueError("repro.matmul: operands hold NaN or inf (training diverged?)")
    _, e = np.frexp(top.astype(np.float64))     # |x| < 2^e along the slice (top = f 2^e, 1/2 <= f < 1)
    rest, out = x, []
    for i in range(n):
        shift = e - bits * (i + 1)
        mant = np.multiply(rest, np.ldexp(1.0, -shift), dtype=np.float64)   # powers of two: exact
        np.rint(mant, out=mant)
        out.append((mant, np.ldexp(1.0, shift)))
        if i + 1 < n:
            rest = rest - mant * out[-1][1]               # |rest| <= half a unit of this piece, exact
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D float arrays ([M, K] @ [K, N]), bit-identical on every machine (module docstring).

    float32 (and narrower) operands are one piece each (one exact float64 product); float64 operands are cut
    into three pieces each, :math:`A = A_0 + A_1 + A_2`, and the six products :math:`A_i B_j` with
    :math:`i + j \\le 2` (each exact) are added in a fixed order, so about 60 bits of each row and column count.
    The result has numpy's result dtype of ``a`` and ``b``; NaN or inf in either operand raises ValueError.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"repro.matmul: needs [M, K] @ [K, N], got shapes {list(a.shape)} and {list(b.shape)}")
    if a.dtype.kind != "f" or b.dtype.kind != "f":
        raise TypeError(f"repro.matmul: needs floating-point operands, got {a.dtype} and {b.dtype}")
    out_dtype = np.result_type(a, b)
    m, k = a.shape
    n = b.shape[1]
    if k == 0 or m == 0 or n == 0:
        return np.zeros((m, n), dtype=out_dtype)
    pa, pb = mantissa_bits(k)
    parts = 1 if np.finfo(out_dtype).nmant <= 23 else 3
    pieces_a, pieces_b = _pieces(a, 1, pa, parts), _pieces(b, 0, pb, parts)
    total = None
    for order in range(parts):                 # fixed order: the largest terms first
        for i in range(order + 1):
            (ai, sa), (bj, sb) = pieces_a[i], pieces_b[order - i]
            s = np.matmul(ai, bj)              # exact: every partial sum is an integer <= 2^53
            s *= sa
            s *= sb                            # exact (powers of two)
            total = s if total is None else total + s
    return total.astype(out_dtype)             # one rounding to the output dtype

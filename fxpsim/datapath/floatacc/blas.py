"""The Kulisch-exact kind on float BLAS, with the one output rounding done by the cast itself.

Every finite code of a format of ``fmt.bits <= 8`` bits is :math:`a = I_a 2^{\\ell_a}` with
:math:`|I_a| < 2^{w_a}` (:func:`~.exact.integer_width`).  Every product is a multiple of
:math:`2^{\\ell_a + \\ell_b}` and every partial sum (in whatever order BLAS adds) is bounded by

.. math::

    \\Big|\\sum_{k \\in S} a_k b_k\\Big| < K\\, 2^{w_a + w_b + \\ell_a + \\ell_b}
    \\le 2^{w_a + w_b + \\lceil \\log_2 K \\rceil + \\ell_a + \\ell_b},

so with :math:`w_a + w_b + \\lceil \\log_2 K \\rceil \\le p` every partial sum is an integer multiple
of the grid below :math:`2^p` -- exact in a float of ``p`` significand bits (float32 SGEMM at
:math:`p = 24`: E2M1, E2M3 and E3M2 at moderate K; float64 DGEMM at :math:`p = 53`: E4M3) as long as the
grid :math:`2^{\\ell_a + \\ell_b}` is not below the float's smallest subnormal.  The BLAS result is then
the exact :math:`T = \\sum_k a_k b_k` on the decoded values (a 256-entry table per format), and

.. math::

    d = \\mathrm{RNE}_{out}(T)

is a single IEEE cast of the exact float64 ``T`` (float32 or float16 output, ties to even, overflow to
±Inf): the kind's formula with ``c = ±0``.  The zero results take the exact kind's IEEE zero sign
(:func:`~.exact.zero_signs`).  :func:`blas_exact` returns None where any condition fails (another
rounding or output, ``output_man_bits``, a nonzero ``c``, NaN/Inf operands, the bound); the caller
then runs :func:`~.exact.exact_dot`, which gives the same bits more slowly.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...core.float_codec import decode
from ...core.float_format import FloatFormat
from .exact import integer_width, zero_signs

__all__ = ["blas_exact", "code_tables"]

_CASTS = {"float32": np.float32, "float16": np.float16}


@lru_cache(maxsize=64)
def code_tables(fmt: FloatFormat):
    """(values float64 with 0 for NaN/Inf, sign bit bool, special bool), indexed by code (``bits <= 8``)."""
    v = decode(np.arange(1 << fmt.bits), fmt)
    special = ~np.isfinite(v)
    neg = np.signbit(v)
    vals = np.where(special, 0.0, v)
    for t in (vals, neg, special):
        t.setflags(write=False)
    return vals, neg, special


@lru_cache(maxsize=64)
def _table_cached(key, ft):
    return np.frombuffer(key, np.float64).astype(ft)


def _table(vals, ft):
    return _table_cached(vals.tobytes(), ft)


def _grid_exp(fmt: FloatFormat) -> int:
    return fmt._min_exponent - fmt.man_bits


def _cast_dtype(acc):
    if acc.output_rounding != "half_even" or acc.overflow not in ("inf", "ieee") \
            or acc.precision != acc.output:
        return None
    for name, dt in _CASTS.items():
        if acc.output == FloatFormat.parse(name):
            return dt
    return None


def blas_exact(A: np.ndarray, B: np.ndarray, a_fmt: FloatFormat, b_fmt: FloatFormat, C: np.ndarray, acc, stats):
    """Codes of ``acc.output`` for the exact ``C + A @ B`` (codes A (M, K), B (K, N), C (M, N)) by one
    BLAS call and one cast, or None where the module's conditions do not hold."""
    dt = _cast_dtype(acc)
    if dt is None or a_fmt.bits > 8 or b_fmt.bits > 8:
        return None
    out = acc.output
    if ((C & ~np.int64(out.sign_bit)) != 0).any():                      # c must be +-0 everywhere
        return None
    K = A.shape[1]
    bits = integer_width(a_fmt) + integer_width(b_fmt) + max(0, K - 1).bit_length()
    lab = _grid_exp(a_fmt) + _grid_exp(b_fmt)
    if bits <= 24 and lab >= -149:
        ft = np.float32
    elif bits <= 53 and lab >= -1074:
        ft = np.float64
    else:
        return None
    va, na, sa = code_tables(a_fmt)
    vb, nb, sb = code_tables(b_fmt)
    if sa[A].any() or sb[B].any():                                       # NaN / Inf: the general path
        return None
    T = _table(va, ft)[A] @ _table(vb, ft)[B]                            # exact (module docstring)
    if T.dtype != dt:                                                    # the one rounding
        with np.errstate(over="ignore"):
            R = T.astype(np.float64).astype(dt)
    else:
        R = T                                                            # exact already, so unrounded
    codes = R.view(np.uint32 if dt is np.float32 else np.uint16).astype(np.int64)
    ovf = np.isinf(R)
    stats["overflows"] += int(ovf.sum())
    zero = R == 0
    if zero.any():
        stats["underflows"] += int((zero & (T != 0)).sum())
        codes = zero_signs(codes, zero, na[A], nb[B], C, acc)
    return codes

"""Float operands as exact integers: every finite code of a :class:`~fxpsim.core.float_format.FloatFormat`
is :math:`v = (-1)^s \\cdot S \\cdot 2^{E - m}` with an integer significand ``S`` and an alignment
exponent ``E``.

.. math::

    E = \\max(\\lfloor \\log_2 |v| \\rfloor, e_{min}), \\qquad S = |v| \\cdot 2^{m - E} \\in [0, 2^{m+1})

(``m`` the mantissa bits, :math:`e_{min}` the format's smallest normal exponent; a subnormal has
``E = e_min`` and ``S < 2^m``).  This is the exponent a tensor core's max-exponent unit sees, and the
pair ``(significand, exponent)`` MMA-Sim's ``extract_significand_exponent`` returns.  A zero has
``S = 0`` and ``E = zero_exponent`` (``None``: :data:`NO_EXPONENT`, it never sets the maximum;
MMA-Sim gives every zero the exponent -126, whatever its format).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.float_codec import decode
from ...core.float_format import FloatFormat

__all__ = ["Operand", "split_codes", "NO_EXPONENT", "as_format"]

#: The exponent given to zeros that must never be the largest exponent of a chunk.
NO_EXPONENT = -(1 << 40)


def as_format(fmt, where: str) -> FloatFormat:
    """A FloatFormat from a FloatFormat or a name, with a ``TypeError``/``ValueError`` naming ``where``."""
    if isinstance(fmt, FloatFormat):
        return fmt
    if isinstance(fmt, str):
        try:
            return FloatFormat.parse(fmt)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    raise TypeError(f"{where} must be a FloatFormat or a format name, got {type(fmt).__name__}")


@dataclass(frozen=True)
class Operand:
    """Codes split into exact parts (all arrays shaped as the codes).

    Attributes
    ----------
    sig : int64, signed significand :math:`\\pm S` (0 for zeros and specials)
    exp : int64, the alignment exponent ``E`` (``zero_exponent`` for zeros)
    man_bits : int, ``m`` (so the value is ``sig * 2^(exp - man_bits)``)
    nan, inf, zero, neg : bool masks (``inf`` with ``neg`` gives the sign of an infinity)
    value : float64, the exact value (NaN/±inf included)
    """

    sig: np.ndarray
    exp: np.ndarray
    man_bits: int
    nan: np.ndarray
    inf: np.ndarray
    zero: np.ndarray
    neg: np.ndarray
    value: np.ndarray


def split_codes(codes, fmt: FloatFormat, zero_exponent=None, ignore_sign: bool = False) -> Operand:
    """Split codes of ``fmt`` into :class:`Operand` parts, exactly.

    ``ignore_sign`` reads the sign bit as 0 (an unsigned ``ue4m3`` scale stored in E4M3 codes, as
    MMA-Sim's ``abs()`` of the scale does).  The decode is :func:`fxpsim.core.float_codec.decode`
    (exact to float64); ``S`` and ``E`` come from ``frexp`` of that exact value, so they are exact.
    """
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise TypeError(f"codes of {fmt} must be integers, got dtype {c.dtype}")
    if ignore_sign and fmt.signed:
        c = c & ((1 << fmt.mag_bits) - 1)
    v = decode(c, fmt)
    nan, inf = np.isnan(v), np.isinf(v)
    zero = v == 0
    neg = np.signbit(v)
    fin = ~(nan | inf | zero)
    mant, ex = np.frexp(np.where(fin, np.abs(v), 1.0))          # |v| = mant * 2^ex, mant in [0.5, 1)
    emin = fmt._min_exponent
    E = np.maximum(ex.astype(np.int64) - 1, emin)
    m = fmt.man_bits
    S = np.ldexp(np.where(fin, np.abs(v), 0.0), (m - E).astype(np.int32))   # exact: S < 2^(m+1)
    S = S.astype(np.int64)
    ze = NO_EXPONENT if zero_exponent is None else int(zero_exponent)
    E = np.where(fin, E, ze).astype(np.int64)
    sig = np.where(neg, -S, S)
    return Operand(sig, E, m, nan, inf, zero, neg, v)

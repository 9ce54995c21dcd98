"""TFLite's fixed-point multiplier: gemmlowp's primitives and ``MultiplyByQuantizedMultiplier``.

A real multiplier :math:`M` becomes a Q31 significand and a power-of-two exponent
(:func:`quantize_multiplier`); an int32 accumulator is scaled by it with gemmlowp's
``SaturatingRoundingDoublingHighMul`` then ``RoundingDivideByPOT`` (two roundings) or, in
TFLite's ``TFLITE_SINGLE_ROUNDING`` build, one 64-bit product and one rounding
(:func:`multiply_by_quantized_multiplier`).  :func:`_srdhm` and :func:`_rdbpot` are the
primitives on validated int64 arrays, for the kernels that call them in their own loops.
"""
from __future__ import annotations

import numpy as np

from .integer_checks import (
    INT32_MAX, INT32_MIN, _check_range, _int32_array, _int_array, _norm_axis, _per_channel, _wrap_int32,
)

__all__ = [
    "quantize_multiplier", "saturating_rounding_doubling_high_mul", "rounding_divide_by_pot",
    "multiply_by_quantized_multiplier",
]


def quantize_multiplier(real, *, single_rounding: bool = False):
    r"""Split a real multiplier into a Q31 significand and a power-of-two exponent (TFLite).

    .. math::

        q, e = \mathrm{frexp}(r),\quad \tfrac12 \le |q| < 1,\qquad
        m = \mathrm{round\_half\_away}(q \cdot 2^{31}),\qquad r \approx m \cdot 2^{e - 31}

    If rounding carries to :math:`m = 2^{31}`, then :math:`m = 2^{30}` and :math:`e = e + 1`.
    Multipliers with :math:`e < -31` (about :math:`|r| < 2^{-32}`) become ``(0, 0)``, as does
    :math:`r = 0`.  ``single_rounding=True`` adds the ``TFLITE_SINGLE_ROUNDING`` rules: ``r``
    must be non-negative and :math:`e > 30` saturates to ``(2**31 - 1, 30)``.

    Parameters
    ----------
    real : float or array_like of float
        Finite real multiplier(s); an array gives per-channel results.
    single_rounding : bool
        Apply the single-rounding build's restrictions.

    Returns
    -------
    multiplier, shift : int, int or ndarray of int32, ndarray of int32
        ``shift`` is the exponent (positive = left shift, negative = right shift).

    Examples
    --------
    >>> quantize_multiplier(0.0012)
    (1319413953, -9)
    >>> quantize_multiplier(1 - 2.0 ** -40)      # rounds up to 2^31: carried into the exponent
    (1073741824, 1)
    """
    r = np.asarray(real, dtype=np.float64)
    if not np.all(np.isfinite(r)):
        raise ValueError("quantize_multiplier: the real multiplier must be finite")
    if single_rounding and np.any(r < 0):
        raise ValueError("quantize_multiplier: single rounding needs a non-negative multiplier")
    q, e = np.frexp(r)
    e = e.astype(np.int64)
    # |q * 2^31| < 2^31 is exact in float64 and has ulp <= 2^-22, so floor(|x| + 0.5) is exact.
    mag = np.floor(np.abs(q) * 2.0 ** 31 + 0.5)
    m = (np.sign(q) * mag).astype(np.int64)
    carry = m == (1 << 31)
    m = np.where(carry, 1 << 30, m)
    e = np.where(carry, e + 1, e)
    tiny = e < -31                  # (r = 0 needs no case: frexp(0) = (0, 0))
    m = np.where(tiny, 0, m)
    e = np.where(tiny, 0, e)
    if single_rounding:
        big = e > 30
        m = np.where(big, INT32_MAX, m)
        e = np.where(big, 30, e)
    if r.ndim == 0:
        return int(m), int(e)
    return m.astype(np.int32), e.astype(np.int32)


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    r"""gemmlowp's ``SaturatingRoundingDoublingHighMul`` on int32 values.

    .. math::

        \mathrm{SRDHM}(a, b) = \begin{cases} 2^{31}-1 & a = b = -2^{31} \\
        \operatorname{trunc}\!\left(\dfrac{ab + \nu}{2^{31}}\right), &
        \nu = 2^{30} \text{ if } ab \ge 0 \text{ else } 1 - 2^{30} \end{cases}

    i.e. :math:`\lfloor ab / 2^{31} + 1/2 \rfloor`: :math:`2ab / 2^{32}` rounded to nearest with
    ties toward :math:`+\infty` (the negative nudge with a truncating division sends negative ties
    toward zero).  Intermediates: :math:`|ab + \nu| \le 2^{62} + 2^{30}` fits int64.

    Parameters
    ----------
    a, b : array_like of int
        int32 values (broadcast together).

    Returns
    -------
    ndarray of int64
        Values in the int32 range.
    """
    return _srdhm(_int32_array(a, "a"), _int32_array(b, "b"))


def _srdhm(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    r""":func:`saturating_rounding_doubling_high_mul` on validated int64 arrays.

    Computed as :math:`\min(\lfloor (ab + 2^{30}) / 2^{31} \rfloor, 2^{31} - 1)`: for
    :math:`ab < 0`, :math:`\operatorname{trunc}((ab + 1 - 2^{30}) / 2^{31}) =
    \lceil (ab - 2^{30} + 1) / 2^{31} \rceil = \lfloor (ab + 2^{30}) / 2^{31} \rfloor`, and only
    :math:`a = b = -2^{31}` reaches :math:`2^{31}`.
    """
    return np.minimum((a64 * b64 + (1 << 30)) >> 31, INT32_MAX)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    r"""gemmlowp's ``RoundingDivideByPOT``: :math:`x / 2^e` rounded half away from zero.

    .. math::

        \mathrm{mask} = 2^e - 1,\quad \rho = x \,\&\, \mathrm{mask},\quad
        \theta = \lfloor \mathrm{mask}/2 \rfloor + [x < 0],\quad
        \mathrm{RDBPOT}(x, e) = \lfloor x / 2^e \rfloor + [\rho > \theta]

    Parameters
    ----------
    x : array_like of int
        int32 values.
    exponent : int or array_like of int
        ``0 <= exponent <= 31`` (broadcast against ``x``).

    Returns
    -------
    ndarray of int64
    """
    e = _int_array(exponent, "exponent")
    _check_range(e, 0, 31, "exponent")
    return _rdbpot(_int32_array(x, "x"), e)


def _rdbpot(x64: np.ndarray, e) -> np.ndarray:
    r""":func:`rounding_divide_by_pot` on validated int64 arrays.

    Computed as :math:`\lfloor (x + \lfloor 2^{e-1} \rfloor - [x < 0][e > 0]) / 2^e \rfloor`
    (ties up for :math:`x \ge 0`, down for :math:`x < 0`), equal to the mask/threshold form.
    """
    e = np.asarray(e, dtype=np.int64)
    if e.ndim == 0 and int(e) == 0:
        return x64
    half = (np.int64(1) << e) >> 1
    return (x64 + half - ((x64 < 0) & (e > 0))) >> e


def multiply_by_quantized_multiplier(acc, multiplier, shift, rounding: str = "double",
                                     axis: int = -1) -> np.ndarray:
    r"""TFLite's ``MultiplyByQuantizedMultiplier``: :math:`\mathrm{acc}\cdot m \cdot 2^{s-31}`.

    ``rounding="double"`` (TFLite's default build, two roundings):

    .. math::

        y = \mathrm{RDBPOT}\big(\mathrm{SRDHM}(\mathrm{wrap}_{32}(\mathrm{acc}\cdot 2^{\max(s,0)}),
        \, m),\ \max(-s, 0)\big)

    where :math:`\mathrm{wrap}_{32}` is the int32 wrap of TFLite's ``x * (1 << left_shift)``.
    ``rounding="single"`` (``TFLITE_SINGLE_ROUNDING``), with :math:`t = 31 - s`:

    .. math::

        y = \mathrm{wrap}_{32}\big(\lfloor (\mathrm{acc}\cdot m + 2^{t-1}) / 2^t \rfloor\big)

    (round half up; :math:`|\mathrm{acc}\cdot m| < 2^{62}`, so int64 is exact).

    Parameters
    ----------
    acc : array_like of int
        Accumulator values in the int32 range.
    multiplier, shift : int or 1-D array_like of int
        From :func:`quantize_multiplier`; 1-D arrays are per channel along ``axis``.
        ``-31 <= shift <= 30``; ``multiplier`` in int32 (``>= 0`` for single rounding).
    rounding : {"double", "single"}
    axis : int
        Channel axis of ``acc`` for per-channel parameters.

    Returns
    -------
    ndarray of int64
        int32-range values, shape of ``acc``.
    """
    x = _int_array(acc, "acc")
    if x.size and (int(x.min()) < INT32_MIN or int(x.max()) > INT32_MAX):
        raise ValueError("multiply_by_quantized_multiplier: acc must fit int32 (gemmlowp arithmetic); "
                         "use an accumulator of at most 32 bits, or requantize with kind 'shift' or "
                         f"'float' (got values in [{int(x.min())}, {int(x.max())}])")
    ax = _norm_axis(axis, x.ndim)
    n_ch = x.shape[ax] if x.ndim else 1
    m = _per_channel(_int32_array(multiplier, "multiplier"), n_ch, x.ndim, ax, "multiplier")
    s = _per_channel(_int_array(shift, "shift"), n_ch, x.ndim, ax, "shift")
    _check_range(s, -31, 30, "shift")
    if rounding == "double":
        return _mbqm_double(x, m, s)
    if rounding == "single":
        if np.any(m < 0):
            raise ValueError("multiply_by_quantized_multiplier: single rounding needs multiplier >= 0")
        total = 31 - s
        return _wrap_int32((x * m + (np.int64(1) << (total - 1))) >> total)
    raise ValueError(f"rounding must be 'double' or 'single', got {rounding!r}")


def _mbqm_double(x64: np.ndarray, m, s) -> np.ndarray:
    r""":func:`multiply_by_quantized_multiplier` with double rounding on validated int64 values (int32 range) and
    multipliers/shifts (ints, or arrays that broadcast against ``x64``):
    :math:`\mathrm{RDBPOT}(\mathrm{SRDHM}(\mathrm{wrap}_{32}(x\,2^{\max(s,0)}), m), \max(-s, 0))`."""
    left = np.maximum(s, 0)
    shifted = _wrap_int32(x64 << left) if np.any(left) else x64
    return _rdbpot(_srdhm(shifted, m), np.maximum(-s, 0))

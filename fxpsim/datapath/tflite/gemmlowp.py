"""gemmlowp's fixed-point math on raw int32 values (exp on negative values, 1/(1+x), logistic, tanh), vectorised."""
from __future__ import annotations


import numpy as np

from ..requantize import (
    INT32_MAX, INT32_MIN, _rdbpot, _srdhm, _wrap_int32,
)

__all__ = ['calculate_input_radius', 'gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl', 'gemmlowp_exp_on_negative_values', 'gemmlowp_one_over_one_plus_x_for_x_in_0_1', 'gemmlowp_one_minus_x_over_one_plus_x_for_x_in_0_1', 'gemmlowp_logistic', 'gemmlowp_tanh', 'gemmlowp_rounding_half_sum', 'gemmlowp_saturating_rounding_multiply_by_pot']


# --------------------------------------------------------------------------- gemmlowp fixed point
def _as_raw(a, name: str = "a") -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (raw int32 fixed-point values), got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (int(arr.min()) < INT32_MIN or int(arr.max()) > INT32_MAX):
        raise ValueError(f"{name} must hold raw int32 values")
    return arr


def _add(a, b):
    return _wrap_int32(a + b)


def _sub(a, b):
    return _wrap_int32(a - b)


def _srmpot(x: np.ndarray, exponent: int) -> np.ndarray:
    r"""gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` on int32 raws: for :math:`e > 0` a left
    shift saturating when :math:`|x| > 2^{31-e} - 1`; for :math:`e < 0` ``RoundingDivideByPOT(x, -e)``."""
    if exponent == 0:
        return x
    if exponent < 0:
        return _rdbpot(x, -exponent)
    thr = (1 << (31 - exponent)) - 1
    return np.where(x > thr, INT32_MAX, np.where(x < -thr, INT32_MIN, x << exponent))


def _rhs(a, b):
    r"""gemmlowp ``RoundingHalfSum`` (int32): :math:`\operatorname{trunc}((a + b \pm 1) / 2)`, the sign of
    :math:`a+b` (:math:`+1` for 0)."""
    t = a + b + np.where(a + b >= 0, 1, -1)
    return np.where(t >= 0, t >> 1, -((-t) >> 1))


# constants of gemmlowp's fixedpoint.h (raw int32 values)
_EXP_M1_8 = 1895147668          # exp(-1/8) in Q0.31
_ONE_THIRD = 715827883          # 1/3 in Q0.31
_C48_17 = 1515870810            # 48/17 in Q2.29
_CNEG32_17 = -1010580540        # -32/17 in Q2.29
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
               (3, 720401), (4, 242))   # exp(-2^k) in Q0.31


def _exp_quarter(a):
    x = _add(a, 1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = _rdbpot(x4, 2)
    poly = _rdbpot(_add(_srdhm(_add(x4_over_4, x3), _ONE_THIRD), x2), 1)
    return _add(_EXP_M1_8, _srdhm(_EXP_M1_8, _add(x, poly)))


def _exp_neg(a, integer_bits: int):
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = _sub(a & (quarter - 1), quarter)
    result = _exp_quarter(_srmpot(a_mod, integer_bits))
    remainder = _sub(a_mod, a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder >> (frac + exponent)) & 1
            result = np.where(bit != 0, _srdhm(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def _newton_reciprocal(a):
    """Shared Newton-Raphson part of gemmlowp's ``one_over_one_plus_x`` / ``one_minus_x_over_one_plus_x``:
    returns ``x`` (Q2.29), close to 1 / half_denominator."""
    half_den = _rhs(a, INT32_MAX)
    x = _add(_C48_17, _srdhm(half_den, _CNEG32_17))
    for _ in range(3):
        one_minus = _sub(1 << 29, _srdhm(half_den, x))
        x = _add(x, _srmpot(_srdhm(x, one_minus), 2))
    return x


def _one_over_one_plus_x(a):
    return _srmpot(_newton_reciprocal(a), 1)


def _one_minus_x_over_one_plus_x(a):
    return _srmpot(_sub(_newton_reciprocal(a), 1 << 29), 2)


def _fixed_logistic(a, integer_bits: int):
    pos = a > 0
    abs_a = np.where(pos, a, _wrap_int32(-a))
    rp = _one_over_one_plus_x(_exp_neg(_wrap_int32(-abs_a), integer_bits))
    rn = _sub(INT32_MAX, rp)
    return np.where(a == 0, 1 << 30, np.where(pos, rp, rn))


def _fixed_tanh(a, integer_bits: int):
    neg = a < 0
    n = np.where(neg, a, _wrap_int32(-a))
    t = _one_minus_x_over_one_plus_x(_exp_neg(n, integer_bits + 1))   # ExactMulByPot<1>: one more integer bit
    return np.where(a == 0, 0, np.where(neg, _wrap_int32(-t), t))


def _integer_bits(integer_bits) -> int:
    if isinstance(integer_bits, (bool, np.bool_)) or not isinstance(integer_bits, (int, np.integer)) \
            or not 0 <= integer_bits <= 30:
        raise ValueError(f"integer_bits must be an int in [0, 30], got {integer_bits!r}")
    return int(integer_bits)


def gemmlowp_saturating_rounding_multiply_by_pot(x, exponent: int) -> np.ndarray:
    r"""gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` on raw int32 values.

    .. math:: \mathrm{SRMPOT}(x, e) = \begin{cases} \mathrm{sat}_{32}(x\,2^e) & e > 0 \\
              \mathrm{RDBPOT}(x, -e) & e \le 0 \end{cases}

    where saturation happens when :math:`|x| > 2^{31-e} - 1` (so :math:`x = -(2^{31-e})` also
    saturates, as gemmlowp's threshold test does).
    """
    if not isinstance(exponent, (int, np.integer)) or not -31 <= exponent <= 31:
        raise ValueError(f"exponent must be an int in [-31, 31], got {exponent!r}")
    return _srmpot(_as_raw(x, "x"), int(exponent))


def gemmlowp_rounding_half_sum(a, b) -> np.ndarray:
    r"""gemmlowp ``RoundingHalfSum`` (int32): :math:`\operatorname{trunc}((a + b + \mathrm{sgn}(a + b)) / 2)`,
    :math:`\mathrm{sgn}(0) = 1`, i.e. :math:`(a+b)/2` rounded half away from zero."""
    return _rhs(_as_raw(a, "a"), _as_raw(b, "b"))


def gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    r"""gemmlowp's :math:`e^a` for :math:`a \in [-1/4, 0)`, Q0.31 in and out (raw int32).

    With :math:`x = a + 1/8`: :math:`e^{-1/8}\big(1 + x + \mathrm{rd}_1(\mathrm{rd}_2(x^4) + x^3)/3 + x^2)/2\big)`,
    every product a ``SaturatingRoundingDoublingHighMul``, :math:`\mathrm{rd}_k` = ``RoundingDivideByPOT(., k)``.
    """
    return _exp_quarter(_as_raw(a))


def gemmlowp_exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    r"""gemmlowp ``exp_on_negative_values``: :math:`e^a` for :math:`a \le 0` given as raw
    :math:`\mathrm{Q}k.(31-k)`, result Q0.31 (:math:`a = 0` gives :math:`2^{31}-1`).

    :math:`a` is split into :math:`a \bmod 1/4 - 1/4 \in [-1/4, 0)` (evaluated by
    :func:`gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl`) and a multiple of
    :math:`1/4` whose bits select the factors :math:`e^{-1/4}, e^{-1/2}, \dots, e^{-16}`; for :math:`k > 5`
    inputs below :math:`-32` give 0.
    """
    return _exp_neg(_as_raw(a), _integer_bits(integer_bits))


def gemmlowp_one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    r"""gemmlowp :math:`1/(1+x)` for :math:`x \in (0, 1)`, Q0.31 in and out: three Newton-Raphson steps
    on :math:`d = (1+x)/2` from :math:`48/17 - 32/17\,d`, computed in Q2.29."""
    return _one_over_one_plus_x(_as_raw(a))


def gemmlowp_one_minus_x_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    r"""gemmlowp :math:`(1-x)/(1+x)` for :math:`x \in (0, 1)`, Q0.31 in and out (same Newton iteration)."""
    return _one_minus_x_over_one_plus_x(_as_raw(a))


def gemmlowp_logistic(a, integer_bits: int) -> np.ndarray:
    r"""gemmlowp ``logistic``: :math:`1/(1+e^{-a})` of a raw :math:`\mathrm{Q}k.(31-k)` value, Q0.31 result:
    :math:`1/(1+e^{-|a|})` for :math:`a > 0`, one minus that for :math:`a < 0`, :math:`2^{30}` at 0."""
    return _fixed_logistic(_as_raw(a), _integer_bits(integer_bits))


def gemmlowp_tanh(a, integer_bits: int) -> np.ndarray:
    r"""gemmlowp ``tanh`` of a raw :math:`\mathrm{Q}k.(31-k)` value, Q0.31 result:
    :math:`\mathrm{sgn}(a)\,(1 - e^{-2|a|})/(1 + e^{-2|a|})` (``exp_on_negative_values`` with
    :math:`k+1` integer bits, then ``one_minus_x_over_one_plus_x_for_x_in_0_1``)."""
    return _fixed_tanh(_as_raw(a), _integer_bits(integer_bits))


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    r"""TFLite ``CalculateInputRadius``: the largest input magnitude that still fits once rescaled.

    .. math:: r = \Big\lfloor \frac{(2^{b} - 1)\, 2^{T - b}}{2^{s}} \Big\rfloor

    with :math:`b` = ``input_integer_bits``, :math:`T` = ``total_signed_bits``, :math:`s` =
    ``input_left_shift`` (computed exactly; TFLite's double arithmetic is exact here).
    """
    for name, v in (("input_integer_bits", input_integer_bits), ("input_left_shift", input_left_shift),
                    ("total_signed_bits", total_signed_bits)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    b, s, t = int(input_integer_bits), int(input_left_shift), int(total_signed_bits)
    if not 0 <= b <= t <= 62 or not -62 <= s <= 62:
        raise ValueError("calculate_input_radius: need 0 <= input_integer_bits <= total_signed_bits <= 62 "
                         f"and |input_left_shift| <= 62, got {b}, {s}, {t}")
    num = ((1 << b) - 1) << (t - b)
    return num >> s if s >= 0 else num << -s

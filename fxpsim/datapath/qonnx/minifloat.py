"""QONNX's ``FloatQuant`` (minifloat quantization) as exact integer arithmetic on a :class:`FloatFormat`.

qonnx (``qonnx/custom_op/general/floatquant.py``, after Brevitas' ``FloatQuant``) defines, for a real input
:math:`x`, scale :math:`s`, exponent and mantissa widths :math:`e, m`, exponent bias :math:`b` and a maximum
``max_val``, with :math:`y = x / s` and :math:`e_{min} = 1 - b`:

.. math::

    q &= \\max(\\lfloor \\log_2 |y| \\rfloor,\\ e_{min}) - m \\qquad \\text{(the quantum is } 2^q\\text{)} \\\\
    \\mathrm{FloatQuant}(x) &= s \\cdot \\mathrm{clip}\\big(2^q\\,\\mathrm{round}(y / 2^q),\\ -v_{max},\\ v_{max}\\big),
    \\qquad v_{max} = \\min\\big((2 - 2^{-m})\\,2^{\\,2^e - 1 - b},\\ \\mathrm{max\\_val}\\big)

-- rounding first, then the clamp (unlike ``Quant``); ``round`` is one of QONNX's rounding modes applied to the
signed :math:`y / 2^q`. Its value set is the :class:`~fxpsim.core.float_format.FloatFormat`
``(e, m, b, signed=True, encoding="finite", subnormals=True)``: every exponent field is a normal binade (the all
ones field included, no code reserved for Inf/NaN) and subnormals always exist -- qonnx's ``has_inf``,
``has_nan`` and ``has_subnormal`` do not change its execution (they "inform backends"); ``max_val`` is how an
exporter removes the top codes. Every value is an integer multiple of the smallest subnormal
:math:`2^{e_{min} - m}`, so the output is an integer *unit* code :math:`u` with value :math:`s\\,u\\,2^{e_{min}-m}`
and :math:`|u| \\le v_{max} / 2^{e_{min} - m}`: this module computes :math:`u` from an exact rational
:math:`y = n / d` with Python integers (:math:`\\lfloor\\log_2\\rfloor` from bit lengths), no float involved.

qonnx evaluates :math:`\\log_2` in float32: for :math:`|y|` within a float32 rounding of a power of two from
below, it takes the next binade's quantum. The nearest modes give the same result either way; the directed
modes (``FLOOR``, ``CEIL``, ``UP``, ``DOWN``) can then differ from the exact answer by one quantum.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...core.float_format import FloatFormat
from .arithmetic import float_parts, round_div

__all__ = ["minifloat_format", "max_units", "minifloat_units", "minifloat_units_float"]


def minifloat_format(exp_bits, man_bits, bias) -> FloatFormat:
    """The :class:`FloatFormat` of QONNX's ``FloatQuant`` with these widths and bias (see the module docstring)."""
    for what, v in (("exponent bit width", exp_bits), ("mantissa bit width", man_bits), ("exponent bias", bias)):
        f = float(v)
        if not np.isfinite(f) or f != int(f):
            raise ValueError(f"FloatQuant: the {what} must be an integer, got {v!r}")
    if int(float(exp_bits)) < 1:
        raise ValueError(f"FloatQuant: the exponent bit width must be >= 1, got {exp_bits!r}")
    return FloatFormat(int(float(exp_bits)), int(float(man_bits)), int(float(bias)), True, "finite", True,
                       name=f"FloatQuant<e{int(float(exp_bits))}m{int(float(man_bits))}b{int(float(bias))}>")


def _unit_exp(fmt: FloatFormat) -> int:
    """:math:`e_{min} - m`: the exponent of the smallest subnormal, the unit of the codes."""
    return 1 - fmt.bias - fmt.man_bits


def max_units(fmt: FloatFormat, max_val=None) -> int:
    """:math:`v_{max} / 2^{e_{min} - m}`, the largest unit code; ``max_val`` (a float, or None) must lie on the
    format's grid when it is below the format's largest value."""
    top = fmt.mag_value(fmt.max_mag_code)
    if max_val is not None:
        mv = Fraction(float(max_val))
        if mv <= 0:
            raise ValueError(f"FloatQuant: max_val must be positive, got {max_val!r}")
        top = min(top, mv)
    units = top / Fraction(2) ** _unit_exp(fmt)
    if units.denominator != 1:
        raise ValueError(f"FloatQuant: max_val {float(max_val)!r} is not a multiple of the smallest subnormal "
                         f"2^{_unit_exp(fmt)} of {fmt}; fxpsim holds FloatQuant outputs on that grid")
    return int(units)


def _floor_log2(a: int, d: int) -> int:
    """:math:`\\lfloor \\log_2 (a / d) \\rfloor` for positive integers."""
    e = a.bit_length() - d.bit_length()             # 2^(e-1) < a/d < 2^(e+1)
    if (a << max(0, -e)) < (d << max(0, e)):
        e -= 1
    return e


_LOG2 = np.frompyfunc(lambda a, d: _floor_log2(int(a), int(d)) if a else 0, 2, 1)


def minifloat_units(num, den, fmt: FloatFormat, top: int, mode: str) -> np.ndarray:
    """Unit codes ``u`` of :math:`\\mathrm{FloatQuant}(y)` for exact rationals :math:`y = n/d` (integer arrays,
    :math:`d > 0`, broadcast), clipped to ``[-top, top]`` (:func:`max_units`); an int64 array."""
    n, d = np.broadcast_arrays(np.asarray(num).astype(object), np.asarray(den).astype(object))
    emin, m = 1 - fmt.bias, fmt.man_bits
    L = _LOG2(np.abs(n), d)
    q = np.maximum(L, emin) - m                     # quantum exponent, object ints
    up = np.maximum(-q, 0)
    down = np.maximum(q, 0)
    r = round_div(n * (np.ones_like(up) << up), d * (np.ones_like(down) << down), mode)
    u = r * (np.ones_like(q) << (q - (emin - m)))   # q - (emin - m) = max(L, emin) - emin >= 0
    u = np.minimum(np.maximum(u, -top), top)
    return u.astype(np.int64)


def minifloat_units_float(x, scale, fmt: FloatFormat, top: int, mode: str) -> np.ndarray:
    """:func:`minifloat_units` of float inputs: :math:`y = x / s` exactly for finite float32 ``x`` and ``s > 0``."""
    x = np.asarray(x, np.float64)
    s = np.broadcast_to(np.asarray(scale, np.float64), x.shape)
    if not np.all(np.isfinite(x)):
        raise ValueError("FloatQuant: the input holds NaN or inf")
    if np.any(s <= 0) or not np.all(np.isfinite(s)):
        raise ValueError("FloatQuant: scales must be positive and finite")
    xm, xe = float_parts(x)
    sm, se = float_parts(s)
    sh = (xe - se).astype(object)
    num = xm.astype(object) * (np.ones(x.shape, object) << np.maximum(sh, 0))
    den = sm.astype(object) * (np.ones(x.shape, object) << np.maximum(-sh, 0))
    return minifloat_units(num, den, fmt, top, mode)

"""Independent exact reference model of small floating-point formats (test-only; never imported by fxpsim).

Everything is computed from the definitions, one element at a time, on :class:`fractions.Fraction`:

* :func:`code_table` lists every code of a format (at most 16 bits) with its value from the
  encoding's definition -- sign, exponent field ``f``, mantissa field ``t``:
  :math:`t \\cdot 2^{1-b-m}` for ``f = 0`` (zero when subnormals are flushed),
  :math:`(2^m + t) \\cdot 2^{f-b-m}` otherwise -- and the special codes of each encoding
  (IEEE: ``f`` all ones; FN: all ones is NaN; FNUZ: 0x80 is NaN; FNU: no zero, all ones NaN;
  P3109: 0x80 NaN, 0x7F / 0xFF infinities; unsigned P3109: 0xFF NaN, 0xFE +Inf; finite: none).
* :func:`round_exact` rounds an exact rational by *searching* the sorted list of finite values
  for its two neighbours (no bit manipulation), then applies the rounding rule, the overflow
  rule, flushing and the sign rules.

The format is read from an object with ``exp_bits, man_bits, bias, signed, encoding, subnormals``.

Rules (the contract :func:`fxpsim.core.float_codec.encode` is tested against):

* The grid of a format is extended above its largest finite value ``max`` by one virtual value
  ``max + 2^(floor(log2 max) - m)`` (what the next code would be if the exponent were unbounded);
  rounding picks between the two grid neighbours of ``|x|``; "even"/"odd" is the parity of the
  magnitude code (the virtual value has code ``max_code + 1``).
* A result above ``max`` overflows: saturate -> ``max``; ``inf`` -> Inf; ``nan`` -> NaN; but a
  finite value rounded toward zero (toward_zero, odd, floor of x > 0, ceil of x < 0) gives ``max``.
* Infinite inputs: saturate -> ``±max``, ``inf`` -> ±Inf, ``nan`` -> NaN.
* Flushing: a nonzero result below the smallest normal becomes zero when the format has no
  subnormals or ``ftz``; ``daz`` reads inputs below ``daz_threshold`` as zero.
* A zero result keeps the sign only where the format has -0.
* Unsigned formats: a negative value whose magnitude rounds to nonzero (and -inf) is out of
  range: 0 under saturate when the format has a zero, NaN otherwise.  FNU (no zero): zero and
  every negative value give NaN; values below the smallest value give the smallest value.
"""
from __future__ import annotations

import bisect
import math
from fractions import Fraction

NAN = "nan"
POS_INF = "+inf"
NEG_INF = "-inf"


def _p2(k: int) -> Fraction:
    return Fraction(2) ** k


def code_value(fmt, code: int):
    """The value of ``code``: a Fraction, ``NAN``, ``POS_INF`` or ``NEG_INF`` (-0 is Fraction(0))."""
    e, m, b, enc = fmt.exp_bits, fmt.man_bits, fmt.bias, fmt.encoding
    mag_bits = e + m
    negative = bool(fmt.signed and (code >> mag_bits) & 1)
    mag = code & ((1 << mag_bits) - 1)
    f, t = mag >> m, mag & ((1 << m) - 1)
    all_e, all_t, all_mag = (1 << e) - 1, (1 << m) - 1, (1 << mag_bits) - 1
    inf = NEG_INF if negative else POS_INF
    if enc == "ieee" and f == all_e:
        return inf if t == 0 else NAN
    if enc == "fn" and mag == all_mag:
        return NAN
    if enc == "fnuz" and negative and mag == 0:
        return NAN
    if enc == "fnu" and mag == all_mag:
        return NAN
    if enc == "p3109":
        if fmt.signed:
            if negative and mag == 0:
                return NAN
            if mag == all_mag:
                return inf
        else:
            if mag == all_mag:
                return NAN
            if mag == all_mag - 1:
                return POS_INF
    if enc == "fnu":
        value = (2 ** m + t) * _p2(f - b - m)
    elif f == 0:
        value = t * _p2(1 - b - m) if fmt.subnormals else Fraction(0)
    else:
        value = (2 ** m + t) * _p2(f - b - m)
    return -value if negative else value


def code_table(fmt) -> dict:
    """``{code: value}`` for every code of a format of at most 16 bits."""
    bits = int(fmt.signed) + fmt.exp_bits + fmt.man_bits
    assert bits <= 16, "the reference enumerates codes: at most 16 bits"
    return {c: code_value(fmt, c) for c in range(1 << bits)}


class Grid:
    """The nonnegative finite values of a format, sorted, with their magnitude codes."""

    def __init__(self, fmt):
        self.fmt = fmt
        # results are rounded with subnormal precision, then flushed (see round_exact)
        table = code_table(_WithSubnormals(fmt))
        mag_bits = fmt.exp_bits + fmt.man_bits
        pos = {}
        for c, v in table.items():
            if isinstance(v, Fraction) and v >= 0 and c < (1 << mag_bits):
                if v not in pos or c < pos[v]:
                    pos[v] = c                  # the smallest code of a value (0, not a flushed subnormal)
        self.values = sorted(pos)
        self.codes = [pos[v] for v in self.values]
        self.max = self.values[-1]
        self.max_code = self.codes[-1]
        self.min_normal = _p2((-fmt.bias) if fmt.encoding == "fnu" else 1 - fmt.bias)
        self.virtual = self.max + _p2(_floor_log2(self.max) - fmt.man_bits)
        self.nan = next((c for c, v in table.items() if v == NAN), None)
        self.inf = next((c for c, v in table.items() if v == POS_INF), None)
        self.neg_inf = next((c for c, v in table.items() if v == NEG_INF), None)
        self.has_zero = self.values[0] == 0
        self.has_neg_zero = fmt.signed and fmt.encoding in ("ieee", "fn", "finite")
        self.sign_bit = (1 << mag_bits) if fmt.signed else 0


class _WithSubnormals:
    def __init__(self, fmt):
        for a in ("exp_bits", "man_bits", "bias", "signed", "encoding"):
            setattr(self, a, getattr(fmt, a))
        self.subnormals = True


def _floor_log2(q: Fraction) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e if q >= _p2(e) else e - 1


def _neighbours(grid: Grid, a: Fraction):
    """(lo, lo_code, hi, hi_code): the grid values with lo <= a <= hi (hi may be the virtual value)."""
    vals = grid.values
    if a >= grid.max:
        if a == grid.max:
            return grid.max, grid.max_code, grid.max, grid.max_code
        return grid.max, grid.max_code, grid.virtual, grid.max_code + 1
    hi_i = bisect.bisect_left(vals, a)                  # first value >= a
    lo_i = hi_i if vals[hi_i] == a else hi_i - 1        # last value <= a
    if lo_i < 0:
        return None, None, vals[hi_i], grid.codes[hi_i]
    return vals[lo_i], grid.codes[lo_i], vals[hi_i], grid.codes[hi_i]


def round_exact(x, fmt, rounding="half_even", overflow="saturate", ftz=False, daz_threshold=None,
                u=None, random_bits=None, grid: Grid | None = None) -> int:
    """The code of ``x`` (a float, Fraction or ``math.inf`` / ``math.nan``) in ``fmt``; see the rules above.

    Stochastic rounding: with ``p = floor((a - lo) / (hi - lo) * 2^R)``, round up iff ``p + u >= 2^R``.
    """
    g = grid or Grid(fmt)
    if isinstance(x, float) and math.isnan(x):
        return g.nan
    negative = (x < 0) if not isinstance(x, float) else math.copysign(1.0, x) < 0
    if isinstance(x, float) and math.isinf(x):
        if not fmt.signed and negative:
            return _unsigned_negative(g, overflow)
        if overflow == "inf":
            return g.neg_inf if negative else g.inf
        if overflow == "nan":
            return _signed_nan(g, negative)
        return g.max_code | (g.sign_bit if negative else 0)
    a = abs(Fraction(x))
    if daz_threshold is not None and a < daz_threshold:
        a = Fraction(0)
    if fmt.encoding == "fnu":
        if a == 0 or negative:
            return g.nan
        if a < g.values[0]:
            return g.codes[0]
    if a == 0:
        return (g.sign_bit if negative and g.has_neg_zero else 0)
    lo, lo_c, hi, hi_c = _neighbours(g, a)
    if lo == hi:
        value, code = lo, lo_c
    else:
        toward_zero = {"toward_zero": True, "odd": True, "floor": not negative, "ceil": negative}
        r = rounding
        if r in ("toward_zero", "floor", "ceil"):
            up = not toward_zero[r]
        elif r == "odd":
            up = hi_c % 2 == 1
        elif r == "stochastic":
            p = math.floor((a - lo) / (hi - lo) * 2 ** random_bits)
            up = p + int(u) >= 2 ** random_bits
        else:
            mid = (lo + hi) / 2
            if a != mid:
                up = a > mid
            else:
                up = {"half_even": hi_c % 2 == 0, "half_away": True, "half_toward_zero": False,
                      "half_up": not negative, "half_down": negative}[r]
        value, code = (hi, hi_c) if up else (lo, lo_c)
        if code > g.max_code:                              # overflow of a finite value
            if not fmt.signed and negative:
                return _unsigned_negative(g, overflow)
            if toward_zero.get(r, False) or overflow == "saturate":
                value, code = g.max, g.max_code
            elif overflow == "inf":
                return g.neg_inf if negative else g.inf
            else:
                return _signed_nan(g, negative)
    if value != 0 and value < g.min_normal and (ftz or not fmt.subnormals) and fmt.encoding != "fnu":
        value, code = Fraction(0), 0
    if not fmt.signed and negative:
        return 0 if value == 0 else _unsigned_negative(g, overflow)
    if value == 0:
        return g.sign_bit if (negative and g.has_neg_zero) else 0
    return code | (g.sign_bit if negative else 0)


def _unsigned_negative(g: Grid, overflow: str) -> int:
    """A negative value in an unsigned format: 0 under saturate (where a zero exists), else NaN."""
    return g.nan if (g.nan is not None and (overflow != "saturate" or not g.has_zero)) else 0


def _signed_nan(g: Grid, negative: bool) -> int:
    if g.fmt.encoding in ("ieee", "fn") and g.fmt.signed and negative:
        return g.nan | g.sign_bit
    return g.nan


# --------------------------------------------------------------------------- block formats
def mx_shared_exponent(values, emax_elem: int, man_bits: int, elem_max: Fraction, rule: str = "floor"):
    """The E8M0 exponent of one block by the definitions (OCP v1.0 6.3 for ``floor``), or ``NAN``.

    floor: floor(log2 amax) - emax; ceil: ceil(log2 amax) - emax; even: amax rounded half-up to
    ``man_bits`` mantissa bits first, then floor; rceil: ceil(log2(amax / elem_max)).  Clamped
    below at -127; above 127, and for blocks with NaN/Inf, the NaN scale.  amax = 0: -127.
    """
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        return NAN
    amax = max(abs(Fraction(v)) for v in values)
    if amax == 0:
        return -127
    if rule == "floor":
        e = _floor_log2(amax) - emax_elem
    elif rule == "ceil":
        f = _floor_log2(amax)
        e = (f if amax == _p2(f) else f + 1) - emax_elem
    elif rule == "even":
        f = _floor_log2(amax)
        quantum = _p2(f - man_bits)
        rounded = math.floor(amax / quantum + Fraction(1, 2)) * quantum
        e = _floor_log2(rounded) - emax_elem
    elif rule == "rceil":
        r = amax / elem_max
        f = _floor_log2(r)
        e = f if r == _p2(f) else f + 1
    else:
        raise ValueError(rule)
    if e > 127:
        return NAN
    return max(e, -127)


def round_to_float32(q: Fraction) -> Fraction:
    """Round a positive rational in float32's normal range to float32, ties to even."""
    e = _floor_log2(q) - 23
    n = q / _p2(e)
    lo = math.floor(n)
    frac = n - lo
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return lo * _p2(e)


def int_element(v: Fraction, word: int, frac: int) -> int:
    """Two's complement code (as an unsigned byte pattern) of round-half-even(v * 2^frac), saturated."""
    n = v * _p2(frac)
    lo = math.floor(n)
    r = n - lo
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    lo = max(-(1 << (word - 1)), min((1 << (word - 1)) - 1, lo))
    return lo & ((1 << word) - 1)

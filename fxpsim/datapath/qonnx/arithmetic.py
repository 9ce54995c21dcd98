"""Exact integer arithmetic of QONNX's custom ops (``Quant``/``IntQuant``, ``BipolarQuant``, ``Trunc``,
``MultiThreshold``) on integer codes, and the exact float32 reading of a scaled code.

QONNX (``docs/qonnx-custom-ops/quant_op.md``) defines, for a real input :math:`x`, scale :math:`s`, zero point
:math:`z` and integer bounds :math:`[q_{min}, q_{max}]` of the bit width, signedness and narrow range,

.. math::

    \\mathrm{Quant}(x) = s\\,\\big(\\mathrm{round}(\\mathrm{clip}(x/s + z, q_{min}, q_{max})) - z\\big),

clamping *before* rounding. For every rounding mode here (all are monotone and fix the integers),
:math:`\\mathrm{round}(\\mathrm{clip}(y, a, b)) = \\mathrm{clip}(\\mathrm{round}(y), \\mathrm{round}(a),
\\mathrm{round}(b))`, so the kernels round an exact rational and clip to the rounded bounds; for integer bounds
(integer bit widths) the two orders agree, for a fractional bit width the bounds themselves are rounded.

The input is always an exact rational :math:`y = n / d` (``n`` an integer array, ``d > 0``), so every mode is
decided by the floor :math:`\\lfloor n/d \\rfloor` and the remainder: no float is involved. A float32 input is
exact too: :func:`quantize_float` reads each value's mantissa and exponent (:func:`float_parts`).
"""
from __future__ import annotations

import numpy as np

__all__ = ["ROUNDING_MODES", "rounding_mode", "round_div", "round_fraction", "clip_codes", "quantize_codes",
           "quantize_float", "bipolar", "trunc_codes", "threshold_counts", "float_parts", "dyadic_codes",
           "to_float32", "int_bounds"]

#: QONNX's rounding modes (``resolve_rounding_mode``): the name, then :math:`\\mathrm{round}(y)`.
ROUNDING_MODES = {
    "ROUND": "nearest, ties to even (numpy.round); HALF_EVEN is an alias",
    "CEIL": "ceil(y)",
    "FLOOR": "floor(y)",
    "UP": "sign(y) ceil(|y|): away from zero",
    "DOWN": "sign(y) floor(|y|): toward zero (numpy.fix)",
    "HALF_UP": "sign(y) floor(|y| + 1/2): nearest, ties away from zero",
    "HALF_DOWN": "sign(y) ceil(|y| - 1/2): nearest, ties toward zero",
}

_LIMIT = 1 << 62


def rounding_mode(name) -> str:
    """The canonical name of a QONNX rounding mode (case-insensitive; ``HALF_EVEN`` is ``ROUND``)."""
    mode = str(name).upper()
    if mode == "HALF_EVEN":
        mode = "ROUND"
    if mode not in ROUNDING_MODES:
        raise ValueError(f"unknown QONNX rounding mode {name!r}; QONNX defines: {', '.join(ROUNDING_MODES)}, "
                         "HALF_EVEN")
    return mode


def _wide(*arrays) -> bool:
    big = 0
    for a in arrays:
        a = np.asarray(a)
        if a.size:
            big = max(big, abs(int(a.max())), abs(int(a.min())))
    return big >= _LIMIT


def _obj(a) -> np.ndarray:
    return np.asarray(a).astype(object)


def round_div(num, den, mode: str) -> np.ndarray:
    """:math:`\\mathrm{round}(n / d)` for integer arrays ``num`` and ``den > 0`` (broadcast), in ``mode``.

    int64 when both fit in 62 bits, Python integers (object arrays) otherwise; the result has that dtype."""
    num, den = np.asarray(num), np.asarray(den)
    if num.dtype == object or den.dtype == object or _wide(num, den):
        num, den = _obj(num), _obj(den)
    else:
        num, den = num.astype(np.int64), den.astype(np.int64)
    return _round_div_any(num, den, mode)


def _round_div_any(num, den, mode: str) -> np.ndarray:
    """:func:`round_div` on arrays already int64 (every :math:`|n| + 2d < 2^{63}`) or both object."""
    q = num // den                                  # floor (numpy and Python both floor)
    r = num - q * den                               # 0 <= r < den
    twice = 2 * r
    up = _round_up(q, r != 0, twice > den, twice == den, num < 0, num > 0, mode)
    return q + np.asarray(up).astype(np.int64 if q.dtype != object else object)


def _round_up(q, inexact, above, tie, neg, pos, mode: str):
    """Whether :math:`\\mathrm{round}(y)` is :math:`\\lfloor y \\rfloor + 1`, from :math:`q = \\lfloor y \\rfloor`,
    whether :math:`y` is not an integer, its fraction :math:`> 1/2` / :math:`= 1/2`, and :math:`y < 0` / :math:`y > 0`."""
    if mode == "FLOOR":
        return np.zeros(np.shape(q), bool)
    if mode == "CEIL":
        return inexact
    if mode == "DOWN":
        return inexact & neg
    if mode == "UP":
        return inexact & pos
    if mode == "ROUND":
        return above | (tie & (q % 2 != 0))
    if mode == "HALF_UP":
        return above | (tie & pos)
    if mode == "HALF_DOWN":
        return above | (tie & neg)
    raise ValueError(f"unknown rounding mode {mode!r}")


def round_fraction(value, mode: str) -> int:
    """:math:`\\mathrm{round}(v)` of one exact number (int, float or Fraction) in ``mode``, as a Python int."""
    from fractions import Fraction
    f = Fraction(value)
    return int(round_div(np.array([f.numerator], object), np.array([f.denominator], object), mode)[0])


def clip_codes(q, lo: int, hi: int) -> np.ndarray:
    """Clip codes to ``[lo, hi]`` and return int64 (the bounds of a QONNX type always fit)."""
    q = np.asarray(q)
    if q.dtype == object:
        q = np.minimum(np.maximum(q, lo), hi)
    return np.clip(q.astype(np.int64), lo, hi)


def quantize_codes(v, num, den, zp, lo: int, hi: int, mode: str) -> np.ndarray:
    """Codes :math:`\\mathrm{clip}(\\mathrm{round}(v\\,n/d + z), q_{lo}, q_{hi})` of integer values ``v``
    (the input's centred codes; its scale over the output scale is :math:`n/d`)."""
    v, num, den, zp = (np.asarray(a) for a in (v, num, den, zp))
    if _wide(v, num, den, zp) or (int(np.abs(v).max(initial=0)) * int(np.abs(num).max(initial=0))
                                  + int(np.abs(zp).max(initial=0)) * int(den.max(initial=1)) >= _LIMIT):
        v, num, den, zp = (_obj(a) for a in (v, num, den, zp))
    else:
        v, num, den, zp = (a.astype(np.int64) for a in (v, num, den, zp))
    return clip_codes(round_div(v * num + zp * den, den, mode), lo, hi)


def float_parts(x) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(m, e)`` with :math:`x = m\\,2^e` elementwise (``m`` int64, :math:`|m| < 2^{53}`) for finite floats."""
    x = np.asarray(x, np.float64)
    f, ex = np.frexp(x)
    m = np.ldexp(f, 53).astype(np.int64)
    return m, ex.astype(np.int64) - 53


def quantize_float(x, scale, zp, lo: int, hi: int, mode: str) -> np.ndarray:
    r"""Codes :math:`\mathrm{clip}(\mathrm{round}(x / s + z), q_{lo}, q_{hi})` of float32 values ``x`` for float32
    scales ``s > 0`` (both exact binary numbers; ``scale`` and ``zp`` broadcast against ``x``).

    Exact: :math:`t = x/s` is reduced to :math:`\lfloor 8t \rfloor` with a sticky bit (round to odd at
    :math:`2^{-4}`), which keeps :math:`\lfloor t + z \rfloor` and how the fraction compares with 0 and 1/2 for
    every integer ``z``, hence every rounding mode; :math:`|t| > 2^{34}` lies beyond any bound of up to 33 bits.
    Bounds and zero point within :math:`2^{23}` (:math:`\max(|q_{lo}|, |q_{hi}|) + |z| \le 2^{23}`, every
    quantizer of up to 23 bits) take :func:`_quantize_float64`, the same codes in a few float64 passes.
    """
    x = _float32(x, "the input")
    s = np.broadcast_to(_float32(scale, "the scale"), x.shape)
    z = np.broadcast_to(np.asarray(zp, np.int64), x.shape)
    if np.any(s <= 0):
        raise ValueError("quantize_float: scales must be positive")
    if max(abs(lo), abs(hi)) > 1 << 33 or int(np.abs(z).max(initial=0)) > 1 << 32:
        raise ValueError("quantize_float: bounds or zero point too wide (33 and 32 bits at most)")
    if max(abs(lo), abs(hi)) + int(np.abs(z).max(initial=0)) <= _FAST_BOUND:
        return _quantize_float64(x, s, z, lo, hi, mode)
    return _quantize_float_exact(x, s, z, lo, hi, mode)


def _quantize_float_exact(x, s, z, lo: int, hi: int, mode: str) -> np.ndarray:
    """:func:`quantize_float` by integer mantissas (any bounds of up to 33 bits; float32 ``x``, ``s``, int64 ``z``
    of ``x``'s shape)."""
    fx, ex = np.frexp(x)
    fs, es = np.frexp(s)
    m = np.ldexp(fx.astype(np.float64), 24).astype(np.int64)        # x = m 2^(ex - 24), |m| < 2^24
    sm = np.ldexp(fs.astype(np.float64), 24).astype(np.int64)       # s = sm 2^(es - 24), 2^23 <= sm < 2^24
    k = ex.astype(np.int64) - es.astype(np.int64) + 3               # 8 x / s = m 2^k / sm
    with np.errstate(over="ignore", under="ignore"):
        t = x.astype(np.float64) / s.astype(np.float64)
    sat = np.abs(t) > 2.0 ** 34
    k = np.where(sat, 0, k)
    left = np.where(k >= 0, k, 0)
    right = np.where(k < 0, -k, 0)
    huge = right > 36                                               # |8t| < 2^24 / 2^36 < 1
    right = np.where(huge, 0, right)
    num = np.where(sat, 0, m) << left
    den = sm << right
    floor8 = num // den
    sticky = (num - floor8 * den) != 0
    floor8 = np.where(huge, np.where(m < 0, -1, 0), floor8)
    sticky = np.where(huge, m != 0, sticky)
    v = 2 * floor8 + sticky.astype(np.int64)                        # 16 t, rounded to odd
    q = round_div(16 * z + v, 16, mode)
    q = np.where(sat, np.where(t > 0, hi, lo), q)
    return clip_codes(q, lo, hi)


#: Bounds (plus zero point) up to which :func:`quantize_float` takes the float64 path.
_FAST_BOUND = 1 << 23


def _quantize_float64(x, s, z, lo: int, hi: int, mode: str) -> np.ndarray:
    r""":func:`quantize_float` through :math:`\hat t = \mathrm{fl}_{64}(x / s)`, when
    :math:`\max(|q_{lo}|, |q_{hi}|) + |z| \le 2^{23}`.

    With :math:`x = m_x 2^a m_s^{-1} s` (:math:`|m_x|, m_s < 2^{24}`), :math:`t = x/s = N/D` with integers
    :math:`N = m_x 2^{\max(a,0)}`, :math:`D = m_s 2^{\max(-a,0)}`; for :math:`|t| < 2^{24}`, :math:`|N| < 2^{48}`
    and a :math:`t` off the half-integers lies at least :math:`1/(2D)` from each, farther than the one rounding
    :math:`|\hat t - t| \le 2^{-53}|t| < 2^{-29}/D`; half-integers below :math:`2^{24}` are float64 numbers.
    So :math:`\lfloor \hat t \rfloor = \lfloor t \rfloor` and :math:`r = \hat t - \lfloor \hat t \rfloor`
    (exact) compares with 0 and 1/2 as the true fraction: with :math:`q = \lfloor t \rfloor + z` every mode
    is decided as in :func:`round_div`.  :math:`|t| \ge 2^{24}` saturates (beyond every bound plus zero point).
    """
    with np.errstate(over="ignore", under="ignore"):
        t = x.astype(np.float64) / s.astype(np.float64)
    big = np.abs(t) >= float(1 << 24)
    t = np.where(big, 0.0, t)
    f = np.floor(t)
    r = t - f
    q = f.astype(np.int64) + z
    inexact = r != 0
    up = _round_up(q, inexact, r > 0.5, r == 0.5, q < 0, (q > 0) | ((q == 0) & inexact), mode)
    q = q + up
    q = np.where(big, np.where(x > 0, hi, lo), q)
    return np.clip(q, lo, hi)


#: The modes numpy rounds a float64 to an integer in directly.  Exact on a float64 :math:`\\hat t` that is
#: :math:`t` itself, or that has :math:`t`'s floor and :math:`t`'s fraction's order against 0 and 1/2 (the
#: float64 quotient of :func:`_quantize_float64`): each result depends on those alone.
FLOAT64_ROUNDING = {"ROUND": np.rint, "FLOOR": np.floor, "CEIL": np.ceil, "DOWN": np.trunc}


def _float32(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    a32 = a.astype(np.float32)
    if a.dtype != np.float32 and not np.array_equal(a32.astype(np.float64), a.astype(np.float64)):
        raise ValueError(f"quantize_float: {what} holds values that are not float32 numbers")
    if not np.all(np.isfinite(a32)):
        raise ValueError(f"quantize_float: {what} holds NaN or inf")
    return a32


def bipolar(v) -> np.ndarray:
    """BipolarQuant's codes: :math:`+1` where :math:`v \\ge 0`, :math:`-1` elsewhere (int8)."""
    return np.where(np.asarray(v) >= 0, 1, -1).astype(np.int8)


def trunc_codes(v, num, den, zp, shift: int, mode: str, bounds=None) -> np.ndarray:
    """QONNX ``Trunc``: :math:`y_0 = \\mathrm{round\\_half\\_even}(v\\,n/d + z)`, then
    :math:`\\mathrm{round}(y_0 / 2^k)` (``shift`` = k), clipped to ``bounds`` (Trunc v2) when given."""
    y0 = quantize_codes(v, num, den, zp, -(1 << 62), (1 << 62) - 1, "ROUND")
    q = round_div(y0, np.int64(1) << int(shift), mode) if shift >= 0 else y0 * (1 << -int(shift))
    if bounds is None:
        return np.asarray(q).astype(np.int64)
    return clip_codes(q, int(bounds[0]), int(bounds[1]))


def threshold_counts(v, thresholds, channel_axis: int) -> np.ndarray:
    """MultiThreshold: the number of thresholds :math:`t_{c,j} \\le v` of each element's channel ``c``
    (``thresholds`` ``[C or 1, B]``; ``channel_axis`` of ``v``, counting the batch axis)."""
    v = np.moveaxis(np.asarray(v), channel_axis, -1)
    t = np.asarray(thresholds)
    if t.shape[0] == 1:
        t = np.broadcast_to(t, (v.shape[-1], t.shape[1]))
    out = np.zeros(v.shape, np.int64)
    for j in range(t.shape[1]):
        out += v >= t[:, j]
    return np.moveaxis(out, -1, channel_axis)


def dyadic_codes(values) -> tuple[np.ndarray, int]:
    """Exact integer codes ``c`` and one exponent ``e`` with ``values`` :math:`= c\\,2^e` (finite floats)."""
    values = np.asarray(values, np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("a constant holds NaN or inf")
    m, e = float_parts(values)
    nz = m != 0
    if not nz.any():
        return np.zeros(values.shape, np.int64), 0
    low = np.where(nz, m & -m, 1)
    tz = np.log2(low.astype(np.float64)).astype(np.int64)
    m, e = np.where(nz, m >> tz, 0), np.where(nz, e + tz, 0)
    e0 = int(e[nz].min())
    sh = np.where(nz, e - e0, 0)
    bits = np.where(nz, np.floor(np.log2(np.where(nz, np.abs(m), 1).astype(np.float64))) + 1, 0).astype(np.int64)
    if int((sh + bits).max()) > 62:
        raise ValueError("a constant spans more than 62 bits of binary range")
    codes = m << sh
    return codes.astype(np.int64), e0


def to_float32(num, den=1, exp2: int = 0) -> np.ndarray:
    """float32 nearest (ties to even) to each exact :math:`n\\,2^{e}/ d` (integer arrays, :math:`d > 0`;
    :math:`e` = ``exp2``): one rounding, subnormals and overflow to inf as IEEE 754.

    int64 ``n``, ``d`` below :math:`2^{53}` take the float64 quotient :math:`\\mathrm{fl}_{64}(n/d)\\,2^e` rounded
    to float32: exact when :math:`d` is a power of two (one rounding), and a correct rounding of :math:`n 2^e/d`
    for any :math:`d` while the result is a normal float32 (double rounding through :math:`p' = 53 \\ge 2p + 2`
    bits is innocuous for a quotient, :math:`p = 24`: Figueroa, "When is double rounding innocuous?", 1995); the
    other quotients (float32 subnormals, values near overflow) take the exact integer rounding one by one."""
    e = int(exp2)
    n, d = np.asarray(num), np.broadcast_to(np.asarray(den), np.shape(num))
    lim = 1 << 53
    if (n.dtype.kind in "iu" and d.dtype.kind in "iu" and n.size and abs(e) < 900 and int(np.abs(n).max()) < lim
            and 0 < int(d.min()) and int(d.max()) < lim):
        n64, d64 = n.astype(np.int64), d.astype(np.int64)
        q = np.ldexp(n64.astype(np.float64) / d64.astype(np.float64), e)
        a = np.abs(q)
        slow = ((d64 & (d64 - 1)) != 0) & (((a < 2.0 ** -125) & (a > 0)) | (a >= 2.0 ** 127))
        with np.errstate(over="ignore"):
            out = q.astype(np.float32)
        if slow.any():
            out[slow] = _to_float32_exact(_obj(n64[slow]) << max(e, 0), _obj(d64[slow]) << max(-e, 0))
        return out
    return _to_float32_exact(_obj(n) << max(e, 0), _obj(d) << max(-e, 0))


def _to_float32_exact(num, den=1) -> np.ndarray:
    """:func:`to_float32` element by element in Python integers (any sizes)."""
    num = _obj(num)
    den = np.broadcast_to(_obj(den), num.shape)
    out = np.empty(num.shape, np.float32)
    flat_n, flat_d, flat_o = num.ravel(), den.ravel(), out.reshape(-1)
    for i in range(flat_n.size):
        flat_o[i] = _one_float32(int(flat_n[i]), int(flat_d[i]))
    return out


def _one_float32(n: int, d: int) -> float:
    if n == 0:
        return 0.0
    sign, a = (-1.0 if n < 0 else 1.0), abs(n)
    e = a.bit_length() - d.bit_length()             # 2^e <= a/d < 2^(e+2)
    if (a << max(0, -e)) < (d << max(0, e)):
        e -= 1                                      # now 2^e <= a/d < 2^(e+1)
    e = max(e, -126)
    p = 23 - e                                      # mantissa m = round(a/d 2^p)
    mant = int(round_div(np.array([a << max(p, 0)], object), np.array([d << max(-p, 0)], object), "ROUND")[0])
    if e > 127 or (e == 127 and mant >= 1 << 24):
        return sign * float("inf")
    return sign * float(np.ldexp(float(mant), -p))


def int_bounds(bit_width, signed: bool, narrow: bool, mode: str) -> tuple[int, int]:
    """Integer code bounds of a QONNX ``Quant`` of ``bit_width`` (a numpy value, int or float typed):
    ``min_int`` / ``max_int`` exactly as qonnx writes them, evaluated in the width's own dtype for a
    fractional width and exactly for an integer-valued one, then rounded with ``mode`` (clamp before rounding)."""
    b = np.asarray(bit_width)
    if float(b) == int(float(b)):
        w = int(float(b))
        if w < 1:
            raise ValueError(f"bit width {w} < 1")
        lo = (-(1 << (w - 1)) + (1 if narrow else 0)) if signed else 0
        hi = ((1 << (w - 1)) - 1) if signed else ((1 << w) - (2 if narrow else 1))
        return lo, hi
    if signed:
        lo_f = -(2 ** (b - 1)) + (1 if narrow else 0)
        hi_f = (2 ** (b - 1)) - 1
    else:
        lo_f, hi_f = 0 * b, (2 ** b) - (2 if narrow else 1)
    return round_fraction(float(lo_f), mode), round_fraction(float(hi_f), mode)

"""TFLite LOGISTIC and TANH: the float lookup tables LiteRT builds at Prepare, and gemmlowp's fixed-point kernels (TFLite Micro)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..requantize import (
    _rdbpot, multiply_by_quantized_multiplier,
)
from ._common import _KERNELS, _clamp, _codes, _dtype, _kernels, _round_half_away, _scale, _to_int32, _zero_point
from .gemmlowp import _fixed_logistic, _fixed_tanh, calculate_input_radius

__all__ = ['LogisticParams', 'logistic_params', 'quantized_logistic', 'TanhParams', 'tanh_params', 'quantized_tanh']


# --------------------------------------------------------------------------- LOGISTIC / TANH
def _expm1f(x: np.ndarray) -> np.ndarray:
    r"""fdlibm's float32 ``expm1f`` (glibc up to 2.40), vectorised, every operation in float32.

    Argument reduction :math:`x = k \ln 2 + r` (:math:`\ln 2` split in a 24-bit head and a tail), a
    rational approximation of :math:`e^r - 1` in :math:`r` with the five ``Q`` coefficients, and the
    exponent of the result adjusted by :math:`k` (bit manipulation).  Used by :func:`_tanhf` only.
    """
    f32 = np.float32
    x = np.asarray(x, dtype=np.float32)
    one, half = f32(1.0), f32(0.5)
    hx = x.view(np.int32) & 0x7FFFFFFF
    neg = x < 0
    ln2_hi, ln2_lo, invln2 = f32(6.9313812256e-01), f32(9.0580006145e-06), f32(1.4426950216e+00)
    q1, q2, q3, q4, q5 = (f32(-3.3333335072e-02), f32(1.5873016091e-03), f32(-7.9365076090e-05),
                          f32(4.0082177293e-06), f32(-2.0109921195e-07))
    with np.errstate(all="ignore"):
        near = (hx > 0x3EB17218) & (hx < 0x3F851592)
        kf = np.trunc(invln2 * x + np.where(neg, f32(-0.5), half)).astype(np.float32)
        k = np.where(near, np.where(neg, -1, 1), kf.astype(np.int64))
        t = k.astype(np.float32)
        hi = np.where(near, np.where(neg, x + ln2_hi, x - ln2_hi), x - t * ln2_hi)
        lo = np.where(near, np.where(neg, -ln2_lo, ln2_lo), t * ln2_lo)
        reduce = hx > 0x3EB17218
        xr = np.where(reduce, hi - lo, x)
        c = np.where(reduce, (hi - xr) - lo, f32(0))
        k = np.where(reduce, k, 0)
        hfx = half * xr
        hxs = xr * hfx
        r1 = one + hxs * (q1 + hxs * (q2 + hxs * (q3 + hxs * (q4 + hxs * q5))))
        tt = f32(3.0) - r1 * hfx
        e = hxs * ((r1 - tt) / (f32(6.0) - xr * tt))
        out_k0 = xr - (xr * e - hxs)
        e2 = (xr * (e - c) - c) - hxs
        out_m1 = half * (xr - e2) - half
        out_p1 = np.where(xr < f32(-0.25), f32(-2.0) * (e2 - (xr + half)), one + f32(2.0) * (xr - e2))

        def add_exponent(y):
            return (y.view(np.int32).astype(np.int64) + (k << 23)).astype(np.int32).view(np.float32)

        y_big = add_exponent(one - (e2 - xr)) - one
        kc = np.clip(k, 0, 22)
        t_small = (0x3F800000 - (0x1000000 >> kc)).astype(np.int32).view(np.float32)
        y_small = add_exponent(t_small - (e2 - xr))
        t_mid = ((0x7F - np.clip(k, 0, 0x7F)) << 23).astype(np.int32).view(np.float32)
        y_mid = add_exponent((xr - (e2 + t_mid)) + one)
        out = np.select([k == 0, k == -1, k == 1, (k <= -2) | (k > 56), k < 23],
                        [out_k0, out_m1, out_p1, y_big, y_small], y_mid)
        out = np.where(hx < 0x33000000, x, out)                       # |x| < 2^-25: x
        out = np.where((hx >= 0x4195B844) & neg, f32(-1.0), out)      # x < -27 ln 2: -1
        out = np.where(hx >= 0x42B17218, np.where(neg, f32(-1.0), np.float32(np.inf)), out)
        out = np.where(hx > 0x7F800000, x, out)
    return out.astype(np.float32)


def _tanhf(x: np.ndarray) -> np.ndarray:
    r"""fdlibm's float32 ``tanhf`` (what glibc before 2.41 computes for ``std::tanh(float)``):
    :math:`1 - 2/(\mathrm{expm1f}(2|x|) + 2)` for :math:`1 \le |x| < 22`,
    :math:`-t/(t+2)` with :math:`t = \mathrm{expm1f}(-2|x|)` below 1, :math:`\pm 1` from 22 on; float32 throughout.

    It is up to 2 ulp from the correctly rounded value (17 % of arguments differ by one or two), and that
    changes a TANH table entry about once in 20 000 tables; glibc 2.41 and later (CORE-MATH, correctly
    rounded) or another C library would give LiteRT those other entries."""
    f32 = np.float32
    x = np.asarray(x, dtype=np.float32)
    ax = np.abs(x)
    ix = x.view(np.int32) & 0x7FFFFFFF
    one, two = f32(1.0), f32(2.0)
    with np.errstate(all="ignore"):
        t_big = _expm1f(two * ax)
        z_big = one - two / (t_big + two)
        t_small = _expm1f(-two * ax)
        z_small = -t_small / (t_small + two)
        z = np.where(ix >= 0x3F800000, z_big, z_small)
        z = np.where(ix >= 0x41B00000, one, z)
        out = np.where(x < 0, -z, z)
        out = np.where(ix < 0x24000000, x * (one + x), out)
        out = np.where(ix == 0, x, out)
        out = np.where(ix > 0x7F800000, x, out)
    return out.astype(np.float32)


def _expf(x: np.ndarray) -> np.ndarray:
    """float32 ``expf``: :math:`e^x` correctly rounded to float32 (via float64).  glibc's ``expf`` differs from
    this in about 0.06 % of arguments by one ulp, which changed no LOGISTIC table entry in 5 million
    (scale, zero point, code) triples checked when this was written (the tests compare 150 random
    tables with the C library's)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, dtype=np.float64)).astype(np.float32)


def _lut_int8(input_scale, input_zp, output_scale, output_zp, dtype, transform) -> tuple:
    r"""TFLite ``LUTPopulate<int8/uint8>`` (``detail::LUTPopulateInt8``): for every code :math:`q`,

    .. math:: \mathrm{clamp}(\mathrm{int32}(\mathrm{fl}_{32}(\mathrm{rha}(\mathrm{fl}_{32}(f(\mathrm{fl}_{32}(s_{in}(q - z_{in})))
              \cdot \mathrm{fl}_{32}(1/s_{out}))) + z_{out})))

    Returns the 256 outputs in code order (``q_min`` ... ``q_max``).
    """
    info = np.iinfo(dtype)
    codes = np.arange(int(info.min), int(info.max) + 1, dtype=np.int64)
    deq = np.float32(input_scale) * (codes - input_zp).astype(np.float32)
    inv = np.float32(1) / np.float32(output_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        rescaled = _round_half_away(transform(deq) * inv).astype(np.float32)
        q = _to_int32(rescaled + np.float32(output_zp))
    return tuple(np.clip(q, info.min, info.max).tolist())


def _lut_xnnpack(input_scale, input_zp, output_scale, output_zp, dtype, transform) -> tuple:
    r"""XNNPACK's table for a quantized unary op (its reference op evaluated on all 256 codes):
    :math:`\mathrm{clamp}(\mathrm{rhe}(\mathrm{fl}_{32}(f(\mathrm{fl}_{32}((q - z_{in})\,s_{in})) \cdot
    \mathrm{fl}_{32}(1/s_{out})) + z_{out}))` (``nearbyint``: half to even; NaN gives 0)."""
    info = np.iinfo(dtype)
    codes = np.arange(int(info.min), int(info.max) + 1, dtype=np.int64)
    x = (codes.astype(np.float32) - np.float32(input_zp)) * np.float32(input_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        v = transform(x) * (np.float32(1) / np.float32(output_scale)) + np.float32(output_zp)
        v = np.where(np.isnan(v), np.float32(0), v)
        return tuple(np.clip(np.rint(v), info.min, info.max).astype(np.int64).tolist())


def _sigmoid_xnnpack(x):
    r"""XNNPACK's reference sigmoid: :math:`e/(1+e)` with :math:`e = \exp(\mathrm{double}(x))`, rounded to
    float32; 1 above 100, 0 below -100."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(np.float64))
        r = (e / (1 + e)).astype(np.float32)
    return np.where(x > 100, np.float32(1), np.where(x < -100, np.float32(0), r))


def _sigmoid_f32(v):
    one = np.float32(1)
    with np.errstate(over="ignore"):
        return one / (one + _expf(-v))


@dataclass(frozen=True)
class _TableActivationParams:
    """The fields shared by :class:`LogisticParams` and :class:`TanhParams` (distinct types, so that one op's
    parameters are never accepted by the other)."""

    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    dtype: np.dtype
    lut: tuple
    input_multiplier: int
    input_left_shift: int
    input_range_radius: int
    xnnpack_lut: tuple


@dataclass(frozen=True)
class LogisticParams(_TableActivationParams):
    r"""TFLite int8/uint8 ``LOGISTIC`` parameters.

    Attributes
    ----------
    lut : tuple of int
        LiteRT's ``SigmoidPrepare`` table (reference and optimized kernels): the output code of every
        input code, in code order, from :math:`\mathrm{fl}_{32}(1 / (1 + \mathrm{expf}(-x)))`
        (see :func:`_lut_int8`).
    xnnpack_lut : tuple of int
        XNNPACK's table for the same op (:func:`_lut_xnnpack`).
    input_multiplier, input_left_shift, input_range_radius : int
        The fixed-point path of ``reference_integer_ops::Logistic`` (TFLite Micro's kernel):
        :math:`q, \ell = \mathrm{frexp}(s_{in}\,2^{27})`, :math:`m = \mathrm{rha}(q\,2^{31})`,
        radius = :func:`calculate_input_radius` ``(4, ℓ, 31)``.
    """


def _frexp_multiplier(real: float, integer_bits: int):
    """``frexp`` of :math:`s\\,2^{31-b}` and ``rha(q * 2^31)`` (TFLite Micro's LOGISTIC/TANH Prepare)."""
    q, e = math.frexp(real * float(1 << (31 - integer_bits)))
    m = int(math.copysign(math.floor(abs(q) * 2.0 ** 31 + 0.5), q))
    if m == 1 << 31:      # cannot happen for a float32 scale (24-bit significand)
        raise ValueError("the input multiplier rounds to 2^31")
    return m, e


@functools.lru_cache(maxsize=1024)
def _table_params(cls, f_lut, f_xnnpack, si, zi, so, zo, dt):
    """``cls`` (:class:`LogisticParams` or :class:`TanhParams`) of one quantization: LiteRT's table of ``f_lut``,
    XNNPACK's of ``f_xnnpack`` and TFLite Micro's Q4.27 input multiplier and radius (cached: Prepare runs once)."""
    lut = _lut_int8(si, zi, so, zo, dt, f_lut)
    m, e = _frexp_multiplier(float(si), 4)
    return cls(float(si), zi, float(so), zo, dt, lut, m, e, calculate_input_radius(4, e, 31),
               _lut_xnnpack(si, zi, so, zo, dt, f_xnnpack))


def logistic_params(input_scale: float, input_zero_point: int, *, output_scale: float = 1 / 256,
                    output_zero_point: int | None = None, dtype=np.int8) -> LogisticParams:
    """Parameters of :func:`quantized_logistic` (LiteRT ``SigmoidPrepare``; TFLite Micro
    ``CalculateArithmeticOpDataLogistic`` for the fixed-point path).  TFLite requires the output scale
    :math:`1/256`; the output zero point defaults to the type's minimum (-128 for int8, 0 for uint8)."""
    dt = _dtype(dtype, (np.int8, np.uint8))
    so = _scale(output_scale, "output_scale")
    if so != np.float32(1 / 256):
        raise ValueError(f"TFLite's quantized LOGISTIC needs output scale 1/256, got {float(so)!r}")
    zo = int(np.iinfo(dt).min) if output_zero_point is None else _zero_point(output_zero_point, dt, "output_zero_point")
    return _table_params(LogisticParams, _sigmoid_f32, _sigmoid_xnnpack, _scale(input_scale, "input_scale"),
                         _zero_point(input_zero_point, dt, "input_zero_point"), so, zo, dt)


def _lut_apply(x, params, lut) -> np.ndarray:
    codes = _codes(x, params.dtype)
    table = np.asarray(lut, dtype=np.int64)
    return table[codes - int(np.iinfo(params.dtype).min)].astype(params.dtype)


def _fixed_point_activation(x, params, fn, out_shift: int, out_zp: int, name: str) -> np.ndarray:
    d = _codes(x, params.dtype) - params.input_zero_point
    r = params.input_range_radius
    inside = np.where((d > -r) & (d < r), d, 0)
    v = multiply_by_quantized_multiplier(inside, params.input_multiplier, params.input_left_shift)
    out = _rdbpot(fn(v, 4), out_shift) + out_zp
    info = np.iinfo(params.dtype)
    out = np.where(d <= -r, info.min, np.where(d >= r, info.max, out))
    return _clamp(out, params.dtype)


def quantized_logistic(x, params: LogisticParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``LOGISTIC`` on int8 (or uint8) codes.

    ``kernels="reference"`` (and ``"builtin"``, the same table): LiteRT's int8 LOGISTIC, reference kernel
    included, is a table lookup, ``y = lut[x]``, the table computed in float32 at ``Prepare``
    (:class:`LogisticParams`).  ``kernels="xnnpack"``: XNNPACK's own table (:func:`_lut_xnnpack` with a
    double-precision sigmoid and rounding half to even), which differs on rare codes.

    ``kernels="integer"``: ``reference_integer_ops::Logistic`` (the fixed-point kernel of TFLite Micro,
    not used by LiteRT for int8): with :math:`d = x - z_{in}`, :math:`y = -128` if :math:`d \le -r`,
    :math:`127` if :math:`d \ge r`, else

    .. math:: y = \mathrm{clamp}\big(\mathrm{RDBPOT}(\mathrm{logistic}_{F4}(\mathrm{MBQM}(d, m, \ell)),\ 23) - 128\big)

    with gemmlowp's :func:`gemmlowp_logistic` on Q4.27 (:math:`|d|\,2^{\ell} < 15 \cdot 2^{27}` inside the
    radius, so the left shift never overflows).
    """
    _kernels(kernels, _KERNELS + ("integer",))
    if not isinstance(params, LogisticParams):
        raise TypeError(f"params must be LogisticParams (from logistic_params), got {type(params).__name__}")
    if kernels != "integer":
        return _lut_apply(x, params, params.xnnpack_lut if kernels == "xnnpack" else params.lut)
    if params.dtype != np.int8 or params.output_zero_point != -128:
        raise ValueError("the fixed-point LOGISTIC kernel is int8 with output zero point -128")
    return _fixed_point_activation(x, params, _fixed_logistic, 23, -128, "logistic")


@dataclass(frozen=True)
class TanhParams(_TableActivationParams):
    r"""TFLite int8/uint8 ``TANH`` parameters: LiteRT's ``TanhPrepare`` table (from
    :math:`\mathrm{tanhf}`, see :func:`_tanhf`) and TFLite Micro's fixed-point multiplier (the fields of
    :class:`LogisticParams`)."""


def tanh_params(input_scale: float, input_zero_point: int, *, output_scale: float = 1 / 128,
                output_zero_point: int | None = None, dtype=np.int8) -> TanhParams:
    """Parameters of :func:`quantized_tanh` (LiteRT ``TanhPrepare``; TFLite Micro's tanh Prepare).  The
    converter gives TANH the output scale :math:`1/128` and zero point 0 (128 for uint8), the defaults."""
    dt = _dtype(dtype, (np.int8, np.uint8))
    zo = (0 if dt == np.int8 else 128) if output_zero_point is None else \
        _zero_point(output_zero_point, dt, "output_zero_point")
    return _table_params(TanhParams, _tanhf, _tanhf, _scale(input_scale, "input_scale"),
                         _zero_point(input_zero_point, dt, "input_zero_point"),
                         _scale(output_scale, "output_scale"), zo, dt)


def quantized_tanh(x, params: TanhParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``TANH`` on int8 (or uint8) codes.

    ``kernels="reference"`` (and ``"builtin"``, the same table): the ``Prepare``-time table lookup
    ``y = lut[x]`` of LiteRT, built from glibc's float32 ``tanhf``.  ``kernels="xnnpack"``: XNNPACK's
    table (:func:`_lut_xnnpack`: the same ``tanhf``, rounded half to even).

    ``kernels="integer"``: ``reference_integer_ops::Tanh`` (TFLite Micro): saturation to :math:`\pm`
    outside the radius, else :math:`\mathrm{clamp}(\mathrm{RDBPOT}(\tanh_{F4}(\mathrm{MBQM}(d, m, \ell)), 24))`
    with :func:`gemmlowp_tanh` (output scale :math:`1/128`, zero point 0).
    """
    _kernels(kernels, _KERNELS + ("integer",))
    if not isinstance(params, TanhParams):
        raise TypeError(f"params must be TanhParams (from tanh_params), got {type(params).__name__}")
    if kernels != "integer":
        return _lut_apply(x, params, params.xnnpack_lut if kernels == "xnnpack" else params.lut)
    if params.dtype != np.int8 or params.output_zero_point != 0:
        raise ValueError("the fixed-point TANH kernel is int8 with output zero point 0")
    return _fixed_point_activation(x, params, _fixed_tanh, 24, 0, "tanh")

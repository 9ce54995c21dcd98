r"""TFLite int8 MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, RSQRT, PRELU and ELU (LiteRT 2.3.0; REDUCE_MAX and SUM in
:mod:`.reduce_sum_max`).

As in the rest of :mod:`fxpsim.datapath.tflite`, a ``*_params`` function does what the op's ``Prepare`` does
(multipliers, shifts, tables; a frozen dataclass) and the kernel reproduces LiteRT on the codes.

* MAXIMUM, MINIMUM compare **codes** (``maximum_minimum.cc``): no kernel set looks at the scales.
* SQUARED_DIFFERENCE, RSQRT, PRELU: one integer kernel for every kernel set (under XNNPACK LiteRT gives the
  builtin kernel's codes, checked live on every code pair).
* ELU: a 256-entry table built at Prepare (``EluPrepare``); LiteRT's reference resolver has no int8 ELU.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..requantize import _srdhm, _wrap_int32, multiply_by_quantized_multiplier, quantize_multiplier
from ._common import _check_mbqm_shift, _clamp, _codes, _kernels, _scale, _zero_point
from .gemmlowp import _srmpot
from .lookup import _expm1f, _lut_int8, _lut_apply, _lut_xnnpack

__all__ = ["quantized_maximum", "quantized_minimum", "SquaredDifferenceParams",
           "squared_difference_params", "quantized_squared_difference", "inv_sqrt_quantized_multiplier_exp",
           "RsqrtParams", "rsqrt_params", "quantized_rsqrt", "PreluParams", "prelu_params", "quantized_prelu",
           "EluParams", "elu_params", "quantized_elu"]

_INT8 = np.dtype(np.int8)


def _pair(x1, x2):
    a, b = np.asarray(x1), np.asarray(x2)
    if a.dtype != _INT8 or b.dtype != _INT8:
        raise TypeError(f"x1 and x2 must be int8 codes, got {a.dtype} and {b.dtype}")
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"x1 {a.shape} and x2 {b.shape} do not broadcast") from None
    return a, b


# --------------------------------------------------------------------------- code comparisons
def quantized_maximum(x1, x2) -> np.ndarray:
    r"""TFLite int8 ``MAXIMUM``: :math:`y = \max(x_1, x_2)` on the codes, numpy broadcasting (every kernel set)."""
    a, b = _pair(x1, x2)
    return np.maximum(a, b)


def quantized_minimum(x1, x2) -> np.ndarray:
    r"""TFLite int8 ``MINIMUM``: :math:`y = \min(x_1, x_2)` on the codes, numpy broadcasting (every kernel set)."""
    a, b = _pair(x1, x2)
    return np.minimum(a, b)


# --------------------------------------------------------------------------- SQUARED_DIFFERENCE
@dataclass(frozen=True)
class SquaredDifferenceParams:
    r"""TFLite int8 ``SQUARED_DIFFERENCE`` (``squared_difference::Prepare``).

    With :math:`T = 2\max(s_1, s_2)` (float32): ``QuantizeMultiplierSmallerThanOneExp`` of the doubles
    :math:`s_i / T` and :math:`T^2 / (2^{14} s_y)`; left shift 7.
    """

    multiplier1: int
    shift1: int
    multiplier2: int
    shift2: int
    output_multiplier: int
    output_shift: int
    zero_point1: int
    zero_point2: int
    output_zero_point: int


def _smaller_than_one(real: float, what: str):
    if not 0.0 < real < 1.0:
        raise ValueError(f"{what}: the real multiplier {real!r} is outside (0, 1), which LiteRT's "
                         f"QuantizeMultiplierSmallerThanOneExp requires (it aborts the process)")
    return quantize_multiplier(real)


def squared_difference_params(scale1: float, zero_point1: int, scale2: float, zero_point2: int,
                              output_scale: float, output_zero_point: int) -> SquaredDifferenceParams:
    """Parameters of :func:`quantized_squared_difference`; ``ValueError`` where LiteRT's Prepare aborts (an output
    multiplier :math:`T^2/(2^{14} s_y) \\ge 1`)."""
    s1, s2, so = _scale(scale1, "scale1"), _scale(scale2, "scale2"), _scale(output_scale, "output_scale")
    z1, z2 = _zero_point(zero_point1, _INT8, "zero_point1"), _zero_point(zero_point2, _INT8, "zero_point2")
    zo = _zero_point(output_zero_point, _INT8, "output_zero_point")
    twice = float(np.float32(2) * max(s1, s2))
    m1, e1 = _smaller_than_one(float(s1) / twice, "squared_difference_params (input 1)")
    m2, e2 = _smaller_than_one(float(s2) / twice, "squared_difference_params (input 2)")
    mo, eo = _smaller_than_one(twice * twice / float(np.float32(1 << 14) * so), "squared_difference_params (output)")
    return SquaredDifferenceParams(int(m1), int(e1), int(m2), int(e2), int(mo), int(eo), z1, z2, zo)


def quantized_squared_difference(x1, x2, params: SquaredDifferenceParams) -> np.ndarray:
    r"""TFLite int8 ``SQUARED_DIFFERENCE`` (every kernel set), numpy broadcasting:

    .. math::

        v_i = \mathrm{MBQM}((x_i - z_i)\,2^{7},\ m_i, e_i),\qquad
        y = \mathrm{clamp}\big(\mathrm{MBQM}((v_1 - v_2)^2,\ m_y, e_y) + z_y\big)

    (int32: :math:`|v_1 - v_2| \le 255 \cdot 2^6`, its square below :math:`2^{28}`).
    """
    if not isinstance(params, SquaredDifferenceParams):
        raise TypeError(f"params must be SquaredDifferenceParams, got {type(params).__name__}")
    a, b = (v.astype(np.int64) for v in _pair(x1, x2))
    v1 = multiply_by_quantized_multiplier((a - params.zero_point1) << 7, params.multiplier1, params.shift1)
    v2 = multiply_by_quantized_multiplier((b - params.zero_point2) << 7, params.multiplier2, params.shift2)
    d = v1 - v2
    out = multiply_by_quantized_multiplier(d * d, params.output_multiplier, params.output_shift)
    return _clamp(out + params.output_zero_point, _INT8)


# --------------------------------------------------------------------------- RSQRT
_HALF_SQRT2_Q31 = 1518500250        # sqrt(2)/2 in Q0.31 (gemmlowp constant)


def inv_sqrt_quantized_multiplier_exp(values) -> tuple[np.ndarray, np.ndarray]:
    r"""TFLite ``GetInvSqrtQuantizedMultiplierExp(v, kReverseShift)`` for int32 ``values`` in :math:`[0, 2^{29})`:
    :math:`(m, s)` with :math:`m\,2^{s-31} \approx 1/\sqrt{v}`.

    For :math:`v \le 1`: :math:`(2^{31}-1, 0)`.  Otherwise :math:`v` is normalised by :math:`4^k` into
    :math:`[2^{27}, 2^{29})` (exponent :math:`11 - k`), read as Q3.28 :math:`u = v/2`, and five Newton steps
    :math:`x \leftarrow \tfrac32 x - \tfrac u2 x^3` from :math:`x = 1` run in gemmlowp fixed point (products by
    ``SaturatingRoundingDoublingHighMul``, rescales by ``SaturatingRoundingMultiplyByPOT``); the result times
    :math:`\sqrt2/2` is :math:`m`, a negative exponent is folded into :math:`m` by a left shift, and the sign of
    the exponent is reversed.
    """
    v = np.asarray(values, dtype=np.int64)
    if v.size and (int(v.min()) < 0 or int(v.max()) >= 1 << 29):
        raise ValueError("inv_sqrt_quantized_multiplier_exp: values must lie in [0, 2^29)")
    small = v <= 1
    vv = np.where(small, 4, v)
    clz = 32 - np.frompyfunc(int.bit_length, 1, 1)(vv).astype(np.int64)
    pairs = (clz - 1) // 2 - 1
    shift = 11 - pairs
    u = (vv << (2 * pairs)) >> 1                          # Q3.28 raw of v/2
    half_u = _srmpot(u, -1)
    half_three = np.int64((1 << 28) + (1 << 27))
    x = np.full(v.shape, 1 << 28, dtype=np.int64)       # F3::One()
    for _ in range(5):
        x3 = _srmpot(_srdhm(_srdhm(x, x), x), 6)          # Rescale<3>(x*x*x): F9 -> F3
        x = _srmpot(_wrap_int32(_srdhm(half_three, x) - _srdhm(half_u, x3)), 3)    # F6 -> F3
    x = _srdhm(x, np.int64(_HALF_SQRT2_Q31))
    neg = shift < 0
    x = np.where(neg, _wrap_int32(x << np.where(neg, -shift, 0)), x)
    shift = np.where(neg, 0, shift)
    return np.where(small, (1 << 31) - 1, x), np.where(small, 0, -shift)


@dataclass(frozen=True)
class RsqrtParams:
    r"""TFLite int8 ``RSQRT`` (``elementwise::GenericPrepare``): ``QuantizeMultiplier`` of
    :math:`1 / \mathrm{double}(\mathrm{fl}_{32}(\mathrm{sqrtf}(s_{in})\, s_{out}))`, and (fxpsim) the output code of
    every input code :math:`\ge z_{in}` (``table[q - z_in]``)."""

    multiplier: int
    shift: int
    input_zero_point: int
    output_zero_point: int
    table: tuple


@functools.lru_cache(maxsize=256)
def rsqrt_params(input_scale: float, input_zero_point: int, output_scale: float,
                 output_zero_point: int) -> RsqrtParams:
    """Parameters of :func:`quantized_rsqrt`; ``ValueError`` where the kernel's shifts leave TFLite's range."""
    si, so = _scale(input_scale, "input_scale"), _scale(output_scale, "output_scale")
    zi = _zero_point(input_zero_point, _INT8, "input_zero_point")
    zo = _zero_point(output_zero_point, _INT8, "output_zero_point")
    m, s = quantize_multiplier(1.0 / float(np.float32(np.sqrt(si, dtype=np.float32) * so)))
    _check_mbqm_shift(int(s) - 20, "rsqrt_params (the output multiplier's shift minus 20)")
    values = np.arange(0, 128 - zi, dtype=np.int64)
    inv, inv_shift = inv_sqrt_quantized_multiplier_exp(values)
    data = np.array([multiply_by_quantized_multiplier(1, int(a), int(b) + 20) for a, b in zip(inv, inv_shift)],
                    dtype=np.int64)
    out = multiply_by_quantized_multiplier(data, m, int(s) - 20) + zo
    out = np.clip(out, -128, 127)
    out[0] = 127                                        # value 0: LiteRT returns the type's maximum
    return RsqrtParams(int(m), int(s), zi, zo, tuple(int(v) for v in out))


def quantized_rsqrt(x, params: RsqrtParams) -> np.ndarray:
    r"""TFLite int8 ``RSQRT`` (``RsqrtEvalQuantizedInt8``, every kernel set): for :math:`v = x - z_{in} > 0`,
    with :math:`(m_v, s_v)` = :func:`inv_sqrt_quantized_multiplier_exp` ``(v)``,

    .. math::

        d = \mathrm{MBQM}(1,\ m_v,\ s_v + 20),\qquad
        y = \mathrm{clamp}\big(\mathrm{MBQM}(d,\ m, s - 20) + z_{out}\big);

    :math:`v = 0` gives 127.  LiteRT fails the invoke on a code below :math:`z_{in}` ("Rsqrt is only defined for
    positive values"): here a ``ValueError``.
    """
    if not isinstance(params, RsqrtParams):
        raise TypeError(f"params must be RsqrtParams (from rsqrt_params), got {type(params).__name__}")
    v = _codes(x, _INT8) - params.input_zero_point
    if v.size and int(v.min()) < 0:
        raise ValueError(f"RSQRT of a negative value: input code {int(v.min()) + params.input_zero_point} is below "
                         f"the zero point {params.input_zero_point} (LiteRT fails the invoke: \"Rsqrt is only "
                         f"defined for positive values\")")
    return np.asarray(params.table, dtype=np.int64)[v].astype(np.int8)


# --------------------------------------------------------------------------- PRELU
@dataclass(frozen=True)
class PreluParams:
    r"""TFLite int8 ``PRELU`` (``PreluPrepare``): ``QuantizeMultiplier`` of the doubles of the float32 quotients
    :math:`\mathrm{fl}_{32}(s_{in}/s_{out})` and :math:`\mathrm{fl}_{32}(\mathrm{fl}_{32}(s_{in} s_\alpha)/s_{out})`."""

    multiplier1: int
    shift1: int
    multiplier2: int
    shift2: int
    input_zero_point: int
    alpha_zero_point: int
    output_zero_point: int


def prelu_params(input_scale: float, input_zero_point: int, alpha_scale: float, alpha_zero_point: int,
                 output_scale: float, output_zero_point: int) -> PreluParams:
    """Parameters of :func:`quantized_prelu`."""
    si, sa, so = _scale(input_scale, "input_scale"), _scale(alpha_scale, "alpha_scale"), \
        _scale(output_scale, "output_scale")
    zi, za, zo = (_zero_point(v, _INT8, n) for v, n in ((input_zero_point, "input_zero_point"),
                                                         (alpha_zero_point, "alpha_zero_point"),
                                                         (output_zero_point, "output_zero_point")))
    m1, e1 = quantize_multiplier(float(si / so))
    m2, e2 = quantize_multiplier(float((si * sa) / so))
    for e, what in ((e1, "identity"), (e2, "alpha")):
        _check_mbqm_shift(int(e), f"prelu_params ({what} multiplier)")
    return PreluParams(int(m1), int(e1), int(m2), int(e2), zi, za, zo)


def quantized_prelu(x, alpha, params: PreluParams) -> np.ndarray:
    r"""TFLite int8 ``PRELU`` (``reference_ops::Prelu`` / ``BroadcastPrelu4DSlow``, every kernel set); ``alpha``
    broadcasts against ``x`` (numpy rules):

    .. math::

        y = \mathrm{clamp}\Big(z_{out} + \begin{cases} \mathrm{MBQM}(x - z_{in},\ m_1, e_1) & x \ge z_{in} \\
        \mathrm{MBQM}((x - z_{in})(\alpha - z_\alpha),\ m_2, e_2) & x < z_{in} \end{cases}\Big)
    """
    if not isinstance(params, PreluParams):
        raise TypeError(f"params must be PreluParams (from prelu_params), got {type(params).__name__}")
    a, al = (v.astype(np.int64) for v in _pair(x, alpha))
    d = a - params.input_zero_point
    pos = multiply_by_quantized_multiplier(np.maximum(d, 0), params.multiplier1, params.shift1)
    neg = multiply_by_quantized_multiplier(np.minimum(d, 0) * (al - params.alpha_zero_point), params.multiplier2,
                                           params.shift2)
    return _clamp(np.where(d >= 0, pos, neg) + params.output_zero_point, _INT8)


# --------------------------------------------------------------------------- ELU
def _elu_f32(x):
    r""":math:`x < 0 ? \mathrm{expm1f}(x) : x` in float32 (``EluPrepare``'s lambda; glibc's fdlibm ``expm1f``)."""
    return np.where(x < 0, _expm1f(np.minimum(x, np.float32(0))), x).astype(np.float32)


@dataclass(frozen=True)
class EluParams:
    r"""TFLite int8 ``ELU``: LiteRT's ``LUTPopulate<int8_t>`` table of :func:`_elu_f32` (the builtin kernel) and
    XNNPACK's table of the same function (:func:`~fxpsim.datapath.tflite.lookup._lut_xnnpack`), code order."""

    dtype: np.dtype
    lut: tuple
    xnnpack_lut: tuple


@functools.lru_cache(maxsize=256)
def elu_params(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> EluParams:
    """Parameters of :func:`quantized_elu` (``EluPrepare``)."""
    si, so = _scale(input_scale, "input_scale"), _scale(output_scale, "output_scale")
    zi = _zero_point(input_zero_point, _INT8, "input_zero_point")
    zo = _zero_point(output_zero_point, _INT8, "output_zero_point")
    return EluParams(_INT8, _lut_int8(si, zi, so, zo, _INT8, _elu_f32), _lut_xnnpack(si, zi, so, zo, _INT8, _elu_f32))


def quantized_elu(x, params: EluParams, *, kernels: str = "builtin") -> np.ndarray:
    """TFLite int8 ``ELU``: a table lookup (``kernels="builtin"``: LiteRT's table; ``"xnnpack"``: XNNPACK's).
    LiteRT's reference resolver has no int8 ELU: ``kernels="reference"`` raises ``NotImplementedError``."""
    _kernels(kernels)
    if not isinstance(params, EluParams):
        raise TypeError(f"params must be EluParams (from elu_params), got {type(params).__name__}")
    if kernels == "reference":
        raise NotImplementedError("LiteRT's reference op resolver (BUILTIN_REF) has no ELU kernel")
    return _lut_apply(x, params, params.xnnpack_lut if kernels == "xnnpack" else params.lut)

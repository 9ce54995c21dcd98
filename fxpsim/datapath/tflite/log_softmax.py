r"""TFLite int8 LOG_SOFTMAX: the reference kernel's gemmlowp fixed point and the optimized kernel's float table.

LiteRT's Prepare (``LogSoftmaxPrepare``) requires the output quantization the converter gives it, scale
:math:`16/256` and zero point 127, in every kernel set.  The reference kernel
(``reference_integer_ops::LogSoftmax``) then works in Q5.26 / Q12.19 fixed point with the multipliers of
``PreprocessLogSoftmaxScalingExp``; the optimized kernel (``optimized_ops::LogSoftmax``) in float32 with the
``PopulateSoftmaxLookupTable`` table of SOFTMAX.  Under XNNPACK LiteRT gives the builtin kernel's codes (checked
live).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from dataclasses import dataclass

import numpy as np

from ..requantize import INT32_MAX, INT32_MIN, _rdbpot, _srdhm, _wrap_int32, multiply_by_quantized_multiplier, \
    quantize_multiplier
from ._common import _codes, _kernels, _scale, _zero_point
from .gemmlowp import _exp_neg, _one_over_one_plus_x, _rhs, calculate_input_radius
from .softmax import _softmax_exp_table, softmax_reference_scale

__all__ = ["LogSoftmaxParams", "log_softmax_params", "quantized_log_softmax", "gemmlowp_log_x_for_x_ge_1"]

_OUTPUT_SCALE = np.float32(16 / 256)
_OUTPUT_ZERO_POINT = 127


@dataclass(frozen=True)
class LogSoftmaxParams:
    r"""TFLite int8 ``LOG_SOFTMAX`` (``LogSoftmaxPrepare``).

    Attributes
    ----------
    input_multiplier, input_left_shift : int
        ``PreprocessSoftmaxScaling(1, s_in, 5)`` (as SOFTMAX's reference kernel: :math:`s_{in} 2^{26}`, which must
        exceed 1); 0 where it does not (the optimized kernels never compute it).
    reverse_multiplier, reverse_shift : int
        ``QuantizeMultiplierSmallerThanOneExp`` of :math:`2^{31-\ell} / m` (double).
    diff_min : int
        :math:`-` ``CalculateInputRadius(5, ℓ)``.
    input_scale : float
    fixed_point : bool
        Whether the reference kernel's parameters exist.
    """

    input_multiplier: int
    input_left_shift: int
    reverse_multiplier: int
    reverse_shift: int
    diff_min: int
    input_scale: float
    fixed_point: bool


@functools.lru_cache(maxsize=256)
def log_softmax_params(input_scale: float, output_scale: float = float(_OUTPUT_SCALE),
                       output_zero_point: int = _OUTPUT_ZERO_POINT, *, kernels: str = "reference") -> LogSoftmaxParams:
    """Parameters of :func:`quantized_log_softmax` as the kernel set ``kernels`` prepares them; ``ValueError`` where
    its Prepare fails: an output other than scale 1/16, zero point 127 (every set), or, for the reference kernel,
    :math:`s_{in} 2^{26} \\le 1` or a reverse multiplier of 1 (LiteRT aborts the process)."""
    _kernels(kernels)
    si = _scale(input_scale, "input_scale")
    so = _scale(output_scale, "output_scale")
    zo = _zero_point(output_zero_point, np.dtype(np.int8), "output_zero_point")
    if so != _OUTPUT_SCALE or zo != _OUTPUT_ZERO_POINT:
        raise ValueError(f"LOG_SOFTMAX needs the output scale 16/256 and zero point 127 (LiteRT's Prepare checks "
                         f"them), got {float(so)!r} and {zo}")
    real = softmax_reference_scale(1.0, float(si))
    if not real > 1.0:
        if kernels == "reference":
            raise ValueError(f"the reference LOG_SOFTMAX needs input_scale * 2^26 > 1 (here {real:.4g}: LiteRT's "
                             f"reference Prepare aborts in QuantizeMultiplierGreaterThanOne); the optimized kernels "
                             f"(kernels='builtin' or 'xnnpack') run it")
        return LogSoftmaxParams(0, 0, 0, 0, 0, float(si), False)
    m, s = quantize_multiplier(real)
    reverse = float(1 << (31 - int(s))) / float(m)
    if not 0.0 < reverse < 1.0:
        if kernels == "reference":
            raise ValueError(f"the reference LOG_SOFTMAX's reverse scaling divisor {reverse!r} is not below 1 (LiteRT "
                             f"aborts in QuantizeMultiplierSmallerThanOneExp)")
        return LogSoftmaxParams(0, 0, 0, 0, 0, float(si), False)
    rm, rs = quantize_multiplier(reverse)
    return LogSoftmaxParams(int(m), int(s), int(rm), int(rs), -calculate_input_radius(5, int(s), 31), float(si), True)


def _clz32(x: np.ndarray) -> np.ndarray:
    """Leading zeros of ``x`` read as uint32 (32 for 0)."""
    u = (x & 0xFFFFFFFF).astype(np.float64)
    return 32 - np.where(u > 0, np.frexp(u)[1], 0)


def _srmpot_param(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    r"""TFLite ``SaturatingRoundingMultiplyByPOTParam`` for exponents :math:`e \ge 0` (per element): :math:`x\,2^e`,
    saturated where :math:`|x| > 2^{31-e} - 1`."""
    e = np.asarray(exponent, dtype=np.int64)
    thr = (np.int64(1) << (31 - e)) - 1
    shifted = _wrap_int32(x << e)
    out = np.where(x > thr, INT32_MAX, np.where(x < -thr, INT32_MIN, shifted))
    return np.where(e == 0, x, out)


def _sat32(v):
    return np.clip(v, INT32_MIN, INT32_MAX)


# gemmlowp constants (Q0.31) of log_x_for_x_greater_than_or_equal_to_1_impl
_LOG_2, _SQRT_SQRT_HALF, _SQRT_HALF, _ONE_QUARTER = 1488522236, 1805811301, 1518500250, 536870912
_ALPHA_N, _ALPHA_D, _ALPHA_I, _ALPHA_F = 117049297, 127690142, 1057819769, 638450708


def gemmlowp_log_x_for_x_ge_1(x, input_integer_bits: int, output_integer_bits: int) -> np.ndarray:
    r"""TFLite's ``log_x_for_x_greater_than_or_equal_to_1_impl<out, in>`` on raw int32 values (``common.h``):
    :math:`\ln x` of a Q(in) value as Q(out), accumulated with ``out + 1`` integer bits.

    :math:`x = 2^{z}\, r`: :math:`z` from the leading zeros (two candidates, one pre-multiplied by
    :math:`\sqrt{1/2}`, the larger :math:`z \pm \tfrac14` kept and the smaller :math:`r`), then
    :math:`\ln x = z \ln 2 + \mathrm{num}/(1 + \mathrm{den})` with the rational approximation in
    :math:`q = 2(r - 2^{-1/4})` (coefficients :math:`\alpha_{n,d,i,f}`) and gemmlowp's ``one_over_one_plus_x``.
    """
    acc_bits = output_integer_bits + 1
    z_a = np.asarray(x, dtype=np.int64)
    shifted_quarter = _rdbpot(np.int64(_ONE_QUARTER), acc_bits)
    hr_a = _clz32(z_a)
    r_a_tmp = _srmpot_param(z_a, hr_a - 1)
    r_a = _srmpot_param(_srdhm(r_a_tmp, np.int64(_SQRT_HALF)), np.int64(1))
    z_a_adj = _sat32(_srmpot_param(input_integer_bits - hr_a, np.int64(31 - acc_bits)) + shifted_quarter)
    z_b = _srdhm(z_a, np.int64(_SQRT_HALF))
    hr_b = _clz32(z_b) - 1
    r_b = _srmpot_param(z_a, hr_b)
    z_b_adj = _sat32(_srmpot_param(input_integer_bits - hr_b, np.int64(31 - acc_bits)) - shifted_quarter)
    r = np.minimum(r_a, r_b)
    z_adj = np.maximum(z_a_adj, z_b_adj)
    p = _rhs(r, np.int64(_SQRT_SQRT_HALF))
    q = _wrap_int32(r - _SQRT_SQRT_HALF)
    q = _wrap_int32(q + q)
    common_sq = _srdhm(q, q)
    num = _wrap_int32(_srdhm(q, r) + _srdhm(_srdhm(q, common_sq), np.int64(_ALPHA_N)))
    inner = _wrap_int32(_wrap_int32(_ALPHA_I + q) + _srdhm(np.int64(_ALPHA_D), common_sq))
    den = _wrap_int32(_srdhm(p, inner) + _srdhm(np.int64(_ALPHA_F), q))
    recip = _one_over_one_plus_x(den)
    num_scaled = _rdbpot(num, acc_bits)
    total = _wrap_int32(_srdhm(z_adj, np.int64(_LOG_2)) + _srdhm(num_scaled, recip))
    return _srmpot_param(total, np.int64(acc_bits - output_integer_bits))


@functools.lru_cache(maxsize=1)
def _libm_logf():
    """The C library's ``logf`` (what ``std::log(float)`` calls in LiteRT), or ``None`` without one."""
    name = ctypes.util.find_library("m")
    if not name:
        return None
    try:
        fn = ctypes.CDLL(name).logf
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


def _logf(v: np.ndarray) -> np.ndarray:
    """float32 ``logf`` of positive float32 values: the C library's where it has one (glibc's is not correctly
    rounded everywhere), else the correctly rounded value."""
    fn = _libm_logf()
    flat = np.asarray(v, dtype=np.float32).reshape(-1)
    if fn is None:
        return np.log(flat.astype(np.float64)).astype(np.float32).reshape(np.shape(v))
    return np.array([fn(float(t)) for t in flat], dtype=np.float32).reshape(np.shape(v))


def quantized_log_softmax(x, params: LogSoftmaxParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite int8 ``LOG_SOFTMAX`` over the last axis (output scale 1/16, zero point 127).

    ``kernels="reference"`` (``reference_integer_ops::LogSoftmax``), per row with :math:`d_j = x_j - \max x`:

    .. math::

        e_j = \mathrm{exp}_{F5\to F0}(\mathrm{MBQM}(d_j, m, \ell))\ (d_j \ge d_{min}),\quad
        \Sigma = \textstyle\sum_j \mathrm{RDBPOT}(e_j, 12),\quad L = \ln_{F12\to F5}\Sigma,

        y_j = \mathrm{clamp}(\mathrm{RDBPOT}(\mathrm{MBQM}(d_j, m, \ell) - L,\ 22) + 127)\ \text{ where }
        d_j > \max(d_{min} - 1,\ \mathrm{MBQM}(L - 2^{31}, m_r, s_r)),\ \text{else } -128.

    ``kernels="builtin"``/``"xnnpack"`` (``optimized_ops::LogSoftmax``), float32: :math:`t_k =
    \mathrm{expf}(\mathrm{fl}_{32}(-s_{in}) k)`, :math:`\Sigma = \sum_j t_{\max - x_j}` in order,
    :math:`P = \mathrm{fl}_{32}((s_{in} \max x + \mathrm{logf}\,\Sigma) \cdot 16)`,
    :math:`y_j = \mathrm{clamp}(\mathrm{rhe}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(16 s_{in}) x_j) - P) + 127)`.
    """
    _kernels(kernels)
    if not isinstance(params, LogSoftmaxParams):
        raise TypeError(f"params must be LogSoftmaxParams (from log_softmax_params), got {type(params).__name__}")
    arr = _codes(x, np.dtype(np.int8))
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last axis, got shape {arr.shape}")
    top = arr.max(axis=-1, keepdims=True)
    diff = arr - top
    if kernels != "reference":
        return _log_softmax_float_table(arr, top, diff, params)
    if not params.fixed_point:
        raise ValueError("quantized_log_softmax: these parameters were prepared for the optimized kernels, which "
                         "the reference kernel refuses (LiteRT aborts in its Prepare)")
    used = diff >= params.diff_min
    q5 = multiply_by_quantized_multiplier(np.where(used, diff, 0), params.input_multiplier, params.input_left_shift)
    e = np.where(used, _exp_neg(q5, 5), 0)
    total = _wrap_int32(np.sum(_rdbpot(e, 12), axis=-1, keepdims=True))
    log_sum = gemmlowp_log_x_for_x_ge_1(total, 12, 5)
    shifted = _wrap_int32(log_sum + INT32_MIN)
    adjusted = np.maximum(params.diff_min - 1, multiply_by_quantized_multiplier(
        shifted, params.reverse_multiplier, params.reverse_shift))
    keep = diff > adjusted
    q5k = multiply_by_quantized_multiplier(np.where(keep, diff, 0), params.input_multiplier, params.input_left_shift)
    out = np.clip(_rdbpot(_wrap_int32(q5k - log_sum), 31 - 5 - 4) + _OUTPUT_ZERO_POINT, -128, 127)
    return np.where(keep, out, -128).astype(np.int8)


def _log_softmax_float_table(arr, top, diff, params):
    f32 = np.float32
    si = f32(params.input_scale)
    vals = _softmax_exp_table(si, f32(1.0))[-diff]
    total = np.add.accumulate(vals, axis=-1, dtype=np.float32)[..., -1:]
    log_sum = _logf(total)
    pre = (si * top.astype(np.float32) + log_sum) / _OUTPUT_SCALE
    log_prob = (si / _OUTPUT_SCALE) * arr.astype(np.float32) - pre
    return np.clip(np.rint(log_prob).astype(np.int64) + _OUTPUT_ZERO_POINT, -128, 127).astype(np.int8)

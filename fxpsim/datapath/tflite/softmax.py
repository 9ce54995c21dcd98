"""TFLite int8 SOFTMAX (gemmlowp exp and reciprocal; the optimized kernel's float table)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..requantize import (
    _rdbpot, _srdhm, _wrap_int32, quantize_multiplier,
)
from ._common import _codes, _dtype, _kernels, _round_half_away, _scale, _to_int32, _zero_point
from .gemmlowp import _exp_neg, _one_over_one_plus_x, calculate_input_radius
from .lookup import _expf

__all__ = ['SoftmaxParams', 'softmax_params', 'softmax_reference_scale', 'quantized_softmax', 'float_table_plan']


# --------------------------------------------------------------------------- SOFTMAX
@dataclass(frozen=True)
class SoftmaxParams:
    r"""TFLite quantized ``SOFTMAX`` (``SoftmaxPrepare<kReference>``).

    Attributes
    ----------
    input_multiplier, input_left_shift : int
        ``PreprocessSoftmaxScaling(beta, s_in, 5)``: ``QuantizeMultiplierGreaterThanOne`` of
        :math:`\min(\beta s_{in} 2^{26},\ 2^{31} - 1)` (double).
    diff_min : int
        :math:`-` :func:`calculate_input_radius` ``(5, ℓ)``: input differences below it give exactly 0.
    beta, input_scale, output_scale, output_zero_point : for the optimized (float table) kernel.
    fixed_point : bool
        Whether the reference kernel's fixed-point parameters exist: ``False`` for parameters prepared for
        the optimized kernels (``kernels="builtin"``/``"xnnpack"``) where
        :math:`\beta s_{in} 2^{26} \le 1`, which LiteRT's reference Prepare refuses (it aborts the process
        in ``QuantizeMultiplierGreaterThanOne``) and the optimized Prepare never computes.
    """

    beta: float
    input_scale: float
    input_multiplier: int
    input_left_shift: int
    diff_min: int
    output_scale: float
    output_zero_point: int
    input_dtype: np.dtype
    output_dtype: np.dtype
    fixed_point: bool = True


def softmax_reference_scale(beta: float, input_scale: float) -> float:
    r"""The real multiplier of the reference kernel's ``PreprocessSoftmaxScaling``:
    :math:`\min(\beta s_{in} 2^{26},\ 2^{31} - 1)` in double (``beta`` and ``input_scale`` are the model's
    float32 values). The reference Prepare needs it :math:`> 1`."""
    return min(float(beta) * float(input_scale) * float(1 << 26), float((1 << 31) - 1))


@functools.lru_cache(maxsize=512)
def _softmax_params(beta, si, so, zo, dti, dto, reference):
    real = softmax_reference_scale(beta, si)
    if not real > 1.0:
        if reference:
            raise ValueError(f"softmax_params: beta * input_scale * 2^26 = {real!r} must exceed 1 "
                             "(the reference kernel's QuantizeMultiplierGreaterThanOne check; LiteRT's reference "
                             "SOFTMAX aborts in Prepare; the optimized kernels (kernels='builtin'/'xnnpack') do "
                             "not apply it)")
        return SoftmaxParams(float(beta), float(si), 0, 0, 0, float(so), zo, dti, dto, False)
    m, s = quantize_multiplier(real)
    return SoftmaxParams(float(beta), float(si), m, s, -calculate_input_radius(5, s, 31), float(so), zo, dti, dto)


def softmax_params(input_scale: float, *, beta: float = 1.0, output_scale: float | None = None,
                   output_zero_point: int | None = None, input_dtype=np.int8, output_dtype=None,
                   kernels: str = "reference") -> SoftmaxParams:
    """Parameters of :func:`quantized_softmax`, prepared as the kernel set ``kernels`` prepares them.  The
    output is the converter's: scale :math:`1/256` (:math:`1/65536` for int16) and the type's minimum as zero
    point; ``beta`` is float32 in the model.  The reference kernels require
    :func:`softmax_reference_scale` :math:`> 1` (``ValueError`` otherwise); ``"builtin"`` and ``"xnnpack"``
    (their float table) take any positive scale."""
    _kernels(kernels)
    dti = _dtype(input_dtype, (np.int8, np.uint8), "input_dtype")
    dto = dti if output_dtype is None else _dtype(output_dtype, (np.int8, np.uint8, np.int16), "output_dtype")
    so = _scale((1 / 65536 if dto == np.int16 else 1 / 256) if output_scale is None else output_scale,
                "output_scale")
    zo = int(np.iinfo(dto).min) if output_zero_point is None else _zero_point(output_zero_point, dto,
                                                                               "output_zero_point")
    b = np.float32(beta)
    if not (np.isfinite(b) and b > 0):
        raise ValueError(f"beta must be positive and finite, got {beta!r}")
    return _softmax_params(float(b), _scale(input_scale, "input_scale"), so, zo, dti, dto, kernels == "reference")


def quantized_softmax(x, params: SoftmaxParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``SOFTMAX`` over the last axis (``reference_ops::Softmax``, int8/uint8 input).

    Per row, with :math:`d_j = x_j - \max x` and the constants of :class:`SoftmaxParams`:

    .. math::

        e_j = \mathrm{exp}_{F5\to F0}(\mathrm{SRDHM}(d_j 2^{\ell}, m))\ \ (d_j \ge d_{min}),\qquad
        \Sigma = \textstyle\sum_j \mathrm{RDBPOT}(e_j, 12)\ \ (\text{Q12.19, int32}),

        y_j = \mathrm{clamp}\big(\mathrm{RDBPOT}(\mathrm{SRDHM}(r, e_j),\ n + 31 - b) + q_{min}\big)

    where :math:`\Sigma = 2^{12 - h}(1 + f)`, :math:`h` = leading zeros of :math:`\Sigma`,
    :math:`r = 1/(1 + f)` by ``one_over_one_plus_x_for_x_in_0_1`` (``GetReciprocal``),
    :math:`n = 12 - h`, :math:`b` the output bits; :math:`d_j < d_{min}` gives :math:`q_{min}`.  The input
    zero point plays no part (only differences).  :math:`|d_j 2^\ell| \le 31 \cdot 2^{26}` where used.

    ``kernels="builtin"``: LiteRT's optimized kernel (``optimized_ops::Softmax`` with the float table of
    ``PopulateSoftmaxLookupTable``): :math:`t_k = \mathrm{expf}(\mathrm{fl}_{32}(-s_{in}\beta) \cdot k)`,
    :math:`\Sigma = \sum_j t_{\max - x_j}` summed in float32 in order,
    :math:`y_j = \mathrm{rha}(t_{\max - x_j} \cdot \mathrm{fl}_{32}(1 / (\Sigma\, s_{out}))) + z_{out}`; it differs
    from the fixed point on about one element in 20 000.  XNNPACK does not take int8 SOFTMAX (LiteRT then
    runs the builtin kernel: ``kernels="xnnpack"`` is the same).
    """
    _kernels(kernels)
    if not isinstance(params, SoftmaxParams):
        raise TypeError(f"params must be SoftmaxParams (from softmax_params), got {type(params).__name__}")
    arr = _codes(x, params.input_dtype)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last axis, got shape {arr.shape}")
    info = np.iinfo(params.output_dtype)
    diff = arr - arr.max(axis=-1, keepdims=True)
    if kernels != "reference":
        return _softmax_float_table(diff, params)
    if not params.fixed_point:
        raise ValueError("quantized_softmax: these parameters were prepared for the optimized kernels with "
                         "beta * input_scale * 2^26 <= 1, which the reference kernel refuses (LiteRT aborts in its "
                         "Prepare)")
    used = diff >= params.diff_min
    rescaled = _srdhm(np.where(used, diff, 0) << params.input_left_shift, params.input_multiplier)
    e = np.where(used, _exp_neg(rescaled, 5), 0)
    total = _wrap_int32(np.sum(_rdbpot(e, 12), axis=-1, keepdims=True))
    bits = np.frexp((total & 0xFFFFFFFF).astype(np.float64))[1]     # bit length of the uint32 sum
    headroom = 32 - bits
    shifted = _wrap_int32(((total & 0xFFFFFFFF) << headroom) - (1 << 31))
    recip = _one_over_one_plus_x(shifted)
    exponent = 12 - headroom + 31 - 8 * info.dtype.itemsize
    if np.any(exponent < 0) or np.any(exponent > 31):
        raise ValueError("quantized_softmax: the row sums leave TFLite's supported range (rows too long)")
    out = _rdbpot(_srdhm(recip, e), exponent) + int(info.min)
    return np.where(used, np.clip(out, info.min, info.max), info.min).astype(info.dtype)


def _softmax_exp_table(input_scale, beta) -> np.ndarray:
    r"""LiteRT's ``PopulateSoftmaxLookupTable`` (SOFTMAX and LOG_SOFTMAX of the optimized kernels):
    :math:`t_k = \mathrm{expf}(\mathrm{fl}_{32}(-s_{in}\beta) \cdot k)`, :math:`k = \max x - x = 0 \ldots 255`;
    computed once per :math:`\mathrm{fl}_{32}(-s_{in}\beta)` (read-only)."""
    f32 = np.float32
    return _exp_table_of(float(-f32(input_scale) * f32(beta)))


@functools.lru_cache(maxsize=256)
def _exp_table_of(step: float) -> np.ndarray:
    table = _expf(np.float32(step) * np.arange(256, dtype=np.float32))
    table.flags.writeable = False
    return table


def _softmax_float_table(diff: np.ndarray, params: SoftmaxParams) -> np.ndarray:
    return float_table_plan(params)(-diff)


def float_table_plan(params: SoftmaxParams):
    r"""The optimized kernels' SOFTMAX (:func:`quantized_softmax`, ``kernels="builtin"``) with its table and
    constants made once: a function of :math:`k = \max x - x` (non-negative integers, rows on the last axis)
    returning the output codes.  Where :math:`1 / s_{out} < 2^{30}` (every probability then lies in
    :math:`[0, 2^{31})`: :math:`t_k \le 1 = t_0 \le \Sigma`), ``std::round`` and the int32 cast are
    :math:`\lfloor p + 1/2 \rfloor` in float64 (exact); else the general casts."""
    f32 = np.float32
    table = _softmax_exp_table(params.input_scale, params.beta)
    so = f32(params.output_scale)
    info = np.iinfo(params.output_dtype)
    lo, hi, zo, dtype = int(info.min), int(info.max), params.output_zero_point, info.dtype
    small = bool(so >= np.finfo(f32).tiny and f32(1) / so < 2.0 ** 30)

    def run(k):
        vals = np.take(table, k)                                             # table_offset[x] = expf(scale (max - x))
        total = np.add.accumulate(vals, axis=-1, dtype=np.float32)[..., -1:]
        prob = vals * (f32(1) / (total * so))
        if small:
            q = np.floor(prob.astype(np.float64) + 0.5).astype(np.int64)
        else:
            q = _to_int32(_round_half_away(prob))
        return np.clip(q + zo, lo, hi).astype(dtype)
    return run

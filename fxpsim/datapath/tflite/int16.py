r"""LiteRT's arithmetic for 16x8 models (int16 activations, int8 weights, int64 biases:
``OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``), where it is not the int8 arithmetic with
another code range.

* MAC ops (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED): the products :math:`x w` (zero points 0) accumulate in
  int64 with the int64 bias; the accumulator is requantized by the 64-bit ``MultiplyByQuantizedMultiplier``
  (:func:`mbqm_int64`: the 31-bit multiplier rounded to 15 bits, one rounding shift), the same in every kernel set
  (the optimized builtin kernels and XNNPACK fall back to the reference kernel for int16; checked live).
* ADD / SUB, general scales: TFLite's 8-bit arithmetic with a left shift of 15 instead of 20
  (``add::Prepare``/``sub::PrepareGeneralSubOp``); :func:`add_left_shift` says which scales take it. Power-of-two
  scales with the op's ``pot_scale_int16`` option: a rounding shift of one input and a saturating int16 sum
  (:func:`pot_add_int16`).
* LOGISTIC / TANH: a 256-entry table of :math:`\sigma(i/24)` read with linear interpolation
  (:func:`logistic_int16`, :func:`tanh_int16`); the optimized builtin kernels run it too, except for a
  power-of-two input scale (another arithmetic, not reproduced).
* SOFTMAX: an exp table and a :math:`1/(1+x)` table of 513 interpolated anchors (:func:`softmax_int16`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..fixed_point_multiplier import multiply_by_quantized_multiplier, quantize_multiplier
from ..integer_checks import _wrap_int32
from .piecewise import _rdbpot16

__all__ = ["mbqm_int64", "reduced_multiplier", "add_left_shift", "is_power_of_two_scale", "INT16_LEFT_SHIFT",
           "pot_add_shifts", "pot_add_int16",
           "SIGMOID_TABLE", "sigmoid_table", "lut_activation_params", "logistic_int16", "tanh_int16",
           "lut_populate_int16", "lut_lookup_int16", "SoftmaxInt16Params", "softmax_int16_params", "softmax_int16"]

#: The left shift of TFLite's general int16 ADD/SUB (20 for 8-bit codes).
INT16_LEFT_SHIFT = 15


def reduced_multiplier(multiplier) -> np.ndarray:
    r"""The 15-bit multiplier of LiteRT's 64-bit ``MultiplyByQuantizedMultiplier``:
    :math:`\mu = \lfloor (m + 2^{15}) / 2^{16} \rfloor` for :math:`m < \mathtt{0x7FFF0000}`, else :math:`2^{15} - 1`
    (so that :math:`\mu` stays below :math:`2^{15}`)."""
    m = np.asarray(multiplier, dtype=np.int64)
    return np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)


def mbqm_int64(acc, multiplier, shift) -> np.ndarray:
    r"""LiteRT's ``MultiplyByQuantizedMultiplier(int64_t x, int32_t m, int shift)`` (the double-rounding build):

    .. math:: y = \mathrm{wrap}_{32}\big(\lfloor (x\,\mu + 2^{14 - e}) / 2^{15 - e} \rfloor\big),
              \qquad \mu = \text{:func:`reduced_multiplier`}(m)

    with :math:`e` = ``shift`` (:math:`-31 \le e \le 7`; the arithmetic shift floors). LiteRT assumes
    :math:`|x| < 2^{47}`, so :math:`|x \mu| < 2^{62}`; the int32 result is ``static_cast`` (wraps).

    Parameters
    ----------
    acc : array_like of int
        int64 accumulators (the last axis is the output channel when ``multiplier`` has one per channel).
    multiplier, shift : int or array_like of int
        ``QuantizeMultiplier`` of the real scale (broadcast against ``acc``).

    Returns
    -------
    ndarray of int64
        Values in the int32 range.
    """
    e = np.asarray(shift, dtype=np.int64)
    if np.any(e < -31) or np.any(e > 7):
        raise ValueError(f"mbqm_int64: shift must be in [-31, 7], got {e.min()}..{e.max()}")
    total = 15 - e
    v = np.asarray(acc, dtype=np.int64) * reduced_multiplier(multiplier)
    v += np.int64(1) << (total - 1)
    v >>= total
    return _wrap_int32(v)


def is_power_of_two_scale(scale) -> bool:
    """TFLite's ``CheckedLog2``: whether :math:`\\log_2 s` is within :math:`10^{-3}` of an integer."""
    log = math.log2(float(scale))
    return abs(log - round(log)) < 1e-3


def add_left_shift(scale1, scale2, output_scale, pot_scale_int16: bool = True) -> int | None:
    """The left shift of LiteRT's int16 ADD/SUB: :data:`INT16_LEFT_SHIFT` on the general path, ``None`` on the
    ``pot_scale_int16`` path (the op's option, true by default in the schema, and every scale a power of two)."""
    if pot_scale_int16 and all(is_power_of_two_scale(s) for s in (scale1, scale2, output_scale)):
        return None
    return INT16_LEFT_SHIFT


def pot_add_shifts(scale1, scale2, output_scale) -> tuple[int, int]:
    r"""``(shift1, shift2)`` of LiteRT's power-of-two int16 ADD (``PrepareInt16SubOpPOT``):
    :math:`\log_2 s_i - \log_2 s_y`; LiteRT's Prepare requires both :math:`\le 0` and one of them 0."""
    log = [round(math.log2(float(s))) for s in (scale1, scale2, output_scale)]
    return log[0] - log[2], log[1] - log[2]


def pot_add_int16(x1, x2, shift1: int, shift2: int, act_min: int = -32768, act_max: int = 32767) -> np.ndarray:
    r"""LiteRT's power-of-two int16 ADD (``reference_ops::Add`` with ``pot_scale``): the input with shift 0 as is,
    the other divided by :math:`2^{-s}` with gemmlowp's ``RoundingDivideByPOT`` on int16, a saturating int16 sum,
    clamped to the activation range (numpy broadcasting)."""
    if not (shift1 <= 0 and shift2 <= 0 and (shift1 == 0 or shift2 == 0)):
        raise ValueError(f"pot_add_int16: shifts {shift1}, {shift2}: LiteRT needs both <= 0 and one of them 0")
    a, b = np.asarray(x1, dtype=np.int64), np.asarray(x2, dtype=np.int64)
    keep, scaled = (a, b) if shift1 == 0 else (b, a)
    scaled = _rdbpot16(scaled, -(shift2 if shift1 == 0 else shift1))
    return np.clip(np.clip(keep + scaled, -32768, 32767), act_min, act_max).astype(np.int16)


# ----------------------------------------------------------------------------------------- LOGISTIC / TANH
#: LiteRT's ``sigmoid_table_uint16``: :math:`t_i \approx 2^{16} \sigma(i / 24)`, :math:`i = 0 \dots 255` (0.16 fixed
#: point; within -0.4 .. +1.1 of that value, not a closed formula), read back from LiteRT's own int16 TANH by
#: ``tools/fixtures/tflite_int16/extract_sigmoid_table.py`` (tests/frontends/test_tflite_int16.py repeats it live).
SIGMOID_TABLE = (
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535)


def sigmoid_table() -> np.ndarray:
    r""":data:`SIGMOID_TABLE` as int64 (read only): the table of LiteRT's int16 LOGISTIC and TANH
    (:math:`\tanh x = 2\sigma(2x) - 1`)."""
    return _TABLE


_TABLE = np.array(SIGMOID_TABLE, dtype=np.int64)
_TABLE.flags.writeable = False


def lut_activation_params(input_scale: float, *, tanh: bool) -> tuple[int, int]:
    r"""``(input_multiplier, input_left_shift)`` of LiteRT's int16 LOGISTIC / TANH (``SigmoidPrepare`` /
    ``TanhPrepare``, double arithmetic).

    Power-of-two input scale :math:`s = 2^{k}` with :math:`\ell = 12 + k` equal to 0 (LOGISTIC) or in
    :math:`\{0, 1\}` (TANH): :math:`(0, \ell)`. Otherwise :math:`\mu = 3 \cdot 4096\, s` doubled until it exceeds
    :math:`32767/2` (at most 31 times, counted by :math:`\ell`), and the multiplier is :math:`\lfloor \mu \rfloor`.
    """
    s = float(np.float32(input_scale))
    log = math.log2(s)
    if abs(log - round(log)) < 1e-3 and 12 + round(log) in ((0, 1) if tanh else (0,)):
        return 0, 12 + round(log)
    mu, shift = s * 4096.0 * 3.0, 0
    while mu <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        mu *= 2.0
    return int(mu), shift


def _scaled_input(x, multiplier: int, shift: int) -> np.ndarray:
    """:math:`\\lfloor (x \\mu + 2^{\\ell - 1}) / 2^{\\ell} \\rfloor` in int32 (:math:`\\mu = 3 \\cdot 2^{\\ell}`,
    :math:`\\ell = 0` for a power-of-two scale)."""
    if multiplier == 0:
        multiplier, shift = 3 << shift, 0
    rnd = (1 << (shift - 1)) if shift > 0 else 0
    return _wrap_int32(np.asarray(x, dtype=np.int64) * multiplier + rnd) >> shift


def _interpolate(a: np.ndarray, frac_bits: int, saturated: int) -> np.ndarray:
    """:math:`t_h 2^{f} + u (t_{h+1} - t_h)` for :math:`h = a \\gg f`, :math:`u = a \\bmod 2^f`, or ``saturated``
    where :math:`h \\ge 255`."""
    h = a >> frac_bits
    inside = h < 255
    hc = np.where(inside, h, 0)
    lo, hi = _TABLE[hc], _TABLE[hc + 1]
    return np.where(inside, (lo << frac_bits) + (a & ((1 << frac_bits) - 1)) * (hi - lo), saturated)


def logistic_int16(x, multiplier: int, shift: int) -> np.ndarray:
    r"""LiteRT's int16 LOGISTIC (``reference_integer_ops::Logistic``, output scale :math:`2^{-15}`): with
    :math:`v` = the scaled input (:func:`lut_activation_params`), :math:`a = |v|` and :math:`r` the table
    interpolation with 9 fraction bits (:math:`(2^{15} - 1) 2^{10}` from :math:`a \ge 255 \cdot 2^9`),

    .. math:: y = \lfloor (r + 2^9) / 2^{10} \rfloor \ (v \ge 0), \qquad
              y = \lfloor (2^{25} - r + 2^9 - 1) / 2^{10} \rfloor \ (v < 0)
    """
    v = _scaled_input(x, multiplier, shift)
    r = _interpolate(np.abs(v), 9, 0x7FFF << 10)
    out = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1) >> 10
    return out.astype(np.int16)


def tanh_int16(x, multiplier: int, shift: int) -> np.ndarray:
    r"""LiteRT's int16 TANH (``reference_integer_ops::Tanh``, output scale :math:`2^{-15}`): :math:`r` the table
    interpolation of :math:`a = |v|` with 8 fraction bits (:math:`(2^{16} - 1) 2^{8}` from :math:`a \ge 255 \cdot 2^8`),

    .. math:: y = \lfloor (r - 2^{23} + 2^7) / 2^8 \rfloor \ (v \ge 0), \qquad
              y = \lfloor (2^{23} - r + 2^7 - 1) / 2^8 \rfloor \ (v < 0)
    """
    v = _scaled_input(x, multiplier, shift)
    r = _interpolate(np.abs(v), 8, 0xFFFF << 8)
    out = np.where(v >= 0, r - (1 << 23) + (1 << 7), (1 << 23) - r + (1 << 7) - 1) >> 8
    return out.astype(np.int16)


# ----------------------------------------------------------------------------------------- SOFTMAX
def _round_half_away(v: float) -> float:
    return math.copysign(math.floor(abs(v) + 0.5), v)


def lut_populate_int16(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int,
                       fn) -> np.ndarray:
    r"""LiteRT's ``LUTPopulate<int16_t>`` in double (the SOFTMAX tables): 513 anchors over the int16 input range,
    :math:`x_i = x_{min} + i\,\Delta`, :math:`\Delta = (x_{max} - x_{min}) / 512`, each the rounded sample
    :math:`\mathrm{rha}(f(x_i)\,\kappa)` (:math:`\kappa = 65536 / (y_{max} - y_{min})`) less half the error of the
    interpolated midpoint, :math:`\mathrm{rha}\big((\mathrm{rha}((f(x_{i+1})\kappa + \mathrm{rha}(f(x_i)\kappa))/2)
    - \mathrm{rha}(f(x_i + \Delta/2)\kappa)) / 2\big)`, clamped to int16; the last anchor is the plain sample of
    :math:`f(x_{max})`."""
    x_min, x_max = input_scale * (-32768 - input_zero_point), input_scale * (32767 - input_zero_point)
    y_min, y_max = output_scale * (-32768 - output_zero_point), output_scale * (32767 - output_zero_point)
    step = (x_max - x_min) / 512
    inv = 65536.0 / (y_max - y_min)
    lut = np.empty(513, dtype=np.int64)
    for i in range(512):
        val, mid, nxt = fn(x_min + i * step), fn(x_min + i * step + step / 2), fn(x_min + (i + 1) * step)
        sample = _round_half_away(val * inv)
        interp = _round_half_away((nxt * inv + sample) / 2)
        bias = _round_half_away((interp - _round_half_away(mid * inv)) / 2)
        lut[i] = min(max(sample - bias, -32768.0), 32767.0)
    lut[512] = min(max(_round_half_away(fn(x_max) * inv), -32768.0), 32767.0)
    return lut


def lut_lookup_int16(v, lut: np.ndarray) -> np.ndarray:
    r"""LiteRT's ``LUTLookup`` of int16 codes :math:`v` in a 513-anchor table: :math:`j = 256 + (v \gg 7)`,
    :math:`y = \mathrm{wrap}_{16}\big(t_j + \lfloor ((t_{j+1} - t_j)(v \bmod 128) + 64) / 128 \rfloor\big)`."""
    v = np.asarray(v, dtype=np.int64)
    j = 256 + (v >> 7)
    base = lut[j]
    slope = ((lut[j + 1] - base + 32768) & 0xFFFF) - 32768            # int16_t difference
    return (((base + ((slope * (v & 0x7F) + 64) >> 7)) + 32768) & 0xFFFF) - 32768


@dataclass(frozen=True)
class SoftmaxInt16Params:
    r"""LiteRT's int16 SOFTMAX Prepare: the exp table over :math:`[-10, 0]`, the :math:`1/(1+x)` table over
    :math:`[0, 1]` (both :func:`lut_populate_int16`, output scale :math:`2/65535`) and
    ``QuantizeMultiplier`` of :math:`\mathrm{fl}_{32}(s_{in}\beta) / (10 / 65535)`."""

    multiplier: int
    shift: int
    exp_lut: tuple
    reciprocal_lut: tuple


_RANGE = 65535


def softmax_int16_params(input_scale: float, beta: float = 1.0) -> SoftmaxInt16Params:
    """Parameters of :func:`softmax_int16` (input zero point 0, output scale 2^-15 and zero point 0)."""
    exp_lut = lut_populate_int16(10.0 / _RANGE, 32767, 2.0 / _RANGE, 0, math.exp)
    rec_lut = lut_populate_int16(1.0 / _RANGE, -32768, 2.0 / _RANGE, 0, lambda v: 1.0 / (1.0 + v))
    real = float(np.float32(np.float32(input_scale) * np.float32(beta))) / (10.0 / 65535.0)
    m, s = quantize_multiplier(real)
    return SoftmaxInt16Params(int(m), int(s), tuple(exp_lut.tolist()), tuple(rec_lut.tolist()))


def softmax_int16(x, params: SoftmaxInt16Params) -> np.ndarray:
    r"""LiteRT's int16 SOFTMAX over the last axis (``reference_ops::SoftmaxInt16``): with :math:`d = x - \max x`,

    .. math::

        e = \mathrm{LUT}_{\exp}\big(\mathrm{clamp}_{16}(\mathrm{MBQM}(d, m, s) + 32767)\big),\qquad
        S = \textstyle\sum e,\quad h = \mathrm{clz}_{32}(S),

        r = \mathrm{LUT}_{1/(1+x)}\big(\mathrm{clamp}_{16}(\lfloor (S\,2^{h-1} + 2^{13}) / 2^{14} \rfloor - 98304)\big),
        \qquad y = \mathrm{clamp}_{[0, 32767]}\big(\lfloor (e\,r + 2^{30-h}) / 2^{31-h} \rfloor\big)

    (MBQM: gemmlowp's, :func:`~fxpsim.datapath.requantize.multiply_by_quantized_multiplier`).
    """
    a = np.asarray(x, dtype=np.int64)
    exp_lut, rec_lut = np.asarray(params.exp_lut), np.asarray(params.reciprocal_lut)
    d = a - a.max(axis=-1, keepdims=True)
    scaled = multiply_by_quantized_multiplier(d, params.multiplier, params.shift)
    e = lut_lookup_int16(np.clip(scaled + 32767, -32768, 32767), exp_lut)
    total = e.sum(axis=-1, keepdims=True)
    h = 32 - np.frexp(total.astype(np.float64))[1].astype(np.int64)     # clz_32: 32 - bit length (S >= 32767)
    shifted = ((total << (h - 1)) + (1 << 13)) >> 14
    r = lut_lookup_int16(np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767), rec_lut)
    right = 31 - h
    out = (e * r + (np.int64(1) << (right - 1))) >> right
    return np.clip(out, 0, 32767).astype(np.int16)

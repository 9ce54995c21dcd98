"""Integer requantization: TFLite / gemmlowp arithmetic and the :class:`Requantizer`.

An int8 accelerator accumulates ``(x - x_zp) * (w - w_zp)`` in an integer
accumulator, adds an int32 bias, scales the accumulator by the real factor
:math:`M = s_x s_w / s_y` and adds the output zero point.  This module gives that
last step bit for bit as TFLite computes it, and the other choices hardware makes:

* ``"double"``: TFLite's classic fixed-point multiplier (gemmlowp's
  ``SaturatingRoundingDoublingHighMul`` then ``RoundingDivideByPOT``: two roundings);
* ``"single"``: TFLite's ``TFLITE_SINGLE_ROUNDING`` variant (one 64-bit product,
  one rounding);
* ``"shift"``: a power-of-two scale (a shifter) with any :class:`~fxpsim.fixed.Rounding`;
* ``"float"``: ``round(acc * scale)`` in float64 with a chosen rounding (what TFLite's
  FULLY_CONNECTED does in the build of the shared vectors).

It also derives TFLite's parameters (:func:`quantize_multiplier`,
:func:`activation_range`, :func:`tflite_add_params`).  The integer layer kernels
that use a :class:`Requantizer` live in :mod:`fxpsim.integer_layers`.

All integer arithmetic is done on int64 numpy arrays whose intermediate values are
proven to fit (bounds in each docstring), so no step depends on C overflow rules.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..core.fixed import FixedArray, Format, Rounding, from_float

__all__ = [
    "quantize_multiplier", "saturating_rounding_doubling_high_mul", "rounding_divide_by_pot",
    "multiply_by_quantized_multiplier", "requantize_shift", "requantize_float",
    "activation_range", "tflite_add_params", "Requantizer",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
_KINDS = ("double", "single", "shift", "float")


# --------------------------------------------------------------------------- validation
def _int_array(a, name: str) -> np.ndarray:
    """``a`` as an int64 array (callers never write into it, so inputs are never modified)."""
    arr = np.asarray(a)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has values above 2**63 - 1")
    return arr.astype(np.int64, copy=False)


def _check_range(arr: np.ndarray, lo: int, hi: int, name: str) -> None:
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        raise ValueError(f"{name} must lie in [{lo}, {hi}]; got values in "
                         f"[{int(arr.min())}, {int(arr.max())}]")


def _int32_array(a, name: str) -> np.ndarray:
    arr = _int_array(a, name)
    _check_range(arr, INT32_MIN, INT32_MAX, f"{name} (int32)")
    return arr


def _wrap_int32(v: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 (what a C ``int32_t`` cast does)."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _per_channel(values, n_channels: int, ndim: int, axis: int, name: str) -> np.ndarray:
    """Reshape a scalar or a 1-D per-channel parameter so it broadcasts along ``axis``."""
    arr = np.asarray(values)
    if arr.ndim == 0:
        return arr
    if ndim == 0:
        if arr.shape != (1,):
            raise ValueError(f"{name}: a scalar accumulator takes one value, got shape {arr.shape}")
        return arr.reshape(())
    if arr.ndim != 1 or arr.shape[0] not in (1, n_channels):
        raise ValueError(f"{name} must be a scalar or have one value per channel "
                         f"({n_channels} along axis {axis}); got shape {arr.shape}")
    shape = [1] * ndim
    shape[axis] = arr.shape[0]
    return arr.reshape(shape)


def _norm_axis(axis: int, ndim: int) -> int:
    if ndim == 0:
        return 0
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimensions")
    return axis % ndim

def _iinfo(dtype, name):
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a numpy integer dtype, got {dtype!r}") from None
    if dt.kind not in "iu" or dt.itemsize > 4:
        raise TypeError(f"{name} must be an integer dtype of at most 32 bits, got {dt}")
    return np.iinfo(dt)


def _check_zero_point(zp, info, name: str) -> int:
    if isinstance(zp, (bool, np.bool_)) or not isinstance(zp, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {zp!r}")
    if not int(info.min) <= int(zp) <= int(info.max):
        raise ValueError(f"{name}={int(zp)} is out of range for {info.dtype} [{info.min}, {info.max}]")
    return int(zp)


# --------------------------------------------------------------------------- gemmlowp primitives
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
        left = np.maximum(s, 0)
        shifted = _wrap_int32(x << left) if np.any(left) else x
        return _rdbpot(_srdhm(shifted, m), np.maximum(-s, 0))
    if rounding == "single":
        if np.any(m < 0):
            raise ValueError("multiply_by_quantized_multiplier: single rounding needs multiplier >= 0")
        total = 31 - s
        return _wrap_int32((x * m + (np.int64(1) << (total - 1))) >> total)
    raise ValueError(f"rounding must be 'double' or 'single', got {rounding!r}")


# --------------------------------------------------------------------------- other requantizers
def _integer_register(out: Format | None, where: str) -> Format:
    """The output register of a requantizer: ``Format.integer(32)`` by default, integer codes only."""
    out = Format.integer(32) if out is None else out
    if out.frac != 0:
        raise ValueError(f"{where}: out must be an integer format (frac == 0), got {out}")
    return out


def requantize_shift(acc, shift, rounding="half_up", *, axis: int = -1, out: Format | None = None,
                     overflow="saturate", seed: int | None = None) -> np.ndarray:
    r"""Power-of-two requantization (a barrel shifter): :math:`y = \mathrm{round}(\mathrm{acc} / 2^{s})`.

    The rounding is :meth:`fxpsim.fixed.FixedArray.cast` of the codes read as
    ``Format(64, s)`` to ``out`` (``Format.integer(32)`` by default), so every
    :class:`~fxpsim.fixed.Rounding` mode and :class:`~fxpsim.fixed.Overflow` mode applies;
    a negative ``s`` is a left shift.

    Parameters
    ----------
    acc : array_like of int
        Accumulator codes (int64 range).
    shift : int or 1-D array_like of int
        Right shift ``-63 <= s <= 63``, per channel along ``axis`` when 1-D.
    rounding, overflow : str or Rounding / Overflow
    out : Format, optional
        Integer output register (``frac == 0``); default ``Format.integer(32)``.
    seed : int, optional
        Seed for stochastic rounding.

    Returns
    -------
    ndarray of int64
    """
    x = _int_array(acc, "acc")
    out = _integer_register(out, "requantize_shift")
    ax = _norm_axis(axis, x.ndim)
    s = _int_array(shift, "shift")
    _check_range(s, -63, 63, "shift")
    s = _per_channel(s, x.shape[ax] if x.ndim else 1, x.ndim, ax, "shift")
    shifts = np.broadcast_to(s, x.shape)
    result = np.empty(x.shape, dtype=np.int64)
    for value in np.unique(shifts):
        sel = shifts == value
        codes = FixedArray(x[sel], Format(64, int(value)))
        result[sel] = codes.cast(out, rounding=rounding, overflow=overflow, seed=seed).raw
    return result


def requantize_float(acc, scale, rounding="half_away", *, axis: int = -1, out: Format | None = None,
                     overflow="saturate") -> np.ndarray:
    r"""Float-scale requantization: :math:`y = \mathrm{round}(\mathrm{fl}_{64}(\mathrm{acc} \cdot S))`.

    The product is computed in float64 (``acc`` exact below :math:`2^{53}`) and rounded once,
    exactly, by :func:`fxpsim.fixed.from_float` with ``rounding`` into ``out``
    (``Format.integer(32)`` by default).  TFLite's reference FULLY_CONNECTED in the shared
    vectors' build is this with ``rounding="half_away"`` and
    :math:`S = (\mathrm{double}(s_x)\,\mathrm{double}(s_w)) / \mathrm{double}(s_y)`.

    Parameters
    ----------
    acc : array_like of int
    scale : float or 1-D array_like of float
        Positive finite scale(s), per channel along ``axis`` when 1-D.
    rounding, overflow : str or Rounding / Overflow
    out : Format, optional

    Returns
    -------
    ndarray of int64
    """
    x = _int_array(acc, "acc")
    out = _integer_register(out, "requantize_float")
    sc = np.asarray(scale, dtype=np.float64)
    if not (np.all(np.isfinite(sc)) and np.all(sc > 0)):
        raise ValueError("requantize_float: scale must be positive and finite")
    ax = _norm_axis(axis, x.ndim)
    sc = _per_channel(sc, x.shape[ax] if x.ndim else 1, x.ndim, ax, "scale")
    return from_float(x.astype(np.float64) * sc, out, rounding=rounding, overflow=overflow).raw


# --------------------------------------------------------------------------- parameters
def _float32(x, name: str) -> np.ndarray:
    """Positive finite scale(s) rounded to float32, as TFLite stores them."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or an array of them, got {x!r}") from None
    with np.errstate(over="ignore", under="ignore"):
        arr32 = arr.astype(np.float32)
    if arr.size == 0 or not (np.all(np.isfinite(arr32)) and np.all(arr32 > 0)):
        raise ValueError(f"{name} must be positive and finite (as a float32), got {x!r}")
    return arr32


def activation_range(activation: str = "none", scale: float = 1.0, zero_point: int = 0,
                     dtype=np.int8) -> tuple[int, int]:
    r"""TFLite's quantized fused-activation clamp ``(act_min, act_max)``.

    With :math:`Q(f) = z + \mathrm{round\_half\_away}(f \oslash s)` (the division in float32,
    as TFLite's ``CalculateActivationRangeQuantized``) and the type range
    :math:`[q_{min}, q_{max}]`: ``"none"`` :math:`[q_{min}, q_{max}]`; ``"relu"``
    :math:`[\max(q_{min}, Q(0)), q_{max}]`; ``"relu6"`` :math:`[\max(q_{min}, Q(0)),
    \min(q_{max}, Q(6))]`; ``"relu_n1_to_1"`` :math:`[\max(q_{min}, Q(-1)), \min(q_{max}, Q(1))]`.

    Parameters
    ----------
    activation : {"none", "relu", "relu6", "relu_n1_to_1"}
        Case-insensitive; TFLite's option names (``"RELU6"``) are accepted.
    scale : float
        Output scale (rounded to float32 as TFLite stores it).
    zero_point : int
        Output zero point, inside the type range.
    dtype : numpy integer dtype
        Output type (default int8).

    Returns
    -------
    (int, int)
    """
    info = _iinfo(dtype, "dtype")
    s = _float32(scale, "scale")
    zp = _check_zero_point(zero_point, info, "zero_point")
    name = str(activation).lower()

    def q(f: float) -> int:
        v = float(np.float32(f) / s)              # float32 division, as TFLite
        v = min(max(v, -2.0 ** 40), 2.0 ** 40)    # beyond any type range (and never inf)
        return zp + int(math.copysign(math.floor(abs(v) + 0.5), v))

    lo, hi = int(info.min), int(info.max)
    if name == "none":
        return lo, hi
    if name == "relu":
        return max(lo, q(0.0)), hi
    if name == "relu6":
        return max(lo, q(0.0)), min(hi, q(6.0))
    if name == "relu_n1_to_1":
        return max(lo, q(-1.0)), min(hi, q(1.0))
    raise ValueError(f"activation must be 'none', 'relu', 'relu6' or 'relu_n1_to_1', got {activation!r}")


def tflite_add_params(scale1: float, scale2: float, out_scale: float, left_shift: int = 20,
                      single_rounding: bool = False) -> tuple[int, int, int, int, int, int]:
    r"""TFLite's int8 ADD multipliers ``(m1, s1, m2, s2, m_out, s_out)``.

    .. math::

        S = 2\max(s_1, s_2),\quad r_i = s_i / S,\quad r_{out} = S / (2^{L} s_{out})

    each turned into ``(m, s)`` by :func:`quantize_multiplier` (``QuantizeMultiplierSmallerThanOneExp``:
    :math:`0 < r < 1`, :math:`s \le 0`).  Scales are rounded to float32 first (TFLite stores them so).
    """
    s1, s2, so = (float(v) for v in (_float32(scale1, "scale1"), _float32(scale2, "scale2"),
                                       _float32(out_scale, "out_scale")))
    if not isinstance(left_shift, (int, np.integer)) or not 0 <= left_shift <= 30:
        raise ValueError(f"left_shift must be an int in [0, 30], got {left_shift!r}")
    twice_max = 2.0 * max(s1, s2)
    params = []
    for name, real in (("input1", s1 / twice_max), ("input2", s2 / twice_max),
                       ("output", twice_max / (float(1 << left_shift) * so))):
        if not 0.0 < real < 1.0:
            raise ValueError(f"tflite_add_params: the {name} multiplier {real!r} is not in (0, 1); "
                             "the scales are too far apart for TFLite's ADD")
        m, s = quantize_multiplier(real, single_rounding=single_rounding)
        params += [m, s]
    return tuple(params)


@dataclass(frozen=True)
class Requantizer:
    r"""How an accumulator becomes an output code (per tensor or per channel).

    Attributes
    ----------
    kind : {"double", "single", "shift", "float"}
        ``double``/``single``: :func:`multiply_by_quantized_multiplier` with ``multiplier``
        and ``shift``; ``shift``: :func:`requantize_shift` by ``-shift`` (``shift`` is the
        exponent, as for the multipliers: :math:`y = \mathrm{round}(\mathrm{acc}\cdot 2^{shift})`);
        ``float``: :func:`requantize_float` with ``scale``.
    multiplier, shift : tuple of int
        One value (per tensor) or one per output channel.
    scale : tuple of float
        Real scale(s) for ``float``.
    rounding : Rounding
        Rounding of ``shift`` and ``float`` (``double``/``single`` have fixed rounding).
    final_rounding : Rounding or None
        ``double``/``single`` only: the rounding of the final shift instead of gemmlowp's.
        ``double``: :math:`y = \mathrm{round}(\mathrm{SRDHM}(\ldots) / 2^{r})` in place of
        ``RoundingDivideByPOT`` (which is ``half_away``); ``single``:
        :math:`y = \mathrm{wrap}_{32}(\mathrm{round}(\mathrm{acc}\, m / 2^{31 - s}))` in place of half up.
        ``None`` (default): gemmlowp's.
    multiplier_bits : int
        ``double``/``single``: the multiplier is an unsigned ``b``-bit significand,
        :math:`M \\approx m\\,2^{s - b}` with :math:`2^{b-1} \\le m < 2^b` (31 = TFLite's int32 Q31; 16 or 8 for
        NPUs with narrower multipliers). With :math:`b < 31`, ``double`` computes
        :math:`v = \\lfloor (\\mathrm{wrap}_{32}(acc\\,2^{\\ell})\\, m + 2^{b-1}) / 2^b \\rfloor` (SRDHM's rounding)
        then the final rounding by :math:`2^r`; ``single`` :math:`\\mathrm{round}(acc\\, m / 2^{b - s})`.

    Examples
    --------
    >>> rq = Requantizer.tflite(0.02, [0.003, 0.004], 0.05)      # per-channel weight scales
    >>> rq.multiplier, rq.shift
    ((1319413916, 1759218622), (-9, -9))
    >>> rq(np.array([[1000, -1000], [30000, -777]]), axis=-1)
    array([[ 1, -2],
           [36, -1]])
    """

    kind: str = "double"
    multiplier: tuple = ()
    shift: tuple = ()
    scale: tuple = ()
    rounding: Rounding = Rounding.HALF_UP
    final_rounding: Rounding | None = None
    multiplier_bits: int = 31

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"Requantizer.kind must be one of {_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "rounding", Rounding.parse(self.rounding))
        if self.final_rounding is not None:
            object.__setattr__(self, "final_rounding", Rounding.parse(self.final_rounding))
        if isinstance(self.multiplier_bits, bool) or not isinstance(self.multiplier_bits, (int, np.integer)) or \
                not 2 <= self.multiplier_bits <= 31:
            raise ValueError(f"Requantizer: multiplier_bits must be an int in 2..31, got {self.multiplier_bits!r}")
        if self.kind in ("shift", "float") and (self.final_rounding is not None or self.multiplier_bits != 31):
            raise ValueError(f"Requantizer: kind {self.kind!r} has no fixed-point multiplier; final_rounding and "
                             f"multiplier_bits apply to 'double'/'single' only (its rounding is 'rounding')")
        for name in ("multiplier", "shift", "scale"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(np.atleast_1d(np.asarray(value)).tolist()))
        if self.kind in ("double", "single"):
            if not self.multiplier or len(self.multiplier) != len(self.shift):
                raise ValueError("Requantizer: multiplier and shift need the same, non-zero length")
            m = _int32_array(np.asarray(self.multiplier), "multiplier")
            s = _int_array(np.asarray(self.shift), "shift")
            _check_range(s, -31, 30, "shift")
            if self.kind == "single" and np.any(m < 0):
                raise ValueError("Requantizer: single rounding needs multiplier >= 0")
        elif self.kind == "shift":
            if not self.shift:
                raise ValueError("Requantizer: kind 'shift' needs shift")
            _check_range(_int_array(np.asarray(self.shift), "shift"), -63, 63, "shift")
        else:
            sc = np.asarray(self.scale, dtype=np.float64)
            if not self.scale:
                raise ValueError("Requantizer: kind 'float' needs scale")
            if not (np.all(np.isfinite(sc)) and np.all(sc > 0)):
                raise ValueError(f"Requantizer: scale must be positive and finite, got {self.scale}")

    @property
    def channels(self) -> int:
        """Number of per-channel parameters (1 = per tensor)."""
        return len(self.scale if self.kind == "float" else self.shift)

    @classmethod
    def tflite(cls, input_scale, weight_scale, output_scale, kind: str = "double",
               rounding="half_away", final_rounding=None, multiplier_bits: int = 31) -> "Requantizer":
        r"""TFLite's conv/FC requantizer from the tensor scales (float32, as stored).

        .. math:: M_c = (\mathrm{double}(s_x)\,\mathrm{double}(s_{w,c})) / \mathrm{double}(s_y)

        ``kind="double"``/``"single"`` quantize :math:`M_c` with :func:`quantize_multiplier`;
        ``kind="float"`` keeps it as a float64 scale (with ``rounding``, TFLite: half away);
        ``kind="shift"`` rounds :math:`\log_2 M_c` to the nearest integer exponent.
        ``weight_scale`` is a scalar (per tensor) or one value per output channel.
        """
        sx = np.float64(_float32(input_scale, "input_scale"))
        sw = _float32(weight_scale, "weight_scale").astype(np.float64)
        sy = np.float64(_float32(output_scale, "output_scale"))
        if sx.ndim or sy.ndim or sw.ndim > 1:
            raise ValueError("Requantizer.tflite: input/output scales are scalars, weight_scale a scalar or 1-D")
        return cls.from_real(sx * sw / sy, kind, rounding, final_rounding, multiplier_bits)

    @classmethod
    def from_real(cls, real, kind: str = "double", rounding="half_away", final_rounding=None,
                  multiplier_bits: int = 31) -> "Requantizer":
        r"""The requantizer of a real multiplier :math:`M` (a positive scalar, or one per channel).

        ``kind="double"``/``"single"``: :math:`M \approx m\,2^{s-31}` by :func:`quantize_multiplier` (or a
        ``multiplier_bits``-bit significand); ``"float"``: :math:`M` as a float64 scale with ``rounding``;
        ``"shift"``: :math:`\log_2 M` rounded to the nearest integer exponent, with ``rounding``.
        """
        real = np.atleast_1d(np.asarray(real, dtype=np.float64))
        if kind in ("double", "single"):
            if multiplier_bits == 31:
                m, s = quantize_multiplier(real, single_rounding=kind == "single")
            else:
                m, s = _narrow_multiplier(real, int(multiplier_bits))
            return cls(kind, multiplier=tuple(m.tolist()), shift=tuple(s.tolist()), final_rounding=final_rounding,
                       multiplier_bits=int(multiplier_bits))
        if kind == "float":
            return cls("float", scale=tuple(real.tolist()), rounding=rounding)
        if kind == "shift":
            return cls("shift", shift=tuple(np.round(np.log2(real)).astype(int).tolist()), rounding=rounding)
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")

    def _output_codes(self, acc: np.ndarray, acc_bits: int, zero_point: int, lo: int, hi: int, dtype):
        r"""Output codes :math:`\mathrm{clamp}(R(\mathrm{acc}) + z, lo, hi)` of ``dtype``, channels on the
        last axis, for int64 accumulator codes known to lie in the signed ``acc_bits``-bit range.

        Bit for bit ``np.clip(self(acc, axis=-1) + zero_point, lo, hi).astype(dtype)``; for ``double``
        and ``single`` the roundings, the shifts and the zero point are fused into one multiply, one
        add and one arithmetic shift per channel (see :func:`_fused_constants`), a few passes over
        ``acc`` instead of a dozen.  Other kinds, and widths where the fused sums could leave int64,
        take the general path.
        """
        consts = _fused_constants(self, int(acc_bits), int(zero_point)) if acc.ndim else None
        if consts is None or len(consts[0]) not in (1, acc.shape[-1]):
            return np.clip(self(acc, axis=-1) + zero_point, lo, hi).astype(dtype)
        y = np.empty(acc.shape, np.int64)
        width = len(consts[0])
        x2, y2 = acc.reshape(-1, width), y.reshape(-1, width)
        # per-channel constants repeat every `width` elements: tile them over `rep` rows so that
        # numpy's inner loops run over long rows instead of `width` elements
        rep = max(1, 1024 // width) if width > 1 else 1
        full = x2.shape[0] // rep * rep
        if full:
            _fused_apply(x2[:full].reshape(-1, rep * width), y2[:full].reshape(-1, rep * width),
                         *_tiled_constants(self, int(acc_bits), int(zero_point), rep))
        if full < x2.shape[0]:
            _fused_apply(x2[full:], y2[full:], *consts)
        return np.clip(y, lo, hi, out=y).astype(dtype)

    def __call__(self, acc, axis: int = -1) -> np.ndarray:
        """Requantize accumulator codes; per-channel parameters apply along ``axis``."""
        params = {name: (np.asarray(v) if len(v) > 1 else v[0]) if v else None
                  for name, v in (("m", self.multiplier), ("s", self.shift), ("c", self.scale))}
        if self.kind in ("double", "single") and (self.final_rounding is not None or self.multiplier_bits != 31):
            return self._final_rounded(acc, axis)
        if self.kind in ("double", "single"):
            return multiply_by_quantized_multiplier(acc, params["m"], params["s"], self.kind, axis=axis)
        if self.kind == "shift":
            return requantize_shift(acc, -np.asarray(params["s"]), self.rounding, axis=axis)
        return requantize_float(acc, params["c"], self.rounding, axis=axis)

    def _final_rounded(self, acc, axis: int = -1) -> np.ndarray:
        """``double``/``single`` with ``final_rounding`` (see the class docstring)."""
        x = _int_array(acc, "acc")
        if x.size and (int(x.min()) < INT32_MIN or int(x.max()) > INT32_MAX):
            raise ValueError("Requantizer: acc must fit int32 (gemmlowp arithmetic)")
        ax = _norm_axis(axis, x.ndim)
        n_ch = x.shape[ax] if x.ndim else 1
        m = _per_channel(np.asarray(self.multiplier, np.int64), n_ch, x.ndim, ax, "multiplier")
        s = _per_channel(np.asarray(self.shift, np.int64), n_ch, x.ndim, ax, "shift")
        b = self.multiplier_bits
        if self.kind == "double":
            left = np.maximum(s, 0)
            shifted = _wrap_int32(x << left) if np.any(left) else x
            v = _srdhm(shifted, m) if b == 31 else (shifted * m + (1 << (b - 1))) >> b
            return _shift_round(v, np.maximum(-s, 0), self.final_rounding or Rounding.HALF_AWAY)
        total = b - s
        if np.any(total < 1):                  # a multiplier above 2^b: an exact left shift
            return _wrap_int32(np.where(total < 1, (x * m) << np.maximum(-total, 0),
                                        _shift_round(x * m, np.maximum(total, 1), self.final_rounding or "half_up")))
        return _wrap_int32(_shift_round(x * m, total, self.final_rounding or Rounding.HALF_UP))


def _narrow_multiplier(real, bits: int):
    """``(m, s)`` per channel: :math:`m = \\mathrm{round\\_half\\_away}(q\\,2^{b})`, :math:`(q, s) =
    \\mathrm{frexp}(M)` (a carry to :math:`2^b` moves into the exponent); tiny multipliers become (0, 0)."""
    r = np.atleast_1d(np.asarray(real, dtype=np.float64))
    q, e = np.frexp(r)
    m = np.floor(np.abs(q) * 2.0 ** bits + 0.5).astype(np.int64) * np.sign(q).astype(np.int64)
    carry = m == (1 << bits)
    m, e = np.where(carry, 1 << (bits - 1), m), np.where(carry, e + 1, e).astype(np.int64)
    tiny = e < -31
    return np.where(tiny, 0, m), np.where(tiny, 0, e)           # frexp(0) = (0, 0): no case for r = 0


def _shift_round(v: np.ndarray, shifts: np.ndarray, rounding) -> np.ndarray:
    r""":math:`\mathrm{round}(v / 2^{s})` elementwise (``shifts`` broadcast to ``v``, 0..62), exact."""
    shifts = np.broadcast_to(shifts, v.shape)
    out = np.empty(v.shape, np.int64)
    for value in np.unique(shifts):
        sel = shifts == value
        out[sel] = FixedArray(v[sel], Format(64, int(value))).cast(Format.integer(64), rounding=rounding).raw
    return out


def _fused_apply(x: np.ndarray, y: np.ndarray, mult, add, nudge, shift) -> None:
    """``y = (x * mult + add - [x * mult < -2^30] * nudge) >> shift`` (see :func:`_fused_constants`)."""
    np.multiply(x, mult, out=y)
    if nudge is not None:
        y += 1 << 30
        sign = y >> 63                  # -1 where x * mult + 2^30 < 0, else 0
        sign &= nudge                   # nudge holds -2^31 (or 0 for channels without it)
        y += sign
        y += add - (1 << 30)
    else:
        y += add
    y >>= shift


@functools.lru_cache(maxsize=256)
def _tiled_constants(rq: Requantizer, acc_bits: int, zero_point: int, rep: int):
    """:func:`_fused_constants` repeated ``rep`` times (per-channel rows of ``rep`` pixels)."""
    return tuple(None if c is None else np.tile(c, rep)
                 for c in _fused_constants(rq, acc_bits, zero_point))


@functools.lru_cache(maxsize=256)
def _fused_constants(rq: Requantizer, acc_bits: int, zero_point: int):
    r"""Per-channel ``(multiplier, addend, nudge, shift)`` of :meth:`Requantizer._output_codes`, or None.

    For an accumulator :math:`x` with :math:`|x| \le 2^{W-1}` (``W = acc_bits`` :math:`\le 32`):

    ``double`` (:math:`\ell = \max(s, 0)`, :math:`r = \max(-s, 0)`, :math:`h = \lfloor 2^{r-1} \rfloor`):
    when :math:`W - 1 + \ell \le 31` the int32 wrap of :math:`x 2^{\ell}` is the identity and
    :math:`\mathrm{SRDHM}` never saturates (:math:`m > -2^{31}`), so with :math:`p = x\,m\,2^{\ell}`,
    :math:`v = \lfloor (p + 2^{30}) / 2^{31} \rfloor` and
    :math:`\mathrm{RDBPOT}(v, r) = \lfloor (v + h - [v < 0][r > 0]) / 2^r \rfloor`; since
    :math:`\lfloor \lfloor a / 2^{31} \rfloor / 2^r \rfloor = \lfloor a / 2^{31+r} \rfloor` and
    :math:`v < 0 \Leftrightarrow p < -2^{30}`,

    .. math:: y + z = \big\lfloor (p + 2^{30} + h 2^{31} + z 2^{31+r}
              - [p < -2^{30}][r > 0]\, 2^{31}) / 2^{31+r} \big\rfloor .

    ``single`` (:math:`t = 31 - s`): when the int32 wrap is the identity over the whole range of
    :math:`x`, :math:`y + z = \lfloor (x m + 2^{t-1} + z 2^t) / 2^t \rfloor`.

    Every intermediate is bounded in exact integers here; None when any could leave int64.
    """
    if rq.kind not in ("double", "single") or not 1 <= acc_bits <= 32 or rq.final_rounding is not None \
            or rq.multiplier_bits != 31:
        return None
    top = 1 << (acc_bits - 1)                       # |x| <= top
    mults, adds, nudges, shifts = [], [], [], []
    for m, s in zip(rq.multiplier, rq.shift):
        if rq.kind == "double":
            left, right = max(s, 0), max(-s, 0)
            if acc_bits - 1 + left > 31 or m == INT32_MIN:
                return None
            mult = m << left
            add = (1 << 30) + (((1 << right) >> 1) << 31) + (zero_point << (31 + right))
            nudge = -(1 << 31) if right else 0
            shift = 31 + right
        else:
            t = 31 - s
            lo_y, hi_y = (-top * m + (1 << (t - 1))) >> t, ((top - 1) * m + (1 << (t - 1))) >> t
            if lo_y < INT32_MIN or hi_y > INT32_MAX:
                return None                         # the int32 wrap could act
            mult, add, nudge, shift = m, (1 << (t - 1)) + (zero_point << t), 0, t
        if top * abs(mult) + abs(add) + (1 << 30) + abs(nudge) >= 1 << 63:
            return None
        mults.append(mult)
        adds.append(add)
        nudges.append(nudge)
        shifts.append(shift)
    nudge = np.array(nudges, np.int64) if any(nudges) else None
    return (np.array(mults, np.int64), np.array(adds, np.int64), nudge, np.array(shifts, np.int64))

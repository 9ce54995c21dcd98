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
  FULLY_CONNECTED does in the build of the shared vectors);
* ``"float32"``: ``round(fl32(fl32(acc) * fl32(scale)))``, the product in float32 (XNNPACK's ``fp32``
  requantization: one float multiply, then ``lrintf``, i.e. ``rounding="half_even"``).

It also derives TFLite's parameters (:func:`quantize_multiplier`,
:func:`activation_range`, :func:`tflite_add_params`).  The integer layer kernels
that use a :class:`Requantizer` live in :mod:`fxpsim.integer_layers`.

TFLite's fixed-point multiplier itself (:func:`quantize_multiplier`, gemmlowp's SRDHM / RDBPOT,
:func:`multiply_by_quantized_multiplier`) is in :mod:`fxpsim.datapath.fixed_point_multiplier`, the
parameters in :mod:`fxpsim.datapath.tflite_params`, the argument checks in
:mod:`fxpsim.datapath.integer_checks` and the fused output stage in
:mod:`fxpsim.datapath.requantize_fused`; all are importable from here too.

All integer arithmetic is done on int64 numpy arrays whose intermediate values are
proven to fit (bounds in each docstring), so no step depends on C overflow rules.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.fixed import FixedArray, Format, Rounding, from_float
from .fixed_point_multiplier import (  # noqa: F401
    _rdbpot, _srdhm, multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from .integer_checks import (  # noqa: F401
    INT32_MAX, INT32_MIN, _check_range, _check_zero_point, _iinfo, _int32_array, _int_array, _norm_axis,
    _per_channel, _wrap_int32,
)
from .requantize_fused import _fused_apply, _fused_constants, _tiled_constants
from .tflite_params import _float32, activation_range, tflite_add_params  # noqa: F401

__all__ = [
    "quantize_multiplier", "saturating_rounding_doubling_high_mul", "rounding_divide_by_pot",
    "multiply_by_quantized_multiplier", "requantize_shift", "requantize_float",
    "activation_range", "tflite_add_params", "Requantizer",
]

_KINDS = ("double", "single", "shift", "float", "float32")


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
                     overflow="saturate", precision: str = "float64") -> np.ndarray:
    r"""Float-scale requantization: :math:`y = \mathrm{round}(\mathrm{fl}_{64}(\mathrm{acc} \cdot S))`.

    The product is computed in float64 (``acc`` exact below :math:`2^{53}`) and rounded once,
    exactly, by :func:`fxpsim.from_float` with ``rounding`` into ``out``
    (``Format.integer(32)`` by default).  TFLite's reference FULLY_CONNECTED in the shared
    vectors' build is this with ``rounding="half_away"`` and
    :math:`S = (\mathrm{double}(s_x)\,\mathrm{double}(s_w)) / \mathrm{double}(s_y)`.

    ``precision="float32"``: :math:`y = \mathrm{round}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(\mathrm{acc})
    \cdot \mathrm{fl}_{32}(S)))` (the accumulator and the scale rounded to float32 to nearest even, the
    product rounded to float32; it is exact in float64, so the one rounding into ``out`` is exact too): XNNPACK's
    ``fp32`` requantization with ``rounding="half_even"`` (``lrintf``).

    Parameters
    ----------
    acc : array_like of int
    scale : float or 1-D array_like of float
        Positive finite scale(s), per channel along ``axis`` when 1-D.
    rounding, overflow : str or Rounding / Overflow
    out : Format, optional
    precision : {"float64", "float32"}
        The precision of the product.

    Returns
    -------
    ndarray of int64
    """
    x = _int_array(acc, "acc")
    out = _integer_register(out, "requantize_float")
    if precision not in ("float64", "float32"):
        raise ValueError(f"requantize_float: precision must be 'float64' or 'float32', got {precision!r}")
    sc = np.asarray(scale, dtype=np.float64)
    if precision == "float32":
        sc = sc.astype(np.float32)
    if not (np.all(np.isfinite(sc)) and np.all(sc > 0)):
        raise ValueError("requantize_float: scale must be positive and finite" +
                         (" in float32" if precision == "float32" else ""))
    ax = _norm_axis(axis, x.ndim)
    sc = _per_channel(sc, x.shape[ax] if x.ndim else 1, x.ndim, ax, "scale")
    if precision == "float32":     # float32 * float32 rounded to float32, then widened exactly
        with np.errstate(over="ignore"):
            prod = (x.astype(np.float32) * sc).astype(np.float64)
    else:
        prod = x.astype(np.float64) * sc
    return from_float(prod, out, rounding=rounding, overflow=overflow).raw


@dataclass(frozen=True)
class Requantizer:
    r"""How an accumulator becomes an output code (per tensor or per channel).

    Attributes
    ----------
    kind : {"double", "single", "shift", "float", "float32"}
        ``double``/``single``: :func:`multiply_by_quantized_multiplier` with ``multiplier``
        and ``shift``; ``shift``: :func:`requantize_shift` by ``-shift`` (``shift`` is the
        exponent, as for the multipliers: :math:`y = \mathrm{round}(\mathrm{acc}\cdot 2^{shift})`);
        ``float``: :func:`requantize_float` with ``scale``; ``float32``: the same with the product in
        float32 (``precision="float32"``; ``scale`` is rounded to float32).
    multiplier, shift : tuple of int
        One value (per tensor) or one per output channel.
    scale : tuple of float
        Real scale(s) for ``float`` and ``float32``.
    rounding : Rounding
        Rounding of ``shift``, ``float`` and ``float32`` (``double``/``single`` have fixed rounding).
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
        if self.kind in ("shift", "float", "float32") and (self.final_rounding is not None
                                                          or self.multiplier_bits != 31):
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
                raise ValueError(f"Requantizer: kind {self.kind!r} needs scale")
            if self.kind == "float32":
                with np.errstate(over="ignore"):
                    sc = sc.astype(np.float32)
            if not (np.all(np.isfinite(sc)) and np.all(sc > 0)):
                raise ValueError(f"Requantizer: scale must be positive and finite"
                                 f"{' in float32' if self.kind == 'float32' else ''}, got {self.scale}")

    @property
    def channels(self) -> int:
        """Number of per-channel parameters (1 = per tensor)."""
        return len(self.scale if self.kind in ("float", "float32") else self.shift)

    @classmethod
    def tflite(cls, input_scale, weight_scale, output_scale, kind: str = "double",
               rounding="half_away", final_rounding=None, multiplier_bits: int = 31) -> "Requantizer":
        r"""TFLite's conv/FC requantizer from the tensor scales (float32, as stored).

        .. math:: M_c = (\mathrm{double}(s_x)\,\mathrm{double}(s_{w,c})) / \mathrm{double}(s_y)

        ``kind="double"``/``"single"`` quantize :math:`M_c` with :func:`quantize_multiplier`;
        ``kind="float"`` keeps it as a float64 scale (with ``rounding``, TFLite: half away), ``"float32"`` as
        a float32 one;
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
        if kind in ("float", "float32"):
            return cls(kind, scale=tuple(real.tolist()), rounding=rounding)
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
        return requantize_float(acc, params["c"], self.rounding, axis=axis,
                                precision="float32" if self.kind == "float32" else "float64")

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

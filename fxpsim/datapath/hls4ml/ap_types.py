"""Xilinx ``ap_fixed<W, I, Q, O, N>`` / ``ap_ufixed`` / ``ap_int<W>`` / ``ap_uint<W>`` as fxpsim formats and modes.

An ``ap_fixed<W, I>`` holds codes :math:`c` of ``W`` bits (two's complement; ``ap_ufixed`` unsigned) worth
:math:`c \\cdot 2^{I - W}`: ``I`` integer bits including the sign, so fxpsim's ``Format(W, W - I, signed)``.
``ap_int<W>`` is ``ap_fixed<W, W>`` (``ap_uint<W>``: ``ap_ufixed<W, W>``).  Assigning a value :math:`v` to the
type quantizes, then handles overflow (a carry out of the rounding overflows too):

.. math:: c = \\mathrm{fit}_O\\big(\\mathrm{round}_Q(v \\cdot 2^{W - I})\\big)

with the defaults of ``ap_fixed`` (and hls4ml): ``Q = AP_TRN``, ``O = AP_WRAP``, ``N = 0``.  ``AP_WRAP`` with ``N > 0`` keeps the ``N``
MSBs saturated as SystemC's ``n_bits`` for signed types; for ``ap_ufixed`` it sets them to 1 on overflow and on
underflow alike (ap_types' ``overflow_adjust``), which is modelled here.  The modes map onto
fxpsim's (``Q``: the value's bits below the LSB; ties are exact halves of an LSB):

=================  ===========================  =================  =========================================
``Q``              fxpsim ``Rounding``           ``O``              fxpsim ``Overflow``
=================  ===========================  =================  =========================================
``AP_TRN``         ``floor`` (toward -inf)       ``AP_WRAP``        ``wrap`` (modulo :math:`2^W`; ``N`` MSBs
                                                                    saturated as SystemC's ``n_bits``)
``AP_TRN_ZERO``    ``toward_zero``               ``AP_SAT``         ``saturate`` (clamp to [min, max])
``AP_RND``         ``half_up`` (ties to +inf)    ``AP_SAT_ZERO``    ``saturate_zero`` (overflow -> 0)
``AP_RND_ZERO``    ``half_toward_zero``          ``AP_SAT_SYM``     ``saturate_symmetric`` (clamp to
                                                                    [-max, max])
``AP_RND_MIN_INF`` ``half_down`` (ties to -inf)
``AP_RND_INF``     ``half_away`` (ties from 0)
``AP_RND_CONV``    ``half_even``
=================  ===========================  =================  =========================================

hls4ml writes its types as ``ap_fixed<...>`` in the generated C++ and as ``fixed<...>`` / ``ufixed<...>`` /
``int<...>`` / ``uint<...>`` in its configs; :func:`parse_ap_type` reads both.  ``AP_WRAP_SM`` and ``N > 0`` with
a saturating ``O`` are not modelled and raise ``ValueError``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...core.fixed import FixedArray, from_float
from ...core.formats import Format, Overflow, Rounding, check_modes

__all__ = ["ApType", "parse_ap_type", "QUANTIZATION_MODES", "OVERFLOW_MODES"]

QUANTIZATION_MODES = {
    "AP_TRN": Rounding.FLOOR, "AP_TRN_ZERO": Rounding.TOWARD_ZERO, "AP_RND": Rounding.HALF_UP,
    "AP_RND_ZERO": Rounding.HALF_TOWARD_ZERO, "AP_RND_MIN_INF": Rounding.HALF_DOWN,
    "AP_RND_INF": Rounding.HALF_AWAY, "AP_RND_CONV": Rounding.HALF_EVEN,
}
OVERFLOW_MODES = {
    "AP_WRAP": Overflow.WRAP, "AP_SAT": Overflow.SATURATE, "AP_SAT_ZERO": Overflow.SATURATE_ZERO,
    "AP_SAT_SYM": Overflow.SATURATE_SYMMETRIC,
}
_NAME = {v: k for k, v in QUANTIZATION_MODES.items()} | {v: k for k, v in OVERFLOW_MODES.items()}
_TYPE = re.compile(r"^(?:ap_)?(u?)(fixed|int)\s*<\s*([^<>]*)>$")


@dataclass(frozen=True)
class ApType:
    """An ``ap_fixed``-family type: its :class:`~fxpsim.core.formats.Format`, quantization and overflow modes and
    ``n_bits`` (``N``, the saturated MSBs of ``AP_WRAP``)."""

    fmt: Format
    rounding: Rounding = Rounding.FLOOR
    overflow: Overflow = Overflow.WRAP
    n_bits: int = 0

    def __post_init__(self):
        if not isinstance(self.fmt, Format):
            raise TypeError(f"ApType.fmt must be a Format, got {type(self.fmt).__name__}")
        r, o = check_modes(self.rounding, self.overflow, self.fmt, self.n_bits)
        if r not in QUANTIZATION_MODES.values():
            raise ValueError(f"ApType: rounding {r.value!r} is no ap_fixed quantization mode "
                             f"(use one of {', '.join(QUANTIZATION_MODES)})")
        if o not in OVERFLOW_MODES.values():
            raise ValueError(f"ApType: overflow {o.value!r} is no modelled ap_fixed overflow mode "
                             f"(use one of {', '.join(OVERFLOW_MODES)})")
        object.__setattr__(self, "rounding", r)
        object.__setattr__(self, "overflow", o)
        object.__setattr__(self, "n_bits", int(self.n_bits))

    def __str__(self):
        w, i = self.fmt.word, self.fmt.int_bits
        return (f"ap_{'' if self.fmt.signed else 'u'}fixed<{w},{i},{_NAME[self.rounding]},"
                f"{_NAME[self.overflow]},{self.n_bits}>")

    def from_float(self, x) -> FixedArray:
        """``T(v)`` for real values ``v`` (the ``ap_fixed(double)`` constructor): exact, then quantized and fitted."""
        values = np.asarray(x, dtype=np.float64)
        if self._unsigned_wrap_n:
            return self._set_msbs(from_float(values, self.fmt, self.rounding, self.overflow, mask=True))
        return from_float(values, self.fmt, self.rounding, self.overflow, n_bits=self.n_bits)

    def cast(self, x: FixedArray) -> FixedArray:
        """``(T) x`` for a fixed-point value ``x`` (an ``ap_fixed`` assignment)."""
        if not isinstance(x, FixedArray):
            raise TypeError(f"ApType.cast expects a FixedArray, got {type(x).__name__}")
        if self._unsigned_wrap_n:
            return self._set_msbs(x.cast(self.fmt, self.rounding, self.overflow, mask=True))
        return x.cast(self.fmt, self.rounding, self.overflow, n_bits=self.n_bits)

    @property
    def _unsigned_wrap_n(self) -> bool:
        return self.n_bits > 0 and not self.fmt.signed

    def _set_msbs(self, wrapped: FixedArray) -> FixedArray:
        """``ap_ufixed``'s ``AP_WRAP`` with ``N > 0``: on overflow *or* underflow the wrapped code gets its ``N``
        MSBs set to 1 (``overflow_adjust`` in ``ap_fixed_base.h``; SystemC's ``n_bits`` clears them on underflow)."""
        ones = ((1 << self.n_bits) - 1) << (self.fmt.word - self.n_bits)
        mask = wrapped.overflow_mask
        return FixedArray(np.where(mask, wrapped.raw | ones, wrapped.raw), self.fmt,
                          overflows=wrapped.overflows)


def parse_ap_type(text) -> ApType:
    """Read ``ap_fixed<W,I[,Q[,O[,N]]]>``, ``ap_ufixed<...>``, ``ap_int<W>``, ``ap_uint<W>`` (or hls4ml's
    ``fixed<...>``, ``ufixed<...>``, ``int<...>``, ``uint<...>``); omitted modes are ``AP_TRN``, ``AP_WRAP``, 0.
    Modes may drop the ``AP_`` prefix, as hls4ml writes them (``fixed<16,6,TRN,WRAP,0>``: ``RoundingMode`` /
    ``SaturationMode`` names)."""
    if isinstance(text, ApType):
        return text
    if not isinstance(text, str):
        raise TypeError(f"parse_ap_type expects a string such as 'ap_fixed<16,6>', got {type(text).__name__}")
    m = _TYPE.match(text.strip())
    if not m:
        raise ValueError(f"cannot read the hls4ml/ap_fixed type {text!r}; expected ap_fixed<W,I[,Q[,O[,N]]]>, "
                         "ap_ufixed<...>, ap_int<W>, ap_uint<W> (or fixed<...>, ufixed<...>, int<W>, uint<W>)")
    unsigned, kind, args = m.group(1) == "u", m.group(2), [a.strip() for a in m.group(3).split(",")]
    limit = 1 if kind == "int" else 5
    if not 1 <= len(args) <= limit or (kind == "fixed" and len(args) < 2):
        raise ValueError(f"{text!r}: {'ap_int takes <W>' if kind == 'int' else 'ap_fixed takes <W, I[, Q[, O[, N]]]>'}, "
                         f"got {len(args)} argument(s)")
    try:
        word = int(args[0])
        ints = word if kind == "int" else int(args[1])
        n_bits = int(args[4]) if len(args) > 4 else 0
    except ValueError:
        raise ValueError(f"{text!r}: W, I and N must be integers") from None
    if not 1 <= word <= 64:
        raise ValueError(f"{text!r}: W = {word}; fxpsim models widths 1..64")
    q, o = (args[2:4] + ["AP_TRN", "AP_WRAP"][len(args[2:4]):])
    q, o = q.upper(), o.upper()
    q, o = (v if v.startswith("AP_") else "AP_" + v for v in (q, o))    # hls4ml's own names: TRN, WRAP ...
    if q not in QUANTIZATION_MODES:
        raise ValueError(f"{text!r}: unknown quantization mode {q!r}; use one of {', '.join(QUANTIZATION_MODES)}")
    if o not in OVERFLOW_MODES:
        raise ValueError(f"{text!r}: overflow mode {o!r} is not modelled; use one of {', '.join(OVERFLOW_MODES)}")
    if n_bits and o != "AP_WRAP":
        raise ValueError(f"{text!r}: N = {n_bits} saturated bits applies to AP_WRAP only")
    try:
        return ApType(Format(word, word - ints, not unsigned), QUANTIZATION_MODES[q], OVERFLOW_MODES[o], n_bits)
    except ValueError as err:
        raise ValueError(f"{text!r}: {err}") from None

"""Binary floating-point formats of up to 32 bits: IEEE-style, OCP FP8/MX, FNUZ, E8M0 and P3109.

A :class:`FloatFormat` ``(exp_bits, man_bits, bias, signed, encoding, subnormals)`` describes codes
made of an optional sign bit ``s``, a biased exponent field ``f`` (``exp_bits`` bits) and a trailing
mantissa field ``t`` (``man_bits = m`` bits).  A code that is not special has the value

.. math::

    v = (-1)^s \\cdot \\begin{cases}
        t \\cdot 2^{\\,1 - b - m}              & f = 0 \\text{ (subnormal; zero when } t = 0) \\\\
        (2^m + t) \\cdot 2^{\\,f - b - m}      & f > 0 \\text{ (normal)}
    \\end{cases}

with ``b`` the bias.  The encodings differ only in which codes are special (``E = 2^e - 1``,
``M = 2^m - 1``):

==========  ===================================================================  ==============
encoding    special codes                                                        default bias
==========  ===================================================================  ==============
``ieee``    ``f = E``: ``t = 0`` is ±Inf, ``t != 0`` NaN (IEEE 754, OCP E5M2)     ``2^(e-1) - 1``
``fn``      ``f = E, t = M`` is NaN (both signs); no Inf (OCP E4M3)              ``2^(e-1) - 1``
``fnuz``    sign bit set with ``f = t = 0`` (0x80) is the one NaN; no -0, no Inf   ``2^(e-1)``
``fnu``     unsigned; all ones is NaN; no zero: ``f = 0`` is normal (E8M0)       ``2^(e-1) - 1``
``finite``  none: every code is a number (OCP MX E2M1, E2M3, E3M2)               ``2^(e-1) - 1``
``p3109``   signed: 0x80 NaN, 0x7F/0xFF ±Inf, no -0; unsigned: all ones NaN,     ``2^(e-1)``
            all ones minus one +Inf (IEEE P3109 ``binary{K}p{P}``)
==========  ===================================================================  ==============

``subnormals=False`` makes the format flush: encoding turns every subnormal result into a zero and
decoding reads subnormal codes as zero (FTZ + DAZ).  Every format here decodes exactly to float64:
at most 31 mantissa bits and, checked in ``__post_init__``, values within
:math:`[2^{-1074}, 2^{1024})`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

__all__ = ["FloatFormat", "ENCODINGS", "MAX_FLOAT_BITS", "known_float_formats"]

MAX_FLOAT_BITS = 32
ENCODINGS = ("ieee", "fn", "fnuz", "fnu", "finite", "p3109")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format (see the module docstring for the value of each code).

    Parameters
    ----------
    exp_bits : int
        Exponent field width ``e`` (>= 1; >= 2 for ``ieee``).
    man_bits : int
        Trailing mantissa field width ``m`` (>= 0), the precision is ``m + 1``.
    bias : int, optional
        Exponent bias; ``None`` takes the encoding's default (table in the module docstring).
    signed : bool
        A sign bit in front (``fnu`` is unsigned, ``fnuz`` signed).
    encoding : str
        One of :data:`ENCODINGS`.
    subnormals : bool, optional
        Subnormal numbers exist (default), or are flushed to zero; ``fnu`` has none (``f = 0`` is
        a normal binade), so its ``subnormals`` is ``False``.
    name : str, optional
        Display name (not part of equality).

    Attributes
    ----------
    bits : int
        ``signed + exp_bits + man_bits``, at most :data:`MAX_FLOAT_BITS`.
    """

    exp_bits: int
    man_bits: int
    bias: int | None = None
    signed: bool = True
    encoding: str = "ieee"
    subnormals: bool | None = None
    name: str | None = field(default=None, compare=False)

    def __post_init__(self):
        for attr in ("exp_bits", "man_bits", "bias"):
            value = getattr(self, attr)
            if attr == "bias" and value is None:
                continue
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"FloatFormat.{attr} must be an int, got {type(value).__name__} {value!r}")
            object.__setattr__(self, attr, int(value))
        for attr in ("signed", "subnormals"):
            value = getattr(self, attr)
            if not (value is None and attr == "subnormals") and not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"FloatFormat.{attr} must be a bool, got {value!r}")
        if not isinstance(self.encoding, str) or self.encoding not in ENCODINGS:
            raise ValueError(f"FloatFormat.encoding must be one of {', '.join(ENCODINGS)}; "
                             f"got {self.encoding!r}")
        e, m, enc = self.exp_bits, self.man_bits, self.encoding
        if e < (2 if enc == "ieee" else 1):
            raise ValueError(f"FloatFormat.exp_bits must be >= {2 if enc == 'ieee' else 1} for "
                             f"encoding {enc!r}, got {e}")
        if m < 0:
            raise ValueError(f"FloatFormat.man_bits must be >= 0, got {m}")
        if enc == "fnu" and self.signed:
            raise ValueError("FloatFormat.signed must be False for encoding 'fnu' (unsigned, like E8M0)")
        if enc == "fnuz" and not self.signed:
            raise ValueError("FloatFormat.signed must be True for encoding 'fnuz' (its NaN is the -0 code)")
        bits = int(self.signed) + e + m
        if bits > MAX_FLOAT_BITS:
            raise ValueError(f"FloatFormat: {bits} bits (sign + exp_bits + man_bits) exceed "
                             f"{MAX_FLOAT_BITS}")
        if enc == "fnu":
            if self.subnormals:
                raise ValueError("FloatFormat.subnormals cannot be True for encoding 'fnu' "
                                 "(its zero exponent field is a normal binade)")
            object.__setattr__(self, "subnormals", False)
        elif self.subnormals is None:
            object.__setattr__(self, "subnormals", True)
        object.__setattr__(self, "signed", bool(self.signed))
        object.__setattr__(self, "subnormals", bool(self.subnormals))
        if self.bias is None:
            default = (1 << (e - 1)) if enc in ("fnuz", "p3109") else (1 << (e - 1)) - 1
            object.__setattr__(self, "bias", default)
        if self.max_mag_code < self._first_code:
            raise ValueError(f"FloatFormat: encoding {enc!r} with exp_bits={e}, man_bits={m} leaves "
                             f"no finite nonzero code")
        lo, hi = self._min_exponent - m, self._max_exponent
        if lo < -1074 or hi > 1023:
            raise ValueError(f"FloatFormat.bias={self.bias}: values from 2^{lo} to 2^{hi + 1} fall "
                             f"outside float64's range [2^-1074, 2^1024)")

    # ------------------------------------------------------------------ layout
    @property
    def bits(self) -> int:
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def mag_bits(self) -> int:
        """Bits below the sign bit: ``exp_bits + man_bits``."""
        return self.exp_bits + self.man_bits

    @property
    def sign_bit(self) -> int:
        """The sign bit's mask (0 for unsigned formats)."""
        return (1 << self.mag_bits) if self.signed else 0

    @property
    def dtype(self) -> np.dtype:
        """The unsigned integer dtype holding the codes: uint8, uint16 or uint32."""
        return np.dtype(np.uint8 if self.bits <= 8 else np.uint16 if self.bits <= 16 else np.uint32)

    @property
    def _first_code(self) -> int:
        """Smallest positive-magnitude code (1, or 0 for ``fnu`` whose code 0 is 2^-bias)."""
        return 0 if self.encoding == "fnu" else 1

    @property
    def _min_exponent(self) -> int:
        """emin: the exponent of the smallest normal binade (``-bias`` for fnu, else ``1 - bias``)."""
        return -self.bias if self.encoding == "fnu" else 1 - self.bias

    @property
    def max_mag_code(self) -> int:
        """The magnitude code (sign bit clear) of the largest finite value."""
        full = (1 << self.mag_bits) - 1
        enc = self.encoding
        if enc == "ieee":
            return ((1 << self.exp_bits) - 1 << self.man_bits) - 1
        if enc == "fn" or enc == "fnu" or (enc == "p3109" and self.signed):
            return full - 1
        if enc == "p3109":
            return full - 2
        return full                                     # fnuz, finite

    @property
    def _max_exponent(self) -> int:
        """floor(log2(max finite)) (the max is dyadic: numerator or denominator a power of two)."""
        v = self.mag_value(self.max_mag_code)
        return v.numerator.bit_length() - v.denominator.bit_length()

    @property
    def nan_code(self) -> int | None:
        """The canonical (positive where signs exist) NaN code, or None."""
        enc, full = self.encoding, (1 << self.mag_bits) - 1
        if enc == "ieee":
            return None if self.man_bits == 0 else ((1 << self.exp_bits) - 1 << self.man_bits) | (1 << (self.man_bits - 1))
        if enc == "fn" or enc == "fnu" or (enc == "p3109" and not self.signed):
            return full
        if enc in ("fnuz", "p3109"):
            return 1 << self.mag_bits
        return None

    @property
    def inf_code(self) -> int | None:
        """The +Inf code, or None."""
        if self.encoding == "ieee":
            return (1 << self.exp_bits) - 1 << self.man_bits
        if self.encoding == "p3109":
            full = (1 << self.mag_bits) - 1
            return full if self.signed else full - 1
        return None

    @property
    def has_inf(self) -> bool:
        return self.inf_code is not None

    @property
    def has_nan(self) -> bool:
        return self.nan_code is not None

    @property
    def has_neg_zero(self) -> bool:
        return self.signed and self.encoding in ("ieee", "fn", "finite")

    @property
    def has_zero(self) -> bool:
        return self.encoding != "fnu"

    # ------------------------------------------------------------------ values
    def mag_value(self, code: int) -> Fraction:
        """The exact value of a finite magnitude code ``0 <= code <= max_mag_code``."""
        m = self.man_bits
        f, t = code >> m, code & ((1 << m) - 1)
        if self.encoding == "fnu":
            return _pow2(f - self.bias - m) * ((1 << m) + t)
        if f == 0:
            return _pow2(1 - self.bias - m) * t if self.subnormals else Fraction(0)
        return _pow2(f - self.bias - m) * ((1 << m) + t)

    @property
    def max_finite(self) -> float:
        """The largest finite value."""
        return float(self.mag_value(self.max_mag_code))

    @property
    def min_normal(self) -> float:
        """The smallest positive normal value, :math:`2^{e_{min}}`."""
        return math.ldexp(1.0, self._min_exponent)

    @property
    def min_subnormal(self) -> float | None:
        """The smallest positive subnormal, :math:`2^{e_{min} - m}`; None without subnormals."""
        if not self.subnormals or self.man_bits == 0:
            return None
        return math.ldexp(1.0, self._min_exponent - self.man_bits)

    @property
    def min_positive(self) -> float:
        return self.min_subnormal or self.min_normal

    # ------------------------------------------------------------------ names
    @classmethod
    def parse(cls, name: "str | FloatFormat") -> "FloatFormat":
        """A format from a name used by ml_dtypes, PyTorch, ONNX, the OCP specs or P3109.

        Besides the table (:func:`known_float_formats`), ``binary{K}p{P}`` (P3109, signed, with
        ``s``/``u`` suffix for signedness) and ``e{E}m{M}`` with an optional ``fn``/``fnuz``/``fnu``
        suffix (IEEE-style without one) are read.  Note that ml_dtypes' ``float8_e4m3`` is the
        IEEE-style E4M3 (with Inf, max 240), while the OCP short name ``e4m3`` is E4M3FN (max 448).
        """
        if isinstance(name, FloatFormat):
            return name
        if not isinstance(name, str):
            raise TypeError(f"FloatFormat.parse expects a string, got {type(name).__name__}")
        key = re.sub(r"[\s_\-]", "", name.strip().lower())
        key = key.removeprefix("torch.").removeprefix("np.").removeprefix("mldtypes.")
        hit = _NAMES.get(key)
        if hit is not None:
            return cls(*_TABLE[hit], name=hit)
        m = re.fullmatch(r"(?:p3109)?(?:binary|k)(\d+)p(\d+)(s|u)?e?", key)
        if m:
            k, p, signed = int(m.group(1)), int(m.group(2)), m.group(3) != "u"
            if not 1 <= p <= k - (1 if signed else 0) or k < 2:
                raise ValueError(f"P3109 name {name!r}: precision P must be in 1..{k - signed} for K={k}")
            return cls(k - p if signed else k - p + 1, p - 1, None, signed, "p3109", name=name)
        m = re.fullmatch(r"(?:float(\d+))?e(\d+)m(\d+)(fn|fnuz|fnu)?", key)
        if m:
            e, mb, suffix = int(m.group(2)), int(m.group(3)), m.group(4) or "ieee"
            fmt = cls(e, mb, None, suffix != "fnu", suffix, name=name)
            if m.group(1) and int(m.group(1)) != fmt.bits:
                raise ValueError(f"format name {name!r}: float{m.group(1)} but e{e}m{mb} has {fmt.bits} bits")
            return fmt
        raise ValueError(f"unknown float format {name!r}; known names: {', '.join(_KNOWN)}, "
                         f"and binary{{K}}p{{P}} (P3109), e{{E}}m{{M}}[fn|fnuz|fnu]")

    def __str__(self) -> str:
        if self.name:
            return self.name
        return (f"{'' if self.signed else 'u'}e{self.exp_bits}m{self.man_bits}"
                f"{'' if self.encoding == 'ieee' else self.encoding}"
                f"{'' if self.bias == FloatFormat(self.exp_bits, self.man_bits, None, self.signed, self.encoding).bias else f'b{self.bias}'}"
                f"{'' if self.subnormals or self.encoding == 'fnu' else '_ftz'}")


def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


# name -> (exp_bits, man_bits, bias, signed, encoding)
_TABLE = {
    "float8_e4m3fn": (4, 3, 7, True, "fn"),
    "float8_e5m2": (5, 2, 15, True, "ieee"),
    "float8_e4m3fnuz": (4, 3, 8, True, "fnuz"),
    "float8_e5m2fnuz": (5, 2, 16, True, "fnuz"),
    "float8_e4m3b11fnuz": (4, 3, 11, True, "fnuz"),
    "float8_e4m3": (4, 3, 7, True, "ieee"),
    "float8_e3m4": (3, 4, 3, True, "ieee"),
    "float8_e8m0fnu": (8, 0, 127, False, "fnu"),
    "float6_e2m3fn": (2, 3, 1, True, "finite"),
    "float6_e3m2fn": (3, 2, 3, True, "finite"),
    "float4_e2m1fn": (2, 1, 1, True, "finite"),
    "float16": (5, 10, 15, True, "ieee"),
    "bfloat16": (8, 7, 127, True, "ieee"),
    "tf32": (8, 10, 127, True, "ieee"),
    "float32": (8, 23, 127, True, "ieee"),
}
_ALIASES = {
    "float8_e4m3fn": ("e4m3", "e4m3fn", "fp8e4m3", "float8e4m3fn", "ocp_e4m3"),
    "float8_e5m2": ("e5m2", "fp8e5m2", "ocp_e5m2"),
    "float8_e4m3fnuz": ("e4m3fnuz",),
    "float8_e5m2fnuz": ("e5m2fnuz",),
    "float8_e8m0fnu": ("e8m0", "e8m0fnu", "float8e8m0", "ocp_e8m0"),
    "float6_e2m3fn": ("e2m3", "e2m3fn", "fp6e2m3", "float6e2m3"),
    "float6_e3m2fn": ("e3m2", "e3m2fn", "fp6e3m2", "float6e3m2"),
    "float4_e2m1fn": ("e2m1", "e2m1fn", "fp4", "fp4e2m1", "float4e2m1"),
    "float16": ("half", "fp16", "binary16", "f16"),
    "bfloat16": ("bf16",),
    "tf32": ("tensorfloat32", "fp19"),
    "float32": ("single", "fp32", "binary32", "float", "f32"),
}
_NAMES = {}
for _canon in _TABLE:
    for _n in (_canon,) + _ALIASES.get(_canon, ()):
        _NAMES[re.sub(r"[_\-]", "", _n)] = _canon


_KNOWN = tuple(n for c in _TABLE for n in (c,) + _ALIASES.get(c, ()))


def known_float_formats() -> list[dict]:
    """One row per named format, for a ``fxpsim formats`` listing.

    Returns
    -------
    list of dict
        ``name``, ``aliases``, ``bits``, ``exp_bits``, ``man_bits``, ``bias``, ``encoding``,
        ``max`` (largest finite), ``min_normal``, ``min_subnormal`` (None without subnormals) and
        ``specials`` (a short text: Inf/NaN codes, -0).
    """
    rows = []
    for canon in _TABLE:
        fmt = FloatFormat.parse(canon)
        specials = []
        if fmt.has_inf:
            specials.append(f"Inf=0x{fmt.inf_code:0{(fmt.bits + 3) // 4}X}")
        if fmt.has_nan:
            specials.append(f"NaN=0x{fmt.nan_code:0{(fmt.bits + 3) // 4}X}")
        specials.append("-0" if fmt.has_neg_zero else ("no zero" if not fmt.has_zero else "no -0"))
        rows.append(dict(name=canon, aliases=_ALIASES.get(canon, ()), bits=fmt.bits,
                         exp_bits=fmt.exp_bits, man_bits=fmt.man_bits, bias=fmt.bias,
                         encoding=fmt.encoding, max=fmt.max_finite, min_normal=fmt.min_normal,
                         min_subnormal=fmt.min_subnormal, specials=", ".join(specials)))
    for k, p in ((8, 3), (8, 4)):
        fmt = FloatFormat.parse(f"binary{k}p{p}")
        rows.append(dict(name=f"binary{k}p{p}", aliases=(), bits=fmt.bits, exp_bits=fmt.exp_bits,
                         man_bits=fmt.man_bits, bias=fmt.bias, encoding="p3109", max=fmt.max_finite,
                         min_normal=fmt.min_normal, min_subnormal=fmt.min_subnormal,
                         specials="Inf=0x7F/0xFF, NaN=0x80, no -0"))
    return rows

"""Fixed-point formats and the rounding and overflow modes, with the names other tools use.

A :class:`Format` ``(word, frac, signed)`` describes codes ``c`` (integers of ``word`` bits,
two's complement when signed) whose value is :math:`c \\cdot 2^{-\\mathrm{frac}}`.  Integer bits
include the sign bit, as in SystemC's ``sc_fixed<W, I>`` and HLS's ``ap_fixed<W, I>``:
``int_bits = word - frac``.  :class:`Rounding` and :class:`Overflow` name what a quantizer does
with the bits below the LSB and with values beyond the range; ``.code`` is the number the C
kernels use (``_kernels.pxd``).
"""
from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["Format", "Rounding", "Overflow", "MAX_WORD", "check_modes"]

MAX_WORD = 64
_MAX_FRAC = 100_000


# --------------------------------------------------------------------------- modes
_LOOKUP: dict = {}
_CODES: dict = {}             # member -> its position (the kernels' mode number)


class _Mode(str, enum.Enum):
    """A named mode; ``parse`` accepts the member, its value, or any alias (case-insensitive)."""

    @classmethod
    def parse(cls, value):
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_").replace(" ", "_")
            hit = cls._lookup().get(key)
            if hit is not None:
                return hit
        names = ", ".join(m.value for m in cls)
        raise ValueError(f"unknown {cls.__name__.lower()} mode {value!r}; use one of: {names} "
                         f"(SystemC, MATLAB, HLS and APyTypes names are accepted too, see the README)")

    @classmethod
    def _lookup(cls):
        if cls.__name__ in _LOOKUP:
            return _LOOKUP[cls.__name__]
        table = _LOOKUP[cls.__name__] = {}
        for member in cls:
            table[member.value] = member
            table[member.name.lower()] = member
            for alias in _ALIASES[cls.__name__].get(member.value, ()):
                table[alias.lower()] = member
        return table

    @property
    def code(self) -> int:
        """The mode's number in the C kernels (``RND_*`` / ``OVF_*`` in ``_kernels.pxd``)."""
        try:
            return _CODES[self]
        except KeyError:
            code = _CODES[self] = list(type(self)).index(self)
            return code


class Rounding(_Mode):
    """How the bits below the LSB are discarded (``round`` in the module formula)."""

    HALF_UP = "half_up"                    # ties -> +inf; TF fake-quant's "asymmetric rounding"
    HALF_TOWARD_ZERO = "half_toward_zero"  # ties -> 0
    HALF_DOWN = "half_down"                # ties -> -inf
    HALF_AWAY = "half_away"                # ties away from 0 (C round(), MATLAB Round)
    HALF_EVEN = "half_even"                # ties to even (IEEE default, convergent)
    FLOOR = "floor"                        # truncation toward -inf (drop the bits)
    TOWARD_ZERO = "toward_zero"            # truncation toward 0
    CEIL = "ceil"                          # toward +inf
    STOCHASTIC = "stochastic"              # up with probability = discarded fraction



class Overflow(_Mode):
    """What happens to a value outside the format's range (``fit`` in the module formula)."""

    SATURATE = "saturate"                          # clamp to [min, max]
    SATURATE_ZERO = "saturate_zero"                # out of range -> 0
    SATURATE_SYMMETRIC = "saturate_symmetric"      # clamp to [-max, max]; min code is overflow
    WRAP = "wrap"                                  # two's complement wrap-around
    WRAP_SIGN_MAGNITUDE = "wrap_sign_magnitude"    # SystemC SC_WRAP_SM (signed only)
    ERROR = "error"                                # raise ValueError on any overflow

# Accepted aliases: SystemC (SC_*), HLS (AP_*), APyTypes (RND_*, TRN_*, SAT, WRAP), MATLAB fi.
_ALIASES = {
    "Rounding": {
        "half_up": ("SC_RND", "AP_RND", "RND", "nearest", "round_half_up"),
        "half_toward_zero": ("SC_RND_ZERO", "AP_RND_ZERO", "RND_ZERO"),
        "half_down": ("SC_RND_MIN_INF", "AP_RND_MIN_INF", "RND_MIN_INF", "round_half_down"),
        "half_away": ("SC_RND_INF", "AP_RND_INF", "RND_INF", "round"),
        "half_even": ("SC_RND_CONV", "AP_RND_CONV", "RND_CONV", "convergent", "rint", "banker"),
        "floor": ("SC_TRN", "AP_TRN", "TRN", "truncate", "trunc"),
        "toward_zero": ("SC_TRN_ZERO", "AP_TRN_ZERO", "TRN_ZERO", "fix", "zero"),
        "ceil": ("TRN_INF", "ceiling"),
        "stochastic": ("STOCH_WEIGHTED", "stochastic_rounding"),
    },
    "Overflow": {
        "saturate": ("SC_SAT", "AP_SAT", "SAT", "clip", "clamp"),
        "saturate_zero": ("SC_SAT_ZERO", "AP_SAT_ZERO", "SAT_ZERO"),
        "saturate_symmetric": ("SC_SAT_SYM", "AP_SAT_SYM", "SAT_SYM"),
        "wrap": ("SC_WRAP", "AP_WRAP", "WRAP", "wraparound", "modular"),
        "wrap_sign_magnitude": ("SC_WRAP_SM", "AP_WRAP_SM", "WRAP_SM"),
        "error": ("raise",),
    },
}


# --------------------------------------------------------------------------- formats
_PATTERNS = (
    (re.compile(r"^(u?)q(\d+)\.(\d+)$", re.I), "q"),                         # Q7.8, UQ8.8
    (re.compile(r"^(u?)q(\d+)$", re.I), "q0"),                               # Q15 (= Q0.15)
    (re.compile(r"^(s|u)fix(\d+)(?:_e(n?)(\d+))?$", re.I), "matlab"),       # sfix16_En8, ufix8
    (re.compile(r"^(?:ap|sc)_(u?)fixed<\s*(-?\d+)\s*,\s*(-?\d+)\s*>$", re.I), "hls"),
    (re.compile(r"^(?:ap_)?(u?)int<?\s*(\d+)\s*>?$", re.I), "int"),          # int8, ap_uint<12>
)
_ACCEPTED = ("'Q7.8', 'UQ8.8', 'Q15' (ARM Q: sign + integer . fraction bits), 'sfix16_En8', "
             "'ufix8_En0', 'sfix8_E2' (MATLAB), 'ap_fixed<16,8>', 'ap_ufixed<8,8>', "
             "'sc_fixed<16,8>' (HLS/SystemC: word, integer bits incl. sign), 'int8', 'uint12'")


@dataclass(frozen=True)
class Format:
    """A binary fixed-point format: ``word`` bits, LSB :math:`2^{-\\mathrm{frac}}`.

    Parameters
    ----------
    word : int
        Word length, 1..64 bits (the sign bit included when ``signed``).
    frac : int
        Fraction bits; any integer (negative: the LSB is above 1; larger than ``word``:
        every bit is below the binary point).
    signed : bool
        Two's complement codes in :math:`[-2^{W-1}, 2^{W-1}-1]`, else :math:`[0, 2^W-1]`.
    """

    word: int
    frac: int
    signed: bool = True

    def __post_init__(self):
        for name in ("word", "frac"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"Format.{name} must be an int, got {type(value).__name__} {value!r}")
            object.__setattr__(self, name, int(value))
        if not 1 <= self.word <= MAX_WORD:
            raise ValueError(f"Format.word must be in 1..{MAX_WORD}, got {self.word}")
        if abs(self.frac) > _MAX_FRAC:
            raise ValueError(f"Format.frac must be within ±{_MAX_FRAC}, got {self.frac}")
        if not isinstance(self.signed, (bool, np.bool_)):
            raise TypeError(f"Format.signed must be a bool, got {self.signed!r}")
        object.__setattr__(self, "signed", bool(self.signed))

    # -- constructors
    @classmethod
    def integer(cls, bits: int, signed: bool = True) -> "Format":
        """An integer format (``frac = 0``), e.g. a 32-bit accumulator."""
        return cls(bits, 0, signed)

    @classmethod
    def parse(cls, text: "str | Format") -> "Format":
        """Read ARM Q, MATLAB, HLS/SystemC or integer notation (see the error text for all forms)."""
        if isinstance(text, Format):
            return text
        if not isinstance(text, str):
            raise TypeError(f"Format.parse expects a string, got {type(text).__name__}")
        s = text.strip()
        for pattern, kind in _PATTERNS:
            m = pattern.match(s)
            if not m:
                continue
            if kind == "q":
                unsigned, ints, fracs = m.group(1) != "", int(m.group(2)), int(m.group(3))
                return cls(ints + fracs + (0 if unsigned else 1), fracs, not unsigned)
            if kind == "q0":
                unsigned, fracs = m.group(1) != "", int(m.group(2))
                return cls(fracs + (0 if unsigned else 1), fracs, not unsigned)
            if kind == "matlab":
                exp = int(m.group(4) or 0)
                return cls(int(m.group(2)), exp if m.group(3) else -exp, m.group(1).lower() == "s")
            if kind == "hls":
                word, ints = int(m.group(2)), int(m.group(3))
                return cls(word, word - ints, m.group(1) == "")
            return cls(int(m.group(2)), 0, m.group(1) == "")
        raise ValueError(f"cannot parse format {text!r}; accepted forms: {_ACCEPTED}")

    @classmethod
    def for_range(cls, lo: float, hi: float, word: int, signed: bool = True) -> "Format":
        """The format of ``word`` bits with the most fraction bits whose range holds [lo, hi].

        Computed exactly on the rationals ``lo`` and ``hi`` (any finite float64, subnormals
        included).  A range of zeros holds in every format: it gets the format that
        the range ``±2^-1000`` would get (``frac = word + 1000``, one less when signed), as before.
        """
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise ValueError(f"for_range needs finite lo <= hi, got [{lo}, {hi}]")
        if not signed and lo < 0:
            raise ValueError(f"an unsigned format cannot hold lo = {lo} < 0")
        probe = cls(word, 0, signed)               # validates word
        limits = []                                # frac <= floor(log2(code / |bound|)) per bound
        for bound, code in ((max(hi, 0.0), probe.max_code), (min(lo, 0.0), probe.min_code)):
            if bound == 0:                         # 0 is in every format; a bound of the other sign
                continue                           # is implied by the one on this side
            if code == 0:
                raise ValueError(f"no {word}-bit {'signed' if signed else 'unsigned'} format holds "
                                 f"[{lo}, {hi}]")
            limits.append(_floor_log2(Fraction(abs(code)) / abs(Fraction(bound))))
        frac = min(limits) if limits else word + 1000 - (1 if signed else 0)
        # |frac| <= 1137 here (codes below 2^64, finite bounds in [2^-1074, 2^1024)): within _MAX_FRAC
        return cls(word, frac, signed)

    # -- properties
    @property
    def int_bits(self) -> int:
        """Integer bits, sign included (``I`` of ``ap_fixed<W, I>``): ``word - frac``."""
        return self.word - self.frac

    @property
    def min_code(self) -> int:
        return -(1 << (self.word - 1)) if self.signed else 0

    @property
    def max_code(self) -> int:
        return (1 << (self.word - 1)) - 1 if self.signed else (1 << self.word) - 1

    @property
    def lsb(self) -> "float | int | Fraction":
        """Value of one code step, :math:`2^{-\\mathrm{frac}}` (see :attr:`max_value` for the type)."""
        return _value(1, self.frac)

    @property
    def min_value(self) -> "float | int | Fraction":
        """Smallest value, ``min_code * lsb`` (see :attr:`max_value` for the type)."""
        return _value(self.min_code, self.frac)

    @property
    def max_value(self) -> "float | int | Fraction":
        """Largest value, ``max_code * lsb``.

        A float64 (the nearest one: exact for codes of up to 53 significant bits) whenever the
        value lies in float64's normal range or is zero; beyond it, where no float64 is close
        (``Format(8, -1018)``: about 2^1024; ``Format(8, 1100)``: below 2^-1022), the exact value
        as a Python ``int`` (``frac <= 0``) or :class:`fractions.Fraction`.
        """
        return _value(self.max_code, self.frac)

    @property
    def storage_dtype(self) -> np.dtype:
        """The narrowest numpy integer dtype holding every code, as :class:`~fxpsim.FixedArray` stores them.

        Signed formats of up to 8, 16, 32 bits: ``int8``, ``int16``, ``int32``, else ``int64``;
        unsigned ones of up to 8, 16, 32 bits: ``uint8``, ``uint16``, ``uint32``; unsigned formats of
        33..63 bits keep ``int64`` (their codes are below 2^63) and 64 bits ``uint64``.
        """
        return _storage_dtype(self.word, self.signed)

    @property
    def _u64(self) -> bool:
        """Codes above 2^63 - 1 exist (unsigned 64-bit): stored as their int64 bit pattern."""
        return not self.signed and self.word == 64

    def __str__(self) -> str:
        exp = f"_En{self.frac}" if self.frac > 0 else (f"_E{-self.frac}" if self.frac < 0 else "")
        return f"{'s' if self.signed else 'u'}fix{self.word}{exp}"


_STORAGE: dict = {}


def _storage_dtype(word: int, signed: bool) -> np.dtype:
    try:
        return _STORAGE[word, signed]
    except KeyError:
        size = next(b for b in (8, 16, 32, 64) if word <= b)
        if size == 64:
            name = "uint64" if not signed and word == 64 else "int64"
        else:
            name = f"{'' if signed else 'u'}int{size}"
        dtype = _STORAGE[word, signed] = np.dtype(name)
        return dtype


def _floor_log2(q: Fraction) -> int:
    """floor(log2(q)) of a positive rational, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if e >= 0:
        return e if q >= (1 << e) else e - 1
    return e if q >= Fraction(1, 1 << -e) else e - 1


_FLOAT_TINY = 2.0 ** -1022          # smallest normal float64


def _value(code: int, frac: int):
    """``code * 2^-frac`` as a float64 where float64 holds it (the nearest float in the normal range,
    exact subnormals, 0), else exactly: a Python int (``frac <= 0``) or a Fraction."""
    if code == 0:
        return 0.0
    try:
        value = math.ldexp(float(code), -frac)
    except OverflowError:                         # |value| >= 2^1024 (frac < -960)
        return code << -frac
    exact = Fraction(code, 1 << frac) if frac > 0 else Fraction(code << -frac)
    if abs(value) >= _FLOAT_TINY or Fraction(value) == exact:
        return value
    return exact                                  # below the normal range and not a float64


def _as_format(fmt) -> Format:
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        return Format.parse(fmt)
    raise TypeError(f"expected a Format or a format string such as 'Q7.8', got {type(fmt).__name__}")


def check_modes(rounding, overflow, fmt: Format, n_bits: int):
    """Parse ``rounding`` and ``overflow`` and check they apply to ``fmt`` (and ``n_bits``)."""
    r, o = Rounding.parse(rounding), Overflow.parse(overflow)
    if o is Overflow.WRAP_SIGN_MAGNITUDE and not fmt.signed:
        raise ValueError("overflow='wrap_sign_magnitude' is defined for signed formats only "
                         f"(as SystemC's SC_WRAP_SM), got unsigned {fmt}")
    if not isinstance(n_bits, (int, np.integer)) or not 0 <= n_bits <= fmt.word:
        raise ValueError(f"n_bits must be an int in 0..{fmt.word}, got {n_bits!r}")
    if n_bits and o not in (Overflow.WRAP, Overflow.WRAP_SIGN_MAGNITUDE):
        raise ValueError("n_bits (saturated MSBs) applies to 'wrap' and 'wrap_sign_magnitude' only")
    return r, o

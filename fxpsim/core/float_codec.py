"""Exact conversion between float64 and :class:`FloatFormat` codes, and between two FloatFormats.

:func:`encode` rounds each value once, exactly, on the integer significand of its float64 bit
pattern; :func:`decode` is exact; :func:`convert` (code -> code) is ``encode(decode(c))`` and is
therefore also a single correct rounding (proof in :func:`convert`).

Rounding of a finite nonzero ``x`` to a format with ``m`` mantissa bits and smallest normal
exponent :math:`e_{min}`: write :math:`|x| = M \\cdot 2^{e_x}` (``M`` the 53-bit integer significand),
:math:`L = \\lfloor \\log_2 |x| \\rfloor` and let the quantum be :math:`2^q`,
:math:`q = \\max(L, e_{min}) - m`.  Then :math:`|x| / 2^q = M \\cdot 2^{e_x - q}` is split exactly
into the integer part ``n`` (``M >> s``, :math:`s = q - e_x`) and the discarded bits
``r = M mod 2^s``; the rounding mode decides from ``r`` against :math:`2^{s-1}` whether ``n``
goes up by one.  The magnitude code is :math:`n + k \\cdot 2^m` with ``k`` the binade index
(:math:`q - e_{min} + m`), so a carry out of the mantissa lands in the next binade by itself and a
code above the largest finite code is an overflow: every step is integer arithmetic, there is no
double rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .float_format import FloatFormat
from .formats import Overflow, Rounding

__all__ = ["FloatArray", "encode", "decode", "convert", "FLOAT_ROUNDINGS", "parse_float_rounding"]

#: Rounding modes for floats: every :class:`~fxpsim.core.formats.Rounding` mode plus ``odd``.
FLOAT_ROUNDINGS = tuple(m.value for m in Rounding) + ("odd",)
_ODD_ALIASES = ("odd", "round_to_odd", "to_odd", "rto", "jamming", "von_neumann")
_SUBNORMAL_MODES = {"keep": (False, False), "flush_output": (False, True), "ftz": (False, True),
                    "flush_input": (True, False), "daz": (True, False),
                    "flush_both": (True, True), "ftz_daz": (True, True)}
_MAX_RANDOM_BITS = 62


def parse_float_rounding(rounding) -> str:
    """The name of a rounding mode: a :class:`Rounding` (or alias) value, or ``"odd"``."""
    if isinstance(rounding, str) and rounding.strip().lower().replace("-", "_") in _ODD_ALIASES:
        return "odd"
    try:
        return Rounding.parse(rounding).value
    except ValueError:
        raise ValueError(f"unknown rounding mode {rounding!r}; use one of: "
                         f"{', '.join(FLOAT_ROUNDINGS)}") from None


def _parse_overflow(overflow, fmt: FloatFormat) -> str:
    if isinstance(overflow, str) and overflow.strip().lower() in ("inf", "infinity"):
        mode = "inf"
    elif isinstance(overflow, str) and overflow.strip().lower() == "nan":
        mode = "nan"
    else:
        try:
            parsed = Overflow.parse(overflow)
        except ValueError:
            parsed = None
        if parsed is not Overflow.SATURATE:
            raise ValueError(f"overflow must be 'saturate', 'inf' or 'nan' for float formats, "
                             f"got {overflow!r}")
        mode = "saturate"
    if mode == "inf" and not fmt.has_inf:
        raise ValueError(f"overflow='inf' is impossible: {fmt} has no infinity "
                         f"(use 'saturate'{' or nan' if fmt.has_nan else ''})")
    if mode == "nan" and not fmt.has_nan:
        raise ValueError(f"overflow='nan' is impossible: {fmt} has no NaN (use 'saturate')")
    return mode


def _as_float_format(fmt) -> FloatFormat:
    if isinstance(fmt, FloatFormat):
        return fmt
    if isinstance(fmt, str):
        return FloatFormat.parse(fmt)
    raise TypeError(f"fmt must be a FloatFormat or a format name such as 'float8_e4m3fn', "
                    f"got {type(fmt).__name__}")


@dataclass(frozen=True)
class FloatArray:
    """Codes of a :class:`FloatFormat` and the counts of the conversion that made them.

    Attributes
    ----------
    bits : ndarray of uint8 / uint16 / uint32
        The codes (``format.dtype``), shaped as the input.
    format : FloatFormat
    overflows : int
        Values beyond the largest finite value (after rounding), infinities that did not become an
        infinity, and values the format cannot hold at all (negative values in an unsigned format,
        zero in ``fnu``).
    underflows : int
        Nonzero finite inputs whose result is zero, or was a subnormal flushed to zero, or (``fnu``)
        lay below the smallest value and became it.
    ties : int
        Inputs exactly halfway between two neighbouring codes.
    nans : int
        NaN inputs.
    """

    bits: np.ndarray
    format: FloatFormat
    overflows: int = 0
    underflows: int = 0
    ties: int = 0
    nans: int = 0

    def to_float(self) -> np.ndarray:
        """The exact float64 values (:func:`decode`)."""
        return decode(self.bits, self.format)

    @property
    def shape(self):
        return self.bits.shape

    def __repr__(self) -> str:
        return (f"FloatArray({self.bits!r}, format={self.format}, overflows={self.overflows}, "
                f"underflows={self.underflows}, ties={self.ties}, nans={self.nans})")


# --------------------------------------------------------------------------- decode
def decode(codes, fmt) -> np.ndarray:
    """Exact float64 values of the codes ``codes`` of ``fmt``.

    Every value is a float64: it is :math:`c \\cdot 2^{q}` with an integer :math:`c < 2^{32}` and
    :math:`-1074 \\le q`, :math:`|v| < 2^{1024}` (checked by :class:`FloatFormat`), so
    ``np.ldexp`` computes it without rounding.  NaN codes decode to NaN (sign kept where the
    format has signed NaNs), infinities to ±inf.  A code of ``bits`` or more bits raises
    ``ValueError``.
    """
    fmt = _as_float_format(fmt)
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"decode: codes must be integers, got dtype {arr.dtype}")
    c = arr.astype(np.int64)
    if c.size and (c.min() < 0 or c.max() >> fmt.bits):
        raise ValueError(f"decode: codes must be in 0..{(1 << fmt.bits) - 1} for {fmt}")
    m = fmt.man_bits
    neg = (c & fmt.sign_bit) != 0 if fmt.signed else np.zeros(c.shape, bool)
    mag = c & ((1 << fmt.mag_bits) - 1)
    f, t = mag >> m, mag & ((1 << m) - 1)
    if fmt.encoding == "fnu":
        sig, ex = (1 << m) + t, f - fmt.bias - m
    else:
        normal = f > 0
        sig = np.where(normal, (1 << m) + t, t if fmt.subnormals else 0)
        ex = np.where(normal, f - fmt.bias - m, 1 - fmt.bias - m)
    val = np.ldexp(sig.astype(np.float64), ex.astype(np.int32))
    val = np.where(neg, -val, val)
    if fmt.has_inf:
        inf_mag = fmt.inf_code
        val = np.where(mag == inf_mag, np.where(neg, -np.inf, np.inf), val)
    enc = fmt.encoding
    if enc == "ieee":
        isnan = (f == (1 << fmt.exp_bits) - 1) & (t != 0)
    elif enc in ("fn", "fnu") or (enc == "p3109" and not fmt.signed):
        isnan = mag == (1 << fmt.mag_bits) - 1
    elif enc in ("fnuz", "p3109"):
        isnan = c == fmt.sign_bit
    else:
        isnan = None
    if isnan is not None:
        val = np.where(isnan, np.where(neg & (enc in ("ieee", "fn")), -np.nan, np.nan), val)
    return val.reshape(arr.shape)


# --------------------------------------------------------------------------- encode
def _float64_input(x, where: str):
    """(float64 array, the smallest normal of the input dtype) -- conversion to float64 is exact."""
    arr = np.asarray(x)
    if arr.dtype.kind == "f" and arr.dtype.itemsize <= 8:
        return np.array(arr, dtype=np.float64, copy=None), float(np.finfo(arr.dtype).smallest_normal)
    if arr.dtype.kind in "iu" or arr.dtype.kind == "b" and False:
        big = np.abs(arr.astype(np.float64)) > 2.0 ** 53
        if big.any():
            raise TypeError(f"{where}: integer input beyond 2^53 would be rounded on its way to float64")
        return arr.astype(np.float64), 2.0 ** -1022
    raise TypeError(f"{where}: x must be real floats (float16/32/64) or integers, got dtype {arr.dtype}")


def _check_args(fmt, rounding, overflow, subnormals, nan, seed, random_bits):
    fmt = _as_float_format(fmt)
    rnd = parse_float_rounding(rounding)
    ovf = _parse_overflow(overflow, fmt)
    if not isinstance(subnormals, str) or subnormals.strip().lower() not in _SUBNORMAL_MODES:
        raise ValueError(f"subnormals must be one of {', '.join(_SUBNORMAL_MODES)}, got {subnormals!r}")
    daz, ftz = _SUBNORMAL_MODES[subnormals.strip().lower()]
    if nan not in ("propagate", "error"):
        raise ValueError(f"nan must be 'propagate' or 'error', got {nan!r}")
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))
                             or seed < 0):
        raise TypeError(f"seed must be None or a non-negative int, got {seed!r}")
    if random_bits is not None and (isinstance(random_bits, (bool, np.bool_))
                                    or not isinstance(random_bits, (int, np.integer))
                                    or not 1 <= random_bits <= _MAX_RANDOM_BITS):
        raise ValueError(f"random_bits must be None or an int in 1..{_MAX_RANDOM_BITS}, got {random_bits!r}")
    if random_bits is not None and rnd != "stochastic":
        raise ValueError("random_bits applies to rounding='stochastic' only")
    return fmt, rnd, ovf, daz, ftz


def random_stream(seed, n: int, random_bits: int) -> np.ndarray:
    """The random integers stochastic rounding uses: ``n`` uniform draws in ``[0, 2^random_bits)``
    from ``np.random.default_rng(seed)`` (PCG64), one per element in C order."""
    return np.random.default_rng(seed).integers(0, 1 << random_bits, size=n, dtype=np.uint64)


def encode(x, fmt, rounding="half_even", overflow="saturate", subnormals="keep", nan="propagate",
           seed=None, random_bits=None) -> FloatArray:
    """Round real values to codes of ``fmt`` in one correctly rounded step.

    Parameters
    ----------
    x : array_like of float64, float32, float16 (converted to float64 exactly) or integers below 2^53.
    fmt : FloatFormat or str
    rounding : str
        ``half_even`` (IEEE default), ``half_away``, ``half_up``, ``half_down``,
        ``half_toward_zero``, ``toward_zero``, ``floor``, ``ceil``, ``odd`` (round to odd: truncate,
        then set the LSB when inexact) or ``stochastic``; the aliases of
        :class:`~fxpsim.core.formats.Rounding` are accepted.
    overflow : {"saturate", "inf", "nan"}
        What a value beyond the largest finite value becomes: the largest finite value, ±Inf or
        NaN (the last two only where the format has them, else ``ValueError``).  As in IEEE 754,
        a finite value rounded toward zero (``toward_zero``, ``odd``, ``floor`` for positive and
        ``ceil`` for negative values) never overflows to Inf/NaN, it gives the largest finite
        value; ±inf inputs give the largest finite value under ``saturate``.
    subnormals : {"keep", "flush_output" ("ftz"), "flush_input" ("daz"), "flush_both"}
        ``flush_input`` reads inputs below the input dtype's smallest normal as zero;
        ``flush_output`` turns a subnormal result (after rounding) into a zero of the same sign.
        A format with ``subnormals=False`` always flushes its output.
    nan : {"propagate", "error"}
        NaN becomes the format's NaN (sign kept where NaNs are signed); ``error`` -- and any NaN
        for a format without NaN -- raises ``ValueError``.
    seed : int, optional
        Stochastic rounding draws :func:`random_stream` ``(seed, x.size, random_bits)``: same seed,
        same bits.
    random_bits : int, optional
        Stochastic rounding with ``R`` random bits: ``n`` goes up iff
        :math:`\\lfloor r \\cdot 2^{R-s} \\rfloor + u \\ge 2^R` for the uniform draw ``u``, i.e. with
        probability :math:`\\lfloor r \\cdot 2^{R-s} \\rfloor / 2^R` (exactly the discarded
        fraction when it has at most ``R`` bits).  Default 62.

    Returns
    -------
    FloatArray
    """
    fmt, rnd, ovf, daz, ftz = _check_args(fmt, rounding, overflow, subnormals, nan, seed, random_bits)
    xs, tiny_in = _float64_input(x, "encode")
    shape = xs.shape
    flat = xs.reshape(-1)
    rand = None
    if rnd == "stochastic":
        nbits = _MAX_RANDOM_BITS if random_bits is None else int(random_bits)
        rand = (random_stream(seed, flat.size, nbits), nbits)
    res = _encode_flat(flat, fmt, rnd, ovf, daz, ftz, tiny_in, rand)
    codes, n_ovf, n_unf, n_tie, nan_mask = res
    n_nan = int(nan_mask.sum())
    if n_nan and (nan == "error" or not fmt.has_nan):
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(nan_mask)), shape))
        why = "nan='error'" if nan == "error" else f"{fmt} has no NaN"
        raise ValueError(f"encode: {n_nan} NaN value(s), first at index {first}, and {why}")
    return FloatArray(codes.astype(fmt.dtype).reshape(shape), fmt, n_ovf, n_unf, n_tie, n_nan)


def _split(x: np.ndarray, daz: bool = False, tiny_in: float = 0.0):
    """Classify float64 values and split the finite nonzero ones exactly: ``|x| = M * 2^(L - 52)``.

    Returns (neg, isnan, isinf, zero, fin, M, L): ``M`` the 53-bit integer significand (int64) and
    ``L = floor(log2 |x|)``; for non-finite and zero entries ``M = 2^52, L = 0`` (harmless values).
    """
    neg = (x.view(np.uint64) >> np.uint64(63)).astype(bool)
    isnan, isinf = np.isnan(x), np.isinf(x)
    ax = np.abs(x)
    zero = ax == 0
    if daz:
        zero |= ax < tiny_in
    fin = ~(isnan | isinf | zero)
    mant, ex = np.frexp(np.where(fin, ax, 1.0))        # ax = mant * 2^ex, 0.5 <= mant < 1 (exact)
    return neg, isnan, isinf, zero, fin, np.ldexp(mant, 53).astype(np.int64), ex.astype(np.int64) - 1


def _round_shifted(M, s, neg, base, rnd: str, rand):
    """``base + round(M / 2^s)`` on exact integers, the parity (ties to even, odd) taken of
    ``base + trunc``; ``s <= 0`` is an exact left shift.  Returns (result, tie, inexact)."""
    sr = np.clip(s, 0, 62)
    sl = np.clip(-s, 0, 62)
    trunc = np.where(s > 0, M >> sr, M << sl)
    rem = np.where(s > 0, M & ((np.int64(1) << sr) - 1), 0)
    half = (np.int64(1) << sr) >> 1
    tie = (rem == half) & (half != 0)
    ct = base + trunc
    gt, nz = rem > half, rem != 0
    if rnd == "half_even":
        inc = gt | (tie & ((ct & 1) == 1))             # even / odd: of the code (m = 0: the exponent)
    elif rnd == "half_away":
        inc = gt | tie
    elif rnd == "half_up":
        inc = gt | (tie & ~neg)
    elif rnd == "half_down":
        inc = gt | (tie & neg)
    elif rnd == "half_toward_zero":
        inc = gt
    elif rnd == "toward_zero" or rnd == "odd":
        inc = np.zeros_like(nz)
    elif rnd == "floor":
        inc = nz & neg
    elif rnd == "ceil":
        inc = nz & ~neg
    else:                                                # stochastic: d = floor(rem * 2^(R-s))
        u, R = rand
        d = np.where(s >= R, rem >> np.clip(s - R, 0, 63), rem << np.clip(R - s, 0, 62))
        inc = (d.astype(np.uint64) + u) >= np.uint64(1 << R)
    out = ct + inc
    if rnd == "odd":
        out = out | nz.astype(np.int64)
    return out, tie, nz


def _encode_flat(x: np.ndarray, fmt: FloatFormat, rnd: str, ovf: str, daz: bool, ftz: bool,
                 tiny_in: float, rand, scale_exp=None):
    """The vectorised rounding of the module docstring on a 1-d float64 array (int64 codes).

    ``scale_exp`` (int64 per element, or None): encode :math:`x \cdot 2^{-\mathrm{scale\_exp}}`
    exactly (the block formats' shared scale), without forming the product in float64.
    """
    m, emin = fmt.man_bits, fmt._min_exponent
    neg, isnan, isinf, zero, fin, M, L = _split(x, daz, tiny_in)
    if scale_exp is not None:
        L = L - scale_exp
    ex2 = L - 52                                        # |x| = M * 2^ex2
    q = np.maximum(L, emin) - m                         # quantum exponent
    s = q - ex2                                         # right shift (> 0 for m < 52)
    k = q - (emin - m)                                  # binade index: code = n + k * 2^m (- 2^m for fnu)
    base = (k << m) - ((1 << m) if fmt.encoding == "fnu" else 0)
    code, tie, nz = _round_shifted(M, s, neg, base, rnd, rand)
    maxc = fmt.max_mag_code
    over = fin & (code > maxc)
    if fmt.encoding == "fnu":
        under = fin & (code < 0)
        code = np.where(under, 0, code)
    else:
        sub = fin & (code > 0) & (code < (1 << m))
        under = fin & (code == 0)
        if ftz or not fmt.subnormals:
            under |= sub
            code = np.where(sub, 0, code)
    # overflow: the largest finite value, or Inf / NaN -- not for finite values rounded toward zero
    if rnd in ("toward_zero", "odd"):
        down = np.ones_like(neg)
    elif rnd == "floor":
        down = ~neg
    elif rnd == "ceil":
        down = neg
    else:
        down = np.zeros_like(neg)
    to_nan = isnan.copy()
    if ovf == "inf":
        code = np.where(over & ~down, fmt.inf_code, code)
    elif ovf == "nan":
        to_nan |= (over & ~down) | isinf
    code = np.where(over, np.where(down | (ovf == "saturate"), maxc, code), code)
    code = np.where(isinf, fmt.inf_code if ovf == "inf" else maxc, code)
    code = np.where(zero, 0, code)
    n_ovf = over | (isinf & (ovf != "inf"))
    if fmt.signed:
        code = code | np.where(neg & ((code != 0) | fmt.has_neg_zero), fmt.sign_bit, 0)
    else:                                               # negative values (and fnu's zero) do not exist
        bad = neg & ((fin & (code > 0)) | isinf)
        if fmt.encoding == "fnu":
            bad = (neg & ~isnan) | zero
            under &= ~bad
        n_ovf = (n_ovf & ~neg) | bad
        if fmt.has_nan and (ovf != "saturate" or not fmt.has_zero):
            to_nan |= bad
        code = np.where(bad, 0, code)
    if fmt.has_nan:
        signed_nan = fmt.signed and fmt.encoding in ("ieee", "fn")
        nan_c = np.where(neg & signed_nan, fmt.sign_bit, 0) | fmt.nan_code
        code = np.where(to_nan, nan_c, code)
    n_tie = int((fin & tie).sum())
    return code, int(n_ovf.sum()), int(under.sum()), n_tie, isnan


def convert(codes, src, dst, rounding="half_even", overflow="saturate", subnormals="keep",
            nan="propagate", seed=None, random_bits=None) -> FloatArray:
    """Codes of ``src`` to codes of ``dst`` in one correctly rounded step.

    Proof that ``encode(decode(c))`` rounds once: :func:`decode` is exact -- every code of a
    :class:`FloatFormat` is a float64 (``c * 2^q`` with ``c < 2^32``, ``q >= -1074`` and value below
    2^1024, checked at construction) -- so :func:`encode` receives the exact source value, and
    rounds it once, on integers.  ``flush_input`` flushes the source's subnormals (below ``src``'s
    smallest normal) before rounding.
    """
    src = _as_float_format(src)
    vals = decode(codes, src)
    fmt, rnd, ovf, daz, ftz = _check_args(dst, rounding, overflow, subnormals, nan, seed, random_bits)
    flat = vals.reshape(-1)
    rand = None
    if rnd == "stochastic":
        nbits = _MAX_RANDOM_BITS if random_bits is None else int(random_bits)
        rand = (random_stream(seed, flat.size, nbits), nbits)
    code, n_ovf, n_unf, n_tie, nan_mask = _encode_flat(flat, fmt, rnd, ovf, daz, ftz, src.min_normal, rand)
    n_nan = int(nan_mask.sum())
    if n_nan and (nan == "error" or not fmt.has_nan):
        raise ValueError(f"convert: {n_nan} NaN code(s) and "
                         f"{'nan=' + repr(nan) if nan == 'error' else str(fmt) + ' has no NaN'}")
    return FloatArray(code.astype(fmt.dtype).reshape(vals.shape), fmt, n_ovf, n_unf, n_tie, n_nan)

"""Bit-exact fixed-point arrays: quantization, requantization, exact arithmetic, overflow logging.

Formats and modes live in :mod:`fxpsim.formats` (re-exported here).  Quantization (float -> code,
or code -> code of another format) is

.. math::  c = \\mathrm{fit}\\big(\\mathrm{round}(x \\cdot 2^{\\mathrm{frac}})\\big)

with ``round`` one of :class:`Rounding` and ``fit`` one of :class:`Overflow`, computed exactly
(no double rounding) by the Cython kernels in ``fxpsim._core``.

Overflow logging is in :mod:`fxpsim.core.overflow_logging`, the input checks in
:mod:`fxpsim.core.fixed_checks` and the formats of exact results in :mod:`fxpsim.core.format_growth`;
their names are importable from here too.
"""
from __future__ import annotations

import math
import operator

import numpy as np

try:
    from . import _core
except ImportError as _exc:   # an uncompiled source tree (e.g. Python started in a clone after `pip install .`)
    raise ImportError(f"fxpsim's compiled extension fxpsim/core/_core is missing in {__file__.rsplit('/', 2)[0]}: "
                      f"run `pip install -e .` in the repository's root (or `python setup.py build_ext "
                      f"--inplace`)") from _exc
from .fixed_checks import _check_seed, _checked_codes, _float_input, _raise_if_error, _seed_word
from .format_growth import _align_shifts, _grown_format, _int_bits_as, _integer_array_format, result_format
from . import float_codec
from .float_format import FloatFormat
from .formats import MAX_WORD, Format, Overflow, Rounding, _as_format, check_modes
from .overflow_logging import OverflowLog, _logging, _range, overflow_log, record_overflow

__all__ = [
    "Format", "Rounding", "Overflow", "FixedArray", "from_float", "from_raw", "quantize",
    "concatenate", "overflow_log", "OverflowLog", "record_overflow", "MAX_WORD",
]

_MAX_EXACT_WORD = 127        # exact intermediates live on 128-bit signed integers in the kernels


# --------------------------------------------------------------------------- arrays
class FixedArray:
    """An N-d array of fixed-point numbers: integer codes plus one :class:`Format`.

    Arithmetic is exact and grows the format as hardware would: ``a + b`` / ``a - b`` get
    ``max(frac)`` fraction bits and one more integer bit than the wider operand, ``a * b`` gets
    ``word_a + word_b`` bits and ``frac_a + frac_b`` fraction bits.  Use :meth:`cast` to bring
    a result back to a hardware register with a rounding and an overflow mode.

    The codes are stored in ``fmt.storage_dtype``, the narrowest integer dtype that holds every code
    of the format (int8 for Q0.7, int16 for Q7.8, ...), and the kernels read and write them there;
    exact results get the storage of their grown format.

    Attributes
    ----------
    codes : ndarray
        Read-only codes as stored, in ``fmt.storage_dtype``.
    raw : ndarray
        Read-only int64 codes (uint64 for unsigned 64-bit formats): ``codes`` widened (once, then
        cached), so that arithmetic on them in user code cannot overflow a narrow dtype.
    fmt : Format
    overflows : int
        How many elements overflowed in the operation that produced this array.
    overflow_mask : ndarray of bool or None
        Per-element overflow flags, when requested (``mask=True``).
    """

    __array_priority__ = 1000
    #: numpy ufuncs do not apply (they would compute on float64 values): ``ndarray + FixedArray`` makes
    #: numpy return NotImplemented, so Python calls ``FixedArray.__radd__``, which follows the rules of
    #: ``FixedArray + ndarray`` (see :meth:`_binary`).
    __array_ufunc__ = None

    def __init__(self, raw, fmt, *, overflows: int = 0, overflow_mask=None, _trusted=False):
        """``raw``: integer codes that fit ``fmt`` (checked, copied); ``_trusted``: codes known to fit
        (the kernels' results, in any integer dtype: stored as they are when already in
        ``fmt.storage_dtype``, else converted exactly)."""
        if not (_trusted and fmt.__class__ is Format and raw.__class__ is np.ndarray):
            fmt = _as_format(fmt)
            raw = _checked_codes(raw, fmt, "FixedArray") if not _trusted else np.asarray(raw)
        dtype = fmt.storage_dtype
        if raw.dtype != dtype:               # trusted codes of another dtype (int64 bit patterns of ufix64 too)
            raw = raw.view(dtype) if raw.dtype.itemsize == 8 == dtype.itemsize else raw.astype(dtype)
        if raw.flags.writeable:
            raw = raw.view()
            raw.flags.writeable = False
        self._raw, self._wide, self.fmt = raw, None, fmt
        self.overflows = int(overflows)
        self.overflow_mask = overflow_mask

    # -- basic protocol
    @property
    def codes(self) -> np.ndarray:
        """The codes as stored: read-only, dtype ``fmt.storage_dtype`` (the narrowest that holds them)."""
        return self._raw

    @property
    def raw(self) -> np.ndarray:
        """The codes as read-only int64 (uint64 for unsigned 64-bit formats), widened once and cached."""
        wide = self._wide
        if wide is None:
            wide = self._raw
            if wide.dtype.itemsize != 8:
                wide = wide.astype(np.int64)
                wide.flags.writeable = False
            self._wide = wide
        return wide

    @property
    def _codes(self) -> np.ndarray:
        """Contiguous 1-D codes, as stored, for the kernels."""
        raw = self._raw
        return raw.reshape(-1) if raw.flags.c_contiguous else np.ascontiguousarray(raw).reshape(-1)

    shape = property(lambda self: self._raw.shape)
    ndim = property(lambda self: self._raw.ndim)
    size = property(lambda self: self._raw.size)

    def __len__(self):
        return len(self._raw)

    def __bool__(self):
        """Truth value as numpy's: the element's for a single element, else ambiguous (ValueError)."""
        if self._raw.size != 1:
            raise ValueError(f"the truth value of a FixedArray with {self._raw.size} elements is ambiguous; "
                             f"use (x != 0).any() or (x != 0).all()")
        return bool(self._raw.reshape(-1)[0] != 0)

    def to_float(self) -> np.ndarray:
        """Values as float64, :math:`c \\cdot 2^{-\\mathrm{frac}}` (exact while |c| < 2^53)."""
        out = np.empty(self.size, dtype=np.float64)
        _core.to_float(self._codes, out, self.fmt._u64, self.fmt.frac)
        return out.reshape(self.shape)

    def __array__(self, dtype=None, copy=None):
        values = self.to_float()
        return values if dtype is None else values.astype(dtype)

    def __repr__(self):
        return f"FixedArray({np.array2string(self.to_float(), threshold=20)}, fmt={self.fmt})"

    def _new(self, raw, fmt=None):
        return FixedArray(raw, fmt or self.fmt, _trusted=True)

    # -- shape manipulation (codes only; the format never changes)
    def __getitem__(self, index):
        return self._new(np.asarray(self._raw[index]))

    def reshape(self, *shape):
        return self._new(self._raw.reshape(*shape))

    def transpose(self, *axes):
        return self._new(self._raw.transpose(*axes))

    @property
    def T(self):
        return self.transpose()

    def ravel(self):
        return self._new(self._raw.ravel())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- conversions
    def cast(self, fmt, rounding="half_up", overflow="saturate", *, seed=None, n_bits=0,
             mask=False) -> "FixedArray":
        """Requantize to ``fmt``: :math:`\\mathrm{fit}(\\mathrm{round}(c \\cdot 2^{f_{new}-f}))`."""
        fmt = _as_format(fmt)
        r, o = check_modes(rounding, overflow, fmt, n_bits)
        _check_seed(seed)
        codes = self._codes
        out = np.empty(codes.size, dtype=fmt.storage_dtype)
        flags = np.empty(codes.size if mask else 0, dtype=np.uint8)
        count = _core.cast(codes, out, flags, self.fmt._u64, self.fmt.frac - fmt.frac, fmt.word,
                           fmt.signed, r.code, o.code, int(n_bits),
                           _seed_word(seed) if r is Rounding.STOCHASTIC else 0)
        if _logging():
            values = self.to_float()
            record_overflow("cast", count, *(_range(values)))
        _raise_if_error(o, count, "cast", fmt)
        return FixedArray(out.reshape(self.shape), fmt, overflows=count, _trusted=True,
                          overflow_mask=flags.astype(bool).reshape(self.shape) if mask else None)

    # -- exact arithmetic
    def _binary(self, other, op: str, reflected=False):
        """``self op other`` exactly.  ``other``: a FixedArray, a Python/numpy integer or float (its
        exact value), or an integer ndarray (exact integers: ``Format.integer`` of the fewest bits
        that hold its values, unsigned for unsigned dtypes).  Float ndarrays raise TypeError: their
        values need a format, ``from_float(x, fmt)``."""
        if other.__class__ is not FixedArray:
            other = _as_fixed(other, f"ndarray {_OP_SYMBOL[op]} FixedArray" if reflected
                              else f"FixedArray {_OP_SYMBOL[op]} ndarray")
        if other is NotImplemented:
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        return _exact_binary(op, a, b)

    __add__ = lambda self, o: self._binary(o, "add")
    __radd__ = lambda self, o: self._binary(o, "add", True)
    __sub__ = lambda self, o: self._binary(o, "sub")
    __rsub__ = lambda self, o: self._binary(o, "sub", True)
    __mul__ = lambda self, o: self._binary(o, "mul")
    __rmul__ = lambda self, o: self._binary(o, "mul", True)

    def __neg__(self):
        if self.fmt.word >= MAX_WORD:
            raise ValueError(f"-x of {self.fmt} needs 65 bits; cast to a narrower format first")
        return _exact_binary("sub", _zero_like(self), self, Format(self.fmt.word + 1, self.fmt.frac, True))

    def __pos__(self):
        return self

    def __abs__(self):
        if not self.fmt.signed:
            return self
        neg = -self
        return self._new(np.where(self._raw < 0, neg._raw, self._raw), neg.fmt)

    def _compare(self, other, test):
        other = _as_fixed(other, "FixedArray comparison")
        if other is NotImplemented:
            return NotImplemented
        a, b = _broadcast(self, other)
        sa, sb = _align_shifts(a.fmt, b.fmt)
        if max(a.fmt.word + sa, b.fmt.word + sb) > _MAX_EXACT_WORD:   # rare: exact Python ints
            ia = a.raw.astype(object) * (1 << sa)
            ib = b.raw.astype(object) * (1 << sb)
            return test(np.asarray(ia - ib > 0, dtype=np.int64) - np.asarray(ia - ib < 0, dtype=np.int64), 0)
        out = np.empty(a.size, dtype=np.int64)
        _core.binary(3, a._codes, b._codes, out, a.fmt._u64, b.fmt._u64, sa, sb, 0, 64, True, 0, 0, 0, 0)
        return test(out.reshape(a.shape), 0)

    __lt__ = lambda self, o: self._compare(o, operator.lt)
    __le__ = lambda self, o: self._compare(o, operator.le)
    __gt__ = lambda self, o: self._compare(o, operator.gt)
    __ge__ = lambda self, o: self._compare(o, operator.ge)
    __eq__ = lambda self, o: self._compare(o, operator.eq)
    __ne__ = lambda self, o: self._compare(o, operator.ne)
    __hash__ = None

    def sum(self, axis=None) -> "FixedArray":
        """Exact sum; the word grows by :math:`\\lceil \\log_2 N \\rceil` bits."""
        if axis is not None:
            try:
                axis = np.lib.array_utils.normalize_axis_tuple(axis, self.ndim, "axis")
            except np.exceptions.AxisError:
                raise ValueError(f"FixedArray.sum: axis {axis!r} is out of range for an array with "
                                 f"{self.ndim} dimension(s) (shape {self.shape})") from None
            except TypeError:
                raise TypeError(f"FixedArray.sum: axis must be None, an int or a tuple of ints, "
                                f"got {axis!r}") from None
        n = self.size if axis is None else math.prod(self.shape[a] for a in axis)
        grow = max(0, math.ceil(math.log2(n))) if n > 0 else 0
        word = self.fmt.word + grow
        if word > MAX_WORD:
            raise ValueError(f"an exact sum of {n} values of {self.fmt} needs {word} bits (> 64); "
                             f"cast to a narrower format first, or use fxpsim.sum with acc=")
        fmt = Format(word, self.fmt.frac, self.fmt.signed)
        dtype = np.uint64 if fmt._u64 else np.int64
        return self._new(np.asarray(self._raw.sum(axis=axis, dtype=dtype)), fmt)


_OP_SYMBOL = {"add": "+", "sub": "-", "mul": "*"}


def _as_fixed(value, where: str = ""):
    """Turn Python/numpy integers, exactly representable floats and integer ndarrays into FixedArrays.

    Returns NotImplemented for other types; raises TypeError (naming ``where``) for ndarrays that
    are not integer codes, saying how to convert them.
    """
    if isinstance(value, FixedArray):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iu":
            return FixedArray(value, _integer_array_format(value))
        hint = (f"convert real values with fxpsim.from_float(x, fmt) first (fxpsim cannot pick their "
                f"format)" if value.dtype.kind == "f" else "only integer arrays (exact integers) mix "
                f"with FixedArrays")
        raise TypeError(f"{where or 'FixedArray'}: cannot combine a FixedArray with an ndarray of dtype "
                        f"{value.dtype}; {hint}")
    if isinstance(value, (bool, np.bool_)):
        return NotImplemented
    if isinstance(value, (int, np.integer)):
        v = int(value)
        word = max(v.bit_length() + 1, 1)
        if word > MAX_WORD:
            raise ValueError(f"integer constant {v} needs more than 64 bits")
        return FixedArray(np.array(v, dtype=np.int64), Format(word, 0, True), _trusted=True)
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise ValueError(f"cannot use {value} as a fixed-point constant")
        num, den = value.as_integer_ratio()          # exact for every float type (longdouble too)
        x = value
        frac = den.bit_length() - 1
        word = max(num.bit_length() + 1, 1)
        if word > MAX_WORD:
            raise ValueError(f"constant {x} needs {word} bits; convert it with from_float")
        return FixedArray(np.array(num, dtype=np.int64), Format(word, frac, True), _trusted=True)
    return NotImplemented


def _zero_like(a: FixedArray) -> FixedArray:
    return FixedArray(np.zeros((), dtype=np.int64), Format(1, a.fmt.frac, True), _trusted=True)


def _broadcast(a: FixedArray, b: FixedArray):
    try:
        ra, rb = np.broadcast_arrays(a._raw, b._raw)
    except ValueError:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not broadcast") from None
    return FixedArray(ra, a.fmt, _trusted=True), FixedArray(rb, b.fmt, _trusted=True)


def _exact_binary(op: str, a: FixedArray, b: FixedArray, out_fmt: Format | None = None,
                  rounding="half_up", overflow="saturate", seed=None) -> FixedArray:
    word, frac, signed = result_format(op, a.fmt, b.fmt)
    fits = out_fmt is None                # the grown format holds every exact result: no checks
    if out_fmt is None:
        if word > MAX_WORD:
            raise ValueError(f"the exact {op} of {a.fmt} and {b.fmt} needs {word} bits (> 64): "
                             f"cast an operand first, or use fxpsim.fixed.{op}(a, b, fmt, ...) "
                             f"which rounds the exact result into fmt in one step")
        out_fmt, r, o = _grown_format(word, frac, signed), Rounding.HALF_UP, Overflow.SATURATE
    else:
        if word - (1 if signed else 0) > _MAX_EXACT_WORD:
            raise ValueError(f"the exact {op} of {a.fmt} and {b.fmt} needs {word} bits "
                             f"(> {_MAX_EXACT_WORD}); cast an operand first")
        r, o = check_modes(rounding, overflow, out_fmt, 0)
    if a._raw.shape != b._raw.shape:
        a, b = _broadcast(a, b)
    sa, sb = (0, 0) if op == "mul" else _align_shifts(a.fmt, b.fmt)
    out = np.empty(a._raw.size, dtype=out_fmt.storage_dtype)
    count = _core.binary(_OP_CODE[op], a._codes, b._codes, out,
                         a.fmt._u64, b.fmt._u64, sa, sb, frac - out_fmt.frac, out_fmt.word,
                         out_fmt.signed, r.code, o.code, 0,
                         _seed_word(seed) if r is Rounding.STOCHASTIC else 0, word + (not signed), fits)
    if _logging():
        fa, fb = a.to_float(), b.to_float()
        record_overflow(op, count, *_range(fa * fb if op == "mul" else fa + fb if op == "add" else fa - fb))
    _raise_if_error(o, count, op, out_fmt)
    return FixedArray(out.reshape(a._raw.shape), out_fmt, overflows=count, _trusted=True)


_OP_CODE = {"add": 0, "sub": 1, "mul": 2}


def add(a, b, fmt=None, rounding="half_up", overflow="saturate", *, seed=None) -> FixedArray:
    """``a + b`` exactly, then (if ``fmt`` is given) rounded and fitted into ``fmt`` in one pass."""
    return _fused("add", a, b, fmt, rounding, overflow, seed)


def sub(a, b, fmt=None, rounding="half_up", overflow="saturate", *, seed=None) -> FixedArray:
    """``a - b`` exactly, then (if ``fmt`` is given) rounded and fitted into ``fmt`` in one pass."""
    return _fused("sub", a, b, fmt, rounding, overflow, seed)


def mul(a, b, fmt=None, rounding="half_up", overflow="saturate", *, seed=None) -> FixedArray:
    """``a * b`` exactly, then (if ``fmt`` is given) rounded and fitted into ``fmt`` in one pass."""
    return _fused("mul", a, b, fmt, rounding, overflow, seed)


def _fused(op, a, b, fmt, rounding, overflow, seed):
    _check_seed(seed)
    fa, fb = _as_fixed(a, op), _as_fixed(b, op)
    if fa is NotImplemented or fb is NotImplemented:
        raise TypeError(f"{op}: operands must be FixedArrays or exact numbers, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    return _exact_binary(op, fa, fb, None if fmt is None else _as_format(fmt),
                         rounding, overflow, seed)


__all__ += ["add", "sub", "mul", "result_format"]


def concatenate(arrays, axis=0) -> FixedArray:
    """Join FixedArrays along ``axis`` in the smallest format that holds all of them exactly."""
    arrays = [_as_fixed(a) for a in arrays]
    if not arrays or any(a is NotImplemented for a in arrays):
        raise TypeError("concatenate expects a non-empty sequence of FixedArrays")
    signed = any(a.fmt.signed for a in arrays)
    frac = max(a.fmt.frac for a in arrays)
    ints = max(_int_bits_as(a.fmt, signed) for a in arrays)
    if ints + frac > MAX_WORD:
        raise ValueError(f"a common format needs {ints + frac} bits (> 64); cast the inputs first")
    fmt = Format(ints + frac, frac, signed)
    return FixedArray(np.concatenate([a.cast(fmt)._raw for a in arrays], axis=axis), fmt, _trusted=True)


# --------------------------------------------------------------------------- constructors
def _float_format_of(fmt):
    """``fmt`` as a :class:`FloatFormat` when it is one (or names one that no fixed-point notation reads), else None."""
    if isinstance(fmt, FloatFormat):
        return fmt
    if isinstance(fmt, str):
        try:
            _as_format(fmt)
        except (ValueError, TypeError):
            try:
                return FloatFormat.parse(fmt)
            except ValueError:
                pass
            try:
                _as_format(fmt)
            except ValueError as exc:
                raise ValueError(f"{exc}; or a float format name such as 'float8_e4m3fn', 'float8_e5m2', "
                                 "'bfloat16', 'float4_e2m1fn' ('fxpsim formats' lists them)") from None
    return None


def from_float(x, fmt, rounding=None, overflow="saturate", *, seed=None, nan="error",
               n_bits=0, mask=False) -> FixedArray:
    """Quantize real values exactly: :math:`c = \\mathrm{fit}(\\mathrm{round}(x \\cdot 2^{f}))`.

    ``fmt`` may also be a float format (a :class:`~fxpsim.core.float_format.FloatFormat` or a name such as
    ``"float8_e4m3fn"``, ``"bfloat16"``): then the values are rounded once, exactly, into its codes by
    :func:`fxpsim.core.float_codec.encode` (default rounding ``half_even``, IEEE's; ``nan`` ``"error"`` or
    ``"propagate"``) and a :class:`~fxpsim.core.float_codec.FloatArray` with the codes and the counts comes back.

    Parameters
    ----------
    x : array_like of real numbers (float64 is exact; other dtypes are converted to float64).
    fmt : Format or str
    rounding : Rounding or str, default ``"half_up"`` (ties toward +inf) for fixed-point formats, ``"half_even"``
        for float formats
    overflow : Overflow or str, default ``"saturate"``; ``±inf`` overflow like any large value.
    seed : int, optional
        Seed of stochastic rounding (same seed, same result; ``None`` draws a fresh one).
    nan : {"error", "zero"}
        NaN raises ``ValueError`` naming the count and first index, or becomes code 0.
    n_bits : int
        Saturated MSBs for the wrap modes (SystemC ``n_bits``).
    mask : bool
        Also return per-element overflow flags as ``result.overflow_mask``.
    """
    float_fmt = _float_format_of(fmt)
    if float_fmt is not None:
        if n_bits or mask:
            raise ValueError("from_float: n_bits and mask apply to fixed-point formats only, not to "
                             f"the float format {float_fmt.name}")
        if nan not in ("error", "propagate"):
            raise ValueError(f"from_float: nan must be 'error' or 'propagate' for a float format, got {nan!r}")
        return float_codec.encode(x, float_fmt, rounding="half_even" if rounding is None else rounding,
                                  overflow=overflow, nan=nan, seed=seed)
    if rounding is None:
        rounding = "half_up"
    fmt = _as_format(fmt)
    r, o = check_modes(rounding, overflow, fmt, n_bits)
    _check_seed(seed)
    if nan not in ("error", "zero"):
        raise ValueError(f"nan must be 'error' or 'zero', got {nan!r}")
    arr = np.asarray(x)
    if arr.dtype.kind in "iu":              # integers: exact through the code path, never via float64
        src = Format(64, 0, arr.dtype.kind == "i")
        return FixedArray(arr, src).cast(fmt, r, o, seed=seed, n_bits=n_bits, mask=mask)
    values = _float_input(arr, "from_float")
    flat = values.reshape(-1)
    out = np.empty(flat.size, dtype=fmt.storage_dtype)
    flags = np.empty(flat.size if mask else 0, dtype=np.uint8)
    count, n_nan, first_nan = _core.from_float(flat, out, flags, fmt.frac, fmt.word, fmt.signed,
                                               r.code, o.code, int(n_bits),
                                               _seed_word(seed) if r is Rounding.STOCHASTIC else 0)
    if n_nan and nan == "error":
        idx = tuple(int(i) for i in np.unravel_index(first_nan, values.shape))
        raise ValueError(f"from_float: {n_nan} NaN value(s), first at index {idx}; "
                         f"pass nan='zero' to map NaN to 0")
    if _logging():
        record_overflow("from_float", count, *_range(flat))
    _raise_if_error(o, count, "from_float", fmt)
    return FixedArray(out.reshape(values.shape), fmt, overflows=count, _trusted=True,
                      overflow_mask=flags.astype(bool).reshape(values.shape) if mask else None)


def from_raw(raw, fmt) -> FixedArray:
    """Wrap integer codes (copied) as a FixedArray; a code outside ``fmt`` raises ValueError."""
    return FixedArray(raw, fmt)


def quantize(x, fmt, rounding="half_up", overflow="saturate", *, seed=None, nan="error") -> np.ndarray:
    """Fake-quantize to float64: ``from_float(x, fmt, ...).to_float()``."""
    return from_float(x, fmt, rounding, overflow, seed=seed, nan=nan).to_float()

"""Input checks of the fixed-point arrays: real inputs, raw codes, seeds, and the ``overflow='error'`` message.

:func:`_float_input` (real values as float64, refusing extended precision that float64 cannot hold),
:func:`_checked_codes` (integer codes that fit a format), :func:`_check_seed` / :func:`_seed_word`
(the seed of stochastic rounding and the 64-bit word the kernels draw from), and
:func:`_raise_if_error` (the ``ValueError`` of ``overflow='error'``, with the format's limits).
"""
from __future__ import annotations

import numpy as np

from .formats import Format, Overflow


def _float_input(x, where: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind in "USVcMm":
        raise TypeError(f"{where}: expected real numbers, got an array of dtype {arr.dtype}")
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{where}: unsupported dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        _check_float64_exact(arr, where)
    return np.array(arr, dtype=np.float64, order="C", copy=None)   # keeps 0-d shapes


def _check_float64_exact(arr: np.ndarray, where: str) -> None:
    """Extended-precision input (np.longdouble): accepted only where every value is a float64.

    The kernels quantize float64 exactly; going through float64 first would round twice (a value
    just above a tie, 2^-9 + 2^-70, would become the tie itself and round the wrong way).
    """
    as64 = arr.astype(np.float64)
    with np.errstate(invalid="ignore"):
        lost = (as64.astype(arr.dtype) != arr) & ~np.isnan(arr)
    if lost.any():
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(lost)), arr.shape))
        raise TypeError(f"{where}: x has dtype {arr.dtype} (extended precision) and {int(lost.sum())} "
                        f"value(s) that float64 cannot hold exactly (first at index {first}); fxpsim "
                        f"rounds float64 values exactly, and converting them first would round twice. "
                        f"Pass x.astype(np.float64) to accept that rounding, or exact integer codes "
                        f"through from_raw")


def _check_seed(seed) -> None:
    """``seed``: None or a non-negative int (checked before any work, whatever the rounding mode)."""
    if seed is None:
        return
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be None or a non-negative int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be None or a non-negative int, got {seed}")


def _seed_word(seed) -> int:
    _check_seed(seed)
    if seed is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    return int(np.random.SeedSequence(int(seed)).generate_state(1, np.uint64)[0])


def _value_text(value) -> str:
    """A format limit for messages: the float, or ``c*2^e`` when float64 cannot show it."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        shift = (value & -value).bit_length() - 1
        return f"{value >> shift}*2^{shift}"
    return f"{value.numerator}*2^-{value.denominator.bit_length() - 1}"


def _raise_if_error(o: Overflow, count: int, op: str, fmt: Format):
    if o is Overflow.ERROR and count:
        raise ValueError(f"{op}: {count} element(s) overflow {fmt} "
                         f"[{_value_text(fmt.min_value)}, {_value_text(fmt.max_value)}] and overflow='error'")


def _memory_bytes() -> int:
    """Physical memory of this machine (bytes; 2^63 when it cannot be read)."""
    import os
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):   # pragma: no cover - non-POSIX
        return 1 << 63


def _checked_codes(raw, fmt: Format, where: str) -> np.ndarray:
    arr = np.asarray(raw)
    if arr.dtype == object or arr.dtype.kind not in "iub":
        raise TypeError(f"{where}: raw codes must be an integer array, got dtype {arr.dtype}"
                        + ("; use from_float for real values" if arr.dtype.kind == "f" else ""))
    need = arr.size * 8
    if arr.size and need > _memory_bytes():   # e.g. a 2^40-element broadcast view: refused before any pass
        raise ValueError(f"{where}: {arr.size:,} codes (shape {arr.shape}) need {need:,} bytes as int64, more than "
                         f"this machine's {_memory_bytes():,} bytes of memory")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < fmt.min_code or hi > fmt.max_code:
            bad = lo if lo < fmt.min_code else hi
            idx = np.unravel_index(int(np.argmax(arr == bad)), arr.shape)
            raise ValueError(f"{where}: code {bad} at index {tuple(map(int, idx))} does not fit {fmt} "
                             f"(codes {fmt.min_code}..{fmt.max_code})")
    return np.array(arr, dtype=fmt.storage_dtype, copy=True)

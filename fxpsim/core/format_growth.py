"""How exact results grow: the format that holds every exact result of ``a + b``, ``a - b``, ``a * b``.

:func:`result_format` gives ``(word, frac, signed)`` of an exact sum, difference or product (the word may
exceed 64); :func:`_align_shifts` the shifts that bring two operands to a common binary point;
:func:`_int_bits_as` the integer bits of a format read as signed or unsigned; :func:`_integer_array_format`
the fewest bits that hold an integer array; :func:`_grown_format` a cached :class:`Format`.
"""
from __future__ import annotations

import functools

import numpy as np

from .formats import Format

__all__ = ["result_format"]


def _integer_array_format(arr: np.ndarray) -> Format:
    """Format.integer of the fewest bits that hold every value of an integer array."""
    if arr.size == 0:
        return Format(1, 0, arr.dtype.kind == "i")
    lo, hi = int(arr.min()), int(arr.max())
    if arr.dtype.kind == "u":
        return Format(max(hi.bit_length(), 1), 0, False)
    return Format(max(hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1, 0, True)


def _align_shifts(fa: Format, fb: Format):
    frac = max(fa.frac, fb.frac)
    return frac - fa.frac, frac - fb.frac


def _int_bits_as(fmt: Format, signed: bool) -> int:
    return fmt.int_bits + (1 if signed and not fmt.signed else 0)


def result_format(op: str, fa: Format, fb: Format) -> tuple[int, int, bool]:
    """(word, frac, signed) of the exact result of ``a op b`` (word may exceed 64)."""
    if op == "mul":
        return fa.word + fb.word, fa.frac + fb.frac, fa.signed or fb.signed
    signed = fa.signed or fb.signed or op == "sub"
    frac = max(fa.frac, fb.frac)
    ints = max(_int_bits_as(fa, signed), _int_bits_as(fb, signed)) + 1
    return ints + frac, frac, signed


@functools.lru_cache(maxsize=4096)
def _grown_format(word: int, frac: int, signed: bool) -> Format:
    return Format(word, frac, signed)

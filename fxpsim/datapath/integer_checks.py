"""Argument checks of the integer datapath, and the int32 wrap.

Integer arrays and their ranges (:func:`_int_array`, :func:`_check_range`, :func:`_int32_array`),
per-channel parameters and axes (:func:`_per_channel`, :func:`_norm_axis`), integer dtypes and zero
points (:func:`_iinfo`, :func:`_check_zero_point`), and :func:`_wrap_int32`, the two's-complement
wrap of a C ``int32_t`` cast.  Shared by :mod:`fxpsim.datapath.requantize`, the integer layer kernels
and the TFLite kernels.
"""
from __future__ import annotations

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


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

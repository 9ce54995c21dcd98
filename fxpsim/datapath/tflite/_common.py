"""Argument checks and small numeric helpers shared by the TFLite kernels."""
from __future__ import annotations


import numpy as np

from ..requantize import (
    INT32_MIN, _check_zero_point, _float32, _iinfo,
)


_KERNELS = ("reference", "builtin", "xnnpack")


# --------------------------------------------------------------------------- validation
def _dtype(dtype, allowed, name="dtype") -> np.dtype:
    info = _iinfo(dtype, name)
    dt = np.dtype(info.dtype)
    if dt not in tuple(np.dtype(a) for a in allowed):
        raise TypeError(f"{name} must be one of {', '.join(np.dtype(a).name for a in allowed)}; got {dt.name}")
    return dt


def _codes(x, dtype: np.dtype, name: str = "x") -> np.ndarray:
    """``x`` (an array of ``dtype`` codes, exactly that dtype) as int64."""
    arr = np.asarray(x)
    if arr.dtype != dtype:
        raise TypeError(f"{name} must be an array of {dtype.name} codes (as the TFLite tensor), got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _zero_point(zp, dtype: np.dtype, name: str) -> int:
    return _check_zero_point(zp, np.iinfo(dtype), name)


def _scale(scale, name: str) -> np.float32:
    """A positive finite scale as the float32 TFLite stores."""
    s = _float32(scale, name)
    if s.ndim:
        raise ValueError(f"{name} must be a scalar (per-tensor quantization), got shape {s.shape}")
    return np.float32(s)


def _kernels(kernels: str, allowed=_KERNELS) -> str:
    if kernels not in allowed:
        raise ValueError(f"kernels must be one of {allowed}, got {kernels!r}")
    return kernels


def _clamp(v: np.ndarray, dtype: np.dtype, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min if lo is None else lo, info.max if hi is None else hi).astype(dtype)


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """``std::round`` of float32 values, as float64 (exact: |v| + 0.5 is exact in float64 below 2^52)."""
    v64 = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.copysign(np.floor(np.abs(v64) + 0.5), v64)


def _to_int32(v: np.ndarray) -> np.ndarray:
    """``static_cast<int32_t>`` of integral float values with x86-64's result for the undefined cases:
    NaN and values outside the int32 range give :math:`-2^{31}` (``cvttss2si``'s "integer indefinite")."""
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (v >= -2.0 ** 31) & (v < 2.0 ** 31)
    return np.where(ok, np.trunc(np.where(ok, v, 0.0)), INT32_MIN).astype(np.int64)


def _check_mbqm_shift(shift: int, what: str) -> None:
    if not -31 <= shift <= 30:
        raise ValueError(f"{what}: the multiplier's shift {shift} is outside TFLite's supported [-31, 30]")

"""The integer grid of overflow-aware QAT (:mod:`fxpsim.hardware.qat`): a quantizer's grid from its
``integer_form``, whether the target stores that grid as it is, the weight layouts (output channel first, as
:func:`fxpsim.hardware.quantize_weights` takes them, and back), and one overflow-checked accumulator add."""
from __future__ import annotations

import numpy as np


def integer_grid(q, x=None) -> dict | None:
    """The integer grid of a quantizer from its ``integer_form`` (``x``: the tensor it quantizes; a zero
    probe for an activation quantizer), or None when it has none: ``{"scale", "zero_point"`` (flat),
    ``"zero_point_full"`` (broadcast to the codes), ``"quant_min", "quant_max", "bits", "axis", "codes"}``."""
    if q is None:
        return None
    probe = np.zeros(1, dtype=np.float32) if x is None else x
    try:
        form = q.integer_form(probe)
    except (NotImplementedError, RuntimeError, ValueError, TypeError):
        return None
    codes = np.asarray(form.codes, dtype=np.int64)
    zp = np.asarray(form.zero_point)
    if zp.dtype.kind not in "iu" and not np.all(zp == np.round(zp)):
        return None
    scale = np.asarray(form.scale, dtype=np.float64)
    axis = None
    if scale.size > 1:
        if form.axis is None:
            return None
        axis = form.axis % codes.ndim
    qmin, qmax = int(form.quant_min), int(form.quant_max)
    return {"scale": scale.reshape(-1), "zero_point": np.asarray(zp, np.int64).reshape(-1),
            "zero_point_full": np.broadcast_to(np.asarray(zp, np.int64), codes.shape),
            "quant_min": qmin, "quant_max": qmax, "bits": max((qmax - qmin).bit_length(), 1), "axis": axis,
            "codes": codes}


def _code_range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _offset(grid, bits: int, signed: bool):
    """The code offset that puts the grid's codes into a ``bits``-bit register (None if none does)."""
    lo, hi = _code_range(bits, signed)
    for off in (0, -(1 << (bits - 1)), 1 << (bits - 1)):
        if lo <= grid["quant_min"] + off and grid["quant_max"] + off <= hi:
            return off
    return None


def _grid_fits(grid, bits: int, signed: bool, cfg) -> bool:
    """Whether the target stores this trained grid as it is (what the converter checks)."""
    schemes = {cfg.requantization, cfg.dense_requantization or cfg.requantization}
    if grid["bits"] != bits or _offset(grid, bits, signed) is None:
        return False
    if "shift" in schemes:
        m, _ = np.frexp(grid["scale"])
        return bool(np.all(m == 0.5))
    return True


def _out_first(kind: str, w: np.ndarray) -> np.ndarray:
    """Weights with the output channel first (the layout :func:`fxpsim.hardware.quantize_weights` takes)."""
    if kind == "dense":
        return w.T
    if kind == "conv2d":
        return np.transpose(w, (3, 0, 1, 2))
    kh, kw, c, m = w.shape
    return np.transpose(w.reshape(kh, kw, c * m), (2, 0, 1))[..., None]


def _model_layout(kind: str, w_oc: np.ndarray, shape) -> np.ndarray:
    """Inverse of :func:`_out_first` (``shape``: the model-layout shape)."""
    if kind == "dense":
        return w_oc.T
    if kind == "conv2d":
        return np.transpose(w_oc, (1, 2, 3, 0))
    return np.transpose(w_oc[..., 0], (1, 2, 0)).reshape(shape)


def _fit(total: np.ndarray, bits: int, overflow) -> tuple[np.ndarray, np.ndarray]:
    """One overflow-checked add's result in a ``bits``-bit accumulator: ``(codes, overflowed)``."""
    from ..core.fixed import FixedArray, Format
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    bad = (total < lo) | (total > hi)
    if not bad.any():
        return total, bad
    fitted = FixedArray(total, Format.integer(62)).cast(Format.integer(bits), overflow=overflow)
    return fitted.raw.reshape(total.shape), bad

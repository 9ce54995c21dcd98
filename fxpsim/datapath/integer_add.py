"""Integer elementwise add (TFLite ``ADD``, int8): :func:`quantized_add`.

Both inputs are shifted left by ``left_shift`` and scaled by TFLite's multipliers
(:func:`~fxpsim.datapath.tflite_params.tflite_add_params`, cached per parameter set), summed and
scaled again, in int32 arithmetic.  An int8 x int8 -> int8 add reads a table of its 65536 results
(:func:`fxpsim.datapath.conv_int8.lut2`), built once per parameter set by the same arithmetic.
"""
from __future__ import annotations

import functools

import numpy as np

from . import conv_int8 as _fused
from .fixed_point_multiplier import multiply_by_quantized_multiplier
from .integer_checks import _check_zero_point, _wrap_int32
from .integer_layer_args import _offset, _operand, _output_spec
from .tflite_params import tflite_add_params

__all__ = ["quantized_add"]


def quantized_add(x1, x2, *, scale1: float, zp1: int, scale2: float, zp2: int, out_scale: float,
                  out_zp: int, act_min=None, act_max=None, out_dtype=np.int8, left_shift: int = 20,
                  rounding: str = "double", prepare: bool = False) -> np.ndarray:
    r"""Integer elementwise add (TFLite ``ADD``, int8), numpy broadcasting.

    With ``(m1, s1, m2, s2, mo, so) =`` :func:`~fxpsim.requantize.tflite_add_params` and
    :math:`\mathrm{MBQM}` = :func:`~fxpsim.requantize.multiply_by_quantized_multiplier` (int32 arithmetic):

    .. math::

        v_i = \mathrm{MBQM}((x_i - z_i)\,2^{L},\ m_i, s_i),\qquad
        y = \mathrm{clamp}\big(\mathrm{MBQM}(v_1 + v_2,\ m_o, s_o) + z_y\big)

    ``prepare=True`` validates the call and returns, instead of computing, the int8 table lookup for inputs
    shaped and typed as ``x1`` and ``x2`` (:class:`TableAdd`, ``call(x1, x2)``: a compiled graph plan's step),
    or ``None`` when the add does not run on a table.

    Returns
    -------
    ndarray of ``out_dtype``
    """
    a = _operand(x1, "x1", np.ndim(x1))
    b = _operand(x2, "x2", np.ndim(x2))
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"x1 {a.shape} and x2 {b.shape} do not broadcast") from None
    single = rounding == "single"
    if rounding not in ("double", "single"):
        raise ValueError(f"rounding must be 'double' or 'single', got {rounding!r}")
    dtype, zp, lo, hi = _output_spec(out_zp, act_min, act_max, out_dtype)
    params = _add_params(scale1, scale2, out_scale, left_shift, single)
    if a.dtype == b.dtype == dtype == np.int8 and _fused.available():
        # int8 x int8 -> int8: every output is one of 65536, tabulated once by the arithmetic below
        z1 = _check_zero_point(zp1, np.iinfo(np.int8), "zp1")
        z2 = _check_zero_point(zp2, np.iinfo(np.int8), "zp2")
        table = _add_table(params, z1, z2, int(left_shift), rounding, zp, lo, hi)
        if prepare:
            return TableAdd(table, a.shape, b.shape, shape)
        a8 = np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1)
        b8 = np.ascontiguousarray(np.broadcast_to(b, shape)).reshape(-1)
        return _fused.lut2(a8, b8, table).reshape(shape)
    if prepare:
        return None
    return _add_codes(a, b, zp1, zp2, params, left_shift, rounding, shape, zp, lo, hi, dtype)


class TableAdd:
    """An int8 add read from its table (:func:`quantized_add` with ``prepare=True``): ``call(x1, x2)`` gives
    ``quantized_add(x1, x2, ...)`` for int8 inputs of the prepared shapes, ``None`` for any other input (and when the
    table kernel is switched off)."""

    def __init__(self, table, shape1, shape2, shape):
        self.table, self.shape1, self.shape2, self.shape = table, tuple(shape1), tuple(shape2), tuple(shape)

    def __call__(self, x1, x2):
        if not _fused.available() or x1.dtype != np.int8 or x2.dtype != np.int8 or x1.shape != self.shape1 \
                or x2.shape != self.shape2:
            return None
        a8 = np.ascontiguousarray(np.broadcast_to(x1, self.shape) if x1.shape != self.shape else x1).reshape(-1)
        b8 = np.ascontiguousarray(np.broadcast_to(x2, self.shape) if x2.shape != self.shape else x2).reshape(-1)
        return _fused.lut2(a8, b8, self.table).reshape(self.shape)


def _add_params(scale1, scale2, out_scale, left_shift, single):
    """:func:`~fxpsim.requantize.tflite_add_params`, cached for hashable (Python or numpy scalar) arguments."""
    try:
        return _add_params_cached(scale1, scale2, out_scale, left_shift, single)
    except TypeError:                     # unhashable (an array): validated and computed uncached
        return tflite_add_params(scale1, scale2, out_scale, left_shift, single)


@functools.lru_cache(maxsize=1024)
def _add_params_cached(scale1, scale2, out_scale, left_shift, single):
    return tflite_add_params(scale1, scale2, out_scale, left_shift, single)


def _add_codes(a, b, zp1, zp2, params, left_shift, rounding, shape, zp, lo, hi, dtype):
    """TFLite's ADD arithmetic (see :func:`quantized_add`) on numpy arrays."""
    m1, s1, m2, s2, mo, so = params
    v1 = multiply_by_quantized_multiplier(_wrap_int32(_offset(a, zp1, "zp1") << left_shift), m1, s1, rounding)
    v2 = multiply_by_quantized_multiplier(_wrap_int32(_offset(b, zp2, "zp2") << left_shift), m2, s2, rounding)
    raw = multiply_by_quantized_multiplier(_wrap_int32(np.broadcast_to(v1, shape) + v2), mo, so, rounding)
    return np.clip(raw + zp, lo, hi).astype(dtype)


@functools.lru_cache(maxsize=256)
def _add_table(params, zp1, zp2, left_shift, rounding, zp, lo, hi) -> np.ndarray:
    """The 65536 int8 outputs of :func:`_add_codes` for every pair of int8 inputs, at index
    ``(a + 128) * 256 + (b + 128)`` (read only)."""
    codes = np.arange(-128, 128, dtype=np.int8)
    table = _add_codes(np.repeat(codes, 256), np.tile(codes, 256), zp1, zp2, params, left_shift, rounding,
                       (65536,), zp, lo, hi, np.int8)
    table.flags.writeable = False
    return table

r"""TFLite int8 REDUCE_MAX and SUM (LiteRT 2.3.0, ``reduce.cc``).

* REDUCE_MAX takes the maximum of the **codes** in every kernel set (the reference and builtin kernels refuse an
  output whose quantization differs and fail the invoke, XNNPACK copies the codes anyway; that check is the
  importer's, :mod:`fxpsim.frontends.tflite.prepare`).
* SUM: the optimized kernel's float arithmetic (``optimized_ops::QuantizedMeanOrSum``) and XNNPACK's; LiteRT's
  reference int8 SUM is not reproduced.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..requantize import _wrap_int32
from ._common import _clamp, _codes, _kernels, _round_half_away, _scale, _to_int32, _zero_point
from .reduce_and_move import _axes

__all__ = ["quantized_reduce_max", "SumParams", "sum_params", "quantized_sum"]

_INT8 = np.dtype(np.int8)


def quantized_reduce_max(x, axis, *, keepdims: bool = False) -> np.ndarray:
    r"""TFLite int8 ``REDUCE_MAX``: :math:`y = \max_{\text{axes}} x` on the codes (``axis`` as
    :func:`~fxpsim.datapath.tflite.quantized_mean` takes it; an empty sequence copies)."""
    arr = np.asarray(x)
    if arr.dtype != _INT8:
        raise TypeError(f"x must be int8 codes, got {arr.dtype}")
    axes = _axes(axis, arr.ndim)
    if arr.size == 0:
        raise ValueError("quantized_reduce_max: the input is empty")
    return np.max(arr, axis=axes, keepdims=keepdims) if axes else arr.copy()


# --------------------------------------------------------------------------- SUM
@dataclass(frozen=True)
class SumParams:
    """TFLite int8 ``SUM``: the float32 scales and zero points (the optimized kernel and XNNPACK derive their
    arithmetic from them at Eval)."""

    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int


def sum_params(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> SumParams:
    """Parameters of :func:`quantized_sum`."""
    si, so = _scale(input_scale, "input_scale"), _scale(output_scale, "output_scale")
    return SumParams(float(si), _zero_point(input_zero_point, _INT8, "input_zero_point"), float(so),
                     _zero_point(output_zero_point, _INT8, "output_zero_point"))


def quantized_sum(x, axis, params: SumParams, *, keepdims: bool = False, kernels: str = "builtin") -> np.ndarray:
    r"""TFLite int8 ``SUM`` over ``axis`` (:math:`n` elements, :math:`S` the int32 sum of the codes).

    ``kernels="builtin"`` (``optimized_ops::QuantizedMeanOrSum`` with ``compute_sum``), float32 throughout:

    .. math::

        c = \mathrm{fl}_{32}(s_{in}/s_{out}),\quad b = \mathrm{fl}_{32}(\mathrm{fl}_{32}(-z_{in} c)\, n),\quad
        y = \mathrm{clamp}\big(\mathrm{rha}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(S c) + b)) + z_{out}\big)

    ``kernels="xnnpack"``: XNNPACK's reduce-sum, :math:`z' = \mathrm{fl}_{32}(z_{out} - \mathrm{fl}_{32}(n z_{in}) c)`,
    :math:`y = \mathrm{clamp}(\mathrm{rhe}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(S) c + z')))`.
    ``kernels="reference"`` raises ``NotImplementedError``: LiteRT 2.3.0's reference int8 SUM writes codes
    that do not follow its input (seen live; not reproduced).
    """
    _kernels(kernels)
    if not isinstance(params, SumParams):
        raise TypeError(f"params must be SumParams (from sum_params), got {type(params).__name__}")
    if kernels == "reference":
        raise NotImplementedError("LiteRT 2.3.0's reference int8 SUM (BUILTIN_REF) gives codes that do not follow "
                                  "its input")
    arr = _codes(x, _INT8)
    axes = _axes(axis, arr.ndim)
    if arr.size == 0:
        raise ValueError("quantized_sum: the input is empty")
    n = int(np.prod([arr.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    total = _wrap_int32(np.sum(arr, axis=axes, keepdims=keepdims)) if axes else arr
    f32 = np.float32
    c = f32(params.input_scale) / f32(params.output_scale)
    if kernels == "xnnpack":
        zp = f32(params.output_zero_point) - f32(f32(n) * f32(params.input_zero_point)) * c
        v = total.astype(np.float32) * c + zp
        return np.clip(np.rint(v), -128, 127).astype(np.int8)
    bias = f32(f32(-params.input_zero_point) * c) * f32(n)
    v = _to_int32(_round_half_away(total.astype(np.float32) * c + bias))
    return _clamp(v + params.output_zero_point, _INT8)

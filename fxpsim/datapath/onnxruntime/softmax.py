r"""onnxruntime's ``com.microsoft:QLinearSoftmax`` (CPU kernel), bit for bit, in numpy.

onnxruntime runs a quantized softmax (QLinearSoftmax, and the DequantizeLinear -> Softmax -> QuantizeLinear
groups its graph optimizer fuses into it) with a table of 256 float32 exponentials of the input codes
(``qlinear_softmax.cc``). For a row of :math:`D` codes :math:`x_j` on input scale :math:`s_x`, output scale
:math:`s_y` and zero point :math:`z_y`:

.. math::

    b &= \max(0, \ln(\mathrm{fl}(\mathrm{FLT\_MAX} / D)) - 5) / s_x \qquad \text{(float64)} \\
    e_k &= \mathrm{fl}\big(\exp((-k + b)\, s_x)\big), \quad k = \max_j x_j - x_j \in [0, 255]
           \qquad \text{(exp in float64, rounded to float32)} \\
    S &= \mathrm{fl}(\dots\mathrm{fl}(\mathrm{fl}(e_{k_0} + e_{k_1}) + e_{k_2}) \dots)
           \qquad \text{(float32, in index order)} \\
    c &= \lfloor \mathrm{fl}(1 / s_y) \rfloor, \qquad
    y_j = \mathrm{sat}\Big(\mathrm{RNE}\big(\mathrm{fl}(e_{k_j} / S) \cdot c\big) + z_y\Big)

with the product :math:`\mathrm{fl}(e/S) \cdot c` rounded to an integer **exactly** (not first to float32: an
exact tie stays a tie, 24.5000004 rounds up), the zero point added after rounding, and ``sat`` clamping to the
output type; the input's zero point does not matter (only differences of codes do). This is what onnxruntime
1.32 computes, measured live (``tests/frontends/test_onnx_softmax.py``); its alternatives are refuted there:
``fl(fl(e c) / S)`` (what older onnxruntime sources write; it overflows float32 for rows of 1 to 3 values),
the product rounded to float32 first, the exact :math:`1 / s_y` for :math:`c`, the zero point added before
rounding, and an int8 output that wraps. A row's softmax runs over the axis (opset 13 and later) or over all
axes from ``axis`` on, flattened in the model's layout (opset 12 and earlier).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["softmax_table", "qlinear_softmax_rows"]

F32 = np.float32
_FLT_MAX = F32(np.finfo(np.float32).max)


def softmax_table(x_scale, reduce_len: int) -> np.ndarray:
    """The 256 exponentials :math:`e_k` (index ``k`` = max code - code, 0 .. 255) for rows of ``reduce_len``."""
    if reduce_len < 1:
        raise ValueError(f"QLinearSoftmax reduces over {reduce_len} values; at least 1")
    s = float(F32(x_scale))
    if not s > 0:
        raise ValueError(f"QLinearSoftmax needs a positive input scale, got {x_scale}")
    shift = math.log(float(F32(_FLT_MAX / F32(reduce_len))))
    shift = max(0.0, shift - 5.0) / s
    return np.array([math.exp((255 - k - 255 + shift) * s) for k in range(256)], np.float64).astype(F32)


def qlinear_softmax_rows(rows, x_scale, y_scale, y_zero_point, dtype) -> np.ndarray:
    """QLinearSoftmax of ``rows`` (codes, shape ``[R, D]``, one softmax per row) into ``dtype`` codes."""
    rows = np.asarray(rows).astype(np.int64)
    if rows.ndim != 2:
        raise ValueError(f"qlinear_softmax_rows takes [rows, D] codes, got shape {rows.shape}")
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise ValueError(f"QLinearSoftmax writes uint8 or int8 codes, not {dt}")
    table = softmax_table(x_scale, rows.shape[1])
    e = table[rows.max(axis=1, keepdims=True) - rows]
    total = np.zeros(rows.shape[0], F32)
    for j in range(rows.shape[1]):           # a float32 sum in index order
        total = (total + e[:, j]).astype(F32)
    c = F32(np.floor(F32(1.0) / F32(y_scale)))
    p = (e / total[:, None]).astype(F32)
    v = np.rint(p.astype(np.float64) * float(c)).astype(np.int64) + int(y_zero_point)   # the exact product
    info = np.iinfo(dt)
    return np.clip(v, int(info.min), int(info.max)).astype(dt)

"""The float32 inputs of the fake quantizers (TensorFlow's and PyTorch's ops compute in float32).

:data:`_F32` (``np.float32``), :func:`_float32_input` (a real floating-point array as C-contiguous
float32) and :func:`_gradient_pair` (gradients and inputs of the same shape), shared by
:mod:`fxpsim.quant.fake_quant_tf` and :mod:`fxpsim.quant.fake_quant_torch`.
"""
from __future__ import annotations

import numpy as np

_F32 = np.float32


def _float32_input(values, name: str, where: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind != "f":
        raise TypeError(f"{where}: {name} must be a real floating-point array, got dtype {arr.dtype}")
    return np.asarray(arr, dtype=_F32, order="C")


def _gradient_pair(gradients, inputs, where):
    dy = _float32_input(gradients, "gradients", where)
    x = _float32_input(inputs, "inputs", where)
    if dy.shape != x.shape:
        raise ValueError(f"{where}: gradients has shape {dy.shape}, inputs has shape {x.shape}")
    return dy, x

r"""onnxruntime's float32 ``LayerNormalization`` (CPU kernel), bit for bit, in numpy, for rows of fewer than
:data:`MAX_SCALAR_ROW` values (measured live in ``tests/frontends/test_onnx_transformer.py``; onnxruntime 1.32,
x86-64 with AVX2).

Each row :math:`x_1 \dots x_n` (the axes from ``axis`` on) is one task. Its mean and variance come from Welford's
update in float32, every operation rounded:

.. math::

    d_k = \mathrm{fl}(x_k - \mu_{k-1}), \quad \mu_k = \mathrm{fl}(\mu_{k-1} + \mathrm{fl}(d_k / k)), \quad
    M_k = \mathrm{fl}(M_{k-1} + \mathrm{fl}(d_k \cdot \mathrm{fl}(x_k - \mu_k)))

(:math:`\mu_0 = M_0 = 0`), then :math:`\sigma = \mathrm{fl}(\sqrt{\mathrm{fl}(\mathrm{fl}(M_n / n) + \varepsilon)})`
and

.. math:: y_h = \mathrm{fl}\big(\mathrm{fl}(\mathrm{fl}(\mathrm{fl}(x_h - \mu_n) / \sigma) \cdot \gamma_h) + \beta_h\big)

(a division by :math:`\sigma`, not a product with its inverse; without a bias the last addition is left out).
The threads split rows: the thread count changes no bit (measured at 1 and 4 threads).

Not reproduced: rows of :data:`MAX_SCALAR_ROW` or more values. There onnxruntime 1.32 runs another, vectorized
kernel. Measured through its Mean and InvStdDev outputs (n = 8 ... 24): the mean is the float64 mean rounded to
float32 (0 of 1500 rows differ), the output stage is :math:`y = \mathrm{fma}(\mathrm{fl}((x - \mu) \cdot r),
\gamma, \beta)` with the kernel's own :math:`r` (0 of 7200 outputs differ), but :math:`r` lies within 2 ulp of
:math:`1/\sqrt{\mathrm{var} + \varepsilon}` without being its correct rounding (40 % of rows differ from it;
none of float32 / float64, one- / two-pass variances, 4-, 8-, 16-lane Welford with Chan's merge, nor one
Newton step from the exact reciprocal square root match). That points to an approximate reciprocal square root
(``rsqrtps`` and a refinement), whose values differ between CPU vendors; not established, so such rows are
refused (:func:`layer_norm_rows` raises a ValueError).
"""
from __future__ import annotations

import numpy as np

__all__ = ["layer_norm_rows", "MAX_SCALAR_ROW"]

F32 = np.float32
#: Rows shorter than this run onnxruntime's scalar Welford update (reproduced); longer ones a vector kernel.
MAX_SCALAR_ROW = 8


def layer_norm_rows(rows, gamma, beta=None, epsilon: float = 1e-5) -> np.ndarray:
    """``rows`` [R, n] float32 normalized per row as onnxruntime's float32 kernel does (module docstring);
    ``gamma`` and ``beta`` (or None) [n] float32, ``epsilon`` read as float32 (the attribute's type)."""
    x = np.asarray(rows, F32)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"layer_norm_rows needs a [rows, n >= 1] array, got shape {list(x.shape)}")
    n = x.shape[1]
    if n >= MAX_SCALAR_ROW:
        raise ValueError(f"layer_norm_rows: rows of {n} values; onnxruntime normalizes rows of "
                         f"{MAX_SCALAR_ROW} or more with a vectorized, CPU-dependent reduction that fxpsim does "
                         "not reproduce")
    g = np.asarray(gamma, F32).reshape(-1)
    b = None if beta is None else np.asarray(beta, F32).reshape(-1)
    if g.size != n or (b is not None and b.size != n):
        raise ValueError(f"layer_norm_rows: scale of {g.size} and bias of {None if b is None else b.size} values "
                         f"for rows of {n}")
    mean = np.zeros(x.shape[0], F32)
    m2 = np.zeros(x.shape[0], F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(n):
            v = x[:, k]
            d = (v - mean).astype(F32)
            mean = (mean + (d / F32(k + 1)).astype(F32)).astype(F32)
            m2 = (m2 + (d * (v - mean).astype(F32)).astype(F32)).astype(F32)
        var = (m2 / F32(n)).astype(F32)
        sigma = np.sqrt((var + F32(epsilon)).astype(F32)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = ((x - mean[:, None]).astype(F32) / sigma[:, None]).astype(F32)
        y = (y * g).astype(F32)
        if b is not None:
            y = (y + b).astype(F32)
    return y

r"""onnxruntime's float32 ``LayerNormalization`` (CPU kernel), bit for bit, in numpy (measured live in
``tests/frontends/test_onnx_transformer.py``; onnxruntime 1.32, x86-64 with AVX2 and FMA, no AVX-512). Each row
:math:`x_1 \dots x_n` (the axes from ``axis`` on) is one task; the threads split rows, so the thread count changes
no bit (measured at 1 and 4 threads). Every operation below is one float32 rounding unless marked.

**Rows of n < 8** (``kernel="scalar"``): Welford's update,

.. math::

    d_k = \mathrm{fl}(x_k - \mu_{k-1}), \quad \mu_k = \mathrm{fl}(\mu_{k-1} + \mathrm{fl}(d_k / k)), \quad
    M_k = \mathrm{fl}(M_{k-1} + \mathrm{fl}(d_k \cdot \mathrm{fl}(x_k - \mu_k)))

(:math:`\mu_0 = M_0 = 0`), :math:`\sigma = \mathrm{fl}(\sqrt{\mathrm{fl}(\mathrm{fl}(M_n / n) + \varepsilon)})` and
:math:`y_h = \mathrm{fl}(\mathrm{fl}(\mathrm{fl}(\mathrm{fl}(x_h - \mu_n) / \sigma) \cdot \gamma_h) + \beta_h)`.

**Rows of n >= 8 with n mod 8 < 4** (``kernel="avx2"``, the 8-lane AVX2 kernel): the mean is the float64 mean
rounded once, :math:`\mu = \mathrm{fl}(\sum x / n)`; with :math:`d_h = \mathrm{fl}(x_h - \mu)` eight lanes
accumulate :math:`L_j = \mathrm{fma}(d_{8t+j}, d_{8t+j}, L_j)` over the whole blocks, reduced as a tree
(:math:`j` with :math:`j + 4`, then :math:`j + 2`, then :math:`j + 1`), then the tail elements one by one,
:math:`S = \mathrm{fma}(d_h, d_h, S)`; :math:`r = \mathrm{fl}(1 / \mathrm{fl}(\sqrt{\mathrm{fl}(\mathrm{fl}(S / n)
+ \varepsilon)}))` and :math:`y_h = \mathrm{fma}(\mathrm{fl}(d_h \cdot r), \gamma_h, \beta_h)`. Measured through
onnxruntime's Mean and InvStdDev outputs (0 of 500 rows differ for n = 8 ... 11, 16 ... 19, 24, 64) and its output.

Not reproduced (:func:`layer_norm_rows` raises a ValueError): rows of n >= 8 with n mod 8 >= 4 (a tail of four
or more takes another path: the sequential tail above differs in 3 - 5 % of rows, a 4-lane block added in four
different ways in more), and any CPU whose vector width is not AVX2's (AVX-512 hosts are not measured).
"""
from __future__ import annotations

import numpy as np

from .mlas import fma32

__all__ = ["layer_norm_rows", "layer_norm_kernel", "MAX_SCALAR_ROW", "LANES"]

F32 = np.float32
#: Rows shorter than this run onnxruntime's scalar Welford update; longer ones its vector kernel.
MAX_SCALAR_ROW = 8
#: The float32 lanes of the AVX2 kernel.
LANES = 8


def layer_norm_kernel(n: int):
    """The kernel that normalizes rows of ``n`` values (``"scalar"``, ``"avx2"``), or None where none is
    reproduced."""
    if n < MAX_SCALAR_ROW:
        return "scalar"
    return "avx2" if n % LANES < 4 else None


def layer_norm_rows(rows, gamma, beta=None, epsilon: float = 1e-5, kernel: str | None = None) -> np.ndarray:
    """``rows`` [R, n] float32 normalized per row as onnxruntime's float32 kernel does (module docstring);
    ``gamma`` and ``beta`` (or None) [n] float32, ``epsilon`` read as float32 (the attribute's type); ``kernel``
    defaults to :func:`layer_norm_kernel` of ``n``."""
    x = np.asarray(rows, F32)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"layer_norm_rows needs a [rows, n >= 1] array, got shape {list(x.shape)}")
    n = x.shape[1]
    want = layer_norm_kernel(n)
    kernel = want if kernel is None else kernel
    if want is None or kernel != want:
        raise ValueError(f"layer_norm_rows: rows of {n} values; onnxruntime normalizes them with a vectorized "
                         f"kernel fxpsim does not reproduce (it does rows of n < {MAX_SCALAR_ROW} and, with AVX2, "
                         f"n >= {MAX_SCALAR_ROW} with n mod {LANES} < 4; kernel {kernel!r} asked)")
    g = np.asarray(gamma, F32).reshape(-1)
    b = None if beta is None else np.asarray(beta, F32).reshape(-1)
    if g.size != n or (b is not None and b.size != n):
        raise ValueError(f"layer_norm_rows: scale of {g.size} and bias of {None if b is None else b.size} values "
                         f"for rows of {n}")
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _scalar(x, g, b, F32(epsilon)) if kernel == "scalar" else _avx2(x, g, b, F32(epsilon))


def _scalar(x, g, b, eps):
    n = x.shape[1]
    mean = np.zeros(x.shape[0], F32)
    m2 = np.zeros(x.shape[0], F32)
    for k in range(n):
        v = x[:, k]
        d = (v - mean).astype(F32)
        mean = (mean + (d / F32(k + 1)).astype(F32)).astype(F32)
        m2 = (m2 + (d * (v - mean).astype(F32)).astype(F32)).astype(F32)
    sigma = np.sqrt(((m2 / F32(n)).astype(F32) + eps).astype(F32)).astype(F32)
    y = (((x - mean[:, None]).astype(F32) / sigma[:, None]).astype(F32) * g).astype(F32)
    return y if b is None else (y + b).astype(F32)


def _avx2(x, g, b, eps):
    n = x.shape[1]
    mean = x.astype(np.float64).sum(axis=1) / n
    d = (x - mean.astype(F32)[:, None]).astype(F32)
    full = n // LANES * LANES
    lanes = np.zeros((x.shape[0], LANES), F32)
    for t in range(0, full, LANES):
        lanes = fma32(d[:, t:t + LANES], d[:, t:t + LANES], lanes)
    while lanes.shape[1] > 1:
        half = lanes.shape[1] // 2
        lanes = (lanes[:, :half] + lanes[:, half:]).astype(F32)
    s = lanes[:, 0]
    for h in range(full, n):
        s = fma32(d[:, h], d[:, h], s)
    r = (F32(1) / np.sqrt(((s / F32(n)).astype(F32) + eps).astype(F32)).astype(F32)).astype(F32)
    return fma32((d * r[:, None]).astype(F32), g, np.zeros(n, F32) if b is None else b)

r"""onnxruntime's float32 ``LayerNormalization`` (CPU kernel), bit for bit, in numpy (measured live in
``tests/frontends/test_onnx_transformer.py``; onnxruntime 1.32, x86-64 with AVX2 and FMA). Each row
:math:`x_1 \dots x_n` (the axes from ``axis`` on) is one task; the threads split rows, so the thread count changes
no bit (measured at 1 and 4 threads). Every operation below is one float32 rounding unless marked.

**Rows of n < 8** (``kernel="scalar"``): Welford's update,

.. math::

    d_k = \mathrm{fl}(x_k - \mu_{k-1}), \quad \mu_k = \mathrm{fl}(\mu_{k-1} + \mathrm{fl}(d_k / k)), \quad
    M_k = \mathrm{fl}(M_{k-1} + \mathrm{fl}(d_k \cdot \mathrm{fl}(x_k - \mu_k)))

(:math:`\mu_0 = M_0 = 0`), :math:`\sigma = \mathrm{fl}(\sqrt{\mathrm{fl}(\mathrm{fl}(M_n / n) + \varepsilon)})` and
:math:`y_h = \mathrm{fl}(\mathrm{fl}(\mathrm{fl}(\mathrm{fl}(x_h - \mu_n) / \sigma) \cdot \gamma_h) + \beta_h)`.

**Rows of n >= 8** (``kernel="avx2"``, MLAS's AVX2 kernel ``MlasLayerNormKernelAvx2``, centered two-pass): the
mean is summed in float64 in four lanes over the whole blocks of four, :math:`D_j = \sum_t x_{4t+j}`, reduced as
:math:`(D_0 + D_2) + (D_1 + D_3)`, the tail added one by one, and :math:`\mu = \mathrm{fl}(\mathrm{fl}_{64}(D / n))`
(float64 division, then rounded to float32). With :math:`d_h = \mathrm{fl}(x_h - \mu)` eight lanes accumulate
:math:`L_j = \mathrm{fma}(d_{8t+j}, d_{8t+j}, L_j)` over the whole blocks of eight, reduced as a tree (:math:`j`
with :math:`j + 4`, then :math:`j + 2`, then :math:`j + 1`); then the tail of :math:`n \bmod 8` elements in index
order: when the tail has four or more, its first four are the compiler's 4-lane in-order reduction, unfused,
:math:`S = \mathrm{fl}(S + \mathrm{fl}(d_h^2))`, and the rest (and every tail element of a tail of fewer than four)
are contracted, :math:`S = \mathrm{fma}(d_h, d_h, S)`. Then :math:`r = \mathrm{fl}(1 / \mathrm{fl}(\sqrt{\mathrm{fl}(
\mathrm{fl}(S / n) + \varepsilon)}))` and :math:`y_h = \mathrm{fma}(\mathrm{fl}(d_h \cdot r), \gamma_h, \beta_h)`
(:math:`\mathrm{fl}(\mathrm{fl}(d_h r) \gamma_h)` without a bias). Measured through onnxruntime's Mean and
InvStdDev outputs and its output: 0 of 3000 rows differ for every n = 8 ... 64, with and without a bias (a
sequential fused tail differs in 3 - 7 % of the rows with n mod 8 >= 4, a 4-lane block folded into the lanes in
20 %).

The same bits on an AVX-512 host with VNNI (AMD Zen 4, onnxruntime 1.32: every n above, 1 and 4 threads: the
same rows, the same bits). Not reproduced: other CPUs (ARM, x86-64 without AVX2); the importer
takes the vector kernel only with ``cpu="avx2"`` or ``"vnni"``.
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
#: The tail elements the compiler's 4-lane in-order reduction takes (unfused products).
_TAIL_LANES = 4


def layer_norm_kernel(n: int):
    """The kernel that normalizes rows of ``n`` values: ``"scalar"`` (n < 8, any CPU) or ``"avx2"``."""
    if n < MAX_SCALAR_ROW:
        return "scalar"
    return "avx2"


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
    if kernel != want:
        raise ValueError(f"layer_norm_rows: rows of {n} values run onnxruntime's {want!r} kernel (rows of "
                         f"n < {MAX_SCALAR_ROW} the scalar one, longer rows the AVX2 one); kernel {kernel!r} asked")
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


def _mean64(x):
    """The float64 row sums of the AVX2 kernel's first pass: four lanes over whole blocks of four, reduced
    (0 + 2) + (1 + 3), then the tail in order."""
    n = x.shape[1]
    xd = x.astype(np.float64)
    full = n // 4 * 4
    lanes = np.zeros((x.shape[0], 4))
    for t in range(0, full, 4):
        lanes = lanes + xd[:, t:t + 4]
    s = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
    for h in range(full, n):
        s = s + xd[:, h]
    return s


def _avx2(x, g, b, eps):
    n = x.shape[1]
    mean = _mean64(x) / n
    d = (x - mean.astype(F32)[:, None]).astype(F32)
    full = n // LANES * LANES
    lanes = np.zeros((x.shape[0], LANES), F32)
    for t in range(0, full, LANES):
        lanes = fma32(d[:, t:t + LANES], d[:, t:t + LANES], lanes)
    while lanes.shape[1] > 1:
        half = lanes.shape[1] // 2
        lanes = (lanes[:, :half] + lanes[:, half:]).astype(F32)
    s = lanes[:, 0]
    vec = full + _TAIL_LANES if n - full >= _TAIL_LANES else full
    for h in range(full, vec):
        s = (s + (d[:, h] * d[:, h]).astype(F32)).astype(F32)
    for h in range(vec, n):
        s = fma32(d[:, h], d[:, h], s)
    r = (F32(1) / np.sqrt(((s / F32(n)).astype(F32) + eps).astype(F32)).astype(F32)).astype(F32)
    return fma32((d * r[:, None]).astype(F32), g, np.zeros(n, F32) if b is None else b)

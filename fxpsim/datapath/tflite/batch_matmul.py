r"""TFLite int8 ``BATCH_MATMUL``: an int32 dot product of the zero-point-shifted codes, requantized with gemmlowp's
fixed point (``reference_ops::BatchMatMul`` and the optimized builtin kernel) or in float32 (XNNPACK's
``batch_matrix_multiply_nc_qs8``, where LiteRT's delegate takes the op)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..requantize import _wrap_int32, multiply_by_quantized_multiplier, quantize_multiplier
from ._common import _clamp, _codes, _dtype, _kernels, _scale, _zero_point

__all__ = ["BatchMatMulParams", "batch_matmul_params", "quantized_batch_matmul"]


@dataclass(frozen=True)
class BatchMatMulParams:
    r"""What ``batch_matmul::Prepare`` derives: ``QuantizeMultiplier`` of
    :math:`\mathrm{double}(s_a)\,\mathrm{double}(s_b) / \mathrm{double}(s_y)` and the three zero points; and
    XNNPACK's requantization scale :math:`\mathrm{fl}_{32}(\mathrm{fl}_{32}(s_a s_b) / s_y)` (float32 operations,
    as ``xnn_subgraph``'s batch-matrix-multiply node computes it)."""

    multiplier: int
    shift: int
    lhs_zero_point: int
    rhs_zero_point: int
    output_zero_point: int
    dtype: np.dtype
    xnnpack_scale: float = float("nan")


def batch_matmul_params(lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point, output_scale, output_zero_point, *,
                        dtype=np.int8) -> BatchMatMulParams:
    """Parameters of :func:`quantized_batch_matmul` (per-tensor int8 operands and output)."""
    dt = _dtype(dtype, (np.int8,))
    sa, sb, so = (_scale(v, n) for v, n in ((lhs_scale, "lhs_scale"), (rhs_scale, "rhs_scale"),
                                            (output_scale, "output_scale")))
    m, s = quantize_multiplier(float(np.float64(sa) * np.float64(sb) / np.float64(so)))
    return BatchMatMulParams(int(m), int(s), _zero_point(lhs_zero_point, dt, "lhs_zero_point"),
                             _zero_point(rhs_zero_point, dt, "rhs_zero_point"),
                             _zero_point(output_zero_point, dt, "output_zero_point"), dt,
                             float(np.float32(np.float32(sa * sb) / so)))


def quantized_batch_matmul(lhs, rhs, params: BatchMatMulParams, *, adj_x: bool = False, adj_y: bool = False,
                           kernels: str = "reference") -> np.ndarray:
    r"""TFLite int8 ``BATCH_MATMUL`` of ``lhs [..., M, K]`` and ``rhs [..., K, N]`` (``adj_x`` / ``adj_y``:
    the last two axes of that operand transposed), the batch axes broadcast:

    .. math:: y = \mathrm{clamp}\big(\mathrm{MBQM}\big(\mathrm{wrap}_{32}\textstyle\sum_k (a_{mk} - z_a)(b_{kn} - z_b)\big)
              + z_y,\ -128,\ 127\big)

    with :func:`~fxpsim.datapath.requantize.multiply_by_quantized_multiplier` (two roundings).  The sum is exact in
    int64 (:math:`K < 2^{46}`) and wrapped to int32 as TFLite's accumulator.  The reference and builtin kernel sets
    compute this; so does ``kernels="xnnpack"`` when :math:`z_b \ne 0` (LiteRT's delegate refuses a right operand
    with a zero point and the builtin kernel runs).  XNNPACK itself (:math:`z_b = 0`; ``qs8-qc8w`` GEMM, fp32
    requantization) computes

    .. math:: y = \mathrm{rne}\big(\mathrm{clamp}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(\mathrm{acc}) \cdot c),\
              -128 - z_y,\ 127 - z_y)\big) + z_y, \qquad c = \mathrm{fl}_{32}(\mathrm{fl}_{32}(s_a s_b) / s_y)

    with the same exact accumulator (its packed ``-z_a \sum_k b_k`` term makes the sum of :math:`(a - z_a) b` exact
    in int32); ``adj_x`` is a separate transpose there.  All checked live against LiteRT."""
    _kernels(kernels)
    a, b = _codes(lhs, params.dtype, "lhs"), _codes(rhs, params.dtype, "rhs")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"BATCH_MATMUL operands need rank >= 2, got {a.shape} and {b.shape}")
    if adj_x:
        a = np.swapaxes(a, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"BATCH_MATMUL: lhs {a.shape} and rhs {b.shape} do not multiply (K differs)")
    acc = _wrap_int32(np.matmul(a - params.lhs_zero_point, b - params.rhs_zero_point))
    if kernels == "xnnpack" and params.rhs_zero_point == 0:
        if not np.isfinite(params.xnnpack_scale):
            raise ValueError("BATCH_MATMUL: params without xnnpack_scale (make them with batch_matmul_params)")
        zy = params.output_zero_point
        f = np.clip(acc.astype(np.float32) * np.float32(params.xnnpack_scale), np.float32(-128 - zy),
                    np.float32(127 - zy))
        return _clamp(np.rint(f).astype(np.int64) + zy, params.dtype)
    y = multiply_by_quantized_multiplier(acc, params.multiplier, params.shift) + params.output_zero_point
    return _clamp(y, params.dtype)

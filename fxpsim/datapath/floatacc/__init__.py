"""Float and block-scaled datapaths: tensor-core fused dots, per-add IEEE loops, block-scaled
(MX / NVFP4) dots and Kulisch-exact sums (:class:`FloatAccumulator`, :func:`float_matmul`)."""
from .accumulator import ALIGNS, KINDS, FloatAccumulator
from .matmul import FloatMatmulResult, float_dot, float_matmul

__all__ = ["FloatAccumulator", "FloatMatmulResult", "float_matmul", "float_dot", "KINDS", "ALIGNS"]

"""Hardware arithmetic: accumulators of any width that overflow at every add (:mod:`.accumulate`),
requantization (:mod:`.requantize`), integer op kernels (:mod:`.integer_ops`), and float/block-scaled
tensor-core accumulators (:mod:`.floatacc`: per-add IEEE, fused dot, block-scaled, Kulisch-exact)."""
from . import accumulate, floatacc, integer_ops, requantize
from .accumulate import *  # noqa: F401,F403
from .floatacc import FloatAccumulator, FloatMatmulResult, float_dot, float_matmul  # noqa: F401
from .integer_ops import *  # noqa: F401,F403
from .requantize import *  # noqa: F401,F403

__all__ = (list(accumulate.__all__) + list(requantize.__all__) + list(integer_ops.__all__)
           + ["FloatAccumulator", "FloatMatmulResult", "float_matmul", "float_dot"])

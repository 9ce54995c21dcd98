r"""TFLite-exact integer kernels for the remaining int8 ops (QUANTIZE, DEQUANTIZE, MUL, SUB, MEAN,
MAX_POOL_2D, CONCATENATION, PAD, LOGISTIC, TANH, SOFTMAX, HARD_SWISH, LEAKY_RELU, GATHER,
RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR, BATCH_MATMUL).

Each op is split as TFLite splits it: a ``*_params`` function computes, from the tensors' scales and
zero points, what TFLite computes in the op's ``Prepare`` (multipliers, shifts, lookup tables), and
returns a frozen, hashable dataclass that a graph node can hold; the kernel takes the integer codes
and those parameters and reproduces LiteRT's **reference** kernel (``OpResolverType.BUILTIN_REF``) bit
for bit.  Where LiteRT's optimized builtin kernels or its XNNPACK delegate compute something else,
``kernels="builtin"`` / ``kernels="xnnpack"`` reproduce them too (see each docstring).  ADD is
:func:`fxpsim.datapath.integer_ops.quantized_add`.

Modules: :mod:`.quantize` (QUANTIZE, DEQUANTIZE, requantize), :mod:`.arithmetic` (MUL, SUB, XNNPACK ADD),
:mod:`.reduce_and_move` (MEAN, MAX_POOL_2D, PAD, CONCATENATION), :mod:`.lookup` (LOGISTIC, TANH),
:mod:`.softmax`, :mod:`.piecewise` (HARD_SWISH, LEAKY_RELU), :mod:`.elementwise_math` (MAXIMUM, MINIMUM,
SQUARED_DIFFERENCE, RSQRT, PRELU, ELU), :mod:`.reduce_sum_max` (REDUCE_MAX, SUM), :mod:`.log_softmax`, :mod:`.gather`, :mod:`.resize`, :mod:`.batch_matmul`
(RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR), on :mod:`.gemmlowp` fixed-point math.

Every claim of exactness is checked against LiteRT itself by ``tests/datapath/test_tflite_ops.py``
on the vectors of ``tests/vectors/tflite_ops`` (made by ``tools/fixtures/tflite_ops``).

Arithmetic
----------
Integer steps run on int64 numpy arrays whose values are proven to stay within int64 (bounds in the
docstrings); where TFLite's C code computes in ``int32_t`` and can wrap, the wrap is reproduced with
:func:`~fxpsim.datapath.requantize._wrap_int32`.  Steps TFLite does in ``float`` are done in numpy
float32 (IEEE single precision, correctly rounded, as C on x86-64/ARM64), steps it does in ``double``
in float64.  gemmlowp's fixed-point math (``exp_on_negative_values``, ``logistic``, ``tanh``, ...)
is reimplemented vectorised on raw int32 values (:func:`gemmlowp_exp_on_negative_values` and friends).

TFLite rounds a float with ``std::round`` (:math:`\mathrm{rha}`, round half away from zero) and
converts it with ``static_cast<int32_t>``; for NaN and values outside the int32 range that cast is
undefined in C++ and x86-64 returns :math:`-2^{31}`, which these kernels reproduce.
"""
from . import arithmetic, batch_matmul, elementwise_math, gather, log_softmax, reduce_sum_max, gemmlowp, lookup, piecewise, quantize, reduce_and_move, resize, softmax
from ._common import _round_half_away, _to_int32  # noqa: F401  (used by the tests' exact models)
from .lookup import _tanhf  # noqa: F401
from .gemmlowp import *  # noqa: F401,F403
from .quantize import *  # noqa: F401,F403
from .arithmetic import *  # noqa: F401,F403
from .reduce_and_move import *  # noqa: F401,F403
from .lookup import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .piecewise import *  # noqa: F401,F403
from .gather import *  # noqa: F401,F403
from .batch_matmul import *  # noqa: F401,F403
from .resize import *  # noqa: F401,F403
from .elementwise_math import *  # noqa: F401,F403
from .log_softmax import *  # noqa: F401,F403
from .reduce_sum_max import *  # noqa: F401,F403

__all__ = ['quantize_tflite', 'dequantize_tflite', 'RequantizeParams', 'requantize_params', 'requantize_tflite', 'MulParams', 'mul_params', 'quantized_mul', 'SubParams', 'sub_params', 'quantized_sub', 'quantized_add_xnnpack', 'MeanParams', 'mean_params', 'mean_plan', 'quantized_mean', 'quantized_max_pool2d', 'quantized_concatenation', 'quantized_pad', 'LogisticParams', 'logistic_params', 'quantized_logistic', 'TanhParams', 'tanh_params', 'quantized_tanh', 'SoftmaxParams', 'softmax_params', 'softmax_reference_scale', 'quantized_softmax', 'float_table_plan', 'HardSwishParams', 'hard_swish_params', 'quantized_hard_swish', 'LeakyReluParams', 'leaky_relu_params', 'quantized_leaky_relu', 'calculate_input_radius', 'gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl', 'gemmlowp_exp_on_negative_values', 'gemmlowp_one_over_one_plus_x_for_x_in_0_1', 'gemmlowp_one_minus_x_over_one_plus_x_for_x_in_0_1', 'gemmlowp_logistic', 'gemmlowp_tanh', 'gemmlowp_rounding_half_sum', 'gemmlowp_saturating_rounding_multiply_by_pot', 'gather_tflite',
           'resize_nearest_indices', 'quantized_resize_nearest', 'quantized_resize_bilinear', 'resize_bilinear_float',
           'BatchMatMulParams', 'batch_matmul_params', 'quantized_batch_matmul'] + elementwise_math.__all__ + log_softmax.__all__ + reduce_sum_max.__all__

"""Fixed-point numbers: formats and their notations, rounding and overflow modes, :class:`FixedArray`,
exact float -> code and code -> code conversion (Cython kernels in ``_core.pyx`` and ``_core_round.h``);
floating-point formats up to 32 bits (``float_format``, ``float_codec``, kernel ``_float.pyx``) and
block-scaled MX / NVFP4 formats (``block_format``)."""
from .fixed import *  # noqa: F401,F403
from .fixed import __all__ as _fixed_all
from .formats import check_modes  # noqa: F401
from .float_format import FloatFormat, known_float_formats  # noqa: F401
from .float_codec import FloatArray  # noqa: F401  (encode/decode/convert: fxpsim.core.float_codec)
from .block_format import BlockArray, BlockFormat, dequantize_block, quantize_block  # noqa: F401

__all__ = list(_fixed_all) + ["check_modes", "FloatFormat", "known_float_formats", "FloatArray",
                              "BlockFormat", "BlockArray",
                              "quantize_block", "dequantize_block"]

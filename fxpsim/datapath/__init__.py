"""Hardware arithmetic: accumulators of any width that overflow at every add (:mod:`.accumulate`),
requantization (:mod:`.requantize`) and integer op kernels (:mod:`.integer_ops`)."""
from . import accumulate, integer_ops, requantize
from .accumulate import *  # noqa: F401,F403
from .integer_ops import *  # noqa: F401,F403
from .requantize import *  # noqa: F401,F403

__all__ = list(accumulate.__all__) + list(requantize.__all__) + list(integer_ops.__all__)

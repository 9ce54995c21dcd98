"""Fixed-point numbers: formats and their notations, rounding and overflow modes, :class:`FixedArray`,
exact float -> code and code -> code conversion (Cython kernels in ``_core.pyx`` and ``_core_round.h``)."""
from .fixed import *  # noqa: F401,F403
from .fixed import __all__ as _fixed_all
from .formats import check_modes  # noqa: F401

__all__ = list(_fixed_all) + ["check_modes"]

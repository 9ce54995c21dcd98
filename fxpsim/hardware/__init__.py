"""What a target is and running networks on it: :class:`HardwareConfig` and the presets
(:mod:`.config`), conversion (:mod:`.conversion`), :func:`simulate` (:mod:`.simulation`) and :func:`sweep`
(:mod:`.sweeps`), mixed-precision :func:`search` (:mod:`.mixed_precision`), every node at every accumulator width
(:func:`node_sweep`, :mod:`.width_sweep`), and overflow-aware QAT, training for a target's datapath
(:func:`datapath_aware`, :mod:`.qat`)."""
from . import accumulator_widths as _widths_module
from . import config, conversion, mixed_precision, qat, simulation, sweeps, width_sweep
from .config import *  # noqa: F401,F403
from .conversion import *  # noqa: F401,F403
from .simulation import *  # noqa: F401,F403
from .sweeps import *  # noqa: F401,F403
from .mixed_precision import *  # noqa: F401,F403
from .width_sweep import *  # noqa: F401,F403
from .qat import *  # noqa: F401,F403
from .accumulator_widths import *  # noqa: F401,F403

__all__ = list(dict.fromkeys(list(config.__all__) + list(conversion.__all__) + list(simulation.__all__)
                             + list(sweeps.__all__) + list(mixed_precision.__all__)
                             + list(width_sweep.__all__) + list(qat.__all__)
                             + list(_widths_module.__all__)))

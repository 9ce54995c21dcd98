"""What a target is and running networks on it: :class:`HardwareConfig` and the presets
(:mod:`.config`), conversion (:mod:`.conversion`), :func:`simulate` (:mod:`.simulation`) and :func:`sweep`
(:mod:`.sweeps`)."""
from . import config, conversion, simulation, sweeps
from .config import *  # noqa: F401,F403
from .conversion import *  # noqa: F401,F403
from .simulation import *  # noqa: F401,F403
from .sweeps import *  # noqa: F401,F403

__all__ = list(dict.fromkeys(list(config.__all__) + list(conversion.__all__) + list(simulation.__all__)
                             + list(sweeps.__all__)))

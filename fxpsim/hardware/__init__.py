"""What a target is and running networks on it: :class:`HardwareConfig` and the presets
(:mod:`.config`), conversion (:mod:`.conversion`), :func:`simulate` (:mod:`.simulation`) and :func:`sweep`
(:mod:`.sweeps`), mixed-precision :func:`search` (:mod:`.mixed_precision`), every node at every accumulator width
(:func:`node_sweep`, :mod:`.width_sweep`), and overflow-aware QAT, training for a target's datapath
(:func:`datapath_aware`, :mod:`.qat`); a P-bit accumulator guaranteed for any integer graph by re-rounding
(:func:`guarantee_accumulator`, :mod:`.accumulator_guarantee`), float / block-scaled targets
(:func:`simulate_float`, :mod:`.float_datapath`) and hls4ml configurations (:mod:`.hls4ml_config`)."""
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
from .accumulator_guarantee import AccumulatorGuarantee, guarantee_accumulator  # noqa: F401
from .float_datapath import FloatReport, simulate_float  # noqa: F401
from .hls4ml_config import apply_hls4ml_config, hls4ml_hardware_config, load_hls4ml_config  # noqa: F401

__all__ = list(dict.fromkeys(list(config.__all__) + list(conversion.__all__) + list(simulation.__all__)
                             + list(sweeps.__all__) + list(mixed_precision.__all__)
                             + list(width_sweep.__all__) + list(qat.__all__)
                             + list(_widths_module.__all__)
                             + ["guarantee_accumulator", "AccumulatorGuarantee", "simulate_float", "FloatReport",
                                "load_hls4ml_config", "apply_hls4ml_config", "hls4ml_hardware_config"]))

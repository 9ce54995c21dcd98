"""Quantizers: TF/PyTorch-exact fake quantization (:mod:`.fake_quant`), the quantizer protocol
(:mod:`.base`), affine and low-bit quantizer classes with STE gradients (:mod:`.affine`, :mod:`.lowbit`),
the registry (:mod:`.registry`) and range observers (:mod:`.observers`)."""
from . import accumulator_aware, fake_quant, observers, registry
from .accumulator_aware import *  # noqa: F401,F403
from .fake_quant import *  # noqa: F401,F403
from .observers import *  # noqa: F401,F403
from .registry import *  # noqa: F401,F403

__all__ = (list(fake_quant.__all__) + list(registry.__all__) + list(observers.__all__)
           + list(accumulator_aware.__all__))

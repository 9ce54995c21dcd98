"""Layers with forward and backward side by side (:mod:`.module`, :mod:`.dense`, :mod:`.activations`,
:mod:`.conv`, :mod:`.fold`, :mod:`.layers`), the training loop (:mod:`.train`) and the digits data set
(:mod:`.datasets`).

``from fxpsim import nn`` gives the layers and model builders (``nn.Dense``, ``nn.small_cnn``, ...)."""
from . import datasets, layers, train
from .datasets import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .module import FusedActivation, LinearLayer  # noqa: F401
from .train import *  # noqa: F401,F403

__all__ = (list(layers.__all__) + ["LinearLayer", "FusedActivation"] + list(train.__all__) + list(datasets.__all__))

"""hls4ml's arithmetic: the ``ap_fixed`` / ``ap_int`` types of its layers (:mod:`.ap_types`) and its layer
kernels on them (:mod:`.layers`: the io_parallel Dense of ``nnet_dense_latency.h``, Conv2D, ReLU, linear)."""
from . import ap_types, layers  # noqa: F401
from .ap_types import ApType, parse_ap_type  # noqa: F401
from .layers import conv2d, dense, linear, relu  # noqa: F401

__all__ = ["ApType", "parse_ap_type", "dense", "conv2d", "relu", "linear"]

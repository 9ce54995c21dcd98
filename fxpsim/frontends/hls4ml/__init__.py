"""hls4ml (the FPGA flow): a network described by hls4ml's resolved layer table — each layer's class and its
``ap_fixed`` ``weight_t`` / ``bias_t`` / ``accum_t`` / ``result_t`` — with its weights, run bit-exact with hls4ml's
C simulation (:mod:`.model`, :class:`Hls4mlModel`; :mod:`.reader` reads a compiled hls4ml model; the arithmetic is
:mod:`fxpsim.datapath.hls4ml`).  :meth:`Hls4mlModel.to_graph` makes it an :class:`~fxpsim.graph.IntegerGraph` of the
ops in :mod:`.ops` (:mod:`.graph`); :mod:`.float_layers` reads the float network of another graph or an
``fxpsim.nn`` model, to which :mod:`fxpsim.hardware.hls4ml_config` applies an hls4ml configuration."""
from .model import Hls4mlModel  # noqa: F401

__all__ = ["Hls4mlModel"]

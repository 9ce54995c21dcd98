"""The run-time knobs of an integer datapath a graph runs on (:class:`Datapath`, the exact reference
:data:`EXACT_DATAPATH`), and :func:`node_datapath`, which picks one node's settings when they have per-node
overrides. :class:`fxpsim.HardwareConfig` carries the same fields and can stand wherever a ``Datapath`` is
expected.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Datapath", "EXACT_DATAPATH", "node_datapath"]


@dataclass(frozen=True)
class Datapath:
    """The run-time knobs of an integer datapath (the fields of the same name in
    :class:`fxpsim.HardwareConfig`, which can be passed wherever a ``Datapath`` is expected).

    The default is the exact reference datapath: a 32-bit accumulator that wraps as int32 C arithmetic
    does (no int8 network reaches it), TFLite's double-rounding requantization. ``requantization =
    "native"`` means the arithmetic of the runtime an imported graph came from (its ops define it).
    """

    name: str = "exact-int32"
    accumulator_bits: int = 32
    accumulator_overflow: str = "wrap"
    accumulator_order: str = "sequential"
    overflow_at: str = "add"
    bias_add: str = "after"
    requantization: str = "tflite-double"
    dense_requantization: str | None = None
    rounding: str = "half_up"
    activation_clamp: bool = True


EXACT_DATAPATH = Datapath()
_DATAPATH_FIELDS = tuple(Datapath.__dataclass_fields__)


def node_datapath(datapath, node: "Node", index: int):
    """The datapath settings of one node: ``datapath.for_node(node, index)`` when the settings have per-node
    overrides (:meth:`fxpsim.HardwareConfig.for_node`), otherwise ``datapath`` itself."""
    for_node = getattr(datapath, "for_node", None)
    return for_node(node, index) if for_node is not None else datapath

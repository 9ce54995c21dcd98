"""Attribute readers shared by the QONNX ops (:mod:`.ops`) and their compiled-plan steps (:mod:`.steps`)."""
from __future__ import annotations

import numpy as np

from ...core.fixed import Format, Overflow

__all__ = ["attr_array", "acc_setup", "conv_geometry"]


def attr_array(value, dtype=None) -> np.ndarray:
    """An attribute array with a batch axis in front (attributes broadcast against the per-sample shape)."""
    a = np.asarray(value, dtype=dtype if dtype is not None else None)
    if a.dtype.kind == "O" or (a.dtype.kind in "iu" and dtype is None):
        a = np.asarray(value, dtype=object) if any(abs(int(v)) >= 1 << 62 for v in a.ravel()) else a.astype(np.int64)
    return a[None] if a.ndim else a


def acc_setup(graph, node, dp):
    spec = graph.tensors[node.outputs[0]]
    if getattr(dp, "requantization", None) == "native":
        return dict(acc=Format.integer(max(spec.bits + (0 if spec.signed else 1), 2)), overflow="saturate", order="sequential",
                    overflow_at="every")
    ovf = dp.accumulator_overflow
    return dict(acc=Format.integer(min(int(dp.accumulator_bits), 64)),
                overflow=ovf.value if isinstance(ovf, Overflow) else str(ovf),
                order=dp.accumulator_order, overflow_at="end" if getattr(dp, "overflow_at", "add") == "end" else "every")


def conv_geometry(node):
    a = node.attrs
    pads = [int(p) for p in a["pads"]]
    return ((pads[0], pads[2]), (pads[1], pads[3])), tuple(a["strides"]), tuple(a["dilations"]), int(a["group"])

"""TFLite graph ops that move int8 codes without arithmetic: ``tflite_strided_slice`` (STRIDED_SLICE on run-time
data) and ``tflite_split`` (SPLIT / SPLIT_V: ``axis`` per sample, ``sizes``, one output per part). The slice is resolved at import into one ``[start, stop, step]`` per sample axis (TFLite's masks and
clamping applied, :meth:`slice.indices` semantics) and a list of axes removed (``shrink_axis_mask``); codes, scale
and zero point pass through unchanged (TFLite requires equal input and output quantization)."""
from __future__ import annotations

import numpy as np

from ...graph.ops import Op, register_op
from .op_support import _code_move_check, _no_trace, _q, _spec


def _index(node):
    # slice.indices() gives stop = -1 for a negative step that runs to the front: ``None`` as a slice bound
    sl = tuple(slice(int(a), None if int(b) < 0 else int(b), int(c)) for a, b, c in node.attrs["slices"])
    return (slice(None),) + sl


def _shrink(node, v):
    axes = tuple(int(a) + 1 for a in node.attrs.get("shrink", []))
    return v.reshape(tuple(d for i, d in enumerate(v.shape) if i not in axes)) if axes else v


def _strided_slice_run(graph, node, ins, dp, trace):
    return [np.ascontiguousarray(_shrink(node, ins[0][_index(node)]))], _no_trace()


def _strided_slice_float(graph, node, ins):
    return [_shrink(node, ins[0][_index(node)])]


def _strided_slice_check(graph, node):
    x, y = _code_move_check(graph, node, "slices", "one [start, stop, step]")
    probe = np.empty((1,) + tuple(x.shape), np.int8)
    got = _shrink(node, probe[_index(node)]).shape[1:]
    if tuple(got) != tuple(y.shape):
        raise ValueError(f"node {node.name!r} (tflite_strided_slice): the slice gives shape {list(got)}, the output "
                         f"is {list(y.shape)}")


register_op(Op("tflite_strided_slice", _strided_slice_run, _strided_slice_float, _strided_slice_check))


def _split_run(graph, node, ins, dp, trace):
    edges = np.cumsum(node.attrs["sizes"])[:-1]
    return [np.ascontiguousarray(p) for p in np.split(ins[0], edges, axis=int(node.attrs["axis"]) + 1)], _no_trace()


def _split_float(graph, node, ins):
    return _split_run(graph, node, ins, None, False)[0]


def _split_check(graph, node):
    ins = [t for t in node.inputs if t]
    sizes = node.attrs.get("sizes", [])
    if len(ins) != 1 or len(node.outputs) != len(sizes) or not sizes:
        raise ValueError(f"node {node.name!r} (tflite_split): needs 1 input and one output per size {sizes}")
    x = _spec(graph, ins[0])
    a = int(node.attrs.get("axis", -1))
    if not 0 <= a < len(x.shape) or sum(sizes) != x.shape[a]:
        raise ValueError(f"node {node.name!r} (tflite_split): sizes {sizes} do not split axis {a} of {list(x.shape)}")
    for t, n in zip(node.outputs, sizes):
        y = _spec(graph, t)
        want = list(x.shape)
        want[a] = n
        if list(y.shape) != want or _q(y) != _q(x):
            raise ValueError(f"node {node.name!r} (tflite_split): output {t!r} must have shape {want} and the "
                             f"input's scale and zero point")


register_op(Op("tflite_split", _split_run, _split_float, _split_check))

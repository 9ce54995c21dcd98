r"""``onnx_move``: data movement of quantized codes without arithmetic (Transpose, Slice, Split, Gather, Pad,
Squeeze / Unsqueeze and nearest Resize of ONNX models), registered when :mod:`fxpsim.frontends.onnx.ops` is
imported.

Every such op sends each output element to one input element, or to a constant (padding). The node holds the
ONNX op as a list of ``steps`` on the **ONNX per-sample layout** (the batch axis excluded), and the op turns it,
once per graph, into one index per output element:

.. math:: y[n, i] = \begin{cases} x[n, m_i] & m_i \ge 0 \\ c_{pad} & m_i = -1 \end{cases}

with :math:`x` and :math:`y` flattened per sample in the graph's layout (images NHWC) and :math:`m` the steps
applied to the flat positions ``arange`` of the input (``in_perm``: the graph layout to ONNX's, ``out_perm``:
ONNX's to the graph's). Steps:

* ``{"op": "transpose", "perm": [...]}``;
* ``{"op": "take", "axis": a, "indices": [...] (nested lists), }`` -- numpy ``take`` (Gather; Slice, Split
  and nearest Resize as one ``take`` per axis with the positions they read);
* ``{"op": "pad", "pads": [[before, after], ...], "mode": "constant" | "edge" | "reflect"}`` (non-negative);
* ``{"op": "reshape", "shape": [...]}`` (Squeeze / Unsqueeze).

Codes, scale and zero point pass through unchanged (the input and output quantization are equal; the importer
requantizes around the move where onnxruntime's Q / DQ parameters differ), so the op is exact on every
datapath: onnxruntime moves the codes, or moves the dequantized floats and quantizes them back with the same
parameters, which gives the same codes (:math:`Q(DQ(c)) = c`). ``pad_code``: the code at ``-1`` positions.

``in_batch`` / ``out_batch`` (a model whose shapes are all static, e.g. batch 1): the steps act on the **whole**
ONNX tensor, batch axis included, which they may move (torch's attention transposes the batch of 1 inside the
layer); the input must have ``in_batch`` rows and the output has ``out_batch``.
"""
from __future__ import annotations

import numpy as np

from ...graph.ops import Op
from .op_support import _no_trace, _quantized_io, _scale, _spec, _zp, register_op

__all__ = ["apply_steps", "move_index"]

STEP_OPS = ("transpose", "take", "pad", "reshape")


def apply_steps(arr: np.ndarray, steps) -> np.ndarray:
    """``arr`` (one sample, ONNX layout) moved by ``steps``; constant padding writes -1 (``arr`` holds
    non-negative positions). Raises ValueError for a malformed step."""
    for st in steps:
        op = st.get("op") if isinstance(st, dict) else None
        if op == "transpose":
            perm = [int(p) for p in st["perm"]]
            if sorted(perm) != list(range(arr.ndim)):
                raise ValueError(f"transpose perm {perm} is not a permutation of {arr.ndim} axes")
            arr = np.transpose(arr, perm)
        elif op == "take":
            axis = int(st["axis"])
            idx = np.asarray(st["indices"], np.int64)
            if not 0 <= axis < arr.ndim:
                raise ValueError(f"take axis {axis} outside the {arr.ndim} axes")
            if idx.size and (idx.min() < 0 or idx.max() >= arr.shape[axis]):
                raise ValueError(f"take indices outside 0..{arr.shape[axis] - 1} on axis {axis}")
            arr = np.take(arr, idx, axis=axis)
        elif op == "pad":
            pads = [(int(a), int(b)) for a, b in st["pads"]]
            mode = st.get("mode", "constant")
            if len(pads) != arr.ndim or min(min(p) for p in pads) < 0:
                raise ValueError(f"pad needs one non-negative [before, after] per axis of {arr.ndim}, got {pads}")
            if mode == "constant":
                arr = np.pad(arr, pads, constant_values=-1)
            elif mode in ("edge", "reflect"):
                for ax, (a, b) in enumerate(pads):
                    if (a or b) and (arr.shape[ax] == 0 or (mode == "reflect" and max(a, b) >= arr.shape[ax])):
                        raise ValueError(f"{mode} padding of {max(a, b)} on an axis of {arr.shape[ax]}")
                arr = np.pad(arr, pads, mode=mode)
            else:
                raise ValueError(f"pad mode {mode!r} is not constant, edge or reflect")
        elif op == "reshape":
            shape = tuple(int(d) for d in st["shape"])
            if int(np.prod(shape)) != arr.size:
                raise ValueError(f"cannot reshape {list(arr.shape)} to {list(shape)}")
            arr = arr.reshape(shape)
        else:
            raise ValueError(f"move step {st!r} is not one of {STEP_OPS}")
    return arr


def _onnx_shape(graph_shape, perm):
    return tuple(graph_shape[p] for p in perm) if perm else tuple(graph_shape)


def move_index(graph, node) -> np.ndarray:
    """The node's flat per-sample index map (output position -> input position, -1 for padding), cached."""
    cache = graph.__dict__.setdefault("_onnx_move_index", {})
    if node.name not in cache:
        x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
        in_perm, out_perm = node.attrs.get("in_perm"), node.attrs.get("out_perm")
        whole = _whole(node)
        lead = (whole[0],) if whole else ()
        pos = np.arange(int(np.prod(lead + tuple(x.shape))), dtype=np.int64).reshape(lead + tuple(x.shape))
        k = len(lead)
        if in_perm:
            pos = np.transpose(pos, list(range(k)) + [int(p) + k for p in in_perm])
        pos = apply_steps(pos, node.attrs["steps"])
        if out_perm:
            pos = np.transpose(pos, list(range(k)) + [int(p) + k for p in out_perm])
        want = ((whole[1],) if whole else ()) + tuple(y.shape)
        if tuple(pos.shape) != want:
            raise ValueError(f"node {node.name!r} (onnx_move): the steps give shape {list(pos.shape)}, the output "
                             f"is {list(want)}")
        cache[node.name] = np.ascontiguousarray(pos).reshape(-1)
    return cache[node.name]


def _whole(node):
    """(input batch, output batch) of a move over the whole tensor of a model with static shapes (``in_batch``
    / ``out_batch``: the ONNX batch axis moves, so the steps act on every axis), else None."""
    if "in_batch" not in node.attrs:
        return None
    return int(node.attrs["in_batch"]), int(node.attrs["out_batch"])


def _gather(graph, node, x, fill):
    idx = move_index(graph, node)
    y = _spec(graph, node.outputs[0])
    whole = _whole(node)
    if whole:
        if len(x) != whole[0]:
            raise ValueError(f"node {node.name!r} (onnx_move): the model's shapes are static, with a batch of "
                             f"{whole[0]} here; got {len(x)}")
        flat = np.asarray(x).reshape(1, -1)
        out = flat[:, np.maximum(idx, 0)]
        return out.reshape((whole[1],) + tuple(y.shape))
    flat = np.asarray(x).reshape(len(x), -1)
    out = flat[:, np.maximum(idx, 0)]
    if np.any(idx < 0):
        out[:, idx < 0] = fill
    return out.reshape((len(x),) + tuple(y.shape))


def _move_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    return [np.ascontiguousarray(_gather(graph, node, ins[0], node.attrs.get("pad_code", 0))).astype(y.dtype)], \
        _no_trace()


def _move_float(graph, node, ins):
    y = _spec(graph, node.outputs[0])
    fill = (int(node.attrs.get("pad_code", 0)) - _zp(y)) * _scale(y)
    return [_gather(graph, node, np.asarray(ins[0], np.float64), fill)]


def _check_move(graph, node):
    if len([t for t in node.inputs if t]) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (onnx_move): needs one input and one output")
    _quantized_io(graph, node, node.inputs + node.outputs)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    if (x.bits, x.signed, _scale(x), _zp(x)) != (y.bits, y.signed, _scale(y), _zp(y)):
        raise ValueError(f"node {node.name!r} (onnx_move): input and output need the same type, scale and zero "
                         "point (the op copies codes)")
    steps = node.attrs.get("steps")
    if not isinstance(steps, (list, tuple)):
        raise ValueError(f"node {node.name!r} (onnx_move): 'steps' must be a list of steps")
    for key, shape in (("in_perm", x.shape), ("out_perm", y.shape)):
        p = node.attrs.get(key)
        if p and sorted(int(a) for a in p) != list(range(len(shape))):
            raise ValueError(f"node {node.name!r} (onnx_move): {key} {p!r} is not a permutation of {len(shape)} axes")
    lo, hi = y.code_range
    if not lo <= int(node.attrs.get("pad_code", 0)) <= hi:
        raise ValueError(f"node {node.name!r} (onnx_move): pad_code {node.attrs.get('pad_code')} outside "
                         f"[{lo}, {hi}]")
    try:
        move_index(graph, node)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"node {node.name!r} (onnx_move): {exc}") from None


register_op(Op("onnx_move", _move_run, _move_float, _check_move))

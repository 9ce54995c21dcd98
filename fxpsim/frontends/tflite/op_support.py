"""What the TFLite graph ops (:mod:`fxpsim.frontends.tflite.ops`) share: the readers of a node's tensors and of the
graph's kernel set, the per-node cache of the parameters TFLite derives in an op's ``Prepare``, the call of a
LiteRT kernel that refuses an unreproduced kernel set with a clear error, the float reference of the fused
activations, and the node check of inputs and outputs."""
from __future__ import annotations

import numpy as np


def _spec(graph, name):
    return graph.tensors[name]


def _kernels(graph) -> str:
    return graph.meta.get("kernels", "reference") if isinstance(graph.meta, dict) else "reference"


def _q(spec):
    """(float32 scale, int zero point) of a per-tensor quantized tensor."""
    return np.float32(spec.scale[0]), int(spec.zero_point[0])


def _no_trace(clipped: int = 0) -> dict:
    return {"overflows": 0, "adds": 0, "clipped": clipped, "acc": None}


def _cached(graph, node, key, make):
    cache = graph.__dict__.setdefault("_tflite_params", {})
    k = (node.name, key)
    v = cache.get(k)
    if v is None:
        v = cache[k] = make()
    return v


def _float_activation(y, activation):
    if not activation or activation == "none":
        return y
    lo, hi = {"relu": (0.0, np.inf), "relu6": (0.0, 6.0), "relu_n1_to_1": (-1.0, 1.0)}[activation]
    return np.clip(y, lo, hi)


def _unavailable(node, kernels, exc):
    return ValueError(f"node {node.name!r} ({node.attrs.get('tflite_op', node.op)}): LiteRT's "
                      f"kernels={kernels!r} arithmetic is not reproduced by fxpsim ({exc})")


def _call(node, kernel_set, fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except NotImplementedError as exc:
        raise _unavailable(node, kernel_set, exc) from None


def _check_io(n_in: int | tuple, n_out: int = 1, quantized_in=True, quantized_out=True):
    counts = (n_in,) if isinstance(n_in, int) else n_in

    def check(graph, node):
        ins = [t for t in node.inputs if t]
        if (counts[0] >= 0 and len(ins) not in counts) or len(node.outputs) != n_out:
            raise ValueError(f"node {node.name!r} ({node.op}): needs {' or '.join(map(str, counts))} input(s) and "
                             f"{n_out} output(s)")
        for t in (ins if quantized_in else []) + (list(node.outputs) if quantized_out else []):
            s = _spec(graph, t)
            if s.is_float or s.scale is None or s.per_channel:
                raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} needs integer codes with one "
                                 f"scale and zero point")
    return check


def _identity_float(graph, node, ins):
    return [ins[0]]


def _code_move_check(graph, node, attr: str, what: str):
    """The checks of an op that moves codes (PAD, STRIDED_SLICE): one input and output of the same scale and
    zero point, and ``attrs[attr]`` holding one ``what`` per per-sample axis. Returns (x, y) specs."""
    _check_io(1)(graph, node)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    op = node.attrs.get("tflite_op", node.op)
    if _q(x) != _q(y):
        raise ValueError(f"node {node.name!r} ({node.op}): input and output need the same scale and zero point "
                         f"(TFLite's quantized {op} copies codes)")
    if len(node.attrs.get(attr, [])) != len(x.shape):
        raise ValueError(f"node {node.name!r} ({node.op}): needs {what} per axis of {list(x.shape)}")
    return x, y


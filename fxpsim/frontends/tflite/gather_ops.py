"""TFLite graph ops that reorder int8 codes: ``tflite_gather`` (GATHER; TRANSPOSE imports as the core
``transpose``); and ``tflite_batch_matmul`` (int8 BATCH_MATMUL with ``adj_x``/``adj_y``: LiteRT's own int32 dot product and
requantization -- gemmlowp's, or XNNPACK's float32 one under ``kernels="xnnpack"`` where its delegate takes the op --
:func:`fxpsim.datapath.tflite.quantized_batch_matmul`, like MEAN not the datapath's accumulator;
a run-time operand has the output's rank, a constant keeps its TFLite shape and broadcasts).

``tflite_gather`` holds TFLite's own ``axis`` and ``batch_dims`` (of the batch-1 TFLite tensors, resolved to
non-negative values at import). Its params and indices are each either a graph constant (TFLite shape, batch
axis included where the model has one) or a run-time tensor (the graph's batch on axis 0 standing for TFLite's
batch of 1); every sample is gathered as LiteRT gathers it in one invoke (:func:`_gather`).  Indices out of
range, known at import or met at run time, raise ``ValueError`` naming the node (LiteRT fails the invoke).
Codes, scale and zero point pass through (TFLite's quantized GATHER copies codes; the importer requires equal
quantization in and out)."""
from __future__ import annotations

import numpy as np

from ...datapath import tflite as K
from ...graph.ops import Op, register_op
from .op_support import _cached, _call, _check_io, _kernels, _no_trace, _q, _spec


def _gather(graph, node, params, indices):
    """One gather of a batch: ``params``/``indices`` as run (constants in their TFLite shape)."""
    pc, ic = (_spec(graph, t).is_constant for t in node.inputs[:2])
    a, b = int(node.attrs["axis"]), int(node.attrs["batch_dims"])
    i = np.asarray(indices)
    i = i.astype(np.int64) if i.dtype.kind == "f" else i
    try:
        if not pc and not ic:                        # the sample axis is a batch axis of both
            return K.gather_tflite(params, i if b else i[:, None], a, max(b, 1))
        if not pc:                                   # run-time params, constant indices
            if b:
                i = np.broadcast_to(i, (len(params),) + i.shape[1:])
            return K.gather_tflite(params, i, a, b)
        if b:                                        # constant params (batch axis of 1), run-time indices
            return K.gather_tflite(np.broadcast_to(params, (len(i),) + params.shape[1:]), i, a, b)
        out = np.moveaxis(K.gather_tflite(params, i[:, None], a, 0), a, 0)
        return np.ascontiguousarray(out.reshape(out.shape[:1] + out.shape[2:]))     # TFLite's batch axis of 1
    except ValueError as exc:
        raise ValueError(f"node {node.name!r} (tflite_gather): {exc}") from None


def _gather_run(graph, node, ins, dp, trace):
    return [_gather(graph, node, ins[0], ins[1])], _no_trace()


def _gather_float(graph, node, ins):
    return [_gather(graph, node, ins[0], ins[1])]


def _gather_check(graph, node):
    ins = [t for t in node.inputs if t]
    if len(ins) != 2 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (tflite_gather): needs params, indices and one output")
    p, i, y = _spec(graph, ins[0]), _spec(graph, ins[1]), _spec(graph, node.outputs[0])
    if p.is_float or p.scale is None or p.per_channel or y.scale is None or _q(p) != _q(y):
        raise ValueError(f"node {node.name!r} (tflite_gather): params and output need integer codes with the same "
                         f"scale and zero point (TFLite's quantized GATHER copies codes)")
    if i.is_float or i.scale is not None:
        raise ValueError(f"node {node.name!r} (tflite_gather): the indices must be plain integers")
    if p.is_constant and i.is_constant:
        raise ValueError(f"node {node.name!r} (tflite_gather): constant params and indices (folded at import)")
    for key in ("axis", "batch_dims"):
        v = node.attrs.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"node {node.name!r} (tflite_gather): {key} must be a non-negative int, got {v!r}")
    probe = [np.zeros((1,) + s.shape if not s.is_constant else s.shape, s.dtype) for s in (p, i)]
    got = _gather(graph, node, *probe).shape[1:]
    if tuple(got) != tuple(y.shape):
        raise ValueError(f"node {node.name!r} (tflite_gather): the gather gives per-sample shape {list(got)}, the "
                         f"output is {list(y.shape)}")


register_op(Op("tflite_gather", _gather_run, _gather_float, _gather_check))




def _bmm_params(graph, node):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    return _cached(graph, node, "batch_matmul", lambda: K.batch_matmul_params(*_q(a), *_q(b), *_q(y), dtype=y.dtype))


def _batch_matmul_run(graph, node, ins, dp, trace):
    kern = _kernels(graph)
    a, b = ins
    out = _call(node, kern, K.quantized_batch_matmul, a, b, _bmm_params(graph, node),
                adj_x=bool(node.attrs.get("adj_x")), adj_y=bool(node.attrs.get("adj_y")), kernels=kern)
    return [out], _no_trace()


def _batch_matmul_float(graph, node, ins):
    a, b = ins
    a = np.swapaxes(a, -1, -2) if node.attrs.get("adj_x") else a
    b = np.swapaxes(b, -1, -2) if node.attrs.get("adj_y") else b
    return [np.matmul(a, b)]


def _batch_matmul_check(graph, node):
    _check_io(2)(graph, node)
    specs = [_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0])]
    if all(s.is_constant for s in specs[:2]):
        raise ValueError(f"node {node.name!r} (tflite_batch_matmul): both operands are constants")
    probe = [np.zeros(s.shape if s.is_constant else (1,) + s.shape, np.int8) for s in specs[:2]]
    got = _batch_matmul_float(graph, node, probe)[0].shape
    if tuple(got) != (1,) + tuple(specs[2].shape):
        raise ValueError(f"node {node.name!r} (tflite_batch_matmul): the operands give {list(got)}, the output is "
                         f"{[1] + list(specs[2].shape)}")


register_op(Op("tflite_batch_matmul", _batch_matmul_run, _batch_matmul_float, _batch_matmul_check))

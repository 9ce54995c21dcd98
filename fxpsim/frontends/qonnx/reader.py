"""Read a QONNX model (an ONNX file with qonnx's custom ops) into plain Python / numpy values: its nodes in
topological order with their attributes, its initializers and ``Constant`` outputs, its inputs (name and
shape) and outputs. A malformed file raises ``ValueError`` naming the file and the damage."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..onnx.nodes import _ONode

__all__ = ["QONNX_CUSTOM_OPS", "QModel", "QNode", "read_qonnx", "is_qonnx"]

#: The qonnx custom ops (any domain: ``qonnx.custom_op.general``, ``onnx.brevitas``, ``finn.custom_op.general``).
QONNX_CUSTOM_OPS = ("Quant", "IntQuant", "BipolarQuant", "FloatQuant", "Trunc", "MultiThreshold")


def _require_onnx():
    try:
        import onnx  # noqa: F401
        from onnx import helper, numpy_helper  # noqa: F401
    except ImportError as exc:
        raise ImportError("fxpsim.import_qonnx needs the 'onnx' package: pip install -e '.[qonnx]' from the clone") from exc
    return onnx


#: a model node: the ONNX reader's record (op, domain, name, inputs, outputs, attrs), one for both readers
QNode = _ONode


@dataclass
class QModel:
    path: str
    nodes: list
    consts: dict
    inputs: list          # [(name, shape with None for symbolic dims)]
    outputs: list
    opset: int = 0


def _load(path_or_model):
    onnx = _require_onnx()
    if isinstance(path_or_model, (str, os.PathLike)):
        path = os.fspath(path_or_model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such file")
        try:
            return onnx.load(path), path
        except Exception as exc:  # noqa: BLE001 (protobuf decode errors)
            raise ValueError(f"{path}: not a readable ONNX file ({type(exc).__name__}: {exc})") from None
    return path_or_model, "<model>"


def is_qonnx(path) -> bool:
    """Whether the ONNX file at ``path`` holds at least one qonnx custom op (:data:`QONNX_CUSTOM_OPS`)."""
    try:
        model, _ = _load(path)
    except (ValueError, ImportError):
        return False
    return any(n.op_type in QONNX_CUSTOM_OPS and n.domain not in ("", "ai.onnx") for n in model.graph.node)


def read_qonnx(path_or_model) -> QModel:
    """Parse a QONNX file (or an ``onnx.ModelProto``) into a :class:`QModel`."""
    model, path = _load(path_or_model)
    from onnx import helper, numpy_helper
    g = model.graph
    opset = next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)
    consts = {}
    for init in g.initializer:
        try:
            consts[init.name] = numpy_helper.to_array(init)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{path}: initializer {init.name!r} cannot be read ({exc})") from None
    inputs = []
    for vi in g.input:
        if vi.name in consts:
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise ValueError(f"{path}: graph input {vi.name!r} has no shape")
        inputs.append((vi.name, tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)))
    nodes = []
    for i, n in enumerate(g.node):
        attrs = {}
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            attrs[a.name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        name = n.name or f"{n.op_type}_{i}"
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            if "value" not in attrs:
                raise ValueError(f"{path}: Constant node {name!r} without a 'value' tensor is not supported")
            consts[n.output[0]] = numpy_helper.to_array(attrs["value"])
            continue
        nodes.append(QNode(n.op_type, "" if n.domain == "ai.onnx" else n.domain, name, list(n.input),
                           list(n.output), attrs))
    seen = {}
    for n in nodes:
        if n.name in seen:
            n.name = f"{n.name}_{len(seen)}"
        seen[n.name] = n
    if not nodes:
        raise ValueError(f"{path}: the ONNX graph has no nodes")
    return QModel(path, _toposort(nodes, {name for name, _ in inputs} | set(consts), path), consts, inputs,
                  [o.name for o in g.output], opset)


def _toposort(nodes, ready, path):
    ready = set(ready) | {""}
    order, pending = [], list(nodes)
    while pending:
        rest = [n for n in pending if not all(t in ready for t in n.inputs)]
        done = [n for n in pending if all(t in ready for t in n.inputs)]
        if not done:
            missing = sorted({t for n in rest for t in n.inputs if t not in ready})
            raise ValueError(f"{path}: the graph has a cycle or reads tensors nothing defines: {missing[:5]}")
        for n in done:
            order.append(n)
            ready.update(n.outputs)
        pending = rest
    return order


def const_array(value) -> np.ndarray:
    return np.asarray(value)

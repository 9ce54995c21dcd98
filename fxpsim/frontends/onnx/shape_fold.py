"""Shape subgraphs folded to constants before an ONNX model is imported (:func:`fold_static_shapes`), as exporters
leave them: torch's TorchScript exporter computes the head reshapes of its attention at run time, ``Shape`` of an
activation, then ``Gather`` / ``Slice`` of its extents, ``Mod`` / ``Div`` / ``Mul`` / ``Add`` on them,
``Unsqueeze`` and ``Concat`` into the target of a ``Reshape``; and the score scale as ``Cast`` / ``Sqrt`` / ``Div``
of an extent, quantized by a ``QuantizeLinear``.

A node folds when every input is a constant (an initializer, a ``Constant`` or a folded node), or when it is a
``Shape`` of a tensor whose shape ONNX shape inference gives in full (every extent a number: a model with a
static batch); a ``Gather`` of such a ``Shape`` folds where it picks numbered extents only (the sequence length and
width of a model with a dynamic batch). Folded values follow ONNX's definitions in numpy: integer ``Div`` truncates toward zero (as
onnxruntime's C++ kernel), ``Mod`` with ``fmod=0`` takes the sign of the divisor, float32 ``Sqrt`` / ``Div`` /
``Mul`` / ``Add`` / ``Sub`` are IEEE operations rounded once (what onnxruntime's own constant folding computes),
``Cast`` to float32 rounds to nearest, ``QuantizeLinear`` of a constant is MLAS's
(:func:`fxpsim.datapath.onnxruntime.mlas.quantize_linear`). ``DequantizeLinear`` of a constant is kept (onnxruntime keeps
it for its QDQ fusions), but its value (MLAS's dequantization) folds the nodes that read it: a weight torch shares
between two layers (an ``Identity``), quantized a second time by ``quantize_static``. A node whose output the graph returns
is never folded. After folding, ``value_info`` is replaced by ONNX shape inference of the folded model, which
the importer reads for the moves of a static batch axis (:mod:`fxpsim.frontends.onnx.moves`). A ``Shape`` with a
dynamic extent (a batch axis named, not numbered) stays, and the importer names it as unsupported.
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import mlas as K

__all__ = ["fold_static_shapes", "FOLDED_OPS"]

#: The ops folded when their inputs are constants (``Shape``: when its input's shape is static).
FOLDED_OPS = ("Shape", "Gather", "Slice", "Mod", "Div", "Mul", "Add", "Sub", "Unsqueeze", "Squeeze", "Concat",
              "Reshape", "Cast", "Sqrt", "Identity", "QuantizeLinear")


def _attrs(helper, node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _axes(node, attrs, vals, opset):
    if opset >= 13 and len(node.input) > 1 and node.input[1]:
        return [int(a) for a in vals[1].reshape(-1)]
    return [int(a) for a in attrs.get("axes", [])]


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        if np.any(b == 0):
            raise ValueError("an integer division by zero")
        q = np.abs(a) // np.abs(b)
        return (np.sign(a) * np.sign(b) * q).astype(a.dtype)
    return (a / b).astype(a.dtype)


def _mod(a, b, fmod):
    if np.issubdtype(a.dtype, np.integer) and np.any(b == 0):
        raise ValueError("an integer Mod by zero")
    return (np.fmod(a, b) if fmod else np.mod(a, b)).astype(a.dtype)


def _slice(x, vals, node, attrs, opset):
    if opset >= 10:
        starts, ends = vals[1].reshape(-1), vals[2].reshape(-1)
        axes = vals[3].reshape(-1) if len(vals) > 3 and vals[3] is not None else np.arange(len(starts))
        steps = vals[4].reshape(-1) if len(vals) > 4 and vals[4] is not None else np.ones(len(starts), np.int64)
    else:
        starts, ends = np.asarray(attrs["starts"]), np.asarray(attrs["ends"])
        axes = np.asarray(attrs.get("axes", range(len(starts))))
        steps = np.ones(len(starts), np.int64)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) + x.ndim if int(a) < 0 else int(a)
        n = x.shape[a]
        s, e, st = int(s), int(e), int(st)
        if st == 0:
            raise ValueError("a Slice step of 0")
        s = max(-1 if st < 0 else 0, min(n - 1 if st < 0 else n, s + n if s < 0 else s))
        e = max(-1 if st < 0 else 0, min(n - 1 if st < 0 else n, e + n if e < 0 else e))
        index[a] = slice(s, None if (st < 0 and e < 0) else e, st)
    return x[tuple(index)]


_CASTS = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64, 9: np.bool_}


def _evaluate(node, vals, attrs, opset):
    op, x = node.op_type, vals[0]
    if op == "Identity":
        return x
    if op == "Gather":
        return np.take(x, vals[1].astype(np.int64), axis=int(attrs.get("axis", 0)))
    if op == "Slice":
        return _slice(x, vals, node, attrs, opset)
    if op in ("Add", "Sub", "Mul"):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
        return fn(x, vals[1]).astype(np.result_type(x, vals[1]))
    if op == "Div":
        return _div(x, vals[1])
    if op == "Mod":
        return _mod(x, vals[1], int(attrs.get("fmod", 0)))
    if op == "Unsqueeze":
        out = x
        axes = _axes(node, attrs, vals, opset)
        rank = x.ndim + len(axes)
        for a in sorted(int(a) + rank if a < 0 else int(a) for a in axes):
            out = np.expand_dims(out, a)
        return out
    if op == "Squeeze":
        axes = _axes(node, attrs, vals, opset)
        return np.squeeze(x, axis=tuple(axes)) if axes else np.squeeze(x)
    if op == "Concat":
        return np.concatenate([np.atleast_1d(v) for v in vals], axis=int(attrs["axis"]))
    if op == "Reshape":
        shape = [int(s) for s in vals[1].reshape(-1)]
        if not int(attrs.get("allowzero", 0)):
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return x.reshape(shape)
    if op == "Cast":
        to = int(attrs["to"])
        if to not in _CASTS:
            raise ValueError(f"a Cast to ONNX type {to}")
        return x.astype(_CASTS[to])
    if op == "Sqrt":
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"a Sqrt of {x.dtype}")
        return np.sqrt(x).astype(x.dtype)
    if op == "DequantizeLinear":
        zp = vals[2] if len(vals) > 2 and vals[2] is not None else np.array(0, x.dtype)
        if vals[1].size != 1 or zp.size != 1:
            raise ValueError("a per-axis DequantizeLinear of a constant that is quantized again")
        return K.dequantize_linear(x, np.float32(vals[1].reshape(())), int(zp.reshape(())))
    if op == "QuantizeLinear":
        zp = vals[2] if len(vals) > 2 and vals[2] is not None else np.array(0, np.uint8)
        if vals[1].size != 1 or zp.size != 1:
            raise ValueError("a per-axis QuantizeLinear of a constant")
        return K.quantize_linear(np.asarray(x, np.float32), np.float32(vals[1].reshape(())),
                                 int(zp.reshape(())), zp.dtype)
    raise AssertionError(op)


def _static_shapes(model):
    """Every tensor's shape as ONNX shape inference gives it (None for an extent it does not number)."""
    from onnx import shape_inference
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 (inference errors leave the Shape nodes to the importer)
        return {}
    shapes = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            shapes[vi.name] = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None
                                    for d in tt.shape.dim)
    return shapes


def _record_static_shapes(model):
    """Replace ``model.graph.value_info`` by the inferred shape of every tensor, after folding (the
    importer reads full static shapes from there: moves of the batch axis of a model of static shapes)."""
    from onnx import shape_inference
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001
        return
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)


def fold_static_shapes(model):
    """Fold the constant and static-shape subgraphs of ``model`` (an ``onnx.ModelProto``, changed in place and
    returned): each folded node becomes an initializer of its output. A node whose folding fails (a division by
    zero, an unsupported ``Cast``) raises a ValueError naming it."""
    from onnx import helper, numpy_helper
    g = model.graph
    opset = next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)
    if not any(n.op_type == "Shape" and n.domain in ("", "ai.onnx") for n in g.node):
        return model
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    outputs = {o.name for o in g.output}
    shapes = _static_shapes(model)
    keep, folded = [], []
    known = dict(consts)           # constants, and the values of the DequantizeLinear nodes of constants (kept)
    partial: dict = {}             # Shape outputs with a dynamic extent: the extents, None where dynamic
    for i, n in enumerate(g.node):
        if n.domain in ("", "ai.onnx") and n.op_type == "DequantizeLinear" and \
                all(not t or t in known for t in n.input):
            try:
                known[n.output[0]] = _evaluate(n, [known[t] if t else None for t in n.input], {}, opset)
            except ValueError:
                pass
            keep.append(n)
            continue
        if n.domain not in ("", "ai.onnx") or n.op_type not in FOLDED_OPS + ("Constant",) or \
                any(o in outputs for o in n.output) or len(n.output) != 1:
            keep.append(n)
            continue
        attrs = _attrs(helper, n)
        if n.op_type == "Constant":
            if "value" not in attrs:
                keep.append(n)
                continue
            value = numpy_helper.to_array(attrs["value"])
        elif n.op_type == "Shape":
            dims = shapes.get(n.input[0])
            if dims is None:
                keep.append(n)
                continue
            dims = list(dims)[int(attrs.get("start", 0)):attrs.get("end", None)]
            if None in dims:                     # a dynamic extent: only Gathers of the numbered ones fold
                partial[n.output[0]] = dims
                keep.append(n)
                continue
            value = np.array(dims, np.int64)
        elif n.op_type == "Gather" and n.input[0] in partial and n.input[1] in known:
            idx = np.asarray(known[n.input[1]]).astype(np.int64)
            dims = partial[n.input[0]]
            picked = [dims[int(i)] for i in idx.reshape(-1)]
            if None in picked:
                keep.append(n)
                continue
            value = np.array(picked, np.int64).reshape(idx.shape)
        elif all(not t or t in known for t in n.input):
            vals = [known[t] if t else None for t in n.input]
            try:
                value = np.asarray(_evaluate(n, vals, attrs, opset))
            except (ValueError, IndexError, KeyError, TypeError) as exc:
                raise ValueError(f"{n.op_type} node {n.name or f'{n.op_type}_{i}'!r}: cannot fold this constant subgraph ({exc})") from None
        else:
            keep.append(n)
            continue
        known[n.output[0]] = value
        folded.append(numpy_helper.from_array(np.asarray(value), n.output[0]))
    if folded:
        used = {t for n in keep for t in n.input} | outputs
        del g.node[:]
        g.node.extend(keep)
        g.initializer.extend(t for t in folded if t.name in used)
    _record_static_shapes(model)
    return model

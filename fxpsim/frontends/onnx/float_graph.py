"""A float (non-quantized) ONNX model read into a :class:`~fxpsim.graph.extract.FloatGraph`, to be run on a
float / block-scaled datapath (:func:`fxpsim.simulate` with a float target, :mod:`fxpsim.graph.float_run`).

The model must be a chain (every node reads the previous node's output; weights are initializers or
``Constant`` nodes) with identity residual connections (an ``Add`` of the previous node's output and an
earlier tensor of the same shape) of these ops, mapped onto the graph's stage kinds (images NHWC inside):

==========================================  =============================================================
ONNX                                        stage
==========================================  =============================================================
graph input [N, C, H, W]                    ``transpose`` (0, 2, 3, 1) to NHWC
``Conv`` (group 1)                          ``conv2d``: HWIO weight ``W.transpose(2, 3, 1, 0)``
``Conv`` (group = C, 1 input channel each)  ``depthwise_conv2d``: ``w[kh, kw, c, m] = W[cM + m, 0, kh, kw]``
``Gemm`` (transA 0, alpha = beta = 1)       ``dense``: ``B`` (``B^T`` with transB), bias ``C``
``MatMul`` [+ ``Add`` of a constant]        ``dense`` with that bias
``Add`` of two activations (a residual)     ``save`` of the earlier tensor where it is made, ``add`` here
``Relu``, ``Clip`` (0, 6) / (0, ∞)          fused into the MAC or ``add`` before it (or ``relu`` / ``relu6``)
``MaxPool``, ``AveragePool`` (no pads)      ``max_pool2d`` / ``avg_pool2d``, VALID
``GlobalAveragePool``                       ``avg_pool2d`` over the whole image
``Flatten`` (axis 1), ``Reshape`` [N, F]    ``transpose`` back to NCHW, then ``flatten`` (ONNX's order)
==========================================  =============================================================

Conv pads (``pads = [top, left, bottom, right]``) are kept as explicit zero pads; dilations, ``auto_pad``,
pooling pads, ``ceil_mode``, other groups and every other op are refused with a ValueError naming the
node.  The graph's activation ranges are not known until it is calibrated
(:func:`fxpsim.graph.float_run.calibrate_float_graph`, which :func:`fxpsim.simulate` does on its
``calibration_x``); the weights are the model's float32 values in float64 (exact).
"""
from __future__ import annotations

import numpy as np

from ...graph.extract import FloatGraph, FloatStage
from .coverage import read_model

__all__ = ["import_float_onnx", "quantized_ops", "FLOAT_ONNX_OPS"]

FLOAT_ONNX_OPS = ("Conv", "Gemm", "MatMul", "Add", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool",
                  "Flatten", "Reshape", "Constant")
_QUANTIZED = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
              "ConvInteger", "QGemm")
_MACS = ("dense", "conv2d", "depthwise_conv2d")


class _Chain:
    def __init__(self, model, path):
        from onnx import helper, numpy_helper
        self.helper, self.path = helper, path
        self.consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.stages: list[FloatStage] = []
        self.names: set = set()

    def fail(self, node, why):
        return ValueError(f"{self.path}: node {node.name or node.op_type!r} ({node.op_type}): {why}")

    def attrs(self, node) -> dict:
        return {a.name: self.helper.get_attribute_value(a) for a in node.attribute}

    def const(self, node, i, what):
        name = node.input[i] if len(node.input) > i else ""
        if name not in self.consts:
            raise self.fail(node, f"its {what} ({name!r}) must be a constant (an initializer or Constant node)")
        v = self.consts[name]
        if v.dtype.kind == "f" and v.dtype != np.float32:
            raise self.fail(node, f"its {what} is {v.dtype}; float32 models only")
        return np.asarray(v)

    def add(self, node, kind, suffix="", **kw) -> FloatStage:
        name = (node.name or f"{node.op_type}_{len(self.stages)}") + suffix
        while name in self.names:
            name += "_"
        self.names.add(name)
        stage = FloatStage(kind=kind, name=name, model_layers=(len(self.stages),), **kw)
        self.stages.append(stage)
        return stage


def _check_attrs(chain, node, allowed: dict):
    """Refuse every attribute outside ``allowed`` (name -> accepted default values)."""
    for key, value in chain.attrs(node).items():
        if key not in allowed:
            raise chain.fail(node, f"attribute {key} is not supported")
        ok = allowed[key]
        if ok is not None and (list(value) if isinstance(value, (list, tuple)) else value) not in ok:
            raise chain.fail(node, f"{key} = {value!r} is not supported (only {' or '.join(map(repr, ok))})")


def _conv(chain, node, shape):
    a = chain.attrs(node)
    _check_attrs(chain, node, {"kernel_shape": None, "strides": None, "pads": None, "group": None,
                               "dilations": ([1, 1],), "auto_pad": (b"NOTSET", "NOTSET")})
    W = chain.const(node, 1, "weight").astype(np.float64)
    if W.ndim != 4:
        raise chain.fail(node, f"a {W.ndim - 2}-D convolution; 2-D only")
    h, w, c = shape
    group = int(a.get("group", 1))
    bias = chain.const(node, 2, "bias").astype(np.float64) if len(node.input) > 2 and node.input[2] else \
        np.zeros(W.shape[0])
    t, left, b, r = a.get("pads", [0, 0, 0, 0])
    sh, sw = a.get("strides", [1, 1])
    kh, kw = W.shape[2:]
    if group == 1 and W.shape[1] == c:
        kind, weight = "conv2d", W.transpose(2, 3, 1, 0)
    elif group == c and W.shape[1] == 1 and W.shape[0] % c == 0:
        m = W.shape[0] // c
        kind, weight = "depthwise_conv2d", W[:, 0].reshape(c, m, kh, kw).transpose(2, 3, 0, 1)
    else:
        raise chain.fail(node, f"group {group} with weight {W.shape} on {c} input channels; group 1 or "
                               f"depthwise (group = channels) only")
    chain.add(node, kind, weight=np.ascontiguousarray(weight), bias=bias, stride=(int(sh), int(sw)),
              padding=(int(t), int(b), int(left), int(r)))
    return ((h + t + b - kh) // sh + 1, (w + left + r - kw) // sw + 1, W.shape[0])


def _pool(chain, node, shape):
    a = chain.attrs(node)
    _check_attrs(chain, node, {"kernel_shape": None, "strides": None, "pads": ([0, 0, 0, 0],),
                               "ceil_mode": (0,), "dilations": ([1, 1],), "auto_pad": (b"NOTSET", "NOTSET"),
                               "count_include_pad": (0, 1), "storage_order": (0,)})
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    kind = "max_pool2d" if node.op_type == "MaxPool" else "avg_pool2d"
    chain.add(node, kind, pool_size=(int(kh), int(kw)), stride=(int(sh), int(sw)), padding="VALID")
    return ((shape[0] - kh) // sh + 1, (shape[1] - kw) // sw + 1, shape[2])


def _activation(chain, node):
    if node.op_type == "Relu":
        return "relu"
    lo = chain.const(node, 1, "min") if len(node.input) > 1 and node.input[1] else None
    hi = chain.const(node, 2, "max") if len(node.input) > 2 and node.input[2] else None
    a = chain.attrs(node)                                  # opset < 11: min / max attributes
    lo = float(a.get("min", -np.inf) if lo is None else lo)
    hi = float(a.get("max", np.inf) if hi is None else hi)
    if lo == 0.0 and hi == 6.0:
        return "relu6"
    if lo == 0.0 and hi == np.inf:
        return "relu"
    raise chain.fail(node, f"Clip({lo}, {hi}); only Clip(0, 6) and Clip(0, inf) (ReLU6, ReLU)")


def _dense(chain, node, nodes, k, features):
    if node.op_type == "Gemm":
        a = chain.attrs(node)
        _check_attrs(chain, node, {"transA": (0,), "transB": (0, 1), "alpha": (1.0,), "beta": (1.0,)})
        B = chain.const(node, 1, "B").astype(np.float64)
        weight = B.T if a.get("transB", 0) else B
        bias = chain.const(node, 2, "C").astype(np.float64) if len(node.input) > 2 and node.input[2] else None
        used = 1
    else:
        weight, bias, used = chain.const(node, 1, "B").astype(np.float64), None, 1
        nxt = nodes[k + 1] if k + 1 < len(nodes) else None
        if nxt is not None and nxt.op_type == "Add" and nxt.input[0] == node.output[0] and nxt.input[1] in chain.consts:
            bias, used = chain.const(nxt, 1, "addend").astype(np.float64), 2
    if weight.ndim != 2 or weight.shape[0] != features:
        raise chain.fail(node, f"weight {weight.shape} does not take {features} features")
    n = weight.shape[1]
    if bias is None:
        bias = np.zeros(n)
    if bias.size != n:
        raise chain.fail(node, f"bias of {bias.size} values for {n} outputs (broadcast only along the outputs)")
    chain.add(node, "dense", weight=weight, bias=bias.reshape(n))
    return used, n


def _quantized(g) -> list:
    return sorted({n.op_type for n in g.node if n.op_type in _QUANTIZED or n.op_type.startswith("QLinear")})


def quantized_ops(path) -> list:
    """The quantized op types (QuantizeLinear, QLinearConv, MatMulInteger, ...) of the ONNX file at ``path``,
    sorted; empty for a float model."""
    return _quantized(read_model(path).graph)


def import_float_onnx(path) -> FloatGraph:
    """Read a float32 ONNX model (module docstring) into an uncalibrated :class:`FloatGraph`.

    Raises
    ------
    ImportError
        Without the ``onnx`` package.
    FileNotFoundError, ValueError
        No such file; a damaged file, a quantized model (use :func:`fxpsim.import_onnx`), or an op,
        attribute or topology outside the module docstring's (the message names the node).
    """
    model = read_model(path)
    path = str(path)
    g = model.graph
    quantized = _quantized(g)
    if quantized:
        raise ValueError(f"{path}: a quantized model ({', '.join(quantized)}); read it with fxpsim.import_onnx")
    chain = _Chain(model, path)
    inputs = [i for i in g.input if i.name not in chain.consts]
    if len(inputs) != 1 or len(g.output) != 1:
        raise ValueError(f"{path}: {len(inputs)} inputs and {len(g.output)} outputs; one of each only")
    tt = inputs[0].type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if tt.elem_type != 1 or len(dims) not in (2, 4) or None in dims[1:]:
        raise ValueError(f"{path}: input {inputs[0].name!r} must be float32 [N, C, H, W] or [N, F] with fixed "
                         f"sizes, got elem_type {tt.elem_type} {dims}")
    current = inputs[0].name
    if len(dims) == 4:
        chain.stages.append(FloatStage(kind="transpose", name="input_nhwc", model_layers=(), perm=(0, 2, 3, 1)))
        chain.names.add("input_nhwc")
        shape = (dims[2], dims[3], dims[1])
    else:
        shape = (dims[1],)
    nodes = list(g.node)
    uses: dict = {}
    for n in nodes:
        for t in n.input:
            uses[t] = uses.get(t, 0) + 1
    saved: dict = {}                                # tensor -> (save stage name, shape)
    if uses.get(current, 0) > 1:                    # the input itself is a residual's skip
        chain.stages.append(FloatStage(kind="save", name="input_save", model_layers=()))
        chain.names.add("input_save")
        saved[current] = ("input_save", shape)
    k = 0
    while k < len(nodes):
        node = nodes[k]
        if node.op_type == "Constant":
            from onnx import numpy_helper
            chain.consts[node.output[0]] = numpy_helper.to_array(chain.attrs(node)["value"])
            k += 1
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type not in FLOAT_ONNX_OPS:
            raise chain.fail(node, f"not supported in a float model; fxpsim reads {', '.join(FLOAT_ONNX_OPS)} "
                                   "(Add as a MatMul's bias or a residual)")
        residual = node.op_type == "Add" and len(node.input) == 2 and current in node.input
        if not node.input or (node.input[0] != current and not residual):
            raise chain.fail(node, f"reads {list(node.input)}, not the previous node's output {current!r}: only "
                                   "a chain of nodes (with identity residual Adds) is supported")
        used, op = 1, node.op_type
        spatial = len(shape) == 3
        if op == "Add":
            other = node.input[1] if node.input[0] == current else node.input[0]
            if other not in saved or other == current:
                raise chain.fail(node, f"adds {other!r}, which is not an earlier activation of the chain (a "
                                       "residual Add reads the previous node's output and an earlier tensor)")
            if saved[other][1] != shape:
                raise chain.fail(node, f"adds {other!r} of shape {saved[other][1]} to shape {shape}")
            chain.add(node, "add", source=saved[other][0])
        elif op == "Conv" and spatial:
            shape = _conv(chain, node, shape)
        elif op in ("MaxPool", "AveragePool") and spatial:
            shape = _pool(chain, node, shape)
        elif op == "GlobalAveragePool" and spatial:
            chain.add(node, "avg_pool2d", pool_size=shape[:2], stride=shape[:2], padding="VALID")
            shape = (1, 1, shape[2])
        elif op in ("Relu", "Clip"):
            act, last = _activation(chain, node), chain.stages[-1] if chain.stages else None
            if last is not None and last.kind in _MACS + ("add",) and last.activation is None:
                last.activation = act
            else:
                chain.add(node, act)
        elif op in ("Flatten", "Reshape"):
            features = int(np.prod(shape))
            if op == "Flatten" and chain.attrs(node).get("axis", 1) != 1:
                raise chain.fail(node, "Flatten with axis != 1")
            if op == "Reshape":
                target = [int(v) for v in chain.const(node, 1, "shape").reshape(-1)]
                if not (len(target) == 2 and ((target[1] == features and target[0] in (-1, 0))
                                              or (target[1] == -1 and target[0] == 0))):
                    raise chain.fail(node, f"Reshape to {target}; only a flatten to [N, {features}]")
            if spatial:
                chain.add(node, "transpose", suffix="_nchw", perm=(0, 3, 1, 2))
                chain.add(node, "flatten")
            shape = (features,)
        elif op in ("Gemm", "MatMul") and not spatial:
            used, n = _dense(chain, node, nodes, k, shape[0])
            shape = (n,)
        else:
            raise chain.fail(node, f"on a {'image' if spatial else 'flat'} tensor of shape {shape} is not supported")
        current = nodes[k + used - 1].output[0]
        k += used
        if uses.get(current, 0) > 1:                # read again later: a residual's skip keeps it
            saved[current] = (chain.add(nodes[k - 1], "save", suffix="_save").name, shape)
    if current != g.output[0].name:
        raise ValueError(f"{path}: the chain ends at {current!r}, not at the graph output {g.output[0].name!r}")
    if not any(s.kind in _MACS for s in chain.stages):
        raise ValueError(f"{path}: no Conv / Gemm / MatMul to run on a MAC array")
    return FloatGraph(chain.stages, None, "uncalibrated", tuple(dims[1:]), f"onnx:{path}")

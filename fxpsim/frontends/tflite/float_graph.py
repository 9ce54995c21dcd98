"""A float (non-quantized) ``.tflite`` model read into a :class:`~fxpsim.graph.extract.FloatGraph`, to be run on a
float / block-scaled datapath (:func:`fxpsim.simulate` with a float target, :mod:`fxpsim.graph.float_run`).

The model must be a chain (every operator reads the previous one's output; weights are constant tensors) with
identity residual connections (an ``ADD`` of the previous output and an earlier tensor of the same shape) of these
operators, on float32 tensors, mapped onto the graph's stage kinds (TFLite's NHWC is the stages' layout):

=====================================================  ==============================================================
TFLite                                                 stage
=====================================================  ==============================================================
``CONV_2D`` (dilation 1)                               ``conv2d``: HWIO weight ``W.transpose(1, 2, 3, 0)`` (W: OHWI)
``DEPTHWISE_CONV_2D`` (dilation 1)                     ``depthwise_conv2d``: ``w[kh, kw, c, m] = W[0, kh, kw, cM + m]``
``FULLY_CONNECTED`` (default weights format)           ``dense``: ``W.T`` (W: [out, in]); an image input is flattened
``ADD`` of two activations (a residual)                ``save`` of the earlier tensor where it is made, ``add`` here
fused activation NONE / RELU / RELU6, ``RELU``,        fused into the MAC or ``add`` (or ``relu`` / ``relu6``)
``RELU6``
``MAX_POOL_2D``, ``AVERAGE_POOL_2D``                   ``max_pool2d`` / ``avg_pool2d`` (VALID, or SAME that pads nothing)
``MEAN`` over H and W                                  ``avg_pool2d`` over the whole image (then ``flatten`` without
                                                       ``keep_dims``)
``RESHAPE`` to [1, F]                                  ``flatten`` (NHWC order, as TFLite's)
=====================================================  ==============================================================

Convolution ``SAME`` padding becomes TFLite's explicit pads (``ComputePaddingHeightWidth``: total
:math:`\\max((\\lceil n/s \\rceil - 1)s + k - n, 0)`, the smaller half before).  Every other operator, option, a
quantized tensor (use :func:`fxpsim.import_tflite`), dilations, other reshapes and topologies are refused with a
ValueError naming the operator.  The activation ranges are not known until the graph is calibrated
(:func:`fxpsim.graph.float_run.calibrate_float_graph`, which :func:`fxpsim.simulate` does on its
``calibration_x``); the weights are the model's float32 values in float64 (exact).
"""
from __future__ import annotations

import os

import numpy as np

from ...graph.extract import FloatGraph, FloatStage
from .reader import _ACTIVATIONS, _FLOAT32, _TYPE_NAMES, _const_value, _read_model

__all__ = ["import_float_tflite", "quantized_tensors", "FLOAT_TFLITE_OPS"]

FLOAT_TFLITE_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "RELU", "RELU6", "MAX_POOL_2D",
                    "AVERAGE_POOL_2D", "MEAN", "RESHAPE")
_MACS = ("dense", "conv2d", "depthwise_conv2d")
_SAME, _VALID = 0, 1                                  # the schema's Padding enum


def _read(path) -> dict:
    path = os.fspath(path)
    with open(path, "rb") as fh:
        return _read_model(fh.read(), path)


def _quantized(model) -> list:
    """Names of the quantized tensors (a scale, or an integer activation) and quantize operators of ``model``."""
    out = [f"operator {op['index']} ({op['op']})" for op in model["ops"] if op["op"] in ("QUANTIZE", "DEQUANTIZE")]
    for t in model["tensors"]:
        if t["scale"] is not None or (t["raw"] is None and t["type"] != _FLOAT32):
            out.append(f"tensor {t['name']!r} ({_TYPE_NAMES.get(t['type'], t['type'])})")
    return out


def quantized_tensors(path) -> list:
    """The quantized tensors and operators of the ``.tflite`` file at ``path``; empty for a float model."""
    return _quantized(_read(path))


class _Chain:
    def __init__(self, model, path):
        self.m, self.path, self.t = model, path, model["tensors"]
        self.stages: list[FloatStage] = []
        self.names: set = set()

    def fail(self, op, why):
        return ValueError(f"{self.path}: operator {op['index']} ({op['op']}): {why}")

    def const(self, op, i, what, optional=False):
        k = op["inputs"][i] if len(op["inputs"]) > i else -1
        if k < 0 and optional:
            return None
        try:
            value = _const_value(self.t[k]) if k >= 0 else None
        except ValueError as exc:                        # a damaged buffer, named by tensor
            raise self.fail(op, f"its {what}: {exc}") from None
        if value is None:
            raise self.fail(op, f"its {what} must be a constant tensor")
        if value.dtype != np.float32 and what != "axes":
            raise self.fail(op, f"its {what} is {value.dtype}; float32 models only")
        return value

    def add(self, op, kind, suffix="", **kw) -> FloatStage:
        # the output tensor's name up to the converter's first ';' (it joins the names of the ops it fused)
        name = (self.t[op["outputs"][0]]["name"].split(";")[0] or f"{op['op'].lower()}_{op['index']}") + suffix
        while name in self.names:
            name += "_"
        self.names.add(name)
        stage = FloatStage(kind=kind, name=name, model_layers=(op["index"],), **kw)
        self.stages.append(stage)
        return stage

    def activation(self, op) -> str | None:
        act = _ACTIVATIONS.get(op["options"].get("activation", 0), "?")
        if act not in ("none", "relu", "relu6"):
            raise self.fail(op, f"fused activation {act}; NONE, RELU or RELU6 only")
        return None if act == "none" else act


def _same_pads(n: int, k: int, s: int) -> tuple[int, int]:
    """TFLite's SAME padding of one axis (dilation 1): (before, after)."""
    total = max((-(-n // s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def _pads(chain, op, shape, kh, kw):
    o = op["options"]
    sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
    if sh < 1 or sw < 1:
        raise chain.fail(op, f"stride ({sh}, {sw}) must be positive")
    if o.get("padding") == _SAME:
        (t, b), (left, r) = _same_pads(shape[0], kh, sh), _same_pads(shape[1], kw, sw)
    elif o.get("padding") == _VALID:
        t = b = left = r = 0
    else:
        raise chain.fail(op, f"padding {o.get('padding')!r}; SAME or VALID only")
    if shape[0] + t + b < kh or shape[1] + left + r < kw:
        raise chain.fail(op, f"a {kh}x{kw} window on a {shape[0]}x{shape[1]} image")
    out = ((shape[0] + t + b - kh) // sh + 1, (shape[1] + left + r - kw) // sw + 1)
    return (sh, sw), (t, b, left, r), out


def _conv(chain, op, shape):
    o = op["options"]
    if (o.get("dilation_h", 1), o.get("dilation_w", 1)) != (1, 1):
        raise chain.fail(op, f"dilation ({o.get('dilation_h')}, {o.get('dilation_w')}); 1 only")
    W = chain.const(op, 1, "weight").astype(np.float64)
    if W.ndim != 4:
        raise chain.fail(op, f"weight of shape {W.shape}; 4-D only")
    c = shape[2]
    if op["op"] == "CONV_2D":
        if W.shape[3] != c:
            raise chain.fail(op, f"weight {W.shape} on {c} input channels (grouped convolutions are not supported)")
        kind, weight, n_out, (kh, kw) = "conv2d", W.transpose(1, 2, 3, 0), W.shape[0], W.shape[1:3]
    else:
        mult = W.shape[3] // c                       # LiteRT reads the multiplier off the weight, not the option
        if W.shape[0] != 1 or mult < 1 or W.shape[3] != c * mult:
            raise chain.fail(op, f"depthwise weight {W.shape} on {c} channels (needs [1, kh, kw, {c} x multiplier])")
        kind, (kh, kw), n_out = "depthwise_conv2d", W.shape[1:3], W.shape[3]
        weight = W[0].reshape(kh, kw, c, mult)
    bias = chain.const(op, 2, "bias", optional=True)
    bias = np.zeros(n_out) if bias is None else bias.astype(np.float64).reshape(-1)
    if bias.size != n_out:
        raise chain.fail(op, f"bias of {bias.size} values for {n_out} outputs")
    stride, pads, out = _pads(chain, op, shape, kh, kw)
    chain.add(op, kind, weight=np.ascontiguousarray(weight), bias=bias, stride=stride, padding=pads,
              activation=chain.activation(op))
    return (*out, n_out)


def _pool(chain, op, shape):
    o = op["options"]
    kh, kw = int(o.get("filter_h", 0)), int(o.get("filter_w", 0))
    if kh < 1 or kw < 1:
        raise chain.fail(op, f"filter ({kh}, {kw}) must be positive")
    stride, pads, out = _pads(chain, op, shape, kh, kw)
    if any(pads):
        raise chain.fail(op, f"SAME padding that pads {pads} (TFLite skips padded pixels); VALID pools only")
    chain.add(op, "max_pool2d" if op["op"] == "MAX_POOL_2D" else "avg_pool2d", pool_size=(kh, kw), stride=stride,
              padding="VALID")
    act = chain.activation(op)
    if act is not None:
        chain.add(op, act, suffix="_" + act)
    return (*out, shape[2])


def _fully_connected(chain, op, shape, features):
    o = op["options"]
    if o.get("weights_format", 0) != 0 or o.get("keep_num_dims"):
        raise chain.fail(op, "shuffled weights or keep_num_dims; the default FULLY_CONNECTED only")
    W = chain.const(op, 1, "weight").astype(np.float64)
    if W.ndim != 2 or W.shape[1] != features:
        raise chain.fail(op, f"weight {W.shape} does not take {features} features")
    bias = chain.const(op, 2, "bias", optional=True)
    n = W.shape[0]
    bias = np.zeros(n) if bias is None else bias.astype(np.float64).reshape(-1)
    if bias.size != n:
        raise chain.fail(op, f"bias of {bias.size} values for {n} outputs")
    if len(shape) == 3:                                  # TFLite flattens an image input (NHWC order)
        chain.add(op, "flatten", suffix="_flatten")
    chain.add(op, "dense", weight=np.ascontiguousarray(W.T), bias=bias, activation=chain.activation(op))
    return (n,)


def _mean(chain, op, shape):
    axes = chain.const(op, 1, "axes")
    if axes.dtype.kind not in "iu" or len(shape) != 3 \
            or sorted({int(a) % 4 for a in axes.reshape(-1)}) != [1, 2]:
        raise chain.fail(op, f"MEAN over axes {axes.reshape(-1).tolist()} of shape {shape}; only over H and W "
                             "(axes 1, 2) of an image")
    chain.add(op, "avg_pool2d", pool_size=shape[:2], stride=shape[:2], padding="VALID")
    if op["options"].get("keep_dims"):
        return (1, 1, shape[2])
    chain.add(op, "flatten", suffix="_flatten")
    return (shape[2],)


def _fuse_activation(chain, op):
    act = "relu" if op["op"] == "RELU" else "relu6"
    last = chain.stages[-1] if chain.stages else None
    if last is not None and last.kind in _MACS + ("add",) and last.activation is None:
        last.activation = act
    else:
        chain.add(op, act)


def import_float_tflite(path) -> FloatGraph:
    """Read a float32 ``.tflite`` model (module docstring) into an uncalibrated :class:`FloatGraph`.

    Raises
    ------
    ImportError
        Without the ``tflite`` package.
    FileNotFoundError, ValueError
        No such file; a damaged file, a quantized model (use :func:`fxpsim.import_tflite`), or an operator,
        option or topology outside the module docstring's (the message names the operator).
    """
    path = os.fspath(path)
    m = _read(path)
    quantized = _quantized(m)
    if quantized:
        raise ValueError(f"{path}: a quantized model ({', '.join(quantized[:3])}{', ...' if len(quantized) > 3 else ''}); "
                         "read it with fxpsim.import_tflite")
    if m["subgraphs"] != 1:
        raise ValueError(f"{path}: {m['subgraphs']} subgraphs; a float model of one subgraph only")
    if len(m["inputs"]) != 1 or len(m["outputs"]) != 1:
        raise ValueError(f"{path}: {len(m['inputs'])} inputs and {len(m['outputs'])} outputs; one of each only")
    chain = _Chain(m, path)
    t_in = chain.t[m["inputs"][0]]
    dims = list(t_in["shape"])
    if len(dims) not in (2, 4) or dims[0] != 1 or any(d < 1 for d in dims[1:]):
        raise ValueError(f"{path}: input {t_in['name']!r} must be float32 [1, H, W, C] or [1, F], got {dims}")
    shape = tuple(dims[1:])
    uses: dict = {}
    for op in m["ops"]:
        for i in op["inputs"]:
            uses[i] = uses.get(i, 0) + 1
    current = m["inputs"][0]
    saved: dict = {}                                      # tensor -> (save stage name, shape)
    if uses.get(current, 0) > 1:
        chain.stages.append(FloatStage(kind="save", name="input_save", model_layers=()))
        chain.names.add("input_save")
        saved[current] = ("input_save", shape)
    for op in m["ops"]:
        name, ins = op["op"], [i for i in op["inputs"] if i >= 0]
        if name not in FLOAT_TFLITE_OPS:
            raise chain.fail(op, f"not supported in a float model; fxpsim reads {', '.join(FLOAT_TFLITE_OPS)}")
        if len(op["outputs"]) != 1:
            raise chain.fail(op, f"{len(op['outputs'])} outputs; one only")
        residual = name == "ADD" and len(ins) == 2 and current in ins
        if not ins or (ins[0] != current and not residual):
            raise chain.fail(op, f"reads tensors {ins}, not the previous operator's output (tensor {current}): only a "
                                 "chain of operators (with identity residual ADDs) is supported")
        spatial = len(shape) == 3
        if name == "ADD":
            other = ins[1] if ins[0] == current else ins[0]
            if other not in saved or other == current:
                raise chain.fail(op, f"adds tensor {other}, which is not an earlier activation of the chain (a "
                                     "residual ADD reads the previous output and an earlier tensor)")
            if saved[other][1] != shape:
                raise chain.fail(op, f"adds a tensor of shape {saved[other][1]} to shape {shape}")
            chain.add(op, "add", source=saved[other][0], activation=chain.activation(op))
        elif name in ("CONV_2D", "DEPTHWISE_CONV_2D") and spatial:
            shape = _conv(chain, op, shape)
        elif name in ("MAX_POOL_2D", "AVERAGE_POOL_2D") and spatial:
            shape = _pool(chain, op, shape)
        elif name == "MEAN":
            shape = _mean(chain, op, shape)
        elif name in ("RELU", "RELU6"):
            _fuse_activation(chain, op)
        elif name == "RESHAPE":
            features = int(np.prod(shape))
            target = list(chain.t[op["outputs"][0]]["shape"])
            if target != [1, features]:
                raise chain.fail(op, f"RESHAPE to {target}; only a flatten to [1, {features}]")
            if spatial:
                chain.add(op, "flatten")
            shape = (features,)
        elif name == "FULLY_CONNECTED":
            shape = _fully_connected(chain, op, shape, int(np.prod(shape)))
        else:
            raise chain.fail(op, f"on a {'image' if spatial else 'flat'} tensor of shape {shape} is not supported")
        current = op["outputs"][0]
        declared = list(chain.t[current]["shape"])
        if declared != [1, *shape]:
            raise chain.fail(op, f"its output tensor is declared {declared}, the chain computes [1, {', '.join(map(str, shape))}]")
        if uses.get(current, 0) > 1:                      # read again later: a residual's skip keeps it
            saved[current] = (chain.add(op, "save", suffix="_save").name, shape)
    if current != m["outputs"][0]:
        raise ValueError(f"{path}: the chain ends at tensor {current}, not at the model's output "
                         f"{m['outputs'][0]}")
    if not any(s.kind in _MACS for s in chain.stages):
        raise ValueError(f"{path}: no CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED to run on a MAC array")
    return FloatGraph(chain.stages, None, "uncalibrated", tuple(dims[1:]), f"tflite:{path}")

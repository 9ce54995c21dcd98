"""A trained model reduced to what the hardware needs: a :class:`FloatGraph` of hardware stages.

:func:`extract` folds batch norm (:func:`fxpsim.nn.fold_batchnorm`), groups the model's layers into stages
(a Dense/Conv2D/DepthwiseConv2D layer with its fused ReLU/ReLU6 and output quantizer, a sigmoid/tanh/hard-swish
with its output quantizer, or a shape op: pooling, flatten, a lone ReLU) and finds every stage's float output range, from the model's activation
quantizers where present and from calibration data elsewhere. The graph holds only float arrays and numbers
(the folded model it keeps for float reference outputs is dropped when pickled) and knows nothing about the
target hardware: :func:`fxpsim.conversion.convert` quantizes it under a
:class:`~fxpsim.hardware_config.HardwareConfig`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FloatGraph", "FloatStage", "extract", "quantizer_grid"]

_LINEAR_KINDS = ("dense", "conv2d", "depthwise_conv2d")
#: Elementwise nonlinearities with their own output grid (integer table lookups on the hardware).
LUT_KINDS = ("sigmoid", "tanh", "hard_swish")


@dataclass
class FloatStage:
    """One stage of the folded float network: a linear layer with its fused activation, or a shape op.

    ``weight`` is in the model's layout (dense [in, out], conv HWIO, depthwise [KH, KW, C, M]) and holds the
    weights the model multiplies with (after its weight quantizer); ``out_range`` is the float range of the
    stage's output (from the model's activation quantizer, or calibrated on data).

    ``weight_grid`` / ``out_grid`` describe the trained quantizers' integer grids when they have one
    (:func:`quantizer_grid`): the hardware should store exactly these codes rather than re-derive a grid.
    """

    kind: str
    name: str
    model_layers: tuple
    weight: Any = None
    bias: Any = None
    activation: str | None = None
    stride: tuple = (1, 1)
    padding: str = "VALID"
    pool_size: tuple = (1, 1)
    out_range: tuple | None = None
    range_source: str = "calibration"
    weight_grid: dict | None = None
    out_grid: dict | None = None
    perm: tuple | None = None          # a ``transpose`` stage's axis order (imported float models)
    source: str | None = None          # an ``add`` stage: the ``save`` stage whose values it adds (residuals)


@dataclass
class FloatGraph:
    """A trained model reduced to what the hardware needs.

    ``folded`` (the batch-norm-folded eval-mode model, used for float reference outputs in this process)
    is dropped when the graph is pickled, so sweep tasks carry only arrays and numbers.
    """

    stages: list
    input_range: tuple
    input_range_source: str
    input_shape: tuple
    model_repr: str = ""
    folded: Any = field(default=None, repr=False, compare=False)
    input_grid: dict | None = None

    def __getstate__(self):
        return {**self.__dict__, "folded": None}


def _quantizer_range(q) -> tuple[float, float] | None:
    """The real range ``[s (qmin - z), s (qmax - z)]`` of an activation quantizer, when it has one."""
    if q is None:
        return None
    try:
        form = q.integer_form(np.zeros(1, dtype=np.float32))
    except (NotImplementedError, RuntimeError, ValueError, TypeError):
        return None
    scale = np.asarray(form.scale, dtype=np.float64)
    if scale.size != 1:
        return None  # per-channel activation ranges: calibrate instead
    zp = float(np.asarray(form.zero_point).reshape(-1)[0])
    s = float(scale.reshape(-1)[0])
    return (s * (form.quant_min - zp), s * (form.quant_max - zp))


def quantizer_grid(q, x=None, channel_axis: int | None = None) -> dict | None:
    """The integer grid of a trained quantizer, or ``None`` when it has none the hardware could store.

    From ``q.integer_form(x)`` (``x``: the tensor it quantizes; a zero scalar for activation quantizers):
    ``{"scale": float64 [1 or C], "zero_point": int64 [1 or C], "quant_min", "quant_max", "bits", "codes"
    (with ``x``), "kind"}``; ``bits`` is the width of the code range :math:`q_{max} - q_{min}`. Per-channel
    grids must lie along ``channel_axis`` (the output channel of a weight); anything else gives ``None``.
    """
    if q is None:
        return None
    probe = np.zeros(1, dtype=np.float32) if x is None else np.asarray(x, dtype=np.float32)
    try:
        form = q.integer_form(probe)
    except (NotImplementedError, RuntimeError, ValueError, TypeError):
        return None
    scale = np.asarray(form.scale, dtype=np.float64).reshape(-1)
    zp = np.asarray(form.zero_point)
    if zp.dtype.kind not in "iu" and not np.all(zp == np.round(zp)):
        return None
    zp = np.asarray(zp, dtype=np.int64).reshape(-1)
    if scale.size > 1:
        axis = form.axis if form.axis is None else form.axis % probe.ndim
        if x is None or channel_axis is None or axis != channel_axis % probe.ndim:
            return None
    if zp.size not in (1, scale.size) or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return None
    qmin, qmax = int(form.quant_min), int(form.quant_max)
    return {"scale": scale, "zero_point": np.broadcast_to(zp, scale.shape).copy(), "quant_min": qmin,
            "quant_max": qmax, "bits": max((qmax - qmin).bit_length(), 1),
            "codes": None if x is None else np.asarray(form.codes, dtype=np.int64), "kind": type(q).__name__}


def extract(model, calibration_x) -> FloatGraph:
    """Fold batch norm, group layers into hardware stages, and find every stage's output range.

    Ranges come from the model's activation quantizers (e.g. a trained ``FakeQuant``'s min/max) where
    present, and from the min/max of the float outputs on ``calibration_x`` elsewhere.
    """
    from .. import nn
    from ..nn.fold import FoldedConvBN, FoldedDenseBN
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"extract: expected an fxpsim.nn.Sequential model, got {type(model).__name__}")
    x = _check_x(calibration_x, "calibration_x")
    folded = nn.fold_batchnorm(model)
    layers = list(folded.layers)
    stages: list[FloatStage] = []
    input_q = None
    i = 0
    if layers and type(layers[0]) is nn.Quantize:
        input_q, i = layers[0].activation_quantizer, 1
    while i < len(layers):
        layer, covered = layers[i], [i]
        kind = {nn.Dense: "dense", nn.Conv2D: "conv2d", nn.DepthwiseConv2D: "depthwise_conv2d",
                nn.MaxPool2D: "max_pool2d", nn.AvgPool2D: "avg_pool2d", nn.Flatten: "flatten",
                nn.ReLU: "relu", nn.ReLU6: "relu6", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh",
                nn.HardSwish: "hard_swish", FoldedConvBN: "conv2d", FoldedDenseBN: "dense"}.get(type(layer))
        if kind is None:
            what = ("a BatchNorm that cannot be folded (it does not follow a linear layer without activation)"
                    if isinstance(layer, nn.BatchNorm) else f"a {type(layer).__name__} layer")
            raise ValueError(f"layer {i} is {what}; the integer simulation supports Dense, Conv2D, "
                             "DepthwiseConv2D (+ folded BatchNorm), FoldedConvBN, FoldedDenseBN, ReLU, ReLU6, Sigmoid, "
                             "Tanh, HardSwish, MaxPool2D, AvgPool2D, Flatten and a leading Quantize")
        stage = FloatStage(kind=kind, name=f"{i}:{kind}", model_layers=())
        range_q = None
        if kind in _LINEAR_KINDS:
            stage.weight = np.asarray(layer.quantized_weight(), dtype=np.float64)
            if layer.weight_quantizer is not None:
                master = layer.folded_weight() if hasattr(layer, "folded_weight") else layer.W
                stage.weight_grid = quantizer_grid(layer.weight_quantizer, master,
                                                   channel_axis=2 if kind == "depthwise_conv2d" else -1)
            if hasattr(layer, "folded_bias"):          # batch norm folded in training: its inference bias
                stage.bias = np.asarray(layer.folded_bias(), dtype=np.float64)
            else:
                stage.bias = (np.zeros(stage.weight.shape[-1] if kind != "depthwise_conv2d" else
                                       stage.weight.shape[2] * stage.weight.shape[3])
                              if layer.b is None else np.asarray(layer.b, dtype=np.float64))
            stage.activation = layer.activation
            range_q = layer.activation_quantizer
            if kind != "dense":
                stage.stride, stage.padding = tuple(layer.stride), layer.padding
            nxt = layers[i + 1] if i + 1 < len(layers) else None
            if layer.activation is None and range_q is None and type(nxt) in (nn.ReLU, nn.ReLU6):
                stage.activation = "relu" if type(nxt) is nn.ReLU else "relu6"
                range_q = nxt.activation_quantizer
                covered.append(i + 1)
        elif kind in LUT_KINDS:
            range_q = layer.activation_quantizer
        elif kind in ("max_pool2d", "avg_pool2d"):
            stage.pool_size, stage.stride, stage.padding = tuple(layer.pool_size), tuple(layer.stride), layer.padding
        j = covered[-1] + 1
        if kind in _LINEAR_KINDS + LUT_KINDS and range_q is None and j < len(layers) and \
                type(layers[j]) is nn.Quantize:
            range_q = layers[j].activation_quantizer
            covered.append(j)
        stage.model_layers = tuple(covered)
        stage.out_range = _quantizer_range(range_q)   # shape ops and a lone ReLU keep their input's codes
        if stage.out_range is not None:
            stage.range_source = "quantizer"
            stage.out_grid = quantizer_grid(range_q)
        stages.append(stage)
        i = covered[-1] + 1
    if not any(s.kind in _LINEAR_KINDS for s in stages):
        raise ValueError("the model has no Dense/Conv2D/DepthwiseConv2D layer to simulate")
    outputs = _float_trace(folded, _stage_ends(stages), x)
    x_in = x if input_q is None else outputs.pop(0)
    in_range = _quantizer_range(input_q)
    in_source = "quantizer" if in_range is not None else "calibration"
    if in_range is None:
        in_range = (float(x_in.min()), float(x_in.max()))
    for stage, out in zip(stages, outputs):
        if stage.out_range is None and stage.kind in _LINEAR_KINDS + LUT_KINDS:
            stage.out_range = (float(out.min()), float(out.max()))
    return FloatGraph(stages, in_range, in_source, tuple(x.shape[1:]), repr(model), folded,
                      input_grid=quantizer_grid(input_q) if in_source == "quantizer" else None)


def _check_x(x, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty batch [N, ...], got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must be a float array, got dtype {x.dtype}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds {int(x.size - np.isfinite(x).sum())} NaN/inf value(s)")
    return x.astype(np.float32, copy=False)


def _stage_ends(stages) -> list[int]:
    """Model-layer indices whose outputs are the stage boundaries (plus a leading Quantize's output)."""
    ends = [s.model_layers[-1] for s in stages]
    return ([0] if stages[0].model_layers[0] > 0 else []) + ends


def _float_trace(folded, ends, x, batch_size=1024) -> list[np.ndarray]:
    """Float64 outputs of the folded, eval-mode model after each layer index in ``ends`` (ascending)."""
    chunks: list[list[np.ndarray]] = [[] for _ in ends]
    for start in range(0, len(x), batch_size):
        h = x[start:start + batch_size]
        k = 0
        for idx, layer in enumerate(folded.layers[:ends[-1] + 1]):
            h = layer.forward(h)
            while k < len(ends) and idx == ends[k]:
                chunks[k].append(np.asarray(h, dtype=np.float64))
                k += 1
    return [np.concatenate(c) for c in chunks]

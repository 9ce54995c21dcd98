"""Run a :class:`~fxpsim.graph.extract.FloatGraph` (an ``fxpsim.nn`` model's hardware stages) on a float /
block-scaled datapath, stage by stage.

* A ``dense`` / ``conv2d`` stage runs :func:`~fxpsim.graph.float_mac.float_mac` /
  :func:`~fxpsim.graph.float_mac.float_conv2d` on its :class:`~fxpsim.graph.float_mac.FloatMacSettings`
  (its input activations are quantized to the activation format with a per-tensor scale from the
  calibrated range of the stage's input: the previous MAC stage's ``out_range``, or the graph's
  ``input_range``), then its fused ReLU/ReLU6 in float64.  Settings ``None`` for a stage means float64
  (no quantization, ``x @ W + b`` in float64): the float reference.
* ``relu``, ``relu6``, ``flatten``, ``max_pool2d``, ``avg_pool2d`` run in float64 on the values
  (:mod:`fxpsim.nn.conv`'s pooling), which is what a float datapath does to its float outputs.
* A ``depthwise_conv2d`` stage runs :func:`~fxpsim.graph.float_depthwise.float_depthwise_conv2d` (one dot
  product of K = KH·KW per output, the scales of the whole layer), then its fused activation.
* A ``transpose`` stage (an imported model's layout change, ``stage.perm``) permutes the axes.
* A ``save`` stage keeps the current values under its name; an ``add`` stage (a residual connection of an
  imported model) adds the values its ``source`` saved, :math:`h \\leftarrow act(h + h_{source})` in float64
  (what a float datapath's vector unit does to two float tensors; ``act`` its fused ReLU/ReLU6, if any); its
  calibrated ``out_range`` (after ``act``) is then the
  range the next MAC stage quantizes its input with (else the previous MAC stage's).
* The lookup-table kinds (``sigmoid``, ``tanh``, ``hard_swish``) are not modelled: a :class:`ValueError`
  names the stage and its kind before anything runs.

The output of the last stage is its float values (logits), not re-quantized.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..nn.conv import avg_pool2d_forward, max_pool2d_forward
from .extract import FloatGraph
from .float_depthwise import float_depthwise_conv2d
from .float_mac import FloatMacResult, FloatMacSettings, conv_patches, conv_rows, float_conv2d, float_mac

__all__ = ["FLOAT_STAGE_KINDS", "StageRun", "run_float_graph", "check_float_stages", "calibrate_float_graph"]

#: The stage kinds the float datapath runs.
FLOAT_STAGE_KINDS = ("dense", "conv2d", "depthwise_conv2d", "relu", "relu6", "flatten", "max_pool2d",
                     "avg_pool2d", "transpose", "save", "add")
_MAC_KINDS = ("dense", "conv2d", "depthwise_conv2d")


@dataclass
class StageRun:
    """One MAC stage of a run: its name, the settings it ran on, the :class:`FloatMacResult` (before
    the activation) and its input's calibrated amax."""

    name: str
    kind: str
    settings: FloatMacSettings | None
    result: FloatMacResult
    x_amax: float
    extra: dict = field(default_factory=dict)


def check_float_stages(graph: FloatGraph) -> None:
    """Raise ``ValueError`` naming every stage whose kind the float datapath does not run."""
    if not isinstance(graph, FloatGraph):
        raise TypeError(f"expected a FloatGraph (fxpsim.graph.extract.extract), got {type(graph).__name__}")
    bad = [f"{s.name} ({s.kind})" for s in graph.stages if s.kind not in FLOAT_STAGE_KINDS]
    if bad:
        raise ValueError(f"stage(s) {', '.join(bad)}: not supported on a float datapath; it runs "
                         f"{', '.join(FLOAT_STAGE_KINDS)}")
    saved: set = set()
    for s in graph.stages:
        if s.kind == "save":
            saved.add(s.name)
        elif s.kind == "add" and s.source not in saved:
            raise ValueError(f"stage {s.name} (add): its source {s.source!r} is not a save stage before it")


def _activation(y: np.ndarray, activation) -> np.ndarray:
    if activation in (None, "none"):
        return y
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "relu6":
        return np.clip(y, 0.0, 6.0)
    raise ValueError(f"unknown fused activation {activation!r}")


def _float64_mac(stage, h: np.ndarray) -> FloatMacResult:
    if stage.kind == "dense":
        y = h @ stage.weight + stage.bias
    elif stage.kind == "depthwise_conv2d":
        kh, kw, c, m = stage.weight.shape
        p = conv_patches(h, (kh, kw), stage.stride, stage.padding)
        y = np.einsum("nhwabc,abcm->nhwcm", p, stage.weight).reshape(*p.shape[:3], c * m) + stage.bias
    else:
        rows, (n, oh, ow) = conv_rows(h, stage.weight.shape[:2], stage.stride, stage.padding)
        y = (rows @ stage.weight.reshape(-1, stage.weight.shape[3]) + stage.bias).reshape(n, oh, ow, -1)
    return FloatMacResult(y, y)


def _amax(rng) -> float:
    return float(max(abs(rng[0]), abs(rng[1])))


def run_float_graph(graph: FloatGraph, x, settings, *, stages: bool = False, observe: dict | None = None):
    """Outputs of ``graph`` on ``x`` (float, [N, ...] as the model's input) on a float datapath.

    Parameters
    ----------
    settings : FloatMacSettings, None, or callable ``(stage, index) -> FloatMacSettings | None``
        The datapath of every MAC stage (``index`` counts the graph's stages); ``None``: float64.
    stages : bool
        Also return the :class:`StageRun` of every MAC stage.
    observe : dict, optional
        Filled with ``{add stage name: (min, max)}`` of every ``add`` stage's output (calibration).

    Returns
    -------
    ndarray (float64), or ``(outputs, [StageRun, ...])`` with ``stages``.
    """
    check_float_stages(graph)
    if graph.input_range is None:
        raise ValueError("the graph has no activation ranges (an imported float model): calibrate it first with "
                         "fxpsim.graph.float_run.calibrate_float_graph(graph, x)")
    if settings is not None and not callable(settings) and not isinstance(settings, FloatMacSettings):
        raise TypeError(f"settings must be FloatMacSettings, None or a callable, got {type(settings).__name__}")
    pick = settings if callable(settings) else (lambda stage, index: settings)
    per_stage = [pick(s, i) if s.kind in _MAC_KINDS else None for i, s in enumerate(graph.stages)]
    for s, st in zip(graph.stages, per_stage):
        if st is not None and not isinstance(st, FloatMacSettings):
            raise TypeError(f"settings for stage {s.name}: expected FloatMacSettings or None, got {type(st).__name__}")
    h = np.asarray(x)
    if h.dtype.kind != "f" or h.ndim < 2 or tuple(h.shape[1:]) != tuple(graph.input_shape) or not h.shape[0]:
        raise ValueError(f"x must be a float batch of shape (N, {', '.join(map(str, graph.input_shape))}), "
                         f"got {h.dtype} {h.shape}")
    if not np.isfinite(h).all():
        raise ValueError(f"x holds {int(h.size - np.isfinite(h).sum())} NaN/inf value(s)")
    h = h.astype(np.float64)
    in_range = graph.input_range
    runs, saved = [], {}
    for stage, st in zip(graph.stages, per_stage):
        kind = stage.kind
        if kind in _MAC_KINDS:
            amax = _amax(in_range)
            if st is None:
                r = _float64_mac(stage, h)
            elif kind == "dense":
                r = float_mac(h, stage.weight, stage.bias, st, amax)
            elif kind == "depthwise_conv2d":
                r = float_depthwise_conv2d(h, stage.weight, stage.bias, st, stage.stride, stage.padding, amax)
            else:
                r = float_conv2d(h, stage.weight, stage.bias, st, stage.stride, stage.padding, amax)
            runs.append(StageRun(stage.name, kind, st, r, amax))
            h = _activation(r.values, stage.activation)
            in_range = stage.out_range or (float(h.min()), float(h.max()))
        elif kind in ("relu", "relu6"):
            h = _activation(h, kind)
        elif kind == "flatten":
            h = h.reshape(h.shape[0], -1)
        elif kind == "transpose":
            h = h.transpose(stage.perm)
        elif kind == "save":
            saved[stage.name] = h
        elif kind == "add":
            other = saved[stage.source]
            if other.shape != h.shape:
                raise ValueError(f"stage {stage.name} (add): shapes {h.shape} and {other.shape} ({stage.source})")
            h = _activation(h + other, stage.activation)
            if observe is not None:
                observe[stage.name] = (float(h.min()), float(h.max()))
            in_range = stage.out_range or (float(h.min()), float(h.max()))
        elif kind == "max_pool2d":
            h = max_pool2d_forward(h, stage.pool_size, stage.stride, stage.padding)[0]
        else:
            h = avg_pool2d_forward(h, stage.pool_size, stage.stride, stage.padding)[0]
    return (h, runs) if stages else h


def calibrate_float_graph(graph: FloatGraph, x) -> FloatGraph:
    """A copy of ``graph`` with the activation ranges of ``x``: the graph's ``input_range`` the min and max
    of ``x``, every MAC stage's ``out_range`` the min and max of its float64 output after its fused
    activation, every ``add`` stage's of its float64 sum after its activation (what
    :func:`fxpsim.graph.extract.extract` calibrates for an ``fxpsim.nn`` model).  The ranges the graph already
    has are replaced."""
    check_float_stages(graph)
    h = np.asarray(x)
    if h.dtype.kind != "f" or h.ndim < 2 or not h.shape[0] or not np.isfinite(h).all():
        raise ValueError(f"calibrate_float_graph: x must be a finite float batch (N, ...), got {h.dtype} {h.shape}")
    stages = [replace(s) for s in graph.stages]
    cal = replace(graph, stages=stages, input_range=(float(h.min()), float(h.max())),
                  input_range_source="calibration")
    adds: dict = {}
    _, runs = run_float_graph(cal, h, None, stages=True, observe=adds)
    macs = [s for s in stages if s.kind in _MAC_KINDS]
    for stage, run in zip(macs, runs):
        y = _activation(run.result.values, stage.activation)
        stage.out_range, stage.range_source = (float(y.min()), float(y.max())), "calibration"
    for stage in stages:
        if stage.kind == "add":
            stage.out_range, stage.range_source = adds[stage.name], "calibration"
    return cal

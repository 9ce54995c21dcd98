"""Simulate an ``fxpsim.nn`` model on a float / block-scaled target and report per layer.

:func:`simulate_float` (what :func:`fxpsim.simulate` runs for a float target, see
:mod:`fxpsim.hardware.float_config`) extracts the model's hardware stages
(:func:`fxpsim.graph.extract.extract`), runs them on the target
(:func:`fxpsim.graph.float_run.run_float_graph`, every node with its ``config.for_node`` settings) and on
float64, and reports for every MAC layer:

* ``err_float64``: the RMS and max of :math:`|y_{hw} - y_{64}|` against the float64 network's same layer
  (errors propagated from the layers before), ``rel_float64`` the RMS over the RMS of :math:`y_{64}`;
* ``err_exact``: the same against the layer's **exact datapath** -- the same quantized operands and bias
  accumulated exactly (Kulisch) and rounded once to the accumulator's output format -- so it isolates what
  the accumulator's alignment, chunking, promotion and output rounding cost; ``not_exact``: the fraction of
  outputs that differ from it; ``rel_exact`` its RMS over the RMS of the exact outputs;
* ``bits_lost``: a histogram of the outputs by the number of low bits of the accumulator's output format
  (``p`` fraction bits) that differ from the exact datapath's, :math:`b = \\lfloor \\log_2(|y - y_{ex}| /
  u) \\rfloor + 1` with :math:`u = 2^{\\lfloor \\log_2 |y_{ex}| \\rfloor - p}` (the ulp of a normal number),
  clipped to :math:`[1, p + 1]`, 0 where they are equal, :math:`p + 1` where :math:`y_{ex} = 0`
  (``{"counts": [n_0, ..., n_{p+1}], "nonfinite": mismatches where either is Inf/NaN}``);
* counts: ``overflows`` (finite sums that became ±Inf or saturated, every chunk/add), ``nans`` (NaN
  outputs), ``underflows``, ``terms_inexact`` (aligned products that lost nonzero bits: the alignment
  loss the accumulator reports) and ``saturated`` (operand elements clamped to their format's maximum).

and for the network: accuracy (with labels), the float64 network's accuracy and the top-1 agreement.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from .._text import format_table
from ..report.render import _json_safe
from ..graph.extract import FloatGraph, extract
from ..graph.float_run import calibrate_float_graph, check_float_stages, run_float_graph
from .config_files import load_config
from .config_schema import ConfigError
from .float_config import float_settings, format_name, is_float_datapath

__all__ = ["FloatReport", "simulate_float", "stage_settings", "run_float_target", "bits_lost_histogram"]

_COUNTS = ("overflows", "nans", "underflows", "terms_inexact", "saturated")


def _stage_nodes(graph: FloatGraph):
    """The stages as the (name, op) nodes the config's selectors match."""
    return SimpleNamespace(name="model", nodes=[SimpleNamespace(name=s.name, op=s.kind) for s in graph.stages])


def stage_settings(config, graph: FloatGraph):
    """``(stage, index) -> FloatMacSettings`` of ``config`` (a float target) per stage of ``graph``; the
    selectors of ``config.layers`` must each match a stage (``"0:dense"``, ``"#2"``, ``"op:conv2d"``)."""
    if not is_float_datapath(config):
        raise ConfigError(f"config {config.name!r} is an integer target; a float datapath sets weights.format, "
                          "activations.format (e4m3, mxfp4, ...) and accumulator.preset")
    config.check_selectors(_stage_nodes(graph))
    cache = {}

    def settings(stage, index):
        if index not in cache:
            cache[index] = float_settings(config.for_node(SimpleNamespace(name=stage.name, op=stage.kind), index))
        return cache[index]
    return settings


def run_float_target(graph: FloatGraph, x, config, *, stages: bool = False):
    """``graph``'s outputs on ``x`` on the float target ``config`` (each stage with its ``for_node``
    settings): :func:`~fxpsim.graph.float_run.run_float_graph` with :func:`stage_settings`."""
    config = load_config(config)
    return run_float_graph(graph, x, stage_settings(config, graph), stages=stages)


@dataclass
class FloatReport:
    """Per-layer records and network metrics of :func:`simulate_float` (module docstring); a record also holds
    ``outputs`` and ``nonfinite`` (outputs that are ±Inf or NaN)."""

    title: str
    config: str
    layers: list
    network: dict
    notes: list = field(default_factory=list)
    outputs: np.ndarray | None = field(default=None, repr=False)     # the network's float outputs (logits)
    sweep: dict | None = None      # a float sweep's to_dict() (fxpsim.hardware.float_sweep): rendered and saved too

    def rows(self):
        return [[r["name"], r["weights"], r["activations"], r["accumulator"], r["rel_float64"], r["err_exact_max"],
                 r["not_exact"], *(r[c] for c in _COUNTS)] for r in self.layers]

    HEADERS = ("layer", "weights", "activations", "accumulator", "rel. RMS err vs float64", "max err vs exact",
               "not exact", "overflows", "NaNs", "underflows", "inexact terms", "saturated")

    def to_text(self) -> str:
        net = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in self.network.items())
        concl = list(self.sweep["conclusion"]) if self.sweep else []
        return "\n".join([self.title, self.config, format_table(self.rows(), self.HEADERS), net, *concl, *self.notes])

    def to_markdown(self) -> str:
        lines = ["| " + " | ".join(self.HEADERS) + " |", "|" + "---|" * len(self.HEADERS)]
        lines += ["| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r) + " |"
                  for r in self.rows()]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        out = {"title": self.title, "config": self.config, "layers": self.layers, "network": self.network,
               "notes": self.notes}
        return {**out, "sweep": self.sweep} if self.sweep else out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON (non-finite numbers as strings)."""
        return json.dumps(_json_safe(self.to_dict()), indent=2, allow_nan=False)

    def figures(self) -> dict:
        """``{name: matplotlib Figure}``: :func:`fxpsim.report.float_plots.float_report_figures`."""
        from ..report.float_plots import float_report_figures
        return float_report_figures(self)

    def to_html(self, figures: dict | None = None) -> str:
        """One self-contained page (:func:`fxpsim.report.float_render.float_report_html`): tables, bits-lost
        histograms, the plots as embedded PNGs."""
        from ..report.float_render import float_report_html
        return float_report_html(self, figures)

    def save(self, out_dir, *, png: bool = True) -> dict:
        """Write ``report.json``, ``report.md``, ``report.html`` (:meth:`to_html`) and, with ``png``,
        ``plots/<name>.png`` to ``out_dir``, and with :attr:`sweep` ``sweep.csv`` (a row per swept datapath)
        and ``sweep.json``; returns ``{"json": path, "markdown": path, "html": path, "plots": {name: path}}``
        (and ``sweep_csv``, ``sweep_json``)."""
        from ..report.plots import figure_png
        out_dir = os.fspath(out_dir)
        os.makedirs(out_dir, exist_ok=True)
        figures = {name: figure_png(fig) for name, fig in self.figures().items()}
        page = self.to_html(figures)
        paths = {}
        for key, name, text in (("json", "report.json", self.to_json()),
                                ("markdown", "report.md", f"# {self.title}\n\n{self.config}\n\n{self.to_markdown()}\n"),
                                ("html", "report.html", page)):
            paths[key] = os.path.join(out_dir, name)
            with open(paths[key], "w", encoding="utf-8") as fh:
                fh.write(text)
        if self.sweep:
            from ..report.render import write_csv
            paths["sweep_csv"] = write_csv(self.sweep["records"], os.path.join(out_dir, "sweep.csv"))
            paths["sweep_json"] = os.path.join(out_dir, "sweep.json")
            with open(paths["sweep_json"], "w", encoding="utf-8") as fh:
                fh.write(json.dumps(_json_safe(self.sweep), indent=2, allow_nan=False))
        if png:
            os.makedirs(os.path.join(out_dir, "plots"), exist_ok=True)
            paths["plots"] = {}
            for name, data in figures.items():
                paths["plots"][name] = os.path.join(out_dir, "plots", f"{name}.png")
                with open(paths["plots"][name], "wb") as fh:
                    fh.write(data)
        return paths


def _check_labels(y, n):
    if y is None:
        return None
    y = np.asarray(y)
    if y.shape != (n,) or y.dtype.kind not in "iu":
        raise ValueError(f"y must be {n} integer labels, got {y.dtype} {y.shape}")
    return y


def _difference(hw: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``hw - ref``, 0 where both are the same value or both NaN, +Inf where only one is NaN (an Inf
    against a finite value gives ±Inf)."""
    same = (hw == ref) | (np.isnan(hw) & np.isnan(ref))
    with np.errstate(invalid="ignore"):
        d = np.where(same, 0.0, hw - ref)
    return np.where(np.isnan(d), np.inf, d)


def _rms(v: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(v)))) if v.size else 0.0


def bits_lost_histogram(hw: np.ndarray, exact: np.ndarray, fraction_bits: int) -> dict:
    """The ``bits_lost`` record of the module docstring for outputs ``hw`` against ``exact``."""
    p = int(fraction_bits)
    hw, exact = np.asarray(hw, np.float64).ravel(), np.asarray(exact, np.float64).ravel()
    same = (hw == exact) | (np.isnan(hw) & np.isnan(exact))
    finite = np.isfinite(hw) & np.isfinite(exact)
    differ = ~same & finite
    d, ex = np.abs(hw[differ] - exact[differ]), np.abs(exact[differ])
    _, e = np.frexp(np.where(ex > 0, ex, 1.0))                  # |ex| = m 2^e, m in [0.5, 1)
    _, k = np.frexp(np.ldexp(d, p - (e - 1)))                   # d / ulp = m' 2^k: floor(log2) = k - 1
    bits = np.where(ex > 0, np.clip(k, 1, p + 1), p + 1)
    counts = np.bincount(bits, minlength=p + 2)
    counts[0] = int(same.sum())
    return {"counts": [int(c) for c in counts], "nonfinite": int((~same & ~finite).sum())}


def simulate_float(model, config, x, y=None, *, calibration_x=None, title: str | None = None) -> FloatReport:
    """Run ``model`` (an ``fxpsim.nn.Sequential``, its :class:`FloatGraph`, or an imported float model's
    :class:`FloatGraph`, :func:`fxpsim.import_float_model`, calibrated here on ``calibration_x``) on the float target
    ``config`` (a :class:`HardwareConfig`, preset, TOML path or mapping) with inputs ``x`` and optional
    labels ``y``; ``calibration_x`` (default ``x``) calibrates the activation ranges."""
    config = load_config(config)
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.ndim < 2 or not len(x):
        raise ValueError(f"x must be a non-empty float batch [N, ...], got {type(x).__name__} "
                         f"{getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}")
    y = _check_labels(y, len(x))
    if hasattr(model, "nodes"):
        raise ConfigError(f"{config.name!r} is a float datapath: it runs fxpsim.nn models and float graphs (an "
                          f"integer graph, {getattr(model, 'name', '?')!r}, holds integer codes; a float .onnx model "
                          f"reads with fxpsim.import_float_model)")
    cal_x = x if calibration_x is None else calibration_x
    graph = model if isinstance(model, FloatGraph) else extract(model, cal_x)
    if graph.input_range is None:                 # an imported float model: ranges from the calibration data
        graph = calibrate_float_graph(graph, cal_x)
    check_float_stages(graph)
    settings = stage_settings(config, graph)
    out, runs = run_float_graph(graph, x, settings, stages=True)
    ref_out, ref_runs = run_float_graph(graph, x, None, stages=True)
    layers = []
    for run, ref in zip(runs, ref_runs):
        r, st = run.result, run.settings
        hw, ref_v = r.values, ref.result.values
        d64, dex = _difference(hw, ref_v), _difference(hw, r.exact)
        layers.append({"name": run.name, "kind": run.kind, "weights": format_name(st.weights),
                       "activations": format_name(st.activations), "accumulator": st.accumulator.name,
                       "outputs": int(hw.size), "nonfinite": int(hw.size - np.isfinite(hw).sum()),
                       "rel_float64": _rms(d64) / (_rms(ref_v) or 1.0),
                       "err_float64_max": float(np.max(np.abs(d64), initial=0.0)),
                       "err_exact_rms": _rms(dex), "err_exact_max": float(np.max(np.abs(dex), initial=0.0)),
                       "rel_exact": _rms(dex) / (_rms(np.where(np.isfinite(r.exact), r.exact, 0.0)) or 1.0),
                       "bits_lost": bits_lost_histogram(hw, r.exact, st.accumulator.output.man_bits),
                       "not_exact": float(np.mean(dex != 0)), "input_amax": run.x_amax,
                       **{c: int(getattr(r, c)) for c in _COUNTS}})
    pred, ref_pred = np.argmax(out.reshape(len(x), -1), 1), np.argmax(ref_out.reshape(len(x), -1), 1)
    network = {"agreement": float(np.mean(pred == ref_pred))}
    if y is not None:
        network = {"accuracy": float(np.mean(pred == y)), "float64_accuracy": float(np.mean(ref_pred == y)),
                   **network}
    network["nan_outputs"] = int(np.isnan(out).sum())
    notes = ["float64: the same stages with unquantized operands in float64; exact: the same quantized operands "
             "and bias summed exactly (Kulisch), one rounding to the accumulator's output format"]
    return FloatReport(title or f"float datapath simulation on {config.name}", config.summary(), layers, network,
                       notes, out)

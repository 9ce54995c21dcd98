"""Sweeps of a float / block-scaled datapath: one :func:`~fxpsim.hardware.float_datapath.simulate_float` run
per point of a grid over the tensor core's accumulator, and the conclusion an engineer asks for.

``sweep_float(model, (x, y), {"accumulator.fraction_bits": range(8, 26), "promote_every": [32, 128, "inf"]},
config="h100.toml")`` (what :func:`fxpsim.hardware.sweeps.sweep` runs when ``config`` is a float target or
``model`` a float graph) calibrates the model once (:func:`~fxpsim.graph.extract.extract` for an ``fxpsim.nn``
model, :func:`~fxpsim.graph.float_run.calibrate_float_graph` for an imported float model), so every point sees
the same activation ranges, then simulates every point of the Cartesian product of the axes
(:data:`FLOAT_AXES`; other settings from ``config``).  ``promote_every`` ``0``, ``"inf"``, ``"never"`` or
``math.inf`` all mean *never promoted* (recorded as 0).

A record per point holds the axes as the accumulator runs them (``fraction_bits``, ``promote_every``,
``chunk``, ``preset``), the network metrics of :func:`simulate_float` (``accuracy`` and
``float64_accuracy`` with labels, ``agreement`` with the float64 network's top-1), ``agreement_exact`` (top-1
agreement with the *exact accumulation* run: the same quantized operands summed exactly and rounded once to
float32, accumulator preset ``exact-float32``), ``output_rel_rms`` (RMS of the logits' difference from the
float64 network's over the RMS of those) and the counts summed over the layers (``overflows``, ``nans``,
``terms_inexact``, ``saturated``).

**The conclusion.**  The metric :math:`m` is ``accuracy`` with labels, else ``agreement_exact``; its reference
:math:`m_{ex}` is the exact accumulation run's (1 for ``agreement_exact``).  A point *fits* when
:math:`m \\ge m_{ex} - t` for the tolerance :math:`t` (default :data:`DEFAULT_TOLERANCE`, half a point of
accuracy).  Among the points with the same other axes, the narrowest ``fraction_bits`` *from which every wider
swept value fits* (so a lucky narrow point above a failing wider one does not count); the conclusion names
the narrowest such ``fraction_bits`` over the groups (ties: the largest ``promote_every``) and the largest
``promote_every`` (never counts as infinite) that has one (ties: the narrowest ``fraction_bits``).
"""
from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..graph.extract import FloatGraph, extract
from ..graph.float_run import calibrate_float_graph
from .config_files import load_config
from .config_schema import ConfigError
from .float_config import FLOAT_FIELDS, float_accumulator, is_float_datapath
from .float_datapath import simulate_float

__all__ = ["sweep_float", "FloatSweepResult", "FLOAT_AXES", "DEFAULT_TOLERANCE", "EXACT_PRESET"]

#: How far below the exact accumulation's metric a point may lie and still fit (0.005: half a point).
DEFAULT_TOLERANCE = 0.005
#: The accumulator of the exact reference run.
EXACT_PRESET = "exact-float32"
#: Grid keys (TOML spellings and short names) -> HardwareConfig field.
FLOAT_AXES = {"accumulator.fraction_bits": "accumulator_fraction_bits", "fraction_bits": "accumulator_fraction_bits",
              "accumulator.promote_every": "accumulator_promote_every", "promote_every": "accumulator_promote_every",
              "accumulator.chunk": "accumulator_chunk", "chunk": "accumulator_chunk",
              "accumulator.preset": "accumulator_preset", "preset": "accumulator_preset",
              "weights.format": "weight_format", "activations.format": "activation_format"}
_RECORD_AXES = ("preset", "fraction_bits", "promote_every", "chunk", "weights", "activations")
_METRICS = ("accuracy", "agreement", "agreement_exact")
_NEVER = ("inf", "never", "none", "+inf", "infinity")


def _axis_value(key: str, field_name: str, v):
    if field_name == "accumulator_promote_every":
        if v is None or (isinstance(v, float) and math.isinf(v) and v > 0) or \
                (isinstance(v, str) and v.strip().lower() in _NEVER):
            return 0
    if field_name in ("accumulator_fraction_bits", "accumulator_promote_every", "accumulator_chunk"):
        if isinstance(v, np.integer):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            extra = " (or inf / never)" if field_name == "accumulator_promote_every" else ""
            raise ConfigError(f"grid: {key} takes integers{extra}, got {v!r}")
    return v


def _normalise(grid: Mapping[str, Any]) -> dict:
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError("grid must be a non-empty mapping {axis: [values]}, e.g. "
                         "{'accumulator.fraction_bits': range(8, 26), 'promote_every': [32, 128, 'inf']}")
    out = {}
    for key, values in grid.items():
        if key not in FLOAT_AXES:
            raise ConfigError(f"grid: unknown axis {key!r} for a float datapath; valid keys: {', '.join(FLOAT_AXES)}")
        name = FLOAT_AXES[key]
        if name in out:
            raise ConfigError(f"grid: {key!r} sets {name} a second time")
        values = [values] if isinstance(values, (str, int, float)) or values is None else list(values)
        if not values:
            raise ValueError(f"grid: axis {key!r} has no values")
        out[name] = [_axis_value(key, name, v) for v in values]
    return out


def _promote_key(p: int) -> float:
    return math.inf if not p else p


def _show_promote(p) -> str:
    return "never" if not p else str(p)


def conclude(records: list, metric: str, reference: float, tolerance: float) -> tuple[dict, list]:
    """``(best, sentences)``: the conclusion of the module docstring over ``records``."""
    others = [a for a in _RECORD_AXES if a != "fraction_bits"]
    groups: dict = {}
    for r in records:
        groups.setdefault(tuple(str(r[a]) for a in others), []).append(r)
    floor = reference - tolerance
    firsts = []                                   # per group: the narrowest F from which every wider fits
    for rows in groups.values():
        rows = sorted(rows, key=lambda r: r["fraction_bits"])
        ok = [r for i, r in enumerate(rows) if all(q[metric] >= floor for q in rows[i:])]
        if ok:
            firsts.append(ok[0])
    head = (f"tolerance: {metric} within {tolerance:g} of the exact accumulation's ({reference:.4f}), i.e. at "
            f"least {floor:.4f}")
    if not firsts:
        best = max(records, key=lambda r: r[metric])
        return {"fits": False}, [head, f"no swept point fits; the best is {metric} {best[metric]:.4f} at "
                                       f"{_describe(best)}"]
    narrow = min(firsts, key=lambda r: (r["fraction_bits"], -_promote_key(r["promote_every"])))
    longest = max(firsts, key=lambda r: (_promote_key(r["promote_every"]), -r["fraction_bits"]))
    best = {"fits": True, "narrowest_fraction_bits": narrow["fraction_bits"],
            "narrowest_at": {a: narrow[a] for a in _RECORD_AXES},
            "largest_promote_every": longest["promote_every"], "largest_at": {a: longest[a] for a in _RECORD_AXES}}
    return best, [head,
                  f"narrowest accumulator.fraction_bits within tolerance (every wider swept value fits too): "
                  f"{narrow['fraction_bits']} ({_describe(narrow)}; {metric} {narrow[metric]:.4f})",
                  f"largest accumulator.promote_every within tolerance: {_show_promote(longest['promote_every'])} "
                  f"(from fraction_bits {longest['fraction_bits']}; {_describe(longest)})"]


def _describe(r: dict) -> str:
    return (f"preset {r['preset']}, fraction_bits {r['fraction_bits']}, promote_every "
            f"{_show_promote(r['promote_every'])}, chunk {r['chunk']}")


@dataclass
class FloatSweepResult:
    """Records of a float-datapath sweep (one per grid point, in grid order) and the conclusion (module
    docstring)."""

    grid: dict
    records: list
    metric: str
    reference: float
    tolerance: float
    float64_accuracy: float | None = None
    exact_accuracy: float | None = None
    seconds: float = 0.0
    best: dict = field(default_factory=dict)
    conclusion: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    COLUMNS = _RECORD_AXES + ("accuracy", "agreement", "agreement_exact", "output_rel_rms", "overflows", "nans",
                              "terms_inexact", "saturated")

    def table(self) -> str:
        from .._text import format_table
        cols = [c for c in self.COLUMNS if any(r.get(c) is not None for r in self.records)]
        rows = [[_show_promote(r[c]) if c == "promote_every" else r.get(c) for c in cols] for r in self.records]
        return format_table(rows, cols)

    def to_text(self) -> str:
        return "\n".join([f"float sweep: {len(self.records)} datapaths, metric {self.metric}", self.table(), "",
                          *self.conclusion, *(f"note: {n}" for n in self.notes)])

    def to_dict(self) -> dict:
        return {"kind": "float", "grid": self.grid, "metric": self.metric, "reference": self.reference,
                "tolerance": self.tolerance, "float64_accuracy": self.float64_accuracy,
                "exact_accuracy": self.exact_accuracy, "seconds": self.seconds, "records": self.records,
                "best": self.best, "conclusion": list(self.conclusion), "notes": list(self.notes)}

    def to_json(self, path=None) -> str:
        from ..report.render import _json_safe
        text = json.dumps(_json_safe(self.to_dict()), indent=2, allow_nan=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def save(self, out_dir) -> dict:
        """Write ``sweep.csv`` and ``sweep.json`` into ``out_dir``; returns their paths."""
        from ..report.render import write_csv
        os.makedirs(out_dir, exist_ok=True)
        csv_path, json_path = os.path.join(out_dir, "sweep.csv"), os.path.join(out_dir, "sweep.json")
        write_csv(self.records, csv_path)
        self.to_json(json_path)
        return {"sweep_csv": csv_path, "sweep_json": json_path}


def _rel_rms(hw: np.ndarray, ref: np.ndarray) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(hw == ref, 0.0, hw - ref)
    num = float(np.sqrt(np.mean(np.square(d)))) if d.size else 0.0
    den = float(np.sqrt(np.mean(np.square(ref)))) if ref.size else 0.0
    return num / (den or 1.0) if math.isfinite(num) else math.inf


def sweep_float(model, data, grid: Mapping[str, Any], *, config, calibration_x=None, metric: str | None = None,
                tolerance: float | None = None, progress: bool = False) -> FloatSweepResult:
    """Simulate ``model`` (an ``fxpsim.nn`` model or a :class:`FloatGraph`) on every point of ``grid``
    (module docstring) over the float target ``config``; ``data`` is ``x`` or ``(x, y)``; ``metric`` one of
    ``accuracy`` (needs labels), ``agreement``, ``agreement_exact``; ``tolerance`` default
    :data:`DEFAULT_TOLERANCE`."""
    t0 = time.perf_counter()
    base = load_config(config)
    if not is_float_datapath(base):
        raise ConfigError(f"config {base.name!r} is an integer target; a float sweep needs a float datapath "
                          "(weights.format, activations.format, accumulator.preset)")
    if hasattr(model, "nodes"):
        raise ConfigError(f"{base.name!r} is a float datapath: an integer graph ({getattr(model, 'name', '?')!r}) "
                          "holds integer codes; sweep it on an integer target, or import the float model with "
                          "fxpsim.import_float_model")
    x, y = data if isinstance(data, tuple) else (data, None)
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.ndim < 2 or not len(x):
        raise ValueError(f"x must be a non-empty float batch [N, ...], got {type(x).__name__} "
                         f"{getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}")
    default = tolerance is None
    tolerance = DEFAULT_TOLERANCE if default else tolerance
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < math.inf:
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    metric = metric or ("accuracy" if y is not None else "agreement_exact")
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {', '.join(_METRICS)} for a float sweep, got {metric!r}")
    if metric == "accuracy" and y is None:
        raise ValueError("metric 'accuracy' needs labels: data = (x, y)")
    axes = _normalise(grid)
    cal_x = x if calibration_x is None else calibration_x
    graph = model if isinstance(model, FloatGraph) else extract(model, cal_x)
    if graph.input_range is None:                 # an imported float model: calibrated once, here
        graph = calibrate_float_graph(graph, cal_x)
    points = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
    acc_fields = FLOAT_FIELDS                     # accumulator_preset first, then its overrides
    exact_cfg = base.replace(**{f: None for f in acc_fields[1:]}, accumulator_preset=EXACT_PRESET,   # the operands kept
                             layers={k: {f: v for f, v in o.items() if f not in acc_fields}
                                     for k, o in dict(base.layers or {}).items()})
    exact = simulate_float(graph, exact_cfg, x, y)
    exact_pred = np.argmax(exact.outputs.reshape(len(x), -1), 1)
    ref_out = None
    records = []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(points), desc="float sweep", unit="config")
    try:
        for p in points:
            try:
                cfg = base.replace(**p)
                acc = float_accumulator(cfg)
            except ConfigError as exc:
                shown = {k.replace("accumulator_", "accumulator."): v for k, v in p.items()}
                raise ConfigError(f"grid point {shown}: {str(exc).splitlines()[0]}") from None
            rep = simulate_float(graph, cfg, x, y)
            if ref_out is None:
                from ..graph.float_run import run_float_graph
                ref_out = run_float_graph(graph, x, None)
            out = rep.outputs.reshape(len(x), -1)
            rec = {"preset": cfg.accumulator_preset, "fraction_bits": acc.fraction_bits,
                   "promote_every": acc.promote_every or 0, "chunk": acc.chunk,
                   "weights": rep.layers[0]["weights"], "activations": rep.layers[0]["activations"],
                   **rep.network, "agreement_exact": float(np.mean(np.argmax(out, 1) == exact_pred)),
                   "output_rel_rms": _rel_rms(out, np.asarray(ref_out).reshape(len(x), -1)),
                   **{c: sum(int(r[c]) for r in rep.layers) for c in ("overflows", "nans", "terms_inexact",
                                                                     "saturated")}}
            records.append(rec)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    reference = exact.network["accuracy"] if metric == "accuracy" else 1.0
    if metric == "agreement":
        reference = exact.network["agreement"]
    best, sentences = conclude(records, metric, reference, tolerance)
    if default:
        sentences[0] += f" (the default tolerance, {DEFAULT_TOLERANCE}: give tolerance= / --tolerance to change it)"
    notes = [f"exact accumulation: the same quantized operands summed exactly, one rounding to float32 "
             f"({EXACT_PRESET}); every point calibrated on the same activation ranges"]
    return FloatSweepResult(grid={k: v for k, v in axes.items()}, records=records, metric=metric,
                            reference=float(reference), tolerance=float(tolerance),
                            float64_accuracy=exact.network.get("float64_accuracy"),
                            exact_accuracy=exact.network.get("accuracy"), seconds=time.perf_counter() - t0,
                            best=best, conclusion=sentences, notes=notes)

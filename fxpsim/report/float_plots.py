"""Plots of a float-datapath report (:class:`~fxpsim.hardware.float_datapath.FloatReport`; matplotlib, lazy,
Agg canvas as :mod:`fxpsim.report.plots`).

* ``float_errors``: per layer, the relative RMS error against the float64 network's layer
  (``rel_float64``) and against the layer's exact datapath (``rel_exact``), log scale;
* ``float_counts``: per layer, overflows, NaN outputs and saturated operands (drawn only when one is nonzero);
* ``bits_lost``: per layer (a row), how many outputs lost how many low bits of the accumulator's output
  format against the exact datapath (``bits_lost`` histogram), colour :math:`\\log_{10}(1 + n)`, the counts
  written in the cells;
* ``float_sweep``: with a float sweep (``report.sweep``), its metric against ``fraction_bits``, one line per
  ``promote_every`` (and preset / chunk / operand formats when swept), the exact accumulation's value and the
  tolerance floor as horizontal lines.
"""
from __future__ import annotations

import math
from typing import Sequence

from .plots import _figure, _label_margins, _layer_bars

__all__ = ["float_errors", "float_counts", "bits_lost_map", "float_sweep_curve", "float_report_figures",
           "FLOAT_CAPTIONS"]

FLOAT_CAPTIONS = {
    "float_errors": "Relative RMS error of each layer's output: against the float64 network's same layer (errors of "
                    "earlier layers included) and against the layer's exact datapath (what the accumulator alone costs).",
    "float_counts": "Per layer: finite sums that overflowed to Inf or saturated, NaN outputs, operand elements "
                    "clamped to their format's largest value.",
    "bits_lost": "Outputs per layer (a row) by the number of low bits of the accumulator's output format that differ "
                 "from the exact datapath's (0: exact); colour log10(1 + count), the count in each cell.",
    "float_sweep": "The sweep's metric against the accumulator's fraction_bits, one line per promotion interval; "
                   "solid grey: the exact accumulation's value, dashed: the tolerance floor of the conclusion.",
}


def float_errors(layers: Sequence[dict]):
    """Grouped horizontal bars of ``rel_float64`` and ``rel_exact`` per layer (log x axis; 0 drawn at the
    axis floor)."""
    import numpy as np
    names = [r["name"] for r in layers]
    n = max(len(names), 1)
    fig = _figure(7.0, max(2.6, 0.3 * n + 1.3))
    ax = fig.add_subplot()
    vals = [float(r[k]) for r in layers for k in ("rel_float64", "rel_exact") if math.isfinite(float(r[k]))]
    floor = min([v for v in vals if v > 0], default=1e-8) / 10
    y = np.arange(len(names))
    for off, key, colour, label in ((-0.2, "rel_float64", "#4477aa", "vs float64"),
                                    (0.2, "rel_exact", "#ee7733", "vs exact datapath")):
        v = [max(float(r[key]), floor) if math.isfinite(float(r[key])) else 1.0 for r in layers]
        ax.barh(y + off, v, height=0.4, color=colour, label=label)
    ax.set_xscale("log")
    ax.set_xlim(left=floor)
    ax.set_yticks(y, names, fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    _label_margins(fig, names, 8, right=0.95)
    ax.set_xlabel("relative RMS error (log)")
    ax.set_title("Per-layer error, float datapath", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return fig


def float_counts(layers: Sequence[dict]):
    """Overflows, NaNs and saturated operands per layer (grouped bars)."""
    import numpy as np
    names = [r["name"] for r in layers]
    fig, ax, bars = _layer_bars(names, [0] * len(names), "none", "count", "Overflows, NaNs, saturation per layer")
    y = np.arange(len(names))
    for off, key, colour in ((-0.27, "overflows", "#cc6677"), (0, "nans", "#882255"), (0.27, "saturated", "#999933")):
        ax.barh(y + off, [int(r[key]) for r in layers], height=0.26, color=colour, label=key)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def bits_lost_map(layers: Sequence[dict]):
    """The ``bits_lost`` histograms as one heat map (rows: layers, columns: bits lost)."""
    import numpy as np
    width = max(len(r["bits_lost"]["counts"]) for r in layers)
    image = np.zeros((len(layers), width))
    for i, r in enumerate(layers):
        c = r["bits_lost"]["counts"]
        image[i, :len(c)] = c
    fig = _figure(8.0, max(2.4, 0.3 * len(layers) + 1.4))
    ax = fig.add_subplot()
    im = ax.imshow(np.log10(1 + image), aspect="auto", cmap="viridis", interpolation="nearest")
    for i in range(len(layers)):
        for j in range(width):
            if image[i, j]:
                ax.text(j, i, f"{int(image[i, j])}", ha="center", va="center", fontsize=6,
                        color="k" if im.norm(np.log10(1 + image[i, j])) > 0.6 else "w")
    names = [r["name"] for r in layers]
    ax.set_yticks(range(len(layers)), names, fontsize=8)
    ax.set_xticks(range(width), [str(b) for b in range(width)], fontsize=6)
    _label_margins(fig, names, 8, right=0.88)
    ax.set_xlabel("low bits of the output format lost against the exact datapath")
    ax.set_title("Bits lost per output", fontsize=10)
    fig.colorbar(im, ax=ax, label="log10(1 + count)", fraction=0.03, pad=0.02)
    return fig


def float_sweep_curve(sweep: dict):
    """``sweep[metric]`` against ``fraction_bits`` per group of the other axes (log2 x axis)."""
    metric, records = sweep["metric"], sweep["records"]
    others = [a for a in ("preset", "promote_every", "chunk", "weights", "activations")
              if len({str(r[a]) for r in records}) > 1] or ["promote_every"]
    groups: dict = {}
    for r in records:
        groups.setdefault(tuple(r[a] for a in others), []).append(r)
    fig = _figure(7.0, 3.6)
    ax = fig.add_subplot()
    for key, rows in groups.items():
        rows = sorted(rows, key=lambda r: r["fraction_bits"])
        label = ", ".join(f"{a} {'never' if a == 'promote_every' and not v else v}" for a, v in zip(others, key))
        ax.plot([r["fraction_bits"] for r in rows], [r[metric] for r in rows], "o-", ms=3, label=label)
    ax.axhline(sweep["reference"], color="grey", lw=0.8, label="exact accumulation")
    ax.axhline(sweep["reference"] - sweep["tolerance"], color="grey", lw=0.8, ls="--", label="tolerance floor")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("accumulator fraction_bits")
    ax.set_ylabel(metric)
    ax.set_title("Float datapath sweep", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def float_report_figures(report) -> dict:
    """``{name: Figure}`` for a FloatReport: the error bars and bits-lost map always, the counts only when
    one is nonzero."""
    layers = report.layers
    if not layers:
        return {}
    figures = {"float_errors": float_errors(layers)}
    if any(int(r[k]) for r in layers for k in ("overflows", "nans", "saturated")):
        figures["float_counts"] = float_counts(layers)
    figures["bits_lost"] = bits_lost_map(layers)
    if getattr(report, "sweep", None):
        figures["float_sweep"] = float_sweep_curve(report.sweep)
    return figures

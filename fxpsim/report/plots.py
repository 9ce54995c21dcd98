"""Plots of simulation reports (matplotlib, imported lazily; Agg canvas, never a GUI backend).

Every function returns a :class:`matplotlib.figure.Figure` built without ``pyplot`` (so no global backend
is touched and nothing opens a window); :func:`figure_png` renders one to PNG bytes.
"""
from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = ["sqnr_bars", "overflow_bars", "accuracy_vs_accumulator", "weight_accumulator_heatmap",
           "accumulator_histograms", "report_figures", "figure_png"]


CAPTIONS = {
    "sqnr_per_layer": "Signal-to-quantization-noise ratio of each layer's hardware output against the float model.",
    "overflow_per_layer": "Accumulator additions that overflowed in each layer (label: rate per addition).",
    "accumulator_histograms": "Exact (infinite-precision) accumulator values of each layer (a row) on a signed log2 "
                              "axis, colour the log count; red ticks: the configured accumulator's limits. Mass "
                              "outside them overflows.",
    "accuracy_vs_accumulator": "Sweep: network accuracy against accumulator width, per overflow mode and "
                               "weight/activation width.",
    "heatmap_weight_accumulator": "Sweep: accuracy over weight bits x accumulator bits (best over the other axes).",
}


def _figure(width: float = 7.0, height: float = 3.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig) -> bytes:
    """PNG bytes of a figure (Agg)."""
    buf = io.BytesIO()
    # figures that set their own margins (the per-layer ones, tall on deep networks) skip the second
    # drawing pass that bbox_inches="tight" costs
    fig.savefig(buf, format="png", bbox_inches=None if getattr(fig, "_fixed_margins", False) else "tight")
    return buf.getvalue()


def _label_margins(fig, labels, fontsize: float, right: float = 0.97) -> None:
    """Room on the left for the longest label (about 0.6 em per character), set once, no tight layout."""
    longest = max((len(str(t)) for t in labels), default=4)
    width_in = fig.get_figwidth()
    left = min(0.6, (0.3 + 0.6 * fontsize / 72 * longest) / width_in)
    fig.subplots_adjust(left=left, right=right, top=1 - 0.45 / fig.get_figheight(), bottom=0.7 / fig.get_figheight())
    fig._fixed_margins = True


def _get(r: Any, key: str):
    return r.get(key) if isinstance(r, dict) else getattr(r, key, None)


def _finite(v, cap: float) -> float:
    if v is None:
        return math.nan
    v = float(v)
    return cap if math.isinf(v) and v > 0 else v


def _layer_bars(names: list, values: list, colour: str, xlabel: str, title: str):
    """Horizontal bars, one row per layer in run order (top to bottom): names stay legible at any depth
    (a 65-layer network gets a taller figure, not 65 rotated labels)."""
    n = max(len(names), 1)
    fig = _figure(7.0, max(2.6, 0.17 * n + 1.3))
    ax = fig.add_subplot()
    bars = ax.barh(range(len(values)), values, color=colour)
    ax.set_yticks(range(len(names)), names, fontsize=7 if n > 30 else 8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    _label_margins(fig, names, 7 if n > 30 else 8, right=0.9)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig, ax, bars


def sqnr_bars(layers: Sequence) -> "Figure":
    """Per-layer SQNR (dB) of the hardware output against the float model (``inf`` drawn at the end, hatched)."""
    names = [_get(r, "name") for r in layers]
    finite = [float(_get(r, "sqnr_db")) for r in layers if math.isfinite(float(_get(r, "sqnr_db")))]
    cap = (max(finite) + 10) if finite else 100.0
    values = [_finite(_get(r, "sqnr_db"), cap) for r in layers]
    fig, ax, bars = _layer_bars(names, values, "#4477aa", "SQNR (dB)",
                                "Per-layer SQNR, hardware vs float model (hatched: exact)")
    for bar, r in zip(bars, layers):
        if math.isinf(float(_get(r, "sqnr_db"))):
            bar.set_hatch("//")
    return fig


def overflow_bars(layers: Sequence) -> "Figure":
    """Accumulator overflow events per layer (count, with the rate per addition as a label)."""
    names = [_get(r, "name") for r in layers]
    counts = [int(_get(r, "overflow_count") or 0) for r in layers]
    fig, ax, bars = _layer_bars(names, counts, "#cc6677", "overflow events",
                                "Accumulator overflows per layer" + ("" if any(counts) else " (none)"))
    for bar, r in zip(bars, layers):
        rate = _get(r, "overflow_rate") or 0.0
        if rate:
            ax.annotate(f" {rate:.2%}", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                        ha="left", va="center", fontsize=6)
    return fig


_LINESTYLES = {"saturate": "-", "wrap": "--", "saturate_symmetric": "-.", "saturate_zero": ":"}


def _width_key(r) -> str:
    return f"W{_get(r, 'weight_bits')} A{_get(r, 'activation_bits')}" + (
        f" {_get(r, 'rounding')}" if _get(r, "rounding") else "")


def accuracy_vs_accumulator(records: Sequence, float_accuracy: float | None = None,
                            metric: str = "accuracy") -> "Figure":
    """Accuracy (or ``metric``) against accumulator width: colour by weight/activation width (and rounding),
    line style by overflow mode (solid saturate, dashed wrap)."""
    fig = _figure(8.0, 4.2)
    ax = fig.add_subplot()
    series: dict[tuple, list] = {}
    for r in records:
        if _get(r, metric) is None:
            continue
        key = (_width_key(r), str(_get(r, "accumulator_overflow")))
        series.setdefault(key, []).append((int(_get(r, "accumulator_bits")), float(_get(r, metric))))
    import matplotlib
    widths = sorted({k[0] for k in series})
    colours = matplotlib.colormaps["tab10"]
    for (width, mode), points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                color=colours(widths.index(width) % 10), linestyle=_LINESTYLES.get(mode, "-"),
                label=f"{width}, {mode}")
    if float_accuracy is not None and metric == "accuracy":
        ax.axhline(float_accuracy, color="k", linestyle="--", linewidth=1, label="float model")
    ax.set_xlabel("accumulator bits", fontsize=10)
    ax.set_ylabel(metric, fontsize=10)
    ax.set_title(f"{metric.capitalize()} vs accumulator width (colour: widths; line: overflow mode)")
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8, loc="lower right")
    return fig


def weight_accumulator_heatmap(records: Sequence, metric: str = "accuracy") -> "Figure":
    """Heat map of ``metric`` over (weight bits x accumulator bits); the best value over the other axes."""
    fig = _figure(7.0, 3.8)
    ax = fig.add_subplot()
    wbits = sorted({int(_get(r, "weight_bits")) for r in records})
    per_row = [{int(_get(r, "accumulator_bits")) for r in records if int(_get(r, "weight_bits")) == w} for w in wbits]
    common = sorted(set.intersection(*per_row)) if per_row else []
    # only the widths simulated for every weight width: no stripes of cells that were never swept
    abits = common if len(common) >= 2 else sorted(set.union(*per_row)) if per_row else []
    records = [r for r in records if int(_get(r, "accumulator_bits")) in abits]
    grid = [[math.nan] * len(abits) for _ in wbits]
    for r in records:
        v = _get(r, metric)
        if v is None:
            continue
        i, j = wbits.index(int(_get(r, "weight_bits"))), abits.index(int(_get(r, "accumulator_bits")))
        grid[i][j] = float(v) if math.isnan(grid[i][j]) else max(grid[i][j], float(v))
    import matplotlib
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    im = ax.imshow(grid, aspect="auto", origin="lower", cmap=cmap, vmin=0.0,
                   vmax=1.0 if metric in ("accuracy", "agreement") else None)
    ax.set_xticks(range(len(abits)), [str(a) for a in abits], fontsize=7)
    ax.set_yticks(range(len(wbits)), [str(w) for w in wbits])
    ax.set_xlabel("accumulator bits")
    ax.set_ylabel("weight bits")
    ax.set_title(f"{metric} (best over the other axes)")
    if len(abits) <= 12 and len(wbits) <= 12:
        for i in range(len(wbits)):
            for j in range(len(abits)):
                if not math.isnan(grid[i][j]):
                    bright = im.norm(grid[i][j]) > 0.6          # dark text on the bright end of viridis
                    ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", fontsize=7,
                            color="k" if bright else "w")
    fig.colorbar(im, ax=ax)
    return fig


def accumulator_histograms(layers: Sequence) -> "Figure":
    r"""The exact accumulator values of every accumulating layer as one heat map: a row per layer (run order),
    columns the signed log2 axis :math:`\mathrm{sign}(v)\log_2(1 + |v|)` (a value needing ``b`` bits sits near
    :math:`\pm(b - 1)`), colour :math:`\log_{10}(1 + \text{count})`; red ticks mark the configured
    accumulator's limits :math:`\pm(A - 1)`, so mass outside them is what overflows."""
    import numpy as np
    with_hist = [r for r in layers if _get(r, "acc_histogram")]
    fig = _figure(8.0, max(2.6, 0.17 * len(with_hist) + 1.6))
    ax = fig.add_subplot()
    if not with_hist:
        ax.text(0.5, 0.5, "no accumulating layers", ha="center")
        return fig
    span = max(max(abs(float(e)) for e in _get(r, "acc_histogram")["edges"]) for r in with_hist)
    grid = np.linspace(-span, span, 61)                        # one common axis for every row
    image = np.zeros((len(with_hist), len(grid) - 1))
    for i, r in enumerate(with_hist):
        h = _get(r, "acc_histogram")
        centres = (np.asarray(h["edges"][:-1], float) + np.asarray(h["edges"][1:], float)) / 2
        cols = np.clip(np.searchsorted(grid, centres) - 1, 0, len(grid) - 2)
        np.add.at(image[i], cols, np.asarray(h["counts"], float))
    im = ax.imshow(np.log10(1 + image), aspect="auto", cmap="viridis", interpolation="nearest",
                   extent=(-span, span, len(with_hist) - 0.5, -0.5))
    for i, r in enumerate(with_hist):
        bits = _get(r, "accumulator_bits")
        if bits:
            ax.plot([-(bits - 1), bits - 1], [i, i], linestyle="none", marker="|", color="#ff2222", markersize=9, markeredgewidth=2.5)
    labels = [f"{_get(r, 'name')} ({_get(r, 'accumulator_bits')} b, needs {_get(r, 'acc_bits_needed')})"
              for r in with_hist]
    ax.set_yticks(range(len(with_hist)), labels, fontsize=7 if len(with_hist) > 30 else 8)
    _label_margins(fig, labels, 7 if len(with_hist) > 30 else 8, right=0.88)
    ax.set_xlabel("sign(v) log2(1 + |v|)  (a value of b bits sits near ±(b-1))", fontsize=8)
    ax.set_title("Exact accumulator values per layer; red: the accumulator's limits", fontsize=10)
    fig.colorbar(im, ax=ax, label="log10(1 + count)", fraction=0.03, pad=0.02)
    return fig


def missing_figure_sentences(report) -> list:
    """Sentences standing in for the plots that would be empty."""
    if report.layers and not any(int(_get(r, "overflow_count") or 0) for r in report.layers):
        return ["No accumulator add overflowed in any layer (no overflow chart)."]
    return []


def report_figures(report) -> dict:
    """Every figure a :class:`~fxpsim.report.Report` has data for: ``{name: Figure}`` (none that would be
    empty: see :func:`missing_figure_sentences`)."""
    figures = {}
    if report.layers:
        figures["sqnr_per_layer"] = sqnr_bars(report.layers)
        if any(int(_get(r, "overflow_count") or 0) for r in report.layers):   # no empty chart
            figures["overflow_per_layer"] = overflow_bars(report.layers)
        if any(_get(r, "acc_histogram") for r in report.layers):
            figures["accumulator_histograms"] = accumulator_histograms(report.layers)
    records = (report.sweep or {}).get("records") or []
    if records:
        float_acc = report.network.get("float_accuracy") if report.network else None
        metric = "accuracy" if any(_get(r, "accuracy") is not None for r in records) else "agreement"
        figures["accuracy_vs_accumulator"] = accuracy_vs_accumulator(records, float_acc, metric)
        figures["heatmap_weight_accumulator"] = weight_accumulator_heatmap(records, metric)
    return figures

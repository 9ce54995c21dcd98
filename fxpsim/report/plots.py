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
    "accumulator_histograms": "Exact (infinite-precision) accumulator values of each layer on a signed log2 axis; "
                              "dashed: the configured accumulator's limits. Mass outside them overflows.",
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
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _get(r: Any, key: str):
    return r.get(key) if isinstance(r, dict) else getattr(r, key, None)


def _finite(v, cap: float) -> float:
    if v is None:
        return math.nan
    v = float(v)
    return cap if math.isinf(v) and v > 0 else v


def sqnr_bars(layers: Sequence) -> "Figure":
    """Per-layer SQNR (dB) of the hardware output against the float model (``inf`` drawn at the top)."""
    fig = _figure()
    ax = fig.add_subplot()
    names = [_get(r, "name") for r in layers]
    finite = [float(_get(r, "sqnr_db")) for r in layers if math.isfinite(float(_get(r, "sqnr_db")))]
    cap = (max(finite) + 10) if finite else 100.0
    values = [_finite(_get(r, "sqnr_db"), cap) for r in layers]
    bars = ax.bar(range(len(values)), values, color="#4477aa")
    for bar, r in zip(bars, layers):
        if math.isinf(float(_get(r, "sqnr_db"))):
            bar.set_hatch("//")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("SQNR (dB)")
    ax.set_title("Per-layer SQNR, hardware vs float model (hatched: exact)")
    ax.grid(axis="y", alpha=0.3)
    return fig


def overflow_bars(layers: Sequence) -> "Figure":
    """Accumulator overflow events per layer (count, with the rate as a label)."""
    fig = _figure()
    ax = fig.add_subplot()
    names = [_get(r, "name") for r in layers]
    counts = [int(_get(r, "overflow_count") or 0) for r in layers]
    bars = ax.bar(range(len(counts)), counts, color="#cc6677")
    for bar, r in zip(bars, layers):
        rate = _get(r, "overflow_rate") or 0.0
        if rate:
            ax.annotate(f"{rate:.2%}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("overflow events")
    ax.set_title("Accumulator overflows per layer" + ("" if any(counts) else " (none)"))
    ax.grid(axis="y", alpha=0.3)
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
    r"""Histograms of the exact accumulator values of each layer on a signed log2 axis (a value needing
    ``b`` bits sits near ``±(b - 1)``), with the accumulator's limits :math:`\pm(A - 1)` dashed."""
    with_hist = [r for r in layers if _get(r, "acc_histogram")]
    n = max(len(with_hist), 1)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = _figure(4.4 * cols, 3.4 * rows)
    for k, r in enumerate(with_hist):
        ax = fig.add_subplot(rows, cols, k + 1)
        h = _get(r, "acc_histogram")
        edges, counts = h["edges"], h["counts"]
        ax.stairs(counts, edges, fill=True, color="#4477aa")
        bits = _get(r, "accumulator_bits")
        if bits:
            for x in (-(bits - 1), bits - 1):
                ax.axvline(x, color="#cc3311", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("sign(v) log2(1 + |v|)  (a value of b bits sits near ±(b-1))", fontsize=8)
        ax.set_ylabel("count", fontsize=8)
        ax.set_title(f"{_get(r, 'name')} (acc {bits} b, needs {_get(r, 'acc_bits_needed')} b)", fontsize=9)
        ax.tick_params(labelsize=8)
    if not with_hist:
        fig.add_subplot().text(0.5, 0.5, "no accumulating layers", ha="center")
    fig.suptitle("Exact accumulator values vs the accumulator's limits (dashed)", fontsize=10)
    fig.tight_layout()
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

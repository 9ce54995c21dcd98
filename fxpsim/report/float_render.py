"""A float-datapath report (:class:`~fxpsim.hardware.float_datapath.FloatReport`) as one self-contained
HTML page: the network and per-layer tables (floats to 6 significant digits), the bits-lost histograms as
a table, every plot of :mod:`fxpsim.report.float_plots` as an embedded PNG (no network access), the notes.

Table ids (for readers and tests): ``float-network``, ``float-layers`` (a row per MAC layer, the columns of
:data:`LAYER_COLUMNS`), ``float-bits-lost`` (a row per layer: the count of outputs per number of bits lost,
then the non-finite mismatches), ``float-sweep`` (with ``report.sweep``, a float sweep's ``to_dict()``: a row
per swept datapath, the columns of :data:`SWEEP_COLUMNS`), and the sweep's conclusion as the list
``float-conclusion``.
"""
from __future__ import annotations

import base64
import html

from .._text import format_value

__all__ = ["float_report_html", "LAYER_COLUMNS", "SWEEP_COLUMNS"]

#: record keys of the sweep table
SWEEP_COLUMNS = ("preset", "fraction_bits", "promote_every", "chunk", "weights", "activations", "accuracy",
                 "agreement", "agreement_exact", "output_rel_rms", "overflows", "nans", "terms_inexact", "saturated")

#: (header, record key) of the per-layer table
LAYER_COLUMNS = (("layer", "name"), ("kind", "kind"), ("weights", "weights"), ("activations", "activations"),
                 ("accumulator", "accumulator"), ("outputs", "outputs"), ("rel. RMS err vs float64", "rel_float64"),
                 ("max err vs float64", "err_float64_max"), ("rel. RMS err vs exact", "rel_exact"),
                 ("max err vs exact", "err_exact_max"), ("not exact", "not_exact"), ("overflows", "overflows"),
                 ("NaNs", "nans"), ("non-finite outputs", "nonfinite"), ("underflows", "underflows"),
                 ("inexact terms", "terms_inexact"), ("saturated", "saturated"))

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}"
          "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}figure{margin:1em 0}"
          "img{max-width:100%}pre{white-space:pre-wrap}")


def _cell(v) -> str:
    """6 significant digits for a finite float, :func:`format_value` otherwise."""
    finite = isinstance(v, float) and v == v and abs(v) != float("inf")
    return html.escape(f"{v:.6g}" if finite else format_value(v))


def _table(tid: str, headers, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table id='{tid}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def float_report_html(report, figures: dict | None = None) -> str:
    """The page (module docstring); ``figures``: ``{name: Figure or PNG bytes}`` (default: every plot)."""
    from . import float_plots, plots
    figures = float_plots.float_report_figures(report) if figures is None else figures
    esc = html.escape
    parts = [f"<h1>{esc(report.title)}</h1>", f"<p><b>Target:</b> {esc(report.config)}</p>",
             "<h2>Network</h2>", _table("float-network", ("quantity", "value"), list(report.network.items())),
             "<h2>Layers</h2>", _table("float-layers", [h for h, _ in LAYER_COLUMNS],
                                       [[r[k] for _, k in LAYER_COLUMNS] for r in report.layers])]
    if report.layers:
        width = max(len(r["bits_lost"]["counts"]) for r in report.layers)
        parts += ["<h2>Bits lost against the exact datapath</h2>",
                  _table("float-bits-lost", ["layer", *map(str, range(width)), "non-finite"],
                         [[r["name"], *r["bits_lost"]["counts"], *[0] * (width - len(r["bits_lost"]["counts"])),
                           r["bits_lost"]["nonfinite"]] for r in report.layers])]
    sweep = getattr(report, "sweep", None)
    if sweep:
        cols = [c for c in SWEEP_COLUMNS if any(c in r for r in sweep["records"])]
        parts += ["<h2>Sweep</h2>",
                  "<ul id='float-conclusion'>" + "".join(f"<li>{esc(c)}</li>" for c in sweep["conclusion"]) + "</ul>",
                  _table("float-sweep", cols, [["never" if c == "promote_every" and not r[c] else r.get(c)
                                                for c in cols] for r in sweep["records"]])]
    if report.layers and "float_counts" not in figures:
        parts.append("<p>No overflow, NaN or saturated operand in any layer (no counts chart).</p>")
    for name, fig in figures.items():
        png = fig if isinstance(fig, bytes) else plots.figure_png(fig)
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure id='plot-{esc(name)}'><img alt='{esc(name)}' src='data:image/png;base64,{data}'/>"
                     f"<figcaption>{esc(float_plots.FLOAT_CAPTIONS.get(name, name))}</figcaption></figure>")
    if report.notes:
        parts += ["<h2>Notes</h2>", "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>"]
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{esc(report.title)}</title>"
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")

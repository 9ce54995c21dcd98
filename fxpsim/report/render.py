r"""Simulation reports: per-layer records rendered as a terminal table, JSON, Markdown and one HTML file.

JSON schema (``schema = "fxpsim.report"``, ``schema_version = 1``)
------------------------------------------------------------------
Top-level object:

``schema`` (str), ``schema_version`` (int), ``title`` (str), ``created`` (ISO-8601 UTC), ``fxpsim_version``,
``config`` (the :meth:`fxpsim.hardware.HardwareConfig.to_dict` table, or null), ``model`` (str: the model's
layers), ``network`` (object, below), ``layers`` (array of layer records, below), ``sweep`` (null or
``{"grid": {axis: [values]}, "records": [...], "pareto_accumulator": [...], "pareto_bitops": [...]}``),
``notes`` (array of str), ``conclusion`` (array of str: the answer the HTML page opens with, above a
sweep's recommendation and caveats).

``network``: ``n_samples`` (int), ``accuracy`` (hardware top-1 accuracy on the labels, null without labels),
``float_accuracy`` (the float model's), ``agreement`` (fraction of samples whose hardware top-1 equals the
float model's), ``output_sqnr_db``, ``overflow_count`` (all layers), ``bit_ops`` (per sample:
:math:`\\sum_\\ell \\mathrm{MACs}_\\ell\\, b_w b_a`), ``seconds``.

Each layer record (:class:`LayerRecord`): ``index``, ``name``, ``kind`` (``dense``, ``conv2d``,
``depthwise_conv2d``, ``max_pool2d``, ``avg_pool2d``, ``flatten``, ``relu``), ``output_shape`` (per sample),
``macs`` (per sample), ``mse`` (mean squared error of the dequantized hardware output against the float
model's output of that layer), ``sqnr_db`` (:math:`10\\log_{10}(\\sum r^2 / \\sum (h - r)^2)`; ``inf`` when
equal), ``max_abs_error_lsb`` (:math:`\\max |h - r| / s_{out}`), ``accumulator_bits``, ``overflow_count``
(accumulator adds that overflowed, bias add included), ``overflow_rate`` (overflow_count / adds performed),
``acc_peak`` (largest |exact partial sum| of the MAC sequence, infinite precision), ``acc_limit``
(:math:`2^{A-1}`), ``acc_bits_needed`` (smallest signed width holding every exact partial sum),
``not_exact_fraction``, ``isolated_sqnr_db`` / ``isolated_max_abs_error_lsb`` (the node fed reference
inputs), ``bias_clipped``, ``headroom_bits``
(``accumulator_bits - acc_bits_needed``; negative: the final sums do not fit), ``clipped_fraction``
(fraction of outputs whose requantized value fell outside the output code range and was clamped; a fused
ReLU's floor does not count), ``output_scale``, ``output_zero_point``, ``acc_histogram`` (null or
``{"scale": "signed_log2", "edges": [...], "counts": [...]}``: histogram of :math:`\mathrm{sign}(v)
\log_2(1 + |v|)` over the exact accumulator values :math:`v`, edges spanning ``±max(accumulator_bits,
acc_bits_needed)``). Non-finite floats are written as
the strings ``"inf"``, ``"-inf"``, ``"nan"``.
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import datetime as _dt
import html
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .._text import format_table, format_value as _fmt  # noqa: F401  (format_table is public here too)

__all__ = ["LayerRecord", "Report", "REPORT_SCHEMA", "REPORT_SCHEMA_VERSION"]

REPORT_SCHEMA = "fxpsim.report"
REPORT_SCHEMA_VERSION = 1


@dataclass
class LayerRecord:
    """What one layer of the simulated network did (see the module docstring for each field)."""

    index: int
    name: str
    kind: str
    output_shape: tuple = ()
    macs: int = 0
    mse: float = 0.0
    sqnr_db: float = math.inf
    max_abs_error_lsb: float = 0.0
    accumulator_bits: int | None = None
    overflow_count: int = 0
    overflow_rate: float = 0.0
    acc_peak: int | None = None
    acc_limit: int | None = None
    acc_bits_needed: int | None = None
    acc_bits_needed_cumulative: int | None = None
    overflow_count_isolated: int | None = None
    not_exact_isolated: float | None = None
    headroom_bits: int | None = None
    clipped_fraction: float = 0.0
    not_exact_fraction: float = 0.0
    isolated_sqnr_db: float | None = None
    isolated_max_abs_error_lsb: float | None = None
    bias_clipped: int = 0
    output_scale: float | None = None
    output_zero_point: int | None = None
    acc_histogram: dict | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["output_shape"] = list(self.output_shape)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LayerRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: _from_json_float(v) for k, v in d.items() if k in names}
        kwargs["output_shape"] = tuple(kwargs.get("output_shape", ()))
        return cls(**kwargs)


def _json_safe(value: Any) -> Any:
    """Floats that JSON cannot hold become strings; numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _from_json_float(value: Any) -> Any:
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    return value


def write_csv(records: Iterable[dict], path: str | os.PathLike) -> str:
    """Write a list of flat dicts as CSV (columns: union of keys, in first-seen order)."""
    records = list(records)
    columns: list[str] = []
    for r in records:
        columns += [k for k in r if k not in columns]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for r in records:
            writer.writerow({k: _json_safe(r.get(k)) for k in columns})
    return os.fspath(path)


# (header, record field, definition): every column a report shows is defined where it is shown.
LAYER_COLUMN_DEFINITIONS = (
    ("layer", "name", "the node's name (a float stage of an fxpsim.nn model, or the graph node)"),
    ("kind", "kind", "the node's op"),
    ("MSE", "mse", "mean squared error of the dequantized output against the reference (the float model's "
                   "output of that layer, or the graph's dequantized float execution), in real units squared"),
    ("SQNR dB", "sqnr_db", "10 log10(sum ref^2 / sum (out - ref)^2) against the same reference; inf = equal"),
    ("max err LSB", "max_abs_error_lsb", "largest |out - ref| in units of the output scale (one output LSB)"),
    ("SQNR isolated", "isolated_sqnr_db", "SQNR of the node alone: fed the reference values of its inputs "
                                          "(quantized), so the errors of earlier nodes do not count (MAC nodes)"),
    ("not exact", "not_exact_fraction", "fraction of output codes that differ from the exact datapath "
                                        "(HardwareConfig.exact_datapath: an accumulator that never overflows, the "
                                        "full bias, the full 31-bit multiplier, no tiles, no lookup tables), the "
                                        "network run as configured: cumulative, earlier nodes' changes included"),
    ("not exact iso", "not_exact_isolated", "the same, isolated: this node alone on the configured datapath, "
                                            "fed the exact datapath's inputs (MAC nodes)"),
    ("acc bits", "accumulator_bits", "configured accumulator width of the node (per-layer overrides applied)"),
    ("overflows", "overflow_count", "accumulator adds that overflowed (saturated or wrapped), the bias add "
                                    "included; wrap overflows that later cancel still count; cumulative: the "
                                    "network run as configured"),
    ("ovf iso", "overflow_count_isolated", "the same, isolated: the node alone fed the exact datapath's inputs"),
    ("ovf rate", "overflow_rate", "overflows / accumulator adds performed"),
    ("bits needed", "acc_bits_needed", "smallest signed width holding every exact partial sum (the largest "
                                       "|running sum|, bias included; with zero_point=fold the folded bias) of the "
                                       "node on the exact datapath fed exact inputs: the width from which the node "
                                       "is exact on this data"),
    ("bits needed cum", "acc_bits_needed_cumulative", "the same partial sums with the node's configured bias "
                                                      "register, fed the inputs of the run as configured"),
    ("headroom", "headroom_bits", "acc bits - bits needed; negative: some exact partial sum does not fit"),
    ("bias clipped", "bias_clipped", "biases saturated to fit the bias register or the accumulator (at "
                                     "conversion and on this datapath)"),
    ("clipped", "clipped_fraction", "fraction of the node's outputs whose requantized value fell outside the "
                                    "output code range and was clamped (a fused ReLU's floor does not count)"),
)
_LAYER_COLUMNS = tuple((h, k) for h, k, _ in LAYER_COLUMN_DEFINITIONS)
# (sweep record column, definition): the sweep's columns, defined once for its text, JSON and HTML forms.
SWEEP_COLUMN_DEFINITIONS = (
    ("accumulator_bits", "configured accumulator width of the point (its bias register follows it when it was "
                         "as wide as the accumulator)"),
    ("exact_fraction", "fraction of output codes (every output) bit-exact with the exact datapath of the "
                       "point's configuration (accumulator that never overflows, full bias, 31-bit multiplier)"),
    ("max_lsb_error", "largest |output code - exact datapath's code|, in output LSBs"),
    ("mean_lsb_error", "mean |output code - exact datapath's code|, in output LSBs"),
    ("accuracy", "top-1 accuracy on the labels (none without labels)"),
    ("agreement", "fraction of samples whose top-1 equals the float reference's (meaningless for a one-value "
                  "output)"),
    ("output_sqnr_db", "SQNR of the dequantized output against the float reference"),
    ("overflow_count", "accumulator adds that overflowed, all nodes, the network run as configured"),
    ("bias_clipped", "biases saturated into the bias register (conversion) or the accumulator (run)"),
)
_SWEEP_COLUMNS = ("weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding",
                  "exact_fraction", "max_lsb_error", "accuracy", "agreement", "output_sqnr_db", "overflow_count",
                  "bias_clipped")


@dataclass
class Report:
    """Result of :func:`fxpsim.hardware.simulate` (and optionally of a sweep), with its renderings.

    Attributes
    ----------
    layers : list of LayerRecord
    network : dict
        Network-level numbers (see the module docstring).
    config : dict or None
        The hardware configuration (TOML-shaped dict).
    sweep : dict or None
        ``{"grid", "records", "pareto_accumulator", "pareto_bitops"}`` from :func:`fxpsim.sweeps.sweep`.
    """

    layers: list = field(default_factory=list)
    network: dict = field(default_factory=dict)
    config: dict | None = None
    model: str = ""
    title: str = "fxpsim hardware simulation"
    sweep: dict | None = None
    notes: list = field(default_factory=list)
    conclusion: list = field(default_factory=list)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc)
                         .replace(microsecond=0).isoformat())

    def __setattr__(self, name, value):
        if name == "sweep" and hasattr(value, "to_dict"):   # a SweepResult attaches directly
            value = value.to_dict()
        super().__setattr__(name, value)

    # ----- data ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        from .._version import __version__
        return _json_safe({
            "schema": REPORT_SCHEMA, "schema_version": REPORT_SCHEMA_VERSION, "title": self.title,
            "created": self.created, "fxpsim_version": __version__, "config": self.config,
            "model": self.model, "network": self.network, "layers": [r.to_dict() for r in self.layers],
            "sweep": self.sweep, "notes": list(self.notes), "conclusion": list(self.conclusion)})

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        if d.get("schema") != REPORT_SCHEMA:
            raise ValueError(f"not an fxpsim report (schema {d.get('schema')!r}, expected {REPORT_SCHEMA!r})")
        if d.get("schema_version") != REPORT_SCHEMA_VERSION:
            raise ValueError(f"report schema_version {d.get('schema_version')!r} is not supported "
                             f"(this fxpsim reads version {REPORT_SCHEMA_VERSION})")
        return cls(layers=[LayerRecord.from_dict(r) for r in d.get("layers", [])],
                   network={k: _from_json_float(v) for k, v in (d.get("network") or {}).items()},
                   config=d.get("config"), model=d.get("model", ""), title=d.get("title", ""),
                   sweep=d.get("sweep"), notes=list(d.get("notes", [])), created=d.get("created", ""),
                   conclusion=list(d.get("conclusion", [])))

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls.from_dict(json.loads(text))

    # ----- text renderings ----------------------------------------------------------------------------
    def _network_lines(self) -> list[tuple[str, Any]]:
        n = self.network
        keys = (("samples", "n_samples"), ("hardware accuracy", "accuracy"),
                ("float accuracy", "float_accuracy"), ("top-1 agreement with float", "agreement"),
                ("output SQNR (dB)", "output_sqnr_db"), ("accumulator overflows", "overflow_count"),
                ("bit-ops per sample", "bit_ops"))
        return [(label, n[key]) for label, key in keys if key in n]

    def layer_table(self) -> str:
        return format_table([[getattr(r, key) for _, key in _LAYER_COLUMNS] for r in self.layers],
                            [h for h, _ in _LAYER_COLUMNS])

    def sweep_table(self, limit: int | None = None) -> str:
        if not self.sweep or not self.sweep.get("records"):
            return ""
        records = self.sweep["records"][:limit] if limit else self.sweep["records"]
        cols = [c for c in _SWEEP_COLUMNS if any(c in r for r in records)]
        return format_table([[r.get(c) for c in cols] for r in records], cols)

    def to_text(self) -> str:
        """The terminal rendering: config line, network summary, per-layer table, sweep summary."""
        out = [self.title]
        if self.config:
            out.append(f"hardware: {self.config.get('name', '')} - {self.config.get('description', '')}")
        out += [f"  {label}: {_fmt(v)}" for label, v in self._network_lines()]
        if self.layers:
            out += ["", self.layer_table(), "columns:"]
            out += [f"  {h}: {d}" for h, _, d in LAYER_COLUMN_DEFINITIONS]
        if self.sweep and self.sweep.get("records"):
            out += ["", f"sweep: {len(self.sweep['records'])} configurations"]
            pareto = self.sweep.get("pareto_accumulator") or []
            if pareto:
                out += [f"Pareto front ({self.sweep.get('metric', 'accuracy')} vs accumulator bits):",
                        format_table([[r.get(c) for c in _SWEEP_COLUMNS] for r in pareto], _SWEEP_COLUMNS)]
        out += [f"note: {n}" for n in self.notes + list((self.sweep or {}).get("notes") or [])]
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_text()

    def to_markdown(self, plot_files=()) -> str:
        """Markdown rendering; ``plot_files``: names of the plots saved beside it in ``plots/`` (linked)."""
        def md_table(headers, rows):
            lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
            return "\n".join(lines)
        out = [f"# {self.title}", "", f"Created {self.created}."]
        if self.config:
            out += ["", f"**Hardware:** `{self.config.get('name', '')}` - {self.config.get('description', '')}"]
        out += ["", "## Network", "", md_table(["quantity", "value"], self._network_lines())]
        if self.layers:
            out += ["", "## Layers", "", md_table([h for h, _ in _LAYER_COLUMNS],
                                                   [[getattr(r, k) for _, k in _LAYER_COLUMNS]
                                                    for r in self.layers]), ""]
            out += [f"- **{h}**: {d}" for h, _, d in LAYER_COLUMN_DEFINITIONS]
        if plot_files:
            from .plots import CAPTIONS, missing_figure_sentences
            out += ["", "## Plots", ""] + [f"- [{CAPTIONS.get(name, name)}](plots/{name}.png)" for name in plot_files]
            out += [f"- {sentence}" for sentence in missing_figure_sentences(self)]
        if self.sweep and self.sweep.get("records"):
            recs = self.sweep["records"]
            cols = [c for c in _SWEEP_COLUMNS if any(c in r for r in recs)]
            out += ["", "## Sweep", "", md_table(cols, [[r.get(c) for c in cols] for r in recs])]
            if self.sweep.get("pareto_accumulator"):
                out += ["", "### Pareto front: accuracy vs accumulator bits", "",
                        md_table(cols, [[r.get(c) for c in cols] for r in self.sweep["pareto_accumulator"]])]
        if self.notes:
            out += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"

    def headline(self) -> tuple[list, list]:
        """``(answer, caveats)`` that open the HTML page: the report's :attr:`conclusion` and a sweep's
        recommendation (with the metric it names), then the sweep's notes and what the tables below show."""
        answer, caveats = list(self.conclusion), []
        if self.sweep:
            rec = self.sweep.get("recommendation") or {}
            if rec.get("accumulator_bits") is not None:
                answer.append(f"recommended accumulator: {rec['accumulator_bits']} bits ({rec.get('config')}), "
                              f"by the metric {rec.get('metric')!r}: {rec.get('reason')}")
            elif rec:
                answer.append(f"no accumulator width recommended by the metric {rec.get('metric')!r}: "
                              f"{rec.get('reason')}")
            caveats += [str(n) for n in self.sweep.get("notes", [])]
            if self.layers:
                name = (self.config or {}).get("name", "the base configuration")
                caveats.append(f"the network and layer tables below are those of the unswept base configuration "
                               f"{name!r}, not of a swept point; the sweep's records follow them")
        return answer, caveats

    # ----- HTML ---------------------------------------------------------------------------------------
    def figures(self) -> dict:
        """``{name: matplotlib Figure}`` of every plot this report has data for (see :mod:`fxpsim.plots`)."""
        from . import plots
        return plots.report_figures(self)

    def to_html(self, figures: dict | None = None) -> str:
        """One self-contained HTML page: tables plus every plot as an embedded PNG (no network access).

        ``figures``: ``{name: Figure or PNG bytes}`` (default: :meth:`figures`).
        """
        from . import plots
        figures = self.figures() if figures is None else figures
        esc = html.escape

        def table(headers, rows):
            head = "".join(f"<th>{esc(str(h))}</th>" for h in headers)
            body = "".join("<tr>" + "".join(f"<td>{esc(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows)
            return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

        parts = [f"<h1>{esc(self.title)}</h1>", f"<p class='meta'>Created {esc(self.created)}</p>"]
        answer, caveats = self.headline()
        if answer or caveats:
            parts += ["<section id='conclusion'><h2>Conclusion</h2>",
                      "<ul>" + "".join(f"<li><b>{esc(a)}</b></li>" for a in answer) + "</ul>" if answer else "",
                      ("<h3>Caveats</h3><ul>" + "".join(f"<li>{esc(c)}</li>" for c in caveats) + "</ul>")
                      if caveats else "", "</section>"]
        if self.config:
            parts.append(f"<p><b>Hardware:</b> {esc(str(self.config.get('name', '')))} - "
                         f"{esc(str(self.config.get('description', '')))}</p>")
        parts += ["<h2>Network</h2>", table(["quantity", "value"], self._network_lines())]
        if self.layers:
            parts += ["<h2>Layers</h2>", table([h for h, _ in _LAYER_COLUMNS],
                                               [[getattr(r, k) for _, k in _LAYER_COLUMNS] for r in self.layers]),
                      "<dl class='columns'>" + "".join(f"<dt>{esc(h)}</dt><dd>{esc(d)}</dd>"
                                                       for h, _, d in LAYER_COLUMN_DEFINITIONS) + "</dl>"]
        parts += [f"<p>{esc(sentence)}</p>" for sentence in plots.missing_figure_sentences(self)]
        for name, fig in figures.items():
            png_bytes = fig if isinstance(fig, bytes) else plots.figure_png(fig)
            data = base64.b64encode(png_bytes).decode("ascii")
            caption = plots.CAPTIONS.get(name, name)
            parts.append(f"<figure id='plot-{esc(name)}'><img alt='{esc(name)}' "
                         f"src='data:image/png;base64,{data}'/><figcaption>{esc(caption)}</figcaption></figure>")
        if self.sweep and self.sweep.get("records"):
            recs = self.sweep["records"]
            cols = [c for c in _SWEEP_COLUMNS if any(c in r for r in recs)]
            for key, label in (("pareto_accumulator", "accumulator bits"), ("pareto_bitops", "bit-ops")):
                front = self.sweep.get(key) or []
                if front:
                    extra = ["bit_ops"] if key == "pareto_bitops" else []
                    parts += [f"<h2>Pareto front: {esc(str(self.sweep.get('metric', 'accuracy')))} vs {label}</h2>",
                              table(cols + extra, [[r.get(c) for c in cols + extra] for r in front])]
            parts += [f"<details><summary>Sweep: all {len(recs)} configurations</summary>",
                      table(cols, [[r.get(c) for c in cols] for r in recs]), "</details>",
                      "<dl class='columns'>" + "".join(f"<dt>{esc(h)}</dt><dd>{esc(d)}</dd>"
                                                       for h, d in SWEEP_COLUMN_DEFINITIONS) + "</dl>"]
        if self.config:
            parts += ["<h2>Configuration</h2>",
                      f"<pre>{esc(json.dumps(_json_safe(self.config), indent=2))}</pre>"]
        if self.model:
            parts += ["<h2>Model</h2>", f"<pre>{esc(self.model)}</pre>"]
        if self.notes:
            parts += ["<h2>Notes</h2>", "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in self.notes) + "</ul>"]
        style = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;"
                 "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
                 "th{background:#eee}figure{margin:1em 0}img{max-width:100%}.meta{color:#666}"
                 "pre{white-space:pre-wrap;word-break:break-word}dl.columns dt{font-weight:bold}"
                 "dl.columns dd{margin:0 0 .4em 1.5em}")
        return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + esc(self.title) +
                f"</title><style>{style}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")

    # ----- files --------------------------------------------------------------------------------------
    def save(self, out_dir: str | os.PathLike, *, html_report: bool = True, png: bool = True) -> dict:
        """Write ``report.json``, ``report.md``, ``report.html``, ``plots/*.png`` and ``sweep.csv``/``sweep.json``.

        Returns ``{"json": path, "markdown": path, "html": path, "plots": {name: path}, ...}``.
        """
        from . import plots
        out_dir = os.fspath(out_dir)
        os.makedirs(out_dir, exist_ok=True)
        _remove_stale(out_dir)
        paths: dict[str, Any] = {}
        paths["json"] = _write(os.path.join(out_dir, "report.json"), self.to_json())
        figures = {name: plots.figure_png(fig) for name, fig in self.figures().items()} if (html_report or png) else {}
        paths["markdown"] = _write(os.path.join(out_dir, "report.md"), self.to_markdown(list(figures) if png else ()))
        if self.sweep and self.sweep.get("records"):
            paths["sweep_csv"] = write_csv(self.sweep["records"], os.path.join(out_dir, "sweep.csv"))
            paths["sweep_json"] = _write(os.path.join(out_dir, "sweep.json"),
                                         json.dumps(_json_safe(self.sweep), indent=2, allow_nan=False))
        if html_report or png:
            if png:
                os.makedirs(os.path.join(out_dir, "plots"), exist_ok=True)
                paths["plots"] = {}
                for name, png_bytes in figures.items():
                    p = os.path.join(out_dir, "plots", f"{name}.png")
                    with open(p, "wb") as fh:
                        fh.write(png_bytes)
                    paths["plots"][name] = p
            if html_report:
                paths["html"] = _write(os.path.join(out_dir, "report.html"), self.to_html(figures))
        return paths


_OUTPUTS = ("report.json", "report.md", "report.html", "sweep.csv", "sweep.json")


def _remove_stale(out_dir: str) -> None:
    """Delete the files an earlier report wrote here (so an old sweep.csv never sits beside a new report)."""
    for name in _OUTPUTS:
        path = os.path.join(out_dir, name)
        if os.path.isfile(path):
            os.remove(path)
    plot_dir = os.path.join(out_dir, "plots")
    if os.path.isdir(plot_dir):
        for name in os.listdir(plot_dir):
            if name.endswith(".png"):
                os.remove(os.path.join(plot_dir, name))


def _write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path

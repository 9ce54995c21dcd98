"""``Report.to_html`` and ``Report.headline`` against pages typed out by hand.

Written to kill the mutants of ``fxpsim/report/render.py`` (``to_html``, ``headline``) that
tests/report/test_render.py left alive (it checks that the page is self-contained and embeds every plot, not
what the page says), see tools/mutation/README.md.  The reports here are built by hand (no simulation, no
matplotlib: the figures are given as PNG bytes), so the expected page is written out here: every section,
every escaped character, every table cell as ``format_value`` is documented to print it (``0.25``, ``inf``,
``-`` for None).  The column definitions are content, not rendering: their ``<dl>`` is rebuilt here from
the definition tables with the standard library's ``html.escape``.
"""
from __future__ import annotations

import base64
import html

from fxpsim.report.render import LAYER_COLUMN_DEFINITIONS, SWEEP_COLUMN_DEFINITIONS, LayerRecord, Report

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;"
         "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
         "th{background:#eee}figure{margin:1em 0}img{max-width:100%}.meta{color:#666}"
         "pre{white-space:pre-wrap;word-break:break-word}dl.columns dt{font-weight:bold}"
         "dl.columns dd{margin:0 0 .4em 1.5em}")


def page(title, parts):
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + title + "</title><style>" + STYLE +
            "</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def table(headers, rows):
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr></thead><tbody>" +
            "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows) +
            "</tbody></table>")


def definitions(pairs):
    return ("<dl class='columns'>" + "".join(f"<dt>{html.escape(h)}</dt><dd>{html.escape(d)}</dd>" for h, d in pairs)
            + "</dl>")


LAYER_HEADERS = ["layer", "kind", "MSE", "SQNR dB", "max err LSB", "SQNR isolated", "not exact", "not exact iso",
                 "acc bits", "overflows", "ovf iso", "ovf rate", "bits needed", "bits needed cum", "headroom",
                 "bias clipped", "clipped"]
LAYER_DL = definitions([(h, d) for h, _, d in LAYER_COLUMN_DEFINITIONS])
SWEEP_DL = definitions(SWEEP_COLUMN_DEFINITIONS)
REC0 = {"weight_bits": 4, "accumulator_bits": 10, "accuracy": 0.5}
REC1 = {"weight_bits": 8, "accumulator_bits": 16, "accuracy": 0.75, "bit_ops": 64}
PNG = b"\x89PNG\r\n\x1a\n"


def full_report():
    layers = [LayerRecord(0, "conv<1>", "conv2d", (2, 2, 3), macs=108, mse=0.25, max_abs_error_lsb=1.5,
                          accumulator_bits=16, overflow_count=3, overflow_rate=0.0125, acc_bits_needed=18,
                          headroom_bits=-2, clipped_fraction=0.5, not_exact_fraction=0.125, bias_clipped=1),
              LayerRecord(1, "fc", "dense", (3,), sqnr_db=12.5, isolated_sqnr_db=20.0, not_exact_isolated=0.0,
                          overflow_count_isolated=0, acc_bits_needed_cumulative=9)]
    sweep = {"records": [REC0, REC1], "pareto_accumulator": [REC0], "pareto_bitops": [REC1], "metric": "agreement",
             "notes": ["caveat <1>"],
             "recommendation": {"accumulator_bits": 16, "config": "w8", "metric": "accuracy", "reason": "best"}}
    return Report(layers=layers, network={"n_samples": 10, "accuracy": 0.75, "overflow_count": 3,
                                          "bit_ops": 2000000, "seconds": 1.0},
                  config={"name": "int8-acc16", "description": "a & b"}, model="Sequential(<x>)", title="T & t",
                  sweep=sweep, notes=["n1 <b>"], conclusion=["use 18 bits"], created="2026-01-01T00:00:00+00:00")


def test_full_page():
    rep = full_report()
    got = rep.to_html({"sqnr_per_layer": PNG, "a<b": b"xyz"})
    caveats = ["caveat &lt;1&gt;", "the network and layer tables below are those of the unswept base configuration "
               "&#x27;int8-acc16&#x27;, not of a swept point; the sweep&#x27;s records follow them"]
    want = page("T &amp; t", [
        "<h1>T &amp; t</h1>",
        "<p class='meta'>Created 2026-01-01T00:00:00+00:00</p>",
        "<section id='conclusion'><h2>Conclusion</h2>",
        "<ul><li><b>use 18 bits</b></li><li><b>recommended accumulator: 16 bits (w8), by the metric "
        "&#x27;accuracy&#x27;: best</b></li></ul>",
        "<h3>Caveats</h3><ul>" + "".join(f"<li>{c}</li>" for c in caveats) + "</ul>",
        "</section>",
        "<p><b>Hardware:</b> int8-acc16 - a &amp; b</p>",
        "<h2>Network</h2>",
        table(["quantity", "value"], [["samples", "10"], ["hardware accuracy", "0.75"],
                                      ["accumulator overflows", "3"], ["bit-ops per sample", "2000000"]]),
        "<h2>Layers</h2>",
        table(LAYER_HEADERS, [
            ["conv&lt;1&gt;", "conv2d", "0.25", "inf", "1.5", "-", "0.125", "-", "16", "3", "-", "0.0125", "18", "-",
             "-2", "1", "0.5"],
            ["fc", "dense", "0", "12.5", "0", "20", "0", "0", "-", "0", "0", "0", "-", "9", "-", "0", "0"]]),
        LAYER_DL,
        "<figure id='plot-sqnr_per_layer'><img alt='sqnr_per_layer' src='data:image/png;base64,"
        + base64.b64encode(PNG).decode() + "'/><figcaption>Signal-to-quantization-noise ratio of each layer&#x27;s "
        "hardware output against the float model.</figcaption></figure>",
        "<figure id='plot-a&lt;b'><img alt='a&lt;b' src='data:image/png;base64,eHl6'/>"
        "<figcaption>a&lt;b</figcaption></figure>",
        "<h2>Pareto front: agreement vs accumulator bits</h2>",
        table(["weight_bits", "accumulator_bits", "accuracy"], [["4", "10", "0.5"]]),
        "<h2>Pareto front: agreement vs bit-ops</h2>",
        table(["weight_bits", "accumulator_bits", "accuracy", "bit_ops"], [["8", "16", "0.75", "64"]]),
        "<details><summary>Sweep: all 2 configurations</summary>",
        table(["weight_bits", "accumulator_bits", "accuracy"], [["4", "10", "0.5"], ["8", "16", "0.75"]]),
        "</details>",
        SWEEP_DL,
        "<h2>Configuration</h2>",
        "<pre>{\n  &quot;name&quot;: &quot;int8-acc16&quot;,\n  &quot;description&quot;: &quot;a &amp; b&quot;\n}</pre>",
        "<h2>Model</h2>",
        "<pre>Sequential(&lt;x&gt;)</pre>",
        "<h2>Notes</h2>",
        "<ul><li>n1 &lt;b&gt;</li></ul>"])
    got_lines, want_lines = got.split("\n"), want.split("\n")
    for i, (g, w) in enumerate(zip(got_lines, want_lines)):
        assert g == w, f"line {i + 1}"
    assert got == want


def test_minimal_page_has_no_optional_section():
    # figures=None: the report's own figures, none for a report without layers or sweep (no matplotlib needed)
    got = Report(title="t", created="c").to_html()
    assert got == page("t", ["<h1>t</h1>", "<p class='meta'>Created c</p>", "<h2>Network</h2>",
                             table(["quantity", "value"], [])])


def test_no_overflow_sentence_conclusion_without_caveats_and_default_metric():
    rep = Report(layers=[LayerRecord(0, "d", "dense", sqnr_db=3.0)], title="x", created="c",
                 conclusion=["ok"], sweep={"records": [REC0], "pareto_accumulator": [REC0]})
    got = rep.to_html({})
    assert got == page("x", [
        "<h1>x</h1>", "<p class='meta'>Created c</p>",
        "<section id='conclusion'><h2>Conclusion</h2>", "<ul><li><b>ok</b></li></ul>",
        "<h3>Caveats</h3><ul><li>the network and layer tables below are those of the unswept base configuration "
        "&#x27;the base configuration&#x27;, not of a swept point; the sweep&#x27;s records follow them</li></ul>",
        "</section>",
        "<h2>Network</h2>", table(["quantity", "value"], []),
        "<h2>Layers</h2>",
        table(LAYER_HEADERS, [["d", "dense", "0", "3", "0", "-", "0", "-", "-", "0", "-", "0", "-", "-", "-", "0",
                               "0"]]),
        LAYER_DL,
        "<p>No accumulator add overflowed in any layer (no overflow chart).</p>",
        "<h2>Pareto front: accuracy vs accumulator bits</h2>",
        table(["weight_bits", "accumulator_bits", "accuracy"], [["4", "10", "0.5"]]),
        "<details><summary>Sweep: all 1 configurations</summary>",
        table(["weight_bits", "accumulator_bits", "accuracy"], [["4", "10", "0.5"]]),
        "</details>", SWEEP_DL])


def test_caveats_without_a_conclusion_and_an_empty_sweep():
    rep = Report(title="y", created="c", sweep={"records": [], "notes": ["reused points"]})
    got = rep.to_html({})
    assert got == page("y", ["<h1>y</h1>", "<p class='meta'>Created c</p>",
                             "<section id='conclusion'><h2>Conclusion</h2>", "",
                             "<h3>Caveats</h3><ul><li>reused points</li></ul>", "</section>",
                             "<h2>Network</h2>", table(["quantity", "value"], [])])


def test_headline_branches():
    assert Report().headline() == ([], [])
    assert Report(conclusion=["a", "b"]).headline() == (["a", "b"], [])
    rec = {"metric": "agreement", "reason": "nothing reaches 0.99"}
    rep = Report(sweep={"recommendation": rec, "notes": [1.5, "n"]}, conclusion=["c"])
    assert rep.headline() == (["c", "no accumulator width recommended by the metric 'agreement': nothing reaches "
                                    "0.99"], ["1.5", "n"])
    rec = {"accumulator_bits": 0, "config": None}           # 0 bits is a value, not "none recommended"
    assert Report(sweep={"recommendation": rec}).headline() == (
        ["recommended accumulator: 0 bits (None), by the metric None: None"], [])
    rep = Report(sweep={"recommendation": {}}, layers=[LayerRecord(0, "d", "dense")], config={"name": "cfg"})
    assert rep.headline() == ([], ["the network and layer tables below are those of the unswept base "
                                   "configuration 'cfg', not of a swept point; the sweep's records follow them"])
    rep = Report(sweep={}, layers=[LayerRecord(0, "d", "dense")])   # an empty sweep dict adds nothing
    assert rep.headline() == ([], [])
    conclusion = ["x"]
    rep = Report(conclusion=conclusion, sweep={"recommendation": {"accumulator_bits": 9, "config": "c",
                                                                   "metric": "m", "reason": "r"}})
    answer, _ = rep.headline()
    assert answer == ["x", "recommended accumulator: 9 bits (c), by the metric 'm': r"]
    assert conclusion == ["x"] and rep.conclusion == ["x"]          # the report's own list is not extended

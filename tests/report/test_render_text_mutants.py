"""``Report``'s text, Markdown, JSON and file renderings against values written out by hand.

Written to kill the mutants of ``fxpsim/report/render.py`` outside ``to_html`` / ``headline`` (see
tools/mutation/README.md): ``to_text``, ``to_markdown``, ``sweep_table``, the JSON round trip, ``write_csv``
and ``save``.  The reports are built by hand (no simulation, no matplotlib: ``save`` is called without plots
or HTML), and every expected line is typed out here; the plain-text tables are read back by splitting on
runs of two or more spaces (an independent reading of the aligned columns), cells as ``format_value`` is
documented to print them (``0.25``, ``inf``, ``-`` for None).
"""
from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pytest

from fxpsim.report.render import LAYER_COLUMN_DEFINITIONS, LayerRecord, Report, write_csv

LAYER_HEADERS = ["layer", "kind", "MSE", "SQNR dB", "max err LSB", "SQNR isolated", "not exact", "not exact iso",
                 "acc bits", "overflows", "ovf iso", "ovf rate", "bits needed", "bits needed cum", "headroom",
                 "bias clipped", "clipped"]
SWEEP_HEADERS = ["weight_bits", "activation_bits", "accumulator_bits", "accumulator_overflow", "rounding",
                 "exact_fraction", "max_lsb_error", "accuracy", "agreement", "output_sqnr_db", "overflow_count",
                 "bias_clipped"]
REC0 = {"weight_bits": 4, "accumulator_bits": 10, "accuracy": 0.5}
REC1 = {"weight_bits": 8, "accumulator_bits": 16, "accuracy": 0.75, "rounding": "half_up"}
LAYER_ROW = ["c", "conv2d", "0.25", "inf", "1.5", "-", "0.125", "-", "16", "3", "-", "0.0125", "18", "-", "-2",
             "1", "0.5"]


def report():
    layer = LayerRecord(0, "c", "conv2d", (2, 3), macs=108, mse=0.25, max_abs_error_lsb=1.5, accumulator_bits=16,
                        overflow_count=3, overflow_rate=0.0125, acc_bits_needed=18, headroom_bits=-2,
                        clipped_fraction=0.5, not_exact_fraction=0.125, bias_clipped=1)
    network = {"n_samples": 10, "accuracy": 0.75, "float_accuracy": 0.5, "agreement": 0.875,
               "output_sqnr_db": math.inf, "overflow_count": 3, "bit_ops": 2000000, "seconds": 1.0}
    sweep = {"records": [REC0, REC1], "pareto_accumulator": [REC0], "metric": "agreement", "notes": ["sn"]}
    return Report(layers=[layer], network=network, config={"name": "cfg", "description": "d"}, title="T",
                  sweep=sweep, notes=["n1"], created="2026-01-01T00:00:00+00:00")


def cells(line):
    return re.split(r" {2,}", line.strip())


def check_table(lines, headers, rows):
    """A format_table block: header, dashes as wide as each column, then the rows, read back cell by cell."""
    assert cells(lines[0]) == headers
    widths = [len(d) for d in lines[1].split("  ")]
    assert set(lines[1]) <= {"-", " "}
    assert widths == [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    assert [cells(x) for x in lines[2:]] == rows


def test_to_text_every_section():
    lines = report().to_text().split("\n")
    assert lines[:10] == ["T", "hardware: cfg - d", "  samples: 10", "  hardware accuracy: 0.75",
                          "  float accuracy: 0.5", "  top-1 agreement with float: 0.875", "  output SQNR (dB): inf",
                          "  accumulator overflows: 3", "  bit-ops per sample: 2000000", ""]
    check_table(lines[10:13], LAYER_HEADERS, [LAYER_ROW])
    assert lines[13] == "columns:"
    assert lines[14:31] == [f"  {h}: {d}" for h, _, d in LAYER_COLUMN_DEFINITIONS]
    assert lines[31:34] == ["", "sweep: 2 configurations", "Pareto front (agreement vs accumulator bits):"]
    check_table(lines[34:37], SWEEP_HEADERS, [["4", "-", "10", "-", "-", "-", "-", "0.5", "-", "-", "-", "-"]])
    assert lines[37:] == ["note: n1", "note: sn"]
    assert str(report()) == report().to_text()


def test_to_text_minimal_and_default_metric_and_no_pareto():
    assert Report(title="t").to_text() == "t"
    rep = Report(title="t", network={"seconds": 2.0}, sweep={"records": [REC0], "pareto_accumulator": [REC0]})
    lines = rep.to_text().split("\n")
    assert lines[:4] == ["t", "", "sweep: 1 configurations", "Pareto front (accuracy vs accumulator bits):"]
    rep = Report(title="t", sweep={"records": [REC0], "notes": None}, notes=["a"])
    assert rep.to_text() == "t\n\nsweep: 1 configurations\nnote: a"
    assert Report(title="t", sweep={"records": [], "notes": ["s"]}).to_text() == "t\nnote: s"


def test_sweep_table_columns_and_limit():
    rep = report()
    assert rep.sweep_table() == rep.sweep_table(None)
    lines = rep.sweep_table().split("\n")
    check_table(lines, ["weight_bits", "accumulator_bits", "rounding", "accuracy"],
                [["4", "10", "-", "0.5"], ["8", "16", "half_up", "0.75"]])
    check_table(rep.sweep_table(limit=1).split("\n"), ["weight_bits", "accumulator_bits", "accuracy"],
                [["4", "10", "0.5"]])
    assert Report().sweep_table() == "" and Report(sweep={"records": []}).sweep_table() == ""


def md(headers, rows):
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + ["| " + " | ".join(r) + " |"
                                                                               for r in rows]


def test_to_markdown_every_section():
    got = report().to_markdown(["sqnr_per_layer", "x"])
    want = (["# T", "", "Created 2026-01-01T00:00:00+00:00.", "", "**Hardware:** `cfg` - d", "", "## Network", ""]
            + md(["quantity", "value"], [["samples", "10"], ["hardware accuracy", "0.75"], ["float accuracy", "0.5"],
                                         ["top-1 agreement with float", "0.875"], ["output SQNR (dB)", "inf"],
                                         ["accumulator overflows", "3"], ["bit-ops per sample", "2000000"]])
            + ["", "## Layers", ""] + md(LAYER_HEADERS, [LAYER_ROW]) + [""]
            + [f"- **{h}**: {d}" for h, _, d in LAYER_COLUMN_DEFINITIONS]
            + ["", "## Plots", "",
               "- [Signal-to-quantization-noise ratio of each layer's hardware output against the float model.]"
               "(plots/sqnr_per_layer.png)", "- [x](plots/x.png)"]
            + ["", "## Sweep", ""] + md(["weight_bits", "accumulator_bits", "rounding", "accuracy"],
                                        [["4", "10", "-", "0.5"], ["8", "16", "half_up", "0.75"]])
            + ["", "### Pareto front: accuracy vs accumulator bits", ""]
            + md(["weight_bits", "accumulator_bits", "rounding", "accuracy"], [["4", "10", "-", "0.5"]])
            + ["", "## Notes", "", "- n1"])
    assert got.split("\n")[:-1] == want and got.endswith("- n1\n")


def test_to_markdown_minimal_and_no_overflow_sentence():
    assert Report(title="t", created="c").to_markdown() == "# t\n\nCreated c.\n\n## Network\n\n| quantity | value |\n|---|---|\n"
    rep = Report(title="t", created="c", layers=[LayerRecord(0, "d", "dense")], sweep={"records": []})
    lines = rep.to_markdown(["sqnr_per_layer"]).split("\n")
    i = lines.index("## Plots")
    assert lines[i:i + 5] == ["## Plots", "",
                              "- [Signal-to-quantization-noise ratio of each layer's hardware output against the "
                              "float model.](plots/sqnr_per_layer.png)",
                              "- No accumulator add overflowed in any layer (no overflow chart).", ""]
    assert "## Sweep" not in lines and "## Notes" not in lines
    assert "## Plots" not in rep.to_markdown().split("\n")


def test_json_round_trip_and_non_finite_floats():
    rep = report()
    rep.layers[0].sqnr_db = -math.inf
    rep.layers[0].isolated_sqnr_db = math.nan
    rep.network["x"] = np.int16(-7)
    rep.network[3] = (np.float32(0.5), [math.inf])
    d = json.loads(rep.to_json(indent=None))
    assert d["schema"] == "fxpsim.report" and d["schema_version"] == 1 and d["title"] == "T"
    assert d["created"] == "2026-01-01T00:00:00+00:00" and d["model"] == "" and d["notes"] == ["n1"]
    assert d["config"] == {"name": "cfg", "description": "d"} and d["conclusion"] == []
    assert d["network"]["output_sqnr_db"] == "inf" and d["network"]["x"] == -7 and type(d["network"]["x"]) is int
    assert d["network"]["3"] == [0.5, ["inf"]]
    lay = d["layers"][0]
    assert lay["sqnr_db"] == "-inf" and lay["isolated_sqnr_db"] == "nan" and lay["output_shape"] == [2, 3]
    assert lay["macs"] == 108 and lay["acc_histogram"] is None and len(lay) == 26
    assert d["sweep"]["records"] == [REC0, REC1]
    back = Report.from_json(rep.to_json())
    assert back.title == "T" and back.created == rep.created and back.notes == ["n1"] and back.sweep == d["sweep"]
    assert back.config == rep.config and back.model == "" and back.conclusion == []
    assert back.network["output_sqnr_db"] == math.inf and back.network["x"] == -7
    b = back.layers[0]
    assert b.output_shape == (2, 3) and b.sqnr_db == -math.inf and math.isnan(b.isolated_sqnr_db)
    assert (b.index, b.name, b.kind, b.macs, b.headroom_bits) == (0, "c", "conv2d", 108, -2)
    assert "\n  " in rep.to_json() and "\n" not in rep.to_json(indent=None)


def test_from_dict_defaults_and_refusals():
    r = Report.from_dict({"schema": "fxpsim.report", "schema_version": 1, "network": None,
                          "layers": [{"index": 1, "name": "n", "kind": "relu", "unknown": 5}]})
    assert (r.title, r.model, r.created, r.notes, r.conclusion, r.config, r.sweep, r.network) == \
        ("", "", "", [], [], None, None, {})
    assert r.layers[0].output_shape == () and (r.layers[0].index, r.layers[0].kind) == (1, "relu")
    with pytest.raises(ValueError, match=r"^not an fxpsim report \(schema 'x', expected 'fxpsim.report'\)$"):
        Report.from_dict({"schema": "x", "schema_version": 1})
    with pytest.raises(ValueError, match=r"^report schema_version 2 is not supported \(this fxpsim reads version 1\)$"):
        Report.from_dict({"schema": "fxpsim.report", "schema_version": 2})


def test_a_sweep_result_attaches_by_its_to_dict():
    class Result:
        def to_dict(self):
            return {"records": [REC0]}
    rep = Report()
    rep.sweep = Result()
    assert rep.sweep == {"records": [REC0]}
    rep.model = Result()              # only the sweep attribute converts
    assert isinstance(rep.model, Result)


def test_write_csv_union_of_columns(tmp_path):
    path = tmp_path / "s.csv"
    assert write_csv(iter([{"a": 1, "b": math.inf}, {"c": "x", "a": np.int8(2)}]), path) == str(path)
    with open(path, newline="", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == [["a", "b", "c"], ["1", "inf", ""], ["2", "", "x"]]


def test_save_without_plots_replaces_stale_files(tmp_path):
    (tmp_path / "plots").mkdir()
    for name in ("report.html", "sweep.csv", "keep.txt", "plots/old.png", "plots/keep.svg"):
        (tmp_path / name).write_text("old")
    rep = Report(title="t", created="c", sweep={"records": [REC0]})
    paths = rep.save(tmp_path, html_report=False, png=False)
    d = str(tmp_path)
    assert paths == {"json": f"{d}/report.json", "markdown": f"{d}/report.md", "sweep_csv": f"{d}/sweep.csv",
                     "sweep_json": f"{d}/sweep.json"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "plots", "report.json", "report.md",
                                                          "sweep.csv", "sweep.json"]
    assert [p.name for p in (tmp_path / "plots").iterdir()] == ["keep.svg"]
    assert json.loads((tmp_path / "report.json").read_text())["title"] == "t"
    assert (tmp_path / "report.md").read_text(encoding="utf-8").startswith("# t\n\nCreated c.\n")
    assert json.loads((tmp_path / "sweep.json").read_text()) == {"records": [REC0]}
    assert (tmp_path / "sweep.csv").read_text().splitlines() == ["weight_bits,accumulator_bits,accuracy", "4,10,0.5"]
    paths = Report(title="u").save(tmp_path / "new" / "dir", html_report=False, png=False)
    assert sorted(paths) == ["json", "markdown"] and (tmp_path / "new" / "dir" / "report.md").is_file()

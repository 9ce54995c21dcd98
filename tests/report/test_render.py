"""Reports: JSON schema and round trip, text/Markdown tables, one self-contained HTML file with every plot."""
from __future__ import annotations

import base64
import json
import math
from html.parser import HTMLParser

import numpy as np
import pytest

from fxpsim import nn, plots
from fxpsim.hardware import simulate
from fxpsim.report.render import REPORT_SCHEMA, REPORT_SCHEMA_VERSION, LayerRecord, Report, format_table
from fxpsim.hardware.sweeps import sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (60, 6, 6, 1)).astype(np.float32)
    model = nn.Sequential(nn.Conv2D(1, 4, 3, padding="VALID", activation="relu", seed=0), nn.MaxPool2D(2), nn.Flatten(),
                          nn.Dense(16, 3, seed=1))
    y = model.forward(x).argmax(axis=1)
    rep = simulate(model, "int8-acc16-wrap", x, y)
    rep.sweep = sweep(model, (x, y), {"weight_bits": [4, 8], "accumulator_bits": [10, 16, 32]},
                      processes=1, progress=False).to_dict()
    return rep


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.tags, self.external = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(attrs)
        for key in ("src", "href"):
            if key in attrs and not attrs[key].startswith("data:"):
                self.external.append(attrs[key])


def test_html_is_self_contained_and_embeds_every_plot(report, tmp_path):
    paths = report.save(tmp_path)
    text = open(paths["html"], encoding="utf-8").read()
    parser = _Collector()
    parser.feed(text)
    parser.close()
    assert parser.tags[0] == "html" and "table" in parser.tags
    assert parser.external == [] and "http://" not in text and "https://" not in text
    names = [img["alt"] for img in parser.imgs]
    assert sorted(names) == sorted(paths["plots"]) == sorted(["sqnr_per_layer", "overflow_per_layer",
                                                              "accumulator_histograms",
                                                              "accuracy_vs_accumulator",
                                                              "heatmap_weight_accumulator"])
    for img in parser.imgs:
        assert img["src"].startswith("data:image/png;base64,")
        png = base64.b64decode(img["src"].split(",", 1)[1])
        assert png.startswith(PNG_MAGIC)
        assert png == open(paths["plots"][img["alt"]], "rb").read()
    for key in ("json", "markdown", "sweep_csv", "sweep_json"):
        assert open(paths[key]).read()


def test_json_schema_and_round_trip(report):
    d = json.loads(report.to_json())
    assert d["schema"] == REPORT_SCHEMA and d["schema_version"] == REPORT_SCHEMA_VERSION == 1
    assert set(d) >= {"title", "created", "fxpsim_version", "config", "model", "network", "layers", "sweep",
                      "notes"}
    assert d["config"]["accumulator"] == {"bits": 16, "overflow": "wrap", "order": "sequential",
                                          "overflow_at": "add"}
    assert set(d["network"]) >= {"n_samples", "accuracy", "float_accuracy", "agreement", "output_sqnr_db",
                                 "overflow_count", "bit_ops"}
    layer = d["layers"][0]
    assert set(layer) == {f for f in LayerRecord.__dataclass_fields__}
    assert layer["kind"] == "conv2d" and layer["output_shape"] == [4, 4, 4]
    assert layer["acc_histogram"]["scale"] == "signed_log2"
    assert sum(layer["acc_histogram"]["counts"]) == 60 * 4 * 4 * 4
    back = Report.from_json(report.to_json())
    assert back.to_dict() == report.to_dict()
    assert back.layers[1].sqnr_db == report.layers[1].sqnr_db


def test_non_finite_numbers_and_bad_schema():
    rep = Report(layers=[LayerRecord(index=0, name="0:dense", kind="dense", sqnr_db=math.inf, mse=0.0)],
                 network={"output_sqnr_db": -math.inf, "agreement": math.nan})
    d = json.loads(rep.to_json())                # strict JSON (allow_nan=False) still works
    assert d["layers"][0]["sqnr_db"] == "inf" and d["network"]["output_sqnr_db"] == "-inf"
    back = Report.from_dict(d)
    assert back.layers[0].sqnr_db == math.inf and math.isnan(back.network["agreement"])
    with pytest.raises(ValueError, match="not an fxpsim report"):
        Report.from_dict({"schema": "other"})
    with pytest.raises(ValueError, match="schema_version 99"):
        Report.from_dict({"schema": REPORT_SCHEMA, "schema_version": 99})


def test_text_and_markdown(report):
    text = report.to_text()
    assert "0:conv2d" in text and "SQNR dB" in text and "hardware accuracy" in text
    assert "Pareto front" in text
    md = report.to_markdown()
    assert md.startswith("# ") and "| layer | kind |" in md and "## Sweep" in md
    assert format_table([[1, 2.5, None, math.inf]], ["a", "b", "c", "d"]).splitlines() == \
        ["a    b  c    d", "-  ---  -  ---", "1  2.5  -  inf"]


def test_plot_functions_render_png(report):
    recs = report.sweep["records"]
    figs = [plots.sqnr_bars(report.layers), plots.overflow_bars(report.layers),
            plots.accumulator_histograms(report.layers), plots.accuracy_vs_accumulator(recs, 0.9),
            plots.weight_accumulator_heatmap(recs), plots.accumulator_histograms([])]
    for fig in figs:
        assert plots.figure_png(fig).startswith(PNG_MAGIC)
    import subprocess
    import sys
    probe = ("import sys, fxpsim.report.plots as p; p.figure_png(p.sqnr_bars([])); "
             "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # no global backend / GUI state touched


def test_every_layer_column_is_defined_in_every_rendering(report):
    from fxpsim.report.render import LAYER_COLUMN_DEFINITIONS
    text, md, page = report.to_text(), report.to_markdown(), report.to_html(figures={})
    header = report.layer_table().splitlines()[0]
    for h, key, definition in LAYER_COLUMN_DEFINITIONS:
        assert h in header and hasattr(report.layers[0], key)
        assert f"  {h}: {definition}" in text
        assert f"- **{h}**: {definition}" in md
        assert f"<dt>{h}</dt>" in page
    # table values are the records' values
    row = report.layer_table().splitlines()[2].split()
    assert row[0] == report.layers[0].name and row[1] == report.layers[0].kind


def test_save_removes_stale_files_and_links_plots(report, tmp_path):
    (tmp_path / "sweep.csv").write_text("stale")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "old_plot.png").write_bytes(PNG_MAGIC)
    no_sweep = Report(layers=report.layers, network=report.network, config=report.config, title="t")
    paths = no_sweep.save(tmp_path)
    assert not (tmp_path / "sweep.csv").exists() and not (tmp_path / "plots" / "old_plot.png").exists()
    md = (tmp_path / "report.md").read_text()
    for name in paths["plots"]:
        assert f"(plots/{name}.png)" in md and (tmp_path / "plots" / f"{name}.png").exists()


def test_per_layer_plots_stay_legible_on_deep_networks():
    """65 layers (MobileNetV2's depth): one row per layer, labels unrotated, the figure grows with the depth;
    the accumulator values are one heat map whose rows carry every layer's counts, not a 53-panel grid."""
    n = 65
    rng = np.random.default_rng(0)
    layers = []
    for i in range(n):
        counts = rng.integers(0, 50, 60).tolist()
        layers.append({"name": f"op{i}:CONV_2D", "sqnr_db": float(rng.uniform(0, 30)), "overflow_count": i,
                       "overflow_rate": i / 1000, "accumulator_bits": 16, "acc_bits_needed": 18,
                       "acc_histogram": {"edges": np.linspace(-18, 18, 61).tolist(), "counts": counts}})
    for fig in (plots.sqnr_bars(layers), plots.overflow_bars(layers)):
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [r["name"] for r in layers]
        assert all(t.get_rotation() == 0 for t in ax.get_yticklabels())
        assert fig.get_figheight() >= 0.17 * n
    heat = plots.accumulator_histograms(layers)
    assert len(heat.axes) == 2                                   # the map and its colour bar
    image = heat.axes[0].images[0].get_array()
    assert image.shape[0] == n
    np.testing.assert_allclose((10 ** np.asarray(image) - 1).sum(axis=1),
                               [sum(r["acc_histogram"]["counts"]) for r in layers])   # every count lands
    assert plots.figure_png(heat).startswith(PNG_MAGIC)

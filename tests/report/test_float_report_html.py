"""The FloatReport's self-contained HTML page (fxpsim.report.float_render, float_plots).

The numbers in the page's tables are read back with html.parser and checked against the same quantities
computed here from the layer outputs: the float64 network written here in numpy (x W + b, ReLU), RMS
errors and the not-exact fraction from their definitions, and the bits-lost histogram on Fractions (the
exact ratio |y - y_ex| / ulp(y_ex), floor(log2) by integer bit lengths).  The plots are embedded PNGs.
"""
from __future__ import annotations

import base64
import math
from fractions import Fraction
from html.parser import HTMLParser

import numpy as np
import pytest

import fxpsim
from fxpsim import nn
from fxpsim.graph.extract import extract
from fxpsim.hardware.float_datapath import run_float_target

pytest.importorskip("matplotlib")


class _Tables(HTMLParser):
    """Cells of every <table id=...>, and the src of every <img>."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self._id, self._cell = {}, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._id = a.get("id")
            self.tables[self._id] = []
        elif tag == "tr" and self._id:
            self.tables[self._id].append([])
        elif tag in ("td", "th") and self._id:
            self._cell = ""
        elif tag == "img":
            self.images.append((a.get("alt"), a.get("src")))

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._id][-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._id = None


def _floor_log2(q: Fraction) -> int:
    k = q.numerator.bit_length() - q.denominator.bit_length()
    return k if Fraction(2) ** k <= q else k - 1


def _bits_lost(hw, ex, p):
    """Histogram of outputs by bits lost (FloatReport's definition), on Fractions."""
    counts, nonfinite = [0] * (p + 2), 0
    for a, b in zip(hw.ravel(), ex.ravel()):
        if a == b or (math.isnan(a) and math.isnan(b)):
            counts[0] += 1
        elif not (math.isfinite(a) and math.isfinite(b)):
            nonfinite += 1
        elif b == 0:
            counts[p + 1] += 1
        else:
            ulp = Fraction(2) ** (_floor_log2(abs(Fraction(b))) - p)
            counts[min(max(_floor_log2(abs(Fraction(a) - Fraction(b)) / ulp) + 1, 1), p + 1)] += 1
    return counts, nonfinite


def _rms(v):
    return math.sqrt(sum(float(t) ** 2 for t in v.ravel()) / v.size)


def _diff(a, b):
    out = []
    for s, t in zip(a.ravel(), b.ravel()):
        if s == t or (math.isnan(s) and math.isnan(t)):
            out.append(0.0)
        elif math.isnan(s) or math.isnan(t):
            out.append(math.inf)
        else:
            out.append(s - t)
    return np.array(out)


CASES = {"hopper-f4": ({"weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
                        "accumulator": {"preset": "hopper-wgmma-m64n8k32-f32-e4m3", "fraction_bits": 4}}, 23, False),
         "f16-overflow": ({"weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
                           "accumulator": {"preset": "hopper-wgmma-m64n8k32-f16-e4m3"}}, 10, True)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_html_numbers_equal_the_independent_computation(case, tmp_path):
    target, p, big = CASES[case]
    rng = np.random.default_rng(5)
    model = nn.mlp((12, 16, 4), seed=1)
    x = rng.normal(size=(20, 12)).astype(np.float32)
    if big:                                  # float16 outputs overflow to Inf on some outputs
        model.layers[0].W[:4] = 60.0
        x[:5, :4] = 30.0
    report = fxpsim.simulate(model, target, x)
    page = _Tables()
    page.feed(report.to_html())
    graph = extract(model, x)
    _, runs = run_float_target(graph, x, target, stages=True)
    s0, s1 = graph.stages
    ref0 = x.astype(np.float64) @ s0.weight + s0.bias                        # the float64 network, here
    ref1 = np.maximum(ref0, 0) @ s1.weight + s1.bias
    layers = page.tables["float-layers"]
    header = layers[0]
    col = {h: i for i, h in enumerate(header)}
    assert len(layers) == 3
    lost_rows = page.tables["float-bits-lost"]
    assert lost_rows[0] == ["layer", *map(str, range(p + 2)), "non-finite"]
    for row, lost, run, ref in zip(layers[1:], lost_rows[1:], runs, (ref0, ref1)):
        hw, ex = run.result.values, run.result.exact
        close = lambda cell, v: math.isclose(float(cell), v, rel_tol=1e-5, abs_tol=1e-300)  # noqa: E731
        assert row[col["layer"]] == run.name
        assert close(row[col["rel. RMS err vs float64"]], _rms(_diff(hw, ref)) / _rms(ref))
        assert close(row[col["rel. RMS err vs exact"]],
                     _rms(_diff(hw, ex)) / (_rms(np.where(np.isfinite(ex), ex, 0.0)) or 1.0))
        assert close(row[col["not exact"]], float(np.mean(_diff(hw, ex) != 0)))
        assert int(row[col["non-finite outputs"]]) == int(np.sum(~np.isfinite(hw)))
        for key, attr in (("overflows", "overflows"), ("NaNs", "nans"), ("saturated", "saturated")):
            assert int(row[col[key]]) == getattr(run.result, attr)
        counts, nonfinite = _bits_lost(hw, ex, p)
        assert lost == [run.name, *map(str, counts), str(nonfinite)]
        assert sum(counts) + nonfinite == hw.size
    names = [alt for alt, _ in page.images]
    assert names[:1] == ["float_errors"] and "bits_lost" in names
    assert ("float_counts" in names) == big
    for _, src in page.images:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    if big:
        assert any(int(r[col["overflows"]]) for r in layers[1:])
        assert any(int(r[col["non-finite outputs"]]) for r in layers[1:])      # Inf in both: bits lost 0
    paths = report.save(tmp_path)
    assert sorted(paths["plots"]) == sorted(names)
    assert open(paths["html"], encoding="utf-8").read().count("data:image/png;base64,") == len(names)

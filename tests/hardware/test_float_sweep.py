"""Float-datapath sweeps (fxpsim.hardware.float_sweep, reached through fxpsim.sweep) on a float ONNX model built
here with onnx.helper: every record's accuracy, agreement and error equal an independent Fraction model of
Hopper's FP8 tensor core (fused dots of `chunk` products truncated to `fraction_bits` below the largest
exponent, rounded toward zero to 13 bits, promoted to float32 every `promote_every`), the labels come from
onnxruntime's float32 run, and the conclusion equals the scan of those independent numbers."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import fxpsim
from fxpsim.hardware.config_schema import ConfigError

onnx = pytest.importorskip("onnx")                      # optional: the onnx extra
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto, helper  # noqa: E402
from reference_tensor_core import round_f32, tensor_core  # noqa: E402

M, K, N = 24, 64, 3
CFG = {"name": "h100", "weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
       "accumulator": {"preset": "h100-fp8"}}


def _e4m3(rng, shape):
    """Random finite E4M3 values from ml_dtypes (the NaN codes replaced by 0)."""
    c = rng.integers(0, 256, shape).astype(np.uint8)
    c[(c & 0x7F) == 0x7F] = 0
    return c.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    """One Gemm [M, 64] x [64, 3] + C on E4M3 values whose amax is 448 (input and every weight column), so
    every power-of-two scale is 1 and the codes are the values."""
    rng = np.random.default_rng(7)
    x, w = _e4m3(rng, (M, K)), _e4m3(rng, (K, N))
    x[0, 0], w[0, :] = 448.0, -448.0
    b = np.array([0.75, -1.5, 0.0])
    path = tmp_path_factory.mktemp("onnx") / "gemm.onnx"
    node = helper.make_node("Gemm", ["x", "W", "C"], ["y"], name="fc")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, N])],
                              [helper.make_tensor("W", TensorProto.FLOAT, [K, N], w.astype(np.float32).ravel()),
                               helper.make_tensor("C", TensorProto.FLOAT, [N], b.astype(np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return str(path), x.astype(np.float32), w, b


def _outputs(x, w, b, chunk, F, promote):
    xs = [[Fraction(float(v)) for v in row] for row in x]
    ws = [[Fraction(float(w[k, j])) for k in range(K)] for j in range(N)]
    return np.array([[float(tensor_core(r, ws[j], Fraction(float(b[j])), chunk, F, promote)) for j in range(N)]
                     for r in xs])


def _exact(x, w, b):
    return np.array([[float(round_f32(Fraction(float(b[j])) + sum(Fraction(float(x[i, k])) * Fraction(float(w[k, j]))
                                                               for k in range(K)), 23, nearest=True))
                      for j in range(N)] for i in range(M)])


def _labels(path, x):
    ort = pytest.importorskip("onnxruntime")
    y32 = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y = np.argmax(y32, 1)
    y[::4] = (y[::4] + 1) % N                    # a quarter mislabelled: accuracy is not agreement
    return y, y32


def test_records_and_conclusion_equal_the_fraction_model(gemm):
    path, x, w, b = gemm
    y, y32 = _labels(path, x)
    net = fxpsim.import_float_model(path)
    fbits, promotes = [1, 2, 4, 8, 13], [32, "inf"]
    res = fxpsim.sweep(net, (x, y), {"accumulator.fraction_bits": fbits, "promote_every": promotes}, config=CFG,
                       progress=False)
    exact = _exact(x, w, b)
    ref64 = x.astype(np.float64) @ w + b
    assert res.float64_accuracy == np.mean(np.argmax(y32, 1) == y)       # float64 and onnxruntime agree
    assert res.exact_accuracy == np.mean(np.argmax(exact, 1) == y)
    assert [(r["fraction_bits"], r["promote_every"]) for r in res.records] == \
        [(f, p) for f in fbits for p in (32, 0)]
    for r in res.records:
        out = _outputs(x, w, b, 32, r["fraction_bits"], r["promote_every"])
        pred = np.argmax(out, 1)
        assert r["accuracy"] == np.mean(pred == y)
        assert r["agreement_exact"] == np.mean(pred == np.argmax(exact, 1))
        assert r["agreement"] == np.mean(pred == np.argmax(ref64, 1))
        assert r["output_rel_rms"] == pytest.approx(math.sqrt(np.mean((out - ref64) ** 2) / np.mean(ref64 ** 2)),
                                                    rel=1e-9)
    # the conclusion, scanned here: per promote_every the narrowest F from which every wider F fits
    floor = res.exact_accuracy - 0.005
    firsts = {}
    for p in (32, 0):
        rows = [r for r in res.records if r["promote_every"] == p]
        ok = [r["fraction_bits"] for i, r in enumerate(rows) if all(q["accuracy"] >= floor for q in rows[i:])]
        if ok:
            firsts[p] = ok[0]
    assert firsts, "the grid should reach the exact accumulation's accuracy"
    narrow = min(firsts.values())
    assert res.best["narrowest_fraction_bits"] == narrow
    longest = 0 if 0 in firsts else max(firsts)
    assert res.best["largest_promote_every"] == longest
    assert f"fraction_bits within tolerance (every wider swept value fits too): {narrow} " in res.to_text()
    assert "default tolerance, 0.005" in res.conclusion[0]


def test_chunk_axis_equals_the_fraction_model(gemm):
    path, x, w, b = gemm
    net = fxpsim.import_float_model(path)
    res = fxpsim.sweep(net, x, {"chunk": [16, 64], "fraction_bits": [3]}, config=CFG, tolerance=0.1,
                       progress=False)
    exact = np.argmax(_exact(x, w, b), 1)
    assert res.metric == "agreement_exact" and res.tolerance == 0.1
    for r in res.records:
        assert r["promote_every"] == 128                 # the preset's, kept
        out = _outputs(x, w, b, r["chunk"], 3, 128)
        assert r["agreement_exact"] == np.mean(np.argmax(out, 1) == exact)


def test_an_fxpsim_model_sweeps_with_the_same_numbers_as_simulate():
    xt, yt = fxpsim.load_digits("test", flatten=True)
    model = fxpsim.nn.mlp((64, 16, 10), seed=0)
    xt, yt = xt[:60], yt[:60]
    res = fxpsim.sweep(model, (xt, yt), {"fraction_bits": [2, 13]}, config=CFG, progress=False)
    from fxpsim.graph.extract import extract
    graph = extract(model, xt)
    for r in res.records:
        point = dict(CFG, accumulator={"preset": "h100-fp8", "fraction_bits": r["fraction_bits"]})
        assert r["accuracy"] == fxpsim.simulate(graph, point, xt, yt).network["accuracy"]


def test_bad_grids_and_mismatches_name_what(gemm):
    path, x, _, _ = gemm
    net = fxpsim.import_float_model(path)
    with pytest.raises(ConfigError, match="unknown axis 'accumulator_bits'.*valid keys: accumulator.fraction_bits"):
        fxpsim.sweep(net, x, {"accumulator_bits": [16]}, config=CFG, progress=False)
    with pytest.raises(ConfigError, match="promote_every takes integers \\(or inf / never\\), got 'often'"):
        fxpsim.sweep(net, x, {"promote_every": ["often"]}, config=CFG, progress=False)
    with pytest.raises(ConfigError, match="grid point .*promote_every.*48.*multiple of chunk=32"):
        fxpsim.sweep(net, x, {"promote_every": [48]}, config=CFG, progress=False)
    with pytest.raises(ConfigError, match="integer target"):
        fxpsim.sweep(net, x, {"fraction_bits": [8]}, config="tflite-int8", progress=False)
    with pytest.raises(ValueError, match="runs in this process"):
        fxpsim.sweep(net, x, {"fraction_bits": [8]}, config=CFG, processes=2, progress=False)
    with pytest.raises(ValueError, match="'accuracy' needs labels"):
        fxpsim.sweep(net, x, {"fraction_bits": [8]}, config=CFG, metric="accuracy", progress=False)
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0"):
        fxpsim.sweep(net, x, {"fraction_bits": [8]}, config=CFG, tolerance=-1.0, progress=False)
    graph = fxpsim.import_model("tests/vectors/onnx_models/hb_qgemm_s8_pt.onnx")
    with pytest.raises(ConfigError, match="integer graph"):
        fxpsim.sweep(graph, x, {"fraction_bits": [8]}, config=CFG, progress=False)


def test_the_report_carries_the_sweep(gemm, tmp_path):
    import csv
    import html.parser
    path, x, _, _ = gemm
    net = fxpsim.import_float_model(path)
    res = fxpsim.sweep(net, x, {"fraction_bits": [1, 13], "promote_every": ["never"]}, config=CFG, progress=False)
    report = fxpsim.simulate(net, CFG, x)
    report.sweep = res.to_dict()
    paths = report.save(tmp_path, png=False)

    class Cells(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.where, self.cells, self.items = None, [], []

        def handle_starttag(self, tag, attrs):
            if tag in ("table", "ul"):
                self.where = dict(attrs).get("id")

        def handle_endtag(self, tag):
            if tag in ("table", "ul"):
                self.where = None

        def handle_data(self, data):
            if self.where == "float-sweep" and self.lasttag == "td":
                self.cells.append(data)
            if self.where == "float-conclusion" and self.lasttag == "li":
                self.items.append(data)

    page = Cells()
    page.feed(open(paths["html"], encoding="utf-8").read())
    assert page.items == res.conclusion
    assert "plot-float_sweep" in open(paths["html"], encoding="utf-8").read()
    with open(paths["sweep_csv"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["fraction_bits"]) for r in rows] == [1, 13] and [r["promote_every"] for r in rows] == ["0", "0"]
    assert [float(r["agreement_exact"]) for r in rows] == [r["agreement_exact"] for r in res.records]
    assert "never" in page.cells


def test_the_chunk_key_round_trips_and_is_checked():
    from fxpsim.hardware import HardwareConfig
    from fxpsim.hardware.float_config import float_accumulator
    cfg = HardwareConfig.from_dict(dict(CFG, accumulator={"preset": "h100-fp8", "chunk": 64}))
    assert float_accumulator(cfg).chunk == 64 and 'chunk = 64' in cfg.to_toml()
    with pytest.raises(ConfigError, match="accumulator.chunk: must be an integer >= 1, got 0"):
        HardwareConfig.from_dict(dict(CFG, accumulator={"preset": "h100-fp8", "chunk": 0}))

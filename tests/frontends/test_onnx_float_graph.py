"""Float32 ONNX models as float graphs on a float datapath (fxpsim.frontends.onnx.float_graph).

* on inputs of a 1/4 grid (every sum exact in float32: tools/fixtures/float_onnx/make_models.py) a float32
  datapath, sequential FMA (``fpu-float32``) or Kulisch (``exact-float32``), equals onnxruntime's float32
  outputs bit for bit, through ``fxpsim.simulate`` too;
* on normal random inputs (sums not exact) the Kulisch path equals an independent model written here --
  the ONNX file's weights read with onnx.numpy_helper, NCHW loops on Fractions, every MAC output the exact
  sum rounded once to float32 (ties to even) -- and the FMA path the same loops rounding after every add in
  fxpsim's documented order (bias first, then K over (kh, kw, c));
* bad models and settings: errors name the node or the key.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.graph.float_run import calibrate_float_graph, run_float_graph
from fxpsim.hardware.config_schema import ConfigError
from fxpsim.hardware.float_datapath import run_float_target
from reference_float import round_to_float32

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

VEC = Path(__file__).resolve().parents[1] / "vectors" / "float_onnx"
SHAPES = {"grid_cnn": (2, 6, 6), "grid_gap": (3, 4, 4)}


def _target(preset):
    return {"weights": {"format": "float32", "scales": "none"},
            "activations": {"format": "float32", "scales": "none"}, "accumulator": {"preset": preset}}


def _ort(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("preset", ["fpu-float32", "exact-float32"])
def test_grid_inputs_equal_onnxruntime_bit_for_bit(name, preset):
    path = VEC / f"{name}.onnx"
    x = (np.random.default_rng(1).integers(-4, 5, (6, *SHAPES[name])) / 4.0).astype(np.float32)
    ref = _ort(path, x)
    graph = fxpsim.import_float_model(path)
    out = run_float_target(calibrate_float_graph(graph, x), x, _target(preset))
    assert out.dtype == np.float64 and np.array_equal(out, ref.astype(np.float64))
    report = fxpsim.simulate(graph, _target(preset), x)            # calibrates the imported graph itself
    assert np.array_equal(report.outputs, ref.astype(np.float64))
    assert all(r["err_exact_max"] == 0 and r["overflows"] == 0 for r in report.layers)


# ------------------------------------------------------------------ the independent model (grid_cnn)
def _f32(q: Fraction) -> Fraction:
    return Fraction(0) if q == 0 else (1 if q > 0 else -1) * round_to_float32(abs(q))


def _dot(c, terms, sequential):
    """fl32(c + sum a b) once, or s <- fl32(s + a b) from s = c (fused multiply-add)."""
    if not sequential:
        return _f32(c + sum(a * b for a, b in terms))
    s = c
    for a, b in terms:
        s = _f32(s + a * b)
    return s


def _conv(x, w, b, stride, pads, group, sequential):
    """NCHW conv on Fractions (lists); K in (kh, kw, c) order; pads (top, left, bottom, right)."""
    C, H, W = len(x), len(x[0]), len(x[0][0])
    O, I, KH, KW = w.shape
    t, left, bot, r = pads
    at = lambda c, i, j: x[c][i][j] if 0 <= i < H and 0 <= j < W else Fraction(0)  # noqa: E731
    OH, OW = (H + t + bot - KH) // stride + 1, (W + left + r - KW) // stride + 1
    out = []
    for o in range(O):
        cs = [o // (O // group)] if group > 1 else range(C)
        out.append([[_dot(Fraction(float(b[o])),
                          [(at(c, i * stride - t + a, j * stride - left + bb), Fraction(float(w[o, c - cs[0] if group > 1 else c, a, bb])))
                           for a in range(KH) for bb in range(KW) for c in cs], sequential)
                     for j in range(OW)] for i in range(OH)])
    return out


def _model_cnn(path, x, sequential):
    p = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    outs = []
    for sample in x:
        h = [[[Fraction(float(v)) for v in row] for row in ch] for ch in sample]
        h = _conv(h, p["w1"], p["b1"], 1, (1, 1, 1, 1), 1, sequential)
        h = [[[max(v, Fraction(0)) for v in row] for row in ch] for ch in h]
        h = _conv(h, p["w2"], p["b2"], 2, (1, 1, 0, 0), 4, sequential)
        h = [[[min(max(v, Fraction(0)), Fraction(6)) for v in row] for row in ch] for ch in h]
        h = [[[max(ch[i][j], ch[i][j + 1], ch[i + 1][j], ch[i + 1][j + 1]) for j in range(len(ch[0]) - 1)]
              for i in range(len(ch) - 1)] for ch in h]
        f = [v for ch in h for row in ch for v in row]                     # ONNX Flatten: C, H, W
        f = [max(_dot(Fraction(float(p["b3"][o])), [(f[k], Fraction(float(p["w3"][o, k]))) for k in range(32)],
                      sequential), Fraction(0)) for o in range(6)]
        outs.append([float(_dot(Fraction(float(p["b4"][o])), [(f[k], Fraction(float(p["w4"][k, o])))
                                                              for k in range(6)], sequential)) for o in range(5)])
    return np.array(outs)


@pytest.mark.parametrize("preset, sequential", [("exact-float32", False), ("fpu-float32", True)])
def test_random_inputs_equal_the_independent_float32_model(preset, sequential):
    path = VEC / "grid_cnn.onnx"
    x = np.random.default_rng(2).normal(size=(3, 2, 6, 6)).astype(np.float32)
    graph = calibrate_float_graph(fxpsim.import_float_model(path), x)
    out = run_float_target(graph, x, _target(preset))
    assert np.array_equal(out, _model_cnn(path, x, sequential))
    ref = _ort(path, x)
    assert np.max(np.abs(out - ref)) <= 1e-6 * np.max(np.abs(ref))     # and close to onnxruntime's float32


def test_fp8_datapath_on_the_imported_model_counts_alignment_losses():
    path = VEC / "grid_cnn.onnx"
    x = np.random.default_rng(3).normal(size=(16, 2, 6, 6)).astype(np.float32)
    target = {"weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
              "accumulator": {"preset": "hopper-wgmma-m64n8k32-f32-e4m3", "fraction_bits": 3}}
    report = fxpsim.simulate(fxpsim.import_float_model(path), target, x)
    assert [r["name"] for r in report.layers] == ["conv1", "dw2", "fc3", "fc4"]
    assert report.layers[0]["terms_inexact"] > 0 and report.layers[0]["err_exact_max"] > 0
    graph = calibrate_float_graph(fxpsim.import_float_model(path), x)
    assert graph.input_range == (float(x.min()), float(x.max()))
    ref = _ort(path, x)
    assert np.max(np.abs(run_float_graph(graph, x, None) - ref)) <= 1e-6 * np.max(np.abs(ref))   # float64 reference


# ------------------------------------------------------------------ bad models and settings
def _save(tmp_path, nodes, inits, in_shape=(2, 4, 4), out_dim=3, name="bad"):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *in_shape])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v, np.float32 if np.asarray(v).dtype.kind == "f"
                                                                     else None), k) for k, v in inits.items()])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_bad_models_name_the_node(tmp_path):
    w = np.ones((3, 2, 1, 1))
    p = _save(tmp_path, [helper.make_node("Conv", ["input", "w"], ["c"], "c1", kernel_shape=[1, 1]),
                         helper.make_node("Sigmoid", ["c"], ["output"], "sig")], {"w": w})
    with pytest.raises(ValueError, match=r"node 'sig' \(Sigmoid\): not supported in a float model"):
        fxpsim.import_float_model(p)
    p = _save(tmp_path, [helper.make_node("Conv", ["input", "w"], ["c"], "c1", kernel_shape=[1, 1], dilations=[2, 2]),
                         helper.make_node("Relu", ["c"], ["output"], "r")], {"w": w})
    with pytest.raises(ValueError, match=r"node 'c1' \(Conv\): dilations = \[2, 2\] is not supported"):
        fxpsim.import_float_model(p)
    p = _save(tmp_path, [helper.make_node("Conv", ["input", "w"], ["c"], "c1", kernel_shape=[1, 1]),
                         helper.make_node("Clip", ["c", "lo", "hi"], ["output"], "clip")],
              {"w": w, "lo": np.float32(-1), "hi": np.float32(1)})
    with pytest.raises(ValueError, match=r"node 'clip' \(Clip\): Clip\(-1.0, 1.0\)"):
        fxpsim.import_float_model(p)
    p = _save(tmp_path, [helper.make_node("Conv", ["input", "w"], ["c"], "c1", kernel_shape=[1, 1]),
                         helper.make_node("Conv", ["input", "w"], ["output"], "c2", kernel_shape=[1, 1])], {"w": w})
    with pytest.raises(ValueError, match=r"node 'c2' \(Conv\): reads \['input', 'w'\], not the previous"):
        fxpsim.import_float_model(p)
    p = _save(tmp_path, [helper.make_node("Conv", ["input", "x"], ["output"], "c1", kernel_shape=[1, 1])], {})
    with pytest.raises(ValueError, match=r"its weight \('x'\) must be a constant"):
        fxpsim.import_float_model(p)
    with pytest.raises(ValueError, match=r"node 'avgpool' \(AveragePool\): pads = \[1, 1, 0, 0\] is not supported"):
        fxpsim.import_float_model(VEC.parent / "onnx_models" / "float_cnn.onnx")
    with pytest.raises(ValueError, match="a quantized model .*read it with fxpsim.import_onnx"):
        fxpsim.import_float_model(VEC.parent / "onnx_models" / "qs_cnn_qdq_s8_pc.onnx")
    with pytest.raises(ValueError, match="a quantized model .*read it with fxpsim.import_tflite"):
        fxpsim.import_float_model(VEC.parent / "tflite_int8" / "conv.tflite")


def test_uncalibrated_graph_and_scale_settings_are_refused():
    graph = fxpsim.import_float_model(VEC / "grid_gap.onnx")
    x = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match="calibrate it first"):
        run_float_graph(graph, x, None)
    with pytest.raises(ConfigError, match=r"weights float32 .* with a per-channel scale.*weights.scales = \"none\""):
        fxpsim.simulate(graph, {**_target("fpu-float32"), "weights": {"format": "float32"}}, x)
    with pytest.raises(ConfigError, match=r"activations.scales = 'none': unscaled operands are a float datapath"):
        fxpsim.load_config({"activations": {"scales": "none"}})
    with pytest.raises(ConfigError, match="activations.scales: unknown value 'per-channel'"):
        fxpsim.load_config({**_target("fpu-float32"), "activations": {"format": "float32", "scales": "per-channel"}})


def test_other_op_forms_equal_onnxruntime_on_grid_inputs(tmp_path):
    """A flat input, Gemm with transB 0 and no bias, MatMul without Add, a lone Relu and Clip(0, 6) after
    a max pool (not fused), Reshape [-1, F]: the same bits as onnxruntime."""
    rng = np.random.default_rng(4)
    grid = lambda *s: (rng.integers(-4, 5, s) / 4.0).astype(np.float32)  # noqa: E731
    p = _save(tmp_path, [helper.make_node("Gemm", ["input", "w1"], ["g"], "g1"),
                         helper.make_node("Relu", ["g"], ["r"], "r1"),
                         helper.make_node("MatMul", ["r", "w2"], ["output"], "m2")],
              {"w1": grid(8, 6), "w2": grid(6, 3)}, in_shape=(8,), name="flat")
    x = grid(5, 8)
    graph = fxpsim.import_float_model(p)
    assert [(s.kind, s.activation) for s in graph.stages] == [("dense", "relu"), ("dense", None)]
    assert np.array_equal(run_float_target(calibrate_float_graph(graph, x), x, _target("fpu-float32")), _ort(p, x))
    p = _save(tmp_path, [helper.make_node("Conv", ["input", "w"], ["c"], "c1", kernel_shape=[2, 2]),
                         helper.make_node("MaxPool", ["c"], ["m"], "pool", kernel_shape=[3, 3]),
                         helper.make_node("Relu", ["m"], ["r"], "relu"),
                         helper.make_node("Clip", ["r", "", "six"], ["k"], "clip6"),
                         helper.make_node("Reshape", ["k", "shape"], ["f"], "flat"),
                         helper.make_node("Gemm", ["f", "w2", "b2"], ["output"], "fc", transB=1)],
              {"w": grid(3, 2, 2, 2), "six": np.float32(6), "shape": np.array([-1, 3], np.int64),
               "w2": grid(4, 3), "b2": grid(4)}, in_shape=(2, 4, 4), name="pooled")
    # pools of 3 on the 3x3 conv output: one pixel; the Clip has no min (its min input is empty)
    with pytest.raises(ValueError, match=r"node 'clip6' \(Clip\): Clip\(-inf, 6.0\)"):
        fxpsim.import_float_model(p)
    m = onnx.load(str(p))
    m.graph.initializer.append(numpy_helper.from_array(np.float32(0), "zero"))
    m.graph.node[3].input[1] = "zero"
    onnx.save(m, p)
    graph = fxpsim.import_float_model(p)
    assert [s.kind for s in graph.stages] == ["transpose", "conv2d", "max_pool2d", "relu", "relu6", "transpose",
                                              "flatten", "dense"]
    x = grid(5, 2, 4, 4)
    assert np.array_equal(run_float_target(calibrate_float_graph(graph, x), x, _target("exact-float32")), _ort(p, x))
    m.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array([5, 3], np.int64), "shape"))
    onnx.save(m, p)
    with pytest.raises(ValueError, match=r"node 'flat' \(Reshape\): Reshape to \[5, 3\]; only a flatten to \[N, 3\]"):
        fxpsim.import_float_model(p)

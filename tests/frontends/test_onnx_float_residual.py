"""Float ONNX models with identity residual Adds (fxpsim/frontends/onnx/float_graph.py: save / add stages), built
here with onnx.helper: on 1/4-grid data every float32 operation is exact, so the float32 datapaths equal
onnxruntime bit for bit; on FP8 the network equals an independent model written in the test (E4M3 codes from
ml_dtypes, the power-of-two scales from the float64 ranges, the Fraction tensor-core model, the residual sum
and its ReLU in float64, the last layer quantized with the range of that sum); bad residuals name the node."""
from __future__ import annotations

import numpy as np
import pytest

import fxpsim

onnx = pytest.importorskip("onnx")                      # optional: the onnx extra
pytest.importorskip("ml_dtypes")
from onnx import TensorProto, helper  # noqa: E402
from reference_tensor_core import dense  # noqa: E402

F_IN, HID, OUT = 8, 8, 3


def _model(path, w1, b1, w2, b2, w3, b3, *, skip="r1", input_skip=False):
    """Gemm+Relu -> Gemm -> Add(., skip) -> Relu -> Gemm (skip "x": the graph input, same width)."""
    init = [helper.make_tensor(n, TensorProto.FLOAT, v.shape, v.astype(np.float32).ravel())
            for n, v in (("W1", w1), ("B1", b1), ("W2", w2), ("B2", b2), ("W3", w3), ("B3", b3))]
    nodes = [helper.make_node("Gemm", ["x", "W1", "B1"], ["g1"], name="fc1"),
             helper.make_node("Relu", ["g1"], ["r1"], name="relu1"),
             helper.make_node("Gemm", ["r1", "W2", "B2"], ["g2"], name="fc2"),
             helper.make_node("Add", ["g2", "x" if input_skip else skip], ["s"], name="res"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("Gemm", ["r2", "W3", "B3"], ["y"], name="fc3")]
    graph = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, F_IN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, OUT])], init)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def _grid(rng, shape):
    return rng.integers(-4, 5, shape) / 4.0


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    rng = np.random.default_rng(3)
    p = dict(w1=_grid(rng, (F_IN, HID)), b1=_grid(rng, HID), w2=_grid(rng, (HID, HID)), b2=_grid(rng, HID),
             w3=_grid(rng, (HID, OUT)), b3=_grid(rng, OUT))
    d = tmp_path_factory.mktemp("res")
    x = _grid(rng, (32, F_IN)).astype(np.float32)
    return _model(d / "res.onnx", **p), _model(d / "res_in.onnx", **p, input_skip=True), p, x


def _relu(v):
    return np.maximum(v, 0.0)


@pytest.mark.parametrize("preset", ["fpu-float32", "exact-float32"])
@pytest.mark.parametrize("which", [0, 1])
def test_float32_datapaths_equal_onnxruntime(resnet, preset, which):
    ort = pytest.importorskip("onnxruntime")
    path, x = resnet[which], resnet[3]
    net = fxpsim.import_float_model(path)
    assert [s.kind for s in net.stages] == (["save"] if which else []) + \
        ["dense"] + ([] if which else ["save"]) + ["dense", "add", "dense"]
    fp32 = {"weights": {"format": "float32", "scales": "none"}, "activations": {"format": "float32", "scales": "none"},
            "accumulator": {"preset": preset}}
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(fxpsim.simulate(net, fp32, x).outputs, ref)


@pytest.mark.parametrize("which", [0, 1])
def test_fp8_residual_network_equals_the_independent_model(resnet, which):
    path, p, x = resnet[which], resnet[2], resnet[3].astype(np.float64)
    skip64 = x if which else None
    # float64 ranges (the calibration): input, relu1, relu(fc2 + skip)
    r1_64 = _relu(x @ p["w1"] + p["b1"])
    s64 = _relu(r1_64 @ p["w2"] + p["b2"] + (skip64 if which else r1_64))
    amax = lambda v: float(np.abs(v).max())  # noqa: E731
    r1 = _relu(dense(x, p["w1"], p["b1"], amax(x)))
    g2 = dense(r1, p["w2"], p["b2"], amax(r1_64))
    s = _relu(g2 + (x if which else r1))
    y = dense(s, p["w3"], p["b3"], amax(s64))
    cfg = {"weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
           "accumulator": {"preset": "h100-fp8"}}
    report = fxpsim.simulate(fxpsim.import_float_model(path), cfg, x.astype(np.float32))
    assert np.array_equal(report.outputs, y)
    assert [r["name"] for r in report.layers] == ["fc1", "fc2", "fc3"]


def test_bad_residuals_name_the_node(resnet, tmp_path):
    p = resnet[2]
    bad = _model(tmp_path / "bad.onnx", **{**p, "w2": p["w2"][:, :4], "b2": p["b2"][:4]},
                 skip="r1")                                        # fc2 -> 4 features + r1 (8)
    with pytest.raises(ValueError, match="node 'res' \\(Add\\): adds 'r1' of shape \\(8,\\) to shape \\(4,\\)"):
        fxpsim.import_float_model(bad)
    later = _model(tmp_path / "later.onnx", **p, skip="y")          # reads a tensor made after it
    with pytest.raises(ValueError, match="node 'res' \\(Add\\): adds 'y', which is not an earlier activation"):
        fxpsim.import_float_model(later)

"""Float32 ``.tflite`` models as float graphs on a float datapath (fxpsim.frontends.tflite.float_graph).

* on inputs of a 1/4 grid (every sum exact in float32: tools/fixtures/tflite_float/make_models.py) a float32
  datapath, sequential FMA (``fpu-float32``) or Kulisch (``exact-float32``), equals LiteRT's float32 outputs bit
  for bit, with each of LiteRT's kernel sets, through ``fxpsim.simulate`` too;
* on normal random inputs the Kulisch path is within float32 rounding of LiteRT's;
* edited models (an op, an option, a reshape, a topology outside the importer's list) and quantized models are
  refused with the operator named; ``fxpsim.import_model`` still refuses the float model, pointing here.
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.frontends.tflite import float_graph
from fxpsim.graph.float_run import calibrate_float_graph, run_float_graph
from fxpsim.hardware.float_datapath import run_float_target
from litert_interpreter import litert_interpreter

pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
VEC = Path(__file__).resolve().parents[1] / "vectors" / "tflite_float"
SHAPES = {"grid_cnn": (6, 6, 2), "grid_res": (4, 4, 3)}


def _target(preset):
    return {"weights": {"format": "float32", "scales": "none"},
            "activations": {"format": "float32", "scales": "none"}, "accumulator": {"preset": preset}}


def _litert(path, x, kernels="reference"):
    it = litert_interpreter(path, kernels)
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    out = []
    for row in x:
        it.set_tensor(i, row[None])
        it.invoke()
        out.append(it.get_tensor(o)[0].copy())
    return np.array(out)


def _grid(shape, seed):
    return (np.random.default_rng(seed).integers(-4, 5, shape) / 4.0).astype(np.float32)


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("preset", ["fpu-float32", "exact-float32"])
def test_grid_inputs_equal_litert_bit_for_bit(name, preset):
    path = VEC / f"{name}.tflite"
    x = _grid((6, *SHAPES[name]), 1)
    graph = fxpsim.import_float_model(path)
    out = run_float_target(calibrate_float_graph(graph, x), x, _target(preset))
    for kernels in ("reference", "builtin", "xnnpack"):
        ref = _litert(path, x, kernels)
        assert out.dtype == np.float64 and np.array_equal(out, ref.astype(np.float64)), kernels
    report = fxpsim.simulate(graph, _target(preset), x)                  # calibrates the imported graph itself
    assert np.array_equal(report.outputs, ref.astype(np.float64))
    assert all(r["err_exact_max"] == 0 and r["overflows"] == 0 for r in report.layers)


def test_stages_and_names():
    graph = fxpsim.import_float_model(VEC / "grid_res.tflite")
    assert [(s.kind, s.activation) for s in graph.stages] == [
        ("conv2d", "relu"), ("save", None), ("conv2d", None), ("add", "relu"), ("avg_pool2d", None),
        ("avg_pool2d", None), ("flatten", None), ("dense", None)]
    assert graph.stages[3].source == graph.stages[1].name and graph.input_shape == (4, 4, 3)
    cnn = fxpsim.import_float_model(VEC / "grid_cnn.tflite")
    assert [s.name for s in cnn.stages if s.kind in ("conv2d", "depthwise_conv2d", "dense")][:3] == [
        "grid_cnn_1/conv1_1/Relu", "grid_cnn_1/dw2_1/Relu6", "grid_cnn_1/fc3_1/MatMul"]
    dw = cnn.stages[1]                                # SAME, stride 2, on 6x6 with a 3x3 window: pads 0 before, 1 after
    assert dw.kind == "depthwise_conv2d" and dw.padding == (0, 1, 0, 1) and dw.weight.shape == (3, 3, 4, 2)


def test_random_inputs_are_within_float32_rounding_of_litert():
    for name, shape in SHAPES.items():
        path = VEC / f"{name}.tflite"
        x = np.random.default_rng(2).normal(size=(4, *shape)).astype(np.float32)
        graph = calibrate_float_graph(fxpsim.import_float_model(path), x)
        ref = _litert(path, x)
        for out in (run_float_target(graph, x, _target("exact-float32")), run_float_graph(graph, x, None)):
            assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref)), name


def _edited(monkeypatch, name, edit):
    model = float_graph._read(VEC / f"{name}.tflite")
    model = copy.deepcopy(model)
    edit(model)
    monkeypatch.setattr(float_graph, "_read", lambda path: model)
    return VEC / f"{name}.tflite"


def _op(model, kind):
    return next(op for op in model["ops"] if op["op"] == kind)


@pytest.mark.parametrize("name, edit, match", [
    ("grid_cnn", lambda m: _op(m, "MAX_POOL_2D").update(op="SOFTMAX"),
     r"operator 2 \(SOFTMAX\): not supported in a float model"),
    ("grid_cnn", lambda m: _op(m, "CONV_2D")["options"].update(dilation_h=2), r"operator 0 \(CONV_2D\): dilation"),
    ("grid_cnn", lambda m: _op(m, "CONV_2D")["options"].update(activation=4), r"fused activation tanh"),
    ("grid_cnn", lambda m: _op(m, "MAX_POOL_2D")["options"].update(padding=0, stride_h=2, stride_w=2),
     r"operator 2 \(MAX_POOL_2D\): SAME padding that pads"),
    ("grid_cnn", lambda m: m["tensors"][m["ops"][3]["outputs"][0]].update(shape=[1, 2, 16]),
     r"operator 3 \(RESHAPE\): RESHAPE to \[1, 2, 16\]"),
    ("grid_cnn", lambda m: _op(m, "FULLY_CONNECTED")["options"].update(keep_num_dims=True), r"keep_num_dims"),
    ("grid_cnn", lambda m: m["ops"][1]["inputs"].__setitem__(0, 0), r"operator 1 \(DEPTHWISE_CONV_2D\): reads"),
    ("grid_cnn", lambda m: m["tensors"][m["ops"][0]["outputs"][0]].update(shape=[1, 6, 6, 5]),
     r"operator 0 \(CONV_2D\): its output tensor is declared \[1, 6, 6, 5\]"),
    ("grid_res", lambda m: _op(m, "MEAN")["inputs"].__setitem__(1, _op(m, "FULLY_CONNECTED")["inputs"][1]),
     r"operator 4 \(MEAN\): MEAN over axes \[-0.25"),
    ("grid_res", lambda m: m["tensors"][0].update(scale=np.ones(1, np.float32)), r"a quantized model"),
])
def test_edited_models_name_the_operator(monkeypatch, name, edit, match):
    path = _edited(monkeypatch, name, edit)
    with pytest.raises(ValueError, match=match):
        float_graph.import_float_tflite(path)


def test_quantized_and_float_models_point_at_each_other():
    with pytest.raises(ValueError, match=r"a quantized model .*read it with fxpsim.import_tflite"):
        fxpsim.import_float_model(VEC.parent / "tflite_int8" / "conv.tflite")
    with pytest.raises(ValueError, match=r"a float \(non-quantized\) model.*fxpsim.import_float_model"):
        fxpsim.import_model(VEC / "grid_cnn.tflite")
    assert float_graph.quantized_tensors(VEC / "grid_cnn.tflite") == []
    assert float_graph.quantized_tensors(VEC.parent / "tflite_int8" / "conv.tflite")


def test_damaged_files_load_and_run_or_are_refused_naming_the_file(tmp_path):
    """Truncations and bit flips of a fixture: a FloatGraph that calibrates and runs on an input of its declared
    shape, or one ValueError that starts with the file's path; nothing else."""
    buf = bytearray((VEC / "grid_cnn.tflite").read_bytes())
    rng = np.random.default_rng(7)
    outcomes = {"ran": 0, "refused": 0}
    for i in range(160):
        data = bytearray(buf)
        if i % 4 == 0:
            data = data[:int(rng.integers(0, len(buf)))]
        else:
            for pos in rng.integers(0, len(buf), 1 + i % 3):
                data[pos] ^= 1 << int(rng.integers(0, 8))
        path = tmp_path / f"m{i}.tflite"
        path.write_bytes(bytes(data))
        try:
            graph = fxpsim.import_float_model(path)
        except ValueError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc), exc
            outcomes["refused"] += 1
            continue
        x = _grid((2, *graph.input_shape), i)
        with np.errstate(all="ignore"):
            run_float_graph(calibrate_float_graph(graph, x), x, None)
        outcomes["ran"] += 1
    assert outcomes["ran"] and outcomes["refused"]

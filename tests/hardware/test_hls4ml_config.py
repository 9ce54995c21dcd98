"""An hls4ml configuration as a datapath (``fxpsim.hardware.hls4ml_config``).

* the precision look-up against hand-computed types (hls4ml's ``get_precision`` order), and every refusal;
* the configurations of ``tools/fixtures/hls4ml/make_vectors.py``, written as hls4ml config dicts / JSON / YAML
  and applied to the untyped layer table, reproduce hls4ml 1.3's C simulation bit for bit;
* applied to a QONNX import: the weights and biases read are qonnx's own (``execute_onnx``'s Gemm output, live);
  applied to fxpsim.nn models: wide types reproduce the models' own float forward;
* ``fxpsim simulate --hls4ml-config``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim import nn
from fxpsim.cli import main
from fxpsim.hardware.hls4ml_config import (Hls4mlConfig, apply_hls4ml_config, hls4ml_hardware_config,
                                           load_hls4ml_config)
from fxpsim.nn.train import save_model

VEC = Path(__file__).resolve().parents[1] / "vectors"
#: make_vectors.py's precisions (its CONFIGS / CNN_CONFIGS, copied): the types hls4ml compiled the vectors with
PRECISIONS = {
    "trn_wrap": ("ap_fixed<10,4>", "ap_fixed<8,2>", "ap_fixed<10,4>", "ap_fixed<24,10>", "ap_fixed<16,6>",
                 "ap_fixed<12,5>"),
    "narrow_wrap": ("ap_fixed<10,4>", "ap_fixed<8,2>", "ap_fixed<10,4>", "ap_fixed<10,3>", "ap_fixed<8,3>",
                    "ap_ufixed<6,2>"),
    "rnd_sat": ("ap_fixed<10,4>", "ap_fixed<6,1,AP_RND_CONV,AP_SAT>", "ap_fixed<8,3,AP_RND,AP_SAT>",
                "ap_fixed<12,4,AP_RND,AP_SAT>", "ap_fixed<8,3,AP_RND_INF,AP_SAT_SYM>",
                "ap_ufixed<6,2,AP_RND_ZERO,AP_SAT>"),
    "rnd_sat2": ("ap_fixed<10,4>", "ap_fixed<7,1,AP_RND_MIN_INF,AP_SAT_ZERO>", "ap_fixed<8,2,AP_TRN_ZERO,AP_SAT_SYM>",
                 "ap_fixed<11,3,AP_RND_ZERO,AP_SAT_SYM>", "ap_fixed<9,3,AP_RND_CONV,AP_SAT_ZERO>",
                 "ap_fixed<7,3,AP_TRN_ZERO,AP_SAT>"),
    "cnn_narrow_wrap": ("ap_fixed<8,3>", "ap_fixed<6,1>", "ap_fixed<8,3>", "ap_fixed<10,3>", "ap_fixed<10,4>",
                        "ap_ufixed<6,3>"),
    "cnn_rnd_sat": ("ap_fixed<8,3>", "ap_fixed<6,1,AP_RND,AP_SAT>", "ap_fixed<8,3,AP_RND_CONV>",
                    "ap_fixed<11,4,AP_RND_CONV,AP_SAT>", "ap_fixed<8,3,AP_RND,AP_SAT>",
                    "ap_ufixed<6,3,AP_RND_INF,AP_SAT>"),
}


def _untyped(name):
    d = np.load(VEC / "hls4ml" / f"{name}.npz", allow_pickle=False)
    layers = json.loads(str(d["layers"]))
    weights = {r["name"]: {"weight": d[f"w_{r['name']}"], "bias": d[f"b_{r['name']}"]}
               for r in layers if r["class"] in ("Dense", "Conv2D")}
    records = [{k: v for k, v in r.items() if not k.endswith("_t")} for r in layers]
    return d, layers, (records, weights, d["x"].shape[1:])


def _config(name):
    """make_vectors.py's hls4ml config, as it hands it to hls4ml (Model default, per-layer Precision tables)."""
    inp, weight, bias, accum, result, act = PRECISIONS[name]
    layer_name = {"x": {"Precision": {"result": inp}, "Trace": True}, "relu1": {"Precision": {"result": act}}}
    for lname in ("fc1", "conv1", "fc2"):
        layer_name[lname] = {"Precision": {"weight": weight, "bias": bias, "accum": accum, "result": result},
                             "Trace": True}
    conv = name.startswith("cnn")
    layer_name.pop("fc1" if conv else "conv1")
    return {"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": 1, "Strategy": "Latency"},
            "LayerName": layer_name}


def _assert_csim(graph, layers, d):
    _, _, kept = graph.run(d["x"], keep=True)
    for r in layers:
        if f"y_{r['name']}" in d.files:
            np.testing.assert_array_equal(graph.tensors[r["name"]].dequantize(kept[r["name"]]), d[f"y_{r['name']}"],
                                          err_msg=r["name"])


# --------------------------------------------------------------------------- hls4ml's C simulation
@pytest.mark.parametrize("name", sorted(PRECISIONS))
def test_make_vectors_configs_reproduce_the_csim_vectors(name):
    d, layers, untyped = _untyped(name)
    graph = apply_hls4ml_config(untyped, _config(name))
    _assert_csim(graph, layers, d)
    for r in layers:                      # the types resolved are the ones hls4ml compiled
        node = graph.node(r["name"])
        for key in ("accum_t", "result_t"):
            if key in node.attrs:
                assert fxpsim.datapath.hls4ml.parse_ap_type(node.attrs[key]) == \
                    fxpsim.datapath.hls4ml.parse_ap_type(r[key]), (r["name"], key)


def test_json_and_yaml_files_read_as_the_dict(tmp_path):
    d, layers, untyped = _untyped("rnd_sat")
    (tmp_path / "c.json").write_text(json.dumps(_config("rnd_sat")))
    _assert_csim(apply_hls4ml_config(untyped, tmp_path / "c.json"), layers, d)
    yaml = pytest.importorskip("yaml", reason="PyYAML reads .yml hls4ml configs")
    (tmp_path / "c.yml").write_text(yaml.safe_dump(_config("rnd_sat")))
    graph = apply_hls4ml_config(untyped, str(tmp_path / "c.yml"))
    _assert_csim(graph, layers, d)
    assert graph.meta["hls4ml"]["config"] == str(tmp_path / "c.yml")
    assert graph.meta["hls4ml"]["model"] == {"ReuseFactor": 1, "Strategy": "Latency"}


def test_yaml_without_pyyaml_names_the_package(tmp_path, monkeypatch):
    (tmp_path / "c.yml").write_text("Model: {Precision: ap_fixed<16,6>}\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ImportError, match="PyYAML"):
        load_hls4ml_config(tmp_path / "c.yml")


# --------------------------------------------------------------------------- the look-up order, by hand
def test_precision_lookup_follows_hls4ml_order():
    cfg = Hls4mlConfig({
        "Model": {"Precision": {"default": "ap_fixed<16,6>", "accum": "ap_fixed<30,12>"}},
        "LayerType": {"Dense": {"Precision": {"weight": "ap_fixed<8,1>"}},
                      "Activation": {"Precision": "ap_ufixed<8,4>"}},
        "LayerName": {"FC1": {"Precision": {"bias": "ap_fixed<12,4>"}},
                      "fc2": {"Precision": "ap_fixed<10,3,AP_RND,AP_SAT>"}}})
    table = {   # (layer, class, variable) -> the type hls4ml's get_precision returns
        ("fc1", "dense", "bias"): "ap_fixed<12,4>",               # LayerName[var] (names case-insensitive)
        ("fc1", "dense", "weight"): "ap_fixed<8,1>",              # LayerType[var]
        ("fc1", "dense", "accum"): "ap_fixed<30,12>",             # Model[var]
        ("fc1", "dense", "result"): "ap_fixed<16,6>",             # Model default
        ("fc2", "dense", "weight"): "ap_fixed<10,3,AP_RND,AP_SAT>",   # LayerName default before LayerType
        ("fc2", "dense", "accum"): "ap_fixed<10,3,AP_RND,AP_SAT>",
        ("relu", "activation", "result"): "ap_ufixed<8,4>",       # LayerType default
        ("x", "inputlayer", "result"): "ap_fixed<16,6>",
    }
    for (layer, cls, var), want in table.items():
        assert cfg.precision(layer, cls, var) == want, (layer, var)


def test_resolved_types_are_the_hand_computed_ones():
    records = [{"name": "x", "class": "InputLayer"}, {"name": "fc1", "class": "Dense"},
               {"name": "fc1_relu", "class": "Activation", "activation": "relu"},
               {"name": "flat", "class": "Reshape", "target_shape": [4]}]
    typed = Hls4mlConfig({"Model": {"Precision": "fixed<12,4>"},
                          "LayerName": {"fc1": {"Precision": {"accum": "ap_fixed<20,8,AP_TRN,AP_SAT>"}}}}).resolve(records)
    assert typed[0]["result_t"] == "fixed<12,4>"
    assert {k: typed[1][k] for k in ("weight_t", "bias_t", "accum_t", "result_t")} == {
        "weight_t": "fixed<12,4>", "bias_t": "fixed<12,4>", "accum_t": "ap_fixed<20,8,AP_TRN,AP_SAT>",
        "result_t": "fixed<12,4>"}
    assert typed[2]["result_t"] == "fixed<12,4>" and not any(k.endswith("_t") for k in typed[3])
    # LayerType keys are hls4ml's class names: an Activation's entry does not type a ReLU-class layer
    by_type = Hls4mlConfig({"Model": {"Precision": "fixed<12,4>"},
                            "LayerType": {"Activation": {"Precision": "ap_ufixed<6,2>"},
                                          "InputLayer": {"Precision": "ap_fixed<9,3>"}}})
    typed = by_type.resolve(records[:1] + [{"name": "a", "class": "Activation", "activation": "relu"},
                                           {"name": "r", "class": "ReLU"}])
    assert [r["result_t"] for r in typed] == ["ap_fixed<9,3>", "ap_ufixed<6,2>", "fixed<12,4>"]


def test_the_hardware_config_carries_each_accum_t():
    d, layers, untyped = _untyped("rnd_sat2")
    graph = apply_hls4ml_config(untyped, _config("rnd_sat2"))
    hc = hls4ml_hardware_config(graph)
    for name in ("fc1", "fc2"):      # accum ap_fixed<11,3,AP_RND_ZERO,AP_SAT_SYM>
        node = hc.for_node(graph.node(name), graph.nodes.index(graph.node(name)))
        assert (node.accumulator_bits, node.accumulator_overflow.value) == (11, "saturate_symmetric")
    assert hc.exact_datapath().accumulator_bits == 62
    with pytest.raises(ValueError, match="no hls4ml MAC node"):
        hls4ml_hardware_config(fxpsim.import_model(str(VEC / "qonnx" / "brevitas_mlp_w4.onnx")))


# --------------------------------------------------------------------------- refusals, each by name
@pytest.mark.parametrize("data, match", [
    ({"Modle": {}}, "unknown key 'Modle'"),
    ({"Model": {"Precision": "ap_fixed<16,6>", "Reuse": 2}}, "Model: unknown key 'Reuse'"),
    ({"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": 0}}, "ReuseFactor must be a positive int"),
    ({"Model": {"Precision": "ap_fixed<16,6>", "Strategy": "Resource"}}, "Strategy = 'Resource'"),
    ({"Model": {"Precision": "ap_fixd<16,6>"}}, "Model.Precision.default: cannot read"),
    ({"Model": {"Precision": "ap_fixed<16,6>"}, "LayerName": {"fc1": {"Precison": "x"}}}, "LayerName.fc1: unknown key"),
    ({"Model": {"Precision": "ap_fixed<16,6>"}, "LayerType": {"Conv1D": {}}}, "LayerType.Conv1D"),
    ({"HLSConfig": {"Model": {"Precision": "ap_fixed<16,6>"}}, "IOType": "io_stream"}, "IOType 'io_stream'"),
    ({"HLSConfig": {}, "Clock": 5}, "unknown key 'Clock'"),
])
def test_bad_configs_name_the_key(data, match):
    with pytest.raises(ValueError, match=match):
        Hls4mlConfig(data)


def test_what_resolve_refuses_names_the_layer():
    records = [{"name": "x", "class": "InputLayer"}, {"name": "fc1", "class": "Dense"},
               {"name": "flat", "class": "Reshape", "target_shape": [4]}]
    base = {"Precision": "ap_fixed<16,6>"}
    with pytest.raises(ValueError, match="layer 'fc1': 'auto' precision needs its weights or n_in"):
        Hls4mlConfig({"Model": base, "LayerName": {"fc1": {"Precision": {"accum": "auto"}}}}).resolve(records)
    with pytest.raises(ValueError, match="Model.Precision.default = 'auto': hls4ml infers precisions at layer level"):
        Hls4mlConfig({"Model": {"Precision": "auto"}}).resolve(records)
    with pytest.raises(ValueError, match="layer 'x' result = 'auto' takes hls4ml's model default precision, and "
                                         "Model.Precision has no default"):
        Hls4mlConfig({"Model": {"Precision": {"accum": "ap_fixed<8,2>"}},
                      "LayerName": {"x": {"Precision": "auto"}}}).resolve(records)
    with pytest.raises(ValueError, match="LayerName names no layer of the network: fc9"):
        Hls4mlConfig({"Model": base, "LayerName": {"fc9": {"Precision": "ap_fixed<8,2>"}}}).resolve(records)
    with pytest.raises(ValueError, match="fc1.Precision: table is not a variable of a Dense"):
        Hls4mlConfig({"Model": base, "LayerName": {"fc1": {"Precision": {"table": "ap_fixed<8,2>"}}}}).resolve(records)
    with pytest.raises(ValueError, match="flat.Precision: .*keeps its input type"):
        Hls4mlConfig({"Model": base, "LayerName": {"flat": {"Precision": "ap_fixed<8,2>"}}}).resolve(records)
    with pytest.raises(ValueError, match="layer 'x' has no result precision"):
        Hls4mlConfig({}).resolve(records)
    with pytest.raises(ValueError, match="ends in .json, .yml or .yaml"):
        load_hls4ml_config(__file__)


def test_unreadable_graphs_list_every_node():
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    graph = fxpsim.import_model(str(VEC / "tflite_models" / "conv_block.tflite"))
    with pytest.raises(ValueError, match="tflite_pad in node 'op0:PAD'.*depthwise_conv2d in node 'op3.*tflite_softmax"):
        apply_hls4ml_config(graph, {"Model": {"Precision": "ap_fixed<16,6>"}})


# --------------------------------------------------------------------------- other networks
def test_a_qonnx_import_reads_qonnx_own_weights():
    """Wide types: hls4ml's Gemm_0 output is x W + b exactly; qonnx's execute_onnx computes the same Gemm in
    float32 on the same (small-integer-scaled) values: equal."""
    pytest.importorskip("qonnx", reason="qonnx (the test extra) runs the model")
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    path = VEC / "qonnx" / "brevitas_mlp_w4.onnx"
    graph = fxpsim.import_model(str(path))
    h = apply_hls4ml_config(graph, {"Model": {"Precision": "ap_fixed<40,16>"}})
    scale = 2.0 ** graph.meta["qonnx"]["scales"]["Quant_0_out0"]["e"]
    x = (np.random.default_rng(0).integers(-8, 8, (20, 12)) * scale).astype(np.float32)   # on Quant_0's grid
    _, _, kept = h.run(x, keep=True)
    model = ModelWrapper(str(path))
    name = model.graph.input[0].name
    batch = 5                                              # the export's fixed batch size
    want = np.concatenate([execute_onnx(model, {name: x[i:i + batch]}, return_full_exec_context=True)["Gemm_0_out0"]
                           for i in range(0, len(x), batch)])
    np.testing.assert_array_equal(h.tensors["Gemm_0"].dequantize(kept["Gemm_0"]), want.astype(np.float64))


def test_fxpsim_models_with_wide_types_follow_their_float_forward():
    rng = np.random.default_rng(3)
    mlp = nn.Sequential([nn.Dense(12, 8, activation="relu", seed=0), nn.Dense(8, 3, seed=1)])
    cnn = nn.Sequential([nn.Conv2D(2, 3, 3, stride=2, padding="SAME", activation="relu", seed=2), nn.Flatten(),
                         nn.Dense(27, 4, seed=3)])
    wide = {"Model": {"Precision": "ap_fixed<44,16,AP_RND_CONV>"}}
    for model, shape in ((mlp, (12,)), (cnn, (6, 6, 2))):
        x = rng.normal(size=(16,) + shape).astype(np.float32)
        graph = apply_hls4ml_config(model, wide, x)
        got = graph.tensors[graph.outputs[0]].dequantize(graph.run(x))
        np.testing.assert_allclose(got, model.forward(x), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="calibration_x"):
        apply_hls4ml_config(mlp, wide)


# --------------------------------------------------------------------------- the command line
def test_cli_simulate_with_an_hls4ml_config(tmp_path, capsys):
    model = nn.Sequential([nn.Dense(64, 16, activation="relu", seed=0), nn.Dense(16, 10, seed=1)])
    save_model(model, tmp_path / "m.npz")
    cfg = {"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": 4},
           "LayerType": {"Dense": {"Precision": {"accum": "ap_fixed<10,1,AP_TRN,AP_SAT>"}}}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(4)
    np.savez(tmp_path / "d.npz", x=rng.uniform(0, 1, (40, 64)).astype(np.float32), y=rng.integers(0, 10, 40))
    args = ["simulate", "--model", str(tmp_path / "m.npz"), "--hls4ml-config", str(tmp_path / "c.json"), "--json",
            "--data", str(tmp_path / "d.npz")]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    kinds = [r["kind"] for r in rep["layers"]]
    assert kinds == ["hls4ml_input", "hls4ml_dense", "hls4ml_activation", "hls4ml_dense"]
    assert rep["layers"][1]["overflow_count"] > 0            # ap_fixed<10,1> saturates on these inputs
    assert main(args + ["--config", "tflite-int8"]) == 2
    assert "give one" in capsys.readouterr().err
    cfg["Model"]["Strategy"] = "Resource"
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Strategy = 'Resource'" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- hls4ml itself (scratch env)
def test_the_same_config_given_to_hls4ml_gives_the_same_bits(tmp_path):
    """Live (skips without hls4ml, keras or g++): one config with Model, LayerType and LayerName entries and a
    Keras Dense with a fused ReLU (hls4ml splits it into ``fc1`` and ``fc1_relu``) is handed to hls4ml, compiled
    and run by ``predict()``; fxpsim applies the same config to the layers without their types (weights as the
    C simulation reads them) and must give the same bits."""
    hls4ml = pytest.importorskip("hls4ml", reason="hls4ml is not installed (a scratch-environment dependency)")
    keras = pytest.importorskip("keras", reason="keras is not installed (hls4ml's Keras frontend needs it)")
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed (hls4ml's compile() needs it)")
    from fxpsim.frontends.hls4ml.reader import records_from_hls_model
    keras.utils.set_random_seed(11)
    model = keras.Sequential([keras.Input((10,), name="x"), keras.layers.Dense(24, activation="relu", name="fc1"),
                              keras.layers.Dense(5, name="fc2")])
    for layer in model.layers:
        k, b = layer.get_weights()
        layer.set_weights([k * 3.0, np.random.default_rng(1).normal(0, 1.0, b.shape).astype(np.float32)])
    cfg = {"Model": {"Precision": "ap_fixed<14,5>", "ReuseFactor": 1, "Strategy": "Latency"},
           "LayerType": {"Dense": {"Precision": {"weight": "ap_fixed<7,2,AP_RND,AP_SAT>", "accum": "ap_fixed<13,4>"}},
                         "Activation": {"Precision": {"result": "ap_ufixed<8,3,AP_RND_CONV,AP_SAT>"}}},
           "LayerName": {"x": {"Precision": {"result": "ap_fixed<10,4>"}},
                         "fc2": {"Precision": {"accum": "ap_fixed<12,5,AP_RND,AP_SAT_SYM>", "bias": "ap_fixed<9,3>"}}}}
    hm = hls4ml.converters.convert_from_keras_model(model, hls_config=json.loads(json.dumps(cfg)),
                                                    output_dir=str(tmp_path / "p"), backend="Vitis",
                                                    io_type="io_parallel")
    hm.compile()
    records, weights = records_from_hls_model(hm)
    untyped = [{k: v for k, v in r.items() if not k.endswith("_t")} for r in records]
    assert [r["name"] for r in untyped] == ["x", "fc1", "fc1_relu", "fc2"]
    graph = apply_hls4ml_config((untyped, weights, (10,)), cfg)
    x = np.random.default_rng(2).integers(-512, 512, (64, 10)) / 64.0          # on ap_fixed<10,4>'s grid
    got = graph.tensors[graph.outputs[0]].dequantize(graph.run(x))
    np.testing.assert_array_equal(got, np.asarray(hm.predict(x), np.float64).reshape(got.shape))
    for r in records:                                   # and the types are the ones hls4ml resolved
        node = graph.node(r["name"])
        for key in ("accum_t", "result_t"):
            if key in node.attrs:
                assert fxpsim.datapath.hls4ml.parse_ap_type(node.attrs[key]) == \
                    fxpsim.datapath.hls4ml.parse_ap_type(r[key]), (r["name"], key)


@pytest.mark.parametrize("source", ["converted", "hb_qgemm_s8_pc.onnx", "hb_qlinearmatmul_u8_pt.onnx"])
def test_graphs_of_core_and_onnx_ops_follow_their_float_execution(source):
    """Wide types on a converted fxpsim graph (core conv2d with SAME padding and a fused ReLU, reshape,
    fully_connected) and on ONNX QGemm / QLinearMatMul imports: the hls4ml graph reproduces the source graph's
    own float execution (its dequantized constants in float64), so the layouts and biases were read right."""
    rng = np.random.default_rng(6)
    if source == "converted":
        m = nn.Sequential([nn.Conv2D(2, 3, 3, padding="SAME", activation="relu", seed=2), nn.Flatten(),
                           nn.Dense(108, 4, activation="relu", seed=3), nn.Dense(4, 3, seed=4)])
        x = rng.normal(size=(8, 6, 6, 2)).astype(np.float32)
        graph = fxpsim.convert(m, "tflite-int8", x)
    else:
        pytest.importorskip("onnx", reason="the onnx extra (pip install -e '.[onnx]') reads the model")
        graph = fxpsim.import_model(str(VEC / "onnx_models" / source))
        spec = graph.tensors[graph.inputs[0]]
        lo, hi = spec.code_range
        x = rng.integers(lo, hi + 1, (8,) + spec.shape).astype(spec.dtype)
    h = apply_hls4ml_config(graph, {"Model": {"Precision": "ap_fixed<44,16,AP_RND_CONV>"}})
    spec = graph.tensors[graph.inputs[0]]
    real_x = x if spec.is_float else spec.dequantize(x)
    got = h.tensors[h.outputs[0]].dequantize(h.run(real_x.astype(np.float32)))
    want = graph.run_float(x).reshape(got.shape)
    # the source's float execution clamps to its output type's range; compare inside it
    out = graph.tensors[[n for n in graph.nodes if n.op in ("qlinear_matmul", "fully_connected")][-1].outputs[0]]
    lo, hi = out.dequantize(np.array(out.code_range)).ravel()
    inside = (want > lo) & (want < hi)
    assert inside.mean() > 0.5
    np.testing.assert_allclose(got[inside], want[inside], rtol=0, atol=1e-6)


def test_the_docs_page_example_runs(capsys):
    """docs/hls4ml.md's Python example, as written, from the clone's root."""
    pytest.importorskip("onnx", reason="the onnx extra (pip install -e '.[onnx]') reads the example's model")
    import os
    import re
    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs" / "hls4ml.md").read_text(), re.S)
    assert len(blocks) == 1
    cwd = os.getcwd()
    try:
        os.chdir(root)
        exec(compile(blocks[0], "docs/hls4ml.md", "exec"), {})
    finally:
        os.chdir(cwd)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert int(line.split()[0]) > 0 and "overflow result_t" in line

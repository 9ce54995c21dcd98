"""The lookup-table activation knobs (``activation_lut_entries``, ``activation_lut_interpolation``) on graphs
imported from ``.tflite``: config, TOML, per-node overrides, errors, the ops' outputs against an independent
table model (Python integers and fractions, written here) and the report columns that show the effect.

Fixtures: ``tests/vectors/tflite_models`` (real TF converter output, LiteRT reference outputs recorded):
``elementwise`` has LOGISTIC and TANH, ``mobilenet_v3_block`` HARD_SWISH and LOGISTIC, ``conv_block`` SOFTMAX.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.datapath import lut
from fxpsim.hardware.config import ConfigError, HardwareConfig
from reference import round_fraction

pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
MODELS = Path(__file__).resolve().parents[1] / "vectors" / "tflite_models"
_GRAPHS: dict = {}
FUNCS = {"tflite_logistic": lambda x: 1.0 / (1.0 + np.exp(-x)), "tflite_tanh": np.tanh,
         "tflite_hard_swish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0}
BASE = fxpsim.preset("tflite-int8")


def _graph(name):
    if name not in _GRAPHS:
        _GRAPHS[name] = fxpsim.import_tflite(MODELS / f"{name}.tflite")
    return _GRAPHS[name]


def _data(name):
    d = np.load(MODELS / f"{name}.npz")
    x, y = d["input"], d["output_reference"]
    return x.reshape((x.shape[0],) + x.shape[2:]), y.reshape((y.shape[0],) + y.shape[2:])


def _lut_ops(graph):
    return [n for n in graph.nodes if n.op in ("tflite_logistic", "tflite_tanh", "tflite_hard_swish",
                                               "tflite_softmax")]


def model_unary(op, codes, xspec, yspec, entries, interp, rounding):
    """The table of the module docstring of fxpsim.datapath.lut, one code at a time."""
    bits, (qmin, _) = xspec.bits, xspec.code_range
    sx, zx = float(np.float32(xspec.scale[0])), int(xspec.zero_point[0])
    sy, zy = float(np.float32(yspec.scale[0])), int(yspec.zero_point[0])
    lo, hi = yspec.code_range
    r = bits - (entries.bit_length() - 1)
    pts = [Fraction(k * 2 ** r) + (Fraction(2 ** r - 1, 2) if interp == "none" else 0)
           for k in range(entries + (interp == "linear"))]
    xs = np.array([sx * float(p + (qmin - zx)) for p in pts])
    table = [min(max(round_fraction(Fraction(float(v)), rounding) + zy, lo), hi) for v in FUNCS[op](xs) / sy]
    out = []
    for q in codes:
        i, t = (q - qmin) // 2 ** r, (q - qmin) % 2 ** r
        out.append(table[i] if interp == "none" else table[i] + ((table[i + 1] - table[i]) * t + 2 ** (r - 1)) // 2 ** r)
    return out


# --------------------------------------------------------------------------------------------- the ops
@pytest.mark.parametrize("name", ["elementwise", "mobilenet_v3_block", "conv_block"])
def test_knob_off_is_litert_and_no_node_reports_a_table(name):
    g = _graph(name)
    x, ref = _data(name)
    y, traces, _ = g.run(x, BASE, trace=True)
    np.testing.assert_array_equal(y, ref)
    assert not any("lut" in (tr or {}) for tr in traces.values())
    assert BASE.lut_nodes(g) == {}


@pytest.mark.parametrize("entries, interp", [(256, "none"), (64, "none"), (16, "linear"), (2, "linear")])
@pytest.mark.parametrize("name", ["elementwise", "mobilenet_v3_block"])
def test_unary_nodes_compute_the_independent_table(name, entries, interp):
    g = _graph(name)
    x, _ = _data(name)
    cfg = BASE.replace(activation_lut_entries=entries, activation_lut_interpolation=interp)
    _, traces, kept = g.run(x, cfg, trace=True, keep=True)
    nodes = _lut_ops(g)
    assert nodes and set(cfg.lut_nodes(g)) == {n.name for n in nodes}
    for node in nodes:
        xs, ys = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
        codes = kept[node.inputs[0]].reshape(-1).tolist()
        want = model_unary(node.op, codes, xs, ys, entries, interp, "half_away")
        assert kept[node.outputs[0]].reshape(-1).tolist() == want, node.name
        assert traces[node.name]["lut"] == f"{entries} entries, {interp} interpolation"


def test_softmax_node_computes_through_the_lut():
    g = _graph("conv_block")
    x, ref = _data("conv_block")
    node = _lut_ops(g)[0]
    assert node.op == "tflite_softmax"
    for entries, interp in ((256, "none"), (32, "linear")):
        cfg = BASE.replace(activation_lut_entries=entries, activation_lut_interpolation=interp)
        y, traces, kept = g.run(x, cfg, trace=True, keep=True)
        xs, ys = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
        want, info = lut.lut_softmax(kept[node.inputs[0]], input_bits=8, input_scale=float(xs.scale[0]),
                                     beta=float(node.attrs.get("beta", 1.0)), output_scale=float(ys.scale[0]),
                                     output_zero_point=int(ys.zero_point[0]), output_lo=-128, output_hi=127,
                                     entries=entries, interpolation=interp, rounding="half_away")
        np.testing.assert_array_equal(kept[node.outputs[0]], want)
        assert traces[node.name]["adds"] == kept[node.inputs[0]].size and traces[node.name]["overflows"] == 0
        assert np.abs(y.astype(np.int64) - ref).max() <= (1 if entries == 256 else 127)


def test_report_columns_show_the_table():
    """'not exact' compares with the runtime's arithmetic (the exact datapath drops the table) and the error
    against the float execution grows with a coarse table."""
    g = _graph("mobilenet_v3_block")
    x, _ = _data("mobilenet_v3_block")
    off = {r.name: r for r in fxpsim.simulate(g, BASE, x).layers}
    coarse = {r.name: r for r in fxpsim.simulate(g, BASE.replace(activation_lut_entries=16), x).layers}
    names = [n.name for n in _lut_ops(g)]
    assert all(off[n].not_exact_fraction == 0 for n in names)
    assert all(coarse[n].not_exact_fraction > 0.5 for n in names)
    assert all(coarse[n].max_abs_error_lsb >= off[n].max_abs_error_lsb for n in names)
    assert sum(coarse[n].mse for n in names) > sum(off[n].mse for n in names)


def test_exact_datapath_drops_the_table():
    cfg = BASE.replace(activation_lut_entries=16, activation_lut_interpolation="linear").with_layer(
        "op:tflite_tanh", activation_lut_entries=64)
    exact = cfg.exact_datapath(32)
    assert exact.activation_lut_entries is None and exact.activation_lut_interpolation == "none"
    assert not exact.layers


# ------------------------------------------------------------------------------------- per-node overrides
def test_per_layer_override_applies_to_the_selected_nodes_only():
    g = _graph("elementwise")
    x, ref = _data("elementwise")
    cfg = BASE.with_layer("op:tflite_logistic", activation_lut_entries=16)
    assert cfg.lut_nodes(g) == {"op22:LOGISTIC": (16, "none")}
    _, traces, kept = g.run(x, cfg, trace=True, keep=True)
    _, _, kept_off = g.run(x, BASE, trace=True, keep=True)
    assert traces["op22:LOGISTIC"]["lut"] == "16 entries, none interpolation" and "lut" not in traces["op30:TANH"]
    tanh = g.nodes[[n.name for n in g.nodes].index("op30:TANH")]
    np.testing.assert_array_equal(kept[tanh.outputs[0]], kept_off[tanh.outputs[0]])
    # and the reverse: on everywhere, off for one node by name
    cfg = BASE.replace(activation_lut_entries=16).with_layer("op22:LOGISTIC", activation_lut_entries=0)
    assert cfg.lut_nodes(g) == {"op30:TANH": (16, "none")}


def test_per_layer_override_from_toml(tmp_path):
    path = tmp_path / "npu.toml"
    path.write_text('name = "npu"\n[requantization]\nscheme = "tflite-double"\ndense_scheme = "float"\n'
                    '[layers."op:tflite_hard_swish"]\n"activations.lut_entries" = 32\n'
                    '"activations.lut_interpolation" = "linear"\n'
                    '[layers."op20:LOGISTIC"]\nactivation_lut_entries = 128\n')
    cfg = HardwareConfig.from_toml(path)
    g = _graph("mobilenet_v3_block")
    want = {n.name: (32, "linear") for n in g.nodes if n.op == "tflite_hard_swish"}
    want["op20:LOGISTIC"] = (128, "none")
    assert cfg.lut_nodes(g) == want
    assert HardwareConfig.from_toml(_write(tmp_path, cfg.to_toml())) == cfg


def _write(tmp_path, text):
    p = tmp_path / "again.toml"
    p.write_text(text)
    return p


def test_override_on_an_op_without_a_table_is_an_error():
    g = _graph("elementwise")
    x, _ = _data("elementwise")
    cfg = BASE.with_layer("op0:CONV_2D", activation_lut_entries=16)
    with pytest.raises(ConfigError, match=r"op0:CONV_2D.*activations\.lut_entries.*no lookup-table form"):
        g.run(x, cfg)
    with pytest.raises(ConfigError, match="no lookup-table form"):
        BASE.with_layer("op:conv2d", activation_lut_interpolation="linear", activation_lut_entries=16).lut_nodes(g)


@pytest.mark.parametrize("entries, interp, match", [(512, "none", "larger than the 256 codes"),
                                                    (256, "linear", "no low bits")])
def test_tables_that_do_not_fit_the_node_are_errors(entries, interp, match):
    g = _graph("elementwise")
    x, _ = _data("elementwise")
    cfg = BASE.replace(activation_lut_entries=entries, activation_lut_interpolation=interp)
    with pytest.raises(ValueError, match=rf"op22:LOGISTIC.*activations\.lut_entries.*{match}"):
        g.run(x, cfg)


# ---------------------------------------------------------------------------------------- the config
def test_config_toml_dict_round_trip_and_names():
    cfg = BASE.replace(activation_lut_entries=64, activation_lut_interpolation="linear")
    assert cfg.name == "tflite-int8[activation_lut_entries=64,activation_lut_interpolation=linear]"
    assert cfg.to_dict()["activations"]["lut_entries"] == 64
    assert cfg.to_dict()["activations"]["lut_interpolation"] == "linear"
    assert HardwareConfig.from_dict(cfg.to_dict()) == cfg
    assert "[activations]" in cfg.to_toml() and "lut_entries = 64" in cfg.to_toml()
    assert "activation LUTs of 64 entries, linearly interpolated" in cfg.summary()
    assert HardwareConfig.from_dict({"activations": {"lut_entries": 256}}).activation_lut_entries == 256
    assert BASE.replace(**{"activations.lut_entries": 16}).activation_lut_entries == 16
    # off: None or 0, and not written out (older files stay the same)
    assert HardwareConfig(activation_lut_entries=0).activation_lut_entries is None
    assert "lut_entries" not in BASE.to_dict()["activations"] and "lut_interpolation" not in BASE.to_dict()["activations"]


@pytest.mark.parametrize("value", [3, 1, -8, 1 << 17, True, "256", 1.5, 96])
def test_bad_entries_name_the_key(value):
    with pytest.raises(ConfigError, match=r"activations\.lut_entries: must be a power of two in 2\.\.65536"):
        HardwareConfig(activation_lut_entries=value)


@pytest.mark.parametrize("value", ["cubic", 1, None, "Linear"])
def test_bad_interpolation_names_the_key(value):
    with pytest.raises(ConfigError, match=r"activations\.lut_interpolation: unknown value"):
        HardwareConfig(activation_lut_entries=16, activation_lut_interpolation=value)


def test_interpolation_without_a_table_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"activations\.lut_interpolation = 'linear' needs a table"):
        HardwareConfig(activation_lut_interpolation="linear")
    path = tmp_path / "bad.toml"
    path.write_text('[activations]\nlut_entries = 100\n')
    with pytest.raises(ConfigError, match=r"bad\.toml: activations\.lut_entries: must be a power of two"):
        HardwareConfig.from_toml(path)
    with pytest.raises(ConfigError, match=r'layers\."op:tflite_tanh": activations\.lut_entries'):
        BASE.with_layer("op:tflite_tanh", activation_lut_entries=7)


def test_onnx_graphs_have_no_table_ops_and_the_knob_changes_nothing():
    """The ONNX importer has no sigmoid/tanh/softmax ops (onnx_ops has none): the knob applies to no node,
    and lut_nodes says so."""
    pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
    onnx_model = MODELS.parent / "onnx_models" / "qs_cnn_qdq_s8_pt.onnx"
    g = fxpsim.import_model(onnx_model)
    cfg = BASE.replace(activation_lut_entries=16)
    assert cfg.lut_nodes(g) == {}
    x = np.random.default_rng(0).standard_normal((4,) + g.tensors[g.inputs[0]].shape).astype(np.float32)
    np.testing.assert_array_equal(g.run(x, cfg), g.run(x, BASE))

"""Float / block-scaled targets: the TOML keys (fxpsim.hardware.float_config) and the per-layer report
(fxpsim.hardware.float_datapath, reached through fxpsim.simulate).

Property tests of the config parsing (round trips through TOML, the settings the keys produce, every
integer-only key refused beside a float key with both named); bad names listing the known ones; per-node
overrides; the report's numbers against values computed here from the layer outputs; the refusals of the
integer paths.
"""
from __future__ import annotations

import os
import tempfile
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fxpsim
from fxpsim import nn
from fxpsim.core.block_format import BlockFormat
from fxpsim.core.float_format import FloatFormat
from fxpsim.datapath.floatacc import FloatAccumulator
from fxpsim.graph.extract import extract
from fxpsim.graph.float_run import run_float_graph
from fxpsim.hardware import ConfigError, HardwareConfig, convert
from fxpsim.hardware.float_config import INTEGER_ONLY_FIELDS, float_settings
from fxpsim.hardware.float_datapath import FloatReport, simulate_float

ELEMENT = ["e4m3", "e5m2", "float8_e4m3fn", "e2m1", "e3m2"]
ELEMENT_PRESETS = ["hopper-wgmma-m64n8k32-f32-e4m3", "h100-fp8", "ada-mma-m16n8k32-f32-e4m3",
                   "blackwell-tcgen05-m128n8k32-f32-e4m3", "mi300-fp8", "fpu-float32", "exact-float32"]
#: block formats with an accumulator that reads their scales
BLOCK = [("mxfp4", "blackwell-mxfp4"), ("nvfp4", "blackwell-nvfp4"),
         ("mxfp8_e4m3", "blackwell-tcgen05-m128n8k32-f32-e4m3-ue8m0-block32"), ("mxfp6_e2m3", "blackwell-mxfp4")]


def _cfg(w="e4m3", a="e4m3", preset="hopper-wgmma-m64n8k32-f32-e4m3", **acc):
    return {"weights": {"format": w}, "activations": {"format": a}, "accumulator": {"preset": preset, **acc}}


@st.composite
def float_targets(draw):
    if draw(st.booleans()):
        w, a = draw(st.sampled_from(ELEMENT)), draw(st.sampled_from(ELEMENT))
        preset = draw(st.sampled_from(ELEMENT_PRESETS))
    else:
        fmt, preset = draw(st.sampled_from(BLOCK))
        w, a = fmt, draw(st.sampled_from([fmt, "e4m3"]))
    acc = {}
    base = FloatAccumulator.preset(preset)
    if base.kind in ("fused", "block") and draw(st.booleans()):
        acc["fraction_bits"] = draw(st.integers(1, 40))
    if base.kind in ("fused", "block") and base.output == FloatFormat.parse("float32") and draw(st.booleans()):
        acc["promote_every"] = draw(st.sampled_from([0, 1, 2, 4])) * base.chunk
    return w, a, preset, acc


@given(float_targets())
def test_float_keys_round_trip_and_give_their_settings(target):
    w, a, preset, acc = target
    cfg = HardwareConfig.from_dict(_cfg(w, a, preset, **acc))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.toml")
        with open(path, "w") as fh:
            fh.write(cfg.to_toml())
        back = HardwareConfig.from_toml(path)
    assert back.to_flat_dict() | {"name": cfg.name} == cfg.to_flat_dict()
    assert "bits" not in back.to_dict()["accumulator"]              # integer-only keys are not written
    s = float_settings(back)
    parse = lambda n: BlockFormat.parse(n) if n.startswith(("mx", "nv")) else FloatFormat.parse(n)  # noqa: E731
    assert s.weights == parse(w) and s.activations == parse(a)
    expect = FloatAccumulator.preset(preset)
    assert s.accumulator.fraction_bits == acc.get("fraction_bits", expect.fraction_bits)
    assert s.accumulator.promote_every == (acc["promote_every"] or None if "promote_every" in acc
                                           else expect.promote_every)
    assert s.accumulator.chunk == expect.chunk and s.accumulator.kind == expect.kind
    assert preset in back.summary()


_NON_DEFAULT = {"weight_bits": 4, "weight_signed": False, "weight_narrow_range": False, "activation_bits": 6,
                "activation_signed": False, "activation_symmetric": True, "activation_lut_entries": 64,
                "activation_lut_interpolation": "linear", "bias_bits": 16, "bias_add": "after", "bias_shift": 2,
                "accumulator_bits": 20, "accumulator_overflow": "saturate", "accumulator_order": "tree",
                "overflow_at": "end", "zero_point": "fold", "tile_k": 16, "tile_accumulator_bits": 16,
                "accumulator_frac_bits": 4, "product_rounding": "floor", "requantization": "shift",
                "dense_requantization": "float", "rounding": "half_even", "requantization_rounding": "floor",
                "multiplier_bits": 16, "activation_clamp": False}


def test_every_integer_only_field_has_a_probe():
    assert set(_NON_DEFAULT) == set(INTEGER_ONLY_FIELDS)


@given(st.sampled_from(sorted(_NON_DEFAULT)), float_targets())
def test_float_key_with_an_integer_only_key_names_both(field, target):
    w, a, preset, acc = target
    data = _cfg(w, a, preset, **acc)
    extra = {field: _NON_DEFAULT[field]}
    if field == "activation_lut_interpolation":
        extra["activation_lut_entries"] = 64
    if field == "tile_accumulator_bits":
        extra["tile_k"] = 8
    data.update(extra)
    with pytest.raises(ConfigError) as err:
        HardwareConfig.from_dict(data)
    msg = str(err.value)
    assert "weights.format" in msg and "accumulator.preset" in msg and "integer-only" in msg
    from fxpsim.hardware.config_schema import _dotted
    assert _dotted(field) in msg


def test_bad_names_list_the_known_ones():
    with pytest.raises(ConfigError, match=r"accumulator\.preset: unknown FloatAccumulator preset 'h100-fp9'.*h100-fp8"):
        HardwareConfig.from_dict(_cfg(preset="h100-fp9"))
    with pytest.raises(ConfigError, match=r"weights\.format: cannot parse format 'e4m3x'.*float8_e4m3fn.*mxfp4"):
        HardwareConfig.from_dict(_cfg(w="e4m3x"))
    with pytest.raises(ConfigError, match="integer elements"):
        HardwareConfig.from_dict(_cfg(w="mxint8", preset="blackwell-mxfp4"))


def test_incomplete_or_mixed_targets_are_refused():
    with pytest.raises(ConfigError, match="needs activations.format, accumulator.preset as well"):
        HardwareConfig.from_dict({"weights": {"format": "e4m3"}})
    with pytest.raises(ConfigError, match="not the fixed-point activations.format = sfix16_En8"):
        HardwareConfig.from_dict(_cfg(a="Q7.8"))
    with pytest.raises(ConfigError, match="needs weights.format, activations.format"):
        HardwareConfig.from_dict({"accumulator": {"promote_every": 128}})
    with pytest.raises(ConfigError, match="promote_every=100 must be a multiple of chunk=32"):
        HardwareConfig.from_dict(_cfg(preset="h100-fp8", promote_every=100))
    with pytest.raises(ConfigError, match="fraction_bits must be <= 40"):
        HardwareConfig.from_dict(_cfg(fraction_bits=41))
    with pytest.raises(ConfigError, match="expects block-scaled operands"):
        HardwareConfig.from_dict(_cfg(preset="blackwell-mxfp4"))
    with pytest.raises(ConfigError, match="weights.scales = 'per-tensor' with weights.format = 'mxfp4'"):
        HardwareConfig.from_dict({**_cfg("mxfp4", "mxfp4", "blackwell-mxfp4"), "weights": {
            "format": "mxfp4", "scales": "per-tensor"}})
    with pytest.raises(ConfigError, match=r'layers\."op:dense": .*accumulator.bits = 12 is an integer-only'):
        HardwareConfig.from_dict({**_cfg(), "layers": {"op:dense": {"accumulator.bits": 12}}})


# ------------------------------------------------------------------ running
@pytest.fixture(scope="module")
def digits_mlp():
    x, y = fxpsim.load_digits("train", flatten=True)
    model = nn.mlp((64, 32, 10), seed=0)
    fxpsim.train.fit(model, (x, y), epochs=3, seed=0, progress=False)
    xt, yt = fxpsim.load_digits("test", flatten=True)
    return model, x[:300], xt[:120], yt[:120]


def test_simulate_dispatches_and_the_report_numbers_follow_from_the_outputs(digits_mlp):
    model, cal, x, y = digits_mlp
    cfg = HardwareConfig.from_dict(_cfg(fraction_bits=4))
    report = fxpsim.simulate(model, cfg, x, y, calibration_x=cal)
    assert isinstance(report, FloatReport) and [r["name"] for r in report.layers] == ["0:dense", "1:dense"]
    graph = extract(model, cal)
    out, runs = run_float_graph(graph, x, float_settings(cfg), stages=True)
    from fxpsim.hardware.float_datapath import run_float_target
    assert np.array_equal(run_float_target(graph, x, cfg.to_dict()), out)
    ref, ref_runs = run_float_graph(graph, x, None, stages=True)
    for rec, run, rr in zip(report.layers, runs, ref_runs):
        d = run.result.values - rr.result.values
        assert rec["rel_float64"] == pytest.approx(np.sqrt(np.mean(d * d)) / np.sqrt(np.mean(rr.result.values ** 2)))
        assert rec["err_exact_max"] == np.max(np.abs(run.result.values - run.result.exact))
        assert rec["terms_inexact"] == run.result.terms_inexact > 0      # 4 fraction bits lose bits
        assert rec["not_exact"] == np.mean(run.result.values != run.result.exact)
    assert report.network["accuracy"] == np.mean(np.argmax(out, 1) == y)
    assert report.network["float64_accuracy"] == np.mean(np.argmax(ref, 1) == y)
    assert "0:dense" in report.to_text() and report.to_markdown().startswith("| layer")


def test_exact_accumulator_matches_its_exact_twin(digits_mlp):
    model, cal, x, y = digits_mlp
    report = simulate_float(model, _cfg(preset="exact-float32"), x, y, calibration_x=cal)
    assert all(r["not_exact"] == 0 and r["err_exact_max"] == 0 for r in report.layers)


def test_a_per_node_override_changes_one_layer(digits_mlp):
    model, cal, x, y = digits_mlp
    data = {**_cfg(), "layers": {"1:dense": {"weights.format": "mxfp4", "activations.format": "mxfp4",
                                             "accumulator.preset": "blackwell-mxfp4"}}}
    report = simulate_float(model, data, x, y, calibration_x=cal)
    assert [(r["weights"], r["accumulator"]) for r in report.layers] == [
        ("float8_e4m3fn", "hopper-wgmma-m64n8k32-f32-e4m3"), ("mxfp4", "blackwell-mxfp4")]
    with pytest.raises(ConfigError, match=r'layers\."9:dense"'):
        simulate_float(model, {**_cfg(), "layers": {"9:dense": {"weights.format": "e5m2"}}}, x, calibration_x=cal)


def test_overflows_and_nans_are_counted_through_the_network():
    model = nn.mlp((4, 8, 3), seed=0)
    for layer in model.layers:
        if hasattr(layer, "W"):
            layer.W[...] = 400.0                         # float16 outputs overflow to Inf
    x = np.full((5, 4), 400.0, np.float32)
    report = simulate_float(model, _cfg(preset="hopper-wgmma-m64n8k32-f16-e4m3"), x)
    first, second = report.layers
    assert first["overflows"] == first["nonfinite"] == 5 * 8             # one fused chunk per output
    assert second["saturated"] == 5 * 8                                   # the Inf inputs saturate to 448
    assert second["overflows"] == second["nonfinite"] == 5 * 3
    assert first["rel_float64"] == np.inf and first["err_exact_max"] == 0  # the exact twin overflows too


def test_integer_paths_refuse_a_float_target(digits_mlp):
    model, cal, x, y = digits_mlp
    cfg = HardwareConfig.from_dict(_cfg())
    with pytest.raises(ConfigError, match="is a float datapath"):
        convert(model, cfg, cal)
    graph = convert(model, "tflite-int8", cal)
    with pytest.raises(TypeError, match="is a float datapath"):
        graph.run(np.zeros((1, 64), np.float32), cfg)
    with pytest.raises(ConfigError, match="holds integer codes; a float .onnx model reads with fxpsim.import_float_model"):
        fxpsim.simulate(graph, cfg, np.zeros((1, 64), np.float32))
    with pytest.raises(ConfigError, match="is an integer target"):
        from fxpsim.hardware.float_datapath import stage_settings
        stage_settings(HardwareConfig(), extract(model, cal))


def test_bad_inputs_name_what(digits_mlp):
    model, cal, x, y = digits_mlp
    with pytest.raises(ValueError, match="y must be 120 integer labels"):
        simulate_float(model, _cfg(), x, y[:3])
    with pytest.raises(ValueError, match="x must be a non-empty float batch"):
        simulate_float(model, _cfg(), x.astype(np.int64))


def test_fraction_bits_cost_is_monotone_on_one_layer():
    """Fewer alignment bits never make the fused dot closer to the exact sum of positive products (every
    term is truncated toward zero below E_max - F: the deficit only grows as F shrinks)."""
    rng = np.random.default_rng(0)
    from fxpsim.graph.float_mac import FloatMacSettings, float_mac
    x, w = rng.uniform(0, 1, (4, 64)), rng.uniform(0, 1, (64, 3))
    e4m3 = FloatFormat.parse("e4m3")
    errs = []
    for fb in (20, 13, 8, 4, 2):
        acc = FloatAccumulator.preset("blackwell-tcgen05-m128n8k32-f32-e4m3").replace(fraction_bits=fb)
        r = float_mac(x, w, None, FloatMacSettings(e4m3, e4m3, acc))
        errs.append(float(np.sum(r.exact - r.values)))
        assert np.all(r.values <= r.exact)
    assert errs == sorted(errs) and errs[-1] > 0 and Fraction(errs[0]) >= 0


def test_the_docs_python_example_runs_as_written(monkeypatch):
    import contextlib
    import io
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    text = (root / "docs" / "float_datapaths.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block, "docs/float_datapaths.md", "exec"), {})
    toml_block = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    import sys
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    cfg = HardwareConfig.from_dict(tomllib.loads(toml_block))
    assert float_settings(cfg.for_node(type("N", (), {"name": "2:dense", "op": "dense"})(), 2)).weights.name == "mxfp4"


def test_the_command_line_simulates_a_float_target(digits_mlp, tmp_path):
    import json
    from fxpsim.cli import main
    model, cal, x, y = digits_mlp
    fxpsim.train.save_model(model, tmp_path / "mlp.npz")
    (tmp_path / "fp8.toml").write_text('[weights]\nformat = "e4m3"\n[activations]\nformat = "e4m3"\n'
                                       '[accumulator]\npreset = "h100-fp8"\n')
    args = ["simulate", "--model", str(tmp_path / "mlp.npz"), "--config", str(tmp_path / "fp8.toml"),
            "--data", "digits", "--calibration", "200", "--out", str(tmp_path / "rep")]
    assert main(args) == 0
    saved = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [r["accumulator"] for r in saved["layers"]] == ["h100-fp8", "h100-fp8"]
    assert (tmp_path / "rep" / "report.html").read_text().startswith("<!DOCTYPE html>")

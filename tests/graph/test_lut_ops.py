"""The table-lookup nonlinearities of the integer graph (``sigmoid``, ``tanh``, ``hard_swish``) and their
conversion from ``nn.Sigmoid`` / ``nn.Tanh`` / ``nn.HardSwish``.

Oracle: per input code, the real function evaluated in float64 as the op's docstring states
(:math:`\\mathrm{fl}_{64}(f(s_x (c - z_x)) / s_y)`), then rounded exactly with :func:`reference.round_fraction`
on :class:`fractions.Fraction` and clamped in Python integers: the indexing, rounding and clamping are written
here independently of fxpsim.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fxpsim
from fxpsim import nn
from fxpsim.graph.ir import Datapath, IntegerGraph, Node, TensorSpec
from reference import round_fraction

def _np_exp(v: float) -> float:
    """numpy's float64 exp (the function the tables evaluate), +inf beyond its range without a warning."""
    with np.errstate(over="ignore"):
        return float(np.exp(np.float64(v)))


F64 = {
    "sigmoid": lambda v: 1.0 / (1.0 + _np_exp(-v)),
    "tanh": lambda v: float(np.tanh(v)),
    "hard_swish": lambda v: v * min(max(v + 3.0, 0.0), 6.0) / 6.0,
}


def oracle(op, codes, sx, zx, sy, zy, lo, hi, rounding):
    """One entry per code (the default table): round(fl64(f(fl64(sx * (c - zx))) / sy)) + zy, clamped."""
    out = []
    for c in codes:
        v = float(np.float64(sx) * np.float64(c - zx))
        q = round_fraction(Fraction(F64[op](v) / sy), rounding) + zy
        out.append(min(max(q, lo), hi))
    return out


def one_node_graph(op, x_bits, x_signed, sx, zx, y_bits, y_signed, sy, zy, clip=None):
    x = TensorSpec("x", x_bits, x_signed, (4,), sx, zx)
    y = TensorSpec("y", y_bits, y_signed, (4,), sy, zy)
    return IntegerGraph([x, y], [Node("f", op, ["x"], ["y"], {"clip": list(clip)} if clip else {})], ["x"], ["y"])


@given(op=st.sampled_from(sorted(F64)), x_bits=st.integers(2, 12), x_signed=st.booleans(),
       y_bits=st.integers(2, 12), y_signed=st.booleans(),
       sx=st.floats(1e-3, 2.0), sy=st.floats(1e-3, 2.0), zx_frac=st.floats(0, 1), zy_frac=st.floats(0, 1),
       rounding=st.sampled_from(["half_up", "half_even", "half_away", "floor", "toward_zero", "ceil"]))
def test_every_input_code_maps_as_the_independent_model(op, x_bits, x_signed, y_bits, y_signed, sx, sy,
                                                         zx_frac, zy_frac, rounding):
    x_lo, x_hi = (-(1 << (x_bits - 1)), (1 << (x_bits - 1)) - 1) if x_signed else (0, (1 << x_bits) - 1)
    y_lo, y_hi = (-(1 << (y_bits - 1)), (1 << (y_bits - 1)) - 1) if y_signed else (0, (1 << y_bits) - 1)
    zx = x_lo + round(zx_frac * (x_hi - x_lo))
    zy = y_lo + round(zy_frac * (y_hi - y_lo))
    g = one_node_graph(op, x_bits, x_signed, sx, zx, y_bits, y_signed, sy, zy)
    codes = np.arange(x_lo, x_hi + 1)
    pad = (-len(codes)) % 4
    batch = np.concatenate([codes, np.full(pad, x_lo)]).reshape(-1, 4).astype(g.tensors["x"].dtype)
    got = g.run(batch, Datapath(rounding=rounding)).reshape(-1)[:len(codes)]
    assert got.tolist() == oracle(op, codes.tolist(), sx, zx, sy, zy, y_lo, y_hi, rounding)


def test_trained_clip_narrows_the_table():
    g = one_node_graph("tanh", 8, True, 0.05, 0, 8, True, 1 / 128, 0, clip=(-50, 60))
    codes = np.arange(-128, 128).reshape(-1, 4).astype(np.int8)
    got = g.run(codes).reshape(-1)
    assert got.tolist() == oracle("tanh", range(-128, 128), 0.05, 0, 1 / 128, 0, -50, 60, "half_up")
    assert got.min() == -50 and got.max() == 60


def test_sigmoid_table_on_tflite_grid_is_within_one_lsb_of_the_tflite_lookup():
    """On TFLite's LOGISTIC grid (output 1/256, zero point -128) the exact table differs from LiteRT's
    float32-built table (fxpsim.datapath.tflite, verified live against LiteRT) by at most one code."""
    from fxpsim.datapath.tflite import logistic_params, quantized_logistic
    g = one_node_graph("sigmoid", 8, True, 0.0625, 3, 8, True, 1 / 256, -128)
    codes = np.arange(-128, 128).reshape(-1, 4).astype(np.int8)
    ours = g.run(codes).reshape(-1).astype(int)
    tfl = quantized_logistic(codes.reshape(-1), logistic_params(0.0625, 3)).astype(int)
    assert np.max(np.abs(ours - tfl)) <= 1


def test_bad_lut_nodes_are_rejected():
    x = TensorSpec("x", 0, True, (4,))
    y = TensorSpec("y", 8, True, (4,), 0.1, 0)
    with pytest.raises(ValueError, match="integer codes"):
        IntegerGraph([x, y], [Node("f", "tanh", ["x"], ["y"])], ["x"], ["y"])
    g = one_node_graph("tanh", 8, True, 0.1, 0, 8, True, 0.1, 0)
    with pytest.raises(ValueError):
        one_node_graph("tanh", 20, True, 0.1, 0, 8, True, 0.1, 0).run(np.zeros((1, 4), np.int32))
    assert g.run(np.zeros((1, 4), np.int8)).shape == (1, 4)


# ----------------------------------------------------------------------------- conversion from fxpsim.nn
def _model():
    m = nn.Sequential(nn.Dense(6, 8, seed=0), nn.Sigmoid("fake_quant"), nn.Dense(8, 8, seed=1), nn.Tanh(),
                      nn.Dense(8, 5, seed=2), nn.HardSwish(), nn.Dense(5, 3, seed=3))
    return m


def test_converted_activations_are_lut_nodes_on_the_trained_and_calibrated_grids():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    m = _model()
    m.train(False)
    g = fxpsim.convert(m, "tflite-int8", x)
    ops = [n.op for n in g.nodes]
    assert ops == ["quantize", "fully_connected", "sigmoid", "fully_connected", "tanh", "fully_connected",
                   "hard_swish", "fully_connected"]
    _, _, keep = g.run(x, keep=True)
    for node in g.nodes:
        if node.op not in F64:
            continue
        xs, ys = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
        lo, hi = ys.code_range
        if "clip" in node.attrs:
            lo, hi = max(lo, node.attrs["clip"][0]), min(hi, node.attrs["clip"][1])
        cin = keep[node.inputs[0]].reshape(-1).tolist()
        want = oracle(node.op, cin, float(xs.scale[0]), int(xs.zero_point[0]), float(ys.scale[0]),
                      int(ys.zero_point[0]), lo, hi, "half_up")
        assert keep[node.outputs[0]].reshape(-1).tolist() == want, node.name
    # the tanh had no quantizer: its output range is calibrated within [-1, 1]
    tanh_out = g.tensors[next(n for n in g.nodes if n.op == "tanh").outputs[0]]
    lo_real, hi_real = tanh_out.dequantize(np.array(tanh_out.code_range))
    assert -1.05 <= lo_real and hi_real <= 1.05


def test_simulation_reports_lut_nodes_and_agrees_with_float():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)).astype(np.float32)
    m = _model()
    m.train(False)
    rep = fxpsim.simulate(m, "tflite-int8", x, calibration_x=x)
    kinds = [r.kind for r in rep.layers]
    assert {"sigmoid", "tanh", "hard_swish"} <= set(kinds)
    assert rep.network["agreement"] >= 0.95 and rep.network["overflow_count"] == 0


@pytest.mark.parametrize("entries", [16, 64])
def test_lut_knob_applies_to_converted_activations_per_node(entries):
    """``activation_lut_entries`` on one node (a per-layer override): that node reads a coarse table sampled at
    its segment centres (independent model below); the other LUT nodes keep one entry per code."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(100, 6)).astype(np.float32)
    m = _model()
    m.train(False)
    base = fxpsim.preset("tflite-int8")
    g = fxpsim.convert(m, base, x)
    sig = next(n for n in g.nodes if n.op == "sigmoid")
    cfg = base.with_layer(sig.name, activation_lut_entries=entries)
    _, _, exact = g.run(x, base, keep=True)
    _, traces, coarse = g.run(x, cfg, keep=True, trace=True)
    assert traces[sig.name]["lut"] == f"{entries} entries, none interpolation"
    xs, ys = g.tensors[sig.inputs[0]], g.tensors[sig.outputs[0]]
    sx, zx, sy, zy = float(xs.scale[0]), int(xs.zero_point[0]), float(ys.scale[0]), int(ys.zero_point[0])
    lo, hi = ys.code_range
    if "clip" in sig.attrs:
        lo, hi = max(lo, sig.attrs["clip"][0]), min(hi, sig.attrs["clip"][1])
    r = 8 - (entries.bit_length() - 1)
    want = []
    for c in coarse[sig.inputs[0]].reshape(-1).tolist():
        k = (c + 128) >> r
        v = float(np.float64(sx) * (k * 2.0 ** r + (2.0 ** r - 1) / 2 + (-128 - zx)))
        want.append(min(max(round_fraction(Fraction(F64["sigmoid"](v) / sy), "half_up") + zy, lo), hi))
    assert coarse[sig.outputs[0]].reshape(-1).tolist() == want
    tanh = next(n for n in g.nodes if n.op == "tanh")
    np.testing.assert_array_equal(exact[sig.inputs[0]], coarse[sig.inputs[0]])
    assert not np.array_equal(exact[sig.outputs[0]], coarse[sig.outputs[0]])
    assert "lut" in traces[tanh.name] and traces[tanh.name]["lut"].startswith("256 entries")


def test_lut_knob_too_large_for_the_input_is_a_clear_error():
    g = one_node_graph("tanh", 6, True, 0.1, 0, 8, True, 1 / 128, 0)
    with pytest.raises(ValueError, match="larger than the 64 codes"):
        g.run(np.zeros((1, 4), np.int8), fxpsim.preset("tflite-int8").replace(activation_lut_entries=256))


def test_simulate_names_the_lut_nodes_or_says_the_knob_changes_nothing():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    m = _model()
    m.train(False)
    cfg = fxpsim.preset("tflite-int8").replace(activation_lut_entries=32)
    rep = fxpsim.simulate(m, cfg, x, calibration_x=x)
    note = next(n for n in rep.notes if n.startswith("lookup-table activations"))
    assert "3 node(s)" in note and "32 entries, none interpolation" in note
    plain = nn.Sequential(nn.Dense(6, 3, seed=0))
    rep = fxpsim.simulate(plain, cfg, x, calibration_x=x)
    assert any("changes nothing" in n for n in rep.notes)
    assert not any("lookup-table" in n for n in fxpsim.simulate(plain, "tflite-int8", x, calibration_x=x).notes)

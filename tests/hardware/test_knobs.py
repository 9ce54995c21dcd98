"""Datapath knobs of HardwareConfig: per-layer overrides, zero-point handling, multiplier width, K-tiling,
accumulators with fraction bits, bias shift, the rounding of the requantization.

Every check compares with an independent model written here on Python integers (one add at a time, its own
weight/activation quantization and requantization arithmetic), never with fxpsim's own kernels.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from fxpsim import nn
from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.hardware import ConfigError, HardwareConfig, convert, load_config, preset

try:
    import tomllib
except ModuleNotFoundError:      # Python 3.10
    import tomli as tomllib


# ------------------------------------------------------------------------------ independent integer model
def _f32(v: float) -> float:
    return float(np.float32(v))


def _rha(v: float) -> int:
    """Round half away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _rhu(v: float) -> int:
    return math.floor(v + 0.5)


def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


def _wrap(v: int, bits: int) -> int:
    return ((v + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


def _act_params(lo, hi, bits=8):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    s = _f32((hi - lo) / (qmax - qmin))
    return s, _clamp(qmin - _rha(lo / s), qmin, qmax)


def _weights(w_float, bits):
    """Symmetric per-output-channel codes of an [in, out] matrix (narrow range), scales float32."""
    qmax = (1 << (bits - 1)) - 1
    n_in, n_out = w_float.shape
    cols = [[float(w_float[k, o]) for k in range(n_in)] for o in range(n_out)]
    s = [_f32(max(abs(v) for v in col) / qmax) for col in cols]
    return [[_clamp(_rha(v / s[o]), -qmax, qmax) for v in cols[o]] for o in range(n_out)], s


class Acc:
    """A register of ``bits`` bits that saturates or wraps on every add and counts the adds that overflow."""

    def __init__(self, bits, mode):
        self.bits, self.mode, self.overflows = bits, mode, 0

    def fit(self, v):
        lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        if lo <= v <= hi:
            return v
        self.overflows += 1
        return _clamp(v, lo, hi) if self.mode == "saturate" else _wrap(v, self.bits)


def _quantize_multiplier(r: float, bits: int = 31):
    q, e = math.frexp(r)
    m = _rha(q * 2.0 ** bits)
    if m == 1 << bits:
        m, e = m >> 1, e + 1
    return m, e


def _requant_single(acc: int, real: float) -> int:
    m, e = _quantize_multiplier(real)
    t = 31 - e
    return _wrap((acc * m + (1 << (t - 1))) >> t, 32)


def _dense_layer(x_codes, z_in, s_in, w_float, b_float, out_range, relu, acc_bits, mode, w_bits=8, a_bits=8,
                 bias_bits=None, bias_shift=0):
    """One Dense layer as int8-acc16-sat computes it (bias preloaded, tflite-single), on Python ints."""
    w_q, s_w = _weights(w_float, w_bits)
    bias_bits = bias_bits or acc_bits
    bmax, amax = (1 << (bias_bits - 1)) - 1, (1 << (acc_bits - 1)) - 1
    b_q = [_clamp(_rha(float(b_float[o]) / (s_in * s_w[o] * 2 ** bias_shift)), -bmax - 1, bmax)
           for o in range(len(s_w))]
    b_q = [_clamp(b << bias_shift, -amax - 1, amax) for b in b_q]
    s_out, z_out = _act_params(*out_range, bits=a_bits)
    qmin, qmax = -(1 << (a_bits - 1)), (1 << (a_bits - 1)) - 1
    lo = max(qmin, z_out) if relu else qmin
    reg = Acc(acc_bits, mode)
    out = []
    for row in x_codes:
        xs = [int(v) - z_in for v in row]
        out_row = []
        for o in range(len(s_w)):
            a = b_q[o]
            for xv, wv in zip(xs, w_q[o]):
                a = reg.fit(a + xv * wv)
            out_row.append(_clamp(_requant_single(a, s_in * s_w[o] / s_out) + z_out, lo, qmax))
        out.append(out_row)
    return out, s_out, z_out, reg.overflows, w_q


def _tiny_model():
    m = nn.Sequential(nn.Dense(4, 3, activation="relu", seed=1), nn.Dense(3, 2, seed=2))
    m.layers[0].W[...] = [[0.5, -0.25, 0.75], [-1.0, 0.3, 0.2], [0.1, 0.9, -0.6], [0.4, -0.8, 0.05]]
    m.layers[0].b[...] = [0.1, -0.2, 0.05]
    m.layers[1].W[...] = [[1.2, -0.7], [-0.4, 0.9], [0.6, 0.3]]
    m.layers[1].b[...] = [0.02, -0.03]
    return m.eval()


def _tiny_data(n=24, seed=7):
    return np.random.default_rng(seed).uniform(-1.5, 1.5, size=(n, 4)).astype(np.float32)


def _reference_two_layers(model, x, layer_cfgs):
    """(codes, overflows per layer) of the tiny model with per-layer (acc_bits, mode, w_bits, a_bits, bias_bits)."""
    h1 = model.layers[0].forward(x).astype(np.float64)
    h2 = model.layers[1].forward(h1.astype(np.float32)).astype(np.float64)
    s_in, z_in = _act_params(float(x.min()), float(x.max()))
    codes = [[_clamp(_rha(float(v) / s_in) + z_in, -128, 127) for v in row] for row in x.astype(np.float64)]
    (acc1, mode1, wb1, ab1, bb1), (acc2, mode2, wb2, ab2, bb2) = layer_cfgs
    c1, s1, z1, o1, _ = _dense_layer(codes, z_in, s_in, model.layers[0].W, model.layers[0].b,
                                     (h1.min(), h1.max()), True, acc1, mode1, wb1, ab1, bb1)
    c2, _, _, o2, _ = _dense_layer(c1, z1, s1, model.layers[1].W, model.layers[1].b, (h2.min(), h2.max()), False,
                                   acc2, mode2, wb2, ab2, bb2)
    return np.array(c2), (o1, o2)


# --------------------------------------------------------------------------------------- per-layer overrides
BASE = preset("int8-acc16-sat").replace(rounding="half_away")


@pytest.mark.parametrize("cfg, layers", [
    # the base's bias register (narrowed to 10 bits with its accumulator) stays 10 bits in the wider layer
    (BASE.replace(accumulator_bits=10).with_layer("1:dense", accumulator_bits=16),
     ((10, "saturate", 8, 8, 10), (16, "saturate", 8, 8, 10))),
    (BASE.replace(accumulator_bits=16).with_layer("#1", accumulator_bits=9, accumulator_overflow="wrap"),
     ((9, "wrap", 8, 8, 9), (16, "saturate", 8, 8, 16))),
    # op type first, then index, then name: the name wins on node 2, the op type holds on node 1
    (HardwareConfig.from_dict({**BASE.to_dict(), "layers": {
        "op:fully_connected": {"accumulator_bits": 11}, "#2": {"accumulator_bits": 13},
        "1:dense": {"accumulator": {"overflow": "wrap"}}}}),
     ((11, "saturate", 8, 8, 11), (13, "wrap", 8, 8, 13))),
], ids=["by-name", "by-index", "op-index-name"])
def test_per_layer_accumulators_match_reference(cfg, layers):
    model, x = _tiny_model(), _tiny_data()
    expect, overflows = _reference_two_layers(model, x, layers)
    net = convert(model, cfg, x)
    out, traces, _ = net.run(x, cfg, trace=True)
    np.testing.assert_array_equal(out, expect)
    assert (traces["0:dense"]["overflows"], traces["1:dense"]["overflows"]) == overflows
    assert sum(overflows) > 0     # the narrow layers really overflow


def test_per_layer_widths_change_conversion():
    """weight_bits / activation_bits per layer: the first layer's weights are 4-bit codes and its output
    4-bit codes; the second layer reads them and keeps 8-bit weights."""
    model, x = _tiny_model(), _tiny_data()
    cfg = BASE.replace(accumulator_bits=32, bias_bits=32).with_layer("0:dense", weight_bits=4, activation_bits=4)
    net = convert(model, cfg, x)
    w0, w1 = net.tensors["0:dense/weights"], net.tensors["1:dense/weights"]
    assert (w0.bits, net.tensors["0:dense"].bits, w1.bits, net.tensors["1:dense"].bits) == (4, 4, 8, 8)
    expect_w0, _ = _weights(model.layers[0].W, 4)
    np.testing.assert_array_equal(w0.data, np.array(expect_w0))
    assert np.abs(w0.data).max() == 7
    expect, _ = _reference_two_layers(model, x, ((32, "saturate", 4, 4, 32), (32, "saturate", 8, 8, 32)))
    np.testing.assert_array_equal(net.run(x, cfg), expect)


def test_layer_overrides_round_trip_toml_and_dict(tmp_path):
    cfg = preset("tflite-int8").with_layer("0:conv2d", accumulator_bits=20).with_layer(
        "op:depthwise_conv2d", **{"accumulator.overflow": "saturate", "weights.bits": 6})
    assert cfg.layers["0:conv2d"] == {"accumulator_bits": 20}
    text = cfg.to_toml()
    assert '[layers."0:conv2d"]\naccumulator_bits = 20' in text
    path = tmp_path / "layered.toml"
    path.write_text(text)
    assert load_config(path) == cfg
    assert HardwareConfig.from_dict(cfg.to_dict()) == cfg
    assert HardwareConfig.from_dict(tomllib.loads(text)) == cfg
    assert HardwareConfig.from_dict(cfg.to_flat_dict()) == cfg
    hash(cfg)                                            # still hashable (frozen)
    path.write_text(preset("tflite-int8").to_toml() + '\n[layers."#3".accumulator]\nbits = 24\n')
    assert load_config(path).layers["#3"] == {"accumulator_bits": 24}


@pytest.mark.parametrize("layers, pieces", [
    ({"0:dense": {"acc_bits": 20}}, ['layers."0:dense"', "unknown key 'acc_bits'", "accumulator_bits"]),
    ({"0:dense": {"accumulator": {"bitz": 20}}}, ["unknown key 'accumulator.bitz'"]),
    ({"0:dense": {"accumulator_bits": 99}}, ['layers."0:dense"', "accumulator.bits", "2..64"]),
    ({"0:dense": {"name": "x"}}, ["unknown key 'name'"]),
    ({"#x": {"accumulator_bits": 9}}, ["'#<index>'"]),
    ({"0:dense": 16}, ["must be a table"]),
])
def test_bad_layer_overrides_raise(layers, pieces):
    with pytest.raises(ConfigError) as info:
        HardwareConfig.from_dict({"layers": layers}, source="my.toml")
    for piece in pieces:
        assert piece in str(info.value), (piece, str(info.value))


def test_selector_that_matches_nothing_raises_when_the_graph_runs():
    model, x = _tiny_model(), _tiny_data()
    good = BASE.with_layer("1:dense", accumulator_bits=20)
    net = convert(model, good, x)
    for bad_sel in ("2:dense", "#7", "op:conv2d"):
        bad = BASE.with_layer(bad_sel, accumulator_bits=20)
        with pytest.raises(ConfigError, match=f'layers."{bad_sel}": select'):
            net.run(x, bad)
        with pytest.raises(ConfigError, match=f'layers."{bad_sel}"'):
            convert(model, bad, x)
    # a hand-built graph runs with an index selector
    net.run(x, BASE.with_layer("#2", accumulator_bits=20))


# ------------------------------------------------------------------------------------------------ bias shift
@pytest.mark.parametrize("shift, bias_bits", [(0, 16), (3, 8), (6, 6)])
def test_bias_shift_matches_reference(shift, bias_bits):
    """A bias stored in ``bias_bits`` and shifted left by ``shift`` into a 16-bit accumulator."""
    model = _tiny_model()
    model.layers[0].b[...] = [2.5, -3.1, 0.7]
    x = _tiny_data()
    cfg = BASE.replace(bias_bits=bias_bits, bias_shift=shift)
    net = convert(model, cfg, x)
    h1 = model.layers[0].forward(x).astype(np.float64)
    s_in, z_in = _act_params(float(x.min()), float(x.max()))
    codes = [[_clamp(_rha(float(v) / s_in) + z_in, -128, 127) for v in row] for row in x.astype(np.float64)]
    expect, *_ = _dense_layer(codes, z_in, s_in, model.layers[0].W, model.layers[0].b, (h1.min(), h1.max()), True,
                              16, "saturate", bias_bits=bias_bits, bias_shift=shift)
    _, _, kept = net.run(x, cfg, keep=True)
    np.testing.assert_array_equal(kept["0:dense"], np.array(expect))
    assert net.nodes[1].attrs.get("bias_shift", 0) == shift
    b = net.tensors["0:dense/bias"]
    assert b.bits == bias_bits and int(np.abs(b.data).max()) <= (1 << (bias_bits - 1))
    assert HardwareConfig.from_dict(tomllib.loads(cfg.to_toml())).bias_shift == shift


# ------------------------------------------------------------------------------------------ replace() names
def test_replace_names_what_changed():
    base = preset("int8-acc16-sat")
    a = base.replace(accumulator_bits=12)
    assert a.name == "int8-acc16-sat[accumulator_bits=12]" and base.name == "int8-acc16-sat"
    b = a.replace(**{"requantization.rounding": "half_even"}, accumulator_bits=13)
    assert b.name == "int8-acc16-sat[accumulator_bits=13,rounding=half_even]"
    assert a.replace(accumulator_bits=12).name == a.name          # nothing changed: same name
    assert base.replace(accumulator_bits=12, name="mine").name == "mine"
    assert base.replace(accumulator_overflow="wrap").name == "int8-acc16-sat[accumulator_overflow=wrap]"
    assert HardwareConfig.from_dict(b.to_dict()) == b             # the name round-trips


# -------------------------------------------------------------------------------- requantization rounding
def _rne_div(v: int, shift: int) -> int:
    """v / 2**shift rounded half to even (Python ints)."""
    q, r = divmod(v, 1 << shift)
    half = 1 << (shift - 1)
    return q + (1 if r > half or (r == half and q % 2) else 0)


def _tie_graph(out_scale):
    """x [K=3] . w -> one output with M = s_x s_w / s_y = 1 / out_scale (ties whenever acc is odd)."""
    w = np.array([[1, 1, 1]], np.int8)
    tensors = [TensorSpec("x", 8, True, (3,), 1.0, 0), TensorSpec("w", 8, True, scale=1.0, data=w),
               TensorSpec("y", 8, True, (1,), out_scale, 0)]
    return IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"])], ["x"], ["y"])


@pytest.mark.parametrize("scheme", ["tflite-single", "tflite-double"])
def test_requantization_rounding_is_applied(scheme):
    """M = 1/2 (single: acc * 2^30 / 2^31) or 1/4 (double: SRDHM(acc, 2^30) then a shift by 1): every odd
    sum is a tie. half_even must differ from gemmlowp's rounding on them and equal the reference."""
    x = np.array([[a, b, c] for a in range(-9, 10, 3) for b in (0, 1, 2) for c in (-1, 0, 5)], np.int8)
    acc = x.astype(int).sum(axis=1)
    if scheme == "tflite-single":
        net, expect = _tie_graph(2.0), [_rne_div(int(a), 1) for a in acc]
        gemmlowp = [(int(a) + 1) >> 1 for a in acc]
    else:
        net = _tie_graph(4.0)
        v = [(int(a) * (1 << 30) + (1 << 30)) >> 31 for a in acc]          # SRDHM, ties up
        expect = [_rne_div(t, 1) for t in v]
        gemmlowp = [int(math.copysign((abs(t) + 1) >> 1, t)) for t in v]   # RoundingDivideByPOT: half away
    base = HardwareConfig(requantization=scheme, rounding="half_even")
    cfg = base.replace(requantization_rounding="half_even")
    np.testing.assert_array_equal(net.run(x, cfg)[:, 0], expect)
    np.testing.assert_array_equal(net.run(x, base)[:, 0], gemmlowp)      # default: gemmlowp's, unchanged
    assert list(expect) != list(gemmlowp)
    assert HardwareConfig.from_dict(tomllib.loads(cfg.to_toml())) == cfg
    assert 'output_rounding = "half_even"' in cfg.to_toml()


def test_rounding_that_does_not_reach_the_requantizer_is_noted():
    model, x = _tiny_model(), _tiny_data()
    net = convert(model, preset("int8-acc16-sat").replace(rounding="half_even"), x)
    assert any("tflite-single" in n and "half_even applies to weight/bias/input conversion only" in n
               for n in net.meta["notes"])
    net = convert(model, preset("int8-acc16-sat").replace(rounding="half_even", requantization_rounding="half_even"), x)
    assert not any("conversion only" in n for n in net.meta["notes"])

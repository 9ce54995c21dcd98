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
    # the base's bias register (as wide as its accumulator, narrowed to 10 bits with it) widens again with
    # the wider layer's accumulator: the accumulator bounds the bias register both ways
    (BASE.replace(accumulator_bits=10).with_layer("1:dense", accumulator_bits=16),
     ((10, "saturate", 8, 8, 10), (16, "saturate", 8, 8, 16))),
    # a bias register pinned narrower than the accumulator keeps its width in a wider layer
    (BASE.replace(accumulator_bits=12, bias_bits=10).with_layer("1:dense", accumulator_bits=16),
     ((12, "saturate", 8, 8, 10), (16, "saturate", 8, 8, 10))),
    (BASE.replace(accumulator_bits=16).with_layer("#1", accumulator_bits=9, accumulator_overflow="wrap"),
     ((9, "wrap", 8, 8, 9), (16, "saturate", 8, 8, 16))),
    # op type first, then index, then name: the name wins on node 2, the op type holds on node 1
    (HardwareConfig.from_dict({**BASE.to_dict(), "layers": {
        "op:fully_connected": {"accumulator_bits": 11}, "#2": {"accumulator_bits": 13},
        "1:dense": {"accumulator": {"overflow": "wrap"}}}}),
     ((11, "saturate", 8, 8, 11), (13, "wrap", 8, 8, 13))),
], ids=["by-name", "pinned-bias", "by-index", "op-index-name"])
def test_per_layer_accumulators_match_reference(cfg, layers):
    model, x = _tiny_model(), _tiny_data()
    expect, overflows = _reference_two_layers(model, x, layers)
    net = convert(model, cfg, x)
    out, traces, _ = net.run(x, cfg, trace="peaks")
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


# ------------------------------------------------------------------------------------- accelerator knobs
def _round_shift(v: int, d: int, mode: str) -> int:
    """v / 2**d rounded (floor, half_up, half_even) on Python ints."""
    if d == 0:
        return v
    q, r = divmod(v, 1 << d)
    half = 1 << (d - 1)
    if mode == "floor":
        return q
    if mode == "half_up":
        return q + (r >= half)
    return q + (r > half or (r == half and q % 2 == 1))


def _ref_mac(taps, bias, *, bits, mode, bias_add="preload", tile_k=None, tile_bits=None, shift=0,
             rounding="half_up"):
    """One output: ``taps`` = [(x, w)] as the multipliers see them, in order; returns (acc, overflows,
    tile overflows, peak, tile peak) with per-add overflow, K-tiling and products rounded by ``shift``."""
    wide, tile = Acc(bits, mode), Acc(tile_bits or bits, mode)
    prods = [_round_shift(a * b, shift, rounding) for a, b in taps]
    acc = bias if bias_add == "preload" else 0
    peak, tile_peak = abs(acc), 0
    if tile_k:
        for t0 in range(0, len(prods), tile_k):
            t, exact_t = 0, 0
            for p in prods[t0:t0 + tile_k]:
                t, exact_t = tile.fit(t + p), exact_t + p
                tile_peak = max(tile_peak, abs(exact_t))
            acc = wide.fit(acc + t)
    else:
        for p in prods:
            acc = wide.fit(acc + p)
    exact = (bias if bias_add == "preload" else 0)
    run = exact
    if tile_k:
        for t0 in range(0, len(prods), tile_k):
            run += sum(prods[t0:t0 + tile_k])
            peak = max(peak, abs(run))
    else:
        for p in prods:
            run += p
            peak = max(peak, abs(run))
    if bias_add == "after":
        acc = wide.fit(acc + bias)
        peak = max(peak, abs(run + bias))
    return acc, wide.overflows + tile.overflows, tile.overflows, peak, tile_peak


def _fc_graph(w, w_zp, bias, x_zp, out_scale=64.0):
    o, k = w.shape
    tensors = [TensorSpec("x", 8, True, (k,), 1.0, x_zp),
               TensorSpec("w", 8, True, scale=np.full(o, 1.0), zero_point=np.asarray(w_zp), axis=0, data=w),
               TensorSpec("b", 32, True, data=np.asarray(bias, np.int64)),
               TensorSpec("y", 8, True, (o,), out_scale, 0)]
    return IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w", "b"], ["y"])], ["x"], ["y"])


def _fc_case(seed=0, k=40, o=4, n=6):
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (o, k)).astype(np.int8)
    w_zp = rng.integers(-3, 4, o)
    bias = rng.integers(-20000, 20000, o)
    x = rng.integers(-128, 128, (n, k)).astype(np.int8)
    return x, w, w_zp, bias, -37


def _ref_fc(x, w, w_zp, bias, zx, *, bits, mode, fold, shift=0, rounding="half_up"):
    """(accumulators, overflows, exact partial-sum peak) of the FC of ``_fc_graph`` on a preloaded ``bits``
    accumulator: subtract form taps (x - z_x, w - z_w) from b, or folded taps (x, w - z_w) from
    b - round(z_x sum(w - z_w) / 2^shift) saturated to the bias register; products rounded by ``shift``."""
    blo, bhi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    accs, ovf, peak = [], 0, 0
    for row in x.astype(int).tolist():
        for j in range(w.shape[0]):
            wj = [int(v) - int(w_zp[j]) for v in w[j]]
            if fold:
                taps, b = list(zip(row, wj)), _clamp(int(bias[j]) - _round_shift(zx * sum(wj), shift, rounding),
                                                     blo, bhi)
            else:
                taps, b = [(v - zx, u) for v, u in zip(row, wj)], int(bias[j])
            a, n_ovf, _, pk, _ = _ref_mac(taps, b, bits=bits, mode=mode, shift=shift, rounding=rounding)
            accs.append(a)
            ovf, peak = ovf + n_ovf, max(peak, pk)
    return accs, ovf, peak


@pytest.mark.parametrize("zero_point", ["subtract", "fold"])
@pytest.mark.parametrize("bits, mode", [(32, "wrap"), (16, "saturate"), (17, "wrap")])
def test_zero_point_handling_matches_reference(zero_point, bits, mode):
    """subtract: products (x - z_x)(w - z_w) from the bias; fold: x (w - z_w) from b - z_x sum(w - z_w)
    (saturated to the bias register). Equal on a wide accumulator, different under overflow."""
    x, w, w_zp, bias, zx = _fc_case()
    net = _fc_graph(w, w_zp, bias, zx)
    cfg = HardwareConfig(accumulator_bits=bits, bias_bits=bits, accumulator_overflow=mode, bias_add="preload",
                         requantization="float", zero_point=zero_point)
    _, traces, _ = net.run(x, cfg, trace="peaks")
    accs, ovf, peak = _ref_fc(x, w, w_zp, bias, zx, bits=bits, mode=mode, fold=zero_point == "fold")
    tr = traces["fc"]
    np.testing.assert_array_equal(tr["acc"].reshape(-1), accs)
    assert tr["overflows"] == ovf and tr["partial_peak"] == peak
    if bits < 32:
        assert ovf > 0
        other = net.run(x, cfg.replace(zero_point="subtract" if zero_point == "fold" else "fold"), trace="peaks")
        # saturation depends on the partial sums; wrap-around is modular, so the forms agree (no bias clipped)
        assert np.array_equal(other[1]["fc"]["acc"], tr["acc"]) == (mode == "wrap")
    assert HardwareConfig.from_dict(tomllib.loads(cfg.to_toml())).zero_point == zero_point


def test_zero_point_fold_pads_with_the_zero_point():
    """A SAME convolution with z_x != 0: folded, the padded taps hold z_x so the result equals the subtract
    form on a wide accumulator; on a narrow saturating one both equal their own reference."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (2, 4, 4, 2)).astype(np.int8)
    w = rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8)
    bias, zx = rng.integers(-3000, 3000, 3), 21
    tensors = [TensorSpec("x", 8, True, (4, 4, 2), 1.0, zx), TensorSpec("w", 8, True, scale=1.0, data=w),
               TensorSpec("b", 32, True, data=bias.astype(np.int64)), TensorSpec("y", 8, True, (4, 4, 3), 64.0, 0)]
    net = IntegerGraph(tensors, [Node("c", "conv2d", ["x", "w", "b"], ["y"], {"padding": "SAME"})], ["x"], ["y"])
    wide = {zp: net.run(x, HardwareConfig(requantization="float", zero_point=zp), trace="peaks")[1]["c"]["acc"]
            for zp in ("subtract", "fold")}
    np.testing.assert_array_equal(wide["subtract"], wide["fold"])
    for zp in ("subtract", "fold"):
        cfg = HardwareConfig(accumulator_bits=15, bias_bits=15, accumulator_overflow="saturate",
                             requantization="float", zero_point=zp)
        got = net.run(x, cfg, trace="peaks")[1]["c"]
        expect, ovf = np.zeros((2, 4, 4, 3), np.int64), 0
        for n, i, j, o in np.ndindex(2, 4, 4, 3):
            taps = []
            for a, b, c in np.ndindex(3, 3, 2):
                ii, jj = i + a - 1, j + b - 1
                inside = 0 <= ii < 4 and 0 <= jj < 4
                xv = int(x[n, ii, jj, c]) if inside else zx          # fold: padding holds the zero point
                taps.append((xv if zp == "fold" else (xv - zx), int(w[o, a, b, c])))
            b0 = _clamp(int(bias[o]) - zx * int(w[o].astype(int).sum()), -(1 << 14), (1 << 14) - 1) \
                if zp == "fold" else int(bias[o])
            expect[n, i, j, o], k_ovf, *_ = _ref_mac(taps, b0, bits=15, mode="saturate")
            ovf += k_ovf
        np.testing.assert_array_equal(got["acc"], expect)
        assert got["overflows"] == ovf > 0


@pytest.mark.parametrize("tile_k, tile_bits, mode, order", [(8, 16, "saturate", "sequential"),
                                                             (16, 17, "wrap", "sequential"),
                                                             (7, 15, "saturate", "sequential"),
                                                             (64, 16, "saturate", "sequential")])
def test_k_tiling_matches_reference(tile_k, tile_bits, mode, order):
    """Tiles of K products in a narrow accumulator from 0, each tile's sum added into the wide one (preloaded
    with the bias); overflow counted at both levels; the tile and wide partial-sum peaks."""
    x, w, w_zp, bias, zx = _fc_case(seed=5, k=40)
    net = _fc_graph(w, w_zp, bias, zx)
    cfg = HardwareConfig(accumulator_bits=19, accumulator_overflow=mode, accumulator_order=order,
                         requantization="float", tile_k=tile_k, tile_accumulator_bits=tile_bits)
    _, traces, _ = net.run(x, cfg, trace="peaks")
    accs, ovf, t_ovf, peak, t_peak = [], 0, 0, 0, 0
    for row in x.astype(int).tolist():
        for j in range(w.shape[0]):
            taps = [(v - zx, int(u) - int(w_zp[j])) for v, u in zip(row, w[j])]
            tiled = tile_k if tile_k < len(taps) else None
            a, n1, n2, pk, tp = _ref_mac(taps, int(bias[j]), bits=19, mode=mode, tile_k=tiled, tile_bits=tile_bits)
            accs.append(a)
            ovf, t_ovf, peak, t_peak = ovf + n1, t_ovf + n2, max(peak, pk), max(t_peak, tp)
    tr = traces["fc"]
    np.testing.assert_array_equal(tr["acc"].reshape(-1), accs)
    assert tr["overflows"] == ovf and tr["partial_peak"] == peak
    if tile_k < 40:
        assert tr["tile_overflows"] == t_ovf and tr["tile_peak"] == t_peak and tr["tiles"] == -(-40 // tile_k)
        assert t_ovf > 0 or tile_bits >= 17
        assert tr["adds"] == x.shape[0] * w.shape[0] * (40 + tr["tiles"])
    else:
        assert "tile_overflows" not in tr


def test_k_tiling_of_a_convolution_runs_in_kh_kw_c_order():
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (2, 3, 3, 4)).astype(np.int8)
    w = rng.integers(-127, 128, (2, 3, 3, 4)).astype(np.int8)
    tensors = [TensorSpec("x", 8, True, (3, 3, 4), 1.0, 0), TensorSpec("w", 8, True, scale=1.0, data=w),
               TensorSpec("y", 8, True, (3, 3, 2), 64.0, 0)]
    net = IntegerGraph(tensors, [Node("c", "conv2d", ["x", "w"], ["y"], {"padding": "SAME"})], ["x"], ["y"])
    cfg = HardwareConfig(accumulator_bits=20, accumulator_overflow="saturate", requantization="float", tile_k=5,
                         tile_accumulator_bits=15)
    tr = net.run(x, cfg, trace="peaks")[1]["c"]
    expect, t_ovf = np.zeros((2, 3, 3, 2), np.int64), 0
    for n, i, j, o in np.ndindex(2, 3, 3, 2):
        taps = [(int(x[n, i + a - 1, j + b - 1, c]) if 0 <= i + a - 1 < 3 and 0 <= j + b - 1 < 3 else 0,
                 int(w[o, a, b, c])) for a, b, c in np.ndindex(3, 3, 4)]
        expect[n, i, j, o], _, k_ovf, *_ = _ref_mac(taps, 0, bits=20, mode="saturate", tile_k=5, tile_bits=15)
        t_ovf += k_ovf
    np.testing.assert_array_equal(tr["acc"], expect)
    assert tr["tile_overflows"] == t_ovf > 0


@pytest.mark.parametrize("bits", [31, 16, 8])
@pytest.mark.parametrize("scheme", ["tflite-single", "tflite-double"])
def test_multiplier_width_matches_reference(bits, scheme):
    """M = s_x s_w / s_y as an unsigned ``bits``-bit significand, m = round_half_away(q 2^b) from frexp;
    single: one half-up rounding of acc m / 2^(b - e); double: floor((acc m + 2^(b-1)) / 2^b) then
    round half away by 2^-e."""
    rng = np.random.default_rng(bits)
    k, o = 6, 5
    w = rng.integers(-127, 128, (o, k)).astype(np.int8)
    s_w = rng.uniform(0.002, 0.02, o).astype(np.float32)
    tensors = [TensorSpec("x", 8, True, (k,), 0.031, 0),
               TensorSpec("w", 8, True, scale=s_w, zero_point=np.zeros(o, np.int64), axis=0, data=w),
               TensorSpec("y", 8, True, (o,), 0.047, 0)]
    net = IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"])], ["x"], ["y"])
    x = rng.integers(-128, 128, (40, k)).astype(np.int8)
    cfg = HardwareConfig(requantization=scheme, multiplier_bits=bits)
    got = net.run(x, cfg)
    for n in range(len(x)):
        for j in range(o):
            acc = sum(int(a) * int(b) for a, b in zip(x[n], w[j]))
            real = float(np.float32(0.031)) * float(s_w[j]) / float(np.float32(0.047))
            m, e = _quantize_multiplier(real, bits)
            if scheme == "tflite-single":
                y = (acc * m + (1 << (bits - e - 1))) >> (bits - e)
            else:
                v = (acc * m + (1 << (bits - 1))) >> bits if bits < 31 else (acc * m + (1 << 30)) >> 31
                r = -e
                y = int(math.copysign((abs(v) + (1 << (r - 1))) >> r, v)) if r > 0 else v
            assert got[n, j] == _clamp(y, -128, 127), (n, j, acc, m, e)
    assert HardwareConfig.from_dict(tomllib.loads(cfg.to_toml())).multiplier_bits == bits


@pytest.mark.parametrize("frac_bits, rounding", [(12, "floor"), (10, "half_up"), (16, None)])
def test_accumulator_with_fraction_bits_rounds_products(frac_bits, rounding):
    """Q8.8 x Q8.8 products have 16 fraction bits; an accumulator with fewer receives each product rounded
    onto its LSB (product_rounding), the bias stored in that LSB, and the output is the accumulator shifted
    by frac_bits - 8."""
    model = nn.Sequential(nn.Dense(5, 3, seed=3)).eval()
    model.layers[0].b[...] = [0.3, -0.2, 0.05]
    x = np.random.default_rng(2).uniform(-1, 1, (12, 5)).astype(np.float32)
    cfg = preset("q8.8-fixed").replace(accumulator_frac_bits=frac_bits, product_rounding=rounding)
    net = convert(model, cfg, x)
    w = net.tensors["0:dense/weights"].data.astype(int)
    d = 16 - frac_bits
    out, traces, kept = net.run(x, cfg, trace=True, keep=True)
    xin = kept["input_codes"].astype(int)
    mode = rounding or "half_up"
    for n in range(len(x)):
        for j in range(3):
            b = _rhu(float(model.layers[0].b[j]) * 2 ** frac_bits)
            acc, *_ = _ref_mac(list(zip(xin[n].tolist(), w[j].tolist())), b, bits=32, mode="saturate", shift=d,
                               rounding=mode)
            assert traces["0:dense"]["acc"][n, j] == acc
            assert out[n, j] == _clamp(_rhu(acc / 2 ** (frac_bits - 8)), -32768, 32767)
    if d:
        assert net.nodes[1].attrs["product_shift"] == d


@pytest.mark.parametrize("changes, piece", [
    ({"tile_k": 16, "tile_accumulator_bits": 40}, "accumulator.tile_bits"),
    ({"tile_k": 16, "overflow_at": "end"}, "overflow_at = 'add'"),
    ({"tile_k": 0}, "accumulator.tile_k"),
    ({"multiplier_bits": 16, "requantization": "float", "dense_requantization": None}, "only the tflite-*"),
    ({"multiplier_bits": 40}, "requantization.multiplier_bits"),
    ({"zero_point": "ignore"}, "accumulator.zero_point"),
    ({"product_rounding": "stochastic"}, "accumulator.product_rounding"),
])
def test_bad_knobs_raise(changes, piece):
    with pytest.raises(ConfigError, match=piece.replace("*", r"\*").replace("(", r"\(")):
        preset("tflite-int8").replace(**changes)


def test_accumulator_fraction_bits_beyond_the_products_raise():
    model, x = _tiny_model(), _tiny_data()
    with pytest.raises(ConfigError, match="accumulator.frac_bits = 20 with products of 16"):
        convert(model, preset("q8.8-fixed").replace(accumulator_frac_bits=20), x)


def test_exact_datapath_drops_every_accumulator_limit():
    cfg = preset("int8-acc16-sat").replace(tile_k=8, tile_accumulator_bits=12).with_layer(
        "1:dense", accumulator_bits=10, weight_bits=6)
    exact = cfg.exact_datapath(32)
    # the full bias (as wide as the exact accumulator) and the full multiplier, unless pinned
    assert (exact.accumulator_bits, exact.accumulator_overflow.value, exact.tile_k, exact.bias_bits,
            exact.multiplier_bits) == (32, "wrap", None, 32, 31)
    pinned = cfg.replace(multiplier_bits=12).exact_datapath(32, keep=("bias_bits", "multiplier_bits"))
    assert (pinned.bias_bits, pinned.multiplier_bits) == (16, 12)
    assert cfg.replace(multiplier_bits=12).exact_datapath().multiplier_bits == 31
    with pytest.raises(ValueError, match="keep names"):
        cfg.exact_datapath(keep=("rounding",))
    assert exact.layers == {"1:dense": {"weight_bits": 6}}
    x, w, w_zp, bias, zx = _fc_case(seed=5, k=40)
    bias = bias // 4
    net = _fc_graph(w, w_zp, bias, zx)
    plain = preset("int8-acc16-sat").replace(tile_k=8, tile_accumulator_bits=12, requantization="float")
    acc = net.run(x, plain.with_layer("fc", accumulator_bits=10).exact_datapath(32), trace="peaks")[1]["fc"]["acc"]
    expect = (x.astype(int) - zx) @ (w.astype(int) - w_zp[:, None]).T + bias
    np.testing.assert_array_equal(acc, expect)


@pytest.mark.parametrize("bits, mode", [(32, "wrap"), (13, "saturate"), (13, "wrap")])
@pytest.mark.parametrize("rounding", ["half_up", "floor"])
def test_fold_with_a_product_shift_rounds_the_zero_point_term(bits, mode, rounding):
    """Folded zero point on an accumulator whose LSB is 2^2 products: the bias becomes
    b - round(z_x sum(w - z_w) / 4) (the term rounded like a product), the taps x (w - z_w) / 4 rounded one by
    one; the traced accumulator, overflow count and exact partial-sum peak follow that model."""
    x, w, w_zp, bias, zx = _fc_case(seed=5)
    bias = bias // 8                                     # within 13 bits: no bias clipped before the fold
    net = _fc_graph(w, w_zp, bias, zx)
    net.nodes[0].attrs.update(product_shift=2, product_rounding=rounding)
    cfg = HardwareConfig(accumulator_bits=bits, bias_bits=bits, accumulator_overflow=mode, bias_add="preload",
                         requantization="float", zero_point="fold")
    _, traces, _ = net.run(x, cfg, trace="peaks")
    accs, ovf, peak = _ref_fc(x, w, w_zp, bias, zx, bits=bits, mode=mode, fold=True, shift=2, rounding=rounding)
    tr = traces["fc"]
    np.testing.assert_array_equal(tr["acc"].reshape(-1), accs)
    assert tr["overflows"] == ovf and tr["partial_peak"] == peak
    assert (ovf > 0) == (bits < 32)

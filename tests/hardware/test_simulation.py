"""Hardware configs, presets, conversion and simulation.

The simulation is checked against an independent model written here with Python integers: its own weight /
activation quantization, a per-add accumulator loop, gemmlowp's SaturatingRoundingDoublingHighMul and
RoundingDivideByPOT, and the report's error statistics recomputed with numpy; against TFLite's own int8
outputs (shared vectors); and end to end on a trained digits CNN (wide formats ~ float, narrow wrapping
accumulators collapse).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim import nn, train
from fxpsim.nn.datasets import load_digits
from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.hardware import (ConfigError, HardwareConfig, convert, extract, load_config, preset, preset_names,
                             simulate)
from fxpsim.datapath.requantize import activation_range

PRESETS = ("tflite-int8", "int8-acc16-sat", "int8-acc16-wrap", "int4-acc12-sat", "q8.8-fixed")


# ----------------------------------------------------------------------------------------------------- configs
def test_presets_shipped_and_round_trip(tmp_path):
    assert set(PRESETS) <= set(preset_names())
    for name in preset_names():
        cfg = preset(name)
        assert cfg.name == name
        assert HardwareConfig.from_dict(cfg.to_dict()) == cfg
        path = tmp_path / f"{name}.toml"
        path.write_text(cfg.to_toml())
        assert HardwareConfig.from_toml(path) == cfg
        assert load_config(name) == cfg and load_config(str(path)) == cfg


def test_preset_contents():
    t = preset("tflite-int8")
    assert (t.weight_bits, t.weight_scales, t.weight_narrow_range, t.activation_bits, t.activation_symmetric,
            t.bias_bits, t.bias_add, t.accumulator_bits, t.accumulator_overflow.value, t.requantization,
            t.dense_requantization, t.rounding.value) == (8, "per-channel", True, 8, False, 32, "after", 32, "wrap",
                                                          "tflite-double", "float", "half_away")
    s, w = preset("int8-acc16-sat"), preset("int8-acc16-wrap")
    assert (s.accumulator_bits, s.accumulator_overflow.value, w.accumulator_overflow.value) == (16, "saturate", "wrap")
    i4 = preset("int4-acc12-sat")
    assert (i4.weight_bits, i4.activation_bits, i4.accumulator_bits) == (4, 4, 12)
    q = preset("q8.8-fixed")
    assert (q.weight_format.word, q.weight_format.frac, q.activation_format.frac, q.requantization) == \
        (16, 8, 8, "shift")
    assert q.weight_scales == "per-tensor" and q.activation_symmetric


@given(wb=st.integers(2, 16), ab=st.integers(2, 16), acc=st.integers(2, 64), data=st.data())
def test_config_round_trips_property(wb, ab, acc, data):
    try:
        import tomllib
    except ModuleNotFoundError:      # Python 3.10
        import tomli as tomllib
    from fxpsim.core.fixed import Overflow, Rounding
    draw = data.draw
    cfg = HardwareConfig(
        name=draw(st.text(max_size=8)), weight_bits=wb, activation_bits=ab, accumulator_bits=acc,
        bias_bits=draw(st.integers(2, acc)), weight_signed=draw(st.booleans()),
        weight_scales=draw(st.sampled_from(["per-channel", "per-tensor"])),
        activation_signed=draw(st.booleans()), activation_symmetric=draw(st.booleans()),
        accumulator_overflow=draw(st.sampled_from(list(Overflow))),
        accumulator_order=draw(st.sampled_from(["sequential", "tree"])),
        overflow_at=draw(st.sampled_from(["add", "end"])), bias_add=draw(st.sampled_from(["preload", "after"])),
        requantization=draw(st.sampled_from(["tflite-double", "tflite-single", "shift", "float"])),
        dense_requantization=draw(st.sampled_from([None, "tflite-double", "float"])),
        rounding=draw(st.sampled_from([r for r in Rounding if r != Rounding.STOCHASTIC])),
        weight_format=draw(st.sampled_from([None, "sfix8_En4", "ap_fixed<12,4>"])))
    assert HardwareConfig.from_dict(cfg.to_dict()) == cfg
    assert HardwareConfig.from_dict(tomllib.loads(cfg.to_toml())) == cfg
    assert HardwareConfig.from_dict(cfg.to_flat_dict()) == cfg


def test_replace_and_dotted_names():
    t = preset("tflite-int8")
    r = t.replace(**{"accumulator.bits": 16, "accumulator_overflow": "saturate"})
    assert (r.accumulator_bits, r.bias_bits, r.accumulator_overflow.value) == (16, 16, "saturate")
    assert t.accumulator_bits == 32  # frozen original unchanged
    with pytest.raises(ConfigError, match="unknown key 'weights.bitz'"):
        t.replace(**{"weights.bitz": 3})


@pytest.mark.parametrize("data, pieces", [
    ({"weights": {"bitz": 8}}, ["unknown key 'weights.bitz'", "bits, format, signed"]),
    ({"colour": "red"}, ["unknown key 'colour'", "[weights]"]),
    ({"weights": {"bits": 40}}, ["weights.bits", "2..16", "40"]),
    ({"weights": {"bits": "8"}}, ["weights.bits", "integer"]),
    ({"weights": {"scales": "per-row"}}, ["weights.scales", "per-channel, per-tensor"]),
    ({"accumulator": {"overflow": "wrapp"}}, ["accumulator.overflow", "'wrapp'", "saturate", "wrap"]),
    ({"accumulator": {"order": "random"}}, ["accumulator.order", "sequential, tree"]),
    ({"accumulator": {"bits": 1}}, ["accumulator.bits", "2..64"]),
    ({"requantization": {"scheme": "magic"}}, ["requantization.scheme", "tflite-double", "float"]),
    ({"requantization": {"dense_scheme": "magic"}}, ["requantization.dense_scheme", "tflite-single, shift"]),
    ({"requantization": {"rounding": "sideways"}}, ["requantization.rounding", "half_even"]),
    ({"requantization": {"rounding": "stochastic"}}, ["requantization.rounding", "stochastic"]),
    ({"requantization": {"activation_clamp": "yes"}}, ["requantization.activation_clamp", "true or false"]),
    ({"activations": {"format": "Q9.x"}}, ["activations.format", "Q7.8"]),
    ({"activations": {"format": "sfix24_En8"}}, ["activations.format", "2..16"]),
    ({"bias": {"bits": 40}, "accumulator": {"bits": 32}}, ["bias.bits", "2..32"]),
    ({"bias": {"add": "sometimes"}}, ["bias.add", "preload, after"]),
    ({"weights": 8}, ["[weights] must be a table"]),
])
def test_bad_configs_name_key_and_allowed(data, pieces):
    with pytest.raises(ConfigError) as info:
        HardwareConfig.from_dict(data, source="my.toml")
    msg = str(info.value)
    assert msg.startswith("my.toml: ")
    for piece in pieces:
        assert piece in msg, (piece, msg)


def test_bad_files_and_presets(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        HardwareConfig.from_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[weights\nbits = 8\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        HardwareConfig.from_toml(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text("[accumulator]\nbitz = 16\n")
    with pytest.raises(ConfigError, match=r"typo.toml: unknown key 'accumulator.bitz'"):
        load_config(typo)
    with pytest.raises(ConfigError, match="unknown preset 'tflite-int9'; available: .*tflite-int8"):
        preset("tflite-int9")


# --------------------------------------------------------------------------- independent integer reference
def _f32(v: float) -> float:
    return float(np.float32(v))


def _rha(v: float) -> int:
    """Round half away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _round(v: float, mode: str) -> int:
    return _rha(v) if mode == "half_away" else math.floor(v + 0.5)  # half_up


def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


def _act_params(lo, hi, bits=8):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    s = _f32((hi - lo) / (qmax - qmin))
    return s, _clamp(qmin - _rha(lo / s), qmin, qmax)


def _quantize_multiplier(r: float):
    q, e = math.frexp(r)
    m = _rha(q * 2.0 ** 31)
    if m == 1 << 31:
        m, e = 1 << 30, e + 1
    return (0, 0) if e < -31 else (m, e)


def _wrap(v: int, bits: int) -> int:
    return ((v + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


def _srdhm(a: int, b: int) -> int:
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    ab = a * b
    t = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return (abs(t) >> 31) * (1 if t >= 0 else -1)      # C division truncates toward zero


def _rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if (x & mask) > threshold else 0)


def _requant(acc: int, real: float, scheme: str, rounding: str) -> int:
    if scheme == "float":
        return _round(acc * real, rounding)
    m, e = _quantize_multiplier(real)
    if scheme == "tflite-double":
        return _rdbpot(_srdhm(_wrap(acc << max(e, 0), 32), m), max(-e, 0))
    t = 31 - e                                          # tflite-single
    return _wrap((acc * m + (1 << (t - 1))) >> t, 32)


def _accumulate(xs, ws, bias, bits, mode, bias_add, at_end=False):
    """Per-add accumulator (or, ``at_end``, the exact sum fitted once): (value, overflow events)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    overflows = 0

    def fit(v):
        nonlocal overflows
        if lo <= v <= hi:
            return v
        overflows += 1
        return _clamp(v, lo, hi) if mode == "saturate" else _wrap(v, bits)
    if at_end:
        return fit(sum(a * w for a, w in zip(xs, ws)) + bias), overflows
    acc = bias if bias_add == "preload" else 0
    for a, w in zip(xs, ws):
        acc = fit(acc + a * w)
    if bias_add == "after":
        acc = fit(acc + bias)
    return acc, overflows


def _reference_dense(x_codes, z_in, s_in, w_float, b_float, out_range, relu, cfg):
    """One Dense layer on Python ints: returns (codes, scale, zp, overflows, exact accumulators)."""
    qmax_w = (1 << (cfg.weight_bits - 1)) - 1
    n_in, n_out = w_float.shape
    cols = [[float(w_float[k, o]) for k in range(n_in)] for o in range(n_out)]
    if cfg.weight_scales == "per-channel":
        s_w = [_f32(max(abs(v) for v in col) / qmax_w) for col in cols]
    else:
        s_w = [_f32(max(abs(v) for col in cols for v in col) / qmax_w)] * n_out
    w_q = [[_clamp(_rha(v / s_w[o]), -qmax_w, qmax_w) for v in cols[o]] for o in range(n_out)]
    bmax = (1 << (cfg.bias_bits - 1)) - 1
    b_q = [_clamp(_rha(float(b_float[o]) / (s_in * s_w[o])), -bmax - 1, bmax) for o in range(n_out)]
    s_out, z_out = _act_params(*out_range)
    lo, hi = (max(-128, z_out) if relu else -128), 127
    out, exact, overflows = [], [], 0
    for row in x_codes:
        xs = [int(v) - z_in for v in row]
        out_row = []
        for o in range(n_out):
            acc, n = _accumulate(xs, w_q[o], b_q[o], cfg.accumulator_bits, cfg.accumulator_overflow.value,
                                 cfg.bias_add, cfg.overflow_at == "end")
            overflows += n
            exact.append(sum(a * w for a, w in zip(xs, w_q[o])) + b_q[o])
            real = (s_in * s_w[o]) / s_out
            scheme = cfg.dense_requantization or cfg.requantization
            out_row.append(_clamp(_requant(acc, real, scheme, cfg.rounding.value) + z_out, lo, hi))
        out.append(out_row)
    return out, s_out, z_out, overflows, exact


def _exact_partial_bits(index, in_codes, model, cfg, s_in, z_in, s1, z1):
    """Signed width of the largest |running sum| of layer ``index`` on the exact datapath (full bias, the
    configured bias placement), fed the exact codes ``in_codes``: the independent 'bits needed'."""
    layer = model.layers[index]
    s, z = (s_in, z_in) if index == 0 else (s1, z1)
    qmax_w = (1 << (cfg.weight_bits - 1)) - 1
    n_in, n_out = layer.W.shape
    cols = [[float(layer.W[k, o]) for k in range(n_in)] for o in range(n_out)]
    if cfg.weight_scales == "per-channel":
        s_w = [_f32(max(abs(v) for v in col) / qmax_w) for col in cols]
    else:
        s_w = [_f32(max(abs(v) for col in cols for v in col) / qmax_w)] * n_out
    w_q = [[_clamp(_rha(v / s_w[o]), -qmax_w, qmax_w) for v in cols[o]] for o in range(n_out)]
    b_q = [_rha(float(layer.b[o]) / (s * s_w[o])) for o in range(n_out)]
    peak = 0
    for row in in_codes:
        xs = [int(v) - z for v in row]
        for o in range(n_out):
            acc = b_q[o] if cfg.bias_add == "preload" else 0
            peak = max(peak, abs(acc))
            for a, w in zip(xs, w_q[o]):
                acc += a * w
                peak = max(peak, abs(acc))
            if cfg.bias_add == "after":
                peak = max(peak, abs(acc + b_q[o]))
    return _bits_of(peak)


def _bits_of(peak):
    return max(peak.bit_length(), (peak - 1).bit_length()) + 1 if peak else 1


def _tiny_model():
    m = nn.Sequential(nn.Dense(4, 3, activation="relu", seed=1), nn.Dense(3, 2, seed=2))
    m.layers[0].W[...] = [[0.5, -0.25, 0.75], [-1.0, 0.3, 0.2], [0.1, 0.9, -0.6], [0.4, -0.8, 0.05]]
    m.layers[0].b[...] = [0.1, -0.2, 0.05]
    m.layers[1].W[...] = [[1.2, -0.7], [-0.4, 0.9], [0.6, 0.3]]
    m.layers[1].b[...] = [0.02, -0.03]
    return m.eval()


TINY_CONFIGS = [
    preset("tflite-int8"),
    preset("tflite-int8").replace(weight_scales="per-tensor", requantization="tflite-single"),
    preset("int8-acc16-sat").replace(accumulator_bits=12),
    preset("int8-acc16-wrap").replace(accumulator_bits=12, requantization="float", rounding="half_up"),
    preset("int8-acc16-sat").replace(accumulator_bits=11, requantization="tflite-double", bias_add="after"),
]


@pytest.mark.parametrize("cfg", TINY_CONFIGS, ids=lambda c: f"{c.requantization}-acc{c.accumulator_bits}-"
                         f"{c.accumulator_overflow.value}-{c.weight_scales}")
def test_simulate_matches_independent_integer_model(cfg):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.5, 1.5, size=(24, 4)).astype(np.float32)
    y = rng.integers(0, 2, size=24)
    model = _tiny_model()
    h1 = model.layers[0].forward(x).astype(np.float64)           # float reference, layer by layer
    h2 = model.layers[1].forward(h1.astype(np.float32)).astype(np.float64)

    s_in, z_in = _act_params(float(x.min()), float(x.max()))
    x_codes = [[_clamp(_rha(float(v) / s_in) + z_in, -128, 127) for v in row] for row in x.astype(np.float64)]
    c1, s1, z1, ovf1, ex1 = _reference_dense(x_codes, z_in, s_in, model.layers[0].W, model.layers[0].b,
                                             (h1.min(), h1.max()), True, cfg)
    c2, s2, z2, ovf2, ex2 = _reference_dense(c1, z1, s1, model.layers[1].W, model.layers[1].b,
                                             (h2.min(), h2.max()), False, cfg)

    # the exact datapath, independently: full bias, 32-bit accumulator that no sum reaches
    ecfg = cfg.exact_datapath()
    e1, _, _, eo1, eex1 = _reference_dense(x_codes, z_in, s_in, model.layers[0].W, model.layers[0].b,
                                           (h1.min(), h1.max()), True, ecfg)
    e2, _, _, eo2, eex2 = _reference_dense(e1, z1, s1, model.layers[1].W, model.layers[1].b,
                                           (h2.min(), h2.max()), False, ecfg)
    assert eo1 == eo2 == 0
    # isolated: layer 2 alone on cfg, fed the exact layer 1's codes
    i2, _, _, io2, _ = _reference_dense(e1, z1, s1, model.layers[1].W, model.layers[1].b,
                                        (h2.min(), h2.max()), False, cfg)

    net = convert(model, cfg, x)
    np.testing.assert_array_equal(net.run(x, cfg), np.array(c2))
    report = simulate(model, cfg, x, y)
    for rec, codes, s, z, ref, ovf, exact, eexact, ecodes, icodes, iovf in (
            (report.layers[0], c1, s1, z1, h1, ovf1, ex1, eex1, e1, c1, ovf1),
            (report.layers[1], c2, s2, z2, h2, ovf2, ex2, eex2, e2, i2, io2)):
        hw = (np.array(codes, dtype=np.float64) - z) * s
        err = hw - ref
        assert rec.mse == pytest.approx(np.mean(err ** 2), rel=1e-9)
        assert rec.sqnr_db == pytest.approx(10 * np.log10(np.sum(ref ** 2) / np.sum(err ** 2)), rel=1e-9)
        assert rec.max_abs_error_lsb == pytest.approx(np.max(np.abs(err)) / s, rel=1e-9)
        assert rec.overflow_count == ovf
        adds = len(exact) * (len(codes[0]) and (4 if rec.index == 0 else 3) + (cfg.bias_add == "after"))
        assert rec.overflow_rate == pytest.approx(ovf / adds)
        lo, hi = min(exact), max(exact)
        assert rec.acc_peak == max(-lo, hi)
        need = max(hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1
        assert rec.acc_bits_needed_cumulative == need
        # bits needed: the exact datapath's partial sums (here single adds of at most 4 products: the
        # running sums' peak is not the final sums' in general, so compute it)
        assert rec.acc_bits_needed == _exact_partial_bits(rec.index, e1 if rec.index else x_codes, model,
                                                         cfg, s_in, z_in, s1, z1)
        assert rec.headroom_bits == cfg.accumulator_bits - rec.acc_bits_needed
        assert rec.not_exact_fraction == pytest.approx(np.mean(np.array(codes) != np.array(ecodes)))
        assert rec.not_exact_isolated == pytest.approx(np.mean(np.array(icodes) != np.array(ecodes)))
        assert rec.overflow_count_isolated == iovf
        assert (rec.output_scale, rec.output_zero_point) == (pytest.approx(s), z)
    hw_out = (np.array(c2, dtype=np.float64) - z2) * s2
    assert report.network["accuracy"] == pytest.approx(np.mean(hw_out.argmax(1) == y))
    assert report.network["float_accuracy"] == pytest.approx(np.mean(h2.argmax(1) == y))
    assert report.network["agreement"] == pytest.approx(np.mean(hw_out.argmax(1) == h2.argmax(1)))
    assert report.network["overflow_count"] == ovf1 + ovf2
    assert report.network["bit_ops"] == (4 * 3 + 3 * 2) * 8 * 8
    if cfg.accumulator_bits <= 12:
        assert ovf1 + ovf2 > 0  # the narrow configs really exercise overflow


@pytest.mark.parametrize("cfg", [
    HardwareConfig(weight_signed=False, activation_signed=False, weight_bits=12, activation_bits=12,
                   accumulator_bits=48, requantization="float"),
    HardwareConfig(weight_scales="per-tensor", activation_symmetric=True, weight_bits=12, activation_bits=12,
                   accumulator_bits=40, requantization="shift", rounding="half_even"),
], ids=["unsigned-asymmetric", "symmetric-power-of-two"])
def test_other_code_conventions_track_the_float_model(cfg):
    model = _tiny_model()
    x = np.random.default_rng(2).uniform(-1, 1, (50, 4)).astype(np.float32)
    net = convert(model, cfg, x)
    w0 = net.tensors[net.nodes[1].inputs[1]]
    if not cfg.weight_signed:
        assert w0.data.dtype == np.uint16 and np.any(w0.zero_point)
    if cfg.requantization == "shift":
        scales = [float(net.tensors["input_codes"].scale[0])] + [float(s) for s in w0.scale]
        assert all(math.log2(s) == round(math.log2(s)) for s in scales)
    r = simulate(model, cfg, x)
    assert r.network["agreement"] == 1.0 and r.network["output_sqnr_db"] > 45


@given(seed=st.integers(0, 2 ** 16), n_in=st.integers(1, 6), n_out=st.integers(1, 4),
       acc_bits=st.integers(8, 32), overflow=st.sampled_from(["saturate", "wrap"]),
       bias_add=st.sampled_from(["preload", "after"]),
       scheme=st.sampled_from(["tflite-double", "tflite-single", "float"]),
       rounding=st.sampled_from(["half_away", "half_up"]), scales=st.sampled_from(["per-channel", "per-tensor"]),
       weight_bits=st.integers(2, 8), overflow_at=st.sampled_from(["add", "end"]))
def test_dense_layer_matches_reference_property(seed, n_in, n_out, acc_bits, overflow, bias_add, scheme, rounding,
                                                scales, weight_bits, overflow_at):
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Dense(n_in, n_out, seed=seed)).eval()
    model.layers[0].W[...] = rng.normal(0, 1, (n_in, n_out)) * rng.choice([0.01, 1.0, 50.0])
    model.layers[0].b[...] = rng.normal(0, 2, n_out)
    x = (rng.normal(0, 1, (5, n_in)) * rng.choice([0.1, 1.0, 30.0])).astype(np.float32)
    cfg = HardwareConfig(weight_bits=weight_bits, weight_scales=scales, accumulator_bits=acc_bits,
                         accumulator_overflow=overflow, bias_add=bias_add, requantization=scheme, rounding=rounding,
                         overflow_at=overflow_at)
    ref = model.layers[0].forward(x).astype(np.float64)
    s_in, z_in = _act_params(float(x.min()), float(x.max()))
    x_codes = [[_clamp(_round(float(v) / s_in, rounding) + z_in, -128, 127) for v in row]
               for row in x.astype(np.float64)]
    codes, _, _, overflows, _ = _reference_dense(x_codes, z_in, s_in, model.layers[0].W, model.layers[0].b,
                                                 (ref.min(), ref.max()), False, cfg)
    net = convert(model, cfg, x)
    out, traces, _ = net.run(x, cfg, trace=True)
    np.testing.assert_array_equal(out, np.array(codes))
    assert traces[net.nodes[1].name]["overflows"] == overflows


def test_conv_layer_with_narrow_accumulator_matches_reference():
    """A SAME 3x3 conv (padded taps add nothing) with a 12-bit saturating accumulator preloaded with the bias,
    taps accumulated in TFLite's (kh, kw, c) order, single-rounding requantization."""
    rng = np.random.default_rng(5)
    model = nn.Sequential(nn.Conv2D(2, 3, 3, padding="SAME", activation="relu", seed=4), nn.Flatten(),
                          nn.Dense(4 * 4 * 3, 2, seed=5)).eval()
    x = rng.uniform(-1, 1, (3, 4, 4, 2)).astype(np.float32)
    cfg = preset("int8-acc16-sat").replace(accumulator_bits=12)
    net = convert(model, cfg, x)
    conv = net.nodes[1]
    xs, ws, bs, ys = (net.tensors[t] for t in conv.inputs + conv.outputs)
    _, _, kept = net.run(x, cfg, keep=True)
    codes = kept["input_codes"].astype(np.int64)
    w = ws.data.astype(np.int64)                          # [O, KH, KW, C]
    z_in, s_in, z_out, s_out = int(xs.zero_point[0]), float(xs.scale[0]), int(ys.zero_point[0]), float(ys.scale[0])
    act_min, act_max = activation_range("relu", s_out, z_out)
    expect = np.zeros((3, 4, 4, 3), dtype=np.int64)
    total_ovf = 0
    for n in range(3):
        for i in range(4):
            for j in range(4):
                for o in range(3):
                    taps = [(int(codes[n, i + a - 1, j + b - 1, c]) - z_in, int(w[o, a, b, c]))
                            for a in range(3) for b in range(3) for c in range(2)
                            if 0 <= i + a - 1 < 4 and 0 <= j + b - 1 < 4]
                    acc, ovf = _accumulate([t[0] for t in taps], [t[1] for t in taps], int(bs.data[o]), 12,
                                           "saturate", "preload")
                    total_ovf += ovf
                    real = s_in * float(ws.scale[o]) / s_out
                    expect[n, i, j, o] = _clamp(_requant(acc, real, "tflite-single", "half_up") + z_out,
                                                act_min, act_max)
    out, traces, kept = net.run(x, cfg, trace=True, keep=True)
    np.testing.assert_array_equal(kept[conv.outputs[0]], expect)
    assert traces[conv.name]["overflows"] == total_ovf > 0


def test_q88_fixed_point_datapath_is_plain_shifts():
    model = _tiny_model()
    x = np.random.default_rng(1).uniform(-1, 1, (10, 4)).astype(np.float32)
    cfg = preset("q8.8-fixed")
    net = convert(model, cfg, x)
    n0, n1 = net.nodes[1], net.nodes[2]
    w0, b0, y0 = (net.tensors[t] for t in n0.inputs[1:] + n0.outputs)
    xin = net.tensors["input_codes"]
    np.testing.assert_array_equal(w0.data, np.floor(model.layers[0].W.T.astype(np.float64) * 256 + 0.5))
    assert (xin.scale[0], xin.zero_point[0], y0.scale[0], y0.zero_point[0]) == (2 ** -8, 0, 2 ** -8, 0)
    from fxpsim.graph.ops import requantizer_for
    rq = requantizer_for(net, n0, cfg)
    assert rq.kind == "shift" and set(rq.shift) == {-8}
    np.testing.assert_array_equal(b0.data, np.floor(model.layers[0].b.astype(np.float64) * 2 ** 16 + 0.5))
    # reference: Q8.8 codes, exact Q16.16 sums, round-half-up shift by 8, saturate to 16 bits, ReLU
    xq = np.floor(x.astype(np.float64) * 256 + 0.5).astype(np.int64)
    acc = xq @ w0.data.T.astype(np.int64) + b0.data
    h = np.clip((acc + 128) >> 8, 0, 32767)
    w1, b1 = (net.tensors[t] for t in n1.inputs[1:])
    acc2 = h @ w1.data.T.astype(np.int64) + b1.data
    expect = np.clip((acc2 + 128) >> 8, -32768, 32767)
    np.testing.assert_array_equal(net.run(x, cfg), expect)


# ------------------------------------------------------------------------------- TFLite's own int8 outputs
def _tflite_network(vectors_dir: Path, name: str) -> tuple[IntegerGraph, np.ndarray, np.ndarray]:
    """The TFLite model's own tensors (int8 weights, int32 biases, scales, zero points) as an IntegerGraph
    built by hand from the vectors' JSON."""
    meta = json.loads((vectors_dir / "tflite_int8" / f"{name}.json").read_text())
    d = np.load(vectors_dir / "tflite_int8" / f"{name}.npz")
    tensors, nodes, seen = {}, [], set()

    def act_tensor(i):
        if i not in tensors:
            arr = d[f"t{i}"] if f"t{i}" in d.files else None
            shape = tuple(arr.shape[2:]) if arr is not None and arr.ndim > 2 else None
            tensors[i] = TensorSpec(f"t{i}", 8, True, shape or (), d[f"t{i}_scales"][:1], d[f"t{i}_zero_points"][:1])
        return f"t{i}"
    for k, op in enumerate(meta["ops"]):
        kind = op["builtin_op"]
        ins, out = op["inputs"], op["outputs"][0]
        opts = op.get("options") or {}
        act = str(opts.get("fusedActivationFunction", "NONE")).lower()
        if kind in ("CONV_2D", "FULLY_CONNECTED"):
            w = d[f"t{ins[1]}"]
            axis = 0 if d[f"t{ins[1]}_scales"].size > 1 else None
            tensors[ins[1]] = TensorSpec(f"t{ins[1]}", 8, True, scale=d[f"t{ins[1]}_scales"],
                                         zero_point=d[f"t{ins[1]}_zero_points"], axis=axis, data=w)
            tensors[ins[2]] = TensorSpec(f"t{ins[2]}", 32, True, data=d[f"t{ins[2]}"].astype(np.int64))
            attrs = {"activation": act}
            if kind == "CONV_2D":
                attrs.update(stride=[opts.get("strideH", 1), opts.get("strideW", 1)],
                             padding=str(opts.get("padding", "VALID")).upper())
            nodes.append(Node(f"op{k}", "conv2d" if kind == "CONV_2D" else "fully_connected",
                              [act_tensor(ins[0]), f"t{ins[1]}", f"t{ins[2]}"], [act_tensor(out)], attrs))
        elif kind == "RESHAPE":
            nodes.append(Node(f"op{k}", "reshape", [act_tensor(ins[0])], [act_tensor(out)]))
        else:
            pytest.skip(f"op {kind} not used by the simulation")
    inputs, outputs = d["inputs"], d["outputs"]
    shapes = {meta["input_tensor"]: inputs.shape[2:]}
    # per-sample shapes: the input's from the data, the rest by running shape inference through the ops
    for i, t in tensors.items():
        if t.data is None and not t.shape:
            t.shape = tuple(shapes.get(i, ()))
    _infer_shapes(nodes, tensors, meta)
    graph = IntegerGraph(list(tensors.values()), nodes, [f"t{meta['input_tensor']}"], [nodes[-1].outputs[0]])
    return graph, inputs, outputs


def _infer_shapes(nodes, tensors, meta):
    by_name = {t.name: t for t in tensors.values()}
    for nd in nodes:
        x, y = by_name[nd.inputs[0]], by_name[nd.outputs[0]]
        if nd.op == "fully_connected":
            y.shape = (by_name[nd.inputs[1]].data.shape[0],)
        elif nd.op == "reshape":
            y.shape = (int(np.prod(x.shape)),)
            nd.attrs["shape"] = list(y.shape)
        else:
            w = by_name[nd.inputs[1]].data
            stride = nd.attrs["stride"]
            if nd.attrs["padding"] == "SAME":
                y.shape = tuple(-(-x.shape[a] // stride[a]) for a in (0, 1)) + (w.shape[0],)
            else:
                y.shape = tuple((x.shape[a] - w.shape[1 + a]) // stride[a] + 1 for a in (0, 1)) + (w.shape[0],)


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_integer_graph_reproduces_tflite_reference_kernels(vectors_dir, name):
    net, inputs, outputs = _tflite_network(vectors_dir, name)
    x = inputs.reshape((inputs.shape[0],) + inputs.shape[2:])
    got = net.run(x, preset("tflite-int8"))
    np.testing.assert_array_equal(got.reshape(outputs.shape), outputs)


# ------------------------------------------------------------------------------------ trained digits CNN
@pytest.fixture(scope="module")
def trained():
    x, y = load_digits("train", seed=0)
    xt, yt = load_digits("test", seed=0)
    model = nn.small_cnn((8, 8, 1), filters=(8, 16), seed=0)
    train.fit(model, (x, y), epochs=3, optimizer=train.Adam(3e-3), progress=False)
    return model, xt[:200], yt[:200], x[:300]


def test_wide_formats_reproduce_the_float_model(trained):
    model, x, y, xc = trained
    wide = HardwareConfig(name="wide", weight_bits=16, activation_bits=16, accumulator_bits=56,
                          requantization="float", rounding="half_even")
    r = simulate(model, wide, x, y)   # calibrated on x itself: nothing clips
    assert r.network["agreement"] == 1.0
    assert r.network["accuracy"] == r.network["float_accuracy"]
    assert r.network["overflow_count"] == 0
    assert r.network["output_sqnr_db"] > 80
    # 16-bit codes: every layer within a few output LSBs of the float model (the rounding of weights and
    # activations, accumulated through the layers); nothing clipped
    for rec in r.layers:
        assert rec.sqnr_db > 80 and rec.max_abs_error_lsb < 4 and rec.clipped_fraction == 0, rec
    # calibrated on other images, a few test activations exceed the range: the report shows the clipping
    r_other = simulate(model, wide, x, y, calibration_x=xc)
    assert r_other.network["agreement"] == 1.0
    r8 = simulate(model, "tflite-int8", x, y, calibration_x=xc)
    assert r8.network["agreement"] >= 0.97 and r8.network["overflow_count"] == 0
    assert all(rec.headroom_bits > 0 for rec in r8.layers if rec.accumulator_bits)


def test_narrow_wrapping_accumulator_collapses(trained):
    model, x, y, xc = trained
    base = simulate(model, "tflite-int8", x, y, calibration_x=xc)
    narrow = preset("tflite-int8").replace(accumulator_bits=12, accumulator_overflow="wrap")
    r = simulate(model, narrow, x, y, calibration_x=xc)
    assert r.network["overflow_count"] > 0
    assert r.network["accuracy"] < base.network["accuracy"] - 0.3
    conv = r.layers[0]
    assert conv.overflow_count > 0 and 0 < conv.overflow_rate <= 1 and conv.headroom_bits < 0
    sat = simulate(model, narrow.replace(accumulator_overflow="saturate"), x, y, calibration_x=xc)
    assert sat.network["overflow_count"] > 0
    # the float side of the report does not depend on the accumulator
    assert r.network["float_accuracy"] == sat.network["float_accuracy"] == base.network["float_accuracy"]


def test_overflow_at_end_counts_only_final_sums(trained):
    model, x, y, xc = trained
    per_add = preset("int8-acc16-wrap")
    at_end = per_add.replace(overflow_at="end")
    a = simulate(model, per_add, x[:50], calibration_x=xc)
    b = simulate(model, at_end, x[:50], calibration_x=xc)
    for ra, rb in zip(a.layers, b.layers):
        if ra.accumulator_bits:
            # a wrapping adder's final value does not depend on where it wraps: same outputs, fewer events
            assert rb.overflow_count <= ra.overflow_count
    assert a.network["agreement"] == b.network["agreement"]


def test_batchnorm_depthwise_and_avgpool_models_simulate():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (40, 6, 6, 2)).astype(np.float32)
    model = nn.Sequential(nn.Conv2D(2, 4, 3, padding="SAME", seed=1), nn.BatchNorm(4), nn.ReLU(),
                          nn.DepthwiseConv2D(4, 3, depth_multiplier=2, padding="VALID", activation="relu6", seed=2),
                          nn.AvgPool2D(2), nn.Flatten(), nn.Dense(8 * 2 * 2, 3, seed=3))
    bn = model.layers[1]
    bn.running_mean[...] = [0.1, -0.2, 0.3, 0.0]
    bn.running_var[...] = [0.5, 2.0, 1.0, 0.3]
    bn.gamma[...] = [1.5, 0.5, -1.0, 2.0]
    model.eval()
    wide = HardwareConfig(weight_bits=16, activation_bits=16, accumulator_bits=56, requantization="float")
    r = simulate(model, wide, x)
    assert [rec.kind for rec in r.layers] == ["conv2d", "depthwise_conv2d", "avg_pool2d", "reshape", "fully_connected"]
    assert r.layers[0].name == "0:conv2d" and r.network["agreement"] == 1.0
    assert min(rec.sqnr_db for rec in r.layers) > 60
    r8 = simulate(model, "tflite-int8", x)
    assert r8.network["output_sqnr_db"] > 25


def test_bad_inputs_give_clear_errors(trained):
    model, x, y, xc = trained
    with pytest.raises(ValueError, match="NaN"):
        bad = x.copy()
        bad[0, 0, 0, 0] = np.nan
        simulate(model, "tflite-int8", bad)
    with pytest.raises(TypeError, match="numpy array"):
        simulate(model, "tflite-int8", x.tolist())
    with pytest.raises(ValueError, match="non-empty"):
        simulate(model, "tflite-int8", x[:0])
    with pytest.raises(ValueError, match=r"labels of shape \(200,\)"):
        simulate(model, "tflite-int8", x, y[:10])
    with pytest.raises(ConfigError, match="unknown preset"):
        simulate(model, "no-such-preset", x)
    with pytest.raises(ConfigError, match="accumulator.bits = 40"):
        simulate(model, preset("tflite-int8").replace(accumulator_bits=40), x)
    unfoldable = nn.Sequential(nn.Dense(4, 3, activation="relu"), nn.BatchNorm(3), nn.Dense(3, 2))
    with pytest.raises(ValueError, match="BatchNorm that cannot be folded"):
        simulate(unfoldable, "tflite-int8", np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="no Dense/Conv2D"):
        simulate(nn.Sequential(nn.Flatten()), "tflite-int8", np.ones((2, 4), np.float32))
    ro = x.copy()
    ro.setflags(write=False)
    before = ro.copy()
    simulate(model, "tflite-int8", ro, calibration_x=xc)  # read-only input accepted, never modified
    np.testing.assert_array_equal(ro, before)


def test_activation_ranges_from_fake_quant():
    aq = {"class_name": "fake_quant", "min": -1.0, "max": 3.0, "num_bits": 8}
    model = nn.Sequential(nn.Dense(4, 3, activation="relu", activation_quantizer=aq, seed=0), nn.Dense(3, 2))
    x = np.random.default_rng(0).uniform(-1, 1, (20, 4)).astype(np.float32)
    graph = extract(model, x)
    assert graph.stages[0].range_source == "quantizer"
    lo, hi = graph.stages[0].out_range
    assert lo == pytest.approx(-1.0, abs=0.02) and hi == pytest.approx(3.0, abs=0.02)
    assert graph.stages[1].range_source == "calibration"


def test_labels_outside_the_output_classes_are_rejected():
    model = _tiny_model()
    x = np.random.default_rng(0).uniform(-1, 1, (6, 4)).astype(np.float32)
    with pytest.raises(ValueError, match=r"labels outside 0\.\.1"):
        simulate(model, "tflite-int8", x, np.array([0, 1, 2, 0, 1, 0]))
    with pytest.raises(ValueError, match="histogram_bins must be a positive int"):
        simulate(model, "tflite-int8", x, histogram_bins=0)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        simulate(model, "tflite-int8", x, batch_size=0)


# ------------------------------------------------------------------------- trained quantizer grids are kept
def _tf_grid(lo, hi, bits=8, narrow=False):
    """TensorFlow's nudged fake-quant grid, float32 as TF computes it: (scale, zero point, qmin, qmax)."""
    f = np.float32
    qmin, qmax = (1 if narrow else 0), (1 << bits) - 1
    scale = (f(hi) - f(lo)) / f(qmax - qmin)
    zp_from_min = f(qmin) - f(lo) / scale
    zp = qmin if zp_from_min < qmin else qmax if zp_from_min > qmax else _rha(float(zp_from_min))
    return scale, zp, qmin, qmax


def _tf_codes(w, lo, hi, bits=8, narrow=False):
    f = np.float32
    scale, zp, qmin, qmax = _tf_grid(lo, hi, bits, narrow)
    nmin, nmax = f(qmin - zp) * scale, f(qmax - zp) * scale
    clamped = np.clip(w.astype(f), nmin, nmax)
    return np.floor((clamped - nmin) / scale + f(0.5)).astype(np.int64) + qmin, float(scale), zp


def _qat_dense_model(act_max=1.5):
    wq = {"class_name": "fake_quant", "min": -0.9, "max": 0.7, "num_bits": 8, "narrow_range": True}
    aq = {"class_name": "fake_quant", "min": 0.0, "max": act_max, "num_bits": 8}
    model = nn.Sequential(nn.Dense(6, 5, activation="relu", weight_quantizer=wq, activation_quantizer=aq, seed=3),
                          nn.Dense(5, 3, weight_quantizer=wq, seed=4))
    return model.eval()


def test_trained_weight_grid_is_used_not_recomputed():
    """The weight codes are the trained FakeQuant's codes (TF's nudged grid, computed independently here),
    shifted by -128 onto int8, with its scale and zero point: the hardware weights equal the QAT model's
    quantized weights. Re-deriving a max|w| grid put most of them on another grid."""
    model = _qat_dense_model()
    x = np.random.default_rng(0).uniform(-1, 1, (30, 6)).astype(np.float32)
    net = convert(model, "tflite-int8", x)
    for i, layer in enumerate(model.layers):
        w = net.tensors[f"{i}:dense/weights"]
        codes, scale, zp = _tf_codes(layer.W, -0.9, 0.7, narrow=True)
        np.testing.assert_array_equal(w.data, codes.T - 128)
        np.testing.assert_allclose(w.scale, scale, rtol=0)
        np.testing.assert_array_equal(w.zero_point, zp - 128)
        hw = w.dequantize(w.data).T
        np.testing.assert_allclose(hw, layer.quantized_weight(), rtol=1e-6, atol=1e-7)
    assert net.meta["notes"] == []


def test_trained_activation_grid_and_clip():
    """The first layer's output uses the trained quantizer's scale and zero point; on the fixed-point target
    (different width: its own scale) the trained clip is kept, so no output exceeds the trained maximum."""
    model = _qat_dense_model(act_max=0.5)
    x = np.random.default_rng(1).uniform(-1, 1, (200, 6)).astype(np.float32)
    scale, zp, _, _ = _tf_grid(0.0, 0.5)
    net = convert(model, "tflite-int8", x)
    y = net.tensors["0:dense"]
    assert (float(y.scale[0]), int(y.zero_point[0])) == (float(scale), zp - 128)
    q88 = preset("q8.8-fixed")
    fixed = convert(model, q88, x)
    _, _, kept = fixed.run(x, q88, keep=True)
    h = fixed.tensors["0:dense"].dequantize(kept["0:dense"])
    pre = np.maximum(x.astype(np.float64) @ model.layers[0].quantized_weight() + model.layers[0].b, 0)
    assert np.mean(pre > 0.5 + 0.01) > 0.1                  # the float layer really exceeds the clip often
    assert h.max() <= 255 * float(scale) + 1e-12           # ... the fixed-point hardware does not
    assert any("0:dense" in n and "fixed activation format" in n for n in fixed.meta["notes"])
    assert any("0:dense: weights re-quantized" in n for n in fixed.meta["notes"])


def test_width_mismatch_falls_back_and_says_so():
    model = _qat_dense_model()
    x = np.random.default_rng(2).uniform(-1, 1, (30, 6)).astype(np.float32)
    cfg = preset("int4-acc12-sat")
    net = convert(model, cfg, x)
    w = net.tensors["0:dense/weights"]
    assert np.abs(w.data).max() == 7 and not np.any(w.zero_point)      # today's symmetric 4-bit rule
    notes = net.meta["notes"]
    assert any("0:dense: weights re-quantized" in n and "4-bit weights" in n and "8-bit" in n for n in notes)
    assert any("0:dense: output re-scaled" in n for n in notes)
    assert net.meta["grids"]["0:dense"] == {"weights": "recomputed", "output": "recomputed"}


# ---------------------------------------------------------------------------- reports that hide nothing
def test_bias_saturation_is_counted_at_conversion():
    """Large biases in a 16-bit bias register: the count in graph.meta and in the node's trace equals a count
    made here from the float biases, the input scale and TF's weight grid."""
    rng = np.random.default_rng(4)
    wq = {"class_name": "fake_quant", "min": -0.5, "max": 0.5, "num_bits": 8, "narrow_range": True}
    model = nn.Sequential(nn.Dense(6, 64, weight_quantizer=wq, seed=1)).eval()
    model.layers[0].b[...] = rng.normal(0, 40, 64)
    x = rng.uniform(-1, 1, (20, 6)).astype(np.float32)
    cfg = preset("int8-acc16-sat")
    net = convert(model, cfg, x)
    s_in, _ = _act_params(float(x.min()), float(x.max()))
    s_w = float(_tf_grid(-0.5, 0.5, narrow=True)[0])
    codes = [math.floor(float(b) / (s_in * s_w) + 0.5) for b in model.layers[0].b]
    expect = sum(1 for c in codes if not -32768 <= c <= 32767)
    assert 5 < expect < 64
    assert net.meta["bias_clipped"] == {"0:dense": expect}
    _, traces, _ = net.run(x, cfg, trace=True)
    assert traces["0:dense"]["bias_clipped_at_conversion"] == expect
    assert any(f"{expect} of 64 biases saturated to the 16-bit bias register" in n for n in net.meta["notes"])


def _fc_graph(w_codes, bias, x_zp=0, k=None):
    o, k = w_codes.shape
    tensors = [TensorSpec("x", 8, True, (k,), 0.02, x_zp), TensorSpec("w", 8, True, scale=0.01, data=w_codes),
               TensorSpec("b", 32, True, data=np.asarray(bias, np.int64)), TensorSpec("y", 8, True, (o,), 0.5, 0)]
    return IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w", "b"], ["y"])], ["x"], ["y"])


def _running_sums(xs, ws, init, order):
    """Every partial sum of one output, Python ints: a MAC chain from ``init`` or a pairwise tree then init."""
    prods = [a * b for a, b in zip(xs, ws)]
    if order == "sequential":
        sums, s = [init], init
        for p in prods:
            s += p
            sums.append(s)
        return sums
    level, nodes = prods, list(prods)
    while len(level) > 1:
        nxt = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)] + ([level[-1]] if len(level) % 2 else [])
        nodes += nxt
        level = nxt
    return nodes + [init, init + level[0]]


@pytest.mark.parametrize("order", ["sequential", "tree"])
@pytest.mark.parametrize("bias_add", ["preload", "after"])
def test_partial_peak_is_the_largest_running_sum(order, bias_add):
    """Weights +w then -w: the running sum climbs to ~2^19 and comes back near the bias, so the final
    accumulator needs few bits while a 16-bit accumulator overflows: the trace's partial_peak is the exact
    largest |running sum| (computed here one add at a time)."""
    rng = np.random.default_rng(9)
    k, o = 64, 5
    w = np.concatenate([rng.integers(90, 128, (o, k // 2)), -rng.integers(90, 128, (o, k // 2))], axis=1)
    w = w.astype(np.int8)
    bias = rng.integers(-300, 300, o)
    x = rng.integers(100, 128, (7, k)).astype(np.int8)
    net = _fc_graph(w, bias)
    cfg = HardwareConfig(accumulator_bits=16, accumulator_overflow="saturate", accumulator_order=order,
                         bias_add=bias_add, requantization="float")
    _, traces, _ = net.run(x, cfg, trace="peaks")
    peak, final = 0, 0
    for row in x.astype(int).tolist():
        for j in range(o):
            init = int(bias[j]) if bias_add == "preload" else 0
            sums = _running_sums(row, w[j].astype(int).tolist(), init, order)
            if bias_add == "after":
                sums.append(sums[-1] + int(bias[j]) if order == "sequential" else sums[-1] + int(bias[j]))
            peak = max(peak, max(abs(v) for v in sums))
            final = max(final, abs(sum(a * b for a, b in zip(row, w[j].astype(int).tolist())) + int(bias[j])))
    tr = traces["fc"]
    assert tr["partial_peak"] == peak and peak > 1 << 18
    assert tr["overflows"] > 0 and final < 1 << 15          # the final sums alone would say "fits 16 bits"


def test_partial_peak_of_a_padded_convolution():
    """Taps in the datapath's (kh, kw, c) order, padded taps adding zero, the bias preloaded."""
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, (2, 4, 5, 3)).astype(np.int8)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 4)
    tensors = [TensorSpec("x", 8, True, (4, 5, 3), 0.02, 3), TensorSpec("w", 8, True, scale=0.01, data=w),
               TensorSpec("b", 32, True, data=bias.astype(np.int64)), TensorSpec("y", 8, True, (4, 5, 4), 0.5, 0)]
    net = IntegerGraph(tensors, [Node("conv", "conv2d", ["x", "w", "b"], ["y"], {"padding": "SAME"})], ["x"], ["y"])
    cfg = HardwareConfig(accumulator_bits=32, bias_add="preload", requantization="float")
    _, traces, _ = net.run(x, cfg, trace="peaks")
    peak = 0
    for n in range(2):
        for i in range(4):
            for j in range(5):
                for oc in range(4):
                    s = int(bias[oc])
                    peak = max(peak, abs(s))
                    for a in range(3):
                        for b in range(3):
                            for c in range(3):
                                ii, jj = i + a - 1, j + b - 1
                                xv = int(x[n, ii, jj, c]) - 3 if 0 <= ii < 4 and 0 <= jj < 5 else 0
                                s += xv * int(w[oc, a, b, c])
                                peak = max(peak, abs(s))
    assert traces["conv"]["partial_peak"] == peak


def test_node_in_isolation_from_reference_inputs():
    """run_node_isolated quantizes the float reference input of a node and runs the node alone: the second
    layer of the tiny model fed the float model's first-layer output equals the independent integer model
    of that layer on those quantized inputs."""
    from fxpsim.graph.ops import run_node_isolated
    model = _tiny_model()
    x = np.random.default_rng(5).uniform(-1.5, 1.5, (16, 4)).astype(np.float32)
    cfg = preset("int8-acc16-sat").replace(accumulator_bits=11)
    net = convert(model, cfg, x)
    h1 = model.layers[0].forward(x).astype(np.float64)
    h2 = model.layers[1].forward(h1.astype(np.float32)).astype(np.float64)
    node = net.node("1:dense")
    xs = net.tensors[node.inputs[0]]
    s1, z1 = float(xs.scale[0]), int(xs.zero_point[0])
    codes = [[_clamp(math.floor(float(v) / s1 + 0.5) + z1, -128, 127) for v in row] for row in h1]
    expect, _, _, ovf, _ = _reference_dense(codes, z1, s1, model.layers[1].W, model.layers[1].b,
                                            (h2.min(), h2.max()), False, cfg)
    outs, info = run_node_isolated(net, node, [h1, None, None], cfg)
    np.testing.assert_array_equal(outs[0], np.array(expect))
    assert info["overflows"] == ovf


def test_peak_and_bits_needed_come_from_the_partial_sums():
    """Weights +w then -w: the final sums are small, the running sums are not (the report said 'bits needed
    1' for a layer with overflows before). The peak is checked against a Python loop over the products."""
    model = nn.Sequential(nn.Dense(8, 2, seed=0)).eval()
    model.layers[0].W[...] = np.array([[1.0, 0.5]] * 4 + [[-1.0, -0.5]] * 4, np.float32)
    model.layers[0].b[...] = 0.0
    x = np.tile(np.array([[1.0] * 4 + [0.98] * 4], np.float32), (3, 1))
    cfg = HardwareConfig(accumulator_bits=12, accumulator_overflow="saturate", bias_add="after")
    report = simulate(model, cfg, x, calibration_x=np.concatenate([x, -x]))
    rec = report.layers[0]
    graph = convert(model, cfg, np.concatenate([x, -x]))
    node = graph.nodes[1]
    _, _, kept = graph.run(x, cfg, keep=True)
    xs, ws = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    xo = kept[node.inputs[0]].astype(int) - int(xs.zero_point[0])
    peak = 0
    for n in range(len(xo)):
        for o in range(2):
            s = 0
            for k in range(8):
                s += int(xo[n, k]) * int(ws.data[o, k])
                peak = max(peak, abs(s))
    assert rec.acc_peak == peak > 2 ** 11                    # beyond the 12-bit range on the way
    assert rec.acc_bits_needed == peak.bit_length() + 1 and rec.headroom_bits < 0
    assert rec.overflow_count > 0


def test_error_in_isolation_equals_the_cumulative_error_of_the_first_layer():
    model = _tiny_model()
    x = np.random.default_rng(3).uniform(-1, 1, (40, 4)).astype(np.float32)
    r = simulate(model, "tflite-int8", x)
    first, second = r.layers[0], r.layers[1]
    assert first.isolated_sqnr_db == first.sqnr_db            # same (quantized float) input
    assert second.isolated_sqnr_db is not None and math.isfinite(second.isolated_sqnr_db)
    assert "SQNR isolated" in r.to_text()


def test_empty_or_binary_toml_is_an_error(tmp_path):
    (tmp_path / "empty.toml").write_text("")
    with pytest.raises(ConfigError, match="sets nothing"):
        load_config(str(tmp_path / "empty.toml"))
    (tmp_path / "model.toml").write_bytes(b"PK\x03\x04\xff\xfe binary")
    with pytest.raises(ConfigError, match="not"):
        load_config(str(tmp_path / "model.toml"))

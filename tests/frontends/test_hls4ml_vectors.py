"""fxpsim's hls4ml datapath against hls4ml itself.

* ``tests/vectors/hls4ml/{trn_wrap,narrow_wrap,rnd_sat,rnd_sat2}.npz``: every layer's output of hls4ml's own C
  simulation (``compile()`` + ``trace()``, hls4ml 1.3.0, g++ on its ``ap_fixed`` headers) for a 16-32-10 MLP in
  four precision configurations, one with a narrow ``accum_t`` that wraps (``tools/fixtures/hls4ml/make_vectors.py``);
* ``tests/vectors/hls4ml/ap_casts.npz``: 91 ``ap_[u]fixed<W,I,Q,O,N>`` types x 200 values converted by the
  ``ap_types`` C++ hls4ml ships (``tools/fixtures/hls4ml/make_ap_casts.py``);
* property tests of the type mapping and of Dense against an independent Fraction / Python-int model of
  ``ap_fixed`` (written below from the ap_types definitions, not from fxpsim).
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fxpsim.core.fixed import FixedArray, Format, from_float
from fxpsim.datapath.accumulate import matmul
from fxpsim.datapath.hls4ml import ApType, conv2d, dense, linear, parse_ap_type, relu
from fxpsim.frontends.hls4ml import Hls4mlModel

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "hls4ml"
CONFIGS = ("trn_wrap", "narrow_wrap", "rnd_sat", "rnd_sat2", "cnn_narrow_wrap", "cnn_rnd_sat")
Q_MODES = ("AP_TRN", "AP_TRN_ZERO", "AP_RND", "AP_RND_ZERO", "AP_RND_MIN_INF", "AP_RND_INF", "AP_RND_CONV")
O_MODES = ("AP_WRAP", "AP_SAT", "AP_SAT_ZERO", "AP_SAT_SYM")


def _load(name):
    d = np.load(VECTORS / f"{name}.npz", allow_pickle=False)
    layers = json.loads(str(d["layers"]))
    weights = {r["name"]: {"weight": d[f"w_{r['name']}"], "bias": d[f"b_{r['name']}"]}
               for r in layers if r["class"] in ("Dense", "Conv2D")}
    return d, layers, weights


# --------------------------------------------------------------------------- hls4ml's C simulation
@pytest.mark.parametrize("name", CONFIGS)
def test_every_layer_bit_for_bit_with_hls4ml_csim(name):
    d, layers, weights = _load(name)
    model = Hls4mlModel.from_layers(layers, weights)
    y, trace = model.run(d["x"], trace=True)
    traced = [r["name"] for r in layers if f"y_{r['name']}" in d.files]
    assert len(traced) == 3                                     # fc1 (conv1), relu1, fc2
    for lname in traced:
        got = trace[lname].to_float()
        want = d[f"y_{lname}"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: layer {lname}")
    np.testing.assert_array_equal(y.to_float(), d["y"])
    # the codes lie in the types hls4ml resolved
    for r in layers:
        assert trace[r["name"]].fmt == parse_ap_type(r["result_t"]).fmt


def test_the_vectors_overflow_where_they_should():
    """The wrapping accum_t wraps and the saturating ones saturate (thousands of adds), so the bit-exact match
    above covers both; and a model that fits only the sums (not each product into accum_t) misses hls4ml."""
    stats = {}
    for name in CONFIGS[:4]:
        d, layers, weights = _load(name)
        a = parse_ap_type(layers[0]["result_t"]).from_float(d["x"])
        for r in layers[1:]:
            if r["class"] != "Dense":
                a = relu(a, parse_ap_type(r["result_t"]))
                continue
            acc_t, res_t = parse_ap_type(r["accum_t"]), parse_ap_type(r["result_t"])
            w = parse_ap_type(r["weight_t"]).from_float(weights[r["name"]]["weight"])
            b = parse_ap_type(r["bias_t"]).from_float(weights[r["name"]]["bias"])
            x = a
            a, acc = dense(x, w, b, acc_t, res_t, return_accumulator=True)
            stats[name, r["name"]] = (acc_t.overflow.value, acc.overflows)
            # products rounded (not fitted) into the accumulator, every add fitted: fxpsim's plain matmul
            plain = matmul(x, w, acc_t.fmt, overflow=acc_t.overflow, rounding=acc_t.rounding,
                           init=np.broadcast_to(acc_t.cast(b).raw, acc.shape))
            stats[name, r["name"], "plain_equal"] = np.array_equal(res_t.cast(plain).to_float(), d[f"y_{r['name']}"])
    assert stats["narrow_wrap", "fc1"][0] == "wrap" and stats["narrow_wrap", "fc1"][1] > 1000
    assert stats["rnd_sat", "fc1"][0] == "saturate" and stats["rnd_sat", "fc1"][1] > 1000
    assert stats["rnd_sat2", "fc1"][0] == "saturate_symmetric" and stats["rnd_sat2", "fc1"][1] > 1000
    assert stats["trn_wrap", "fc1"][1] == 0 and stats["trn_wrap", "fc2"][1] == 0   # a wide accum_t
    assert stats["narrow_wrap", "fc1", "plain_equal"]        # wrapping commutes: products may wrap first
    assert not stats["rnd_sat2", "fc1", "plain_equal"]       # saturation does not: hls4ml fits each product


def test_the_conv_vectors_wrap_and_saturate():
    for name, mode in (("cnn_narrow_wrap", "wrap"), ("cnn_rnd_sat", "saturate")):
        d, layers, weights = _load(name)
        r = layers[1]
        assert r["class"] == "Conv2D" and (r["pad_top"] == 1) == (name == "cnn_rnd_sat")   # valid and same
        acc_t = parse_ap_type(r["accum_t"])
        x = parse_ap_type(layers[0]["result_t"]).from_float(d["x"])
        w = parse_ap_type(r["weight_t"]).from_float(weights["conv1"]["weight"])
        b = parse_ap_type(r["bias_t"]).from_float(weights["conv1"]["bias"])
        fh, fw, c, f = w.shape
        pads = (r["pad_top"], r["pad_bottom"], r["pad_left"], r["pad_right"])
        padded = FixedArray(np.pad(x.raw, ((0, 0), pads[:2], pads[2:], (0, 0))), x.fmt)
        patches = np.lib.stride_tricks.sliding_window_view(padded.raw, (fh, fw), axis=(1, 2))
        patches = FixedArray(np.moveaxis(patches, 3, -1).reshape(-1, fh * fw * c), x.fmt)
        _, acc = dense(patches, w.reshape(fh * fw * c, f), b, acc_t, parse_ap_type(r["result_t"]),
                       return_accumulator=True)
        assert acc_t.overflow.value == mode and acc.overflows > 200


# --------------------------------------------------------------------------- hls4ml's ap_types C++
def test_ap_type_casts_match_ap_types_cpp():
    d = np.load(VECTORS / "ap_casts.npz", allow_pickle=False)
    types = json.loads(str(d["types"]))
    assert len(types) == 91 and {t.split(",")[2] for t in types} == set(Q_MODES)
    assert {t.split(",")[3] for t in types} == set(O_MODES)
    assert any(not t.endswith(",0>") for t in types)
    for j, text in enumerate(types):
        t = parse_ap_type(text)
        vals = d["values"][j]
        np.testing.assert_array_equal(t.from_float(vals).raw, d["from_double"][j], err_msg=f"{text} from double")
        src = from_float(vals, Format(62, 30), "floor", "wrap")      # ap_fixed<62,32>, exact for these values
        assert np.array_equal(src.to_float(), vals)
        np.testing.assert_array_equal(t.cast(src).raw, d["from_fixed"][j], err_msg=f"{text} from ap_fixed")


# --------------------------------------------------------------------------- independent ap_fixed model
def _quantize(s: Fraction, q: str) -> int:
    lo = math.floor(s)
    rem = s - lo
    if q == "AP_TRN":
        return lo
    if q == "AP_TRN_ZERO":
        return lo if s >= 0 or rem == 0 else lo + 1
    if rem != Fraction(1, 2):
        return lo + (rem > Fraction(1, 2))
    tie = {"AP_RND": lo + 1, "AP_RND_ZERO": lo if s > 0 else lo + 1, "AP_RND_MIN_INF": lo,
           "AP_RND_INF": lo + 1 if s > 0 else lo, "AP_RND_CONV": lo + (lo % 2)}
    return tie[q]


def ap_model(v: Fraction, word: int, ints: int, signed: bool, q: str, o: str, n: int) -> int:
    """The code of ``ap_[u]fixed<word, ints, q, o, n>(v)``: quantize, then (carry included) handle overflow."""
    c = _quantize(Fraction(v) * Fraction(2) ** (word - ints), q)
    lo, hi = (-(1 << (word - 1)), (1 << (word - 1)) - 1) if signed else (0, (1 << word) - 1)
    if o == "AP_SAT_SYM" and signed:
        lo = -hi                                    # the most negative code saturates too
    if lo <= c <= hi:
        return c
    if o in ("AP_SAT", "AP_SAT_SYM"):
        return lo if c < lo else hi
    if o == "AP_SAT_ZERO":
        return 0
    bits = c % (1 << word)                          # AP_WRAP: the low word bits ...
    if n:                                           # ... with the N MSBs saturated
        top = (1 << word) - (1 << (word - n))
        if not signed:
            bits |= top
        else:
            negative = v < 0
            rest = top & ~(1 << (word - 1))         # bits word-n .. word-2
            bits = (bits & ~top) | ((1 << (word - 1)) if negative else 0) | (0 if negative else rest)
    return bits - (1 << word) if signed and bits >> (word - 1) else bits


def test_the_fraction_model_itself_matches_ap_types_cpp():
    """The oracle of the property tests below is checked against the live ap_types vectors too."""
    d = np.load(VECTORS / "ap_casts.npz", allow_pickle=False)
    for j, text in enumerate(json.loads(str(d["types"]))):
        inner = text.split("<")[1].rstrip(">").split(",")
        spec = (int(inner[0]), int(inner[1]), text.startswith("ap_fixed"), inner[2], inner[3], int(inner[4]))
        assert [ap_model(Fraction(float(v)), *spec) for v in d["values"][j]] == d["from_double"][j].tolist(), text


@st.composite
def ap_types(draw, max_word=24):
    word = draw(st.integers(1, max_word))
    ints = draw(st.integers(-6, word + 6))
    signed = draw(st.booleans())
    q, o = draw(st.sampled_from(Q_MODES)), draw(st.sampled_from(O_MODES))
    n = draw(st.integers(0, min(word, 4))) if o == "AP_WRAP" else 0
    return word, ints, signed, q, o, n


def _text(word, ints, signed, q, o, n):
    return f"ap_{'' if signed else 'u'}fixed<{word},{ints},{q},{o},{n}>"


@settings(max_examples=300, deadline=None)
@given(ap_types(), st.lists(st.integers(-(1 << 40), 1 << 40), min_size=1, max_size=20),
       st.sampled_from([-3, 0, 1, 1, 1, 2, 2, 3, 12]))
def test_from_double_matches_the_fraction_model(spec, numerators, shift):
    """Values k / 2^(frac + shift): exact halves of an LSB (ties) for odd k at shift 1, quarters at 2."""
    t = parse_ap_type(_text(*spec))
    word, ints = spec[0], spec[1]
    vals = [Fraction(k, 1 << max(shift + word - ints, 0)) for k in numerators]   # ties at shift = 1
    x = np.array([float(v) for v in vals])
    exact = [Fraction(float(v)) for v in x]
    assert t.from_float(x).raw.tolist() == [ap_model(v, *spec) for v in exact]


@settings(max_examples=300, deadline=None)
@given(ap_types(), st.integers(1, 40), st.sampled_from([-3, 0, 1, 1, 1, 2, 2, 3, 12]), st.booleans(), st.data())
def test_cast_from_fixed_matches_the_fraction_model(spec, src_word, extra_frac, src_signed, data):
    """Source LSB 2^-(frac + extra): ties for odd codes at extra = 1."""
    src_frac = spec[0] - spec[1] + extra_frac
    src = Format(src_word, src_frac, src_signed)
    codes = data.draw(st.lists(st.integers(src.min_code, src.max_code), min_size=1, max_size=20))
    t = parse_ap_type(_text(*spec))
    got = t.cast(FixedArray(np.array(codes, dtype=np.int64), src))
    assert got.fmt == Format(spec[0], spec[0] - spec[1], spec[2])
    assert got.raw.tolist() == [ap_model(Fraction(c, 1) / Fraction(2) ** src_frac, *spec) for c in codes]


def _dense_model(x, w, b, acc_spec, res_spec, fx, fw, fb):
    """``nnet::dense_latency`` on Python ints: products and bias assigned to accum_t, fitted adds in input order."""
    out = []
    for row in x:
        acc_codes = []
        for j in range(len(b)):
            f_acc = acc_spec[0] - acc_spec[1]
            s = ap_model(Fraction(b[j]) / Fraction(2) ** fb, *acc_spec)
            for k in range(len(row)):
                m = ap_model(Fraction(row[k] * w[k][j]) / Fraction(2) ** (fx + fw), *acc_spec)
                s = ap_model(Fraction(s + m) / Fraction(2) ** f_acc, *acc_spec)
            acc_codes.append(ap_model(Fraction(s) / Fraction(2) ** f_acc, *res_spec))
        out.append(acc_codes)
    return out


@settings(max_examples=60, deadline=None)
@given(ap_types(max_word=14), ap_types(max_word=14), st.integers(1, 5), st.integers(1, 4), st.data())
def test_dense_matches_the_python_int_model(acc_spec, res_spec, k, n, data):
    acc_spec = acc_spec[:5] + (0,)                  # dense fits its adds without N saturated bits
    fx, fw, fb = data.draw(st.integers(-2, 8)), data.draw(st.integers(-2, 8)), data.draw(st.integers(-2, 8))
    fmt_x, fmt_w, fmt_b = Format(8, fx), Format(6, fw), Format(8, fb, True)
    x = data.draw(st.lists(st.lists(st.integers(-128, 127), min_size=k, max_size=k), min_size=1, max_size=3))
    w = data.draw(st.lists(st.lists(st.integers(-32, 31), min_size=n, max_size=n), min_size=k, max_size=k))
    b = data.draw(st.lists(st.integers(-128, 127), min_size=n, max_size=n))
    y = dense(FixedArray(np.array(x), fmt_x), FixedArray(np.array(w), fmt_w), FixedArray(np.array(b), fmt_b),
              parse_ap_type(_text(*acc_spec)), parse_ap_type(_text(*res_spec)))
    assert y.raw.tolist() == _dense_model(x, w, b, acc_spec, res_spec, fx, fw, fb)


def _conv_model(x, w, b, acc_spec, res_spec, fx, fw, fb, stride, pads):
    """Conv2D as hls4ml's fill_buffer builds it: each output pixel's patch in (i, j, c) order, 0 where padded."""
    h, wd = len(x), len(x[0])
    fh, fwid, c = len(w), len(w[0]), len(w[0][0])
    oh = (h + pads[0] + pads[1] - fh) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - fwid) // stride[1] + 1
    flat_w = [w[i][j][ch] for i in range(fh) for j in range(fwid) for ch in range(c)]
    out = []
    for oy in range(oh):
        row = []
        for ox in range(ow):
            patch = []
            for i in range(fh):
                for j in range(fwid):
                    yy, xx = oy * stride[0] + i - pads[0], ox * stride[1] + j - pads[2]
                    inside = 0 <= yy < h and 0 <= xx < wd
                    patch.extend(x[yy][xx][ch] if inside else 0 for ch in range(c))
            row.append(_dense_model([patch], flat_w, b, acc_spec, res_spec, fx, fw, fb)[0])
        out.append(row)
    return out


@settings(max_examples=80, deadline=None)
@given(ap_types(max_word=12), ap_types(max_word=12), st.integers(1, 2), st.integers(1, 2),
       st.tuples(*[st.integers(0, 1)] * 4), st.data())
def test_conv2d_matches_the_python_int_model(acc_spec, res_spec, sh, sw, pads, data):
    acc_spec = acc_spec[:5] + (0,)
    h, wd, c, f = data.draw(st.integers(3, 5)), data.draw(st.integers(3, 5)), data.draw(st.integers(1, 2)), 2
    fh, fwid = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    ints = lambda lo, hi, n: st.lists(st.integers(lo, hi), min_size=n, max_size=n)   # noqa: E731
    x = data.draw(st.lists(ints(-128, 127, c), min_size=h * wd, max_size=h * wd))
    x = [[x[i * wd + j] for j in range(wd)] for i in range(h)]
    w = [[[data.draw(ints(-32, 31, f)) for _ in range(c)] for _ in range(fwid)] for _ in range(fh)]
    b = data.draw(ints(-128, 127, f))
    y = conv2d(FixedArray(np.array([x]), Format(8, 4)), FixedArray(np.array(w), Format(6, 5)),
               FixedArray(np.array(b), Format(8, 3)), parse_ap_type(_text(*acc_spec)),
               parse_ap_type(_text(*res_spec)), stride=(sh, sw), padding=pads)
    assert y.raw[0].tolist() == _conv_model(x, w, b, acc_spec, res_spec, 4, 5, 3, (sh, sw), pads)


def test_relu_and_linear():
    t = parse_ap_type("ap_ufixed<4,2,AP_RND,AP_SAT>")
    x = FixedArray(np.array([-9, -1, 0, 1, 2, 3, 40]), Format(8, 2))   # -2.25 .. 10
    assert relu(x, t).raw.tolist() == [0, 0, 0, 1, 2, 3, 15]
    assert linear(x, parse_ap_type("ap_fixed<4,3>")).raw.tolist() == [-5, -1, 0, 0, 1, 1, 4]


# --------------------------------------------------------------------------- parsing and bad input
def test_parse_defaults_and_hls4ml_spellings():
    assert parse_ap_type("ap_fixed<16,6>") == ApType(Format(16, 10), "floor", "wrap", 0)
    assert parse_ap_type("fixed<16,6>") == parse_ap_type("ap_fixed<16, 6, AP_TRN, AP_WRAP, 0>")
    assert parse_ap_type("ufixed<8,0,AP_RND_CONV,AP_SAT>") == ApType(Format(8, 8, False), "half_even", "saturate")
    assert parse_ap_type("ap_int<8>").fmt == Format(8, 0) and parse_ap_type("uint<3>").fmt == Format(3, 0, False)
    assert parse_ap_type("ap_fixed<8,10>").fmt.frac == -2 and parse_ap_type("ap_fixed<8,-2>").fmt.frac == 10
    assert str(parse_ap_type("fixed<9,3,AP_RND_INF,AP_SAT_SYM>")) == "ap_fixed<9,3,AP_RND_INF,AP_SAT_SYM,0>"


@pytest.mark.parametrize("text, match", [
    ("ap_fixed<16>", "W, I"), ("ap_int<8,2>", "ap_int takes"), ("ap_fixed<8,3,AP_ROUND>", "quantization mode"),
    ("ap_fixed<8,3,AP_TRN,AP_WRAP_SM>", "not modelled"), ("ap_fixed<8,3,AP_TRN,AP_SAT,2>", "AP_WRAP only"),
    ("ap_fixed<80,3>", "1..64"), ("ap_fixed<8,x>", "integers"), ("float", "cannot read"),
    ("ap_fixed<8,3,AP_TRN,AP_WRAP,9>", "n_bits"), ("ap_fixed<8,3,AP_TRN,AP_WRAP,0,1>", "takes"),
])
def test_bad_types_raise_value_error(text, match):
    with pytest.raises(ValueError, match=match):
        parse_ap_type(text)


def test_bad_type_objects():
    with pytest.raises(TypeError):
        parse_ap_type(16)
    with pytest.raises(ValueError, match="no ap_fixed quantization"):
        ApType(Format(8, 3), "stochastic", "wrap")
    with pytest.raises(ValueError, match="no modelled ap_fixed overflow"):
        ApType(Format(8, 3), "floor", "error")
    with pytest.raises(TypeError, match="FixedArray"):
        parse_ap_type("ap_fixed<8,3>").cast(np.arange(3))


def _records():
    d, layers, weights = _load("narrow_wrap")
    return d, [dict(r) for r in layers], {k: dict(v) for k, v in weights.items()}


def test_model_bad_input_names_layer_and_problem():
    d, layers, weights = _records()
    bad = [dict(r) for r in layers]
    bad[2] = dict(bad[2], **{"class": "LSTM"})
    with pytest.raises(ValueError, match=r"layer 2 \('relu1'.*LSTM.*supported"):
        Hls4mlModel.from_layers(bad, weights)
    bad = [dict(r) for r in layers]
    bad[2]["activation"] = "sigmoid"
    with pytest.raises(ValueError, match="sigmoid"):
        Hls4mlModel.from_layers(bad, weights)
    bad = [dict(r) for r in layers]
    del bad[1]["accum_t"]
    with pytest.raises(ValueError, match="fc1.*accum_t"):
        Hls4mlModel.from_layers(bad, weights)
    bad = [dict(r) for r in layers]
    bad[1]["weight_t"] = "ap_fixed<8,2,AP_RND_HALF>"
    with pytest.raises(ValueError, match="fc1.*weight_t.*quantization mode"):
        Hls4mlModel.from_layers(bad, weights)
    bad = [dict(r) for r in layers]
    bad[1]["n_in"] = 17
    with pytest.raises(ValueError, match="n_in = 17"):
        Hls4mlModel.from_layers(bad, weights)
    w2 = dict(weights, fc2={"weight": weights["fc2"]["weight"][:5], "bias": weights["fc2"]["bias"]})
    with pytest.raises(ValueError, match="fc2.*n_in|fc2.*previous layer"):
        Hls4mlModel.from_layers(layers, w2)
    w3 = dict(weights, fc1={"weight": weights["fc1"]["weight"], "bias": weights["fc1"]["bias"][:3]})
    with pytest.raises(ValueError, match="fc1.*bias has shape"):
        Hls4mlModel.from_layers(layers, w3)
    with pytest.raises(ValueError, match="no 'weight'"):
        Hls4mlModel.from_layers(layers, {"fc1": weights["fc1"]})
    w4 = dict(weights, fc1={"weight": np.where(np.arange(32) == 0, np.nan, weights["fc1"]["weight"]),
                            "bias": weights["fc1"]["bias"]})
    with pytest.raises(ValueError, match="fc1.*NaN"):
        Hls4mlModel.from_layers(layers, w4)
    with pytest.raises(ValueError, match="first layer"):
        Hls4mlModel.from_layers(layers[1:], weights)
    with pytest.raises(TypeError):
        Hls4mlModel.from_layers("layers", weights)
    d2, cnn, cw = _load("cnn_rnd_sat")
    bad = [dict(r) for r in cnn]
    del bad[1]["pad_left"]
    with pytest.raises(ValueError, match="conv1.*pad_left"):
        Hls4mlModel.from_layers(bad, cw)
    bad = [dict(r) for r in cnn]
    bad[1]["n_chan"] = 3
    with pytest.raises(ValueError, match="n_chan = 3"):
        Hls4mlModel.from_layers(bad, cw)
    bad = [dict(r) for r in cnn]
    bad[3]["target_shape"] = [0]
    with pytest.raises(ValueError, match="flat.*target_shape"):
        Hls4mlModel.from_layers(bad, cw)
    with pytest.raises(ValueError, match="conv1.*channels"):
        Hls4mlModel.from_layers(cnn, cw).run(d2["x"][..., :1])
    with pytest.raises(ValueError, match="conv2d: strides"):
        conv2d(FixedArray(np.zeros((1, 3, 3, 1), np.int64), Format(8, 0)),
               FixedArray(np.zeros((2, 2, 1, 1), np.int64), Format(8, 0)),
               FixedArray(np.zeros(1, np.int64), Format(8, 0)), parse_ap_type("ap_int<16>"), parse_ap_type("ap_int<8>"),
               stride=(0, 1))
    model = Hls4mlModel.from_layers(layers, weights)
    with pytest.raises(ValueError, match="fc1.*16 values"):
        model.run(d["x"][:, :15])
    with pytest.raises(TypeError, match="real numbers"):
        model.run(np.array([["a"] * 16]))


def test_model_does_not_mutate_its_inputs_and_accepts_fixed_inputs():
    d, layers, weights = _records()
    x = d["x"].copy()
    copies = {k: {kk: vv.copy() for kk, vv in v.items()} for k, v in weights.items()}
    model = Hls4mlModel.from_layers(layers, weights)
    y = model.run(x)
    assert np.array_equal(x, d["x"])
    assert all(np.array_equal(weights[k][kk], copies[k][kk]) for k in copies for kk in copies[k])
    xf = parse_ap_type(layers[0]["result_t"]).from_float(x)
    assert np.array_equal(model.run(xf).raw, y.raw)
    assert "accum_t=ap_fixed<10,3,AP_TRN,AP_WRAP,0>" in model.summary()

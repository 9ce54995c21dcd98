"""hls4ml's ``auto`` precision (``InferPrecisionTypes``) in an hls4ml config: Dense / Conv2D ``accum_t`` and
``result_t`` from the input, weight and bias types and the products per output.

* an independent model of hls4ml's rule written here from its source (``_infer_common_precision``: widths added,
  :math:`\\lceil\\log_2 n\\rceil` with ``math.log2``, the bias folded in, ``max_precision`` clamping) over random types,
  and hand-computed rows;
* ``apply_hls4ml_config`` with ``auto`` on the csim fixtures' networks: the graph's types are the rule's, chained
  layer to layer (each layer's input type is the previous result), and the graph runs;
* ``tests/vectors/hls4ml/auto_precision.json``, made by hls4ml 1.3.0 itself (``tools/fixtures/hls4ml/auto_precision.py``:
  its ONNX frontend, ``config_from_onnx_model`` with ``auto``, types read back from the converted model, no compile).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fxpsim.datapath.hls4ml import parse_ap_type
from fxpsim.hardware.hls4ml_auto import auto_accum_type
from fxpsim.hardware.hls4ml_config import Hls4mlConfig, apply_hls4ml_config

VEC = Path(__file__).resolve().parents[1] / "vectors" / "hls4ml"


def _rule(x, w, b, n, maximum=None):
    """hls4ml's _infer_common_precision on (width, integer, signed) triples; returns (W, I, signed)."""
    L = math.ceil(math.log2(n))
    width = w[0] + x[0] + L
    integer = w[1] + x[1] + L
    signed = w[2] or x[2]
    frac = width - integer
    integer = max(integer + int(b[2] and not signed), b[1] + int(signed and not b[2])) + 1
    width = integer + max(frac, b[0] - b[1])
    signed = signed or b[2]
    if maximum is not None:
        width, integer = min(width, maximum[0]), min(integer, maximum[1])      # hls4ml 1.3.0
    return width, integer, signed


def _text(t):
    w, i, s = t
    return f"ap_{'' if s else 'u'}fixed<{w},{i}>"


def _wis(text):
    a = parse_ap_type(text)
    return a.fmt.word, a.fmt.word - a.fmt.frac, a.fmt.signed


@pytest.mark.parametrize("x,w,b,n,want", [
    ("ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>", 12, "ap_fixed<37,17>"),   # hls4ml's default config
    ("ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>", 16, "ap_fixed<37,17>"),   # log2 16 = 4 exactly
    ("ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>", 17, "ap_fixed<38,18>"),
    ("ap_ufixed<8,0>", "ap_fixed<4,1>", "ap_fixed<8,3>", 1, "ap_fixed<15,4>"),       # n = 1: log2 1 = 0
    ("ap_ufixed<6,2>", "ap_ufixed<4,1>", "ap_ufixed<8,3>", 7, "ap_ufixed<14,7>"),    # all unsigned
    ("ap_uint<8>", "ap_int<4>", "ap_uint<10>", 9, "ap_fixed<17,17>"),                # unsigned bias, signed sum
])
def test_hand_computed_rows(x, w, b, n, want):
    assert auto_accum_type(x, w, b, n) == want
    assert _text(_rule(_wis(x), _wis(w), _wis(b), n)) == want


_types = st.builds(lambda w, i, s: (w, i, s), st.integers(1, 24), st.integers(-4, 24), st.booleans())


@given(_types, _types, _types, st.integers(1, 5000), st.one_of(st.none(), _types))
def test_rule_against_the_independent_model(x, w, b, n, maximum):
    def text(t):
        return f"ap_{'' if t[2] else 'u'}fixed<{t[0]},{t[1]}>"
    got = auto_accum_type(text(x), text(w), text(b), n, None if maximum is None else text(maximum))
    assert got == _text(_rule(x, w, b, n, maximum))


def test_maximum_clamps_width_and_integer_bits_only():
    """hls4ml 1.3.0: min(W, W_max), min(I, I_max); signedness and modes stay the inferred ones."""
    got = auto_accum_type("ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>", 12,
                          maximum="ap_ufixed<24,12,AP_RND,AP_SAT>")
    assert got == "ap_fixed<24,12>"
    assert auto_accum_type("ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>", 12, "ap_fixed<40,10>") == \
        "ap_fixed<37,10>"


def _untyped(name):
    d = np.load(VEC / f"{name}.npz", allow_pickle=False)
    layers = json.loads(str(d["layers"]))
    weights = {r["name"]: {"weight": d[f"w_{r['name']}"], "bias": d[f"b_{r['name']}"]}
               for r in layers if r["class"] in ("Dense", "Conv2D")}
    records = [{k: v for k, v in r.items() if not k.endswith("_t")} for r in layers]
    return d, records, weights


@pytest.mark.parametrize("name", ["trn_wrap", "cnn_rnd_sat"])
def test_auto_in_a_config_chains_layer_to_layer(name):
    d, records, weights = _untyped(name)
    mac = "conv1" if name.startswith("cnn") else "fc1"
    cfg = {"Model": {"Precision": "ap_fixed<16,6>"},
           "LayerName": {"x": {"Precision": {"result": "ap_fixed<8,3>"}},
                         mac: {"Precision": {"weight": "ap_fixed<6,1>", "bias": "ap_fixed<8,3>", "accum": "auto",
                                             "result": "auto"}},
                         "relu1": {"Precision": {"result": "ap_ufixed<6,2>"}},
                         "fc2": {"Precision": "auto"}}}
    g = apply_hls4ml_config((records, weights, d["x"].shape[1:]), cfg)
    w1 = weights[mac]["weight"].shape
    n1 = w1[0] if len(w1) == 2 else w1[0] * w1[1] * w1[2]
    first = _text(_rule((8, 3, True), (6, 1, True), (8, 3, True), n1))
    P = parse_ap_type
    assert P(g.node(mac).attrs["accum_t"]) == P(first) and P(g.node(mac).attrs["result_t"]) == P(first)
    # fc2: weight and bias 'auto' take the model default; its input is relu1's ap_ufixed<6,2>
    n2 = weights["fc2"]["weight"].shape[0]
    second = _text(_rule((6, 2, False), (16, 6, True), (16, 6, True), n2))
    assert P(g.node("fc2").attrs["accum_t"]) == P(second) and P(g.node("fc2").attrs["result_t"]) == P(second)
    assert g.meta["hls4ml"]["auto"][f"{mac}.accum_t"] == first
    assert g.meta["hls4ml"]["auto"]["fc2.weight_t"] == "ap_fixed<16,6>"
    y = g.run(d["x"][:4])
    assert np.asarray(y).shape == (4, weights["fc2"]["weight"].shape[1])


def test_types_hls4ml_itself_chose():
    """hls4ml 1.3.0's InferPrecisionTypes on five configs (defaults, explicit input/weight/bias/ReLU types, unsigned
    inputs and biases, a Model maximum, ap_int types; n_in 5 .. 64): every type of every layer, as fxpsim resolves
    the same config on the same records."""
    data = json.loads((VEC / "auto_precision.json").read_text())
    assert data["tool"].startswith("hls4ml ") and len(data["cases"]) == 5
    compared = 0
    for case in data["cases"]:
        typed = Hls4mlConfig(case["config"]).resolve(case["records"])
        got = {r["name"]: r for r in typed}
        for lname, types in case["hls4ml_types"].items():
            for k, text in types.items():
                assert parse_ap_type(got[lname][k]) == parse_ap_type(text), \
                    f"{case['name']} {lname}.{k}: fxpsim {got[lname][k]}, hls4ml {text}"
                compared += 1
    assert compared == 5 * 10


def test_hls4ml_mode_names_without_the_ap_prefix_read_as_the_ap_names():
    """hls4ml's config_from_* writes 'fixed<18,8,TRN,WRAP,0>' (its RoundingMode / SaturationMode names)."""
    a = parse_ap_type("fixed<16,6,RND_CONV,SAT_SYM,0>")
    assert a == parse_ap_type("ap_fixed<16,6,AP_RND_CONV,AP_SAT_SYM,0>")
    assert (a.fmt.word, a.fmt.frac, a.rounding.value, a.overflow.value) == (16, 10, "half_even", "saturate_symmetric")
    with pytest.raises(ValueError, match="unknown quantization mode 'AP_RNDX'"):
        parse_ap_type("fixed<16,6,RNDX>")

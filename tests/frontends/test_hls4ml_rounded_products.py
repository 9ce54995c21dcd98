"""The accumulator bits an hls4ml MAC needs when ``accum_t`` rounds its products (:math:`F_{acc} < F_x + F_w`).

hls4ml assigns each product to ``accum_t`` before adding it, so the sums the accumulator holds are sums of
*rounded* products. fxpsim reported nothing for these nodes before (no MAC view holds rounded products); now the
report's ``acc_peak`` / ``acc_bits_needed`` and the summary's worst case are those sums. Checked on hls4ml 1.3's
C-simulation fixtures (``tests/vectors/hls4ml``: AP_TRN, AP_RND, AP_RND_ZERO, AP_RND_CONV accumulators, Dense and
Conv2D) against an independent model written here: Fractions, each product rounded by the mode's definition,
running sums in Python ints, the conv patches gathered with explicit loops.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from test_hls4ml_graph import _graph

from fxpsim.datapath.hls4ml import parse_ap_type
from fxpsim.hardware.hls4ml_config import hls4ml_hardware_config
from fxpsim.hardware.simulation import simulate


def _round(v: Fraction, q: str) -> int:
    """ap_fixed's quantization modes on an exact value, by their definitions (Xilinx UG1399)."""
    f = math.floor(v)
    frac = v - f
    half = Fraction(1, 2)
    if q == "AP_TRN":
        return f
    if q == "AP_TRN_ZERO":
        return f if v >= 0 else -math.floor(-v)
    if frac != half:
        return f + (frac > half)
    return {"AP_RND": f + 1, "AP_RND_ZERO": f + (v < 0), "AP_RND_MIN_INF": f, "AP_RND_INF": f + (v > 0),
            "AP_RND_CONV": f + (f % 2)}[q]


def _q(type_text: str) -> str:
    parts = [p.strip() for p in type_text[type_text.index("<") + 1:-1].split(",")]
    return parts[2] if len(parts) > 2 else "AP_TRN"


def _frac(type_text: str) -> int:
    return parse_ap_type(type_text).fmt.frac


def _model_sums(rows, w, b, fx, fw, fb, acc_text):
    """Running sums (every partial, the bias first) of rows ``[[x_k]]`` against ``w[k][j]``, products and bias
    rounded into the accumulator's LSB; returns (low, high, finals)."""
    fa, q = _frac(acc_text), _q(acc_text)
    low = high = None
    finals = []
    for xs in rows:
        out = []
        for j in range(len(b)):
            s = _round(Fraction(b[j]) * Fraction(2) ** (fa - fb), q)
            lo_, hi_ = s, s
            for k, xv in enumerate(xs):
                s += _round(Fraction(xv * w[k][j]) * Fraction(2) ** (fa - fx - fw), q)
                lo_, hi_ = min(lo_, s), max(hi_, s)
            low = lo_ if low is None else min(low, lo_)
            high = hi_ if high is None else max(high, hi_)
            out.append(s)
        finals.append(out)
    return low, high, finals


def _patches(x, fh, fw, stride, pads):
    """Conv patches in hls4ml's (i, j, c) order with zero padding, by loops: [(pixel rows)]."""
    top, bottom, left, right = pads
    h, wd, c = len(x), len(x[0]), len(x[0][0])
    get = lambda r, s, ch: x[r][s][ch] if 0 <= r < h and 0 <= s < wd else 0  # noqa: E731
    rows = []
    for oh in range(0, h + top + bottom - fh + 1, stride[0]):
        for ow in range(0, wd + left + right - fw + 1, stride[1]):
            rows.append([get(oh + i - top, ow + j - left, ch) for i in range(fh) for j in range(fw) for ch in range(c)])
    return rows


def _signed_bits(lo, hi):
    n = 1
    while not (-(1 << (n - 1)) <= lo and hi <= (1 << (n - 1)) - 1):
        n += 1
    return n


def _layer(layers, name):
    return next(r for r in layers if r["name"] == name)


@pytest.mark.parametrize("name,mac", [("narrow_wrap", "fc1"), ("rnd_sat", "fc1"), ("rnd_sat2", "fc1"),
                                      ("rnd_sat", "fc2"), ("cnn_rnd_sat", "conv1"), ("cnn_narrow_wrap", "conv1")])
def test_bits_needed_are_those_of_the_rounded_products(name, mac):
    d, layers, g = _graph(name)
    x = d["x"][:6]
    node = g.node(mac)
    rec = _layer(layers, mac)
    src = node.inputs[0]
    fx = -int(round(math.log2(float(g.tensors[src].scale[0]))))
    fw_, fb = _frac(rec["weight_t"]), _frac(rec["bias_t"])
    assert _frac(rec["accum_t"]) < fx + fw_                              # the products are rounded
    w = g.tensors[node.inputs[1]].data
    b = g.tensors[node.inputs[2]].data.tolist()
    rep = simulate(g, hls4ml_hardware_config(g), x.astype(np.float32))
    row = {r.name: r for r in rep.layers}[mac]
    _, _, kept = g.run(x, hls4ml_hardware_config(g), keep=True)
    xin = kept[src].astype(int).tolist()
    if node.op == "hls4ml_conv2d":
        fh, fwk, c, f = w.shape
        w2 = w.reshape(fh * fwk * c, f).astype(int).tolist()
        rows = [r for img in xin for r in _patches(img, fh, fwk, node.attrs["stride"], node.attrs["pads"])]
    else:
        w2, rows = w.astype(int).tolist(), xin
    low, high, _ = _model_sums(rows, w2, b, fx, fw_, fb, rec["accum_t"])
    assert row.acc_peak == max(-low, high)                              # on the inputs the hardware computed
    if mac in ("fc1", "conv1"):                                          # first MAC: the exact run has them too
        assert row.acc_bits_needed == _signed_bits(low, high)
        assert row.headroom_bits == parse_ap_type(rec["accum_t"]).fmt.word - row.acc_bits_needed
    # the worst case over the input type's whole code range, each product at its larger end
    lo, hi = g.tensors[src].code_range
    fa, q = _frac(rec["accum_t"]), _q(rec["accum_t"])
    bound = max(abs(_round(Fraction(b[j]) * Fraction(2) ** (fa - fb), q))
                + sum(max(abs(_round(Fraction(e * w2[k][j]) * Fraction(2) ** (fa - fx - fw_), q)) for e in (lo, hi))
                      for k in range(len(w2))) for j in range(len(b)))
    assert g.accumulator_bits_needed(node) == bound.bit_length() + 1
    assert g.accumulator_bits_needed(node) >= _signed_bits(low, high)


def test_rounded_sums_differ_from_exact_products_on_the_fixture():
    """Why it matters: the sum of rounded products is not the rounded exact sum (narrow_wrap fc1, AP_TRN loses
    up to one LSB per product): at least one output's final sum differs, so exact-product bits would mislead."""
    d, layers, g = _graph("narrow_wrap")
    x = d["x"][:6]
    rec = _layer(layers, "fc1")
    _, _, kept = g.run(x, keep=True)
    w, b = g.tensors["fc1/weight"].data.astype(int).tolist(), g.tensors["fc1/bias"].data.tolist()
    _, _, finals = _model_sums(kept["x"].astype(int).tolist(), w, b, 6, 6, _frac(rec["bias_t"]), rec["accum_t"])
    fa = _frac(rec["accum_t"])
    exact = [[math.floor(Fraction(sum(xv * w[k][j] for k, xv in enumerate(xs))) * Fraction(2) ** (fa - 12))
              + _round(Fraction(b[j]) * Fraction(2) ** (fa - _frac(rec["bias_t"])), "AP_TRN") for j in range(len(b))]
             for xs in kept["x"].astype(int).tolist()]
    assert finals != exact


def _finn(lo, hi):
    """FINN's MinimizeAccumulatorWidth width of [lo, hi] (ceil of log2, as its rule writes it)."""
    if lo >= 0:
        return max(1, math.ceil(math.log2(hi + 1)))
    return math.ceil(math.log2(max(-lo, hi + 1))) + 1


@pytest.mark.parametrize("name,mac", [("narrow_wrap", "fc1"), ("rnd_sat", "fc1"), ("cnn_rnd_sat", "conv1")])
def test_accumulator_widths_of_rounded_products(name, mac):
    """fxpsim.accumulator_widths on a node whose accum_t rounds: FINN's rule on the rounded products (each at the
    smaller / larger of its values at the input range's ends; the weights at their datatype's ends for
    finn_datatypes), and the observed running sums without the bias."""
    from fxpsim.hardware.accumulator_widths import accumulator_widths
    d, layers, g = _graph(name)
    x = d["x"][:3]
    node, rec = g.node(mac), _layer(layers, mac)
    src = node.inputs[0]
    fx = -int(round(math.log2(float(g.tensors[src].scale[0]))))
    fw_, fa, q = _frac(rec["weight_t"]), _frac(rec["accum_t"]), _q(rec["accum_t"])
    w = g.tensors[node.inputs[1]].data
    w2 = w.reshape(-1, w.shape[-1]).astype(int).tolist()
    lo, hi = g.tensors[src].code_range
    shift = Fraction(2) ** (fa - fx - fw_)

    def ends(wv):
        vals = [_round(Fraction(e * wv) * shift, q) for e in (lo, hi)]
        return min(vals), max(vals)

    n_out = len(w2[0])
    sums = [(sum(ends(w2[k][j])[0] for k in range(len(w2))), sum(ends(w2[k][j])[1] for k in range(len(w2))))
            for j in range(n_out)]
    span = (min(s[0] for s in sums), max(s[1] for s in sums))
    wlo, whi = parse_ap_type(rec["weight_t"]).fmt.min_code, parse_ap_type(rec["weight_t"]).fmt.max_code
    dt = [len(w2) * ends(c)[0] for c in (wlo, whi)] + [len(w2) * ends(c)[1] for c in (wlo, whi)]
    _, _, kept = g.run(x, keep=True)
    xin = kept[src].astype(int).tolist()
    rows = xin if node.op == "hls4ml_dense" else \
        [r for img in xin for r in _patches(img, w.shape[0], w.shape[1], node.attrs["stride"], node.attrs["pads"])]
    low, high, _ = _model_sums(rows, w2, [0] * n_out, fx, fw_, 0, rec["accum_t"])
    (row,) = [r for r in accumulator_widths(g, x) if r.node == mac]
    assert row.weights_range == span and row.k == len(w2)
    assert row.finn_weights == _finn(*span)
    assert row.finn_datatypes == _finn(min(dt), max(dt))
    assert row.observed == _signed_bits(low, high)

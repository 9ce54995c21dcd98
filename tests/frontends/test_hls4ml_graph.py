"""An hls4ml network as fxpsim's one graph (``Hls4mlModel.to_graph``, the ops of ``fxpsim.frontends.hls4ml.ops``).

* against hls4ml itself: every layer's output of hls4ml 1.3's C simulation (``tests/vectors/hls4ml``, made by
  ``tools/fixtures/hls4ml/make_vectors.py``) through the graph, on its own datapath and on the HardwareConfig
  ``simulate`` uses; the same after ``save``/``load_graph`` in a fresh process (the ops found through
  ``OP_PROVIDERS``, as a sweep's workers find them);
* against an independent Python-int model (``tests/reference.py``'s exact quantizer): the overflow counts of
  every ``accum_t`` / ``result_t`` cast that the traces and the report give, and Dense on a datapath's
  accumulator (``bias_add`` ``after`` included);
* ``simulate`` and ``sweep`` on such a graph, and the refusals.
"""
from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from reference import quantize_exact
from test_hls4ml_vectors import CONFIGS, _load

from fxpsim.core.fixed import FixedArray, Format
from fxpsim.datapath.hls4ml import dense, parse_ap_type
from fxpsim.frontends.hls4ml import Hls4mlModel
from fxpsim.graph.ir import load_graph
from fxpsim.hardware import HardwareConfig
from fxpsim.hardware.hls4ml_config import hls4ml_hardware_config
from fxpsim.hardware.simulation import simulate
from fxpsim.hardware.sweeps import sweep

#: ap_fixed's quantization and overflow modes by their fxpsim names (the ap_types table, written out here).
Q = {"AP_TRN": "floor", "AP_TRN_ZERO": "toward_zero", "AP_RND": "half_up", "AP_RND_ZERO": "half_toward_zero",
     "AP_RND_MIN_INF": "half_down", "AP_RND_INF": "half_away", "AP_RND_CONV": "half_even"}
O = {"AP_WRAP": "wrap", "AP_SAT": "saturate", "AP_SAT_ZERO": "saturate_zero", "AP_SAT_SYM": "saturate_symmetric"}


def _graph(name):
    d, layers, weights = _load(name)
    return d, layers, Hls4mlModel.from_layers(layers, weights).to_graph(d["x"].shape[1:], name=name)


def _check_csim(graph, layers, d, datapath=None):
    _, _, kept = graph.run(d["x"], datapath, keep=True)
    traced = [r["name"] for r in layers if f"y_{r['name']}" in d.files]
    assert len(traced) >= 3
    for lname in traced:
        np.testing.assert_array_equal(graph.tensors[lname].dequantize(kept[lname]), d[f"y_{lname}"], err_msg=lname)
    out = graph.outputs[0]
    np.testing.assert_array_equal(graph.tensors[out].dequantize(kept[out]).reshape(len(d["x"]), -1), d["y"])


@pytest.mark.parametrize("name", CONFIGS)
def test_every_layer_bit_for_bit_with_hls4ml_csim_through_the_graph(name):
    d, layers, g = _graph(name)
    _check_csim(g, layers, d)                                   # the graph's own datapath
    _check_csim(g, layers, d, hls4ml_hardware_config(g))       # the HardwareConfig simulate and sweeps use
    for r in layers:                                            # the tensors hold the types hls4ml resolved
        t = g.tensors[r["name"]]
        if r["class"] != "Reshape":
            fmt = parse_ap_type(r["result_t"]).fmt
            assert (t.bits, t.signed, float(t.scale[0])) == (fmt.word, fmt.signed, 2.0 ** -fmt.frac)


def test_a_saved_graph_runs_in_a_fresh_process(tmp_path):
    """``load_graph`` in a new interpreter finds the hls4ml ops through OP_PROVIDERS (as a sweep worker does)."""
    d, layers, g = _graph("cnn_rnd_sat")
    path = g.save(tmp_path / "g.npz")
    np.save(tmp_path / "x.npy", d["x"].astype(np.float32))
    code = ("import sys, numpy as np; from fxpsim.graph.ir import load_graph; "
            f"g = load_graph({str(path)!r}); "
            f"np.save({str(tmp_path / 'y.npy')!r}, g.run(np.load({str(tmp_path / 'x.npy')!r})))")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={"PYTHONPATH": str(root)})
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_array_equal(g.tensors[g.outputs[0]].dequantize(y), d["y"])
    np.testing.assert_array_equal(load_graph(path).run(d["x"]), g.run(d["x"]))


# --------------------------------------------------------------------------- independent overflow counts
def _ap(text):
    t = parse_ap_type(text)
    inner = str(t).split("<")[1].rstrip(">").split(",")
    return t.fmt.word, t.fmt.frac, t.fmt.signed, Q[inner[2]], O[inner[3]]


def _dense_counts(x, w, b, fx, fw, fb, acc, res, bias_add="preload"):
    """Dense on Python ints through the reference quantizer: ``(codes, accum_t cast overflows, result_t
    overflows, adds)``, products and bias cast into accum_t one by one, every add fitted, in input order."""
    word, frac, signed, q, o = acc
    rw, rf, rs, rq, ro = res
    out, n_acc, n_res, adds = [], 0, 0, 0
    for row in x:
        codes = []
        for j in range(len(b)):
            bias, ob = quantize_exact(Fraction(int(b[j]), 1 << fb) if fb >= 0 else Fraction(int(b[j]) << -fb),
                                      word, frac, signed, q, o)
            terms = []
            for k in range(len(row)):
                p, op = quantize_exact(Fraction(int(row[k]) * int(w[k][j])) / Fraction(2) ** (fx + fw),
                                       word, frac, signed, q, o)
                terms.append(p)
                n_acc += op
            s = bias if bias_add == "preload" else 0
            for t in terms + ([bias] if bias_add == "after" else []):
                s, oa = quantize_exact(Fraction(s + t) / Fraction(2) ** frac, word, frac, signed, q, o)
                n_acc, adds = n_acc + oa, adds + 1
            n_acc += ob
            y, oy = quantize_exact(Fraction(s) / Fraction(2) ** frac, rw, rf, rs, rq, ro)
            codes.append(y)
            n_res += oy
        out.append(codes)
    return out, n_acc, n_res, adds


@st.composite
def _types(draw, max_word=14):
    word = draw(st.integers(2, max_word))
    ints = draw(st.integers(-2, word + 2))
    q, o = draw(st.sampled_from(sorted(Q))), draw(st.sampled_from(sorted(O)))
    return f"ap_{'' if draw(st.booleans()) else 'u'}fixed<{word},{ints},{q},{o}>"


@settings(max_examples=60, deadline=None)
@given(_types(), _types(), st.integers(1, 5), st.integers(1, 3), st.sampled_from(["preload", "after"]), st.data())
def test_dense_cast_overflow_counts_match_the_python_int_model(acc_text, res_text, k, n, bias_add, data):
    if acc_text.startswith("ap_ufixed"):
        acc_text = acc_text.replace("ap_ufixed", "ap_fixed")
    fx, fw, fb = (data.draw(st.integers(-2, 7)) for _ in range(3))
    ints = lambda lo, hi, m: st.lists(st.integers(lo, hi), min_size=m, max_size=m)   # noqa: E731
    x = data.draw(st.lists(ints(-128, 127, k), min_size=1, max_size=3))
    w = data.draw(st.lists(ints(-32, 31, n), min_size=k, max_size=k))
    b = data.draw(ints(-128, 127, n))
    stats: dict = {}
    y = dense(FixedArray(np.array(x), Format(8, fx)), FixedArray(np.array(w), Format(6, fw)),
              FixedArray(np.array(b), Format(8, fb)), parse_ap_type(acc_text), parse_ap_type(res_text),
              bias_add=bias_add, stats=stats)
    want, n_acc, n_res, adds = _dense_counts(x, w, b, fx, fw, fb, _ap(acc_text), _ap(res_text), bias_add)
    assert y.raw.tolist() == want
    assert stats["product_overflows"] + stats["bias_overflows"] + stats["add_overflows"] == n_acc
    assert (stats["result_overflows"], stats["adds"]) == (n_res, adds)


def test_the_report_counts_every_accum_and_result_cast_overflow():
    """simulate's overflow and clipped columns on the csim vectors against the Python-int model (fc2 of rnd_sat
    saturates its accum_t and its result_t), and the not-exact columns against a 62-bit accumulator."""
    d, layers, g = _graph("rnd_sat")
    x = d["x"][:12]
    rep = simulate(g, hls4ml_hardware_config(g), x.astype(np.float32))
    rows = {r.name: r for r in rep.layers}
    _, _, kept = g.run(x, keep=True)
    r = next(r for r in layers if r["name"] == "fc2")
    wfmt, bfmt = parse_ap_type(r["weight_t"]).fmt, parse_ap_type(r["bias_t"]).fmt
    w, b = g.tensors["fc2/weight"].data, g.tensors["fc2/bias"].data
    xin = kept["relu1"]
    xfrac = parse_ap_type(next(q for q in layers if q["name"] == "relu1")["result_t"]).fmt.frac
    codes, n_acc, n_res, adds = _dense_counts(xin.tolist(), w.tolist(), b.tolist(), xfrac, wfmt.frac, bfmt.frac,
                                              _ap(r["accum_t"]), _ap(r["result_t"]))
    assert codes == kept["fc2"].tolist()
    assert n_acc > 0 and n_res > 0
    assert rows["fc2"].overflow_count == n_acc
    assert rows["fc2"].overflow_rate == pytest.approx(n_acc / adds)
    assert rows["fc2"].clipped_fraction == pytest.approx(n_res / kept["fc2"].size)
    assert rep.network["overflow_count"] == sum(row.overflow_count for row in rep.layers)
    # the exact datapath: each accum_t 62 bits wide, wrapping (nothing overflows), the same LSB and rounding
    wide = HardwareConfig(accumulator_bits=62, requantization="shift")
    _, _, exact = g.run(x, wide, keep=True)
    assert rows["fc1"].not_exact_fraction == pytest.approx(float(np.mean(kept["fc1"] != exact["fc1"])))
    assert rows["fc1"].not_exact_fraction > 0


def test_the_report_fills_the_accumulator_columns_where_products_are_exact():
    """trn_wrap: accum_t ap_fixed<24,10> holds every product exactly (F = 14 >= 6 + 6): bits needed is the
    largest |running sum| over the csim inputs, computed here in Python ints."""
    d, layers, g = _graph("trn_wrap")
    x = d["x"][:8]
    rep = simulate(g, hls4ml_hardware_config(g), x.astype(np.float32))
    row = {r.name: r for r in rep.layers}["fc1"]
    _, _, kept = g.run(x, keep=True)
    w, b = g.tensors["fc1/weight"].data.astype(int), g.tensors["fc1/bias"].data.astype(int)
    shift_b = 14 - parse_ap_type(layers[1]["bias_t"]).fmt.frac                # bias LSB -> accumulator LSB
    shift_p = 14 - (6 + 6)
    peak = 0
    for row_x in kept["x"].astype(int).tolist():
        for j in range(w.shape[1]):
            s = int(b[j]) << shift_b
            peak = max(peak, abs(s))
            for k, v in enumerate(row_x):
                s += (v * int(w[k, j])) << shift_p
                peak = max(peak, abs(s))
    assert row.accumulator_bits == 24 and row.acc_peak == peak
    assert row.acc_bits_needed == peak.bit_length() + 1 and row.headroom_bits == 24 - row.acc_bits_needed
    assert {r.name: r for r in rep.layers}["fc1"].overflow_count == 0


# --------------------------------------------------------------------------- other datapaths
def test_a_datapath_accumulator_replaces_accum_t_width_and_overflow():
    d, layers, g = _graph("trn_wrap")
    x = d["x"][:6]
    narrow = HardwareConfig(accumulator_bits=12, accumulator_overflow="saturate", requantization="shift")
    _, tr, kept = g.run(x, narrow, trace=True, keep=True)
    # fc1 by hand: accum_t ap_fixed<12, 12 - 14, AP_TRN, AP_SAT> (accum_t's fraction bits and rounding kept)
    acc = parse_ap_type("ap_fixed<12,-2,AP_TRN,AP_SAT>")
    res = parse_ap_type(layers[1]["result_t"])
    xw = FixedArray(kept["x"], Format(10, 6))
    y = dense(xw, FixedArray(g.tensors["fc1/weight"].data, Format(8, 6)),
              FixedArray(g.tensors["fc1/bias"].data, parse_ap_type(layers[1]["bias_t"]).fmt), acc, res)
    np.testing.assert_array_equal(kept["fc1"], y.raw)
    assert tr["fc1"]["overflows"] > 0
    for knob, value in (("accumulator_order", "tree"), ("overflow_at", "end"), ("tile_k", 4), ("bias_bits", 8),
                        ("bias_shift", 2)):
        with pytest.raises(ValueError, match=f"fc1.*{knob}"):
            g.run(x, HardwareConfig(requantization="shift", **{knob: value}))


def test_a_sweep_over_accumulator_widths_runs_in_worker_processes():
    d, layers, g = _graph("trn_wrap")
    x = d["x"][:16].astype(np.float32)
    base = HardwareConfig(name="hls4ml-sweep", requantization="shift")
    grid = {"accumulator_bits": [10, 24], "accumulator_overflow": ["saturate", "wrap"]}
    serial = sweep(g, x, grid, config=base, processes=1, progress=False)
    pooled = sweep(g, x, grid, config=base, processes=2, progress=False)
    assert [r["agreement"] for r in serial.records] == [r["agreement"] for r in pooled.records]
    assert len(serial.records) == 4
    by = {(r["accumulator_bits"], r["accumulator_overflow"]): r for r in serial.records}
    assert by[24, "wrap"]["overflow_count"] == 0 and by[10, "saturate"]["overflow_count"] > 0


def test_to_graph_refuses_what_it_cannot_build():
    d, layers, weights = _load("cnn_rnd_sat")
    model = Hls4mlModel.from_layers(layers, weights)
    with pytest.raises(ValueError, match="give input_shape"):
        model.to_graph()
    with pytest.raises(ValueError, match="conv1.*needs \\[H, W, C\\]"):
        model.to_graph((128,))


def test_worst_case_accumulator_bits_of_the_summary():
    """trn_wrap fc1: :math:`\\max_j |A(b_j)| + \\sum_k 2^9 |w_{kj}| 2^{14 - 12}` (x: ap_fixed<10,4>, |x| <= 2^9
    codes), in Python ints; a node with rounded products (F_acc < F_x + F_w) has the bound of its rounded
    products (tests/frontends/test_hls4ml_rounded_products.py), which differs from the exact products' one."""
    d, layers, g = _graph("trn_wrap")
    node = g.node("fc1")
    w, b = g.tensors["fc1/weight"].data.tolist(), g.tensors["fc1/bias"].data.tolist()
    shift_b = 14 - parse_ap_type(layers[1]["bias_t"]).fmt.frac
    bound = max(abs(b[j] << shift_b) + sum((512 * abs(w[k][j])) << 2 for k in range(len(w))) for j in range(len(b)))
    assert g.accumulator_bits_needed(node) == bound.bit_length() + 1
    _, _, narrow = _graph("narrow_wrap")                 # accum_t ap_fixed<10,3>: F = 7 < 6 + 6, AP_TRN
    w, (lo, hi) = narrow.tensors["fc1/weight"].data.tolist(), narrow.tensors["x"].code_range
    b = narrow.tensors["fc1/bias"].data.tolist()        # bias_t ap_fixed<10,4>: F = 6, one bit left
    rounded = max(abs(b[j] << 1) + sum(max(abs((lo * w[k][j]) >> 5), abs((hi * w[k][j]) >> 5))
                                       for k in range(len(w))) for j in range(len(b)))
    assert narrow.accumulator_bits_needed(narrow.node("fc1")) == rounded.bit_length() + 1

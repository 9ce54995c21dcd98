"""fxpsim.hardware.simulation's per-layer numbers against independent models: the error metrics (MSE, SQNR,
max |error| in LSBs) against Fraction sums over the flattened values, bit widths by counting up the smallest
two's-complement ``n`` holding a range, the signed-log2 histogram by placing each value in its bin by hand
(values whose log2 is an integer, bin edges exact in binary), the network metrics of a hand-built graph
(argmax, dequantization and bit-ops written out), and every refusal text typed out.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import fxpsim.frontends.tflite.mac_ops  # noqa: F401  (registers tflite_fully_connected and its MAC view)
from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.hardware.simulation import (_bits_needed, _check_labels, _check_positive, _differs, _errors,
                                        _merge_range, _signed_bits, _signed_log2_histogram, network_metrics)


# ----- widths ---------------------------------------------------------------------------------------------

def _model_signed_bits(lo: int, hi: int) -> int:
    """Smallest n >= 1 with -2^(n-1) <= lo and hi <= 2^(n-1) - 1, by counting up."""
    n = 1
    while not (-(2 ** (n - 1)) <= lo and hi <= 2 ** (n - 1) - 1):
        n += 1
    return n


def test_signed_bits_hand_table():
    table = {(0, 0): 1, (-1, 0): 1, (0, 1): 2, (-2, 1): 2, (-2, 2): 3, (-3, 1): 3, (-128, 127): 8,
             (-129, 127): 9, (-128, 128): 9, (5, 9): 5, (-9, -5): 5, (-8, -8): 4, (7, 7): 4, (8, 8): 5,
             (-2 ** 31, 2 ** 31 - 1): 32, (-2 ** 31 - 1, 0): 33, (0, 2 ** 40): 42}
    for (lo, hi), n in table.items():
        assert _model_signed_bits(lo, hi) == n
        assert _signed_bits(lo, hi) == n, (lo, hi)
        assert _signed_bits(np.int64(lo), np.int64(hi)) == n, (lo, hi)   # numpy ints have no bit_length
        assert type(_signed_bits(np.int64(lo), np.int64(hi))) is int


def test_signed_bits_against_the_counting_model():
    for lo in range(-70, 71):
        for hi in range(lo, 71):
            assert _signed_bits(lo, hi) == _model_signed_bits(lo, hi), (lo, hi)


def test_bits_needed_from_the_signed_range():
    # the range wins over the peak: [-128, 127] fits 8 bits though |-128| alone would need 9
    assert _bits_needed({"partial_range": (-128, 127)}, 128) == 8
    assert _bits_needed({"partial_range": (-128, 127)}, 0) == 8
    assert _bits_needed({"partial_range": (0, 0)}, 5) == 1
    assert _bits_needed({"partial_range": (3, 100)}, 100) == 8
    assert _bits_needed({"partial_range": (-300, -2)}, 300) == 10
    assert _bits_needed({"partial_range": (np.int64(-129), np.int64(4))}, 129) == 9


def test_bits_needed_from_the_peak():
    for trace in ({"partial_range": None}, {}):
        assert _bits_needed(trace, 0) == 1
        assert _bits_needed(trace, None) == 1
        for peak in (1, 2, 3, 127, 128, 255, 256, 2 ** 31 - 1, 2 ** 31):
            assert _bits_needed(trace, peak) == _model_signed_bits(-peak, peak), peak
        assert _bits_needed(trace, 127) == 8 and _bits_needed(trace, 128) == 9 and _bits_needed(trace, 1) == 2


def test_merge_range():
    tr = {"partial_range": None}
    _merge_range(tr, None)
    assert tr == {"partial_range": None}
    _merge_range(tr, (np.int64(-3), np.int64(5)))
    assert tr["partial_range"] == (-3, 5) and type(tr["partial_range"]) is tuple
    assert all(type(v) is int for v in tr["partial_range"])
    _merge_range(tr, None)
    assert tr["partial_range"] == (-3, 5)
    _merge_range(tr, (-1, 2))                  # inside: unchanged
    assert tr["partial_range"] == (-3, 5)
    _merge_range(tr, (np.int64(-7), np.int64(4)))   # lower low only
    assert tr["partial_range"] == (-7, 5) and all(type(v) is int for v in tr["partial_range"])
    _merge_range(tr, (0, 9))                   # higher high only
    assert tr["partial_range"] == (-7, 9)
    _merge_range(tr, (-10, 12))                # both
    assert tr["partial_range"] == (-10, 12)
    _merge_range(tr, [-10, 12])
    assert tr["partial_range"] == (-10, 12)
    tr2 = {"partial_range": None, "other": 1}
    _merge_range(tr2, [4, 6])                  # a list becomes a tuple
    assert tr2 == {"partial_range": (4, 6), "other": 1} and type(tr2["partial_range"]) is tuple


# ----- errors ---------------------------------------------------------------------------------------------

def _model_errors(hw, ref, lsb):
    """(MSE, SQNR dB, max |err| / lsb) from Fractions of the (dyadic) float values."""
    h = [Fraction(float(v)) for v in np.asarray(hw).reshape(-1).tolist()]
    r = [Fraction(float(v)) for v in np.asarray(ref).reshape(-1).tolist()]
    err = [a - b for a, b in zip(h, r)]
    noise = sum(e * e for e in err)
    signal = sum(v * v for v in r)
    mse = noise / max(len(err), 1)
    if noise == 0:
        sqnr = math.inf
    elif signal == 0:
        sqnr = -math.inf
    else:
        sqnr = 10 * math.log10(signal / noise)
    mx = max((abs(e) for e in err), default=Fraction(0)) / Fraction(lsb)
    return mse, sqnr, mx


def _check_errors(hw, ref, lsb):
    got = _errors(np.asarray(hw, np.float64), np.asarray(ref, np.float64), lsb)
    mse, sqnr, mx = _model_errors(hw, ref, lsb)
    assert got[0] == float(mse)
    if math.isinf(sqnr):
        assert got[1] == sqnr
    else:
        assert got[1] == pytest.approx(sqnr, rel=1e-12)
    assert got[2] == float(mx)
    assert all(type(v) is float for v in got)
    return got


def test_errors_hand_table():
    # err = [0.5, -1.5, 0, 1]: noise 3.5, mse 0.875; signal 1 + 4 + 0.25 + 9 = 14.25; max |err| 1.5 / 0.25 = 6
    got = _check_errors([1.5, 0.5, 0.5, 4.0], [1.0, 2.0, 0.5, 3.0], 0.25)
    assert got[0] == 0.875 and got[2] == 6.0
    assert got[1] == pytest.approx(10 * math.log10(14.25 / 3.5))
    # the largest error is negative: |-3| / 0.5
    got = _check_errors([[1.0, -2.0], [0.0, 0.0]], [[1.0, 1.0], [0.0, 0.5]], 0.5)
    assert got[2] == 6.0 and got[0] == (9 + 0.25) / 4
    # one value: mse is the squared error itself
    got = _check_errors([3.0], [1.0], 1.0)
    assert got == (4.0, 10 * math.log10(1 / 4), 2.0)
    # signal larger than noise: positive SQNR, lsb of 2
    got = _check_errors([10.0, -10.0], [10.0, -9.0], 2.0)
    assert got[0] == 0.5 and got[2] == 0.5 and got[1] == pytest.approx(10 * math.log10(181.0))


def test_errors_special_cases():
    assert _check_errors([1.0, -2.0], [1.0, -2.0], 0.5) == (0.0, math.inf, 0.0)     # exact
    assert _check_errors([0.0, 0.0], [0.0, 0.0], 1.0) == (0.0, math.inf, 0.0)       # exact and silent
    assert _check_errors([0.5, 0.0], [0.0, 0.0], 0.25) == (0.125, -math.inf, 2.0)  # noise, no signal
    assert _errors(np.zeros((0, 3)), np.zeros((0, 3)), 1.0) == (0.0, math.inf, 0.0)  # no values


# ----- histogram ------------------------------------------------------------------------------------------

def _model_histogram(values, bits, bins):
    """Counts and edges by hand: 2 * (bins // 2) equal bins over [-bits, bits], right edge of the last bin
    included, values outside dropped; t = sign(v) log2(1 + |v|) (exact here: 1 + |v| a power of two)."""
    nb = 2 * (bins // 2)
    edges = [Fraction(-bits) + Fraction(2 * bits * i, nb) for i in range(nb + 1)]
    counts = [0] * nb
    for v in values:
        m = abs(int(v)) + 1
        assert m & (m - 1) == 0
        t = (1 if v > 0 else -1 if v < 0 else 0) * (m.bit_length() - 1)
        for i in range(nb):
            if edges[i] <= t < edges[i + 1] or (i == nb - 1 and t == edges[nb]):
                counts[i] += 1
                break
    return counts, edges


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64])
def test_signed_log2_histogram_hand_table(dtype):
    # bits 4, bins 8: edges -4..4 step 1; t = 0 -> bin 4, 1 -> 5, -1 -> 3, 3 -> 7, 4 (the top edge) -> 7,
    # -4 -> 0, +-5 dropped
    values = np.array([0, 0, 1, -1, 3, 7, 15, -15, -7, 31, -31], dtype)
    counts, edges = _signed_log2_histogram(values, 4, 8)
    want_counts, want_edges = _model_histogram(values.tolist(), 4, 8)
    assert want_counts == [1, 1, 0, 1, 2, 1, 1, 2]
    assert counts.tolist() == want_counts
    assert [Fraction(float(e)) for e in edges] == want_edges


def test_signed_log2_histogram_odd_bins_and_int8_extremes():
    # bins 9 -> 8 bins over [-8, 8], width 2; -128 needs float64 before abs (int8 abs(-128) wraps)
    values = np.array([-128, 127, 0, 1, -1, 3, -3, 15, 63, -127], np.int8)
    counts, edges = _signed_log2_histogram(values, 8, 9)
    assert len(counts) == 8 and len(edges) == 9 and edges[0] == -8.0 and edges[-1] == 8.0
    # t: -log2(129) (bin 0), 7 (bin 7), 0 and 1 (bin 4), -1 and -2 (bin 3), 2 (bin 5), 4 (bin 6), 6 (bin 7),
    # -7 (bin 0)
    assert counts.tolist() == [2, 0, 0, 2, 2, 1, 1, 2]
    ok = np.array([0, 1, -1, 3, -3, 15, 63, -127, 127], np.int64)
    want, want_edges = _model_histogram(ok.tolist(), 8, 9)
    got, _ = _signed_log2_histogram(ok, 8, 9)
    assert got.tolist() == want and [Fraction(float(e)) for e in edges] == want_edges


# ----- differs --------------------------------------------------------------------------------------------

def test_differs():
    assert _differs(np.array([1, 2, 3, 4]), np.array([1, 0, 3, 5])) == 0.5
    assert _differs(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[1, 2, 3], [4, 5, 7]])) == 1 / 6
    assert _differs(np.array([7, 7, 7]), np.array([7, 7, 7])) == 0.0
    assert _differs(np.array([-128, 127], np.int8), np.array([127, -128], np.int8)) == 1.0
    assert _differs(np.zeros((0, 2), np.int8), np.zeros((0, 2), np.int8)) == 0.0
    assert type(_differs(np.array([1]), np.array([2]))) is float


# ----- labels and positive ints ---------------------------------------------------------------------------

def test_check_labels_accepts():
    assert _check_labels(None, 3) is None
    assert _check_labels(None, 3, 2) is None
    y = np.array([0, 4, 1], np.int64)
    assert _check_labels(y, 3, 5) is y
    assert _check_labels(y, 3).tolist() == [0, 4, 1]
    assert _check_labels(np.array([-5, 99]), 2).tolist() == [-5, 99]     # no class count: no range check
    assert _check_labels(np.array([0, 0], np.uint8), 2, 1).tolist() == [0, 0]
    assert _check_labels([1, 0], 2, 2).tolist() == [1, 0]
    assert _check_labels(np.zeros(0, np.int64), 0, 3).shape == (0,)


def test_check_labels_refuses():
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([0.0, 1.0]), 2)
    assert str(e.value) == "y must be integer labels of shape (2,), got dtype float64 and shape (2,)"
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([[0, 1]], np.int64), 2)
    assert str(e.value) == "y must be integer labels of shape (2,), got dtype int64 and shape (1, 2)"
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([0, 1, 2], np.int64), 2, 5)
    assert str(e.value) == "y must be integer labels of shape (2,), got dtype int64 and shape (3,)"
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([True, False]), 2)
    assert "got dtype bool" in str(e.value)
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([1, 5, 2]), 3, 5)
    assert str(e.value) == ("y holds labels outside 0..4 (the model has 5 outputs): min 1, max 5")
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([-1, 3, 2]), 3, 5)
    assert str(e.value) == ("y holds labels outside 0..4 (the model has 5 outputs): min -1, max 3")
    with pytest.raises(ValueError) as e:
        _check_labels(np.array([1]), 1, 1)
    assert str(e.value) == ("y holds labels outside 0..0 (the model has 1 outputs): min 1, max 1")


def test_check_positive():
    assert _check_positive(1, "n") == 1 and type(_check_positive(1, "n")) is int
    assert _check_positive(np.int64(7), "n") == 7 and type(_check_positive(np.int64(7), "n")) is int
    assert _check_positive(np.uint8(2), "n") == 2
    for bad, text in ((0, "0"), (-3, "-3"), (True, "True"), (False, "False"), (2.0, "2.0"), ("3", "'3'"),
                      (None, "None"), (np.int64(0), repr(np.int64(0)))):
        with pytest.raises(ValueError) as e:
            _check_positive(bad, "batch_size")
        assert str(e.value) == f"batch_size must be a positive int, got {text}"


# ----- network metrics ------------------------------------------------------------------------------------

def _graph(out_bits=8, out_scale=0.5, out_zp=3, op="fully_connected", extra_relu=False):
    """x (6-bit, 4 values) -> FC with 3-bit weights [3, 4] -> y (3 classes); optionally a clamp after."""
    w = np.array([[1, -2, 3, 0], [0, 1, -1, 2], [3, 3, -4, 1]], np.int8)
    t = [TensorSpec("x", 6, True, (4,), 0.1, 0), TensorSpec("w", 3, True, scale=0.1, data=w),
         TensorSpec("b", 32, True, data=np.zeros(3, np.int32))]
    t.append(TensorSpec("y", 8, True, (3,), out_scale, out_zp))
    nodes = [Node("fc", op, ["x", "w", "b"], ["y"])]
    out = "y"
    if not out_bits:      # a float output: the FC's codes dequantized
        t.append(TensorSpec("f", 0, True, (3,)))
        nodes.append(Node("dq", "dequantize", ["y"], ["f"]))
        out = "f"
    if extra_relu:
        t.append(TensorSpec("r", out_bits, True, (3,), out_scale, out_zp))
        nodes.append(Node("clamp", "clamp", ["y"], ["r"], {"min": -100, "max": 100}))
        out = "r"
    return IntegerGraph(t, nodes, ["x"], [out])


def _model_metrics(codes, ref, y, scale, zp, overflows, bit_ops):
    hw = [[Fraction(scale) * (int(q) - zp) for q in row] for row in codes] if scale is not None else \
        [[Fraction(float(q)) for q in row] for row in codes]
    rf = [[Fraction(float(v)) for v in row] for row in ref]

    def top(row):   # the first largest, as argmax
        return max(range(len(row)), key=lambda i: (row[i], -i))

    ht, rt = [top(r) for r in hw], [top(r) for r in rf]
    n = len(codes)
    noise = sum((a - b) ** 2 for hr, rr in zip(hw, rf) for a, b in zip(hr, rr))
    signal = sum(b * b for rr in rf for b in rr)
    sqnr = math.inf if noise == 0 else -math.inf if signal == 0 else 10 * math.log10(signal / noise)
    return {"n_samples": n,
            "accuracy": None if y is None else sum(a == b for a, b in zip(ht, y)) / n,
            "float_accuracy": None if y is None else sum(a == b for a, b in zip(rt, y)) / n,
            "agreement": sum(a == b for a, b in zip(ht, rt)) / n,
            "output_sqnr_db": sqnr, "overflow_count": overflows, "bit_ops": bit_ops}


def _same(got, want):
    assert set(got) == set(want)
    for k, v in want.items():
        if isinstance(v, float) and math.isfinite(v) and k == "output_sqnr_db":
            assert got[k] == pytest.approx(v, rel=1e-12), k
        else:
            assert got[k] == v, k
        assert type(got[k]) is type(v), k


# codes: rows dequantize (0.5 (q - 3)) to [1, 0, -1], [-1.5, 2, 2] (a tie: the first), [0, 0, 3]; [3, 3, 0]
CODES = np.array([[5, 3, 1], [0, 7, 7], [3, 3, 9], [9, 9, 3]], np.int8)
REF = np.array([[1.0, 0.5, -1.0], [-1.5, 2.0, 2.5], [0.5, 0.0, 2.5], [2.0, 3.0, 0.0]])


def test_network_metrics_hand_table():
    g = _graph()
    y = np.array([0, 1, 0, 1])
    got = network_metrics(g, CODES, REF, y, np.int64(7))
    # hw top: 0, 1, 2, 0; ref top: 0, 2, 2, 1; bit ops 12 MACs x 3 x 6
    want = _model_metrics(CODES.tolist(), REF.tolist(), y.tolist(), 0.5, 3, 7, 12 * 3 * 6)
    assert want["accuracy"] == 0.5 and want["float_accuracy"] == 0.5 and want["agreement"] == 0.5
    _same(got, want)
    # noise: 0.25 (four errors of 0.5) + 1 = 2; signal 1 + .25 + 1 + 2.25 + 4 + 6.25 + .25 + 6.25 + 4 + 9 = 34.25
    assert got["output_sqnr_db"] == pytest.approx(10 * math.log10(34.25 / 2))


def test_network_metrics_other_labels_flat_ref_and_no_labels():
    g = _graph()
    y = np.array([2, 2, 2, 0])
    got = network_metrics(g, CODES, REF.reshape(-1), y, 0)      # a flat reference is reshaped
    want = _model_metrics(CODES.tolist(), REF.tolist(), y.tolist(), 0.5, 3, 0, 216)
    assert want["accuracy"] == 0.5 and want["float_accuracy"] == 0.5
    _same(got, want)
    got = network_metrics(g, CODES, REF, None, 2)
    want = _model_metrics(CODES.tolist(), REF.tolist(), None, 0.5, 3, 2, 216)
    assert got["accuracy"] is None and got["float_accuracy"] is None
    _same(got, want)
    # codes with an extra axis are flattened per sample
    got = network_metrics(g, CODES.reshape(4, 1, 3), REF.reshape(4, 3), y, 0)
    _same(got, _model_metrics(CODES.tolist(), REF.tolist(), y.tolist(), 0.5, 3, 0, 216))


def test_network_metrics_exact_and_float_output():
    g = _graph()
    ref = [[0.5 * (int(q) - 3) for q in row] for row in CODES.tolist()]
    got = network_metrics(g, CODES, np.array(ref), np.array([0, 1, 2, 0]), 0)
    assert got["output_sqnr_db"] == math.inf and got["accuracy"] == 1.0 and got["agreement"] == 1.0
    # a float output tensor: the codes are the values (no scale), lsb 1
    gf = _graph(out_bits=0)
    vals = np.array([[0.25, -1.0, 0.5], [2.0, 1.0, 3.0]])
    reff = np.array([[0.25, -1.0, 0.75], [2.0, 1.5, 3.0]])
    got = network_metrics(gf, vals, reff, np.array([2, 2]), 1)
    want = _model_metrics(vals.tolist(), reff.tolist(), [2, 2], None, 0, 1, 216)
    assert want["accuracy"] == 1.0 and want["agreement"] == 1.0
    _same(got, want)


def test_network_metrics_bit_ops_count_mac_views_only():
    # a TFLite FC (a MAC view) counts as a MAC; a clamp after it does not
    g = _graph(op="tflite_fully_connected", extra_relu=True)
    got = network_metrics(g, CODES, REF, None, 0)
    assert got["bit_ops"] == 216 and got["n_samples"] == 4
    g = _graph(extra_relu=True)
    assert network_metrics(g, CODES, REF, None, 0)["bit_ops"] == 216


# ----- histogram_bins = 1 (a bug: simulate accepted it, then numpy refused 0 bins) ---------------------------

def test_signed_log2_histogram_one_bin_gives_two():
    counts, edges = _signed_log2_histogram(np.array([-3, 0, 1, 7], np.int32), 4, 1)
    assert edges.tolist() == [-4.0, 0.0, 4.0] and counts.tolist() == [1, 3]
    counts, edges = _signed_log2_histogram(np.array([-3, 0, 1, 7], np.int32), 4, 2)
    assert edges.tolist() == [-4.0, 0.0, 4.0] and counts.tolist() == [1, 3]


X_SIM = np.array([[1, 2, 3, 4], [-5, 6, -7, 8]], np.int8)
W_SIM = [[1, -2, 3, 0], [0, 1, -1, 2], [3, 3, -4, 1]]


def _model_sums():
    """Exact accumulator values and every running sum (bias 0, zero points 0), in Python ints."""
    sums, partial = [], []
    for xr in X_SIM.tolist():
        for wr in W_SIM:
            s = 0
            for a, b in zip(xr, wr):
                s += a * b
                partial.append(s)
            sums.append(s)
    return sums, partial


@pytest.mark.parametrize("bins, want_edges", [(1, [-32.0, 0.0, 32.0]), (3, [-32.0, 0.0, 32.0]),
                                              (4, [-32.0, -16.0, 0.0, 16.0, 32.0])])
def test_simulate_histogram_and_bits_needed_of_a_hand_graph(bins, want_edges):
    from fxpsim.hardware import simulate
    rep = simulate(_graph(), "tflite-int8", X_SIM, histogram_bins=bins)
    rec = rep.layers[0]
    sums, partial = _model_sums()
    assert sums == [6, 7, 1, -38, 29, 39] and (min(partial), max(partial)) == (-38, 39)
    assert rec.acc_peak == 39
    assert rec.acc_bits_needed == rec.acc_bits_needed_cumulative == _model_signed_bits(-38, 39) == 7
    assert rec.accumulator_bits == 32 and rec.headroom_bits == 25
    # t = sign(s) log2(1 + |s|): one negative (-5.3), five positive, all |t| < 16
    want_counts = [1, 5] if len(want_edges) == 3 else [0, 1, 5, 0]
    assert rec.acc_histogram == {"scale": "signed_log2", "edges": want_edges, "counts": want_counts}


def test_network_metrics_reads_an_int8_reference_as_float64():
    # the reference is taken as float64 (an int8 one squared in int8 would wrap: 100^2 -> 16)
    g = _graph()
    ref8 = np.array([[100, -100, 50], [2, 1, 3], [0, 0, 3], [3, 3, 0]], np.int8)
    got = network_metrics(g, CODES, ref8, None, 0)
    _same(got, _model_metrics(CODES.tolist(), ref8.tolist(), None, 0.5, 3, 0, 216))

"""The RTL reference MAC model (``fxpsim/rtl/mac_model.py``): every overflow rule of :func:`fit_value` and of the
array form behind :func:`mac_run`, sequential and tree orders with and without a preloaded bias, a bias at the
end, ``overflow_at="end"``, and the products of fully connected, convolution and depthwise MACs with strides,
dilations, paddings, per-channel weight zero points and a padding code.

Expected values: hand tables (8-bit sums worked out on paper), ``tests/reference.py``'s ``overflow_int`` (an
independent model of every overflow rule, SC_WRAP_SM included) and per-tap loops on Python integers written here.
"""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.rtl.mac_model import _tap_labels, fit_value, mac_products, mac_run, mac_sequence
from reference import overflow_int

MODES = ("saturate", "wrap", "saturate_zero", "saturate_symmetric", "wrap_sign_magnitude")
# 8-bit accumulator: the range's edges, one beyond, far beyond (several wraps), both signs
EDGES = [-1000, -300, -257, -256, -129, -128, -127, -1, 0, 1, 126, 127, 128, 129, 255, 256, 300, 1000]


def _ref_fit(v, bits, mode):
    return v if mode == "exact" else overflow_int(v, bits, True, mode)[0]


# ----------------------------------------------------------------------------------------- fit_value
def test_fit_value_hand_table_at_8_bits():
    want = {
        "saturate": [-128, -128, -128, -128, -128, -128, -127, -1, 0, 1, 126, 127, 127, 127, 127, 127, 127, 127],
        "wrap": [24, -44, -1, 0, 127, -128, -127, -1, 0, 1, 126, 127, -128, -127, -1, 0, 44, -24],
        "saturate_zero": [0, 0, 0, 0, 0, -128, -127, -1, 0, 1, 126, 127, 0, 0, 0, 0, 0, 0],
        "saturate_symmetric": [-127, -127, -127, -127, -127, -127, -127, -1, 0, 1, 126, 127, 127, 127, 127, 127,
                               127, 127],
        "exact": EDGES,
    }
    for mode, row in want.items():
        assert [fit_value(v, 8, mode) for v in EDGES] == row, mode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bits", [2, 5, 8, 16, 33])
def test_fit_value_and_the_array_form_against_the_reference(mode, bits):
    vs = sorted({v * s for v in EDGES for s in (1, 3)} | {(1 << (bits - 1)) + d for d in (-2, -1, 0, 1)}
                | {-(1 << (bits - 1)) + d for d in (-2, -1, 0, 1)} | {(3 << bits) + 5, -(5 << bits) - 7})
    want = [_ref_fit(v, bits, mode) for v in vs]
    assert [fit_value(v, bits, mode) for v in vs] == want
    # the array form (mac_run with one product per output and nothing else) fits the same way
    got = mac_run(np.array(vs, np.int64)[:, None], bits=bits, mode=mode)
    assert got.tolist() == want


def test_fit_value_errors():
    assert fit_value(127, 8, "error") == 127 and fit_value(-128, 8, "error") == -128
    with pytest.raises(ValueError, match=r"^accumulator overflow: 128 does not fit 8 bits \(overflow mode 'error'\)$"):
        fit_value(128, 8, "error")
    with pytest.raises(ValueError, match=r"^unknown overflow mode 'clamp'$"):
        fit_value(500, 8, "clamp")
    assert fit_value(5, 8, "clamp") == 5                   # in range: no rule applies
    assert fit_value(np.int64(-3), 8, "wrap") == -3 and type(fit_value(np.int64(-3), 8, "wrap")) is int


# ----------------------------------------------------------------------------------------- sequences
def test_sequential_sequences_by_hand():
    vals, labels = mac_sequence([100, 100, -50, 60], bits=8, mode="saturate")
    assert vals == [0, 100, 127, 77, 127] and labels == ["zero", "k=0", "k=1", "k=2", "k=3"]
    vals, labels = mac_sequence([100, 100, -50], init=-20, bias_end=-100, bits=8, mode="wrap")
    assert vals == [-20, 80, -76, -126, 30] and labels == ["init", "k=0", "k=1", "k=2", "bias"]
    vals, labels = mac_sequence([100, 100], init=0, bias_end=0, bits=8, mode="saturate_zero")
    assert vals == [0, 100, 0, 0] and labels == ["init", "k=0", "k=1", "bias"]
    vals, labels = mac_sequence([100, 100, -50], bias_end=100, bits=8, mode="saturate", overflow_at="end")
    assert vals == [0, 100, 200, 150, 250, 127] and labels == ["zero", "k=0", "k=1", "k=2", "bias", "fit"]
    vals, labels = mac_sequence([], bits=8)
    assert vals == [0] and labels == ["zero"]
    vals, _ = mac_sequence([2 ** 31 - 1, 1])                    # the defaults: 32 bits, wrap
    assert vals == [0, 2 ** 31 - 1, -2 ** 31]


def test_tree_sequences_by_hand():
    # 5 products: level 1 pairs (0,1), (2,3), the odd 5th carried; level 2 pairs; level 3 the root
    vals, labels = mac_sequence([100, 50, -100, -60, 90], bits=8, mode="saturate", order="tree")
    assert vals == [0, 127, -128, -1, 89] and labels == ["zero", "tree 1.0", "tree 1.1", "tree 2.0", "tree 3.0"]
    vals, labels = mac_sequence([100, 50, -100, -60, 90], init=40, bits=8, mode="wrap", order="tree")
    assert vals == [40, -106, 96, -10, 80, 120]
    assert labels == ["init", "tree 1.0", "tree 1.1", "tree 2.0", "tree 3.0", "init+tree"]
    vals, labels = mac_sequence([7], bits=8, mode="wrap", order="tree")                 # one product: one add
    assert vals == [0, 7] and labels == ["zero", "init+tree"]
    vals, labels = mac_sequence([], init=5, bits=8, mode="wrap", order="tree")
    assert vals == [5, 5] and labels == ["init", "init+tree"]
    vals, labels = mac_sequence([100, 100, 100, 100], bias_end=-1, bits=8, mode="wrap", order="tree",
                                overflow_at="end")
    assert vals == [0, 200, 200, 400, 399, 399 - 512] and labels[-3:] == ["tree 2.0", "bias", "fit"]
    with pytest.raises(ValueError, match=r"^order must be 'sequential' or 'tree', got 'zigzag'$"):
        mac_sequence([1, 2], order="zigzag")


def _ref_run(row, init, bias_end, bits, mode, order, at):
    """Python-int model of one output: the list of accumulator values after each add."""
    fit = (lambda v: v) if at == "end" else (lambda v: _ref_fit(v, bits, mode))
    s0 = 0 if init is None else init
    steps = [s0]
    if order == "sequential":
        for p in row:
            steps.append(fit(steps[-1] + p))
    else:
        level = list(row)
        while len(level) > 1:
            paired = [fit(a + b) for a, b in zip(level[0::2], level[1::2])]
            steps += paired
            level = paired + level[len(paired) * 2:]
        if init is not None or len(row) < 2:
            steps.append(fit(s0 + (level[0] if level else 0)))
    if bias_end is not None:
        steps.append(fit(steps[-1] + bias_end))
    if at == "end":
        steps.append(_ref_fit(steps[-1], bits, mode))
    return steps


@pytest.mark.parametrize("mode", MODES + ("exact",))
@pytest.mark.parametrize("order", ["sequential", "tree"])
@pytest.mark.parametrize("at", ["add", "end"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("preload", [False, True])
def test_mac_run_and_mac_sequence_against_a_python_int_model(mode, order, at, k, preload):
    rng = np.random.default_rng(k * 7 + preload)
    P = rng.integers(-90, 91, (6, k))
    P[0] = 90
    P[1] = -90
    init = rng.integers(-128, 128, 6) if preload else None
    bias_end = rng.integers(-128, 128, 6)
    for b in (None, bias_end):
        want = [_ref_run([int(p) for p in P[e]], None if init is None else int(init[e]),
                         None if b is None else int(b[e]), 8, mode, order, at) for e in range(6)]
        fin, rows = mac_run(P, init=init, bias_end=b, bits=8, mode=mode, order=order, overflow_at=at, trace=True)
        assert fin.dtype == np.int64 and rows.dtype == np.int64
        assert fin.tolist() == [w[-1] for w in want]
        assert mac_run(P, init=init, bias_end=b, bits=8, mode=mode, order=order, overflow_at=at).tolist() == \
            [w[-1] for w in want]
        assert rows.tolist() == want
        for e in range(6):
            vals, _ = mac_sequence(P[e], init=None if init is None else int(init[e]),
                                   bias_end=None if b is None else int(b[e]), bits=8, mode=mode, order=order,
                                   overflow_at=at)
            assert vals == want[e]


def test_tree_of_no_products():
    fin, rows = mac_run(np.zeros((3, 0), np.int64), init=np.array([5, -7, 200]), bits=8, mode="saturate",
                        order="tree", trace=True)
    assert fin.dtype == np.int64 and fin.tolist() == [5, -7, 127] and rows.tolist() == [[5, 5], [-7, -7], [200, 127]]
    fin = mac_run(np.zeros((2, 0), np.int64), bits=8, order="tree")
    assert fin.dtype == np.int64 and fin.tolist() == [0, 0]


def test_wrap_sign_magnitude_of_int64_extremes():
    """Sums of 63 and 64 bits (a 64-bit accumulator's exact partial sums) fit by SC_WRAP_SM as the reference does
    (they raised a ValueError: the value was read as a 63-bit code)."""
    for bits in (2, 8, 33, 63):
        for v in (2 ** 62 - 1, 2 ** 62, 2 ** 62 + 5, 2 ** 63 - 1, -2 ** 62 - 3, -2 ** 63):
            assert fit_value(v, bits, "wrap_sign_magnitude") == overflow_int(v, bits, True, "wrap_sign_magnitude")[0]


def test_mac_run_keeps_the_caller_arrays():
    P = np.array([[100, 100]], np.int64)
    init = np.array([20], np.int64)
    fin = mac_run(P, init=init, bits=8, mode="saturate")
    assert fin.tolist() == [127] and init.tolist() == [20] and P.tolist() == [[100, 100]]
    assert mac_run(np.array([[2 ** 31 - 1, 1]])).tolist() == [-2 ** 31]            # defaults: 32 bits, wrap


# ----------------------------------------------------------------------------------------- products
def _ref_products(mac, x, w, coord, pad_code=None):
    """Per-tap loops on Python ints: the products of the output at ``coord`` in the datapath's tap order."""
    xz, op = int(mac["x_zp"]), mac["op"]
    m = w.shape[0] if op != "depthwise_conv2d" else w.shape[3]
    wz = [int(v) for v in np.broadcast_to(np.asarray(mac["w_zp"]).reshape(-1), (m,))]
    n, o = int(coord[0]), int(coord[-1])
    if op == "fully_connected":
        return [(int(x[n, k]) - xz) * (int(w[o, k]) - wz[o]) for k in range(w.shape[1])]
    (pt, _), (pl, _) = mac["pads"]
    h0, w0 = int(coord[1]) * mac["stride"][0] - pt, int(coord[2]) * mac["stride"][1] - pl
    dh, dw = mac["dilation"]

    def tap(r, c, ch):
        if 0 <= r < x.shape[1] and 0 <= c < x.shape[2]:
            return int(x[n, r, c, ch]) - xz
        return 0 if pad_code is None else pad_code - xz

    kh, kw = w.shape[1], w.shape[2]
    if op == "conv2d":
        return [tap(h0 + i * dh, w0 + j * dw, c) * (int(w[o, i, j, c]) - wz[o])
                for i in range(kh) for j in range(kw) for c in range(w.shape[3])]
    mult = w.shape[3] // x.shape[3]
    return [tap(h0 + i * dh, w0 + j * dw, o // mult) * (int(w[0, i, j, o]) - wz[o]) for i in range(kh) for j in range(kw)]


def _all_coords(n, oh, ow, c):
    return np.array([(a, b, d, e) for a in range(n) for b in range(oh) for d in range(ow) for e in range(c)])


def test_fully_connected_products_with_per_output_weight_zero_points():
    rng = np.random.default_rng(61)
    x = rng.integers(-128, 128, (3, 5)).astype(np.int8)
    w = rng.integers(0, 256, (4, 5)).astype(np.uint8)
    for wz in ([3, 128, 255, 0], 7):
        mac = {"op": "fully_connected", "x_zp": -5, "w_zp": wz}
        coords = np.array([(n, o) for n in range(3) for o in range(4)])
        P = mac_products(mac, x, w, coords)
        assert P.dtype == np.int64 and P.tolist() == [_ref_products(mac, x, w, c) for c in coords]
    assert _tap_labels(mac, w.shape) == ["k=0", "k=1", "k=2", "k=3", "k=4"]


@pytest.mark.parametrize("pad_code", [None, -128, 9])
def test_conv_products_with_strides_dilations_asymmetric_pads(pad_code):
    rng = np.random.default_rng(62)
    x = rng.integers(-128, 128, (2, 6, 7, 3)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 3, 2, 3)).astype(np.int8)                  # OHWI: 3 x 2 taps, 3 channels
    mac = {"op": "conv2d", "x_zp": 4, "w_zp": [1, -2, 0, 5], "stride": [2, 1], "dilation": [1, 3],
           "pads": [[2, 1], [0, 3]]}
    # output: H (6 + 3 - 3) // 2 + 1 = 4, W (7 + 3 - 4) // 1 + 1 = 7
    coords = _all_coords(2, 4, 7, 4)
    P = mac_products(mac, x, w, coords, pad_code=pad_code)
    assert P.dtype == np.int64 and P.tolist() == [_ref_products(mac, x, w, c, pad_code) for c in coords]
    assert _tap_labels(mac, w.shape) == [f"(i,j,c)=({i},{j},{c})" for i in range(3) for j in range(2) for c in range(3)]
    assert _tap_labels(mac, w.shape)[:4] == ["(i,j,c)=(0,0,0)", "(i,j,c)=(0,0,1)", "(i,j,c)=(0,0,2)", "(i,j,c)=(0,1,0)"]


@pytest.mark.parametrize("pad_code", [None, 0])
def test_depthwise_products_with_a_depth_multiplier(pad_code):
    rng = np.random.default_rng(63)
    x = rng.integers(0, 256, (2, 5, 4, 2)).astype(np.uint8)
    w = rng.integers(-128, 128, (1, 2, 3, 6)).astype(np.int8)                  # 1HWC: multiplier 3
    mac = {"op": "depthwise_conv2d", "x_zp": 128, "w_zp": [0, 1, 2, 3, 4, -5], "stride": [1, 2], "dilation": [2, 1],
           "pads": [[1, 2], [1, 1]]}
    # output: H (5 + 3 - 3) // 1 + 1 = 6, W (4 + 2 - 3) // 2 + 1 = 2
    coords = _all_coords(2, 6, 2, 6)
    P = mac_products(mac, x, w, coords, pad_code=pad_code)
    assert P.dtype == np.int64 and P.tolist() == [_ref_products(mac, x, w, c, pad_code) for c in coords]
    assert _tap_labels(mac, w.shape) == ["(i,j)=(0,0)", "(i,j)=(0,1)", "(i,j)=(0,2)", "(i,j)=(1,0)", "(i,j)=(1,1)",
                                         "(i,j)=(1,2)"]

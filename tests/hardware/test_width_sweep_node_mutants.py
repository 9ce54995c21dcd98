"""fxpsim.hardware.width_sweep_node (the per-node sweep) against models written here.

Every expected number comes from plain Python integers in this file: the helpers against
``int.bit_length`` and ``tests/reference.py``'s ``overflow_int`` / ``accumulate``, the layouts' item
maps by loops over rows, and ``node_sweep``'s records against a W-bit register simulated add by add
(saturate, wrap or set to zero at every overflowing add, the bias clipped to W bits, then added after or
preloaded), requantized by ``tests/reference.py``'s gemmlowp model (``ref_quantize_multiplier``,
``ref_mbqm``) with scales whose multiplier is exact in every float type.
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference import accumulate, overflow_int, ref_mbqm, ref_quantize_multiplier  # noqa: E402

from fxpsim.graph import IntegerGraph, Node, TensorSpec  # noqa: E402
from fxpsim.graph.datapath_settings import Datapath  # noqa: E402
from fxpsim.hardware import width_sweep_node as wsn  # noqa: E402
from fxpsim.hardware.width_sweep import node_sweep  # noqa: E402

MODES = ("saturate", "wrap", "saturate_zero")


# ----------------------------------------------------------------------------------------- helpers
@pytest.mark.parametrize("w", [2, 3, 5, 8, 13, 16, 31, 32, 33, 47, 63, 64])
@pytest.mark.parametrize("mode", MODES)
def test_fit_np_against_overflow_int(w, mode):
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    vals = sorted({0, 1, -1, lo, hi, lo - 1, hi + 1, 2 * hi + 1, 2 * lo, 3 * hi, -3 * hi, 12345, -12345,
                   (1 << 62) - 1, -(1 << 62), (1 << 63) - 1, -(1 << 63)})
    vals = [x for x in vals if -(1 << 63) <= x < 1 << 63]
    v = np.array(vals, np.int64)
    codes, bad = wsn._fit_np(v, w, mode)
    want = [overflow_int(int(x), w, True, mode) for x in vals]
    assert [int(c) for c in codes] == [c for c, _ in want]
    assert [bool(b) for b in bad] == [o for _, o in want]


def test_fit_np_two_dimensional():
    v = np.array([[100, -100, 7], [-129, 128, 0]], np.int64)
    for mode in MODES:
        codes, bad = wsn._fit_np(v, 8, mode)
        assert codes.shape == (2, 3) and bad.shape == (2, 3)
        for i, j in itertools.product(range(2), range(3)):
            c, o = overflow_int(int(v[i, j]), 8, True, mode)
            assert (int(codes[i, j]), bool(bad[i, j])) == (c, o)


def _bits(v: int) -> int:
    return v.bit_length() + 1


def test_signed_bits_against_bit_length():
    vals = [0, 1, 2, 3, 4, 7, 8, 127, 128, 255, 256, (1 << 31) - 1, 1 << 31, (1 << 51) + 1, (1 << 52) - 1]
    got = wsn._signed_bits(np.array(vals, np.int64))
    assert got.dtype == np.int16
    assert got.tolist() == [_bits(v) for v in vals]


def test_signed_bits_beyond_float64_integers():
    vals = [0, 1, 2, 3, 5, (1 << 52) - 1, 1 << 52, (1 << 52) + 1, (1 << 53) - 1, 1 << 53, (1 << 53) + 1,
            (1 << 62) - 1, 1 << 62, (1 << 63) - 1, 1 << 40, (1 << 33) + 7, (1 << 32) + 5, 1 << 32, (1 << 33) - 1, (1 << 17) - 1, 65535, 65536]
    rng = np.random.default_rng(1)
    vals += [int(x) for x in rng.integers(0, 1 << 63, 40, dtype=np.int64)]
    vals += [int(x) >> int(s) for x, s in zip(rng.integers(0, 1 << 63, 40, dtype=np.int64), rng.integers(0, 63, 40))]
    got = wsn._signed_bits(np.array(vals, np.int64))
    assert got.dtype == np.int16
    assert got.tolist() == [_bits(v) for v in vals]
    # a single value at the threshold and a 2-D input
    assert wsn._signed_bits(np.array([1 << 52], np.int64)).tolist() == [54]
    assert wsn._signed_bits(np.array([[1 << 52, 3], [0, 1 << 60]], np.int64)).tolist() == [[54, 3], [1, 62]]
    assert wsn._signed_bits(np.zeros(0, np.int64)).size == 0


# ----------------------------------------------------------------------------------------- depthwise sums
class _DP:
    def __init__(self, order, bias_add):
        self.accumulator_order, self.bias_add = order, bias_add


@pytest.mark.parametrize("order", ["sequential", "tree"])
@pytest.mark.parametrize("bias_add", ["after", "preload"])
@pytest.mark.parametrize("has_bias", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_depthwise_sums_against_loops(order, bias_add, has_bias, big):
    rng = np.random.default_rng(7)
    R, G, K, mult = 5, 3, 4, 2
    O = G * mult
    amp = 30000 if big else 100
    a = rng.integers(-amp, amp, (R, G, K)).astype(np.int64)
    w2 = rng.integers(-amp, amp, (O, K)).astype(np.int64)
    b = rng.integers(-(1 << 40) if big else -500, (1 << 40) if big else 500, O).astype(np.int64)
    if not has_bias:
        b = np.zeros(O, np.int64)
    prod, s_sum, bound = wsn._depthwise_sums(a, w2, b, has_bias, _DP(order, bias_add))
    for r in range(R):
        for o in range(O):
            g = o // mult
            ps = [int(a[r, g, k]) * int(w2[o, k]) for k in range(K)]
            assert [int(prod[r, k, o]) for k in range(K)] == ps
            bb = int(b[o])
            assert int(s_sum[r, o]) == sum(ps) + bb
            if order == "sequential":
                pre = bias_add == "preload" and has_bias
                run = [bb if pre else 0]
                for p in ps:
                    run.append(run[-1] + p)
                run.append(sum(ps) + bb)
                want = max(max(run), -min(run) - 1)
            else:
                want = sum(abs(p) for p in ps) + abs(bb)
            assert int(bound[r, o]) == want, (r, o)


# ----------------------------------------------------------------------------------------- item maps
def _stub(layout, r, n):
    nd = wsn._Node.__new__(wsn._Node)
    nd.layout, nd.r, nd.n = layout, r, n
    nd.rpad = -(-r // 64) * 64
    return nd


def _items_of(layout, r, n):
    """{item: [(row, out), ...]} by the layouts' definitions (docstring of _Node)."""
    rpad = -(-r // 64) * 64
    items = {}
    if layout == "rows":
        for i in range(r):
            items[i] = [(i, o) for o in range(n)]
    elif layout == "cols":
        for s in range(rpad // 64):
            items[s] = [(i, o) for i in range(s * 64, s * 64 + 64) if i < r for o in range(n)]
    else:
        for o in range(n):
            for s in range(rpad // 64):
                items[o * (rpad // 64) + s] = [(i, o) for i in range(s * 64, s * 64 + 64) if i < r]
    return items


@pytest.mark.parametrize("layout,r,n", [("rows", 5, 3), ("cols", 1, 2), ("cols", 130, 3), ("cols", 64, 2),
                                        ("products", 70, 3), ("products", 200, 2), ("products", 64, 1),
                                        ("cols", 64 * 66 - 3, 1), ("products", 64 * 66 - 5, 2)])
def test_per_item_and_item_rows(layout, r, n):
    nd = _stub(layout, r, n)
    rng = np.random.default_rng(r * 10 + n)
    v = rng.integers(1, 1000, (r, n)).astype(np.int64)
    items = _items_of(layout, r, n)
    got = nd.per_item(v)
    assert got.dtype == np.int64
    assert got.tolist() == [max(int(v[i, o]) for i, o in items[k]) if items[k] else 0 for k in range(len(items))]
    b = np.zeros((r, n), bool)
    b[r - 1, n - 1] = True
    assert nd.per_item(b).dtype == bool                 # (the sweep inverts it: ~ev)
    assert nd.per_item(b).tolist() == [any(b[i, o] for i, o in items[k]) for k in range(len(items))]
    for sel in (list(range(len(items))), [len(items) - 1], [0], sorted({0, len(items) // 2, len(items) - 1})):
        want = sorted({i for k in sel for i, _ in items[k]})
        assert nd.item_rows(np.array(sel, np.int64)).tolist() == want, sel


# ----------------------------------------------------------------------------------------- score_rows
def test_score_rows_against_a_loop():
    r, n = 6, 4
    rng = np.random.default_rng(3)
    nd = _stub("rows", r, n)
    nd.e = rng.integers(-1000, 1000, (r, n)).astype(np.int64)

    def q(acc):                    # a requantizer of the test's own: floor(acc / 8) + 3, clamped to int8
        return max(-128, min(127, (acc >> 3) + 3))
    nd.requant = lambda acc, width: np.vectorize(q)(acc).astype(np.int8)
    nd.ref = np.vectorize(q)(nd.e).astype(np.int32)

    def want(rows, acc):
        d = [abs(q(int(acc[j, o])) - q(int(nd.e[i, o]))) for j, i in enumerate(rows) for o in range(n)
             if int(acc[j, o]) != int(nd.e[i, o])]
        return sum(1 for x in d if x), sum(d), max(d, default=0)

    for rows in ([0, 1, 2, 3, 4, 5], [1, 4], [5], [0, 2, 3]):
        rows = np.array(rows)
        acc = nd.e[rows].copy()
        assert nd.score_rows(rows, acc, 16) == (0, 0, 0)
        acc[0, 1] += 1                                  # changed but (maybe) the same code
        acc[-1, 0] = 5000 if acc.shape[0] > 1 else acc[-1, 0] - 800
        assert nd.score_rows(rows, acc, 16) == want(rows, acc), rows
        acc[:, 2] -= 900                                # every row changed
        assert nd.score_rows(rows, acc, 16) == want(rows, acc), rows
        acc2 = nd.e[rows].copy()
        acc2[:, 3] += 8                                 # every row changed, each code by one
        assert nd.score_rows(rows, acc2, 16) == want(rows, acc2)


# ----------------------------------------------------------------------------------------- node_sweep
S_X, S_W, S_Y = 2.0 ** -4, 3 * 2.0 ** -8, 1.0          # real multiplier 3 / 2^12, exact in any float


def _requant(acc, zp):
    m, e = ref_quantize_multiplier(S_X * S_W / S_Y)
    return max(-128, min(127, zp + ref_mbqm(acc, m, e, "double")))


def _point(products, b, has_bias, w, mode, dp):
    """(events, final accumulator) of one output: the W-bit register of the test's model."""
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    exact = sum(products) + b
    if dp.overflow_at == "end":
        v, o = overflow_int(exact, w, True, mode)
        return int(o), v
    bw = min(hi, max(lo, b))                            # the bias register: b saturated to W bits
    if dp.bias_add == "preload" and has_bias:
        v, n, _ = accumulate(products, bw, w, True, mode)
        return n, v
    v, n, _ = accumulate(products, 0, w, True, mode)
    if has_bias:
        v, o = overflow_int(v + bw, w, True, mode)
        n += o
    return n, v


def _check_node(res, name, outs, zp, widths, dp, has_bias):
    """outs: list of (products, bias) per output of the node."""
    ref = [_requant(sum(p) + b, zp) for p, b in outs]
    for w in widths:
        for mode in MODES:
            ev, errs = 0, []
            for (p, b), r0 in zip(outs, ref):
                n, v = _point(p, b, has_bias, w, mode, dp)
                ev += n
                errs.append(abs(_requant(v, zp) - r0))
            rec = res.record(name, w, mode)
            n = rec["outputs"]
            assert n == len(outs)
            got = (rec["overflow_count"], round(rec["not_exact_fraction"] * n), rec["max_abs_error_lsb"],
                   round(rec["mean_abs_error_lsb"] * n))
            assert got == (ev, sum(1 for e in errs if e), max(errs), sum(errs)), (name, w, mode)


def _fc_graph(rng, k, n_out, with_bias, zx, zy, bias_amp):
    w = rng.integers(-127, 128, (n_out, k)).astype(np.int8)
    tensors = [TensorSpec("x", 8, True, (k,), S_X, zx), TensorSpec("w", 8, True, scale=S_W, data=w),
               TensorSpec("y", 8, True, (n_out,), S_Y, zy)]
    ins = ["x", "w"]
    b = np.zeros(n_out, np.int64)
    if with_bias:
        b = rng.integers(-bias_amp, bias_amp, n_out).astype(np.int64)
        tensors.append(TensorSpec("b", 32, True, data=b))
        ins.append("b")
    return IntegerGraph(tensors, [Node("f", "fully_connected", ins, ["y"])], ["x"], ["y"]), w, b


@pytest.mark.parametrize("n_out", [3, 50])
@pytest.mark.parametrize("bias_add,at", [("after", "add"), ("preload", "add"), ("after", "end")])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fully_connected_against_a_register_model(n_out, bias_add, at, with_bias):
    rng = np.random.default_rng(n_out * 7 + with_bias)
    k, batch, zx, zy = 24, (70 if n_out < 48 else 14), -5, 3
    graph, w, b = _fc_graph(rng, k, n_out, with_bias, zx, zy, 1 << 13)
    x = rng.integers(-128, 128, (batch, k)).astype(np.int8)
    x[:5] = 127                                         # a few rows that overflow wider registers
    x[5:8] = -128
    x[8:12] = zx                                        # rows of zero products
    dp = Datapath(overflow_at=at, bias_add=bias_add)
    widths = [8, 12, 14, 15, 16, 17, 18, 19, 20, 32] if n_out < 48 else [8, 14, 16, 17, 18, 20]
    res = node_sweep(graph, x, widths=widths, overflows=MODES, datapath=dp)
    outs = [([(int(x[r, j]) - zx) * int(w[o, j]) for j in range(k)], int(b[o]))
            for r in range(batch) for o in range(n_out)]
    _check_node(res, "f", outs, zy, widths, dp, with_bias)


def test_fully_connected_without_the_simd_kernels(monkeypatch):
    """The per_add_rows path (whole rows by the public functions) on the same model."""
    monkeypatch.setattr(wsn._per_add, "_SIMD16", False)
    rng = np.random.default_rng(5)
    k, zx, zy = 16, 2, -1
    graph, w, b = _fc_graph(rng, k, 3, True, zx, zy, 1 << 12)
    x = rng.integers(-128, 128, (130, k)).astype(np.int8)
    x[100:] = 127
    for bias_add in ("after", "preload"):
        dp = Datapath(bias_add=bias_add)
        widths = [9, 12, 14, 16, 17, 18, 24]
        res = node_sweep(graph, x, widths=widths, overflows=MODES, datapath=dp)
        outs = [([(int(x[r, j]) - zx) * int(w[o, j]) for j in range(k)], int(b[o]))
                for r in range(130) for o in range(3)]
        _check_node(res, "f", outs, zy, widths, dp, True)


@pytest.mark.parametrize("bias_add,at", [("after", "add"), ("preload", "add"), ("after", "end")])
@pytest.mark.parametrize("simd", [True, False])
def test_depthwise_against_a_register_model(bias_add, at, simd, monkeypatch):
    if not simd:
        monkeypatch.setattr(wsn._per_add, "_SIMD16", False)
    rng = np.random.default_rng(11)
    hw, c, zx, zy = 10, 2, 4, -2
    wgt = rng.integers(-127, 128, (1, 3, 3, c)).astype(np.int8)
    b = rng.integers(-(1 << 12), 1 << 12, c).astype(np.int64)
    tensors = [TensorSpec("x", 8, True, (hw, hw, c), S_X, zx), TensorSpec("w", 8, True, scale=S_W, data=wgt),
               TensorSpec("b", 32, True, data=b), TensorSpec("y", 8, True, (hw - 2, hw - 2, c), S_Y, zy)]
    graph = IntegerGraph(tensors, [Node("d", "depthwise_conv2d", ["x", "w", "b"], ["y"], {"padding": "VALID"})],
                         ["x"], ["y"])
    x = rng.integers(-128, 128, (2, hw, hw, c)).astype(np.int8)
    x[1, :4] = 127
    dp = Datapath(overflow_at=at, bias_add=bias_add)
    widths = [8, 11, 13, 14, 15, 16, 17, 20]
    res = node_sweep(graph, x, widths=widths, overflows=MODES, datapath=dp)
    outs = []
    for n in range(2):
        for i in range(hw - 2):
            for j in range(hw - 2):
                for ch in range(c):
                    ps = [(int(x[n, i + di, j + dj, ch]) - zx) * int(wgt[0, di, dj, ch])
                          for di in range(3) for dj in range(3)]
                    outs.append((ps, int(b[ch])))
    _check_node(res, "d", outs, zy, widths, dp, True)


@pytest.mark.parametrize("simd", [True, False])
def test_every_bias_clipped_and_no_overflow_event(simd, monkeypatch):
    """Zero products and biases wider than the register: no add overflows, yet every output changes at
    every width below the bias's (the clipped bias must not let an item count as clean)."""
    if not simd:
        monkeypatch.setattr(wsn._per_add, "_SIMD16", False)
    rng = np.random.default_rng(2)
    k, n_out, zx, zy = 4, 3, 7, 0
    w = rng.integers(-127, 128, (n_out, k)).astype(np.int8)
    b = np.array([3000, 2500, -2900], np.int64)
    tensors = [TensorSpec("x", 8, True, (k,), S_X, zx), TensorSpec("w", 8, True, scale=S_W, data=w),
               TensorSpec("b", 32, True, data=b), TensorSpec("y", 8, True, (n_out,), S_Y, zy)]
    graph = IntegerGraph(tensors, [Node("f", "fully_connected", ["x", "w", "b"], ["y"])], ["x"], ["y"])
    x = np.full((3, k), zx, np.int8)
    for bias_add in ("after", "preload"):
        dp = Datapath(bias_add=bias_add)
        widths = [8, 10, 11, 12, 13]
        res = node_sweep(graph, x, widths=widths, overflows=MODES, datapath=dp)
        outs = [([0] * k, int(b[o])) for _ in range(3) for o in range(n_out)]
        _check_node(res, "f", outs, zy, widths, dp, True)
        assert res.record("f", 12, "saturate")["not_exact_fraction"] > 0


@pytest.mark.parametrize("simd", [True, False])
def test_an_item_with_one_overflow_event_is_swept_again(simd, monkeypatch):
    """One product of 127 * 127 = 16129: exactly one overflowing add at 10 and at 12 bits, none at 15."""
    if not simd:
        monkeypatch.setattr(wsn._per_add, "_SIMD16", False)
    w = np.array([[127]], np.int8)
    tensors = [TensorSpec("x", 8, True, (1,), S_X, 0), TensorSpec("w", 8, True, scale=S_W, data=w),
               TensorSpec("y", 8, True, (1,), S_Y, 0)]
    graph = IntegerGraph(tensors, [Node("f", "fully_connected", ["x", "w"], ["y"])], ["x"], ["y"])
    x = np.array([[127], [3]], np.int8)
    widths = [10, 12, 15, 16]
    res = node_sweep(graph, x, widths=widths, overflows=MODES, datapath=Datapath())
    _check_node(res, "f", [([127 * 127], 0), ([381], 0)], 0, widths, Datapath(), False)
    assert [res.record("f", wd, "wrap")["overflow_count"] for wd in widths] == [1, 1, 0, 0]

"""The core graph ops of :mod:`fxpsim.graph.ops` (quantize, dequantize, max / average pooling, reshape,
transpose, clamp) against scalar models on Python integers written here.

Written to kill the mutants of ``fxpsim/graph/ops.py`` that tests/graph/test_ir.py and test_plan.py left
alive (see tools/mutation/README.md), above all graph average pooling at an accumulator width that
overflows: the window sums wrap or saturate at every add (row-major taps), then TFLite's rounding division
by the number of valid pixels, then the node's clamp.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.graph.ir import Datapath
from fxpsim.graph.ops import OPS, run_node, run_node_float
from reference import ref_max_pool


def _acc(values, bits, overflow):
    """Running sum from 0 through a ``bits``-bit two's-complement register: (final, overflowed adds)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    s, n = 0, 0
    for v in values:
        t = s + v
        if lo <= t <= hi:
            s = t
            continue
        n += 1
        s = ((t - lo) % (1 << bits)) + lo if overflow == "wrap" else min(hi, max(lo, t))
    return s, n


def _tflite_div(s, c):
    q = s + c // 2 if s > 0 else s - c // 2
    return abs(q) // c * (1 if q >= 0 else -1)


def ref_avg_pool(x, k, stride, pads, bits, overflow, lo, hi):
    n, h, w, ch = x.shape
    (pt, pb), (pl, pr) = pads
    oh, ow = (h + pt + pb - k[0]) // stride[0] + 1, (w + pl + pr - k[1]) // stride[1] + 1
    out = np.zeros((n, oh, ow, ch), np.int64)
    sums = np.zeros_like(out)
    total = 0
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for c in range(ch):
                    vals, count = [], 0
                    for u in range(k[0]):
                        for v in range(k[1]):
                            y, z = i * stride[0] + u - pt, j * stride[1] + v - pl
                            inside = 0 <= y < h and 0 <= z < w
                            vals.append(int(x[b, y, z, c]) if inside else 0)
                            count += inside
                    s, ovf = _acc(vals, bits, overflow)
                    total += ovf
                    sums[b, i, j, c] = s
                    out[b, i, j, c] = min(hi, max(lo, _tflite_div(s, count)))
    return out, sums, total


def _one_node_graph(specs, node):
    return IntegerGraph(specs, [node], [node.inputs[0]], list(node.outputs), name="g")


def _pool_graph(attrs, shape=(4, 4, 2), out_shape=(2, 2, 2), op="avg_pool2d", zp=3, bits=8, signed=True):
    specs = [TensorSpec("x", bits, signed, shape, 0.5, zp), TensorSpec("p", bits, signed, out_shape, 0.5, zp)]
    node = Node("pool", op, ["x"], ["p"], attrs)
    return _one_node_graph(specs, node), node


def _big_codes(shape, seed):
    """int8 codes mostly near +127 (window sums overflow an 8-bit register), some negative."""
    rng = np.random.default_rng(seed)
    x = rng.integers(60, 128, shape)
    x[rng.random(shape) < 0.25] *= -1
    return x.astype(np.int8)


@pytest.mark.parametrize("overflow", ["wrap", "saturate"])
@pytest.mark.parametrize("bits", [8, 9, 32, 64])
def test_avg_pool_node_at_an_overflowing_width(overflow, bits):
    graph, node = _pool_graph({"pool_size": [2, 2], "activation": "relu6"})    # stride: the pool size
    x = _big_codes((3, 4, 4, 2), seed=bits)
    dp = Datapath(accumulator_bits=bits, accumulator_overflow=overflow)
    # relu6 at scale 0.5, zero point 3: codes [3, 3 + 6 / 0.5] = [3, 15]
    want, sums, ovf = ref_avg_pool(x, (2, 2), (2, 2), ((0, 0), (0, 0)), min(bits, 62), overflow, 3, 15)
    (out,), info = run_node(graph, node, [x], dp, True)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(info["acc"], sums)
    assert info["overflows"] == ovf and info["clipped"] == 0 and info["adds"] == 3 * 2 * 2 * 2 * 4
    if bits <= 9:
        assert ovf > 0
    else:
        assert ovf == 0
    for plan in (False, True):
        np.testing.assert_array_equal(graph.run(x, dp, plan=plan), want)


def test_avg_pool_node_without_activation_explicit_padding_and_stride():
    graph, node = _pool_graph({"pool_size": [3, 2], "stride": [1, 2], "padding": [[1, 1], [0, 0]]},
                              shape=(3, 4, 1), out_shape=(3, 2, 1))
    x = _big_codes((2, 3, 4, 1), seed=5)
    dp = Datapath(accumulator_bits=9, accumulator_overflow="saturate")
    want, sums, ovf = ref_avg_pool(x, (3, 2), (1, 2), ((1, 1), (0, 0)), 9, "saturate", -128, 127)
    (out,), info = run_node(graph, node, [x], dp, False)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(info["acc"], sums)
    assert info["overflows"] == ovf > 0 and info["adds"] == 2 * 3 * 2 * 6


def test_avg_pool_node_with_a_clip_attribute():
    graph, node = _pool_graph({"pool_size": 2, "clip": [-20, 40]})
    x = _big_codes((1, 4, 4, 2), seed=6)
    dp = Datapath(accumulator_bits=16)
    want, _, _ = ref_avg_pool(x, (2, 2), (2, 2), ((0, 0), (0, 0)), 16, "wrap", -20, 40)
    (out,), _ = run_node(graph, node, [x], dp, False)
    np.testing.assert_array_equal(out, want)


def test_pool_costs_and_bounds():
    graph, node = _pool_graph({"pool_size": [2, 3], "stride": [2, 1]}, out_shape=(2, 2, 2))
    assert OPS["avg_pool2d"].macs(graph, node) == 2 * 2 * 2 * 6
    assert OPS["avg_pool2d"].worst_case_sum(graph, node) == 128 * 6          # |-128| * taps
    graph, node = _pool_graph({"pool_size": [2, 2]}, bits=4, signed=False, zp=0)
    assert OPS["avg_pool2d"].worst_case_sum(graph, node) == 15 * 4           # uint4 codes 0..15
    graph, node = _pool_graph({"pool_size": [2, 2]}, op="max_pool2d")
    assert OPS["max_pool2d"].macs(graph, node) == 0


def test_avg_pool_float_reference():
    graph, node = _pool_graph({"pool_size": [2, 2], "activation": "relu6"})
    x = np.arange(32, dtype=np.float64).reshape(1, 4, 4, 2) / 4 - 2
    (y,) = run_node_float(graph, node, [x])
    want = np.zeros((1, 2, 2, 2))
    for i in range(2):
        for j in range(2):
            for c in range(2):
                m = sum(x[0, 2 * i + u, 2 * j + v, c] for u in range(2) for v in range(2)) / 4
                want[0, i, j, c] = min(6.0, max(0.0, m))
    np.testing.assert_allclose(y, want, rtol=1e-12)
    graph, node = _pool_graph({"pool_size": [2, 2], "padding": [[0, 0], [0, 0]]})
    with pytest.raises(ValueError, match=r"^node 'pool': the float reference supports SAME/VALID pooling only$"):
        run_node_float(graph, node, [x])


def test_avg_pool_float_reference_with_a_stride_and_same_padding():
    """A 2x2 window at stride 1 under SAME padding (TensorFlow: pad bottom/right by 1, padded taps excluded
    from the count): the stride and padding attributes, not the pool size, set the windows."""
    graph, node = _pool_graph({"pool_size": [2, 2], "stride": [1, 1], "padding": "SAME"}, shape=(3, 3, 1),
                              out_shape=(3, 3, 1))
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]).reshape(1, 3, 3, 1)
    (y,) = run_node_float(graph, node, [x])
    want = [[(1 + 2 + 8 + 16) / 4, (2 + 4 + 16 + 32) / 4, (4 + 32) / 2],
            [(8 + 16 + 64 + 128) / 4, (16 + 32 + 128 + 256) / 4, (32 + 256) / 2],
            [(64 + 128) / 2, (128 + 256) / 2, 256.0]]
    assert y.shape == (1, 3, 3, 1) and y[0, :, :, 0].tolist() == want


@pytest.mark.parametrize("attrs, out_shape, k, stride, pads, lo, hi", [
    ({"pool_size": [2, 2]}, (2, 2, 2), (2, 2), (2, 2), ((0, 0), (0, 0)), -128, 127),
    ({"pool_size": 2, "stride": 1, "padding": "SAME", "activation": "relu"}, (4, 4, 2), (2, 2), (1, 1),
     ((0, 1), (0, 1)), 3, 127),
    ({"pool_size": [3, 2], "stride": [1, 2], "padding": [[1, 1], [1, 0]], "activation": "relu6"}, (4, 2, 2),
     (3, 2), (1, 2), ((1, 1), (1, 0)), 3, 15),
])
def test_max_pool_node(attrs, out_shape, k, stride, pads, lo, hi):
    graph, node = _pool_graph(attrs, out_shape=out_shape, op="max_pool2d")
    x = (-_big_codes((2, 4, 4, 2), seed=7)).astype(np.int8)         # mostly negative: padding must not win
    (out,), info = run_node(graph, node, [x], Datapath(), False)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, ref_max_pool(x, k, stride, pads, lo, hi))
    assert info == {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def test_max_pool_float_reference_pads_with_minus_infinity():
    graph, node = _pool_graph({"pool_size": 2, "stride": 1, "padding": "SAME", "activation": "relu6"},
                              out_shape=(4, 4, 2), op="max_pool2d")
    x = -np.arange(1, 33, dtype=np.float64).reshape(1, 4, 4, 2) / 8 + 3
    (y,) = run_node_float(graph, node, [x])
    want = np.zeros((1, 4, 4, 2))
    for i in range(4):
        for j in range(4):
            for c in range(2):
                m = max(x[0, a, b, c] for a in range(i, min(i + 2, 4)) for b in range(j, min(j + 2, 4)))
                want[0, i, j, c] = min(6.0, max(0.0, m))
    np.testing.assert_array_equal(y, want)
    assert (y == 0).any() and (y > 0).any()           # the fused relu6 floor acts


# --------------------------------------------------------------------------------------------- other ops
def _quantize_graph(attrs=None):
    specs = [TensorSpec("x", 0, True, (5,)), TensorSpec("q", 8, True, (5,), 0.5, 2)]
    node = Node("quantize", "quantize", ["x"], ["q"], attrs or {})
    return _one_node_graph(specs, node), node


def test_quantize_rounding_from_the_datapath_or_the_node():
    x = np.array([[1.25, -1.25, 100.0, -100.0, 0.75]], np.float32)          # x / s = 2.5, -2.5, 200, -200, 1.5
    graph, node = _quantize_graph()
    (q,), info = run_node(graph, node, [x], Datapath(rounding="half_up"), False)
    # half up: 3, -2, 200, -200, 2; + zero point 2, clamped to [-128, 127]
    assert q.dtype == np.int8 and q.tolist() == [[5, 0, 127, -128, 4]]
    assert info == {"overflows": 0, "adds": 0, "clipped": 2, "acc": None}
    (q,), _ = run_node(graph, node, [x], Datapath(rounding="half_even"), False)
    assert q.tolist() == [[4, 0, 127, -128, 4]]                        # 2, -2, 200, -200, 2
    graph, node = _quantize_graph({"rounding": "half_even"})
    (q,), info = run_node(graph, node, [x], Datapath(rounding="half_up"), False)
    assert q.tolist() == [[4, 0, 127, -128, 4]] and info["clipped"] == 2
    graph, node = _quantize_graph({"clip": [-3, 4]})
    (q,), info = run_node(graph, node, [x], Datapath(), False)
    assert q.tolist() == [[4, 0, 4, -3, 4]] and info["clipped"] == 3
    # the float reference clips to the real range of the clip attribute, s (q - z) for q in [-3, 4]; without
    # a clip attribute it passes the values through
    (y,) = run_node_float(graph, node, [np.array([[1.25, -100.0, 100.0]])])
    assert y.tolist() == [[1.0, -2.5, 1.0]]
    graph, node = _quantize_graph()
    (y,) = run_node_float(graph, node, [np.array([[1.25, -100.0, 100.0]])])
    assert y.tolist() == [[1.25, -100.0, 100.0]]


def test_dequantize():
    specs = [TensorSpec("q", 8, True, (3,), 0.5, 2), TensorSpec("f", 0, True, (3,))]
    node = Node("dq", "dequantize", ["q"], ["f"])
    graph = _one_node_graph(specs, node)
    (y,), info = run_node(graph, node, [np.array([[2, -128, 127]], np.int8)], Datapath(), False)
    assert y.dtype == np.float32 and y.tolist() == [[0.0, -65.0, 62.5]]
    assert info == {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}
    x = np.array([[0.25, -3.0, 7.0]])
    (z,) = run_node_float(graph, node, [x])
    assert z is x


def test_reshape_transpose_clamp():
    specs = [TensorSpec("a", 8, True, (2, 3), 0.5, 3), TensorSpec("b", 8, True, (6,), 0.5, 3)]
    node = Node("r", "reshape", ["a"], ["b"], {"shape": [6]})
    graph = _one_node_graph(specs, node)
    a = np.arange(12, dtype=np.int8).reshape(2, 2, 3)
    (b,), info = run_node(graph, node, [a], Datapath(), False)
    assert b.shape == (2, 6) and b.tolist() == [list(range(6)), list(range(6, 12))]
    assert info["acc"] is None and info["adds"] == 0
    (bf,) = run_node_float(graph, node, [a.astype(np.float64)])
    assert bf.shape == (2, 6) and bf.tolist() == b.tolist()

    specs = [TensorSpec("a", 8, True, (2, 3), 0.5, 3), TensorSpec("t", 8, True, (3, 2), 0.5, 3)]
    node = Node("t", "transpose", ["a"], ["t"], {"perm": [1, 0]})
    graph = _one_node_graph(specs, node)
    (t,), _ = run_node(graph, node, [a], Datapath(), False)
    assert t.shape == (2, 3, 2) and t.flags["C_CONTIGUOUS"]
    assert t[1].tolist() == [[6, 9], [7, 10], [8, 11]]
    (tf,) = run_node_float(graph, node, [a.astype(np.float64)])
    assert tf.tolist() == t.tolist()

    specs = [TensorSpec("a", 8, True, (2, 3), 0.5, 3), TensorSpec("c", 8, True, (2, 3), 0.5, 3)]
    node = Node("c", "clamp", ["a"], ["c"], {"activation": "relu6"})
    graph = _one_node_graph(specs, node)
    v = np.array([[[-128, 2, 3], [4, 15, 127]]], np.int8)
    (c,), _ = run_node(graph, node, [v], Datapath(), False)
    assert c.dtype == np.int8 and c.tolist() == [[[3, 3, 3], [4, 15, 15]]]      # [3, 3 + 6 / 0.5]
    node = Node("c", "clamp", ["a"], ["c"], {})
    (c,), _ = run_node(_one_node_graph(specs, node), node, [v], Datapath(), False)
    assert c.tolist() == v.tolist()
    node = Node("c", "clamp", ["a"], ["c"], {"activation": "relu6"})
    (cf,) = run_node_float(graph, node, [np.array([[-1.0, 2.5, 9.0]])])
    assert cf.tolist() == [[0.0, 2.5, 6.0]]


@pytest.mark.parametrize("out, perm, message", [
    (TensorSpec("t", 8, True, (3, 2), 0.5, 3), [0, 0], r"perm \[0, 0\] is not a permutation of the 2 per-sample"),
    (TensorSpec("t", 8, True, (3, 2), 0.5, 3), [1, 0, 2], r"perm \[1, 0, 2\] is not a permutation"),
    (TensorSpec("t", 8, True, (3, 2), 0.5, 3), "10", r"perm '10' is not a permutation"),
    (TensorSpec("t", 8, True, (2, 3), 0.5, 3), [1, 0], r"the output must have shape \[3, 2\] and the input's type"),
    (TensorSpec("t", 8, True, (3, 2), 0.25, 3), [1, 0], r"the output must have shape \[3, 2\]"),
    (TensorSpec("t", 8, True, (3, 2), 0.5, 4), [1, 0], r"the output must have shape \[3, 2\]"),
    (TensorSpec("t", 0, True, (3, 2)), [1, 0], r"the output must have shape \[3, 2\]"),
])
def test_transpose_check(out, perm, message):
    specs = [TensorSpec("a", 8, True, (2, 3), 0.5, 3), out]
    with pytest.raises(ValueError, match=r"^node 'tr' \(transpose\): " + message):
        _one_node_graph(specs, Node("tr", "transpose", ["a"], ["t"], {"perm": perm}))


def test_transpose_check_accepts_unknown_scales_and_floats():
    for a, t in ((TensorSpec("a", 8, True, (2, 3)), TensorSpec("t", 8, True, (3, 2), 0.5, 3)),
                 (TensorSpec("a", 0, True, (2, 3)), TensorSpec("t", 0, True, (3, 2)))):
        graph = _one_node_graph([a, t], Node("tr", "transpose", ["a"], ["t"], {"perm": [1, 0]}))
        assert graph.node("tr").op == "transpose"


@pytest.mark.parametrize("inputs, outputs", [([], ["p"]), ([""], ["p"]), (["x"], []), (["x"], ["p", "p2"])])
def test_one_input_one_output(inputs, outputs):
    graph, _ = _pool_graph({"pool_size": 2})
    node = SimpleNamespace(name="n", op="reshape", inputs=inputs, outputs=outputs)
    for op in ("quantize", "dequantize", "max_pool2d", "avg_pool2d", "reshape", "clamp", "transpose"):
        with pytest.raises(ValueError, match=r"^node 'n' \(reshape\): needs an input and one output$"):
            OPS[op].check(graph, node)

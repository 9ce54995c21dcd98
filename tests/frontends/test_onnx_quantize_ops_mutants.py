"""The ONNX graph ops of :mod:`fxpsim.frontends.onnx.quantize_ops` (``onnx_quantize``, ``onnx_dequantize``,
``onnx_requantize``, ``onnx_reinterpret``) on one-node graphs, against models written here with ``Fraction``
and Python integers.

Written to kill the mutants of ``quantize_ops.py`` (see tools/mutation/README.md).  Inputs and scales are
dyadic (powers of two times small integers), so every float32 division and product of onnxruntime's kernels
is exact and the expected codes follow from the ONNX formulas on exact rationals:
QuantizeLinear :math:`q = \\mathrm{clip}(\\mathrm{round\\_half\\_even}(x / s) + z, q_{min}, q_{max})`,
DequantizeLinear :math:`r = (q - z) s`.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.graph.ir import Datapath
from fxpsim.graph.ops import run_node, run_node_float

import fxpsim.frontends.onnx.ops  # noqa: F401  (registers the onnx_* ops)

NATIVE = Datapath(requantization="native", rounding="half_even")


def _half_even(r: Fraction) -> int:
    f = r.numerator // r.denominator
    d = r - f
    return f + (1 if d > Fraction(1, 2) or (d == Fraction(1, 2) and f % 2) else 0)


def _half_up(r: Fraction) -> int:                 # ties toward +inf
    return (r + Fraction(1, 2)).numerator // (r + Fraction(1, 2)).denominator


def _range(bits, signed):
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _graph(op, x_spec, y_spec, attrs=None):
    node = Node("n", op, [x_spec.name], [y_spec.name], attrs or {})
    return IntegerGraph([x_spec, y_spec], [node], [x_spec.name], [y_spec.name], name="g"), node


def _ref_quantize(x, scales, zps, axis_len_last, bits, signed, rnd):
    """Codes and pre-clip values per element; per channel along the last axis when len(scales) > 1."""
    lo, hi = _range(bits, signed)
    flat = np.asarray(x, np.float64).reshape(-1, axis_len_last)
    codes, clipped = [], 0
    for row in flat:
        out = []
        for c, v in enumerate(row):
            s = scales[c if len(scales) > 1 else 0]
            z = zps[c if len(zps) > 1 else 0]
            pre = rnd(Fraction(float(v)) / Fraction(s)) + z
            clipped += not lo <= pre <= hi
            out.append(min(hi, max(lo, pre)))
        codes.append(out)
    return np.array(codes).reshape(np.shape(x)).tolist(), clipped


# values x / s: ties of both signs at even and odd integers, big values both ways, exact integers, zero
X = np.array([[0.375, -0.375, 0.625, -0.625, 0.125, -0.125, 40.0, -40.0, 1.5, 0.0, 3.0, -1.0]], np.float32)


@pytest.mark.parametrize("bits,signed,zp", [(8, True, 3), (8, False, 200), (16, True, -5), (4, True, 0)])
@pytest.mark.parametrize("trace", [False, True])
def test_quantize_native_is_round_half_even_then_clip(bits, signed, zp, trace):
    s = 0.25
    graph, node = _graph("onnx_quantize", TensorSpec("x", 0, True, (12,)),
                         TensorSpec("q", bits, signed, (12,), s, zp))
    (q,), info = run_node(graph, node, [X], NATIVE, trace)
    want, clipped = _ref_quantize(X, [s], [zp], 12, bits, signed, _half_even)
    assert q.dtype == graph.tensors["q"].dtype
    assert q.tolist() == want
    assert info == {"overflows": 0, "adds": 0, "clipped": clipped if trace else 0, "acc": None}
    assert (clipped > 0) == (bits != 16)


@pytest.mark.parametrize("rounding,rnd", [("half_even", _half_even), ("half_up", _half_up)])
def test_quantize_other_datapaths_round_with_the_datapath_rounding(rounding, rnd):
    s, zp = 0.25, -2
    graph, node = _graph("onnx_quantize", TensorSpec("x", 0, True, (12,)), TensorSpec("q", 8, True, (12,), s, zp))
    (q,), info = run_node(graph, node, [X], Datapath(rounding=rounding), True)
    want, clipped = _ref_quantize(X, [s], [zp], 12, 8, True, rnd)
    assert q.dtype == np.int8 and q.tolist() == want
    assert info == {"overflows": 0, "adds": 0, "clipped": clipped, "acc": None} and clipped == 2
    (q,), info = run_node(graph, node, [X], Datapath(rounding=rounding), False)   # counted without trace too
    assert q.tolist() == want and info["clipped"] == 2


@pytest.mark.parametrize("dp", [NATIVE, Datapath(rounding="half_even")], ids=["native", "exact"])
def test_quantize_and_dequantize_per_channel_on_a_middle_axis(dp):
    scales, zps = [0.25, 0.5, 2.0], [1, -3, 0]
    x = np.array([[[0.375, -0.375], [0.75, -1.25], [5.0, -3.0]],
                  [[40.0, -40.0], [70.0, -70.0], [300.0, 1.0]]], np.float32)          # batch 2, shape (3, 2)
    xs = TensorSpec("x", 0, True, (3, 2))
    qs = TensorSpec("q", 8, True, (3, 2), scales, zps, axis=0)
    graph, node = _graph("onnx_quantize", xs, qs)
    (q,), info = run_node(graph, node, [x], dp, True)
    # the reference along the channel axis (axis 0 of the per-sample shape = axis 1 of the batch)
    want = np.zeros((2, 3, 2), np.int64)
    clipped = 0
    for b in range(2):
        for c in range(3):
            for j in range(2):
                pre = _half_even(Fraction(float(x[b, c, j])) / Fraction(scales[c])) + zps[c]
                clipped += not -128 <= pre <= 127
                want[b, c, j] = min(127, max(-128, pre))
    assert q.tolist() == want.tolist() and info["clipped"] == clipped == 5
    graph, node = _graph("onnx_dequantize", TensorSpec("q", 8, True, (3, 2), scales, zps, axis=0),
                         TensorSpec("y", 0, True, (3, 2)))
    (y,), info = run_node(graph, node, [q], dp, True)
    assert y.dtype == np.float32
    assert y.tolist() == [[[float((int(want[b, c, j]) - zps[c]) * Fraction(scales[c])) for j in range(2)]
                           for c in range(3)] for b in range(2)]
    assert info == {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def test_float_readings_pass_values_through():
    graph, node = _graph("onnx_quantize", TensorSpec("x", 0, True, (3,)), TensorSpec("q", 8, True, (3,), 0.5, 1))
    x = np.array([[0.5, -1.0, 2.0]])
    (y,) = run_node_float(graph, node, [x])
    assert y.dtype == np.float64 and y.tolist() == [[0.5, -1.0, 2.0]]
    graph, node = _graph("onnx_dequantize", TensorSpec("q", 8, True, (3,), 0.5, 1), TensorSpec("y", 0, True, (3,)))
    (y,) = run_node_float(graph, node, [np.array([[0.5, -1.0, 2.0]], np.float32)])
    assert y.dtype == np.float64 and y.tolist() == [[0.5, -1.0, 2.0]]


def _requant_graph(op, attrs=None, y_bits=8, y_signed=False):
    return _graph(op, TensorSpec("a", 8, True, (6,), 0.5, 3), TensorSpec("b", y_bits, y_signed, (6,), 0.25, 10),
                  attrs)


A = np.array([[3, 10, -4, 127, -128, 0]], np.int8)


def _ref_requant(codes, lo_c=None, hi_c=None, y_bits=8, y_signed=False):
    lo, hi = _range(y_bits, y_signed)
    out = []
    for q in codes:
        r = (int(q) - 3) * Fraction(1, 2)
        if lo_c is not None:
            r = max(r, Fraction(lo_c))
        if hi_c is not None:
            r = min(r, Fraction(hi_c))
        out.append(min(hi, max(lo, _half_even(r / Fraction(1, 4)) + 10)))
    return out


@pytest.mark.parametrize("attrs", [{}, {"clip_min": -1.5}, {"clip_max": 2.25}, {"clip_min": 0.5, "clip_max": 4.0},
                                   {"clip_min": None, "clip_max": 20.0}])
def test_requantize_dequantizes_clips_in_float_and_quantizes(attrs):
    graph, node = _requant_graph("onnx_requantize", attrs)
    (b,), info = run_node(graph, node, [A], NATIVE, True)
    assert b.dtype == np.uint8
    assert b.tolist() == [_ref_requant(A[0], attrs.get("clip_min"), attrs.get("clip_max"))]
    assert info == {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}
    graph, node = _requant_graph("onnx_requantize", attrs, y_bits=16, y_signed=True)
    (b,), _ = run_node(graph, node, [A], NATIVE, False)
    assert b.dtype == np.int16
    assert b.tolist() == [_ref_requant(A[0], attrs.get("clip_min"), attrs.get("clip_max"), 16, True)]
    # the float reading clips the real values in float32 precision (no rounding onto the output grid)
    x = np.array([[-3.0, -1.25, 0.0, 1.0, 3.1, 30.0]])
    (y,) = run_node_float(graph, node, [x])
    lo_c, hi_c = attrs.get("clip_min"), attrs.get("clip_max")
    want = [min(hi_c, v) if hi_c is not None else v for v in
            [max(lo_c, v) if lo_c is not None else v for v in x[0].tolist()]]
    assert y.dtype == np.float64 and y.tolist() == [want]


def test_requantize_float_clip_is_the_float32_value_of_the_bound():
    graph, node = _requant_graph("onnx_requantize", {"clip_min": 0.1, "clip_max": 0.7})
    (y,) = run_node_float(graph, node, [np.array([[-1.0, 0.3, 2.0]])])
    assert y.tolist() == [[float(np.float32(0.1)), 0.3, float(np.float32(0.7))]]
    assert float(np.float32(0.1)) != 0.1 and float(np.float32(0.7)) != 0.7


def test_reinterpret_keeps_codes_and_maps_real_values():
    graph, node = _requant_graph("onnx_reinterpret")
    (b,), info = run_node(graph, node, [A], NATIVE, True)
    assert b is A and info == {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}
    # a real value r of a (codes r / 0.5 + 3) read as codes of b: ((r / 0.5 + 3) - 10) * 0.25
    x = np.array([[1.0, -0.5, 4.0]])
    (y,) = run_node_float(graph, node, [x])
    assert y.tolist() == [[float((Fraction(v) / Fraction(1, 2) + 3 - 10) * Fraction(1, 4)) for v in x[0].tolist()]]


def _expect_refused(op, specs, match, inputs=None, outputs=None):
    node = Node("bad", op, inputs or [specs[0].name], outputs or [specs[-1].name], {})
    with pytest.raises(ValueError, match=match):
        IntegerGraph(specs, [node], node.inputs, node.outputs, name="g")


def test_checks_name_the_node_and_the_tensor():
    f = TensorSpec("f", 0, True, (3,))
    q = TensorSpec("q", 8, True, (3,), 0.5, 1)
    pc = TensorSpec("p", 8, True, (3,), [0.5, 0.25, 1.0], [0, 0, 0], axis=0)
    pc_out = TensorSpec("o", 8, True, (3,), 0.5, 0)
    _expect_refused("onnx_quantize", [q, TensorSpec("r", 8, True, (3,), 0.5, 1)],
                    r"^node 'bad': onnx_quantize reads a float tensor$")
    _expect_refused("onnx_quantize", [f, TensorSpec("g", 0, True, (3,))],
                    r"^node 'bad' \(onnx_quantize\): tensor 'g' must be an integer tensor")
    _expect_refused("onnx_dequantize", [q, TensorSpec("r", 8, True, (3,), 0.5, 1)],
                    r"^node 'bad': onnx_dequantize writes a float tensor$")
    _expect_refused("onnx_dequantize", [TensorSpec("g", 0, True, (3,)), f],
                    r"^node 'bad' \(onnx_dequantize\): tensor 'g' must be an integer tensor")
    for op in ("onnx_requantize", "onnx_reinterpret"):
        _expect_refused(op, [pc, pc_out], rf"^node 'bad' \({op}\): tensor 'p' must be an integer tensor with a "
                                          r"per-tensor scale")
        _expect_refused(op, [q, f], rf"^node 'bad' \({op}\): tensor 'f' must be an integer tensor")
        _expect_refused(op, [q, TensorSpec("q2", 8, True, (3,), 0.5, 1), pc_out],
                        rf"^node 'bad' \({op}\): needs one input and one output$", inputs=["q", "q2"])
    for op in ("onnx_quantize", "onnx_dequantize"):
        _expect_refused(op, [f, q, TensorSpec("q3", 8, True, (3,), 0.5, 1)],
                        rf"^node 'bad' \({op}\): needs one input and one output$", outputs=["q", "q3"])
    # per-channel quantize / dequantize are accepted
    for op, specs in (("onnx_quantize", [f, pc]), ("onnx_dequantize", [pc, f])):
        node = Node("ok", op, [specs[0].name], [specs[1].name], {})
        IntegerGraph(specs, [node], [specs[0].name], [specs[1].name], name="g")


def test_requantize_onto_a_code_narrower_than_its_dtype_saturates_to_the_code_range():
    # a 4-bit output held in int8: MLAS saturates to int8, the code must still lie in [-8, 7] (it did not)
    graph, node = _graph("onnx_requantize", TensorSpec("a", 8, True, (6,), 0.5, 3),
                         TensorSpec("b", 4, True, (6,), 0.25, -2))
    (b,), _ = run_node(graph, node, [A], NATIVE, False)
    want = [min(7, max(-8, _half_even((int(q) - 3) * Fraction(1, 2) / Fraction(1, 4)) - 2)) for q in A[0]]
    assert b.dtype == np.int8 and b.tolist() == [want] == [[-2, 7, -8, 7, -8, -8]]

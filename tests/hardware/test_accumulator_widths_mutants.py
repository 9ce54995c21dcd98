"""accumulator_widths (``fxpsim/hardware/accumulator_widths.py``) against independent models: every column of every
row (node, op, K, the three FINN widths, the observed width, the weights' range) on hand-built graphs of each
kind the module reads -- core ``fully_connected`` / ``conv2d`` nodes with zero points on both operands, QONNX
``MatMul`` / ``Conv`` (strides, dilations, asymmetric pads, an input zero point; a grouped conv refused), and
hls4ml Dense / Conv2D whose ``accum_t`` rounds the products.

The models, written here: a width is the smallest ``n`` whose ``n``-bit range (unsigned when the range starts at
0 or above, else two's complement) holds the range, found by counting up; FINN's weight rule is the max / min of
the linear form over every corner of the input box (brute-force enumeration); the observed width is the range of
every running partial sum (the empty sum 0 included) of per-output Python-int loops in the documented order;
hls4ml's rounded products are Fractions rounded by the mode's definition. The float32 column is pinned where
float32 is exact (values below 2^24: it must equal the exact rule) and, where it is not, by values derived by
hand in the comments.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from fxpsim.graph.ir import IntegerGraph, Node, TensorSpec
from fxpsim.hardware.accumulator_widths import accumulator_widths, finn_width, matvec_range


# ----------------------------------------------------------------------------------------- the models
def width_model(lo: int, hi: int) -> int:
    """Smallest n >= 1 whose n-bit range holds [lo, hi]: unsigned when lo >= 0, else two's complement."""
    n = 1
    while True:
        if lo >= 0 and hi <= (1 << n) - 1:
            return n
        if lo < 0 and -(1 << (n - 1)) <= lo and hi <= (1 << (n - 1)) - 1:
            return n
        n += 1


def signed_width_model(lo: int, hi: int) -> int:
    n = 1
    while not (-(1 << (n - 1)) <= lo and hi <= (1 << (n - 1)) - 1):
        n += 1
    return n


def corner_range(cols, x_lo: int, x_hi: int) -> tuple[int, int]:
    """min / max over outputs and over every input vector in {x_lo, x_hi}^K of sum_k w_k x_k (cols: [outputs][K])."""
    lo = hi = None
    for col in cols:
        for xs in itertools.product((x_lo, x_hi), repeat=len(col)):
            s = sum(int(w) * x for w, x in zip(col, xs))
            lo = s if lo is None else min(lo, s)
            hi = s if hi is None else max(hi, s)
    return lo, hi


def datatype_range(k: int, w_lo: int, w_hi: int, x_lo: int, x_hi: int) -> tuple[int, int]:
    """Every weight at one end of its datatype: K times the extreme corner product."""
    p = [w * x for w in (w_lo, w_hi) for x in (x_lo, x_hi)]
    return k * min(p), k * max(p)


def running_range(seqs) -> tuple[int, int]:
    """Smallest and largest running sum (0 included) over sequences of products."""
    lo = hi = 0
    for seq in seqs:
        s = 0
        for p in seq:
            s += p
            lo, hi = min(lo, s), max(hi, s)
    return lo, hi


# ----------------------------------------------------------------------------------------- finn_width, matvec_range
def test_finn_width_against_counting_up():
    ranges = [(a, b) for a in range(-40, 41) for b in range(a, 41)]
    for n in (7, 8, 15, 16, 24, 25, 31, 32, 62, 63):
        p = 1 << n
        ranges += [(0, p - 1), (0, p), (0, p + 1), (1, p - 1), (-p, p - 1), (-p, p), (-p - 1, p - 1),
                   (-p - 1, 0), (-1, p - 1), (-1, p), (-p, -1), (-p, 0)]
    for a, b in ranges:
        assert finn_width(a, b) == width_model(a, b), (a, b)
    # a few by hand: the unsigned 0..0 and 0..1 take one bit; a start at 0 stays unsigned
    assert [finn_width(0, 0), finn_width(0, 1), finn_width(0, 5), finn_width(0, 8), finn_width(-8, 7),
            finn_width(-9, 0), finn_width(-1, 7), finn_width(-1, 8)] == [1, 1, 3, 4, 4, 5, 4, 5]
    # numpy integers and int64 extremes are read as Python ints
    assert finn_width(np.int64(-(2 ** 63)), np.int64(2 ** 63 - 1)) == 64
    assert finn_width(np.int32(0), np.int64(2 ** 63 - 1)) == 63


def test_matvec_range_against_corner_enumeration():
    rng = np.random.default_rng(7)
    for trial in range(30):
        k, m = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        w = rng.integers(-9, 10, (k, m))
        x_lo = int(rng.integers(-20, 5))
        x_hi = x_lo + int(rng.integers(0, 30))
        assert matvec_range(w, x_lo, x_hi) == corner_range(w.T.tolist(), x_lo, x_hi), (w.tolist(), x_lo, x_hi)
    # Python ints beyond int64 and beyond float64's 53 bits: (2^40 + 1)(2^30 + 1) has 71 significant bits
    w = np.array([[2 ** 40 + 1, -(2 ** 40)], [2 ** 40 + 1, 1], [2 ** 40 + 1, 0]], np.int64)
    x = 2 ** 30 + 1
    lo, hi = matvec_range(w, -x, x)
    assert (lo, hi) == corner_range(w.T.tolist(), -x, x) == (-3 * (2 ** 40 + 1) * x, 3 * (2 ** 40 + 1) * x)
    assert type(lo) is int and type(hi) is int


# ----------------------------------------------------------------------------------------- core fully_connected
def _fc_graph(w_codes, w_zp, x_bits=8, x_zp=3, w_bits=8, w_signed=False, bias=False, x_signed=True):
    w_codes = np.asarray(w_codes)
    o, k = w_codes.shape
    wdt = {(8, False): np.uint8, (8, True): np.int8, (32, True): np.int32, (16, True): np.int16}[(w_bits, w_signed)]
    tensors = [TensorSpec("x", x_bits, x_signed, (k,), 0.5, x_zp),
               TensorSpec("w", w_bits, w_signed, scale=[0.25] * o if o > 1 else 0.25,
                          zero_point=w_zp, axis=0 if o > 1 else None, data=w_codes.astype(wdt)),
               TensorSpec("y", 32, True, (o,), 0.125, 0)]
    ins = ["x", "w"]
    if bias:
        tensors.append(TensorSpec("b", 32, True, scale=0.125, data=np.arange(o, dtype=np.int32) * 1000))
        ins.append("b")
    return IntegerGraph(tensors, [Node("fc", "fully_connected", ins, ["y"])], ["x"], ["y"])


def _check_fc(g, x=None):
    """Every column of the one row of a core FC graph against the models."""
    xs, ws = g.tensors["x"], g.tensors["w"]
    zx = int(xs.zero_point[0])
    x_lo, x_hi = xs.code_range[0] - zx, xs.code_range[1] - zx
    zw = [int(v) for v in np.broadcast_to(ws.zero_point, (ws.data.shape[0],))]
    w = [[int(v) - zw[o] for v in row] for o, row in enumerate(ws.data.tolist())]      # [O][K], offset
    k = len(w[0])
    w_lo, w_hi = ws.code_range[0] - max(zw), ws.code_range[1] - min(zw)
    rows = accumulator_widths(g, x)
    assert len(rows) == 1
    r = rows[0]
    span = corner_range(w, x_lo, x_hi)
    assert (r.node, r.op, r.k) == ("fc", "fully_connected", k)
    assert r.weights_range == span
    assert r.finn_weights == width_model(*span)
    assert r.finn_datatypes == width_model(*datatype_range(k, w_lo, w_hi, x_lo, x_hi))
    if x is None:
        assert r.observed is None
    else:
        seqs = [[(int(xv) - zx) * wv for xv, wv in zip(sample, w[o])] for sample in np.asarray(x).tolist()
                for o in range(len(w))]
        assert r.observed == signed_width_model(*running_range(seqs))
    return r


def test_fully_connected_with_zero_points_on_both_operands():
    # uint8 weights, per-channel zero points: offsets -128 .. 127 around each; entries of offset exactly 1
    zw = [128, 120, 131]
    off = np.array([[1, 1, 1, 1], [1, -2, 50, 3], [-100, 2, 1, -7]])
    w = off + np.array(zw)[:, None]
    g = _fc_graph(w, zw)
    r = _check_fc(g)
    assert r.finn_float32 == r.finn_weights                # every value below 2^24: float32 is exact
    x = np.array([[-128, 127, 0, 5], [127, 127, 127, 127], [-128, -128, -128, -128], [3, 3, 3, 3]], np.int8)
    r2 = _check_fc(g, x)
    assert r2.finn_float32 == r.finn_float32
    # by hand: x offsets -131 .. 124; output 2 ([-100, 2, 1, -7]) holds both ends of the range
    assert r.weights_range == (-(100 + 7) * 124 - 3 * 131, 100 * 131 + 3 * 124 + 7 * 131)
    # the optional bias input does not count (FINN leaves it out); an absent one may be named ""
    assert _check_fc(_fc_graph(w, zw, bias=True)).finn_weights == r.finn_weights
    g3 = IntegerGraph(list(g.tensors.values()), [Node("fc", "fully_connected", ["x", "w", ""], ["y"])], ["x"], ["y"])
    assert _check_fc(g3, x) == r2


def test_fully_connected_float32_column_where_float32_is_exact():
    """Small ranges, so float32 is exact: the float32 column is FINN's rule itself; each output's range is
    different, so taking the min / max over the wrong axis, or of the total, changes the width."""
    rng = np.random.default_rng(3)
    for trial in range(12):
        o, k = int(rng.integers(2, 4)), int(rng.integers(1, 5))
        off = rng.integers(-5, 6, (o, k))
        off[0, 0] = 1                                   # a weight of exactly 1
        zw = [int(v) for v in rng.integers(100, 150, o)]
        g = _fc_graph(off + np.array(zw)[:, None], zw, x_zp=int(rng.integers(-20, 20)))
        r = _check_fc(g)
        assert r.finn_float32 == r.finn_weights, (off.tolist(), zw)
    # hand-picked: one output only positive, one only negative; unsigned and signed ends of the rule
    for off, x_zp, want in [([[1, 1, 1]], -128, 3 * 255), ([[1], [-1]], -128, None), ([[2], [3]], 127, None)]:
        off = np.array(off)
        zw = [128] * len(off)
        g = _fc_graph(off + 128, zw if len(off) > 1 else 128, x_zp=x_zp)
        r = _check_fc(g)
        assert r.finn_float32 == r.finn_weights
        if want is not None:
            assert r.weights_range == (0, want) and r.finn_weights == 10    # 765 unsigned: 10 bits


def test_finn_rule_unsigned_boundaries_in_float32():
    """One output, x in [0, 255] (x_zp = -128 on int8 codes), one weight w: the range [0, 255 w]; at
    255 w = 2^n - 1 the rule gives n, at 2^n it gives n + 1 (exact, below 2^24 both in float32 and integers)."""
    for w, want in [(1, 8), (2, 9), (3, 10), (4, 10), (5, 11)]:        # 255, 510, 765, 1020, 1275
        g = _fc_graph(np.array([[w + 128]]), 128, x_zp=-128)
        r = _check_fc(g)
        assert r.weights_range == (0, 255 * w) and r.finn_weights == want == r.finn_float32
    # x offsets [-255, 0] (int8 codes, zero point 127) and weights -1, -1: the range [0, 510]
    g = _fc_graph(np.array([[127, 127]]), 128, x_zp=127)
    r = _check_fc(g)
    assert r.weights_range == (0, 510) and r.finn_weights == r.finn_float32 == 9
    # a 1-bit unsigned input {0, 1}: ranges ending exactly at 2^n - 1, 2^n and 2^n + 1 (weights as given)
    for w, want in [([3, 4], 3), ([3, 5], 4), ([4, 5], 4), ([1, 0], 1)]:
        r = _check_fc(_fc_graph(np.array([w]), 0, x_bits=1, x_zp=0, x_signed=False, w_bits=8, w_signed=True))
        assert r.weights_range == (0, sum(w)) and r.finn_weights == want == r.finn_float32, w


def test_all_zero_weights_take_one_bit_in_the_float32_column_too():
    """Weights all 0: the range [0, 0]. finn_width gives 1 bit (at least one), and float32 is exact there, so the
    float32 column must say 1 as well (it said 0: FINN's ceil(log2(0 + 1)) without the floor of one bit)."""
    for x_signed in (False, True):
        r = _check_fc(_fc_graph(np.array([[0, 0], [0, 0]]), [0, 0], x_bits=1, x_zp=0, x_signed=x_signed,
                                w_bits=8, w_signed=True))
        assert r.weights_range == (0, 0) and r.finn_weights == 1 == r.finn_float32


def test_finn_float32_column_where_float32_is_a_bit_short():
    """A 1-bit input and weights [2^25, 1]: the one inexact step is 2^25 + 1, which float32 (step 4 above 2^25)
    rounds to 2^25 whatever the summation order (two terms).

    Unsigned input {0, 1}: the exact range [0, 2^25 + 1] needs 26 bits; float32: ceil(log2(2^25 + 1)) with
    2^25 + 1 -> 2^25 is 25.  Signed input {-1, 0}: the exact range [-2^25 - 1, 0] needs 27 bits (two's
    complement: 2^25 + 1 > 2^25); float32: ceil(log2(2^25)) + 1 = 26.  One bit short both times (finn#1517)."""
    w = np.array([[1 << 25, 1]])
    r = _check_fc(_fc_graph(w, 0, x_bits=1, x_zp=0, x_signed=False, w_bits=32, w_signed=True))
    assert r.weights_range == (0, (1 << 25) + 1) and r.finn_weights == 26 and r.finn_float32 == 25
    r = _check_fc(_fc_graph(w, 0, x_bits=1, x_zp=0, x_signed=True, w_bits=32, w_signed=True))
    assert r.weights_range == (-(1 << 25) - 1, 0) and r.finn_weights == 27 and r.finn_float32 == 26


# ----------------------------------------------------------------------------------------- core conv2d
def _conv_graph(w_off, zw, x_hw, stride, dilation, padding, x_zp=-5):
    o, kh, kw, c = w_off.shape
    tensors = [TensorSpec("x", 8, True, x_hw + (c,), 0.5, x_zp),
               TensorSpec("w", 8, False, scale=[0.25] * o, zero_point=zw, axis=0,
                          data=(w_off + np.array(zw)[:, None, None, None]).astype(np.uint8))]
    ih, iw = x_hw
    (pt, pb), (pl, pr) = padding
    oh = (ih + pt + pb - ((kh - 1) * dilation[0] + 1)) // stride[0] + 1
    ow = (iw + pl + pr - ((kw - 1) * dilation[1] + 1)) // stride[1] + 1
    tensors.append(TensorSpec("y", 32, True, (oh, ow, o), 0.125, 0))
    node = Node("cv", "conv2d", ["x", "w"], ["y"], {"stride": stride, "dilation": dilation, "padding": padding})
    return IntegerGraph(tensors, [node], ["x"], ["y"]), (oh, ow)


def _conv_products(xv, wv, x_dims, w_dims, out_hw, stride, dilation, pad_before):
    """Per sample, output position and channel (in that order), the products ``xv(n, ch, h, w) * wv(q, ch, a, b)``
    in (kh, kw, c) order, a padded tap's input 0: plain Python loops."""
    n_s, c, h, w = x_dims
    o, kh, kw = w_dims
    seqs = []
    for n in range(n_s):
        for i in range(out_hw[0]):
            for j in range(out_hw[1]):
                for q in range(o):
                    seq = []
                    for a in range(kh):
                        for b in range(kw):
                            hi_ = i * stride[0] - pad_before[0] + a * dilation[0]
                            wi_ = j * stride[1] - pad_before[1] + b * dilation[1]
                            for ch in range(c):
                                v = xv(n, ch, hi_, wi_) if 0 <= hi_ < h and 0 <= wi_ < w else 0
                                seq.append(v * wv(q, ch, a, b))
                    seqs.append(seq)
    return seqs


def test_conv2d_strided_dilated_padded_with_zero_points():
    rng = np.random.default_rng(11)
    o, kh, kw, c = 3, 2, 3, 2
    w_off = rng.integers(-6, 7, (o, kh, kw, c))
    zw = [128, 100, 140]
    stride, dilation, padding = (2, 1), (1, 2), ((1, 0), (2, 1))
    g, (oh, ow) = _conv_graph(w_off, zw, (5, 7), stride, dilation, padding)
    x = rng.integers(-128, 128, (2, 5, 7, c)).astype(np.int8)
    x[1] = 127
    zx = -5
    rows = accumulator_widths(g, x)
    assert len(rows) == 1
    r = rows[0]
    cols = [w_off[q].reshape(-1).tolist() for q in range(o)]       # (kh, kw, c) order, as the layout says
    x_lo, x_hi = -128 - zx, 127 - zx
    span = corner_range(cols, x_lo, x_hi)
    assert (r.node, r.op, r.k) == ("cv", "conv2d", kh * kw * c)
    assert r.weights_range == span and r.finn_weights == width_model(*span) == r.finn_float32
    assert r.finn_datatypes == width_model(*datatype_range(kh * kw * c, 0 - max(zw), 255 - min(zw), x_lo, x_hi))
    # observed: per output position and channel, the products in (kh, kw, c) order, padded taps 0
    seqs = _conv_products(lambda n, ch, h, w: int(x[n, h, w, ch]) - zx, lambda q, ch, a, b: int(w_off[q, a, b, ch]),
                          (2, c, 5, 7), (o, kh, kw), (oh, ow), stride, dilation, (padding[0][0], padding[1][0]))
    assert r.observed == signed_width_model(*running_range(seqs))
    assert accumulator_widths(g)[0].observed is None


# ----------------------------------------------------------------------------------------- QONNX MatMul / Conv
onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.qonnx.importer import import_qonnx  # noqa: E402

D = "qonnx.custom_op.general"
F32 = np.float32


class _Model:
    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def c(self, arr):
        name = f"c{self.k}"
        self.k += 1
        self.inits.append(numpy_helper.from_array(np.asarray(arr, F32), name))
        return name

    def node(self, op, ins, out, domain="", **attrs):
        self.nodes.append(helper.make_node(op, ins, [out], name=f"n{len(self.nodes)}_{op}", domain=domain, **attrs))
        return out

    def quant(self, x, scale, zp, bw, out, signed=1):
        return self.node("Quant", [x, self.c(scale), self.c(zp), self.c(bw)], out, D, signed=signed, narrow=0,
                         rounding_mode="ROUND")

    def build(self, in_shape):
        g = helper.make_graph(self.nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(D, 1)])


def test_qonnx_matmul_with_an_input_zero_point():
    """x: 5-bit signed codes with zero point 3 (offsets -19 .. 12); weights INT4 codes [K 4, M 3]."""
    wc = np.array([[1, -8, 7], [1, 3, 0], [1, -1, 2], [1, 5, -6]])
    m = _Model()
    m.quant("x", F32(0.5), 3, 5, "q0")
    m.node("MatMul", ["q0", m.quant(m.c(wc * 0.25), F32(0.25), 0, 4, "wq")], "y")
    net = import_qonnx(m.build([2, 4]))
    # codes -13 (offset -16) and 3 (offset 0); read as code + zero point they would be -10 and 6, whose
    # partial sums stay within 8 bits, while -16 * -8 = 128 needs 9
    x = np.array([[-8.0, -8.0, -8.0, -8.0], [0.0, 0.0, 0.0, 0.0]], F32)
    _, _, kept = net.run(x, keep=True)
    (node,) = [nd for nd in net.nodes if nd.op == "qonnx_matmul"]
    codes = np.asarray(kept[node.inputs[0]]).tolist()
    r = accumulator_widths(net, x)
    assert len(r) == 1
    r = r[0]
    x_lo, x_hi = -16 - 3, 15 - 3
    cols = wc.T.tolist()
    span = corner_range(cols, x_lo, x_hi)
    assert (r.node, r.op, r.k) == (node.name, "qonnx_matmul", 4)
    assert r.weights_range == span and r.finn_weights == width_model(*span) == r.finn_float32
    assert r.finn_datatypes == width_model(*datatype_range(4, -8, 7, x_lo, x_hi))
    assert codes == [[-13] * 4, [3] * 4]
    seqs = [[(int(cv) - 3) * w for cv, w in zip(sample, col)] for sample in codes for col in cols]
    assert r.observed == signed_width_model(*running_range(seqs)) == 9
    assert signed_width_model(*running_range([[(int(cv) + 3) * w for cv, w in zip(sample, col)]
                                              for sample in codes for col in cols])) == 8
    assert accumulator_widths(net)[0].observed is None


_CW = np.random.default_rng(61).integers(-4, 4, (3, 2, 2, 3))          # O 3, C 2, kh 2, kw 3 (INT3 codes)


def _qonnx_conv(group=1, zp=-2):
    m = _Model()
    m.quant("x", F32(0.25), zp, 6, "q0")
    w = _CW if group == 1 else np.concatenate([_CW[:, :1]] * 1, axis=1)[:2]
    wq = m.quant(m.c(w * 0.5), F32(0.5), 0, 3, "wq")
    m.node("Conv", ["q0", wq], "y", kernel_shape=[2, 3], pads=[1, 2, 0, 1], strides=[2, 1], dilations=[1, 2],
           group=group)
    return m.build([2, 2, 5, 6])


def test_qonnx_conv_strided_dilated_padded_with_an_input_zero_point():
    net = import_qonnx(_qonnx_conv())
    rng = np.random.default_rng(62)
    x = (rng.integers(-32, 32, (2, 2, 5, 6)) * 0.25).astype(F32)
    x[1, :, :, :] = 7.75
    _, _, kept = net.run(x, keep=True)
    (node,) = [nd for nd in net.nodes if nd.op == "qonnx_conv"]
    codes = np.asarray(kept[node.inputs[0]]).astype(int)             # [N, C, H, W] codes
    zp = -2
    rows = accumulator_widths(net, x)
    assert len(rows) == 1
    r = rows[0]
    o, c, kh, kw = _CW.shape
    cols = [[int(_CW[q, ch, a, b]) for a in range(kh) for b in range(kw) for ch in range(c)] for q in range(o)]
    x_lo, x_hi = -32 - zp, 31 - zp
    span = corner_range(cols, x_lo, x_hi)
    assert (r.node, r.op, r.k) == (node.name, "qonnx_conv", c * kh * kw)
    assert r.weights_range == span and r.finn_weights == width_model(*span) == r.finn_float32
    assert r.finn_datatypes == width_model(*datatype_range(c * kh * kw, -4, 3, x_lo, x_hi))
    (pt, pl, pb, pr), (sh, sw), (dh, dw) = (1, 2, 0, 1), (2, 1), (1, 2)
    oh = (5 + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
    ow = (6 + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
    seqs = _conv_products(lambda n, ch, h, w: int(codes[n, ch, h, w]) - zp, lambda q, ch, a, b: int(_CW[q, ch, a, b]),
                          (2, c, 5, 6), (o, kh, kw), (oh, ow), (sh, sw), (dh, dw), (pt, pl))
    assert r.observed == signed_width_model(*running_range(seqs))
    assert accumulator_widths(net)[0].observed is None


def test_qonnx_grouped_conv_observed_is_refused_by_name_the_finn_columns_are_not():
    net = import_qonnx(_qonnx_conv(group=2))
    (node,) = [nd for nd in net.nodes if nd.op == "qonnx_conv"]
    (r,) = accumulator_widths(net)                        # without data: no observed, no refusal
    w = _CW[:2, :1]                                       # O 2, C/g 1, 2 x 3
    cols = [[int(w[q, 0, a, b]) for a in range(2) for b in range(3)] for q in range(2)]
    span = corner_range(cols, -32 + 2, 31 + 2)
    assert r.k == 6 and r.weights_range == span and r.finn_weights == width_model(*span)
    x = np.zeros((1, 2, 5, 6), F32)
    with pytest.raises(ValueError, match=f"node {node.name!r}: observed partial sums of grouped convolutions are "
                                         "not modelled"):
        accumulator_widths(net, x)


# ----------------------------------------------------------------------------------------- hls4ml rounded products
def _round(v: Fraction, q: str) -> int:
    f = math.floor(v)
    frac = v - f
    if q == "AP_TRN":
        return f
    if frac != Fraction(1, 2):
        return f + (frac > Fraction(1, 2))
    return {"AP_RND": f + 1, "AP_RND_CONV": f + (f % 2)}[q]


def _hls4ml_graph(layers, weights, in_shape, name):
    from fxpsim.frontends.hls4ml import Hls4mlModel
    return Hls4mlModel.from_layers(layers, weights).to_graph(in_shape, name=name)


# x: ap_fixed<6,3> (frac 3, codes -32..31); weights ap_fixed<6,1> (frac 5); accum frac 4 < 3 + 5: rounds
_ACC = "ap_fixed<14,10,AP_RND,AP_SAT,0>"
_WT = "ap_fixed<6,1,AP_RND,AP_SAT,0>"
_W1 = np.array([[17, -32, 5], [31, 1, -9], [-3, 11, 0], [8, -8, 23]]) / 32.0     # [n_in 4, n_out 3] codes / 2^5
_W2 = np.array([[1, -2], [3, 4], [-5, 6]]) / 32.0


def _dense_layers(second_exact=True):
    layers = [{"name": "x", "class": "Input", "result_t": "ap_fixed<6,3>"},
              {"name": "fc1", "class": "Dense", "result_t": "ap_fixed<12,8,AP_RND,AP_SAT,0>", "n_in": 4, "n_out": 3,
               "accum_t": _ACC, "weight_t": _WT, "bias_t": "ap_fixed<8,4>"},
              {"name": "fc2", "class": "Dense", "result_t": "ap_fixed<20,12>", "n_in": 3, "n_out": 2,
               "accum_t": "ap_fixed<24,11>" if second_exact else _ACC, "weight_t": _WT, "bias_t": "ap_fixed<8,4>"}]
    weights = {"fc1": {"weight": _W1, "bias": np.array([0.5, -1.0, 2.0])},
               "fc2": {"weight": _W2, "bias": np.array([0.25, 0.0])}}
    return layers, weights


def _rounded_model(x_lo, x_hi, d_shift, q):
    """Per weight code: its rounded products' smaller / larger value over inputs at the range's ends."""
    def ends(wv):
        vals = [_round(Fraction(e * wv) * Fraction(2) ** d_shift, q) for e in (x_lo, x_hi)]
        return min(vals), max(vals)
    return ends


def test_hls4ml_dense_with_rounded_products_then_an_exact_dense():
    layers, weights = _dense_layers()
    g = _hls4ml_graph(layers, weights, (4,), "dense_rnd")
    x = np.array([[3.875, -4.0, 0.125, 1.5], [-4.0, -4.0, 3.875, 3.875], [0.0, 0.375, -0.625, 2.0]])
    rows = accumulator_widths(g, x)
    assert [r.node for r in rows] == ["fc1", "fc2"] and [r.op for r in rows] == ["hls4ml_dense"] * 2
    r = rows[0]
    wc = (_W1 * 32).astype(int)
    ends = _rounded_model(-32, 31, 4 - 3 - 5, "AP_RND")      # accum frac 4, x frac 3, w frac 5
    sums = [(sum(ends(int(wc[k, j]))[0] for k in range(4)), sum(ends(int(wc[k, j]))[1] for k in range(4)))
            for j in range(3)]
    span = (min(s[0] for s in sums), max(s[1] for s in sums))
    assert r.k == 4 and r.weights_range == span and r.finn_weights == width_model(*span)
    dt = [4 * ends(c)[i] for c in (-32, 31) for i in (0, 1)]
    assert r.finn_datatypes == width_model(min(dt), max(dt))
    # float32 is exact on these small sums: FINN's rule on the per-output sums of smaller / larger products
    assert r.finn_float32 == width_model(*span)
    # observed: running sums of the rounded products of the actual codes, without the bias
    codes = (x * 8).astype(int)
    seqs = [[_round(Fraction(int(xv) * int(wc[k, j])) * Fraction(2) ** (4 - 8), "AP_RND")
             for k, xv in enumerate(sample)] for sample in codes.tolist() for j in range(3)]
    assert r.observed == signed_width_model(*running_range(seqs))
    # the exact second Dense is still reported (the view's FINN rule on its integer products)
    _, _, kept = g.run(x, keep=True)
    src = g.node("fc2").inputs[0]
    xs = g.tensors[src]
    w2 = g.tensors[g.node("fc2").inputs[1]].data.astype(int)          # [n_in 3, n_out 2]
    zx = int(xs.zero_point[0])
    # its products, exact, sit in the accumulator's LSB: ap_fixed<24,11> has 13 fraction bits, x (fc1's
    # ap_fixed<12,8>) 4 and the weights 5, so each product counts 2^(13 - 4 - 5) = 16 accumulator LSBs
    assert (zx, xs.code_range) == (0, (-2048, 2047))
    w2 = w2 * 16
    span2 = corner_range(w2.T.tolist(), -2048, 2047)
    r2 = rows[1]
    assert r2.k == 3 and r2.weights_range == span2 and r2.finn_weights == width_model(*span2)
    seqs2 = [[int(v) * int(w2[k, j]) for k, v in enumerate(sample)]
             for sample in np.asarray(kept[src]).tolist() for j in range(2)]
    assert r2.observed == signed_width_model(*running_range(seqs2))
    # without data: no observed anywhere
    assert [r.observed for r in accumulator_widths(g)] == [None, None]


def test_hls4ml_float32_column_of_rounded_products_per_output():
    """Two rounded Dense layers; per output the sums differ, so the min / max must be over outputs of the
    per-output sums (exact here: below 2^24)."""
    layers, weights = _dense_layers(second_exact=False)
    g = _hls4ml_graph(layers, weights, (4,), "dense_rnd2")
    for r in accumulator_widths(g):
        assert r.finn_float32 == r.finn_weights == width_model(*r.weights_range), r.node
        assert r.op == "hls4ml_dense"


def test_hls4ml_padded_conv_with_rounded_products():
    rng = np.random.default_rng(71)
    wc = rng.integers(-32, 32, (2, 3, 2, 2))                   # kh 2, kw 3, C 2, F 2 codes of ap_fixed<6,1>
    layers = [{"name": "x", "class": "Input", "result_t": "ap_fixed<6,3>"},
              {"name": "cv", "class": "Conv2D", "result_t": "ap_fixed<12,8,AP_RND,AP_SAT,0>", "in_height": 4,
               "in_width": 5, "n_chan": 2, "filt_height": 2, "filt_width": 3, "n_filt": 2, "stride_height": 1,
               "stride_width": 2, "pad_top": 1, "pad_bottom": 0, "pad_left": 2, "pad_right": 1, "out_height": 4,
               "out_width": 3, "accum_t": "ap_fixed<14,10,AP_RND_CONV,AP_SAT,0>", "weight_t": _WT,
               "bias_t": "ap_fixed<8,4>"}]
    weights = {"cv": {"weight": wc / 32.0, "bias": np.array([1.0, -0.5])}}
    g = _hls4ml_graph(layers, weights, (4, 5, 2), "conv_rnd")
    x = (rng.integers(-32, 32, (2, 4, 5, 2)) / 8.0)
    rows = accumulator_widths(g, x)
    assert len(rows) == 1
    r = rows[0]
    assert (r.node, r.op, r.k) == ("cv", "hls4ml_conv2d", 12)
    codes = (x * 8).astype(int)
    seqs = []
    for n in range(2):
        for i in range(4):
            for j in range(3):
                for f in range(2):
                    seq = []
                    for a in range(2):
                        for b in range(3):
                            for ch in range(2):
                                hi_, wi_ = i - 1 + a, j * 2 - 2 + b
                                xv = int(codes[n, hi_, wi_, ch]) if 0 <= hi_ < 4 and 0 <= wi_ < 5 else 0
                                seq.append(_round(Fraction(xv * int(wc[a, b, ch, f])) * Fraction(2) ** -4,
                                                  "AP_RND_CONV"))
                    seqs.append(seq)
    assert r.observed == signed_width_model(*running_range(seqs))
    ends = _rounded_model(-32, 31, -4, "AP_RND_CONV")
    cols = [[int(wc[a, b, ch, f]) for a in range(2) for b in range(3) for ch in range(2)] for f in range(2)]
    sums = [(sum(ends(v)[0] for v in col), sum(ends(v)[1] for v in col)) for col in cols]
    span = (min(s[0] for s in sums), max(s[1] for s in sums))
    assert r.weights_range == span and r.finn_weights == width_model(*span) == r.finn_float32


@pytest.mark.parametrize("sign", [1, -1])
def test_hls4ml_unsigned_input_rounded_products_one_output_dominates(sign):
    """x: ap_ufixed<6,3> (codes 0..63); output 0 all large positive weights, output 1 all -1/32, output 2 mixed:
    the range's top comes from output 0 alone and is far above |bottom|, and the sums over the outputs of one
    input (the wrong axis) are much smaller than the sums over the inputs of one output."""
    wc = sign * np.array([[31, -1, 3], [31, -1, -4], [31, -1, 0], [31, -1, 2]])
    layers = [{"name": "x", "class": "Input", "result_t": "ap_ufixed<6,3>"},
              {"name": "fc1", "class": "Dense", "result_t": "ap_fixed<14,10,AP_RND,AP_SAT,0>", "n_in": 4,
               "n_out": 3, "accum_t": _ACC, "weight_t": _WT, "bias_t": "ap_fixed<8,4>"}]
    g = _hls4ml_graph(layers, {"fc1": {"weight": wc / 32.0, "bias": np.zeros(3)}}, (4,), "dense_u")
    x = np.array([[7.875, 7.875, 7.875, 7.875], [0.0, 1.5, 3.25, 0.125]])
    (r,) = accumulator_widths(g, x)
    ends = _rounded_model(0, 63, 4 - 3 - 5, "AP_RND")
    sums = [(sum(ends(int(wc[k, j]))[0] for k in range(4)), sum(ends(int(wc[k, j]))[1] for k in range(4)))
            for j in range(3)]
    span = (min(s[0] for s in sums), max(s[1] for s in sums))
    # by hand: 63 * 31 / 16 = 122.06 -> 122 per input of output 0: 488; 63 * -1 / 16 = -3.94 -> -4: -16
    # (negated: -122.06 -> -122 four times; the top is output 1's 4 * 4 = 16 and output 2's 0 + 16 + 0 + 0)
    assert span == ((-16, 488) if sign > 0 else (-488, 16))
    assert r.weights_range == span and r.finn_weights == width_model(*span) == 10 == r.finn_float32
    dt = [4 * ends(c)[i] for c in (-32, 31) for i in (0, 1)]
    assert r.finn_datatypes == width_model(min(dt), max(dt))
    codes = (x * 8).astype(int)
    seqs = [[_round(Fraction(int(xv) * int(wc[k, j])) * Fraction(2) ** (4 - 8), "AP_RND")
             for k, xv in enumerate(sample)] for sample in codes.tolist() for j in range(3)]
    assert r.observed == signed_width_model(*running_range(seqs))


# ------------------------------------------------------------------------------------ conv geometry, pixel by pixel
def _conv_seq_widths(pixels, h, w, taps, stride, dilation, pads, value, rest=0):
    """For each (row, col) of ``pixels``: the observed width of a one-channel conv whose input offsets are
    ``rest`` everywhere except ``value`` at that pixel. ``taps[a][b]``: the weights; pads (top, left, bottom,
    right); products in (kh, kw) order, padded taps 0."""
    kh, kw = len(taps), len(taps[0])
    pt, pl, pb, pr = pads
    oh = (h + pt + pb - ((kh - 1) * dilation[0] + 1)) // stride[0] + 1
    ow = (w + pl + pr - ((kw - 1) * dilation[1] + 1)) // stride[1] + 1
    out = []
    for (pi, pj) in pixels:
        seqs = []
        for i in range(oh):
            for j in range(ow):
                seq = []
                for a in range(kh):
                    for b in range(kw):
                        r, c = i * stride[0] - pt + a * dilation[0], j * stride[1] - pl + b * dilation[1]
                        xv = (value if (r, c) == (pi, pj) else rest) if 0 <= r < h and 0 <= c < w else 0
                        seq.append(xv * taps[a][b])
                seqs.append(seq)
        out.append(signed_width_model(*running_range(seqs)))
    return out


_TAPS = [[1, 2, 4], [8, -16, 31]]                       # INT6 codes: a width class per tap


def test_qonnx_conv_geometry_pixel_by_pixel():
    """One channel, one output channel, a 2 x 3 kernel whose taps are 1, 2, 4, 8, -16, 31: an input with one
    pixel at the highest code (the rest at the zero point, offset 0) makes the observed width name the largest
    tap that reaches that pixel -- so strides, dilations and each pad decide it. The model's widths under the
    wrong geometries differ (checked here), so a geometry lost on the way would be seen."""
    h, w, zp = 5, 6, -2
    stride, dilation, pads = (2, 1), (1, 2), (2, 1, 0, 1)             # ONNX pads: top, left, bottom, right
    m = _Model()
    m.quant("x", F32(0.25), zp, 6, "q0")
    wq = m.quant(m.c(np.array(_TAPS, F32).reshape(1, 1, 2, 3)), F32(1.0), 0, 6, "wq")
    m.node("Conv", ["q0", wq], "y", kernel_shape=[2, 3], pads=list(pads), strides=list(stride),
           dilations=list(dilation))
    net = import_qonnx(m.build([1, 1, h, w]))
    pixels = [(i, j) for i in range(h) for j in range(w)]
    value = 31 - zp                                                   # the highest code's offset
    want = _conv_seq_widths(pixels, h, w, _TAPS, stride, dilation, pads, value)
    t, l, b, r = pads
    for wrong in [((1, 1), dilation, pads), (stride, (1, 1), pads), (stride, dilation, (0, 0, 0, 0)),
                  (stride, dilation, (t, b, l, r)), ((1, 2), dilation, pads), (stride, (2, 1), pads),
                  (stride, dilation, (t, l, r, r)), (stride, dilation, (l, l, b, r)), (stride, dilation, (t, b, b, r))]:
        assert _conv_seq_widths(pixels, h, w, _TAPS, *wrong, value) != want, wrong
    got = []
    for (pi, pj) in pixels:
        x = np.full((1, 1, h, w), 0.0, F32)                       # real 0: code zp
        x[0, 0, pi, pj] = (31 - zp) * 0.25                        # code 31
        (r,) = accumulator_widths(net, x)
        got.append(r.observed)
    assert got == want


def test_core_conv2d_geometry_pixel_by_pixel():
    """The pixel-by-pixel check on a core conv2d (the MAC view's geometry: stride, dilation, explicit pads)."""
    h, w, zx = 5, 6, -5
    stride, dilation, pads = (2, 1), (1, 2), (2, 1, 0, 1)             # top, left, bottom, right
    tensors = [TensorSpec("x", 8, True, (h, w, 1), 0.5, zx),
               TensorSpec("w", 8, True, scale=0.25, data=np.array(_TAPS, np.int8).reshape(1, 2, 3, 1))]
    oh = (h + pads[0] + pads[2] - 2) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - 5) // stride[1] + 1
    tensors.append(TensorSpec("y", 32, True, (oh, ow, 1), 0.125, 0))
    node = Node("cv", "conv2d", ["x", "w"], ["y"], {"stride": stride, "dilation": dilation,
                                                    "padding": ((pads[0], pads[2]), (pads[1], pads[3]))})
    g = IntegerGraph(tensors, [node], ["x"], ["y"])
    pixels = [(i, j) for i in range(h) for j in range(w)]
    want = _conv_seq_widths(pixels, h, w, _TAPS, stride, dilation, pads, 127 - zx)
    assert _conv_seq_widths(pixels, h, w, _TAPS, (1, 1), (1, 1), (0, 0, 0, 0), 127 - zx) != want
    got = []
    for (pi, pj) in pixels:
        x = np.full((1, h, w, 1), zx, np.int8)
        x[0, pi, pj, 0] = 127
        got.append(accumulator_widths(g, x)[0].observed)
    assert got == want


def test_hls4ml_conv_pads_pixel_by_pixel():
    """The same for an hls4ml Conv2D whose accum_t rounds the products (frac 7 < 3 + 5: each product x w / 2,
    AP_TRN: floor): the pads decide which taps reach the border pixels."""
    h, w = 4, 5
    stride, pads = (1, 2), (1, 2, 0, 1)                              # top, left, bottom, right
    taps = [[4, 8, -16], [2, 31, -32]]
    layers = [{"name": "x", "class": "Input", "result_t": "ap_fixed<6,3>"},
              {"name": "cv", "class": "Conv2D", "result_t": "ap_fixed<16,8>", "in_height": h, "in_width": w,
               "n_chan": 1, "filt_height": 2, "filt_width": 3, "n_filt": 1, "stride_height": stride[0],
               "stride_width": stride[1], "pad_top": pads[0], "pad_bottom": pads[2], "pad_left": pads[1],
               "pad_right": pads[3], "out_height": (h + 1 - 2) // 1 + 1, "out_width": (w + 3 - 3) // 2 + 1,
               "accum_t": "ap_fixed<16,9,AP_TRN,AP_SAT,0>", "weight_t": _WT, "bias_t": "ap_fixed<8,4>"}]
    wts = np.array(taps, float).reshape(2, 3, 1, 1) / 32.0
    g = _hls4ml_graph(layers, {"cv": {"weight": wts, "bias": np.zeros(1)}}, (h, w, 1), "conv_pix")
    pixels = [(i, j) for i in range(h) for j in range(w)]
    rounded = [[math.floor(Fraction(31 * t, 2)) for t in row] for row in taps]      # x w 2^(7 - 3 - 5), floor
    want = _conv_seq_widths(pixels, h, w, rounded, stride, (1, 1), pads, 1)
    assert _conv_seq_widths(pixels, h, w, rounded, stride, (1, 1), (0, 0, 0, 0), 1) != want
    got = []
    for (pi, pj) in pixels:
        x = np.zeros((1, h, w, 1))
        x[0, pi, pj, 0] = 31 / 8.0
        (r,) = accumulator_widths(g, x)
        got.append(r.observed)
    assert got == want


def test_a_grouped_onnx_qlinear_conv_has_no_view_and_no_row(tmp_path):
    """An ONNX QLinearConv with 1 < group < C has no MAC view (``mac_operands`` gives None): accumulator_widths
    leaves it out rather than failing (a known limit: such a node gets no row)."""
    w = np.random.default_rng(0).integers(-5, 6, (4, 2, 2, 2)).astype(np.int8)      # O 4, C/g 2: group 2 of C 4
    inits = [numpy_helper.from_array(np.array(0.5, F32), "xs"), numpy_helper.from_array(np.array(3, np.int8), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.25, F32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"), numpy_helper.from_array(np.array(2.0, F32), "ys"),
             numpy_helper.from_array(np.array(0, np.int8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"], name="q"),
             helper.make_node("QLinearConv", ["q", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["c"], name="conv",
                              group=2),
             helper.make_node("DequantizeLinear", ["c", "ys", "yz"], ["y"], name="dq")]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3]),
          helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])]
    m = helper.make_model(helper.make_graph(nodes, "g", io[:1], io[1:], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "gconv.onnx"))
    import fxpsim
    g = fxpsim.import_model(str(tmp_path / "gconv.onnx"))
    assert [nd.op for nd in g.nodes if nd.op == "qlinear_conv"] == ["qlinear_conv"]
    assert accumulator_widths(g) == []
    x = np.zeros((1,) + tuple(g.tensors[g.inputs[0]].shape), F32)
    assert accumulator_widths(g, x) == []                 # with data too

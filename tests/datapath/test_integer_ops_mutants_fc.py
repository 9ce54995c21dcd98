"""Cases of fxpsim.datapath.integer_ops that mutation testing (tools/mutation/) found untested:
fully connected layers (every knob, every operand dtype, the fused int8 kernel and the general path),
TFLite's int8 ADD (its 65536-entry table and the numpy arithmetic, single and double rounding, ties)
and integer average pooling (explicit paddings, narrow accumulators), and the exact text of every
argument error of those kernels and of their shared validators.

Expected values come from the models written here from the layer definitions (Python integers and
``Fraction``, the accumulator model of ``tests/reference.py``, gemmlowp's SaturatingRoundingDoublingHighMul
and RoundingDivideByPOT written from their definitions) or from hand tables, never from fxpsim's helpers.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.core.fixed import Format
from fxpsim.datapath import conv_int8
from fxpsim.datapath.integer_ops import (
    IntegerResult, quantized_add, quantized_average_pool2d, quantized_fully_connected,
)
from fxpsim.datapath.requantize import Requantizer
from reference import (accumulate, accumulate_tree, overflow_int, ref_mbqm, ref_quantize_multiplier, ref_rdbpot,
                       ref_srdhm, ref_wrap32, round_fraction)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


# --------------------------------------------------------------------------- gemmlowp, from its definitions
# gemmlowp's SRDHM / RDBPOT / MultiplyByQuantizedMultiplier from their definitions: tests/reference.py
wrap32, srdhm, rdbpot, mbqm = ref_wrap32, ref_srdhm, ref_rdbpot, ref_mbqm


def f32(v: float) -> float:
    return float(np.float32(v))


def add_params(s1, s2, so, left_shift=20):
    """TFLite's ADD: S = 2 max(s1, s2); r_i = s_i / S; r_out = S / (2^L s_out), from float32 scales."""
    s1, s2, so = f32(s1), f32(s2), f32(so)
    twice = 2 * max(s1, s2)
    return [ref_quantize_multiplier(r) for r in (s1 / twice, s2 / twice, twice / ((1 << left_shift) * so))]


def ref_add_table(z1, z2, params, zo, lo, hi, rounding, left_shift=20, codes1=range(-128, 128),
                  codes2=range(-128, 128)):
    """TFLite int8 ADD for every pair (codes1 x codes2), as a nested list."""
    (m1, e1), (m2, e2), (mo, eo) = params
    v1 = [mbqm(wrap32((a - z1) << left_shift), m1, e1, rounding) for a in codes1]
    v2 = [mbqm(wrap32((b - z2) << left_shift), m2, e2, rounding) for b in codes2]
    return [[min(hi, max(lo, mbqm(wrap32(p + q), mo, eo, rounding) + zo)) for q in v2] for p in v1]


def add_all_int8(s1, z1, s2, z2, so, zo, **kw):
    """quantized_add on every int8 pair: a (256, 256) array, [a + 128, b + 128]."""
    codes = np.arange(-128, 128, dtype=np.int8)
    return quantized_add(codes[:, None], codes[None, :], scale1=s1, zp1=z1, scale2=s2, zp2=z2, out_scale=so,
                         out_zp=zo, **kw)


# --------------------------------------------------------------------------- ADD
def test_gemmlowp_model_hand_values():
    # the models above, against values worked out by hand
    assert srdhm(3 << 29, 1 << 30) == 3 << 28 and srdhm(-3, 1 << 30) == -1 and srdhm(3, 1 << 30) == 2
    assert srdhm(INT32_MIN, INT32_MIN) == INT32_MAX
    assert [rdbpot(v, 1) for v in (3, -3, 5, -5, 4, -4)] == [2, -2, 3, -3, 2, -2]
    assert mbqm(-3 << 17, 1 << 30, -17, "double") == -2 and mbqm(-3 << 17, 1 << 30, -17, "single") == -1
    assert ref_quantize_multiplier(0.25 + 2.0 ** -21) == ((1 << 30) + (1 << 11), -1)


# (s1, z1, s2, z2, s_out, z_out): every pair of int8 inputs, through the 65536-entry table
ADD_CASES = [
    (0.02, 3, 0.035, -7, 0.05, 4),                   # generic
    (0.5 + 2.0 ** -20, 0, 1.0, 0, 1.0, 0),           # input 1: RDBPOT ties (m1 = 2^30 + 2^11, e1 = -1)
    (1.0, 5, 0.5 + 2.0 ** -20, -9, 1.0, 2),          # input 2: the same ties
    (1.0, 0, 1.0, 0, 512.0, 0),                      # output: r_out = 2^-28, ties of (v1 + v2) / 2^28
    (1.0, -128, 1.0, 127, 512.0, -128),              # zero points at the int8 ends
    (0.00123, 67, 0.00587, -18, 0.02848, 4),          # left_shift 20 and 21 disagree here (2 pairs)
]


@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize("s1, z1, s2, z2, so, zo", ADD_CASES)
def test_add_every_int8_pair(s1, z1, s2, z2, so, zo, rounding):
    out = add_all_int8(s1, z1, s2, z2, so, zo, act_min=-128, act_max=127, rounding=rounding)
    want = ref_add_table(z1, z2, add_params(s1, s2, so), zo, -128, 127, rounding)
    assert out.dtype == np.int8 and out.shape == (256, 256)
    assert out.tolist() == want


def test_add_default_left_shift_is_20_and_left_shift_is_used():
    s1, z1, s2, z2, so, zo = ADD_CASES[-1]
    want20 = ref_add_table(z1, z2, add_params(s1, s2, so, 20), zo, -128, 127, "double", 20)
    want21 = ref_add_table(z1, z2, add_params(s1, s2, so, 21), zo, -128, 127, "double", 21)
    want12 = ref_add_table(z1, z2, add_params(s1, s2, so, 12), zo, -128, 127, "double", 12)
    assert want20 != want21 and want20 != want12              # the case separates them
    assert add_all_int8(s1, z1, s2, z2, so, zo).tolist() == want20
    assert add_all_int8(s1, z1, s2, z2, so, zo, left_shift=21).tolist() == want21
    assert add_all_int8(s1, z1, s2, z2, so, zo, left_shift=12).tolist() == want12
    # scales given as 0-d arrays (unhashable: the uncached parameter path) give the same table
    got = add_all_int8(np.array(s1), z1, np.array(s2), z2, np.array(so), zo, left_shift=12)
    assert got.tolist() == want12


def test_add_rounding_ties_hand_table():
    # s1 = s2 = 1, s_out = 512: v_i = (x_i - z_i) 2^19, y = (d1 + d2) / 2^9 rounded
    a = np.array([-128, -128, 0, 127, 1, -1], dtype=np.int8)
    b = np.array([-128, 0, -128, 1, 127, 0], dtype=np.int8)
    kw = dict(scale1=1.0, zp1=0, scale2=1.0, zp2=0, out_scale=512.0, out_zp=0)
    # d1 + d2 = -256, -128, -128, 128, 128, -1: exact -0.5 / -0.25 / 0.25 / 0
    assert quantized_add(a, b, **kw).tolist() == [-1, 0, 0, 0, 0, 0]
    assert quantized_add(a, b, rounding="single", **kw).tolist() == [0, 0, 0, 0, 0, 0]
    # with an int16 operand (numpy path, no table): the same arithmetic
    assert quantized_add(a.astype(np.int16), b, **kw).tolist() == [-1, 0, 0, 0, 0, 0]
    assert quantized_add(a.astype(np.int16), b, rounding="single", **kw).tolist() == [0, 0, 0, 0, 0, 0]


def _add_model(a, b, z1, z2, params, zo, lo, hi, rounding, left_shift=20):
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    (m1, e1), (m2, e2), (mo, eo) = params
    flat = [min(hi, max(lo, mbqm(wrap32(mbqm(wrap32((int(p) - z1) << left_shift), m1, e1, rounding)
                                        + mbqm(wrap32((int(q) - z2) << left_shift), m2, e2, rounding)),
                                 mo, eo, rounding) + zo))
            for p, q in zip(a.ravel(), b.ravel())]
    return np.array(flat, dtype=np.int64).reshape(a.shape)


ADD_DTYPES = [
    # (x1, x2, out): every combination that is not int8 x int8 -> int8 runs in numpy
    (np.int16, np.int8, np.int8), (np.int8, np.int16, np.int8), (np.int16, np.int16, np.int8),
    (np.int16, np.int16, np.int16), (np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int16),
    (np.uint8, np.int8, np.int8), (np.int8, np.int8, np.int8),
]


@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize("d1, d2, dout", ADD_DTYPES)
def test_add_operand_and_output_dtypes(d1, d2, dout, rounding):
    rng = np.random.default_rng(7)
    i1, i2, io = np.iinfo(d1), np.iinfo(d2), np.iinfo(dout)
    a = rng.integers(int(i1.min), int(i1.max) + 1, size=(3, 5)).astype(d1)
    b = rng.integers(int(i2.min), int(i2.max) + 1, size=(5,)).astype(d2)
    a[0, 0], b[1] = i1.min, i2.max
    z1, z2 = int(i1.min) + 3, int(i2.max) - 5
    zo = int(io.min) + 7
    lo, hi = int(io.min) + 1, int(io.max) - 2
    s1, s2, so = 0.013, 0.021, 0.017 * (1 << (8 * np.dtype(d1).itemsize - 8))
    if np.dtype(d1).itemsize == 2 or np.dtype(d2).itemsize == 2:
        ls = 14                                      # int16 differences need room below 2^31
    else:
        ls = 20
    out = quantized_add(a, b, scale1=s1, zp1=z1, scale2=s2, zp2=z2, out_scale=so, out_zp=zo, act_min=lo,
                        act_max=hi, out_dtype=dout, left_shift=ls, rounding=rounding)
    want = _add_model(a, b, z1, z2, add_params(s1, s2, so, ls), zo, lo, hi, rounding, ls)
    assert out.dtype == np.dtype(dout) and out.shape == (3, 5)
    np.testing.assert_array_equal(out, want)
    assert len(np.unique(want)) > 3                  # not everything clamped


def test_add_default_clamp_is_the_output_dtype_range():
    a = np.array([-128, 127, 0], dtype=np.int8)
    kw = dict(scale1=1.0, zp1=0, scale2=1.0, zp2=0, out_scale=0.25, out_zp=0)   # y = 4 (a + b)
    assert quantized_add(a, a, **kw).tolist() == [-128, 127, 0]
    assert quantized_add(a, a, out_dtype=np.int16, **kw).tolist() == [-1024, 1016, 0]
    assert quantized_add(a, a, act_min=-5, act_max=7, **kw).tolist() == [-5, 7, 0]


@pytest.mark.parametrize("kw, exc, match", [
    (dict(x1=np.zeros(3, np.float32)), TypeError, r"^x1 must be an integer array"),
    (dict(x2=np.zeros(3, np.float32)), TypeError, r"^x2 must be an integer array"),
    (dict(x1=np.zeros(0, np.int8)), ValueError, r"^x1 is empty"),
    (dict(x2=np.zeros(0, np.int8)), ValueError, r"^x2 is empty"),
    (dict(x2=np.zeros(4, np.int8)), ValueError, r"^x1 \(3,\) and x2 \(4,\) do not broadcast$"),
    (dict(rounding="triple"), ValueError, r"^rounding must be 'double' or 'single', got 'triple'$"),
    (dict(zp1=300), ValueError, r"^zp1=300 is out of range for int8"),
    (dict(zp2=-129), ValueError, r"^zp2=-129 is out of range for int8"),
    (dict(zp1=1.5), TypeError, r"^zp1 must be an int"),
    (dict(zp2=True), TypeError, r"^zp2 must be an int"),
    (dict(x1=np.zeros(3, np.int16), zp1=40000), ValueError, r"^zp1=40000 is out of range for int16"),
    (dict(x2=np.zeros(3, np.int16), zp2=-40000), ValueError, r"^zp2=-40000 is out of range for int16"),
    (dict(x1=np.zeros(3, np.int16), zp1=np.array([1, 2, 3])), ValueError, r"^zp1 must be a scalar, got shape"),
    (dict(x2=np.zeros(3, np.int16), zp2=np.array([1, 2, 3])), ValueError, r"^zp2 must be a scalar, got shape"),
    (dict(out_zp=128), ValueError, r"^out_zp=128 is out of range for int8"),
    (dict(out_dtype=np.float32), TypeError, r"^out_dtype must be"),
    (dict(act_min=5, act_max=4), ValueError, r"^need -128 <= act_min <= act_max <= 127, got act_min=5, act_max=4$"),
])
def test_add_bad_input(kw, exc, match):
    args = dict(x1=np.zeros(3, np.int8), x2=np.zeros(3, np.int8), scale1=1.0, zp1=0, scale2=1.0, zp2=0,
                out_scale=1.0, out_zp=0)
    args.update(kw)
    x1, x2 = args.pop("x1"), args.pop("x2")
    with pytest.raises(exc, match=match):
        quantized_add(x1, x2, **args)


# --------------------------------------------------------------------------- fully connected: model
def ref_requant(acc: int, rq: tuple, ch: int) -> int:
    kind, params = rq
    m, s = params[ch] if len(params) > 1 else params[0]
    if kind == "double":
        return mbqm(acc, m, s, "double")
    return min(INT32_MAX, max(INT32_MIN, round_fraction(Fraction(acc) * Fraction(2) ** s, "half_even")))


def make_requant(rq: tuple) -> Requantizer:
    kind, params = rq
    if kind == "double":
        return Requantizer("double", multiplier=[m for m, _ in params], shift=[s for _, s in params])
    return Requantizer("shift", shift=[s for _, s in params], rounding="half_even")


def ref_fc(x, w, bias, *, x_zp, w_zp, acc_bits, overflow="wrap", order="sequential", bias_at="end",
           zero_point="subtract", bias_bits=None, tile_k=None, tile_bits=None, shift=0, rounding="half_up"):
    """(acc [..., O], overflows, tile_overflows, bias_clipped) from the layer definition, element by element."""
    x = np.asarray(x).astype(object)
    w = np.asarray(w).astype(object)
    n_out, k = w.shape
    zw = [int(z) for z in np.broadcast_to(np.asarray(w_zp), (n_out,))]
    wd = [[int(w[o, t]) - zw[o] for t in range(k)] for o in range(n_out)]
    b = None if bias is None else [int(v) for v in bias]
    clipped = 0
    if zero_point == "fold":
        bits = acc_bits if bias_bits is None else min(bias_bits, acc_bits)
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        folded = [(0 if b is None else b[o]) - round_fraction(Fraction(x_zp * sum(wd[o]), 1 << shift), rounding)
                  for o in range(n_out)]       # the zero-point term rounded onto the accumulator LSB
        b = [min(hi, max(lo, v)) for v in folded]
        clipped = sum(v != c for v, c in zip(folded, b))
    rows = x.reshape(-1, k)
    acc = np.zeros((rows.shape[0], n_out), dtype=np.int64)
    ovf = tile_ovf = 0
    summer = accumulate if order == "sequential" else accumulate_tree
    for r in range(rows.shape[0]):
        xs = [int(v) - (0 if zero_point == "fold" else x_zp) for v in rows[r]]
        for o in range(n_out):
            prods = [round_fraction(Fraction(xs[t] * wd[o][t], 1 << shift), rounding) for t in range(k)]
            init = b[o] if (b is not None and bias_at == "init") else 0
            if tile_k is not None and tile_k < k:
                a = init
                for t0 in range(0, k, tile_k):
                    t, n, _ = summer(prods[t0:t0 + tile_k], 0, tile_bits, True, overflow)
                    tile_ovf += n
                    a, o1 = overflow_int(a + t, acc_bits, True, overflow)
                    ovf += o1
            else:
                a, n, _ = summer(prods, init, acc_bits, True, overflow)
                ovf += n
            if b is not None and bias_at == "end":
                a, o1 = overflow_int(a + b[o], acc_bits, True, overflow)
                ovf += o1
            acc[r, o] = a
    return acc.reshape(x.shape[:-1] + (n_out,)), ovf + tile_ovf, tile_ovf, clipped


def check_out(res, acc, rq, out_zp, lo, hi, out_dtype):
    n_out = acc.shape[-1]
    vals = np.array([ref_requant(int(a), rq, i % n_out) for i, a in enumerate(acc.ravel())],
                    dtype=np.int64).reshape(acc.shape) + out_zp
    assert res.out.dtype == np.dtype(out_dtype) and res.out.shape == acc.shape
    np.testing.assert_array_equal(res.out, np.clip(vals, lo, hi))
    if res.above is not None:                         # the fused kernel counts the clamped values
        assert (res.above, res.below) == (int(np.sum(vals > hi)), int(np.sum(vals < lo)))


DTYPES = [np.int8, np.uint8, np.int16]


def draw_fc_case(rng) -> dict:
    """One fully connected call: operand/output dtypes, batch shape, zero points (per channel or not), bias,
    accumulator, requantizer, clamp and every MAC knob, drawn from ``rng``."""
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    dx, dw, dout = pick(DTYPES), pick(DTYPES), pick(DTYPES)
    ix, iw, io = np.iinfo(dx), np.iinfo(dw), np.iinfo(dout)
    batch = pick([(), (2,), (2, 1), (1, 2)])
    k, n_out = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    x = rng.integers(int(ix.min), int(ix.max) + 1, size=batch + (k,)).astype(dx)
    w = rng.integers(int(iw.min), int(iw.max) + 1, size=(n_out, k)).astype(dw)
    x_zp = int(rng.integers(int(ix.min), int(ix.max) + 1)) if pick([True, False]) else 0
    if pick([True, False]):
        w_zp = [int(v) for v in rng.integers(int(iw.min), int(iw.max) + 1, size=n_out)]
    else:
        w_zp = int(rng.integers(int(iw.min), int(iw.max) + 1)) if pick([True, False]) else 0
    acc_bits = pick([12, 20, 32, 40])
    kind = "double" if acc_bits <= 32 and pick([True, False]) else "shift"
    n_rq = n_out if pick([True, False]) else 1
    if kind == "double":
        params = [ref_quantize_multiplier(float(r)) for r in rng.uniform(1e-5, 0.9, size=n_rq)]
    else:
        params = [(None, int(s)) for s in rng.integers(-acc_bits + 4, 1, size=n_rq)]
    lim = 1 << (acc_bits - 2)
    bias = rng.integers(-lim, lim, size=n_out) if pick([True, False]) else None
    zo = int(rng.integers(int(io.min), int(io.max) + 1))
    lo = int(rng.integers(int(io.min), int(io.max) + 1))
    hi = int(rng.integers(lo, int(io.max) + 1))
    return dict(x=x, w=w, bias=bias, x_zp=x_zp, w_zp=w_zp, acc_bits=acc_bits, rq=(kind, params), zo=zo,
                dout=dout, lo=lo, hi=hi, clamp=pick(["none", "given"]), shift=pick([0, 0, 1, 3]),
                overflow=pick(["wrap", "saturate"]), order=pick(["sequential", "tree"]),
                bias_at=pick(["end", "init"]), zero_point=pick(["subtract", "fold"]),
                bias_bits=pick([None, 6, 14]), tile_k=pick([None, 1, 2, 3, 8]), tile_bits=pick([None, 10, 16]),
                rounding=pick(["half_up", "half_even", "floor"]))


def check_fc_case(c):
    io = np.iinfo(c["dout"])
    kw = dict(requant=make_requant(c["rq"]), x_zp=c["x_zp"], w_zp=np.array(c["w_zp"]) if isinstance(c["w_zp"], list)
              else c["w_zp"], out_zp=c["zo"], out_dtype=c["dout"], acc=c["acc_bits"], overflow=c["overflow"],
              order=c["order"], bias_at=c["bias_at"], zero_point=c["zero_point"], bias_bits=c["bias_bits"],
              tile_k=c["tile_k"], tile_acc=c["tile_bits"], product_shift=c["shift"], rounding=c["rounding"])
    lo, hi = (int(io.min), int(io.max)) if c["clamp"] == "none" else (c["lo"], c["hi"])
    if c["clamp"] == "given":
        kw.update(act_min=lo, act_max=hi)
    res = quantized_fully_connected(c["x"], c["w"], c["bias"], **kw)
    tile_bits = c["acc_bits"] if c["tile_bits"] is None else c["tile_bits"]
    acc, ovf, tile_ovf, clipped = ref_fc(c["x"], c["w"], c["bias"], x_zp=c["x_zp"], w_zp=c["w_zp"],
                                         acc_bits=c["acc_bits"], overflow=c["overflow"], order=c["order"],
                                         bias_at=c["bias_at"], zero_point=c["zero_point"],
                                         bias_bits=c["bias_bits"], tile_k=c["tile_k"], tile_bits=tile_bits,
                                         shift=c["shift"], rounding=c["rounding"])
    assert isinstance(res, IntegerResult)
    assert res.acc is not None and res.acc.shape == acc.shape
    np.testing.assert_array_equal(res.acc, acc)
    assert (res.overflows, res.tile_overflows, res.bias_clipped) == (ovf, tile_ovf, clipped)
    check_out(res, acc, c["rq"], c["zo"], lo, hi, c["dout"])


@given(seed=st.integers(0, 2 ** 32 - 1))
def test_fully_connected_every_knob_vs_model(seed):
    c = draw_fc_case(np.random.default_rng(seed))
    check_fc_case(c)


def test_fully_connected_every_knob_fixed_cases():
    """The same property on 300 fixed draws (the kills do not depend on what hypothesis draws)."""
    for seed in range(300):
        check_fc_case(draw_fc_case(np.random.default_rng([seed, 20261201])))


@pytest.mark.parametrize("portable", [False, True])
@pytest.mark.parametrize("bias_at", ["end", "init"])
@pytest.mark.parametrize("order", ["sequential", "tree"])
@pytest.mark.parametrize("overflow", ["wrap", "saturate"])
def test_fully_connected_int8_defaults_and_fused_kernel(monkeypatch, portable, bias_at, order, overflow):
    """int8 with scalar weight zero point 0: the fused kernel where it is compiled (else the general path)."""
    if portable:
        monkeypatch.setattr(conv_int8, "_k", None)      # the numpy path
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, size=(2, 3, 40)).astype(np.int8)
    w = rng.integers(-128, 128, size=(5, 40)).astype(np.int8)
    bias = rng.integers(-(1 << 14), 1 << 14, size=5)
    params = [ref_quantize_multiplier(float(r)) for r in rng.uniform(1e-4, 2e-3, size=5)]
    rq = ("double", params)
    for acc_bits in (32, 16):
        kw = {} if acc_bits == 32 else {"acc": acc_bits}
        res = quantized_fully_connected(x, w, bias, requant=make_requant(rq), x_zp=-3, out_zp=5, act_min=-100,
                                        act_max=90, overflow=overflow, order=order, bias_at=bias_at, **kw)
        acc, ovf, _, _ = ref_fc(x, w, bias, x_zp=-3, w_zp=0, acc_bits=acc_bits, overflow=overflow, order=order,
                                bias_at=bias_at)
        np.testing.assert_array_equal(res.acc, acc)
        assert res.overflows == ovf and (ovf > 0) == (acc_bits == 16)
        check_out(res, acc, rq, 5, -100, 90, np.int8)
        if not portable and overflow == "wrap" and acc_bits == 32:
            assert res.above is not None               # the call was the fused kernel's
    # every default: x_zp = w_zp = out_zp = 0, int8 clamp, int32 wrap, sequential, bias at the end
    res = quantized_fully_connected(x, w, bias, requant=make_requant(rq))
    acc, ovf, _, _ = ref_fc(x, w, bias, x_zp=0, w_zp=0, acc_bits=32)
    np.testing.assert_array_equal(res.acc, acc)
    assert (res.overflows, res.tile_overflows, res.bias_clipped) == (ovf, 0, 0)
    check_out(res, acc, rq, 0, -128, 127, np.int8)


def test_fully_connected_default_accumulator_is_int32_wrap():
    # int32 activations: products of 2^31 - 1 by 127 overflow an int32 accumulator (wrap by default)
    x = np.array([[INT32_MAX, INT32_MAX, INT32_MIN], [1, 2, 3]], dtype=np.int32)
    w = np.array([[127, 127, 1], [-128, 3, 5]], dtype=np.int8)
    rq = ("shift", [(None, -20)])
    res = quantized_fully_connected(x, w, requant=make_requant(rq), out_dtype=np.int32)
    acc, ovf, _, _ = ref_fc(x, w, None, x_zp=0, w_zp=0, acc_bits=32, overflow="wrap")
    assert ovf > 0
    np.testing.assert_array_equal(res.acc, acc)
    assert res.overflows == ovf
    check_out(res, acc, rq, 0, INT32_MIN, INT32_MAX, np.int32)


def test_fully_connected_wide_differences_int16():
    """int16 codes with extreme zero points: x - z_x and w - z_w need 17 bits (never wrapped in int16)."""
    rq = ("shift", [(None, 0)])                    # R(a) = a: the output is the accumulator
    x = np.array([[-32768, 32767, 0]], dtype=np.int16)
    w = np.array([[-32768, 1, 32767], [32767, -32768, 0]], dtype=np.int16)
    for x_zp, w_zp in ((32767, np.array([32767, 100])), (-32768, np.array([-32768, -5])),
                       (32767, -32768), (-32768, 32767), (0, np.array([32767, -32768]))):
        res = quantized_fully_connected(x, w, requant=make_requant(rq), x_zp=x_zp, w_zp=w_zp, acc=40,
                                        out_dtype=np.int32)
        acc, ovf, _, _ = ref_fc(x, w, None, x_zp=x_zp, w_zp=w_zp, acc_bits=40)
        assert ovf == 0
        np.testing.assert_array_equal(res.acc, acc)
        check_out(res, acc, rq, 0, INT32_MIN, INT32_MAX, np.int32)


def test_fully_connected_one_dimensional_and_single_element():
    rq = ("shift", [(None, 0)])
    res = quantized_fully_connected(np.array([7], np.int8), np.array([[3]], np.int8), requant=make_requant(rq),
                                    x_zp=2, w_zp=np.array([1]), out_zp=-1)
    assert res.out.tolist() == [(7 - 2) * (3 - 1) - 1] and res.out.shape == (1,)
    res = quantized_fully_connected(np.array([1, 2, 3], np.int16), np.array([[1, 1, 1], [0, 1, 2]], np.int8),
                                    requant=make_requant(rq), out_dtype=np.int16)
    assert res.out.tolist() == [6, 8] and res.acc.tolist() == [6, 8] and res.out.dtype == np.int16


def test_fully_connected_per_tensor_requant_on_many_outputs_and_clamp_bounds():
    rq = ("shift", [(None, 0)])
    x = np.array([[1, -1], [100, 100]], dtype=np.int8)
    w = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.int8)
    # act_min = act_max, and the dtype's own bounds given explicitly
    res = quantized_fully_connected(x, w, requant=make_requant(rq), act_min=3, act_max=3)
    assert res.out.tolist() == [[3, 3, 3], [3, 3, 3]]
    res = quantized_fully_connected(x, w, requant=make_requant(rq), act_min=-128, act_max=127)
    assert res.out.tolist() == [[1, -1, 0], [100, 100, 127]]
    res = quantized_fully_connected(x, w, requant=make_requant(rq), act_min=np.int64(-1))
    assert res.out.tolist() == [[1, -1, 0], [100, 100, 127]]
    res = quantized_fully_connected(x, w, requant=make_requant(rq), act_max=np.int16(50))
    assert res.out.tolist() == [[1, -1, 0], [50, 50, 50]]
    res = quantized_fully_connected(x, w, requant=make_requant(rq), act_min=0)
    assert res.out.tolist() == [[1, 0, 0], [100, 100, 127]]
    res = quantized_fully_connected(x, w, requant=make_requant(rq), out_dtype=np.uint8, out_zp=255, act_max=255)
    assert res.out.tolist() == [[255, 254, 255], [255, 255, 255]] and res.out.dtype == np.uint8


@pytest.mark.parametrize("acc", [62, Format(62, 0), np.int64(62), Format.integer(24), 2])
def test_fully_connected_accumulator_forms(acc):
    rq = ("shift", [(None, 0)])
    x = np.array([[3, -2, 1]], dtype=np.int8)
    w = np.array([[1, 1, 1], [2, 0, -1]], dtype=np.int8)
    res = quantized_fully_connected(x, w, requant=make_requant(rq), acc=acc, overflow="saturate",
                                    out_dtype=np.int16)
    bits = acc.word if isinstance(acc, Format) else int(acc)
    want, ovf, _, _ = ref_fc(x, w, None, x_zp=0, w_zp=0, acc_bits=bits, overflow="saturate")
    np.testing.assert_array_equal(res.acc, want)
    assert res.overflows == ovf


def test_fully_connected_bias_at_the_accumulator_limits():
    rq = ("shift", [(None, 0)])
    x = np.array([[1, 1]], dtype=np.int8)
    w = np.array([[1, 1], [-1, -1]], dtype=np.int8)
    bias = np.array([(1 << 15) - 3, -(1 << 15)])
    res = quantized_fully_connected(x, w, bias, requant=make_requant(rq), acc=16, overflow="saturate",
                                    out_dtype=np.int32)
    assert res.acc.tolist() == [[(1 << 15) - 1, -(1 << 15)]] and res.acc.dtype == np.int64
    assert res.overflows == 1
    res = quantized_fully_connected(x, w, bias.astype(np.int16), requant=make_requant(rq), acc=16,
                                    out_dtype=np.int32, bias_at="init", overflow="wrap")
    assert res.acc.tolist() == [[(1 << 15) - 1, (1 << 15) - 2]] and res.overflows == 1


def test_fully_connected_fold_without_bias_and_saturated_fold():
    rq = ("shift", [(None, 0)])
    x = np.array([[10, 20]], dtype=np.int8)
    w = np.array([[100, 100], [-3, 4]], dtype=np.int8)
    # fold: bias' = -z_x * sum_k (w_k - z_w), saturated into bias_bits = 8 bits
    res = quantized_fully_connected(x, w, requant=make_requant(rq), x_zp=5, zero_point="fold", bias_bits=8,
                                    out_dtype=np.int32)
    assert res.bias_clipped == 1                      # -5 * 200 = -1000 -> -128; -5 * 1 = -5
    assert res.acc.tolist() == [[10 * 100 + 20 * 100 - 128, -30 + 80 - 5]]


def test_fully_connected_product_shift_and_tiles_hand_table():
    rq = ("shift", [(None, 0)])
    x = np.array([[3, 5, -7, 1]], dtype=np.int8)
    w = np.array([[1, 1, 1, 1]], dtype=np.int8)
    # products 3, 5, -7, 1 rounded onto 2-LSB units (half_up): 2, 3, -3, 1 -> 3
    res = quantized_fully_connected(x, w, requant=make_requant(rq), product_shift=1, out_dtype=np.int32)
    assert res.acc.tolist() == [[3]] and res.out.tolist() == [[3]]
    # tiles of 2 in a 4-bit tile accumulator (saturating): 3 + 5 -> 7 (overflow), -7 + 1 = -6; 7 - 6 = 1
    res = quantized_fully_connected(x, w, requant=make_requant(rq), tile_k=2, tile_acc=4, overflow="saturate",
                                    out_dtype=np.int32)
    assert res.acc.tolist() == [[1]] and (res.overflows, res.tile_overflows) == (1, 1)
    # tile_k = K: no tiling; tile_k = K - 1: two tiles
    res = quantized_fully_connected(x, w, requant=make_requant(rq), tile_k=4, tile_acc=4, overflow="saturate",
                                    out_dtype=np.int32)
    assert res.acc.tolist() == [[2]] and (res.overflows, res.tile_overflows) == (0, 0)
    res = quantized_fully_connected(x, w, requant=make_requant(rq), tile_k=3, tile_acc=4, overflow="saturate",
                                    out_dtype=np.int32)
    assert res.acc.tolist() == [[1]] and (res.overflows, res.tile_overflows) == (1, 1)  # 3+5 -> 7, 7-7 = 0; +1


def test_fully_connected_tiled_bias_init_with_batch_dimensions():
    """x with two batch dimensions, K tiles and a preloaded bias (raised a numpy ValueError before the fix)."""
    rq = ("shift", [(None, 0)])
    x = np.array([[[1, 2]], [[3, -4]]], dtype=np.int8)                # shape (2, 1, 2)
    w = np.array([[1, 1], [2, -1]], dtype=np.int8)
    res = quantized_fully_connected(x, w, np.array([5, -5]), requant=make_requant(rq), tile_k=1, bias_at="init",
                                    out_dtype=np.int32)
    assert res.acc.tolist() == [[[8, -5]], [[4, 5]]]


# --------------------------------------------------------------------------- fully connected: bad input
from test_integer_ops import _fc  # noqa: E402  (the same default layer as the older bad-input tests)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(x=np.zeros((2, 2, 5), np.int8)), ValueError,
     r"^x has 5 features but w \(O, K\) = \(3, 4\) expects 4$"),
    (dict(x=np.zeros((5, 2), np.int8)), ValueError, r"^x has 2 features"),
    (dict(x=np.int8(3)), ValueError, r"^x must have 1 dimensions, got shape \(\)$"),
    (dict(x=np.zeros((2, 4), np.float32)), TypeError,
     r"^x must be an integer array of at most 32 bits \(int8, uint8, int16, int32\.\.\.\), got dtype float32$"),
    (dict(x=np.zeros((2, 4), np.bool_)), TypeError, r"^x must be an integer array"),
    (dict(x=np.zeros((2, 4), np.int64)), TypeError, r"^x must be an integer array .* got dtype int64$"),
    (dict(x=np.zeros((2, 4), np.uint64)), TypeError, r"^x must be an integer array"),
    (dict(x=np.zeros((0, 4), np.int8)), ValueError, r"^x is empty \(shape \(0, 4\)\)$"),
    (dict(w=np.ones((3, 4, 1), np.int8)), ValueError, r"^w must have 2 dimensions, got shape \(3, 4, 1\)$"),
    (dict(w=np.ones(4, np.int8)), ValueError, r"^w must have 2 dimensions"),
    (dict(w=np.ones((3, 4), np.float64)), TypeError, r"^w must be an integer array"),
    (dict(w=np.ones((3, 0), np.int8), x=np.zeros((2, 0), np.int8)), ValueError, r"^x is empty"),
    (dict(x_zp=200), ValueError, r"^x_zp=200 is out of range for int8"),
    (dict(x_zp=np.int16(-129)), ValueError, r"^x_zp=-129 is out of range"),
    (dict(x_zp=1.0), TypeError, r"^x_zp must be an int"),
    (dict(x=np.zeros((2, 4), np.uint8), x_zp=-1), ValueError, r"^x_zp=-1 is out of range for uint8"),
    (dict(w_zp=128), ValueError, r"^w_zp=128 is out of range for int8"),
    (dict(w_zp=np.array([0, 0, 128])), ValueError, r"^w_zp=128 is out of range for int8"),
    (dict(w_zp=np.array([0, 0])), ValueError, r"^w_zp must be a scalar or one per channel, got shape \(2,\)$"),
    (dict(w_zp=np.array([[0, 0, 0]])), ValueError, r"^w_zp must be a scalar or one per channel, got shape \(1, 3\)$"),
    (dict(w_zp=np.array([0, 0, 0, 0])), ValueError, r"^w_zp must be a scalar or one per channel"),
    (dict(out_zp=-129), ValueError, r"^out_zp=-129 is out of range for int8"),
    (dict(out_zp=70000, out_dtype=np.int16), ValueError, r"^out_zp=70000 is out of range for int16"),
    (dict(out_zp=None), TypeError, r"^out_zp must be an int"),
    (dict(out_dtype=np.float32), TypeError, r"^out_dtype must be an integer dtype of at most 32 bits"),
    (dict(out_dtype="nonsense"), TypeError, r"^out_dtype must be a numpy integer dtype"),
    (dict(out_dtype=np.int64), TypeError, r"^out_dtype must be"),
    (dict(bias=np.zeros(4, np.int32)), ValueError,
     r"^bias must have shape \(3,\), one value per output channel; got \(4,\)$"),
    (dict(bias=np.zeros((3, 1), np.int32)), ValueError, r"^bias must have shape \(3,\)"),
    (dict(bias=np.zeros(3, np.float64)), TypeError, r"^bias must be an integer array \(int32\), got dtype float64$"),
    (dict(bias=np.zeros(3, np.bool_)), TypeError, r"^bias must be an integer array"),
    (dict(bias=np.array([0, 1 << 15, 0]), acc=16), ValueError,
     r"^bias \(accumulator sfix16\) must lie in \[-32768, 32767\]; got values in \[0, 32768\]$"),
    (dict(bias=np.array([0, -(1 << 15) - 1, 0]), acc=16), ValueError, r"^bias \(accumulator sfix16\) must lie in"),
    (dict(requant=Requantizer("double", multiplier=(1, 2), shift=(0, 0))), ValueError,
     r"^requant has 2 channels; the layer has 3 outputs$"),
    (dict(requant="tflite"), TypeError, r"^requant must be a Requantizer, got str$"),
    (dict(act_min=10, act_max=5), ValueError,
     r"^need -128 <= act_min <= act_max <= 127, got act_min=10, act_max=5$"),
    (dict(act_max=300), ValueError, r"^need -128 <= act_min <= act_max <= 127, got act_min=-128, act_max=300$"),
    (dict(act_min=-129), ValueError, r"^need -128 <= act_min <= act_max <= 127, got act_min=-129, act_max=127$"),
    (dict(act_min=True), TypeError, r"^act_min must be an int, got True$"),
    (dict(act_max=np.True_), TypeError, r"^act_max must be an int, got "),
    (dict(act_min=1.0), TypeError, r"^act_min must be an int, got 1\.0$"),
    (dict(act_max=100.0), TypeError, r"^act_max must be an int, got 100\.0$"),
    (dict(acc=Format(32, 4)), ValueError, r"^acc must be a signed integer format of at most 62 bits, got "),
    (dict(acc=Format(32, -1)), ValueError, r"^acc must be a signed integer format"),
    (dict(acc=Format(16, 0, signed=False)), ValueError, r"^acc must be a signed integer format"),
    (dict(acc=63), ValueError, r"^acc must be a signed integer format of at most 62 bits, got sfix63$"),
    (dict(acc="int32"), TypeError, r"^acc must be a Format or an int \(accumulator bits\), got 'int32'$"),
    (dict(overflow="explode"), ValueError, r"overflow mode 'explode'"),
    (dict(bias_at="middle"), ValueError, r"^bias_at must be"),
    (dict(order="random"), ValueError, r"^order must be"),
    (dict(zero_point="add"), ValueError, r"^zero_point must be"),
])
def test_fully_connected_bad_input(kw, exc, match):
    with pytest.raises(exc, match=match):
        _fc(**kw)


def test_fully_connected_unsigned_accumulator_format_refused():
    with pytest.raises(ValueError, match=r"^acc must be a signed integer format"):
        _fc(acc=Format(16, 0, signed=False), bias=None)


# --------------------------------------------------------------------------- average pooling
def ref_pool(x, k, stride, pads, acc_bits, overflow, lo, hi):
    """Window sums (row-major, padded taps add 0) through the accumulator; TFLite's rounding division."""
    n, h, wd, c = x.shape
    (pt, pb), (pl, pr) = pads
    oh, ow = (h + pt + pb - k[0]) // stride[0] + 1, (wd + pl + pr - k[1]) // stride[1] + 1
    sums = np.zeros((n, oh, ow, c), dtype=np.int64)
    out = np.zeros((n, oh, ow, c), dtype=np.int64)
    total = 0
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    vals, count = [], 0
                    for u in range(k[0]):
                        for v in range(k[1]):
                            y, z = i * stride[0] + u - pt, j * stride[1] + v - pl
                            inside = 0 <= y < h and 0 <= z < wd
                            vals.append(int(x[b, y, z, ch]) if inside else 0)
                            count += inside
                    s, ovf, _ = accumulate(vals, 0, acc_bits, True, overflow)
                    total += ovf
                    sums[b, i, j, ch] = s
                    q = (s + count // 2) if s > 0 else (s - count // 2)
                    avg = abs(q) // count * (1 if q >= 0 else -1)        # C division: toward zero
                    out[b, i, j, ch] = min(hi, max(lo, avg))
    return out, sums, total


def check_pool_case(rng):
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    kh, kw, sh, sw = (int(v) for v in rng.integers(1, 4, size=4))
    pt, pb = (int(v) for v in rng.integers(0, kh, size=2))           # a padding < the window: never empty
    pl, pr = (int(v) for v in rng.integers(0, kw, size=2))
    h = int(rng.integers(max(1, kh - pt - pb), 6))
    wd = int(rng.integers(max(1, kw - pl - pr), 6))
    dtype, acc_bits, overflow = pick([np.int8, np.uint8, np.int16, np.int32]), pick([8, 12, 32, 62]), \
        pick(["wrap", "saturate"])
    info = np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max) + 1, size=(1, h, wd, 2), dtype=np.int64).astype(dtype)
    lo = int(rng.integers(int(info.min), int(info.max) + 1))
    hi = int(rng.integers(lo, int(info.max) + 1))
    res = quantized_average_pool2d(x, (kh, kw), stride=(sh, sw), padding=((pt, pb), (pl, pr)), act_min=lo,
                                   act_max=hi, acc=acc_bits, overflow=overflow)
    out, sums, total = ref_pool(x, (kh, kw), (sh, sw), ((pt, pb), (pl, pr)), acc_bits, overflow, lo, hi)
    assert res.out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(res.out, out)
    np.testing.assert_array_equal(res.acc, sums)
    assert res.overflows == total


@given(seed=st.integers(0, 2 ** 32 - 1))
def test_average_pool2d_explicit_padding_vs_model(seed):
    check_pool_case(np.random.default_rng(seed))


def test_average_pool2d_explicit_padding_fixed_cases():
    for seed in range(100):
        check_pool_case(np.random.default_rng([seed, 20261201]))


def test_average_pool2d_defaults_int32_wrap_and_stride():
    # int32 codes: a window of two 2^31 - 1 overflows the default int32 accumulator (wrap: -2)
    x = np.array([INT32_MAX, INT32_MAX, 5, 6, -7, 7], dtype=np.int32).reshape(1, 1, 6, 1)
    res = quantized_average_pool2d(x, (1, 2))
    assert res.acc.ravel().tolist() == [-2, 11, 0] and res.overflows == 1
    assert res.out.ravel().tolist() == [-1, 6, 0] and res.out.dtype == np.int32
    res = quantized_average_pool2d(x, (1, 2), stride=1)             # stride given: 5 windows
    assert res.acc.ravel().tolist() == [-2, INT32_MAX + 5 - (1 << 32), 11, -1, 0]
    # the default clamp is x's dtype range, the default padding VALID
    x8 = np.array([[-128, -128, 127, 127]], dtype=np.int8).reshape(1, 2, 2, 1)
    assert quantized_average_pool2d(x8, 2).out.ravel().tolist() == [-1]              # -2 / 4: half away
    assert quantized_average_pool2d(x8, (2, 1)).out.ravel().tolist() == [-1, -1]
    res = quantized_average_pool2d(x8, (1, 2))
    assert res.out.ravel().tolist() == [-128, 127]


def test_average_pool2d_narrow_accumulator_exact_values():
    x = np.full((1, 4, 4, 1), 127, dtype=np.int8)
    wrap = quantized_average_pool2d(x, 4, acc=8, overflow="wrap")
    sat = quantized_average_pool2d(x, 4, acc=8, overflow="saturate")
    # 16 * 127 = 2032 = 7 * 256 + 240 -> wrapped -16; saturating: 127 after the first add
    assert wrap.acc.ravel().tolist() == [-16] and wrap.out.ravel().tolist() == [-1]
    assert sat.acc.ravel().tolist() == [127] and sat.out.ravel().tolist() == [8] and sat.overflows == 15
    assert wrap.overflows == 8                        # 127, -2, 125, -4, ...: every second add wraps


def test_average_pool2d_same_padding_counts_only_valid_pixels():
    x = np.array([[10, 20, 30], [40, 50, 60], [70, 80, 91]], dtype=np.int8).reshape(1, 3, 3, 1)
    res = quantized_average_pool2d(x, 2, stride=2, padding="same")        # pads ((0, 1), (0, 1))
    # windows: {10,20,40,50} -> 30, {30,60} -> 45, {70,80} -> 75, {91} -> 91
    assert res.out.ravel().tolist() == [30, 45, 75, 91]
    assert res.acc.ravel().tolist() == [120, 90, 150, 91]
    neg = quantized_average_pool2d(-x, 2, stride=2, padding="SAME")
    assert neg.out.ravel().tolist() == [-30, -45, -75, -91]
    # explicit padding before the input: the windows start in the padding
    res = quantized_average_pool2d(x[:, :2, :2], (3, 1), padding=((1, 0), (0, 0)))
    assert res.out.ravel().tolist() == [25, 35] and res.acc.ravel().tolist() == [50, 70]


@pytest.mark.parametrize("args, kw, exc, match", [
    ((np.zeros((1, 4, 4), np.int8), 2), {}, ValueError, r"^x must have 4 dimensions, got shape \(1, 4, 4\)$"),
    ((np.zeros((1, 4, 4, 1), np.float32), 2), {}, TypeError, r"^x must be an integer array"),
    ((np.zeros((1, 0, 4, 1), np.int8), 2), {}, ValueError, r"^x is empty"),
    ((np.zeros((1, 4, 4, 1), np.int8), 0), {}, ValueError, r"^pool_size must be a positive int or a pair of them"),
    ((np.zeros((1, 4, 4, 1), np.int8), (2, 2, 2)), {}, ValueError, r"^pool_size must be a positive int"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(stride=0), ValueError,
     r"^stride must be a positive int or a pair of them, got 0$"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(stride=(1, -1)), ValueError, r"^stride must be"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(padding="FULL"), ValueError, r"^padding must be 'SAME', 'VALID'"),
    ((np.zeros((1, 2, 4, 1), np.int8), (3, 1)), {}, ValueError,
     r"^pool_size 3 is larger than the padded input height \(2\)$"),
    ((np.zeros((1, 4, 2, 1), np.int8), (1, 3)), {}, ValueError,
     r"^pool_size 3 is larger than the padded input width \(2\)$"),
    ((np.zeros((1, 1, 4, 1), np.int8), (5, 1)), dict(padding=((1, 2), (0, 0))), ValueError,
     r"^pool_size 5 is larger than the padded input height \(4\)$"),
    ((np.zeros((1, 4, 1, 1), np.int8), (1, 5)), dict(padding=((0, 0), (2, 1))), ValueError,
     r"^pool_size 5 is larger than the padded input width \(4\)$"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(padding=((2, 0), (0, 0))), ValueError,
     r"^padding \(2, 0\) leaves windows without any input pixel \(height\)$"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(padding=((0, 0), (0, 3))), ValueError,
     r"^padding \(0, 3\) leaves windows without any input pixel \(width\)$"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(act_min=3, act_max=2), ValueError,
     r"^need -128 <= act_min <= act_max <= 127, got act_min=3, act_max=2$"),
    ((np.zeros((1, 4, 4, 1), np.uint8), 2), dict(act_min=-1), ValueError, r"^need 0 <= act_min"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(acc=Format(16, 2)), ValueError, r"^acc must be a signed integer"),
    ((np.zeros((1, 4, 4, 1), np.int8), 2), dict(overflow="explode"), ValueError, r"overflow mode 'explode'"),
])
def test_average_pool2d_bad_input(args, kw, exc, match):
    with pytest.raises(exc, match=match):
        quantized_average_pool2d(*args, **kw)


def test_average_pool2d_padding_that_a_wrong_sum_would_refuse():
    # height 2 padded (1, 1) to 4 holds a window of 3; (n - p0 + p1) = 2 would not
    x = np.array([[5], [-9]], dtype=np.int8).reshape(1, 2, 1, 1)
    res = quantized_average_pool2d(x, (3, 1), stride=1, padding=((1, 1), (0, 0)))
    assert res.out.ravel().tolist() == [-2, -2] and res.acc.ravel().tolist() == [-4, -4]
    res = quantized_average_pool2d(x.transpose(0, 2, 1, 3), (1, 3), stride=1, padding=((0, 0), (2, 0)))
    assert res.out.ravel().tolist() == [5, -2]


@pytest.mark.parametrize("sign", [1, -1])
def test_average_pool2d_window_sums_beyond_float64_precision(sign):
    """A 2048 x 2049 window of int32 codes near 2^31: sums above 2^53, where a float division would round
    (S + c/2) / c = m - 1/c up to m.  The division must be exact integer arithmetic."""
    h, w = 2048, 2049
    c, m = h * w, INT32_MAX
    x = np.full((1, h, w, 1), sign * m, dtype=np.int32)
    x[0, 0, 0, 0] -= sign * (1 + c // 2)
    s = sign * (m * c - 1 - c // 2)
    assert abs(s) > 1 << 53
    num = s + c // 2 if s > 0 else s - c // 2
    want = abs(num) // c * (1 if num > 0 else -1)
    assert want == sign * (m - 1)
    res = quantized_average_pool2d(x, (h, w), acc=62)
    assert res.acc.ravel().tolist() == [s] and res.out.ravel().tolist() == [want] and res.overflows == 0


@pytest.mark.parametrize("portable", [False, True])
def test_fully_connected_int8_product_shift_and_tiles_hand_table(monkeypatch, portable):
    """int8 in and out, weight zero point 0 (what the fused kernel takes): product_shift and K-tiling still
    apply (the kernel does not model them)."""
    if portable:
        monkeypatch.setattr(conv_int8, "_k", None)
    rq = make_requant(("shift", [(None, 0)]))
    x = np.array([[3, 5, -7, 1]], dtype=np.int8)
    w = np.array([[1, 1, 1, 1]], dtype=np.int8)
    res = quantized_fully_connected(x, w, requant=rq, product_shift=1)
    assert res.acc.tolist() == [[3]] and res.out.tolist() == [[3]]          # 2 + 3 - 3 + 1
    res = quantized_fully_connected(x, w, requant=rq, tile_k=2, tile_acc=4, overflow="saturate")
    assert res.acc.tolist() == [[1]] and (res.overflows, res.tile_overflows) == (1, 1)   # 7 + (-6)
    res = quantized_fully_connected(x, w, requant=rq, tile_k=2, tile_acc=4, overflow="wrap")
    assert res.acc.tolist() == [[-14]] and (res.overflows, res.tile_overflows) == (1, 1)  # -8 + (-6)
    res = quantized_fully_connected(x, w, requant=rq)
    assert res.acc.tolist() == [[2]] and (res.overflows, res.tile_overflows, res.bias_clipped) == (0, 0, 0)


@pytest.mark.parametrize("tile_k", [0, -1, True, 1.5, "2"])
def test_fully_connected_bad_tile_k(tile_k):
    with pytest.raises(ValueError, match=r"^tile_k must be a positive int or None, got "):
        _fc(tile_k=tile_k)


@pytest.mark.parametrize("product_shift", [-1, 63, True, 1.0])
def test_fully_connected_bad_product_shift(product_shift):
    with pytest.raises(ValueError, match=r"^product_shift must be an int in 0\.\.62, got "):
        _fc(product_shift=product_shift)


def test_fully_connected_product_shift_with_an_overflowing_bias():
    """Accumulator codes in 2-product-LSB units (product_shift=1): the bias is added in those units."""
    rq = make_requant(("shift", [(None, 0)]))
    x = np.full((1, 6), 100, dtype=np.int16)
    w = np.full((1, 6), 100, dtype=np.int16)
    # products 10000 -> 5000 each; 30000 wraps to 1328 in 12 bits (6 adds overflow); + 2000 = 3328 -> -768
    res = quantized_fully_connected(x, w, np.array([2000]), requant=rq, product_shift=1, acc=12, overflow="wrap",
                                    out_dtype=np.int16)
    assert res.acc.tolist() == [[-768]] and res.out.tolist() == [[-768]] and res.overflows == 7
    res = quantized_fully_connected(x, w, requant=rq, product_shift=1, acc=12, overflow="wrap", out_dtype=np.int16)
    assert res.acc.tolist() == [[1328]] and res.overflows == 6

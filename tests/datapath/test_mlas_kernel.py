"""The C kernel of MLAS's float32 SGEMM and convolution (``fxpsim/datapath/onnxruntime/_mlas.h``).

Three oracles: an exact model written here (``Fraction`` arithmetic rounded to float32 by hand, from MLAS's
kernels as described in :mod:`fxpsim.datapath.onnxruntime.mlas_kernel`), the numpy model of
:mod:`fxpsim.datapath.onnxruntime.mlas` (reviewed and proven live against onnxruntime through the ONNX
import tests) on random shapes, and onnxruntime itself (a one-thread session of a float MatMul / Conv,
skipped only when onnxruntime or onnx is not installed).
"""
from __future__ import annotations

from fractions import Fraction

import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fxpsim.datapath.onnxruntime import mlas, mlas_conv
from fxpsim.datapath.onnxruntime import mlas_kernel as mk

F32 = np.float32
pytestmark = pytest.mark.skipif(not mk.available(), reason="the _mlas extension is not built")


# ----------------------------------------------------------------------------------------- exact model
def rf32(q: Fraction) -> float:
    """``q`` rounded to the nearest float32, ties to even (overflow to +-inf); exact, from the definition."""
    if q == 0:
        return 0.0
    sign, a = (-1 if q < 0 else 1), abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    r = round(a / ulp) * ulp                     # Fraction.__round__: half to even
    if r >= Fraction(2) ** 128 - Fraction(2) ** 103:
        return sign * float("inf")
    return sign * float(r)


def fl(x) -> Fraction:
    return Fraction(float(x))


def ref_slices(a, b, c, sk):
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), F32)
    for i in range(m):
        for j in range(n):
            o = None if c is None else fl(c[i, j])
            for k0 in range(0, k, sk):
                acc = 0.0
                for t in range(k0, min(k, k0 + sk)):
                    acc = rf32(fl(a[i, t]) * fl(b[t, j]) + Fraction(acc))   # fma: one rounding
                o = Fraction(acc) if o is None else Fraction(rf32(Fraction(acc) + o))
            out[i, j] = float(o)
    return out


def ref_m1(a, b, c):
    k, n = b.shape
    out = np.zeros((1, n), F32)
    for j in range(n):
        p = [Fraction(rf32(fl(a[0, t]) * fl(b[t, j]))) for t in range(k)]
        o = Fraction(0) if c is None else fl(c[0, j])
        t = 0
        while k - t >= 4:
            s = Fraction(rf32(p[t] + p[t + 1]))
            s = Fraction(rf32(s + p[t + 2]))
            s = Fraction(rf32(s + p[t + 3]))
            o, t = Fraction(rf32(s + o)), t + 4
        if k - t >= 2:
            o, t = Fraction(rf32(Fraction(rf32(p[t] + p[t + 1])) + o)), t + 2
        if k - t >= 1:
            o = Fraction(rf32(p[t] + o))
        out[0, j] = float(o)
    return out


def ref_transpose_b(x, rows, c):
    """MlasSgemmKernelM1TransposeBAvx: x [K], rows [R, K], c [R] or None."""
    r_total, k = rows.shape
    out = np.zeros(r_total, F32)

    def add(u, v):
        return Fraction(rf32(u + v))
    n4 = r_total // 4 * 4
    for r in range(r_total):
        lane = [Fraction(0)] * 8
        for t in range(k):
            lane[t % 8] = add(lane[t % 8], Fraction(rf32(fl(x[t]) * fl(rows[r, t]))))
        l0, l1, l2, l3, l4, l5, l6, l7 = lane
        if r < n4:
            v = add(add(add(add(l0, l1), l2), l3), add(add(add(l4, l5), l6), l7))
        elif r < n4 + ((r_total - n4) & 2):
            v = add(add(add(l0, l2), add(l4, l6)), add(add(l1, l3), add(l5, l7)))
        else:
            v = add(add(add(l0, l1), add(l2, l3)), add(add(l4, l5), add(l6, l7)))
        out[r] = float(v if c is None else add(v, fl(c[r])))
    return out


def _bits_equal(x, y):
    x, y = np.asarray(x, F32), np.asarray(y, F32)
    assert x.shape == y.shape
    bad = np.flatnonzero(x.view(np.int32) != y.view(np.int32))
    assert bad.size == 0, f"{bad.size} of {x.size} differ, first at {bad[0]}: {x.flat[bad[0]]!r} vs {y.flat[bad[0]]!r}"


def _operand(rng, shape, spread):
    """float32 values over a wide exponent range (ties and cancellations happen), some exact zeros."""
    v = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    v[rng.random(shape) < 0.05] = 0.0
    return v.astype(F32)


@settings(max_examples=40)
@given(m=st.integers(1, 9), k=st.integers(1, 21), n=st.integers(1, 19), sk=st.integers(1, 9),
       with_c=st.booleans(), simd=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_kernels_match_an_exact_model(m, k, n, sk, with_c, simd, seed):
    rng = np.random.default_rng(seed)
    a, b = _operand(rng, (m, k), 12), _operand(rng, (k, n), 12)
    c = _operand(rng, (m, n), 12) if with_c else None
    c3 = None if c is None else c[None]
    _bits_equal(mk.sgemm(a[None], b[None], c3, mk.SLICES, sk, simd=simd)[0], ref_slices(a, b, c, sk))
    _bits_equal(mk.sgemm(a[:1][None], b[None], None if c is None else c3[:, :1], mk.M1, simd=simd)[0],
                ref_m1(a[:1], b, None if c is None else c[:1]))
    _bits_equal(mk.sgemm(a[:1][None], b[None], None if c is None else c3[:, :1], mk.M1TB, simd=simd)[0, 0],
                ref_transpose_b(a[0], b.T, None if c is None else c[0]))
    _bits_equal(mk.sgemm(a[None], b[None, :, :1], None if c is None else c3[:, :, :1], mk.N1, simd=simd)[0, :, 0],
                ref_transpose_b(b[:, 0], a, None if c is None else c[:, 0]))


def test_fma_rounds_once_and_products_round_on_their_own():
    """Hand cases with e = 1 + 2^-12: e * e = 1 + 2^-11 + 2^-24 is a float32 tie that rounds to 1 + 2^-11."""
    e, d = F32(1 + 2.0 ** -12), F32(-(1 + 2.0 ** -11))
    a, b = np.array([[[1.0, e]]], F32), np.array([[[d], [e]]], F32)
    # the fma chain: fma(e, e, -(1 + 2^-11)) = 2^-24 exactly (one rounding)
    assert mk.sgemm(a, b, None, mk.SLICES, 2)[0, 0, 0] == 2.0 ** -24
    assert mk.sgemm(a, b, None, mk.SLICES, 2, simd=False)[0, 0, 0] == 2.0 ** -24
    # two slices of one step: fma(e, e, 0) rounds the product, then the sum: 0
    assert mk.sgemm(a, b, None, mk.SLICES, 1)[0, 0, 0] == 0.0
    # M1: the product rounded on its own (no contraction), then the pair's sum: 0
    assert mk.sgemm(a, b, None, mk.M1, simd=True)[0, 0, 0] == 0.0
    assert mk.sgemm(a, b, None, mk.M1, simd=False)[0, 0, 0] == 0.0
    # the same for the transposed-B lanes: eight rows so that the AVX2 path runs
    bt = np.repeat(b, 8, axis=2)
    assert np.all(mk.sgemm(a, bt, None, mk.M1TB)[0, 0] == 0.0)


# ----------------------------------------------------------------------------------------- numpy model
def _numpy(fn):
    saved, mk._k = mk._k, None
    try:
        return fn()
    finally:
        mk._k = saved


@settings(max_examples=60)
@given(m=st.integers(1, 40), k=st.integers(1, 700), n=st.integers(1, 300), threads=st.integers(1, 8),
       with_c=st.booleans(), trans_b=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_gemm_matches_the_numpy_model(m, k, n, threads, with_c, trans_b, seed):
    rng = np.random.default_rng(seed)
    a, b = _operand(rng, (m, k), 4), _operand(rng, (k, n), 4)
    c = _operand(rng, (m, n), 4) if with_c else None
    _bits_equal(mlas.mlas_gemm(a, b, c, threads=threads, trans_b=trans_b),
                _numpy(lambda: mlas.mlas_gemm(a, b, c, threads=threads, trans_b=trans_b)))


def _conv_case(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, fc = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(kh, 20)), draw(st.integers(kw, 20))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([1, 1, 2]))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
    return dict(batch=draw(st.integers(1, 3)), groups=groups, cg=cg, fc=fc, kernel=(kh, kw), hw=(h, w),
                stride=(sh, sw), dilation=(dh, dw), pads=pads, threads=draw(st.integers(1, 8)),
                bias=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 32 - 1)))


def _conv_operands(case):
    """``(x, w, bias)`` of a drawn conv case, or None when the kernel does not fit the padded image."""
    rng = np.random.default_rng(case["seed"])
    g, (kh, kw) = case["groups"], case["kernel"]
    x = _operand(rng, (case["batch"], g * case["cg"]) + case["hw"], 3)
    w = _operand(rng, (g * case["fc"], case["cg"], kh, kw), 3)
    bias = _operand(rng, (g * case["fc"],), 3) if case["bias"] else None
    (h, wd), (dh, dw), ((pt, pb), (pl, pr)) = case["hw"], case["dilation"], case["pads"]
    if h + pt + pb < dh * (kh - 1) + 1 or wd + pl + pr < dw * (kw - 1) + 1:
        return None
    return x, w, bias


@settings(max_examples=60)
@given(st.composite(_conv_case)())
def test_conv_matches_the_numpy_model(case):
    operands = _conv_operands(case)
    if operands is None:
        return
    x, w, bias = operands
    g = case["groups"]
    args = (x, w, bias, case["stride"], case["pads"], case["dilation"], g)
    try:
        want = _numpy(lambda: mlas.mlas_conv2d(*args, threads=case["threads"]))
    except NotImplementedError:
        return
    _bits_equal(mlas.mlas_conv2d(*args, threads=case["threads"]), want)


class _Threads:
    """``FXPSIM_ORT_THREADS`` set for a block (restored after)."""

    def __init__(self, n):
        self.n, self.saved = n, None

    def __enter__(self):
        self.saved = os.environ.get("FXPSIM_ORT_THREADS")
        os.environ["FXPSIM_ORT_THREADS"] = str(self.n)

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop("FXPSIM_ORT_THREADS", None)
        else:
            os.environ["FXPSIM_ORT_THREADS"] = self.saved


@settings(max_examples=40)
@given(st.composite(_conv_case)(), st.integers(1, 8))
def test_prepared_conv_matches_the_numpy_model_as_the_thread_count_changes(case, other):
    """One prepared conv called under a thread count, another, then the first again: each call the numpy
    model's bits for the thread count of that moment (MlasConvPrepare's choice never goes stale)."""
    operands = _conv_operands(case)
    if operands is None:
        return
    x, w, bias = operands
    g = case["groups"]
    geometry = (case["stride"], case["pads"], case["dilation"], g)
    prepared = mlas.mlas_conv2d_prepared(x.shape, w, bias, *geometry)
    for threads in (case["threads"], other, case["threads"]):
        try:
            want = _numpy(lambda: mlas.mlas_conv2d(x, w, bias, *geometry, threads=threads))
        except NotImplementedError:
            return
        with _Threads(threads):
            _bits_equal(prepared(x), want)
            _bits_equal(prepared(np.asfortranarray(x)), want)           # a non-contiguous input
            _bits_equal(_numpy(lambda: prepared(x)), want)              # the C kernel switched off


def test_prepared_conv_follows_a_thread_count_that_changes_the_bits():
    """A one-image conv whose segments (and so its float32 sums) depend on the thread count: the prepared conv
    gives 1 thread's bits, then 4 threads' (which differ), then 1 thread's again."""
    rng = np.random.default_rng(11)
    x, w, bias = _operand(rng, (1, 32, 16, 16), 3), _operand(rng, (8, 32, 3, 3), 3), _operand(rng, (8,), 3)
    geometry = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    want = {t: _numpy(lambda: mlas.mlas_conv2d(x, w, bias, *geometry, threads=t)) for t in (1, 4)}
    assert np.count_nonzero(want[1].view(np.int32) != want[4].view(np.int32)) > 0
    prepared = mlas.mlas_conv2d_prepared(x.shape, w, bias, *geometry)
    for t in (1, 4, 1):
        with _Threads(t):
            _bits_equal(prepared(x), want[t])


def test_segmented_conv_on_many_segments_matches_the_numpy_model():
    rng = np.random.default_rng(5)
    x, w = _operand(rng, (2, 5, 23, 29), 3), _operand(rng, (7, 5, 3, 3), 3)
    seg = [(0, 100), (100, 37), (137, 300), (437, 230)]         # 667 = 23 * 29 positions
    got = [mk.conv_segmented(x, w, 1, (3, 3), (1, 1), (1, 1), (1, 1), (23, 29), seg, simd=s) for s in (True, False)]
    _bits_equal(got[0], got[1])
    cols = mlas_conv._im2col(x, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 23, 29)
    filt = np.broadcast_to(w.reshape(1, 7, 45), (2, 7, 45))
    for s0, count in seg:
        _bits_equal(got[0][..., s0:s0 + count],
                    _numpy(lambda: mlas_conv._conv_operation(filt, cols[..., s0:s0 + count], 45, 667)))


def test_bad_operands_are_refused():
    a, b = np.zeros((1, 2, 3), F32), np.zeros((1, 3, 4), F32)
    with pytest.raises(TypeError, match="a3 must be a 3-D float32"):
        mk.sgemm(a.astype(np.float64), b, None, mk.SLICES, 1)
    with pytest.raises(ValueError, match="do not chain"):
        mk.sgemm(a, np.zeros((1, 2, 4), F32), None, mk.SLICES, 1)
    with pytest.raises(ValueError, match="c3 has shape"):
        mk.sgemm(a, b, np.zeros((1, 2, 3), F32), mk.SLICES, 1)
    with pytest.raises(ValueError, match="needs M = 1"):
        mk.sgemm(a, b, None, mk.M1)
    with pytest.raises(ValueError, match="sk must be"):
        mk.sgemm(a, b, None, mk.SLICES, 0)
    with pytest.raises(ValueError, match="unknown kernel"):
        mk.sgemm(a, b, None, 7, 1)
    x, w = np.zeros((1, 2, 4, 4), F32), np.zeros((3, 2, 3, 3), F32)
    with pytest.raises(ValueError, match="do not tile 4 positions"):
        mk.conv_segmented(x, w, 1, (3, 3), (1, 1), (0, 0), (1, 1), (2, 2), [(0, 3)])
    with pytest.raises(ValueError, match="do not match"):
        mk.conv_segmented(x, w, 2, (3, 3), (1, 1), (0, 0), (1, 1), (2, 2), [(0, 4)])


# ----------------------------------------------------------------------------------------- onnxruntime, live
def _ort_one_thread(model):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install fxpsim[onnx])")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC    # no NCHWc layout rewrite
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _float_model(op, inputs, attrs, out_dims):
    onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install fxpsim[onnx])")
    from onnx import TensorProto, helper
    names = [f"i{i}" for i in range(len(inputs))]
    g = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], "t",
                          [helper.make_tensor_value_info(nm, TensorProto.FLOAT, list(v.shape))
                           for nm, v in zip(names, inputs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx, m


@settings(max_examples=25)
@given(m=st.integers(1, 24), k=st.integers(1, 400), n=st.integers(1, 200), seed=st.integers(0, 2 ** 32 - 1))
def test_matmul_matches_onnxruntime_live(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = _operand(rng, (m, k), 3), _operand(rng, (k, n), 3)
    _, model = _float_model("MatMul", [a, b], {}, [m, n])
    want = _ort_one_thread(model).run(None, {"i0": a, "i1": b})[0]
    _bits_equal(mlas.mlas_gemm(a, b, threads=1), want)


@settings(max_examples=25)
@given(st.composite(_conv_case)())
def test_conv_matches_onnxruntime_live(case):
    rng = np.random.default_rng(case["seed"])
    g, (kh, kw) = case["groups"], case["kernel"]
    (h, wd), (dh, dw), ((pt, pb), (pl, pr)) = case["hw"], case["dilation"], case["pads"]
    if h + pt + pb < dh * (kh - 1) + 1 or wd + pl + pr < dw * (kw - 1) + 1:
        return
    x = _operand(rng, (case["batch"], g * case["cg"]) + case["hw"], 3)
    w = _operand(rng, (g * case["fc"], case["cg"], kh, kw), 3)
    bias = _operand(rng, (g * case["fc"],), 3)
    try:
        got = mlas.mlas_conv2d(x, w, bias, case["stride"], case["pads"], case["dilation"], g, threads=1)
    except NotImplementedError:
        return
    attrs = dict(kernel_shape=[kh, kw], strides=list(case["stride"]), dilations=[dh, dw], group=g,
                 pads=[pt, pl, pb, pr])
    _, model = _float_model("Conv", [x, w, bias], attrs, list(got.shape))
    want = _ort_one_thread(model).run(None, {"i0": x, "i1": w, "i2": bias})[0]
    _bits_equal(got, want)

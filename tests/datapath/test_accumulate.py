"""Accumulating datapath kernels (fxpsim.datapath) against the pure-Python reference model.

The oracle is ``tests/reference.py``: ``accumulate`` (sequential MAC register) and
``accumulate_tree`` (balanced adder tree) on Python ints, with products built and rounded
exactly here (``fractions.Fraction``).  No fxpsim code is used to compute an expected value.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference as ref
from fxpsim.datapath import accumulate as datapath
from fxpsim.datapath import _acc_conv, _acc_exact, _acc_operands, _acc_per_add, _acc_scratch
from fxpsim.datapath import _accumulate as kernels
from fxpsim.datapath.accumulate import conv1d, conv2d, cumsum, dot, matmul
from fxpsim.datapath.accumulate import sum as fsum
from fxpsim.core.fixed import Format, from_raw, overflow_log

OVERFLOWS = ("saturate", "wrap", "saturate_symmetric", "saturate_zero", "wrap_sign_magnitude", "error")
ROUNDINGS = ref.DETERMINISTIC_ROUNDING_MODES


# --------------------------------------------------------------------------- reference helpers
def aligned(product: int, shift: int, rounding: str) -> int:
    """An exact product brought to the accumulator LSB (shift = f_acc - f_a - f_b)."""
    if shift >= 0:
        return product << shift
    return ref.round_fraction(Fraction(product, 1 << -shift), rounding)


def ref_acc(products, init, acc: Format, overflow, order, at_end):
    """(code, overflowing adds) of one output, by the reference model."""
    mode = "saturate" if overflow == "error" else overflow
    if at_end:
        code, ovf = ref.overflow_int(init + sum(products), acc.word, acc.signed, mode)
        return code, int(ovf)
    fn = ref.accumulate if order == "sequential" else ref.accumulate_tree
    code, n, _ = fn(products, init, acc.word, acc.signed, mode)
    return code, n


def ref_matmul(a, b, fa, fb, acc, init, overflow, rounding, order, at_end):
    shift = acc.frac - fa.frac - fb.frac
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), np.int64)
    cnt = np.zeros((m, n), np.int64)
    for i in range(m):
        for j in range(n):
            prods = [aligned(int(a[i, t]) * int(b[t, j]), shift, rounding) for t in range(k)]
            out[i, j], cnt[i, j] = ref_acc(prods, 0 if init is None else int(init[i, j]), acc, overflow,
                                           order, at_end)
    return out, cnt


def random_codes(rng, fmt: Format, shape):
    """Codes of ``fmt`` with the extremes over-represented."""
    lo, hi = fmt.min_code, fmt.max_code
    codes = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64)
    pick = rng.random(shape)
    codes = np.where(pick < 0.15, lo, codes)
    return np.where(pick > 0.85, hi, codes)


def fits_64(fa: Format, fb: Format, acc: Format) -> bool:
    """The documented alignment limit: aligned products of the formats fit int64."""
    shift = acc.frac - fa.frac - fb.frac
    pmax = max(abs(x) * abs(y) for x in (fa.min_code, fa.max_code) for y in (fb.min_code, fb.max_code))
    return shift >= -63 and pmax << max(shift, 0) <= (1 << 63) - 1


formats = st.builds(Format, st.integers(1, 24), st.integers(-4, 12), st.booleans())
wide_formats = st.builds(Format, st.integers(1, 48), st.integers(-4, 20), st.booleans())


@st.composite
def cases(draw):
    fa, fb = draw(wide_formats), draw(formats)
    signed = draw(st.booleans())
    word = draw(st.integers(2, 64 if signed else 63))
    acc = Format(word, fa.frac + fb.frac + draw(st.integers(-8, 4)), signed)
    shape = draw(st.tuples(st.integers(0, 4), st.integers(0, 12), st.integers(0, 4)))
    return dict(fa=fa, fb=fb, acc=acc, shape=shape, seed=draw(st.integers(0, 2**32 - 1)),
                overflow=draw(st.sampled_from(OVERFLOWS)), rounding=draw(st.sampled_from(ROUNDINGS)),
                order=draw(st.sampled_from(("sequential", "tree"))), at_end=draw(st.booleans()),
                init=draw(st.sampled_from((None, "row", "full"))), small=draw(st.booleans()))


# --------------------------------------------------------------------------- properties
@given(cases())
def test_matmul_matches_reference(c):
    fa, fb, acc = c["fa"], c["fb"], c["acc"]
    if c["overflow"] == "wrap_sign_magnitude" and not acc.signed:
        return
    rng = np.random.default_rng(c["seed"])
    m, k, n = c["shape"]
    a = random_codes(rng, fa, (m, k))
    b = random_codes(rng, fb, (k, n))
    if c["small"]:                      # small data: the no-overflow fast paths get exercised
        a, b = a // (1 << max(fa.word // 2, 0)), b // (1 << max(fb.word // 2, 0))
        a = np.clip(a, fa.min_code, fa.max_code)
        b = np.clip(b, fb.min_code, fb.max_code)
    init = None
    if c["init"] is not None:
        init = random_codes(rng, acc, (n,) if c["init"] == "row" else (m, n)) // (1 << (acc.word // 2))
    kwargs = dict(overflow=c["overflow"], rounding=c["rounding"], order=c["order"],
                  overflow_at="end" if c["at_end"] else "every", init=init, per_output=True)
    xa, xb = from_raw(a, fa), from_raw(b, fb)
    if not fits_64(fa, fb, acc):
        with pytest.raises(ValueError, match="64 bits|fraction bits"):
            matmul(xa, xb, acc, **kwargs)
        return
    full_init = None if init is None else np.broadcast_to(init, (m, n))
    want, want_cnt = ref_matmul(a, b, fa, fb, acc, full_init, c["overflow"], c["rounding"], c["order"],
                                c["at_end"])
    if c["overflow"] == "error" and want_cnt.sum():
        with pytest.raises(ValueError, match=f"{int(want_cnt.sum())} add"):
            matmul(xa, xb, acc, **kwargs)
        return
    got, cnt = matmul(xa, xb, acc, **kwargs)
    assert got.fmt == acc
    np.testing.assert_array_equal(got.raw, want)
    np.testing.assert_array_equal(cnt, want_cnt)
    assert got.overflows == int(want_cnt.sum())


@pytest.mark.parametrize("overflow", ["saturate", "wrap", "saturate_symmetric", "saturate_zero", "error"])
@pytest.mark.parametrize("word,signed,path", [(16, True, "simd16"), (12, True, "simd16"),
                                              (12, False, "simd32"), (31, True, "simd32"),
                                              (40, True, "simd64"), (20, False, "simd32")])
def test_simd_kernels_match_reference(overflow, word, signed, path):
    """The vectorised 16/32/64-bit-lane kernels: full 64-column blocks, a remainder, several rows."""
    if path == "simd16" and not _acc_per_add._SIMD16:
        path = "simd32"
    if path == "simd32" and not _acc_per_add._SIMD16:
        path = "simd32w"                  # without AVX2: the int32-operand kernel
    rng = np.random.default_rng(word)
    a = rng.integers(-128, 128, (5, 150)) * (1 << max(word - 16, 0) // 2)
    b = rng.integers(-128, 128, (150, 70)) * (1 << max(word - 16, 0) // 2)
    if not signed:
        a, b = np.abs(a), b
    acc = Format(word, 0, signed)
    init = rng.integers(acc.min_code, acc.max_code, (70,)) // 4
    mode = "saturate" if overflow == "error" else overflow
    got, cnt = matmul(a, b, acc, overflow=mode, init=init, per_output=True)
    assert datapath.last_path == path
    want, want_cnt = ref_matmul(a, b, Format.integer(64), Format.integer(64), Format(word, 0, signed),
                                np.broadcast_to(init, (5, 70)), overflow, "half_up", "sequential", False)
    assert want_cnt.sum() > 0             # the test data do overflow
    np.testing.assert_array_equal(got.raw, want)
    np.testing.assert_array_equal(cnt, want_cnt)


@pytest.mark.parametrize("overflow", ["saturate", "wrap", "saturate_symmetric", "saturate_zero"])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 37])
@pytest.mark.parametrize("word,signed,path", [(13, True, "tree32"), (10, False, "tree32"), (36, True, "tree64")])
def test_vectorised_adder_tree_matches_reference(overflow, k, word, signed, path):
    rng = np.random.default_rng(k + word)
    scale = 1 << max(word - 14, 0) // 2
    a = rng.integers(-128, 128, (3, k)) * scale
    b = rng.integers(-128, 128, (k, 70)) * scale
    acc = Format(word, 0, signed)
    init = rng.integers(acc.min_code, acc.max_code, (70,)) // 2
    got, cnt = matmul(a, b, acc, overflow=overflow, order="tree", init=init, per_output=True)
    assert datapath.last_path == (path if k else "exact32")      # K = 0: nothing can overflow
    want, want_cnt = ref_matmul(a, b, Format.integer(64), Format.integer(64), acc, np.broadcast_to(init, (3, 70)),
                                overflow, "half_up", "tree", False)
    np.testing.assert_array_equal(got.raw, want)
    np.testing.assert_array_equal(cnt, want_cnt)
    if k >= 5:
        assert want_cnt.sum() > 0


@pytest.mark.skipif(kernels.simd16_level() < 1, reason="no AVX2 on this CPU")
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("mode,word", [("sat", 16), ("sat", 11), ("zero", 13), ("wrap", 16), ("wrap", 10)])
def test_simd16_variants_agree_with_generic_kernel(level, mode, word):
    """Both ISA variants (AVX2, AVX-512BW) of the 16-bit-lane kernel, K spanning several k tiles."""
    if level > kernels.simd16_level():
        pytest.skip("AVX-512BW not available")
    rng = np.random.default_rng(word)
    a = rng.integers(-128, 128, (35, 300))
    b = rng.integers(-128, 128, (300, 70))
    init = rng.integers(-(1 << (word - 1)), 1 << (word - 1), (35, 70))
    fast = {"sat": kernels.FAST_SATURATE, "zero": kernels.FAST_ZERO, "wrap": kernels.FAST_WRAP_SIGNED}[mode]
    out, cnt = np.empty((35, 70), np.int64), np.empty((35, 70), np.int64)
    kernels.mac_fast16(a.astype(np.int16), _acc_scratch._pack_slabs(b[None], np.int16), init.astype(np.int16),
                       out, cnt, 35, fast, np.int16(-(1 << (word - 1))), np.int16((1 << (word - 1)) - 1),
                       16 - word, 1, level)
    gout, gcnt = np.empty((35, 70), np.int64), np.empty((35, 70), np.int64)
    ovf = {"sat": 0, "zero": 1, "wrap": 3}[mode]
    kernels.mac_generic(a, np.ascontiguousarray(b.T)[None], init, gout, gcnt, np.empty((1, 301), np.int64),
                        35, 0, 0, word, True, ovf, 0, False, 1)
    assert gcnt.sum() > 0
    np.testing.assert_array_equal(out, gout)
    np.testing.assert_array_equal(cnt, gcnt)


@pytest.mark.parametrize("amax,path,small", [(1 << 7, "exact32", 1 << 26), (1 << 7, "blas32", 0),
                                             (1 << 12, "blas64", 0), (1 << 28, "int64", 1 << 26)])
def test_exact_paths_agree_with_generic_kernel(monkeypatch, amax, path, small):
    """Fast exact paths (int32 kernel, float32/float64 BLAS, int64 kernel) == the generic per-add kernel."""
    monkeypatch.setattr(_acc_exact, "_SMALL_EXACT", small)
    rng = np.random.default_rng(7)
    a = rng.integers(-amax, amax, (9, 33))
    b = rng.integers(-amax, amax, (33, 11))
    init = rng.integers(-1000, 1000, (9, 11))
    got = matmul(a, b, 64, init=init)
    assert datapath.last_path == path
    tree = matmul(a, b, 64, init=init, order="tree")     # no overflow: order is irrelevant
    assert datapath.last_path == path
    out, cnt = np.empty((9, 11), np.int64), np.empty((9, 11), np.int64)
    kernels.mac_generic(a, np.ascontiguousarray(b.T)[None], init, out, cnt, np.empty((1, 34), np.int64),
                        9, 0, 0, 64, True, 0, 0, False, 1)
    np.testing.assert_array_equal(got.raw, out)
    np.testing.assert_array_equal(tree.raw, out)
    assert cnt.sum() == 0 and got.overflows == 0
    exact = [[sum(int(a[i, t]) * int(b[t, j]) for t in range(33)) + int(init[i, j]) for j in range(11)]
             for i in range(9)]
    assert got.raw.tolist() == exact


def test_exact_default_accumulator_and_int_acc():
    a = np.array([[127, -128, 5]], np.int8)
    b = np.array([[-128], [-128], [3]], np.int8)
    got = matmul(a, b)                                    # exact: sized from int8 x int8, K = 3
    assert got.fmt.frac == 0 and got.fmt.signed
    assert got.raw.tolist() == [[127 * -128 + 128 * 128 + 15]]
    assert got.fmt.word == (3 * 16384).bit_length() + 1
    q = matmul(from_raw([[3]], Format(8, 4)), from_raw([[5]], Format(8, 2)), 16)
    assert q.fmt == Format(16, 6, True) and q.raw.tolist() == [[15]]


@given(st.integers(0, 2**32 - 1), st.sampled_from(OVERFLOWS[:5]), st.integers(2, 20), st.booleans())
def test_sum_and_cumsum_match_reference(seed, overflow, word, signed):
    if overflow == "wrap_sign_magnitude" and not signed:
        return
    rng = np.random.default_rng(seed)
    fx = Format(int(rng.integers(2, 16)), int(rng.integers(-2, 6)), bool(rng.integers(2)))
    acc = Format(word, fx.frac + int(rng.integers(-3, 3)), signed)
    x = random_codes(rng, fx, (3, int(rng.integers(0, 9))))
    init = random_codes(rng, acc, (3,)) // 2
    shift = acc.frac - fx.frac
    rounding = ROUNDINGS[seed % len(ROUNDINGS)]
    xs = from_raw(x, fx)
    got, cnt = fsum(xs, axis=1, acc=acc, overflow=overflow, rounding=rounding, init=init, per_output=True)
    run, flags = cumsum(xs, axis=1, acc=acc, overflow=overflow, rounding=rounding, init=init,
                        per_output=True)
    for r in range(3):
        adds = [aligned(int(v), shift, rounding) for v in x[r]]
        code, n, trace = ref.accumulate(adds, int(init[r]), word, signed, overflow)
        assert got.raw[r] == code and cnt[r] == n
        assert run.raw[r].tolist() == trace
        assert flags[r].sum() == n
        tree, ntree, _ = ref.accumulate_tree(adds, int(init[r]), word, signed, overflow)
        t = fsum(xs[r], acc=acc, overflow=overflow, rounding=rounding, init=int(init[r]), order="tree")
        assert int(t.raw) == tree and t.overflows == ntree


# --------------------------------------------------------------------------- convolution
def ref_conv2d(x, w, stride, pads, dil, groups, init, acc, overflow, order):
    """Explicit loops: product list per output in (kh, kw, c) order, zero products for padding."""
    nb, h, wd, cin = x.shape
    kh, kw, cg, cout = w.shape
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((nb, oh, ow, cout), np.int64)
    total = 0
    for n in range(nb):
        for p in range(oh):
            for q in range(ow):
                for o in range(cout):
                    g = o // (cout // groups)
                    prods = []
                    for i in range(kh):
                        for j in range(kw):
                            for c in range(cg):
                                y, xx = p * stride[0] + i * dil[0] - pt, q * stride[1] + j * dil[1] - pl
                                inside = 0 <= y < h and 0 <= xx < wd
                                v = int(x[n, y, xx, g * cg + c]) if inside else 0
                                prods.append(v * int(w[i, j, c, o]))
                    out[n, p, q, o], c_ = ref_acc(prods, int(init[o]), acc, overflow, order, False)
                    total += c_
    return out, total


def _case_geometry(case):
    """(stride, dilation, explicit pads) of a conv case, SAME by TensorFlow's rule."""
    stride = case["stride"] if isinstance(case["stride"], tuple) else (case["stride"],) * 2
    dil = case["dil"] if isinstance(case["dil"], tuple) else (case["dil"],) * 2
    pads = case["padding"]
    if pads == "VALID":
        pads = ((0, 0), (0, 0))
    elif pads == "SAME":
        pads = tuple(_acc_conv._same_pad(s, k, st_, d) for s, k, st_, d in
                     zip(case["shape"][1:3], case["k"], stride, dil))
    return stride, dil, pads


@pytest.mark.parametrize("case", [
    dict(stride=1, padding="VALID", dil=1, groups=1, shape=(2, 5, 6, 3), k=(3, 3), cout=4),
    dict(stride=2, padding="SAME", dil=1, groups=1, shape=(1, 7, 6, 2), k=(3, 2), cout=3),
    dict(stride=(1, 2), padding=((1, 0), (2, 1)), dil=(2, 1), groups=1, shape=(1, 6, 7, 2), k=(2, 3), cout=2),
    dict(stride=1, padding="SAME", dil=1, groups=2, shape=(1, 4, 5, 4), k=(3, 3), cout=6),
    dict(stride=1, padding="SAME", dil=2, groups=3, shape=(2, 5, 5, 3), k=(3, 3), cout=6),   # depthwise x2
])
@pytest.mark.parametrize("overflow,order", [("saturate", "sequential"), ("wrap", "tree"),
                                            ("saturate_symmetric", "sequential")])
def test_conv2d_matches_direct_reference(case, overflow, order):
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, case["shape"]).astype(np.int8)
    cg = case["shape"][3] // case["groups"]
    w = rng.integers(-128, 128, case["k"] + (cg, case["cout"])).astype(np.int8)
    init = rng.integers(-3000, 3000, case["cout"])
    acc = Format(14, 0)
    stride, dil, pads = _case_geometry(case)
    got = conv2d(x, w, acc, stride=case["stride"], padding=case["padding"], dilation=case["dil"],
                 groups=case["groups"], overflow=overflow, order=order, init=init)
    want, total = ref_conv2d(x, w, stride, pads, dil, case["groups"], init, acc, overflow, order)
    np.testing.assert_array_equal(got.raw, want)
    assert got.overflows == total > 0


@pytest.mark.parametrize("tile_bytes", [1, 700, 5000])      # one row per tile, a few rows, whole images
@pytest.mark.parametrize("case", [
    dict(stride=1, padding="SAME", dil=1, groups=1, shape=(3, 7, 6, 3), k=(3, 3), cout=4, acc=14),
    dict(stride=2, padding=((2, 1), (1, 2)), dil=1, groups=1, shape=(2, 9, 7, 2), k=(3, 2), cout=3, acc=13),
    dict(stride=(2, 1), padding="VALID", dil=(2, 1), groups=3, shape=(2, 9, 5, 3), k=(2, 3), cout=6, acc=None),
])
@pytest.mark.parametrize("overflow,order", [("saturate", "sequential"), ("wrap", "tree")])
def test_tiled_conv2d_matches_direct_reference(monkeypatch, tile_bytes, case, overflow, order):
    """Patches in tiles of output rows (a small ``_CONV_TILE_BYTES``): the same codes and overflow counts as
    the direct model, with halo rows at tile edges and the padding of the first and last rows."""
    monkeypatch.setattr(_acc_conv, "_CONV_TILE_BYTES", tile_bytes)
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, case["shape"]).astype(np.int8)
    cg = case["shape"][3] // case["groups"]
    w = rng.integers(-128, 128, case["k"] + (cg, case["cout"])).astype(np.int8)
    init = rng.integers(-3000, 3000, case["cout"])
    stride, dil, pads = _case_geometry(case)
    got, counts = conv2d(x, w, case["acc"], stride=case["stride"], padding=case["padding"], dilation=case["dil"],
                         groups=case["groups"], overflow=overflow, order=order, init=init, per_output=True)
    acc = got.fmt
    if case["acc"] is None:       # exact: the narrowest register for any K products of int8 x int8 plus init
        kk = case["k"][0] * case["k"][1] * cg
        need = max(kk * 128 * 128 + int(init.max()), kk * 128 * 127 - int(init.min()))
        assert acc == Format(need.bit_length() + 1, 0)
    want, total = ref_conv2d(x, w, stride, pads, dil, case["groups"], init, acc, overflow, order)
    np.testing.assert_array_equal(got.raw, want)
    assert got.overflows == total == int(counts.sum())
    assert case["acc"] is None or total > 0


def test_tiled_conv_keeps_per_position_init_and_conv1d(monkeypatch):
    """A per-output ``init`` is cut with the tiles; conv1d (one row of images) tiles over the batch."""
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, (3, 6, 5, 2)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 3, 2, 3)).astype(np.int8)
    init = rng.integers(-2000, 2000, (3, 6, 5, 3))
    monkeypatch.setattr(_acc_conv, "_CONV_TILE_BYTES", 1)
    got = conv2d(x, w, 13, padding="SAME", init=init, overflow="wrap")
    want = np.zeros((3, 6, 5, 3), np.int64)
    total = 0
    for p in range(6):                         # each output position: the reference on its own init
        for q in range(5):
            for o in range(3):
                for n in range(3):
                    prods = [int(x[n, p + i - 1, q + j - 1, c]) * int(w[i, j, c, o])
                             for i in range(3) for j in range(3) for c in range(2)
                             if 0 <= p + i - 1 < 6 and 0 <= q + j - 1 < 5]
                    want[n, p, q, o], c_ = ref_acc(prods, int(init[n, p, q, o]), Format(13, 0), "wrap",
                                                   "sequential", False)
                    total += c_
    np.testing.assert_array_equal(got.raw, want)
    assert got.overflows == total > 0
    x1 = rng.integers(-128, 128, (4, 9, 2)).astype(np.int8)
    w1 = rng.integers(-128, 128, (3, 2, 4)).astype(np.int8)
    got1 = conv1d(x1, w1, 12, padding="SAME", overflow="saturate")
    want1, total1 = ref_conv2d(x1[:, None], w1[None], (1, 1), ((0, 0), (1, 1)), (1, 1), 1, np.zeros(4, np.int64),
                               Format(12, 0), "saturate", "sequential")
    np.testing.assert_array_equal(got1.raw, want1[:, 0])
    assert got1.overflows == total1


def test_same_padding_matches_tensorflow_rule():
    # TF: out = ceil(in / stride); pad_total = max((out-1)*stride + (k-1)*d + 1 - in, 0), extra at the end
    assert _acc_conv._same_pad(7, 3, 2, 1) == (1, 1)
    assert _acc_conv._same_pad(6, 3, 2, 1) == (0, 1)
    assert _acc_conv._same_pad(5, 3, 1, 2) == (2, 2)
    assert _acc_conv._same_pad(4, 1, 1, 1) == (0, 0)


def test_conv1d_equals_reference_and_conv2d():
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (2, 9, 4)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 2, 6)).astype(np.int8)
    init = rng.integers(-100, 100, (6,))
    got = conv1d(x, w, 13, stride=2, padding="SAME", dilation=1, groups=2, init=init, overflow="wrap")
    want, total = ref_conv2d(x[:, None], w[None], (1, 2), ((0, 0), _acc_conv._same_pad(9, 3, 2, 1)), (1, 1), 2,
                             init, Format(13, 0), "wrap", "sequential")
    np.testing.assert_array_equal(got.raw, want[:, 0])
    assert got.overflows == total
    with pytest.raises(ValueError, match="padding"):
        conv1d(x, w, 13, padding="FULL", groups=2)


# --------------------------------------------------------------------------- shapes, threads, logging
def test_batched_broadcasting_equals_per_batch_products():
    rng = np.random.default_rng(11)
    a = rng.integers(-100, 100, (2, 1, 3, 6))
    b = rng.integers(-100, 100, (4, 6, 5))
    init = rng.integers(-50, 50, (5,))
    got = matmul(a, b, 12, overflow="wrap", init=init)
    assert got.shape == (2, 4, 3, 5)
    for i in range(2):
        for j in range(4):
            want, _ = ref_matmul(a[i, 0], b[j], Format.integer(8), Format.integer(8), Format(12, 0),
                                 np.broadcast_to(init, (3, 5)), "wrap", "half_up", "sequential", False)
            np.testing.assert_array_equal(got.raw[i, j], want)
    v = matmul(a[0, 0], b[0, :, 0], 12)                        # matrix @ vector
    assert v.shape == (3,)
    d = dot(a[0, 0, 0], b[0, :, 0], 32, init=7)
    assert d.shape == () and int(d.raw) == 7 + sum(int(p) * int(q) for p, q in zip(a[0, 0, 0], b[0, :, 0]))


@pytest.mark.parametrize("order,overflow,word", [("sequential", "saturate", 16), ("sequential", "wrap", 16),
                                                 ("sequential", "saturate", 20), ("tree", "saturate", 16),
                                                 ("sequential", "saturate_zero", 40),
                                                 ("sequential", "wrap_sign_magnitude", 16)])
def test_thread_count_never_changes_a_bit(order, overflow, word):
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (67, 300)).astype(np.int8)
    b = rng.integers(-128, 128, (300, 70)) * (1 << max(word - 16, 0))
    r1, c1 = matmul(a, b, word, overflow=overflow, order=order, threads=1, per_output=True)
    path = datapath.last_path
    r2, c2 = matmul(a, b, word, overflow=overflow, order=order, threads=2, per_output=True)
    assert datapath.last_path == path and r1.overflows > 0
    np.testing.assert_array_equal(r1.raw, r2.raw)
    np.testing.assert_array_equal(c1, c2)


def test_overflow_log_and_mask():
    a = np.full((2, 4), 100)
    b = np.full((4, 3), 100)
    with overflow_log() as log:
        res, cnt = matmul(a, b, 16, per_output=True)
        conv2d(np.full((1, 3, 3, 1), 3), np.full((3, 3, 1, 1), -5), 8)
    assert log["matmul"].count == res.overflows == cnt.sum() == 2 * 3     # 10^4 * 4 > 32767: last add
    assert log["matmul"].max == 40000 and log["matmul"].min == 40000    # the exact sums
    assert log["conv2d"].count == 1 and log["conv2d"].min == -135
    assert res.overflow_mask.all()
    assert res.raw.max() == 32767
    kept = cnt.copy()
    matmul(np.full((2, 4), 50), np.full((4, 3), 99), 12, overflow="wrap")   # reuses the count scratch
    np.testing.assert_array_equal(cnt, kept)                                 # the returned counts are ours


def test_k_zero_and_empty_dimensions():
    z = matmul(np.zeros((3, 0), np.int8), np.zeros((0, 2), np.int8), 8, init=[5, -6])
    assert z.raw.tolist() == [[5, -6]] * 3 and z.overflows == 0
    z = matmul(np.zeros((3, 0), np.int8), np.zeros((0, 2), np.int8), 8, order="tree")
    assert z.raw.tolist() == [[0, 0]] * 3
    e = matmul(np.zeros((0, 4), np.int8), np.zeros((4, 2), np.int8), 8)
    assert e.shape == (0, 2)
    e = matmul(np.zeros((3, 4), np.int8), np.zeros((4, 0), np.int8), 8, per_output=True)
    assert e[0].shape == (3, 0) and e[1].shape == (3, 0)
    c = conv2d(np.zeros((0, 4, 4, 2), np.int8), np.ones((3, 3, 2, 5), np.int8), 16)
    assert c.shape == (0, 2, 2, 5)
    assert cumsum(np.zeros((2, 0), np.int8), acc=8).shape == (2, 0)
    assert int(fsum(np.zeros(0, np.int8), acc=8, init=3).raw) == 3


def test_non_contiguous_and_read_only_inputs_are_not_modified():
    rng = np.random.default_rng(4)
    base = rng.integers(-128, 128, (6, 20)).astype(np.int16)
    a = base[:, ::2]
    b = np.asfortranarray(rng.integers(-128, 128, (10, 7)))
    b.flags.writeable = False
    keep_a, keep_b = a.copy(), b.copy()
    got = matmul(a, b, 14, overflow="wrap", init=np.arange(7))
    want = matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), 14, overflow="wrap", init=np.arange(7))
    np.testing.assert_array_equal(got.raw, want.raw)
    np.testing.assert_array_equal(a, keep_a)
    np.testing.assert_array_equal(b, keep_b)
    assert not got.raw.flags.writeable


def test_integer_inputs_get_the_smallest_format():
    assert _acc_operands._operand(np.array([-128, 127], np.int64), "a")[1] == Format(8, 0, True)
    assert _acc_operands._operand(np.array([0, 255], np.uint8), "a")[1] == Format(8, 0, False)
    assert _acc_operands._operand(np.array([-1, 0]), "a")[1] == Format(1, 0, True)
    assert _acc_operands._operand(np.array([], np.int32), "a")[1].word == 1


# --------------------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors():
    a = np.ones((2, 3), np.int8)
    b = np.ones((4, 2), np.int8)
    with pytest.raises(ValueError, match="do not align"):
        matmul(a, b)
    with pytest.raises(TypeError, match="from_float"):
        matmul(a.astype(float), a.T)
    with pytest.raises(TypeError, match="integer"):
        matmul(np.array([["x"]]), a)
    with pytest.raises(ValueError, match="overflow='error'.*first at output index|first at output index"):
        matmul(np.full((2, 3), 127, np.int8), np.full((3, 2), 127, np.int8), 16, overflow="error")
    with pytest.raises(ValueError, match=r"8 add\(s\).*\(0, 0\)"):
        matmul(np.full((2, 3), 127, np.int8), np.full((3, 2), 127, np.int8), 15, overflow="error")
    with pytest.raises(ValueError, match="64 bits"):
        matmul(from_raw([[1]], Format(40, 0)), from_raw([[1]], Format(40, 0)), 64)
    with pytest.raises(ValueError, match="64 bits"):
        matmul(from_raw([[1]], Format(32, 0)), from_raw([[1]], Format(16, 0)), Format(64, 20))
    with pytest.raises(ValueError, match="fraction bits"):
        matmul(from_raw([[1]], Format(8, 40)), from_raw([[1]], Format(8, 40)), Format(32, 0))
    with pytest.raises(ValueError, match="pass acc="):
        matmul(from_raw([[1] * 4], Format(40, 0)), from_raw([[1]] * 4, Format(24, 0)))
    with pytest.raises(ValueError, match="init"):
        matmul(a, a.T, 8, init=[1000])
    with pytest.raises(ValueError, match="broadcast"):
        matmul(a, a.T, 8, init=[1, 2, 3])
    with pytest.raises(ValueError, match="overflow"):
        matmul(a, a.T, 8, overflow="explode")
    with pytest.raises(ValueError, match="order"):
        matmul(a, a.T, 8, order="random")
    with pytest.raises(ValueError, match="overflow_at"):
        matmul(a, a.T, 8, overflow_at="never")
    with pytest.raises(ValueError, match="stochastic"):
        matmul(a, a.T, 8, rounding="stochastic")
    with pytest.raises(ValueError, match="threads"):
        matmul(a, a.T, 8, threads=0)
    with pytest.raises(ValueError, match="1..64"):
        matmul(a, a.T, 65)
    with pytest.raises(ValueError, match="1-D"):
        dot(a, a)
    with pytest.raises(ValueError, match="NHWC"):
        conv2d(np.ones((4, 4, 2), np.int8), np.ones((3, 3, 2, 1), np.int8))
    with pytest.raises(ValueError, match="groups"):
        conv2d(np.ones((1, 4, 4, 3), np.int8), np.ones((3, 3, 2, 2), np.int8), groups=2)
    with pytest.raises(ValueError, match="does not fit the padded input"):
        conv2d(np.ones((1, 2, 2, 1), np.int8), np.ones((3, 3, 1, 1), np.int8))
    with pytest.raises(ValueError, match="stride"):
        conv2d(np.ones((1, 4, 4, 1), np.int8), np.ones((3, 3, 1, 1), np.int8), stride=0)
    with pytest.raises(ValueError, match="axis"):
        fsum(a, axis=3)
    with pytest.raises(ValueError, match="wrap_sign_magnitude"):
        matmul(a, a.T, Format(8, 0, False), overflow="wrap_sign_magnitude")
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        matmul(a, a.T, Format(64, 0, False))


# --------------------------------------------------------------------------- transposed SIMD path
@pytest.mark.parametrize("order", ["sequential", "tree"])
@pytest.mark.parametrize("overflow", ["saturate", "wrap", "saturate_symmetric", "saturate_zero"])
def test_few_output_columns_many_rows_matches_reference(order, overflow):
    """A layer with few outputs (8 filters) and many rows runs the transposed problem in the SIMD
    kernels; every output must still equal the per-add reference, overflow counts included."""
    rng = np.random.default_rng(7)
    rows, k, n, acc_bits = 700, 27, 8, 12
    a = rng.integers(-128, 128, (rows, k))
    b = rng.integers(-128, 128, (k, n))
    assert _acc_scratch._transpose_wins(b[None], rows, n, 0)          # the path under test is taken
    got = matmul(a, b, acc=acc_bits, overflow=overflow, order=order)
    accumulate = ref.accumulate_tree if order == "tree" else ref.accumulate
    want, overflows = np.empty((rows, n), dtype=np.int64), 0
    for i in range(rows):
        for j in range(n):
            products = [int(a[i, kk]) * int(b[kk, j]) for kk in range(k)]
            code, count = accumulate(products, 0, acc_bits, True, overflow)[:2]
            want[i, j], overflows = code, overflows + count
    np.testing.assert_array_equal(got.raw, want)
    assert got.overflows == overflows > 0


@pytest.mark.parametrize("acc", [None, 16, 12])
@pytest.mark.parametrize("order", ["sequential", "tree"])
def test_results_never_alias_the_reused_scratch_buffers(acc, order):
    """Kernels reuse per-thread scratch buffers; a returned result must survive the next call."""
    rng = np.random.default_rng(3)
    for sa, sb in (((64, 32), (32, 8)), ((700, 27), (27, 8)), ((256, 256), (256, 256))):
        first = matmul(rng.integers(-128, 128, sa), rng.integers(-128, 128, sb), acc=acc, order=order)
        kept = first.raw.copy()
        matmul(rng.integers(-128, 128, sa), rng.integers(-128, 128, sb), acc=acc, order=order)
        np.testing.assert_array_equal(first.raw, kept)
    x, w = rng.integers(-128, 128, (2, 9, 9, 3)), rng.integers(-128, 128, (3, 3, 3, 8))
    first = conv2d(x, w, acc=acc, padding="SAME", order=order)
    kept = first.raw.copy()
    conv2d(x[::-1].copy(), w, acc=acc, padding="SAME", order=order)
    np.testing.assert_array_equal(first.raw, kept)


# --------------------------------------------------------------------------- reliability review
@pytest.mark.parametrize("threads", [40000, 100000, 10 ** 9])
def test_thread_count_above_the_limit_is_a_clear_error(threads):
    # (40000 threads aborted the process in libgomp, 100000 segfaulted)
    a = np.ones((4, 8), np.int8)
    for call in (lambda: matmul(a, a.T, 12, threads=threads),
                 lambda: conv2d(np.ones((1, 4, 4, 1), np.int8), np.ones((2, 2, 1, 1), np.int8), threads=threads),
                 lambda: fsum(a, threads=threads), lambda: cumsum(a, threads=threads)):
        with pytest.raises(ValueError, match=f"threads={threads} is more than"):
            call()
    with pytest.raises(TypeError, match="threads"):
        matmul(a, a.T, 12, threads=2.0)
    limit = datapath.THREADS_PER_CPU_LIMIT * (__import__("os").cpu_count() or 1)
    assert matmul(a, a.T, 12, threads=limit).raw.tolist() == [[8] * 4] * 4


def test_bad_arguments_are_rejected_before_the_data_is_read():
    # a float x would be a TypeError from the operand check: the argument checks come first
    x, w = np.ones((1, 4, 4, 1)), np.ones((2, 2, 1, 1), np.int8)
    for kwargs, match in (({"stride": 1.5}, "stride"), ({"stride": (1, 1.5)}, "stride"),
                          ({"dilation": None}, "dilation"), ({"stride": "2"}, "stride"),
                          ({"groups": 1.0}, "groups"), ({"threads": -1}, "threads")):
        with pytest.raises(ValueError, match=match):
            conv2d(x, w, **kwargs)
    with pytest.raises(ValueError, match="stride"):
        conv1d(np.ones((1, 4, 1)), np.ones((2, 1, 1), np.int8), stride=(1, 2))
    with pytest.raises(ValueError, match="stride"):
        conv2d(np.ones((1, 4, 4, 1), np.int8), w, stride=1.5)
    assert conv2d(np.ones((1, 4, 4, 1), np.int8), w, stride=np.int64(2)).shape == (1, 2, 2, 1)


def test_all_zero_operand_with_a_large_shift_and_symmetric_saturation():
    # acc Format(16, 20): products (frac 0) are shifted 20 bits up, 2^20 does not fit int16 lanes;
    # with b all zero only init matters: -32768 is below saturate_symmetric's -32767, so the first
    # add overflows (1 per output) and every output is -32767.
    init = np.full((2, 2), -32768)
    for a, b in ((np.ones((2, 3), np.int8), np.zeros((3, 2), np.int8)),
                 (np.zeros((2, 3), np.int8), np.ones((3, 2), np.int8))):
        got, counts = matmul(a, b, acc=Format(16, 20), overflow="saturate_symmetric", init=init,
                             per_output=True)
        assert got.raw.tolist() == [[-32767, -32767]] * 2 and counts.tolist() == [[1, 1]] * 2


def test_most_negative_int64_code():
    # a holds -2^63 (Format(64, 0)), b = [[1]] is Format(2, 0) (-2..1): the exact accumulator would
    # need 66 bits, and products of the formats reach (-2^63)(-2) = 2^64: clear errors, no crash
    with pytest.raises(ValueError, match="needs 66 bits.*pass acc="):
        matmul([[-2 ** 63]], [[1]])
    with pytest.raises(ValueError, match="64 bits"):
        matmul([[-2 ** 63]], [[1]], acc=64)
    assert _acc_operands._operand(np.array([-2 ** 63]), "a")[1] == Format(64, 0)
    assert _acc_operands._operand(np.array([-5, -3]), "a")[1] == Format(4, 0)       # all negative: -8..7
    # with a 64-bit b format whose products fit: Format(63) x Format(1) products are within +-2^62
    got = matmul(from_raw([[-2 ** 62, -2 ** 62]], Format(63, 0)), from_raw([[-1], [-1]], Format(1, 0)), acc=64,
                 per_output=True)
    assert got[0].raw.tolist() == [[2 ** 63 - 1]] and got[1].tolist() == [[1]]    # 2^63 saturates


def test_narrow_right_operand_keeps_memory_near_the_inputs():
    """A [1, K] @ [K, 1] int8 product with a 20-bit accumulator runs the 32-bit kernel, whose right
    operand is packed in 64-column slabs: unchunked that was K * 64 * 4 bytes (512 MiB here for 4 MiB
    of inputs).  The kernels now work through K in chunks that stay within the temporaries' limit."""
    import tracemalloc
    rng = np.random.default_rng(0)
    k = 2_000_000
    a = rng.integers(-128, 128, (1, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, 1), dtype=np.int8)
    matmul(a[:, :8], b[:8], acc=20)                    # first-call buffers
    tracemalloc.start()
    try:
        got = matmul(a, b, acc=20, overflow="wrap")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert datapath.last_path == ("simd32" if _acc_per_add._SIMD16 else "simd32w")
    assert peak < _acc_scratch._TEMP_BYTES + 8 * (a.nbytes + b.nbytes), peak
    exact = int((a.astype(np.int64) @ b.astype(np.int64))[0, 0])
    assert int(got.raw[0, 0]) == ref.overflow_int(exact, 20, True, "wrap")[0]   # wrap: order-free


@pytest.mark.parametrize("kwargs", [
    dict(acc=12, overflow="saturate"), dict(acc=12, overflow="saturate_zero"), dict(acc=20, overflow="wrap"),
    dict(acc=40, overflow="saturate_symmetric"), dict(acc=12, order="tree"),
    dict(acc=Format(14, -3), rounding="half_even"), dict(acc=12, overflow="wrap_sign_magnitude"),
    dict(acc=12, overflow_at="end"), dict(),
])
def test_chunked_kernels_match_reference(monkeypatch, kwargs):
    """Chunks along K carry the fitted accumulators as the next chunk's init (per-add fitting is
    sequential); rows/columns chunks of the generic kernel and K chunks of the exact BLAS sums:
    every path, forced into chunks of 1..3 steps, against the reference model."""
    monkeypatch.setattr(_acc_scratch, "_TEMP_BYTES", 1)
    monkeypatch.setattr(_acc_scratch, "_TEMP_FACTOR", 0)
    rng = np.random.default_rng(11)
    for min_chunk, (m, k, n) in zip((1, 2, 3, 1), ((3, 17, 5), (2, 40, 66), (1, 9, 1), (4, 0, 3))):
        monkeypatch.setattr(_acc_scratch, "_MIN_K_CHUNK", min_chunk)
        a = rng.integers(-128, 128, (m, k))
        b = rng.integers(-128, 128, (k, n))
        init = rng.integers(-300, 300, (m, n)) if "rounding" not in kwargs else None
        got, counts = matmul(a, b, init=init, per_output=True, **kwargs)
        acc = got.fmt
        want, want_cnt = ref_matmul(a, b, Format(8, 0), Format(8, 0), acc,
                                    np.zeros((m, n), np.int64) if init is None else init,
                                    kwargs.get("overflow", "saturate"), kwargs.get("rounding", "half_up"),
                                    kwargs.get("order", "sequential"), kwargs.get("overflow_at") == "end")
        np.testing.assert_array_equal(got.raw, want)
        np.testing.assert_array_equal(counts, want_cnt)


# --------------------------------------------------------------------------- hand tables: overflow bounds
# An 8-bit accumulator ([-128, 127]) receiving the products p0, p1, p2 of one output; worked by hand,
# per add (s_k+1 = fit(s_k + p_k)) and at the end (fit(p0 + p1 + p2) once).  wrap_sign_magnitude
# (SystemC SC_WRAP_SM, n_bits = 0): when bit 8 and bit 7 of the exact value differ, v -> ~v, then wrap.
OVERFLOW_TABLE = {
    # products: {mode: ((per-add result, overflowing adds), (at-end result, overflows))}
    (100, 100, -100): {                    # 200 overflows in the middle; the exact sum 100 fits
        "saturate": ((27, 1), (100, 0)),               # 100, 127*, 27
        "saturate_symmetric": ((27, 1), (100, 0)),
        "saturate_zero": ((-100, 1), (100, 0)),         # 100, 0*, -100
        "wrap": ((100, 2), (100, 0)),                   # 100, -56*, -156 -> 100*
        "wrap_sign_magnitude": ((-45, 1), (100, 0)),    # 200: ~200 = -201 -> 55*; 55 - 100 = -45
    },
    (100, 100, 100): {                     # the exact sum 300 overflows too
        "saturate": ((127, 2), (127, 1)),               # 100, 127*, 127*
        "saturate_symmetric": ((127, 2), (127, 1)),
        "saturate_zero": ((100, 1), (0, 1)),            # 100, 0*, 100
        "wrap": ((44, 1), (44, 1)),                     # 100, -56*, 44;  300 - 256 = 44
        "wrap_sign_magnitude": ((100, 2), (-45, 1)),    # 55*, 155 -> ~155 = -156 -> 100*;  300 -> ~300 -> -45
    },
    (-100, -100, -100): {                  # the lower bound, where saturate_symmetric differs
        "saturate": ((-128, 2), (-128, 1)),             # -100, -128*, -128*
        "saturate_symmetric": ((-127, 2), (-127, 1)),   # -100, -127*, -127*
        "saturate_zero": ((-100, 1), (0, 1)),           # -100, 0*, -100
        "wrap": ((-44, 1), (-44, 1)),                   # -100, 56*, -44;  -300 + 256 = -44
        "wrap_sign_magnitude": ((-100, 2), (43, 1)),    # -200 -> ~ = 199 -> -57*, -157 -> 156 -> -100*; -300 -> 299 -> 43
    },
    (-28, -100, 0): {                      # lands exactly on -128: only saturate_symmetric overflows
        "saturate": ((-128, 0), (-128, 0)),
        "saturate_symmetric": ((-127, 1), (-127, 1)),
        "saturate_zero": ((-128, 0), (-128, 0)),
        "wrap": ((-128, 0), (-128, 0)),
        "wrap_sign_magnitude": ((-128, 0), (-128, 0)),
    },
}


@pytest.mark.parametrize("products", list(OVERFLOW_TABLE), ids=str)
@pytest.mark.parametrize("overflow", ["saturate", "saturate_symmetric", "saturate_zero", "wrap",
                                      "wrap_sign_magnitude", "error"])
@pytest.mark.parametrize("at_end", [False, True])
@pytest.mark.parametrize("columns", [1, 70])           # 70 identical columns: the SIMD lanes and a remainder
def test_overflow_bounds_by_hand(products, overflow, at_end, columns):
    a = np.array([products], dtype=np.int64)           # [1, 3]
    b = np.ones((3, columns), dtype=np.int64)
    mode = "saturate" if overflow == "error" else overflow
    (code, count) = OVERFLOW_TABLE[products][mode][1 if at_end else 0]
    assert ref_acc(list(products), 0, Format(8, 0), mode, "sequential", at_end) == (code, count)   # the oracle agrees
    kwargs = dict(acc=8, overflow=overflow, overflow_at="end" if at_end else "every", per_output=True)
    if overflow == "error" and count:
        with pytest.raises(ValueError, match=f"{count * columns} add"):
            matmul(a, b, **kwargs)
        return
    got, counts = matmul(a, b, **kwargs)
    assert got.raw.tolist() == [[code] * columns] and counts.tolist() == [[count] * columns]
    # the same through sum() (one add per element) and as a 16-bit accumulator that never overflows
    s, c = fsum(a, axis=1, acc=8, overflow=overflow, overflow_at="end" if at_end else "every", per_output=True)
    assert s.raw.tolist() == [code] and c.tolist() == [count]
    assert matmul(a, b, acc=16, overflow=overflow).raw.tolist() == [[sum(products)] * columns]

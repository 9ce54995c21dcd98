"""Fast paths of the accumulating kernels against the pure-Python reference (``tests/reference.py``).

* Wrapping without counts (``count=False``): the exact sum reduced modulo 2^W once (BLAS or the
  unsigned 64-bit kernel) must equal the per-add register -- sequential and adder tree -- of the
  reference, for every width 2..64, with and without ``init``.
* The AVX-512BW per-add kernels (16-bit lanes, and 32-bit lanes from int16 operands): every overflow
  mode, K across several tiles, row and column remainders of the register blocks, row-index and
  shared-``init`` forms, counting and count-free loops, any thread count.

Expected values always come from ``reference.accumulate`` / ``reference.accumulate_tree`` /
``reference.overflow_int`` on Python integers (products formed and aligned here).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference as ref
from fxpsim.core.fixed import Format, from_raw
from fxpsim.datapath import _accumulate as kernels
from fxpsim.datapath import accumulate as datapath
from fxpsim.datapath import _acc_per_add, _acc_scratch
from fxpsim.datapath.accumulate import conv2d, dot, matmul
from fxpsim.datapath.accumulate import sum as fsum

AVX512 = kernels.simd16_level() >= 2
needs_avx512 = pytest.mark.skipif(not AVX512, reason="AVX-512BW kernels not available on this CPU")
# the 16/32-bit kernels (AVX2 or AVX-512BW: the best this CPU has runs)
needs_simd = pytest.mark.skipif(kernels.simd16_level() < 1, reason="no AVX2 on this CPU (no 16/32-bit kernels)")


def aligned(product: int, shift: int, rounding: str = "half_up") -> int:
    if shift >= 0:
        return product << shift
    return ref.round_fraction(Fraction(product, 1 << -shift), rounding)


def reference(a, b, init, word, signed, overflow, order="sequential", shift=0, rounding="half_up",
              cols=None):
    """(codes, counts) of every output (or of the columns ``cols``) by the reference register."""
    m, n = a.shape[0], b.shape[1]
    cols = range(n) if cols is None else cols
    out, cnt = {}, {}
    fn = ref.accumulate if order == "sequential" else ref.accumulate_tree
    for i in range(m):
        for j in cols:
            prods = [aligned(int(a[i, t]) * int(b[t, j]), shift, rounding) for t in range(a.shape[1])]
            start = 0 if init is None else int(np.broadcast_to(init, (m, n))[i, j])
            out[i, j], cnt[i, j], _ = fn(prods, start, word, signed, overflow)
    return out, cnt


def as_array(d, m, n):
    arr = np.zeros((m, n), np.int64)
    for (i, j), v in d.items():
        arr[i, j] = v
    return arr


# --------------------------------------------------------------------------- wrapping, no counts
@given(st.lists(st.integers(-(1 << 70), 1 << 70), max_size=40), st.integers(2, 64), st.booleans(),
       st.integers(0, 2 ** 32 - 1))
def test_wrapping_is_the_exact_sum_reduced_once_in_any_adder_order(products, word, signed, seed):
    """The property the uncounted wrap path rests on, checked on the reference model itself.

    Reduction modulo 2^W is a ring homomorphism Z -> Z/2^W, and the code range holds exactly one
    representative of every class: an adder whose output is wrapped yields a code congruent to the
    exact sum of its inputs, so by induction over the adds -- in a chain (sequential) or over the
    nodes of a balanced tree plus the final ``+ init`` -- the register holds the one code congruent to
    ``init + sum(products)``.  Hence sequential wrap == tree wrap == overflow_int(exact sum, wrap).
    """
    if not signed and word == 64:
        word = 63
    lo, hi = ref.code_range(word, signed)
    init = lo + seed % (hi - lo + 1)
    seq, _, _ = ref.accumulate(products, init, word, signed, "wrap")
    tree, _, _ = ref.accumulate_tree(products, init, word, signed, "wrap")
    once, _ = ref.overflow_int(init + sum(products), word, signed, "wrap")
    assert seq == tree == once


@st.composite
def wrap_cases(draw):
    signed = draw(st.booleans())
    word = draw(st.integers(2, 64 if signed else 63))
    # operand magnitudes from int8 (BLAS float32) through 31 bits (float64 / the unsigned 64-bit kernel)
    abits, bbits = draw(st.integers(1, 31)), draw(st.integers(1, 31))
    fa, fb = Format(abits + 1, draw(st.integers(0, 3)), True), Format(bbits + 1, draw(st.integers(0, 3)), True)
    extra = draw(st.integers(-2, 3))                 # accumulator LSB vs the products' (< 0: rounding)
    if (abits + bbits + 2) + max(extra, 0) > 62:
        extra = min(extra, 0)
    acc = Format(word, fa.frac + fb.frac + extra, signed)
    shape = draw(st.tuples(st.integers(1, 4), st.integers(0, 40), st.integers(1, 5)))
    return dict(fa=fa, fb=fb, acc=acc, shape=shape, seed=draw(st.integers(0, 2 ** 32 - 1)),
                init=draw(st.sampled_from((None, "row", "full"))), order=draw(st.sampled_from(("sequential", "tree"))),
                at_end=draw(st.booleans()))


@given(wrap_cases())
def test_uncounted_wrap_matches_sequential_and_tree_reference(c):
    fa, fb, acc = c["fa"], c["fb"], c["acc"]
    rng = np.random.default_rng(c["seed"])
    m, k, n = c["shape"]
    a = rng.integers(fa.min_code, fa.max_code, (m, k), endpoint=True)
    b = rng.integers(fb.min_code, fb.max_code, (k, n), endpoint=True)
    init = None
    if c["init"] is not None:
        init = rng.integers(acc.min_code, acc.max_code, (n,) if c["init"] == "row" else (m, n), endpoint=True)
    shift = acc.frac - fa.frac - fb.frac
    got = matmul(from_raw(a, fa), from_raw(b, fb), acc, overflow="wrap", count=False, init=init,
                 order=c["order"], overflow_at="end" if c["at_end"] else "every")
    assert got.overflows is None and got.overflow_mask is None
    seq, _ = reference(a, b, init, acc.word, acc.signed, "wrap", "sequential", shift)
    tree, _ = reference(a, b, init, acc.word, acc.signed, "wrap", "tree", shift)
    assert seq == tree                       # (the test above proves why)
    np.testing.assert_array_equal(got.raw, as_array(seq, m, n))
    counted = matmul(from_raw(a, fa), from_raw(b, fb), acc, overflow="wrap", init=init, order=c["order"])
    np.testing.assert_array_equal(counted.raw, got.raw)


@pytest.mark.parametrize("word", [17, 24, 32, 40, 63, 64])
@pytest.mark.parametrize("what,path", [("int8", "blas32"), ("int8-long", "blas32"), ("int8-long-narrow", "blas64"),
                                       ("int24", "blas64"), ("int32", "int64")])
def test_uncounted_wrap_takes_an_exact_sum_path(word, what, path):
    """Wide accumulators on data that overflow them: BLAS while a K chunk's partial sums are exact in
    float32 (K cut into chunks of 2^24 / max|product| when each chunk is a big enough product) or float64,
    else the unsigned 64-bit kernel."""
    rng = np.random.default_rng(word)
    bits, m, k, n = {"int8": (8, 3, 300, 4), "int8-long": (8, 128, 3000, 128), "int8-long-narrow": (8, 3, 5000, 4),
                     "int24": (24, 3, 200, 4), "int32": (32, 3, 70, 4)}[what]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    a = rng.integers(lo, hi, (m, k), endpoint=True)
    b = rng.integers(lo, hi, (k, n), endpoint=True)
    a[0], b[:, 0] = hi, lo                             # one output sums k extreme products
    init = rng.integers(-1000, 1000, (m, n))
    got = matmul(a, b, word, overflow="wrap", count=False, init=init)
    assert datapath.last_path == path
    rows = [0, 1, m - 1]
    want, _ = reference(a[rows], b, init[rows], word, True, "wrap", cols=[0, 1, n - 1])
    for (i, j), v in want.items():
        assert got.raw[rows[i], j] == v


@needs_avx512
def test_uncounted_wrap_of_a_16_bit_register_keeps_the_count_free_per_add_loop():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (5, 200), dtype=np.int8)
    b = rng.integers(-128, 128, (200, 70), dtype=np.int8)
    got = matmul(a, b, 12, overflow="wrap", count=False)
    assert datapath.last_path == "simd16"
    want, _ = reference(a, b, None, 12, True, "wrap")
    np.testing.assert_array_equal(got.raw, as_array(want, 5, 70))


def test_count_false_on_conv_dot_and_sum():
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 5, 5, 16), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 3, 16, 4), dtype=np.int8)
    for acc, mode in ((10, "wrap"), (18, "wrap"), (10, "saturate")):
        counted = conv2d(x, w, acc, overflow=mode, padding="SAME")
        free = conv2d(x, w, acc, overflow=mode, padding="SAME", count=False)
        np.testing.assert_array_equal(free.raw, counted.raw)
        assert free.overflows is None and counted.overflows > 0
    a, b = rng.integers(-128, 128, 50), rng.integers(-128, 128, 50)
    want, _, _ = ref.accumulate([int(p) for p in a * b], 0, 9, True, "wrap")
    assert int(dot(a, b, 9, overflow="wrap", count=False).raw) == want
    xs = rng.integers(-128, 128, (3, 40))
    for r in range(3):
        code, _, _ = ref.accumulate([int(v) for v in xs[r]], 0, 7, True, "saturate")
        assert int(fsum(xs, axis=1, acc=7, count=False).raw[r]) == code


def test_count_false_needs_no_counts_downstream():
    a = np.ones((2, 3), np.int8)
    with pytest.raises(ValueError, match="per_output"):
        matmul(a, a.T, 8, count=False, per_output=True)
    with pytest.raises(ValueError, match="error"):
        matmul(a, a.T, 8, overflow="error", count=False)
    with pytest.raises(TypeError, match="count"):
        matmul(a, a.T, 8, count="no")


# --------------------------------------------------------------------------- per-add kernels
MODES = ("saturate", "wrap", "saturate_zero", "saturate_symmetric")
#: rows: one 4-row block plus a remainder; columns: a full 64-column slab plus 2; K across two k tiles
SAMPLE_COLS = [0, 1, 30, 31, 32, 33, 62, 63, 64, 65]


def _data(rng, word, m, k, n, signed=True):
    """Operands (int16 range) whose running sums leave a ``word``-bit register often, both ways."""
    mag = 181 if word <= 16 else min(181 << (word - 14) // 2, 32767)     # int16 products up to 16 bits
    a = rng.integers(-mag, mag + 1, (m, k))
    b = rng.integers(-mag, mag + 1, (k, n))
    b[:, min(1, n - 1)] = mag                                # a column of large products of one sign
    a[0, : k // 2] = mag
    if not signed:
        a = np.abs(a)
    return a, b


@needs_simd
@pytest.mark.parametrize("word,signed,path", [(16, True, "simd16"), (12, True, "simd16"), (2, True, "simd16"),
                                              (17, True, "simd32"), (24, True, "simd32"), (31, True, "simd32"),
                                              (32, True, "simd32"), (20, False, "simd32"), (30, False, "simd32")])
@pytest.mark.parametrize("overflow", MODES)
def test_simd_kernels_match_reference(word, signed, path, overflow):
    if overflow == "saturate_symmetric" and word == 32:
        path = "simd64"                                    # lo = -hi: not the full int32 register
    rng = np.random.default_rng(word * 7 + len(overflow))
    m, k, n = 5, 1030, 66
    a, b = _data(rng, word, m, k, n, signed)
    acc = Format(word, 0, signed)
    init = rng.integers(acc.min_code, acc.max_code, (n,), endpoint=True) // 2
    got, cnt = matmul(a, b, acc, overflow=overflow, init=init, per_output=True)
    assert datapath.last_path == path
    want, want_cnt = reference(a, b, init, word, signed, overflow, cols=SAMPLE_COLS)
    assert sum(want_cnt.values()) > 0
    for (i, j), v in want.items():
        assert got.raw[i, j] == v and cnt[i, j] == want_cnt[i, j], (i, j)
    free = matmul(a, b, acc, overflow=overflow, init=init, count=False)
    np.testing.assert_array_equal(free.raw, got.raw)       # count-free loops: same codes


@needs_simd
@pytest.mark.parametrize("word", [9, 16, 23, 32])
def test_row_index_and_shared_init_forms(word):
    """The kernels' row-index and one-row-``init`` forms (used by the node sweep) on a permutation."""
    rng = np.random.default_rng(word)
    m, k, n = 7, 90, 70
    a, b = _data(rng, word, m, k, n)
    lo, hi = -(1 << (word - 1)), (1 << (word - 1)) - 1
    init = rng.integers(lo, hi + 1, (1, n)) // 2
    rows = rng.permutation(m).astype(np.int64)
    bs = _acc_scratch._pack_slabs(b[None], np.int16).copy()
    out, cnt = np.empty((m, n), np.int64), np.empty((m, n), np.int64)
    if word <= 16:
        kernels.mac_fast16(a.astype(np.int16), bs, init.astype(np.int16), out, cnt, m, kernels.FAST_SATURATE,
                           lo, hi, 16 - word, 1, rows=rows)
    else:
        kernels.mac_fast32m(a.astype(np.int16), bs, init.astype(np.int32), out, cnt, m, kernels.FAST_SATURATE,
                            lo, hi, 32 - word, 1, rows=rows)
    want, want_cnt = reference(a[rows], b, np.broadcast_to(init, (m, n)), word, True, "saturate")
    np.testing.assert_array_equal(out, as_array(want, m, n))
    np.testing.assert_array_equal(cnt, as_array(want_cnt, m, n))
    assert cnt.sum() > 0


@pytest.mark.parametrize("word,overflow", [(16, "saturate"), (11, "wrap"), (24, "saturate"), (32, "wrap"),
                                           (28, "saturate_zero")])
def test_serial_and_parallel_runs_are_identical(word, overflow):
    rng = np.random.default_rng(word)
    a, b = _data(rng, word, 301, 700, 130)
    runs = [matmul(a, b, word, overflow=overflow, per_output=True, threads=t) for t in (1, 2, 3)]
    for got, cnt in runs[1:]:
        np.testing.assert_array_equal(got.raw, runs[0][0].raw)
        np.testing.assert_array_equal(cnt, runs[0][1])
    assert runs[0][0].overflows > 0


@needs_simd
@settings(max_examples=40)
@given(st.integers(2, 32), st.sampled_from(MODES), st.integers(0, 2 ** 32 - 1), st.integers(1, 9),
       st.integers(0, 70), st.integers(1, 70))
def test_simd_kernels_small_shapes(word, overflow, seed, m, k, n):
    """Every remainder of the register blocks (rows mod 4 / 2, columns mod 64, K = 0)."""
    rng = np.random.default_rng(seed)
    a, b = _data(rng, word, m, k, n)
    init = rng.integers(-(1 << (word - 1)), 1 << (word - 1), (m, n)) // 3
    got, cnt = matmul(a, b, word, overflow=overflow, init=init, per_output=True)
    want, want_cnt = reference(a, b, init, word, True, overflow)
    np.testing.assert_array_equal(got.raw, as_array(want, m, n))
    np.testing.assert_array_equal(cnt, as_array(want_cnt, m, n))


@pytest.mark.parametrize("word,overflow", [(12, "saturate"), (12, "wrap"), (24, "saturate"), (40, "wrap")])
def test_count_false_without_simd_kernels(monkeypatch, word, overflow):
    """Kernels that always count (compiler-vectorised 32/64-bit): counts taken, then dropped."""
    monkeypatch.setattr(_acc_per_add, "_SIMD512", False)
    monkeypatch.setattr(_acc_per_add, "_SIMD16", False)
    rng = np.random.default_rng(word)
    a, b = _data(rng, word, 5, 300, 70)
    got = matmul(a, b, word, overflow=overflow, count=False)
    assert got.overflows is None
    want, _ = reference(a, b, None, word, True, overflow, cols=SAMPLE_COLS)
    for (i, j), v in want.items():
        assert got.raw[i, j] == v

"""The column kernel's fast paths (AVX2 chunk and lane close, and the portable C loops behind
``kernel.SIMD = False``) against the Fraction model of ``float_acc_model.py``, on their edge cases:
N not a multiple of the 16-column tile (N = 1 included), K of several chunks of odd lengths,
all-zero chunks, NaN / Inf in a chunk (the scalar close) beside finite chunks of the same tile (the
lane close), C near the overflow threshold, every rounding and overflow mode.  Both paths must give
the model's codes and counts; a K that is not a multiple of the chunk is refused by name.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fxpsim.datapath.floatacc import FloatAccumulator, float_matmul
from fxpsim.datapath.floatacc import kernel

from test_float_acc_kernel import _ref_fused

pytestmark = pytest.mark.skipif(not kernel.kernel_available(), reason="fxpsim.core._floatacc not built")

# e4m3 codes the cases lean on: zeros, NaN (0x7F / 0xFF), the largest finite, the smallest subnormal
E4_EDGES = (0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x38, 0xB8)
# float32 C codes: zeros, ±Inf, NaN, the largest finite, a subnormal, 1.0
F32_EDGES = (0, 1 << 31, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF, 0xFF7FFFFF, 1, 0x3F800000)


def _codes(data, n, edges, hi):
    return np.array(data.draw(st.lists(st.one_of(st.sampled_from(edges), st.integers(0, hi)),
                                       min_size=n, max_size=n)), np.int64)


@pytest.fixture(params=[True, False], ids=["simd", "portable"])
def simd(request, monkeypatch):
    monkeypatch.setattr(kernel, "SIMD", request.param)
    return request.param


@pytest.mark.parametrize("use_simd", [True, False], ids=["simd", "portable"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fast_paths_against_fraction_model(use_simd, data):
    chunk = data.draw(st.sampled_from((1, 3, 5, 8, 16, 32)))
    K = chunk * data.draw(st.integers(1, 3))
    M = data.draw(st.integers(1, 3))
    N = data.draw(st.sampled_from((1, 2, 15, 16, 17, 33)))
    A = _codes(data, M * K, E4_EDGES, 255).reshape(M, K)
    B = _codes(data, K * N, E4_EDGES, 255).reshape(K, N)
    if data.draw(st.booleans()):                 # the first chunk all zeros in A: C alone sets E_max
        A[:, :chunk] = 0
    if data.draw(st.booleans()):                 # no specials at all: every chunk takes the lane close
        A[(A & 0x7F) == 0x7F] = 0x7E
        B[(B & 0x7F) == 0x7F] = 0x7E
    C = _codes(data, M * N, F32_EDGES, (1 << 32) - 1).reshape(M, N)
    acc = FloatAccumulator(kind="fused", output="float32", chunk=chunk, align="truncate",
                           fraction_bits=data.draw(st.integers(7, 24)),
                           output_man_bits=data.draw(st.sampled_from((None, 13, 4, 1))),
                           zero_exponent=data.draw(st.sampled_from((None, -126, -3))),
                           output_rounding=data.draw(st.sampled_from(
                               ("toward_zero", "half_even", "half_away", "floor", "ceil"))),
                           overflow=data.draw(st.sampled_from(("inf", "ieee", "saturate"))))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "SIMD", use_simd)
        r = float_matmul(A, B, "e4m3", "e4m3", acc, C)
    want, counts = _ref_fused("e4m3", "e4m3", A, B, C, acc)
    assert r.bits.astype(np.int64).tolist() == want.tolist()
    assert (r.overflows, r.terms_inexact, r.underflows) == (counts["overflows"], counts["terms_inexact"],
                                                            counts["underflows"])


def test_overflow_and_underflow_by_hand(simd):
    """Hopper e4m3 (F = 13, truncation), 17 outputs (a tile and a padded one), by hand.

    C = float32 max = (2^24 - 1) 2^104 and one product 448 * 448 < 2^18: E_max = 127, steps of
    2^(127 - 13); the product truncates to 0 (inexact), C to (2^24 - 1) >> 10 = 2^14 - 1 (inexact),
    d = (2^14 - 1) 2^114 = 2^127 (2 - 2^-13), exact in e8m13: 0x7F7FFC00, no overflow.
    C = 2^-149 (code 1), zero operands (exponent -126): E_max = -126, C's term 1 >> 10 = 0
    (inexact), s = 0 gives +0 and, being zero, no underflow."""
    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    A = np.zeros((1, 32), np.int64)
    B = np.zeros((32, 17), np.int64)
    A[0, 0], B[0, :] = 0x7E, 0x7E                          # 448 * 448
    C = np.full((1, 17), 0x7F7FFFFF, np.int64)
    r = float_matmul(A, B, "e4m3", "e4m3", acc, C)
    assert r.bits.astype(np.int64).tolist() == [[0x7F7FFC00] * 17]
    assert r.overflows == 0 and r.terms_inexact == 17 * 2          # the product and C both truncated
    r = float_matmul(np.zeros((1, 32), np.int64), np.zeros((32, 17), np.int64), "e4m3", "e4m3", acc,
                     np.ones((1, 17), np.int64))
    assert r.bits.astype(np.int64).tolist() == [[0] * 17]
    assert r.underflows == 0 and r.terms_inexact == 17            # s = 0: a zero sum is no underflow


def test_k_not_a_multiple_of_the_chunk_is_refused():
    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    with pytest.raises(ValueError, match="K=33 is not a multiple of the accumulator's chunk=32"):
        float_matmul(np.zeros((2, 33), np.int64), np.zeros((33, 3), np.int64), "e4m3", "e4m3", acc)


@pytest.mark.parametrize("mode,pos,neg", [
    ("half_even", 0x3F800000, 0xBF800000), ("half_away", 0x3FC00000, 0xBFC00000),
    ("toward_zero", 0x3F800000, 0xBF800000), ("floor", 0x3F800000, 0xBFC00000),
    ("ceil", 0x3FC00000, 0xBF800000)])
def test_ties_by_hand(simd, mode, pos, neg):
    """±1.0 * 1.25 (e4m3 0x38 / 0xB8 and 0x3A) rounded to 1 mantissa bit: ±1.25 lies halfway between
    ±1.0 (0x3F800000) and ±1.5 (0x3FC00000); each mode picks its side, in all 17 columns."""
    acc = FloatAccumulator(kind="fused", output="float32", output_man_bits=1, chunk=1, fraction_bits=13,
                           align="truncate", zero_exponent=-126, output_rounding=mode)
    A = np.array([[0x38], [0xB8]], np.int64)
    B = np.full((1, 17), 0x3A, np.int64)
    r = float_matmul(A, B, "e4m3", "e4m3", acc)
    assert r.bits.astype(np.int64).tolist() == [[pos] * 17, [neg] * 17]
    assert r.terms_inexact == 0 and r.overflows == 0 and r.underflows == 0


# ---- the float32-plane terms of the AVX2 column kernel (``_f32_params``, ``f32`` / ``f32_thr``)
def _record_f32(mp):
    """Wrap the column kernel to record the ``f32`` switch it was given."""
    seen = []
    real = kernel._floatacc.fused_cols_kernel

    def spy(*args):
        seen.append(args[-2]["f32"])
        return real(*args)
    mp.setattr(kernel._floatacc, "fused_cols_kernel", spy)
    return seen


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_float_plane_terms_taken_and_exact(data):
    """Ordinary e4m3 operands (with 13 or 16 fraction bits: the column kernel's 31-bit sums) take the float32-plane terms (the switch is on); where C's exponent dominates
    some rows (base - E_max below ``f32_thr``) those chunks fall back to the integer loop. Either way the
    bits and counts equal the Fraction model."""
    chunk = data.draw(st.sampled_from((8, 16, 32)))
    K, M, N = chunk * data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.sampled_from((16, 17)))
    A = _codes(data, M * K, (0x00, 0x80, 0x7E, 0xFE, 0x01, 0x81, 0x38), 0x7E).reshape(M, K)
    B = _codes(data, K * N, (0x00, 0x80, 0x7E, 0xFE, 0x01, 0x81, 0x38), 0x7E).reshape(K, N)
    A[:, ::3] |= 0x80                                     # negative products too
    big = data.draw(st.sampled_from((0x7E000000, 0x5F000000, 0x3F800000)))   # ~2^125, 2^63, 1.0
    C = np.where(np.arange(M)[:, None] % 2 == 0, big, 0x3F800000) * np.ones((1, N), np.int64)
    acc = FloatAccumulator(kind="fused", output="float32", chunk=chunk, align="truncate",
                           fraction_bits=data.draw(st.sampled_from((13, 16))), output_rounding="toward_zero")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "SIMD", True)
        seen = _record_f32(mp)
        r = float_matmul(A, B, "e4m3", "e4m3", acc, C)
    assert seen == [1]
    want, counts = _ref_fused("e4m3", "e4m3", A, B, C, acc)
    assert r.bits.astype(np.int64).tolist() == want.tolist()
    assert (r.overflows, r.terms_inexact, r.underflows) == (counts["overflows"], counts["terms_inexact"],
                                                            counts["underflows"])


def _parts(mags, exps):
    mag, exp = np.array(mags, np.int64), np.array(exps, np.int64)
    return mag, exp, None, np.zeros(mag.shape, np.int64)


@pytest.mark.parametrize("a,b,base,ok", [
    (([15], [8]), ([15], [8]), 0, 1),                  # e4m3-sized: 4 + 4 significand bits, small exponents
    (([1 << 11], [0]), ([1 << 12], [0]), 0, 1),        # 12 + 13 = 25 bits > 24: products not exact in float32
    (([1 << 11], [0]), ([(1 << 12) - 1], [0]), 0, 1),  # 12 + 12 = 24 bits: exact
    (([1], [-101]), ([1], [0]), 0, 0),                 # an exponent below -100
    (([1], [101]), ([1], [0]), 0, 0),                  # an exponent above 100
    (([1], [60]), ([1], [40]), 0, 0),                  # a product at 2^100 and more
    (([1], [-60]), ([1], [-61]), 0, 0),                # min(E_a + E_b) below -120
    (([1], [-50]), ([1], [-50]), 27, 0),               # base - min(E_a + E_b) = 127 > 126
    (([1], [-50]), ([1], [-50]), 26, 1),               # = 126: allowed
])
def test_float_plane_guard_by_hand(a, b, base, ok):
    """``_f32_params`` allows the float path exactly under the docstring's conditions (hand-computed)."""
    want_bits = (a[0][0].bit_length() + b[0][0].bit_length())
    if want_bits > 24:
        ok = 0
    got = kernel._f32_params(_parts(*a), _parts(*b), base)
    assert got["f32"] == ok
    assert got["f32_thr"] == max(-126 - (a[1][0] + b[1][0]), -126)

"""The BLAS fast paths of the float accumulators against the independent Fraction model.

``blas.blas_exact`` (the Kulisch kind on one SGEMM/DGEMM and one cast) is called directly, so each
case checks the fast path itself (not a fallback), and through ``float_matmul``; every element is
compared with ``float_acc_model.exact_dot`` (exact rationals from the encodings' definitions) and the
overflow count with the model's own overflow test.
"""
from __future__ import annotations

from fractions import Fraction
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, strategies as st

import float_acc_model as model
import reference_float as rf
from fxpsim.core.float_format import FloatFormat
from fxpsim.datapath.floatacc import FloatAccumulator, float_matmul
from fxpsim.datapath.floatacc.blas import blas_exact

#: formats the fast path takes (bound <= 53 bits) and one it must refuse (E5M2: 2 * 33 bits)
FAST = ("e4m3", "e2m1", "e3m2", "e2m3", "e4m3fnuz")
SLOW = ("e5m2",)


def _finite_codes(fmt, draw, n, clean):
    codes = draw(st.lists(st.integers(0, (1 << fmt.bits) - 1), min_size=n, max_size=n))
    if clean:                               # NaN / Inf codes (by the model's decoding) replaced by 0
        codes = [0 if rf.code_value(fmt, x) in (rf.NAN, rf.POS_INF, rf.NEG_INF) else x for x in codes]
    return codes


def _exact_value(a, b, fa, fb):
    return sum((rf.code_value(fa, x) * rf.code_value(fb, y) for x, y in zip(a, b)), Fraction(0))


def _overflows(value, out) -> bool:
    """|value| rounds (ties to even) above the largest finite value of ``out``: at or past max + ulp/2."""
    top = rf.code_value(out, out.max_mag_code)
    ulp = top - rf.code_value(out, out.max_mag_code - 1)
    return abs(value) >= top + ulp / 2


@given(st.data())
def test_blas_exact_against_fraction_model(data):
    na = data.draw(st.sampled_from(FAST + SLOW))
    nb = data.draw(st.sampled_from((na,) + FAST))
    fa, fb = FloatFormat.parse(na), FloatFormat.parse(nb)
    out = FloatFormat.parse(data.draw(st.sampled_from(("float32", "float16"))))
    clean = data.draw(st.booleans())
    K = data.draw(st.integers(1, 40))
    M, N = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    A = [_finite_codes(fa, data.draw, K, clean) for _ in range(M)]
    Bt = [_finite_codes(fb, data.draw, K, clean) for _ in range(N)]
    csign = data.draw(st.lists(st.booleans(), min_size=M * N, max_size=M * N))
    C = np.array([out.sign_bit if s else 0 for s in csign], np.int64).reshape(M, N)
    acc = FloatAccumulator(kind="exact", output=out)
    Ac, Bc = np.array(A, np.int64), np.array(Bt, np.int64).T.copy()
    stats = dict(overflows=0, underflows=0)
    fast = blas_exact(Ac, Bc, fa, fb, C, acc, stats)
    want = [[model.exact_dot(A[i], Bt[j], int(C[i, j]), fa, fb, out, "half_even", acc.nan) for j in range(N)]
            for i in range(M)]
    r = float_matmul(Ac, Bc, fa, fb, acc, C)
    assert r.bits.astype(np.int64).tolist() == want
    specials = any(rf.code_value(fa, x) in (rf.NAN, rf.POS_INF, rf.NEG_INF) for row in A for x in row) or \
        any(rf.code_value(fb, x) in (rf.NAN, rf.POS_INF, rf.NEG_INF) for row in Bt for x in row)
    if na in FAST and nb in FAST and not specials:
        assert fast is not None, "the fast path refused an eligible case"
    if fast is None:
        return
    assert fast.tolist() == want
    n_ovf = sum(_overflows(_exact_value(A[i], Bt[j], fa, fb), out) for i in range(M) for j in range(N))
    assert stats == dict(overflows=n_ovf, underflows=0)
    assert r.overflows == n_ovf


def test_blas_exact_refuses_what_it_cannot_prove():
    """Another rounding, a nonzero c, a NaN operand, output_man_bits, a 66-bit bound: None (general path)."""
    e4m3, e5m2 = FloatFormat.parse("e4m3"), FloatFormat.parse("e5m2")
    A = np.array([[0x38, 0x40]], np.int64)               # 1, 2
    B = np.array([[0x38], [0x38]], np.int64)
    z = np.array([[0x80000000]], np.int64)                # -0 in float32
    st_ = dict(overflows=0, underflows=0)
    rne = FloatAccumulator(kind="exact")
    assert blas_exact(A, B, e4m3, e4m3, z, rne, st_).tolist() == [[0x40400000]]        # 3.0
    assert blas_exact(A, B, e4m3, e4m3, z, FloatAccumulator(kind="exact", output_rounding="toward_zero"),
                      st_) is None
    assert blas_exact(A, B, e4m3, e4m3, np.array([[0x3F800000]], np.int64), rne, st_) is None
    assert blas_exact(np.array([[0x7F, 0x40]], np.int64), B, e4m3, e4m3, z, rne, st_) is None
    assert blas_exact(A, B, e4m3, e4m3, z, FloatAccumulator(kind="exact", output_man_bits=13), st_) is None
    assert blas_exact(A, B, e5m2, e5m2, z, rne, st_) is None
    assert blas_exact(A, B, e4m3, e4m3, z, FloatAccumulator(kind="exact", output="bfloat16"), st_) is None


def test_blas_exact_zero_signs_hand_table():
    """-0 only when every addend is -0: (-0)(+0) + (-0)(+0) + c=-0 -> -0; c=+0 -> +0; 1*1 + (-1)*1 -> +0."""
    e2m1 = FloatFormat.parse("e2m1")
    acc = FloatAccumulator(kind="exact")
    st_ = dict(overflows=0, underflows=0)
    A = np.array([[0x8, 0x8], [0x2, 0xA]], np.int64)     # row 0: -0, -0; row 1: 1, -1
    B = np.array([[0x0, 0x2], [0x0, 0x2]], np.int64)     # col 0: +0, +0; col 1: 1, 1
    C = np.array([[0x80000000, 0], [0x80000000, 0x80000000]], np.int64)
    D = blas_exact(A, B, e2m1, e2m1, C, acc, st_)
    assert D.tolist() == [[0x80000000, 0], [0, 0]]     # row 0 col 1: -0*1 + -0*1 + +0 = +0


def test_blas_exact_large_k_switches_to_float64():
    """E2M1 at K = 2^17 (5 + 5 + 17 = 27 bits > 24): DGEMM.  The exact sum 36 (K - 1) + 0.75 needs 25
    significand bits, so a float32 sum would have rounded on the way; the result is its one rounding
    (a tie at ulp 0.5, to the even 4718557)."""
    e2m1, f32 = FloatFormat.parse("e2m1"), FloatFormat.parse("float32")
    K = 1 << 17
    A = np.full((1, K), 0x7, np.int64)                   # 6.0
    B = np.full((K, 1), 0x7, np.int64)
    A[0, 0], B[0, 0] = 0x1, 0x3                          # 0.5 * 1.5
    st_ = dict(overflows=0, underflows=0)
    D = blas_exact(A, B, e2m1, e2m1, np.array([[0x80000000]], np.int64), FloatAccumulator(kind="exact"), st_)
    exact = Fraction(36) * (K - 1) + Fraction(3, 4)
    assert 2 ** 22 < exact < 2 ** 23 and (exact * 4).denominator == 1 and exact * 4 % 2 == 1
    # ulp 2^-1 in [2^22, 2^23): an odd multiple of 2^-2 is a tie between 4718556.5 (odd) and 4718557 (even)
    assert rf.code_value(f32, int(D[0, 0])) == 4718557


def test_blas_exact_float16_has_no_double_rounding():
    """128 + 2^-4 + 2^-18 into float16 (ulp 2^-3 at 128): past the tie, so 128.125.  Through float32
    first it would be 128 + 2^-4 (2^-18 below half of float32's 2^-16), then a tie to even: 128."""
    e4m3, f16 = FloatFormat.parse("e4m3"), FloatFormat.parse("float16")
    A = np.array([[0x38, 0x28, 0x01]], np.int64)         # 1, 2^-2, 2^-9
    B = np.array([[0x70], [0x28], [0x01]], np.int64)     # 128, 2^-2, 2^-9
    assert _exact_value(A[0].tolist(), B[:, 0].tolist(), e4m3, e4m3) == 128 + Fraction(1, 16) + Fraction(1, 2 ** 18)
    st_ = dict(overflows=0, underflows=0)
    D = blas_exact(A, B, e4m3, e4m3, np.array([[0x8000]], np.int64), FloatAccumulator(kind="exact", output=f16), st_)
    assert rf.code_value(f16, int(D[0, 0])) == Fraction(1025, 8)


def _block_reference(a, b, c, acc, sa, sb, block, fmt, sfmt, counts):
    """Chunk after chunk of ``float_acc_model.block_chunk``; ``sa``/``sb`` the block scale codes."""
    g = acc.group
    d = c
    for k0 in range(0, len(a), acc.chunk):
        groups = range(k0 // g, (k0 + acc.chunk) // g)
        d = model.block_chunk(a[k0:k0 + acc.chunk], b[k0:k0 + acc.chunk], d, acc.output, acc.fraction_bits,
                              acc.zero_exponent, acc.align, acc.nan, [sa[gi * g // block] for gi in groups],
                              [sb[gi * g // block] for gi in groups], g, fmt, sfmt, counts)
    return d


@st.composite
def block_case(draw):
    preset = draw(st.sampled_from((None, "blackwell-mxfp4", "rtx-blackwell-mma-m16n8k64-f32-e2m1-ue8m0-block16")))
    if preset is None:
        group = draw(st.sampled_from((2, 4)))
        block = group * draw(st.sampled_from((1, 2)))
        chunk = block * draw(st.sampled_from((1, 2)))
        acc = FloatAccumulator(kind="block", chunk=chunk, group=group, fraction_bits=draw(st.integers(6, 35)),
                               zero_exponent=-126, align="truncate", output_rounding="toward_zero")
    else:
        acc = FloatAccumulator.preset(preset)
        block = acc.block
    fa = draw(st.sampled_from(("e2m1", "e2m3")))
    fmt = FloatFormat.parse(fa)
    K = acc.chunk * draw(st.integers(1, 3))
    M, N = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    spread = draw(st.sampled_from((3, 12, 254)))          # narrow, medium, any scales
    narrow = spread == 3
    lo = draw(st.integers(100, 150)) if spread < 254 else 0
    hi = lo + spread
    A = [draw(st.lists(st.integers(0, (1 << fmt.bits) - 1), min_size=K, max_size=K)) for _ in range(M)]
    Bt = [draw(st.lists(st.integers(0, (1 << fmt.bits) - 1), min_size=K, max_size=K)) for _ in range(N)]
    SA = [draw(st.lists(st.integers(lo, hi), min_size=K // block, max_size=K // block)) for _ in range(M)]
    SB = [draw(st.lists(st.integers(lo, hi), min_size=K // block, max_size=K // block)) for _ in range(N)]
    c = draw(st.sampled_from((None, "zero", "any")))
    C = None if c is None else [[0 if c == "zero" else draw(st.integers(0, 0x7F7FFFFF)) | draw(
        st.sampled_from((0, 0x80000000))) for _ in range(N)] for _ in range(M)]
    return acc, fa, block, A, Bt, SA, SB, C, narrow


@given(block_case())
def test_block_blas_against_fraction_model(case):
    """float_matmul (DGEMM path where it applies, else the C kernel) and block_blas itself with its compiled
    chunk step: every bit and the inexact-term count equal the Fraction model's; narrow scales (spread 3) at
    F = 35 must take the fast path."""
    import fxpsim.datapath.floatacc.block_blas as bb
    assert bb._blockchunk is not None, "fxpsim.core._blockchunk is not built (python setup.py build_ext --inplace)"
    _check_block_case(case)


@given(block_case())
def test_block_blas_numpy_step_against_fraction_model(case):
    """The same with the numpy chunk step (what runs where the extension is not built)."""
    import fxpsim.datapath.floatacc.block_blas as bb
    with mock.patch.object(bb, "_blockchunk", None):
        _check_block_case(case)


def _check_block_case(case):
    from fxpsim.datapath.floatacc.block_blas import block_blas
    from fxpsim.datapath.floatacc.operands import split_codes
    acc, fa, block, A, Bt, SA, SB, C, narrow = case
    fmt, sfmt = FloatFormat.parse(fa), FloatFormat.parse("e8m0")
    M, N = len(A), len(Bt)
    Cl = C if C is not None else [[0] * N for _ in range(M)]
    counts = dict(overflows=0, terms_inexact=0)
    want = [[_block_reference(A[i], Bt[j], Cl[i][j], acc, SA[i], SB[j], block, fmt, sfmt, counts)
             for j in range(N)] for i in range(M)]
    Ac, Bc = np.array(A, np.int64), np.array(Bt, np.int64).T.copy()
    r = float_matmul(Ac, Bc, fa, fa, acc, None if C is None else np.array(C, np.int64),
                     scale_a=np.array(SA), scale_b=np.array(SB).T, scale_fmt="e8m0")
    assert r.bits.astype(np.int64).tolist() == want
    assert (r.overflows, r.terms_inexact) == (counts["overflows"], counts["terms_inexact"])
    stats = dict(overflows=0, underflows=0, terms_inexact=0)
    fast = block_blas(Ac, Bc, fmt, fmt, np.array(Cl, np.int64), acc, stats,
                      split_codes(np.array(SA), sfmt, acc.zero_exponent),
                      split_codes(np.array(SB), sfmt, acc.zero_exponent), block)
    if narrow and acc.fraction_bits == 35 and C is None:
        assert fast is not None, "narrow scales at F = 35 must take the DGEMM path"
    if fast is not None:
        assert fast.tolist() == want
        assert stats["terms_inexact"] == counts["terms_inexact"] and stats["overflows"] == 0


@pytest.mark.parametrize("compiled", [True, False])
def test_block_blas_truncating_group_takes_the_group_path(compiled):
    """F = 6: block 0 gives 1 * 1 at scale 2^0, block 1 gives 0.5 * 0.5 at 2^-5 (= 2^-7); E_max = 0, so the
    unit is 2^-6 and the 2^-7 term truncates to 0 (one inexact term): 1.0, not 1 + 2^-7."""
    from fxpsim.datapath.floatacc.block_blas import block_blas
    from fxpsim.datapath.floatacc.operands import split_codes
    acc = FloatAccumulator(kind="block", chunk=4, group=2, fraction_bits=6, zero_exponent=-126, align="truncate",
                           output_rounding="toward_zero")
    e2m1, e8m0 = FloatFormat.parse("e2m1"), FloatFormat.parse("e8m0")
    a, b = [0x2, 0x0, 0x1, 0x0], [0x2, 0x0, 0x1, 0x0]    # 1, 0, 0.5, 0
    sa, sb = [127, 122], [127, 127]
    counts = dict(overflows=0, terms_inexact=0)
    want = _block_reference(a, b, 0, acc, sa, sb, 2, e2m1, e8m0, counts)
    assert rf.code_value(FloatFormat.parse("float32"), want) == 1 and counts["terms_inexact"] == 1
    stats = dict(overflows=0, underflows=0, terms_inexact=0)
    import fxpsim.datapath.floatacc.block_blas as bb
    with mock.patch.object(bb, "_blockchunk", bb._blockchunk if compiled else None):
        fast = block_blas(np.array([a]), np.array([b]).T, e2m1, e2m1, np.zeros((1, 1), np.int64), acc, stats,
                          split_codes(np.array([sa]), e8m0, -126), split_codes(np.array([sb]), e8m0, -126), 2)
    assert fast is not None and int(fast[0, 0]) == want and stats["terms_inexact"] == 1


def test_block_blas_with_c_ordered_scale_b():
    """scale_b passed as a C-ordered (K/block, N) array (as a user writes it): its split rows are a transposed
    view, which the compiled step must not reject; MXFP4 preset, 2 chunks, against the Fraction model."""
    acc = FloatAccumulator.preset("blackwell-mxfp4")
    rng = np.random.default_rng(3)
    M, N, K = 3, 4, 128
    A = rng.integers(0, 16, (M, K))
    B = rng.integers(0, 16, (K, N))
    SA = rng.integers(120, 130, (M, K // 32))
    SB = np.ascontiguousarray(rng.integers(120, 130, (K // 32, N)))
    r = float_matmul(A, B, "e2m1", "e2m1", acc, scale_a=SA, scale_b=SB, scale_fmt="e8m0")
    e2m1, e8m0 = FloatFormat.parse("e2m1"), FloatFormat.parse("e8m0")
    counts = dict(overflows=0, terms_inexact=0)
    want = [[_block_reference(A[i].tolist(), B[:, j].tolist(), 0, acc, SA[i].tolist(), SB[:, j].tolist(), 32,
                              e2m1, e8m0, counts) for j in range(N)] for i in range(M)]
    assert r.bits.astype(np.int64).tolist() == want

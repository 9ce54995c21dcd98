"""The C kernels of the fused, block and fused_rd kinds (``fxpsim.core._floatacc``) against the Fraction model.

``float_matmul`` (not the batched ``float_dot`` of ``test_float_acc_reference.py``) so that the
column-vector int32 path (truncation, any N: columns padded to 16) and the promotion path run;
every output element and the counts are compared with ``float_acc_model``.  Then the kernel against
the numpy steps on larger random shapes, and thread counts against one thread, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import float_acc_model as model
from fxpsim.core.float_codec import decode, encode
from fxpsim.core.float_format import FloatFormat
from fxpsim.datapath.floatacc import FloatAccumulator, float_matmul
from fxpsim.datapath.floatacc import kernel, matmul as mm

pytestmark = pytest.mark.skipif(not kernel.kernel_available(), reason="fxpsim.core._floatacc not built")

FP8 = ("e4m3", "e5m2")


def _ref_fused(fa, fb, A, B, C, acc):
    """Every D[i, j] from the model, chunk by chunk; counts summed over outputs."""
    fA, fB = FloatFormat.parse(fa), FloatFormat.parse(fb)
    ze = model.NO_ZERO if acc.zero_exponent is None else acc.zero_exponent
    counts = dict(overflows=0, terms_inexact=0, underflows=0)
    D = np.zeros(C.shape, np.int64)
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            a, b, d = [int(x) for x in A[i]], [int(x) for x in B[:, j]], int(C[i, j])
            for k0 in range(0, len(a), acc.chunk):
                d = model.fused_chunk(a[k0:k0 + acc.chunk], b[k0:k0 + acc.chunk], d, acc.output, acc.precision,
                                      acc.fraction_bits, ze, acc.align, acc.output_rounding, acc.overflow, acc.nan,
                                      a_fmt=fA, b_fmt=fB, counts=counts)
            D[i, j] = d
    return D, counts


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_matmul_kernel_against_fraction_model(data):
    fa = data.draw(st.sampled_from(FP8))
    fb = data.draw(st.sampled_from(FP8))
    chunk = data.draw(st.sampled_from((2, 4, 8, 32)))
    K = chunk * data.draw(st.integers(1, 3))
    M, N = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 19))
    A = np.array(data.draw(st.lists(st.integers(0, 255), min_size=M * K, max_size=M * K))).reshape(M, K)
    B = np.array(data.draw(st.lists(st.integers(0, 255), min_size=K * N, max_size=K * N))).reshape(K, N)
    out = data.draw(st.sampled_from(("float32", "float16", "bfloat16")))
    C = np.array(data.draw(st.lists(st.integers(0, (1 << FloatFormat.parse(out).bits) - 1),
                                    min_size=M * N, max_size=M * N))).reshape(M, N)
    acc = FloatAccumulator(kind="fused", output=out, chunk=chunk,
                           fraction_bits=data.draw(st.integers(2, 30)),
                           align=data.draw(st.sampled_from(("truncate", "truncate", "floor", "half_even"))),
                           zero_exponent=data.draw(st.sampled_from((None, -126, -20))),
                           output_rounding=data.draw(st.sampled_from(("toward_zero", "half_even", "floor"))),
                           overflow=data.draw(st.sampled_from(("inf", "ieee", "saturate"))))
    r = float_matmul(A, B, fa, fb, acc, C)
    want, counts = _ref_fused(fa, fb, A, B, C, acc)
    assert r.bits.astype(np.int64).tolist() == want.tolist()
    assert (r.overflows, r.terms_inexact, r.underflows) == (counts["overflows"], counts["terms_inexact"],
                                                            counts["underflows"])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fused_rd_kernel_against_fraction_model(data):
    """AMD CDNA3's round-down kind on its C kernel (``float_matmul``, not the batched ``float_dot``): every
    element and the counts against ``float_acc_model.rd_chunk``, with and without the even/odd split, any C."""
    fmt = data.draw(st.sampled_from(("e4m3fnuz", "e5m2fnuz", "float16", "bfloat16", "e4m3")))
    f = FloatFormat.parse(fmt)
    chunk = data.draw(st.sampled_from((2, 4, 8, 16)))
    K = chunk * data.draw(st.integers(1, 3))
    M, N = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))
    top = (1 << f.bits) - 1
    A = np.array(data.draw(st.lists(st.integers(0, top), min_size=M * K, max_size=M * K))).reshape(M, K)
    B = np.array(data.draw(st.lists(st.integers(0, top), min_size=K * N, max_size=K * N))).reshape(K, N)
    C = np.array(data.draw(st.lists(st.integers(0, (1 << 32) - 1), min_size=M * N, max_size=M * N))).reshape(M, N)
    F = data.draw(st.integers(4, 24))
    acc = FloatAccumulator(kind="fused_rd", chunk=chunk, fraction_bits=F, sum_bits=data.draw(st.integers(F, 36)),
                           c_fraction_bits=data.draw(st.integers(4, F)), even_odd=data.draw(st.booleans()),
                           zero_exponent=data.draw(st.sampled_from((None, -126))), output_rounding="half_even",
                           overflow="ieee")
    stats = dict(overflows=0, nans=0, underflows=0, terms_inexact=0)
    assert kernel.run_c(A, B, f, f, C, acc, stats, None, None, None) is not None     # the C kernel takes it
    r = float_matmul(A, B, fmt, fmt, acc, C)
    ze = model.NO_ZERO if acc.zero_exponent is None else acc.zero_exponent
    want = np.zeros((M, N), np.int64)
    for i in range(M):
        for j in range(N):
            d = int(C[i, j])
            for k0 in range(0, K, chunk):
                d = model.rd_chunk([int(v) for v in A[i, k0:k0 + chunk]], [int(v) for v in B[k0:k0 + chunk, j]], d,
                                   f, f, acc.output, F, acc.sum_bits, acc.c_fraction_bits, ze, acc.even_odd, acc.nan)
            want[i, j] = d
    assert r.bits.astype(np.int64).tolist() == want.tolist()


def test_hopper_fast_path_hand_case():
    """Hopper e4m3 (13 bits, truncation), by hand: 1 * 1 + (1.125 * 2^-6)^2 = 1 + 1.265625 * 2^-12;
    in steps of 2^-13 below E_max = 0 the small term is 2.53 steps, truncated to 2: d = 1 + 2^-12
    (exact in e8m13), one inexact term per output, 17 outputs (one vector of 16 and a padded one)."""
    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    e4 = FloatFormat.parse("e4m3")
    one = int(encode(np.array([1.0]), e4).bits[0])
    small = int(encode(np.array([2.0 ** -6 * 1.125]), e4).bits[0])       # 1.125 * 2^-6
    A = np.zeros((1, 32), np.int64)
    B = np.zeros((32, 17), np.int64)
    A[0, 0], A[0, 1] = one, small
    B[0, :], B[1, :] = one, small                                       # term 2: 1.265625 * 2^-12
    r = float_matmul(A, B, "e4m3", "e4m3", acc)
    # 2^13 units of 2^-13: the small term is 1.265625 * 2 = 2.53 units -> 2 (truncated)
    want = 1.0 + 2 * 2.0 ** -13
    assert np.all(r.to_float() == want)
    assert r.terms_inexact == 17


@pytest.mark.parametrize("name,fmt,scaled", [
    ("hopper-wgmma-m64n8k32-f32-e4m3", "e4m3", None),
    ("hopper-wgmma-m64n8k32-f32-e5m2", "e5m2", None),
    ("hopper-wgmma-m64n8k32-f16-e4m3", "e4m3", None),
    ("blackwell-tcgen05-m128n8k32-f32-e4m3", "e4m3", None),
    ("h100-fp8", "e4m3", None),
    ("blackwell-tcgen05-m128n8k32-f32-e4m3-ue8m0-block32", "e4m3", 32),
    ("blackwell-mxfp4", "e2m1", 32),
    ("blackwell-nvfp4", "e2m1", 16),
    ("cdna3-mfma-16x16x32-f32-fp8", "e4m3fnuz", None),
    ("cdna3-mfma-16x16x32-f32-bf8", "e5m2fnuz", None),
    ("cdna3-mfma-16x16x16-f32-f16", "float16", None),
    ("cdna3-mfma-16x16x16-f32-bf16", "bfloat16", None),
])
def test_kernel_equals_numpy_steps(name, fmt, scaled):
    """The C kernel and the numpy steps of ``fused.py`` (two implementations) on a 9 x 256 x 37 matmul."""
    rng = np.random.default_rng(7)
    acc = FloatAccumulator.preset(name)
    top = 16 if fmt == "e2m1" else 256
    M, K, N = 9, 256, 37
    f = FloatFormat.parse(fmt)
    if fmt == "e2m1":
        A, B = rng.integers(0, top, (M, K)), rng.integers(0, top, (K, N))
    else:                        # values over many binades, one NaN and one Inf (e5m2) per operand
        def vals(shape):
            x = rng.standard_normal(shape) * np.exp2(rng.integers(-10, 6, shape))
            return encode(x, f, overflow="saturate").bits.astype(np.int64)
        A, B = vals((M, K)), vals((K, N))
        A[2, 5] = B[7, 3] = int(encode(np.array([np.nan]), f).bits[0])
        if f.has_inf:
            A[4, 9] = int(f.inf_code)
    C = np.zeros((M, N), np.int64)
    sa = sb = None
    if scaled:
        sname = "e8m0" if name != "blackwell-nvfp4" else "e4m3"
        sf = FloatFormat.parse(sname)
        lo, hi = (118, 136) if sname == "e8m0" else (0, 127)
        sa = mm.split_codes(rng.integers(lo, hi, (M, K // scaled)), sf, acc.zero_exponent)
        sb = mm.split_codes(rng.integers(lo, hi, (K // scaled, N)).T, sf, acc.zero_exponent)
    s1 = dict(overflows=0, nans=0, underflows=0, terms_inexact=0)
    s2 = dict(s1)
    d1 = mm._chunked(A, B, f, f, C, acc, s1, sa, sb, scaled, kernel=True)
    d2 = mm._chunked(A, B, f, f, C, acc, s2, sa, sb, scaled, kernel=False)
    assert np.array_equal(d1, d2)
    assert {k: s1[k] for k in ("overflows", "underflows", "terms_inexact")} == \
        {k: s2[k] for k in ("overflows", "underflows", "terms_inexact")}
    assert s1["terms_inexact"] > 0                      # the alignment did drop bits somewhere


@pytest.mark.parametrize("name", ["hopper-wgmma-m64n8k32-f32-e4m3", "blackwell-tcgen05-m128n8k32-f32-e4m3",
                                  "blackwell-mxfp4"])
def test_threads_never_change_a_bit(name):
    rng = np.random.default_rng(3)
    acc = FloatAccumulator.preset(name)
    if acc.kind == "block":
        A4, B4 = rng.integers(0, 16, (33, 128)), rng.integers(0, 16, (128, 20))
        SA, SB = rng.integers(118, 136, (33, 4)), rng.integers(118, 136, (4, 20))
        runs = [float_matmul(A4, B4, "e2m1", "e2m1", acc, scale_a=SA, scale_b=SB, scale_fmt="e8m0", threads=t)
                for t in (1, 2, 3)]
    else:
        A = encode(rng.standard_normal((33, 128)), "e4m3").bits
        B = encode(rng.standard_normal((128, 20)), "e4m3").bits
        runs = [float_matmul(A, B, "e4m3", "e4m3", acc, threads=t) for t in (1, 2, 3)]
    for r in runs[1:]:
        assert np.array_equal(r.bits, runs[0].bits)
        assert (r.overflows, r.underflows, r.terms_inexact) == \
            (runs[0].overflows, runs[0].underflows, runs[0].terms_inexact)
    assert np.isfinite(decode(runs[0].bits, runs[0].format)).all()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_threads_raise(bad):
    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    with pytest.raises(ValueError, match="threads"):
        float_matmul(np.zeros((1, 32), np.uint8), np.zeros((32, 1), np.uint8), "e4m3", "e4m3", acc, threads=bad)


def test_exact_zero_signs_by_hand():
    """IEEE 754 §6.3 on the Kulisch kind: an exact zero sum is -0 only when every addend is -0,
    except under floor (roundTowardNegative), where a cancellation gives -0 too; other rows nonzero."""
    e4 = FloatFormat.parse("e4m3")
    one, neg0, mone = 0x38, 0x80, 0xB8                     # 1.0, -0, -1.0 in E4M3
    assert decode(np.array([one, neg0, mone]), e4).tolist() == [1.0, -0.0, -1.0]
    A = np.array([[neg0, neg0], [one, one], [one, one], [one, one]])
    B = np.array([[one, one], [one, mone]])                 # col 0: a0 + a1, col 1: a0 - a1 (row 0: -0 + +0)
    C = np.array([[0x80000000, 0x80000000], [0, 0], [0x80000000, 0x80000000], [0, 0x80000000]])
    for rnd, want in (("half_even", [[0x80000000, 0], [0x40000000, 0], [0x40000000, 0],
                                     [0x40000000, 0]]),
                      ("floor", [[0x80000000, 0x80000000], [0x40000000, 0x80000000], [0x40000000, 0x80000000],
                                 [0x40000000, 0x80000000]])):
        acc = FloatAccumulator(kind="exact", output_rounding=rnd)
        r = float_matmul(A, B, "e4m3", "e4m3", acc, C)
        assert r.bits.astype(np.int64).tolist() == want, rnd

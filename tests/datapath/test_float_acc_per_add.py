"""The per-add kind against numpy's own float32 / float16 loops and ml_dtypes' bfloat16, and the
promotion recipe and API checks.

numpy's float32 and float16 additions and multiplications are IEEE operations rounded to nearest
even (float16 arithmetic goes through float32, which is exact for a float16 sum's rounding since
24 >= 2 * 11 + 2); ml_dtypes' bfloat16 likewise (24 >= 2 * 8 + 2).  The loops below are the
obvious scalar FPU loops, ``s = s + a[k] * b[k]`` in the accumulator's dtype.
"""
from __future__ import annotations

import numpy as np
import pytest

import float_acc_model as model
from fxpsim.core.float_codec import decode, encode
from fxpsim.core.float_format import FloatFormat
from fxpsim.datapath.floatacc import FloatAccumulator, float_dot, float_matmul

DT = {"float32": np.float32, "float16": np.float16}
UINT = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}


def _inputs(rng, fmt_name, shape):
    """Random finite codes of fmt with a wide exponent spread (cancellation and absorption)."""
    fmt = FloatFormat.parse(fmt_name)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape))
    return encode(x, fmt, overflow="saturate").bits


def _numpy_loop(av, bv, c, dt, fma_free_product):
    s = c.astype(dt)
    for k in range(av.shape[1]):
        p = av[:, k:k + 1].astype(dt) * bv[k:k + 1, :].astype(dt) if fma_free_product else None
        s = (s + p).astype(dt)
    return s


@pytest.mark.parametrize("acc_fmt", ["float32", "float16"])
@pytest.mark.parametrize("in_fmt", ["e4m3", "e5m2", "float16"])
def test_product_then_add_equals_numpy_loop(in_fmt, acc_fmt):
    rng = np.random.default_rng(1)
    A, B = _inputs(rng, in_fmt, (6, 40)), _inputs(rng, in_fmt, (40, 5))
    av, bv = decode(A, in_fmt), decode(B, in_fmt)
    c = encode(rng.standard_normal((6, 5)), acc_fmt).bits
    acc = FloatAccumulator(kind="per_add", output=acc_fmt, fma=False)
    r = float_matmul(A, B, in_fmt, in_fmt, acc, c)
    want = _numpy_loop(av, bv, decode(c, acc_fmt), DT[acc_fmt], True)
    assert np.array_equal(r.bits, want.view(UINT[acc_fmt]))


def test_fma_float32_equals_numpy_loop_for_fp8_inputs():
    """FP8 products are exact in float32, so FMA and product-then-add agree, and both equal numpy."""
    rng = np.random.default_rng(2)
    A, B = _inputs(rng, "e4m3", (4, 64)), _inputs(rng, "e4m3", (64, 4))
    r = float_matmul(A, B, "e4m3", "e4m3", FloatAccumulator(kind="per_add", output="float32", fma=True))
    want = _numpy_loop(decode(A, "e4m3"), decode(B, "e4m3"), np.full((4, 4), -0.0), np.float32, True)
    assert np.array_equal(r.bits, want.view(np.uint32))


def test_bfloat16_equals_ml_dtypes_loop():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes not installed")
    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    A, B = _inputs(rng, "e4m3", (5, 48)), _inputs(rng, "e4m3", (48, 3))
    av, bv = decode(A, "e4m3"), decode(B, "e4m3")
    r = float_matmul(A, B, "e4m3", "e4m3", FloatAccumulator(kind="per_add", output="bfloat16", fma=False))
    s = np.full((5, 3), -0.0).astype(bf)
    for k in range(48):
        s = (s + (av[:, k:k + 1].astype(bf) * bv[k:k + 1, :].astype(bf))).astype(bf)
    assert np.array_equal(r.bits, s.view(np.uint16))


def test_fma_differs_from_product_then_add_where_products_round():
    """float16 products of float16 inputs round in float16: FMA keeps them exact -- the Fraction
    model of both is matched, and they differ on these inputs."""
    rng = np.random.default_rng(4)
    A, B = _inputs(rng, "float16", (1, 16)), _inputs(rng, "float16", (16, 1))
    f16 = FloatFormat.parse("float16")
    outs = {}
    for fma in (True, False):
        acc = FloatAccumulator(kind="per_add", output="float16", fma=fma)
        r = float_matmul(A, B, "float16", "float16", acc)
        want = model.per_add([int(x) for x in A[0]], [int(x) for x in B[:, 0]], 0x8000, f16, f16, f16,
                             "half_even", fma, acc.nan)
        assert int(r.bits[0, 0]) == want
        outs[fma] = int(r.bits[0, 0])
    # (1 + 2^-10)^2 - (1 + 2^-9) = 2^-20 with FMA; the float16 product rounds it away without
    a = np.array([[0x3C01]])
    c = np.array([[0xBC02]], np.uint16)
    got = {fma: float(float_matmul(a, a, "float16", "float16", FloatAccumulator(kind="per_add", output="float16",
                                                                            fma=fma), c).to_float()[0, 0])
           for fma in (True, False)}
    assert got == {True: 2.0 ** -20, False: 0.0}


def test_promotion_every_n_matches_model():
    """h100-fp8: chunks of 32 fused (13 bits, RZ to e8m13) into a partial sum that restarts at +0
    every 128 elements and is added to a float32 total with one RNE rounding (DeepSeek-V3)."""
    rng = np.random.default_rng(5)
    K = 512
    A, B = _inputs(rng, "e4m3", (2, K)), _inputs(rng, "e4m3", (2, K))
    c = encode(rng.standard_normal(2), "float32").bits
    acc = FloatAccumulator.preset("h100-fp8")
    r = float_dot(A, B, "e4m3", "e4m3", acc, c)
    e4m3, f32 = FloatFormat.parse("e4m3"), FloatFormat.parse("float32")
    for i in range(2):
        total = model.rf.code_value(f32, int(c[i]))
        for g0 in range(0, K, 128):
            part = 0
            for k0 in range(g0, g0 + 128, 32):
                part = model.fused_chunk([int(x) for x in A[i, k0:k0 + 32]], [int(x) for x in B[i, k0:k0 + 32]],
                                         part, f32, acc.precision, 13, -126, "truncate", "toward_zero", "inf",
                                         acc.nan, a_fmt=e4m3, b_fmt=e4m3)
            code, _ = model.round_into(total + model.rf.code_value(f32, part), f32, "half_even", "ieee")
            total = model.rf.code_value(f32, code)
        assert int(r.bits[i]) == code
    # and promotion changes the answer against the unpromoted instruction on a long sum
    plain = float_dot(A, B, "e4m3", "e4m3", FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3"), c)
    exact = float_dot(A, B, "e4m3", "e4m3", FloatAccumulator(kind="exact"), c)
    err_p = np.abs(r.to_float() - exact.to_float()).sum()
    err_n = np.abs(plain.to_float() - exact.to_float()).sum()
    assert err_p <= err_n


def test_presets_listed_and_named():
    names = FloatAccumulator.presets()
    assert "hopper-wgmma-m64n8k32-f32-e4m3" in names and "h100-fp8" in names
    assert "blackwell-tcgen05-m128n8k64-f32-e2m1-ue4m3-block16" in names
    for n in names:
        assert FloatAccumulator.preset(n).name == n
    with pytest.raises(ValueError, match="unknown FloatAccumulator preset 'nope'; known: volta"):
        FloatAccumulator.preset("nope")


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="tree"), "kind must be one of"),
    (dict(output="float99"), "output"),
    (dict(fraction_bits=0), "fraction_bits must be a positive int"),
    (dict(align="up"), "align must be one of"),
    (dict(output_rounding="stochastic"), "not supported here"),
    (dict(overflow="wrap"), "overflow must be one of"),
    (dict(chunk=32, promote_every=48), "multiple of chunk"),
    (dict(kind="exact", chunk=32), "chunk=32 has no effect on kind 'exact'"),
    (dict(kind="per_add", fraction_bits=13), "fraction_bits=13 has no effect"),
    (dict(output_man_bits=30), "exceeds"),
])
def test_bad_settings_raise_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FloatAccumulator(**kwargs)


def test_bad_inputs_raise_before_work():
    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    a = np.zeros((2, 32), np.uint8)
    with pytest.raises(ValueError, match="do not chain"):
        float_matmul(a, np.zeros((16, 2), np.uint8), "e4m3", "e4m3", acc)
    with pytest.raises(ValueError, match="not a multiple of the accumulator's chunk=32"):
        float_matmul(a[:, :16], np.zeros((16, 2), np.uint8), "e4m3", "e4m3", acc)
    with pytest.raises(ValueError, match="codes must be in 0..255"):
        float_matmul(a + 256 * 0 + np.uint16(300), np.zeros((32, 2), np.uint8), "e4m3", "e4m3", acc)
    with pytest.raises(ValueError, match="c must have shape"):
        float_matmul(a, np.zeros((32, 2), np.uint8), "e4m3", "e4m3", acc, c=np.zeros((3, 3), np.uint32))
    with pytest.raises(ValueError, match="not exact float32 values"):
        float_matmul(a, np.zeros((32, 2), np.uint8), "e4m3", "e4m3", acc, c=np.full((2, 2), 0.1))
    with pytest.raises(ValueError, match=r"expects block scales \(block=32\)"):
        float_matmul(a, np.zeros((32, 2), np.uint8), "e2m1", "e2m1", FloatAccumulator.preset("blackwell-mxfp4"))
    with pytest.raises(ValueError, match="expects block scales"):
        float_matmul(a, np.zeros((32, 2), np.uint8), "e4m3", "e4m3",
                     FloatAccumulator.preset("blackwell-tcgen05-m128n8k32-f32-e4m3-ue8m0-block32"))
    with pytest.raises(TypeError, match="acc must be a FloatAccumulator"):
        float_matmul(a, np.zeros((32, 2), np.uint8), "e4m3", "e4m3", "hopper")
    with pytest.raises(ValueError, match="unknown float format"):
        float_matmul(a, np.zeros((32, 2), np.uint8), "e9m9x", "e4m3", acc)


def test_c_as_exact_float_values_is_accepted():
    acc = FloatAccumulator(kind="exact")
    a = np.array([[0x38]])                                    # 1.0 in e4m3
    r = float_matmul(a, a, "e4m3", "e4m3", acc, c=np.array([[0.5]], np.float32))
    assert r.to_float()[0, 0] == 1.5

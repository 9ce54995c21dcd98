"""Sums of int32 operands modulo 2^64 (``accumulate._mul32_sums`` / ``_accumulate.mac_mul32``) against Python ints.

``matmul(a, b, W, overflow="wrap", count=False)`` reduces the exact sum modulo 2^W once; for int32-range operands
whose products float64 cannot hold exactly that sum comes from the register-blocked VPMULDQ kernel (6 rows x 32
int64 columns in AVX-512 registers; a portable C kernel elsewhere).  The model below is independent of the
package: Python integers, the sum of the products, then the low W bits read as a signed (or unsigned) number.
Shapes cover K = 0 and 1, row counts that are not multiples of the register block (6) or of a thread's chunk
(48), column counts that are not multiples of a slab (32), batched and shared right operands, the extremes
-2^31 and 2^31 - 1, one and two threads, and the portable kernel (``_MUL32_LEVEL = 0``).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fxpsim.core.fixed import Format
from fxpsim.datapath import _accumulate as kernels
from fxpsim.datapath import accumulate as A
from fxpsim.datapath import _acc_exact

LO, HI = -(1 << 31), (1 << 31) - 1
AVX512_KERNEL = "mul32" if _acc_exact._MUL32_LEVEL else "mul32-portable"


def model(a, b, w, init=None, signed=True):
    """The wrapped W-bit accumulator of every output: Python ints, sum of products, low W bits."""
    a = np.asarray(a, dtype=object)
    b = np.asarray(b, dtype=object)
    if b.ndim == 2:
        b = np.broadcast_to(b, (a.shape[0],) + b.shape) if a.ndim == 3 else b
    out = np.empty(a.shape[:-1] + (b.shape[-1],), dtype=object)
    for idx in np.ndindex(out.shape):
        i, j = idx[:-1], idx[-1]
        bb = b[idx[0]] if b.ndim == 3 else b
        s = sum((int(x) * int(y) for x, y in zip(a[i], bb[:, j])), 0)
        if init is not None:
            s += int(np.broadcast_to(init, out.shape)[idx])
        s %= 1 << w
        if signed and s >= 1 << (w - 1):
            s -= 1 << w
        out[idx] = s
    return out


def operands(rng, shape, extremes):
    """int32 codes, uniform over int32 or small, with a share of the extremes -2^31 and 2^31 - 1."""
    if rng.random() < 0.5:
        x = rng.integers(LO, HI, shape, endpoint=True)
    else:
        x = rng.integers(-1000, 1000, shape)
    if x.size and extremes:
        mask = rng.random(shape) < extremes
        x[mask] = rng.choice([LO, HI], int(mask.sum()))
    return x


def force_wide(a, b):
    """One product -2^31 * -2^31 = 2^62: float64 cannot hold the sums exactly, so the integer kernel runs."""
    if a.shape[-1]:
        a.reshape(-1, a.shape[-1])[0, 0] = LO
        b.reshape(-1, b.shape[-1])[0, 0] = LO


@settings(max_examples=80)
@given(seed=st.integers(0, 2**32 - 1), m=st.sampled_from([1, 2, 5, 6, 7, 11, 12, 13, 47, 49, 97]),
       k=st.sampled_from([1, 2, 3, 31, 64, 130]), n=st.sampled_from([1, 7, 31, 32, 33, 64, 65, 97]),
       w=st.integers(2, 64), threads=st.sampled_from([1, 2]), extremes=st.sampled_from([0.0, 0.1, 1.0]),
       dtype=st.sampled_from([np.int32, np.int64]))
def test_uncounted_wrap_of_int32_operands_equals_python_ints(seed, m, k, n, w, threads, extremes, dtype):
    rng = np.random.default_rng(seed)
    a, b = operands(rng, (m, k), extremes), operands(rng, (k, n), extremes)
    force_wide(a, b)
    a, b = a.astype(dtype), b.astype(dtype)
    got = A.matmul(a, b, w, overflow="wrap", count=False, threads=threads)
    assert (A.last_path, A.last_int64_kernel) == ("int64", AVX512_KERNEL)
    assert got.raw.dtype == np.int64 and got.raw.shape == (m, n)
    assert (got.raw.astype(object) == model(a, b, w)).all()


@settings(max_examples=30)
@given(seed=st.integers(0, 2**32 - 1), nb=st.integers(1, 3), m=st.sampled_from([1, 5, 6, 8, 50]),
       k=st.sampled_from([1, 9, 40]), n=st.sampled_from([1, 20, 33, 70]), w=st.integers(2, 64),
       threads=st.sampled_from([1, 2]), shared=st.booleans())
def test_batched_and_shared_right_operands(seed, nb, m, k, n, w, threads, shared):
    rng = np.random.default_rng(seed)
    a = operands(rng, (nb, m, k), 0.2)
    b = operands(rng, (k, n) if shared else (nb, k, n), 0.2)
    force_wide(a, b)
    got = A.matmul(a, b, w, overflow="wrap", count=False, threads=threads)
    assert (A.last_path, A.last_int64_kernel) == ("int64", AVX512_KERNEL)
    assert (got.raw.astype(object) == model(a, b, w)).all()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("av,bv", [(LO, LO), (LO, HI), (HI, HI), (HI, LO)])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 100])
def test_every_product_an_extreme(av, bv, k, threads):
    """Every product +-2^62-ish: the 64-bit sums wrap after 2 to 4 adds; the low W bits must still be exact."""
    a = np.full((13, k), av, np.int32)
    b = np.full((k, 37), bv, np.int32)
    for w in (2, 31, 32, 33, 63, 64):
        got = A.matmul(a, b, w, overflow="wrap", count=False, threads=threads)
        assert (A.last_path, A.last_int64_kernel) == ("int64", AVX512_KERNEL)
        assert (got.raw.astype(object) == model(a, b, w)).all()
        assert len(np.unique(got.raw)) == 1


def test_empty_reduction_init_and_unsigned_accumulator():
    rng = np.random.default_rng(5)
    a, b = np.zeros((7, 0), np.int32), np.zeros((0, 40), np.int32)
    assert (A.matmul(a, b, 64, overflow="wrap", count=False).raw == 0).all()
    a, b = operands(rng, (9, 50), 0.3), operands(rng, (50, 35), 0.3)
    force_wide(a, b)
    init = rng.integers(-(1 << 39), 1 << 39, (9, 35))
    got = A.matmul(a, b, 40, overflow="wrap", count=False, init=init)
    assert (A.last_path, A.last_int64_kernel) == ("int64", AVX512_KERNEL)
    assert (got.raw.astype(object) == model(a, b, 40, init)).all()
    acc = Format.integer(48, signed=False)
    got = A.matmul(a, b, acc, overflow="wrap", count=False)
    assert A.last_int64_kernel == AVX512_KERNEL
    assert (got.raw.astype(object) == model(a, b, 48, signed=False)).all()


def test_strided_operands_and_wider_codes_keep_the_64_bit_kernel():
    rng = np.random.default_rng(6)
    a, b = operands(rng, (40, 33), 0.2), operands(rng, (33, 45), 0.2)
    force_wide(a, b)
    at, bt = np.ascontiguousarray(a.T).T, np.asfortranarray(b)     # transposed views
    got = A.matmul(at, bt, 64, overflow="wrap", count=False)
    assert A.last_int64_kernel == AVX512_KERNEL
    assert (got.raw.astype(object) == model(a, b, 64)).all()
    a[1, 1] = 1 << 40                                    # beyond int32: the 64 x 64-bit product kernel
    b = rng.integers(-(1 << 19), 1 << 19, (33, 45))      # (|a b| < 2^63 for the formats of the codes)
    b[0, 0] = 1 << 19
    got = A.matmul(a, b, 64, overflow="wrap", count=False)
    assert (A.last_path, A.last_int64_kernel) == ("int64", "wrap64")
    assert (got.raw.astype(object) == model(a, b, 64)).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_portable_kernel_gives_the_same_bits(monkeypatch, threads):
    rng = np.random.default_rng(7)
    cases = [((3, 61, 130), (130, 97)), ((2, 7, 1), (2, 1, 33)), ((1, 100, 64), (64, 32)), ((5, 3), (3, 1))]
    fast = []
    for sa, sb in cases:
        a, b = operands(rng, sa, 0.1), operands(rng, sb, 0.1)
        force_wide(a, b)
        fast.append((a, b, A.matmul(a, b, 64, overflow="wrap", count=False, threads=threads).raw))
        assert A.last_int64_kernel == AVX512_KERNEL
    monkeypatch.setattr(_acc_exact, "_MUL32_LEVEL", 0)
    for a, b, want in fast:
        got = A.matmul(a, b, 64, overflow="wrap", count=False, threads=threads)
        assert (A.last_path, A.last_int64_kernel) == ("int64", "mul32-portable")
        np.testing.assert_array_equal(got.raw, want)
        assert (got.raw.astype(object) == model(a, b, 64)).all()


@pytest.mark.skipif(not kernels.mul32_level(), reason="no AVX-512 kernel on this CPU")
@pytest.mark.parametrize("r,k,n", [(0, 5, 3), (4, 0, 3), (1, 1, 1), (6, 3, 32), (53, 17, 65), (100, 40, 200)])
def test_kernel_levels_directly(r, k, n):
    """``mac_mul32`` itself: both levels, K = 0 writes zeros, the columns past N are never written."""
    rng = np.random.default_rng(r * 1000 + k * 10 + n)
    a = rng.integers(LO, HI, (r, k), endpoint=True).astype(np.int32)
    b = rng.integers(LO, HI, (k, n), endpoint=True)
    sw = kernels.mul32_slab_width()
    ns = -(-n // sw)
    packed = np.zeros((ns, k, sw), np.int64)
    for s in range(ns):
        cols = b[:, s * sw:(s + 1) * sw]
        packed[s, :, :cols.shape[1]] = cols
    want = model(a, b, 64)
    for level in (0, 1):
        for threads in (1, 2):
            buf = np.full(r * n + 8, 12345, np.int64)             # 8 guard words after the output
            out = buf[:r * n].reshape(r, n)
            kernels.mac_mul32(a, packed.reshape(1, -1), out, max(r, 1), threads, level)
            assert (out.astype(object) == want).all()
            assert (buf[r * n:] == 12345).all()
    with pytest.raises(ValueError):                           # b's length must match K and N
        kernels.mac_mul32(a, np.zeros((1, ns * k * sw + 1), np.int64), out, max(r, 1), 1, 1)
    if k:
        with pytest.raises(ValueError):
            kernels.mac_mul32(a, packed.reshape(1, -1)[:, 1:], out, max(r, 1), 1, 1)

"""Exact int16 sums by AVX512-VNNI (``accumulate._vnni_sums`` / ``_accumulate.mac_vnni16``) against Python ints.

The kernel splits b into its high and low bytes and sums ``vpdpwssd`` products in int32 lanes for 128 k-pairs
at a time; the cases below include the extremes of int16 (the largest int32 partial sums the split allows),
odd K, widths that are not a multiple of 32, batched operands and several threads.  ``matmul`` takes that
path for int16-range operands (exact accumulators, and the uncounted wrap reduced modulo 2^W once).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fxpsim.datapath import accumulate as A
from fxpsim.datapath import _acc_exact

pytestmark = pytest.mark.skipif(not _acc_exact._VNNI, reason="no AVX512-VNNI on this CPU")


def _ref(a, b):
    return a.astype(object) @ b.astype(object)


def _wrapped(v, w):
    half = 1 << (w - 1)
    return np.vectorize(lambda t: ((t + half) % (1 << w)) - half, otypes=[object])(v)


@given(seed=st.integers(0, 2**32 - 1), m=st.integers(16, 70), k=st.integers(1, 300), n=st.integers(1, 70),
       w=st.sampled_from([9, 17, 24, 32, 33, 48, 64]), threads=st.sampled_from([1, 2]),
       dtype=st.sampled_from([np.int16, np.int32, np.int64]))
def test_uncounted_wrap_equals_python_ints(seed, m, k, n, w, threads, dtype):
    rng = np.random.default_rng(seed)
    lo, hi = sorted(int(v) for v in rng.integers(-(1 << 15), 1 << 15, 2))
    a = rng.integers(lo, hi + 1, (m, k)).astype(dtype)
    b = rng.integers(-(1 << 15), 1 << 15, (k, n)).astype(dtype)
    got = A.matmul(a, b, w, overflow="wrap", count=False, threads=threads)
    exact = A.matmul(a, b, threads=threads)
    ref = _ref(a, b)
    assert (exact.raw.astype(object) == ref).all()
    assert (got.raw.astype(object) == _wrapped(ref, w)).all()


@pytest.mark.parametrize("k", [1, 2, 255, 256, 257, 1024, 4099])
@pytest.mark.parametrize("av,bv", [(-32768, -32768), (-32768, 32767), (32767, 32767), (32767, -32768),
                                   (-32768, 255), (-32768, -129)])
def test_extremes_every_k_chunk(k, av, bv):
    a = np.full((17, k), av, np.int16)
    b = np.full((k, 33), bv, np.int16)
    got = A.matmul(a, b)
    assert A.last_path == ("vnni16" if abs(av * bv) * k >= 1 << 24 else "blas32")
    assert (got.raw == av * bv * k).all()
    assert (A.matmul(a, b, 32, overflow="wrap", count=False).raw.astype(object) ==
            _wrapped(np.full((17, 33), av * bv * k, object), 32)).all()


def test_batched_and_shared_operands_and_the_portable_path(monkeypatch):
    rng = np.random.default_rng(3)
    a = rng.integers(-(1 << 15), 1 << 15, (3, 20, 45)).astype(np.int16)
    b = rng.integers(-(1 << 15), 1 << 15, (3, 45, 37)).astype(np.int16)
    b1 = b[0]
    got = A.matmul(a, b, 40, overflow="wrap", count=False)
    assert A.last_path == "vnni16"
    shared = A.matmul(a, b1, 40, overflow="wrap", count=False)
    for i in range(3):
        assert (got.raw[i].astype(object) == _wrapped(_ref(a[i], b[i]), 40)).all()
        assert (shared.raw[i].astype(object) == _wrapped(_ref(a[i], b1), 40)).all()
    monkeypatch.setattr(_acc_exact, "_VNNI", False)
    assert (A.matmul(a, b, 40, overflow="wrap", count=False).raw == got.raw).all()
    assert A.last_path != "vnni16"


def test_int8_stays_on_float32_blas_and_few_rows_skip_the_kernel():
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (64, 300)).astype(np.int8)
    b = rng.integers(-128, 128, (300, 40)).astype(np.int8)
    A.matmul(a, b, 24, overflow="wrap", count=False)
    assert A.last_path == "blas32"
    a16 = rng.integers(-(1 << 15), 1 << 15, (3, 300)).astype(np.int16)
    b16 = rng.integers(-(1 << 15), 1 << 15, (300, 40)).astype(np.int16)
    got = A.matmul(a16, b16, 48, overflow="wrap", count=False)
    assert A.last_path != "vnni16"
    assert (got.raw.astype(object) == _wrapped(_ref(a16, b16), 48)).all()

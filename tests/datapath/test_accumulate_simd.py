"""The per-add kernels on int16 operands -- 16-bit lanes ``mac_fast16`` and 32-bit lanes ``mac_fast32m`` -- at
every SIMD level this CPU has (AVX2: the register-blocked ``fxa_mac16_avx2b`` / ``fxa_mac32m_avx2``; AVX-512BW:
``fxa_mac16_x512`` / ``fxa_mac32m_x512``) against the pure-Python per-add register of ``tests/reference.py``
(``accumulate``: Python ints, one fit after every add): saturate / wrap / saturate_zero, every width 2..16
(16-bit lanes) and 2..32 (32-bit lanes), overflow counts, shapes that are not multiples of the row block or the 64-column slab, K
across k tiles, every ``init`` form, row and slab indices, the count-free loops."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference as ref
from fxpsim.datapath import _accumulate as kernels
from fxpsim.datapath import _acc_scratch

LEVELS = list(range(1, kernels.simd16_level() + 1))
pytestmark = pytest.mark.skipif(not LEVELS, reason="no AVX2 on this CPU (mac_fast16 unavailable)")
FAST = {"saturate": kernels.FAST_SATURATE, "wrap": kernels.FAST_WRAP_SIGNED, "saturate_zero": kernels.FAST_ZERO}


def per_add(a, b, init, word, mode):
    """Codes and counts of the per-add register: out[i, j] = fit(... fit(init[i, j] + a[i, 0] b[0, j]) ...)."""
    m, n = a.shape[0], b.shape[1]
    out, cnt = np.zeros((m, n), np.int64), np.zeros((m, n), np.int64)
    for i in range(m):
        for j in range(n):
            prods = [int(a[i, k]) * int(b[k, j]) for k in range(a.shape[1])]
            out[i, j], cnt[i, j], _ = ref.accumulate(prods, int(init[i, j]), word, True, mode)
    return out, cnt


def operands(rng, word, m, k, n):
    """int16 operands whose products fit int16 (|a b| <= 2^14, or 2^28 for a wider register), large enough to
    overflow a ``word``-bit register often."""
    amax = 1 << min(7, max(1, word - 1))
    bmax = 1 << (7 if word <= 16 else 14)
    a = rng.integers(-amax if word <= 16 else -(1 << 14), amax if word <= 16 else 1 << 14, (m, k))
    b = rng.integers(-bmax, bmax, (k, n))
    return a, b


def run(level, a, b, init, word, mode, rows=None, slabs=None, count=True, n_out=None, lanes=16):
    m = a.shape[0] if rows is None else rows.shape[0]
    n = b.shape[1] if n_out is None else n_out
    bs = _acc_scratch._pack_slabs(b[None], np.int16).copy()
    out = np.full((m, n), -7, np.int64)
    cnt = np.full((m, n) if count else (0, n), -7, np.int64)
    lo, hi = -(1 << (word - 1)), (1 << (word - 1)) - 1
    if lanes == 16:
        kernels.mac_fast16(np.ascontiguousarray(a, np.int16), bs, np.ascontiguousarray(init, np.int16), out, cnt,
                           m, FAST[mode], np.int16(lo), np.int16(hi), 16 - word, 1, level, rows=rows, slabs=slabs)
    else:
        kernels.mac_fast32m(np.ascontiguousarray(a, np.int16), bs, np.ascontiguousarray(init, np.int32), out, cnt,
                            m, FAST[mode], np.int32(lo), np.int32(hi), 32 - word, 1, rows=rows, slabs=slabs,
                            level=level)
    return out, (cnt if count else None)


@pytest.mark.parametrize("lanes", [16, 32])
@pytest.mark.parametrize("level", LEVELS)
@settings(max_examples=60, deadline=None)
@given(word=st.integers(2, 32), mode=st.sampled_from(sorted(FAST)), m=st.integers(1, 7), k=st.integers(0, 40),
       n=st.integers(1, 140), form=st.sampled_from(["none", "full", "row", "col"]), count=st.booleans(),
       seed=st.integers(0, 2 ** 32 - 1))
def test_per_add_codes_and_counts(lanes, level, word, mode, m, k, n, form, count, seed):
    """Every width, mode and ``init`` form; counted and count-free loops give the same codes."""
    if lanes == 16:
        word = 2 + (word - 2) % 15            # 2..16
    rng = np.random.default_rng(seed)
    a, b = operands(rng, word, m, k, n)
    lo, hi = -(1 << (word - 1)), (1 << (word - 1)) - 1
    full = rng.integers(lo, hi + 1, (m, n))
    init, want_init = {"none": (np.empty((0, n)), np.zeros((m, n), np.int64)),
                       "full": (full, full),
                       "row": (full[:1], np.broadcast_to(full[:1], (m, n))),
                       "col": (full[:, :1], np.broadcast_to(full[:, :1], (m, n)))}[form]
    if form == "col" and n == 1:
        init = full
    got, cnt = run(level, a, b, init, word, mode, count=count, lanes=lanes)
    want, want_cnt = per_add(a, b, want_init, word, mode)
    np.testing.assert_array_equal(got, want)
    if count:
        np.testing.assert_array_equal(cnt, want_cnt)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("word,mode", [(16, "saturate"), (9, "saturate"), (16, "wrap"), (12, "wrap"),
                                       (16, "saturate_zero"), (5, "saturate_zero"), (32, "saturate"),
                                       (24, "saturate"), (32, "wrap"), (20, "wrap"), (32, "saturate_zero"),
                                       (27, "saturate_zero")])
def test_k_across_tiles_and_odd_shapes(level, word, mode):
    """K = 2100 spans three k tiles of 1024 (counters flushed between them); 5 rows (a row block of 2 and a
    single row), 67 columns (a padded second slab)."""
    rng = np.random.default_rng(word)
    a, b = operands(rng, word, 5, 2100, 67)
    init = rng.integers(-(1 << (word - 1)), 1 << (word - 1), (5, 67))
    got, cnt = run(level, a, b, init, word, mode, lanes=16 if word <= 16 else 32)
    want, want_cnt = per_add(a, b, init, word, mode)
    assert want_cnt.sum() > 0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cnt, want_cnt)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("word,mode", [(8, "saturate"), (16, "wrap"), (11, "saturate_zero"), (21, "saturate"),
                                       (32, "wrap"), (32, "saturate_zero")])
def test_row_and_slab_indices(level, word, mode):
    """Output row r reads a[rows[r]]; output slab s reads b's slab slabs[s] and init's columns of that slab."""
    rng = np.random.default_rng(3 * word)
    a, b = operands(rng, word, 6, 50, 192)
    rows = np.array([5, 0, 3, 3, 1], np.int64)
    slabs = np.array([2, 0], np.int64)
    init = rng.integers(-(1 << (word - 1)), 1 << (word - 1), (5, 192))
    got, cnt = run(level, a, b, init, word, mode, rows=rows, slabs=slabs, n_out=128, lanes=16 if word <= 16 else 32)
    cols = np.concatenate([np.arange(128, 192), np.arange(0, 64)])
    want, want_cnt = per_add(a[rows], b[:, cols], init[:, cols], word, mode)
    assert want_cnt.sum() > 0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cnt, want_cnt)

"""The sequential MAC kernel against SystemC 2.3.4 (shared/vectors/systemc_accumulate.npz).

Each run: int8 vectors a[K], b[K]; an ``sc_fix`` accumulator of A bits (A integer bits, so an
integer register) starting at ``acc_init``; after every step ``acc = acc + a[k]*b[k]`` the
register's overflow mode (SC_SAT or SC_WRAP) is applied.  Compared bit for bit: the final code,
the number of overflowing steps, the first overflowing step and the whole per-step trace.
"""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from fxpsim.datapath.accumulate import cumsum, dot, matmul
from fxpsim.core.fixed import Format


@pytest.fixture(scope="module")
def runs(vectors_dir):
    data = np.load(vectors_dir / "systemc_accumulate.npz")
    return {k: data[k] for k in data.files}


def _mode(runs, i):
    return ref.SC_O_MODES[int(runs["o_mode"][i])]


def test_final_value_and_overflow_count(runs):
    assert set(np.unique(runs["o_mode"])) == {0, 3}          # SC_SAT and SC_WRAP
    for i in range(len(runs["K"])):
        k, width = int(runs["K"][i]), int(runs["A"][i])
        a, b = runs["a"][i, :k], runs["b"][i, :k]
        res = dot(a, b, Format.integer(width), overflow=_mode(runs, i), init=int(runs["acc_init"][i]))
        assert int(res.raw) == runs["final_raw"][i], f"run {i}"
        assert res.overflows == runs["n_overflow"][i], f"run {i}"
        # an exact (wide) accumulator gives SystemC's exact sum (init included); so does
        # overflow_at="end" whenever that sum fits the register
        wide = dot(a, b, None, init=int(runs["acc_init"][i]))
        assert int(wide.raw) == runs["exact_sum"][i] and wide.overflows == 0
        end = dot(a, b, Format.integer(width), overflow=_mode(runs, i), overflow_at="end",
                  init=int(runs["acc_init"][i]))
        assert end.overflows == int(not -2**(width - 1) <= runs["exact_sum"][i] < 2**(width - 1))


def test_per_step_trace_via_cumsum(runs):
    for i in range(len(runs["K"])):
        k, width = int(runs["K"][i]), int(runs["A"][i])
        products = runs["a"][i, :k].astype(np.int64) * runs["b"][i, :k]
        trace, flags = cumsum(products, acc=Format.integer(width), overflow=_mode(runs, i),
                              init=int(runs["acc_init"][i]), per_output=True)
        np.testing.assert_array_equal(trace.raw, runs["acc_trace"][i, :k], err_msg=f"run {i}")
        np.testing.assert_array_equal(flags.astype(bool), runs["overflow_trace"][i, :k], err_msg=f"run {i}")
        first = int(np.argmax(flags)) if flags.any() else -1
        assert first == runs["first_overflow"][i]


def test_trace_via_k_prefix_matmul(runs):
    """Every prefix K' of every run in one batched matmul: row K' masks products >= K' to zero."""
    for i in range(0, len(runs["K"]), 7):
        k, width = int(runs["K"][i]), int(runs["A"][i])
        a, b = runs["a"][i, :k], runs["b"][i, :k]
        prefix = np.tril(np.ones((k, k), np.int8)) * a              # row p: a[:p+1], zeros after
        res = matmul(prefix, b, Format.integer(width), overflow=_mode(runs, i), init=int(runs["acc_init"][i]))
        # adding a zero product never changes the register, so row p is the state after step p
        np.testing.assert_array_equal(res.raw, runs["acc_trace"][i, :k], err_msg=f"run {i}")

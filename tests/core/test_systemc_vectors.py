"""fxpsim.core.fixed.from_float against SystemC 2.3.4 ``sc_fix``/``sc_ufix`` casts, bit for bit.

Every record of ``systemc_quantize.npz`` (310,800 casts) is checked: the raw code and
the per-element overflow flag, one vectorised ``from_float`` call per
(W, I, signed, q_mode, o_mode, n_bits) group.
"""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.core.fixed import Format, from_float

SC_ROUNDING = ("half_up", "half_toward_zero", "half_down", "half_away", "half_even", "floor", "toward_zero")
SC_OVERFLOW = ("saturate", "saturate_zero", "saturate_symmetric", "wrap", "wrap_sign_magnitude")


@pytest.fixture(scope="module")
def quantize_records(vectors_dir):
    data = np.load(vectors_dir / "systemc_quantize.npz")
    return {key: data[key] for key in data.files}


def _groups(records):
    keys = np.stack([records[k].astype(np.int64) for k in ("W", "I", "signed", "q_mode", "o_mode", "n_bits")],
                    axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(unique) + 1))
    for g, key in enumerate(unique):
        yield tuple(int(k) for k in key), order[bounds[g]:bounds[g + 1]]


def test_vector_names_match_the_mode_tables(quantize_records):
    assert [str(n) for n in quantize_records["q_mode_names"]] == [
        "SC_RND", "SC_RND_ZERO", "SC_RND_MIN_INF", "SC_RND_INF", "SC_RND_CONV", "SC_TRN", "SC_TRN_ZERO"]
    assert [str(n) for n in quantize_records["o_mode_names"]] == [
        "SC_SAT", "SC_SAT_ZERO", "SC_SAT_SYM", "SC_WRAP", "SC_WRAP_SM"]


def test_from_float_matches_every_systemc_record(quantize_records):
    x, raw, flag = quantize_records["x"], quantize_records["raw"], quantize_records["overflow_flag"]
    checked, failures = 0, []
    for (word, int_bits, signed, q_mode, o_mode, n_bits), idx in _groups(quantize_records):
        fmt = Format(word, word - int_bits, bool(signed))
        result = from_float(x[idx], fmt, SC_ROUNDING[q_mode], SC_OVERFLOW[o_mode], n_bits=n_bits, mask=True)
        got_raw = result.raw.astype(np.int64)
        got_flag = np.asarray(result.overflow_mask, dtype=bool)
        bad = np.flatnonzero((got_raw != raw[idx]) | (got_flag != flag[idx]))
        if bad.size:
            i = idx[bad[0]]
            failures.append(f"{fmt} {SC_ROUNDING[q_mode]}/{SC_OVERFLOW[o_mode]} n_bits={n_bits}: "
                            f"{bad.size} wrong, first x={x[i]!r}: expected raw {raw[i]} flag {flag[i]}, "
                            f"got {got_raw[bad[0]]} flag {got_flag[bad[0]]}")
        assert result.overflows == int(flag[idx].sum())
        checked += idx.size
    assert checked == 310_800
    assert not failures, "\n".join(failures[:20])


def test_quantize_values_match_systemc_values(quantize_records):
    """The float value of each cast (to_float) equals SystemC's, for the half_up/saturate records."""
    sel = (quantize_records["q_mode"] == 0) & (quantize_records["o_mode"] == 0)
    for (word, int_bits, signed, _, _, _), idx in _groups({k: v[sel] for k, v in quantize_records.items()
                                                          if v.shape == sel.shape}):
        fmt = Format(word, word - int_bits, bool(signed))
        values = from_float(quantize_records["x"][sel][idx], fmt).to_float()
        np.testing.assert_array_equal(values, quantize_records["value"][sel][idx], err_msg=str(fmt))

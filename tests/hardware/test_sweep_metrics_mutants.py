"""fxpsim.hardware.sweep_metrics against independent models: the sweep's exactness numbers (exact_fraction,
max_lsb_error, mean_lsb_error) against a Python-int / Fraction count over the flattened codes, the
recommendation against a brute-force search over the swept widths (hand tables and hypothesis on dyadic
values, where every float comparison is exact), and every message typed out by hand.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fxpsim.hardware.sweep_metrics import (MAXIMISED_METRICS, TOP1_METRICS, exactness, metric_problem,
                                           recommend)


# ----- exactness ------------------------------------------------------------------------------------------

def _flat(a) -> list:
    """Every code of an array as a Python int (row-major), without numpy arithmetic."""
    return [int(v) for v in np.asarray(a).reshape(-1).tolist()]


def _model_exactness(got: list, want: list) -> tuple:
    """(fraction exact, max |diff|, mean |diff|) as Fractions / ints over Python ints."""
    diffs = []
    for g, w in zip(got, want):
        diffs += [abs(a - b) for a, b in zip(_flat(g), _flat(w))]
    if not diffs:
        return Fraction(1), 0, Fraction(0)
    return Fraction(sum(d == 0 for d in diffs), len(diffs)), max(diffs), Fraction(sum(diffs), len(diffs))


def _check(res: dict, model: tuple):
    frac, mx, mean = model
    assert set(res) == {"exact_fraction", "max_lsb_error", "mean_lsb_error"}
    assert type(res["exact_fraction"]) is float and type(res["mean_lsb_error"]) is float
    assert type(res["max_lsb_error"]) is int
    assert res["exact_fraction"] == float(frac)
    assert res["max_lsb_error"] == mx
    assert res["mean_lsb_error"] == float(mean)


def test_exactness_hand_table_int8_extremes():
    # diffs 255, 255, 0, 1 (int8 arithmetic would wrap them): 1 of 4 exact, max 255, mean 511 / 4
    got = np.array([-128, 127, 5, 0], np.int8)
    want = np.array([127, -128, 5, 1], np.int8)
    res = exactness(got, want)
    assert res == {"exact_fraction": 0.25, "max_lsb_error": 255, "mean_lsb_error": 127.75}
    _check(res, _model_exactness([got], [want]))


def test_exactness_hand_table_uint8_and_int32_extremes():
    res = exactness(np.array([0, 255, 7], np.uint8), np.array([255, 0, 7], np.uint8))
    assert res == {"exact_fraction": 1 / 3, "max_lsb_error": 255, "mean_lsb_error": 170.0}
    top, bottom = 2**31 - 1, -2**31
    res = exactness(np.array([[top, 0]], np.int32), np.array([[bottom, 0]], np.int32))
    assert res == {"exact_fraction": 0.5, "max_lsb_error": 2**32 - 1, "mean_lsb_error": (2**32 - 1) / 2}
    # mixed dtypes: int16 codes against int8 ones
    res = exactness(np.array([300, -300], np.int16), np.array([-100, 100], np.int8))
    assert res == {"exact_fraction": 0.0, "max_lsb_error": 400, "mean_lsb_error": 400.0}


def test_exactness_of_64_bit_codes_is_exact():
    """Codes of a 64-bit output tensor (int64, or uint64 for an unsigned one): their differences reach
    2^64 - 1 and must not wrap (int64 arithmetic gave a max error of 0 and a negative mean for 2^62 vs -2^62,
    and 1 for 2^64 - 1 vs 0)."""
    res = exactness(np.array([2**62, 7], np.int64), np.array([-2**62, 7], np.int64))
    assert res == {"exact_fraction": 0.5, "max_lsb_error": 2**63, "mean_lsb_error": float(Fraction(2**63, 2))}
    res = exactness(np.array([2**63 - 1], np.int64), np.array([-2**63], np.int64))
    assert res == {"exact_fraction": 0.0, "max_lsb_error": 2**64 - 1, "mean_lsb_error": float(2**64 - 1)}
    assert type(res["max_lsb_error"]) is int and type(res["mean_lsb_error"]) is float
    res = exactness(np.array([2**64 - 1, 5, 0], np.uint64), np.array([0, 5, 2**63 + 3], np.uint64))
    assert res == {"exact_fraction": 1 / 3, "max_lsb_error": 2**64 - 1,
                   "mean_lsb_error": float(Fraction(2**64 - 1 + 2**63 + 3, 3))}
    # odd differences above 2^53 (float64 would round them): 2^62 + 1
    res = exactness(np.array([2**62 + 1], np.int64), np.array([0], np.int64))
    assert res["max_lsb_error"] == 2**62 + 1
    res = exactness(np.array([0], np.int64), np.array([2**62 + 1], np.int64))
    assert res["max_lsb_error"] == 2**62 + 1
    # 64-bit codes with narrower ones, in one list
    got = [np.array([3, -3], np.int8), np.array([2**63 - 1], np.int64)]
    want = [np.array([3, 4], np.int8), np.array([-1], np.int64)]
    res = exactness(got, want)
    _check(res, _model_exactness(got, want))
    assert res["max_lsb_error"] == 2**63


def test_exactness_all_exact_and_empty():
    a = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    assert exactness(a, a.copy()) == {"exact_fraction": 1.0, "max_lsb_error": 0, "mean_lsb_error": 0.0}
    # no outputs at all, or outputs with no codes: nothing differs
    for got, want in (([], []), ((), ()), (np.zeros((0, 3), np.int8), np.zeros((0, 3), np.int8)),
                      ([np.zeros(0, np.int8), np.zeros((2, 0), np.int8)], [np.zeros(0, np.int8), np.zeros((2, 0), np.int8)])):
        res = exactness(got, want)
        assert res == {"exact_fraction": 1.0, "max_lsb_error": 0, "mean_lsb_error": 0.0}
        _check(res, (Fraction(1), 0, Fraction(0)))


def test_exactness_several_outputs_count_every_code_alike():
    # output 0: 6 codes, 2 off by 3 and 1; output 1: 2 codes, 1 off by 10  -> 5 of 8 exact, max 10, mean 14 / 8
    g0 = np.array([[1, 2, 3], [4, 5, 6]], np.int8)
    w0 = np.array([[1, 5, 3], [4, 5, 7]], np.int8)
    g1 = np.array([-5, 9], np.int16)
    w1 = np.array([5, 9], np.int16)
    want = {"exact_fraction": 5 / 8, "max_lsb_error": 10, "mean_lsb_error": 14 / 8}
    assert exactness([g0, g1], [w0, w1]) == want
    assert exactness((g0, g1), (w0, w1)) == want
    assert exactness([g0, g1], (w0, w1)) == want
    # the outputs' order does not matter for these statistics; a one-output list equals the bare array
    assert exactness([g1, g0], [w1, w0]) == want
    assert exactness([g0], [w0]) == exactness(g0, w0) == \
        {"exact_fraction": 4 / 6, "max_lsb_error": 3, "mean_lsb_error": 4 / 6}
    # a single 0-d code
    assert exactness(np.int8(3), np.int8(-2)) == {"exact_fraction": 0.0, "max_lsb_error": 5, "mean_lsb_error": 5.0}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.sampled_from(["int8", "uint8", "int16", "int32", "int64", "uint64"]),
                          st.integers(0, 2**32 - 1)), min_size=1, max_size=3))
def test_exactness_against_a_python_int_model(outputs):
    got, want = [], []
    for rows, cols, dtype, seed in outputs:
        rng = np.random.default_rng(seed)
        info = np.iinfo(dtype)
        g = rng.integers(info.min, info.max, (rows, cols), dtype=dtype, endpoint=True)
        w = g.copy()
        flip = rng.random((rows, cols)) < 0.5
        w[flip] = rng.integers(info.min, info.max, int(flip.sum()), dtype=dtype, endpoint=True)
        got.append(g)
        want.append(w)
    res = exactness(got, want)
    _check(res, _model_exactness(got, want))


def test_exactness_refuses_outputs_that_differ_in_number_or_shape():
    msg = "exactness: the outputs and the exact datapath's outputs differ in number or shape"
    a, b = np.zeros((2, 3), np.int8), np.zeros((3, 2), np.int8)
    for got, want in (([a], [a, a]), ([a, a], [a]), (a, b), ([a, a], [a, b]), ([b, a], [a, a]),
                      (np.zeros(6, np.int8), a), ([a], [])):
        with pytest.raises(ValueError) as err:
            exactness(got, want)
        assert str(err.value) == msg


# ----- metric_problem ---------------------------------------------------------------------------------------

TOP1_TEXT = ("metric {m!r} compares top-1 classes, but the model's output has {n} value per sample: its top-1 is "
             "always the same, so the metric is 1 at every point; use metric='exact_fraction' (or labels with a "
             "classifier)")
AGREE_TEXT = ("metric 'agreement': the reference's top-1 class is the same for every sample, so agreement cannot "
              "tell a datapath that changes the outputs from one that does not; use metric='exact_fraction'")


def test_metric_constants():
    assert TOP1_METRICS == ("accuracy", "agreement")
    assert MAXIMISED_METRICS == ("exact_fraction", "accuracy", "agreement", "output_sqnr_db")


@pytest.mark.parametrize("metric", ["accuracy", "agreement"])
def test_metric_problem_top1_on_one_value(metric):
    for n in (0, 1):
        assert metric_problem(metric, n) == TOP1_TEXT.format(m=metric, n=n)
        assert metric_problem(metric, n, np.array([0, 1, 2])) == TOP1_TEXT.format(m=metric, n=n)
    assert metric_problem(metric, 2) is None
    assert metric_problem(metric, 10) is None


def test_metric_problem_agreement_with_one_reference_class():
    same = np.array([3, 3, 3, 3])
    assert metric_problem("agreement", 5, same) == AGREE_TEXT
    assert metric_problem("agreement", 2, [1, 1]) == AGREE_TEXT
    assert metric_problem("agreement", 5, np.array([3, 3, 1, 3])) is None
    assert metric_problem("agreement", 5, np.array([0, 1])) is None
    assert metric_problem("agreement", 5, np.array([4])) is None          # one sample: nothing to compare
    assert metric_problem("agreement", 5, np.array([], np.int64)) is None
    assert metric_problem("agreement", 5, None) is None
    # accuracy has labels to compare with; the other metrics read the codes
    for metric in ("accuracy", "exact_fraction", "output_sqnr_db"):
        assert metric_problem(metric, 5, same) is None
    for metric in ("exact_fraction", "output_sqnr_db"):
        assert metric_problem(metric, 1, same) is None
        assert metric_problem(metric, 0) is None


# ----- recommend ---------------------------------------------------------------------------------------------

def _rec(bits, value, frac=None, config=None, metric="accuracy"):
    r = {"accumulator_bits": bits, metric: value, "config": config or f"c{bits}"}
    if frac is not None:
        r["exact_fraction"] = frac
    return r


def _model_recommend(records, metric, exact_value, tolerance):
    """Brute force: the smallest swept width w such that every kept point of width >= w has
    metric >= its exact value - tolerance (Fractions of the given floats: exact for dyadic inputs); the
    config of the first kept record of that width.  Kept: the metric, the width and the exact value known."""
    refs = list(exact_value) if isinstance(exact_value, (list, tuple)) else [exact_value] * len(records)
    pts = [(r, Fraction(e)) for r, e in zip(records, refs)
           if r.get(metric) is not None and r.get("accumulator_bits") is not None and e is not None]
    if not pts:
        return None, None
    if metric != "exact_fraction":
        vals = {Fraction(r[metric]) for r, _ in pts}
        fracs = {Fraction(r["exact_fraction"]) for r, _ in pts if r.get("exact_fraction") is not None}
        if len(vals) == 1 and len(fracs) > 1:
            return None, None
    tol = Fraction(tolerance)
    widths = {int(r["accumulator_bits"]) for r, _ in pts}
    good = [w for w in widths
            if all(Fraction(r[metric]) >= e - tol for r, e in pts if int(r["accumulator_bits"]) >= w)]
    if not good:
        return None, None
    w = min(good)
    return w, next(r for r, _ in pts if int(r["accumulator_bits"]) == w).get("config")


def test_recommend_hand_table_stops_at_the_first_failing_width_from_the_top():
    # 32, 28 ok; 24 fails; 20 and 16 ok again: the narrowest width from which all wider ones are ok is 28
    recs = [_rec(16, 0.9, 0.2), _rec(20, 0.9, 0.3), _rec(24, 0.5, 0.4), _rec(28, 0.875, 0.9), _rec(32, 0.9, 1.0)]
    out = recommend(recs, "accuracy", 0.9, 0.03125)
    assert out == {"metric": "accuracy", "exact_value": 0.9, "tolerance": 0.03125, "accumulator_bits": 28,
                   "config": "c28",
                   "reason": "narrowest accumulator from which every swept point keeps 'accuracy' within 0.03125 "
                             "of the exact datapath's 0.9"}
    # records in any order
    out2 = recommend(recs[::-1], "accuracy", 0.9, 0.03125)
    assert out2 == out
    # the tolerance is inclusive: 0.875 >= 0.90625 - 0.03125 holds with dyadic values exactly
    out = recommend([_rec(28, 0.875, 0.5), _rec(32, 0.90625, 1.0)], "accuracy", 0.90625, 0.03125)
    assert out["accumulator_bits"] == 28
    out = recommend([_rec(28, 0.875, 0.5), _rec(32, 0.90625, 1.0)], "accuracy", 0.90625, 0.015625)
    assert out["accumulator_bits"] == 32 and out["config"] == "c32"
    # tolerance 0: equal values only
    out = recommend([_rec(16, 0.5, 0.5), _rec(24, 0.75, 0.75), _rec(32, 0.75, 1.0)], "accuracy", 0.75, 0)
    assert (out["accumulator_bits"], out["config"]) == (24, "c24")
    # every width ok: the narrowest swept one
    out = recommend([_rec(12, 1.0, 1.0), _rec(16, 1.0, 1.0), _rec(32, 1.0, 1.0)], "accuracy", 1.0, 0.0)
    assert out["accumulator_bits"] == 12 and out["config"] == "c12"
    # a point above its exact value is within any tolerance
    out = recommend([_rec(16, 0.75, 0.5), _rec(32, 0.5, 1.0)], "accuracy", 0.5, 0.0)
    assert out["accumulator_bits"] == 16


def test_recommend_needs_every_point_of_a_width():
    # two points at 24 bits: one fails, so 24 fails although the other one is ok
    recs = [_rec(24, 0.75, 0.5, "a"), _rec(24, 0.25, 0.25, "b"), _rec(32, 0.75, 1.0, "c")]
    out = recommend(recs, "accuracy", 0.75, 0.0)
    assert (out["accumulator_bits"], out["config"]) == (32, "c")
    # both ok: the first record of that width names the config
    recs = [_rec(32, 0.75, 1.0, "c"), _rec(24, 0.75, 1.0, "a"), _rec(24, 0.75, 1.0, "b")]
    out = recommend(recs, "accuracy", 0.75, 0.0)
    assert (out["accumulator_bits"], out["config"]) == (24, "a")
    # a record without a config
    out = recommend([{"accumulator_bits": 16, "exact_fraction": 1.0}], "exact_fraction", 1.0, 0.0)
    assert out["accumulator_bits"] == 16 and out["config"] is None


def test_recommend_nothing_within_the_tolerance():
    recs = [_rec(16, 0.25, 0.5), _rec(32, 0.5, 1.0)]
    out = recommend(recs, "accuracy", 0.75, 0.125)
    assert out == {"metric": "accuracy", "exact_value": 0.75, "tolerance": 0.125, "accumulator_bits": None,
                   "config": None,
                   "reason": "no swept width keeps 'accuracy' within 0.125 of the exact datapath's 0.75"}


def test_recommend_per_point_exact_values():
    # each point has its own exact datapath's value
    recs = [_rec(16, 0.5, 0.5), _rec(24, 0.75, 0.75), _rec(32, 0.25, 1.0)]
    out = recommend(recs, "accuracy", [0.5, 0.75, 0.25], 0.0)
    assert out["accumulator_bits"] == 16 and out["exact_value"] == [0.5, 0.75, 0.25]
    assert out["reason"] == ("narrowest accumulator from which every swept point keeps 'accuracy' within 0.0 of "
                             "the exact datapath's [0.5, 0.75, 0.25]")
    out = recommend(recs, "accuracy", (0.5, 1.0, 0.25), 0.0)
    assert out["accumulator_bits"] == 32 and out["config"] == "c32"
    assert out["exact_value"] == [0.5, 1.0, 0.25]
    # every point the same exact value: reported as one number (a float)
    out = recommend(recs, "accuracy", [0.25, 0.25, 0.25], 0.0)
    assert out["exact_value"] == 0.25 and type(out["exact_value"]) is float and out["accumulator_bits"] == 16
    out = recommend(recs, "accuracy", 1, 0.0)
    assert out["exact_value"] == 1.0 and type(out["exact_value"]) is float
    assert out["reason"] == "no swept width keeps 'accuracy' within 0.0 of the exact datapath's 1.0"


def test_recommend_drops_points_without_a_value_width_or_exact_value():
    recs = [_rec(16, None, 0.5), {"accuracy": 0.75, "exact_fraction": 0.5, "config": "nobits"},
            _rec(20, 0.0, 0.5), _rec(24, 0.75, 1.0), _rec(32, 0.75, 1.0)]
    # the 20-bit point fails, but its exact value is unknown: it is not a point of the recommendation
    out = recommend(recs, "accuracy", [0.75, 0.75, None, 0.75, 0.75], 0.0)
    assert out["accumulator_bits"] == 24 and out["exact_value"] == 0.75
    out = recommend(recs, "accuracy", [0.75, 0.75, 0.75, 0.75, 0.75], 0.0)
    assert out["accumulator_bits"] == 24
    out = recommend(recs, "accuracy", [0.0, 0.0, 0.0, 0.75, 0.75], 0.0)
    assert out["accumulator_bits"] == 20 and out["config"] == "c20"
    # the exact values of the dropped points do not count for the reported exact value
    out = recommend(recs, "accuracy", [0.5, 0.25, 0.75, 0.75, 0.75], 0.0)
    assert out["exact_value"] == 0.75 and out["accumulator_bits"] == 24


@pytest.mark.parametrize("records, exact", [
    ([], 1.0),
    ([_rec(16, None, 0.5)], 1.0),
    ([{"accuracy": 0.5}], 1.0),
    ([{"accumulator_bits": None, "accuracy": 0.5}], 1.0),
    ([_rec(16, 0.5, 0.5)], [None]),
    ([_rec(16, 0.5, 0.5)], None),
])
def test_recommend_without_points(records, exact):
    out = recommend(records, "accuracy", exact, 0.5)
    assert out == {"metric": "accuracy", "exact_value": exact, "tolerance": 0.5, "accumulator_bits": None,
                   "config": None, "reason": "no point has a value of 'accuracy'"}


def test_recommend_with_a_problem_decides_nothing():
    recs = [_rec(16, 1.0, 1.0), _rec(32, 1.0, 1.0)]
    out = recommend(recs, "agreement", 1.0, 0.0, "the model cannot be ranked")
    assert out == {"metric": "agreement", "exact_value": 1.0, "tolerance": 0.0, "accumulator_bits": None,
                   "config": None, "reason": "the model cannot be ranked"}
    # an empty problem is no problem
    assert recommend(recs, "accuracy", 1.0, 0.0, "")["accumulator_bits"] == 16
    assert recommend(recs, "accuracy", 1.0, 0.0, None)["accumulator_bits"] == 16


def test_recommend_a_metric_that_cannot_distinguish_the_points():
    recs = [_rec(16, 1.0, 0.25), _rec(24, 1.0, 0.5), _rec(32, 1.0, 1.0)]
    out = recommend(recs, "accuracy", 1.0, 0.0)
    assert out == {"metric": "accuracy", "exact_value": 1.0, "tolerance": 0.0, "accumulator_bits": None,
                   "config": None,
                   "reason": "'accuracy' is 1.0 at every point while the fraction of outputs bit-exact with the "
                             "exact datapath ranges over 0.25..1: the metric cannot distinguish the points; use "
                             "metric='exact_fraction'"}
    # .4g of the fractions; values equal to 12 decimals count as one value
    recs = [_rec(16, 0.8 + 1e-13, 0.123456, metric="output_sqnr_db"),
            _rec(32, 0.8, 0.987654, metric="output_sqnr_db")]
    out = recommend(recs, "output_sqnr_db", 0.8, 0.0)
    assert out["accumulator_bits"] is None
    assert out["reason"] == ("'output_sqnr_db' is 0.8000000000001001 at every point while the fraction of outputs "
                             "bit-exact with the exact datapath ranges over 0.1235..0.9877: the metric cannot "
                             "distinguish the points; use metric='exact_fraction'")
    # fractions equal to 12 decimals are one fraction: the metric decides
    recs = [_rec(16, 1.0, 0.5 + 1e-13), _rec(32, 1.0, 0.5)]
    assert recommend(recs, "accuracy", 1.0, 0.0)["accumulator_bits"] == 16
    # one fraction (the others unknown): no problem either
    recs = [_rec(16, 1.0), _rec(24, 1.0, 0.5), _rec(32, 1.0)]
    assert recommend(recs, "accuracy", 1.0, 0.0)["accumulator_bits"] == 16
    # two metric values: it can tell them apart
    recs = [_rec(16, 0.5, 0.25), _rec(32, 1.0, 1.0)]
    assert recommend(recs, "accuracy", 1.0, 0.0)["accumulator_bits"] == 32
    # values differing in the 11th decimal are two values
    recs = [_rec(16, 1.0 - 1e-11, 0.25), _rec(32, 1.0, 1.0)]
    out = recommend(recs, "accuracy", 1.0, 0.0)
    assert out["accumulator_bits"] == 32
    # exact_fraction as the metric: constant values are no problem
    recs = [{"accumulator_bits": 16, "exact_fraction": 1.0, "config": "a"},
            {"accumulator_bits": 32, "exact_fraction": 1.0, "config": "b"}]
    assert recommend(recs, "exact_fraction", 1.0, 0.0)["accumulator_bits"] == 16


def test_recommend_accepts_numpy_numbers():
    recs = [{"accumulator_bits": np.int64(16), "accuracy": np.float64(0.5), "exact_fraction": np.float32(0.5),
             "config": "a"},
            {"accumulator_bits": np.int32(32), "accuracy": np.float32(1.0), "exact_fraction": 1.0, "config": "b"}]
    out = recommend(recs, "accuracy", np.float64(1.0), 0.0)
    assert out["accumulator_bits"] == 32 and type(out["accumulator_bits"]) is int and out["config"] == "b"
    assert out["exact_value"] == 1.0 and type(out["exact_value"]) is float
    out = recommend(recs, "accuracy", [np.float32(0.5), np.float64(1.0)], 0.0)
    assert out["accumulator_bits"] == 16 and type(out["accumulator_bits"]) is int
    # widths given as floats are read as ints
    out = recommend([dict(r, accumulator_bits=float(r["accumulator_bits"])) for r in recs], "accuracy", 1.0, 0.0)
    assert out["accumulator_bits"] == 32 and type(out["accumulator_bits"]) is int


_dyadic = st.integers(0, 16).map(lambda k: k / 16)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([8, 12, 16, 20, 24, 32]), st.one_of(st.none(), _dyadic),
                          st.one_of(st.none(), _dyadic), st.one_of(st.none(), _dyadic)), max_size=8),
       st.sampled_from([0.0, 0.0625, 0.25]), st.booleans(), st.sampled_from(["accuracy", "exact_fraction"]))
def test_recommend_against_brute_force(rows, tolerance, per_point, metric):
    records = []
    for i, (bits, value, frac, _) in enumerate(rows):
        r = {"accumulator_bits": bits, "config": f"p{i}", metric: value}
        if metric != "exact_fraction":
            r["exact_fraction"] = frac
        records.append(r)
    exact = [e for _, _, _, e in rows] if per_point else 0.75
    want_bits, want_config = _model_recommend(records, metric, exact, tolerance)
    out = recommend(records, metric, exact, tolerance)
    assert out["metric"] == metric and out["tolerance"] == tolerance
    assert out["accumulator_bits"] == want_bits
    assert out["config"] == want_config
    assert (want_bits is None) == (not out["reason"].startswith("narrowest accumulator"))

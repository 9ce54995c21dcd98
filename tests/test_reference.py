"""Validate the pure-Python reference model (tests/reference.py) itself.

The reference is the oracle for the property tests of the Cython core and of
the datapath, so it is checked here against SystemC 2.3.4 itself (every record
of ``systemc_quantize.npz`` and every run of ``systemc_accumulate.npz``) and
against hand-worked tables for what the vectors do not cover (ceil and
stochastic rounding, ``n_bits >= 2``, growth rules, the adder tree).
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import reference as ref


# --------------------------------------------------------------------------- SystemC vectors
def test_reference_matches_every_systemc_quantize_record(vectors_dir):
    data = np.load(vectors_dir / "systemc_quantize.npz")
    columns = [data[k].tolist() for k in ("W", "I", "signed", "q_mode", "o_mode", "n_bits", "x", "raw",
                                          "overflow_flag")]
    mismatches = []
    for word, int_bits, signed, q_mode, o_mode, n_bits, x, raw, flag in zip(*columns):
        code, overflowed = ref.from_float(x, word, word - int_bits, signed, ref.SC_Q_MODES[q_mode],
                                          ref.SC_O_MODES[o_mode], n_bits)
        if code != raw or overflowed != flag:
            mismatches.append((word, int_bits, signed, q_mode, o_mode, n_bits, x, raw, flag, code, overflowed))
    assert len(columns[0]) == 310_800
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:5]}"


def test_systemc_quantize_values_are_raw_times_lsb(vectors_dir):
    data = np.load(vectors_dir / "systemc_quantize.npz")
    expected = np.ldexp(data["raw"].astype(np.float64), (data["I"] - data["W"]).astype(np.int64))
    np.testing.assert_array_equal(expected, data["value"])


def test_reference_matches_every_systemc_accumulate_run(vectors_dir):
    data = np.load(vectors_dir / "systemc_accumulate.npz")
    n_runs = len(data["K"])
    assert n_runs > 0
    for run in range(n_runs):
        k, acc_word = int(data["K"][run]), int(data["A"][run])
        mode = ref.SC_O_MODES[int(data["o_mode"][run])]
        init = int(data["acc_init"][run])
        products = (data["a"][run, :k].astype(np.int64) * data["b"][run, :k].astype(np.int64)).tolist()
        final, n_overflow, trace = ref.accumulate(products, init, acc_word, True, mode)
        # each step's overflow flag, re-derived from the trace one add at a time
        flags = [ref.overflow_int(prev + p, acc_word, True, mode)[1]
                 for prev, p in zip([init] + trace[:-1], products)]
        first = flags.index(True) if any(flags) else -1
        context = f"run {run} (K={k}, A={acc_word}, {mode}, init={init})"
        assert sum(products) + init == int(data["exact_sum"][run]), context
        assert final == int(data["final_raw"][run]), context
        assert n_overflow == int(data["n_overflow"][run]), context
        assert first == int(data["first_overflow"][run]), context
        assert trace == data["acc_trace"][run, :k].tolist(), context
        assert flags == data["overflow_trace"][run, :k].tolist(), context


# --------------------------------------------------------------------------- rounding by hand
HALF = Fraction(1, 2)
#         q:          -2.5 -1.5 -0.5  0.5  1.5  2.5  -0.75 0.25
ROUNDING_TABLE = {
    "half_up":          [-2, -1, 0, 1, 2, 3, -1, 0],
    "half_toward_zero": [-2, -1, 0, 0, 1, 2, -1, 0],
    "half_down":        [-3, -2, -1, 0, 1, 2, -1, 0],
    "half_away":        [-3, -2, -1, 1, 2, 3, -1, 0],
    "half_even":        [-2, -2, 0, 0, 2, 2, -1, 0],
    "floor":            [-3, -2, -1, 0, 1, 2, -1, 0],
    "toward_zero":      [-2, -1, 0, 0, 1, 2, 0, 0],
    "ceil":             [-2, -1, 0, 1, 2, 3, 0, 1],
}
ROUNDING_INPUTS = [Fraction(-5, 2), Fraction(-3, 2), -HALF, HALF, Fraction(3, 2), Fraction(5, 2),
                   Fraction(-3, 4), Fraction(1, 4)]


@pytest.mark.parametrize("mode", sorted(ROUNDING_TABLE))
def test_round_fraction_hand_table(mode):
    assert [ref.round_fraction(q, mode) for q in ROUNDING_INPUTS] == ROUNDING_TABLE[mode]
    for n in (-3, 0, 7):                       # integers are never changed
        assert ref.round_fraction(Fraction(n), mode) == n


def test_round_fraction_just_below_half():
    q = Fraction(0.49999999999999994)
    assert q < HALF
    for mode in ref.DETERMINISTIC_ROUNDING_MODES:
        assert ref.round_fraction(q, mode) == (1 if mode == "ceil" else 0)


def test_round_fraction_stochastic_threshold():
    q = Fraction(-7, 4)                        # floor -2, fraction 1/4
    assert ref.round_fraction(q, "stochastic", 0) == -1
    assert ref.round_fraction(q, "stochastic", Fraction(1, 4) - Fraction(1, 10**9)) == -1
    assert ref.round_fraction(q, "stochastic", Fraction(1, 4)) == -2
    assert ref.round_fraction(q, "stochastic", 0.999) == -2
    assert ref.round_fraction(Fraction(3), "stochastic", 0) == 3
    with pytest.raises(ValueError):
        ref.round_fraction(q, "stochastic")
    with pytest.raises(ValueError):
        ref.round_fraction(q, "stochastic", 1)
    with pytest.raises(ValueError):
        ref.round_fraction(q, "nearest")


# --------------------------------------------------------------------------- overflow by hand
@pytest.mark.parametrize("mode, v, expected", [
    ("saturate", 8, (7, True)), ("saturate", -9, (-8, True)), ("saturate", -8, (-8, False)),
    ("saturate_symmetric", -8, (-7, True)), ("saturate_symmetric", -7, (-7, False)),
    ("saturate_symmetric", 100, (7, True)), ("saturate_zero", 8, (0, True)), ("saturate_zero", 7, (7, False)),
    ("wrap", 8, (-8, True)), ("wrap", 9, (-7, True)), ("wrap", -9, (7, True)), ("wrap", 16, (0, True)),
    # sign-magnitude wrap, n_bits = 0: 9 = 0b01001 -> bit4 0 != bit3 1 -> ~9 = -10 -> wraps to 6
    ("wrap_sign_magnitude", 9, (6, True)), ("wrap_sign_magnitude", 8, (7, True)),
    # -9 = ...10111: bit4 1 != bit3 0 -> ~(-9) = 8 -> -8;  17 = 10001 -> ~17 = -18 = ...01110 -> -2
    ("wrap_sign_magnitude", -9, (-8, True)), ("wrap_sign_magnitude", 17, (-2, True)),
])
def test_overflow_int_signed_4_bit(mode, v, expected):
    assert ref.overflow_int(v, 4, True, mode) == expected


def test_overflow_int_unsigned():
    assert ref.overflow_int(16, 4, False, "saturate") == (15, True)
    assert ref.overflow_int(-1, 4, False, "saturate") == (0, True)
    assert ref.overflow_int(-1, 4, False, "saturate_symmetric") == (0, True)
    assert ref.overflow_int(-1, 4, False, "wrap") == (15, True)
    assert ref.overflow_int(0, 4, False, "saturate_symmetric") == (0, False)
    with pytest.raises(ValueError, match="signed"):
        ref.overflow_int(3, 4, False, "wrap_sign_magnitude")
    with pytest.raises(OverflowError):
        ref.overflow_int(16, 4, False, "error")
    assert ref.overflow_int(15, 4, False, "error") == (15, False)


def test_overflow_int_wrap_with_saturated_msbs():
    # 8 bits, n_bits = 3: the 3 MSBs saturate, the 5 LSBs wrap (X = 32).
    assert ref.overflow_int(200, 8, True, "wrap", 3) == (200 % 32 + 128 - 32, True)    # 0b011_01000
    assert ref.overflow_int(-200, 8, True, "wrap", 3) == ((-200) % 32 - 128, True)     # 0b100_11000
    assert ref.overflow_int(300, 8, False, "wrap", 3) == (300 % 32 + 256 - 32, True)   # 0b111_01100
    assert ref.overflow_int(-1, 8, False, "wrap", 3) == (31, True)
    assert ref.overflow_int(200, 8, True, "wrap", 8) == (127, True)                    # n >= W: saturate
    assert ref.overflow_int(-200, 8, True, "wrap_sign_magnitude", 9) == (-128, True)
    # sign-magnitude, n_bits = 3: 200 = 0b1100_1000, sign 0 == bit 5 (0) -> invert -> ~200 = -201
    assert ref.overflow_int(200, 8, True, "wrap_sign_magnitude", 3) == ((-201) % 32 + 96, True)
    assert ref.overflow_int(100, 8, True, "wrap_sign_magnitude", 3) == (100, False)


def test_sign_magnitude_wrap_keeps_magnitude_bits_near_the_edge():
    # SC_WRAP_SM with n_bits = 1 keeps the sign: 2^(W-1) + k (k small) -> 2^(W-1) - 1 - k
    for k in range(4):
        assert ref.overflow_int(128 + k, 8, True, "wrap_sign_magnitude", 1) == (127 - k, True)
        assert ref.overflow_int(-129 - k, 8, True, "wrap_sign_magnitude", 1) == (-128 + k, True)


def test_infinities():
    assert ref.from_float(float("inf"), 8, 4, True, "half_up", "saturate") == (127, True)
    assert ref.from_float(float("-inf"), 8, 4, True, "half_up", "saturate") == (-128, True)
    assert ref.from_float(float("-inf"), 8, 4, True, "half_up", "saturate_symmetric") == (-127, True)
    assert ref.from_float(float("-inf"), 8, 4, False, "floor", "saturate") == (0, True)
    for mode in ("wrap", "saturate_zero", "wrap_sign_magnitude"):
        assert ref.from_float(float("inf"), 8, 4, True, "half_up", mode) == (0, True)
        assert ref.from_float(float("-inf"), 8, 4, True, "half_up", mode) == (0, True)
    assert ref.from_float(float("inf"), 8, 4, False, "half_up", "wrap") == (0, True)
    assert ref.from_float(float("-inf"), 8, 4, True, "half_up", "wrap_sign_magnitude", 1) == (-1, True)
    with pytest.raises(OverflowError):
        ref.from_float(float("inf"), 8, 4, True, "half_up", "error")
    with pytest.raises(ValueError, match="NaN"):
        ref.from_float(float("nan"), 8, 4, True, "half_up", "saturate")


def test_from_float_is_exact_in_one_pass():
    # 0.49999999999999994 * 2^-3 scaled by 2^3 is just below the tie: no double rounding
    x = 0.49999999999999994 * 2.0 ** -3
    assert ref.from_float(x, 8, 3, True, "half_up", "saturate") == (0, False)
    assert ref.from_float(2.5 * 2.0 ** -3, 8, 3, True, "half_even", "saturate") == (2, False)
    assert ref.from_float(5e-324, 8, 3, True, "ceil", "saturate") == (1, False)
    assert ref.from_float(-5e-324, 8, 3, True, "half_down", "saturate") == (0, False)
    assert ref.from_float(1e300, 64, 90, True, "half_up", "wrap") == (0, True)        # 1e300*2^90 = k*2^...
    assert ref.from_float(96.0, 8, -4, True, "half_up", "saturate") == (6, False)     # LSB 16


def test_cast_between_formats():
    # Q7.8 code 0x0180 (1.5) -> Q3.0 (frac 0): tie -> half_even 2, floor 1
    assert ref.cast(0x180, 16, 8, True, 4, 0, True, "half_even", "saturate") == (2, False)
    assert ref.cast(-0x180, 16, 8, True, 4, 0, True, "floor", "saturate") == (-2, False)
    assert ref.cast(0x7fff, 16, 8, True, 4, 0, True, "floor", "saturate") == (7, True)
    assert ref.cast(-1, 16, 8, True, 8, 8, False, "floor", "saturate") == (0, True)
    assert ref.cast(5, 4, -2, False, 8, 0, False, "floor", "saturate") == (20, False)
    with pytest.raises(ValueError):
        ref.cast(300, 8, 0, True, 8, 0, True, "floor", "saturate")


# --------------------------------------------------------------------------- growth rules
SMALL_FORMATS = [ref.RefFormat(w, f, s) for w in (1, 2, 3) for f in (-1, 0, 2) for s in (True, False)]


def _codes(fmt):
    lo, hi = ref.code_range(fmt.word, fmt.signed)
    return range(lo, hi + 1)


@pytest.mark.parametrize("fa, fb", list(itertools.product(SMALL_FORMATS, repeat=2))[::3])
def test_growth_rules_hold_every_result_exhaustively(fa, fb):
    # ref.add/sub/mul raise AssertionError when an exact result does not fit its grown format
    for a in _codes(fa):
        for b in _codes(fb):
            code, fmt = ref.add(a, fa, b, fb)
            assert ref.to_fraction(code, fmt.frac) == ref.to_fraction(a, fa.frac) + ref.to_fraction(b, fb.frac)
            code, fmt = ref.sub(a, fa, b, fb)
            assert ref.to_fraction(code, fmt.frac) == ref.to_fraction(a, fa.frac) - ref.to_fraction(b, fb.frac)
            code, fmt = ref.mul(a, fa, b, fb)
            assert ref.to_fraction(code, fmt.frac) == ref.to_fraction(a, fa.frac) * ref.to_fraction(b, fb.frac)
        assert ref.neg(a, fa)[0] == -a
        assert ref.abs_(a, fa)[0] == abs(a)


def test_growth_formats_by_hand():
    q78, uq88 = (16, 8, True), (16, 8, False)
    assert ref.add_format(q78, q78) == (17, 8, True)
    assert ref.add_format(uq88, uq88) == (17, 8, False)
    assert ref.add_format(q78, uq88) == (18, 8, True)          # unsigned 8 int bits -> 9 as signed, +1
    assert ref.sub_format(uq88, uq88) == (18, 8, True)
    assert ref.add_format((8, 2, True), (8, 6, True)) == (13, 6, True)
    assert ref.mul_format(q78, uq88) == (32, 16, True)
    assert ref.neg_format(uq88) == (17, 8, True)
    assert ref.abs_format(q78) == (17, 8, True) and ref.abs_format(uq88) == uq88
    assert [ref.sum_format(q78, n).word for n in (1, 2, 3, 4, 5, 1024, 1025)] == [16, 17, 18, 18, 19, 26, 27]
    assert ref.sum_([-32768] * 5, q78) == (-163840, (19, 8, True))
    with pytest.raises(AssertionError):
        ref._checked(1 << 20, ref.RefFormat(16, 0, True))


# --------------------------------------------------------------------------- accumulators
def test_accumulate_by_hand():
    final, n, trace = ref.accumulate([100, 100, -50, 100], 0, 8, True, "saturate")
    assert (final, n, trace) == (127, 2, [100, 127, 77, 127])
    final, n, trace = ref.accumulate([100, 100, -50, 100], 0, 8, True, "wrap")
    assert (final, n, trace) == (-6, 1, [100, -56, -106, -6])
    assert ref.accumulate([], 5, 8, True, "saturate") == (5, 0, [])
    with pytest.raises(OverflowError):
        ref.accumulate([100, 100], 0, 8, True, "error")
    with pytest.raises(ValueError):
        ref.accumulate([1], 300, 8, True, "saturate")


def test_accumulate_tree_shape_by_hand():
    # levels: [100, 100, -50, 100, 30] -> [127(ovf), 50, 30] -> [127(ovf), 30] -> [127(ovf)];
    # + init 10 -> 127 (ovf): four overflowing adds
    final, n, levels = ref.accumulate_tree([100, 100, -50, 100, 30], 10, 8, True, "saturate")
    assert levels == [[100, 100, -50, 100, 30], [127, 50, 30], [127, 30], [127]]
    assert (final, n) == (127, 4)
    # saturating adds do not associate: the tree and the sequential register differ here
    # tree: [100+100 -> 127 (ovf), -100-100 -> -128 (ovf)] -> -1;  sequential: 100, 127, 27, -73
    assert ref.accumulate_tree([100, 100, -100, -100], 0, 8, True, "saturate") == (
        -1, 2, [[100, 100, -100, -100], [127, -128], [-1]])
    assert ref.accumulate([100, 100, -100, -100], 0, 8, True, "saturate") == (-73, 1, [100, 127, 27, -73])
    assert ref.accumulate_tree([], 7, 8, True, "wrap") == (7, 0, [[0]])
    assert ref.accumulate_tree([5], 7, 8, True, "wrap") == (12, 0, [[5]])


def test_tree_equals_sequential_when_nothing_overflows():
    rng = np.random.default_rng(1)
    for _ in range(50):
        k = int(rng.integers(1, 40))
        products = rng.integers(-100, 100, size=k).tolist()
        init = int(rng.integers(-1000, 1000))
        for mode in ("saturate", "wrap"):
            seq = ref.accumulate(products, init, 32, True, mode)
            tree = ref.accumulate_tree(products, init, 32, True, mode)
            assert seq[0] == tree[0] == init + sum(products) and seq[1] == tree[1] == 0

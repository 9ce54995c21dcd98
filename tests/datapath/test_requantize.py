"""Tests of fxpsim.datapath.requantize: gemmlowp/TFLite primitives, parameters and the Requantizer.

Oracle: the pure-Python integer model below, written from the mathematical definitions
(exact ``Fraction`` rounding, no int64 tricks).  The integer layer kernels are tested in
``test_integer_layers.py`` (which reuses this model) and the TFLite models themselves in
``test_tflite_vectors.py``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.core.fixed import Format
from fxpsim.datapath.requantize import (
    INT32_MAX, INT32_MIN, Requantizer, activation_range, multiply_by_quantized_multiplier, quantize_multiplier,
    requantize_float, requantize_shift, rounding_divide_by_pot, saturating_rounding_doubling_high_mul,
    tflite_add_params,
)
from fxpsim.datapath.requantize import _fused_constants
from reference import (DETERMINISTIC_ROUNDING_MODES, overflow_int, ref_mbqm, ref_quantize_multiplier,
                       ref_rdbpot, ref_srdhm, round_fraction)

HALF = Fraction(1, 2)

EDGE = [INT32_MIN, INT32_MIN + 1, -(1 << 30) - 1, -(1 << 30), -(1 << 30) + 1, -65536, -3, -2, -1, 0, 1, 2, 3,
        65535, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, INT32_MAX - 1, INT32_MAX]
int32s = st.integers(INT32_MIN, INT32_MAX)


# --------------------------------------------------------------------------- gemmlowp primitives
def test_srdhm_all_edge_pairs():
    a, b = np.meshgrid(EDGE, EDGE)
    got = saturating_rounding_doubling_high_mul(a, b)
    want = [[ref_srdhm(x, y) for x, y in zip(ra, rb)] for ra, rb in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(got, want)
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX


def test_srdhm_ties_hand_table():
    # a*b / 2^31 = +0.5, -0.5, +1.5, -1.5: ties go toward +inf
    assert saturating_rounding_doubling_high_mul([1, -1, 3, -3], [1 << 30] * 4).tolist() == [1, 0, 2, -1]
    # otherwise to nearest: -0.5 - 2^-31 -> -1, 0.5 - 2^-31 -> 0
    assert saturating_rounding_doubling_high_mul([-(1 << 30) - 1, (1 << 30) - 1], [1, 1]).tolist() == [-1, 0]


@given(st.lists(st.tuples(int32s, int32s), min_size=1, max_size=40))
def test_srdhm_is_round_half_up_of_ab_over_2_31(pairs):
    a, b = np.array(pairs, dtype=np.int64).T
    want = [INT32_MAX if x == y == INT32_MIN else math.floor(Fraction(x * y, 1 << 31) + HALF) for x, y in pairs]
    np.testing.assert_array_equal(saturating_rounding_doubling_high_mul(a, b), want)


@given(st.lists(st.tuples(int32s, int32s), min_size=1, max_size=40))
def test_srdhm_random(pairs):
    a, b = np.array(pairs, dtype=np.int64).T
    np.testing.assert_array_equal(saturating_rounding_doubling_high_mul(a, b),
                                  [ref_srdhm(x, y) for x, y in pairs])


def test_rdbpot_every_exponent_edges_and_ties():
    for e in range(32):
        xs = set(EDGE)
        if e:
            for k in (-5, -2, -1, 0, 1, 4):
                for d in (-1, 0, 1):
                    xs.add(k * (1 << e) + (1 << (e - 1)) + d)      # ties and their neighbours
        xs = sorted(x for x in xs if INT32_MIN <= x <= INT32_MAX)
        np.testing.assert_array_equal(rounding_divide_by_pot(xs, e), [ref_rdbpot(x, e) for x in xs], err_msg=f"e={e}")
    assert rounding_divide_by_pot([5, -5, 6, -6, 7, -7], 1).tolist() == [3, -3, 3, -3, 4, -4]


@given(st.lists(st.tuples(int32s, st.integers(0, 31)), min_size=1, max_size=40))
def test_rdbpot_random(items):
    x, e = np.array(items, dtype=np.int64).T
    np.testing.assert_array_equal(rounding_divide_by_pot(x, e), [ref_rdbpot(a, b) for a, b in items])


MULTIPLIERS = [0, 1, 1 << 30, (1 << 30) + 1, 1518500250, INT32_MAX]


@pytest.mark.parametrize("rounding", ["double", "single"])
def test_mbqm_every_shift_edges(rounding):
    acc, m = (g.ravel() for g in np.meshgrid(EDGE, MULTIPLIERS))
    for s in range(-31, 31):
        want = [ref_mbqm(int(a), int(b), s, rounding) for a, b in zip(acc, m)]
        np.testing.assert_array_equal(multiply_by_quantized_multiplier(acc, m, s, rounding), want,
                                      err_msg=f"shift={s}")


def test_mbqm_negative_multiplier_double_only():
    assert multiply_by_quantized_multiplier(1000, -(1 << 30), -1) == ref_mbqm(1000, -(1 << 30), -1, "double")
    with pytest.raises(ValueError, match="multiplier >= 0"):
        multiply_by_quantized_multiplier(1000, -(1 << 30), -1, "single")


@given(st.lists(st.tuples(int32s, st.integers(0, INT32_MAX), st.integers(-31, 30)), min_size=1, max_size=30),
       st.sampled_from(["double", "single"]))
def test_mbqm_random(items, rounding):
    for x, m, s in items:
        assert multiply_by_quantized_multiplier(x, m, s, rounding) == ref_mbqm(x, m, s, rounding)


def test_mbqm_per_channel_broadcast_along_axis():
    rng = np.random.default_rng(1)
    acc = rng.integers(-(1 << 20), 1 << 20, size=(4, 3, 5))
    m, s = quantize_multiplier(rng.uniform(1e-4, 2.0, size=3))
    for rounding in ("double", "single"):
        got = multiply_by_quantized_multiplier(acc, m, s, rounding, axis=1)
        for c in range(3):
            np.testing.assert_array_equal(got[:, c], multiply_by_quantized_multiplier(acc[:, c], int(m[c]), int(s[c]),
                                                                                      rounding))
    with pytest.raises(ValueError, match="per channel"):
        multiply_by_quantized_multiplier(acc, m, s, axis=-1)


def test_double_and_single_rounding_differ():
    # two roundings (SRDHM, then RDBPOT) and one rounding disagree on some inputs
    xs = np.arange(-4096, 4096)
    d = multiply_by_quantized_multiplier(xs, 1 << 30, -3, "double")
    s = multiply_by_quantized_multiplier(xs, 1 << 30, -3, "single")
    assert np.any(d != s)
    np.testing.assert_array_equal(d, [ref_mbqm(int(x), 1 << 30, -3, "double") for x in xs])


# --------------------------------------------------------------------------- quantize_multiplier
def test_quantize_multiplier_hand_table():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.75) == (3 << 29, 0)
    assert quantize_multiplier(-0.5) == (-(1 << 30), 0)
    assert quantize_multiplier(1 - 2.0 ** -40) == (1 << 30, 1)          # rounds to 2^31: carry
    assert quantize_multiplier(2.0 ** -33) == (0, 0)                     # tiny: flushed to zero
    assert quantize_multiplier(2.0 ** -32) == (1 << 30, -31)             # smallest kept exponent
    assert quantize_multiplier(2.0 ** 40) == (1 << 30, 41)
    assert quantize_multiplier(2.0 ** 40, single_rounding=True) == (INT32_MAX, 30)


@given(st.floats(min_value=2.0 ** -40, max_value=2.0 ** 40) | st.floats(min_value=-2.0 ** 40, max_value=-2.0 ** -40))
def test_quantize_multiplier_matches_reference_and_round_trips(real):
    m, s = quantize_multiplier(real)
    assert (m, s) == ref_quantize_multiplier(real)
    if m:
        assert (1 << 30) <= abs(m) <= (1 << 31)
        err = abs(Fraction(m) * Fraction(2) ** (s - 31) - Fraction(real))
        assert err <= Fraction(2) ** (s - 32)                          # half an LSB of the Q31 significand
    else:
        assert abs(real) < 2.0 ** -32


def test_quantize_multiplier_vectorised_per_channel():
    reals = np.array([0.0, 1e-12, 2.0 ** -32, 0.3, 0.999999999999, 1.0, 7.5, -0.25])
    m, s = quantize_multiplier(reals)
    assert m.dtype == np.int32 and s.dtype == np.int32
    assert list(zip(m.tolist(), s.tolist())) == [ref_quantize_multiplier(float(r)) for r in reals]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_quantize_multiplier_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="finite"):
        quantize_multiplier(bad)


def test_quantize_multiplier_single_rounding_rejects_negative():
    with pytest.raises(ValueError, match="non-negative"):
        quantize_multiplier(-0.5, single_rounding=True)


# --------------------------------------------------------------------------- shift / float requantizers
@pytest.mark.parametrize("mode", DETERMINISTIC_ROUNDING_MODES)
def test_requantize_shift_every_mode(mode):
    accs = sorted(set(EDGE + [k * 8 + d for k in (-3, -1, 0, 2) for d in range(-4, 5)] + [-(1 << 40) - 3, 1 << 41]))
    for s in (-3, 0, 1, 3, 17, 31, 40):
        got = requantize_shift(accs, s, mode)
        want = [overflow_int(round_fraction(Fraction(a) / Fraction(2) ** s, mode), 32, True, "saturate")[0]
                for a in accs]
        np.testing.assert_array_equal(got, want, err_msg=f"{mode} s={s}")


def test_requantize_shift_per_channel_out_format_and_overflow():
    acc = np.array([[1000, -1000, 77], [-5, 6, 1 << 20]])
    got = requantize_shift(acc, [2, 0, 4], "half_even", out=Format.integer(8), overflow="wrap")
    for c, s in enumerate((2, 0, 4)):
        for r in range(2):
            v = round_fraction(Fraction(int(acc[r, c]), 1 << s), "half_even")
            assert got[r, c] == overflow_int(v, 8, True, "wrap")[0]


def test_requantize_shift_stochastic_is_seeded_and_brackets():
    acc = np.arange(-300, 300)
    a = requantize_shift(acc, 3, "stochastic", seed=7)
    np.testing.assert_array_equal(a, requantize_shift(acc, 3, "stochastic", seed=7))
    assert np.all((a == acc // 8) | (a == -(-acc // 8)))


@pytest.mark.parametrize("mode", ["half_away", "half_even", "floor", "half_up"])
def test_requantize_float(mode):
    rng = np.random.default_rng(3)
    acc = np.concatenate([rng.integers(-(1 << 24), 1 << 24, size=200), [0, 1, -1, 3, -3, 5, -5]])
    for scale in (0.5, 0.25 / 3, 1.7e-3, 3.0):
        got = requantize_float(acc, scale, mode)
        want = [round_fraction(Fraction(float(a) * scale), mode) for a in acc.tolist()]
        np.testing.assert_array_equal(got, want)


def test_requantize_float_per_channel_and_bad_scale():
    acc = np.array([[3, 3], [-3, -3]])
    np.testing.assert_array_equal(requantize_float(acc, [0.5, 1.5]), [[2, 5], [-2, -5]])
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive and finite"):
            requantize_float(acc, bad)


# --------------------------------------------------------------------------- Requantizer
def test_requantizer_tflite_builds_from_float32_scales():
    rq = Requantizer.tflite(0.02, [0.003, 0.004], 0.05)
    for c, sw in enumerate((0.003, 0.004)):
        real = float(np.float32(0.02)) * float(np.float32(sw)) / float(np.float32(0.05))
        assert (rq.multiplier[c], rq.shift[c]) == ref_quantize_multiplier(real)
    fl = Requantizer.tflite(0.02, [0.003, 0.004], 0.05, kind="float")
    assert fl.scale[1] == float(np.float32(0.02)) * float(np.float32(0.004)) / float(np.float32(0.05))
    assert fl.rounding.value == "half_away"
    sh = Requantizer.tflite(1.0, 1.0, 8.0, kind="shift", rounding="half_even")
    assert sh.shift == (-3,)
    np.testing.assert_array_equal(sh(np.array([4, 12, -12, 20])), [0, 2, -2, 2])
    assert hash(rq) == hash(Requantizer.tflite(0.02, [0.003, 0.004], 0.05))


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="triple", multiplier=1, shift=0), "kind"),
    (dict(kind="double", multiplier=(1, 2), shift=(0,)), "same"),
    (dict(kind="double", multiplier=1, shift=31), "shift"),
    (dict(kind="double", multiplier=1, shift=-32), "shift"),
    (dict(kind="double", multiplier=1 << 31, shift=0), "multiplier"),
    (dict(kind="single", multiplier=-1, shift=0), "multiplier >= 0"),
    (dict(kind="shift"), "needs shift"),
    (dict(kind="float", scale=0.0), "positive"),
    (dict(kind="float"), "needs scale"),
])
def test_requantizer_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Requantizer(**kwargs)


def test_requantizer_rejects_bad_scales():
    for args in ((0.0, 1.0, 1.0), (1.0, -1.0, 1.0), (1.0, 1.0, float("nan"))):
        with pytest.raises(ValueError, match="positive and finite"):
            Requantizer.tflite(*args)


# --------------------------------------------------------------------------- activation range
def test_activation_range_table():
    assert activation_range("none", 0.05, -10) == (-128, 127)
    assert activation_range("RELU", 0.05, -10) == (-10, 127)
    assert activation_range("relu6", 0.05, -10) == (-10, 110)
    assert activation_range("relu_n1_to_1", 0.05, -10) == (-30, 10)
    assert activation_range("relu6", 12.0, 0) == (0, 1)              # 6/12 = 0.5 rounds away from zero
    assert activation_range("relu", 0.0134924640879035, -128) == (-128, 127)
    assert activation_range("relu6", 0.01, 100, dtype=np.uint8) == (100, 255)
    with pytest.raises(ValueError, match="activation"):
        activation_range("gelu", 0.1, 0)
    with pytest.raises(ValueError, match="out of range"):
        activation_range("relu", 0.1, 128)
    with pytest.raises(ValueError, match="positive"):
        activation_range("relu", 0.0, 0)


# --------------------------------------------------------------------------- ADD parameters
def test_tflite_add_params_checks():
    m1, s1, m2, s2, mo, so = tflite_add_params(0.5, 0.25, 0.5)
    assert (m1, s1) == (1 << 30, 0) and (m2, s2) == (1 << 30, -1)
    with pytest.raises(ValueError, match="not in"):
        tflite_add_params(1.0, 1.0, 1e-9)
    with pytest.raises(ValueError, match="positive"):
        tflite_add_params(1.0, 0.0, 1.0)


# --------------------------------------------------------------------------- bad input
def test_mbqm_bad_input():
    with pytest.raises(ValueError, match="fit int32"):
        multiply_by_quantized_multiplier([1 << 31], 1 << 30, 0)
    with pytest.raises(ValueError, match="shift"):
        multiply_by_quantized_multiplier([1], 1 << 30, 31)
    with pytest.raises(ValueError, match="shift"):
        multiply_by_quantized_multiplier([1], 1 << 30, -32)
    with pytest.raises(ValueError, match="rounding"):
        multiply_by_quantized_multiplier([1], 1 << 30, 0, "triple")
    with pytest.raises(TypeError, match="integer"):
        multiply_by_quantized_multiplier([1.0], 1 << 30, 0)
    with pytest.raises(ValueError, match="exponent"):
        rounding_divide_by_pot([1], 32)
    with pytest.raises(ValueError, match="int32"):
        saturating_rounding_doubling_high_mul([1 << 31], [1])
    with pytest.raises(ValueError, match="shift"):
        requantize_shift([1], 64)


def test_package_exports_resolve_to_this_module():
    import fxpsim
    import fxpsim.datapath.requantize as rq

    for name in rq.__all__:
        assert getattr(fxpsim, name) is getattr(rq, name), f"fxpsim.{name} is shadowed by another module"


# --------------------------------------------------------------------------- fused output stage
@given(st.data())
def test_fused_output_codes_equal_the_gemmlowp_reference(data):
    """Requantizer._output_codes fuses rounding, zero point and clamp for 'double'/'single'; every
    code must equal clamp(MultiplyByQuantizedMultiplier(acc) + zp) from the big-integer model."""
    kind = data.draw(st.sampled_from(["double", "single"]))
    acc_bits = data.draw(st.integers(2, 32))
    channels = data.draw(st.integers(1, 4))
    reals = data.draw(st.lists(st.floats(1e-6, 2.0), min_size=channels, max_size=channels))
    pairs = [ref_quantize_multiplier(r, single=kind == "single") for r in reals]
    rq = Requantizer(kind=kind, multiplier=tuple(m for m, _ in pairs), shift=tuple(s for _, s in pairs))
    top = 1 << (acc_bits - 1)
    edge = st.sampled_from([-top, -top + 1, -1, 0, 1, top - 1])
    acc = np.array(data.draw(st.lists(st.one_of(edge, st.integers(-top, top - 1)),
                                      min_size=channels, max_size=8 * channels)), dtype=np.int64)
    acc = acc[: acc.size // channels * channels].reshape(-1, channels)
    zp = data.draw(st.integers(-128, 127))
    if acc_bits <= 24:                              # these always take the fused path
        assert _fused_constants(rq, acc_bits, zp) is not None
    got = rq._output_codes(acc, acc_bits, zp, -128, 127, np.int8)
    want = [[min(max(ref_mbqm(int(x), pairs[c][0], pairs[c][1], kind) + zp, -128), 127)
             for c, x in enumerate(row)] for row in acc]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.int8).reshape(got.shape))

"""TensorFlow-compatible fake quantization: shared TF 2.21 vectors, the seed examples, an
independent scalar float32 model of TensorFlow's kernel, exact range edges, denormals,
finite differences of the min/max gradients, and bad input."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fxpsim.quant.fake_quant import (
    fake_quant_with_min_max_args, fake_quant_with_min_max_args_gradient, fake_quant_with_min_max_vars,
    fake_quant_with_min_max_vars_fused, fake_quant_with_min_max_vars_gradient,
    fake_quant_with_min_max_vars_per_channel, fake_quant_with_min_max_vars_per_channel_gradient,
    tf_fake_quant_codes, tf_nudge)

F32 = np.float32


def bits(a):
    """float32 bit patterns (so -0.0 != +0.0 and NaN == NaN)."""
    return np.asarray(a, F32).view(np.int32)


# --------------------------------------------------------------------------- independent scalar model
def ref_nudge(lo, hi, num_bits, narrow):
    """TensorFlow's Nudge, one float32 operation at a time on numpy scalars."""
    lo, hi = F32(lo), F32(hi)
    qmin, qmax = (1 if narrow else 0), 2 ** num_bits - 1
    qminf, qmaxf = F32(qmin), F32(qmax)
    scale = F32(F32(hi - lo) / F32(qmaxf - qminf))
    inv = F32(F32(qmaxf - qminf) / F32(hi - lo))
    zero_from_min = F32(qminf - F32(lo / scale))
    if zero_from_min < qminf:
        zp = qmin
    elif zero_from_min > qmaxf:
        zp = qmax
    else:                                             # std::round: half away from zero
        zp = int(math.copysign(math.floor(abs(float(zero_from_min)) + 0.5), float(zero_from_min)))
    return F32(F32(qminf - F32(zp)) * scale), F32(F32(qmaxf - F32(zp)) * scale), scale, inv


def ref_fake_quant(x, lo, hi, num_bits, narrow, divide):
    nmin, nmax, scale, inv = ref_nudge(lo, hi, num_bits, narrow)
    quant_zero = F32(math.floor(F32(F32(-nmin) * inv) + F32(0.5)))
    out = []
    for v in np.asarray(x, F32).ravel():
        if v != v:                                    # NaN in, NaN out
            out.append(v)
            continue
        if abs(v) < np.finfo(F32).tiny:
            v = F32(0)
        c = min(max(v, nmin), nmax)
        shifted = F32(c - nmin)
        t = F32(shifted / scale) if divide else F32(shifted * inv)
        out.append(F32(F32(math.floor(F32(F32(t - quant_zero) + F32(0.5)))) * scale))
    return np.array(out, F32).reshape(np.shape(x))


def ref_gradients(dy, x, lo, hi, num_bits, narrow):
    nmin, nmax, _, _ = ref_nudge(lo, hi, num_bits, narrow)
    xs = np.where(np.abs(x) < np.finfo(F32).tiny, F32(0), x)
    inside = (xs >= nmin) & (xs <= nmax)
    return (dy * inside.astype(F32), float(np.sum(dy[xs < nmin], dtype=np.float64)),
            float(np.sum(dy[xs > nmax], dtype=np.float64)))


# --------------------------------------------------------------------------- shared vectors
@pytest.fixture(scope="module")
def tf_vectors(vectors_dir):
    data = np.load(vectors_dir / "tf_fake_quant.npz")
    cases = json.loads((vectors_dir / "cases.json").read_text())["tf_fake_quant"]
    return data, cases


@pytest.mark.parametrize("case", range(28))
def test_per_tensor_vectors_bit_exact(tf_vectors, case):
    d, cases = tf_vectors
    assert cases["per_tensor"][case]["index"] == case
    x, dy = d["pt_x"][case], d["pt_dy"][case]
    args = (d["pt_min"][case], d["pt_max"][case], int(d["pt_num_bits"][case]), bool(d["pt_narrow_range"][case]))
    np.testing.assert_array_equal(bits(fake_quant_with_min_max_args(x, *args)), bits(d["pt_args_out"][case]))
    np.testing.assert_array_equal(bits(fake_quant_with_min_max_args_gradient(dy, x, *args)),
                                  bits(d["pt_args_grad"][case]))
    vars_out = fake_quant_with_min_max_vars(x, *args)
    np.testing.assert_array_equal(bits(vars_out), bits(d["pt_vars_out"][case]))
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, *args)
    np.testing.assert_array_equal(bits(dx), bits(d["pt_vars_grad_x"][case]))
    assert bits(dmin) == bits(d["pt_vars_grad_min"][case]) and bits(dmax) == bits(d["pt_vars_grad_max"][case])
    out, dx2, dmin2, dmax2 = fake_quant_with_min_max_vars_fused(x, dy, *args)
    np.testing.assert_array_equal(bits(out), bits(d["pt_vars_out"][case]))
    np.testing.assert_array_equal(bits(dx2), bits(d["pt_vars_grad_x"][case]))
    assert (dmin2, dmax2) == (d["pt_vars_grad_min"][case], d["pt_vars_grad_max"][case])


def test_args_and_vars_differ_as_recorded(tf_vectors):
    """The recorded number of args-vs-vars mismatches is reproduced case by case."""
    d, cases = tf_vectors
    for case in cases["per_tensor"]:
        i = case["index"]
        args = (case["min"], case["max"], case["num_bits"], case["narrow_range"])
        a = fake_quant_with_min_max_args(d["pt_x"][i], *args)
        v = fake_quant_with_min_max_vars(d["pt_x"][i], *args)
        assert int(np.sum(bits(a) != bits(v))) == case["args_vs_vars_forward_mismatches"], case["label"]


def test_per_channel_vectors_bit_exact(tf_vectors):
    d, _ = tf_vectors
    x, dy = d["pc_x"][0], d["pc_dy"][0]
    args = (d["pc_min"][0], d["pc_max"][0], int(d["pc_num_bits"][0]), bool(d["pc_narrow_range"][0]))
    np.testing.assert_array_equal(bits(fake_quant_with_min_max_vars_per_channel(x, *args)), bits(d["pc_out"][0]))
    dx, dmin, dmax = fake_quant_with_min_max_vars_per_channel_gradient(dy, x, *args)
    np.testing.assert_array_equal(bits(dx), bits(d["pc_grad_x"][0]))
    np.testing.assert_array_equal(bits(dmin), bits(d["pc_grad_min"][0]))
    np.testing.assert_array_equal(bits(dmax), bits(d["pc_grad_max"][0]))


# --------------------------------------------------------------------------- seed examples
def test_seed_two_bit_levels_and_gradient():
    """04_Custom_Gradients: 2 bits on [-6, 6] give the levels -8, -4, 0, 4 (range nudged by -2)."""
    np.random.seed(1515)
    x = np.sort(3 * np.random.randn(1000).astype(np.float32)).reshape(1, 1000)
    y = fake_quant_with_min_max_vars(x, min=-6.0, max=6.0, num_bits=2)
    assert sorted(set(y.ravel().tolist())) == [-8.0, -4.0, 0.0, 4.0]
    nudged = tf_nudge(-6.0, 6.0, 2)
    assert (float(nudged.nudged_min), float(nudged.nudged_max), int(nudged.zero_point)) == (-8.0, 4.0, 2)
    grad = fake_quant_with_min_max_vars_gradient(np.ones_like(x), x, -6.0, 6.0, 2)[0]
    np.testing.assert_array_equal(grad, ((x >= -8) & (x <= 4)).astype(F32))


def test_seed_args_matches_quantize_dequantize():
    """02_Quantization_Basics: fake_quant_with_min_max_args(x, min(x), max(x)) ~ its numpy quantize."""
    np.random.seed(1515)
    x = (1 * np.random.randn(9, 9)).astype(np.float32)
    scale = (x.max() - x.min()) / 255
    offset = np.uint8(np.clip(np.round(255 - x.max() / scale), 0, 255))
    dequant = (np.uint8(np.clip(np.round(x / scale + offset), 0, 255)).astype(np.float32) - offset) * scale
    assert int(offset) == 119
    np.testing.assert_array_almost_equal(fake_quant_with_min_max_args(x, x.min(), x.max()), dequant)


# --------------------------------------------------------------------------- independent model
range_pairs = st.tuples(st.floats(-50, 50, width=32), st.floats(-50, 50, width=32)).filter(
    lambda p: p[1] - p[0] > 1e-3).map(lambda p: (F32(p[0]), F32(p[1])))


@given(lo_hi=range_pairs, num_bits=st.integers(2, 16), narrow=st.booleans(),
       x=st.lists(st.floats(-100, 100, width=32), min_size=1, max_size=24))
def test_matches_scalar_model(lo_hi, num_bits, narrow, x):
    lo, hi = lo_hi
    x = np.array(x, F32)
    for divide, op in ((True, fake_quant_with_min_max_vars), (False, fake_quant_with_min_max_args)):
        np.testing.assert_array_equal(bits(op(x, lo, hi, num_bits, narrow)),
                                      bits(ref_fake_quant(x, lo, hi, num_bits, narrow, divide)))
    dy = np.linspace(-1, 1, x.size).astype(F32)
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, lo, hi, num_bits, narrow)
    rdx, rmin, rmax = ref_gradients(dy, x, lo, hi, num_bits, narrow)
    np.testing.assert_array_equal(bits(dx), bits(rdx))
    assert dmin == F32(rmin) and dmax == F32(rmax)


@given(lo_hi=range_pairs, num_bits=st.integers(2, 16), narrow=st.booleans())
def test_zero_is_exact_and_range_contains_nudged_levels(lo_hi, num_bits, narrow):
    lo, hi = lo_hi
    n = tf_nudge(lo, hi, num_bits, narrow)
    qmin, qmax = int(narrow), 2 ** num_bits - 1
    assert qmin <= int(n.zero_point) <= qmax
    assert float(fake_quant_with_min_max_vars(np.zeros(1, F32), lo, hi, num_bits, narrow)[0]) == 0.0
    codes, scale, zp = tf_fake_quant_codes(np.array([-1e9, 1e9], F32), lo, hi, num_bits, narrow)
    assert codes.tolist() == [qmin, qmax]


def test_per_channel_equals_per_tensor_args_op_on_each_channel():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 4, (5, 7, 3)).astype(F32)
    lo, hi = np.array([-1.0, -3.7, 0.5], F32), np.array([1.0, 11.3, 6.0], F32)
    y = fake_quant_with_min_max_vars_per_channel(x, lo, hi, 5, True)
    dy = rng.normal(size=x.shape).astype(F32)
    dx, dmin, dmax = fake_quant_with_min_max_vars_per_channel_gradient(dy, x, lo, hi, 5, True)
    for c in range(3):
        np.testing.assert_array_equal(bits(y[..., c]), bits(ref_fake_quant(x[..., c], lo[c], hi[c], 5, True, False)))
        rdx, rmin, rmax = ref_gradients(dy[..., c], x[..., c], lo[c], hi[c], 5, True)
        np.testing.assert_array_equal(bits(dx[..., c]), bits(rdx))
        assert dmin[c] == F32(rmin) and dmax[c] == F32(rmax)


# --------------------------------------------------------------------------- edges
@pytest.mark.parametrize("lo, hi, num_bits, narrow", [(-6.0, 6.0, 2, False), (-3.7, 11.3, 8, True),
                                                     (0.5, 6.0, 8, False), (-6.0, -0.5, 4, False)])
def test_gradient_mask_at_exact_nudged_edges(lo, hi, num_bits, narrow):
    n = tf_nudge(lo, hi, num_bits, narrow)
    a, b = F32(n.nudged_min), F32(n.nudged_max)

    def step(v, direction):        # the next float32, skipping denormals (TF flushes them to 0)
        w = np.nextafter(v, F32(direction * np.inf))
        return w if abs(w) >= np.finfo(F32).tiny or w == 0 else F32(direction * np.finfo(F32).tiny)
    x = np.array([step(a, -1), a, step(a, 1), step(b, -1), b, step(b, 1)], F32)
    dy = np.array([1, 2, 4, 8, 16, 32], F32)
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, lo, hi, num_bits, narrow)
    np.testing.assert_array_equal(dx, [0, 2, 4, 8, 16, 0])
    assert (dmin, dmax) == (1, 32)
    np.testing.assert_array_equal(fake_quant_with_min_max_args_gradient(dy, x, lo, hi, num_bits, narrow),
                                  [0, 2, 4, 8, 16, 0])
    y = fake_quant_with_min_max_vars(x, lo, hi, num_bits, narrow)
    assert y[0] == y[1] == a and y[4] == y[5] == b


def test_denormal_inputs_behave_as_zero():
    """TF flushes denormals: -1e-45 is -0 >= nudged_min = 0, so its gradient passes."""
    x = np.array([-1e-45, 1e-45, -2e-38, 0.0], F32)   # FLT_MIN = 1.18e-38
    dy = np.array([1, 2, 4, 8], F32)
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, 0.0, 6.0, 8)
    np.testing.assert_array_equal(dx, [1, 2, 0, 8])          # -2e-38 is a normal number below 0
    assert (dmin, dmax) == (4, 0)
    y = fake_quant_with_min_max_vars(x, 0.0, 6.0, 8)
    np.testing.assert_array_equal(y, [0, 0, 0, 0])


def test_nan_input_gives_nan_and_no_gradient():
    x = np.array([np.nan, 1.0], F32)
    y = fake_quant_with_min_max_vars(x, -6, 6)
    assert np.isnan(y[0]) and y[1] == fake_quant_with_min_max_vars(np.array([1.0], F32), -6, 6)[0]
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(np.ones(2, F32), x, -6, 6)
    assert dx.tolist() == [0.0, 1.0] and (dmin, dmax) == (0, 0)


def test_both_zero_range_gives_zeros_and_passes_gradient():
    x = np.array([-1.0, 0.5, 3.0], F32)
    np.testing.assert_array_equal(fake_quant_with_min_max_vars(x, 0.0, 0.0), [0, 0, 0])
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(np.array([1, 2, 3], F32), x, 0.0, 0.0)
    assert dx.tolist() == [1, 2, 3] and (dmin, dmax) == (0, 0)
    y = fake_quant_with_min_max_vars_per_channel(np.ones((2, 2), F32), [0.0, -1.0], [0.0, 1.0])
    assert y[:, 0].tolist() == [0, 0]
    np.testing.assert_array_equal(bits(y[:, 1]), bits(ref_fake_quant(np.ones(2, F32), -1.0, 1.0, 8, False, False)))


def test_narrow_range_positive_min_and_negative_max():
    n = tf_nudge(0.5, 6.0, 8, False)            # zero point clamps to 0: range slides to [0, 5.5]
    assert int(n.zero_point) == 0 and float(n.nudged_min) == 0.0
    n = tf_nudge(-6.0, -0.5, 8, True)          # zero point clamps to 255: range [-5.5, 0]
    assert int(n.zero_point) == 255 and float(n.nudged_max) == 0.0
    y = fake_quant_with_min_max_vars(np.array([-100.0, 100.0], F32), -6.0, -0.5, 8, True)
    assert y[1] == 0.0 and y[0] == F32(n.nudged_min)


# --------------------------------------------------------------------------- finite differences
def _loss(x, dy, lo, hi, num_bits):
    return float(np.dot(dy.astype(np.float64), fake_quant_with_min_max_vars(x, lo, hi, num_bits).astype(np.float64)))


@pytest.mark.parametrize("which", ["max", "min"])
def test_min_max_gradients_match_finite_differences_on_saturated_inputs(which):
    """Where the nudged edge equals the free end of the range (min = 0 pins the zero point to
    q_min, so nudged_max = max; max = 0 pins it to q_max, so nudged_min = min) TF's range
    gradient is the true derivative of the loss over saturated inputs."""
    rng = np.random.default_rng(7)
    if which == "max":
        lo, hi = 0.0, 3.0
        x = rng.uniform(3.5, 9.0, 64).astype(F32)
    else:
        lo, hi = -3.0, 0.0
        x = rng.uniform(-9.0, -3.5, 64).astype(F32)
    dy = rng.normal(size=64).astype(F32)
    _, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, lo, hi, 16)
    h = 1e-2
    if which == "max":
        fd = (_loss(x, dy, lo, hi + h, 16) - _loss(x, dy, lo, hi - h, 16)) / (2 * h)
        assert dmin == 0 and fd == pytest.approx(float(dmax), rel=1e-3)
    else:
        fd = (_loss(x, dy, lo + h, hi, 16) - _loss(x, dy, lo - h, hi, 16)) / (2 * h)
        assert dmax == 0 and fd == pytest.approx(float(dmin), rel=1e-3)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, error, match", [
    (lambda x: fake_quant_with_min_max_vars(x, -1, 1, num_bits=1), ValueError, "num_bits"),
    (lambda x: fake_quant_with_min_max_vars(x, -1, 1, num_bits=17), ValueError, "num_bits"),
    (lambda x: fake_quant_with_min_max_vars(x, -1, 1, num_bits=8.0), TypeError, "num_bits"),
    (lambda x: fake_quant_with_min_max_vars(x, 1, -1), ValueError, "min must be <= max"),
    (lambda x: fake_quant_with_min_max_vars(x, np.nan, 1), ValueError, "finite"),
    (lambda x: fake_quant_with_min_max_vars(x, -1, np.inf), ValueError, "finite"),
    (lambda x: fake_quant_with_min_max_vars(x, 1, 1), ValueError, "min == max"),
    (lambda x: fake_quant_with_min_max_vars(x, -3e38, 3e38), ValueError, "finite float32"),
    (lambda x: fake_quant_with_min_max_vars(x, 0.0, 1e-37, num_bits=16), ValueError, "denormal"),
    (lambda x: fake_quant_with_min_max_vars(x, [-1, -2], [1, 2]), ValueError, "scalars"),
    (lambda x: fake_quant_with_min_max_args(x, 0.0, 0.0), ValueError, "smaller than max"),
    (lambda x: fake_quant_with_min_max_vars(x.astype(np.int32), -1, 1), TypeError, "floating"),
    (lambda x: fake_quant_with_min_max_vars_gradient(x[:2], x, -1, 1), ValueError, "shape"),
    (lambda x: fake_quant_with_min_max_vars_per_channel(x, [-1, -1], [1, 1]), ValueError, r"\(3,\)"),
    (lambda x: fake_quant_with_min_max_vars_per_channel(np.float32(1), [-1], [1]), ValueError, "dimension"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(np.array([0.1, 0.2, 0.3], F32))


def test_inputs_not_mutated_and_read_only_non_contiguous_accepted():
    x = np.arange(-12, 12, dtype=F32).reshape(4, 6)[:, ::2] / 3
    x.flags.writeable = False
    before = x.copy()
    dy = np.ones_like(x)
    dy.flags.writeable = False
    y = fake_quant_with_min_max_vars(x, -2, 2, 4)
    dx = fake_quant_with_min_max_vars_gradient(dy, x, -2, 2, 4)[0]
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(bits(y), bits(ref_fake_quant(before, -2, 2, 4, False, True)))
    assert dx.shape == x.shape and y.dtype == F32


def test_float64_input_is_computed_in_float32():
    x = np.linspace(-7, 7, 101)
    np.testing.assert_array_equal(bits(fake_quant_with_min_max_vars(x, -6, 6)),
                                  bits(fake_quant_with_min_max_vars(x.astype(F32), -6, 6)))


def test_out_buffers_are_filled_and_checked():
    x = np.linspace(-7, 7, 29).astype(F32)
    dy = np.ones_like(x)
    out, d_inputs = np.empty_like(x), np.empty_like(x)
    y = fake_quant_with_min_max_vars(x, -6, 6, 4, out=out)
    assert y is out
    np.testing.assert_array_equal(bits(out), bits(ref_fake_quant(x, -6, 6, 4, False, True)))
    dx, _, _ = fake_quant_with_min_max_vars_gradient(dy, x, -6, 6, 4, out=d_inputs)
    assert dx is d_inputs
    np.testing.assert_array_equal(dx, ref_gradients(dy, x, -6, 6, 4, False)[0])
    for bad in (np.empty(29), np.empty(28, F32), np.empty(58, F32)[::2]):
        with pytest.raises(ValueError, match="out must be"):
            fake_quant_with_min_max_vars(x, -6, 6, out=bad)


# --------------------------------------------------------------------------- the vector loops
def _lane_sums(dy, mask):
    """The documented order of the gradient's sums: element i added to double lane i mod 8, then the eight
    lanes summed in order (Python floats are doubles)."""
    lanes = [0.0] * 8
    for i, (g, m) in enumerate(zip(dy.tolist(), mask.tolist())):
        lanes[i % 8] += g if m else 0.0
    total = 0.0
    for v in lanes:
        total += v
    return total


@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 1029])
@pytest.mark.parametrize("lo, hi, num_bits, narrow", [(-3.0, 3.0, 8, False), (-0.37, 5.1, 4, True),
                                                      (0.0, 1.0, 16, False)])
def test_long_arrays_take_the_vector_loops(n, lo, hi, num_bits, narrow):
    """Lengths around the AVX2 (8) and AVX-512 (16) steps, with subnormals, +-0, +-inf, NaN and the nudged
    edges at random places: every element and both sums as the scalar model (the sums in its lane order,
    to the bit, in double), for the forward ops, the gradient (also in place) and the one-pass kernel."""
    from fxpsim.quant import _fakequant
    rng = np.random.default_rng(n)
    nmin, nmax, _, _ = ref_nudge(lo, hi, num_bits, narrow)
    x = (rng.standard_normal(n) * 2 * max(abs(lo), abs(hi))).astype(F32)
    specials = np.array([1e-45, -1e-45, -2e-38, 0.0, -0.0, np.inf, -np.inf, np.nan, nmin, nmax,
                         np.nextafter(nmin, F32(-np.inf)), np.nextafter(nmax, F32(np.inf))], F32)
    pos = rng.choice(n, min(n, specials.size), replace=False)
    x[pos] = specials[:pos.size]
    # exponents 2^-40..2^40: the double sums round, so their order shows
    dy = np.ldexp(rng.standard_normal(n), rng.integers(-40, 41, n)).astype(F32)
    dy[rng.choice(n, min(n, 3), replace=False)] = -0.0
    for divide, op in ((True, fake_quant_with_min_max_vars), (False, fake_quant_with_min_max_args)):
        np.testing.assert_array_equal(bits(op(x, lo, hi, num_bits, narrow)),
                                      bits(ref_fake_quant(x, lo, hi, num_bits, narrow, divide)))
    rdx, _, _ = ref_gradients(dy, x, lo, hi, num_bits, narrow)
    xs = np.where(np.abs(x) < np.finfo(F32).tiny, F32(0), x)
    want_below, want_above = _lane_sums(dy, xs < nmin), _lane_sums(dy, xs > nmax)
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, lo, hi, num_bits, narrow)
    np.testing.assert_array_equal(bits(dx), bits(rdx))
    assert bits(dmin) == bits(F32(want_below)) and bits(dmax) == bits(F32(want_above))
    for level in range(_fakequant.simd_level() + 1):              # scalar, AVX2, AVX-512 as the CPU has them
        raw = np.empty_like(x)
        assert _fakequant.backward(dy, x, raw, float(nmin), float(nmax), level) == (want_below, want_above)
        np.testing.assert_array_equal(bits(raw), bits(rdx))
    inplace = dy.copy()
    _, d2, u2 = fake_quant_with_min_max_vars_gradient(inplace, x, lo, hi, num_bits, narrow, out=inplace)
    np.testing.assert_array_equal(bits(inplace), bits(rdx))
    assert (bits(d2), bits(u2)) == (bits(dmin), bits(dmax))
    out, fdx, fmin, fmax = fake_quant_with_min_max_vars_fused(x, dy, lo, hi, num_bits, narrow)
    np.testing.assert_array_equal(bits(out), bits(ref_fake_quant(x, lo, hi, num_bits, narrow, True)))
    np.testing.assert_array_equal(bits(fdx), bits(rdx))
    assert (bits(fmin), bits(fmax)) == (bits(dmin), bits(dmax))


def test_one_pass_kernel_keeps_the_lanes_across_its_chunks():
    """More than one 16384-element chunk of the one-pass kernel: its sums are the whole tensor's lane sums."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(40_003) * 4).astype(F32)
    dy = np.ldexp(rng.standard_normal(x.size), rng.integers(-40, 41, x.size)).astype(F32)
    nmin, nmax, _, _ = ref_nudge(-3.0, 3.0, 8, False)
    _, _, dmin, dmax = fake_quant_with_min_max_vars_fused(x, dy, -3.0, 3.0, 8)
    assert bits(dmin) == bits(F32(_lane_sums(dy, x < nmin)))
    assert bits(dmax) == bits(F32(_lane_sums(dy, x > nmax)))


def test_gradient_sums_add_in_lane_order():
    """Lane 0 holds 2^53, then 1, then -2^53 (elements 0, 16, 24; every x below the range): in the documented
    order 2^53 + 1 rounds back to 2^53 and the sum is 0; any other order of elements 16 and 24 gives 1."""
    x = np.full(40, -10.0, F32)
    dy = np.zeros(40, F32)
    dy[[0, 16, 24]] = [2.0 ** 53, 1.0, -2.0 ** 53]
    assert _lane_sums(dy, np.ones(40, bool)) == 0.0
    from fxpsim.quant import _fakequant
    for level in range(_fakequant.simd_level() + 1):
        assert _fakequant.backward(dy, x, np.empty_like(x), -3.0, 3.0, level)[0] == 0.0
    for _, dmin, _ in (fake_quant_with_min_max_vars_gradient(dy, x, -3.0, 3.0),
                       fake_quant_with_min_max_vars_fused(x, dy, -3.0, 3.0)[1:]):
        assert dmin == 0.0

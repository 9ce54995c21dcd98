"""fxpsim's learnable (LSQ) fake quantization against vectors computed by PyTorch itself.

``tests/vectors/torch_lsq/lsq.npz`` (see its README: torch 2.13, the command that made it) holds the
forward outputs, the autograd gradients dx / d_scale / d_zero_point, and the per-element terms of
d_scale and d_zero_point before PyTorch sums them.

* Forward outputs, dx and every per-element term: bit for bit.
* The sums d_scale / d_zero_point: PyTorch adds the float32 terms in float32, in an order set by its
  CPU kernel (vector width: AVX2 or AVX-512) and thread count, so no fixed order reproduces it on
  every machine.  fxpsim adds them in double and rounds once.  Any summation order of n
  float32 terms t_i, each addition rounded (unit roundoff u = 2^-24), is within
  gamma_(n-1) * sum |t_i| of the exact sum, gamma_k = k u / (1 - k u) (Higham, Accuracy and Stability
  of Numerical Algorithms, 2nd ed., eq. 4.4); fxpsim's float32 result is within
  u |S| + n 2^-53 sum |t_i| of the exact sum S.  The test checks both against the exact (Fraction) sum of PyTorch's own terms, and the two
  results against each other within the sum of the bounds.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fxpsim.quant import fake_quant as fq

F32 = np.float32
U = 2.0 ** -24


@pytest.fixture(scope="module")
def lsq(vectors_dir):
    path = vectors_dir / "torch_lsq" / "lsq.npz"
    assert path.is_file(), f"missing {path}"
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _bits(a):
    return np.asarray(a, F32).view(np.int32)


def _assert_sum_close(got, torch_sum, terms, what):
    """fxpsim's float32 sum vs PyTorch's, both against the exact sum of PyTorch's float32 terms."""
    terms = np.asarray(terms, np.float64).reshape(-1)
    finite = np.isfinite(terms)
    if not finite.all():
        assert np.array_equal(np.isnan(got), np.isnan(torch_sum)), what
        return
    exact = sum((Fraction(float(t)) for t in terms), Fraction(0))
    n, mag = terms.size, float(np.abs(terms).sum())
    gamma = (n - 1) * U / (1 - (n - 1) * U)
    assert abs(Fraction(float(torch_sum)) - exact) <= Fraction(gamma * mag * 1.0000001 + 1e-45), what
    double = n * 2.0 ** -53 * mag                # fxpsim's float64 accumulation, before its one rounding
    assert abs(Fraction(float(got)) - exact) <= Fraction(U * abs(float(exact)) * 1.0000001 + double + 1e-45), what


def test_vectors_are_what_the_readme_says(lsq):
    import json
    meta = json.loads(str(lsq["meta"]))
    assert meta["torch"].startswith("2.13")
    assert lsq["pt_x"].shape[1] == 256 and lsq["pt_x"].dtype == F32
    # the review's example is in there: scale 0.1, zero point 0, int8, grad_factor 1, ~20% outside
    x = lsq["pt_x"][0]
    assert (lsq["pt_scale"][0], lsq["pt_zero_point"][0], lsq["pt_quant_min"][0], lsq["pt_quant_max"][0]) == \
        (F32(0.1), 0.0, -128, 127)
    assert 0.15 < np.mean((x < -12.8) | (x > 12.7)) < 0.35


def test_per_tensor_forward_is_bit_exact(lsq):
    for i in range(lsq["pt_x"].shape[0]):
        y = fq.fake_quantize_learnable_per_tensor_affine(
            lsq["pt_x"][i], lsq["pt_scale"][i:i + 1], lsq["pt_zero_point"][i:i + 1], int(lsq["pt_quant_min"][i]),
            int(lsq["pt_quant_max"][i]), float(lsq["pt_grad_factor"][i]))
        np.testing.assert_array_equal(_bits(y), _bits(lsq["pt_out"][i]), err_msg=f"case {i}")


def test_per_tensor_gradients_match_pytorch(lsq):
    for i in range(lsq["pt_x"].shape[0]):
        args = (lsq["pt_dy"][i], lsq["pt_x"][i], lsq["pt_scale"][i:i + 1], lsq["pt_zero_point"][i:i + 1],
                int(lsq["pt_quant_min"][i]), int(lsq["pt_quant_max"][i]), float(lsq["pt_grad_factor"][i]))
        dx, ds_terms, dz_terms, _, _ = fq._learnable_backward_terms(*args, None, "test")
        np.testing.assert_array_equal(_bits(dx), _bits(lsq["pt_dx"][i]), err_msg=f"dx, case {i}")
        # PyTorch's one-element "sum" is the term plus its +0.0 accumulator start (-0.0 -> +0.0)
        np.testing.assert_array_equal(_bits(ds_terms + F32(0)), _bits(lsq["pt_dscale_terms"][i]),
                                      err_msg=f"d_scale terms, case {i}")
        np.testing.assert_array_equal(_bits(dz_terms + F32(0)), _bits(lsq["pt_dzero_terms"][i]),
                                      err_msg=f"d_zero_point terms, case {i}")
        dx2, d_scale, d_zero = fq.fake_quantize_learnable_per_tensor_affine_backward(*args)
        np.testing.assert_array_equal(_bits(dx2), _bits(dx))
        assert d_scale.shape == (1,) and d_zero.shape == (1,)
        _assert_sum_close(d_scale[0], lsq["pt_dscale"][i], lsq["pt_dscale_terms"][i], f"d_scale, case {i}")
        _assert_sum_close(d_zero[0], lsq["pt_dzero"][i], lsq["pt_dzero_terms"][i], f"d_zero_point, case {i}")


def test_the_reviews_example_matches_pytorch(lsq):
    # scale 0.1, zero point 0, int8, grad_factor 1: the d_scale that disagreed (-1056.08 vs -1486.39)
    args = (lsq["pt_dy"][0], lsq["pt_x"][0], np.array([0.1], F32), np.array([0.0], F32), -128, 127, 1.0)
    _, d_scale, _ = fq.fake_quantize_learnable_per_tensor_affine_backward(*args)
    torch_sum = float(lsq["pt_dscale"][0])
    assert abs(float(d_scale[0]) - torch_sum) <= 256 * U * float(np.abs(lsq["pt_dscale_terms"][0]).sum())


def _channel_cases(lsq):
    for i in range(8):
        if f"pc{i}_x" not in lsq:
            return
        axis, qmin, qmax = (int(v) for v in lsq[f"pc{i}_params"])
        yield i, axis, qmin, qmax, float(lsq[f"pc{i}_grad_factor"])


def test_per_channel_forward_and_gradients_match_pytorch(lsq):
    seen_axes = set()
    for i, axis, qmin, qmax, gf in _channel_cases(lsq):
        seen_axes.add(axis)
        x, dy, s, z = (lsq[f"pc{i}_{k}"] for k in ("x", "dy", "scale", "zero_point"))
        y = fq.fake_quantize_learnable_affine(x, s, z, qmin, qmax, axis=axis)
        np.testing.assert_array_equal(_bits(y), _bits(lsq[f"pc{i}_out"]), err_msg=f"forward, case {i}")
        dx, ds_terms, dz_terms, _, _ = fq._learnable_backward_terms(dy, x, s, z, qmin, qmax, gf, axis, "test")
        np.testing.assert_array_equal(_bits(dx), _bits(lsq[f"pc{i}_dx"]), err_msg=f"dx, case {i}")
        np.testing.assert_array_equal(_bits(ds_terms + F32(0)), _bits(lsq[f"pc{i}_dscale_terms"]),
                                      err_msg=f"d_scale terms, case {i}")
        np.testing.assert_array_equal(_bits(dz_terms + F32(0)), _bits(lsq[f"pc{i}_dzero_terms"]),
                                      err_msg=f"d_zero_point terms, case {i}")
        _, d_scale, d_zero = fq.fake_quantize_learnable_affine_backward(dy, x, s, z, qmin, qmax, gf, axis=axis)
        others = tuple(a for a in range(x.ndim) if a != axis)
        ds_t = np.moveaxis(lsq[f"pc{i}_dscale_terms"], axis, 0).reshape(s.size, -1)
        dz_t = np.moveaxis(lsq[f"pc{i}_dzero_terms"], axis, 0).reshape(s.size, -1)
        assert d_scale.shape == s.shape and others
        for c in range(s.size):
            _assert_sum_close(d_scale[c], lsq[f"pc{i}_dscale"][c], ds_t[c], f"d_scale, case {i}, channel {c}")
            _assert_sum_close(d_zero[c], lsq[f"pc{i}_dzero"][c], dz_t[c], f"d_zero_point, case {i}, channel {c}")
    assert seen_axes == {0, 1}


def test_huge_inputs_count_below_the_range_as_in_pytorch():
    # PyTorch casts the rounded code to int64 unchecked: on x86-64, 1e30 / 0.1 becomes INT64_MIN, below
    # the range, so d_scale gets dy * (quant_min - z) = -128 (PyTorch 2.13 on x86-64: -128, -0.1)
    x = np.array([1e30, -1e30, np.inf, 13.0, 1e10], F32)
    for i, want in enumerate([-128.0, -128.0, -128.0, 127.0, 127.0]):
        dx, ds, dz = fq.fake_quantize_learnable_per_tensor_affine_backward(
            np.ones(1, F32), x[i:i + 1], np.array([0.1], F32), np.array([0.0], F32), -128, 127)
        assert (float(dx[0]), float(ds[0]), float(dz[0])) == (0.0, want, float(F32(-0.1))), x[i]

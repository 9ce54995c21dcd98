"""MAC layers and fxpsim.nn models on a float / block-scaled datapath (fxpsim.graph.float_mac, float_run).

* the graph path equals a direct computation: operands quantized here with ml_dtypes (E4M3) and power-of-two
  scales computed here, the bias preloaded as float32 C, ``float_matmul`` on those codes, rescaled, ReLU,
  re-quantized for the next layer -- bit for bit, dense and conv2d;
* a small layer's fused dot against an independent Fraction model of the tensor-core formula (Hopper FP8
  wgmma, H100 FP8 with promotion every 128, Blackwell f8f6f4), and its exact datapath against the exact sum
  rounded once to float32;
* bad input: errors name what and where.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fxpsim import nn
from fxpsim.core.block_format import BlockFormat, quantize_block
from fxpsim.core.float_codec import decode
from fxpsim.core.float_format import FloatFormat
from fxpsim.datapath.floatacc import FloatAccumulator, float_matmul
from fxpsim.graph.extract import extract
from fxpsim.graph.float_mac import FloatMacSettings, float_conv2d, float_mac
from fxpsim.graph.float_run import run_float_graph

ml_dtypes = pytest.importorskip("ml_dtypes")
from reference_tensor_core import pow2_exponent, round_f32, tensor_core  # noqa: E402

E4M3 = FloatFormat.parse("e4m3")
HOPPER = "hopper-wgmma-m64n8k32-f32-e4m3"


def _settings(preset=HOPPER, w="e4m3", a="e4m3", scales="per-channel"):
    fmt = lambda n: BlockFormat.parse(n) if n.startswith(("mx", "nv")) else FloatFormat.parse(n)  # noqa: E731
    return FloatMacSettings(fmt(w), fmt(a), FloatAccumulator.preset(preset), scales)


# ------------------------------------------------------------------ independent quantization (ml_dtypes)
def _e4m3_codes(v: np.ndarray) -> np.ndarray:
    assert np.all(np.abs(v) <= 448.0)
    return np.asarray(v, np.float64).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.int64)


def _direct_dense(x, w, b, preset, x_amax, k_to):
    """The layer computed here: codes from ml_dtypes, float_matmul, rescale."""
    ex = pow2_exponent(x_amax)
    ew = np.array([pow2_exponent(float(np.abs(w[:, j]).max())) for j in range(w.shape[1])])
    xa = np.pad(x / 2.0 ** ex, ((0, 0), (0, k_to - x.shape[1])))
    xa = np.clip(xa, -448, 448)                      # saturating cast (the calibrated amax bounds it anyway)
    wb = np.pad(w / 2.0 ** ew, ((0, k_to - w.shape[0]), (0, 0)))
    outer = 2.0 ** (ex + ew)
    c = np.broadcast_to((b / outer).astype(np.float32).view(np.uint32).astype(np.int64), (x.shape[0], w.shape[1]))
    res = float_matmul(_e4m3_codes(xa), _e4m3_codes(wb), "e4m3", "e4m3", FloatAccumulator.preset(preset), c)
    return decode(res.bits, "float32").astype(np.float64) * outer


@pytest.mark.parametrize("preset", [HOPPER, "h100-fp8", "blackwell-tcgen05-m128n8k32-f32-e4m3"])
def test_mlp_graph_path_equals_direct_float_matmul(preset):
    rng = np.random.default_rng(1)
    model = nn.mlp((20, 24, 5), seed=3)
    x = rng.normal(size=(40, 20)).astype(np.float32)
    graph = extract(model, x)
    out, runs = run_float_graph(graph, x, _settings(preset), stages=True)
    s0, s1 = graph.stages
    amax0 = max(abs(v) for v in graph.input_range)
    h1 = _direct_dense(x.astype(np.float64), s0.weight, s0.bias, preset, amax0, 32)
    assert np.array_equal(runs[0].result.values, h1)
    h1 = np.maximum(h1, 0.0)
    amax1 = max(abs(v) for v in s0.out_range)
    expect = _direct_dense(h1, s1.weight, s1.bias, preset, amax1, 32)
    assert np.array_equal(out, expect)
    assert not np.array_equal(out, run_float_graph(graph, x, None))          # the float64 path differs


def test_conv_graph_path_equals_direct_float_matmul():
    rng = np.random.default_rng(2)
    model = nn.Sequential([nn.Conv2D(2, 3, 3, padding="VALID"), nn.ReLU(), nn.Flatten(), nn.Dense(3 * 3 * 3, 4)])
    x = rng.normal(size=(6, 5, 5, 2)).astype(np.float32)
    graph = extract(model, x)
    out, runs = run_float_graph(graph, x, _settings(), stages=True)
    conv = graph.stages[0]
    xd = x.astype(np.float64)
    rows = np.stack([xd[:, i:i + 3, j:j + 3, :].reshape(6, -1) for i in range(3) for j in range(3)], 1)  # N, 9, 18
    amax = max(abs(v) for v in graph.input_range)
    y = _direct_dense(rows.reshape(54, 18), conv.weight.reshape(18, 3), conv.bias, HOPPER, amax, 32)
    assert np.array_equal(runs[0].result.values, y.reshape(6, 3, 3, 3))
    dense = graph.stages[-1]
    h = np.maximum(y, 0).reshape(6, 27)                  # Flatten of NHWC: (i, j, c) order, as the rows above
    expect = _direct_dense(h, dense.weight, dense.bias, HOPPER, max(abs(v) for v in conv.out_range), 32)
    assert np.array_equal(out, expect)


def test_mx_layer_equals_direct_block_scaled_float_matmul():
    rng = np.random.default_rng(3)
    x, w, b = rng.normal(size=(5, 64)), rng.normal(size=(64, 3)), rng.normal(size=3)
    preset = "blackwell-tcgen05-m128n8k32-f32-e4m3-ue8m0-block32"
    r = float_mac(x, w, b, _settings(preset, "mxfp8_e4m3", "mxfp8_e4m3"))
    qa, qb = quantize_block(x, "mxfp8_e4m3", axis=1), quantize_block(w, "mxfp8_e4m3", axis=0)
    c = np.broadcast_to(b.astype(np.float32).view(np.uint32).astype(np.int64), (5, 3))
    res = float_matmul(qa.elements.astype(np.int64), qb.elements.astype(np.int64), "e4m3", "e4m3",
                       FloatAccumulator.preset(preset), c, scale_a=qa.scales.astype(np.int64),
                       scale_b=qb.scales.astype(np.int64), scale_fmt="e8m0")
    assert np.array_equal(r.values, decode(res.bits, "float32"))
    assert r.terms_inexact == res.terms_inexact and r.overflows == res.overflows == 0


# ------------------------------------------------------------------ an independent Fraction model
def _fraction_model(a_row, b_col, c, chunk, F, man, promote=None):
    return tensor_core(a_row, b_col, c, chunk, F, promote, man)


def _random_e4m3(rng, shape):
    """Random finite E4M3 values (the NaN codes 0x7F/0xFF replaced by 0x70 = 256)."""
    c = rng.integers(0, 256, shape)
    return decode(np.where((c & 0x7F) == 0x7F, 0x70, c).astype(np.uint8), E4M3)


@pytest.mark.parametrize("preset, chunk, F, man, promote", [
    (HOPPER, 32, 13, 13, None), ("h100-fp8", 32, 13, 13, 128),
    ("blackwell-tcgen05-m128n8k32-f32-e4m3", 32, 25, 23, None)])
def test_fused_layer_against_fraction_model(preset, chunk, F, man, promote):
    rng = np.random.default_rng(4)
    M, K, N = 3, 256, 2
    xa, wb = _random_e4m3(rng, (M, K)), _random_e4m3(rng, (K, N))
    xa[0, 0], wb[0, :] = 448.0, -448.0               # amax 448: the power-of-two scales are 1
    bias = np.array([0.75, -1.5])
    r = float_mac(xa, wb, bias, _settings(preset), x_amax=448.0)
    for i in range(M):
        for j in range(N):
            a = [Fraction(float(v)) for v in xa[i]]
            b = [Fraction(float(v)) for v in wb[:, j]]
            c = Fraction(float(bias[j]))
            assert Fraction(float(r.values[i, j])) == _fraction_model(a, b, c, chunk, F, man, promote)
            exact = c + sum(x * y for x, y in zip(a, b))
            assert Fraction(float(r.exact[i, j])) == round_f32(exact, 23, nearest=True)


# ------------------------------------------------------------------ counts
def test_overflow_nan_and_saturation_counts():
    f16_out = "hopper-wgmma-m64n8k32-f16-e4m3"                      # float16 output: 65504 at most
    x, w = np.full((2, 32), 448.0), np.full((32, 3), 448.0)
    r = float_mac(x, w, None, _settings(f16_out), x_amax=448.0)
    assert np.isinf(r.values).all() and r.overflows >= 6 and r.nans == 0
    x = np.zeros((1, 32))
    x[0, 0], x[0, 1] = np.nan, 1000.0                # NaN stays NaN; 1000 saturates to 448 (amax 448)
    r = float_mac(x, np.ones((32, 2)), None, _settings(), x_amax=448.0)
    assert np.isnan(r.values).all() and r.nans == 2 and r.saturated == 1


def test_float_conv2d_same_padding_shape_and_exact_twin():
    rng = np.random.default_rng(5)
    r = float_conv2d(rng.normal(size=(2, 4, 4, 3)), rng.normal(size=(3, 3, 3, 5)), np.zeros(5), _settings(),
                     stride=(2, 2), padding="SAME")
    assert r.values.shape == r.exact.shape == (2, 2, 2, 5)
    assert np.max(np.abs(r.values - r.exact)) < 1e-2 * np.max(np.abs(r.exact))


# ------------------------------------------------------------------ bad input
def test_bad_settings_name_what():
    with pytest.raises(ValueError, match="expects block-scaled operands"):
        _settings("blackwell-mxfp4")
    with pytest.raises(ValueError, match="need an accumulator that reads block scales"):
        _settings("mi300-fp8", "mxfp4", "e4m3")
    with pytest.raises(ValueError, match="reads a scale per 32 elements, nvfp4 has blocks of 16"):
        _settings("blackwell-mxfp4", "nvfp4", "nvfp4")
    with pytest.raises(ValueError, match="same block size and scale format"):
        _settings("blackwell-mxfp4", "mxfp4", "nvfp4")
    with pytest.raises(ValueError, match="integer elements"):
        _settings("blackwell-mxfp4", "mxint8", "mxfp4")
    with pytest.raises(ValueError, match="weight_scales"):
        _settings(scales="per-row")
    with pytest.raises(TypeError, match="accumulator must be a FloatAccumulator"):
        FloatMacSettings(E4M3, E4M3, HOPPER)


def test_bad_operands_name_what():
    s = _settings()
    with pytest.raises(ValueError, match=r"x \(2, 3\) @ w \(4, 1\) do not chain"):
        float_mac(np.ones((2, 3)), np.ones((4, 1)), None, s)
    with pytest.raises(ValueError, match="w holds 1 NaN/inf"):
        float_mac(np.ones((1, 2)), np.array([[1.0], [np.inf]]), None, s)
    with pytest.raises(TypeError, match="settings must be FloatMacSettings"):
        float_mac(np.ones((1, 2)), np.ones((2, 1)), None, "e4m3")
    with pytest.raises(ValueError, match="NHWC"):
        float_conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 3, 1)), None, s)


def test_unsupported_stage_names_the_stage_before_running():
    model = nn.Sequential([nn.Dense(4, 4), nn.Sigmoid(), nn.Dense(4, 2)])
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    graph = extract(model, x)
    with pytest.raises(ValueError, match=r"1:sigmoid \(sigmoid\): not supported on a float datapath"):
        run_float_graph(graph, x, _settings())
    graph = extract(nn.mlp((4, 3), seed=0), x)
    with pytest.raises(ValueError, match=r"x must be a float batch of shape \(N, 4\)"):
        run_float_graph(graph, x[:, :3], _settings())
    with pytest.raises(TypeError, match="settings for stage 0:dense"):
        run_float_graph(graph, x, lambda stage, index: "e4m3")
    before = x.copy()
    run_float_graph(graph, x, _settings())
    assert np.array_equal(x, before)                  # the input is not mutated


@pytest.mark.parametrize("preset, F, man, promote", [(HOPPER, 13, 13, None), ("h100-fp8", 13, 13, 128)])
def test_fused_layer_property_against_fraction_model(preset, F, man, promote):
    """Random shapes (K not a multiple of the chunk: zero padding), codes and float32 biases."""
    from hypothesis import given, strategies as st

    @given(st.integers(1, 2), st.integers(1, 140), st.integers(1, 2), st.integers(0, 2 ** 32 - 1))
    def check(M, K, N, seed):
        rng = np.random.default_rng(seed)
        xa, wb = _random_e4m3(rng, (M, K)), _random_e4m3(rng, (K, N))
        wb[0, :] = 448.0                                         # channel amax 448: weight scales 1
        bias = rng.normal(scale=50.0, size=N).astype(np.float32).astype(np.float64)
        r = float_mac(xa, wb, bias, _settings(preset), x_amax=448.0)
        kp = -(-K // 32) * 32
        for i in range(M):
            for j in range(N):
                a = [Fraction(float(v)) for v in xa[i]] + [Fraction(0)] * (kp - K)
                b = [Fraction(float(v)) for v in wb[:, j]] + [Fraction(0)] * (kp - K)
                c = Fraction(float(bias[j]))
                assert Fraction(float(r.values[i, j])) == _fraction_model(a, b, c, 32, F, man, promote)
    check()

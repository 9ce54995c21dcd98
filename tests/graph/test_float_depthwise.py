"""Depthwise convolutions on a float datapath (fxpsim.graph.float_depthwise, through run_float_graph).

Every output is checked against a model written here: patches read by index loops, E4M3 codes from
ml_dtypes with power-of-two scales found by search (test_float_mac's helpers), and the tensor-core formula
on Fractions (test_float_mac's ``_fraction_model``: per 32-chunk, terms truncated to F bits below the
largest exponent, the sum rounded toward zero); the exact twin against the exact sum rounded once to
float32.
"""
from __future__ import annotations

import importlib.util
import pathlib
from fractions import Fraction

import numpy as np
import pytest

from fxpsim import nn
from fxpsim.graph.extract import extract
from fxpsim.graph.float_depthwise import float_depthwise_conv2d
from fxpsim.graph.float_run import run_float_graph

ml_dtypes = pytest.importorskip("ml_dtypes")


def _load(name):
    path = pathlib.Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_{name}_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fm = _load("test_float_mac")
from reference_tensor_core import pow2_exponent, round_f32  # noqa: E402


def _e4m3(v: float) -> Fraction:
    assert abs(v) <= 448.0
    return Fraction(float(np.float64(v).astype(ml_dtypes.float8_e4m3fn)))


def _expected(x, w, bias, stride, pads, x_amax, per_channel, F, man, exact=False):
    """The depthwise layer from its definition, one output at a time (module docstring)."""
    n, h, wd, c = x.shape
    kh, kw, _, m = w.shape
    top, bottom, left, right = pads
    xp = np.zeros((n, h + top + bottom, wd + left + right, c))
    xp[:, top:top + h, left:left + wd, :] = x
    oh, ow = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    ex = pow2_exponent(x_amax)
    out = np.empty((n, oh, ow, c * m))
    for ch in range(c):
        for j in range(m):
            ew = pow2_exponent(float(np.abs(w[:, :, ch, j]).max() if per_channel else np.abs(w).max()))
            b = [_e4m3(w[a, bb, ch, j] / 2.0 ** ew) for a in range(kh) for bb in range(kw)]
            outer = Fraction(2) ** (ex + ew)
            cc = Fraction(float(np.float32(bias[ch * m + j] / float(outer))))
            for i in range(n):
                for y in range(oh):
                    for z in range(ow):
                        a_ = [_e4m3(min(max(xp[i, y * stride + a, z * stride + bb, ch] / 2.0 ** ex, -448), 448))
                              for a in range(kh) for bb in range(kw)]
                        pad = [Fraction(0)] * (-len(a_) % 32)
                        if exact:
                            d = round_f32(cc + sum(p * q for p, q in zip(a_, b)), 23, nearest=True)
                        else:
                            d = fm._fraction_model(a_ + pad, b + pad, cc, 32, F, man)
                        out[i, y, z, ch * m + j] = float(d * outer)
    return out


@pytest.mark.parametrize("scales", ["per-channel", "per-tensor"])
def test_depthwise_layer_against_fraction_model(scales):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 5, 5, 3))
    w = rng.normal(size=(3, 3, 3, 2)) * np.array([1.0, 8.0, 2.0 ** -12])[None, None, :, None]
    # channel 2 is 2^-15 of the kernel's amax: per-tensor, its weights fall to E4M3 subnormals (fewer bits)
    bias = rng.normal(size=6)
    s = fm._settings(fm.HOPPER, scales=scales)
    r = float_depthwise_conv2d(x, w, bias, s, stride=(2, 2), padding="SAME", x_amax=3.0)
    assert r.values.shape == (2, 3, 3, 6)
    expect = _expected(x, w, bias, 2, (1, 1, 1, 1), 3.0, scales == "per-channel", 13, 13)
    assert np.array_equal(r.values, expect)
    assert np.array_equal(r.exact, _expected(x, w, bias, 2, (1, 1, 1, 1), 3.0, scales == "per-channel", 13, 13,
                                             exact=True))
    # 4 alignment bits: most outputs differ from the exact twin, and the counts say so
    r4 = float_depthwise_conv2d(x, w, bias, fm._settings("hopper-wgmma-m64n8k32-f32-e4m3"), (2, 2), "SAME", 3.0)
    assert r4.terms_inexact > 0


def test_depthwise_stage_in_a_network_on_blackwell():
    rng = np.random.default_rng(8)
    model = nn.Sequential([nn.DepthwiseConv2D(2, 3, depth_multiplier=2, padding="VALID"), nn.ReLU(),
                           nn.Flatten(), nn.Dense(3 * 3 * 4, 3)])
    x = rng.normal(size=(4, 5, 5, 2)).astype(np.float32)
    graph = extract(model, x)
    preset = "blackwell-tcgen05-m128n8k32-f32-e4m3"           # 25 alignment bits, RZ to 23
    out, runs = run_float_graph(graph, x, fm._settings(preset), stages=True)
    dw = graph.stages[0]
    assert dw.kind == "depthwise_conv2d"
    amax = max(abs(v) for v in graph.input_range)
    y = _expected(x.astype(np.float64), dw.weight, dw.bias, 1, (0, 0, 0, 0), amax, True, 25, 23)
    assert np.array_equal(runs[0].result.values, y)
    dense = graph.stages[-1]
    h = np.maximum(y, 0).reshape(4, -1)
    expect = fm._direct_dense(h, dense.weight, dense.bias, preset, max(abs(v) for v in dw.out_range), 64)
    assert np.array_equal(out, expect)


def test_depthwise_bad_shapes_name_what():
    s = fm._settings()
    with pytest.raises(ValueError, match=r"w \[KH, KW, C, M\] with C = x's channels"):
        float_depthwise_conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 3, 1)), None, s)
    with pytest.raises(TypeError, match="settings must be FloatMacSettings"):
        float_depthwise_conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 1)), None, "e4m3")
    with pytest.raises(ValueError, match="4 non-negative pads"):
        float_depthwise_conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 1)), None, s, padding=(1, 1, -1, 0))

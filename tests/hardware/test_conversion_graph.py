"""The integer graph :func:`fxpsim.hardware.convert` builds: tensors, nodes, attributes and ``graph.meta``.

Most cases convert a hand-made :class:`~fxpsim.graph.extract.FloatGraph` (stages, ranges and trained grids set
here), so every expected value is written out: output shapes by the TensorFlow size rules
(VALID :math:`\\lfloor (n - k)/s \\rfloor + 1`, SAME :math:`\\lceil n / s \\rceil`), activation grids from
ranges whose asymmetric int8 scale is an exact power of two (:math:`(hi - lo)/255 = 2^{-6}`), trained grids
shifted by the register offset (TF's uint8 codes onto int8: -128; int8 codes onto uint8: +128), and the
trained clip :math:`[s (q_{min} - z), s (q_{max} - z)]` mapped onto the new grid with ceil/floor by hand.
A few cases convert real ``fxpsim.nn`` models. Private helpers are checked against hand tables.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fxpsim import nn
from fxpsim.graph.extract import FloatGraph, FloatStage
from fxpsim.hardware import HardwareConfig, convert
from fxpsim.hardware import conversion as C
from fxpsim.hardware.config import ConfigError

S = 1 / 64                                   # the activation scale of every range below (exact)
R_Z0 = (-2.0, 1.984375)                      # int8 asymmetric: scale 2^-6, zero point 0
R_ZM64 = (-1.0, 2.984375)                    # scale 2^-6, zero point -64
R_ZM128 = (0.0, 3.984375)                    # scale 2^-6, zero point -128


def _grid(scale, zp, qmin, qmax, codes=None, bits=None, kind="AffineQuantizer"):
    scale = np.atleast_1d(np.asarray(scale, dtype=np.float64))
    zp = np.broadcast_to(np.atleast_1d(np.asarray(zp, dtype=np.int64)), scale.shape).copy()
    return {"scale": scale, "zero_point": zp, "quant_min": qmin, "quant_max": qmax,
            "bits": bits if bits is not None else max((qmax - qmin).bit_length(), 1),
            "codes": None if codes is None else np.asarray(codes, dtype=np.int64), "kind": kind}


def _dense(name, codes, scale, zp=0, bias=None, out_range=R_Z0, qmin=-127, qmax=127, **kw):
    """A dense stage whose trained weights are ``codes`` [K, O] on the grid (scale, zp)."""
    codes = np.asarray(codes, dtype=np.int64)
    sc = np.broadcast_to(np.atleast_1d(np.asarray(scale, dtype=np.float64)), (codes.shape[1],))
    weight = (codes - zp) * sc
    grid = kw.pop("weight_grid", _grid(scale, zp, qmin, qmax, codes=codes))
    return FloatStage("dense", name, (), weight=weight, bias=np.zeros(codes.shape[1]) if bias is None else bias,
                      out_range=out_range, weight_grid=grid, **kw)


def _graph(stages, input_shape, input_range=R_Z0, input_grid=None, repr_="model"):
    return FloatGraph(list(stages), input_range, "calibration", input_shape, repr_, input_grid=input_grid)


def _spec(t):
    """(bits, signed, shape, scale list, zero point list, axis) of a TensorSpec."""
    return (t.bits, t.signed, t.shape, None if t.scale is None else t.scale.tolist(),
            None if t.zero_point is None else t.zero_point.tolist(), t.axis)


def _nodes(g):
    return [(n.name, n.op, n.inputs, n.outputs, n.attrs) for n in g.nodes]


# ------------------------------------------------------------------------------------------ _grid_offset
@pytest.mark.parametrize("grid_bits, qmin, qmax, bits, signed, expected", [
    (8, -128, 127, 8, True, 0),
    (8, -127, 127, 8, True, 0),
    (8, 0, 100, 8, True, 0),            # fits int8 as it is (and at +1 too: offset 0 comes first)
    (8, 0, 255, 8, True, -128),         # TF's uint8 codes onto int8
    (8, 1, 255, 8, True, -128),         # narrow-range uint8
    (8, 0, 255, 8, False, 0),
    (8, -128, 127, 8, False, 128),      # int8 codes onto uint8
    (8, -127, 127, 8, False, 128),
    (4, -8, 7, 4, False, 8),
    (4, 0, 15, 4, True, -8),
    (16, -32768, 32767, 16, False, 32768),
    (8, -200, 55, 8, True, None),       # fits no offset
    (8, -100, 200, 8, False, None),
    (4, -8, 7, 8, True, None),          # a 4-bit grid is not stored in an 8-bit register
    (8, -128, 127, 4, True, None),
])
def test_grid_offset_table(grid_bits, qmin, qmax, bits, signed, expected):
    grid = {"bits": grid_bits, "quant_min": qmin, "quant_max": qmax}
    assert C._grid_offset(grid, bits, signed) == expected


# ---------------------------------------------------------------------------------------------- _is_pow2
@pytest.mark.parametrize("scale, expected", [
    (0.5, True), (1.0, True), (2.0 ** -7, True), (4, True), (np.float32(2.0 ** -20), True),
    (np.array([0.5, 0.25, 2.0 ** -12]), True),
    (2 ** 64, True), (Fraction(1, 4), True), (Fraction(3, 8), False),   # any real: converted to float64 first
    (0.75, False), (3, False), (0.1, False), (np.array([0.5, 0.375, 0.25]), False), (np.array([0.75]), False),
])
def test_is_pow2_table(scale, expected):
    assert C._is_pow2(scale) is expected


# -------------------------------------------------------------------------------------------- _out_shape
def _conv(kind, kh, kw, c, m, stride, padding):
    return FloatStage(kind, "s", (), weight=np.zeros((kh, kw, c, m)), stride=stride, padding=padding)


@pytest.mark.parametrize("stage, shape, expected", [
    # (8 - 3)//2 + 1 = 3 rows, (5 - 2)//1 + 1 = 4 columns
    (_conv("conv2d", 3, 2, 2, 6, (2, 1), "VALID"), (8, 5, 2), (3, 4, 6)),
    # ceil(8/2) = 4, ceil(5/1) = 5
    (_conv("conv2d", 3, 2, 2, 6, (2, 1), "SAME"), (8, 5, 2), (4, 5, 6)),
    # (5 - 2)//1 + 1 = 4, (8 - 3)//2 + 1 = 3
    (_conv("conv2d", 2, 3, 1, 2, (1, 2), "VALID"), (5, 8, 1), (4, 3, 2)),
    (_conv("depthwise_conv2d", 3, 2, 2, 3, (2, 1), "VALID"), (8, 5, 2), (3, 4, 6)),
    (_conv("depthwise_conv2d", 2, 3, 3, 1, (1, 2), "VALID"), (5, 8, 3), (4, 3, 3)),
    (FloatStage("max_pool2d", "s", (), pool_size=(3, 2), stride=(2, 1), padding="VALID"), (8, 5, 4), (3, 4, 4)),
    (FloatStage("avg_pool2d", "s", (), pool_size=(2, 3), stride=(1, 2), padding="VALID"), (5, 8, 4), (4, 3, 4)),
    (FloatStage("avg_pool2d", "s", (), pool_size=(2, 3), stride=(3, 2), padding="SAME"), (8, 5, 4), (3, 3, 4)),
    (FloatStage("dense", "s", (), weight=np.zeros((12, 7))), (12,), (7,)),
    (FloatStage("flatten", "s", ()), (3, 4, 5), (60,)),
    (FloatStage("relu", "s", ()), (9,), (9,)),
    (FloatStage("relu6", "s", ()), (9,), (9,)),
    (FloatStage("sigmoid", "s", ()), (9,), (9,)),
    (FloatStage("tanh", "s", ()), (8, 5, 2), (8, 5, 2)),
    (FloatStage("hard_swish", "s", ()), (9,), (9,)),
])
def test_out_shape_table(stage, shape, expected):
    assert C._out_shape(stage, shape) == expected


# ------------------------------------------------------------------------------------- _trained_weights
def test_trained_weights_tf_uint8_codes_go_onto_int8_with_offset():
    codes = np.array([[0, 255, 17], [128, 3, 200]])          # dense [K=2, O=3], TF's unsigned codes
    st = _dense("d", codes, [0.1, 0.25, 0.5], zp=[128, 120, 130], qmin=0, qmax=255)
    got_codes, scale, zp = C._trained_weights(st, HardwareConfig())
    assert got_codes.dtype == np.int64
    assert got_codes.tolist() == [[0 - 128, 128 - 128], [255 - 128, 3 - 128], [17 - 128, 200 - 128]]
    assert scale.tolist() == [float(np.float32(0.1)), 0.25, 0.5]   # float32, as the target stores it
    assert zp.tolist() == [0, -8, 2]


def test_trained_weights_int8_codes_go_onto_uint8_with_offset():
    codes = np.array([[-127, 5], [127, 0]])
    st = _dense("d", codes, 0.5)
    got_codes, scale, zp = C._trained_weights(st, HardwareConfig(weight_signed=False))
    assert got_codes.tolist() == [[1, 255], [133, 128]]
    assert scale.tolist() == [0.5, 0.5] and zp.tolist() == [128, 128]


@pytest.mark.parametrize("grid, config, reason", [
    (_grid(0.5, 0, -127, 127, codes=None), {},
     "no trained weight quantizer with an integer form"),
    (_grid(0.5, 0, -8, 7, codes=[[1, 2], [3, 4]]), {},
     "the target stores 8-bit weights, the quantizer has 4-bit codes [-8, 7]"),
    (_grid(0.5, 0, -200, 55, codes=[[1, 2], [3, 4]]), {},
     "its codes [-200, 55] do not fit the target's weight register"),
    (_grid([0.5, 0.75], 0, -127, 127, codes=[[1, 2], [3, 4]]), {"weight_scales": "per-tensor"},
     "the quantizer has per-channel scales, the target one scale per tensor"),
    (_grid([0.5, 0.75], 0, -127, 127, codes=[[1, 2], [3, 4]]), {"requantization": "shift"},
     "the 'shift' requantization needs power-of-two scales"),
    (_grid([0.5, 0.25, 0.125], 0, -127, 127, codes=[[1, 2], [3, 4]]), {},
     "its 3 scales do not match the 2 output channels"),
    (_grid(0.5, 0, -127, 127, codes=[[1, 2], [3, 4]]), {"weight_format": "Q1.6"},
     "the target's fixed weight format sfix8_En6 sets the grid"),
])
def test_trained_weights_reasons(grid, config, reason):
    st = FloatStage("dense", "d", (), weight=np.ones((2, 2)), bias=np.zeros(2), weight_grid=grid)
    assert C._trained_weights(st, HardwareConfig(**config)) == reason


@pytest.mark.parametrize("scale, config", [
    ([0.25, 0.25], {"weight_scales": "per-tensor"}),       # per-channel form, one value: fits per-tensor
    ([0.5, 0.75], {}),                                     # per-channel target
    ([0.5, 0.125], {"requantization": "shift"}),           # powers of two for 'shift'
    ([2.0 ** -9, 2.0 ** -3], {"requantization": "shift", "weight_scales": "per-channel"}),
])
def test_trained_weights_kept(scale, config):
    st = _dense("d", [[1, -2], [3, 4]], scale)
    codes, got_scale, zp = C._trained_weights(st, HardwareConfig(**config))
    assert codes.tolist() == [[1, 3], [-2, 4]]
    assert got_scale.tolist() == list(scale) and zp.tolist() == [0, 0]


def test_trained_weights_depthwise_repeat_per_input_channel_scales():
    """Depthwise [KH, KW, C, M] trained per input channel c: output channel c*M + m takes c's scale and zero
    point, and the codes come out [C*M, KH, KW, 1]."""
    codes = np.arange(2 * 1 * 2 * 2).reshape(2, 1, 2, 2) - 3          # [KH=2, KW=1, C=2, M=2]
    grid = _grid([0.5, 0.1], [1, -2], -127, 127, codes=codes)
    st = FloatStage("depthwise_conv2d", "dw", (), weight=np.ones((2, 1, 2, 2)), weight_grid=grid)
    got, scale, zp = C._trained_weights(st, HardwareConfig())
    assert got.shape == (4, 2, 1, 1)
    for c in range(2):
        for m in range(2):
            for kh in range(2):
                assert got[c * 2 + m, kh, 0, 0] == codes[kh, 0, c, m]
    s1 = float(np.float32(0.1))
    assert scale.tolist() == [0.5, 0.5, s1, s1] and zp.tolist() == [1, 1, -2, -2]


# ------------------------------------------------------------------------------------------ _output_params
def _op(grid, real_range, **config):
    grids, notes = {}, []
    out = C._output_params(grid, real_range, HardwareConfig(**config), "n", grids, notes)
    return out, grids, notes


@pytest.mark.parametrize("grid, config, expected", [
    (_grid(0.1, 3, -128, 127), {}, (float(np.float32(0.1)), 3, None)),          # offset 0, full range
    (_grid(0.25, 10, 0, 255), {}, (0.25, 10 - 128, None)),                       # uint8 onto int8
    (_grid(0.25, 0, -127, 127), {}, (0.25, 0, (-127, 127))),                     # narrow range: clip
    (_grid(0.25, 128, 1, 255), {}, (0.25, 0, (-127, 127))),
    (_grid(0.25, 5, -128, 127), {"activation_signed": False}, (0.25, 133, None)),  # int8 onto uint8
    (_grid(0.25, 0, -100, 100), {"activation_signed": False}, (0.25, 128, (28, 228))),
    (_grid(0.25, 0, -128, 127), {"activation_symmetric": True}, (0.25, 0, None)),
    (_grid(0.25, 128, 0, 255), {"activation_symmetric": True}, (0.25, 0, None)),   # z = 128 - 128
    (_grid(0.125, -3, -128, 127), {"requantization": "shift"}, (0.125, -3, None)),
    (_grid(2.0 ** -10, 0, -8, 7), {"activation_bits": 4}, (2.0 ** -10, 0, None)),
])
def test_output_params_trained(grid, config, expected):
    out, grids, notes = _op(grid, (-100.0, 100.0), **config)     # the range is ignored on a trained grid
    assert out == expected
    assert grids == {"n": {"output": "trained"}} and notes == []


_NOTE = ("n: output re-scaled by the target's rule, not on the trained AffineQuantizer grid ({}); its codes are "
         "clipped to the trained range")


@pytest.mark.parametrize("grid, real_range, config, expected, reason", [
    # 3-bit codes [-1, 6], s = 0.25, z = 1: real [-0.5, 1.25]; new grid 2^-6, z = -64:
    # lo = -64 + ceil(-32) = -96, hi = -64 + floor(80) = 16 (exact integers: the 1e-9 slack matters)
    (_grid(0.25, 1, -1, 6), R_ZM64, {}, (S, -64, (-96, 16)),
     "the target has 8-bit activations, the quantizer 3-bit codes [-1, 6]"),
    # 4-bit codes [-6, 5], s = 0.25, z = 0: real [-1.5, 1.25]; new grid 2^-6, z = 0: [-96, 80]
    (_grid(0.25, 0, -6, 5), R_Z0, {}, (S, 0, (-96, 80)),
     "the target has 8-bit activations, the quantizer 4-bit codes [-6, 5]"),
    # s = 0.1 (not a power of two) for 'shift': real [-12.8, 12.7] covers the whole new register
    (_grid(0.1, 0, -128, 127), R_Z0, {"requantization": "shift"}, (S, 0, None),
     "the 'shift' requantization needs power-of-two scales"),
    # real [0.3 * (-128 - 5), 0.3 * (127 - 5)] = [-39.9, 36.6]: the whole register again
    (_grid(0.3, 5, -128, 127), R_Z0, {"requantization": "shift"}, (S, 0, None),
     "the 'shift' requantization needs power-of-two scales"),
    # symmetric target: s = 1.984375 / 127 = 2^-6, z = 0; real [2^-7 (-128 - 5), 2^-7 (127 - 5)] =
    # [-1.0390625, 0.953125] -> ceil(-66.5) = -66, floor(61) = 61
    (_grid(2.0 ** -7, 5, -128, 127), (-1.984375, 1.984375), {"activation_symmetric": True}, (S, 0, (-66, 61)),
     "the target's activations are symmetric (zero point 0), the quantizer's zero point is 5"),
    # fixed format sfix8_En6: s = 2^-6, z = 0; real [-1, 127/128] -> [-64, floor(63.5) = 63]
    (_grid(2.0 ** -7, 0, -128, 127), R_ZM64, {"activation_format": "Q1.6"}, (S, 0, (-64, 63)),
     "the target's fixed activation format sfix8_En6 sets the grid"),
    # trained range [0, 0.004] lands on one code of the new grid: clip (0, 0)
    (_grid(0.001, 0, 0, 4), R_Z0, {}, (S, 0, (0, 0)),
     "the target has 8-bit activations, the quantizer 3-bit codes [0, 4]"),
    # trained range [0.001, 0.004] holds no code of the new grid (ceil 0.064 = 1 > floor 0.256 = 0): no clip
    (_grid(0.001, 0, 1, 4), R_Z0, {}, (S, 0, None),
     "the target has 8-bit activations, the quantizer 2-bit codes [1, 4]"),
    # trained range [-8, 7] is wider than the new register: clip = full register = none
    (_grid(1.0, 0, -8, 7), R_Z0, {}, (S, 0, None),
     "the target has 8-bit activations, the quantizer 4-bit codes [-8, 7]"),
    # unsigned target, real [0, 0.5] -> (0, 32)
    (_grid(0.125, 0, 0, 4), R_ZM128, {"activation_signed": False}, (S, 0, (0, 32)),
     "the target has 8-bit activations, the quantizer 3-bit codes [0, 4]"),
])
def test_output_params_recomputed_clip(grid, real_range, config, expected, reason):
    out, grids, notes = _op(grid, real_range, **config)
    assert out == expected
    assert grids == {"n": {"output": "recomputed"}}
    assert notes == [_NOTE.format(reason)]


def test_output_params_recomputed_clip_is_the_hand_mapping():
    """The clip for a trained range, each bound from Fractions: [z + ceil(r_lo / s), z + floor(r_hi / s)] with
    r = s_q (q - z_q) on the trained grid (5/128 (-7 - 3) = -25 new LSBs exactly, 5/128 (6 - 3) = 7.5)."""
    s_q, z_q, qmin, qmax = 0.0390625, 3, -7, 6          # 5/128, 4-bit codes
    out, _, _ = _op(_grid(s_q, z_q, qmin, qmax), R_ZM64)
    r_lo, r_hi = Fraction(s_q) * (qmin - z_q), Fraction(s_q) * (qmax - z_q)
    lo = -64 + math.ceil(r_lo / Fraction(S))
    hi = -64 + math.floor(r_hi / Fraction(S))
    assert (lo, hi) == (-64 - 25, -64 + 7)
    assert out == (S, -64, (lo, hi))


def test_output_params_without_grid_uses_the_range():
    out, grids, notes = _op(None, R_ZM128)
    assert out == (S, -128, None) and grids == {} and notes == []


# ------------------------------------------------------------------------------ convert: the whole graph
def _pipeline(**config):
    """input (8, 5, 2) -> conv 3x2 stride (2,1) VALID + relu -> max_pool 2x2 stride (1,2) SAME ->
    avg_pool 3x1 VALID -> flatten -> dense 6->4 -> relu -> relu6 -> dense 4->1."""
    rng = np.random.default_rng(5)
    wc = rng.integers(-127, 128, (3, 2, 2, 3))
    ws = np.array([2.0 ** -6, 2.0 ** -7, 2.0 ** -5])
    conv = FloatStage("conv2d", "0:conv2d", (0,), weight=wc * ws, bias=np.array([0.5, -0.25, 0.0]),
                      activation="relu", stride=(2, 1), padding="VALID", out_range=R_ZM128,
                      weight_grid=_grid(ws, 0, -127, 127, codes=wc))
    mp = FloatStage("max_pool2d", "1:max_pool2d", (1,), pool_size=(2, 2), stride=(1, 2), padding="SAME")
    ap = FloatStage("avg_pool2d", "2:avg_pool2d", (2,), pool_size=(3, 1), stride=(1, 1), padding="VALID")
    fl = FloatStage("flatten", "3:flatten", (3,))
    d1 = FloatStage("dense", "4:dense", (4,), weight=rng.normal(0, 1, (6, 4)), bias=np.zeros(4),
                    out_range=R_ZM64, weight_grid=_grid(0.5, 0, -127, 127, codes=None))
    r1 = FloatStage("relu", "5:relu", (5,))
    r2 = FloatStage("relu6", "6:relu6", (6,))
    d2 = _dense("7:dense", [[3], [-5], [7], [127]], 2.0 ** -4, out_range=R_Z0)
    return convert(_graph([conv, mp, ap, fl, d1, r1, r2, d2], (8, 5, 2), repr_="the model"),
                   HardwareConfig(name="target-x", **config)), wc


def test_pipeline_nodes_and_attributes():
    g, _ = _pipeline()
    assert _nodes(g) == [
        ("quantize", "quantize", ["input"], ["input_codes"], {}),
        ("0:conv2d", "conv2d", ["input_codes", "0:conv2d/weights", "0:conv2d/bias"], ["0:conv2d"],
         {"activation": "relu", "stride": [2, 1], "padding": "VALID"}),
        ("1:max_pool2d", "max_pool2d", ["0:conv2d"], ["1:max_pool2d"],
         {"pool_size": [2, 2], "stride": [1, 2], "padding": "SAME"}),
        ("2:avg_pool2d", "avg_pool2d", ["1:max_pool2d"], ["2:avg_pool2d"],
         {"pool_size": [3, 1], "stride": [1, 1], "padding": "VALID"}),
        ("3:flatten", "reshape", ["2:avg_pool2d"], ["3:flatten"], {"shape": [6]}),
        ("4:dense", "fully_connected", ["3:flatten", "4:dense/weights", "4:dense/bias"], ["4:dense"],
         {"activation": "none"}),
        ("5:relu", "clamp", ["4:dense"], ["5:relu"], {"activation": "relu"}),
        ("6:relu6", "clamp", ["5:relu"], ["6:relu6"], {"activation": "relu6"}),
        ("7:dense", "fully_connected", ["6:relu6", "7:dense/weights", "7:dense/bias"], ["7:dense"],
         {"activation": "none"}),
    ]
    assert g.inputs == ["input"] and g.outputs == ["7:dense"]


def test_pipeline_activation_tensors():
    g, _ = _pipeline()
    # conv: (8-3)//2+1 = 3, (5-2)//1+1 = 4; max pool SAME: ceil(3/1) = 3, ceil(4/2) = 2; avg pool VALID 3x1:
    # (3-3)//1+1 = 1, (2-1)//1+1 = 2
    expected = {
        "input": (0, True, (8, 5, 2), None, None, None),
        "input_codes": (8, True, (8, 5, 2), [S], [0], None),
        "0:conv2d": (8, True, (3, 4, 3), [S], [-128], None),
        "1:max_pool2d": (8, True, (3, 2, 3), [S], [-128], None),
        "2:avg_pool2d": (8, True, (1, 2, 3), [S], [-128], None),
        "3:flatten": (8, True, (6,), [S], [-128], None),
        "4:dense": (8, True, (4,), [S], [-64], None),
        "5:relu": (8, True, (4,), [S], [-64], None),
        "6:relu6": (8, True, (4,), [S], [-64], None),
        "7:dense": (8, True, (1,), [S], [0], None),
    }
    assert {k: _spec(g.tensors[k]) for k in expected} == expected
    assert sorted(g.tensors) == sorted(list(expected) + [f"{n}/{p}" for n in ("0:conv2d", "4:dense", "7:dense")
                                                         for p in ("weights", "bias")])


def test_pipeline_constants():
    g, wc = _pipeline()
    w = g.tensors["0:conv2d/weights"]
    assert _spec(w) == (8, True, (3, 3, 2, 2), [2.0 ** -6, 2.0 ** -7, 2.0 ** -5], [0, 0, 0], 0)
    assert w.data.dtype == np.int8
    for o, kh, kw, c in np.ndindex(3, 3, 2, 2):                   # [O, KH, KW, C] from HWIO
        assert w.data[o, kh, kw, c] == wc[kh, kw, c, o]
    b = g.tensors["0:conv2d/bias"]
    # bias scale s_in s_w = 2^-6 s_w; codes 0.5 / 2^-12, -0.25 / 2^-13, 0
    assert _spec(b) == (32, True, (3,), [2.0 ** -12, 2.0 ** -13, 2.0 ** -11], [0, 0, 0], 0)
    assert b.data.dtype == np.int64 and b.data.tolist() == [2048, -2048, 0]
    # re-quantized dense: whatever its scales, the bias is in the scale input x weight
    w4, b4 = g.tensors["4:dense/weights"], g.tensors["4:dense/bias"]
    assert w4.axis == 0 and w4.scale.size == 4 and b4.axis == 0
    assert b4.scale.tolist() == [S * s for s in w4.scale.tolist()]
    # one output channel: weights per-channel (the target's rule), bias without an axis
    assert _spec(g.tensors["7:dense/weights"]) == (8, True, (1, 4), [2.0 ** -4], [0], 0)
    assert g.tensors["7:dense/weights"].data.tolist() == [[3, -5, 7, 127]]
    assert _spec(g.tensors["7:dense/bias"]) == (32, True, (1,), [2.0 ** -10], [0], None)


def test_pipeline_meta():
    g, _ = _pipeline()
    assert g.name == "fxpsim.nn model"
    assert g.meta["source"] == "fxpsim.nn" and g.meta["model"] == "the model" and g.meta["config"] == "target-x"
    assert g.meta["stage_outputs"] == ["0:conv2d", "1:max_pool2d", "2:avg_pool2d", "3:flatten", "4:dense",
                                       "5:relu", "6:relu6", "7:dense"]
    assert g.meta["grids"] == {"0:conv2d": {"weights": "trained"}, "4:dense": {"weights": "recomputed"},
                               "7:dense": {"weights": "trained"}}
    assert g.meta["bias_clipped"] == {"0:conv2d": 0, "4:dense": 0, "7:dense": 0}
    assert g.meta["notes"] == [("4:dense: weights re-quantized by the target's rule, not on the trained "
                               "AffineQuantizer grid (no trained weight quantizer with an integer form)")]


def test_separate_clamp_node_without_activation_clamp():
    g, _ = _pipeline(activation_clamp=False)
    assert _nodes(g)[1:3] == [
        ("0:conv2d", "conv2d", ["input_codes", "0:conv2d/weights", "0:conv2d/bias"], ["0:conv2d/pre_activation"],
         {"activation": "none", "stride": [2, 1], "padding": "VALID"}),
        ("0:conv2d/relu", "clamp", ["0:conv2d/pre_activation"], ["0:conv2d"], {"activation": "relu"}),
    ]
    for name in ("0:conv2d/pre_activation", "0:conv2d"):
        assert _spec(g.tensors[name]) == (8, True, (3, 4, 3), [S], [-128], None)
    assert g.tensors["0:conv2d"].signed is True
    assert g.meta["stage_outputs"][0] == "0:conv2d"


def test_separate_relu6_clamp_on_unsigned_dense():
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5, out_range=(0.0, 3.984375), activation="relu6")
    g = convert(_graph([st], (2,), input_range=R_ZM128), HardwareConfig(activation_clamp=False,
                                                                        activation_signed=False))
    assert _nodes(g)[1:] == [
        ("0:dense", "fully_connected", ["input_codes", "0:dense/weights", "0:dense/bias"],
         ["0:dense/pre_activation"], {"activation": "none"}),
        ("0:dense/relu6", "clamp", ["0:dense/pre_activation"], ["0:dense"], {"activation": "relu6"}),
    ]
    # unsigned: s = 3.984375 / 255 = 2^-6, z = 0
    for name in ("0:dense/pre_activation", "0:dense"):
        assert _spec(g.tensors[name]) == (8, False, (2,), [S], [0], None)
        assert g.tensors[name].signed is False


def test_fused_activation_names_the_activation():
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5, out_range=R_ZM128, activation="relu6")
    g = convert(_graph([st], (2,)), HardwareConfig())
    assert _nodes(g)[1] == ("0:dense", "fully_connected", ["input_codes", "0:dense/weights", "0:dense/bias"],
                            ["0:dense"], {"activation": "relu6"})
    assert "0:dense/pre_activation" not in g.tensors


# ---------------------------------------------------------------------------------- convert: trained grids
def test_input_grid_trained_with_clip():
    grid = _grid(2.0 ** -7, 0, -127, 127)
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    g = convert(_graph([st], (2,), input_range=(-5.0, 5.0), input_grid=grid), HardwareConfig())
    assert _nodes(g)[0] == ("quantize", "quantize", ["input"], ["input_codes"], {"clip": [-127, 127]})
    assert _spec(g.tensors["input_codes"]) == (8, True, (2,), [2.0 ** -7], [0], None)
    assert g.meta["grids"]["quantize"] == {"output": "trained"}
    # the bias scale follows the trained input scale: 2^-7 2^-5
    assert g.tensors["0:dense/bias"].scale.tolist() == [2.0 ** -12, 2.0 ** -12]


def test_input_grid_recomputed_notes_and_clips():
    grid = _grid(0.25, 1, -1, 6)                                  # 3-bit: not an 8-bit register's grid
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    g = convert(_graph([st], (2,), input_range=R_ZM64, input_grid=grid), HardwareConfig())
    assert _nodes(g)[0][4] == {"clip": [-96, 16]}
    assert _spec(g.tensors["input_codes"]) == (8, True, (2,), [S], [-64], None)
    assert g.meta["grids"]["quantize"] == {"output": "recomputed"}
    assert g.meta["notes"] == [
        ("quantize: output re-scaled by the target's rule, not on the trained AffineQuantizer grid (the target "
        "has 8-bit activations, the quantizer 3-bit codes [-1, 6]); its codes are clipped to the trained range")]


def test_linear_output_grid_trained_and_recomputed():
    a = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5, out_range=(-9.0, 9.0),
               out_grid=_grid(0.25, 128, 1, 255, kind="FakeQuant"))           # uint8 narrow -> int8 clip
    b = _dense("1:dense", [[1], [3]], 2.0 ** -5, out_range=R_ZM64, out_grid=_grid(0.25, 1, -1, 6, kind="FakeQuant"))
    g = convert(_graph([a, b], (2,)), HardwareConfig())
    assert _nodes(g)[1][4] == {"activation": "none", "clip": [-127, 127]}
    assert _nodes(g)[2][4] == {"activation": "none", "clip": [-96, 16]}
    assert _spec(g.tensors["0:dense"]) == (8, True, (2,), [0.25], [0], None)
    assert _spec(g.tensors["1:dense"]) == (8, True, (1,), [S], [-64], None)
    assert g.meta["grids"] == {"0:dense": {"weights": "trained", "output": "trained"},
                               "1:dense": {"weights": "trained", "output": "recomputed"}}
    assert g.meta["notes"] == [
        ("1:dense: output re-scaled by the target's rule, not on the trained FakeQuant grid (the target has 8-bit "
        "activations, the quantizer 3-bit codes [-1, 6]); its codes are clipped to the trained range")]


@pytest.mark.parametrize("grid, config, reason", [
    (_grid(0.5, 0, -200, 55, codes=[[1, 2], [3, 4]]), {},
     "its codes [-200, 55] do not fit the target's weight register"),
    (_grid(0.5, 0, -8, 7, codes=[[1, 2], [3, 4]]), {},
     "the target stores 8-bit weights, the quantizer has 4-bit codes [-8, 7]"),
    (_grid([0.5, 0.75], 0, -127, 127, codes=[[1, 2], [3, 4]]), {"weight_scales": "per-tensor"},
     "the quantizer has per-channel scales, the target one scale per tensor"),
    (_grid([0.5, 0.75], 0, -127, 127, codes=[[1, 2], [3, 4]]), {"requantization": "shift"},
     "the 'shift' requantization needs power-of-two scales"),
])
def test_weights_recomputed_note(grid, config, reason):
    st = FloatStage("dense", "0:dense", (), weight=np.array([[0.5, 1.5], [1.5, 3.0]]), bias=np.zeros(2),
                    out_range=R_Z0, weight_grid=grid)
    g = convert(_graph([st], (2,)), HardwareConfig(**config))
    assert g.meta["grids"] == {"0:dense": {"weights": "recomputed"}}
    assert g.meta["notes"] == [(f"0:dense: weights re-quantized by the target's rule, not on the trained "
                               f"AffineQuantizer grid ({reason})")]


def test_weights_without_any_grid_recomputed_silently():
    st = FloatStage("dense", "0:dense", (), weight=np.array([[0.5, 1.0], [-1.0, 0.5]]), bias=np.zeros(2),
                    out_range=R_Z0)
    g = convert(_graph([st], (2,)), HardwareConfig())
    assert g.meta["grids"] == {"0:dense": {"weights": "recomputed"}} and g.meta["notes"] == []
    # the two columns have the same max |w| = 1: equal scales, still one per channel on a per-channel target
    s = float(np.float32(1 / 127))
    assert _spec(g.tensors["0:dense/weights"]) == (8, True, (2, 2), [s, s], [0, 0], 0)


def test_tf_uint8_weights_stored_on_int8():
    codes = np.array([[0, 255], [128, 3]])                     # [K, O]
    st = _dense("0:dense", codes, [0.1, 0.25], zp=[128, 120], qmin=0, qmax=255)
    g = convert(_graph([st], (2,)), HardwareConfig())
    w = g.tensors["0:dense/weights"]
    assert _spec(w) == (8, True, (2, 2), [float(np.float32(0.1)), 0.25], [0, -8], 0)
    assert w.data.tolist() == [[-128, 0], [127, -125]]
    assert g.meta["grids"]["0:dense"]["weights"] == "trained" and g.meta["notes"] == []


def test_int8_weights_stored_on_uint8():
    st = _dense("0:dense", [[-127, 5], [127, 0]], 0.5)
    g = convert(_graph([st], (2,)), HardwareConfig(weight_signed=False))
    w = g.tensors["0:dense/weights"]
    assert _spec(w) == (8, False, (2, 2), [0.5, 0.5], [128, 128], 0)
    assert w.signed is False and w.data.dtype == np.uint8
    assert w.data.tolist() == [[1, 255], [133, 128]]


def test_per_tensor_target_keeps_one_scale():
    st = _dense("0:dense", [[1, -2], [3, 4]], [0.25, 0.25])
    g = convert(_graph([st], (2,)), HardwareConfig(weight_scales="per-tensor"))
    assert _spec(g.tensors["0:dense/weights"]) == (8, True, (2, 2), [0.25], [0], None)
    assert g.meta["grids"]["0:dense"]["weights"] == "trained"
    # the bias is still per output channel (one scale each: 2^-6 * 0.25)
    assert _spec(g.tensors["0:dense/bias"]) == (32, True, (2,), [2.0 ** -8, 2.0 ** -8], [0, 0], 0)


def test_per_channel_target_keeps_equal_trained_scales_per_channel():
    st = _dense("0:dense", [[1, -2], [3, 4]], [0.25, 0.25])
    g = convert(_graph([st], (2,)), HardwareConfig())
    assert _spec(g.tensors["0:dense/weights"]) == (8, True, (2, 2), [0.25, 0.25], [0, 0], 0)


def test_depthwise_conv_trained_per_input_channel():
    """Depthwise [KH=3, KW=2, C=2, M=2] on a 7x5 input, stride (2, 1) VALID; trained per input channel: the
    weights tensor is [1, KH, KW, C*M] with axis 3 and each scale repeated M times."""
    codes = (np.arange(3 * 2 * 2 * 2).reshape(3, 2, 2, 2) * 7) % 255 - 127
    scale = np.array([2.0 ** -6, 2.0 ** -8])
    st = FloatStage("depthwise_conv2d", "0:depthwise_conv2d", (), weight=codes * scale[None, None, :, None],
                    bias=np.array([0.25, 0.0, -0.25, 0.5]), activation=None, stride=(2, 1), padding="VALID",
                    out_range=R_Z0, weight_grid=_grid(scale, 0, -127, 127, codes=codes))
    g = convert(_graph([st], (7, 5, 2)), HardwareConfig())
    w = g.tensors["0:depthwise_conv2d/weights"]
    assert _spec(w) == (8, True, (1, 3, 2, 4), [2.0 ** -6, 2.0 ** -6, 2.0 ** -8, 2.0 ** -8], [0] * 4, 3)
    for kh, kw, c, m in np.ndindex(3, 2, 2, 2):
        assert w.data[0, kh, kw, c * 2 + m] == codes[kh, kw, c, m]
    b = g.tensors["0:depthwise_conv2d/bias"]
    assert _spec(b) == (32, True, (4,), [2.0 ** -12, 2.0 ** -12, 2.0 ** -14, 2.0 ** -14], [0] * 4, 0)
    assert b.data.tolist() == [1024, 0, -4096, 8192]
    # (7-3)//2+1 = 3, (5-2)//1+1 = 4, C*M = 4
    assert _spec(g.tensors["0:depthwise_conv2d"]) == (8, True, (3, 4, 4), [S], [0], None)
    assert _nodes(g)[1][4] == {"activation": "none", "stride": [2, 1], "padding": "VALID"}
    assert g.meta["grids"] == {"0:depthwise_conv2d": {"weights": "trained"}}


def test_depthwise_conv_single_trained_scale_on_per_tensor_target():
    codes = np.array([[[[5, -3, 1]]]])                       # [1, 1, C=3, M=1]
    st = FloatStage("depthwise_conv2d", "0:dw", (), weight=codes * 0.5, bias=np.zeros(3), stride=(1, 1),
                    padding="SAME", out_range=R_Z0, weight_grid=_grid(0.5, 0, -127, 127, codes=codes))
    g = convert(_graph([st], (2, 3, 3)), HardwareConfig(weight_scales="per-tensor"))
    assert _spec(g.tensors["0:dw/weights"]) == (8, True, (1, 1, 1, 3), [0.5], [0], None)
    assert g.tensors["0:dw/weights"].data.tolist() == [[[[5, -3, 1]]]]


# ------------------------------------------------------------------------------------ convert: LUT stages
def test_lut_stages_on_their_own_grids():
    d = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    sig = FloatStage("sigmoid", "1:sigmoid", (1,), out_range=(-7.0, 7.0),
                     out_grid=_grid(2.0 ** -8, 0, 0, 255, kind="FakeQuant"))        # TF's logistic output grid
    tanh = FloatStage("tanh", "2:tanh", (2,), out_range=(-7.0, 7.0), out_grid=_grid(2.0 ** -7, 0, -127, 127))
    hs = FloatStage("hard_swish", "3:hard_swish", (3,), out_range=R_ZM64, out_grid=_grid(0.25, 1, -1, 6))
    hs2 = FloatStage("hard_swish", "4:hard_swish", (4,), out_range=R_ZM128)
    g = convert(_graph([d, sig, tanh, hs, hs2], (2,)), HardwareConfig())
    assert _nodes(g)[2:] == [
        ("1:sigmoid", "sigmoid", ["0:dense"], ["1:sigmoid"], {}),
        ("2:tanh", "tanh", ["1:sigmoid"], ["2:tanh"], {"clip": [-127, 127]}),
        ("3:hard_swish", "hard_swish", ["2:tanh"], ["3:hard_swish"], {"clip": [-96, 16]}),
        ("4:hard_swish", "hard_swish", ["3:hard_swish"], ["4:hard_swish"], {}),
    ]
    assert _spec(g.tensors["1:sigmoid"]) == (8, True, (2,), [2.0 ** -8], [-128], None)
    assert _spec(g.tensors["2:tanh"]) == (8, True, (2,), [2.0 ** -7], [0], None)
    assert _spec(g.tensors["3:hard_swish"]) == (8, True, (2,), [S], [-64], None)
    assert _spec(g.tensors["4:hard_swish"]) == (8, True, (2,), [S], [-128], None)
    assert g.meta["grids"] == {"0:dense": {"weights": "trained"}, "1:sigmoid": {"output": "trained"},
                               "2:tanh": {"output": "trained"}, "3:hard_swish": {"output": "recomputed"}}
    assert g.meta["notes"] == [
        ("3:hard_swish: output re-scaled by the target's rule, not on the trained AffineQuantizer grid (the target "
        "has 8-bit activations, the quantizer 3-bit codes [-1, 6]); its codes are clipped to the trained range")]
    assert g.meta["stage_outputs"] == ["0:dense", "1:sigmoid", "2:tanh", "3:hard_swish", "4:hard_swish"]


@pytest.mark.parametrize("selector", ["1:sigmoid", "op:sigmoid", "#2"])
def test_lut_node_overrides(selector):
    d = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    sig = FloatStage("sigmoid", "1:sigmoid", (1,), out_range=(0.0, 1.0))
    g = convert(_graph([d, sig], (2,)), HardwareConfig(layers={selector: {"activation_signed": False,
                                                                             "activation_bits": 10}}))
    # unsigned 10-bit [0, 1]: s = 1/1023 (float32), z = 0
    assert _spec(g.tensors["1:sigmoid"]) == (10, False, (2,), [float(np.float32(1 / 1023))], [0], None)
    assert _spec(g.tensors["0:dense"])[:2] == (8, True)


# --------------------------------------------------------------------------- convert: per-node overrides
@pytest.mark.parametrize("selector", ["quantize", "op:quantize", "#0"])
def test_quantize_node_overrides(selector):
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    g = convert(_graph([st], (2,), input_range=R_ZM128), HardwareConfig(layers={selector: {"activation_signed":
                                                                                            False}}))
    # unsigned [0, 3.984375]: s = 2^-6, z = 0 (signed would give z = -128)
    assert _spec(g.tensors["input_codes"]) == (8, False, (2,), [S], [0], None)
    assert _spec(g.tensors["0:dense"])[:2] == (8, True)


@pytest.mark.parametrize("selector, op", [("op:fully_connected", "dense"), ("op:conv2d", "conv2d"),
                                          ("#1", "dense"), ("0:x", "conv2d")])
def test_linear_node_overrides(selector, op):
    if op == "dense":
        st = FloatStage("dense", "0:x", (), weight=np.array([[0.5, 1.0], [-1.0, 0.5]]), bias=np.zeros(2),
                        out_range=R_Z0)
        shape = (2,)
    else:
        st = FloatStage("conv2d", "0:x", (), weight=np.ones((1, 1, 2, 2)), bias=np.zeros(2), out_range=R_Z0)
        shape = (2, 2, 2)
    g = convert(_graph([st], shape), HardwareConfig(layers={selector: {"weight_bits": 4, "activation_bits": 6}}))
    assert g.tensors["0:x/weights"].bits == 4 and g.tensors["0:x"].bits == 6
    assert g.tensors["input_codes"].bits == 8


def test_node_tflite_accumulator_width_names_the_node():
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    with pytest.raises(ConfigError, match=r"^node '0:dense': accumulator\.bits = 40: the TFLite requantization"):
        convert(_graph([st], (2,)), HardwareConfig(layers={"0:dense": {"accumulator_bits": 40}}))


def test_product_shift_and_bias_shift():
    """Q1.6 weights and activations: products have 12 fraction bits, the accumulator 10: product_shift 2, and
    the bias scale is s_in s_w 2^(bias_shift + shift) = 2^-12 2^3."""
    st = FloatStage("dense", "0:dense", (), weight=np.array([[0.5, 0.25], [-0.5, 1.0]]),
                    bias=np.array([0.5, -0.25]), out_range=R_Z0)
    g = convert(_graph([st], (2,)), HardwareConfig(weight_format="Q1.6", activation_format="Q1.6",
                                                   accumulator_frac_bits=10, bias_shift=1, requantization="shift"))
    assert _nodes(g)[1][4] == {"activation": "none", "bias_shift": 1, "product_shift": 2,
                               "product_rounding": "half_away"}
    b = g.tensors["0:dense/bias"]
    assert _spec(b) == (32, True, (2,), [2.0 ** -9, 2.0 ** -9], [0, 0], 0)
    assert b.data.tolist() == [256, -128]                              # 0.5 / 2^-9, -0.25 / 2^-9
    assert _spec(g.tensors["0:dense/weights"]) == (8, True, (2, 2), [2.0 ** -6], [0], None)


def test_product_shift_error_names_the_node():
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5)
    with pytest.raises(ConfigError, match=r"^node '0:dense': accumulator\.frac_bits = 13 with products of 12"):
        convert(_graph([st], (2,)), HardwareConfig(weight_format="Q1.6", activation_format="Q1.6",
                                                   accumulator_frac_bits=13))


@pytest.mark.parametrize("bias_shift, suffix", [(0, ""), (2, " (shifted left by 2)")])
def test_bias_saturation_note(bias_shift, suffix):
    # acc scale 2^-6 (input) x 2^-6 (weights) = 2^-12; codes 1.0 / 2^-12 = 4096 (x 2^-shift): saturates in
    # 8 bits, 0 does not, -0.25 / 2^-12 = -1024 saturates
    st = _dense("0:dense", [[1, 2, 3], [3, 4, 5]], 2.0 ** -6, bias=np.array([1.0, 0.0, -0.25]))
    g = convert(_graph([st], (2,)), HardwareConfig(bias_bits=8, bias_shift=bias_shift))
    assert g.tensors["0:dense/bias"].data.tolist() == [127, 0, -128]
    assert g.meta["bias_clipped"] == {"0:dense": 2}
    assert g.meta["notes"] == [f"0:dense: 2 of 3 biases saturated to the 8-bit bias register{suffix}"]
    attrs = _nodes(g)[1][4]
    assert attrs == ({"activation": "none", "bias_shift": 2} if bias_shift else {"activation": "none"})


def test_fixed_formats_recompute_trained_grids():
    st = _dense("0:dense", [[1, 2], [3, 4]], 2.0 ** -5, out_range=R_ZM64, out_grid=_grid(2.0 ** -7, 0, -128, 127))
    g = convert(_graph([st], (2,)), HardwareConfig(weight_format="Q1.6", activation_format="Q1.6"))
    assert g.meta["grids"] == {"0:dense": {"weights": "recomputed", "output": "recomputed"}}
    assert g.meta["notes"] == [
        ("0:dense: weights re-quantized by the target's rule, not on the trained AffineQuantizer grid (the "
        "target's fixed weight format sfix8_En6 sets the grid)"),
        ("0:dense: output re-scaled by the target's rule, not on the trained AffineQuantizer grid (the target's "
        "fixed activation format sfix8_En6 sets the grid); its codes are clipped to the trained range")]
    # real [-1, 127/128] on 2^-6: [-64, 63]
    assert _nodes(g)[1][4] == {"activation": "none", "clip": [-64, 63]}
    assert _spec(g.tensors["0:dense"]) == (8, True, (2,), [S], [0], None)


# ------------------------------------------------------------------------------------- convert: nn models
def test_model_needs_calibration_data():
    with pytest.raises(ValueError, match=r"^convert: give calibration_x \(float inputs used to calibrate "
                                         r"activation ranges\)$"):
        convert(nn.Sequential(nn.Dense(2, 2, seed=0)), "tflite-int8")


def test_tf_fake_quant_model_keeps_its_grids():
    """A TF-style QAT model: uint8 input/output codes and narrow-range weights, stored on the int8 target by
    the -128 offset. Input [-0.5, 1.5]: s = 2/255 (float32), TF zero point round(0.5 / s) = 64 -> -64."""
    from fxpsim.quant.affine import FakeQuant
    model = nn.Sequential(nn.Quantize(FakeQuant(min=-0.5, max=1.5)),
                          nn.Dense(3, 2, weight_quantizer=FakeQuant(min=-1.0, max=1.0, narrow_range=True),
                                   activation_quantizer=FakeQuant(min=0.0, max=2.0), seed=3),
                          nn.Flatten())
    model.eval()
    x = np.random.default_rng(0).uniform(-0.5, 1.5, (16, 3)).astype(np.float32)
    g = convert(model, "tflite-int8", x)
    s_in = float(np.float32(2) / np.float32(255))
    assert _spec(g.tensors["input_codes"]) == (8, True, (3,), [s_in], [-64], None)
    assert _spec(g.tensors["1:dense"]) == (8, True, (2,), [s_in], [-128], None)     # [0, 2]: z = 0 -> -128
    assert _spec(g.tensors["2:flatten"]) == (8, True, (2,), [s_in], [-128], None)
    w = g.tensors["1:dense/weights"]
    s_w = float(np.float32(2) / np.float32(254))
    assert (w.bits, w.signed, w.scale.tolist()[0], w.zero_point.tolist()[0]) == (8, True, s_w, 0)
    # TF dequantizes in float32: code x scale rounded once to float32
    np.testing.assert_array_equal((w.data.astype(np.float64).T * s_w).astype(np.float32),
                                  model.layers[1].quantized_weight())
    assert _nodes(g)[0][4] == {} and _nodes(g)[1][4] == {"activation": "none"}
    assert _nodes(g)[2] == ("2:flatten", "reshape", ["1:dense"], ["2:flatten"], {"shape": [2]})
    assert g.meta["grids"] == {"quantize": {"output": "trained"},
                               "1:dense": {"weights": "trained", "output": "trained"}}
    assert g.meta["notes"] == []

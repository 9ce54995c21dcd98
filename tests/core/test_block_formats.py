"""fxpsim.core.block_format: MX (OCP v1.0) and NVFP4 block quantization against the Fraction
reference (tests/reference_float.py) and gfloat's OCP MX block encoding, running live."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference_float as rf
from fxpsim.core.block_format import BLOCK_FORMATS, BlockFormat, quantize_block
from fxpsim.core.float_codec import decode, encode
from fxpsim.core.float_format import FloatFormat
from fxpsim.core.formats import Format

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"]
RULES = ["floor", "ceil", "even", "rceil"]


def _blocks(rng, n, k=32):
    """Random blocks over a wide range, with zeros, exact powers of two and ties sprinkled in."""
    out = []
    for t in range(n):
        x = rng.standard_normal(k) * 2.0 ** int(rng.integers(-60, 60))
        if t % 5 == 0:
            x[rng.integers(0, k, 6)] = 0.0
        if t % 7 == 0:
            x[0] = 2.0 ** int(rng.integers(-20, 20))
        if t % 11 == 0:
            x[:] = np.round(x * 8) / 8
        out.append(x)
    return np.array(out)


def _reference_mx(x, name, rule):
    """(element codes, scale codes) of one block from the definitions, element by element."""
    fmt = BLOCK_FORMATS[name]
    el = fmt.element
    is_int = isinstance(el, Format)
    elem_max = Fraction(float(el.max_value)) if is_int else Fraction(el.max_finite)
    man = el.word - 2 if is_int else el.man_bits
    e = rf.mx_shared_exponent(list(x), fmt.emax_elem, man, elem_max, rule)
    if e == rf.NAN:
        return [0] * len(x), 0xFF
    scale = rf._p2(e)
    if is_int:
        codes = [rf.int_element(Fraction(v) / scale, el.word, el.frac) for v in x]
    else:
        g = rf.Grid(el)
        codes = [rf.round_exact(Fraction(v) / scale if v != 0 else float(v), el, "half_even", "saturate", grid=g)
                 for v in x]
    return codes, e + 127


@pytest.mark.parametrize("name", MX)
@pytest.mark.parametrize("rule", RULES)
def test_mx_against_the_reference(name, rule):
    rng = np.random.default_rng(hash((name, rule)) % 2 ** 32)
    x = _blocks(rng, 40)
    q = quantize_block(x, name, scale_rule=rule)
    assert q.elements.shape == x.shape and q.scales.shape == (40, 1)
    for i in range(x.shape[0]):
        codes, scode = _reference_mx(x[i], name, rule)
        assert int(q.scales[i, 0]) == scode, (name, rule, i)
        assert q.elements[i].tolist() == codes, (name, rule, i)
    # dequantize is exact: element value times 2^E, checked on Fractions
    deq = q.dequantize()
    fmt = BLOCK_FORMATS[name]
    for i in range(0, x.shape[0], 7):
        e = int(q.scales[i, 0]) - 127
        for c, d in zip(q.elements[i], deq[i]):
            if isinstance(fmt.element, Format):
                v = Fraction(int(c) - (256 if c >= 128 else 0), 64)
            else:
                v = rf.code_value(fmt.element, int(c))
            assert Fraction(float(d)) == v * rf._p2(e)


def test_rceil_never_clamps_and_floor_may():
    rng = np.random.default_rng(5)
    x = _blocks(rng, 200)
    assert quantize_block(x, "mxfp4", scale_rule="rceil").clamped == 0
    assert quantize_block(x, "mxfp4", scale_rule="floor").clamped > 0


def test_even_rule_steps_at_seven():
    """torchao's EVEN for E2M1: amax 6.99 keeps X = 1, amax 7 goes to X = 2 (7 rounds half-up to 8)."""
    for amax, scode in ((6.0, 127), (6.99, 127), (7.0, 128), (4.0, 127), (3.49, 126), (3.5, 127)):
        x = np.zeros(32)
        x[3] = amax
        assert int(quantize_block(x, "mxfp4", scale_rule="even").scales[0]) == scode, amax


def test_special_blocks():
    x = np.ones((4, 32))
    x[0] = 0.0                              # all zero: X = 2^-127 (code 0), elements 0
    x[1, 5] = np.nan                        # NaN: the NaN scale, every element NaN
    x[2, 7] = -np.inf                       # Inf: the NaN scale too
    x[3, :] = 2.0 ** 200                    # exponent 200 - 8 > 127: the NaN scale
    q = quantize_block(x, "mxfp8_e4m3")
    assert q.scales.ravel().tolist() == [0, 0xFF, 0xFF, 0xFF] and q.nan_blocks == 3
    d = q.dequantize()
    assert np.all(d[0] == 0) and np.all(np.isnan(d[1:]))
    tiny = np.full(32, 2.0 ** -140)         # exponent below -127: clamped to -127, elements underflow
    q = quantize_block(tiny, "mxfp8_e4m3")
    assert int(q.scales[0]) == 0 and np.all(q.dequantize() == 0.0)    # 2^-13 < E4M3's 2^-10 half-ulp


def test_mxint8_range_and_implicit_scale():
    x = np.zeros(32)
    x[:4] = [1.0, -1.0, 0.5 + 2 ** -8, -2.0 + 2 ** -9]
    q = quantize_block(x, "mxint8")
    assert int(q.scales[0]) == 127                                     # amax 2 - 2^-9 -> floor 0
    c = q.elements[:4].astype(np.int64)
    assert (c - np.where(c >= 128, 256, 0)).tolist() == [64, -64, 32, -128]   # half-even; -2 allowed
    assert q.dequantize()[:4].tolist() == [1.0, -1.0, 0.5, -2.0]


def test_nvfp4_against_the_reference():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 64)) * 3.0
    x[2, :16] = 0.0
    q = quantize_block(x, "nvfp4")
    amax_t = max(abs(Fraction(v)) for v in x.ravel())
    T = rf.round_to_float32(amax_t / (6 * 448))
    assert Fraction(q.tensor_scale) == T
    e4m3, e2m1 = FloatFormat.parse("float8_e4m3fn"), FloatFormat.parse("float4_e2m1fn")
    g4, g2 = rf.Grid(e4m3), rf.Grid(e2m1)
    for r in range(8):
        for b in range(4):
            blk = x[r, 16 * b:16 * b + 16]
            amax = max(abs(Fraction(v)) for v in blk)
            sc = rf.round_exact(amax / (6 * T), e4m3, "half_even", "saturate", grid=g4)
            assert int(q.scales[r, b]) == sc
            s = rf.code_value(e4m3, sc)
            for v, c in zip(blk, q.elements[r, 16 * b:16 * b + 16]):
                want = 0 if s == 0 else rf.round_exact(Fraction(v) / (s * T) if v else float(v), e2m1,
                                                        "half_even", "saturate", grid=g2)
                assert int(c) == want
    d = q.dequantize()
    assert np.all(d[2, :16] == 0)
    assert np.max(np.abs(d - x)) <= np.max(np.abs(x)) / 4


def test_axis_and_2d_tiles():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 48))
    a0 = quantize_block(x, "mxfp8_e4m3", axis=0)
    t = quantize_block(x.T.copy(), "mxfp8_e4m3")
    assert np.array_equal(a0.elements, t.elements.T) and np.array_equal(a0.scales, t.scales.T)
    tile = BlockFormat(FloatFormat.parse("e4m3"), (16, 16), axis=(-2, -1))
    q = quantize_block(x, tile)
    assert q.scales.shape == (4, 3)
    for i in range(4):
        for j in range(3):
            sub = x[16 * i:16 * i + 16, 16 * j:16 * j + 16].reshape(1, 256)
            one = quantize_block(sub, BlockFormat(FloatFormat.parse("e4m3"), 256))
            assert q.scales[i, j] == one.scales[0, 0]
            assert np.array_equal(q.elements[16 * i:16 * i + 16, 16 * j:16 * j + 16].ravel(), one.elements[0])
    assert np.array_equal(q.dequantize()[:16, :16].ravel(), quantize_block(
        x[:16, :16].reshape(1, 256), BlockFormat(FloatFormat.parse("e4m3"), 256)).dequantize()[0])


def test_caller_supplied_scale():
    x = np.linspace(-3, 3, 64).reshape(2, 32)
    q = quantize_block(x, "mxfp8_e4m3", scale=[[0.25], [2.0]])
    assert q.scales.ravel().tolist() == [125, 128]
    e4m3 = FloatFormat.parse("e4m3")
    assert np.array_equal(q.dequantize()[1], decode(encode(x[1] / 2, e4m3).bits, e4m3) * 2)
    with pytest.raises(ValueError, match="value of"):
        quantize_block(x, "mxfp8_e4m3", scale=[[0.3], [2.0]])


@given(st.lists(st.floats(-1e30, 1e30, allow_nan=False), min_size=32, max_size=32),
       st.sampled_from(MX), st.sampled_from(RULES))
def test_property_against_the_reference(vals, name, rule):
    x = np.array(vals)
    q = quantize_block(x, name, scale_rule=rule)
    codes, scode = _reference_mx(x, name, rule)
    assert int(q.scales[0]) == scode and q.elements.tolist() == codes


# --------------------------------------------------------------------------- gfloat, live
_GF = {"mxfp8_e4m3": "format_info_mxfp8_e4m3", "mxfp8_e5m2": "format_info_mxfp8_e5m2",
       "mxfp6_e2m3": "format_info_mxfp6_e2m3", "mxfp6_e3m2": "format_info_mxfp6_e3m2",
       "mxfp4": "format_info_mxfp4_e2m1", "mxint8": "format_info_mxint8"}


@pytest.mark.parametrize("name", MX)
def test_against_gfloat_block_encoding(name):
    gf = pytest.importorskip("gfloat", reason="gfloat is not installed")
    import gfloat.formats  # noqa: F401
    from gfloat.block import compute_scale_amax, encode_block
    from gfloat.block import quantize_block as gquant
    bfi = getattr(gf.formats, _GF[name])
    rng = np.random.default_rng(4)
    x = _blocks(rng, 300)
    x[3] = 0.0
    q = quantize_block(x, name)
    deq = q.dequantize()
    for i in range(x.shape[0]):
        assert np.array_equal(deq[i], gquant(bfi, x[i], compute_scale_amax)), (name, i)
        scale = compute_scale_amax(bfi.etype.emax, x[i])
        codes = list(encode_block(bfi, scale, x[i] / scale))        # exact: scale is a power of two
        assert codes[0] == int(q.scales[i, 0]), (name, i)
        assert codes[1:] == q.elements[i].tolist(), (name, i)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, exc, word", [
    (lambda: quantize_block(np.zeros(48), "mxfp8_e4m3"), ValueError, "divide"),
    (lambda: quantize_block(np.zeros((4, 30)), "nvfp4"), ValueError, "divide"),
    (lambda: quantize_block(np.zeros(32), "mxfp9"), ValueError, "mxfp8_e4m3"),
    (lambda: quantize_block(np.zeros(32), "mxfp4", scale_rule="round"), ValueError, "scale_rule"),
    (lambda: quantize_block(np.zeros(32), "mxfp4", scale_rule="amax"), ValueError, "apply"),
    (lambda: quantize_block(np.zeros(32), "mxfp4", axis=3), ValueError, "axis"),
    (lambda: quantize_block(np.zeros(32), "mxfp4", rounding="sideways"), ValueError, "rounding"),
    (lambda: quantize_block(np.zeros(16), "nvfp4", tensor_scale=0.1), ValueError, "float32"),
    (lambda: BlockFormat(FloatFormat.parse("e4m3"), 0), ValueError, "block_size"),
    (lambda: BlockFormat(FloatFormat.parse("e4m3"), (16, 16), axis=-1), ValueError, "axis"),
    (lambda: BlockFormat("e4m3", 32), TypeError, "element"),
    (lambda: BlockFormat(FloatFormat.parse("e4m3"), 32, FloatFormat.parse("float16"), tensor_scale=True),
     ValueError, "28 bits"),
])
def test_bad_input(call, exc, word):
    with pytest.raises(exc) as info:
        call()
    assert word in str(info.value), str(info.value)

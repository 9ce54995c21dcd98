"""The float32 MX block kernel (``_float.block_abs_max_f32`` + ``_float.encode_blocks_f32``, which
:func:`~fxpsim.core.block_format.quantize_block` uses for float32 / float16 input) bit for bit against
the float64 path of ``quantize_block`` (the generic element codec) and against the Fraction model of
the MX rule in tests/reference_float.py: scale codes, element codes, the clamped count and the NaN
blocks, on blocks with ties, subnormals, amax at power-of-two boundaries, Inf / NaN and zeros."""
from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference_float as rf
from fxpsim.core import block_format
from fxpsim.core.block_format import BLOCK_FORMATS, BlockFormat, quantize_block
from fxpsim.core.float_format import FloatFormat

FLOAT_MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4"]
RULES = ["floor", "ceil", "even", "rceil"]
ROUNDINGS = ["half_even", "half_away", "half_up", "half_down", "half_toward_zero", "toward_zero", "floor",
             "ceil", "odd"]


def _same(a, b) -> None:
    """Two BlockArrays are the same bit for bit, counts included."""
    assert a.elements.dtype == b.elements.dtype == np.uint8
    assert np.array_equal(a.scales, b.scales), np.argwhere(a.scales != b.scales)[:5]
    assert np.array_equal(a.elements, b.elements), np.argwhere(a.elements != b.elements)[:5]
    assert (a.clamped, a.nan_blocks) == (b.clamped, b.nan_blocks)


def _float64_path(x, name, **kw):
    """quantize_block on the exact float64 widening: the generic path (the kernel takes float32 only)."""
    return quantize_block(np.asarray(x).astype(np.float64), name, **kw)


def _wide(el: FloatFormat):
    """The element format with one more exponent bit (IEEE, same bias): the same grid up to and one step past
    the element's largest finite value, so its rounding tells whether an element overflowed."""
    return SimpleNamespace(exp_bits=el.exp_bits + 1, man_bits=el.man_bits, bias=el.bias, signed=True,
                           encoding="ieee", subnormals=True)


def _reference_block(vals, name, rule, rounding):
    """(scale code, element codes, clamped, NaN block) of one float32 block from the definitions, on Fractions."""
    fmt = BLOCK_FORMATS[name]
    el = fmt.element
    floats = [float(v) for v in vals]
    e = rf.mx_shared_exponent(floats, fmt.emax_elem, el.man_bits, Fraction(el.max_finite), rule)
    if e == rf.NAN:
        return 0xFF, [0] * len(floats), 0, 1
    scale = rf._p2(e)
    grid, wide = rf.Grid(el), _wide(el)
    wide_grid = rf.Grid(wide)
    codes, clamped = [], 0
    for v in floats:
        exact = Fraction(v) / scale if v != 0 else v                 # a float zero keeps its sign
        codes.append(rf.round_exact(exact, el, rounding, "saturate", grid=grid))
        if v != 0:
            w = rf.round_exact(exact, wide, rounding, "saturate", grid=wide_grid)
            clamped += abs(rf.code_value(wide, w)) > Fraction(el.max_finite)
    return e + 127, codes, clamped, 0


def _check_against_reference(x, name, rule, rounding):
    q = quantize_block(x, name, scale_rule=rule, rounding=rounding)
    _same(q, _float64_path(x, name, scale_rule=rule, rounding=rounding))
    clamped = nan_blocks = 0
    for i, row in enumerate(x.reshape(-1, 32)):
        scode, codes, c, nb = _reference_block(row, name, rule, rounding)
        assert int(q.scales.reshape(-1)[i]) == scode, (name, rule, rounding, i)
        assert q.elements.reshape(-1, 32)[i].tolist() == codes, (name, rule, rounding, i, row)
        clamped, nan_blocks = clamped + c, nan_blocks + nb
    assert (q.clamped, q.nan_blocks) == (clamped, nan_blocks)


# --------------------------------------------------------------------------- random blocks (hypothesis)
def _f32(v) -> float:
    """float32(v); v is below float32's largest value by construction."""
    return float(np.float32(v))


@st.composite
def _element(draw, name):
    """One float32 of interest for the element format of ``name`` around the block exponent ``e``."""
    fmt = BLOCK_FORMATS[name]
    el = fmt.element
    grid = [float(g) for g in rf.Grid(el).values]
    e = draw(st.integers(-150, 130))
    top = 126 - fmt.emax_elem                            # keeps grid values times 2^e below float32's max
    kind = draw(st.sampled_from(["grid", "tie", "near_tie", "pow2", "near_pow2", "max", "bits", "zero",
                                 "subnormal"]))
    sign = draw(st.sampled_from([1.0, -1.0]))
    if kind == "bits":                                   # any float32 pattern: NaN, Inf, subnormals included
        return float(np.uint32(draw(st.integers(0, 2 ** 32 - 1))).view(np.float32))
    if kind == "zero":
        return sign * 0.0
    if kind == "subnormal":
        return sign * draw(st.integers(1, 2 ** 23 - 1)) * 2.0 ** -149
    if kind in ("pow2", "near_pow2"):
        v = _f32(2.0 ** max(min(e, 127), -149))
    elif kind == "max":
        v = _f32(el.max_finite * 2.0 ** max(min(e, top), -140))
    else:
        i = draw(st.integers(0, len(grid) - 2))
        v = grid[i] if kind == "grid" else (grid[i] + grid[i + 1]) / 2
        v = _f32(v * 2.0 ** max(min(e, top), -140))
    if kind.startswith("near") or kind == "max":
        v = float(draw(st.sampled_from([np.nextafter(np.float32(v), np.float32(0)), np.float32(v),
                                        np.nextafter(np.float32(v), np.float32(np.inf))])))
    return sign * v


@st.composite
def _block(draw):
    name = draw(st.sampled_from(FLOAT_MX))
    vals = draw(st.lists(_element(name), min_size=32, max_size=32))
    return name, np.array(vals, dtype=np.float32)


@settings(max_examples=300, deadline=None)
@given(_block(), st.sampled_from(RULES), st.sampled_from(ROUNDINGS))
def test_kernel_equals_the_float64_path_and_the_reference(block, rule, rounding):
    name, x = block
    _check_against_reference(x, name, rule, rounding)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=32, max_size=32),
       st.sampled_from(FLOAT_MX), st.sampled_from(RULES), st.sampled_from(ROUNDINGS))
def test_kernel_on_any_finite_float32(vals, name, rule, rounding):
    _check_against_reference(np.array(vals, np.float32), name, rule, rounding)


# --------------------------------------------------------------------------- every tie, hand-built
@pytest.mark.parametrize("name", FLOAT_MX)
def test_every_tie_and_its_neighbours(name):
    """Each block: amax 2^(e + emax_elem) (scale 2^e by the floor rule), then ties between neighbouring element
    values times 2^e and the float32 values on either side of them; e from the clamped -127 (float32 subnormal
    inputs) to 119."""
    fmt = BLOCK_FORMATS[name]
    grid = np.array([float(g) for g in rf.Grid(fmt.element).values])
    mids = (grid[1:] + grid[:-1]) / 2
    rows = []
    for e in (-127, -120, -20, 0, 7, 100, 127 - fmt.emax_elem):
        v = np.float32(mids * 2.0 ** e)
        cand = np.concatenate([v, np.nextafter(v, np.float32(0)), np.nextafter(v, np.float32(np.inf))])
        cand = np.concatenate([cand, -cand])
        cand = cand[cand != 0]
        cand = np.concatenate([cand, np.zeros((-cand.size) % 31, np.float32)])
        for chunk in cand.reshape(-1, 31):
            rows.append(np.concatenate([[np.float32(2.0 ** (e + fmt.emax_elem))], chunk]))
    x = np.array(rows, dtype=np.float32)
    assert x.dtype == np.float32 and np.isfinite(x).all()
    for rounding in ("half_even", "half_away", "toward_zero", "odd", "ceil"):
        _check_against_reference(x, name, "floor", rounding)
    for rounding in ROUNDINGS:
        for rule in RULES:
            _same(quantize_block(x, name, scale_rule=rule, rounding=rounding),
                  _float64_path(x, name, scale_rule=rule, rounding=rounding))


def test_special_blocks_on_the_kernel():
    x = np.ones((6, 32), np.float32)
    x[0] = 0.0
    x[0, 4] = -0.0                                       # all zero: scale code 0, -0 keeps its sign (0x80)
    x[1, 5] = np.nan
    x[2, 7] = -np.inf
    x[3] = np.float32(2.0 ** -149)                       # exponent below -127: clamped, elements underflow
    x[4] = np.float32(3.4e38)                            # the top of float32: clamps at the element max
    x[5, :2] = (np.float32(448.0 * 2 ** -100), np.float32(464.0 * 2 ** -100))    # the tie above E4M3's max
    q = quantize_block(x, "mxfp8_e4m3")
    _same(q, _float64_path(x, "mxfp8_e4m3"))
    assert q.scales.ravel().tolist()[:4] == [0, 0xFF, 0xFF, 0] and q.nan_blocks == 2
    assert q.elements[0].tolist() == [0] * 4 + [0x80] + [0] * 27
    assert np.all(q.elements[1:3] == 0) and np.all(q.elements[3] == 0)
    for rounding in ROUNDINGS:
        _check_against_reference(x, "mxfp8_e4m3", "floor", rounding)
        _check_against_reference(x, "mxfp8_e5m2", "rceil", rounding)


# --------------------------------------------------------------------------- layouts, dispatch, inputs
@pytest.mark.parametrize("name", FLOAT_MX)
def test_layouts_and_float16_input(name):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 64, 96)) * 2.0 ** rng.integers(-30, 30, (4, 64, 1))).astype(np.float32)
    x[1, 3, :40] = 0.0
    x[2, 5, 7] = np.nan
    before = x.copy()
    for kw in ({}, {"axis": 1}, {"axis": 0, "scale_rule": "rceil"}, {"rounding": "toward_zero", "scale_rule": "even"}):
        if kw.get("axis") == 0:
            xx = np.ascontiguousarray(np.broadcast_to(x[:1], (32, 64, 96)))
        else:
            xx = x
        _same(quantize_block(xx, name, **kw), _float64_path(xx, name, **kw))
    _same(quantize_block(x[:, :, ::3], name), _float64_path(x[:, :, ::3], name))     # a strided view
    tile = BlockFormat(BLOCK_FORMATS[name].element, (16, 16), axis=(-2, -1))
    _same(quantize_block(x, tile, scale_rule="ceil"), _float64_path(x, tile, scale_rule="ceil"))
    h = (rng.standard_normal((64, 96)) * 2.0 ** rng.integers(-20, 12, (64, 1))).astype(np.float16)
    h[3, 40] = np.inf
    _same(quantize_block(h, name), _float64_path(h, name))
    assert np.array_equal(x, before, equal_nan=True)          # the input is never written


class _Spy:
    """The real extension, counting the calls of the float32 block kernel."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __getattr__(self, attr):
        return getattr(self.real, attr)

    def encode_blocks_f32(self, *args):
        self.calls += 1
        return self.real.encode_blocks_f32(*args)


def test_which_calls_take_the_kernel(monkeypatch):
    if block_format._kernel is None:
        pytest.skip("fxpsim.core._float is not built (the float64 path serves every call)")
    spy = _Spy(block_format._kernel)
    monkeypatch.setattr(block_format, "_kernel", spy)
    x = np.linspace(-5, 5, 64, dtype=np.float32).reshape(2, 32)
    for name in FLOAT_MX:
        quantize_block(x, name)
        quantize_block(x.astype(np.float16), name, rounding="odd")
    assert spy.calls == 2 * len(FLOAT_MX)
    quantize_block(x.astype(np.float64), "mxfp8_e4m3")                       # float64 input
    quantize_block(x, "mxfp8_e4m3", rounding="stochastic", seed=1)          # random draws
    quantize_block(x, "mxint8")                                              # integer elements
    quantize_block(x[:, :16], "nvfp4")                                       # E4M3 scales, tensor scale
    quantize_block(x, "mxfp8_e4m3", scale=[[1.0], [2.0]])                    # caller-given scales
    assert spy.calls == 2 * len(FLOAT_MX)


def test_bad_float32_input_is_refused_before_the_kernel():
    with pytest.raises(ValueError, match="divide"):
        quantize_block(np.zeros(48, np.float32), "mxfp8_e4m3")
    with pytest.raises(ValueError, match="at least one dimension"):
        quantize_block(np.float32(1.0), "mxfp8_e4m3")
    with pytest.raises(ValueError, match="axis"):
        quantize_block(np.zeros(32, np.float32), "mxfp4", axis=2)

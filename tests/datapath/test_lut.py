"""Integer lookup-table activations (:mod:`fxpsim.datapath.lut`) against an independent model.

The model here builds each table and applies it one code at a time in Python integers and
:class:`fractions.Fraction`: sample points as exact fractions, rounding with :func:`reference.round_fraction`,
indexing by floor division, interpolation ``(slope * t + 2^(r-1)) // 2^r`` (TFLite's ``lut_lookup``),
softmax's saturating sum in a Python loop and its division as an exact fraction rounded half up. Only the
real function itself is evaluated in float64 numpy, as the module documents (``fl64(f(x_k) / s_y)``).
LiteRT's own arithmetic comes from fxpsim's LiteRT-exact kernels (:mod:`fxpsim.datapath.tflite`, checked
live against LiteRT in ``tests/io`` and on the recorded vectors in ``tests/datapath/test_tflite_ops.py``).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.datapath import lut
from fxpsim.datapath import tflite as K
from reference import round_fraction

def _exp_or_inf(x):
    """e^x, +inf beyond float64's range (without numpy's overflow warning)."""
    with np.errstate(over="ignore"):
        return np.exp(x)


# the real functions, written here (float64, vectorised)
FUNCS = {
    "logistic": lambda x: 1.0 / (1.0 + _exp_or_inf(-x)),
    "tanh": np.tanh,
    "hard_swish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "exp": np.exp,
}
ROUNDINGS = ["half_away", "half_up", "half_even", "floor", "toward_zero", "ceil", "half_down"]


def code_range(bits, signed):
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def model_table(fn, bits, qmin, sx, zx, sy, zy, lo, hi, entries, interp, rounding):
    e = entries.bit_length() - 1
    r = bits - e
    n_points = entries + (1 if interp == "linear" else 0)
    points = [Fraction(k * 2 ** r) + (Fraction(2 ** r - 1, 2) if interp == "none" else 0) for k in range(n_points)]
    xs = np.array([float(np.float64(sx) * float(p + (qmin - zx))) for p in points], dtype=np.float64)
    with np.errstate(over="ignore"):
        vs = FUNCS[fn](xs) / np.float64(sy)
    return [min(max(round_fraction(Fraction(float(v)), rounding) + zy, lo), hi) for v in vs], r


def model_lookup(q, table, qmin, r, interp):
    u = q - qmin
    i, t = u // 2 ** r, u % 2 ** r
    if interp == "none":
        return table[i]
    return table[i] + ((table[i + 1] - table[i]) * t + 2 ** (r - 1)) // 2 ** r


@st.composite
def unary_case(draw):
    bits = draw(st.integers(2, 12))
    signed = draw(st.booleans())
    e = draw(st.integers(1, bits))
    interp = "none" if e == bits else draw(st.sampled_from(["none", "linear"]))
    x_lo, x_hi = code_range(bits, signed)
    y_bits, y_signed = draw(st.integers(2, 12)), draw(st.booleans())
    y_lo, y_hi = code_range(y_bits, y_signed)
    return dict(fn=draw(st.sampled_from(["logistic", "tanh", "hard_swish"])), bits=bits, qmin=x_lo, qmax=x_hi,
                sx=draw(st.floats(1e-3, 2.0)), zx=draw(st.integers(x_lo, x_hi)), sy=draw(st.floats(1e-3, 2.0)),
                zy=draw(st.integers(y_lo, y_hi)), lo=y_lo, hi=y_hi, entries=1 << e, interp=interp,
                rounding=draw(st.sampled_from(ROUNDINGS)))


@given(unary_case())
def test_unary_table_and_lookup_match_the_independent_model(c):
    t = lut.build_table(lut.lut_functions()[c["fn"]], input_bits=c["bits"], input_min=c["qmin"],
                        input_scale=c["sx"], input_zero_point=c["zx"], output_scale=c["sy"],
                        output_zero_point=c["zy"], output_lo=c["lo"], output_hi=c["hi"], entries=c["entries"],
                        interpolation=c["interp"], rounding=c["rounding"])
    table, r = model_table(c["fn"], c["bits"], c["qmin"], c["sx"], c["zx"], c["sy"], c["zy"], c["lo"], c["hi"],
                           c["entries"], c["interp"], c["rounding"])
    assert t.values.tolist() == table and t.shift == r
    codes = list(range(c["qmin"], c["qmax"] + 1))
    got = lut.lut_lookup(np.array(codes), t).tolist()
    assert got == [model_lookup(q, table, c["qmin"], r, c["interp"]) for q in codes]
    assert all(c["lo"] <= v <= c["hi"] for v in got)


@given(bits=st.integers(2, 10), signed=st.booleans(), sx=st.floats(1e-3, 2.0), zx_frac=st.floats(0, 1),
       fn=st.sampled_from(["logistic", "tanh", "hard_swish"]), rounding=st.sampled_from(ROUNDINGS))
def test_one_entry_per_code_is_the_exact_per_code_table(bits, signed, sx, zx_frac, fn, rounding):
    """entries == 2^bits without interpolation: entry of code q = round(f(s_x (q - z_x)) / s_y) + z_y."""
    lo, hi = code_range(bits, signed)
    zx = lo + round(zx_frac * (hi - lo))
    t = lut.build_table(lut.lut_functions()[fn], input_bits=bits, input_min=lo, input_scale=sx, input_zero_point=zx,
                        output_scale=1 / 256, output_zero_point=-128, output_lo=-128, output_hi=127,
                        entries=1 << bits, rounding=rounding)
    codes = np.arange(lo, hi + 1)
    xs = np.float64(sx) * (codes - zx).astype(np.float64)
    want = [min(max(round_fraction(Fraction(float(v)), rounding) - 128, -128), 127) for v in FUNCS[fn](xs) * 256.0]
    assert lut.lut_lookup(codes, t).tolist() == want


def test_interpolation_rounds_half_up_as_tflite_lut_lookup():
    """A hand-made table: slope -3 over 4 codes (r = 2): -3*t/4 for t = 0..3 is 0, -0.75, -1.5, -2.25 and
    TFLite's ``(slope * t + 2) >> 2`` gives 0, -1, -1, -2 (the tie -1.5 goes up, to -1)."""
    t = lut.LutTable(np.array([10, 7, 7], dtype=np.int64), 2, "linear", 0, 3, 2)
    assert lut.lut_lookup(np.arange(8), t).tolist() == [10, 9, 9, 8, 7, 7, 7, 7]


# --------------------------------------------------------------------------------------------- softmax
def model_softmax(rows, bits, sx, beta, sy, zy, lo, hi, entries, interp, rounding, sum_bits):
    n = 1 << bits
    scale = float(np.float64(beta) * np.float64(sx))
    table, r = model_table("exp", bits, -(n - 1), scale, 0, 2.0 ** -15, 0, 0, 65535, entries, interp, rounding)
    if model_lookup(n - 1, table, 0, r, interp) == 0:
        return None, None
    limit = 2 ** (sum_bits - 1) - 1
    out, overflows = [], 0
    for row in rows:
        m = max(row)
        es = [model_lookup(x - m + n - 1, table, 0, r, interp) for x in row]
        acc = 0
        for e in es:
            if acc + e > limit:
                overflows += 1
            acc = min(acc + e, limit)
        out.append([min(max(zy + int(Fraction(e) / (acc * Fraction(sy)) + Fraction(1, 2)), lo), hi) for e in es])
    return out, overflows


@given(bits=st.integers(2, 10), signed=st.booleans(), e_frac=st.floats(0, 1), linear=st.booleans(),
       sx=st.floats(1e-3, 1.0), beta=st.floats(0.25, 2.0),
       sy=st.sampled_from([1 / 256, 1 / 32768, 0.0123, 0.1, 1e-5]), y_bits=st.integers(4, 16),
       zy_frac=st.floats(0, 1), rounding=st.sampled_from(ROUNDINGS), sum_bits=st.integers(17, 32),
       seed=st.integers(0, 2 ** 16), width=st.integers(1, 40), extreme=st.booleans())
def test_softmax_matches_the_independent_model(bits, signed, e_frac, linear, sx, beta, sy, y_bits, zy_frac, rounding,
                                               sum_bits, seed, width, extreme):
    e = 1 + round(e_frac * (bits - 1))
    interp = "linear" if linear and e < bits else "none"
    x_lo, x_hi = code_range(bits, signed)
    rng = np.random.default_rng(seed)
    x = rng.integers(x_lo, x_hi + 1, (3, width))
    if extreme:   # many equal maxima: the sum saturates narrow accumulators
        x = np.full((2, 64 * width), x_hi)
    y_lo, y_hi = code_range(y_bits, True)
    zy = y_lo + round(zy_frac * (y_hi - y_lo))
    want, overflows = model_softmax(x.tolist(), bits, sx, beta, sy, zy, y_lo, y_hi, 1 << e, interp, rounding, sum_bits)
    kw = dict(input_bits=bits, input_scale=sx, beta=beta, output_scale=sy, output_zero_point=zy, output_lo=y_lo,
              output_hi=y_hi, entries=1 << e, interpolation=interp, rounding=rounding, sum_bits=sum_bits)
    if want is None:
        with pytest.raises(ValueError, match="use more entries"):
            lut.lut_softmax(x, **kw)
        return
    got, info = lut.lut_softmax(x, **kw)
    assert got.tolist() == want
    assert info["overflows"] == overflows and info["adds"] == x.size


# ------------------------------------------------------------------------------------- against LiteRT
def _litert_cases(n=40, seed=7):
    rng = np.random.default_rng(seed)
    return [(float(np.float32(10 ** rng.uniform(-3, 0.5))), int(rng.integers(-128, 128))) for _ in range(n)]


@pytest.mark.parametrize("fn", ["logistic", "tanh"])
def test_256_entries_on_int8_is_litert_within_one_lsb(fn):
    """LiteRT's int8 LOGISTIC/TANH are 256-entry tables computed in float32; the LUT computes its entries in
    float64 (round half away), so an entry can differ by one LSB where the float32 value lies next to a
    rounding tie: at most 1 LSB, on a handful of the 10,240 codes checked (logistic 2, tanh 0 when written)."""
    codes = np.arange(-128, 128)
    differ = 0
    for sx, zx in _litert_cases():
        if fn == "logistic":
            p = K.logistic_params(sx, zx, output_scale=1 / 256, output_zero_point=-128)
            ref = K.quantized_logistic(codes.astype(np.int8), p).astype(np.int64)
        else:
            p = K.tanh_params(sx, zx, output_scale=1 / 128, output_zero_point=0)
            ref = K.quantized_tanh(codes.astype(np.int8), p).astype(np.int64)
        t = lut.build_table(lut.lut_functions()[fn], input_bits=8, input_min=-128, input_scale=p.input_scale,
                            input_zero_point=zx, output_scale=p.output_scale, output_zero_point=p.output_zero_point,
                            output_lo=-128, output_hi=127, entries=256, interpolation="none", rounding="half_away")
        got = lut.lut_lookup(codes, t)
        assert np.abs(got - ref).max() <= 1, (sx, zx)
        differ += int(np.count_nonzero(got != ref))
    assert differ <= 20


def test_256_entries_hard_swish_and_softmax_are_litert_within_one_lsb():
    """LiteRT's int8 HARD_SWISH (int16 fixed-point arithmetic) and SOFTMAX (gemmlowp exp and reciprocal) are
    not tables; the exact-per-code LUT and the LUT softmax stay within one LSB of them."""
    rng = np.random.default_rng(3)
    codes = np.arange(-128, 128)
    checked = 0
    for sx, zx in _litert_cases():
        so, zo = float(np.float32(10 ** rng.uniform(-2, 0.5))), int(rng.integers(-128, 128))
        try:
            p = K.hard_swish_params(sx, zx, so, zo, dtype=np.int8)
        except ValueError:        # outside TFLite's int16 arithmetic: LiteRT refuses these scales too
            continue
        checked += 1
        ref = K.quantized_hard_swish(codes.astype(np.int8), p).astype(np.int64)
        t = lut.build_table(lut.lut_functions()["hard_swish"], input_bits=8, input_min=-128, input_scale=sx,
                            input_zero_point=zx, output_scale=so, output_zero_point=zo, output_lo=-128,
                            output_hi=127, entries=256)
        assert np.abs(lut.lut_lookup(codes, t) - ref).max() <= 1, (sx, zx, so, zo)
        sp = K.softmax_params(sx, beta=1.0, output_scale=1 / 256, output_zero_point=-128, input_dtype=np.int8,
                              output_dtype=np.int8)
        x = rng.integers(-128, 128, (16, 10)).astype(np.int8)
        got, _ = lut.lut_softmax(x, input_bits=8, input_scale=sx, beta=1.0, output_scale=1 / 256,
                                 output_zero_point=-128, output_lo=-128, output_hi=127, entries=256)
        assert np.abs(got - K.quantized_softmax(x, sp).astype(np.int64)).max() <= 1, sx
    assert checked >= 10


# ------------------------------------------------------------------------------------------ bad values
@pytest.mark.parametrize("entries, bits, interp, match", [
    (3, 8, "none", "power of two"), (1, 8, "none", "power of two"), (0, 8, "none", "power of two"),
    (1 << 17, 16, "none", "power of two"), (True, 8, "none", "power of two"), ("256", 8, "none", "power of two"),
    (512, 8, "none", "larger than the 256 codes"), (256, 8, "linear", "no low bits"),
    (16, 8, "cubic", "interpolation must be one of")])
def test_check_entries_refuses_bad_tables(entries, bits, interp, match):
    with pytest.raises(ValueError, match=match) as exc:
        lut.check_entries(entries, bits, interp, where="activations.lut_entries")
    assert "activations.lut_entries" in str(exc.value)


def test_lookup_refuses_codes_outside_the_table():
    t = lut.build_table(FUNCS["tanh"], input_bits=4, input_min=-8, input_scale=0.5, input_zero_point=0,
                        output_scale=1 / 8, output_zero_point=0, output_lo=-8, output_hi=7, entries=4)
    with pytest.raises(ValueError, match="outside the table"):
        lut.lut_lookup(np.array([8]), t)

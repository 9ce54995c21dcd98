"""fxpsim.core.float_format / float_codec: names, exhaustive decode and round trips, the Fraction
reference model (tests/reference_float.py), ml_dtypes and gfloat running live, bad input."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference_float as rf
from fxpsim.core.float_codec import FLOAT_ROUNDINGS, convert, decode, encode, random_stream
from fxpsim.core.float_format import FloatFormat, known_float_formats

P = FloatFormat.parse

#: every encoding, both signs, flushing, custom biases; all <= 16 bits (enumerated by the reference)
SMALL = [P(n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                        "float8_e4m3b11fnuz", "float8_e4m3", "float8_e3m4", "float8_e8m0fnu",
                        "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "binary8p1", "binary8p3",
                        "binary8p4", "binary8p7", "binary8p3u", "binary6p3", "binary4p2u")] + [
    FloatFormat(3, 2), FloatFormat(3, 2, encoding="fn"), FloatFormat(2, 0, encoding="fn"),
    FloatFormat(4, 3, subnormals=False), FloatFormat(4, 3, bias=3, encoding="fn", subnormals=False),
    FloatFormat(5, 2, signed=False), FloatFormat(3, 3, signed=False, encoding="finite"),
    FloatFormat(4, 0, encoding="fnu", signed=False), FloatFormat(3, 1, bias=-2, encoding="finite"),
]
MID = [P("float16"), P("bfloat16"), FloatFormat(6, 9), FloatFormat(5, 10, encoding="fnuz")]
ALL16 = SMALL + MID


def _ids(fmts):
    return [str(f) for f in fmts]


def _is_nan_code(table, c):
    return table[int(c)] == rf.NAN


def _same(table, a, b):
    """Codes equal, or both NaN (NaN payloads are not part of the contract)."""
    return int(a) == int(b) or (_is_nan_code(table, a) and _is_nan_code(table, b))


# --------------------------------------------------------------------------- names and properties
@pytest.mark.parametrize("name, bits, mx, mn, sub, inf, nan, nz", [
    ("float8_e4m3fn", 8, 448.0, 2.0 ** -6, 2.0 ** -9, False, True, True),
    ("e4m3", 8, 448.0, 2.0 ** -6, 2.0 ** -9, False, True, True),
    ("float8_e4m3", 8, 240.0, 2.0 ** -6, 2.0 ** -9, True, True, True),
    ("float8_e5m2", 8, 57344.0, 2.0 ** -14, 2.0 ** -16, True, True, True),
    ("E5M2", 8, 57344.0, 2.0 ** -14, 2.0 ** -16, True, True, True),
    ("float8_e4m3fnuz", 8, 240.0, 2.0 ** -7, 2.0 ** -10, False, True, False),
    ("float8_e5m2fnuz", 8, 57344.0, 2.0 ** -15, 2.0 ** -17, False, True, False),
    ("float6_e2m3fn", 6, 7.5, 1.0, 0.125, False, False, True),
    ("float6_e3m2fn", 6, 28.0, 0.25, 0.0625, False, False, True),
    ("float4_e2m1fn", 4, 6.0, 1.0, 0.5, False, False, True),
    ("e2m1", 4, 6.0, 1.0, 0.5, False, False, True),
    ("float8_e8m0fnu", 8, 2.0 ** 127, 2.0 ** -127, None, False, True, False),
    ("e8m0", 8, 2.0 ** 127, 2.0 ** -127, None, False, True, False),
    ("bfloat16", 16, float(np.finfo(np.float32).max) * (1 - 2.0 ** -8) / (1 - 2.0 ** -24), 2.0 ** -126,
     2.0 ** -133, True, True, True),
    ("half", 16, 65504.0, 2.0 ** -14, 2.0 ** -24, True, True, True),
    ("float16", 16, 65504.0, 2.0 ** -14, 2.0 ** -24, True, True, True),
    ("tf32", 19, (2 - 2.0 ** -10) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -136, True, True, True),
    ("float32", 32, float(np.finfo(np.float32).max), 2.0 ** -126, 2.0 ** -149, True, True, True),
    ("binary8p3", 8, 49152.0, 2.0 ** -15, 2.0 ** -17, True, True, False),
    ("torch.float8_e4m3fn", 8, 448.0, 2.0 ** -6, 2.0 ** -9, False, True, True),
    ("FLOAT8E4M3FNUZ", 8, 240.0, 2.0 ** -7, 2.0 ** -10, False, True, False),   # ONNX spelling
])
def test_named_formats(name, bits, mx, mn, sub, inf, nan, nz):
    f = P(name)
    assert (f.bits, f.max_finite, f.min_normal, f.min_subnormal) == (bits, mx, mn, sub)
    assert (f.has_inf, f.has_nan, f.has_neg_zero) == (inf, nan, nz)


def test_known_table_lists_every_name_with_limits():
    rows = known_float_formats()
    names = {r["name"] for r in rows}
    assert {"float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn", "bfloat16", "tf32", "binary8p3"} <= names
    for r in rows:
        f = P(r["name"])
        assert (r["max"], r["min_normal"], r["min_subnormal"]) == (f.max_finite, f.min_normal, f.min_subnormal)
        assert r["specials"]


def test_p3109_layout_matches_the_definition():
    f = P("binary8p3")
    assert (f.exp_bits, f.man_bits, f.bias, f.nan_code, f.inf_code) == (5, 2, 16, 0x80, 0x7F)
    u = P("binary8p3u")
    assert (u.signed, u.exp_bits, u.man_bits, u.bias, u.nan_code, u.inf_code) == (False, 6, 2, 32, 0xFF, 0xFE)


# --------------------------------------------------------------------------- exhaustive
@pytest.mark.parametrize("fmt", ALL16, ids=_ids(ALL16))
def test_decode_every_code_against_the_fraction_model(fmt):
    codes = np.arange(1 << fmt.bits)
    got = decode(codes.astype(fmt.dtype), fmt)
    for c, v in rf.code_table(fmt).items():
        g = got[c]
        if v == rf.NAN:
            assert np.isnan(g), (fmt, c)
        elif v in (rf.POS_INF, rf.NEG_INF):
            assert g == (math.inf if v == rf.POS_INF else -math.inf), (fmt, c)
        else:
            assert Fraction(float(g)) == v, (fmt, c, g, v)
            if v == 0:            # the sign of zero: -0 exactly where the code's sign bit is set
                assert (math.copysign(1, g) < 0) == bool(fmt.has_neg_zero and c >> (fmt.bits - 1) == 1)


@pytest.mark.parametrize("fmt", ALL16, ids=_ids(ALL16))
def test_every_code_round_trips(fmt):
    table = rf.code_table(fmt)
    codes = np.arange(1 << fmt.bits).astype(fmt.dtype)
    vals = decode(codes, fmt)
    for ov in ("saturate", "inf", "nan"):
        if (ov == "inf" and not fmt.has_inf) or (ov == "nan" and not fmt.has_nan):
            continue
        ok = ~np.isnan(vals) if not fmt.has_nan else np.ones(vals.shape, bool)
        if ov != "inf":                         # an infinity stays one only under overflow='inf'
            ok &= ~np.isinf(vals)
        back = encode(vals[ok], fmt, overflow=ov)
        assert back.overflows == 0 and back.ties == 0
        for c, b in zip(codes[ok], back.bits):
            expect = c
            v = table[int(c)]
            if isinstance(v, Fraction) and v == 0:       # a flushed subnormal code is a zero
                expect = 0 if not (fmt.has_neg_zero and c >> (fmt.bits - 1)) else c & fmt.sign_bit
            assert _same(table, b, expect), (fmt, int(c), int(b))
        conv = convert(codes[ok], fmt, fmt, overflow=ov)
        assert np.array_equal(conv.bits, back.bits)


@pytest.mark.parametrize("fmt", SMALL, ids=_ids(SMALL))
def test_every_midpoint_and_neighbour_against_the_reference(fmt):
    """All values halfway between neighbouring codes (and one float64 ulp either side) in every
    deterministic mode and every overflow mode the format allows."""
    g = rf.Grid(fmt)
    table = rf.code_table(fmt)
    vals = g.values + [g.virtual]
    mids = [(a + b) / 2 for a, b in zip(vals, vals[1:])] + [g.max * 2, g.values[0] / 2 if g.values[0] else 0]
    xs = []
    for v in mids + vals:
        f = float(v)
        xs += [f, np.nextafter(f, math.inf), np.nextafter(f, -math.inf)]
    xs = np.array(xs + [-x for x in xs] + [math.inf, -math.inf])
    for rnd in [r for r in FLOAT_ROUNDINGS if r != "stochastic"]:
        for ov in ("saturate", "inf", "nan"):
            if (ov == "inf" and not fmt.has_inf) or (ov == "nan" and not fmt.has_nan):
                continue
            got = encode(xs, fmt, rounding=rnd, overflow=ov).bits
            for x, c in zip(xs, got):
                want = rf.round_exact(float(x), fmt, rnd, ov, grid=g)
                assert _same(table, c, want), (str(fmt), rnd, ov, float(x), int(c), want)


# --------------------------------------------------------------------------- property tests
_MODES = [r for r in FLOAT_ROUNDINGS if r != "stochastic"]


@st.composite
def _case(draw):
    fmt = draw(st.sampled_from(ALL16))
    g = rf.Grid(fmt)
    k = draw(st.integers(0, len(g.values) - 1))
    near = float(g.values[k]) * draw(st.sampled_from([1.0, 1.0 + 2.0 ** -12, 1 - 2.0 ** -12]))
    mid = float((g.values[k] + (g.values[k + 1] if k + 1 < len(g.values) else g.virtual)) / 2)
    x = draw(st.one_of(st.floats(allow_nan=False, width=64), st.just(near), st.just(mid), st.just(-mid)))
    ovs = ["saturate"] + (["inf"] if fmt.has_inf else []) + (["nan"] if fmt.has_nan else [])
    return fmt, g, x, draw(st.sampled_from(_MODES)), draw(st.sampled_from(ovs)), \
        draw(st.sampled_from(["keep", "flush_output", "flush_input", "flush_both"]))


@given(_case())
def test_every_mode_against_the_reference(case):
    fmt, g, x, rnd, ov, sub = case
    got = encode(np.array([x]), fmt, rounding=rnd, overflow=ov, subnormals=sub)
    daz = 2.0 ** -1022 if sub in ("flush_input", "flush_both") else None
    want = rf.round_exact(x, fmt, rnd, ov, ftz=sub in ("flush_output", "flush_both"),
                          daz_threshold=daz, grid=g)
    assert _same_code(fmt, got.bits[0], want), (str(fmt), x, rnd, ov, sub, int(got.bits[0]), want)


def _same_code(fmt, a, b):
    return int(a) == int(b) or (rf.code_value(fmt, int(a)) == rf.NAN and rf.code_value(fmt, int(b)) == rf.NAN)


@given(_case(), st.integers(1, 20), st.integers(0, 2 ** 32))
def test_stochastic_against_the_reference_with_the_same_draws(case, random_bits, seed):
    fmt, g, x, _, ov, _ = case
    xs = np.full(8, x)
    got = encode(xs, fmt, rounding="stochastic", overflow=ov, seed=seed, random_bits=random_bits)
    again = encode(xs, fmt, rounding="stochastic", overflow=ov, seed=seed, random_bits=random_bits)
    assert np.array_equal(got.bits, again.bits)                        # same seed, same bits
    u = random_stream(seed, xs.size, random_bits)
    for c, ui in zip(got.bits, u):
        want = rf.round_exact(x, fmt, "stochastic", ov, u=int(ui), random_bits=random_bits, grid=g)
        assert _same_code(fmt, c, want), (str(fmt), x, int(c), want)


def test_stochastic_probability_is_the_truncated_fraction_exactly():
    """x = 1 + 5/16 ulp in E4M3 (ulp 1/8 at 1): with R = 4 bits it rounds up iff u >= 16 - 5."""
    fmt = P("float8_e4m3fn")
    x = 1.0 + 5 / 16 * 0.125
    n = 20000
    got = encode(np.full(n, x), fmt, rounding="stochastic", seed=7, random_bits=4)
    ups = int((got.bits == 0x39).sum())
    assert set(np.unique(got.bits)) <= {0x38, 0x39}
    assert ups == int((random_stream(7, n, 4) >= 11).sum())
    assert abs(ups / n - 5 / 16) < 0.02
    # with R = 2 the fraction 5/16 truncates to 1/4
    got2 = encode(np.full(n, x), fmt, rounding="stochastic", seed=7, random_bits=2)
    assert int((got2.bits == 0x39).sum()) == int((random_stream(7, n, 2) >= 3).sum())


def test_counts():
    fmt = P("float8_e4m3fn")
    x = np.array([1.0, 1.0625, 1e6, -1e6, 2.0 ** -12, -(2.0 ** -10), np.nan, 0.0, 2.0 ** -8, np.inf])
    r = encode(x, fmt, overflow="saturate", subnormals="flush_output")
    assert (r.overflows, r.underflows, r.ties, r.nans) == (3, 3, 2, 1)   # ties: 1.0625, -2^-10 (to -0)
    assert r.bits[2] == 0x7E and r.bits[3] == 0xFE and r.bits[8] == 0


def test_float32_and_float16_inputs_are_exact_and_flush_input_uses_their_normal_range():
    x16 = np.array([2.0 ** -20, 2.0 ** -10], np.float16)
    fmt = FloatFormat(8, 10)
    assert np.array_equal(decode(encode(x16, fmt).bits, fmt), x16.astype(np.float64))
    assert decode(encode(x16, fmt, subnormals="flush_input").bits, fmt).tolist() == [0.0, 2.0 ** -10]


def test_one_rounding_not_two():
    """A value just above an E4M3 tie that float32 would round onto the tie (double rounding)."""
    fmt = P("float8_e4m3fn")
    x = 1.0625 + 2.0 ** -40                     # 1 + ulp/2 + tiny: rounds up; via float32 it is a tie -> 1.0
    assert encode(np.array([x]), fmt).bits[0] == 0x39
    assert encode(np.array([x], np.float64).astype(np.float32), fmt).bits[0] == 0x38


def test_float32_target_matches_numpy_cast():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-45, 39, 20000),
                        [3.4028235677973366e38, 3.4028235677973362e38, 1e39, 2.0 ** -150, 2.0 ** -149 * 1.5]])
    got = encode(x, "float32", overflow="inf").bits
    with np.errstate(over="ignore"):
        assert np.array_equal(got, x.astype(np.float32).view(np.uint32))


# --------------------------------------------------------------------------- ml_dtypes, live
def _float32_probe(fmt, seed=0):
    """Dense float32 windows (129 bit patterns) around every code value and every midpoint, a
    random sample of all float32 bit patterns, and every bfloat16 and float16 value."""
    vals = decode(np.arange(1 << fmt.bits).astype(fmt.dtype), fmt)
    vals = np.unique(np.abs(vals[np.isfinite(vals)]))
    pts = np.concatenate([vals, (vals[1:] + vals[:-1]) / 2, [vals[-1] * 1.0625, vals[-1] * 2]])
    pts = pts[pts < 3e38].astype(np.float32).view(np.int32)
    win = (pts[:, None] + np.arange(-64, 65)[None, :]).ravel()
    win = win[(win >= 0) & (win < 0x7F800000)]
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2 ** 32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.int32)
    b16 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.int32)
    h16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.int32)
    pos = win.astype(np.uint32)
    allbits = np.concatenate([pos, pos | np.uint32(0x80000000), rand.view(np.uint32), b16.view(np.uint32),
                              h16.view(np.uint32)])
    return allbits.view(np.float32)


#: (ml_dtypes name, our overflow mode, our rounding): ml_dtypes overflows to Inf where the format
#: has Inf, else to NaN, except the MX types without NaN, which saturate; E8M0 rounds ties away
_ML = [("float8_e4m3fn", "nan", "half_even"), ("float8_e5m2", "inf", "half_even"),
       ("float8_e4m3fnuz", "nan", "half_even"), ("float8_e5m2fnuz", "nan", "half_even"),
       ("float8_e4m3", "inf", "half_even"), ("float8_e3m4", "inf", "half_even"),
       ("float8_e4m3b11fnuz", "nan", "half_even"),
       ("float6_e2m3fn", "saturate", "half_even"), ("float6_e3m2fn", "saturate", "half_even"),
       ("float4_e2m1fn", "saturate", "half_even"), ("float8_e8m0fnu", "nan", "half_away"),
       ("bfloat16", "inf", "half_even"), ("float16", "inf", "half_even")]


@pytest.mark.parametrize("name, ov, rnd", _ML, ids=[m[0] for m in _ML])
def test_against_ml_dtypes(name, ov, rnd):
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    dt = np.dtype(getattr(ml, name)) if name not in ("float16",) else np.dtype(np.float16)
    fmt = P(name)
    # every code decoded
    codes = np.arange(1 << fmt.bits).astype(fmt.dtype)
    theirs = codes.view(dt).astype(np.float64)
    ours = decode(codes, fmt)
    both_nan = np.isnan(theirs) & np.isnan(ours)
    assert np.array_equal(np.signbit(theirs[~both_nan]), np.signbit(ours[~both_nan]))
    assert np.array_equal(theirs[~both_nan], ours[~both_nan])
    # float32 inputs
    x = _float32_probe(fmt)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dt).view(fmt.dtype)
    got = encode(x, fmt, rounding=rnd, overflow=ov).bits
    diff = got != want
    diff &= ~(np.isnan(decode(got, fmt)) & np.isnan(want.view(dt).astype(np.float64)))
    assert not diff.any(), (name, x[diff][:5], got[diff][:5], want[diff][:5])


# --------------------------------------------------------------------------- gfloat, live
def _gfloat_cases():
    return [("format_info_ocp_e4m3", "float8_e4m3fn"), ("format_info_ocp_e5m2", "float8_e5m2"),
            ("format_info_ocp_e2m3", "float6_e2m3fn"), ("format_info_ocp_e3m2", "float6_e3m2fn"),
            ("format_info_ocp_e2m1", "float4_e2m1fn"), ("format_info_ocp_e8m0", "float8_e8m0fnu"),
            ((8, 3), "binary8p3"), ((8, 4), "binary8p4"), ((8, 1), "binary8p1"), ((8, 7), "binary8p7"),
            ((8, 3, "u"), "binary8p3u"), ((6, 3), "binary6p3")]


@pytest.mark.parametrize("info, name", _gfloat_cases(), ids=[c[1] for c in _gfloat_cases()])
def test_against_gfloat(info, name):
    gf = pytest.importorskip("gfloat", reason="gfloat is not installed")
    import gfloat.formats  # noqa: F401
    from gfloat.formats import format_info_p3109
    from gfloat.types import Signedness
    if isinstance(info, tuple):
        fi = format_info_p3109(info[0], info[1], Signedness.Unsigned if len(info) == 3 else Signedness.Signed)
    else:
        fi = getattr(gf.formats, info)
    fmt = P(name)
    vals = decode(np.arange(1 << fmt.bits).astype(fmt.dtype), fmt)
    for c, v in enumerate(vals):                                 # decode vs gfloat.decode_float
        theirs = gf.decode_float(fi, c).fval
        assert (np.isnan(v) and np.isnan(theirs)) or (v == theirs and np.signbit(v) == np.signbit(theirs)), (name, c)
    fin = np.unique(vals[np.isfinite(vals)])
    rng = np.random.default_rng(1)
    xs = np.concatenate([fin, (fin[1:] + fin[:-1]) / 2, fin * (1 + rng.uniform(-0.2, 0.2, fin.size)),
                         [fin[-1] * 1.2, fin[-1] * 4, math.inf]])
    if fmt.signed:
        xs = np.concatenate([xs, -xs])
    else:
        xs = xs[xs > 0]
    modes = {"toward_zero": gf.RoundMode.TowardZero, "floor": gf.RoundMode.TowardNegative,
             "ceil": gf.RoundMode.TowardPositive, "half_even": gf.RoundMode.TiesToEven,
             "half_away": gf.RoundMode.TiesToAway}
    for rnd, gmode in modes.items():
        for sat in (True, False):
            if not sat and not (fmt.has_inf or fmt.has_nan):
                continue
            ov = "saturate" if sat else ("inf" if fmt.has_inf else "nan")
            got = encode(xs, fmt, rounding=rnd, overflow=ov).bits
            for x, c in zip(xs, got):
                want = gf.encode_float(fi, gf.round_float(fi, float(x), gmode, sat))
                assert int(c) == want or (np.isnan(vals[int(c)]) and np.isnan(vals[want])), \
                    (name, rnd, sat, float(x), int(c), want)
    # stochastic rounding: gfloat's StochasticFastest with the same random draws
    R = 5
    got = encode(xs, fmt, rounding="stochastic", overflow="saturate", seed=11, random_bits=R).bits
    u = random_stream(11, xs.size, R)
    for x, c, ui in zip(xs, got, u):
        want = gf.encode_float(fi, gf.round_float(fi, float(x), gf.RoundMode.StochasticFastest, True,
                                                  int(ui), R))
        assert int(c) == want or (np.isnan(vals[int(c)]) and np.isnan(vals[want])), (name, float(x), int(c), want)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, exc, word", [
    (lambda: P("float8_e4m3xyz"), ValueError, "float8_e4m3fn"),           # unknown: lists known names
    (lambda: P("nonsense"), ValueError, "known names"),
    (lambda: P(8), TypeError, "string"),
    (lambda: FloatFormat(20, 20), ValueError, "exceed"),
    (lambda: FloatFormat(0, 3), ValueError, "exp_bits"),
    (lambda: FloatFormat(4, -1), ValueError, "man_bits"),
    (lambda: FloatFormat(4, 3, bias=2000), ValueError, "bias"),
    (lambda: FloatFormat(11, 20, bias=-1000), ValueError, "bias"),
    (lambda: FloatFormat(4, 3, encoding="posit"), ValueError, "encoding"),
    (lambda: FloatFormat(8, 0, encoding="fnu"), ValueError, "signed"),
    (lambda: FloatFormat(4, 3, signed=False, encoding="fnuz"), ValueError, "signed"),
    (lambda: FloatFormat(4.0, 3), TypeError, "exp_bits"),
    (lambda: FloatFormat(1, 0, encoding="fn"), ValueError, "no finite"),
    (lambda: encode([1.0], "float8_e4m3fn", overflow="inf"), ValueError, "infinity"),
    (lambda: encode([1.0], "float4_e2m1fn", overflow="nan"), ValueError, "NaN"),
    (lambda: encode([1.0], "float8_e5m2", overflow="wrap"), ValueError, "saturate"),
    (lambda: encode([np.nan], "float8_e4m3fn", nan="error"), ValueError, "NaN"),
    (lambda: encode([np.nan], "float4_e2m1fn"), ValueError, "no NaN"),
    (lambda: encode([1.0], "float8_e5m2", rounding="sideways"), ValueError, "odd"),
    (lambda: encode([1.0], "float8_e5m2", subnormals="sometimes"), ValueError, "subnormals"),
    (lambda: encode([1.0], "float8_e5m2", rounding="stochastic", random_bits=0), ValueError, "random_bits"),
    (lambda: encode([1.0], "float8_e5m2", random_bits=4), ValueError, "stochastic"),
    (lambda: encode([1.0], "float8_e5m2", rounding="stochastic", seed=-1), TypeError, "seed"),
    (lambda: encode(["a"], "float8_e5m2"), TypeError, "dtype"),
    (lambda: encode([1.0], 3), TypeError, "FloatFormat"),
    (lambda: decode([256], "float8_e5m2"), ValueError, "codes"),
    (lambda: decode([1.5], "float8_e5m2"), TypeError, "integers"),
])
def test_bad_input(call, exc, word):
    with pytest.raises(exc) as info:
        call()
    assert word in str(info.value), str(info.value)

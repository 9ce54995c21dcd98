"""``add``, ``mul`` and ``concat`` graph ops with their own requantization, on every scheme, against an
independent model in Python integers (tests/reference.py's gemmlowp functions and exact rounding): TFLite's
ADD / MUL / QUANTIZE arithmetic for the ``tflite-*`` schemes, one rounding of the float64 result for ``float``,
exact power-of-two alignment for ``shift``. (TFLite's ADD/MUL/QUANTIZE kernels themselves are checked live
against LiteRT in tests/io.)
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.graph.ir import Datapath, IntegerGraph, Node, TensorSpec
from reference import ref_mbqm, ref_quantize_multiplier, ref_wrap32, round_fraction

ROUNDINGS = ["half_up", "half_even", "half_away", "floor", "toward_zero", "ceil"]


def f32(v) -> float:
    return float(np.float32(v))


def ref_add_tflite(a, za, sa, b, zb, sb, zy, sy, single):
    sa, sb, sy = f32(sa), f32(sb), f32(sy)
    twice = 2.0 * max(sa, sb)
    (m1, e1), (m2, e2), (mo, eo) = (ref_quantize_multiplier(r, single) for r in
                                    (sa / twice, sb / twice, twice / ((1 << 20) * sy)))
    mode = "single" if single else "double"
    v1 = ref_mbqm(ref_wrap32((a - za) << 20), m1, e1, mode)
    v2 = ref_mbqm(ref_wrap32((b - zb) << 20), m2, e2, mode)
    return ref_mbqm(ref_wrap32(v1 + v2), mo, eo, mode) + zy


def ref_mul_tflite(a, za, sa, b, zb, sb, zy, sy, single):
    real = f32(f32(f32(sa) * f32(sb)) / f32(sy))
    m, e = ref_quantize_multiplier(real, single)
    return ref_mbqm((a - za) * (b - zb), m, e, "single" if single else "double") + zy


def ref_float(terms, sy, zy, rounding):
    """round(fl64(sum of fl64((x - z) * fl64(s / sy)))) exactly, + zy: Python floats are IEEE float64."""
    total = 0.0
    for off, s in terms:
        total = total + float(off) * (s / sy)
    return round_fraction(Fraction(total), rounding) + zy


def ref_shift(terms, sy, zy, rounding):
    exps = [round(np.log2(s / sy)) for _, s in terms]
    k = max(0, -min(exps))
    acc = sum(off * 2 ** (e + k) for (off, _), e in zip(terms, exps))
    return round_fraction(Fraction(acc, 2 ** k), rounding) + zy


def graph(op, specs, out, attrs=None):
    tensors = [TensorSpec(f"x{i}", 8, True, shape, s, z) for i, (shape, s, z) in enumerate(specs)]
    tensors.append(TensorSpec("y", 8, True, out[0], out[1], out[2]))
    return IntegerGraph(tensors, [Node("n", op, [t.name for t in tensors[:-1]], ["y"], attrs or {})],
                        [t.name for t in tensors[:-1]], ["y"])


codes = st.lists(st.integers(-128, 127), min_size=6, max_size=6)
scales = st.floats(0.004, 0.5)
zps = st.integers(-20, 20)


@given(op=st.sampled_from(["add", "mul"]), a=codes, b=codes, sa=scales, sb=scales, sy=scales, za=zps, zb=zps,
       zy=zps, scheme=st.sampled_from(["tflite-double", "tflite-single", "float", "shift"]),
       rounding=st.sampled_from(ROUNDINGS), relu=st.booleans())
def test_binary_ops_match_the_independent_model(op, a, b, sa, sb, sy, za, zb, zy, scheme, rounding, relu):
    if scheme == "shift":            # powers of two only
        sa, sb, sy = (2.0 ** round(np.log2(v)) for v in (sa, sb, sy))
    if op == "mul":
        sy = sy * 4                  # keep products mostly inside the output range
    g = graph(op, [((6,), sa, za), ((6,), sb, zb)], ((6,), sy, zy), {"activation": "relu" if relu else "none"})
    if op == "add" and scheme.startswith("tflite") and not 0 < 2 * max(f32(sa), f32(sb)) / ((1 << 20) * f32(sy)) < 1:
        return
    xa, xb = np.array([a], np.int8), np.array([b], np.int8)
    got = g.run([xa, xb], Datapath(requantization=scheme, rounding=rounding))[0].tolist()
    lo = max(-128, zy) if relu else -128
    want = []
    for p, q in zip(a, b):
        if scheme.startswith("tflite"):
            fn = ref_add_tflite if op == "add" else ref_mul_tflite
            v = fn(p, za, sa, q, zb, sb, zy, sy, scheme == "tflite-single")
        elif op == "add":
            terms = [(p - za, float(np.float32(sa))), (q - zb, float(np.float32(sb)))]
            ref = ref_float if scheme == "float" else ref_shift
            v = ref(terms, float(np.float32(sy)), zy, rounding)
        else:
            prod_scale = float(np.float32(sa)) * float(np.float32(sb))
            ref = ref_float if scheme == "float" else ref_shift
            v = ref([((p - za) * (q - zb), prod_scale)], float(np.float32(sy)), zy, rounding)
        want.append(min(max(v, lo), 127))
    assert got == want


@given(a=st.lists(st.integers(-128, 127), min_size=4, max_size=4),
       b=st.lists(st.integers(-128, 127), min_size=2, max_size=2), sa=scales, sy=scales, za=zps, zy=zps,
       scheme=st.sampled_from(["tflite-double", "float", "shift"]), rounding=st.sampled_from(ROUNDINGS))
def test_concat_copies_codes_on_the_output_grid_and_requantizes_the_others(a, b, sa, sy, za, zy, scheme, rounding):
    if scheme == "shift":
        sa, sy = (2.0 ** round(np.log2(v)) for v in (sa, sy))
    g = graph("concat", [((2, 2), sa, za), ((2, 1), sy, zy)], ((2, 3), sy, zy), {"axis": 1})
    xa = np.array(a, np.int8).reshape(1, 2, 2)
    xb = np.array(b, np.int8).reshape(1, 2, 1)
    got = g.run([xa, xb], Datapath(requantization=scheme, rounding=rounding))
    assert got.shape == (1, 2, 3)
    assert got[0, :, 2].tolist() == b                       # same grid: copied
    for v, c in zip(got[0, :, :2].reshape(-1).tolist(), a):
        if (f32(sa), za) == (f32(sy), zy):
            want = c
        elif scheme == "tflite-double":                     # TFLite QUANTIZE int8 -> int8
            m, e = ref_quantize_multiplier(float(np.float64(f32(sa)) / np.float64(f32(sy))))
            want = ref_mbqm(c - za, m, e, "double") + zy
        else:
            ref = ref_float if scheme == "float" else ref_shift
            want = ref([(c - za, f32(sa))], f32(sy), zy, rounding)
        assert v == min(max(want, -128), 127)


def test_tflite_add_and_requantizing_concat_refuse_multiplier_knobs():
    from fxpsim import preset
    g = graph("add", [((4,), 0.1, 0), ((4,), 0.2, 0)], ((4,), 0.3, 0))
    x = [np.zeros((1, 4), np.int8)] * 2
    with pytest.raises(ValueError, match="multiplier_bits"):
        g.run(x, preset("tflite-int8").replace(multiplier_bits=16))
    c = graph("concat", [((2,), 0.1, 0), ((2,), 0.2, 0)], ((4,), 0.2, 0), {"axis": 0})
    with pytest.raises(ValueError, match="requantization_rounding"):
        c.run([np.zeros((1, 2), np.int8)] * 2, preset("tflite-int8").replace(requantization_rounding="half_even"))
    # mul models both knobs (through its Requantizer): no error, and a 16-bit multiplier changes results
    m = graph("mul", [((4,), 0.1, 0), ((4,), 0.3, 0)], ((4,), 0.05, 0))
    xs = [np.array([[10, -7, 13, 3]], np.int8), np.array([[9, 11, -12, 5]], np.int8)]
    wide, narrow = m.run(xs, preset("tflite-int8")), m.run(xs, preset("tflite-int8").replace(multiplier_bits=4))
    real = f32(f32(f32(0.1) * f32(0.3)) / f32(0.05))
    exact = [round_fraction(Fraction(real) * (int(p) * int(q)), "half_away") for p, q in zip(xs[0][0], xs[1][0])]
    assert wide[0].tolist() == [min(max(v, -128), 127) for v in exact]
    assert not np.array_equal(wide, narrow)


def test_bad_elementwise_nodes_are_rejected():
    with pytest.raises(ValueError, match="2 input"):
        graph("mul", [((4,), 0.1, 0)], ((4,), 0.1, 0))
    with pytest.raises(ValueError, match="axis"):
        graph("concat", [((4,), 0.1, 0), ((4,), 0.1, 0)], ((8,), 0.1, 0), {"axis": 3})
    g = graph("add", [((4,), 0.1, 0), ((4,), 0.1, 0)], ((4,), 0.1, 0))
    with pytest.raises(ValueError, match="requantization scheme"):
        g.run([np.zeros((1, 4), np.int8)] * 2, Datapath(requantization="magic"))

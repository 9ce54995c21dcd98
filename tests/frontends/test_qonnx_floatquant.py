"""QONNX ``FloatQuant`` (minifloat) through fxpsim.import_qonnx: live against qonnx's execution and against the
independent Fraction model of ``tests/qonnx_reference.py`` (``float_quant``).

* live: graphs built with ``onnx.helper``, run by qonnx's ``execute_onnx`` (every tensor of the model); bit for bit
  where float32 is exact (power-of-two scales, nearest rounding, small sums);
* hypothesis: one FloatQuant on random exact inputs, every exponent/mantissa width and bias, ``max_val``, every
  rounding mode -- subnormals, saturation and ties included -- against the Fraction model;
* the case where qonnx's float32 ``log2`` takes the wrong binade (directed rounding just below a power of two);
* refusals that name the node.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")

from fxpsim.frontends.qonnx.importer import exact_values, import_qonnx  # noqa: E402
import qonnx_reference as R  # noqa: E402
from test_qonnx_import import D, Model as QuantModel, qonnx_context  # noqa: E402

F32 = np.float32


class Model(QuantModel):
    """test_qonnx_import's builder with a FloatQuant node."""

    def fq(self, x, out, scale=1.0, e=4, m=3, bias=7, max_val=None, mode="ROUND", **attrs) -> str:
        if max_val is None:
            max_val = (2 - 2.0 ** -m) * 2.0 ** (2 ** e - 1 - bias)
        ins = [x, self.c(scale), self.c(e), self.c(m), self.c(bias), self.c(max_val)]
        attrs = {"has_inf": 0, "has_nan": 0, "has_subnormal": 1, "saturation": 1, **attrs}   # qonnx requires them
        return self.node("FloatQuant", ins, out, D, rounding_mode=mode, **attrs)


def f32(fr):
    return np.vectorize(lambda f: F32(float(f)), otypes=[F32])(fr)


def check(model, x, live=True):
    """Every tensor: fxpsim's exact value == the Fraction model; with ``live``, its float32 == qonnx's."""
    net = import_qonnx(model)
    y, _, kept = net.run(x, keep=True)
    ref = R.evaluate(model, {"x": x})
    ctx = qonnx_context(model, x) if live else {}
    compared = 0
    for name, g in net.meta["qonnx"]["tensors"].items():
        if g not in kept or g not in net.meta["qonnx"]["scales"]:
            continue
        exact = exact_values(net, g, kept[g])
        bad = np.nonzero(exact != ref[name])
        assert bad[0].size == 0, f"{name}: fxpsim {exact[bad][:3]} vs reference {ref[name][bad][:3]}"
        if live and name in ctx:
            assert np.array_equal(f32(exact), ctx[name]), f"{name} differs from qonnx"
            compared += 1
    assert np.array_equal(y, f32(ref[model.graph.output[0].name]))
    if live:
        assert np.array_equal(y, ctx[model.graph.output[0].name])
    return net, y, compared


def _x(shape, seed=0, spread=6):
    """float32 inputs over many binades (subnormals of E4M3 to beyond its max) and exact zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-spread - 6, spread, shape)
    x[rng.random(shape) < 0.05] = 0.0
    return x.astype(F32)


# ----------------------------------------------------------------------------------------- live vs qonnx
@pytest.mark.parametrize("mode", ["ROUND", "HALF_UP", "HALF_DOWN"])
@pytest.mark.parametrize("e,m,bias,max_val", [(4, 3, 7, 448.0), (4, 3, 7, None), (5, 2, 15, 57344.0),
                                              (3, 2, 3, None), (2, 1, 1, 6.0), (4, 3, 11, None), (3, 4, 1, None)])
def test_single_floatquant_matches_qonnx_bit_for_bit(e, m, bias, max_val, mode):
    mdl = Model()
    mdl.fq("x", "y", scale=F32(2.0 ** -2), e=e, m=m, bias=bias, max_val=max_val, mode=mode)
    model = mdl.build([4, 64])
    _, _, compared = check(model, _x((4, 64), seed=e * 10 + m))
    assert compared == 1


def test_floatquant_mlp_weights_and_activations_matches_qonnx():
    """x -> FloatQuant(E4M3) ; W -> FloatQuant(E4M3, per-channel power-of-two scales) ; MatMul ; Relu ;
    FloatQuant(E5M2-like) -> MatMul with Quant'd integer weights: every tensor against qonnx."""
    rng = np.random.default_rng(3)
    mdl = Model()
    mdl.fq("x", "q0", scale=F32(2.0 ** -3), e=4, m=3, bias=7, max_val=448.0)
    ws = (2.0 ** -rng.integers(0, 3, (1, 8))).astype(F32)
    mdl.fq(mdl.c(rng.standard_normal((16, 8))), "wq", scale=ws, e=4, m=3, bias=7, max_val=448.0)
    mdl.node("MatMul", ["q0", "wq"], "mm")
    mdl.node("Relu", ["mm"], "r")
    mdl.fq("r", "q1", scale=F32(1.0), e=5, m=2, bias=15, max_val=57344.0)
    mdl.node("MatMul", ["q1", mdl.c(rng.integers(-3, 4, (8, 3)).astype(np.float64))], "y")
    x = (np.round(rng.standard_normal((5, 16)) * 8) / 8).astype(F32)
    _, _, compared = check(mdl.build([5, 16]), x)
    assert compared >= 4


def test_floatquant_after_an_integer_quant_reads_codes_exactly():
    """An activation already on an integer grid (Quant, non-power-of-two scale) into FloatQuant: exact rationals
    against the Fraction model (float32 of x/s differs, so no live comparison)."""
    mdl = Model()
    mdl.node("Quant", ["x", mdl.c(F32(0.0371)), mdl.c(0), mdl.c(8)], "q0", D, signed=1, narrow=0,
             rounding_mode="ROUND")
    mdl.fq("q0", "y", scale=F32(0.3), e=3, m=2, bias=3, max_val=14.0, mode="FLOOR")
    check(mdl.build([3, 20]), _x((3, 20), seed=5, spread=2), live=False)


def test_qonnx_float32_log2_takes_the_wrong_binade_just_below_a_power_of_two():
    """x = 8 - 2^-21 (float32): log2 rounds to 3.0 in float32, so qonnx floors on the quantum of [8, 16);
    fxpsim (and the Fraction model) use [4, 8): 7.5, where qonnx gives 7."""
    x = np.array([[np.nextafter(F32(8), F32(0)), F32(3.0), F32(-0.001)]], F32)
    mdl = Model()
    mdl.fq("x", "y", e=4, m=3, bias=7, mode="FLOOR")
    model = mdl.build([1, 3])
    net, y, _ = check(model, x, live=False)
    assert y[0, 0] == 7.5
    ctx = qonnx_context(model, x)
    assert ctx["y"][0, 0] == 7.0 and np.array_equal(ctx["y"][0, 1:], y[0, 1:])


# ----------------------------------------------------------------------------------------- Fraction model
_MODES = ("ROUND", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


@st.composite
def _case(draw):
    e = draw(st.integers(1, 5))
    m = draw(st.integers(0, 4))
    bias = draw(st.integers(-3, 2 ** e + 2))
    top = (2 - Fraction(1, 2 ** m)) * Fraction(2) ** (2 ** e - 1 - bias)
    unit = Fraction(2) ** (1 - bias - m)
    max_units = draw(st.integers(1, int(top / unit)))
    assume(top / unit < 2 ** 20)
    grid = unit / 8                                                # finer than the format: ties and sticky bits
    k = int(top / grid)
    vals = draw(st.lists(st.one_of(st.integers(-k - 64, k + 64), st.integers(-64, 64),
                                   st.sampled_from([0, 4, -4, 12, -12, 20])), min_size=1, max_size=12))
    xs = [float(v * grid) for v in vals]
    return e, m, bias, float(max_units * unit), draw(st.sampled_from(_MODES)), xs


@given(_case())
def test_floatquant_against_the_fraction_model(case):
    e, m, bias, max_val, mode, xs = case
    x = np.array([xs], F32)
    assume(np.array_equal(x.astype(np.float64), np.array([xs])))   # float32 inputs only
    mdl = Model()
    mdl.fq("x", "y", scale=F32(1.0), e=e, m=m, bias=bias, max_val=max_val, mode=mode)
    check(mdl.build([1, len(xs)]), x, live=False)


def test_hand_table_e2m1_subnormal_tie_and_saturation():
    """E2M1 (bias 1): values 0, 0.5 (subnormal), 1, 1.5, 2, 3, 4, 6. Ties to even, then saturation at 6."""
    x = np.array([[0.25, 0.75, 1.25, 1.75, 2.5, 5.0, 7.0, 100.0, -0.25, -5.0, -1e9]], F32)
    mdl = Model()
    mdl.fq("x", "y", e=2, m=1, bias=1)
    _, y, _ = check(mdl.build([1, 11]), x)
    assert y.tolist() == [[0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 6.0, 6.0, -0.0, -4.0, -6.0]]


# ----------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("attrs,frag", [({"saturation": 0, "has_inf": 1}, "saturation=0"),
                                        ({"signed": 0}, "signed=0"),
                                        ({"rounding_mode": "STOCHASTIC"}, "rounding mode"),
                                        ({"zzz": 1}, "attribute 'zzz'")])
def test_refused_attributes_name_the_node(attrs, frag):
    mdl = Model()
    attrs = dict(attrs)     # the parametrize dict is shared by every run of the test in one process (mutmut)
    mode = attrs.pop("rounding_mode", "ROUND")
    mdl.fq("x", "y", mode=mode, **attrs)
    with pytest.raises(ValueError, match=frag) as err:
        import_qonnx(mdl.build([1, 4]))
    assert "n0_FloatQuant" in str(err.value)


def test_max_val_off_the_grid_and_fractional_widths_are_refused():
    mdl = Model()
    mdl.fq("x", "y", e=4, m=3, bias=7, max_val=300.3)
    with pytest.raises(ValueError, match="not a multiple of the smallest subnormal"):
        import_qonnx(mdl.build([1, 4]))
    mdl = Model()
    mdl.fq("x", "y", e=4.5, m=3, bias=7, max_val=8.0)
    with pytest.raises(ValueError, match="exponent bit width must be an integer"):
        import_qonnx(mdl.build([1, 4]))


def test_has_subnormal_0_and_has_inf_inform_backends_only_as_in_qonnx():
    """qonnx computes subnormals and the all-ones exponent whatever has_subnormal / has_inf say; so does fxpsim,
    and the graph's notes say so."""
    mdl = Model()
    mdl.fq("x", "y", e=4, m=3, bias=7, has_subnormal=0, has_inf=1)
    x = np.array([[2.0 ** -8, 3 * 2.0 ** -9, 2.0 ** -10, 400.0, 470.0, 1e4]], F32)   # subnormals, top binade
    net, y, _ = check(mdl.build([1, 6]), x)
    assert y.tolist() == [[2.0 ** -8, 3 * 2.0 ** -9, 0.0, 384.0, 480.0, 480.0]]
    assert any("has_inf=1, has_subnormal=0 only informs backends" in note for note in net.meta["notes"])


def test_a_saved_graph_runs_in_a_fresh_process(tmp_path):
    """load_graph in a new interpreter finds qonnx_floatquant through OP_PROVIDERS."""
    import subprocess
    import sys
    from pathlib import Path
    mdl = Model()
    mdl.fq("x", "y", scale=F32(0.5), e=3, m=2, bias=3)
    net = import_qonnx(mdl.build([2, 30]))
    x = _x((2, 30), seed=9, spread=3)
    path = net.save(tmp_path / "g.npz")
    np.save(tmp_path / "x.npy", x)
    code = ("import numpy as np; from fxpsim.graph.ir import load_graph; "
            f"g = load_graph({str(path)!r}); np.save({str(tmp_path / 'y.npy')!r}, g.run(np.load({str(tmp_path / 'x.npy')!r})))")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={"PYTHONPATH": str(root)})
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), net.run(x))

"""MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, RSQRT, PRELU, ELU, LOG_SOFTMAX, SUM and REDUCE_MAX against LiteRT in every
kernel set, and their integer arithmetic against independent models.

* The converter's models of ``tests/vectors/tflite_math`` (``tools/fixtures/tflite_math``), live in LiteRT on
  random inputs with the code extremes: every output bit for bit, every intermediate tensor of the reference and
  builtin runs (XNNPACK fuses its intermediates).
* Hand-built one-op models with hypothesis-drawn scales, zero points, shapes and axes, live in all three kernel
  sets on exhaustive inputs (every code; every pair of codes for the binary ops, by broadcasting).
* Each kernel set's Prepare: what LiteRT refuses (or aborts on, in a subprocess) fxpsim refuses at import with the
  reason; what it runs fxpsim runs; where fxpsim does not reproduce a kernel set (ELU and SUM under BUILTIN_REF),
  the refusal's reason is checked against LiteRT itself.
* The kernels against models written here from the formulas in Python integers / ``Fraction`` / float32 scalars.
"""
from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxpsim
from fxpsim.datapath import tflite as K
from fxpsim.graph import load_graph
from reference import ref_mbqm, ref_quantize_multiplier

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import _act, _const, _litert, _options, build_tflite, INT8  # noqa: E402
from test_tflite_more_ops import _compare_live, _feeds, _interpreter  # noqa: E402

KERNELS = ("reference", "builtin", "xnnpack")
MODELS_DIR = Path(__file__).resolve().parents[1] / "vectors" / "tflite_math"
MODELS = sorted(p.stem for p in MODELS_DIR.glob("*.tflite"))
CODES = np.arange(-128, 128, dtype=np.int8)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
scales = st.floats(-3.0, -0.3).map(lambda e: float(np.float32(10 ** e)))
zero_points = st.integers(-128, 127)


def test_fixtures_present():
    assert {"maximum_minimum", "squared_difference", "squared_difference_wide", "rsqrt", "rsqrt_layer_norm",
            "prelu", "prelu_per_element", "log_softmax", "log_softmax_small_scale", "sum_reduce_max",
            "sum_saturating"} <= set(MODELS)
    assert sum((MODELS_DIR / f"{m}.tflite").stat().st_size for m in MODELS) < 100_000


OP_OF = {"maximum_minimum": "tflite_maximum", "squared_difference": "tflite_squared_difference",
         "rsqrt": "tflite_rsqrt", "prelu": "tflite_prelu", "log_softmax": "tflite_log_softmax",
         "sum": "tflite_sum"}


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", MODELS)
def test_converter_models_equal_live_litert(name, kernels):
    path = MODELS_DIR / f"{name}.tflite"
    if name.startswith("sum") and kernels == "reference":
        with pytest.raises(ValueError, match="SUM x.*LiteRT 2.3.0's reference int8 SUM"):
            fxpsim.import_tflite(path, kernels=kernels)
        return
    g = fxpsim.import_tflite(path, kernels=kernels)
    op = next(v for k, v in OP_OF.items() if name.startswith(k))
    assert op in [n.op for n in g.nodes]
    _compare_live(g, path, kernels, _feeds(g, 64, len(name)), intermediates=kernels != "xnnpack")


def test_saved_graph_reads_back_and_float_reference_tracks(tmp_path):
    g = fxpsim.import_tflite(MODELS_DIR / "rsqrt_layer_norm.tflite", kernels="builtin")
    x = _feeds(g, 16, 2)
    back = load_graph(g.save(tmp_path / "g.npz"))
    np.testing.assert_array_equal(back.run(x), g.run(x))
    m = fxpsim.import_tflite(MODELS_DIR / "maximum_minimum.tflite")
    xs = [x[2:] for x in _feeds(m, 10, 1)]          # without the two saturating samples of code extremes
    for y_int, y_float, name in zip(m.run(xs), m.run_float(xs), m.outputs):
        spec = m.tensors[name]
        err = np.abs(spec.dequantize(y_int) - y_float) / float(spec.scale[0])
        assert np.median(err) <= 1.0 and np.mean(err) < 2.0


# ------------------------------------------------------------------------------------------ one-op models
def _one_op(op, tensors, inputs, outputs, op_inputs, options=None):
    o = {"op": op, "inputs": op_inputs, "outputs": outputs}
    if options:
        o["options"] = options
    return build_tflite(tensors, [o], inputs, outputs)


def _live_all(content, feeds, tmp_path, kernels=KERNELS, n_out=1):
    """fxpsim's graph and LiteRT on ``feeds`` (one invoke per sample) for each kernel set; returns LiteRT's outputs."""
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    out = {}
    for k in kernels:
        g = fxpsim.import_tflite(path, kernels=k)
        ys = g.run(feeds)
        it = _interpreter(content, k)
        got = []
        for s in range(len(feeds[0])):
            for d, f in zip(it.get_input_details(), feeds):
                it.set_tensor(d["index"], f[s:s + 1])
            it.invoke()
            want = it.get_tensor(it.get_output_details()[0]["index"])[0]
            np.testing.assert_array_equal(ys[s], want, err_msg=f"{k} sample {s}")
            got.append(want.copy())
        out[k] = np.array(got)
    return out


def _binary_model(op, q1, q2, qy):
    return _one_op(op, [_act("a", [1, 256, 1], *q1), _act("b", [1, 1, 256], *q2), _act("y", [1, 256, 256], *qy)],
                   [0, 1], [2], [0, 1])


@SETTINGS
@given(op=st.sampled_from(["MAXIMUM", "MINIMUM"]), q=st.tuples(scales, zero_points, scales, zero_points))
def test_maximum_minimum_every_code_pair(tmp_path, op, q):
    """Every pair of codes (broadcast [256, 1] x [1, 256]): the codes' max/min whatever the scales."""
    _litert()
    content = _binary_model(op, q[:2], q[2:], q[:2])
    out = _live_all(content, [CODES.reshape(1, 256, 1), CODES.reshape(1, 1, 256)], tmp_path)
    ref = (np.maximum if op == "MAXIMUM" else np.minimum)(CODES[:, None], CODES[None, :])
    np.testing.assert_array_equal(out["reference"][0], ref)


@SETTINGS
@given(s1=scales, z1=zero_points, s2=scales, z2=zero_points, zo=zero_points, spread=st.floats(0.05, 4.0))
def test_squared_difference_every_code_pair(tmp_path, s1, z1, s2, z2, zo, spread):
    _litert()
    so = float(np.float32(max(s1, s2) ** 2 * 255 * spread))
    content = _binary_model("SQUARED_DIFFERENCE", (s1, z1), (s2, z2), (so, zo))
    _live_all(content, [CODES.reshape(1, 256, 1), CODES.reshape(1, 1, 256)], tmp_path)


@SETTINGS
@given(si=scales, zi=zero_points, so=scales, zo=zero_points)
def test_rsqrt_every_valid_code(tmp_path, si, zi, so, zo):
    _litert()
    content = _one_op("RSQRT", [_act("x", [1, 128 - zi], si, zi), _act("y", [1, 128 - zi], so, zo)], [0], [1], [0])
    try:
        K.rsqrt_params(si, zi, so, zo)
    except ValueError:
        return                                  # refused at import (shift outside TFLite's range)
    _live_all(content, [np.arange(zi, 128, dtype=np.int8)[None]], tmp_path)


@SETTINGS
@given(si=scales, zi=zero_points, sa=st.floats(-3.0, -1.0).map(lambda e: float(np.float32(10 ** e))),
       za=zero_points, so=scales, zo=zero_points)
def test_prelu_every_code_against_every_alpha(tmp_path, si, zi, sa, za, so, zo):
    _litert()
    content = _one_op("PRELU", [_act("x", [1, 256, 256], si, zi),
                                _const("alpha", CODES, INT8, scale=[sa], zero_point=[za]),
                                _act("y", [1, 256, 256], so, zo)], [0], [2], [0, 1])
    _live_all(content, [np.repeat(CODES[:, None], 256, axis=1)[None]], tmp_path)


@SETTINGS
@given(si=scales, zi=zero_points, so=scales, zo=zero_points)
def test_elu_every_code(tmp_path, si, zi, so, zo):
    """LiteRT's table (builtin) and XNNPACK's (xnnpack) on every code; the reference resolver has no ELU."""
    _litert()
    content = _one_op("ELU", [_act("x", [1, 256], si, zi), _act("y", [1, 256], so, zo)], [0], [1], [0])
    _live_all(content, [CODES[None]], tmp_path, kernels=("builtin", "xnnpack"))


@SETTINGS
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data(), keep=st.booleans(),
       op=st.sampled_from(["SUM", "REDUCE_MAX"]), si=scales, zi=zero_points, so=scales, zo=zero_points)
def test_reductions_random_axes(tmp_path, shape, data, keep, op, si, zi, so, zo):
    _litert()
    axes = data.draw(st.lists(st.integers(1, len(shape)), min_size=1, max_size=len(shape), unique=True))
    full = [1] + shape
    out = [1 if a in axes else d for a, d in enumerate(full)] if keep else \
        [d for a, d in enumerate(full) if a not in axes]
    if op == "REDUCE_MAX":
        so, zo = si, zi
    content = _one_op(op, [_act("x", full, si, zi), _const("axes", np.array(axes, np.int32)), _act("y", out, so, zo)],
                      [0], [2], [0, 1], _options("ReducerOptions", KeepDims=keep))
    x = np.random.default_rng(len(shape)).integers(-128, 128, (24,) + tuple(full[1:])).astype(np.int8)
    x[0], x[1] = -128, 127
    _live_all(content, [x], tmp_path, kernels=KERNELS if op == "REDUCE_MAX" else ("builtin", "xnnpack"))


@SETTINGS
@given(si=st.floats(-3.5, 0.5).map(lambda e: float(np.float32(10 ** e))), depth=st.integers(1, 40), zi=zero_points,
       seed=st.integers(0, 1000))
def test_log_softmax_random_scales(tmp_path, si, depth, zi, seed):
    _litert()
    content = _one_op("LOG_SOFTMAX", [_act("x", [1, 9, depth], si, zi), _act("y", [1, 9, depth], 16 / 256, 127)],
                      [0], [1], [0])
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (8, 9, depth)).astype(np.int8)
    x[0] = 127
    x[1, :, 0] = -128
    kernels = KERNELS if si * 2.0 ** 26 > 1 else ("builtin", "xnnpack")
    _live_all(content, [x], tmp_path, kernels=kernels)


@pytest.mark.parametrize("si", [0.01, 0.0470588244497776])
def test_log_softmax_rows_where_the_kernel_sets_differ(tmp_path, si):
    """The fixed point and the float table give other codes on a few rows (5 and 18 elements of these 1,020,000,
    quoted in docs/tflite_kernels.md): LiteRT's reference and builtin kernels each match fxpsim's on exactly those
    rows (so the tests tell them apart)."""
    _litert()
    p = K.log_softmax_params(si)
    x = np.random.default_rng(3).integers(-128, 128, (60000, 17)).astype(np.int8)
    ref, opt = K.quantized_log_softmax(x, p), K.quantized_log_softmax(x, p, kernels="builtin")
    rows = np.flatnonzero(np.any(ref != opt, axis=-1))
    assert int((ref != opt).sum()) == {0.01: 5, 0.0470588244497776: 18}[si]
    content = _one_op("LOG_SOFTMAX", [_act("x", [1, len(rows), 17], si, 0), _act("y", [1, len(rows), 17], 16 / 256, 127)],
                      [0], [1], [0])
    out = _live_all(content, [x[rows][None]], tmp_path)
    assert np.any(out["reference"] != out["builtin"])
    np.testing.assert_array_equal(out["builtin"], out["xnnpack"])


# ------------------------------------------------------------------------------------------ each kernel set's Prepare
def _write(tmp_path, content, name="m.tflite"):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_elu_under_the_reference_resolver_is_refused_as_litert_cannot_load_it(tmp_path):
    _litert()
    content = _one_op("ELU", [_act("x", [1, 8], 0.05, 3), _act("y", [1, 8], 0.04, 20)], [0], [1], [0])
    path = _write(tmp_path, content)
    with pytest.raises(ValueError, match="ELU x1: LiteRT's reference op resolver .* has no ELU kernel"):
        fxpsim.import_tflite(path, kernels="reference")
    with pytest.raises(ValueError, match="Didn't find op for builtin opcode 'ELU'"):
        _interpreter(content, "reference")
    cov = fxpsim.tflite_coverage(path)
    assert not cov.imports("reference") and cov.imports("builtin") and cov.imports("xnnpack")


def test_sum_under_the_reference_resolver_is_refused_as_litert_computes_garbage(tmp_path):
    """The reason of the refusal, seen live: BUILTIN_REF's int8 SUM does not follow its input, builtin's does."""
    _litert()
    content = _one_op("SUM", [_act("x", [1, 4, 19], 0.05, 3), _const("axes", np.array([2], np.int32)),
                              _act("y", [1, 4], 0.3, -7)], [0], [2], [0, 1], _options("ReducerOptions", KeepDims=False))
    path = _write(tmp_path, content)
    with pytest.raises(ValueError, match="SUM x1: LiteRT 2.3.0's reference int8 SUM"):
        fxpsim.import_tflite(path, kernels="reference")
    x = np.random.default_rng(0).integers(-128, 128, (6, 4, 19)).astype(np.int8)
    out = _live_all(content, [x], tmp_path, kernels=("builtin",))
    ref = _interpreter(content, "reference")
    got = []
    for s in range(len(x)):
        ref.set_tensor(ref.get_input_details()[0]["index"], x[s:s + 1])
        ref.invoke()
        got.append(ref.get_tensor(ref.get_output_details()[0]["index"])[0].copy())
    assert np.mean(np.array(got) != out["builtin"]) > 0.5


@pytest.mark.parametrize("kernels", KERNELS)
def test_reduce_max_with_another_output_quantization(tmp_path, kernels):
    """LiteRT's reference and builtin kernels fail the invoke; XNNPACK copies the codes (and so does fxpsim)."""
    _litert()
    content = _one_op("REDUCE_MAX", [_act("x", [1, 4, 5], 0.05, 3), _const("axes", np.array([2], np.int32)),
                                     _act("y", [1, 4], 0.11, -9)], [0], [2], [0, 1],
                      _options("ReducerOptions", KeepDims=False))
    path = _write(tmp_path, content)
    x = np.random.default_rng(1).integers(-128, 128, (5, 4, 5)).astype(np.int8)
    if kernels == "xnnpack":
        out = _live_all(content, [x], tmp_path, kernels=(kernels,))
        np.testing.assert_array_equal(out[kernels], x.max(axis=-1))
        return
    with pytest.raises(ValueError, match="REDUCE_MAX with input quantization .* fail the invoke"):
        fxpsim.import_tflite(path, kernels=kernels)
    it = _interpreter(content, kernels)
    it.set_tensor(it.get_input_details()[0]["index"], x[:1])
    with pytest.raises(RuntimeError, match="scale"):
        it.invoke()


def test_rsqrt_of_a_negative_code_fails_as_litert_fails_the_invoke(tmp_path):
    _litert()
    content = _one_op("RSQRT", [_act("x", [1, 4], 0.05, -3), _act("y", [1, 4], 0.2, -100)], [0], [1], [0])
    g = fxpsim.import_tflite(_write(tmp_path, content), kernels="builtin")
    x = np.array([[10, -3, 7, -4]], np.int8)
    with pytest.raises(ValueError, match=r"node 'op0:RSQRT' \(RSQRT\): RSQRT of a negative value: input code -4 "):
        g.run(x)
    it = _interpreter(content, "builtin")
    it.set_tensor(it.get_input_details()[0]["index"], x)
    with pytest.raises(RuntimeError, match="Rsqrt is only defined for positive values"):
        it.invoke()


def test_log_softmax_output_quantization_is_checked_in_every_set(tmp_path):
    _litert()
    content = _one_op("LOG_SOFTMAX", [_act("x", [1, 3, 5], 0.05, 0), _act("y", [1, 3, 5], 0.05, 127)], [0], [1], [0])
    path = _write(tmp_path, content)
    for k in KERNELS:
        with pytest.raises(ValueError, match="LOG_SOFTMAX needs the output scale 16/256 and zero point 127"):
            fxpsim.import_tflite(path, kernels=k)
        with pytest.raises(RuntimeError):
            _interpreter(content, k)


_ABORT = ("import sys; from ai_edge_litert.interpreter import Interpreter, OpResolverType as R; "
          "it = Interpreter(model_path=sys.argv[1], experimental_op_resolver_type=getattr(R, sys.argv[2])); "
          "it.allocate_tensors(); print('prepared')")


def _prepares(path, resolver) -> bool:
    r = subprocess.run([sys.executable, "-c", _ABORT, str(path), resolver], capture_output=True, text=True)
    return r.returncode == 0 and "prepared" in r.stdout


def test_squared_difference_output_multiplier_of_one_or_more_aborts_litert(tmp_path):
    """(2 max s)^2 / (2^14 s_y) >= 1: LiteRT's Prepare aborts the process (a subprocess); fxpsim refuses."""
    _litert()
    bad = _one_op("SQUARED_DIFFERENCE", [_act("a", [1, 4], 0.5, 0), _act("b", [1, 4], 0.25, 0),
                                         _act("y", [1, 4], 1e-5, 0)], [0, 1], [2], [0, 1])
    path = _write(tmp_path, bad)
    for k in KERNELS:
        with pytest.raises(ValueError, match="outside \\(0, 1\\), which LiteRT's QuantizeMultiplierSmallerThanOneExp"):
            fxpsim.import_tflite(path, kernels=k)
    assert not _prepares(path, "BUILTIN_WITHOUT_DEFAULT_DELEGATES")


def test_log_softmax_tiny_input_scale_reference_aborts_optimized_runs(tmp_path):
    _litert()
    content = _one_op("LOG_SOFTMAX", [_act("x", [1, 3, 6], 1e-8, 0), _act("y", [1, 3, 6], 16 / 256, 127)],
                      [0], [1], [0])
    path = _write(tmp_path, content)
    with pytest.raises(ValueError, match="input_scale \\* 2\\^26 > 1"):
        fxpsim.import_tflite(path, kernels="reference")
    assert not _prepares(path, "BUILTIN_REF")
    x = np.random.default_rng(2).integers(-128, 128, (12, 3, 6)).astype(np.int8)
    _live_all(content, [x], tmp_path, kernels=("builtin", "xnnpack"))


def test_prelu_alpha_that_widens_the_output_is_refused(tmp_path):
    content = _one_op("PRELU", [_act("x", [1, 1, 6], 0.05, 0), _const("al", np.ones((4, 6), np.int8), INT8,
                                                                     scale=[0.01], zero_point=[0]),
                                _act("y", [1, 4, 6], 0.05, 0)], [0], [2], [0, 1])
    with pytest.raises(ValueError, match="PRELU, output 'y'.*LiteRT's Prepare needs the output shape"):
        fxpsim.import_tflite(_write(tmp_path, content))


# ------------------------------------------------------------------------------------------ independent models
def _fl32_scale_ratio(*factors_then_divisor):
    *num, den = (np.float32(v) for v in factors_then_divisor)
    prod = num[0]
    for f in num[1:]:
        prod = np.float32(prod * f)
    return float(np.float32(prod / den))


def _mq(x, real):
    m, s = ref_quantize_multiplier(real)
    return ref_mbqm(x, m, s, "double")


@settings(max_examples=40, deadline=None)
@given(s1=scales, z1=zero_points, s2=scales, z2=zero_points, zo=zero_points, spread=st.floats(0.05, 4.0),
       seed=st.integers(0, 2 ** 16))
def test_squared_difference_against_a_python_integer_model(s1, z1, s2, z2, zo, spread, seed):
    so = float(np.float32(max(s1, s2) ** 2 * 255 * spread))
    p = K.squared_difference_params(s1, z1, s2, z2, so, zo)
    a, b = np.random.default_rng(seed).integers(-128, 128, (2, 300)).astype(np.int8)
    twice = Fraction(2) * Fraction(float(max(np.float32(s1), np.float32(s2))))
    want = []
    for u, v in zip(a.tolist(), b.tolist()):
        d = _mq((u - z1) * 128, float(Fraction(float(np.float32(s1))) / twice)) - \
            _mq((v - z2) * 128, float(Fraction(float(np.float32(s2))) / twice))
        want.append(min(127, max(-128, _mq(d * d, float(twice * twice / (Fraction(float(np.float32(so))) * 16384)))
                                   + zo)))
    np.testing.assert_array_equal(K.quantized_squared_difference(a, b, p), want)


@settings(max_examples=60, deadline=None)
@given(v=st.integers(2, (1 << 29) - 1))
def test_inv_sqrt_multiplier_against_the_real_inverse_square_root(v):
    m, s = K.inv_sqrt_quantized_multiplier_exp(np.array([v]))
    got = Fraction(int(m[0]), 1 << 31) * Fraction(2) ** int(s[0])
    assert abs(float(got) * math.sqrt(v) - 1.0) < 4e-6             # five fixed-point Newton steps


@settings(max_examples=40, deadline=None)
@given(si=scales, zi=st.integers(-128, 100), so=scales, zo=zero_points)
def test_rsqrt_table_against_the_real_function(si, zi, so, zo):
    """Within one output step of 1/sqrt(x) (plus the int8 clamp), on every valid code."""
    try:
        p = K.rsqrt_params(si, zi, so, zo)
    except ValueError:
        return
    codes = np.arange(zi + 1, 128, dtype=np.int8)
    y = K.quantized_rsqrt(codes, p).astype(np.float64)
    real = 1.0 / np.sqrt(float(np.float32(si)) * (codes.astype(np.float64) - zi))
    want = np.clip(real / float(np.float32(so)) + zo, -128, 127)
    assert np.max(np.abs(y - want)) <= 1.0 + 1e-6
    assert K.quantized_rsqrt(np.array([zi], np.int8), p)[0] == 127


@settings(max_examples=40, deadline=None)
@given(si=scales, zi=zero_points, sa=scales, za=zero_points, so=scales, zo=zero_points, seed=st.integers(0, 999))
def test_prelu_against_a_python_integer_model(si, zi, sa, za, so, zo, seed):
    p = K.prelu_params(si, zi, sa, za, so, zo)
    x, al = np.random.default_rng(seed).integers(-128, 128, (2, 400)).astype(np.int8)
    r1, r2 = _fl32_scale_ratio(si, so), _fl32_scale_ratio(si, sa, so)
    want = [min(127, max(-128, zo + (_mq(u - zi, r1) if u >= zi else _mq((u - zi) * (a - za), r2))))
            for u, a in zip(x.tolist(), al.tolist())]
    np.testing.assert_array_equal(K.quantized_prelu(x, al, p), want)


@settings(max_examples=40, deadline=None)
@given(si=scales, zi=zero_points, so=scales, zo=zero_points, n=st.integers(1, 50), seed=st.integers(0, 999))
def test_sum_against_float32_scalar_models(si, zi, so, zo, n, seed):
    """builtin: float32 scalars step by step, std::round; xnnpack: float32 scalars, round half to even."""
    p = K.sum_params(si, zi, so, zo)
    x = np.random.default_rng(seed).integers(-128, 128, (7, n)).astype(np.int8)
    f = np.float32
    c = f(f(si) / f(so))
    want_b, want_x = [], []
    for row in x.tolist():
        total = sum(row)
        v = f(f(f(total) * c) + f(f(f(-zi) * c) * f(n)))
        want_b.append(min(127, max(-128, int(math.copysign(math.floor(abs(float(v)) + 0.5), float(v))) + zo)))
        w = f(f(f(total) * c) + f(f(zo) - f(f(f(n) * f(zi)) * c)))
        want_x.append(min(127, max(-128, round(float(w)))))          # Python's round: half to even
    np.testing.assert_array_equal(K.quantized_sum(x, 1, p), want_b)
    np.testing.assert_array_equal(K.quantized_sum(x, 1, p, kernels="xnnpack"), want_x)


@settings(max_examples=40, deadline=None)
@given(si=scales, zi=zero_points, so=scales, zo=zero_points)
def test_elu_tables_against_the_real_function(si, zi, so, zo):
    """Both tables within one output step of ELU (expm1f is within an ulp or two of expm1)."""
    p = K.elu_params(si, zi, so, zo)
    x = float(np.float32(si)) * (CODES.astype(np.float64) - zi)
    want = np.clip(np.where(x < 0, np.expm1(np.minimum(x, 0)), x) / float(np.float32(so)) + zo, -128, 127)
    for k in ("builtin", "xnnpack"):
        assert np.max(np.abs(K.quantized_elu(CODES, p, kernels=k) - want)) <= 0.5 + 1e-3


@settings(max_examples=60, deadline=None)
@given(x=st.floats(1.0, 4095.0))
def test_gemmlowp_log_against_the_real_logarithm(x):
    raw = int(round(x * 2 ** 19))                        # Q12.19
    got = int(K.gemmlowp_log_x_for_x_ge_1(np.array([raw]), 12, 5)[0]) / 2 ** 26     # Q5.26
    assert abs(got - math.log(raw / 2 ** 19)) < 2e-6


@settings(max_examples=40, deadline=None)
@given(si=st.floats(-2.5, 0.3).map(lambda e: float(np.float32(10 ** e))), depth=st.integers(1, 30),
       seed=st.integers(0, 999))
def test_log_softmax_against_the_real_function(si, depth, seed):
    """Both kernel sets within about one output step (1/16) of log softmax where it is above the -128 floor."""
    p = K.log_softmax_params(si)
    x = np.random.default_rng(seed).integers(-128, 128, (20, depth)).astype(np.int8)
    z = float(np.float32(si)) * x.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    real = (z - np.log(np.exp(z).sum(axis=-1, keepdims=True))) * 16 + 127
    inside = real > -126
    for k in ("reference", "builtin"):
        y = K.quantized_log_softmax(x, p, kernels=k).astype(np.float64)
        assert np.max(np.abs(y - real)[inside], initial=0) <= 1.0 + 1e-6
        assert np.all(y[real < -129] == -128)


def test_log_softmax_of_one_element_is_zero():
    """A row of one element: log softmax 0 exactly, the output code 127 in both kernels."""
    for k in ("reference", "builtin"):
        assert K.quantized_log_softmax(np.array([[5]], np.int8), K.log_softmax_params(0.1), kernels=k)[0, 0] == 127


@pytest.mark.parametrize("si, zi, so, zo", [(1 / 32, 0, 1 / 16, 0), (1 / 64, 3, 1 / 16, -5)])
def test_elu_rounding_ties_tell_the_kernel_sets_apart(tmp_path, si, zi, so, zo):
    """Power-of-two scales put positive inputs on output ties: LiteRT's table rounds them away from zero, XNNPACK's
    (it takes int8 ELU) to even; each kernel set matches its own table on every code."""
    _litert()
    content = _one_op("ELU", [_act("x", [1, 256], si, zi), _act("y", [1, 256], so, zo)], [0], [1], [0])
    out = _live_all(content, [CODES[None]], tmp_path, kernels=("builtin", "xnnpack"))
    p = K.elu_params(si, zi, so, zo)
    assert np.sum(np.array(p.lut) != np.array(p.xnnpack_lut)) >= 15
    np.testing.assert_array_equal(out["builtin"][0], p.lut)
    np.testing.assert_array_equal(out["xnnpack"][0], p.xnnpack_lut)


def test_sum_rounding_ties_tell_the_kernel_sets_apart(tmp_path):
    """s_x / s_y = 1/2: odd sums are ties, rounded away from zero by the builtin kernel, to even by XNNPACK."""
    _litert()
    content = _one_op("SUM", [_act("x", [1, 6, 3], 1 / 32, 0), _const("axes", np.array([2], np.int32)),
                              _act("y", [1, 6], 1 / 16, 0)], [0], [2], [0, 1], _options("ReducerOptions", KeepDims=False))
    x = np.random.default_rng(4).integers(-80, 80, (10, 6, 3)).astype(np.int8)
    out = _live_all(content, [x], tmp_path, kernels=("builtin", "xnnpack"))
    assert np.any(out["builtin"] != out["xnnpack"])


def test_squared_difference_power_of_two_scales_every_code_pair(tmp_path):
    """Power-of-two scales make the multipliers' roundings fall on ties (RoundingDivideByPOT rounds them away from
    zero): every pair of codes, live in every kernel set."""
    _litert()
    content = _binary_model("SQUARED_DIFFERENCE", (1 / 32, 3), (1 / 64, -7), (1 / 4, -128))
    p = K.squared_difference_params(1 / 32, 3, 1 / 64, -7, 1 / 4, -128)
    assert p.multiplier1 == 1 << 30 and p.multiplier2 == 1 << 30        # exact powers of two: shifts only
    _live_all(content, [CODES.reshape(1, 256, 1), CODES.reshape(1, 1, 256)], tmp_path)


def test_prelu_with_a_run_time_alpha(tmp_path):
    _litert()
    content = _one_op("PRELU", [_act("x", [1, 5, 7], 0.04, -3), _act("alpha", [1, 5, 7], 0.01, 20),
                                _act("y", [1, 5, 7], 0.03, 4)], [0, 1], [2], [0, 1])
    rng = np.random.default_rng(9)
    x, a = (rng.integers(-128, 128, (20, 5, 7)).astype(np.int8) for _ in range(2))
    _live_all(content, [x, a], tmp_path)

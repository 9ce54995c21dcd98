"""16x8 models (int16 activations, int8 weights, int64 biases) and uint8 model boundaries against LiteRT itself.

* The converter's models of ``tests/vectors/tflite_int16`` (``tools/fixtures/tflite_int16``), run live in LiteRT
  under every kernel set: every output and every intermediate tensor bit for bit.
* Hand-built one-op int16 models (FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D, ADD, SUB, MUL, QUANTIZE) with
  hypothesis-drawn scales, shapes and options, live under every kernel set; a uint8 DEQUANTIZE input, live.
* The 64-bit requantization (:func:`fxpsim.datapath.tflite.int16.mbqm_int64`) against a Python-int model of
  LiteRT's C code and against the exact product :math:`x M` (hypothesis).
* The report's accumulator analysis sees the int16 codes (an independent worst-case bound).
* int16 LOGISTIC / TANH on all 65536 codes against LiteRT (reference and builtin; a power-of-two input scale, which
  the optimized kernels compute otherwise, refused outside the reference set); the sigmoid table read back live.
* What is refused, by name: int16 SOFTMAX, power-of-two-scale int16 ADD, int16 zero points,
  int32 biases in 16x8 MAC ops, a uint8 input read by another op.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxpsim
from fxpsim.datapath.tflite.int16 import (SIGMOID_TABLE, add_left_shift, logistic_int16, lut_activation_params,
                                          mbqm_int64, pot_add_int16, reduced_multiplier, tanh_int16)
from reference import ref_quantize_multiplier

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import ACTS, INT8, _const, _options, build_tflite  # noqa: E402
from test_tflite_more_ops import _compare_live as _compare_more, _interpreter  # noqa: E402

KERNELS = ("reference", "builtin", "xnnpack")
MODELS_DIR = Path(__file__).resolve().parents[1] / "vectors" / "tflite_int16"
MODELS = sorted(p.stem for p in MODELS_DIR.glob("*.tflite"))
IMPORTED = ("cnn_16x8", "mlp_16x8", "conv_16x8_floatio", "sigmoid_tanh_16x8", "softmax_16x8", "conv_uint8io")
INT16, INT64, UINT8, FLOAT32 = 7, 4, 3, 0
SLOW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _act16(name, shape, scale, zp=0):
    return dict(name=name, type=INT16, shape=list(shape), scale=[float(np.float32(scale))], zero_point=[int(zp)])


def _feeds(g, n, seed):
    """Per graph input: codes spread over the whole range (normal, uniform, both extremes) or float values."""
    rng = np.random.default_rng(seed)
    out = []
    for name in g.inputs:
        spec = g.tensors[name]
        if spec.is_float:
            x = rng.normal(0.0, 1.5, (n,) + spec.shape)
            x[0], x[1] = -1e3, 1e3                     # saturating on both sides
            out.append(x.astype(np.float32))
            continue
        info = np.iinfo(spec.dtype)
        x = np.clip(rng.normal((int(info.max) + int(info.min) + 1) / 2, (int(info.max) - int(info.min)) / 8,
                               (n,) + spec.shape), info.min, info.max)
        x[n // 2:] = rng.integers(info.min, int(info.max) + 1, (n - n // 2,) + spec.shape)
        x[0], x[1] = info.min, info.max
        out.append(x.astype(spec.dtype))
    return out


def _compare_live(g, model, kernels, feeds):
    """Every graph output and every kept intermediate equal LiteRT's tensors, sample by sample
    (test_tflite_more_ops's comparison); how many intermediates there are."""
    _compare_more(g, model, kernels, feeds, intermediates=True)
    return len([n for n in g.meta["tflite_tensors"] if n not in g.inputs])


# ----------------------------------------------------------------------------------------- converter models
def test_fixtures_present():
    assert set(IMPORTED) | {"softmax_16x8"} <= set(MODELS)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", IMPORTED)
def test_converter_models_equal_live_litert(name, kernels):
    path = MODELS_DIR / f"{name}.tflite"
    g = fxpsim.import_tflite(path, kernels=kernels)
    if "16x8" in name:
        assert g.meta["datapath"]["accumulator_bits"] == 64
        codes = [t for t in g.tensors.values() if not t.is_float and not t.is_constant]
        assert codes and all(t.dtype == np.int16 for t in codes)
    else:
        assert g.tensors[g.inputs[0]].dtype == np.uint8 and g.tensors[g.outputs[0]].dtype == np.uint8
    assert _compare_live(g, path, kernels, _feeds(g, 40, len(name))) > 0


def test_the_fully_connected_requantization_is_not_the_conv_one():
    """16x8 FULLY_CONNECTED requantizes in float64, CONV_2D with the 64-bit MBQM: the other choice would fail the
    live comparison above (so that test tells them apart)."""
    g = fxpsim.import_tflite(MODELS_DIR / "mlp_16x8.tflite")
    node = g.nodes[0]
    x, w, b, y = (g.tensors[t] for t in node.inputs + node.outputs)
    xs = _feeds(g, 200, 5)[g.inputs.index(node.inputs[0])].reshape(200, -1).astype(np.int64)
    acc = xs @ w.data.astype(np.int64).T + b.data.astype(np.int64)
    real = np.float64(np.float32(x.scale[0])) * w.scale.astype(np.float32).astype(np.float64) / np.float64(
        np.float32(y.scale[0]))
    m, e = ref_quantize_multiplier_array(real)
    ys, _, kept = g.run(_feeds(g, 200, 5), keep=True)
    assert np.any(np.clip(mbqm_int64(acc, m, e), -32768, 32767) != kept[node.outputs[0]].reshape(200, -1))


def ref_quantize_multiplier_array(real):
    pairs = [ref_quantize_multiplier(float(r)) for r in real]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def test_accumulator_analysis_sees_int16_codes():
    """The report's bits-needed of a 16x8 MAC node is the exact worst case of its int16 x int8 products (an
    independent bound from the weights and bias, Python ints)."""
    g = fxpsim.import_tflite(MODELS_DIR / "mlp_16x8.tflite")
    node = g.nodes[0]
    w, b = g.tensors[node.inputs[1]].data, g.tensors[node.inputs[2]].data
    worst = max(sum(max(int(v) * -32768, int(v) * 32767) for v in row) + int(bb) for row, bb in zip(w, b))
    worst_neg = min(sum(min(int(v) * -32768, int(v) * 32767) for v in row) + int(bb) for row, bb in zip(w, b))
    need = max(worst.bit_length(), (-worst_neg - 1).bit_length()) + 1
    assert g.accumulator_bits_needed(node) >= need > 16
    assert g.accumulator_bits_needed(node) <= need + 1
    # the FINN-style width table over int16 inputs: the weights' range of x w for x in [-32768, 32767]
    from fxpsim.hardware.accumulator_widths import accumulator_widths
    row = next(r for r in accumulator_widths(g) if r.node == node.name)
    lo = min(sum(min(int(v) * -32768, int(v) * 32767) for v in r) for r in w)
    hi = max(sum(max(int(v) * -32768, int(v) * 32767) for v in r) for r in w)
    assert row.weights_range == (lo, hi) and row.k == w.shape[1]


# ----------------------------------------------------------------------------------------- one-op int16 models
def _mac_model(op, rng, bias, per_channel, act):
    sx, sy = float(10 ** rng.uniform(-5, -3)), float(10 ** rng.uniform(-4.5, -2.5))
    if op == "FULLY_CONNECTED":
        k, o = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        w = rng.integers(-127, 128, (o, k)).astype(np.int8)
        x_shape, y_shape, qdim = ([1, k] if k % 2 else [1, 2, k // 2]), [1, o], 0    # [1, 2, K/2]: flattened
        options = _options("FullyConnectedOptions", FusedActivationFunction=ACTS[act])
    elif op == "CONV_2D":
        c, o, kh, kw = (int(v) for v in rng.integers(1, 5, 4))
        w = rng.integers(-127, 128, (o, kh, kw, c)).astype(np.int8)
        pad, st_ = int(rng.integers(0, 2)), int(rng.integers(1, 3))
        h, wd = kh + int(rng.integers(0, 5)), kw + int(rng.integers(0, 5))
        oh, ow = (-(-h // st_), -(-wd // st_)) if pad == 0 else ((h - kh) // st_ + 1, (wd - kw) // st_ + 1)
        x_shape, y_shape, qdim = [1, h, wd, c], [1, oh, ow, o], 0
        options = _options("Conv2DOptions", Padding=pad, StrideW=st_, StrideH=st_, DilationWFactor=1,
                           DilationHFactor=1, FusedActivationFunction=ACTS[act])
    else:
        c, mult = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        o = c * mult
        w = rng.integers(-127, 128, (1, 3, 3, o)).astype(np.int8)
        x_shape, y_shape, qdim = [1, 6, 5, c], [1, 6, 5, o], 3
        options = _options("DepthwiseConv2DOptions", Padding=0, StrideW=1, StrideH=1, DepthMultiplier=mult,
                           DilationWFactor=1, DilationHFactor=1, FusedActivationFunction=ACTS[act])
    sw = (rng.uniform(0.002, 0.02, o) if per_channel else np.array([rng.uniform(0.002, 0.02)])).astype(np.float32)
    tensors = [_act16("x", x_shape, sx), _const("w", w, INT8, scale=sw.tolist(), zero_point=[0] * sw.size, qdim=qdim)]
    inputs = [0, 1]
    if bias:
        b = rng.integers(-(1 << 24), 1 << 24, o).astype(np.int64)
        tensors.append(_const("b", b, INT64, scale=(np.float32(sx) * sw).tolist(), zero_point=[0] * sw.size))
        inputs.append(2)
    else:
        inputs.append(-1)
    tensors.append(_act16("y", y_shape, sy))
    return build_tflite(tensors, [{"op": op, "inputs": inputs, "outputs": [len(tensors) - 1], "options": options}],
                        [0], [len(tensors) - 1])


def _run_one_op(tmp_path, content, seed, n=24):
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    for kernels in KERNELS:
        g = fxpsim.import_tflite(path, kernels=kernels)
        _compare_live(g, content, kernels, _feeds(g, n, seed))


@SLOW
@given(op=st.sampled_from(["FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"]), bias=st.booleans(),
       per_channel=st.booleans(), act=st.sampled_from(list(ACTS)), seed=st.integers(0, 2 ** 16))
def test_one_op_mac_models_equal_live_litert(tmp_path, op, bias, per_channel, act, seed):
    content = _mac_model(op, np.random.default_rng(seed), bias, per_channel, act)
    if not bias and op != "FULLY_CONNECTED":
        _bias_less_conv_is_refused_as_litert_does(tmp_path, content, op)
        return
    _run_one_op(tmp_path, content, seed)


def _bias_less_conv_is_refused_as_litert_does(tmp_path, content, op):
    for kernels in KERNELS:
        with pytest.raises(RuntimeError, match="Tensor at index 2 was optional but was expected"):
            _interpreter(content, kernels, preserve=True)
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    for kernels in KERNELS:
        with pytest.raises(ValueError, match=f"{op} x1: a 16x8 {op} without a bias: LiteRT's Prepare fails"):
            fxpsim.import_tflite(path, kernels=kernels)


def test_fully_connected_flattens_an_int16_input(tmp_path):
    """A [1, 2, 3] input to FULLY_CONNECTED: the flattening reshape keeps the int16 codes."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (4, 6)).astype(np.int8)
    content = build_tflite([_act16("x", [1, 2, 3], 2e-4), _const("w", w, INT8, scale=[0.01], zero_point=[0]),
                            _const("b", np.array([7, -9, 1 << 20, 0], np.int64), INT64, scale=[2e-6], zero_point=[0]),
                            _act16("y", [1, 4], 3e-4)],
                           [{"op": "FULLY_CONNECTED", "inputs": [0, 1, 2], "outputs": [3],
                             "options": _options("FullyConnectedOptions", FusedActivationFunction=0)}], [0], [3])
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    g = fxpsim.import_tflite(path)
    assert [g.tensors[t].dtype for n in g.nodes for t in n.inputs[:1]] == [np.int16, np.int16]
    _run_one_op(tmp_path, content, 3)


@SLOW
@given(op=st.sampled_from(["ADD", "SUB", "MUL"]), act=st.sampled_from(list(ACTS)),
       bshape=st.sampled_from([[1, 3, 4], [1, 1, 4], [1, 3, 1]]), seed=st.integers(0, 2 ** 16))
def test_one_op_elementwise_models_equal_live_litert(tmp_path, op, act, bshape, seed):
    rng = np.random.default_rng(seed)
    sa, sb = (float(10 ** rng.uniform(-5, -3)) for _ in range(2))
    so = (sa + sb) * rng.uniform(0.6, 1.6) if op != "MUL" else sa * sb * 32768 * rng.uniform(0.3, 3)
    kind = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[op]
    content = build_tflite([_act16("a", [1, 3, 4], sa), _act16("b", bshape, sb), _act16("y", [1, 3, 4], so)],
                           [{"op": op, "inputs": [0, 1], "outputs": [2],
                             "options": _options(kind, FusedActivationFunction=ACTS[act])}], [0, 1], [2])
    _run_one_op(tmp_path, content, seed)


@SLOW
@given(ratio=st.floats(0.05, 20.0), seed=st.integers(0, 2 ** 16))
def test_int16_requantize_equals_live_litert(tmp_path, ratio, seed):
    si = float(10 ** np.random.default_rng(seed).uniform(-5, -3))
    content = build_tflite([_act16("x", [1, 5, 7], si), _act16("y", [1, 5, 7], si * ratio)],
                           [{"op": "QUANTIZE", "inputs": [0], "outputs": [1]}], [0], [1])
    _run_one_op(tmp_path, content, seed)


def test_uint8_dequantize_input_equals_live_litert(tmp_path):
    content = build_tflite([dict(name="u", type=UINT8, shape=[1, 6, 5], scale=[0.037], zero_point=[131]),
                            dict(name="y", type=FLOAT32, shape=[1, 6, 5])],
                           [{"op": "DEQUANTIZE", "inputs": [0], "outputs": [1]}], [0], [1])
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    for kernels in KERNELS:
        g = fxpsim.import_tflite(path, kernels=kernels)
        assert g.tensors[g.inputs[0]].dtype == np.uint8
        _compare_live(g, content, kernels, _feeds(g, 16, 3))


# ----------------------------------------------------------------------------------------- the 64-bit MBQM
def _ref_mbqm_int64(x: int, m: int, shift: int) -> int:
    """LiteRT's ``MultiplyByQuantizedMultiplier(int64_t, int32_t, int)`` in Python ints (tensorflow/lite/kernels/
    internal/common.cc, the double-rounding build)."""
    reduced = (m + (1 << 15)) >> 16 if m < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    return (x * reduced + (1 << (total - 1))) >> total


@settings(max_examples=300, deadline=None)
@given(x=st.integers(-(1 << 47), (1 << 47) - 1), real=st.floats(1e-9, 100.0))
def test_mbqm_int64_equals_the_c_code_and_approximates_x_times_m(x, real):
    m, e = ref_quantize_multiplier(real)
    if not -31 <= e <= 7:
        return
    want = _ref_mbqm_int64(x, m, e)
    if not -(1 << 31) <= want < (1 << 31):
        return                                   # outside LiteRT's assumption (the result fits int32)
    assert int(mbqm_int64(np.array([x]), m, e)[0]) == want
    # y = round(x mu 2^(e-15)), mu 2^-15 within 2^-16 of m 2^-31 (2^-15 where mu saturates at 2^15 - 1)
    mu = int(reduced_multiplier(m))
    assert abs(Fraction(want) - Fraction(x * mu, 1 << (15 - e))) <= Fraction(1, 2)
    bound = Fraction(1, 1 << 15) if m >= 0x7FFF0000 else Fraction(1, 1 << 16)
    assert abs(Fraction(mu, 1 << 15) - Fraction(m, 1 << 31)) <= bound


def test_mbqm_int64_shift_range_is_checked():
    with pytest.raises(ValueError, match=r"shift must be in \[-31, 7\]"):
        mbqm_int64(np.array([1]), 1 << 30, 8)


def test_add_left_shift_table():
    assert add_left_shift(0.001, 0.002, 0.003) == 15
    assert add_left_shift(2.0 ** -12, 2.0 ** -13, 2.0 ** -11) is None
    assert add_left_shift(2.0 ** -12, 2.0 ** -13, 2.0 ** -11, False) == 15
    assert add_left_shift(2.0 ** -12, 2.0 ** -13, 0.0003) == 15


@settings(max_examples=200, deadline=None)
@given(a=st.integers(-32768, 32767), b=st.integers(-32768, 32767), e=st.integers(0, 15))
def test_pot_add_int16_against_python_ints(a, b, e):
    """Round half away from zero of b / 2^e (gemmlowp's RoundingDivideByPOT), a saturating int16 sum (Fractions)."""
    q = Fraction(b, 1 << e)
    r = int(q) if abs(q - int(q)) != Fraction(1, 2) and abs(q - int(q)) < Fraction(1, 2) else None
    rounded = r if r is not None else (int(q) + (1 if q > 0 else -1) if abs(q - int(q)) >= Fraction(1, 2) else int(q))
    want = min(max(a + rounded, -32768), 32767)
    assert int(pot_add_int16(np.array([a]), np.array([b]), 0, -e)[0]) == want
    assert int(pot_add_int16(np.array([b]), np.array([a]), -e, 0)[0]) == want


# ----------------------------------------------------------------------------------------- refused by name
def test_an_int16_op_fxpsim_does_not_reproduce_is_refused_by_name(tmp_path):
    content = build_tflite([_act16("x", [1, 6], 0.001), _act16("y", [1, 6], 0.001)],
                           [{"op": "HARD_SWISH", "inputs": [0], "outputs": [1]}], [0], [1])
    path = _refused(tmp_path, [_act16("x", [1, 6], 0.001), _act16("y", [1, 6], 0.001)],
                    [{"op": "HARD_SWISH", "inputs": [0], "outputs": [1]}], [0], [1],
                    r"HARD_SWISH x1: HARD_SWISH on int16 \(16x8\) tensors: LiteRT's int16 HARD_SWISH kernel is not "
                    r"reproduced")
    assert content == path.read_bytes()
    cov = fxpsim.tflite_coverage(path)
    for k in KERNELS:
        assert {r.op for r in cov.unsupported(k)} == {"HARD_SWISH"}
    assert "int16" in cov.activation_types and "not reproduced" in cov.format()


@SLOW
@given(scale=st.floats(2e-6, 3e-3), beta=st.sampled_from([1.0, 0.5, 2.0]), depth=st.integers(1, 300),
       seed=st.integers(0, 2 ** 16))
def test_int16_softmax_equals_live_litert(tmp_path, scale, beta, depth, seed):
    content = build_tflite([_act16("x", [1, 3, depth], scale), _act16("y", [1, 3, depth], 2.0 ** -15)],
                           [{"op": "SOFTMAX", "inputs": [0], "outputs": [1],
                             "options": _options("SoftmaxOptions", Beta=beta)}], [0], [1])
    _run_one_op(tmp_path, content, seed, n=8)


def test_int16_softmax_output_scale_is_checked(tmp_path):
    _refused(tmp_path, [_act16("x", [1, 6], 0.001), _act16("y", [1, 6], 2.0 ** -14)],
             [{"op": "SOFTMAX", "inputs": [0], "outputs": [1], "options": _options("SoftmaxOptions", Beta=1.0)}],
             [0], [1], r"int16 SOFTMAX with output scale 6.10352e-05: LiteRT's Prepare requires 2\^-15")


def test_lut_entries_of_a_datapath_are_refused_on_int16_activations():
    g = fxpsim.import_tflite(MODELS_DIR / "sigmoid_tanh_16x8.tflite")
    dp = dict(g.meta["datapath"], activation_lut_entries=256)
    with pytest.raises(ValueError, match=r"sets activation_lut_entries, which fxpsim models for 8-bit activations"):
        g.run(_feeds(g, 2, 0), SimpleNamespace(**dp))


# ----------------------------------------------------------------------------------------- LOGISTIC / TANH
def _lut_model(op, scale, n=65536):
    return build_tflite([_act16("x", [1, n], scale), _act16("y", [1, n], 2.0 ** -15)],
                        [{"op": op, "inputs": [0], "outputs": [1]}], [0], [1])


def _litert_codes(content, kernels, x):
    it = _interpreter(content, kernels, preserve=False)
    it.set_tensor(it.get_input_details()[0]["index"], x.reshape(1, -1))
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])[0]


ALL_CODES = np.arange(-32768, 32768, dtype=np.int16)


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("scale", [0.0001831110566854477, 1 / 48, 29 / 12288, 3.1e-6, 2.0 ** -12, 2.0 ** -11])
def test_lut_activations_on_every_code_equal_litert(tmp_path, op, scale):
    content = _lut_model(op, scale)
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    m, e = lut_activation_params(scale, tanh=op == "TANH")
    pot = m == 0
    assert pot == (scale == 2.0 ** -12 or (op == "TANH" and scale == 2.0 ** -11))
    for kernels in KERNELS:
        want = _litert_codes(content, kernels, ALL_CODES)
        if pot and kernels != "reference":
            with pytest.raises(ValueError, match=f"int16 {op} with a power-of-two input scale: LiteRT's optimized"):
                fxpsim.import_tflite(path, kernels=kernels)
            # what the refusal stands for: the optimized kernel computes other codes
            assert np.any(want != _litert_codes(content, "reference", ALL_CODES))
            continue
        g = fxpsim.import_tflite(path, kernels=kernels)
        np.testing.assert_array_equal(g.run(ALL_CODES.reshape(1, -1))[0], want, err_msg=f"{op} {scale} {kernels}")
        np.testing.assert_array_equal((tanh_int16 if op == "TANH" else logistic_int16)(ALL_CODES, m, e), want)


def test_lut_activation_output_scale_is_checked(tmp_path):
    content = build_tflite([_act16("x", [1, 8], 0.0002), _act16("y", [1, 8], 2.0 ** -14)],
                           [{"op": "LOGISTIC", "inputs": [0], "outputs": [1]}], [0], [1])
    for kernels in KERNELS:
        with pytest.raises(RuntimeError):
            _interpreter(content, kernels)                 # LiteRT's Prepare refuses it
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"LOGISTIC x1: int16 LOGISTIC with output scale 6.10352e-05: LiteRT's "
                                         r"Prepare requires 2\^-15"):
        fxpsim.import_tflite(path)


def test_sigmoid_table_read_back_from_litert():
    """The committed table is LiteRT's (read back live as the generator does) and tracks 2^16 sigmoid(i/24)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "extract_sigmoid_table", Path(__file__).resolve().parents[2] / "tools/fixtures/tflite_int16/extract_sigmoid_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod.read_table(lambda m: _interpreter(m, "reference", False),
                         lambda scale, n: _lut_model("TANH", scale, n))
    assert got.tolist() == list(SIGMOID_TABLE)
    t = np.array(SIGMOID_TABLE)
    exact = [Fraction(65536) / (1 + Fraction(np.exp(-k / 24))) for k in range(256)]
    assert all(-0.5 <= float(v - e) <= 1.2 for v, e in zip(t, exact)) and np.all(np.diff(t) >= 0)


def _refused(tmp_path, tensors, ops, inputs, outputs, match):
    path = tmp_path / "bad.tflite"
    path.write_bytes(build_tflite(tensors, ops, inputs, outputs))
    for k in KERNELS:
        with pytest.raises(ValueError, match=match):
            fxpsim.import_tflite(path, kernels=k)
    return path


@SLOW
@given(k=st.integers(8, 15), j=st.integers(0, 18), swap=st.booleans(), option=st.sampled_from([None, True, False]),
       act=st.sampled_from(list(ACTS)), bshape=st.sampled_from([[1, 3, 4], [1, 1, 4]]), seed=st.integers(0, 2 ** 16))
def test_power_of_two_int16_add_equals_live_litert(tmp_path, k, j, swap, option, act, bshape, seed):
    """pot_scale_int16 (the schema's default when AddOptions is present; false without options) with power-of-two
    scales: the shift-and-saturate path; otherwise the general one."""
    so = 2.0 ** -k
    sa, sb = (so, so * 2.0 ** -j) if not swap else (so * 2.0 ** -j, so)
    opts = {"FusedActivationFunction": ACTS[act]}
    if option is not None:
        opts["PotScaleInt16"] = option
    content = build_tflite([_act16("a", [1, 3, 4], sa), _act16("b", bshape, sb), _act16("y", [1, 3, 4], so)],
                           [{"op": "ADD", "inputs": [0, 1], "outputs": [2], "options": _options("AddOptions", **opts)}],
                           [0, 1], [2])
    if option is not False and bshape != [1, 3, 4]:       # LiteRT aborts the process there: not run, refused
        path = tmp_path / "m.tflite"
        path.write_bytes(content)
        with pytest.raises(ValueError, match=r"pot_scale_int16 and broadcasting .*: LiteRT aborts the process"):
            fxpsim.import_tflite(path)
        return
    _run_one_op(tmp_path, content, seed)


def test_power_of_two_int16_add_shifts_litert_refuses(tmp_path):
    content = build_tflite([_act16("a", [1, 4], 2.0 ** -10), _act16("b", [1, 4], 2.0 ** -13),
                            _act16("y", [1, 4], 2.0 ** -11)],
                           [{"op": "ADD", "inputs": [0, 1], "outputs": [2],
                             "options": _options("AddOptions", FusedActivationFunction=0)}], [0, 1], [2])
    for kernels in KERNELS:
        with pytest.raises(RuntimeError):
            _interpreter(content, kernels)
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"ADD x1: int16 ADD with power-of-two scales: input/output exponent "
                                         r"differences 1, -2; LiteRT's Prepare needs"):
        fxpsim.import_tflite(path)


def test_power_of_two_int16_sub_is_refused(tmp_path):
    _refused(tmp_path, [_act16("a", [1, 4], 2.0 ** -12), _act16("b", [1, 4], 2.0 ** -13), _act16("y", [1, 4], 2.0 ** -11)],
             [{"op": "SUB", "inputs": [0, 1], "outputs": [2],
               "options": _options("SubOptions", FusedActivationFunction=0)}], [0, 1], [2],
             r"SUB x1: int16 SUB with power-of-two scales and pot_scale_int16: LiteRT's power-of-two SUB")


def test_int16_zero_point_is_refused(tmp_path):
    _refused(tmp_path, [_act16("a", [1, 4], 0.001, 3), _act16("b", [1, 4], 0.001), _act16("y", [1, 4], 0.002)],
             [{"op": "ADD", "inputs": [0, 1], "outputs": [2]}], [0, 1], [2], r"int16 tensor 'a' has zero point 3")


def test_int32_bias_in_a_16x8_mac_is_refused(tmp_path):
    w = np.ones((2, 3), np.int8)
    _refused(tmp_path, [_act16("x", [1, 3], 0.001), _const("w", w, INT8, scale=[0.01], zero_point=[0]),
                        _const("b", np.array([5, -5], np.int32), 2, scale=[1e-5], zero_point=[0]),
                        _act16("y", [1, 2], 0.002)],
             [{"op": "FULLY_CONNECTED", "inputs": [0, 1, 2], "outputs": [3],
               "options": _options("FullyConnectedOptions", FusedActivationFunction=0)}], [0], [3],
             r"FULLY_CONNECTED with a bias of type int32")


def test_uint8_input_read_by_another_op_is_refused(tmp_path):
    u = dict(name="u", type=UINT8, shape=[1, 4], scale=[0.05], zero_point=[128])
    y8 = dict(u, name="y", type=INT8, zero_point=[0])
    path = _refused(tmp_path, [u, dict(u, name="v"), y8], [{"op": "ADD", "inputs": [0, 1], "outputs": [2]}], [0, 1],
                    [2], r"ADD x1: its input 'u' is uint8 \(legacy quantization\): fxpsim imports uint8 only at the")
    assert not fxpsim.tflite_coverage(path).imports("reference")


def test_mixed_int8_int16_models_are_refused(tmp_path):
    x8 = dict(name="x", type=INT8, shape=[1, 4], scale=[0.01], zero_point=[0])
    _refused(tmp_path, [x8, _act16("y", [1, 4], 0.001)], [{"op": "QUANTIZE", "inputs": [0], "outputs": [1]}], [0],
             [1], r"QUANTIZE x1: int8 and int16 activations in one model \(mixed precision\)")


def test_uint8_inside_the_model_is_refused(tmp_path):
    """int8 -> uint8 -> int8 in the middle: the uint8 QUANTIZE input is not a model boundary."""
    q8 = dict(type=INT8, shape=[1, 4], scale=[0.05], zero_point=[3])
    _refused(tmp_path, [dict(q8, name="x"), dict(q8, name="u", type=UINT8, zero_point=[131]), dict(q8, name="y")],
             [{"op": "QUANTIZE", "inputs": [0], "outputs": [1]}, {"op": "QUANTIZE", "inputs": [1], "outputs": [2]}],
             [0], [2], r"its (input|output) 'u' is uint8 \(legacy quantization\)")


@pytest.mark.parametrize("op", ["RELU", "RELU6"])
@pytest.mark.parametrize("scales", [(3e-4, 2e-4), (1e-4, 1e-4), (2e-4, 5e-4)])
def test_int16_relu_on_every_code_equals_litert(tmp_path, op, scales):
    content = build_tflite([_act16("x", [1, 65536], scales[0]), _act16("y", [1, 65536], scales[1])],
                           [{"op": op, "inputs": [0], "outputs": [1]}], [0], [1])
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    for kernels in KERNELS:
        g = fxpsim.import_tflite(path, kernels=kernels)
        np.testing.assert_array_equal(g.run(ALL_CODES.reshape(1, -1)), _litert_codes(content, kernels, ALL_CODES)[None])


def test_int16_relu_n1_to_1_is_refused_as_litert_fails(tmp_path):
    content = build_tflite([_act16("x", [1, 8], 1e-4), _act16("y", [1, 8], 1e-4)],
                           [{"op": "RELU_N1_TO_1", "inputs": [0], "outputs": [1]}], [0], [1])
    with pytest.raises(RuntimeError, match="got INT16"):
        _litert_codes(content, "reference", np.zeros(8, np.int16))
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"RELU_N1_TO_1 on int16 \(16x8\) tensors: LiteRT's int16 RELU_N1_TO_1"):
        fxpsim.import_tflite(path)

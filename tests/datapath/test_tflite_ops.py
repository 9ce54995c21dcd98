"""Tests of fxpsim.datapath.tflite against LiteRT itself, hand tables and big-integer references.

The vectors (``tests/vectors/tflite_ops``, made by ``tools/fixtures/tflite_ops``) hold single-op int8
models converted by TensorFlow and run by LiteRT with its reference kernels (``BUILTIN_REF``), its
optimized kernels (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``) and XNNPACK (``BUILTIN``), and by TFLite
Micro.  Every case is replayed here op by op with fxpsim's kernels and compared bit for bit; the
elementwise unary cases feed all 256 int8 codes.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import platform
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.datapath import tflite as T
from fxpsim.datapath.integer_ops import quantized_add
from fxpsim.datapath.requantize import INT32_MAX, INT32_MIN, activation_range, quantize_multiplier
from reference import ref_mbqm, ref_rdbpot, ref_srdhm, ref_wrap32, round_fraction

KERNELS = ("reference", "builtin", "xnnpack")
GROUPS = ("logistic", "tanh", "leaky_relu", "hard_swish", "softmax", "mean", "mul", "add", "sub", "max_pool", "pad",
          "concatenation", "quantize", "requantize")
#: Minimum number of LiteRT cases per op group (the vectors must not silently shrink).
MIN_CASES = {"logistic": 14, "tanh": 13, "leaky_relu": 6, "hard_swish": 7, "softmax": 11, "mean": 17, "mul": 8,
             "add": 8, "sub": 10, "max_pool": 5, "pad": 3, "concatenation": 5, "quantize": 3, "requantize": 12}
UNARY_ELEMENTWISE = ("logistic", "tanh", "leaky_relu", "hard_swish")


# --------------------------------------------------------------------------- vectors
class Vectors:
    def __init__(self, root):
        self.root = root
        self.index = json.loads((root / "index.json").read_text())
        self.arrays = {}
        for group in self.index["groups"]:
            with np.load(root / f"{group}.npz") as z:
                self.arrays[group] = {k: z[k] for k in z.files}
        self.tflm = json.loads((root / "tflm.json").read_text())
        with np.load(root / "tflm.npz") as z:
            self.tflm_arrays = {k: z[k] for k in z.files}

    def cases(self, group):
        return self.index["groups"][group]

    def tensor(self, group, name, i):
        return self.arrays[group][f"{name}__t{i}"]

    def expected(self, group, name, kernels):
        meta = self.cases(group)[name]
        ref = [self.tensor(group, name, t) for t in meta["outputs"]]
        if kernels == "reference" or meta[f"{kernels}_equals_ref"]:
            return ref
        return [self.arrays[group][f"{name}__out{k}__{kernels}"] for k in range(len(ref))]


@pytest.fixture(scope="module")
def vec(vectors_dir):
    root = vectors_dir / "tflite_ops"
    assert (root / "index.json").is_file(), f"LiteRT vectors not found in {root}"
    return Vectors(root)


ALL_CASES = []
try:   # parametrize from the committed index (the fixture asserts it exists)
    from paths import VECTORS_DIR
    _index = json.loads((VECTORS_DIR / "tflite_ops" / "index.json").read_text())
    ALL_CASES = [(g, n) for g in _index["groups"] for n in _index["groups"][g]]
except (OSError, ImportError):      # pragma: no cover - reported by test_vectors_present
    pass


def _q(meta, i):
    """(scale, zero point, dtype) of tensor ``i`` (scale and zero point None for a float tensor)."""
    t = meta["tensors"][str(i)]
    if not t["scale"]:
        return None, None, np.dtype(t["dtype"])
    return t["scale"][0], t["zero_point"][0], np.dtype(t["dtype"])


def _const(meta, i):
    c = meta["constants"][str(i)]
    return np.asarray(c["values"]).reshape(c["shape"])


def run_op(op, meta, values, kernels):
    """Run one TFLite op with fxpsim's kernels: the output array."""
    name, opts = op["op"], op["options"]
    ins = op["inputs"]
    out = op["outputs"][0]
    so, zo, dto = _q(meta, out)
    x = values.get(ins[0])
    if name in ("LOGISTIC", "TANH"):
        si, zi, dt = _q(meta, ins[0])
        if name == "LOGISTIC":
            return T.quantized_logistic(x, T.logistic_params(si, zi, output_scale=so, output_zero_point=zo, dtype=dt),
                                        kernels=kernels)
        return T.quantized_tanh(x, T.tanh_params(si, zi, output_scale=so, output_zero_point=zo, dtype=dt),
                                kernels=kernels)
    if name == "LEAKY_RELU":
        si, zi, dt = _q(meta, ins[0])
        return T.quantized_leaky_relu(x, T.leaky_relu_params(si, zi, so, zo, opts["alpha"], dtype=dt), kernels=kernels)
    if name == "HARD_SWISH":
        si, zi, dt = _q(meta, ins[0])
        return T.quantized_hard_swish(x, T.hard_swish_params(si, zi, so, zo, dtype=dt))
    if name == "SOFTMAX":
        si, zi, dt = _q(meta, ins[0])
        p = T.softmax_params(si, beta=opts["beta"], output_scale=so, output_zero_point=zo, input_dtype=dt,
                             output_dtype=dto)
        return T.quantized_softmax(x, p, kernels=kernels)
    if name == "MEAN":
        si, zi, dt = _q(meta, ins[0])
        axes = _const(meta, ins[1]).reshape(-1).tolist()
        return T.quantized_mean(x, axes, T.mean_params(si, zi, so, zo, dtype=dt), keepdims=opts["keepDims"],
                                kernels=kernels)
    if name in ("MUL", "ADD", "SUB"):
        (s1, z1, dt), (s2, z2, _) = _q(meta, ins[0]), _q(meta, ins[1])
        act = opts["fusedActivationFunction"].lower()
        b = values[ins[1]]
        if name == "MUL":
            return T.quantized_mul(x, b, T.mul_params(s1, z1, s2, z2, so, zo, activation=act, dtype=dt), kernels=kernels)
        if name == "SUB":
            return T.quantized_sub(x, b, T.sub_params(s1, z1, s2, z2, so, zo, activation=act, dtype=dt), kernels=kernels)
        lo, hi = activation_range(act, so, zo, dt)
        add = T.quantized_add_xnnpack if kernels == "xnnpack" else quantized_add
        return add(x, b, scale1=s1, zp1=z1, scale2=s2, zp2=z2, out_scale=so, out_zp=zo, act_min=lo, act_max=hi)
    if name == "MAX_POOL_2D":
        lo, hi = activation_range(opts["fusedActivationFunction"], so, zo, dto)
        return T.quantized_max_pool2d(x, (opts["filterHeight"], opts["filterWidth"]),
                                      stride=(opts["strideH"], opts["strideW"]), padding=opts["padding"],
                                      act_min=lo, act_max=hi)
    if name in ("PAD", "PADV2"):
        const = int(_const(meta, ins[2]).reshape(-1)[0]) if name == "PADV2" else None
        return T.quantized_pad(x, _const(meta, ins[1]), zero_point=zo, constant=const)
    if name == "CONCATENATION":
        return T.quantized_concatenation([values[i] for i in ins], opts["axis"],
                                         input_quant=[_q(meta, i)[:2] for i in ins], output_quant=(so, zo))
    if name == "QUANTIZE":
        si, zi, dti = _q(meta, ins[0])
        if x.dtype == np.float32:
            return T.quantize_tflite(x, so, zo, dto, kernels=kernels)
        p = T.requantize_params(si, zi, so, zo, input_dtype=dti, output_dtype=dto)
        return T.requantize_tflite(x, p, kernels=kernels)
    if name == "DEQUANTIZE":
        si, zi, _ = _q(meta, ins[0])
        return T.dequantize_tflite(x, si, zi, kernels=kernels)
    if name == "RESHAPE":
        return x.reshape(meta["tensors"][str(out)]["shape"])
    raise NotImplementedError(name)


def run_case(vec, group, name, kernels):
    meta = vec.cases(group)[name]
    values = {i: vec.tensor(group, name, i) for i in meta["inputs"]}
    for op in meta["ops"]:
        values[op["outputs"][0]] = run_op(op, meta, values, kernels)
    return meta, values


# --------------------------------------------------------------------------- LiteRT vectors
def test_vectors_present(vec):
    assert ALL_CASES, "could not list the LiteRT cases"
    assert set(vec.index["groups"]) == set(GROUPS)
    for group, n in MIN_CASES.items():
        assert len(vec.cases(group)) >= n, group
    assert vec.index["ai_edge_litert"] and vec.index["tensorflow"]


def test_unary_elementwise_cases_are_exhaustive(vec):
    for group in UNARY_ELEMENTWISE:
        for name, meta in vec.cases(group).items():
            x = vec.tensor(group, name, meta["inputs"][0])
            info = np.iinfo(x.dtype)
            np.testing.assert_array_equal(np.sort(x.reshape(-1)), np.arange(info.min, info.max + 1), err_msg=name)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("group,name", ALL_CASES)
def test_bit_exact_with_litert(vec, group, name, kernels):
    """Every case, every LiteRT kernel family: fxpsim's outputs equal LiteRT's bit for bit."""
    meta, values = run_case(vec, group, name, kernels)
    for got_i, want in zip(meta["outputs"], vec.expected(group, name, kernels)):
        got = values[got_i]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=f"{group}/{name} kernels={kernels}")
        if got.dtype == np.float32:
            np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))   # -0.0 and NaN too


@pytest.mark.parametrize("group,name", ALL_CASES)
def test_every_intermediate_tensor_of_the_reference_run(vec, group, name):
    meta, values = run_case(vec, group, name, "reference")
    for op in meta["ops"]:
        i = op["outputs"][0]
        np.testing.assert_array_equal(values[i], vec.tensor(group, name, i), err_msg=f"{group}/{name} {op['op']}")


def test_where_litert_kernel_families_differ(vec):
    """The facts of the README: which ops' optimized and XNNPACK kernels differ from the reference."""
    differ = {k: {g for g in GROUPS if any(not m[f"{k}_equals_ref"] for m in vec.cases(g).values())}
              for k in ("builtin", "xnnpack")}
    assert differ["builtin"] == {"quantize", "requantize", "mean", "softmax"}
    assert differ["xnnpack"] == {"quantize", "requantize", "mul", "add", "sub", "mean", "leaky_relu", "logistic", "tanh",
                                 "softmax"}


def test_tflite_micro_agrees_and_runs_the_fixed_point_kernels(vec):
    """TFLite Micro equals LiteRT's reference kernels except on LOGISTIC/TANH, where it runs gemmlowp's
    fixed point: fxpsim's ``kernels="integer"`` reproduces those codes."""
    ran = {k: v for k, v in vec.tflm["cases"].items() if "error" not in v}
    assert len(ran) >= 100
    differ = {k for k, v in ran.items() if not v["equals_ref"]}
    assert differ and all(k.split("__")[0] in ("logistic", "tanh") for k in differ)
    for group in ("logistic", "tanh"):
        for name, meta in vec.cases(group).items():
            key = f"{group}__{name}"
            if key not in ran:
                continue
            si, zi, dt = _q(meta, meta["inputs"][0])
            x = vec.tensor(group, name, meta["inputs"][0])
            if group == "logistic":
                got = T.quantized_logistic(x, T.logistic_params(si, zi), kernels="integer")
            else:
                got = T.quantized_tanh(x, T.tanh_params(si, zi), kernels="integer")
            want = vec.tflm_arrays[f"{key}__out0"] if key in differ else vec.tensor(group, name, meta["outputs"][0])
            np.testing.assert_array_equal(got, want, err_msg=key)


# --------------------------------------------------------------------------- QUANTIZE / DEQUANTIZE
def test_quantize_hand_table():
    s = 0.5
    x = np.array([0.25, -0.25, 0.75, -0.75, 0.24999999, 63.5, 64.0, -64.25, -100.0, 1e30, -np.inf], np.float32)
    np.testing.assert_array_equal(T.quantize_tflite(x, s, 0),
                                  [1, -1, 2, -2, 0, 127, 127, -128, -128, -128, -128])
    # half away from zero (numpy's rint would give 0 and 2 for 0.5 and 2.5 steps)
    np.testing.assert_array_equal(T.quantize_tflite(np.array([0.25, 1.25], np.float32), s, 3), [4, 6])
    assert T.quantize_tflite(np.array([0.25, 1.25], np.float32), s, 3, kernels="xnnpack").tolist() == [3, 5]
    # NaN and |x/s| >= 2^31: x86-64's int32 conversion gives INT32_MIN, the int32 sum with z wraps
    bad = np.array([np.nan, np.inf, 3e9], np.float32)
    np.testing.assert_array_equal(T.quantize_tflite(bad, s, 5), [-128] * 3)
    np.testing.assert_array_equal(T.quantize_tflite(bad, s, -1), [127] * 3)
    assert T.quantize_tflite(np.float32(-3.0), 1.0, 10, np.uint8) == 7
    assert T.quantize_tflite(np.float32(1000.0), 0.01, 0, np.int16) == 32767


def test_dequantize_hand_table():
    y = T.dequantize_tflite(np.array([-128, -3, 0, 127], np.int8), 0.1, -3)
    want = (np.float64(np.float32(0.1)) * np.array([-125, 0, 3, 130])).astype(np.float32)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, want)


@given(st.floats(2.0 ** -13, 10, width=32), st.integers(-128, 127),
       st.lists(st.integers(-128, 127), min_size=1, max_size=32))
def test_dequantize_is_correctly_rounded_and_inverts_quantize(scale, zp, codes):
    x = np.array(codes, np.int8)
    y = T.dequantize_tflite(x, scale, zp)
    s = Fraction(float(np.float32(scale)))
    # s * (c - zp) is exact in float64 (24 + 9 bits), so float32(float(.)) is the correctly rounded value
    np.testing.assert_array_equal(y, np.array([float(s * (c - zp)) for c in codes], np.float64).astype(np.float32))
    np.testing.assert_array_equal(T.quantize_tflite(y, scale, zp), x)


@given(st.floats(2.0 ** -10, 10, width=32), st.integers(-128, 127), st.integers(-128, 127), st.booleans())
def test_quantize_reference_rounds_the_float32_quotient_half_away(scale, zp, k, away):
    s32 = np.float32(scale)
    x = np.float32((k + 0.5) * float(s32)) if away else np.float32(k * float(s32))
    q = np.float32(x / s32)                                          # IEEE float32 division, as C
    want = max(-128, min(127, int(round_fraction(Fraction(float(q)), "half_away")) + zp))
    assert int(T.quantize_tflite(x, scale, zp)) == want


def test_requantize_hand_table_and_fast_path():
    x = np.arange(-128, 128, dtype=np.int8)
    same = T.requantize_params(0.02, -1, 0.02, 30)
    np.testing.assert_array_equal(T.requantize_tflite(x, same), np.clip(x.astype(int) + 31, -128, 127))
    xor = T.requantize_params(0.1, 0, 0.1, 128, output_dtype=np.uint8)
    np.testing.assert_array_equal(T.requantize_tflite(x, xor), (x.view(np.uint8) ^ 0x80))
    # ratio 1/2 = (2^30, shift 0): SaturatingRoundingDoublingHighMul alone, ties toward +inf
    half = T.requantize_params(0.25, 0, 0.5, 0)
    np.testing.assert_array_equal(T.requantize_tflite(np.array([3, -3, 5, -5], np.int8), half), [2, -1, 3, -2])
    # ratio 1/4 = (2^30, shift -1): then RoundingDivideByPOT, ties away from zero
    quarter = T.requantize_params(0.25, 0, 1.0, 0)
    np.testing.assert_array_equal(T.requantize_tflite(np.array([2, -2, 6, -6], np.int8), quarter), [1, -1, 2, -2])
    # the optimized kernel's blocks of 16 shift with vrshl (ties up), its tail like the reference
    y = T.requantize_tflite(np.array([-2] * 17, np.int8), quarter, kernels="builtin")
    assert y[:16].tolist() == [0] * 16 and y[16] == -1


@given(st.floats(2.0 ** -10, 4, width=32), st.integers(-128, 127), st.floats(2.0 ** -10, 4, width=32), st.integers(-128, 127))
def test_requantize_matches_big_integer_reference(si, zi, so, zo):
    try:
        p = T.requantize_params(si, zi, so, zo)
    except ValueError:
        return
    x = np.arange(-128, 128, dtype=np.int8)
    want = [max(-128, min(127, ref_mbqm(int(c) - zi, p.multiplier, p.shift, "double") + zo)) for c in x]
    np.testing.assert_array_equal(T.requantize_tflite(x, p), want)


# --------------------------------------------------------------------------- MUL / SUB / ADD
def test_mul_params_use_float32_arithmetic():
    s1, s2, so = 0.1, 0.3, 0.07
    p = T.mul_params(s1, 0, s2, 0, so, 0)
    real = float(np.float32(np.float32(s1) * np.float32(s2)) / np.float32(so))
    assert (p.multiplier, p.shift) == quantize_multiplier(real)
    assert p.act_min == -128 and T.mul_params(s1, 0, s2, 0, so, 5, activation="relu").act_min == 5


@given(st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127), st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127),
       st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127),
       st.lists(st.tuples(st.integers(-128, 127), st.integers(-128, 127)), min_size=1, max_size=40))
def test_mul_matches_big_integer_reference(s1, z1, s2, z2, so, zo, pairs):
    try:
        p = T.mul_params(s1, z1, s2, z2, so, zo)
    except ValueError:
        return
    a, b = (np.array(v, np.int8) for v in zip(*pairs))
    want = [max(-128, min(127, ref_mbqm((x - z1) * (y - z2), p.multiplier, p.shift, "double") + zo)) for x, y in pairs]
    np.testing.assert_array_equal(T.quantized_mul(a, b, p), want)


@given(st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127), st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127),
       st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127),
       st.lists(st.tuples(st.integers(-128, 127), st.integers(-128, 127)), min_size=1, max_size=40))
def test_sub_matches_big_integer_reference(s1, z1, s2, z2, so, zo, pairs):
    try:
        p = T.sub_params(s1, z1, s2, z2, so, zo)
    except ValueError:
        return
    a, b = (np.array(v, np.int8) for v in zip(*pairs))
    want = []
    for x, y in pairs:
        v1 = ref_mbqm((x - z1) << 20, p.multiplier1, p.shift1, "double")
        v2 = ref_mbqm((y - z2) << 20, p.multiplier2, p.shift2, "double")
        want.append(max(-128, min(127, ref_mbqm(ref_wrap32(v1 - v2), p.output_multiplier, p.output_shift, "double")
                                  + zo)))
    np.testing.assert_array_equal(T.quantized_sub(a, b, p), want)


def test_binary_broadcasting_matches_numpy_rules():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (2, 1, 4, 3)).astype(np.int8)
    b = rng.integers(-128, 128, (5, 1, 3)).astype(np.int8)
    p = T.mul_params(0.05, 3, 0.1, -7, 0.2, 1)
    full = T.quantized_mul(np.broadcast_to(a, (2, 5, 4, 3)).copy(), np.broadcast_to(b, (2, 5, 4, 3)).copy(), p)
    np.testing.assert_array_equal(T.quantized_mul(a, b, p), full)
    ps = T.sub_params(0.05, 3, 0.1, -7, 0.2, 1)
    np.testing.assert_array_equal(T.quantized_sub(a, b, ps), T.quantized_sub(np.broadcast_to(a, full.shape).copy(),
                                                                             np.broadcast_to(b, full.shape).copy(), ps))
    # the existing ADD kernel broadcasts the same way (LiteRT's bcast_* cases check its values)
    kw = dict(scale1=0.05, zp1=3, scale2=0.1, zp2=-7, out_scale=0.2, out_zp=1)
    np.testing.assert_array_equal(quantized_add(a, b, **kw), quantized_add(np.broadcast_to(a, full.shape).copy(),
                                                                           np.broadcast_to(b, full.shape).copy(), **kw))
    with pytest.raises(ValueError, match="broadcast"):
        T.quantized_mul(a, np.zeros((3, 2), np.int8), p)


def test_sub_hand_table():
    p = T.sub_params(0.5, 0, 0.5, 0, 0.5, 0)
    np.testing.assert_array_equal(T.quantized_sub(np.array([5, -128, 127, 0], np.int8),
                                                  np.array([3, 127, -128, 0], np.int8), p), [2, -128, 127, 0])
    with pytest.raises(ValueError, match="not in"):
        T.sub_params(1.0, 0, 1.0, 0, 1e-8, 0)            # output multiplier > 1: undefined in TFLite


# --------------------------------------------------------------------------- MEAN
def _ref_mean(x, axes, keepdims, p, lo=-128, hi=127):
    """Scalar big-integer QuantizedMeanOrSum."""
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    total = x.astype(object).sum(axis=tuple(axes), keepdims=keepdims) if axes else x.astype(object)
    k = min(n.bit_length() - 1, 32, 31 + p.shift)
    m, s = (p.multiplier << k) // n, p.shift - k
    out = np.vectorize(lambda t: max(lo, min(hi, ref_mbqm(ref_wrap32(int(t) - p.input_zero_point * n), m, s,
                                                          "double") + p.output_zero_point)), otypes=[np.int64])
    return out(total)


@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(), st.floats(2.0 ** -10, 1, width=32),
       st.integers(-128, 127), st.floats(2.0 ** -10, 1, width=32), st.integers(-128, 127), st.booleans())
def test_mean_matches_big_integer_reference(shape, data, si, zi, so, zo, keepdims):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    x = np.array(data.draw(st.lists(st.integers(-128, 127), min_size=int(np.prod(shape)),
                                    max_size=int(np.prod(shape)))), np.int8).reshape(shape)
    p = T.mean_params(si, zi, so, zo)
    want = _ref_mean(x, axes, keepdims, p)
    np.testing.assert_array_equal(T.quantized_mean(x, axes, p, keepdims=keepdims), want)
    # the plan on the int8 codes themselves: the table of every possible sum
    np.testing.assert_array_equal(T.mean_plan(x.shape, axes, p, keepdims=keepdims)(x), want)


@pytest.mark.parametrize("fill, zi", [(32767, -1000), (-32768, -1000), (None, -32768), (None, 0)])
def test_mean_int16_sums_that_wrap_int32(fill, zi):
    """70,000 int16 codes: the int32 sum wraps (|S| up to 2.3e9), and S - z n wraps again or back (z = -32768), as in
    TFLite; the plan built once for the shape gives the same codes on the int16 codes and on int64 ones."""
    rng = np.random.default_rng(3)
    x = (np.full((2, 70_000), fill, np.int16) if fill is not None
         else rng.integers(20_000, 32_768, (2, 70_000)).astype(np.int16))
    p = T.mean_params(0.5, zi, 0.25, 17, dtype=np.int16)
    want = _ref_mean(x, [1], False, p, -32768, 32767)
    np.testing.assert_array_equal(T.quantized_mean(x, 1, p), want)
    plan = T.mean_plan(x.shape, [1], p)
    np.testing.assert_array_equal(plan(x), want)
    np.testing.assert_array_equal(plan(x.astype(np.int64)), want)


def test_mean_hand_table():
    p = T.mean_params(0.1, 0, 0.1, 0)
    x = np.array([[1, 2], [3, 5]], np.int8)
    np.testing.assert_array_equal(T.quantized_mean(x, 1, p), [2, 4])           # 1.5 -> 2, 4 -> 4
    np.testing.assert_array_equal(T.quantized_mean(x, [0, 1], p), 3)             # 11/4 -> 3
    np.testing.assert_array_equal(T.quantized_mean(x, [-1, 1], p), [2, 4])       # repeats resolve to one axis
    np.testing.assert_array_equal(T.quantized_mean(x, (), p), x)
    assert T.quantized_mean(x, None, p, keepdims=True).shape == (1, 1)
    np.testing.assert_array_equal(T.quantized_mean(np.array([-1, -2], np.int8), 0, p), -1)   # -1.5: tie up (SRDHM)


# --------------------------------------------------------------------------- MAX_POOL / PAD / CONCATENATION
def test_max_pool_hand_table():
    x = np.arange(16, dtype=np.int8).reshape(1, 4, 4, 1) - 8
    np.testing.assert_array_equal(T.quantized_max_pool2d(x, 2)[0, :, :, 0], [[-3, -1], [5, 7]])
    same = T.quantized_max_pool2d(x, 3, stride=2, padding="SAME")[0, :, :, 0]
    np.testing.assert_array_equal(same, [[2, 3], [6, 7]])            # padding (0, 1): odd pixel after
    np.testing.assert_array_equal(T.quantized_max_pool2d(x, 2, act_min=-4, act_max=4)[0, :, :, 0], [[-3, -1], [4, 4]])
    assert T.quantized_max_pool2d(np.full((1, 2, 2, 1), -128, np.int8), 1, padding=((1, 0), (1, 0)))[0, 0, 0, 0] == -128


def test_pad_hand_table():
    x = np.array([[1, 2]], np.int8)
    np.testing.assert_array_equal(T.quantized_pad(x, [[1, 0], [0, 2]], zero_point=-5),
                                  [[-5, -5, -5, -5], [1, 2, -5, -5]])
    np.testing.assert_array_equal(T.quantized_pad(x, [[0, 0], [1, 1]], zero_point=0, constant=9), [[9, 1, 2, 9]])


def test_concatenation_rules():
    a, b = np.array([[1, 2]], np.int8), np.array([[3]], np.int8)
    np.testing.assert_array_equal(T.quantized_concatenation([a, b], 1), [[1, 2, 3]])
    with pytest.raises(ValueError, match="needs them equal"):
        T.quantized_concatenation([a, b], 1, input_quant=[(0.1, 0), (0.2, 0)], output_quant=(0.1, 0))
    got = T.quantized_concatenation([a, b], 1, input_quant=[(0.1, 0), (0.2, 0)], output_quant=(0.1, 0),
                                    requantize=True)
    np.testing.assert_array_equal(got, [[1, 2, 6]])
    # uint8: ConcatenationWithScaling in float32, x * c + b rounded half away from zero
    u = np.array([[0, 1, 255]], np.uint8)
    got = T.quantized_concatenation([u], 0, input_quant=[(0.5, 1)], output_quant=(1.0, 10))
    np.testing.assert_array_equal(got, [[9, 10, 137]])          # -0.5 -> -1, 0, 127


# --------------------------------------------------------------------------- LOGISTIC / TANH
def test_logistic_and_tanh_saturate_at_both_ends():
    x = np.arange(-128, 128, dtype=np.int8)
    pl = T.logistic_params(0.5, 0)
    for kernels in ("reference", "xnnpack", "integer"):
        y = T.quantized_logistic(x, pl, kernels=kernels)
        assert y[0] == -128 and y[-1] == 127 and y[128] == 0, kernels
        assert np.all(np.diff(y.astype(int)) >= 0)
    pt = T.tanh_params(0.5, 0)
    for kernels in ("reference", "xnnpack", "integer"):
        y = T.quantized_tanh(x, pt, kernels=kernels)
        assert y[0] == -128 and y[-1] == 127 and y[128] == 0, kernels
        assert np.all(np.diff(y.astype(int)) >= 0)


def test_logistic_table_and_fixed_point_agree_almost_everywhere():
    x = np.arange(-128, 128, dtype=np.int8)
    rng = np.random.default_rng(3)
    for s in 10 ** rng.uniform(-3, 0.5, 40):
        zp = int(rng.integers(-128, 128))
        p, q = T.logistic_params(s, zp), T.tanh_params(s, zp)
        for f, pp in ((T.quantized_logistic, p), (T.quantized_tanh, q)):
            d = np.abs(f(x, pp).astype(int) - f(x, pp, kernels="integer").astype(int))
            assert d.max() <= 1


def _libm():
    if platform.system() != "Linux" or not platform.libc_ver()[0] == "glibc":
        return None
    version = tuple(int(v) for v in platform.libc_ver()[1].split(".")[:2])
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for f in ("tanhf", "expf"):
        getattr(lib, f).restype = ctypes.c_float
        getattr(lib, f).argtypes = [ctypes.c_float]
    return lib, version


def test_tanhf_port_matches_glibc():
    """fxpsim's float32 tanhf is fdlibm's, bit for bit what glibc before 2.41 (CORE-MATH) returns."""
    found = _libm()
    if found is None or found[1] >= (2, 41):
        pytest.skip("needs glibc < 2.41 (fdlibm tanhf) to compare with")
    lib, _ = found
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-30, 30, 20000), rng.uniform(-1.2, 1.2, 20000), 10 ** rng.uniform(-40, 1.5, 5000),
                        [0.0, -0.0, 1.0, -1.0, 22.0, 9.01, np.inf, -np.inf, 1e-30, -3e-39]]).astype(np.float32)
    want = np.array([lib.tanhf(float(v)) for v in x], np.float32)
    np.testing.assert_array_equal(T._tanhf(x).view(np.int32), want.view(np.int32))


def test_lookup_tables_match_libm_tables():
    """LOGISTIC/TANH tables from fxpsim's float32 functions equal tables built with the C library's
    ``expf``/``tanhf`` (what LiteRT calls) over many scales and zero points."""
    found = _libm()
    if found is None:
        pytest.skip("needs glibc")
    lib, version = found
    rng = np.random.default_rng(5)
    for s, zp in zip(10 ** rng.uniform(-4, 0.7, 150), rng.integers(-128, 128, 150)):
        s = float(np.float32(s))
        deq = np.float32(s) * (np.arange(-128, 128) - zp).astype(np.float32)
        one = np.float32(1)
        sig = np.array([one / (one + np.float32(lib.expf(float(-v)))) for v in deq], np.float32)
        want = np.clip(T._to_int32((T._round_half_away(sig * np.float32(256)).astype(np.float32)
                                    + np.float32(-128))), -128, 127)
        np.testing.assert_array_equal(T.logistic_params(s, int(zp)).lut, want)
        if version < (2, 41):
            th = np.array([lib.tanhf(float(v)) for v in deq], np.float32)
            want = np.clip(T._to_int32(T._round_half_away(th * np.float32(128)).astype(np.float32)), -128, 127)
            np.testing.assert_array_equal(T.tanh_params(s, int(zp)).lut, want)


# --------------------------------------------------------------------------- gemmlowp fixed point
def _ref_srmpot(x, e):
    if e <= 0:
        return ref_rdbpot(x, -e) if e else x
    thr = (1 << (31 - e)) - 1
    return INT32_MAX if x > thr else INT32_MIN if x < -thr else x << e


def _ref_exp_quarter(a):
    c, third = 1895147668, 715827883
    x = ref_wrap32(a + (1 << 28))
    x2 = ref_srdhm(x, x)
    x3 = ref_srdhm(x2, x)
    x4 = ref_srdhm(x2, x2)
    t = ref_rdbpot(ref_wrap32(ref_srdhm(ref_wrap32(ref_rdbpot(x4, 2) + x3), third) + x2), 1)
    return ref_wrap32(c + ref_srdhm(c, ref_wrap32(x + t)))


def _ref_exp_neg(a, k):
    """Scalar transcription of gemmlowp's exp_on_negative_values on Python ints."""
    frac = 31 - k
    quarter = 1 << (frac - 2)
    a_mod = ref_wrap32((a & (quarter - 1)) - quarter)
    result = _ref_exp_quarter(_ref_srmpot(a_mod, k))
    remainder = ref_wrap32(a_mod - a)
    for e, m in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
                 (4, 242)):
        if k > e and remainder & (1 << (frac + e)):
            result = ref_srdhm(result, m)
    if k > 5 and a < -(1 << (36 - k)):
        result = 0
    return INT32_MAX if a == 0 else result


def _ref_recip(a, minus):
    half = int(Fraction(a + INT32_MAX + (1 if a + INT32_MAX >= 0 else -1), 2))
    x = ref_wrap32(1515870810 + ref_srdhm(half, -1010580540))
    for _ in range(3):
        x = ref_wrap32(x + _ref_srmpot(ref_srdhm(x, ref_wrap32((1 << 29) - ref_srdhm(half, x))), 2))
    return _ref_srmpot(ref_wrap32(x - (1 << 29)), 2) if minus else _ref_srmpot(x, 1)


@given(st.integers(INT32_MIN, 0), st.integers(0, 12))
def test_exp_on_negative_values_matches_scalar_transcription_and_exp(a, k):
    got = int(T.gemmlowp_exp_on_negative_values(np.array([a]), k)[0])
    assert got == _ref_exp_neg(a, k)
    exact = math.exp(a / 2 ** (31 - k))
    assert abs(got / 2 ** 31 - exact) < 1e-6


@given(st.integers(1, INT32_MAX - 1), st.booleans())
def test_reciprocals_match_scalar_transcription_and_math(a, minus):
    f = T.gemmlowp_one_minus_x_over_one_plus_x_for_x_in_0_1 if minus else T.gemmlowp_one_over_one_plus_x_for_x_in_0_1
    got = int(f(np.array([a]))[0])
    assert got == _ref_recip(a, minus)
    x = a / 2 ** 31
    assert abs(got / 2 ** 31 - ((1 - x) if minus else 1) / (1 + x)) < 1e-7


@given(st.integers(INT32_MIN + 1, INT32_MAX))
def test_fixed_logistic_and_tanh_are_accurate(a):
    x = a / 2 ** 27                                                  # Q4.27
    lo = int(T.gemmlowp_logistic(np.array([a]), 4)[0]) / 2 ** 31
    th = int(T.gemmlowp_tanh(np.array([a]), 4)[0]) / 2 ** 31
    assert abs(lo - 1 / (1 + math.exp(-x))) < 1e-6
    assert abs(th - math.tanh(x)) < 2e-6


def test_gemmlowp_primitives_hand_table():
    assert T.gemmlowp_rounding_half_sum(np.array([1, -1, 2, -3]), np.array([2, -2, 2, 0])).tolist() == [2, -2, 2, -2]
    np.testing.assert_array_equal(T.gemmlowp_saturating_rounding_multiply_by_pot(
        np.array([3, -3, 1 << 29, -(1 << 29), 5]), 2), [12, -12, INT32_MAX, INT32_MIN, 20])
    np.testing.assert_array_equal(T.gemmlowp_saturating_rounding_multiply_by_pot(np.array([6, -6, 5]), -2), [2, -2, 1])
    assert int(T.gemmlowp_exp_on_negative_values(np.array([0]), 5)[0]) == INT32_MAX
    assert int(T.gemmlowp_logistic(np.array([0]), 4)[0]) == 1 << 30
    assert int(T.gemmlowp_tanh(np.array([0]), 4)[0]) == 0
    assert T.calculate_input_radius(4, 23) == (15 << 27) >> 23
    assert T.calculate_input_radius(5, 20) == (31 << 26) >> 20


# --------------------------------------------------------------------------- SOFTMAX / HARD_SWISH / LEAKY_RELU
def test_softmax_hand_table():
    p = T.softmax_params(0.1)
    assert T.quantized_softmax(np.array([[5]], np.int8), p)[0, 0] == 127           # 1.0 saturates
    y = T.quantized_softmax(np.full((1, 4), 7, np.int8), p)
    np.testing.assert_array_equal(y, [[-64] * 4])                                    # 1/4 = 64/256
    wide = T.softmax_params(1.0)                                                     # diff < diff_min: exactly 0
    assert wide.diff_min > -128
    np.testing.assert_array_equal(T.quantized_softmax(np.array([[127, -128]], np.int8), wide), [[127, -128]])
    for kernels in KERNELS:
        rows = np.random.default_rng(1).integers(-128, 128, (50, 10)).astype(np.int8)
        y = T.quantized_softmax(rows, T.softmax_params(0.05, beta=1.5), kernels=kernels).astype(int)
        d = rows.astype(float) - rows.max(1, keepdims=True)
        s = np.exp(1.5 * float(np.float32(0.05)) * d)
        assert np.abs(y + 128 - 256 * s / s.sum(1, keepdims=True)).max() <= 1.5


def test_softmax_params_follow_preprocess_softmax_scaling():
    p = T.softmax_params(0.04, beta=2.0)
    real = 2.0 * float(np.float32(0.04)) * 2 ** 26
    assert (p.input_multiplier, p.input_left_shift) == quantize_multiplier(real)
    assert p.diff_min == -(((31 << 26) >> p.input_left_shift))
    with pytest.raises(ValueError, match="exceed 1"):
        T.softmax_params(1e-9)


def test_hard_swish_hand_table():
    p = T.hard_swish_params(0.05, 0, 0.05, 0)
    x = np.array([0, 100, -100, 127, -128, 30, -30], np.int8)
    y = T.quantized_hard_swish(x, p).astype(int)
    f = x * 0.05 * np.clip(x * 0.05 + 3, 0, 6) / 6 / 0.05
    assert y[0] == 0 and y[2] == 0 and y[4] == 0
    assert np.abs(y - f).max() <= 1
    with pytest.raises(ValueError, match="exponent"):
        T.hard_swish_params(1.0, 0, 1e-4, 0)


def test_leaky_relu_hand_table_and_negative_alpha():
    p = T.leaky_relu_params(0.1, 0, 0.1, 0, 0.5)
    # -1.5 -> -1: SaturatingRoundingDoublingHighMul breaks the tie toward +inf
    np.testing.assert_array_equal(T.quantized_leaky_relu(np.array([10, -10, -3, 3], np.int8), p), [10, -5, -1, 3])
    n = T.leaky_relu_params(0.1, 0, 0.1, 0, -0.5)            # the sign is applied after the rounding
    np.testing.assert_array_equal(T.quantized_leaky_relu(np.array([10, -10, -3], np.int8), n), [10, 5, 1])


# --------------------------------------------------------------------------- errors
def test_clear_errors():
    x = np.zeros(4, np.int8)
    with pytest.raises(ValueError, match="positive"):
        T.logistic_params(0.0, 0)
    with pytest.raises(ValueError, match="positive"):
        T.mul_params(-0.1, 0, 0.1, 0, 0.1, 0)
    with pytest.raises(ValueError, match="positive"):
        T.quantize_tflite(np.zeros(2), float("nan"), 0)
    with pytest.raises(ValueError, match="out of range"):
        T.mean_params(0.1, 200, 0.1, 0)
    with pytest.raises(TypeError, match="int8 codes"):
        T.quantized_logistic(x.astype(np.int16), T.logistic_params(0.1, 0))
    with pytest.raises(TypeError, match="int8 codes"):
        T.quantized_tanh(x.astype(np.float32), T.tanh_params(0.1, 0))
    with pytest.raises(TypeError, match="params must be"):
        T.quantized_tanh(x, T.logistic_params(0.1, 0))
    with pytest.raises(ValueError, match="kernels"):
        T.quantized_softmax(x, T.softmax_params(0.1), kernels="gpu")
    with pytest.raises(ValueError, match="1/256"):
        T.logistic_params(0.1, 0, output_scale=0.01)
    with pytest.raises(ValueError, match="beta"):
        T.softmax_params(0.1, beta=0.0)
    with pytest.raises(ValueError, match="last axis"):
        T.quantized_softmax(np.zeros((2, 0), np.int8), T.softmax_params(0.1))
    with pytest.raises(ValueError, match="out of range"):
        T.quantized_mean(np.zeros((2, 3), np.int8), 2, T.mean_params(0.1, 0, 0.1, 0))
    with pytest.raises(ValueError, match="non-negative"):
        T.quantized_pad(x, [[-1, 0]], zero_point=0)
    with pytest.raises(ValueError, match="shape"):
        T.quantized_pad(x, [[1, 0], [0, 0]], zero_point=0)
    with pytest.raises(ValueError, match="NHWC"):
        T.quantized_max_pool2d(x, 2)
    with pytest.raises(ValueError, match="larger"):
        T.quantized_max_pool2d(np.zeros((1, 2, 2, 1), np.int8), 3)
    with pytest.raises(ValueError, match="off axis"):
        T.quantized_concatenation([np.zeros((1, 2), np.int8), np.zeros((2, 2), np.int8)], 1)
    with pytest.raises(TypeError, match="dtype"):
        T.quantized_concatenation([np.zeros((1, 2), np.int8), np.zeros((1, 2), np.uint8)], 1)
    with pytest.raises(TypeError, match="real array"):
        T.quantize_tflite(np.array(["a"]), 0.1, 0)
    with pytest.raises(TypeError, match="dtype"):
        T.dequantize_tflite(np.zeros(2, np.float32), 0.1, 0)
    with pytest.raises(ValueError, match="int16 MUL"):
        T.mul_params(0.1, 1, 0.1, 0, 0.1, 0, dtype=np.int16)
    with pytest.raises(ValueError, match="fixed-point"):
        T.quantized_tanh(np.zeros(2, np.uint8), T.tanh_params(0.1, 0, dtype=np.uint8), kernels="integer")
    with pytest.raises(ValueError, match="8-bit"):
        T.requantize_tflite(x, T.requantize_params(0.1, 0, 0.2, 0, output_dtype=np.int16), kernels="builtin")
    with pytest.raises(ValueError, match="integer_bits"):
        T.gemmlowp_exp_on_negative_values(np.array([-1]), 31)
    with pytest.raises(ValueError, match="raw int32"):
        T.gemmlowp_logistic(np.array([1 << 31]), 4)


def test_kernels_never_modify_or_alias_their_inputs():
    x = np.arange(-128, 128, dtype=np.int8)
    before = x.copy()
    for y in (T.quantized_logistic(x, T.logistic_params(0.1, 0)), T.quantized_pad(x, [[0, 0]], zero_point=0),
              T.quantized_concatenation([x], 0), T.quantized_mean(x, (), T.mean_params(0.1, 0, 0.1, 0))):
        assert not np.shares_memory(x, y)
    np.testing.assert_array_equal(x, before)

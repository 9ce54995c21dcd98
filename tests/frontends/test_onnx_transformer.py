"""Transformer encoder blocks as ``onnxruntime.quantization.quantize_static`` makes them (issue 22), live against
onnxruntime (CPU EP, default optimizations): the float32 LayerNormalization kernel against onnxruntime and a
pure-Python float32 model, MatMuls of two run-time operands (QOperator QLinearMatMul, QDQ groups fused or left in
float32) against onnxruntime and Python integers, and a whole encoder layer (QDQ and QOperator, uint8 and int8
activations) compared on its output and on every QuantizeLinear / QLinear* tensor exposed as a graph output.
What is not reproduced is refused naming the node."""
from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from hypothesis import given, settings, strategies as st  # noqa: E402
from onnx import TensorProto, helper, numpy_helper, shape_inference  # noqa: E402

import fxpsim  # noqa: E402
from fxpsim.datapath.onnxruntime.erf import erf  # noqa: E402
from fxpsim.datapath.onnxruntime.layer_norm import MAX_SCALAR_ROW, layer_norm_kernel, layer_norm_rows  # noqa: E402
from fxpsim.frontends.onnx.importer import VECTOR_LAYER_NORM_CPUS, import_onnx, onnxruntime_cpu  # noqa: E402
from ort_session import ort_session  # noqa: E402

F32 = np.float32


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _session(model, threads=None):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------------------ float32 LayerNormalization
def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def _python_layer_norm(row, gamma, beta, eps):
    """Welford's update with every operation rounded to float32, in Python floats (an op on two float32 values in
    double then rounded once to float32 is the float32 op: 53 >= 2 * 24 + 2)."""
    mean = m2 = 0.0
    for k, v in enumerate(row, 1):
        d = _f32(v - mean)
        mean = _f32(mean + _f32(d / k))
        m2 = _f32(m2 + _f32(d * _f32(v - mean)))
    sigma = _f32(_f32(_f32(m2 / len(row)) + _f32(eps)) ** 0.5)
    out = []
    for h, v in enumerate(row):
        y = _f32(_f32(_f32(v - mean) / sigma) * gamma[h])
        out.append(y if beta is None else _f32(y + beta[h]))
    return out


def _round32(q: Fraction) -> float:
    """A rational rounded once to the nearest float32 (ties to even)."""
    f = np.float32(float(q))
    cands = [np.nextafter(f, F32(-np.inf)), f, np.nextafter(f, F32(np.inf))]
    return float(min(cands, key=lambda c: (abs(Fraction(float(c)) - q), int(np.float32(c).view(np.int32)) & 1)))


def _fma(a, b, c) -> float:
    return _round32(Fraction(a) * Fraction(b) + Fraction(c))


def _python_layer_norm_avx2(row, gamma, beta, eps):
    """The AVX2 kernel in Python floats (float64) and rationals: a 4-lane float64 sum for the mean, an 8-lane FMA
    tree of squared deviations, a tail whose first four (of a tail of four or more) are multiplied and added
    unfused and the rest by FMA, the reciprocal of the square root, an FMA output stage."""
    n = len(row)
    lanes64 = [0.0] * 4
    for t in range(0, n // 4 * 4, 4):
        lanes64 = [lanes64[j] + row[t + j] for j in range(4)]
    total64 = (lanes64[0] + lanes64[2]) + (lanes64[1] + lanes64[3])
    for h in range(n // 4 * 4, n):
        total64 += row[h]
    mean = _f32(total64 / n)
    d = [_f32(v - mean) for v in row]
    lanes = [0.0] * 8
    full = n // 8 * 8
    for t in range(0, full, 8):
        lanes = [_fma(d[t + j], d[t + j], lanes[j]) for j in range(8)]
    while len(lanes) > 1:
        half = len(lanes) // 2
        lanes = [_f32(lanes[j] + lanes[j + half]) for j in range(half)]
    total = lanes[0]
    unfused = full + 4 if n - full >= 4 else full
    for h in range(full, n):
        total = _f32(total + _f32(d[h] * d[h])) if h < unfused else _fma(d[h], d[h], total)
    r = _f32(1.0 / _f32(_f32(_f32(total / n) + _f32(eps)) ** 0.5))
    return [_fma(_f32(d[h] * r), gamma[h], 0.0 if beta is None else beta[h]) for h in range(n)]


def _avx2_host() -> bool:
    """A host whose onnxruntime runs the measured vector LayerNormalization: x86-64 with AVX2, without AVX-512
    (flavour "avx2") or with VNNI ("vnni")."""
    return onnxruntime_cpu() in VECTOR_LAYER_NORM_CPUS


def _textbook(rows, gamma, beta, eps):
    """The E[x^2] - mean^2 form with sequential float32 sums (onnxruntime's C++ reference kernel, which 1.32 does
    not run): it must differ on the test inputs, so that they tell the kernels apart."""
    n = rows.shape[1]
    s = np.zeros(len(rows), F32)
    q = np.zeros(len(rows), F32)
    for h in range(n):
        s = (s + rows[:, h]).astype(F32)
        q = (q + (rows[:, h] * rows[:, h]).astype(F32)).astype(F32)
    mean = (s / F32(n)).astype(F32)
    with np.errstate(invalid="ignore"):
        sig = np.sqrt(((q / F32(n)).astype(F32) - (mean * mean).astype(F32) + F32(eps)).astype(F32)).astype(F32)
    y = (((rows - mean[:, None]).astype(F32) / sig[:, None]).astype(F32) * gamma).astype(F32)
    return y if beta is None else (y + beta).astype(F32)


@pytest.mark.parametrize("threads", [1, 4])
def test_layer_norm_kernel_matches_onnxruntime(threads):
    rng = np.random.default_rng(threads)
    differ = 0
    for n in range(1, MAX_SCALAR_ROW):
        for eps, bias in ((1e-5, True), (1e-12, False), (0.25, True)):
            gamma = rng.standard_normal(n).astype(F32)
            beta = rng.standard_normal(n).astype(F32) if bias else None
            inits = [numpy_helper.from_array(gamma, "g")] + ([numpy_helper.from_array(beta, "b")] if bias else [])
            node = helper.make_node("LayerNormalization", ["x", "g"] + (["b"] if bias else []), ["y"], axis=-1,
                                    epsilon=eps)
            m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, n])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
            # exponents over +-6 plus a row offset up to +-150: cancellation in the variance
            x = (rng.standard_normal((7, 3, n)) * np.exp2(rng.integers(-6, 6, (7, 3, n)))
                 + rng.standard_normal((7, 3, 1)) * 50).astype(F32)
            x[0, 0] = 3.0                                            # a constant row: variance 0
            want = _session(m, threads).run(None, {"x": x})[0].reshape(-1, n)
            got = layer_norm_rows(x.reshape(-1, n), gamma, beta, eps)
            assert np.array_equal(got, want), f"n={n} eps={eps}: {np.count_nonzero(got != want)} differ"
            differ += np.count_nonzero(_textbook(x.reshape(-1, n), gamma, beta, eps) != want)
    assert differ > 0


_floats = st.floats(-1e4, 1e4, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, MAX_SCALAR_ROW - 1).flatmap(
    lambda n: st.tuples(st.lists(st.lists(_floats, min_size=n, max_size=n), min_size=1, max_size=4),
                        st.lists(_floats, min_size=n, max_size=n), st.lists(_floats, min_size=n, max_size=n),
                        st.sampled_from([1e-5, 1e-3, 0.5]), st.booleans())))
def test_layer_norm_rows_equals_python_float32_model(case):
    rows, gamma, beta, eps, bias = case
    x = np.asarray(rows, F32)
    got = layer_norm_rows(x, np.asarray(gamma, F32), np.asarray(beta, F32) if bias else None, eps)
    for r, row in enumerate(x.tolist()):
        want = np.asarray(_python_layer_norm(row, gamma, beta if bias else None, eps), F32)
        assert np.array_equal(got[r], want, equal_nan=True), (row, got[r], want)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([8, 9, 11, 12, 15, 16, 19, 20, 23, 24, 36, 63]).flatmap(
    lambda n: st.tuples(st.lists(st.lists(_floats, min_size=n, max_size=n), min_size=1, max_size=3),
                        st.lists(_floats, min_size=n, max_size=n), st.lists(_floats, min_size=n, max_size=n),
                        st.sampled_from([1e-5, 0.5]), st.booleans())))
def test_layer_norm_avx2_kernel_equals_python_rational_model(case):
    rows, gamma, beta, eps, bias = case
    x = np.asarray(rows, F32)
    got = layer_norm_rows(x, np.asarray(gamma, F32), np.asarray(beta, F32) if bias else None, eps, kernel="avx2")
    for r, row in enumerate(x.tolist()):
        g32 = [float(F32(v)) for v in gamma]
        b32 = [float(F32(v)) for v in beta] if bias else None
        want = np.asarray(_python_layer_norm_avx2(row, g32, b32, eps), F32)
        assert np.array_equal(got[r], want, equal_nan=True), (row, got[r], want)


@pytest.mark.parametrize("threads", [1, 4])
def test_layer_norm_vector_kernel_matches_onnxruntime_on_avx2(threads):
    if not _avx2_host():
        pytest.skip("onnxruntime's vector LayerNormalization kernel was measured on x86-64 AVX2 CPUs (no AVX-512, "
                    "or AVX-512 with VNNI); this host is neither")
    rng = np.random.default_rng(10 + threads)
    for n in list(range(MAX_SCALAR_ROW, 65)) + [67, 100, 128]:
        assert layer_norm_kernel(n) == "avx2"
        for bias in (True, False):
            gamma = rng.standard_normal(n).astype(F32)
            beta = rng.standard_normal(n).astype(F32) if bias else None
            inits = [numpy_helper.from_array(gamma, "g")] + ([numpy_helper.from_array(beta, "b")] if bias else [])
            node = helper.make_node("LayerNormalization", ["x", "g"] + (["b"] if bias else []), ["y"], axis=-1,
                                    epsilon=1e-5)
            m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
            x = (rng.standard_normal((200, n)) * np.exp2(rng.integers(-6, 6, (200, n)))
                 + rng.standard_normal((200, 1)) * 50).astype(F32)
            want = _session(m, threads).run(None, {"x": x})[0]
            got = layer_norm_rows(x, gamma, beta, 1e-5)
            assert np.array_equal(got, want), f"n={n}: {np.count_nonzero(got != want)} differ"


def test_layer_norm_rows_refuses_what_it_does_not_reproduce():
    assert [layer_norm_kernel(n) for n in (1, 7, 8, 11, 12, 15, 16)] == ["scalar"] * 2 + ["avx2"] * 5
    with pytest.raises(ValueError, match="kernel 'scalar' asked"):
        layer_norm_rows(np.zeros((2, 16), F32), np.ones(16, F32), kernel="scalar")
    with pytest.raises(ValueError, match="kernel 'avx2' asked"):
        layer_norm_rows(np.zeros((2, 7), F32), np.ones(7, F32), kernel="avx2")
    with pytest.raises(ValueError, match="scale of 3"):
        layer_norm_rows(np.zeros((2, 4), F32), np.ones(3, F32))


def test_layer_norm_tail_of_four_tells_the_unfused_products():
    """Rows with n mod 8 >= 4: a model with every tail product fused (the tail of n mod 8 < 4) differs from
    onnxruntime on these inputs, so the live test above can tell the two apart."""
    if not _avx2_host():
        pytest.skip("onnxruntime's vector LayerNormalization kernel was measured on x86-64 AVX2 CPUs (no AVX-512, "
                    "or AVX-512 with VNNI); this host is neither")
    rng = np.random.default_rng(3)
    n = 12
    gamma = np.ones(n, F32)
    node = helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-5)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(gamma, "g")])
    x = (rng.integers(-128, 128, (400, n)) * 0.037).astype(F32)
    want = _session(m, 1).run(None, {"x": x})[0]
    fused = []
    for row in x.tolist():
        mean = _f32(float(sum(Fraction(v) for v in row) / n))
        d = [_f32(v - mean) for v in row]
        lanes = [_fma(d[j], d[j], 0.0) for j in range(8)]
        while len(lanes) > 1:
            lanes = [_f32(lanes[j] + lanes[j + len(lanes) // 2]) for j in range(len(lanes) // 2)]
        total = lanes[0]
        for h in range(8, n):
            total = _fma(d[h], d[h], total)
        r = _f32(1.0 / _f32(_f32(_f32(total / n) + _f32(1e-5)) ** 0.5))
        fused.append([_f32(_f32(d[h] * r) * 1.0) for h in range(n)])
    assert np.count_nonzero(np.any(np.asarray(fused, F32) != want, axis=1)) > 0
    assert np.array_equal(layer_norm_rows(x, gamma, None, 1e-5), want)


# ------------------------------------------------------------------------------ Erf (exact GELU)
def test_erf_kernel_matches_onnxruntime():
    m = _model([helper.make_node("Erf", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = _session(m)
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(60000), rng.uniform(-6, 6, 60000),
                        [0.0, -0.0, 0.921875, -0.921875, np.nextafter(F32(0.921875), F32(0)), 3.725, 4.0, 9.0,
                         -10.0, np.inf, -np.inf, 1e-30, -1e-30, 1e-45]]).astype(F32)
    for n in (x.size, 1, 3, 7, 8, 9, 31, 33):                 # the 4x8 body, the masked 1x8 tail
        want = sess.run(None, {"x": x[:n]})[0]
        assert np.array_equal(erf(x[:n]).view(np.uint32), want.view(np.uint32)), n
    # the constant table's upper range 3.725, applied as MLAS's C kernel does, would differ: the inputs tell
    clamped = erf(np.minimum(np.abs(x), F32(3.725)) * np.sign(x))
    assert np.count_nonzero(clamped != sess.run(None, {"x": x})[0]) > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-12, 12, allow_nan=False, width=32), min_size=1, max_size=40))
def test_erf_kernel_stays_within_two_ulp_of_the_exact_function(xs):
    import math
    x = np.asarray(xs, F32)
    got = erf(x).astype(np.float64)
    want = np.array([math.erf(float(v)) for v in x])
    assert np.all(np.abs(got - want) <= 2 * np.spacing(np.abs(want).astype(F32)).astype(np.float64) + 1e-45)
    assert np.array_equal(np.signbit(got), np.signbit(x))


# ------------------------------------------------------------------------------ MatMul of two activations
def _qlinear_matmul_ab_model(lead, m, k, n, dtype, params):
    (sa, za), (sb, zb), (sy, zy) = params
    et = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(v, F32 if i % 2 == 0 else dtype), nm) for i, (v, nm) in enumerate(
        ((sa, "sa"), (za, "za"), (sb, "sb"), (zb, "zb"), (sy, "sy"), (zy, "zy")))]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    return _model([node], [helper.make_tensor_value_info("a", et, ["N", *lead, m, k]),
                           helper.make_tensor_value_info("b", et, ["N", *lead, k, n])],
                  [helper.make_tensor_value_info("y", et, None)], inits)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_of_two_activations_matches_onnxruntime(tmp_path, dtype):
    rng = np.random.default_rng(int(dtype == np.int8))
    info = np.iinfo(dtype)
    for lead, m, k, n in (((), 5, 3, 4), ((2,), 4, 16, 4), ((3,), 1, 300, 2), ((2,), 6, 7, 1), ((2, 2), 3, 5, 3)):
        params = [(F32(rng.uniform(0.005, 0.05)), int(rng.integers(info.min, info.max))) for _ in range(3)]
        params[2] = (F32(params[0][0] * params[1][0] * rng.uniform(1, 40)), params[2][1])
        model = _qlinear_matmul_ab_model(lead, m, k, n, dtype, params)
        onnx.save(model, str(tmp_path / "m.onnx"))
        a = rng.integers(info.min, info.max + 1, (6, *lead, m, k)).astype(dtype)
        b = rng.integers(info.min, info.max + 1, (6, *lead, k, n)).astype(dtype)
        want = ort_session(tmp_path / "m.onnx").run(None, {"a": a, "b": b})[0]
        g = import_onnx(tmp_path / "m.onnx")
        assert [nd.op for nd in g.nodes if nd.op == "onnx_matmul_ab"] == ["onnx_matmul_ab"]
        got = g.run([a, b])
        assert got.dtype == want.dtype and np.array_equal(got, want), \
            f"{lead, m, k, n}: {np.count_nonzero(got != want)} of {want.size} differ"


def test_matmul_ab_on_another_datapath_accumulates_as_python_integers(tmp_path):
    """On a 16-bit saturating accumulator the sum saturates at every add, in K order (a Python-int model)."""
    rng = np.random.default_rng(5)
    params = [(F32(0.02), 3), (F32(0.03), -7), (F32(0.5), 1)]
    onnx.save(_qlinear_matmul_ab_model((2,), 3, 40, 2, np.int8, params), str(tmp_path / "m.onnx"))
    g = import_onnx(tmp_path / "m.onnx")
    a = rng.integers(-128, 128, (2, 2, 3, 40)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 2, 40, 2)).astype(np.int8)
    _, traces, _ = g.run([a, b], fxpsim.preset("int8-acc16-sat"), trace=True)
    acc = next(t["acc"] for name, t in traces.items() if t.get("acc") is not None)
    saturated = 0
    for idx in np.ndindex(2, 2, 3, 2):
        s = 0
        for kk in range(40):
            s = min(32767, max(-32768, s + (int(a[idx[:3]][kk]) - 3) * (int(b[idx[:2]][kk, idx[3]]) + 7)))
        exact = sum((int(a[idx[:3]][kk]) - 3) * (int(b[idx[:2]][kk, idx[3]]) + 7) for kk in range(40))
        saturated += s != exact
        assert int(acc[idx]) == s
    assert saturated > 0


def _qdq_matmul_ab_model(types, expose_b=False):
    """DQ(Q(a)) x DQ(Q(b)) -> Q -> DQ with the element types of the three Q/DQ pairs; ``expose_b``: b's codes
    are a graph output too (onnxruntime then keeps an int8 b as int8)."""
    nodes, inits = [], []
    for i, (t, nm) in enumerate(zip(types, ("a", "b", "y"))):
        dt = np.uint8 if t == "u8" else np.int8
        inits += [numpy_helper.from_array(np.array(0.02 * (i + 1), F32), f"s{nm}"),
                  numpy_helper.from_array(np.array(5 if t == "u8" else -3, dt), f"z{nm}")]
    for nm in ("a", "b"):
        nodes += [helper.make_node("QuantizeLinear", [nm, f"s{nm}", f"z{nm}"], [f"{nm}q"]),
                  helper.make_node("DequantizeLinear", [f"{nm}q", f"s{nm}", f"z{nm}"], [f"{nm}f"])]
    nodes += [helper.make_node("MatMul", ["af", "bf"], ["y0"]),
              helper.make_node("QuantizeLinear", ["y0", "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if expose_b:
        outs.append(helper.make_tensor_value_info("bq", TensorProto.UINT8 if types[1] == "u8" else TensorProto.INT8,
                                                  ["N", 2, 6, 4]))
    return _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 2, 3, 6]),
                          helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 2, 6, 4])], outs, inits)


@pytest.mark.parametrize("types,expose_b,kernel", [
    (("u8", "u8", "u8"), False, "qlinear"), (("s8", "s8", "s8"), False, "qlinear"),
    (("u8", "s8", "u8"), False, "qlinear"),       # b's int8 pair becomes uint8: fused, mixing shifted codes
    (("u8", "u8", "s8"), False, "qlinear"), (("u8", "s8", "u8"), True, "qlinear"), (("s8", "s8", "s8"), True, "qlinear"),
    (("s8", "u8", "s8"), True, "qlinear")])
def test_qdq_matmul_of_two_activations_matches_onnxruntime(tmp_path, types, expose_b, kernel):
    onnx.save(_qdq_matmul_ab_model(types, expose_b), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(len(kernel))
    a = (rng.standard_normal((9, 2, 3, 6)) * 2).astype(F32)
    b = (rng.standard_normal((9, 2, 6, 4)) * 3).astype(F32)
    a[0] = 1e3                                      # saturates the quantizers: pair sums beyond int16
    want = ort_session(tmp_path / "m.onnx").run(None, {"a": a, "b": b})
    g = import_onnx(tmp_path / "m.onnx", cpu="host")
    node = next(nd for nd in g.nodes if nd.op == "onnx_matmul_ab")
    assert node.attrs["ort_kernel"] == kernel
    # uint8 x int8 (an int8 b onnxruntime did not convert) is the kernel whose pairs saturate on AVX2
    assert ("u8s8_pairs" in node.attrs) == (kernel == "qlinear" and expose_b and types[1] == "s8")
    got = g.run([a, b])
    got = got if expose_b else [got]
    for x, y in zip(got, want):
        assert np.array_equal(x, y), f"{np.count_nonzero(x != y)} of {y.size} differ"


# ------------------------------------------------------------------------------ a whole encoder layer
def encoder_layer(rng, d=4, heads=2, ff=8, seq=5, scale_op="Div", split_op="Split", act="Relu"):
    """A post-norm encoder layer as torch's ``nn.TransformerEncoderLayer`` (ReLU) computes it, in onnx.helper with
    the batch kept first: fused QKV MatMul + bias, Split (or three Slices), head Reshape / Transpose, :math:`QK^T` scaled by Div or Mul, Softmax,
    attention times V, heads merged, output projection, residual Add, LayerNormalization, ReLU feed-forward,
    residual Add, LayerNormalization."""
    dh = d // heads
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(F32)  # noqa: E731
    small = lambda n: (rng.standard_normal(n) * 0.1).astype(F32)  # noqa: E731
    scale = np.array(np.sqrt(dh) if scale_op == "Div" else 1 / np.sqrt(dh), F32)
    inits = {"Wqkv": w(d, 3 * d), "bqkv": small(3 * d), "Wo": w(d, d), "bo": small(d), "W1": w(d, ff),
             "b1": small(ff), "W2": w(ff, d), "b2": small(d), "g1": 1 + small(d), "be1": small(d),
             "g2": 1 + small(d), "be2": small(d), "split": np.array([d, d, d], np.int64),
             "heads": np.array([0, seq, heads, dh], np.int64), "merged": np.array([0, seq, d], np.int64),
             "scale": scale}
    N = helper.make_node
    if split_op == "Split":
        split = [N("Split", ["qkv", "split"], ["q0", "k0", "v0"], axis=-1)]
    else:
        for i in range(4):
            inits[f"at{i}"] = np.array([i * d], np.int64)
        inits["last"] = np.array([-1], np.int64)
        split = [N("Slice", ["qkv", f"at{i}", f"at{i + 1}", "last"], [f"{t}0"]) for i, t in enumerate("qkv")]
    nodes = [N("MatMul", ["x", "Wqkv"], ["qkv0"]), N("Add", ["qkv0", "bqkv"], ["qkv"]), *split,
             N("Reshape", ["q0", "heads"], ["q1"]), N("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
             N("Reshape", ["k0", "heads"], ["k1"]), N("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
             N("Reshape", ["v0", "heads"], ["v1"]), N("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
             N("MatMul", ["q", "kt"], ["s0"]), N(scale_op, ["s0", "scale"], ["s"]),
             N("Softmax", ["s"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["c0"]),
             N("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]), N("Reshape", ["c1", "merged"], ["c"]),
             N("MatMul", ["c", "Wo"], ["o0"]), N("Add", ["o0", "bo"], ["o"]), N("Add", ["x", "o"], ["r1"]),
             N("LayerNormalization", ["r1", "g1", "be1"], ["n1"], axis=-1, epsilon=1e-5),
             N("MatMul", ["n1", "W1"], ["f0"]), N("Add", ["f0", "b1"], ["f1"])]
    if act == "Relu":
        nodes.append(N("Relu", ["f1"], ["f2"]))
    else:                                        # torch's exact GELU: x * 0.5 * (1 + erf(x / sqrt 2))
        inits.update({"sqrt2": np.array(np.sqrt(2.0), F32), "one": np.array(1.0, F32), "half": np.array(0.5, F32)})
        nodes += [N("Div", ["f1", "sqrt2"], ["e0"]), N("Erf", ["e0"], ["e1"]), N("Add", ["e1", "one"], ["e2"]),
                  N("Mul", ["f1", "e2"], ["e3"]), N("Mul", ["e3", "half"], ["f2"])]
    nodes += [N("MatMul", ["f2", "W2"], ["g0"]), N("Add", ["g0", "b2"], ["g"]), N("Add", ["n1", "g"], ["r2"]),
             N("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1, epsilon=1e-5)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", seq, d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", seq, d])],
                  [numpy_helper.from_array(v, k) for k, v in inits.items()])


def _quantize(tmp_path, rng, model, fmt, act, name="q.onnx"):
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    onnx.save(model, str(tmp_path / "f.onnx"))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((2, *shape)).astype(F32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / name
    q.quantize_static(str(tmp_path / "f.onnx"), str(out), Reader(), quant_format=getattr(q.QuantFormat, fmt),
                      activation_type=getattr(q.QuantType, act), weight_type=q.QuantType.QInt8)
    return out


def _expose_codes(path, out):
    """A copy of the model with every QuantizeLinear / QLinear* output (with a known shape) as a graph output."""
    m = shape_inference.infer_shapes(onnx.load(str(path)))
    info = {v.name: v for v in m.graph.value_info}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        if (n.op_type == "QuantizeLinear" or n.op_type.startswith("QLinear")) and n.output[0] in info \
                and n.output[0] not in have:
            m.graph.output.append(info[n.output[0]])
            have.add(n.output[0])
    onnx.save(m, str(out))
    return len(m.graph.output) - 1


@pytest.mark.parametrize("fmt,act,split_op", [("QDQ", "QUInt8", "Split"), ("QDQ", "QInt8", "Slice"),
                                              ("QOperator", "QUInt8", "Slice"), ("QOperator", "QInt8", "Split")])
def test_quantize_static_encoder_layer_matches_onnxruntime(tmp_path, fmt, act, split_op):
    rng = np.random.default_rng(len(fmt) + len(act))
    layer = encoder_layer(rng, scale_op="Div" if act == "QUInt8" else "Mul", split_op=split_op)
    path = _quantize(tmp_path, rng, layer, fmt, act)
    x = (rng.standard_normal((12, 5, 4)) * 1.5).astype(F32)
    x[0] *= 40                                       # saturates the input quantizer
    for model in (path, tmp_path / "exposed.onnx"):
        exposed = _expose_codes(path, model) if model != path else 0
        sess = ort_session(model)
        want = sess.run(None, {"x": x})
        g = import_onnx(model, cpu="host")
        got = g.run(x)
        got = [got] if len(want) == 1 else got
        for o, a, b in zip(sess.get_outputs(), got, want):
            assert a.dtype == b.dtype and a.shape == b.shape, o.name
            assert np.array_equal(a, b), f"{fmt} {act} {o.name}: {np.count_nonzero(a != b)} of {b.size} differ"
        if model != path:
            assert exposed >= (20 if fmt == "QDQ" else 4)
        else:
            g0 = g
    g = g0                                           # the model as quantize_static wrote it
    ops = [n.op for n in g.nodes]
    assert ops.count("onnx_matmul_ab") == 2 and ops.count("onnx_layer_norm") == 2 and "qlinear_softmax" in ops
    assert all(n.attrs["ort_kernel"] == "qlinear" for n in g.nodes if n.op == "onnx_matmul_ab")
    assert sum(f["onnx_op"] == "LayerNormalization" for f in g.meta["onnxruntime"]["float_nodes"]) == 2


@pytest.mark.parametrize("fmt,act,ff_act", [("QDQ", "QUInt8", "Relu"), ("QOperator", "QInt8", "Relu"),
                                            ("QDQ", "QInt8", "Gelu"), ("QOperator", "QUInt8", "Gelu")])
def test_quantize_static_encoder_layer_d16_matches_onnxruntime_on_avx2(tmp_path, fmt, act, ff_act):
    """The brief's size (d_model 16, 2 heads, feed-forward 32): its LayerNormalization rows run the vector kernel."""
    if not _avx2_host():
        pytest.skip("onnxruntime's vector LayerNormalization kernel was measured on x86-64 AVX2 CPUs (no AVX-512, "
                    "or AVX-512 with VNNI); this host is neither")
    rng = np.random.default_rng(16 + len(act))
    path = _quantize(tmp_path, rng, encoder_layer(rng, d=16, ff=32, split_op="Slice", act=ff_act), fmt, act)
    x = (rng.standard_normal((12, 5, 16)) * 1.5).astype(F32)
    want = ort_session(path).run(None, {"x": x})[0]
    g = import_onnx(path, cpu="host")
    got = g.run(x)
    assert np.array_equal(got, want), f"{fmt} {act}: {np.count_nonzero(got != want)} of {want.size} differ"
    assert [n.attrs["kernel"] for n in g.nodes if n.op == "onnx_layer_norm"] == ["avx2", "avx2"]
    erf_tables = [n for n in g.nodes if n.op == "onnx_lut" and any(st["op"] == "Erf" for st in n.attrs["program"])]
    assert len(erf_tables) == (ff_act == "Gelu")


@pytest.mark.parametrize("d", [12, 20])
def test_encoder_layer_with_rows_of_a_tail_of_four_matches_onnxruntime_on_avx2(tmp_path, d):
    """d_model 12 and 20 (n mod 8 = 4): the vector kernel's tail of four or more, once refused."""
    if not _avx2_host():
        pytest.skip("onnxruntime's vector LayerNormalization kernel was measured on x86-64 AVX2 CPUs (no AVX-512, "
                    "or AVX-512 with VNNI); this host is neither")
    rng = np.random.default_rng(d)
    path = _quantize(tmp_path, rng, encoder_layer(rng, d=d, ff=2 * d), "QDQ", "QUInt8", "odd.onnx")
    x = (rng.standard_normal((12, 5, d)) * 1.5).astype(F32)
    want = ort_session(path).run(None, {"x": x})[0]
    got = import_onnx(path, cpu="host").run(x)
    assert np.array_equal(got, want), f"d={d}: {np.count_nonzero(got != want)} of {want.size} differ"


def test_unreproduced_transformer_ops_are_refused(tmp_path):
    rng = np.random.default_rng(11)
    wide = _quantize(tmp_path, rng, encoder_layer(rng, d=16, ff=32), "QDQ", "QUInt8", "wide.onnx")
    with pytest.raises(ValueError, match="LayerNormalization.*node.*rows of 16 values.*cpu='avx2'"):
        import_onnx(wide, cpu="exact")
    # a LayerNormalization whose float output feeds a float op: onnxruntime's float graph, not imported
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("LayerNormalization", ["xf", "g"], ["n"], axis=-1),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.1, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z"),
             numpy_helper.from_array(np.ones(4, F32), "g")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(m, str(tmp_path / "ln_float.onnx"))
    with pytest.raises(ValueError, match="LayerNormalization.*neither quantized"):
        import_onnx(tmp_path / "ln_float.onnx")
    # a MatMul of two activations whose leading axes broadcast
    m = _qdq_matmul_ab_model(("u8", "u8", "u8"))
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 1
    onnx.save(m, str(tmp_path / "bcast.onnx"))
    with pytest.raises(ValueError, match="MatMul.*no broadcasting"):
        import_onnx(tmp_path / "bcast.onnx")


def test_encoder_graph_saves_loads_and_runs_on_another_datapath(tmp_path):
    rng = np.random.default_rng(21)
    path = _quantize(tmp_path, rng, encoder_layer(rng), "QDQ", "QUInt8")
    g = import_onnx(path)
    x = (rng.standard_normal((6, 5, 4)) * 1.5).astype(F32)
    y = g.run(x)
    g.save(tmp_path / "g.npz")
    assert np.array_equal(fxpsim.load_graph(tmp_path / "g.npz").run(x), y)
    # on a 16-bit saturating datapath the integer MACs change, the float32 kernels (LayerNormalization) do not
    _, traces, _ = g.run(x, fxpsim.preset("int8-acc16-sat"), trace=True)
    ab = [n.name for n in g.nodes if n.op == "onnx_matmul_ab"]
    assert all(traces[name]["acc"] is not None for name in ab)
    assert np.abs(g.run_float(x) - y).max() < 0.5        # the float64 reference stays near onnxruntime's result


def test_torch_exported_encoder_layer_is_refused_naming_the_batch_transpose(tmp_path):
    """torch's nn.TransformerEncoderLayer (``tools/fixtures/onnx_transformer/make_torch_encoders.py``), pre-processed
    and quantized as onnxruntime recommends: its attention transposes the batch axis, which the graph keeps first."""
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    from onnxruntime.quantization.shape_inference import quant_pre_process
    fixture = Path(__file__).resolve().parents[1] / "vectors" / "onnx_transformer" / "torch_encoder_d4_relu.onnx"
    quant_pre_process(str(fixture), str(tmp_path / "pre.onnx"), skip_symbolic_shape=True)
    rng = np.random.default_rng(3)

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((2, 5, 4)).astype(F32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    q.quantize_static(str(tmp_path / "pre.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=q.QuantFormat.QDQ)
    with pytest.raises(ValueError, match=r"Transpose in node '/layer/self_attn/Transpose'.*batch axis"):
        import_onnx(tmp_path / "q.onnx")

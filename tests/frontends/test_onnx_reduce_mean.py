"""ReduceMean of quantized ONNX tensors (``onnx_reduce_mean``, issue 22), live against onnxruntime (CPU EP):
its float32 kernel over trailing axes (Eigen's four-lane sums, aligned per row) on adversarial floats, hand-built
DequantizeLinear -> ReduceMean -> QuantizeLinear groups (u8 / s8, opsets 13 and 18, keepdims 0 and 1) and
``quantize_static`` models; what is not reproduced is refused with a ValueError naming the node."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.datapath.onnxruntime.reduce import reduce_mean_block, reduce_mean_rows  # noqa: E402
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402
from ort_session import ort_session  # noqa: E402

F32 = np.float32


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(shape, axes, keepdims=1, opset=13, qdq=None):
    """x -> [Q -> DQ] -> ReduceMean -> [Q -> DQ] -> y (qdq: (scale, zero point, dtype))."""
    nodes, inits, src = [], [], "x"
    if qdq:
        s, z, dt = qdq
        inits = [_init("s", np.array(s, F32)), _init("z", np.array(z, dt))]
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])]
        src = "d"
    if opset >= 18:
        inits.append(_init("ax", np.array(axes, np.int64)))
        nodes.append(helper.make_node("ReduceMean", [src, "ax"], ["r"], keepdims=keepdims))
    else:
        nodes.append(helper.make_node("ReduceMean", [src], ["r"], axes=axes, keepdims=keepdims))
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q2"]),
                  helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"])]
    else:
        nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"] + list(shape[1:]))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _sequential_mean(rows):
    acc = rows[:, 0].astype(F32)
    for k in range(1, rows.shape[1]):
        acc = (acc + rows[:, k]).astype(F32)
    return (acc / F32(rows.shape[1])).astype(F32)


@pytest.mark.parametrize("threads", [1, 3])
def test_float_mean_kernel_matches_onnxruntime(tmp_path, threads):
    rng = np.random.default_rng(threads)
    seq_bad = 0
    for shape, axes in (((3, 5, 6, 7), [2, 3]), ((2, 16, 7, 7), [2, 3]), ((4, 8, 9, 3), [3]), ((2, 3, 5, 5), [1, 2, 3]),
                        ((2, 64, 14, 14), [2, 3]), ((3, 7, 1, 13), [-1, -2]), ((5, 1, 1, 2), [2, 3]),
                        ((2, 3, 1, 1), [2, 3]), ((3, 33), [1]), ((2, 5, 257), [2])):
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))).astype(F32)
        path = tmp_path / "m.onnx"
        onnx.save(_model(shape, axes), str(path))
        so = ort.SessionOptions()
        so.log_severity_level, so.intra_op_num_threads = 3, threads
        want = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        n = int(np.prod([shape[a] for a in axes]))
        got = reduce_mean_rows(x.reshape(-1, n))
        assert np.array_equal(got, want.reshape(-1)), f"{shape} {axes}: {np.count_nonzero(got != want.reshape(-1))}"
        seq_bad += np.count_nonzero(_sequential_mean(x.reshape(-1, n)) != want.reshape(-1))
    assert seq_bad > 0          # the inputs tell the blocked order from a sequential sum


CASES = [((3, 5, 6, 7), [2, 3], 1), ((3, 5, 6, 7), [2, 3], 0), ((2, 16, 7, 7), [-1, -2], 1), ((4, 8, 9, 3), [3], 1),
         ((2, 3, 5, 5), [1, 2, 3], 1), ((3, 7), [1], 1), ((3, 4, 7), [2], 0), ((3, 4, 7), [1, 2], 1)]


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("dt,zp", [(np.uint8, 131), (np.int8, -9)], ids=["u8", "s8"])
def test_qdq_reduce_mean_matches_onnxruntime(tmp_path, opset, dt, zp):
    rng = np.random.default_rng([opset, zp & 0xFF])
    for k, (shape, axes, keep) in enumerate(CASES):
        path = tmp_path / f"m{k}.onnx"
        onnx.save(_model(shape, axes, keep, opset, (F32(0.0371), zp, dt)), str(path))
        x = (rng.standard_normal((64,) + shape[1:]) * 3).astype(F32)
        want = ort_session(path).run(None, {"x": x})[0]
        g = import_onnx(path)
        got = g.run(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(got, want), f"{shape} {axes} keepdims={keep}: {np.count_nonzero(got != want)} differ"
        assert [n.op for n in g.nodes].count("onnx_reduce_mean") == 1


def _conv_mean(rng, keepdims):
    w = (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(F32)
    head = (helper.make_node("MatMul", ["r", "W2"], ["y"]) if not keepdims else
            helper.make_node("Conv", ["r", "W3"], ["y"]))
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c"], ["r"], axes=[2, 3], keepdims=keepdims), head]
    inits = [_init("W", w), _init("W2", (rng.standard_normal((16, 5)) * 0.3).astype(F32))] if not keepdims else \
        [_init("W", w), _init("W3", (rng.standard_normal((5, 16, 1, 1)) * 0.3).astype(F32))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 9, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_quantize_static_reduce_mean(tmp_path, fmt, act):
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    rng = np.random.default_rng([len(fmt), len(act)])
    for keep in (0, 1):
        onnx.save(_conv_mean(rng, keep), str(tmp_path / "f.onnx"))

        class Reader(q.CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"x": rng.standard_normal((1, 3, 9, 7)).astype(F32)} for _ in range(8)])

            def get_next(self):
                return next(self.it, None)

        out = tmp_path / f"q{keep}.onnx"
        q.quantize_static(str(tmp_path / "f.onnx"), str(out), Reader(), quant_format=getattr(q.QuantFormat, fmt),
                          activation_type=getattr(q.QuantType, act), weight_type=q.QuantType.QInt8)
        # keepdims=1: onnxruntime runs this mean in NHWC after the QLinearConv (H, W before C: the thread-dependent
        # kernel, compared with one thread); keepdims=0: back in NCHW, the trailing rows
        x = (rng.standard_normal((200, 3, 9, 7)) * 2).astype(F32)
        want = (_session_one_thread(out) if keep else ort_session(out)).run(None, {"x": x})[0]
        got = import_onnx(out, cpu="host").run(x)   # its Conv is a u8 x s8 QLinearConv (saturates on AVX2)
        assert np.array_equal(got, want), f"{fmt} {act}: {np.count_nonzero(got != want)} of {want.size} differ"


@pytest.mark.parametrize("axes,match", [([1, 3], "one block"), ([0, 1, 2, 3], "batch"), ([0], "batch")])
def test_unreproduced_reduce_means_are_refused(tmp_path, axes, match):
    onnx.save(_model((2, 3, 4, 5), axes, 1, 13, (F32(0.05), 128, np.uint8)), str(tmp_path / "m.onnx"))
    with pytest.raises(ValueError, match=f"ReduceMean.*{match}"):
        import_onnx(tmp_path / "m.onnx")


# ------------------------------------------------------------------------------ axes before kept axes
def _session_one_thread(path):
    """onnxruntime pinned to one intra-op thread: with more, its kernel for these axes depends on the count."""
    so = ort.SessionOptions()
    so.log_severity_level, so.intra_op_num_threads = 3, 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _column_sums(x3):
    """[K0, R, K2] -> the sequential float32 sum over R of every (k0, k2), in Python floats rounded to float32 at
    each add."""
    out = np.empty((x3.shape[0], x3.shape[2]), F32)
    for a in range(x3.shape[0]):
        for c in range(x3.shape[2]):
            acc = F32(x3[a, 0, c])
            for r in range(1, x3.shape[1]):
                acc = F32(float(acc) + float(x3[a, r, c]))
            out[a, c] = acc
    return out


def _ones_row_sums(x3):
    """MLAS's one-row SGEMM kernel on a row of ones (MlasSgemmKernelM1Avx, as its source reads): per column the
    values are summed in blocks of four, t = ((v0 + v1) + v2) + v3 added to the running sum, then a pair, then
    one (every add rounded to float32); written out in Python floats."""
    out = np.empty((x3.shape[0], x3.shape[2]), F32)
    for a in range(x3.shape[0]):
        for c in range(x3.shape[2]):
            col = [float(v) for v in x3[a, :, c]]
            acc, k = F32(0.0), 0
            while len(col) - k >= 4:
                t = F32(F32(F32(col[k] + col[k + 1]) + col[k + 2]) + col[k + 3])
                acc, k = F32(float(t) + float(acc)), k + 4
            if len(col) - k >= 2:
                acc, k = F32(float(F32(col[k] + col[k + 1])) + float(acc)), k + 2
            if len(col) - k == 1:
                acc = F32(col[k] + float(acc))
            out[a, c] = acc
    return out


BLOCK_CASES = [((3, 5, 6, 7), [1]), ((3, 5, 6, 7), [1, 2]), ((2, 16, 7, 7), [1]), ((4, 300, 3), [1]),
               ((2, 37, 5), [1]), ((2, 3, 4, 5), [2]), ((1, 33, 9), [1]), ((5, 8, 2, 3), [1, 2]), ((1, 8, 16), [1]),
               ((1, 5, 1, 7), [1]), ((3, 1, 4, 1, 5), [1, 2, 3]), ((2, 6, 5, 1), [1, 2]), ((1, 9, 1), [1]),
               ((3, 7, 1), [1]), ((2, 9, 4, 4), [2])]


def test_float_mean_over_leading_axes_matches_onnxruntime_with_one_thread(tmp_path):
    rng = np.random.default_rng(17)
    seq_bad = gemm_bad = 0
    for shape, axes in BLOCK_CASES:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))).astype(F32)
        path = tmp_path / "m.onnx"
        onnx.save(_model(shape, axes), str(path))
        want = _session_one_thread(path).run(None, {"x": x})[0]
        a, e = axes[0], axes[-1] + 1
        got = reduce_mean_block(x, a, e)
        assert np.array_equal(got.reshape(-1), want.reshape(-1)), f"{shape} {axes}"
        x3 = x.reshape(int(np.prod(shape[:a])), int(np.prod(shape[a:e])), -1)
        n = F32(x3.shape[1])
        seq, ones = (_column_sums(x3) / n).astype(F32), (_ones_row_sums(x3) / n).astype(F32)
        # the kernel onnxruntime picks: a sequential sum for one leading block (K0 = 1), else MLAS's one-row
        # SGEMM; the Python models of both agree with it there
        k0 = x3.shape[0]
        want2 = want.reshape(k0, -1)
        if k0 == 1:
            assert np.array_equal(seq, want2), f"{shape} {axes}"
        else:
            assert np.array_equal(ones, want2), f"{shape} {axes}"
        seq_bad += np.count_nonzero(seq != want2)
        gemm_bad += np.count_nonzero(ones != want2)
    assert seq_bad > 0 and gemm_bad > 0          # the inputs tell the two summations apart


MIDDLE_CASES = [((3, 5, 6, 7), [1], 1), ((3, 5, 6, 7), [1, 2], 0), ((2, 16, 7, 7), [1], 1), ((3, 8, 16), [1], 0),
                ((3, 8, 16), [1], 1), ((2, 4, 9, 3), [2], 0), ((2, 4, 9, 3), [-3, -2], 1)]


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("dt,zp", [(np.uint8, 131), (np.int8, -9)], ids=["u8", "s8"])
@pytest.mark.parametrize("batch", [1, 40])
def test_qdq_reduce_mean_over_middle_axes_matches_onnxruntime(tmp_path, opset, dt, zp, batch):
    rng = np.random.default_rng([opset, zp & 0xFF, batch])
    for k, (shape, axes, keep) in enumerate(MIDDLE_CASES):
        path = tmp_path / f"m{k}.onnx"
        onnx.save(_model(shape, axes, keep, opset, (F32(0.0371), zp, dt)), str(path))
        x = (rng.standard_normal((batch,) + shape[1:]) * 3).astype(F32)
        want = _session_one_thread(path).run(None, {"x": x})[0]
        g = import_onnx(path)
        got = g.run(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(got, want), f"{shape} {axes} keepdims={keep}: {np.count_nonzero(got != want)} differ"
        node = next(n for n in g.nodes if n.op == "onnx_reduce_mean")
        assert "reduce_to" in node.attrs
        assert any("intra_op_num_threads=1" in f["why"] for f in g.meta["onnxruntime"]["float_nodes"])


def test_image_mean_with_keepdims_after_a_float_op_is_refused(tmp_path):
    """keepdims=1 on an image that neither a quantized graph input nor a convolution gives (here a Relu group):
    onnxruntime's layout transformation may move it; refused naming the node."""
    N = helper.make_node
    nodes = [N("QuantizeLinear", ["x", "s", "z"], ["q"]), N("DequantizeLinear", ["q", "s", "z"], ["d"]),
             N("Relu", ["d"], ["r0"]), N("QuantizeLinear", ["r0", "s", "z"], ["q1"]),
             N("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
             N("ReduceMean", ["d1"], ["r"], axes=[2, 3], keepdims=1),
             N("QuantizeLinear", ["r", "s", "z"], ["q2"]), N("DequantizeLinear", ["q2", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_init("s", np.array(0.05, F32)), _init("z", np.array(128, np.uint8))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(ValueError, match="ReduceMean.*ReduceMean_5.*NHWC"):
        import_onnx(tmp_path / "m.onnx")

"""Linear (bilinear) Resize of quantized ONNX images (``onnx_resize_linear``, issue 22), live against onnxruntime
(CPU EP, default optimizations): ``quantize_static`` models (Conv -> Resize -> Conv, QDQ and QOperator, uint8
and int8, every proven coordinate mode, up- and downsampling), hand-built QDQ groups and QOperator Resizes on
QuantizeLinear codes; the kernel onnxruntime picks is checked to matter (the other kernels give other outputs)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402
from ort_session import ort_session  # noqa: E402

F32 = np.float32
CTMS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
SCALES = ([1, 1, 2, 1.5], [1, 1, 0.6, 0.75], [1, 1, 3, 1.7])


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _compare(path, x, what):
    want = ort_session(path).run(None, {"x": x})[0]
    g = import_onnx(path, cpu="host")   # compared with this host's onnxruntime: u8 x s8 convs saturate pairs on AVX2
    got = g.run(x)
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} vs {want.shape}"
    bad = np.count_nonzero(got != want)
    assert bad == 0, f"{what}: {bad} of {want.size} values differ from onnxruntime"
    return g, want


def _flipped(g, x, node_name, kernel):
    node = next(n for n in g.nodes if n.name == node_name)
    old = node.attrs["kernel"]
    node.attrs["kernel"] = kernel
    try:
        return g.run(x)
    finally:
        node.attrs["kernel"] = old


def _float_model(ctm, scales, rng):
    w = (rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(F32)
    w2 = (rng.standard_normal((4, 6, 1, 1)) * 0.3).astype(F32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "sc"], ["r"], mode="linear", coordinate_transformation_mode=ctm),
             helper.make_node("Conv", ["r", "W2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_init("W", w), _init("W2", w2), _init("sc", np.array(scales, F32))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_quantize_static_linear_resize_matches_onnxruntime(tmp_path, ctm, fmt, act):
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    rng = np.random.default_rng([len(ctm), len(fmt), len(act)])
    other = 0
    for k, scales in enumerate(SCALES):
        onnx.save(_float_model(ctm, scales, rng), str(tmp_path / "f.onnx"))

        class Reader(q.CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"x": rng.standard_normal((1, 3, 5, 6)).astype(F32)} for _ in range(8)])

            def get_next(self):
                return next(self.it, None)

        out = tmp_path / f"q{k}.onnx"
        q.quantize_static(str(tmp_path / "f.onnx"), str(out), Reader(), quant_format=getattr(q.QuantFormat, fmt),
                          activation_type=getattr(q.QuantType, act), weight_type=q.QuantType.QInt8)
        x = (rng.standard_normal((16, 3, 5, 6)) * 2).astype(F32)
        x[0], x[1] = 1e4, -1e4
        g, want = _compare(out, x, f"{fmt} {act} {ctm} {scales}")
        node = next(n for n in g.nodes if n.op == "onnx_resize_linear")
        assert node.attrs["kernel"] == ("float" if fmt == "QDQ" else "integer")
        if fmt == "QOperator":
            other += np.count_nonzero(_flipped(g, x, node.name, "float_codes") != want)
    # the NHWC integer kernel is what onnxruntime runs here: the float one on the codes gives other outputs
    assert fmt == "QDQ" or other > 0


def _qdq_model(dt, ctm, scales, s_in, z_in, s_out, z_out, codes_only):
    """x -> Q -> [DQ] -> Resize -> Q -> DQ (codes_only: the Resize reads the QuantizeLinear's codes)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])]
    if codes_only:
        nodes.append(helper.make_node("Resize", ["q", "", "sc"], ["q2"], mode="linear",
                                      coordinate_transformation_mode=ctm))
        s_out, z_out = s_in, z_in
    else:
        nodes += [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
                  helper.make_node("Resize", ["d", "", "sc"], ["r"], mode="linear",
                                   coordinate_transformation_mode=ctm),
                  helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["q2"])]
    nodes.append(helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"]))
    inits = [_init("sc", np.array(scales, F32)), _init("s", np.array(s_in, F32)), _init("z", np.array(z_in, dt)),
             _init("s2", np.array(s_out, F32)), _init("z2", np.array(z_out, dt))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("codes_only", [False, True], ids=["qdq", "codes"])
def test_hand_built_linear_resize_matches_onnxruntime(tmp_path, ctm, dt, codes_only):
    rng = np.random.default_rng([len(ctm), int(codes_only), np.dtype(dt).itemsize, dt is np.int8])
    z = (131, 97) if dt == np.uint8 else (-7, 11)
    other = 0
    for k, scales in enumerate(SCALES + ([1, 1, 1.5, 2.5], [1, 1, 1, 0.5])):
        m = _qdq_model(dt, ctm, scales, F32(0.0371), z[0], F32(0.0523), z[1], codes_only)
        path = tmp_path / f"m{k}.onnx"
        onnx.save(m, str(path))
        x = (rng.standard_normal((4, 3, 5, 7)) * 3).astype(F32)
        g, want = _compare(path, x, f"{'codes' if codes_only else 'QDQ'} {dt.__name__} {ctm} {scales}")
        node = next(n for n in g.nodes if n.op == "onnx_resize_linear")
        assert node.attrs["kernel"] == ("float_codes" if codes_only else "float")
        if codes_only:
            other += np.count_nonzero(_flipped(g, x, node.name, "integer") != want)
    # on NCHW codes onnxruntime runs the float kernel: the integer one gives other outputs
    assert not codes_only or other > 0


def test_unproven_linear_resizes_are_refused(tmp_path):
    m = _qdq_model(np.uint8, "tf_crop_and_resize", [1, 1, 2, 2], F32(0.05), 128, F32(0.05), 128, False)
    onnx.save(m, str(tmp_path / "crop.onnx"))
    with pytest.raises(ValueError, match="Resize"):
        import_onnx(tmp_path / "crop.onnx")
    m = _qdq_model(np.uint8, "half_pixel", [1, 2, 2, 2], F32(0.05), 128, F32(0.05), 128, False)
    onnx.save(m, str(tmp_path / "chan.onnx"))
    with pytest.raises(ValueError, match="channel axis"):
        import_onnx(tmp_path / "chan.onnx")
    m = _qdq_model(np.uint8, "half_pixel", [1, 1, 2, 2], F32(0.05), 128, F32(0.05), 128, False)
    next(a for a in m.graph.node[2].attribute if a.name == "mode").s = b"cubic"
    onnx.save(m, str(tmp_path / "cubic.onnx"))
    with pytest.raises(ValueError, match="cubic"):
        import_onnx(tmp_path / "cubic.onnx")

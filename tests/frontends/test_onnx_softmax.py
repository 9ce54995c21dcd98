"""QLinearSoftmax and the DequantizeLinear -> Softmax -> QuantizeLinear groups onnxruntime fuses into it
(``qlinear_softmax``, :mod:`fxpsim.datapath.onnxruntime.softmax`; issue 22).

The reference is onnxruntime itself, run live: hand-built QDQ and QOperator softmaxes (uint8 and int8; rows
of 1 to 1000 values; all-equal rows, rows with one dominant value and random rows; output scales 1/255, 1/256,
1/odd, which make exact ties, and random ones), ``quantize_static`` models (QDQ and QOperator), softmax over
an image's channels at opset 13 and over the flattened axes at opset 11. An independent per-element model
written here with Python floats (``_row_model``) matches onnxruntime, and the alternatives it refutes are
shown to differ from onnxruntime on the same rows."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.coverage import onnx_coverage  # noqa: E402
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402
from ort_session import ort_session  # noqa: E402

F32 = np.float32


def _f(v: float) -> float:
    """Round a Python float to float32 (an IEEE round to nearest even; inf beyond its range)."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _row_model(row, sx, sy, zy, lo, hi, variant="ort"):
    """One row by hand, element by element: exponentials of code differences from the largest, a float32 sum
    in order, ``fl(e / S)`` times ``floor(1 / s_y)`` rounded to an integer, plus the zero point, clamped.
    ``variant`` names a refuted alternative instead."""
    d = len(row)
    s = _f(sx)
    shift = max(0.0, math.log(_f(_f(3.4028234663852886e38) / d)) - 5.0) / s
    xmax = max(row)
    e = [_f(math.exp((-(xmax - v) + shift) * s)) for v in row]
    total = 0.0
    for v in e:
        total = _f(total + v)
    c = float(math.floor(_f(1.0 / _f(sy))))
    out = []
    for v in e:
        p = _f(v / total)
        if variant == "ort":
            r = round(p * c)                        # Python's round: half to even, on the exact product
        elif variant == "product_in_float32":
            r = round(_f(p * c))
        elif variant == "unfloored_scale":
            r = round(p * _f(1.0 / _f(sy)))
        elif variant == "old_source":               # fl(fl(e c) / S): onnxruntime's older sources
            q = _f(_f(v * c) / total)
            r = round(q) if math.isfinite(q) else hi - zy
        else:
            raise ValueError(variant)
        out.append(min(max(r + zy, lo), hi))
    return out


def _softmax_model(form, dtype, shape, sx, zx, sy, zy, opset=13, axis=-1):
    tp = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(sx, F32), "sx"), numpy_helper.from_array(np.array(zx, dtype), "zx"),
             numpy_helper.from_array(np.array(sy, F32), "sy"), numpy_helper.from_array(np.array(zy, dtype), "zy")]
    ops = [helper.make_opsetid("", opset)]
    if form == "qdq":
        nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["d"]),
                 helper.make_node("Softmax", ["d"], ["s"], name="softmax", axis=axis),
                 helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["y"])]
    else:
        nodes = [helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], name="softmax",
                                  domain="com.microsoft", axis=axis, opset=opset)]
        ops.append(helper.make_opsetid("com.microsoft", 1))
    x = helper.make_tensor_value_info("x", tp, ["N"] + list(shape))
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", tp, None)], inits),
                          opset_imports=ops)
    m.ir_version = 8
    return m


_session = ort_session


def _rows(dtype, d, rng):
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    x = rng.integers(lo, hi + 1, size=(48, d))
    x[:8] = x[:8, :1]                                 # all equal: exact ties p * c = k + 1/2
    x[8:16] = rng.integers(hi - 6, hi + 1, size=(8, d))
    x[16:20] = lo
    x[16:20, 0] = hi                                  # one dominant value
    x[20:24, : d // 2] = x[20:24, :1]
    return x.astype(dtype)


SCALES = [1 / 255, 1 / 256, 1 / 101, 1 / 245, 0.0073, 0.0113]


@pytest.mark.parametrize("form", ["qdq", "qop"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("d", [1, 2, 3, 10, 77, 1000])
def test_softmax_rows_match_onnxruntime_and_the_row_model(tmp_path, form, dtype, d):
    rng = np.random.default_rng([d, len(form), dtype().itemsize])
    info = np.iinfo(dtype)
    x = _rows(dtype, d, rng)
    for k, sy in enumerate(SCALES):
        sx = F32(rng.uniform(0.01, 0.5))
        zx = int(rng.integers(info.min, info.max + 1))
        zy = int(info.min) if k < 2 else int(rng.integers(info.min, info.max - 40))
        path = tmp_path / f"s{k}.onnx"
        onnx.save(_softmax_model(form, dtype, (d,), sx, zx, F32(sy), zy), str(path))
        want = _session(path).run(None, {"x": x})[0]
        g = import_onnx(path)
        assert [n.op for n in g.nodes] == ["qlinear_softmax"]
        np.testing.assert_array_equal(g.run(x), want, err_msg=f"{form} {dtype.__name__} D={d} s_y={sy}")
        if d <= 77:
            model = np.array([_row_model(r.tolist(), sx, F32(sy), zy, int(info.min), int(info.max)) for r in x])
            np.testing.assert_array_equal(model, want, err_msg=f"row model, D={d} s_y={sy}")


def test_the_alternatives_differ_from_onnxruntime(tmp_path):
    """On rows with exact ties and on rows of 1 to 3 values, each refuted formula disagrees with onnxruntime."""
    rng = np.random.default_rng(11)
    misses = {"product_in_float32": 0, "unfloored_scale": 0, "old_source": 0}
    for dtype in (np.uint8, np.int8):
        info = np.iinfo(dtype)
        for d, sy in ((10, 1 / 245), (2, 1 / 101), (3, 0.0113), (1, 1 / 255), (4, 0.0073)):
            x = _rows(dtype, d, rng)
            sx, zy = F32(0.2), int(info.min)
            path = tmp_path / "alt.onnx"
            onnx.save(_softmax_model("qop", dtype, (d,), sx, 0, F32(sy), zy), str(path))
            want = _session(path).run(None, {"x": x})[0]
            for variant in misses:
                got = np.array([_row_model(r.tolist(), sx, F32(sy), zy, int(info.min), int(info.max), variant)
                                for r in x])
                misses[variant] += int(np.count_nonzero(got != want))
    assert all(v > 0 for v in misses.values()), misses


@pytest.mark.parametrize("form", ["qdq", "qop"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset,axis", [(13, 1), (13, 2), (11, 1), (12, 2)])
def test_softmax_over_image_axes(tmp_path, form, dtype, opset, axis):
    """Channels of an image (NHWC inside fxpsim), and opset 11 / 12's softmax over the flattened axes from
    ``axis`` on, in the model's NCHW order."""
    rng = np.random.default_rng([opset, axis])
    info = np.iinfo(dtype)
    path = tmp_path / "img.onnx"
    onnx.save(_softmax_model(form, dtype, (5, 3, 4), F32(0.07), 3, F32(1 / 255), int(info.min), opset, axis),
              str(path))
    x = rng.integers(info.min, info.max + 1, size=(6, 5, 3, 4)).astype(dtype)
    np.testing.assert_array_equal(import_onnx(path).run(x), _session(path).run(None, {"x": x})[0])


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_quantize_static_softmax(tmp_path, fmt, act):
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    rng = np.random.default_rng(len(fmt) + len(act))
    w = numpy_helper.from_array((rng.standard_normal((16, 12)) * 0.5).astype(F32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                       ["N", 16])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "f.onnx"))

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": (rng.standard_normal((1, 16)) * 2).astype(F32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "q.onnx"
    q.quantize_static(str(tmp_path / "f.onnx"), str(out), Reader(), quant_format=getattr(q.QuantFormat, fmt),
                      activation_type=getattr(q.QuantType, act), weight_type=q.QuantType.QInt8)
    g = import_onnx(out, cpu="host")
    assert "qlinear_softmax" in [n.op for n in g.nodes]
    cov = onnx_coverage(out)
    assert cov.importable and {r.op for r in cov.rows} & {"Softmax", "com.microsoft:QLinearSoftmax"}
    x = (rng.standard_normal((40, 16)) * 3).astype(F32)
    x[0], x[1] = 1e4, -1e4
    np.testing.assert_array_equal(g.run(x), _session(out).run(None, {"x": x})[0])


def test_unfused_softmax_is_refused(tmp_path):
    """A Softmax whose output is a graph output (no QuantizeLinear): onnxruntime's float32 softmax, not read."""
    inits = [numpy_helper.from_array(np.array(0.1, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]),
             helper.make_node("Softmax", ["d"], ["y"], name="lonely_softmax")]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                                       ["N", 8])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, str(tmp_path / "u.onnx"))
    with pytest.raises(ValueError, match="lonely_softmax.*float32"):
        import_onnx(tmp_path / "u.onnx")

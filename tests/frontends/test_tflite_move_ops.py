"""STRIDED_SLICE on run-time data, SPLIT, SPLIT_V and an int8 -> uint8 QUANTIZE at the model output (the blockers
of the shipped microWakeWord models), as hand-built one-op models against LiteRT running in every kernel set.
The expected slices are also written out with numpy indexing here (an independent statement of TFLite's masks)."""
from __future__ import annotations

import numpy as np
import pytest

import fxpsim

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import _act, _const, _options, build_tflite  # noqa: E402

KERNELS = ("reference", "builtin", "xnnpack")
Q = (0.04, -5)


def _i32(v):
    return np.array(v, np.int32)


def _cases():
    x = _act("x", [1, 5, 6, 4], *Q)

    def ss(b, e, s, **m):
        return [_const("b", _i32(b)), _const("e", _i32(e)), _const("s", _i32(s))], \
            _options("StridedSliceOptions", **m)
    cases = []
    # (id, tensors, ops, outputs, numpy slice of the (1, 5, 6, 4) input per output)
    for cid, (b, e, s, masks, out_shape, ref) in {
            "ss-ring": ([0, 1, 0, 0], [1, 5, 6, 4], [1, 1, 1, 1], dict(BeginMask=0b1101, EndMask=0b1111),
                        [1, 4, 6, 4], lambda a: a[:, 1:]),
            "ss-stride": ([0, 4, 1, 0], [1, 0, 6, 3], [1, -2, 2, 1], dict(), [1, 2, 3, 3],
                          lambda a: a[:, 4:0:-2, 1:6:2, 0:3]),
            "ss-shrink": ([0, 0, -1, 0], [1, 5, 0, 4], [1, 1, 1, 1], dict(ShrinkAxisMask=0b0100, EndMask=0b1011),
                          [1, 5, 4], lambda a: a[:, :, -1, :]),
            "ss-negative-end": ([0, -3, 0, 1], [1, -1, 6, 4], [1, 1, 1, 1], dict(BeginMask=1, EndMask=1),
                                [1, 2, 6, 3], lambda a: a[:, -3:-1, :, 1:4])}.items():
        consts, opts = ss(b, e, s, **masks)
        cases.append((cid, [x] + consts + [_act("y", out_shape, *Q)],
                      [{"op": "STRIDED_SLICE", "inputs": [0, 1, 2, 3], "outputs": [4], "options": opts}], [4], [ref]))
    cases.append(("split-v", [x, _const("sz", _i32([1, -1, 2])), _const("ax", _i32(-1)), _act("y0", [1, 5, 6, 1], *Q),
                              _act("y1", [1, 5, 6, 1], *Q), _act("y2", [1, 5, 6, 2], *Q)],
                  [{"op": "SPLIT_V", "inputs": [0, 1, 2], "outputs": [3, 4, 5],
                    "options": _options("SplitVOptions", NumSplits=3)}], [3, 4, 5],
                  [lambda a: a[..., :1], lambda a: a[..., 1:2], lambda a: a[..., 2:]]))
    cases.append(("split", [_const("ax", _i32(2)), x, _act("y0", [1, 5, 3, 4], *Q), _act("y1", [1, 5, 3, 4], *Q)],
                  [{"op": "SPLIT", "inputs": [0, 1], "outputs": [2, 3], "options": _options("SplitOptions", NumSplits=2)}],
                  [2, 3], [lambda a: a[:, :, :3], lambda a: a[:, :, 3:]]))
    return cases


CASES = {c[0]: c[1:] for c in _cases()}


def _interp(content, kernels):
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert not installed (pip install -e '.[litert]')")
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    r = {"reference": OpResolverType.BUILTIN_REF, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
         "xnnpack": OpResolverType.BUILTIN}[kernels]
    it = Interpreter(model_content=content, num_threads=1, experimental_op_resolver_type=r)
    it.allocate_tensors()
    return it


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("case", list(CASES))
def test_move_ops_equal_litert_and_numpy(tmp_path, case, kernels):
    tensors, ops, outs, refs = CASES[case]
    inputs = [i for i, t in enumerate(tensors) if t["name"] == "x"]
    content = build_tflite(tensors, ops, inputs, outs)
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    g = fxpsim.import_tflite(path, kernels=kernels)
    x = np.random.default_rng(len(case)).integers(-128, 128, (7, 5, 6, 4)).astype(np.int8)
    ys = g.run(x)
    ys = ys if isinstance(ys, list) else [ys]
    it = _interp(content, kernels)
    for s in range(len(x)):
        it.set_tensor(it.get_input_details()[0]["index"], x[s:s + 1])
        it.invoke()
        for k, (d, ref) in enumerate(zip(it.get_output_details(), refs)):
            want = ref(x[s:s + 1])[0]
            np.testing.assert_array_equal(it.get_tensor(d["index"])[0], want, err_msg="numpy statement of the slice")
            np.testing.assert_array_equal(ys[k][s], want, err_msg=f"{case} output {k} sample {s}")


def test_strided_slice_on_the_batch_axis_is_refused(tmp_path):
    tensors = [_act("x", [1, 4], *Q), _const("b", _i32([0, 0])), _const("e", _i32([1, 4])), _const("s", _i32([1, 1])),
               _act("y", [4], *Q)]
    path = tmp_path / "m.tflite"
    path.write_bytes(build_tflite(tensors, [{"op": "STRIDED_SLICE", "inputs": [0, 1, 2, 3], "outputs": [4],
                                             "options": _options("StridedSliceOptions", ShrinkAxisMask=1)}], [0], [4]))
    with pytest.raises(ValueError, match="batch axis"):
        fxpsim.import_tflite(path)


@pytest.mark.parametrize("kernels", KERNELS)
def test_uint8_quantize_at_the_output_equals_litert(tmp_path, kernels):
    """microWakeWord's last op: int8 (1/256, -128) -> uint8 (1/256, 0), and a rescaling one."""
    for so, zo in ((0.00390625, 0), (0.011, 77)):
        tensors = [_act("x", [1, 3, 5], 0.00390625, -128), dict(name="y", type=3, shape=[1, 3, 5], scale=[so],
                                                                 zero_point=[zo])]
        content = build_tflite(tensors, [{"op": "QUANTIZE", "inputs": [0], "outputs": [1]}], [0], [1])
        path = tmp_path / "q.tflite"
        path.write_bytes(content)
        g = fxpsim.import_tflite(path, kernels=kernels)
        assert g.tensors[g.outputs[0]].dtype == np.uint8
        x = np.arange(-128, 127, dtype=np.int8)[:240].reshape(16, 3, 5)
        y = g.run(x)
        it = _interp(content, kernels)
        for s in range(len(x)):
            it.set_tensor(it.get_input_details()[0]["index"], x[s:s + 1])
            it.invoke()
            np.testing.assert_array_equal(y[s], it.get_tensor(it.get_output_details()[0]["index"])[0])
        if zo == 0:      # same scale: the code shifts by 128 exactly
            np.testing.assert_array_equal(y.astype(int), x.astype(int) + 128)

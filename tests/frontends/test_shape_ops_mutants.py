"""The TFLite importer's folding of shape arithmetic (SHAPE, PACK, STRIDED_SLICE on values known at import:
:mod:`fxpsim.frontends.tflite.shape_ops`) against values written out by hand and numpy indexing here.

Written to kill the mutants of the folding path (``_fold``, ``op_SHAPE``, ``op_PACK``, the static branch of
``op_STRIDED_SLICE``) that the import tests left alive, see tools/mutation/README.md: only the Keras
elementwise model took that path, and only its absence of SHAPE/PACK/STRIDED_SLICE nodes was checked.  Each
model here is hand-built (``build_tflite``), imports, and feeds its folded value to a RESHAPE whose target the
test states; the folded values themselves are read from the importer's table of values known at import.
"""
from __future__ import annotations

import numpy as np
import pytest

import fxpsim

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import INT8, INT32, _act, _const, _options, build_tflite  # noqa: E402

from fxpsim.frontends.tflite.importer import _Builder  # noqa: E402
from fxpsim.frontends.tflite.reader import _read_model  # noqa: E402

INT64 = 4
Q = (0.04, -5)
M = np.arange(12, dtype=np.int32).reshape(3, 4)


def _i32(v):
    return np.array(v, np.int32)


def _ss(x, b, e, s, out, **masks):
    """A STRIDED_SLICE operator on tensor indices; ``s=None``: no strides input."""
    ins = [x, b, e] + ([] if s is None else [s])
    return {"op": "STRIDED_SLICE", "inputs": ins, "outputs": [out], "options": _options("StridedSliceOptions", **masks)}


def _import(tmp_path, tensors, ops, inputs, outputs):
    path = tmp_path / "m.tflite"
    path.write_bytes(build_tflite(tensors, ops, inputs, outputs))
    builder = _Builder(_read_model(path.read_bytes(), str(path)), str(path), "reference")
    return builder.build(), builder, path


def _base():
    """x [1, 4, 3, 2] -> SHAPE -> slices -> PACK [1, 12, 2] -> RESHAPE: tensors 0..12, operators 0..4."""
    tensors = [_act("x", [1, 4, 3, 2], *Q),                                   # 0
               dict(name="shape", type=INT32, shape=[4]),                      # 1
               _const("b1", _i32([1])), _const("e1", _i32([3])), _const("s1", _i32([1])),   # 2, 3, 4
               dict(name="hw", type=INT32, shape=[2]),                         # 5
               _const("b0", _i32([0])), _const("e0", _i32([1])),               # 6, 7
               dict(name="n", type=INT32, shape=[]),                           # 8
               _const("twelve", _i32(12)), _const("two", _i32(2)),             # 9, 10
               dict(name="target", type=INT32, shape=[3]),                     # 11
               _act("y", [1, 12, 2], *Q)]                                      # 12
    ops = [{"op": "SHAPE", "inputs": [0], "outputs": [1], "options": _options("ShapeOptions", OutType=INT32)},
           _ss(1, 2, 3, 4, 5),                                                 # shape[1:3] = [4, 3]
           _ss(1, 6, 7, 4, 8, ShrinkAxisMask=1),                               # shape[0] = 1
           {"op": "PACK", "inputs": [8, 9, 10], "outputs": [11], "options": _options("PackOptions", ValuesCount=3,
                                                                                     Axis=0)},
           {"op": "RESHAPE", "inputs": [0, 11], "outputs": [12]}]
    return tensors, ops


def test_shape_slice_pack_reshape(tmp_path):
    tensors, ops = _base()
    g, b, _ = _import(tmp_path, tensors, ops, [0], [12])
    assert b.static[1].tolist() == [1, 4, 3, 2] and b.static[1].dtype == np.int32
    assert b.static[5].tolist() == [4, 3] and b.shape[5] == (2,)
    assert b.static[8].tolist() == 1 and b.static[8].shape == () and b.shape[8] == ()
    assert b.static[11].tolist() == [1, 12, 2] and b.static[11].dtype == np.int32
    assert g.meta["tflite_folded"] == {"1": 0, "5": 1, "8": 2, "11": 3}
    assert [n.op for n in g.nodes] == ["reshape"] and g.nodes[0].attrs["shape"] == [12, 2]
    x = np.random.default_rng(0).integers(-128, 128, (3, 4, 3, 2)).astype(np.int8)
    np.testing.assert_array_equal(g.run(x), x.reshape(3, 12, 2))


@pytest.mark.parametrize("begin, end, strides, masks, want", [
    ([1, 3], [3, 0], [1, -1], {}, M[1:3, 3:0:-1]),
    ([1, 3], [3, 0], [1, -1], dict(EndMask=0b10), M[1:3, 3::-1]),
    ([2, 1], [0, 3], [1, 1], dict(BeginMask=0b01), M[:0, 1:3]),
    ([1, 1], [1, 2], [1, 1], dict(Offset=True), M[1:2, 1:3]),                 # end = begin + end
    ([0, 2], [3, 4], [2, 1], dict(ShrinkAxisMask=0b10), M[0:3:2, 2]),
    ([1], [3], [1], {}, M[1:3, :]),                                           # trailing axes kept whole
    ([0, 0], [3, 4], [0, 2], {}, M[0:3:1, 0:4:2]),                            # stride 0 taken as 1
    ([-2, -3], [-1, -1], [1, 1], {}, M[-2:-1, -3:-1]),
    ([2, 2], [3, 4], [1, 1], dict(BeginMask=0b01), M[:3, 2:4]),             # the begin mask's bit 0: axis 0
    ([2, 2], [3, 4], [1, 1], dict(BeginMask=0b10), M[2:3, :4]),             # bit 1: axis 1
])
def test_static_strided_slice_masks(tmp_path, begin, end, strides, masks, want):
    n = len(begin)
    tensors, ops = _base()
    tensors += [_const("m", M), _const("sb", _i32(begin)), _const("se", _i32(end)), _const("sst", _i32(strides)),
                dict(name="sl", type=INT32, shape=list(want.shape))]            # 13 .. 17
    ops.insert(0, _ss(13, 14, 15, 16, 17, **masks))
    assert n in (1, 2)
    g, b, _ = _import(tmp_path, tensors, ops, [0], [12])
    assert b.static[17].shape == want.shape and b.static[17].tolist() == want.tolist()
    assert g.meta["tflite_folded"]["17"] == 0


def test_static_strided_slice_without_strides_and_int64_result(tmp_path):
    tensors, ops = _base()
    tensors += [_const("m", M), _const("sb", _i32([1, 1])), _const("se", _i32([3, 3])),
                dict(name="sl", type=INT64, shape=[2, 2])]                      # 13 .. 16
    ops.insert(0, _ss(13, 14, 15, None, 16))
    g, b, _ = _import(tmp_path, tensors, ops, [0], [12])
    assert b.static[16].dtype == np.int64 and b.static[16].tolist() == [[5, 6], [9, 10]]


@pytest.mark.parametrize("mask", ["EllipsisMask", "NewAxisMask"])
def test_static_strided_slice_refuses_ellipsis_and_new_axis(tmp_path, mask):
    tensors, ops = _base()
    tensors += [_const("m", M), _const("sb", _i32([0, 0])), _const("se", _i32([3, 4])), _const("sst", _i32([1, 1])),
                dict(name="sl", type=INT32, shape=[3, 4])]
    ops.insert(0, _ss(13, 14, 15, 16, 17, **{mask: 1}))
    with pytest.raises(ValueError, match=r"operator 0 \(STRIDED_SLICE, output 'sl'\): STRIDED_SLICE with "
                                         r"ellipsis/new-axis masks is not supported$"):
        _import(tmp_path, tensors, ops, [0], [12])


@pytest.mark.parametrize("axis, want", [(0, [[1, 2], [3, 4]]), (1, [[1, 3], [2, 4]]), (-1, [[1, 3], [2, 4]])])
def test_pack_axis(tmp_path, axis, want):
    tensors, ops = _base()
    tensors += [_const("p", _i32([1, 2])), _const("q", _i32([3, 4])), dict(name="pk", type=INT32, shape=[2, 2])]
    ops.insert(0, {"op": "PACK", "inputs": [13, 14], "outputs": [15],
                   "options": _options("PackOptions", ValuesCount=2, Axis=axis)})
    g, b, _ = _import(tmp_path, tensors, ops, [0], [12])
    assert b.static[15].tolist() == want and b.shape[15] == (2, 2)


def test_pack_of_a_run_time_tensor_is_refused(tmp_path):
    tensors, ops = _base()
    tensors += [dict(name="pk", type=INT32, shape=[2, 1, 4, 3, 2])]
    ops.insert(0, {"op": "PACK", "inputs": [0, 0], "outputs": [13], "options": _options("PackOptions",
                                                                                       ValuesCount=2, Axis=0)})
    with pytest.raises(ValueError, match=r"PACK x1: on run-time data \(fxpsim evaluates it only on values known "
                                         r"at import\)"):
        _import(tmp_path, tensors, ops, [0], [12])


def _litert(path, x):
    """The model's output, run by LiteRT's reference kernels."""
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert not installed (pip install -e '.[litert]')")
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    it = Interpreter(model_path=str(path), num_threads=1, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def test_folded_model_equals_litert(tmp_path):
    tensors, ops = _base()
    _, _, path = _import(tmp_path, tensors, ops, [0], [12])
    g = fxpsim.import_tflite(path)
    x = np.random.default_rng(1).integers(-128, 128, (1, 4, 3, 2)).astype(np.int8)
    ref = _litert(path, x)
    assert ref.shape == (1, 12, 2)
    np.testing.assert_array_equal(g.run(x), ref)


def test_begin_mask_on_axis_0_folded_as_litert_reads_it(tmp_path):
    # RESHAPE x to shape(x)[2:4] with begin mask bit 0, i.e. shape(x)[:4] = [1, 4, 3, 2] (without the mask
    # [3, 2]: 6 values, not 24); LiteRT computes the same target from the same operators
    tensors = [_act("x", [1, 4, 3, 2], *Q), dict(name="shape", type=INT32, shape=[4]), _const("b", _i32([2])),
               _const("e", _i32([4])), _const("s", _i32([1])), dict(name="target", type=INT32, shape=[4]),
               _act("y", [1, 4, 3, 2], *Q)]
    ops = [{"op": "SHAPE", "inputs": [0], "outputs": [1], "options": _options("ShapeOptions", OutType=INT32)},
           _ss(1, 2, 3, 4, 5, BeginMask=1), {"op": "RESHAPE", "inputs": [0, 5], "outputs": [6]}]
    g, b, path = _import(tmp_path, tensors, ops, [0], [6])
    assert b.static[5].tolist() == [1, 4, 3, 2]
    x = np.random.default_rng(2).integers(-128, 128, (1, 4, 3, 2)).astype(np.int8)
    ref = _litert(path, x)
    assert ref.shape == (1, 4, 3, 2)
    np.testing.assert_array_equal(g.run(x), ref)


def _shifted(first, tensors, ops):
    """The model with tensor ``first`` put at index 0 and every other tensor one index up."""
    up = [{**o, "inputs": [i + 1 if i >= 0 else i for i in o["inputs"]], "outputs": [i + 1 for i in o["outputs"]]}
          for o in ops]
    return [first] + tensors, up


def test_static_strided_slice_whose_strides_are_tensor_0(tmp_path):
    # tensor index 0 is a real strides input (not "absent", which is -1)
    tensors, ops = _base()
    tensors += [_const("m", M), _const("sb", _i32([0, 3])), _const("se", _i32([3, 0])),
                dict(name="sl", type=INT32, shape=[2, 3])]                      # 13 .. 16, then 14 .. 17
    ops.insert(0, _ss(13, 14, 15, -1, 16))
    tensors, ops = _shifted(_const("sst", _i32([2, -1])), tensors, ops)
    ops[0]["inputs"][3] = 0
    g, b, _ = _import(tmp_path, tensors, ops, [1], [13])
    want = M[0:3:2, 3:0:-1]
    assert b.static[17].tolist() == want.tolist() == [[3, 2, 1], [11, 10, 9]]


def test_static_strided_slice_of_scalar_begin_end_strides(tmp_path):
    # 0-d begin / end / strides are read as one element each (``reshape(-1)``), as on the run-time path
    tensors, ops = _base()
    tensors += [_const("m", M), _const("sb", _i32(1)), _const("se", _i32(3)), _const("sst", _i32(2)),
                dict(name="sl", type=INT32, shape=[1, 4])]
    ops.insert(0, _ss(13, 14, 15, 16, 17))
    g, b, _ = _import(tmp_path, tensors, ops, [0], [12])
    assert b.static[17].tolist() == M[1:3:2].tolist() == [[4, 5, 6, 7]]


@pytest.mark.parametrize("absent, what", [(1, "begin"), (2, "end")])
def test_static_strided_slice_without_begin_or_end_is_refused(tmp_path, absent, what):
    tensors, ops = _base()
    tensors += [_const("m", M), _const("sb", _i32([1, 1])), _const("se", _i32([3, 3])), _const("sst", _i32([1, 1])),
                dict(name="sl", type=INT32, shape=[2, 2])]
    ops.insert(0, _ss(13, 14, 15, 16, 17))
    ops[0]["inputs"][absent] = -1
    with pytest.raises(ValueError, match=rf"m\.tflite: operator 0 \(STRIDED_SLICE, output 'sl'\): the {what} must be "
                                         r"known at import \(a constant or shape arithmetic on static shapes\); "
                                         r"tensor '\(none\)' is computed at run time$"):
        _import(tmp_path, tensors, ops, [0], [12])


def test_pack_without_an_input_is_refused(tmp_path):
    tensors, ops = _base()
    tensors += [_const("p", _i32([1, 2])), dict(name="pk", type=INT32, shape=[2, 2])]
    ops.insert(0, {"op": "PACK", "inputs": [13, -1], "outputs": [14],
                   "options": _options("PackOptions", ValuesCount=2, Axis=0)})
    with pytest.raises(ValueError, match=r"m\.tflite: operator 0 \(PACK, output 'pk'\): the PACK inputs must be known "
                                         r"at import \(a constant or shape arithmetic on static shapes\); tensor "
                                         r"'\(none\)' is computed at run time$"):
        _import(tmp_path, tensors, ops, [0], [12])


def test_shape_of_a_tensor_no_operator_computes_is_refused(tmp_path):
    tensors, ops = _base()
    tensors += [dict(name="orphan", type=INT8, shape=[2, 3]), dict(name="sh", type=INT32, shape=[2])]
    ops.insert(0, {"op": "SHAPE", "inputs": [13], "outputs": [14], "options": _options("ShapeOptions", OutType=INT32)})
    with pytest.raises(ValueError, match=r"m\.tflite: operator 0 \(SHAPE, output 'sh'\): the shape of 'orphan' is "
                                         r"unknown$"):
        _import(tmp_path, tensors, ops, [0], [12])


def test_a_folded_value_of_a_type_numpy_does_not_map_is_int32(tmp_path):
    # a SHAPE output declared UINT64 (TFLite type 12, not in the reader's numpy table): folded as int32
    tensors, ops = _base()
    tensors += [dict(name="sh", type=12, shape=[4])]
    ops.insert(0, {"op": "SHAPE", "inputs": [0], "outputs": [13], "options": _options("ShapeOptions", OutType=INT32)})
    g, b, _ = _import(tmp_path, tensors, ops, [0], [12])
    assert b.static[13].dtype == np.int32 and b.static[13].tolist() == [1, 4, 3, 2]


def test_strided_slice_of_a_constant_the_graph_already_holds_is_not_folded(tmp_path):
    # an int8 constant that ADD read first is a graph constant: a STRIDED_SLICE of it takes the run-time path,
    # which refuses the 1-D constant's slice of axis 0 as the batch axis (folding it would hide the refusal)
    tensors = [_act("x", [1, 4], *Q), _const("c", np.array([1, -2, 3, -4], np.int8), INT8, scale=[0.04],
                                             zero_point=[-5]),
               _act("y", [1, 4], *Q), _const("b", _i32([1])), _const("e", _i32([3])), _const("s", _i32([1])),
               _act("cs", [2], *Q)]
    ops = [{"op": "ADD", "inputs": [0, 1], "outputs": [2], "options": _options("AddOptions")}, _ss(1, 3, 4, 5, 6)]
    with pytest.raises(ValueError, match=r"operator 1 \(STRIDED_SLICE, output 'cs'\): STRIDED_SLICE on the batch "
                                         r"axis is not supported \(fxpsim graphs keep the batch on axis 0\)$"):
        _import(tmp_path, tensors, ops, [0], [2])

"""Coverage of a .tflite model and each kernel set's own Prepare (issue 22), against LiteRT running.

* :func:`fxpsim.tflite_coverage` and the one import error: every unsupported operator is listed with its
  node and the count per op, on hand-built models whose contents are known by construction (the expected
  table is written down from the model we build, not read back by fxpsim's reader).
* Kernel sets' own Prepare: converter fixtures (``tools/fixtures/tflite_prepare/make_models.py``) with a
  softmax on a tiny logits range (LiteRT's reference kernel aborts the process, checked in a subprocess; the
  builtin kernels and XNNPACK run it and fxpsim equals them bit for bit) and a hard-swish on tiny scales
  (every kernel set runs it; fxpsim equals each one bit for bit, intermediates included).
* HARD_SWISH over a sweep of scales whose multiplier exponents leave TFLite's int16 ``RoundingDivideByPOT``
  range (reluish exponent down to -26, output exponent down to -21), live against all three kernel sets, and
  the one refusal every kernel set applies (output exponent > 0: LiteRT fails to prepare).
* Malformed operators: ``ValueError`` naming the file, never ``IndexError``/``KeyError``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.datapath import tflite as T

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import _act, _const, _options, build_tflite  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PREPARE_DIR = REPO / "tests" / "vectors" / "tflite_prepare"
KERNELS = ("reference", "builtin", "xnnpack")


def _litert():
    return pytest.importorskip("ai_edge_litert", reason="ai-edge-litert not installed (pip install -e '.[litert]')")


def _interpreter(kernels, *, path=None, content=None, preserve=False):
    _litert()
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = {"reference": OpResolverType.BUILTIN_REF,
                "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "xnnpack": OpResolverType.BUILTIN}[kernels]
    it = Interpreter(model_path=None if path is None else str(path), model_content=content, num_threads=1,
                     experimental_op_resolver_type=resolver, experimental_preserve_all_tensors=preserve)
    it.allocate_tensors()
    return it


# ------------------------------------------------------------------------------------------ coverage
def _mixed_model() -> bytes:
    """x -> DIV(x, c) -> POW(., x) -> DIV(., c) -> ADD(., x) -> SQRT: 2 DIV, 1 POW,
    1 SQRT unsupported; 1 ADD supported."""
    q = (0.05, 3)
    tensors = [_act("x", [1, 8], *q), _const("c", np.full((1, 8), 20, np.int8), 9, scale=[0.05], zero_point=[3]),
               _act("d1", [1, 8], *q), _act("sq", [1, 8], *q), _act("d2", [1, 8], *q), _act("s", [1, 8], *q),
               _act("r", [1, 8], *q)]
    ops = [{"op": "DIV", "inputs": [0, 1], "outputs": [2]},
           {"op": "POW", "inputs": [2, 0], "outputs": [3]},
           {"op": "DIV", "inputs": [3, 1], "outputs": [4]},
           {"op": "ADD", "inputs": [4, 0], "outputs": [5]},
           {"op": "SQRT", "inputs": [5], "outputs": [6]}]
    return build_tflite(tensors, ops, [0], [6])


def test_one_error_lists_every_unsupported_operator_with_counts(tmp_path):
    path = tmp_path / "mixed.tflite"
    path.write_bytes(_mixed_model())
    with pytest.raises(ValueError) as info:
        fxpsim.import_tflite(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "4 operator(s) of 3 op type(s)" in msg
    assert "DIV x2" in msg and "POW x1" in msg and "SQRT x1" in msg and "ADD x" not in msg
    for k, out in ((0, "d1"), (1, "sq"), (2, "d2"), (4, "r")):
        assert f"operator {k} (" in msg and f"output '{out}'" in msg
    assert "supported:" in msg and "CONV_2D" in msg


def test_coverage_table_of_the_mixed_model(tmp_path):
    path = tmp_path / "mixed.tflite"
    path.write_bytes(_mixed_model())
    cov = fxpsim.tflite_coverage(path)
    table = {r.op: r for r in cov.rows}
    assert [r.op for r in cov.rows] == ["DIV", "POW", "ADD", "SQRT"]
    assert {op: r.count for op, r in table.items()} == {"DIV": 2, "POW": 1, "ADD": 1, "SQRT": 1}
    for k in KERNELS:
        assert not cov.imports(k)
        assert [r.op for r in cov.unsupported(k)] == ["DIV", "POW", "SQRT"]
        assert table["ADD"].imports(k)
        assert [n for n, _ in table["DIV"].problems[k]] == ["operator 0 (DIV, output 'd1')",
                                                            "operator 2 (DIV, output 'd2')"]
    assert cov.activation_types == {"int8": 5}
    text = cov.format()
    assert "DIV" in text.splitlines()[2] and text.splitlines()[2].split()[1:] == ["2", "no", "no", "no"]
    d = cov.to_dict()
    assert d["ops"][2] == {"op": "ADD", "count": 1, "nodes": ["operator 3 (ADD, output 's')"],
                           "kernels": {k: "imports" for k in KERNELS}}
    assert fxpsim.tflite_coverage(path, kernels="builtin").kernels == ("builtin",)
    with pytest.raises(ValueError, match="kernels must be one of"):
        fxpsim.tflite_coverage(path, kernels="gpu")


def test_coverage_of_a_supported_converter_model_counts_its_operators():
    """The counts equal the converter's own op list (the fixture's sidecar, written by LiteRT's side)."""
    import json
    from collections import Counter
    models = REPO / "tests" / "vectors" / "tflite_models"
    for name in ("mobilenet_v3_block", "elementwise"):
        cov = fxpsim.tflite_coverage(models / f"{name}.tflite")
        sidecar = json.loads((models / f"{name}.json").read_text())
        assert {r.op: r.count for r in cov.rows} == dict(Counter(o["op_name"] for o in sidecar["ops"]))
        assert all(cov.imports(k) for k in KERNELS), cov.format()


def test_coverage_names_runtime_strided_slice_and_legacy_uint8_outputs(tmp_path):
    q = (0.05, 3)
    tensors = [_act("x", [1, 6], *q), _const("b", np.array([0, 1], np.int32)), _const("e", np.array([1, 5], np.int32)),
               _const("s", np.array([1, 1], np.int32)), _act("y", [1, 4], *q),
               dict(name="u", type=3, shape=[1, 4], scale=[0.05], zero_point=[131])]
    ops = [{"op": "STRIDED_SLICE", "inputs": [0, 1, 2, 3], "outputs": [4]},
           {"op": "QUANTIZE", "inputs": [4], "outputs": [5]}]
    path = tmp_path / "ss.tflite"
    path.write_bytes(build_tflite(tensors, ops, [0], [5]))
    cov = fxpsim.tflite_coverage(path)
    why = {r.op: r.problems["reference"][0][1] for r in cov.unsupported("reference")}
    assert set(why) <= {"STRIDED_SLICE", "QUANTIZE"}
    if "QUANTIZE" in why:
        assert "uint8 (legacy quantization)" in why["QUANTIZE"]
    if "STRIDED_SLICE" in why:
        assert "run-time data" in why["STRIDED_SLICE"]


def test_other_subgraphs_are_listed(tmp_path):
    """Operators of subgraph 1 count and are named with their subgraph (a streaming model's init subgraph)."""
    cov = fxpsim.tflite_coverage(REPO / "tests" / "vectors" / "tflite_streaming" / "ring_conv.tflite")
    nodes = {r.op: r.nodes for r in cov.rows}
    assert nodes["VAR_HANDLE"] == ("operator 1 (VAR_HANDLE, output 'ring_state')",
                                   "subgraph 1 operator 0 (VAR_HANDLE, output 'ring_state2')")
    assert nodes["ASSIGN_VARIABLE"] == ("operator 8 (ASSIGN_VARIABLE)", "subgraph 1 operator 1 (ASSIGN_VARIABLE)")


# ------------------------------------------------------------------------------------------ Prepare per kernel set
def test_softmax_small_logits_refused_only_by_the_reference_kernels():
    path = PREPARE_DIR / "softmax_small_logits.tflite"
    cov = fxpsim.tflite_coverage(path)
    assert [r.op for r in cov.unsupported("reference")] == ["SOFTMAX"]
    assert cov.imports("builtin") and cov.imports("xnnpack")
    with pytest.raises(ValueError, match=r"reference SOFTMAX needs beta \* input_scale \* 2\^26 > 1"):
        fxpsim.import_tflite(path)
    # the number in the message: beta * s * 2^26 from the model's float32 scale, recomputed here exactly
    sm = next(r for r in cov.rows if r.op == "SOFTMAX")
    reason = sm.problems["reference"][0][1]
    g = fxpsim.import_tflite(path, kernels="builtin")
    s_in = float(np.float32(g.tensors[g.nodes[-1].inputs[0]].scale[0]))
    assert f"here {s_in * 2.0 ** 26:.4g}" in reason and s_in * 2.0 ** 26 <= 1


def test_litert_reference_softmax_aborts_on_the_small_logits_fixture():
    """What the refusal stands for: LiteRT's reference kernels abort the process in Prepare (a subprocess)."""
    _litert()
    code = ("import sys; from ai_edge_litert.interpreter import Interpreter, OpResolverType as R; "
            "it = Interpreter(model_path=sys.argv[1], experimental_op_resolver_type=getattr(R, sys.argv[2])); "
            "it.allocate_tensors(); print('prepared')")
    path = str(PREPARE_DIR / "softmax_small_logits.tflite")
    ref = subprocess.run([sys.executable, "-c", code, path, "BUILTIN_REF"], capture_output=True, text=True)
    assert ref.returncode != 0 and "prepared" not in ref.stdout
    opt = subprocess.run([sys.executable, "-c", code, path, "BUILTIN_WITHOUT_DEFAULT_DELEGATES"],
                         capture_output=True, text=True)
    assert opt.returncode == 0 and "prepared" in opt.stdout, opt.stderr


def _random_int8(it, n, seed):
    d = it.get_input_details()[0]
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (n,) + tuple(int(v) for v in d["shape"][1:])).astype(np.int8)


@pytest.mark.parametrize("name,kernels", [("softmax_small_logits", "builtin"), ("softmax_small_logits", "xnnpack"),
                                          ("hard_swish_small_scales", "reference"),
                                          ("hard_swish_small_scales", "builtin"),
                                          ("hard_swish_small_scales", "xnnpack")])
def test_prepare_fixtures_equal_litert(name, kernels):
    path = PREPARE_DIR / f"{name}.tflite"
    it = _interpreter(kernels, path=path, preserve=kernels != "xnnpack")
    g = fxpsim.import_tflite(path, kernels=kernels)
    x = _random_int8(it, 64, seed=len(name) + len(kernels))
    y, _, kept = g.run(x, keep=True)
    din, dout = it.get_input_details()[0], it.get_output_details()[0]
    for s in range(len(x)):
        it.set_tensor(din["index"], x[s:s + 1])
        it.invoke()
        np.testing.assert_array_equal(y[s], it.get_tensor(dout["index"])[0], err_msg=f"{name} {kernels} sample {s}")
        if kernels != "xnnpack":
            for tname, index in g.meta["tflite_tensors"].items():
                if tname in kept:
                    np.testing.assert_array_equal(kept[tname][s], it.get_tensor(index)[0], err_msg=tname)
    if name == "hard_swish_small_scales":       # the case this fixture is for: a reluish exponent below -15
        hs = next(n for n in g.nodes if n.op == "tflite_hard_swish")
        sx, sy = g.tensors[hs.inputs[0]], g.tensors[hs.outputs[0]]
        p = T.hard_swish_params(float(sx.scale[0]), int(sx.zero_point[0]), float(sy.scale[0]), int(sy.zero_point[0]))
        assert p.reluish_multiplier_exponent < -15
        assert len(np.unique(y)) > 4          # not a constant output


def _hard_swish_cases():
    rng = np.random.default_rng(22)
    cases = []
    for k in range(14):
        si = float(np.float32(10 ** rng.uniform(-10, -5)))
        so = float(np.float32(si * (10 ** rng.uniform(2.5, 4.5) if k % 2 else rng.uniform(0.5, 3))))
        cases.append((si, int(rng.integers(-40, 40)), so, int(rng.integers(-80, 10))))
    return cases


@pytest.mark.parametrize("kernels", KERNELS)
def test_hard_swish_beyond_the_int16_shift_range_equals_litert(kernels):
    """Scales whose reluish or output exponent is below -15 (gemmlowp's int16 RoundingDivideByPOT by 16..31 bits
    gives +-1): every kernel set runs them; fxpsim equals each on every input code."""
    x = np.arange(-128, 128).astype(np.int8).reshape(1, 4, 64)
    seen = set()
    for si, zi, so, zo in _hard_swish_cases():
        content = build_tflite([_act("x", [1, 4, 64], si, zi), _act("y", [1, 4, 64], so, zo)],
                               [{"op": "HARD_SWISH", "inputs": [0], "outputs": [1]}], [0], [1])
        p = T.hard_swish_params(si, zi, so, zo)
        seen.add((p.reluish_multiplier_exponent < -15, p.output_multiplier_exponent < -15))
        it = _interpreter(kernels, content=content)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        np.testing.assert_array_equal(T.quantized_hard_swish(x, p), it.get_tensor(it.get_output_details()[0]["index"]),
                                      err_msg=f"si={si} so={so}")
    assert {(True, False), (True, True)} <= seen or {(True, False), (False, True)} <= seen


@pytest.mark.parametrize("kernels", KERNELS)
def test_hard_swish_output_exponent_above_zero_fails_in_every_kernel_set(tmp_path, kernels):
    content = build_tflite([_act("x", [1, 8], 0.05, 0), _act("y", [1, 8], 0.05 / 300, 0)],
                           [{"op": "HARD_SWISH", "inputs": [0], "outputs": [1]}], [0], [1])
    with pytest.raises(RuntimeError, match="output_multiplier_exponent <= 0"):
        _interpreter(kernels, content=content)
    path = tmp_path / "hs.tflite"
    path.write_bytes(content)
    # fl32(0.05/128) / fl32(0.05/300) = 2.34 = 0.586 * 2^2: exponent 2
    with pytest.raises(ValueError, match=r"HARD_SWISH x1.*output multiplier exponent 2 > 0"):
        fxpsim.import_tflite(path, kernels=kernels)


def test_softmax_params_per_kernel_set():
    """beta * s * 2^26 <= 1: the reference parameters refuse, the optimized ones are the float table's."""
    with pytest.raises(ValueError, match="exceed 1"):
        T.softmax_params(1e-9)
    p = T.softmax_params(1e-9, kernels="builtin")
    assert not p.fixed_point and p.input_scale == float(np.float32(1e-9))
    rows = np.array([[-128, 0, 127, 5]], np.int8)
    # an independent float64 model of the float table: exp(-s*beta*k) ~ 1 - tiny -> 1/4 each, 64 codes - 128
    np.testing.assert_array_equal(T.quantized_softmax(rows, p, kernels="builtin"), [[-64, -64, -64, -64]])
    with pytest.raises(ValueError, match="prepared for the optimized kernels"):
        T.quantized_softmax(rows, p, kernels="reference")
    assert T.softmax_reference_scale(2.0, 0.25) == 2.0 * 0.25 * 2 ** 26
    assert T.softmax_reference_scale(1.0, 100.0) == 2 ** 31 - 1


@pytest.mark.parametrize("kernels", KERNELS)
def test_hard_swish_multiplier_flushed_to_zero_equals_litert(kernels):
    """s_in = 1e-13: the reluish multiplier 8.5e-12 < 2^-32 is flushed to (0, 0) by QuantizeMultiplier (as in
    TFLite); every kernel set runs it and fxpsim equals each."""
    from reference import ref_quantize_multiplier
    x = np.arange(-128, 128).astype(np.int8).reshape(1, 4, 64)
    for si, so in ((1e-13, 1e-13), (1e-13, 3e-11)):
        p = T.hard_swish_params(si, 3, so, -20)
        hires = np.float32(1 / 128) * np.float32(si)
        assert ref_quantize_multiplier(float(hires / np.float32(3 / 32768))) == (0, 0)
        assert (p.reluish_multiplier_fixedpoint_int16, p.reluish_multiplier_exponent) == (0, 0)
        content = build_tflite([_act("x", [1, 4, 64], si, 3), _act("y", [1, 4, 64], so, -20)],
                               [{"op": "HARD_SWISH", "inputs": [0], "outputs": [1]}], [0], [1])
        it = _interpreter(kernels, content=content)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        np.testing.assert_array_equal(T.quantized_hard_swish(x, p), it.get_tensor(it.get_output_details()[0]["index"]))


# ------------------------------------------------------------------------------------------ malformed operators
@pytest.mark.parametrize("outputs,inputs", [([], [0, 1]), ([2], [0, -1])])
def test_malformed_operator_is_a_value_error_naming_the_file(tmp_path, outputs, inputs):
    tensors = [_act(n, [1, 4], 0.05, 0) for n in ("a", "b", "y")]
    path = tmp_path / "bad.tflite"
    path.write_bytes(build_tflite(tensors, [{"op": "ADD", "inputs": inputs, "outputs": outputs}], [0, 1], [2]))
    with pytest.raises(ValueError, match=r"bad\.tflite: .*operator 0 \(ADD"):
        fxpsim.import_tflite(path)


def test_options_of_the_hand_built_models():
    assert _options("AddOptions", FusedActivationFunction=0)[0] == tflite.BuiltinOptions.AddOptions

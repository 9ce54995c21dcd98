"""A QKeras model through qonnx's Keras converter (tools/fixtures/qkeras/make_models.py: QKeras 0.9, TensorFlow
2.15, qonnx 0.4 in a scratch environment): every tensor against the independent Fraction model
(``tests/qonnx_reference.py``) and the outputs against qonnx's own ``execute_onnx`` run live, bit for bit, on
inputs of both signs (QKeras exports ``quantized_relu`` of the float input as a Relu then an unsigned Quant: the
Relu folds into that Quant, which is refused where it would not be exact)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import fxpsim
import qonnx_reference as R
from paths import VECTORS_DIR

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")
PATH = VECTORS_DIR / "qonnx" / "qkeras_mlp.onnx"
F32 = np.float32


def _inputs():
    rng = np.random.default_rng(4)
    x = rng.uniform(-1.5, 5.0, (48, 16)).astype(F32)
    x[0] = -0.0
    x[1] = [-3.0, -1e-9, 0.0, 1e-9, 3.96875, 3.984375, 3.9921875, 4.0, 7.0, -7.0, 0.0078125, 0.00390625,
            0.01171875, 0.5, 1.99609375, 100.0]
    return x


def test_every_tensor_equals_the_fraction_model():
    model = onnx.load(PATH)
    net = fxpsim.import_model(PATH)
    x = _inputs()
    y = net.run(x)
    ref = R.evaluate(model, {model.graph.input[0].name: x})
    want = np.vectorize(lambda f: F32(float(f)), otypes=[F32])(ref[model.graph.output[0].name])
    assert y.dtype == F32 and np.array_equal(y, want)
    assert len({float(v) for v in want.reshape(-1)}) > 20           # the outputs are not all one value


def test_outputs_equal_qonnx_execute_onnx_live():
    pytest.importorskip("qonnx", reason="qonnx not installed (pip install -e '.[qonnx]')")
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    model = onnx.load(PATH)
    w = ModelWrapper(model)
    x = _inputs()
    i_name, o_name = model.graph.input[0].name, model.graph.output[0].name
    ref = np.array([execute_onnx(w, {i_name: x[k:k + 1]})[o_name][0] for k in range(len(x))])
    assert np.array_equal(fxpsim.import_model(PATH).run(x), ref)


def test_relu_of_the_float_input_folds_only_into_a_quant_starting_at_its_zero_point(tmp_path):
    """The same model with the input quantizer made signed: Relu then Quant would not equal the Quant alone for
    negative inputs, so the import refuses, naming the node."""
    model = copy.deepcopy(onnx.load(PATH))
    quant = next(n for n in model.graph.node if n.op_type == "Quant" and n.input[0] == model.graph.node[0].output[0])
    for a in quant.attribute:
        if a.name == "signed":
            a.i = 1
    path = tmp_path / "signed.onnx"
    onnx.save(model, path)
    with pytest.raises(ValueError, match=rf"node '{quant.name}' \(Quant\): quantizes a Relu of the float input with "
                                         r"codes \[-128, 127\] below its zero point 0"):
        fxpsim.import_model(path)


def test_running_sum_bound_of_the_plan_step_is_sound():
    """The MAC step's tighter running-sum bound (one-signed inputs): for every accumulator width it accepts, the
    most extreme running sums of every column -- over every input in the codes' range and every prefix, plain
    Python integers -- fit; the 15-bit accumulator the importer gives MatMul_0 is accepted (its symmetric bound,
    22440, is not), so the plan runs the step."""
    from fxpsim.frontends.qonnx.steps import _prefix_sums_fit
    net = fxpsim.import_model(PATH)
    node = next(n for n in net.nodes if n.op == "qonnx_matmul")
    w = [[int(v) for v in row] for row in np.asarray(net.tensors[node.inputs[1]].data)]      # [K][N]
    lo_x, hi_x = net.tensors[node.inputs[0]].code_range
    a, b = int(lo_x) - int(node.attrs["x_zp"]), int(hi_x) - int(node.attrs["x_zp"])
    lo = hi = 0
    for j in range(len(w[0])):
        top = bottom = 0
        for k in range(len(w)):
            top += max(a * w[k][j], b * w[k][j])              # the largest running sum after k + 1 terms
            bottom += min(a * w[k][j], b * w[k][j])
            hi, lo = max(hi, top), min(lo, bottom)
    for bits in range(8, 21):
        if _prefix_sums_fit(net, node, bits):
            assert -(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1, bits
    assert _prefix_sums_fit(net, node, 15)

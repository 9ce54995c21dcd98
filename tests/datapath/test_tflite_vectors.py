"""The TFLite int8 models of ``shared/vectors/tflite_int8``, run op by op with fxpsim's integer kernels.

Every expected tensor was produced by the TFLite interpreter with its reference kernels; the
README there pins this build's requantization: CONV_2D uses gemmlowp double rounding
(QuantizeMultiplier + SRDHM + RDBPOT), FULLY_CONNECTED ``round_half_away(acc * double scale)``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from fxpsim.datapath.integer_ops import quantized_conv2d, quantized_fully_connected
from fxpsim.datapath.requantize import Requantizer, activation_range

MODELS = ("mlp", "conv")
#: Requantization of each op in the vectors' TFLite build (see the vectors' README).
TFLITE_KIND = {"FULLY_CONNECTED": "float", "CONV_2D": "double"}
#: Narrowest accumulators that still hold every int32 bias of the model (the sums need 20+ bits).
NARROW_ACC_BITS = {"mlp": 16, "conv": 17}


@pytest.fixture(scope="module", params=MODELS)
def model(request, vectors_dir):
    d = vectors_dir / "tflite_int8"
    if not (d / f"{request.param}.json").is_file():
        pytest.skip(f"{request.param}.json not found in {d}")
    spec = json.loads((d / f"{request.param}.json").read_text())
    with np.load(d / f"{request.param}.npz") as npz:
        data = {k: npz[k] for k in npz.files}
    return spec, data


def _quant(spec, i):
    t = spec["tensors"][i]
    return t["scales"], t["zero_points"]


def run_op(spec, data, op, x, kind=None, **acc_options):
    """Run one op of the model on ``x`` (the 50 stacked inputs): returns (output, IntegerResult | None)."""
    name = op["builtin_op"]
    opts = op["options"]
    if name == "RESHAPE":
        new_shape = [int(v) for v in data[f"t{op['inputs'][1]}"]]
        return x.reshape((x.shape[0],) + tuple(new_shape)), None          # one run per row
    i_in, i_w, i_b = op["inputs"]
    i_out = op["outputs"][0]
    (s_in,), (z_in,) = _quant(spec, i_in)
    s_w, z_w = _quant(spec, i_w)
    (s_out,), (z_out,) = _quant(spec, i_out)
    assert set(z_w) == {0}, "per-channel int8 weights are symmetric"
    act_min, act_max = activation_range(opts["fusedActivationFunction"], s_out, z_out)
    rq = Requantizer.tflite(s_in, np.asarray(s_w), s_out, kind=kind or TFLITE_KIND[name])
    common = dict(requant=rq, x_zp=z_in, out_zp=z_out, act_min=act_min, act_max=act_max, **acc_options)
    w, b = data[f"t{i_w}"], data[f"t{i_b}"]
    if name == "FULLY_CONNECTED":
        res = quantized_fully_connected(x, w, b, **common)
    elif name == "CONV_2D":
        assert x.shape[1] == 1, "one image per interpreter run"
        res = quantized_conv2d(x[:, 0], w, b, stride=(opts["strideH"], opts["strideW"]), padding=opts["padding"],
                               dilation=(opts["dilationHFactor"], opts["dilationWFactor"]), **common)
        return res.out[:, None], res
    else:
        raise NotImplementedError(name)
    return res.out, res


def test_every_intermediate_tensor_bit_exact(model):
    spec, data = model
    for op in spec["ops"]:
        x = data[f"t{op['inputs'][0]}"]
        got, _ = run_op(spec, data, op, x)
        want = data[f"t{op['outputs'][0]}"]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=f"{spec['name']} op {op['index']} {op['builtin_op']}")


def test_whole_model_from_inputs(model):
    spec, data = model
    x = data["inputs"]
    for op in spec["ops"]:
        x, _ = run_op(spec, data, op, x)
    np.testing.assert_array_equal(x, data["outputs"])


def test_readme_fact_fc_is_not_double_rounding(model):
    """The double-rounding requantizer would not reproduce this build's FC outputs (README fact)."""
    spec, data = model
    diffs = 0
    for op in spec["ops"]:
        if op["builtin_op"] == "FULLY_CONNECTED":
            got, _ = run_op(spec, data, op, data[f"t{op['inputs'][0]}"], kind="double")
            diffs += int(np.count_nonzero(got != data[f"t{op['outputs'][0]}"]))
    if spec["name"] == "mlp":
        assert diffs > 0
    assert diffs <= 5          # it differs by an LSB on a few ties only


def test_tflite_accumulator_never_overflows_and_acc_is_exact(model):
    spec, data = model
    for op in spec["ops"]:
        if op["builtin_op"] == "RESHAPE":
            continue
        x = data[f"t{op['inputs'][0]}"]
        _, res = run_op(spec, data, op, x)
        assert res.overflows == 0
        if op["builtin_op"] == "FULLY_CONNECTED":
            i_in, i_w, i_b = op["inputs"]
            (z_in,) = spec["tensors"][i_in]["zero_points"]
            exact = (x.astype(np.int64) - z_in) @ data[f"t{i_w}"].astype(np.int64).T + data[f"t{i_b}"]
            np.testing.assert_array_equal(res.acc, exact)


@pytest.mark.parametrize("overflow", ["wrap", "saturate"])
def test_narrow_accumulator_changes_results(model, overflow):
    spec, data = model
    bits = NARROW_ACC_BITS[spec["name"]]
    x = data["inputs"]
    total_overflows, outputs = 0, None
    for op in spec["ops"]:
        x, res = run_op(spec, data, op, x, acc=bits, overflow=overflow)
        total_overflows += res.overflows if res is not None else 0
    outputs = x
    assert total_overflows > 0
    assert np.count_nonzero(outputs != data["outputs"]) > 0

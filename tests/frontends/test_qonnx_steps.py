"""The QONNX ops' compiled-plan steps (``fxpsim/frontends/qonnx/steps.py``) and the float64 paths of
``fxpsim.datapath.qonnx.arithmetic``: every tensor of every committed Brevitas export through the plan equals the
node-by-node run (the ops' ``run``, the path before the steps), and the float64 arithmetic equals the integer
paths and an independent Fraction model written here."""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")

from fxpsim.datapath.qonnx import arithmetic as A  # noqa: E402
from fxpsim.frontends.qonnx.importer import import_qonnx  # noqa: E402
from fxpsim.graph.plan import feeds_of, plan_for  # noqa: E402

DIR = Path(__file__).resolve().parents[1] / "vectors" / "qonnx"
MODELS = sorted(p.stem for p in DIR.glob("*.onnx"))
MODES = ("ROUND", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


def _inputs(net, batch, seed):
    shape = tuple(net.tensors[net.inputs[0]].shape)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, (batch,) + shape).astype(np.float32)
    x.reshape(batch, -1)[:, :4] = np.float32([0.0, -0.0, 1e-30, -3.0])[None]
    x.reshape(batch, -1)[0, 4:] = (np.arange(x[0].size - 4) - 8) / np.float32(64.0)    # ties of 2^-k scales
    return x


@pytest.mark.parametrize("name", MODELS)
def test_plan_steps_equal_the_node_by_node_run_on_every_tensor(name):
    net = import_qonnx(DIR / f"{name}.onnx")
    x = _inputs(net, 7, 3)
    y_fast, _, fast = net.run(x, keep=True)
    y_ref, _, ref = net.run(x, keep=True, plan=False)
    assert fast.keys() == ref.keys()
    for t in ref:
        assert fast[t].dtype == ref[t].dtype, t
        np.testing.assert_array_equal(fast[t], ref[t], err_msg=f"{name}: tensor {t}")
    np.testing.assert_array_equal(y_fast, y_ref)
    # the steps ran: every node but a move / pool that has none is a prepared step
    plan = plan_for(net, net.default_datapath, feeds_of(net, x))
    prepared = [n.op for n, step, _, _ in plan.steps if "untraced_step" in step.__qualname__]
    assert "qonnx_dequantize" in prepared and ("qonnx_matmul" in prepared)
    # traces still come from the ops' run
    _, traces, _ = net.run(x, trace=True)
    _, traces_ref, _ = net.run(x, trace=True, plan=False)
    assert traces == traces_ref


def test_mac_step_declines_an_accumulator_that_can_saturate():
    from fxpsim.frontends.qonnx.steps import _mac_prepare
    net = import_qonnx(DIR / "brevitas_mlp_w8.onnx")
    node = next(n for n in net.nodes if n.op == "qonnx_matmul")
    dp = net.default_datapath
    assert _mac_prepare(net, node, dp, [(2,) + net.tensors[node.inputs[0]].shape]) is not None
    from fxpsim.hardware import HardwareConfig
    narrow = HardwareConfig(accumulator_bits=8)
    assert _mac_prepare(net, node, narrow, [(2,) + net.tensors[node.inputs[0]].shape]) is None


# ----------------------------------------------------------------------------- independent models
def _ref_quant(x: float, s: float, z: int, lo: int, hi: int, mode: str) -> int:
    """clip(round(x / s + z)) in Fractions (QONNX clamps before rounding; the bounds are integers)."""
    y = Fraction(x) / Fraction(s) + z
    fl = math.floor(y)
    frac = y - fl
    if mode == "FLOOR" or frac == 0:
        r = fl
    elif mode == "CEIL":
        r = fl + 1
    elif mode == "DOWN":
        r = fl + 1 if y < 0 else fl
    elif mode == "UP":
        r = fl + 1 if y > 0 else fl
    elif frac != Fraction(1, 2):
        r = fl + (1 if frac > Fraction(1, 2) else 0)
    elif mode == "ROUND":
        r = fl + (fl % 2)
    elif mode == "HALF_UP":
        r = fl + (1 if y > 0 else 0)
    else:
        r = fl + (1 if y < 0 else 0)
    return min(max(r, lo), hi)


def _ref_float32(v: Fraction) -> np.float32:
    """The float32 nearest to ``v``, ties to even, subnormals and overflow to inf (integer arithmetic)."""
    if v == 0:
        return np.float32(0.0)
    sign, a = (-1 if v < 0 else 1), abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)
    q = a * Fraction(2) ** (23 - e)
    n = math.floor(q)
    if q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2):
        n += 1
    value = n * 2.0 ** (e - 23)                      # exact in float64
    if value >= 2.0 ** 128:
        return np.float32(sign * np.inf)
    return np.float32(sign * value)


@pytest.mark.parametrize("mode", MODES)
def test_float64_quantizer_equals_integer_path_and_fraction_model(mode):
    rng = np.random.default_rng(11)
    for s in (0.03125, 0.1, 1 / 3, 3.7e-3, 1e-6, 7.0):
        s32 = np.float32(s)
        for z, (lo, hi) in ((0, (-128, 127)), (3, (0, 255)), (-5, (-8, 7)), (0, (-(1 << 22), 1 << 22))):
            x = (rng.standard_normal(600) * 10.0 ** rng.uniform(-4, 3, 600)).astype(np.float32)
            x[:40] = ((np.arange(40) - 20) / 2).astype(np.float32) * s32        # x/s near the half-integers
            x[40:44] = [0.0, -0.0, 3e38, -3e38]
            ss, zz = np.broadcast_to(s32, x.shape), np.broadcast_to(np.int64(z), x.shape)
            fast = A._quantize_float64(x, ss, zz, lo, hi, mode)
            np.testing.assert_array_equal(fast, A._quantize_float_exact(x, ss, zz, lo, hi, mode))
            want = np.array([_ref_quant(float(v), float(s32), z, lo, hi, mode) for v in x[::7]])
            np.testing.assert_array_equal(fast[::7], want, err_msg=f"{mode} s={s} z={z}")
            if z == 0 and mode in A.FLOAT64_ROUNDING:     # the zero-point-0 step: numpy's rounding of fl64(x/s)
                step = np.clip(A.FLOAT64_ROUNDING[mode](x.astype(np.float64) / np.float64(s32)), lo, hi)
                np.testing.assert_array_equal(step.astype(np.int64), fast)


def test_float64_quantizer_is_chosen_within_2_to_23_only():
    x = np.float32([0.5, 2.5, -1.5])
    assert np.array_equal(A.quantize_float(x, 1.0, 0, -(1 << 30), 1 << 30, "ROUND"), [0, 2, -2])
    assert np.array_equal(A.quantize_float(x, 1.0, 0, -8, 7, "ROUND"), [0, 2, -2])


def test_to_float32_equals_the_fraction_model():
    rng = np.random.default_rng(5)
    n = rng.integers(-(1 << 52), 1 << 52, 3000)
    n[:10] = [0, 1, -1, (1 << 52) - 1, 3, -3, 5, 7, 1 << 24 | 1, -(1 << 25 | 3)]
    for den, e in ((1, 0), (3, 0), (1 << 30, 0), (12345677, -40), (7, 60), (1, -160), (3, -150), (1, 100),
                   (5, 75)):
        got = A.to_float32(n, den, e)
        exact = A._to_float32_exact(n.astype(object) << max(e, 0), den << max(-e, 0))
        np.testing.assert_array_equal(got, exact, err_msg=f"d={den} e={e}")
        want = np.array([_ref_float32(Fraction(int(v)) * Fraction(2) ** e / den) for v in n[::37]], np.float32)
        np.testing.assert_array_equal(got[::37], want, err_msg=f"d={den} e={e}")
    # ties at the float32 precision: n / d exactly halfway between two float32 numbers
    half = np.array([(1 << 24) + 1, (1 << 24) + 3, -((1 << 25) + 2), (1 << 26) + 6], np.int64)
    np.testing.assert_array_equal(A.to_float32(half, 1), [_ref_float32(Fraction(int(v))) for v in half])
    # Python integers beyond int64 take the exact path
    big = np.array([1 << 70, -(3 << 80)], dtype=object)
    np.testing.assert_array_equal(A.to_float32(big, 7), [_ref_float32(Fraction(int(v), 7)) for v in big])

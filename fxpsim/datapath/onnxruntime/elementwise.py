r"""onnxruntime's float32 elementwise kernels (CPU execution provider, x86-64 with FMA), bit for bit, and the
chains of them that a quantized model runs between a DequantizeLinear and a QuantizeLinear.

Each kernel below was compared live with onnxruntime 1.32 on 300 013 float32 inputs (normal, uniform on
[-20, 20], ±0, ±18, ±inf, tiny values) and tensor lengths 1 ... 33 (SIMD bodies and tails); every one matches
with 0 differences (``tools/fixtures/onnx/probe_elementwise.py``, section 13 of ``ORT_SEMANTICS.md``).
``fl(e)`` is one float32 rounding, ``fma(a, b, c)`` a float32 fused multiply-add (one rounding):

=================  ==========================================================================================
step               float32 result
=================  ==========================================================================================
``Sigmoid``        MlasComputeLogistic (FMA3 kernel): :math:`v = \min(18, \max(-18, x))`, :math:`u = fl(v^2)`,
                   :math:`p = fl(v \cdot P(u))`, :math:`q = Q(u)` with :math:`P, Q` evaluated by Horner's rule
                   in ``fma`` steps (Eigen's coefficients :data:`LOGISTIC`), then
                   :math:`y = \min(1, \max(0, fl(fl(p / q) + 0.5)))`
``Erf``            MlasErfKernelFma3: two polynomials and an exponential in ``fma`` steps (:mod:`.erf`; 200 011
                   inputs, lengths 1 ... 33, measured in ``tests/frontends/test_onnx_transformer.py``)
``HardSigmoid``    :math:`\min(1, \max(0, fl(fl(\alpha x) + \beta)))` (no FMA)
``HardSwish``      :math:`fl(x \cdot \mathrm{HardSigmoid}_{1/6, 1/2}(x))` (onnxruntime rewrites it so)
``LeakyRelu``      :math:`x` if :math:`x \ge 0` else :math:`fl(\alpha x)`
``Relu``, ``Clip`` :math:`\max(x, 0)`, :math:`\min(\max(x, lo), hi)`
``Add`` ...        ``Add``, ``Sub``, ``Mul``, ``Div`` with a scalar constant ``c`` on either side: one IEEE
                   float32 operation (``Div`` a true division, not a multiplication by :math:`1/c`)
``Pow``            exponent 1: :math:`x`; 2: :math:`fl(x \cdot x)`; 3: :math:`fl(fl(x \cdot x) \cdot x)`
                   (other exponents call the C library's ``pow``, which is not reproduced: refused)
=================  ==========================================================================================

A *program* is a list of steps ``{"op": name, ...parameters}`` applied in order (:func:`run_program`).
"""
from __future__ import annotations

import math

import numpy as np

from .erf import erf
from .mlas import fma32

__all__ = ["LOGISTIC", "STEP_OPS", "POW_EXPONENTS", "logistic", "run_program", "run_program_float64",
           "check_step"]

F32 = np.float32

#: MLAS's logistic constants (Eigen's rational approximation), float32.
LOGISTIC = {"lower": F32(-18.0), "upper": F32(18.0),
            "alpha": [F32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                                       8.51377133304701e-03, 2.48287947061529e-01)],
            "beta": [F32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                                      1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)]}

#: The steps a program may hold, with their parameters.
STEP_OPS = {"Sigmoid": (), "HardSigmoid": ("alpha", "beta"), "HardSwish": (), "LeakyRelu": ("alpha",),
            "Relu": (), "Clip": ("lo", "hi"), "Add": ("c", "const_first"), "Sub": ("c", "const_first"),
            "Mul": ("c", "const_first"), "Div": ("c", "const_first"), "Pow": ("exponent",), "Erf": ()}

#: The ``Pow`` exponents reproduced exactly.
POW_EXPONENTS = (1.0, 2.0, 3.0)


def logistic(x) -> np.ndarray:
    """MlasComputeLogistic on x86-64 with FMA3 (module docstring), float32 in and out."""
    v = np.minimum(LOGISTIC["upper"], np.maximum(LOGISTIC["lower"], np.asarray(x, F32))).astype(F32)
    u = (v * v).astype(F32)
    a, b = LOGISTIC["alpha"], LOGISTIC["beta"]
    with np.errstate(invalid="ignore"):
        p = fma32(u, a[0], a[1])
        for c in a[2:]:
            p = fma32(p, u, c)
        p = (p * v).astype(F32)
        q = fma32(u, b[0], b[1])
        for c in b[2:]:
            q = fma32(q, u, c)
    y = ((p / q).astype(F32) + F32(0.5)).astype(F32)
    return np.minimum(F32(1.0), np.maximum(F32(0.0), y)).astype(F32)


def _hard_sigmoid(x, alpha, beta):
    y = ((F32(alpha) * x).astype(F32) + F32(beta)).astype(F32)
    return np.minimum(F32(1.0), np.maximum(F32(0.0), y)).astype(F32)


def check_step(step) -> None:
    """ValueError unless ``step`` is a program step this module computes exactly."""
    if not isinstance(step, dict) or step.get("op") not in STEP_OPS:
        raise ValueError(f"elementwise step {step!r}: 'op' must be one of {', '.join(STEP_OPS)}")
    missing = [k for k in STEP_OPS[step["op"]] if k not in step and k not in ("lo", "hi", "const_first")]
    if missing:
        raise ValueError(f"elementwise step {step!r}: needs {', '.join(missing)}")
    if step["op"] == "Pow" and float(step["exponent"]) not in POW_EXPONENTS:
        raise ValueError(f"Pow by {step['exponent']}: only exponents {POW_EXPONENTS} are reproduced "
                         "(onnxruntime calls the C library's pow for others)")


def _binary(op, x, c, const_first, xp):
    a, b = (c, x) if const_first else (x, c)
    with np.errstate(all="ignore"):
        return {"Add": lambda: a + b, "Sub": lambda: a - b, "Mul": lambda: a * b, "Div": lambda: a / b}[op]()


def run_program(x, program) -> np.ndarray:
    """The float32 result of onnxruntime's kernels applied step by step to ``x`` (float32)."""
    y = np.asarray(x, F32)
    for st in program:
        op = st["op"]
        if op == "Sigmoid":
            y = logistic(y)
        elif op == "Erf":
            y = erf(y)                                  # MlasErfKernelFma3 (:mod:`.erf`)
        elif op == "HardSigmoid":
            y = _hard_sigmoid(y, st["alpha"], st["beta"])
        elif op == "HardSwish":
            with np.errstate(invalid="ignore"):
                y = (y * _hard_sigmoid(y, F32(1.0 / 6.0), F32(0.5))).astype(F32)
        elif op == "LeakyRelu":
            y = np.where(y >= 0, y, (y * F32(st["alpha"])).astype(F32)).astype(F32)
        elif op == "Relu":
            y = np.maximum(y, F32(0.0))
        elif op == "Clip":
            if st.get("lo") is not None:
                y = np.maximum(y, F32(st["lo"]))
            if st.get("hi") is not None:
                y = np.minimum(y, F32(st["hi"]))
        elif op in ("Add", "Sub", "Mul", "Div"):
            y = np.asarray(_binary(op, y, F32(st["c"]), bool(st.get("const_first")), np), F32)
        elif op == "Pow":
            e = float(st["exponent"])
            with np.errstate(all="ignore"):
                y = y if e == 1.0 else (y * y).astype(F32) if e == 2.0 else ((y * y).astype(F32) * y).astype(F32)
        else:
            raise ValueError(f"elementwise step {st!r}: unknown op")
        y = np.asarray(y, F32)
    return y


def run_program_float64(x, program) -> np.ndarray:
    """The same program in float64 real arithmetic (the exact functions, e.g. :math:`1 / (1 + e^{-x})`): the
    float reference of a graph."""
    y = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        for st in program:
            op = st["op"]
            if op == "Sigmoid":
                y = 1.0 / (1.0 + np.exp(-y))
            elif op == "Erf":
                y = np.vectorize(math.erf, otypes=[np.float64])(y)
            elif op == "HardSigmoid":
                y = np.clip(float(st["alpha"]) * y + float(st["beta"]), 0.0, 1.0)
            elif op == "HardSwish":
                y = y * np.clip(y / 6.0 + 0.5, 0.0, 1.0)
            elif op == "LeakyRelu":
                y = np.where(y >= 0, y, y * float(st["alpha"]))
            elif op == "Relu":
                y = np.maximum(y, 0.0)
            elif op == "Clip":
                y = np.clip(y, -np.inf if st.get("lo") is None else float(st["lo"]),
                            np.inf if st.get("hi") is None else float(st["hi"]))
            elif op in ("Add", "Sub", "Mul", "Div"):
                y = _binary(op, y, float(st["c"]), bool(st.get("const_first")), np)
            elif op == "Pow":
                y = np.power(y, float(st["exponent"]))
    return y

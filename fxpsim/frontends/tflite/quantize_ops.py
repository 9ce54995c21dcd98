"""QUANTIZE and DEQUANTIZE operators, the model's type boundaries (float32, int8, int16 and the legacy uint8 inputs
and outputs): a mixin of :class:`fxpsim.frontends.tflite.importer._Builder`."""
from __future__ import annotations

from .reader import _FLOAT32, _INT8, _UINT8


class QuantizeOps:
    """Methods of :class:`fxpsim.frontends.tflite.importer._Builder` for QUANTIZE and DEQUANTIZE."""

    def _uint8_boundary_input(self, i: int) -> bool:
        """Whether uint8 graph input ``i`` is a legacy boundary: read only by QUANTIZE (to int8) and DEQUANTIZE
        (``inference_input_type = tf.uint8``)."""
        readers = [op for op in self.m["ops"] if i in op["inputs"]]
        return bool(readers) and all(op["op"] in ("QUANTIZE", "DEQUANTIZE") for op in readers)

    def op_QUANTIZE(self, op):
        x, y = op["inputs"][0], op["outputs"][0]
        xt = self.t[x]
        if xt["type"] == _UINT8 and self.t[y]["type"] == _INT8 and x in self.m["inputs"]:
            self.quant(x, op)       # uint8 -> int8 at the model's input (inference_input_type = tf.uint8)
            yn = self.declare(y, op, self.shape[x])
            self.node(op, "tflite_requantize", [self.activation_tensor(x, op)], [yn])
            return
        if self.t[y]["type"] == _UINT8 and xt["type"] == _INT8 and y in self.m["outputs"]:
            self.quant(x, op)       # int8 -> uint8 at the model's output (microWakeWord's probabilities)
            yn = self.declare(y, op, self.shape[x], uint8_ok=True)
            self.node(op, "tflite_requantize", [self.activation_tensor(x, op)], [yn])
            return
        self.check_int8(y, op)
        if xt["type"] == _FLOAT32:
            xn = self.activation_tensor(x, op)
            yn = self.declare(y, op, self.shape[x])
            self.node(op, "tflite_quantize", [xn], [yn])
        else:
            self.check_int8(x, op)
            self.quant(x, op)
            xn = self.activation_tensor(x, op)
            yn = self.declare(y, op, self.shape[x])
            self.node(op, "tflite_requantize", [xn], [yn])

    def op_DEQUANTIZE(self, op):
        x, y = op["inputs"][0], op["outputs"][0]
        if not (self.t[x]["type"] == _UINT8 and x in self.m["inputs"]):
            self.check_int8(x, op)
        if self.t[y]["type"] != _FLOAT32:
            raise ValueError(f"{self.path}: {self.where(op)}: DEQUANTIZE to {self.type_name(y)} is not supported")
        xn = self.activation_tensor(x, op)
        yn = self.declare(y, op, self.shape[x], float_ok=True)
        self.node(op, "tflite_dequantize", [xn], [yn])

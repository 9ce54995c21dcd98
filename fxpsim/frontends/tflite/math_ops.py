"""The int8 math operators on run-time data (MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, RSQRT, PRELU, ELU, LOG_SOFTMAX,
SUM, REDUCE_MAX): a mixin of :class:`fxpsim.frontends.tflite.importer._Builder`, onto the graph ops of
:mod:`fxpsim.frontends.tflite.math_kernels`.  What each kernel set's Prepare refuses is
:func:`fxpsim.frontends.tflite.prepare.prepare_problem`'s; what fxpsim does not reproduce,
:data:`fxpsim.frontends.tflite.ops.KERNEL_LIMITS`."""
from __future__ import annotations


class MathOps:
    """Methods of :class:`fxpsim.frontends.tflite.importer._Builder` for the math operators."""

    def op_MAXIMUM(self, op):
        self._binary(op, "tflite_maximum")

    def op_MINIMUM(self, op):
        self._binary(op, "tflite_minimum")

    def op_SQUARED_DIFFERENCE(self, op):
        self._binary(op, "tflite_squared_difference")

    def op_PRELU(self, op):
        x, alpha = op["inputs"][:2]
        if tuple(self.shape[alpha]) and len(self.shape[alpha]) > len(self.shape[x]):
            raise ValueError(f"{self.path}: {self.where(op)}: alpha of shape {list(self.shape[alpha])} has more "
                             f"axes than the input {list(self.shape[x])} (LiteRT's Prepare needs the output "
                             f"shape to be the input's)")
        self._binary(op, "tflite_prelu")
        y = op["outputs"][0]
        if tuple(self.shape[y]) != tuple(self.shape[x]):
            raise ValueError(f"{self.path}: {self.where(op)}: alpha of shape {list(self.shape[alpha])} broadcasts "
                             f"the input {list(self.shape[x])} to {list(self.shape[y])} (LiteRT's Prepare needs "
                             f"the output shape to be the input's)")

    def op_RSQRT(self, op):
        self._unary(op, "tflite_rsqrt")

    def op_ELU(self, op):
        self._unary(op, "tflite_elu")

    def op_LOG_SOFTMAX(self, op):
        self._unary(op, "tflite_log_softmax")

    def op_SUM(self, op):
        self._reduction(op, "tflite_sum")

    def op_REDUCE_MAX(self, op):
        self._reduction(op, "tflite_reduce_max")

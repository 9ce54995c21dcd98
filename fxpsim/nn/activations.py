"""Activation layers: :class:`Quantize` (the output quantizer alone), :class:`ReLU`, :class:`ReLU6`, and the
smooth nonlinearities :class:`Sigmoid`, :class:`Tanh` and :class:`HardSwish` (table lookups on the integer
datapath), each :math:`y = q_a(f(x))` with its backward beside its forward."""
from __future__ import annotations

import numpy as np

from .module import FusedActivation, Module, check_layer_input, make_quantizer, quantizer_config

__all__ = ["Quantize", "ReLU", "ReLU6", "Sigmoid", "Tanh", "HardSwish"]


class Quantize(Module):
    """Quantize activations: :math:`y = q_a(x)`, :math:`dx = q_a'(dy)` (the quantizer's STE).

    The quantizer sits in ``activation_quantizer`` like every other layer's output quantizer; use it for
    the network input or after a ``BatchNorm`` (e.g. BNN's binary activations).
    """

    _quantizer_slots = ("activation_quantizer",)

    def __init__(self, activation_quantizer, dtype=np.float32):
        super().__init__()
        self.activation_quantizer = make_quantizer(activation_quantizer)
        self.dtype = np.dtype(dtype)

    def forward(self, x):
        check_layer_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 1 else (), "Quantize.forward")
        return x if self.activation_quantizer is None else self.activation_quantizer(x)

    def backward(self, dy, input_grad=True):
        if self.activation_quantizer is None:
            return dy
        return self._quantizer_backward("activation_quantizer", dy)

    def get_config(self):
        return {"activation_quantizer": quantizer_config(self.activation_quantizer), "dtype": self.dtype.name}


class ReLU(Quantize):
    """:math:`y = q_a(\\max(x, 0))`; :math:`dx = 1\\{x > 0\\}\\, q_a'(dy)`."""

    _kind = "relu"

    def __init__(self, activation_quantizer=None, dtype=np.float32):
        super().__init__(activation_quantizer, dtype)

    def forward(self, x):
        check_layer_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 1 else (),
                          f"{type(self).__name__}.forward")
        y, self._mask = FusedActivation.forward(x.copy(), self._kind)
        return y if self.activation_quantizer is None else self.activation_quantizer(y)

    def backward(self, dy, input_grad=True):
        return FusedActivation.backward(super().backward(dy), self._mask)


class ReLU6(ReLU):
    r""":math:`y = q_a(\\min(\\max(x, 0), 6))`; :math:`dx = 1\\{0 < x < 6\\}\\, q_a'(dy)`."""

    _kind = "relu6"


class _SmoothActivation(Quantize):
    r"""An elementwise nonlinearity :math:`f` followed by the output quantizer:
    :math:`y = q_a(f(x))`, :math:`dx = f'(x)\, q_a'(dy)` (the quantizer's STE, then the exact derivative).

    On the integer datapath these become table lookups (:mod:`fxpsim.datapath.lut`): one output code per
    input code by default, or a smaller table (``activation_lut_entries``) as NPUs build them.
    """

    _kind = ""

    def __init__(self, activation_quantizer=None, dtype=np.float32):
        super().__init__(activation_quantizer, dtype)

    @staticmethod
    def function(x):            # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @staticmethod
    def derivative(x):          # pragma: no cover
        raise NotImplementedError

    def forward(self, x):
        check_layer_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 1 else (),
                          f"{type(self).__name__}.forward")
        self._x = x
        y = self.function(x).astype(x.dtype, copy=False)
        return y if self.activation_quantizer is None else self.activation_quantizer(y)

    def backward(self, dy, input_grad=True):
        return super().backward(dy) * self.derivative(self._x).astype(self._x.dtype, copy=False)


class Sigmoid(_SmoothActivation):
    r""":math:`y = q_a(\sigma(x))`, :math:`\sigma(x) = 1/(1 + e^{-x})`; :math:`dx = \sigma(x)(1 - \sigma(x))\, q_a'(dy)`."""

    _kind = "sigmoid"

    @staticmethod
    def function(x):
        """:math:`1/(1 + e^{-x})` for :math:`x \\ge 0`, :math:`e^{x}/(1 + e^{x})` below (no overflow, no
        cancellation in either tail)."""
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))

    @staticmethod
    def derivative(x):
        s = Sigmoid.function(x)
        return s * (1.0 - s)


class Tanh(_SmoothActivation):
    r""":math:`y = q_a(\tanh x)`; :math:`dx = (1 - \tanh^2 x)\, q_a'(dy)`."""

    _kind = "tanh"

    @staticmethod
    def function(x):
        return np.tanh(x)

    @staticmethod
    def derivative(x):
        return 1.0 - np.tanh(x) ** 2


class HardSwish(_SmoothActivation):
    r""":math:`y = q_a(x\,\mathrm{relu6}(x + 3)/6)` (MobileNetV3);
    :math:`dx = q_a'(dy)\cdot(0 \text{ if } x < -3;\ (2x + 3)/6 \text{ if } -3 \le x \le 3;\ 1 \text{ if } x > 3)`."""

    _kind = "hard_swish"

    @staticmethod
    def function(x):
        return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0

    @staticmethod
    def derivative(x):
        return np.where(x < -3.0, 0.0, np.where(x > 3.0, 1.0, (2.0 * x + 3.0) / 6.0))

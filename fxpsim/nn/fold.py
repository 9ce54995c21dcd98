"""Batch norm folded into the weights during training, the way the hardware sees it.

:func:`fxpsim.nn.fold_batchnorm` folds a trained ``BatchNorm`` into the preceding layer *after* training;
the weight quantizer then meets folded weights it never saw, so the integer model is not the trained one.
:class:`FoldedConvBN` and :class:`FoldedDenseBN` fold during training instead, as TensorFlow's
``tf.contrib.quantize`` did (Jacob et al. 2018, section 3.2; PyTorch's ``ConvBn2d``): with the running
statistics :math:`\\sigma_r = \\sqrt{r_\\sigma + \\epsilon}` and :math:`f = \\gamma / \\sigma_r` per output channel,

.. math::

    z = x * q_w(W f), \\qquad u = z / f + b,

and in training ``u`` goes through batch normalisation with the batch statistics (which also update the
running ones), :math:`y = q_a(\\phi(\\gamma\\,(u - \\mu_B)/\\sqrt{\\sigma_B^2 + \\epsilon} + \\beta))`. In
inference the layer is exactly the folded layer the hardware runs,

.. math:: y = q_a\\big(\\phi(x * q_w(W f) + b_f)\\big), \\qquad b_f = \\beta + f\\,(b - r_\\mu),

so its weight quantizer's grid is the grid of the folded weights (:meth:`quantized_weight`) and
:func:`fxpsim.convert` stores exactly those codes. Gradients reach :math:`W`, :math:`b`, :math:`\\gamma`
(through the batch norm and through :math:`f`) and :math:`\\beta`; the weight quantizer contributes its
straight-through estimator.
"""
from __future__ import annotations

import numpy as np

from . import repro
from .conv import conv2d_backward, conv2d_forward, init_conv_weights
from .dense import init_dense_weights
from .module import FusedActivation, LinearLayer, check_layer_input

__all__ = ["FoldedConvBN", "FoldedDenseBN"]


class _FoldedBN(LinearLayer):
    """What the folded layers share: the batch-norm parameters and statistics, forward and backward around
    the linear op (``_linear`` / ``_linear_backward`` of the subclass, output channel on the last axis)."""

    _param_names = ("W", "b", "gamma", "beta")
    _buffer_names = ("running_mean", "running_var")

    def _setup_bn(self, out_channels, momentum, eps):
        self.momentum, self.eps = float(momentum), float(eps)
        if not 0.0 <= self.momentum <= 1.0 or self.eps <= 0:
            raise ValueError(f"{type(self).__name__} needs 0 <= momentum <= 1 and eps > 0, got {momentum}, {eps}")
        dt = self.dtype
        self.gamma, self.beta = np.ones(out_channels, dtype=dt), np.zeros(out_channels, dtype=dt)
        self.running_mean, self.running_var = np.zeros(out_channels, dtype=dt), np.ones(out_channels, dtype=dt)

    # -- the folded form -------------------------------------------------------------------------------
    def fold_factor(self) -> np.ndarray:
        """:math:`f = \\gamma / \\sqrt{r_\\sigma + \\epsilon}` per output channel."""
        return self.gamma / np.sqrt(self.running_var + self.dtype.type(self.eps))

    def folded_weight(self) -> np.ndarray:
        """The float weights the weight quantizer sees, :math:`W f`."""
        return (self.W * self.fold_factor()).astype(self.dtype)

    def quantized_weight(self) -> np.ndarray:
        """:math:`q_w(W f)`: what the layer (and the hardware) multiplies with."""
        w = self.folded_weight()
        return w if self.weight_quantizer is None else self.weight_quantizer(w)

    def folded_bias(self) -> np.ndarray:
        """:math:`b_f = \\beta + f\\,(b - r_\\mu)`, the bias of the inference form."""
        b = 0 if self.b is None else self.b
        return (self.beta + self.fold_factor() * (b - self.running_mean)).astype(self.dtype)

    # -- forward / backward ----------------------------------------------------------------------------
    def _folded_forward(self, x):
        self._f = self.fold_factor()
        self._ws = (self.W * self._f).astype(self.dtype)
        self._w_hat = self._ws if self.weight_quantizer is None else self.weight_quantizer(self._ws)
        z = self._linear(x, self._w_hat)
        self._bn_train = self.training
        if not self.training:
            self._z = None
            y = z + self.folded_bias()
        else:
            u0 = z / self._f                               # the unscaled product, before the bias
            u = u0 if self.b is None else u0 + self.b
            u2 = u.reshape(-1, u.shape[-1])
            rows = u2.shape[0]
            mean = u2.sum(axis=0) / rows
            uc = u2 - mean
            var = np.einsum("ij,ij->j", uc, uc) / rows
            self._inv = 1.0 / np.sqrt(var + self.dtype.type(self.eps))
            self._xhat = (uc * self._inv).reshape(u.shape)
            self._u0 = u0
            y = self._xhat * self.gamma + self.beta
            m = self.dtype.type(self.momentum)
            self.running_mean *= m
            self.running_mean += (1 - m) * mean
            self.running_var *= m
            self.running_var += (1 - m) * var
        y, self._act_mask = FusedActivation.forward(y.astype(self.dtype, copy=False), self.activation)
        return y if self.activation_quantizer is None else self.activation_quantizer(y)

    def _folded_backward(self, dy, input_grad):
        if self.activation_quantizer is not None:
            dy = self._quantizer_backward("activation_quantizer", dy)
        d = FusedActivation.backward(dy, self._act_mask)
        ch = d.shape[-1]
        d2 = d.reshape(-1, ch)
        self._accumulate("beta", d2.sum(axis=0))
        sigma_r = np.sqrt(self.running_var + self.dtype.type(self.eps)) if not self._bn_train else None
        if self._bn_train:
            xhat2 = self._xhat.reshape(-1, ch)
            rows = d2.shape[0]
            dgamma = np.einsum("ij,ij->j", d2, xhat2)
            du = (self.gamma * self._inv) * (d2 - d2.sum(axis=0) / rows - xhat2 * (dgamma / rows))
            if self.b is not None:
                self._accumulate("b", du.sum(axis=0))
            dz = (du / self._f).reshape(d.shape)
            df = -np.einsum("ij,ij->j", du, self._u0.reshape(-1, ch)) / self._f
        else:                                              # y = z + beta + f (b - r_mu)
            b = 0 if self.b is None else self.b
            dgamma = np.zeros(ch, dtype=d.dtype)
            if self.b is not None:
                self._accumulate("b", d2.sum(axis=0) * self._f)
            dz = d
            df = d2.sum(axis=0) * (b - self.running_mean)
        dx, dw_hat = self._linear_backward(dz, input_grad)
        dws = dw_hat if self.weight_quantizer is None else self._quantizer_backward("weight_quantizer", dw_hat)
        self._accumulate("W", (dws * self._f).astype(self.dtype), owned=True)
        df = df + (dws * self.W).reshape(-1, ch).sum(axis=0)
        if sigma_r is None:
            sigma_r = np.sqrt(self.running_var + self.dtype.type(self.eps))
        self._accumulate("gamma", (dgamma + df / sigma_r).astype(self.dtype))
        return dx

    def _bn_config(self):
        return {"momentum": self.momentum, "eps": self.eps}


class FoldedConvBN(_FoldedBN):
    """``Conv2D`` followed by ``BatchNorm`` (and the fused ``activation``), folded during training (see the
    module docstring). Weights ``W`` are HWIO [KH, KW, Cin, Cout]; ``use_bias`` defaults to False (the batch
    norm's :math:`\\beta` is the bias); ``momentum``/``eps`` as :class:`fxpsim.nn.BatchNorm`."""

    def __init__(self, in_channels: int, filters: int, kernel_size=3, *, stride=1, padding="SAME",
                 activation=None, use_bias=False, weight_quantizer=None, activation_quantizer=None,
                 momentum=0.9, eps=1e-3, seed=None, dtype=np.float32):
        super().__init__()
        init_conv_weights(self, in_channels, filters, kernel_size, stride, padding, seed, dtype)
        self._setup(self.filters, activation, use_bias, weight_quantizer, activation_quantizer, dtype)
        self._setup_bn(self.filters, momentum, eps)

    def _linear(self, x, w):
        z, self._cols, self._pads = conv2d_forward(x, w, self.stride, self.padding)
        return z

    def _linear_backward(self, dz, input_grad):
        return conv2d_backward(dz, self._cols, self._w_hat, self._x_shape, self.stride, self._pads, input_grad)

    def forward(self, x):
        check_layer_input(x, self.dtype, (None, None, self.in_channels), f"{type(self).__name__}.forward")
        self._x_shape = x.shape
        return self._folded_forward(x)

    def backward(self, dy, input_grad=True):
        return self._folded_backward(dy, input_grad)

    def get_config(self):
        return {"in_channels": self.in_channels, "filters": self.filters, "kernel_size": list(self.kernel_size),
                "stride": list(self.stride), "padding": self.padding, **self._linear_config(), **self._bn_config()}

    def _repr_args(self, lead="", skip=()):
        return super()._repr_args(f"{self.in_channels} -> {self.filters}", ("in_channels", "filters"))


class FoldedDenseBN(_FoldedBN):
    """``Dense`` followed by ``BatchNorm``, folded during training (see the module docstring); ``W`` [in, out]."""

    def __init__(self, in_features: int, out_features: int, *, activation=None, use_bias=False,
                 weight_quantizer=None, activation_quantizer=None, momentum=0.9, eps=1e-3, seed=None,
                 dtype=np.float32):
        super().__init__()
        init_dense_weights(self, in_features, out_features, seed, dtype)
        self._setup(self.out_features, activation, use_bias, weight_quantizer, activation_quantizer, dtype)
        self._setup_bn(self.out_features, momentum, eps)

    def _linear(self, x, w):
        return repro.matmul(x, w)

    def _linear_backward(self, dz, input_grad):
        return (repro.matmul(dz, self._w_hat.T) if input_grad else None), repro.matmul(self._x.T, dz)

    def forward(self, x):
        check_layer_input(x, self.dtype, (self.in_features,), f"{type(self).__name__}.forward")
        self._x = x
        return self._folded_forward(x)

    def backward(self, dy, input_grad=True):
        return self._folded_backward(dy, input_grad)

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features, **self._linear_config(),
                **self._bn_config()}

    def _repr_args(self, lead="", skip=()):
        return super()._repr_args(f"{self.in_features} -> {self.out_features}", ("in_features", "out_features"))

"""The fully connected layer :class:`Dense` and :func:`init_dense_weights`, the shape and weights it
shares with its folded batch-norm twin (:class:`fxpsim.nn.fold.FoldedDenseBN`)."""
from __future__ import annotations

import numpy as np

from . import repro
from .module import LinearLayer, check_layer_input, glorot_uniform

__all__ = ["Dense", "init_dense_weights"]


def init_dense_weights(layer, in_features, out_features, seed, dtype) -> None:
    """Shape and Glorot-uniform [in, out] weights of a fully connected layer (``Dense`` and its folded
    batch-norm twin)."""
    from .conv import positive_int
    layer.in_features = positive_int(in_features, "in_features")
    layer.out_features = positive_int(out_features, "out_features")
    rng = np.random.default_rng(seed)
    layer.W = glorot_uniform(rng, (layer.in_features, layer.out_features), layer.in_features, layer.out_features,
                             dtype)


class Dense(LinearLayer):
    """Fully connected layer :math:`y = q_a(\\phi(x\\, q_w(W) + b))`, ``W`` shaped [in, out].

    Gradients: :math:`dZ = \\phi'(Z) \\odot q_a'(dY)`, :math:`d\\hat W = X^T dZ`, :math:`db = \\sum_n dZ`,
    :math:`dX = dZ\\, \\hat W^T`. Weights are Glorot-uniform from ``seed``.
    """

    def __init__(self, in_features: int, out_features: int, *, activation=None, use_bias=True,
                 weight_quantizer=None, activation_quantizer=None, seed=None, dtype=np.float32):
        super().__init__()
        init_dense_weights(self, in_features, out_features, seed, dtype)
        self._setup(self.out_features, activation, use_bias, weight_quantizer, activation_quantizer, dtype)

    def forward(self, x):
        check_layer_input(x, self.dtype, (self.in_features,), f"{type(self).__name__}.forward")
        self._x = x
        self._w_hat = self.quantized_weight()
        return self._finish_forward(repro.matmul(x, self._w_hat))

    def backward(self, dy, input_grad=True):
        dz = self._start_backward(dy)
        self._weight_grad(repro.matmul(self._x.T, dz))
        return repro.matmul(dz, self._w_hat.T) if input_grad else None

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features, **self._linear_config()}

    def _repr_args(self, lead="", skip=()):
        return super()._repr_args(f"{self.in_features} -> {self.out_features}", ("in_features", "out_features"))

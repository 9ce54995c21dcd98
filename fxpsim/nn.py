"""Neural-network layers in numpy with forward and backward side by side, and quantizer slots.

Design (what :mod:`fxpsim.hardware` reads from a trained model)
----------------------------------------------------------------
Every layer is a :class:`Module` whose ``forward(x)`` caches what ``backward(dy)`` needs; ``backward``
returns ``dx`` and *accumulates* parameter gradients into ``module.grads`` (cleared by ``zero_grad()``).
Arrays are float32 (``Module.astype(np.float64)`` exists for finite-difference checks); inputs of another
dtype, shape or an empty batch raise ``TypeError``/``ValueError``.

Quantization lives in two explicit slots, each ``None`` (float) or a quantizer of
:mod:`fxpsim.quantizers` (given as a registry name, a config dict or an instance):

``layer.weight_quantizer`` (``Dense``, ``Conv2D``, ``DepthwiseConv2D``)
    applied to the float master weights ``layer.W`` on every forward pass; the product uses
    :math:`\\hat W = q_w(W)` and the gradient reaches ``W`` through the quantizer's STE:
    :math:`\\partial L/\\partial W = q_w'\\,(\\partial L / \\partial \\hat W)`. The bias ``layer.b`` stays float
    (the hardware stores it in the accumulator format).
``layer.activation_quantizer`` (those three, plus ``ReLU``, ``ReLU6`` and ``Quantize``)
    applied to the layer's *output*, after its fused ``activation`` (``None``, ``"relu"``, ``"relu6"``) as
    TFLite fuses activations into FC/conv; its range is the layer's output range on the hardware.

So per layer: ``W`` (HWIO for convolutions, [in, out] for dense, [KH, KW, C, M] depthwise), ``b``,
``weight_quantizer`` (``.integer_form()``), ``activation``, ``activation_quantizer``, ``stride`` and
``padding``. A ``BatchNorm`` after a linear layer is folded by :func:`fold_batchnorm` before conversion.
Quantizer parameters (e.g. learnable ``min``/``max``) appear in ``parameters()`` as ``"<slot>.<name>"``.
"""
from __future__ import annotations

import copy

import numpy as np

import fxpsim.layers_conv as _conv

__all__ = ["Module", "Sequential", "Dense", "Conv2D", "DepthwiseConv2D", "ReLU", "ReLU6", "MaxPool2D",
           "AvgPool2D", "Flatten", "BatchNorm", "Quantize", "SoftmaxCrossEntropy", "fold_batchnorm",
           "layer_from_config", "mlp", "small_cnn", "quantization_scheme", "QUANTIZATION_SCHEMES"]

ACTIVATIONS = (None, "relu", "relu6")


def make_quantizer(spec):
    """Quantizer from a registry name, config dict or instance (``None`` stays ``None`` = float)."""
    if spec is None:
        return None
    from .quantizers import get
    return get(spec)


def _quantizer_config(q):
    """``{"class_name": ..., "config": ...}`` of a quantizer (learned ranges included), or None."""
    if q is None:
        return None
    from .quantizers import serialize
    return serialize(q)


def _check_input(x, dtype, trailing, where):
    """Validate a layer input: an ndarray of ``dtype`` shaped [N, *trailing] with N > 0."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{where}: expected a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{where}: expected dtype {np.dtype(dtype).name}, got {x.dtype.name} "
                        f"(cast with x.astype(np.{np.dtype(dtype).name}))")
    if x.ndim != len(trailing) + 1 or any(t is not None and s != t for s, t in zip(x.shape[1:], trailing)):
        want = ", ".join("N" if t is None else str(t) for t in (None, *trailing))
        raise ValueError(f"{where}: expected input shape [{want}], got {list(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{where}: empty batch (input shape {list(x.shape)})")


def _pair(v, name):
    pair = (v, v) if np.isscalar(v) else tuple(v)
    if len(pair) != 2 or any(int(p) != p or p < 1 for p in pair):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {v!r}")
    return tuple(int(p) for p in pair)


def _padding(p):
    p = str(p).upper()
    if p not in _conv.PADDINGS:
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {p!r}")
    return p


def _glorot(rng, shape, fan_in, fan_out, dtype):
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(dtype)


class Module:
    """Base of every layer: parameters, gradients, train/eval mode, quantizer slots, config.

    Subclasses list their array attributes in ``_param_names`` (trained) and ``_buffer_names`` (state such
    as running statistics), their quantizer attributes in ``_quantizer_slots``, and implement
    ``forward(x)`` / ``backward(dy, input_grad=True)``.
    """

    _param_names: tuple[str, ...] = ()
    _buffer_names: tuple[str, ...] = ()
    _quantizer_slots: tuple[str, ...] = ()

    def __init__(self):
        self.training = True
        self._grads: dict[str, np.ndarray] = {}
        self.dtype = np.dtype(np.float32)

    # -- parameters and gradients -------------------------------------------------------------
    def children(self) -> list[tuple[str, "Module"]]:
        """Named sub-modules (``Sequential`` returns its layers)."""
        return []

    def quantizers(self) -> dict:
        """The non-empty quantizer slots, ``{slot: quantizer}``."""
        return {s: getattr(self, s) for s in self._quantizer_slots if getattr(self, s) is not None}

    def _own_parameters(self) -> list[tuple[str, np.ndarray]]:
        own = [(n, getattr(self, n)) for n in self._param_names if getattr(self, n) is not None]
        for slot, q in self.quantizers().items():
            own += [(f"{slot}.{name}", arr) for name, arr in q.parameters().items()]
        return own

    def parameters(self) -> dict[str, np.ndarray]:
        """Trainable arrays by name (the optimizer updates them in place), quantizer parameters included."""
        return self.parameters_and_grads(with_grads=False)[0]

    def buffers(self) -> dict[str, np.ndarray]:
        """Non-trained state arrays (batch-norm running statistics) by name."""
        out = {n: getattr(self, n) for n in self._buffer_names}
        for prefix, child in self.children():
            out.update({f"{prefix}.{n}": a for n, a in child.buffers().items()})
        return out

    @property
    def grads(self) -> dict[str, np.ndarray]:
        """Gradients accumulated since ``zero_grad()``, keyed like ``parameters()`` (zeros where none)."""
        return self.parameters_and_grads()[1]

    def parameters_and_grads(self, with_grads: bool = True, prefix: str = "", params=None, grads=None):
        """``(parameters(), grads)`` in one traversal (what :func:`fxpsim.train.fit` calls every step)."""
        params = {} if params is None else params
        grads = {} if grads is None else grads
        for name, arr in self._own_parameters():
            params[prefix + name] = arr
            if with_grads:
                g = self._grads.get(name)
                grads[prefix + name] = np.zeros_like(arr) if g is None else g
        for child_prefix, child in self.children():
            child.parameters_and_grads(with_grads, f"{prefix}{child_prefix}.", params, grads)
        return params, grads

    def zero_grad(self) -> None:
        """Clear accumulated gradients (of sub-modules too)."""
        self._grads = {}
        for _, child in self.children():
            child.zero_grad()

    def _accumulate(self, name, g, owned=True):
        if name in self._grads:
            self._grads[name] += g
        else:
            self._grads[name] = g if owned else np.array(g, dtype=g.dtype, copy=True)

    def _quantizer_backward(self, slot, dy):
        """Backward through ``self.<slot>`` (its STE), collecting its parameter gradients."""
        q = getattr(self, slot)
        dx = q.backward(dy)
        for name, g in getattr(q, "grads", {}).items():
            if g is not None:
                self._accumulate(f"{slot}.{name}", np.asarray(g), owned=False)
        return dx

    # -- modes, dtype, calling ------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (batch statistics in ``BatchNorm``; quantizers follow if they have modes)."""
        self.training = bool(mode)
        for q in self.quantizers().values():
            if hasattr(q, "train"):
                q.train(mode)
            elif hasattr(q, "training"):
                q.training = bool(mode)
        for _, child in self.children():
            child.train(mode)
        return self

    def eval(self) -> "Module":
        """Set inference mode (same as ``train(False)``)."""
        return self.train(False)

    def astype(self, dtype) -> "Module":
        """Cast parameters and buffers to ``dtype`` in place (float64 for gradient checks); returns self."""
        self.dtype = np.dtype(dtype)
        for name in self._param_names + self._buffer_names:
            arr = getattr(self, name)
            if arr is not None:
                setattr(self, name, arr.astype(dtype))
        self._grads = {}
        for _, child in self.children():
            child.astype(dtype)
        return self

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, dy, input_grad=True):  # pragma: no cover - abstract
        raise NotImplementedError

    # -- config and repr ---------------------------------------------------------------------------
    def get_config(self) -> dict:
        """JSON-serialisable constructor arguments (quantizers as their configs)."""
        return {}

    def _repr_args(self, lead: str = "", skip: tuple[str, ...] = ()) -> str:
        parts = [lead] if lead else []
        for k, v in self.get_config().items():
            if v is None or k in skip or k == "dtype" or (k == "use_bias" and v):
                continue
            parts.append(f"{k}={getattr(self, k) if k in self._quantizer_slots else v!r}")
        return ", ".join(parts)

    def __repr__(self):
        return f"{type(self).__name__}({self._repr_args()})"


class _Activation:
    """Fused activation (``None``, ``relu``, ``relu6``) with its mask for backward."""

    @staticmethod
    def forward(z, activation):
        if activation is None:
            return z, None
        if activation == "relu":
            mask = z > 0
            return np.maximum(z, 0, out=z), mask
        mask = (z > 0) & (z < 6)
        return np.clip(z, 0, 6, out=z), mask

    @staticmethod
    def backward(dy, mask):
        return dy if mask is None else dy * mask


def _check_activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    return activation


class _Linear(Module):
    """Shared code of Dense / Conv2D / DepthwiseConv2D: weight quantizer, bias, fused activation."""

    _param_names = ("W", "b")
    _quantizer_slots = ("weight_quantizer", "activation_quantizer")

    def _setup(self, out_channels, activation, use_bias, weight_quantizer, activation_quantizer, dtype):
        self.activation = _check_activation(activation)
        self.weight_quantizer = make_quantizer(weight_quantizer)
        self.activation_quantizer = make_quantizer(activation_quantizer)
        self.dtype = np.dtype(dtype)
        self.b = np.zeros(out_channels, dtype=dtype) if use_bias else None

    def quantized_weight(self) -> np.ndarray:
        """The weights the forward pass multiplies with: :math:`q_w(W)` (``W`` when float)."""
        return self.W if self.weight_quantizer is None else self.weight_quantizer(self.W)

    def _finish_forward(self, z):
        if self.b is not None:
            z += self.b
        y, self._act_mask = _Activation.forward(z, self.activation)
        return y if self.activation_quantizer is None else self.activation_quantizer(y)

    def _start_backward(self, dy):
        if self.activation_quantizer is not None:
            dy = self._quantizer_backward("activation_quantizer", dy)
        dz = _Activation.backward(dy, self._act_mask)
        if self.b is not None:
            self._accumulate("b", dz.reshape(-1, dz.shape[-1]).sum(axis=0))
        return dz

    def _weight_grad(self, dw_hat):
        if self.weight_quantizer is None:
            self._accumulate("W", dw_hat)
        else:   # the quantizer's (possibly user-defined) gradient may not hand back a fresh array
            self._accumulate("W", self._quantizer_backward("weight_quantizer", dw_hat), owned=False)

    def _linear_config(self):
        return {"activation": self.activation, "use_bias": self.b is not None,
                "weight_quantizer": _quantizer_config(self.weight_quantizer),
                "activation_quantizer": _quantizer_config(self.activation_quantizer),
                "dtype": self.dtype.name}


class Dense(_Linear):
    """Fully connected layer :math:`y = q_a(\\phi(x\\, q_w(W) + b))`, ``W`` shaped [in, out].

    Gradients: :math:`dZ = \\phi'(Z) \\odot q_a'(dY)`, :math:`d\\hat W = X^T dZ`, :math:`db = \\sum_n dZ`,
    :math:`dX = dZ\\, \\hat W^T`. Weights are Glorot-uniform from ``seed``.
    """

    def __init__(self, in_features: int, out_features: int, *, activation=None, use_bias=True,
                 weight_quantizer=None, activation_quantizer=None, seed=None, dtype=np.float32):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        rng = np.random.default_rng(seed)
        self.W = _glorot(rng, (self.in_features, self.out_features), self.in_features, self.out_features, dtype)
        self._setup(self.out_features, activation, use_bias, weight_quantizer, activation_quantizer, dtype)

    def forward(self, x):
        _check_input(x, self.dtype, (self.in_features,), f"{type(self).__name__}.forward")
        self._x = x
        self._w_hat = self.quantized_weight()
        return self._finish_forward(np.matmul(x, self._w_hat))

    def backward(self, dy, input_grad=True):
        dz = self._start_backward(dy)
        self._weight_grad(np.matmul(self._x.T, dz))
        return np.matmul(dz, self._w_hat.T) if input_grad else None

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features, **self._linear_config()}

    def _repr_args(self, lead="", skip=()):
        return super()._repr_args(f"{self.in_features} -> {self.out_features}", ("in_features", "out_features"))


class Conv2D(_Linear):
    """2-D convolution, NHWC input, HWIO weights ``W`` [KH, KW, Cin, Cout], TensorFlow SAME/VALID padding.

    .. math:: y[n,i,j,o] = q_a\\Big(\\phi\\big(\\sum_{a,b,c} x_p[n, iS_h + a, jS_w + b, c]\\, q_w(W)[a,b,c,o]
              + b_o\\big)\\Big)

    computed by im2col + BLAS matmul (:func:`fxpsim.layers_conv.conv2d_forward`).
    """

    def __init__(self, in_channels: int, filters: int, kernel_size=3, *, stride=1, padding="SAME",
                 activation=None, use_bias=True, weight_quantizer=None, activation_quantizer=None, seed=None,
                 dtype=np.float32):
        super().__init__()
        self.in_channels, self.filters = int(in_channels), int(filters)
        self.kernel_size, self.stride = _pair(kernel_size, "kernel_size"), _pair(stride, "stride")
        self.padding = _padding(padding)
        kh, kw = self.kernel_size
        rng = np.random.default_rng(seed)
        self.W = _glorot(rng, (kh, kw, self.in_channels, self.filters), kh * kw * self.in_channels,
                         kh * kw * self.filters, dtype)
        self._setup(self.filters, activation, use_bias, weight_quantizer, activation_quantizer, dtype)

    def forward(self, x):
        _check_input(x, self.dtype, (None, None, self.in_channels), f"{type(self).__name__}.forward")
        self._x_shape = x.shape
        self._w_hat = self.quantized_weight()
        z, self._cols, self._pads = _conv.conv2d_forward(x, self._w_hat, self.stride, self.padding)
        return self._finish_forward(z)

    def backward(self, dy, input_grad=True):
        dz = self._start_backward(dy)
        dx, dw = _conv.conv2d_backward(dz, self._cols, self._w_hat, self._x_shape, self.stride, self._pads,
                                       input_grad)
        self._weight_grad(dw)
        return dx

    def _repr_args(self, lead="", skip=()):
        return super()._repr_args(f"{self.in_channels} -> {self.filters}", ("in_channels", "filters"))

    def get_config(self):
        return {"in_channels": self.in_channels, "filters": self.filters, "kernel_size": list(self.kernel_size),
                "stride": list(self.stride), "padding": self.padding, **self._linear_config()}


class DepthwiseConv2D(_Linear):
    """Depthwise convolution, ``W`` [KH, KW, C, M] (TensorFlow layout), output channel ``c*M + m``.

    .. math:: y[n,i,j,cM+m] = q_a\\Big(\\phi\\big(\\sum_{a,b} x_p[n, iS_h+a, jS_w+b, c]\\, q_w(W)[a,b,c,m]
              + b_{cM+m}\\big)\\Big)
    """

    def __init__(self, channels: int, kernel_size=3, *, depth_multiplier=1, stride=1, padding="SAME",
                 activation=None, use_bias=True, weight_quantizer=None, activation_quantizer=None, seed=None,
                 dtype=np.float32):
        super().__init__()
        self.channels, self.depth_multiplier = int(channels), int(depth_multiplier)
        self.kernel_size, self.stride = _pair(kernel_size, "kernel_size"), _pair(stride, "stride")
        self.padding = _padding(padding)
        kh, kw = self.kernel_size
        rng = np.random.default_rng(seed)
        self.W = _glorot(rng, (kh, kw, self.channels, self.depth_multiplier), kh * kw,
                         kh * kw * self.depth_multiplier, dtype)
        self._setup(self.channels * self.depth_multiplier, activation, use_bias, weight_quantizer,
                    activation_quantizer, dtype)

    def forward(self, x):
        _check_input(x, self.dtype, (None, None, self.channels), f"{type(self).__name__}.forward")
        self._x_shape = x.shape
        self._w_hat = self.quantized_weight()
        z, self._patches, self._pads = _conv.depthwise_conv2d_forward(x, self._w_hat, self.stride, self.padding)
        return self._finish_forward(z)

    def backward(self, dy, input_grad=True):
        dz = self._start_backward(dy)
        dx, dw = _conv.depthwise_conv2d_backward(dz, self._patches, self._w_hat, self._x_shape, self.stride,
                                                 self._pads, input_grad)
        self._weight_grad(dw)
        return dx

    def get_config(self):
        return {"channels": self.channels, "kernel_size": list(self.kernel_size),
                "depth_multiplier": self.depth_multiplier, "stride": list(self.stride),
                "padding": self.padding, **self._linear_config()}


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
        _check_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 1 else (), "Quantize.forward")
        return x if self.activation_quantizer is None else self.activation_quantizer(x)

    def backward(self, dy, input_grad=True):
        if self.activation_quantizer is None:
            return dy
        return self._quantizer_backward("activation_quantizer", dy)

    def get_config(self):
        return {"activation_quantizer": _quantizer_config(self.activation_quantizer), "dtype": self.dtype.name}


class ReLU(Quantize):
    """:math:`y = q_a(\\max(x, 0))`; :math:`dx = 1\\{x > 0\\}\\, q_a'(dy)`."""

    _kind = "relu"

    def __init__(self, activation_quantizer=None, dtype=np.float32):
        super().__init__(activation_quantizer, dtype)

    def forward(self, x):
        _check_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 1 else (),
                     f"{type(self).__name__}.forward")
        y, self._mask = _Activation.forward(x.copy(), self._kind)
        return y if self.activation_quantizer is None else self.activation_quantizer(y)

    def backward(self, dy, input_grad=True):
        return _Activation.backward(super().backward(dy), self._mask)


class ReLU6(ReLU):
    """:math:`y = q_a(\\min(\\max(x, 0), 6))`; :math:`dx = 1\\{0 < x < 6\\}\\, q_a'(dy)`."""

    _kind = "relu6"


class Flatten(Module):
    """[N, d1, d2, ...] -> [N, d1*d2*...] in row-major (NHWC) order, as ``tf.keras.layers.Flatten``."""

    def forward(self, x):
        _check_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 2 else (None,), "Flatten.forward")
        self._shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, input_grad=True):
        return dy.reshape(self._shape)


class _Pool(Module):
    def __init__(self, pool_size=2, *, stride=None, padding="VALID", dtype=np.float32):
        super().__init__()
        self.pool_size = _pair(pool_size, "pool_size")
        self.stride = self.pool_size if stride is None else _pair(stride, "stride")
        self.padding = _padding(padding)
        self.dtype = np.dtype(dtype)

    def get_config(self):
        return {"pool_size": list(self.pool_size), "stride": list(self.stride), "padding": self.padding,
                "dtype": self.dtype.name}


class MaxPool2D(_Pool):
    """Max pooling over NHWC windows (SAME pads with -inf); the gradient goes to each window's first max."""

    def forward(self, x):
        _check_input(x, self.dtype, (None, None, None), "MaxPool2D.forward")
        self._y, self._xp, self._pads = _conv.max_pool2d_forward(x, self.pool_size, self.stride, self.padding)
        return self._y

    def backward(self, dy, input_grad=True):
        return _conv.max_pool2d_backward(dy, self._y, self._xp, self.pool_size, self.stride, self._pads)


class AvgPool2D(_Pool):
    """Average pooling over NHWC windows; SAME excludes padding from the divisor (TensorFlow)."""

    def forward(self, x):
        _check_input(x, self.dtype, (None, None, None), "AvgPool2D.forward")
        self._x_shape = x.shape
        y, self._counts, self._pads = _conv.avg_pool2d_forward(x, self.pool_size, self.stride, self.padding)
        return y

    def backward(self, dy, input_grad=True):
        return _conv.avg_pool2d_backward(dy, self._counts, self._x_shape, self.pool_size, self.stride, self._pads)


class BatchNorm(Module):
    """Batch normalisation over the last (channel) axis, TensorFlow conventions.

    Training: :math:`\\hat x = (x - \\mu_B) / \\sqrt{\\sigma_B^2 + \\epsilon}`, :math:`y = \\gamma \\hat x + \\beta`
    (biased batch variance), and running statistics :math:`r \\leftarrow m\\, r + (1 - m)\\, s_B` with
    ``momentum`` :math:`m` = 0.9 by default (PyTorch's 0.1 in its convention; Keras uses 0.99, too slow for
    the few hundred steps of a digits run).
    Eval: the running statistics replace the batch ones. Backward (training), with :math:`M` values per
    channel: :math:`dx = \\frac{\\gamma}{\\sqrt{\\sigma_B^2+\\epsilon}}\\big(dy - \\overline{dy} -
    \\hat x\\, \\overline{dy\\, \\hat x}\\big)`.
    """

    _param_names = ("gamma", "beta")
    _buffer_names = ("running_mean", "running_var")

    def __init__(self, num_features: int, *, momentum=0.9, eps=1e-3, dtype=np.float32):
        super().__init__()
        self.num_features, self.momentum, self.eps = int(num_features), float(momentum), float(eps)
        if not 0.0 <= self.momentum <= 1.0 or self.eps <= 0:
            raise ValueError(f"BatchNorm needs 0 <= momentum <= 1 and eps > 0, got {momentum}, {eps}")
        self.dtype = np.dtype(dtype)
        self.gamma = np.ones(self.num_features, dtype=dtype)
        self.beta = np.zeros(self.num_features, dtype=dtype)
        self.running_mean = np.zeros(self.num_features, dtype=dtype)
        self.running_var = np.ones(self.num_features, dtype=dtype)

    def scale_and_shift(self):
        """Eval-mode affine form :math:`y = s x + t`, :math:`s = \\gamma/\\sqrt{r_\\sigma + \\epsilon}`,
        :math:`t = \\beta - s\\, r_\\mu` (what :func:`fold_batchnorm` folds)."""
        scale = self.gamma / np.sqrt(self.running_var + self.dtype.type(self.eps))
        return scale, self.beta - scale * self.running_mean

    def forward(self, x):
        where = "BatchNorm.forward"
        if not isinstance(x, np.ndarray) or x.ndim < 2:
            raise ValueError(f"{where}: expected an array [N, ..., {self.num_features}], got {getattr(x, 'shape', x)}")
        _check_input(x, self.dtype, (None,) * (x.ndim - 2) + (self.num_features,), where)
        x2 = x.reshape(-1, self.num_features)          # channels last: statistics over the rows
        if not self.training:
            inv = 1.0 / np.sqrt(self.running_var + self.dtype.type(self.eps))
            self._xhat, self._inv = (x2 - self.running_mean) * inv, inv
            self._batch_stats = False
        else:
            rows = x2.shape[0]
            mean = x2.sum(axis=0) / rows
            xc = x2 - mean
            var = np.einsum("ij,ij->j", xc, xc) / rows
            inv = 1.0 / np.sqrt(var + self.dtype.type(self.eps))
            self._xhat, self._inv = np.multiply(xc, inv, out=xc), inv
            self._batch_stats = True
            m = self.dtype.type(self.momentum)
            self.running_mean *= m
            self.running_mean += (1 - m) * mean
            self.running_var *= m
            self.running_var += (1 - m) * var
        return (self._xhat * self.gamma + self.beta).reshape(x.shape)

    def backward(self, dy, input_grad=True):
        dy2 = dy.reshape(-1, self.num_features)
        dbeta = dy2.sum(axis=0)
        dgamma = np.einsum("ij,ij->j", dy2, self._xhat)
        self._accumulate("beta", dbeta)
        self._accumulate("gamma", dgamma)
        if not input_grad:
            return None
        scale = self.gamma * self._inv
        if not self._batch_stats:  # eval mode: a fixed affine map
            return dy * scale
        rows = dy2.shape[0]
        # dx = s (dy - mean(dy) - xhat mean(dy xhat)), with sum(dy) = dbeta and sum(dy xhat) = dgamma
        dx = self._xhat * (dgamma / rows)
        np.subtract(dy2, dx, out=dx)
        dx -= dbeta / rows
        dx *= scale
        return dx.reshape(dy.shape)

    def get_config(self):
        return {"num_features": self.num_features, "momentum": self.momentum, "eps": self.eps,
                "dtype": self.dtype.name}


class Sequential(Module):
    """Layers applied in order; parameters are named ``"<index>.<name>"`` (``"0.W"``, ``"0.weight_quantizer.min"``).

    ``forward`` also rejects non-finite inputs (NaN/inf) with a ValueError.
    """

    def __init__(self, *layers: Module):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential: layer {i} is a {type(layer).__name__}, not an fxpsim.nn.Module")
        self.layers = list(layers)

    def children(self):
        return [(str(i), layer) for i, layer in enumerate(self.layers)]

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def forward(self, x):
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and not np.isfinite(x).all():
            bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
            raise ValueError(f"Sequential.forward: input holds {bad} non-finite value(s) (NaN or inf)")
        for layer in self.layers:
            x = layer.forward(x)
        return x

    def backward(self, dy, input_grad=True):
        last = len(self.layers) - 1
        for i in range(last, -1, -1):
            dy = self.layers[i].backward(dy, input_grad=input_grad or i > 0)
        return dy

    def get_config(self):
        return {"layers": [_layer_config(layer) for layer in self.layers]}

    def __repr__(self):
        lines = []
        for i, layer in enumerate(self.layers):
            n = sum(a.size for a in layer.parameters().values())
            lines.append(f"  ({i}) {layer!r}" + (f"  # {n} params" if n else ""))
        return "Sequential(\n" + "\n".join(lines) + "\n)"


class SoftmaxCrossEntropy:
    """Mean softmax cross-entropy of logits [N, K] against integer labels [N].

    .. math:: L = -\\frac{1}{N} \\sum_n \\log \\mathrm{softmax}(z_n)_{y_n}, \\qquad
              \\frac{\\partial L}{\\partial z_{nk}} = \\frac{\\mathrm{softmax}(z_n)_k - 1\\{k = y_n\\}}{N}

    computed with the max-shifted log-sum-exp for stability.
    """

    def __call__(self, logits, labels):
        return self.forward(logits, labels)

    def forward(self, logits, labels) -> float:
        if not isinstance(logits, np.ndarray) or logits.ndim != 2 or logits.shape[0] == 0:
            raise ValueError(f"SoftmaxCrossEntropy: logits must be a non-empty [N, K] array, "
                             f"got shape {getattr(logits, 'shape', type(logits).__name__)}")
        if logits.dtype.kind != "f":
            raise TypeError(f"SoftmaxCrossEntropy: logits must be floating point, got {logits.dtype}")
        labels = np.asarray(labels)
        if labels.dtype.kind not in "iu":
            raise TypeError(f"SoftmaxCrossEntropy: labels must be integers, got dtype {labels.dtype}")
        n, k = logits.shape
        if labels.shape != (n,):
            raise ValueError(f"SoftmaxCrossEntropy: labels must have shape [{n}], got {list(labels.shape)}")
        if labels.min() < 0 or labels.max() >= k:
            raise ValueError(f"SoftmaxCrossEntropy: labels must lie in [0, {k - 1}], "
                             f"got range [{labels.min()}, {labels.max()}]")
        if not np.isfinite(logits).all():
            raise ValueError("SoftmaxCrossEntropy: logits hold NaN or inf (training diverged?)")
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        self._probs = exp / total
        self._labels = labels
        rows = np.arange(n)
        log_probs = shifted[rows, labels] - np.log(total[:, 0])
        return float(-log_probs.mean(dtype=np.float64))

    def backward(self) -> np.ndarray:
        """Gradient with respect to the logits of the last ``forward``."""
        grad = self._probs.copy()
        n = grad.shape[0]
        grad[np.arange(n), self._labels] -= 1
        grad /= n
        return grad


_LAYER_CLASSES = {cls.__name__: cls for cls in (Sequential, Dense, Conv2D, DepthwiseConv2D, ReLU, ReLU6,
                                                  MaxPool2D, AvgPool2D, Flatten, BatchNorm, Quantize)}


def _layer_config(layer: Module) -> dict:
    return {"class": type(layer).__name__, "config": layer.get_config()}


def layer_from_config(config: dict) -> Module:
    """Rebuild a layer (or a ``Sequential``) from ``{"class": name, "config": {...}}``."""
    if not isinstance(config, dict) or "class" not in config:
        raise ValueError(f"layer config must be a dict with a 'class' key, got {config!r}")
    cls = _LAYER_CLASSES.get(config["class"])
    if cls is None:
        raise ValueError(f"unknown layer class {config['class']!r}; known: {sorted(_LAYER_CLASSES)}")
    kwargs = dict(config.get("config", {}))
    if cls is Sequential:
        return Sequential([layer_from_config(c) for c in kwargs["layers"]])
    return cls(**kwargs)


def fold_batchnorm(model: Sequential, strict: bool = False) -> Sequential:
    """Fold each ``BatchNorm`` into the preceding ``Dense``/``Conv2D``/``DepthwiseConv2D`` (inference form).

    With the eval-mode scale :math:`s = \\gamma / \\sqrt{r_\\sigma + \\epsilon}` and shift
    :math:`t = \\beta - s\\, r_\\mu` (per output channel), as tf.contrib.quantize folds for inference:

    .. math:: W' = W \\cdot s, \\qquad b' = s\\, b + t

    so the folded model's eval outputs equal the original's up to float rounding. The linear layer must
    have no fused activation and no activation quantizer (a BN after a non-linearity is not foldable and is
    kept, or raises with ``strict=True``). The weight quantizer is copied and now sees the folded
    weights, as on the hardware; its quantized outputs therefore differ from the unfolded model's.
    Returns a new model in eval mode; ``model`` is not modified.
    """
    if not isinstance(model, Sequential):
        raise TypeError(f"fold_batchnorm expects a Sequential, got {type(model).__name__}")
    out: list[Module] = []
    for i, layer in enumerate(model.layers):
        prev = out[-1] if out else None
        foldable = (isinstance(prev, _Linear) and prev.activation is None
                    and prev.activation_quantizer is None)
        if not isinstance(layer, BatchNorm):
            out.append(copy.deepcopy(layer))
            continue
        if not foldable:
            if strict:
                raise ValueError(f"fold_batchnorm: BatchNorm at index {i} does not follow a linear layer "
                                 "without activation / activation quantizer")
            out.append(copy.deepcopy(layer))
            continue
        scale, shift = layer.scale_and_shift()
        if isinstance(prev, DepthwiseConv2D):
            prev.W = (prev.W * scale.reshape(prev.W.shape[2], prev.W.shape[3])).astype(prev.dtype)
        else:
            prev.W = (prev.W * scale).astype(prev.dtype)
        bias = prev.b if prev.b is not None else np.zeros_like(scale)
        prev.b = (bias * scale + shift).astype(prev.dtype)
    folded = Sequential(out)
    folded.eval()
    return folded


def _spawn_seeds(seed, n):
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)]


def _fresh(spec):
    """Independent quantizer spec per layer (instances are deep-copied)."""
    return copy.deepcopy(spec) if spec is not None and not isinstance(spec, (str, dict)) else spec


def _act_block(width, activation, activation_quantizer, batchnorm):
    """Layers after a linear one: fused when no BN; BN then ReLU/ReLU6/Quantize otherwise."""
    if not batchnorm:
        return []
    block: list[Module] = [BatchNorm(width)]
    if activation == "relu":
        block.append(ReLU(_fresh(activation_quantizer)))
    elif activation == "relu6":
        block.append(ReLU6(_fresh(activation_quantizer)))
    elif activation_quantizer is not None:
        block.append(Quantize(_fresh(activation_quantizer)))
    return block


def mlp(sizes=(64, 128, 64, 10), *, activation="relu", weight_quantizer=None, activation_quantizer=None,
        input_quantizer=None, output_quantizer=None, batchnorm=False, seed=0) -> Sequential:
    """Multi-layer perceptron ``sizes[0] -> ... -> sizes[-1]`` (logits), every Dense weight-quantized.

    Hidden layers: ``Dense(activation, activation_quantizer)``, or with ``batchnorm=True``
    ``Dense -> BatchNorm -> ReLU/ReLU6(activation_quantizer)`` (``activation=None``: ``Quantize``, e.g.
    BNN sign activations). ``input_quantizer`` adds a leading ``Quantize``; ``output_quantizer`` quantizes
    the logits. Quantizer specs given as instances are copied per layer.
    """
    sizes = [int(s) for s in sizes]
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"mlp needs at least two positive sizes, got {sizes}")
    seeds = _spawn_seeds(seed, len(sizes) - 1)
    layers: list[Module] = [Quantize(_fresh(input_quantizer))] if input_quantizer is not None else []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        fused = not batchnorm and not last
        layers.append(Dense(n_in, n_out, activation=activation if fused else None,
                            weight_quantizer=_fresh(weight_quantizer), seed=seeds[i],
                            activation_quantizer=_fresh(output_quantizer if last else
                                                        activation_quantizer if fused else None)))
        if not last:
            layers += _act_block(n_out, activation, activation_quantizer, batchnorm)
    return Sequential(layers)


def small_cnn(input_shape=(8, 8, 1), filters=(16, 32), num_classes=10, *, kernel_size=3, activation="relu",
              weight_quantizer=None, activation_quantizer=None, input_quantizer=None, output_quantizer=None,
              batchnorm=False, seed=0) -> Sequential:
    """``[Conv2D(f, SAME) (+BN) -> act -> MaxPool2D(2)] * len(filters) -> Flatten -> Dense(num_classes)``.

    The digits default is conv 16, pool, conv 32, pool, dense (the benchmark network); quantizer arguments
    as in :func:`mlp`.
    """
    h, w, c = (int(v) for v in input_shape)
    seeds = _spawn_seeds(seed, len(filters) + 1)
    layers: list[Module] = [Quantize(_fresh(input_quantizer))] if input_quantizer is not None else []
    for i, f in enumerate(filters):
        layers.append(Conv2D(c, f, kernel_size, padding="SAME", activation=None if batchnorm else activation,
                             weight_quantizer=_fresh(weight_quantizer), seed=seeds[i],
                             activation_quantizer=None if batchnorm else _fresh(activation_quantizer)))
        layers += _act_block(f, activation, activation_quantizer, batchnorm)
        layers.append(MaxPool2D(2))
        h, w, c = h // 2, w // 2, f
    layers += [Flatten(), Dense(h * w * c, num_classes, weight_quantizer=_fresh(weight_quantizer),
                                activation_quantizer=_fresh(output_quantizer), seed=seeds[-1])]
    return Sequential(layers)


def _fake_quant(lo, hi, bits, narrow):
    return {"class_name": "fake_quant", "min": lo, "max": hi, "num_bits": bits, "narrow_range": narrow,
            "learnable": True}


QUANTIZATION_SCHEMES = {
    "float": {},
    "int8": {"weight_quantizer": _fake_quant(-1.0, 1.0, 8, True),
             "activation_quantizer": _fake_quant(0.0, 4.0, 8, False)},
    "int4": {"weight_quantizer": _fake_quant(-0.5, 0.5, 4, True),
             "activation_quantizer": _fake_quant(0.0, 4.0, 4, False)},
    "w2": {"weight_quantizer": {"class_name": "dorefa", "num_bits": 2, "mode": "weights"},
           "activation_quantizer": _fake_quant(0.0, 4.0, 8, False), "batchnorm": True},
    "ternary": {"weight_quantizer": {"class_name": "ternary"}, "batchnorm": True},
    "binary": {"weight_quantizer": {"class_name": "binary", "scale_axis": -1},
               "activation_quantizer": {"class_name": "binary"}, "activation": None, "batchnorm": True},
}


def quantization_scheme(name: str) -> dict:
    """Keyword arguments of :func:`mlp` / :func:`small_cnn` for a named QAT scheme (a fresh copy).

    ``"float"``; ``"int8"`` / ``"int4"``: TF ``FakeQuant`` with learnable ranges on weights (narrow range,
    initial [-1, 1] / [-0.5, 0.5]) and ReLU outputs ([0, 4]); ``"w2"``: DoReFa 2-bit weights (levels
    ±1/3, ±1) + batch norm, 8-bit activations; ``"ternary"``: TWN weights + batch norm; ``"binary"``: BNN
    sign activations (clipped STE) after batch norm and sign weights with XNOR-Net's per-output-channel
    scale (mean |w|), full-precision input and logits.
    """
    if name not in QUANTIZATION_SCHEMES:
        raise ValueError(f"unknown quantization scheme {name!r}; known: {sorted(QUANTIZATION_SCHEMES)}")
    return copy.deepcopy(QUANTIZATION_SCHEMES[name])

"""Neural-network layers in numpy with forward and backward side by side, and quantizer slots.

This module is the public face of the layers. It defines ``Flatten``, ``BatchNorm``, the loss,
:func:`fold_batchnorm`, the config round trip (:func:`layer_from_config`, the one place that maps class names
to classes) and the model builders, and re-exports ``Module`` and ``Sequential`` from :mod:`fxpsim.nn.module`,
``Dense`` from :mod:`fxpsim.nn.dense`, the activation layers (``ReLU``, ``ReLU6``, ``Sigmoid``, ``Tanh``,
``HardSwish``, ``Quantize``) from :mod:`fxpsim.nn.activations`, the convolution and pooling layers from
:mod:`fxpsim.nn.conv` and the folded batch-norm layers from :mod:`fxpsim.nn.fold`. Imports flow one way:
``module`` -> ``activations``, ``conv``, ``dense`` -> ``fold`` -> ``layers``.

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
import inspect

import numpy as np

from .module import LinearLayer, Module, Sequential, check_layer_input
from .activations import HardSwish, Quantize, ReLU, ReLU6, Sigmoid, Tanh
from .conv import AvgPool2D, Conv2D, DepthwiseConv2D, MaxPool2D
from .dense import Dense
from .fold import FoldedConvBN, FoldedDenseBN

__all__ = ["Module", "Sequential", "Dense", "Conv2D", "DepthwiseConv2D", "ReLU", "ReLU6", "Sigmoid", "Tanh",
           "HardSwish", "MaxPool2D",
           "AvgPool2D", "Flatten", "BatchNorm", "Quantize", "SoftmaxCrossEntropy", "fold_batchnorm",
           "layer_from_config", "mlp", "small_cnn", "quantization_scheme", "QUANTIZATION_SCHEMES",
           "FoldedConvBN", "FoldedDenseBN"]


class Flatten(Module):
    """[N, d1, d2, ...] -> [N, d1*d2*...] in row-major (NHWC) order, as ``tf.keras.layers.Flatten``."""

    def forward(self, x):
        check_layer_input(x, self.dtype, (None,) * (np.ndim(x) - 1) if np.ndim(x) >= 2 else (None,),
                          "Flatten.forward")
        self._shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, input_grad=True):
        return dy.reshape(self._shape)


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
        check_layer_input(x, self.dtype, (None,) * (x.ndim - 2) + (self.num_features,), where)
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
                                                  Sigmoid, Tanh, HardSwish, MaxPool2D, AvgPool2D, Flatten, BatchNorm, Quantize,
                                                  FoldedConvBN, FoldedDenseBN)}


def layer_from_config(config: dict) -> Module:
    """Rebuild a layer (or a ``Sequential``) from ``{"class": name, "config": {...}}``.

    Only the layer classes of this module; unknown classes or keywords and arguments the constructor
    rejects raise ValueError naming the layer (a config is data: it never names code to run).
    """
    if not isinstance(config, dict) or "class" not in config:
        raise ValueError(f"layer config must be a dict with a 'class' key, got {config!r}"[:300])
    name = config["class"]
    cls = _LAYER_CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown layer class {name!r}; known: {sorted(_LAYER_CLASSES)}")
    kwargs = config.get("config", {})
    if not isinstance(kwargs, dict):
        raise ValueError(f"layer {name}: 'config' must be a dict, got {type(kwargs).__name__}")
    if cls is Sequential:
        layers = kwargs.get("layers")
        if not isinstance(layers, list) or set(kwargs) != {"layers"}:
            raise ValueError(f"layer Sequential: config must be {{'layers': [...]}}, got keys {sorted(kwargs)}")
        return Sequential([_numbered(i, c) for i, c in enumerate(layers)])
    params = inspect.signature(cls).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise ValueError(f"layer {name}: unknown keyword(s) {unknown}; accepted: {sorted(params)}")
    try:
        return cls(**kwargs)
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"layer {name}: {exc}") from None


def _numbered(i: int, config) -> Module:
    try:
        return layer_from_config(config)
    except ValueError as exc:
        raise ValueError(f"layer {i}: {exc}") from None


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
        foldable = (isinstance(prev, LinearLayer) and prev.activation is None
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
    "fp8": {"weight_quantizer": {"class_name": "float", "fmt": "e4m3", "scale": "channel"},
            "activation_quantizer": {"class_name": "float", "fmt": "e4m3", "scale": "tensor"}},
    "mxfp4": {"weight_quantizer": {"class_name": "block", "fmt": "mxfp4", "axis": -2},
              "activation_quantizer": {"class_name": "block", "fmt": "mxfp8_e4m3", "axis": -1}},
}


def quantization_scheme(name: str) -> dict:
    """Keyword arguments of :func:`mlp` / :func:`small_cnn` for a named QAT scheme (a fresh copy).

    ``"float"``; ``"int8"`` / ``"int4"``: TF ``FakeQuant`` with learnable ranges on weights (narrow range,
    initial [-1, 1] / [-0.5, 0.5]) and ReLU outputs ([0, 4]); ``"w2"``: DoReFa 2-bit weights (levels
    ±1/3, ±1) + batch norm, 8-bit activations; ``"ternary"``: TWN weights + batch norm; ``"binary"``: BNN
    sign activations (clipped STE) after batch norm and sign weights with XNOR-Net's per-output-channel
    scale (mean |w|), full-precision input and logits; ``"fp8"``: E4M3 weights (a power-of-two scale per output
    channel) and activations (per tensor); ``"mxfp4"``: OCP MXFP4 weights in blocks of 32 along the input axis,
    MXFP8 (E4M3) activations in blocks of 32 along the channels (:mod:`fxpsim.quant.float_quantizers`).
    """
    if name not in QUANTIZATION_SCHEMES:
        raise ValueError(f"unknown quantization scheme {name!r}; known: {sorted(QUANTIZATION_SCHEMES)}")
    return copy.deepcopy(QUANTIZATION_SCHEMES[name])

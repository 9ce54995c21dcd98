"""Base of the layers of :mod:`fxpsim.nn`: ``Module``, ``Sequential`` and the quantizer-slot machinery.

Everything a layer module builds on and nothing that names a concrete layer, so that both
:mod:`fxpsim.layers_conv` and :mod:`fxpsim.nn` import it and it imports neither:

:class:`Module`
    parameters (quantizer parameters included), gradients, train/eval mode, dtype, config and repr.
:class:`Sequential`
    layers applied in order; its config lists each layer as ``{"class": name, "config": {...}}``
    (:func:`layer_config`), which :func:`fxpsim.nn.layer_from_config` (the one place that knows every layer
    class) rebuilds.
:class:`LinearLayer`
    what ``Dense``, ``Conv2D`` and ``DepthwiseConv2D`` share: the ``weight_quantizer`` and
    ``activation_quantizer`` slots, the float bias and the fused activation (:class:`FusedActivation`).
helpers for layer modules
    :func:`make_quantizer` / :func:`quantizer_config` (a quantizer slot from its spec and back),
    :func:`check_layer_input` (the input validation every ``forward`` starts with), :func:`glorot_uniform`.

The layer conventions (``forward`` caches, ``backward`` accumulates gradients; which attributes the
hardware simulation reads) are described in :mod:`fxpsim.nn`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Module", "Sequential", "LinearLayer", "FusedActivation", "ACTIVATIONS", "make_quantizer",
           "quantizer_config", "check_layer_input", "glorot_uniform", "layer_config"]

ACTIVATIONS = (None, "relu", "relu6")


def make_quantizer(spec):
    """Quantizer from a registry name, config dict or instance (``None`` stays ``None`` = float)."""
    if spec is None:
        return None
    from ..quant.registry import get
    return get(spec)


def quantizer_config(q):
    """``{"class_name": ..., "config": ...}`` of a quantizer (learned ranges included), or None."""
    if q is None:
        return None
    from ..quant.registry import serialize
    return serialize(q)


def check_layer_input(x, dtype, trailing, where):
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


def glorot_uniform(rng, shape, fan_in, fan_out, dtype):
    """Glorot (Xavier) uniform initial weights of ``shape`` drawn from ``rng``, cast to ``dtype``.

    .. math:: W \\sim U(-l, l), \\qquad l = \\sqrt{6 / (\\mathrm{fan\\_in} + \\mathrm{fan\\_out})}
    """
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
        return {"layers": [layer_config(layer) for layer in self.layers]}

    def __repr__(self):
        lines = []
        for i, layer in enumerate(self.layers):
            n = sum(a.size for a in layer.parameters().values())
            lines.append(f"  ({i}) {layer!r}" + (f"  # {n} params" if n else ""))
        return "Sequential(\n" + "\n".join(lines) + "\n)"


def layer_config(layer: Module) -> dict:
    """``{"class": <class name>, "config": layer.get_config()}``, what ``fxpsim.nn.layer_from_config`` reads."""
    return {"class": type(layer).__name__, "config": layer.get_config()}


class FusedActivation:
    """Fused activation (``None``, ``relu``, ``relu6``) with its mask for backward.

    ``forward(z, activation)`` works in place on ``z`` and returns ``(y, mask)``:
    :math:`y = \\max(z, 0)` with mask :math:`1\\{z > 0\\}` (relu), :math:`y = \\min(\\max(z, 0), 6)` with
    mask :math:`1\\{0 < z < 6\\}` (relu6), ``(z, None)`` for no activation; ``backward(dy, mask)`` is
    :math:`dy \\odot \\mathrm{mask}`.
    """

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


class LinearLayer(Module):
    """Shared code of Dense / Conv2D / DepthwiseConv2D: weight quantizer, bias, fused activation.

    A subclass sets ``W`` and calls ``_setup``; its ``forward`` multiplies by :meth:`quantized_weight` and
    ends with ``_finish_forward`` (:math:`y = q_a(\\phi(z + b))`), its ``backward`` starts with
    ``_start_backward`` (:math:`dz = \\phi'(z) \\odot q_a'(dy)`, accumulating :math:`db = \\sum dz`) and hands
    :math:`d\\hat W` to ``_weight_grad`` (through the weight quantizer's STE to ``W``).
    """

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
        y, self._act_mask = FusedActivation.forward(z, self.activation)
        return y if self.activation_quantizer is None else self.activation_quantizer(y)

    def _start_backward(self, dy):
        if self.activation_quantizer is not None:
            dy = self._quantizer_backward("activation_quantizer", dy)
        dz = FusedActivation.backward(dy, self._act_mask)
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
                "weight_quantizer": quantizer_config(self.weight_quantizer),
                "activation_quantizer": quantizer_config(self.activation_quantizer),
                "dtype": self.dtype.name}

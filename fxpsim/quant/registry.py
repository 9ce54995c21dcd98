"""Quantizers with straight-through gradients: the registry, and every quantizer class importable from here.

Layout
------
* :mod:`fxpsim.quantizer_base` -- the protocol every quantizer follows (``q(x)``,
  ``q.backward(dy)``, ``q.grads``, ``q.parameters()``, ``q.integer_form()``, ``q.training``,
  ``get_config()`` / ``from_config()``), the ``gradient=`` rules (``"ste"``, ``"clipped_ste"``, a
  float, a callable), :class:`Quantizer` and :class:`IntegerForm`;
* :mod:`fxpsim.affine_quantizers` -- :class:`FakeQuant` (TensorFlow semantics) and
  :class:`AffineQuantizer` (PyTorch semantics, LSQ);
* :mod:`fxpsim.lowbit_quantizers` -- :class:`BinaryQuantizer`, :class:`TernaryQuantizer`,
  :class:`DoReFaQuantizer`;
* this module -- :class:`IdentityQuantizer`, :class:`FunctionQuantizer`,
  :class:`FixedPointQuantizer` and the registry.  It re-exports all of the above, so
  ``from fxpsim.quantizers import FakeQuant`` and ``fxpsim.FakeQuant`` work, and it is the module
  to import from.

Registry (:func:`get`)
----------------------
``get(spec)`` accepts

* ``None`` or ``"identity"`` -> :class:`IdentityQuantizer`;
* a name: ``"fake_quant"``, ``"affine"``, ``"fixed"``, ``"binary"``,
  ``"ternary"``, ``"dorefa"``, ``"float"`` (FP8/FP6/FP4, :mod:`.float_quantizers`), ``"block"`` (MX/NVFP4),
  ``"identity"`` (class names such as
  ``"FakeQuant"`` work too), built with default arguments;
* a float or block format's name: ``"float8_e4m3fn"``, ``"e5m2"``, ``"bfloat16"`` (a :class:`FloatQuantizer`),
  ``"mxfp8_e4m3"``, ``"mxfp4"``, ``"nvfp4"`` (a :class:`BlockQuantizer`);
* a name followed by a bit width, a keyword shortcut: ``"fake_quant8"``,
  ``"affine4"``, ``"dorefa2"`` (``num_bits`` = the number);
  ``"fixed:Q3.4"`` / ``"fixed:sfix8_En4"`` give a :class:`FixedPointQuantizer` of that
  format;
* a dict ``{"class_name": name, "config": {...}}`` (what :func:`serialize`
  writes) or ``{"class_name": name, **kwargs}``;
* a :class:`Quantizer` instance (returned as is);
* any other callable ``f(x) -> y``: wrapped in :class:`FunctionQuantizer`
  (straight-through gradient unless ``gradient=`` is given to it directly).

:func:`register` adds a user class under a name; :func:`register_gradient` makes a custom gradient rule
(or a :class:`FunctionQuantizer` function) nameable in configs, which resolve names only there.
"""
from __future__ import annotations

import inspect
import re
from typing import Callable

import numpy as np

from .affine import AffineQuantizer, FakeQuant
from .float_quantizers import BlockQuantizer, FloatQuantizer
from .lowbit import BinaryQuantizer, DoReFaQuantizer, TernaryQuantizer
from .base import (IntegerForm, Quantizer, _gradient_from_config, _gradient_to_config, register_gradient,
                   registered_gradients)

__all__ = [
    "Quantizer", "IntegerForm", "FunctionQuantizer", "IdentityQuantizer", "FakeQuant", "AffineQuantizer",
    "FixedPointQuantizer", "BinaryQuantizer", "TernaryQuantizer", "DoReFaQuantizer", "FloatQuantizer",
    "BlockQuantizer",
    "get_quantizer", "register_quantizer", "serialize_quantizer", "deserialize_quantizer",
    "registered_quantizers", "register_gradient", "registered_gradients",
]
# ``get``/``register``/``serialize``/``deserialize``/``registered_names`` are this module's short
# names; the package re-exports them under the ``*_quantizer(s)`` aliases (aliases defined at the end).


# --------------------------------------------------------------------------- identity, function, fixed point
class IdentityQuantizer(Quantizer):
    """No quantization.

    .. math:: q(x) = x, \\qquad \\frac{\\partial q}{\\partial x} = 1
    """

    name = "identity"

    def _forward(self, x):
        return x.copy()

    def _integer_form(self, x):
        raise NotImplementedError("IdentityQuantizer keeps floats: it has no integer form")


class FunctionQuantizer(Quantizer):
    """Wraps any callable ``fn(x) -> y`` as a quantizer with a straight-through gradient.

    .. math:: q(x) = f(x), \\qquad \\frac{\\partial q}{\\partial x} := 1 \\;(\\text{STE})

    or whatever ``gradient=`` says (a float scales the STE; a callable ``(x, dy) -> dx``
    replaces it, as ``@tf.custom_gradient`` does).
    """

    name = "function"

    def __init__(self, fn: Callable, gradient=None):
        if isinstance(fn, str):                 # a name from a config: registered functions only
            fn = _gradient_from_config(fn, "FunctionQuantizer fn")
        if not callable(fn):
            raise TypeError(f"FunctionQuantizer: fn must be callable, got {type(fn).__name__}")
        super().__init__(gradient)
        self.fn = fn

    def _forward(self, x):
        y = np.asarray(self.fn(x))
        if y.shape != x.shape:
            raise ValueError(f"FunctionQuantizer: fn returned shape {y.shape} for an input of shape {x.shape}")
        return y

    def _config(self):
        return {"fn": _gradient_to_config(self.fn)}


def _parse_format(fmt):
    from ..core.fixed import Format
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        return Format.parse(fmt)
    if isinstance(fmt, dict):
        return Format(**fmt)
    if isinstance(fmt, (tuple, list)):
        return Format(*fmt)
    raise TypeError(f"FixedPointQuantizer: fmt must be a Format, a string such as 'Q3.4', a dict or a "
                    f"(word, frac, signed) tuple, got {type(fmt).__name__}")


class FixedPointQuantizer(Quantizer):
    """Fixed-point quantization to a :class:`fxpsim.fixed.Format` on the Cython core.

    With LSB :math:`2^{-f}` and code range :math:`[c_{min}, c_{max}]` of the format,

    .. math::

        q(x) = 2^{-f}\\, \\mathrm{ovf}\\big(\\mathrm{rnd}(x\\, 2^{f})\\big), \\qquad
        \\frac{\\partial q}{\\partial x} := 1 \\;(\\text{"ste", default}), \\quad
        := 1_{2^{-f} c_{min} \\le x \\le 2^{-f} c_{max}} \\;(\\text{"clipped\\_ste"})

    where ``rnd`` is ``rounding`` and ``ovf`` is ``overflow`` (any names
    :meth:`fxpsim.fixed.Rounding.parse` / :meth:`~fxpsim.fixed.Overflow.parse` accept),
    exactly as :func:`fxpsim.fixed.quantize`.  The output keeps the input's float
    dtype (a float32 input cannot hold every value of a format wider than 24 bits;
    pass float64 then).
    """

    name = "fixed"

    def __init__(self, fmt="Q3.4", rounding="half_up", overflow="saturate", seed=None, gradient=None):
        super().__init__(gradient)
        from ..core.fixed import Overflow, Rounding
        self.fmt = _parse_format(fmt)
        self.rounding = Rounding.parse(rounding)
        self.overflow = Overflow.parse(overflow)
        self.seed = seed

    def _fixed(self, x):
        from ..core.fixed import from_float
        return from_float(x, self.fmt, rounding=self.rounding, overflow=self.overflow, seed=self.seed)

    def _forward(self, x):
        return self._fixed(x).to_float().astype(x.dtype)

    def _clipped_ste(self, dy):
        x = self._x
        return dy * ((x >= self.fmt.min_value) & (x <= self.fmt.max_value))

    def _integer_form(self, x):
        fixed = self._fixed(x)
        return IntegerForm(fixed.raw, self.fmt.lsb, 0, int(self.fmt.min_code), int(self.fmt.max_code), None,
                           self.fmt)

    def _config(self):
        return {"fmt": {"word": self.fmt.word, "frac": self.fmt.frac, "signed": self.fmt.signed},
                "rounding": self.rounding.value, "overflow": self.overflow.value, "seed": self.seed}


# --------------------------------------------------------------------------- registry
_REGISTRY: dict[str, type] = {}


def register(name: str, cls: type | None = None):
    """Register a :class:`Quantizer` subclass under ``name`` (usable as a decorator)."""
    def add(klass):
        if not (isinstance(klass, type) and issubclass(klass, Quantizer)):
            raise TypeError(f"register: {klass!r} is not a Quantizer subclass")
        _REGISTRY[name.lower()] = klass
        return klass
    return add if cls is None else add(cls)


for _cls in (IdentityQuantizer, FunctionQuantizer, FakeQuant, AffineQuantizer, FixedPointQuantizer,
             BinaryQuantizer, TernaryQuantizer, DoReFaQuantizer, FloatQuantizer, BlockQuantizer):
    register(_cls.name, _cls)


def registered_names() -> list[str]:
    return sorted(_REGISTRY)


def _lookup(name: str) -> type:
    key = name.lower()
    if key in _REGISTRY:
        return _REGISTRY[key]
    for cls in _REGISTRY.values():
        if cls.__name__.lower() == key:
            return cls
    raise ValueError(f"unknown quantizer {name!r}; known: {', '.join(registered_names())} "
                     "(or their class names)")


_SHORTCUT = re.compile(r"^([a-z_]+?)_?(\d+)$")


def _format_quantizer(name: str, kwargs):
    """A block format's name (``"mxfp8_e4m3"``, ``"nvfp4"``) gives its BlockQuantizer, a float format's
    (``"float8_e4m3fn"``, ``"e5m2"``, ``"bfloat16"``) its FloatQuantizer; anything else None."""
    from ..core.block_format import BLOCK_FORMATS
    from ..core.float_format import FloatFormat
    key = name.lower().replace("-", "_")
    if key in BLOCK_FORMATS:
        return BlockQuantizer(key, **kwargs)
    try:
        FloatFormat.parse(name)
    except (ValueError, TypeError):
        return None
    return FloatQuantizer(name, **kwargs)


def get(spec=None, **kwargs) -> Quantizer:
    """Build a quantizer from ``spec`` (see the module docstring); ``kwargs`` go to the constructor."""
    if isinstance(spec, Quantizer):
        if kwargs:
            raise ValueError("get: keyword arguments cannot be applied to a quantizer instance")
        return spec
    if spec is None:
        return IdentityQuantizer(**kwargs)
    if isinstance(spec, str):
        text = spec.strip()
        if text.lower().startswith("fixed:"):
            return FixedPointQuantizer(text.split(":", 1)[1].strip(), **kwargs)
        key = text.lower()
        if key in _REGISTRY or any(c.__name__.lower() == key for c in _REGISTRY.values()):
            return _lookup(key)(**kwargs)
        fmt_quantizer = _format_quantizer(text, kwargs)
        if fmt_quantizer is not None:
            return fmt_quantizer
        match = _SHORTCUT.match(key)
        if match and match.group(1) in _REGISTRY:
            cls = _lookup(match.group(1))
            if "num_bits" not in inspect.signature(cls).parameters:
                raise ValueError(f"get: {cls.__name__} takes no bit width, so {spec!r} is not a valid shortcut")
            return cls(num_bits=int(match.group(2)), **kwargs)
        return _lookup(key)(**kwargs)          # raises with the list of names
    if isinstance(spec, dict):
        return deserialize(spec, **kwargs)
    if callable(spec):
        return FunctionQuantizer(spec, **kwargs)
    raise TypeError(f"get: cannot build a quantizer from {type(spec).__name__} {spec!r}")


def serialize(quantizer: Quantizer) -> dict:
    """``{"class_name": registered name, "config": get_config()}`` (JSON-compatible)."""
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"serialize: expected a Quantizer, got {type(quantizer).__name__}")
    name = next((n for n, c in _REGISTRY.items() if c is type(quantizer)), type(quantizer).__name__)
    return {"class_name": name, "config": quantizer.get_config()}


def deserialize(spec: dict, **kwargs) -> Quantizer:
    """Inverse of :func:`serialize`; also accepts ``{"class_name": name, **constructor_kwargs}``."""
    spec = dict(spec)
    try:
        name = spec.pop("class_name")
        if not isinstance(name, str):
            raise ValueError(f"a quantizer's 'class_name' must be a string, got {name!r}")
    except KeyError:
        raise ValueError(f"a quantizer dict needs a 'class_name' key, got keys {sorted(spec)}") from None
    config = spec.pop("config", {})
    if not isinstance(config, dict):
        raise ValueError(f"quantizer {name!r}: 'config' must be a dict, got {type(config).__name__}")
    config = dict(config)
    config.update(spec)
    config.update(kwargs)
    return _lookup(name).from_config(config)


get_quantizer = get
register_quantizer = register
serialize_quantizer = serialize
deserialize_quantizer = deserialize
registered_quantizers = registered_names

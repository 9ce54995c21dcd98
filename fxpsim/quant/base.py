"""The quantizer protocol: the :class:`Quantizer` base class, :class:`IntegerForm` and the ``gradient=`` rules.

Every quantizer class derives from :class:`Quantizer`.  This module imports none of them:
the class modules (:mod:`fxpsim.affine_quantizers`, :mod:`fxpsim.lowbit_quantizers`,
:mod:`fxpsim.quantizers`) import it, and :mod:`fxpsim.quantizers` -- the public face, with the
registry -- imports them, so imports flow one way.  It also holds the input checks the classes share.

The protocol (what :mod:`fxpsim.nn` and the hardware simulation rely on)
------------------------------------------------------------------------
``y = q(x)``
    Forward pass.  Validates ``x`` (a real floating array; never mutated) and
    caches what :meth:`Quantizer.backward` needs.
``dx = q.backward(dy)``
    Gradient with respect to the input of the *last* forward call.  The rule
    for ``dx`` is chosen by the ``gradient=`` argument every quantizer takes:

    * ``"ste"`` -- the straight-through estimator (Bengio 2013): the rounding
      step is treated as the identity, :math:`\\partial q/\\partial x = 1`
      (times the derivative of any differentiable pre/post transform, e.g.
      DoReFa's tanh normalisation or an XNOR-Net scale);
    * ``"clipped_ste"`` -- the STE masked to the quantizer's linear region
      (TensorFlow's and PyTorch's fake-quant gradient, BNN's
      :math:`1_{|x| \\le 1}`, a fixed-point format's range);
    * a float ``g`` -- a scaled STE, ``g * ste`` (the seed's ``0.9 * dy``);
    * a callable ``(x, dy) -> dx`` -- any custom rule (the seed's
      ``@tf.custom_gradient``, in numpy).  A config stores it by name: the name it was given to
      :func:`register_gradient`, else ``"module:qualname"``.  Loading a config (``from_config``,
      :func:`fxpsim.nn.train.load_model`) resolves only *registered* names: a file never makes
      fxpsim import a module or reach an attribute (``"os:system"`` is an error, not a gradient).

    It also fills ``q.grads`` with the gradients of the learnable parameters.
``q.grads``
    ``dict`` name -> gradient array of every learnable parameter (empty when
    there is none), valid after :meth:`Quantizer.backward`.
``q.parameters()``
    ``dict`` name -> the very arrays an optimizer updates in place
    (``p[...] -= lr * q.grads[name]``); empty when nothing is learnable.
``q.integer_form(x=None)``
    :class:`IntegerForm`: the integer codes the hardware stores for ``x`` (or the
    last forward input), with ``scale``/``zero_point`` and, where the grid is a
    plain binary point, the :class:`fxpsim.fixed.Format`.
``q.training``
    ``True`` (default) while training: observers update ranges only then;
    :meth:`Quantizer.train` / :meth:`Quantizer.eval` switch it.
``q.get_config()`` / ``Class.from_config(config)``
    JSON-compatible dictionaries (learned parameter values included).

References
----------
Bengio, Léonard, Courville 2013, *Estimating or propagating gradients through
stochastic neurons*.
"""
from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

__all__ = ["Quantizer", "IntegerForm", "register_gradient", "registered_gradients"]


# --------------------------------------------------------------------------- callables a config may name
_CALLABLES: dict[str, Callable] = {}


def _default_name(fn) -> str:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        raise ValueError(f"register_gradient: {fn!r} has no module-level name; pass one: "
                         f"register_gradient('my_rule', fn)")
    return f"{module}:{qualname}"


def register_gradient(name=None, fn: Callable | None = None, *, replace: bool = False):
    """Make ``fn`` nameable in configs and model files, as ``name``.

    A saved quantizer refers to a custom gradient rule (``gradient=``) or a
    :class:`~fxpsim.quant.registry.FunctionQuantizer` function by name; loading resolves the name
    here and nowhere else (files never import code).  Forms::

        register_gradient("leaky", leaky)          # under "leaky"
        register_gradient(leaky)                   # under "module:qualname", what get_config() writes
        @register_gradient("leaky")                # decorators, with or without a name
        @register_gradient

    A name already taken by another function raises ValueError unless ``replace=True``.
    Returns ``fn`` (so it works as a decorator).
    """
    if callable(name) and fn is None:
        return register_gradient(_default_name(name), name, replace=replace)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"register_gradient: name must be a string, got {type(name).__name__}")
    if name is not None and not name.strip():
        raise ValueError("register_gradient: name must not be empty")

    def add(func):
        if not callable(func):
            raise TypeError(f"register_gradient: {func!r} is not callable")
        key = _default_name(func) if name is None else name
        if key.lower().replace("-", "_") in ("ste", "clipped_ste"):
            raise ValueError(f"register_gradient: {key!r} is a built-in gradient rule")
        old = _CALLABLES.get(key)
        if old is not None and old is not func and not replace:
            raise ValueError(f"register_gradient: {key!r} is already registered to {old!r}; "
                             f"pass replace=True to change it")
        _CALLABLES[key] = func
        return func
    return add if fn is None else add(fn)


def registered_gradients() -> list[str]:
    """Names :func:`register_gradient` knows (what configs and model files may name)."""
    return sorted(_CALLABLES)


# --------------------------------------------------------------------------- helpers
def _as_float_array(x, where: str) -> np.ndarray:
    """``x`` as a real floating ndarray (float16 is promoted to float32); never a copy unless needed."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{where}: expected a real floating-point array, got dtype {arr.dtype}")
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    return arr


def _normalize_axis(axis, ndim: int, where: str):
    if axis is None:
        return None
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{where}: axis must be an int or None, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{where}: axis {axis} is out of range for an input with {ndim} dimensions")
    return int(axis) % ndim


def _check_gradient(gradient, where: str):
    if isinstance(gradient, str):
        name = gradient.lower().replace("-", "_")
        if name not in ("ste", "clipped_ste"):
            raise ValueError(f"{where}: gradient must be 'ste', 'clipped_ste', a float or a callable "
                             f"(x, dy) -> dx, got {gradient!r}")
        return name
    if isinstance(gradient, bool):
        raise TypeError(f"{where}: gradient must be 'ste', 'clipped_ste', a float or a callable, got a bool")
    if isinstance(gradient, numbers.Real):
        if not np.isfinite(gradient):
            raise ValueError(f"{where}: a scaled-STE gradient factor must be finite, got {gradient!r}")
        return float(gradient)
    if callable(gradient):
        return gradient
    raise TypeError(f"{where}: gradient must be 'ste', 'clipped_ste', a float or a callable (x, dy) -> dx, "
                    f"got {type(gradient).__name__}")


def _gradient_to_config(gradient):
    """A gradient rule (or FunctionQuantizer function) as config data: a string, a float or a name."""
    if isinstance(gradient, (str, float)):
        return gradient
    for key, fn in _CALLABLES.items():
        if fn is gradient:
            return key
    module = getattr(gradient, "__module__", None)
    qualname = getattr(gradient, "__qualname__", "")
    if module and qualname and "<" not in qualname:
        return f"{module}:{qualname}"        # loadable once registered: register_gradient(fn)
    raise ValueError("a gradient callable can only be saved in a config when it is a module-level function "
                     f"or registered with fxpsim.register_gradient(name, fn) (got {gradient!r})")


def _gradient_from_config(value, what: str = "gradient"):
    """Inverse of :func:`_gradient_to_config`: built-in rules and numbers pass; other strings must be
    names given to :func:`register_gradient`.  Nothing is ever imported or looked up elsewhere."""
    if isinstance(value, bool):
        return value                          # rejected by _check_gradient with its message
    if isinstance(value, (numbers.Real, Quantizer)) or callable(value):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{what} in a config must be a string or a number, got {type(value).__name__} {value!r}")
    if value.lower().replace("-", "_") in ("ste", "clipped_ste"):
        return value
    fn = _CALLABLES.get(value)
    if fn is None:
        known = ", ".join(registered_gradients()) or "none"
        raise ValueError(f"{what} {value!r} in the config is not a registered function (registered: {known}); "
                         f"configs and model files never import code: register it first with "
                         f"fxpsim.register_gradient({value!r}, fn)")
    return fn


def _check_num_bits(num_bits, lo: int, hi: int, where: str, name: str = "num_bits") -> int:
    """``num_bits`` (the argument ``name`` of ``where``) as an int in ``[lo, hi]``."""
    if isinstance(num_bits, bool) or not isinstance(num_bits, numbers.Integral):
        raise TypeError(f"{where}: {name} must be an int, got {num_bits!r}")
    if not lo <= num_bits <= hi:
        raise ValueError(f"{where}: {name} must be in [{lo}, {hi}], got {num_bits}")
    return int(num_bits)


# --------------------------------------------------------------------------- integer form
@dataclass(frozen=True)
class IntegerForm:
    """What the hardware stores for a quantized tensor.

    The real value of each element is

    .. math:: x = \\mathrm{scale} \\cdot (\\mathrm{code} - \\mathrm{zero\\_point})

    with ``scale`` and ``zero_point`` scalars or arrays broadcastable to
    ``codes`` (per channel along ``axis``).

    Attributes
    ----------
    codes : ndarray of int64
    scale : float or ndarray
    zero_point : int or ndarray of int64
    quant_min, quant_max : int
        The code range the hardware register holds.
    axis : int or None
        Channel axis of per-channel ``scale``/``zero_point``.
    fmt : fxpsim.fixed.Format or None
        Set when the grid is a plain fixed-point format (``scale`` a power of
        two, ``zero_point`` 0, codes a two's complement or unsigned word).
    """

    codes: np.ndarray
    scale: Any
    zero_point: Any
    quant_min: int
    quant_max: int
    axis: int | None = None
    fmt: Any = None

    def to_float(self) -> np.ndarray:
        """The dequantized values as float64, :math:`s (q - z)`."""
        return np.asarray(self.scale, np.float64) * (self.codes - np.asarray(self.zero_point, np.int64))


# --------------------------------------------------------------------------- base class
class Quantizer:
    """Base class of every quantizer (see the module docstring for the protocol).

    Subclasses implement :meth:`_forward` (returns ``y``; may store a context in
    ``self._ctx``), :meth:`_ste` (the straight-through gradient), optionally
    :meth:`_clipped_ste`, :meth:`_parameter_grads`, :meth:`_integer_form` and
    :meth:`_config`.
    """

    name: ClassVar[str] = ""
    default_gradient: ClassVar[Any] = "ste"

    def __init__(self, gradient=None):
        self.gradient = _check_gradient(self.default_gradient if gradient is None else gradient,
                                        type(self).__name__)
        self.training = True
        self.grads: dict[str, np.ndarray] = {}
        self._x: np.ndarray | None = None
        self._ctx: Any = None

    # -- protocol ------------------------------------------------------------
    def __call__(self, x) -> np.ndarray:
        x = _as_float_array(x, f"{type(self).__name__}()")
        y = self._forward(x)
        self._x = x
        return y

    def backward(self, dy) -> np.ndarray:
        """Gradient with respect to the last forward input; also sets :attr:`grads`."""
        where = f"{type(self).__name__}.backward"
        if self._x is None:
            raise RuntimeError(f"{where}: call the quantizer on an input before backward()")
        dy = _as_float_array(dy, where)
        if dy.shape != self._x.shape:
            raise ValueError(f"{where}: dy has shape {dy.shape}, the forward input had shape {self._x.shape}")
        g = self.gradient
        if callable(g):
            dx = np.asarray(g(self._x, dy))
            if dx.shape != self._x.shape:
                raise ValueError(f"{where}: the gradient callable returned shape {dx.shape}, "
                                 f"expected {self._x.shape}")
        elif g == "ste":
            dx = self._ste(dy)
        elif g == "clipped_ste":
            dx = self._clipped_ste(dy)
        else:
            dx = g * self._ste(dy)
        self.grads = self._parameter_grads(dy)
        return np.asarray(dx, dtype=np.result_type(dy.dtype, self._x.dtype))

    def parameters(self) -> dict[str, np.ndarray]:
        """Learnable parameters (the arrays an optimizer updates in place)."""
        return {}

    def zero_grad(self) -> None:
        self.grads = {}

    def train(self, mode: bool = True) -> "Quantizer":
        self.training = bool(mode)
        return self

    def eval(self) -> "Quantizer":
        return self.train(False)

    def integer_form(self, x=None) -> IntegerForm:
        """Integer codes (with scale / zero point / format) for ``x`` or the last forward input."""
        if x is None:
            if self._x is None:
                raise RuntimeError(f"{type(self).__name__}.integer_form: give x or call the quantizer first")
            x = self._x
        return self._integer_form(_as_float_array(x, f"{type(self).__name__}.integer_form"))

    def get_config(self) -> dict:
        config = {"gradient": _gradient_to_config(self.gradient)}
        config.update(self._config())
        return config

    @classmethod
    def from_config(cls, config: dict) -> "Quantizer":
        """Rebuild from :meth:`get_config`; unknown keys and unregistered function names are ValueErrors."""
        if not isinstance(config, dict):
            raise ValueError(f"{cls.__name__}.from_config: a config must be a dict, got {type(config).__name__}")
        config = dict(config)
        params = inspect.signature(cls).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            unknown = sorted(set(config) - set(params))
            if unknown:
                raise ValueError(f"{cls.__name__}: unknown config key(s) {unknown}; accepted: "
                                 f"{sorted(k for k, p in params.items() if p.kind is not p.VAR_POSITIONAL)}")
        if "gradient" in config:
            config["gradient"] = _gradient_from_config(config["gradient"])
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"

    # -- hooks for subclasses -----------------------------------------------------
    def _forward(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _ste(self, dy: np.ndarray) -> np.ndarray:
        return dy.copy()

    def _clipped_ste(self, dy: np.ndarray) -> np.ndarray:
        return self._ste(dy)

    def _parameter_grads(self, dy: np.ndarray) -> dict[str, np.ndarray]:
        return {}

    def _integer_form(self, x: np.ndarray) -> IntegerForm:
        raise NotImplementedError(f"{type(self).__name__} has no integer form")

    def _config(self) -> dict:
        return {}

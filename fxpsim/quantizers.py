"""Quantizers with straight-through gradients: one protocol, a registry, seven classes.

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
      ``@tf.custom_gradient``, in numpy).  Module-level functions survive
      :meth:`Quantizer.get_config` (stored as ``"module:qualname"``).

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

Registry (:func:`get`)
----------------------
``get(spec)`` accepts

* ``None`` or ``"identity"`` -> :class:`IdentityQuantizer`;
* a name: ``"fake_quant"``, ``"affine"``, ``"fixed"``, ``"binary"``,
  ``"ternary"``, ``"dorefa"``, ``"identity"`` (class names such as
  ``"FakeQuant"`` work too), built with default arguments;
* a name followed by a bit width, a keyword shortcut: ``"fake_quant8"``,
  ``"affine4"``, ``"dorefa2"`` (``num_bits`` = the number);
  ``"fixed:Q3.4"`` / ``"fixed:sfix8_En4"`` give a :class:`FixedPointQuantizer` of that
  format;
* a dict ``{"class_name": name, "config": {...}}`` (what :func:`serialize`
  writes) or ``{"class_name": name, **kwargs}``;
* a :class:`Quantizer` instance (returned as is);
* any other callable ``f(x) -> y``: wrapped in :class:`FunctionQuantizer`
  (straight-through gradient unless ``gradient=`` is given to it directly).

:func:`register` adds a user class under a name.

References
----------
Bengio, Léonard, Courville 2013, *Estimating or propagating gradients through
stochastic neurons*; Courbariaux et al. 2016, *Binarized Neural Networks*;
Rastegari et al. 2016, *XNOR-Net*; Li & Liu 2016, *Ternary Weight Networks*;
Zhou et al. 2016, *DoReFa-Net*; Jacob et al. 2018, *Quantization and training of
neural networks for efficient integer-arithmetic-only inference*; Esser et al.
2020, *Learned Step Size Quantization*.
"""
from __future__ import annotations

import importlib
import inspect
import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from . import fake_quant as _fq

__all__ = [
    "Quantizer", "IntegerForm", "FunctionQuantizer", "IdentityQuantizer", "FakeQuant", "AffineQuantizer",
    "FixedPointQuantizer", "BinaryQuantizer", "TernaryQuantizer", "DoReFaQuantizer",
    "get_quantizer", "register_quantizer", "serialize_quantizer", "deserialize_quantizer",
    "registered_quantizers",
]
# ``get``/``register``/``serialize``/``deserialize``/``registered_names`` are this module's short
# names; the package re-exports them under the ``*_quantizer(s)`` aliases (aliases defined at the end).


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


def _reduce_all_but(values: np.ndarray, axis, func) -> np.ndarray:
    """``func`` over every axis except ``axis`` (keepdims); over everything when ``axis`` is None."""
    if axis is None:
        return func(values, axis=None, keepdims=True)
    others = tuple(i for i in range(values.ndim) if i != axis)
    return func(values, axis=others, keepdims=True)


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
    if isinstance(gradient, (str, float)):
        return gradient
    module = getattr(gradient, "__module__", None)
    qualname = getattr(gradient, "__qualname__", "")
    if module and qualname and "<" not in qualname:
        return f"{module}:{qualname}"
    raise ValueError("a gradient callable can only be saved in a config when it is a module-level function "
                     f"(got {gradient!r}); pass it again when loading")


def _gradient_from_config(value):
    if isinstance(value, str) and ":" in value:
        module_name, qualname = value.split(":", 1)
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    return value


def _round_half(values: np.ndarray, rounding: str) -> np.ndarray:
    """Round to integers with the named tie rule (float64 arithmetic, so ``v + 0.5`` is exact)."""
    v = np.asarray(values, dtype=np.float64)
    if rounding == "half_even":
        return np.rint(v)
    if rounding == "half_up":
        return np.floor(v + 0.5)
    if rounding == "half_away":
        return np.copysign(np.floor(np.abs(v) + 0.5), v)
    if rounding == "half_down":
        return np.ceil(v - 0.5)
    if rounding == "floor":
        return np.floor(v)
    raise ValueError(f"rounding must be one of 'half_even', 'half_up', 'half_away', 'half_down', 'floor', "
                     f"got {rounding!r}")


def _check_num_bits(num_bits, lo: int, hi: int, where: str) -> int:
    if isinstance(num_bits, bool) or not isinstance(num_bits, numbers.Integral):
        raise TypeError(f"{where}: num_bits must be an int, got {num_bits!r}")
    if not lo <= num_bits <= hi:
        raise ValueError(f"{where}: num_bits must be in [{lo}, {hi}], got {num_bits}")
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
        config = dict(config)
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


# --------------------------------------------------------------------------- simple quantizers
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
        if isinstance(fn, str):
            fn = _gradient_from_config(fn)
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


class BinaryQuantizer(Quantizer):
    """Sign binarization (BNN, Courbariaux et al. 2016), optionally scaled as XNOR-Net (Rastegari et al. 2016).

    .. math::

        q(x) = \\alpha\\,\\mathrm{sign}(x), \\quad
        \\mathrm{sign}(x) = \\begin{cases} +1 & x \\ge 0 \\\\ -1 & x < 0 \\end{cases}, \\quad
        \\alpha = \\begin{cases} 1 & \\text{scale\\_axis = None} \\\\
                  \\frac{1}{n}\\sum_{i \\in c} |x_i| & \\text{per channel } c \\text{ along scale\\_axis}
                  \\end{cases}

    Gradient (``"clipped_ste"``, the default, BNN's :math:`1_{|x| \\le 1}` estimator):

    .. math::

        \\frac{\\partial L}{\\partial x_j} = \\alpha\\, g_j\\, 1_{|x_j| \\le 1}
        + \\frac{\\mathrm{sign}(x_j)}{n} \\sum_{i \\in c} g_i\\, \\mathrm{sign}(x_i)

    where :math:`g = \\partial L/\\partial q`; the second term (the exact derivative of
    :math:`\\alpha`) is present only with ``scale_axis``.  ``"ste"`` drops the mask.
    """

    name = "binary"
    default_gradient = "clipped_ste"

    def __init__(self, scale_axis=None, gradient=None):
        super().__init__(gradient)
        if scale_axis is not None and (isinstance(scale_axis, bool) or not isinstance(scale_axis, numbers.Integral)):
            raise TypeError(f"BinaryQuantizer: scale_axis must be an int or None, got {scale_axis!r}")
        self.scale_axis = scale_axis

    def _alpha(self, x):
        if self.scale_axis is None:
            return None
        axis = _normalize_axis(self.scale_axis, x.ndim, "BinaryQuantizer")
        return _reduce_all_but(np.abs(x), axis, np.mean)

    def _forward(self, x):
        sign = np.where(x >= 0, 1, -1).astype(x.dtype)
        if np.isnan(x).any():
            raise ValueError("BinaryQuantizer: input contains NaN")
        alpha = self._alpha(x)
        self._ctx = (sign, alpha)
        return sign if alpha is None else (alpha * sign).astype(x.dtype)

    def _grad(self, dy, mask):
        sign, alpha = self._ctx
        g = dy * mask if mask is not None else dy.copy()
        if alpha is None:
            return g
        axis = _normalize_axis(self.scale_axis, dy.ndim, "BinaryQuantizer")
        n = dy.size // dy.shape[axis]
        return alpha * g + sign / n * _reduce_all_but(dy * sign, axis, np.sum)

    def _ste(self, dy):
        return self._grad(dy, None)

    def _clipped_ste(self, dy):
        return self._grad(dy, np.abs(self._x) <= 1)

    def _integer_form(self, x):
        codes = np.where(x >= 0, 1, -1).astype(np.int64)
        alpha = self._alpha(x)
        axis = None if alpha is None else _normalize_axis(self.scale_axis, x.ndim, "BinaryQuantizer")
        return IntegerForm(codes, 1.0 if alpha is None else alpha, 0, -1, 1, axis)

    def _config(self):
        return {"scale_axis": self.scale_axis}


class TernaryQuantizer(Quantizer):
    """Ternary Weight Networks (Li & Liu 2016).

    .. math::

        \\Delta = \\nu \\cdot \\frac{1}{n}\\sum_i |x_i|, \\qquad
        \\alpha = \\frac{\\sum_i |x_i|\\, 1_{|x_i| > \\Delta}}{\\sum_i 1_{|x_i| > \\Delta}}, \\qquad
        q(x) = \\alpha\\, \\mathrm{sign}(x)\\, 1_{|x| > \\Delta}

    (per tensor, or per channel along ``axis``; :math:`\\alpha = 0` when no element
    exceeds :math:`\\Delta`).  TWN's paper uses :math:`\\nu = 0.7`; the seed's
    ``trinarize`` uses ``nu=1.0`` and ``>=``: pass ``nu=1.0`` for its threshold (ties at
    exactly :math:`\\Delta` aside).  Gradient: straight through,

    .. math:: \\frac{\\partial q}{\\partial x} := 1 \\;(\\text{"ste", default}), \\qquad
              := 1_{|x| \\le 1} \\;(\\text{"clipped\\_ste"}).
    """

    name = "ternary"

    def __init__(self, nu: float = 0.7, axis=None, gradient=None):
        super().__init__(gradient)
        if isinstance(nu, bool) or not isinstance(nu, numbers.Real) or not np.isfinite(nu) or nu < 0:
            raise ValueError(f"TernaryQuantizer: nu must be a finite number >= 0, got {nu!r}")
        self.nu = float(nu)
        self.axis = axis

    def _threshold_alpha(self, x):
        if np.isnan(x).any():
            raise ValueError("TernaryQuantizer: input contains NaN")
        axis = _normalize_axis(self.axis, x.ndim, "TernaryQuantizer")
        a = np.abs(x.astype(np.float64))
        delta = self.nu * _reduce_all_but(a, axis, np.mean)
        keep = a > delta
        count = _reduce_all_but(keep, axis, np.sum)
        total = _reduce_all_but(a * keep, axis, np.sum)
        alpha = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
        return axis, keep, alpha

    def _forward(self, x):
        _, keep, alpha = self._threshold_alpha(x)
        return np.where(keep, alpha * np.sign(x), 0.0).astype(x.dtype)

    def _clipped_ste(self, dy):
        return dy * (np.abs(self._x) <= 1)

    def _integer_form(self, x):
        axis, keep, alpha = self._threshold_alpha(x)
        codes = (np.sign(x) * keep).astype(np.int64)
        return IntegerForm(codes, alpha, 0, -1, 1, axis)

    def _config(self):
        return {"nu": self.nu, "axis": self.axis}


class DoReFaQuantizer(Quantizer):
    """DoReFa-Net quantization (Zhou et al. 2016) of activations or weights to ``num_bits`` = k bits.

    With :math:`Q_k(u) = \\mathrm{round}((2^k - 1)\\,u) / (2^k - 1)`:

    activations (``mode="activations"``)

    .. math:: q(x) = Q_k(\\mathrm{clip}(x, 0, 1)), \\qquad
              \\frac{\\partial q}{\\partial x} := 1_{0 \\le x \\le 1} \\;(\\text{"clipped\\_ste", default})
              \\text{ or } 1 \\;(\\text{"ste"})

    weights (``mode="weights"``), with :math:`t = \\tanh x` and :math:`M = \\max_i |t_i|`

    .. math::

        q(x) = 2\\, Q_k\\!\\left(\\frac{t}{2M} + \\frac12\\right) - 1, \\qquad
        \\frac{\\partial L}{\\partial x_j} = \\frac{1 - t_j^2}{M} g_j
          - [j = m]\\, \\frac{\\mathrm{sign}(t_m)(1 - t_m^2)}{M^2} \\sum_i g_i t_i

    (STE through :math:`Q_k` only; :math:`m` = the arg-max of :math:`|t|`, so the
    normalisation's own derivative is exact).  Activations are scaled in the input's
    dtype (float32 inputs give the seed's ``tf.round(scaling * x)`` bit for bit); the
    weight transform runs in float64.  ``rounding`` picks the tie rule of
    :math:`\\mathrm{round}`: ``"half_even"`` (default; the seed's ``tf.round`` and
    ``np.round``), ``"half_up"``, ``"half_away"``, ``"half_down"`` or ``"floor"``.
    """

    name = "dorefa"
    default_gradient = "clipped_ste"

    def __init__(self, num_bits: int = 2, mode: str = "activations", rounding: str = "half_even", gradient=None):
        super().__init__(gradient)
        self.num_bits = _check_num_bits(num_bits, 1, 16, "DoReFaQuantizer")
        if mode not in ("activations", "weights"):
            raise ValueError(f"DoReFaQuantizer: mode must be 'activations' or 'weights', got {mode!r}")
        self.mode = mode
        _round_half(np.zeros(1), rounding)         # validates the name
        self.rounding = rounding

    @property
    def levels(self) -> int:
        return (1 << self.num_bits) - 1

    @staticmethod
    def weight_transform(x: np.ndarray) -> np.ndarray:
        """DoReFa's weight normalisation :math:`\\tanh(x) / (2 \\max|\\tanh x|) + 1/2` into [0, 1] (float64)."""
        t = np.tanh(np.asarray(x, np.float64))
        m = np.max(np.abs(t)) if t.size else 1.0
        return t / (2 * (m if m > 0 else 1.0)) + 0.5

    def _codes(self, x):
        if np.isnan(x).any():
            raise ValueError("DoReFaQuantizer: input contains NaN")
        if self.mode == "activations":        # (2^k - 1) * clip(x) in the input's dtype, as the seed's TF graph
            scaled = np.clip(x, 0, 1) * x.dtype.type(self.levels)
        else:
            scaled = self.weight_transform(x) * self.levels
        return _round_half(scaled, self.rounding).astype(np.int64)

    def _forward(self, x):
        n = self._codes(x)
        if self.mode == "activations":
            return (n / self.levels).astype(x.dtype)
        return ((2 * n - self.levels) / self.levels).astype(x.dtype)

    def _ste(self, dy):
        if self.mode == "activations":
            return dy.copy()
        t = np.tanh(self._x.astype(np.float64))
        if t.size == 0:
            return dy.copy()
        flat = np.abs(t).ravel()
        m_index = int(np.argmax(flat))
        m = flat[m_index] if flat[m_index] > 0 else 1.0
        dx = (1.0 - t * t) / m * dy
        tm = t.ravel()[m_index]
        dx.ravel()[m_index] -= np.sign(tm) * (1.0 - tm * tm) / (m * m) * np.sum(dy * t)
        return dx

    def _clipped_ste(self, dy):
        if self.mode == "activations":
            return dy * ((self._x >= 0) & (self._x <= 1))
        return self._ste(dy)

    def _integer_form(self, x):
        n = self._codes(x)
        if self.mode == "activations":
            return IntegerForm(n, 1.0 / self.levels, 0, 0, self.levels)
        return IntegerForm(2 * n - self.levels, 1.0 / self.levels, 0, -self.levels, self.levels)

    def _config(self):
        return {"num_bits": self.num_bits, "mode": self.mode, "rounding": self.rounding}


def _parse_format(fmt):
    from .fixed import Format
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
        from .fixed import Overflow, Rounding
        self.fmt = _parse_format(fmt)
        self.rounding = Rounding.parse(rounding)
        self.overflow = Overflow.parse(overflow)
        self.seed = seed

    def _fixed(self, x):
        from .fixed import from_float
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


# --------------------------------------------------------------------------- TF / PyTorch semantics
def _observer_from_spec(spec, axis, where):
    if spec is None:
        return None
    from . import observers
    obs = observers.get(spec)
    if obs.axis != axis:
        raise ValueError(f"{where}: the observer's axis ({obs.axis}) differs from the quantizer's axis ({axis})")
    return obs


def _channel_vector(values, channels, name, where):
    """A per-channel parameter of length ``channels`` (a single value is broadcast once)."""
    if values.size == 1 and channels != 1:
        return np.full(channels, values.reshape(()), dtype=values.dtype)
    if values.shape != (channels,):
        raise ValueError(f"{where}: {name} has {values.size} values, the input has {channels} channels")
    return values


class FakeQuant(Quantizer):
    """TensorFlow fake quantization (Jacob et al. 2018; ``tf.quantization.fake_quant_with_min_max_vars``).

    The range :math:`[a, b]` is first nudged so that zero is a code
    (:func:`fxpsim.fake_quant.tf_nudge`: scale :math:`s = (b - a)/(q_{max} - q_{min})`,
    zero point :math:`z = \\mathrm{round}(q_{min} - a/s)` clamped to the code range,
    :math:`a' = (q_{min} - z)s`, :math:`b' = (q_{max} - z)s`); then, in float32 as TF,

    .. math::

        q(x) = s \\left\\lfloor \\frac{\\mathrm{clamp}(x, a', b') - a'}{s} - (z - q_{min}) + \\frac12 \\right\\rfloor

    Gradients (TF's ``FakeQuantWithMinMaxVarsGradient``, the default ``"clipped_ste"``):

    .. math::

        \\frac{\\partial L}{\\partial x} = g\\, 1_{a' \\le x \\le b'}, \\quad
        \\frac{\\partial L}{\\partial a} = \\sum_{x < a'} g, \\quad
        \\frac{\\partial L}{\\partial b} = \\sum_{x > b'} g

    The min/max gradients fill :attr:`grads` when ``learnable=True``.  With
    ``axis`` set, ranges are per channel along that axis (TF's per-channel op,
    which multiplies by a reciprocal scale where the per-tensor op divides).
    A single ``min``/``max`` with ``axis`` set is broadcast to the channel count on the
    first call (:meth:`parameters` then returns the new arrays).  An ``observer`` (name,
    dict or :class:`fxpsim.observers.Observer`) sets the range from the data on every
    training forward (in place) until it is frozen; with ``learnable=True`` as well, the
    observer calibrates and, once frozen, the gradients train the range.  Inputs are
    computed in float32 (TF's dtype); the output is float32.
    """

    name = "fake_quant"
    default_gradient = "clipped_ste"

    def __init__(self, min=-6.0, max=6.0, num_bits: int = 8, narrow_range: bool = False, axis=None,
                 learnable: bool = False, observer=None, gradient=None):
        super().__init__(gradient)
        self.num_bits = _check_num_bits(num_bits, 2, 16, "FakeQuant")
        self.narrow_range = bool(narrow_range)
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)):
            raise TypeError(f"FakeQuant: axis must be an int or None, got {axis!r}")
        self.axis = axis
        self.min = np.array(min, dtype=np.float32).reshape(-1 if axis is not None else ())
        self.max = np.array(max, dtype=np.float32).reshape(-1 if axis is not None else ())
        _fq.tf_nudge(self.min, self.max, self.num_bits, self.narrow_range, where="FakeQuant")
        self.learnable = bool(learnable)
        self.observer = _observer_from_spec(observer, axis, "FakeQuant")

    def parameters(self):
        return {"min": self.min, "max": self.max} if self.learnable else {}

    def _update_range(self, x):
        if self.observer is None or not self.training or self.observer.frozen:
            return
        lo, hi = self.observer.update(x).min_max()
        for attr, value in (("min", lo), ("max", hi)):
            current = getattr(self, attr)
            value = np.asarray(value, np.float32)
            if current.shape == value.shape:
                current[...] = value                   # in place: optimizers keep their reference
            else:
                setattr(self, attr, value.copy())

    def _channels_last(self, x):
        axis = _normalize_axis(self.axis, x.ndim, "FakeQuant")
        xm = np.moveaxis(x, axis, -1)
        channels = xm.shape[-1]
        self.min = _channel_vector(self.min, channels, "min", "FakeQuant")
        self.max = _channel_vector(self.max, channels, "max", "FakeQuant")
        return axis, xm

    def _forward(self, x):
        self._update_range(x)
        self._ctx = None
        if self.axis is None:
            return _fq.fake_quant_with_min_max_vars(x, self.min, self.max, self.num_bits, self.narrow_range)
        axis, xm = self._channels_last(x)
        y = _fq.fake_quant_with_min_max_vars_per_channel(xm, self.min, self.max, self.num_bits, self.narrow_range)
        return np.moveaxis(y, -1, axis)

    def _tf_gradients(self, dy):
        if self._ctx is None:
            if self.axis is None:
                self._ctx = _fq.fake_quant_with_min_max_vars_gradient(dy, self._x, self.min, self.max,
                                                                      self.num_bits, self.narrow_range)
            else:
                axis = _normalize_axis(self.axis, dy.ndim, "FakeQuant")
                dx, dmin, dmax = _fq.fake_quant_with_min_max_vars_per_channel_gradient(
                    np.moveaxis(dy, axis, -1), np.moveaxis(self._x, axis, -1), self.min, self.max,
                    self.num_bits, self.narrow_range)
                self._ctx = (np.moveaxis(dx, -1, axis), dmin, dmax)
        return self._ctx

    def backward(self, dy):
        self._ctx = None
        return super().backward(dy)

    def _clipped_ste(self, dy):
        return self._tf_gradients(dy)[0]

    def _parameter_grads(self, dy):
        if not self.learnable:
            return {}
        _, dmin, dmax = self._tf_gradients(dy)
        return {"min": np.asarray(dmin, np.float32).reshape(self.min.shape),
                "max": np.asarray(dmax, np.float32).reshape(self.max.shape)}

    def _integer_form(self, x):
        if self.axis is None:
            codes, scale, zero_point = _fq.tf_fake_quant_codes(x, self.min, self.max, self.num_bits,
                                                               self.narrow_range)
            axis = None
        else:
            axis, xm = self._channels_last(x)
            codes, scale, zero_point = _fq.tf_fake_quant_codes(xm, self.min, self.max, self.num_bits,
                                                               self.narrow_range, per_channel=True)
            codes = np.moveaxis(codes, -1, axis)
            shape = [1] * x.ndim
            shape[axis] = -1
            scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
        quant_min = 1 if self.narrow_range else 0
        return IntegerForm(codes, scale, zero_point, quant_min, (1 << self.num_bits) - 1, axis)

    def _config(self):
        config = {"min": self.min.tolist(), "max": self.max.tolist(), "num_bits": self.num_bits,
                  "narrow_range": self.narrow_range, "axis": self.axis, "learnable": self.learnable}
        if self.observer is not None:
            config["observer"] = self.observer.serialize()
        return config


class AffineQuantizer(Quantizer):
    """PyTorch affine fake quantization, optionally with learned scale and zero point (LSQ).

    .. math::

        c = \\mathrm{rne}(x \\cdot \\mathrm{fl}(1/s)) + z, \\qquad
        q(x) = (\\mathrm{clamp}(c, q_{min}, q_{max}) - z)\\, s

    (``torch.fake_quantize_per_tensor_affine`` / ``_per_channel_affine``; rne =
    round half to even).  Gradient (``"clipped_ste"``, default; PyTorch masks on the
    rounded code, TensorFlow on the input):

    .. math:: \\frac{\\partial L}{\\partial x} = g\\, 1_{q_{min} \\le c \\le q_{max}}

    With ``learnable=True`` (Esser et al. 2020, LSQ; PyTorch's
    ``_fake_quantize_learnable_per_tensor_affine``), ``scale`` and ``zero_point``
    are float parameters and, with the gradient scale :math:`\\gamma` (``grad_factor``;
    ``"lsq"`` means :math:`1/\\sqrt{N q_{max}}`, N = elements per scale),

    .. math::

        \\frac{\\partial L}{\\partial s} = \\gamma \\sum g \\cdot \\begin{cases}
            (q(x) - x)/s & q_{min} \\le c \\le q_{max} \\\\
            q_{min} - z & c < q_{min} \\\\ q_{max} - z & c > q_{max} \\end{cases}, \\qquad
        \\frac{\\partial L}{\\partial z} = \\gamma \\sum_{c \\notin [q_{min}, q_{max}]} -g\\, s

    (see :func:`fxpsim.fake_quant.fake_quantize_learnable_per_tensor_affine_backward`
    for PyTorch's exact float32 steps).  ``num_bits``/``signed`` set the code range
    unless ``quant_min``/``quant_max`` are given.  An ``observer`` sets scale and zero
    point (``symmetric`` picks the scheme) on training forwards until frozen.
    """

    name = "affine"
    default_gradient = "clipped_ste"

    def __init__(self, scale=1.0, zero_point=0, num_bits: int = 8, signed: bool = True, quant_min=None,
                 quant_max=None, axis=None, learnable: bool = False, grad_factor="lsq", observer=None,
                 symmetric: bool = False, gradient=None):
        super().__init__(gradient)
        where = "AffineQuantizer"
        num_bits = _check_num_bits(num_bits, 2, 32, where)
        default_min, default_max = ((-(1 << (num_bits - 1)), (1 << (num_bits - 1)) - 1) if signed
                                    else (0, (1 << num_bits) - 1))
        self.num_bits, self.signed = num_bits, bool(signed)
        self.quant_min = default_min if quant_min is None else quant_min
        self.quant_max = default_max if quant_max is None else quant_max
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)):
            raise TypeError(f"{where}: axis must be an int or None, got {axis!r}")
        self.axis = axis
        self.learnable = bool(learnable)
        shape = -1 if axis is not None else ()
        self.scale = np.array(scale, dtype=np.float32).reshape(shape)
        self.zero_point = np.array(zero_point, dtype=np.float32 if self.learnable else np.int64).reshape(shape)
        _fq.check_affine_params(self.scale, self.zero_point, self.quant_min, self.quant_max, where,
                                learnable=self.learnable)
        if not (grad_factor == "lsq" or (isinstance(grad_factor, numbers.Real) and not isinstance(grad_factor, bool)
                                         and np.isfinite(grad_factor))):
            raise ValueError(f"{where}: grad_factor must be 'lsq' or a finite number, got {grad_factor!r}")
        self.grad_factor = grad_factor
        self.symmetric = bool(symmetric)
        self.observer = _observer_from_spec(observer, axis, where)

    def parameters(self):
        return {"scale": self.scale, "zero_point": self.zero_point} if self.learnable else {}

    def _update_params(self, x):
        if self.observer is None or not self.training or self.observer.frozen:
            return
        scale, zero_point = self.observer.update(x).scale_zero_point(self.quant_min, self.quant_max,
                                                                      symmetric=self.symmetric)
        for attr, value in (("scale", scale), ("zero_point", zero_point)):
            current = getattr(self, attr)
            value = np.asarray(value).astype(current.dtype)
            if current.shape == value.shape:
                current[...] = value
            else:
                setattr(self, attr, value.copy())

    def _axis(self, x):
        if self.axis is None:
            return None
        axis = _normalize_axis(self.axis, x.ndim, "AffineQuantizer")
        self.scale = _channel_vector(self.scale, x.shape[axis], "scale", "AffineQuantizer")
        self.zero_point = _channel_vector(self.zero_point, x.shape[axis], "zero_point", "AffineQuantizer")
        return axis

    def _gamma(self, x, axis):
        if self.grad_factor != "lsq":
            return float(self.grad_factor)
        n = x.size if axis is None else x.size // max(x.shape[axis], 1)
        return 1.0 / float(np.sqrt(max(n, 1) * max(self.quant_max, 1)))

    def _forward(self, x):
        self._update_params(x)
        axis = self._axis(x)
        if self.learnable:
            return _fq.fake_quantize_learnable_affine(x, self.scale, self.zero_point, self.quant_min,
                                                      self.quant_max, axis=axis)
        if axis is None:
            return _fq.fake_quantize_per_tensor_affine(x, self.scale, self.zero_point, self.quant_min,
                                                       self.quant_max)
        return _fq.fake_quantize_per_channel_affine(x, self.scale, self.zero_point, axis, self.quant_min,
                                                    self.quant_max)

    def backward(self, dy):
        self._ctx = None
        return super().backward(dy)

    def _all_grads(self, dy):
        if self._ctx is None:
            x, axis = self._x, self._axis(self._x)
            if self.learnable:
                self._ctx = _fq.fake_quantize_learnable_affine_backward(
                    dy, x, self.scale, self.zero_point, self.quant_min, self.quant_max,
                    self._gamma(x, axis), axis=axis)
            elif axis is None:
                self._ctx = (_fq.fake_quantize_per_tensor_affine_backward(
                    dy, x, self.scale, self.zero_point, self.quant_min, self.quant_max), None, None)
            else:
                self._ctx = (_fq.fake_quantize_per_channel_affine_backward(
                    dy, x, self.scale, self.zero_point, axis, self.quant_min, self.quant_max), None, None)
        return self._ctx

    def _clipped_ste(self, dy):
        return self._all_grads(dy)[0]

    def _parameter_grads(self, dy):
        if not self.learnable:
            return {}
        _, dscale, dzero_point = self._all_grads(dy)
        return {"scale": np.asarray(dscale, np.float32).reshape(self.scale.shape),
                "zero_point": np.asarray(dzero_point, np.float32).reshape(self.zero_point.shape)}

    def _integer_form(self, x):
        axis = self._axis(x)
        codes, zero_point = _fq.affine_codes(x, self.scale, self.zero_point, self.quant_min, self.quant_max,
                                             axis=axis, learnable=self.learnable)
        scale = self.scale
        if axis is not None:
            shape = [1] * x.ndim
            shape[axis] = -1
            scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
        return IntegerForm(codes, scale.copy(), zero_point, int(self.quant_min), int(self.quant_max), axis)

    def _config(self):
        config = {"scale": self.scale.tolist(), "zero_point": self.zero_point.tolist(), "num_bits": self.num_bits,
                  "signed": self.signed, "quant_min": int(self.quant_min), "quant_max": int(self.quant_max),
                  "axis": self.axis, "learnable": self.learnable, "grad_factor": self.grad_factor,
                  "symmetric": self.symmetric}
        if self.observer is not None:
            config["observer"] = self.observer.serialize()
        return config


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
             BinaryQuantizer, TernaryQuantizer, DoReFaQuantizer):
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
    except KeyError:
        raise ValueError(f"a quantizer dict needs a 'class_name' key, got keys {sorted(spec)}") from None
    config = dict(spec.pop("config", {}))
    config.update(spec)
    config.update(kwargs)
    return _lookup(name).from_config(config)


get_quantizer = get
register_quantizer = register
serialize_quantizer = serialize
deserialize_quantizer = deserialize
registered_quantizers = registered_names

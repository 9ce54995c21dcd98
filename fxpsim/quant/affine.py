"""Affine (scale and zero point) fake quantization with TensorFlow's and PyTorch's exact semantics.

:class:`FakeQuant` is TensorFlow's ``fake_quant_with_min_max_vars`` (a [min, max] range nudged so
that zero is a code; per tensor or per channel; min/max optionally learned); :class:`AffineQuantizer`
is PyTorch's ``fake_quantize_per_tensor_affine`` / ``_per_channel_affine`` and, with
``learnable=True``, LSQ.  Both compute through the bit-exact functions of :mod:`fxpsim.fake_quant`,
can take their range from an :mod:`fxpsim.observers` observer, follow the
:class:`fxpsim.quantizer_base.Quantizer` protocol and are registered in :mod:`fxpsim.quantizers`
(import them from there) as ``"fake_quant"`` and ``"affine"``.

References
----------
Jacob et al. 2018, *Quantization and training of neural networks for efficient
integer-arithmetic-only inference*; Esser et al. 2020, *Learned Step Size Quantization*.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import fake_quant as _fq
from .base import IntegerForm, Quantizer, _check_num_bits, _normalize_axis

__all__ = ["FakeQuant", "AffineQuantizer"]


# --------------------------------------------------------------------------- helpers
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

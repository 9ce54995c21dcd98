"""Low-bit quantizers: sign binarization (BNN / XNOR-Net), ternary weights (TWN) and DoReFa-Net.

Each class follows the :class:`fxpsim.quantizer_base.Quantizer` protocol, with :math:`q(x)` and its
gradient written in its docstring, and is registered in :mod:`fxpsim.quantizers` (import it from
there) as ``"binary"``, ``"ternary"`` and ``"dorefa"``.

References
----------
Courbariaux et al. 2016, *Binarized Neural Networks*; Rastegari et al. 2016, *XNOR-Net*;
Li & Liu 2016, *Ternary Weight Networks*; Zhou et al. 2016, *DoReFa-Net*.
"""
from __future__ import annotations

import numbers

import numpy as np

from .base import IntegerForm, Quantizer, _check_num_bits, _normalize_axis

__all__ = ["BinaryQuantizer", "TernaryQuantizer", "DoReFaQuantizer"]


# --------------------------------------------------------------------------- helpers
def _reduce_all_but(values: np.ndarray, axis, func) -> np.ndarray:
    """``func`` over every axis except ``axis`` (keepdims); over everything when ``axis`` is None."""
    if axis is None:
        return func(values, axis=None, keepdims=True)
    others = tuple(i for i in range(values.ndim) if i != axis)
    return func(values, axis=others, keepdims=True)


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


# --------------------------------------------------------------------------- quantizers
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

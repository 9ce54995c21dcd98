"""Accumulator-aware weight quantization (A2Q): weights that provably never overflow a P-bit accumulator.

After Colbert, Pappalardo, Petri-Koenig 2023, *A2Q: Accumulator-Aware Quantization with Guaranteed Overflow
Avoidance* (ICCV) -- the semantics of Brevitas's ``AccumulatorAwareWeightQuant``, re-derived here.

The bound
---------
A MAC unit computes, for output channel :math:`o`, the partial sums
:math:`S_j = b_o + \\sum_{k < j} w_{o,k}\\, x_k` (the accumulator preloaded with the bias; with the bias added
after the sum the same argument holds for the sums without it and for the final add), where :math:`w` are the
integer weight codes (zero point 0) and :math:`x_k = c_k - z_x` the input codes minus their zero point. With
:math:`N`-bit inputs, :math:`|x_k| \\le 2^{N-1}` for symmetric codes (signed with zero point 0, or any
grid whose codes lie within :math:`\\pm 2^{N-1}` of the zero point) and :math:`|x_k| \\le 2^N - 1 < 2^N` for
unsigned codes or any other zero point (every code and the zero point lie in the same :math:`2^N - 1`
wide range), i.e. :math:`|x_k| \\le x_{max} = 2^{N - \\mathrm{signed}}`. By the triangle inequality, for every
:math:`j` and any order of the adds (sequential or an adder tree, whose nodes are sums over subsets)

.. math:: |S_j| \\le |b_o| + \\sum_k |w_{o,k}|\\,|x_k| \\le |b_o| + \\lVert w_o \\rVert_1\\, x_{max}.

A signed P-bit accumulator holds :math:`[-2^{P-1}, 2^{P-1} - 1]`, so no add can overflow (saturate or wrap)
when :math:`|b_o| + \\lVert w_o \\rVert_1 x_{max} \\le 2^{P-1} - 1`. A fraction :math:`\\rho` (``bias_reserve``)
of the range is set aside for the bias, and the weights satisfy

.. math::

    \\lVert w_o \\rVert_1 \\le T = \\Big\\lfloor \\frac{(2^{P-1} - 1)(1 - \\rho)}{2^{N - \\mathrm{signed}}} \\Big\\rfloor

(for :math:`\\rho = 0` the A2Q bound :math:`(2^{P-1} - 1)/2^{N - \\mathrm{signed}}`); the bias must then satisfy
:math:`|b_o| \\le 2^{P-1} - 1 - \\lVert w_o \\rVert_1 x_{max}` (at least :math:`\\rho (2^{P-1} - 1)`), which
:func:`constrain_accumulators` enforces by clipping the layer's float bias (a projection on every forward
pass, so also right before conversion reads it). Saturating the bias register or preloading it into the accumulator
only shrinks it.

Enforcement (weight normalisation, as A2Q)
------------------------------------------
For each output channel, with the layer's float weights :math:`v` as a direction, a learned norm :math:`g`
and a learned scale :math:`s` (both per channel, stored as logarithms ``log_norm`` / ``log_scale`` so that
Adam's steps are relative):

.. math::

    \\hat g = \\min(g,\\ s\\,T), \\qquad r = \\frac{\\hat g}{s} \\frac{v}{\\lVert v \\rVert_1}, \\qquad
    q = \\mathrm{clip}(\\mathrm{round}_T(r), -Q, Q), \\qquad q(v) = s\\, q

with :math:`Q = 2^{M-1} - 1` (``num_bits`` M, narrow range). :math:`\\lVert r \\rVert_1 = \\hat g / s \\le T`, and the
rounding :math:`\\mathrm{round}_T` never increases the :math:`\\ell_1` norm beyond :math:`T`:
``rounding="toward_zero"`` is A2Q's (:math:`|q_i| \\le |r_i|`); ``"nearest"`` rounds to nearest except toward
zero where the budget requires it (starting from the truncation, the entries with the largest fractional
parts :math:`\\ge 1/2` are rounded away from zero while :math:`\\lVert q \\rVert_1 \\le T`); ``"norm"`` (default,
largest-remainder rounding) starts from the truncation too and rounds away from zero the entries with the
largest fractional parts until :math:`\\lVert q \\rVert_1 = \\min(T, \\mathrm{round}(\\lVert r \\rVert_1))`, so every
:math:`|q_i - r_i| < 1` and the row keeps its :math:`\\ell_1` mass. With a tight budget (say :math:`T = 29`
over 144 weights, every :math:`|r_i| < 1/2`) both others round a whole layer to zero -- a dead layer that a
zero bias and a ReLU never revive -- where ``"norm"`` keeps its largest weights (digits CNN, 30 epochs:
12/13/14-bit accumulators 91/96/97% with ``"norm"``, 8-9% with ``"nearest"``; 16 bits 98.6% with either).
Clipping to :math:`\\pm Q` only shrinks.
So the integer weights the converter stores (this quantizer's :meth:`integer_form`) satisfy the bound
exactly, after rounding.

Gradients (straight-through, ``gradient="clipped_ste"`` by default): rounding is the identity inside
:math:`|r| \\le Q`; with :math:`\\delta = \\partial L/\\partial q(v)` and :math:`m = 1\\{|r| \\le Q\\}`,

.. math::

    \\frac{\\partial L}{\\partial r} = s\\,\\delta\\, m, \\quad
    \\frac{\\partial L}{\\partial s} = \\sum \\delta q - \\frac{1}{s}\\sum \\frac{\\partial L}{\\partial r} r
        + T\\,[\\hat g = sT] \\frac{1}{s}\\sum \\frac{\\partial L}{\\partial r} u, \\quad
    \\frac{\\partial L}{\\partial g} = [\\hat g = g] \\frac{1}{s}\\sum \\frac{\\partial L}{\\partial r} u,

    \\frac{\\partial L}{\\partial v_k} = \\frac{1}{\\lVert v\\rVert_1}
        \\Big(a_k - \\mathrm{sign}(v_k) \\sum_i a_i u_i\\Big),
    \\quad a = \\frac{\\hat g}{s} \\frac{\\partial L}{\\partial r}, \\quad u = \\frac{v}{\\lVert v \\rVert_1}

(when the clamp is active, :math:`r = T u` no longer depends on :math:`s` and the two scale terms through
:math:`r` cancel). The scale and norm start at :math:`s = \\max(\\max|v|/Q, \\lVert v\\rVert_1/T)` and
:math:`g = \\lVert v\\rVert_1` on the first call, so :math:`q(v)` starts as close to :math:`v` as the bound allows
(the parameters appear then; an optimizer picks them up on its next step).

Do not follow an accumulator-aware layer with a batch norm: folding scales :math:`v` per channel, which the
normalisation removes.
"""
from __future__ import annotations

import numbers

import numpy as np

from .base import IntegerForm, Quantizer, _check_num_bits

__all__ = ["AccumulatorAwareQuantizer", "l1_bound", "constrain_accumulators", "worst_case_sums"]

ROUNDINGS = ("nearest", "norm", "toward_zero")


def l1_bound(accumulator_bits: int, input_bits: int, input_signed: bool = False, bias_reserve: float = 0.0) -> int:
    """The largest integer :math:`\\ell_1` norm of one output's weight codes that can never overflow:
    :math:`\\lfloor (2^{P-1} - 1)(1 - \\rho) / 2^{N - \\mathrm{signed}} \\rfloor` (module docstring)."""
    p, n = int(accumulator_bits), int(input_bits)
    if not 2 <= p <= 64 or not 1 <= n <= 32:
        raise ValueError(f"l1_bound: need 2 <= accumulator_bits <= 64 and 1 <= input_bits <= 32, got {p}, {n}")
    if not 0.0 <= bias_reserve < 1.0:
        raise ValueError(f"l1_bound: bias_reserve must be in [0, 1), got {bias_reserve!r}")
    return int(((1 << (p - 1)) - 1) * (1.0 - bias_reserve) // (1 << (n - int(bool(input_signed)))))


def _round_within(r: np.ndarray, bound: int, mode: str) -> np.ndarray:
    """Round the rows of ``r`` [C, K] to integers with each row's l1 norm at most ``bound`` (module docstring)."""
    a = np.abs(r)
    t = np.floor(a)
    if mode != "toward_zero" and r.shape[1]:
        f = a - t
        if mode == "nearest":     # round half up, toward zero where the budget runs out
            budget = bound - t.sum(axis=1)                   # >= sum of the fractions >= 0
            candidate = f >= 0.5
        else:                     # largest remainder: the l1 norm of r, rounded, kept (within the bound)
            budget = np.minimum(bound, np.floor(a.sum(axis=1) + 0.5)) - t.sum(axis=1)
            candidate = f > 0
        order = np.argsort(np.where(candidate, -f, 1.0), axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.broadcast_to(np.arange(r.shape[1]), r.shape), axis=1)
        t = t + (candidate & (rank < budget[:, None]))
    q = np.copysign(t, r)
    over = np.abs(q).sum(axis=1) > bound                     # float round-off only: truncate those rows
    if over.any():
        q[over] = np.trunc(r[over] * (1 - 1e-6))
    return q


class AccumulatorAwareQuantizer(Quantizer):
    """A2Q weight quantizer: integer weights whose per-channel :math:`\\ell_1` norm keeps a P-bit accumulator
    from overflowing (see the module docstring for the bound, the parametrisation and the gradients).

    Parameters
    ----------
    accumulator_bits : int
        P, the accumulator width to guarantee.
    input_bits : int
        N, the width of the layer's input codes.
    input_signed : bool
        Symmetric input codes, :math:`|x - z| \\le 2^{N-1}` (e.g. signed codes with zero point 0, or TF's
        symmetric narrow-range grid); False for unsigned codes or any other zero point (:math:`|x - z| < 2^N`).
    num_bits : int
        Weight code width M (codes in :math:`[-(2^{M-1}-1), 2^{M-1}-1]`).
    axis : int
        The output-channel axis of the weights (-1 for Dense [in, out] and Conv2D HWIO; 2 for a depthwise
        [KH, KW, C, 1] kernel). Scale and norm are per index of this axis, the :math:`\\ell_1` norm is over the
        other axes.
    bias_reserve : float
        Fraction :math:`\\rho` of the accumulator range kept for the bias.
    rounding : {"norm", "nearest", "toward_zero"}
    log_scale, log_norm : list of float, optional
        Learned parameters (restored from a config); initialised from the first weights seen otherwise.
    """

    name = "a2q"
    default_gradient = "clipped_ste"

    def __init__(self, accumulator_bits: int = 16, input_bits: int = 8, input_signed: bool = False,
                 num_bits: int = 8, axis: int = -1, bias_reserve: float = 1 / 16, rounding: str = "norm",
                 log_scale=None, log_norm=None, gradient=None):
        super().__init__(gradient)
        where = "AccumulatorAwareQuantizer"
        self.accumulator_bits = _check_num_bits(accumulator_bits, 2, 64, where, "accumulator_bits")
        self.input_bits = _check_num_bits(input_bits, 1, 32, where, "input_bits")
        self.input_signed = bool(input_signed)
        self.num_bits = _check_num_bits(num_bits, 2, 16, where)
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise TypeError(f"{where}: axis must be an int, got {axis!r}")
        self.axis = int(axis)
        if rounding not in ROUNDINGS:
            raise ValueError(f"{where}: rounding must be one of {ROUNDINGS}, got {rounding!r}")
        self.rounding = rounding
        self.bias_reserve = float(bias_reserve)
        self.bound = l1_bound(self.accumulator_bits, self.input_bits, self.input_signed, self.bias_reserve)
        self.qmax = (1 << (self.num_bits - 1)) - 1
        self.log_scale = None if log_scale is None else np.asarray(log_scale, np.float32).reshape(-1)
        self.log_norm = None if log_norm is None else np.asarray(log_norm, np.float32).reshape(-1)
        self.bias_link = None          # set by constrain_accumulators(): clips the layer's bias into the headroom

    # -- parameters ----------------------------------------------------------------------------------
    def parameters(self):
        return {} if self.log_scale is None else {"log_scale": self.log_scale, "log_norm": self.log_norm}

    @property
    def input_max(self) -> int:
        """:math:`x_{max} = 2^{N - \\mathrm{signed}}`."""
        return 1 << (self.input_bits - int(self.input_signed))

    def _rows(self, x: np.ndarray) -> np.ndarray:
        """``x`` as [C, K]: channel axis first, the rest flattened."""
        axis = self.axis % x.ndim
        return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)

    def _unrows(self, rows: np.ndarray, shape) -> np.ndarray:
        axis = self.axis % len(shape)
        moved = (shape[axis],) + tuple(s for i, s in enumerate(shape) if i != axis)
        return np.moveaxis(rows.reshape(moved), 0, axis)

    def _init(self, v: np.ndarray) -> None:
        if self.log_scale is not None and self.log_scale.size == v.shape[0]:
            return
        vmax = np.maximum(np.abs(v).max(axis=1), 1e-8).astype(np.float64)
        norm = np.maximum(np.abs(v).sum(axis=1), 1e-8)
        scale = np.maximum(vmax / self.qmax, norm / max(self.bound, 1))   # q(v) starts as close to v as allowed
        self.log_scale = np.log(scale).astype(np.float32)
        self.log_norm = np.log(np.maximum(norm, 1e-12)).astype(np.float32)

    def _quantize(self, x: np.ndarray):
        """Everything of the forward pass on rows [C, K] (float64)."""
        v = self._rows(np.asarray(x, np.float64))
        self._init(v)
        s = np.exp(self.log_scale.astype(np.float64))
        g = np.exp(self.log_norm.astype(np.float64))
        n1 = np.maximum(np.abs(v).sum(axis=1), 1e-30)
        clamped = g >= s * self.bound
        g_hat = np.where(clamped, s * self.bound, g)
        u = v / n1[:, None]
        r = (g_hat / s)[:, None] * u
        q = np.clip(_round_within(r, self.bound, self.rounding), -self.qmax, self.qmax)
        return v, u, n1, s, g, g_hat, clamped, r, q

    # -- forward / backward --------------------------------------------------------------------------
    def _forward(self, x):
        _, u, n1, s, _, g_hat, clamped, r, q = self._quantize(x)
        self._ctx = (u, n1, s, g_hat, clamped, r, q)
        if self.bias_link is not None:
            self.bias_link.clip(q, s)
        return self._unrows(q * s[:, None], x.shape).astype(x.dtype if x.dtype.kind == "f" else np.float32)

    def _grads(self, dy, clipped: bool):
        u, n1, s, g_hat, clamped, r, q = self._ctx
        d = self._rows(np.asarray(dy, np.float64))
        dr = d * s[:, None]
        if clipped:
            dr = dr * (np.abs(r) <= self.qmax)
        dg_hat = (dr * u).sum(axis=1) / s
        ds = (d * q).sum(axis=1) - (dr * r).sum(axis=1) / s + np.where(clamped, self.bound * dg_hat, 0.0)
        dg = np.where(clamped, 0.0, dg_hat)
        a = dr * (g_hat / s)[:, None]
        dv = (a - np.sign(u) * (a * u).sum(axis=1, keepdims=True)) / n1[:, None]
        return dv, ds, dg

    def _ste(self, dy):
        return self._unrows(self._grads(dy, False)[0], dy.shape)

    def _clipped_ste(self, dy):
        return self._unrows(self._grads(dy, True)[0], dy.shape)

    def _parameter_grads(self, dy):
        _, ds, dg = self._grads(dy, self.gradient == "clipped_ste")
        s = np.exp(self.log_scale.astype(np.float64))
        g = np.exp(self.log_norm.astype(np.float64))
        return {"log_scale": (ds * s).astype(np.float32), "log_norm": (dg * g).astype(np.float32)}

    def scale_grads(self, ds: np.ndarray) -> dict:
        """Gradients of the parameters for a gradient ``ds`` on the per-channel scale (what
        :class:`fxpsim.hardware.qat.DatapathAware` hands over for saturated sums)."""
        if self.log_scale is None:
            return {}
        ds = np.asarray(ds, np.float64)
        if ds.size != self.log_scale.size:
            ds = np.full(self.log_scale.size, ds.sum() / self.log_scale.size)
        return {"log_scale": (ds * np.exp(self.log_scale.astype(np.float64))).astype(np.float32)}

    # -- integer form, config ------------------------------------------------------------------------
    def _integer_form(self, x):
        parts = self._quantize(x)
        s, q = parts[3], parts[-1]
        codes = self._unrows(q, x.shape).astype(np.int64)
        shape = [1] * x.ndim
        shape[self.axis % x.ndim] = s.size
        return IntegerForm(codes, s.astype(np.float32).reshape(shape), np.zeros(shape, np.int64), -self.qmax,
                           self.qmax, self.axis % x.ndim)

    def l1_norms(self, x) -> np.ndarray:
        """:math:`\\lVert w_o \\rVert_1` of the integer codes of ``x``, per channel (all at most :attr:`bound`)."""
        return np.abs(self._quantize(x)[-1]).sum(axis=1).astype(np.int64)

    def _config(self):
        return {"accumulator_bits": self.accumulator_bits, "input_bits": self.input_bits,
                "input_signed": self.input_signed, "num_bits": self.num_bits, "axis": self.axis,
                "bias_reserve": self.bias_reserve, "rounding": self.rounding,
                "log_scale": None if self.log_scale is None else self.log_scale.tolist(),
                "log_norm": None if self.log_norm is None else self.log_norm.tolist()}



class _BiasLink:
    """Clips a layer's float bias so that its integer code fits the headroom the weights leave:
    :math:`|b_o^{int}| \\le 2^{P-1} - 1 - \\lVert w_o \\rVert_1 x_{max} - 1`, with
    :math:`b^{int} = b / (s_x s_{w,o})` and :math:`s_x` the input scale (the preceding quantizer's, or the
    network input's range over :math:`2^N - 1` codes)."""

    def __init__(self, layer, quantizer, input_quantizer=None, input_range=None):
        self.layer, self.quantizer = layer, quantizer
        self.input_quantizer, self.input_range = input_quantizer, input_range

    def input_scale(self) -> float:
        if self.input_quantizer is not None:
            form = self.input_quantizer.integer_form(np.zeros(1, np.float32))
            return float(np.float32(np.asarray(form.scale, np.float64).reshape(-1)[0]))
        lo, hi = min(self.input_range[0], 0.0), max(self.input_range[1], 0.0)
        return float(np.float32((hi - lo) / ((1 << self.quantizer.input_bits) - 1)))

    def clip(self, q: np.ndarray, s_w: np.ndarray) -> None:
        b = self.layer.b
        if b is None:
            return
        qz = self.quantizer
        headroom = ((1 << (qz.accumulator_bits - 1)) - 1) - np.abs(q).sum(axis=1) * qz.input_max - 1
        limit = np.maximum(headroom, 0) * self.input_scale() * s_w
        if b.size != limit.size:                 # depthwise with a depth multiplier: per input channel
            limit = np.repeat(limit, b.size // limit.size)
        np.clip(b, -limit, limit, out=b)


_LINEAR = ("Dense", "Conv2D", "DepthwiseConv2D")
_KEEP_CODES = ("Flatten", "ReLU", "ReLU6", "Quantize", "MaxPool2D", "AvgPool2D")   # outputs on the input's grid


def _input_grid_bits(q):
    """``(N, signed)`` of a quantizer's codes: N the width of its code range, ``signed`` when every code minus
    the zero point lies within :math:`\\pm 2^{N-1}` (a symmetric grid, whatever the code offset)."""
    try:
        form = q.integer_form(np.zeros(1, np.float32))
    except (NotImplementedError, RuntimeError, ValueError, TypeError):
        return None
    zp = np.asarray(form.zero_point).reshape(-1)
    if zp.size != 1:
        return None
    z = int(np.round(zp[0]))
    bits = max((int(form.quant_max) - int(form.quant_min)).bit_length(), 1)
    signed = max(z - int(form.quant_min), int(form.quant_max) - z) <= 1 << (bits - 1)
    return bits, signed


def constrain_accumulators(model, accumulator_bits: int, *, input_range=None, calibration_x=None,
                           input_bits: int = 8, num_bits: int = 8, bias_reserve: float = 1 / 16,
                           rounding: str = "norm"):
    """Give every Dense/Conv2D/DepthwiseConv2D of ``model`` an :class:`AccumulatorAwareQuantizer` for
    ``accumulator_bits`` (in place; returns ``model``), replacing its weight quantizer.

    Each layer's input width and signedness come from the activation quantizer before it (the first layer:
    ``input_bits`` unsigned codes of ``input_range`` or of the min/max of ``calibration_x``, as the converter
    calibrates the network input); its bias is clipped on every forward pass into the headroom its weights
    leave (module docstring), so the converted integer network never overflows a ``accumulator_bits``-bit
    accumulator, whatever its input. Activation quantizers must be per tensor. A layer that already has an
    accumulator-aware quantizer for the same widths keeps it (trained scale and norm) and is only linked to
    its bias again: call this after :func:`fxpsim.nn.train.load_model` (the link is not saved).
    """
    # layers are recognised by class name: this module sits below fxpsim.nn and does not import it
    if not hasattr(model, "layers"):
        raise TypeError(f"accumulator_aware expects a Sequential, got {type(model).__name__}")
    layers = list(model.layers)
    if any(type(layer).__name__ == "BatchNorm" for layer in layers):
        raise ValueError("constrain_accumulators: batch norm would be folded into the weights after the l1 constraint; "
                         "train without it")
    if input_range is None and calibration_x is not None:
        input_range = (float(np.min(calibration_x)), float(np.max(calibration_x)))
    current = None
    for i, layer in enumerate(layers):
        kind = type(layer).__name__
        if kind in _LINEAR:
            if current is None and input_range is None:
                raise ValueError(f"constrain_accumulators: layer {i} has no activation quantizer before it; give "
                                 "input_range or calibration_x for the network input")
            if current is not None:
                grid = _input_grid_bits(current)
                if grid is None:
                    raise ValueError(f"constrain_accumulators: the quantizer before layer {i} has no per-tensor "
                                     "integer form")
                n_bits, signed = grid
            else:
                n_bits, signed = input_bits, False
            q = layer.weight_quantizer
            if not (isinstance(q, AccumulatorAwareQuantizer) and q.accumulator_bits == accumulator_bits
                    and q.input_bits == n_bits and q.input_signed == signed):
                q = AccumulatorAwareQuantizer(accumulator_bits, n_bits, signed, num_bits=num_bits,
                                              axis=2 if kind == "DepthwiseConv2D" else -1,
                                              bias_reserve=bias_reserve, rounding=rounding)
                layer.weight_quantizer = q
                layer._grads = {}
            q.bias_link = _BiasLink(layer, q, current, input_range if current is None else None)
            current = layer.activation_quantizer
        elif getattr(layer, "activation_quantizer", None) is not None:
            current = layer.activation_quantizer
        elif kind not in _KEEP_CODES:
            current = None
    return model


def worst_case_sums(weights: np.ndarray, bias, x_lo: int, x_hi: int) -> np.ndarray:
    """Adversarial input rows for a [K, O] integer weight matrix: for each output, the input in
    ``[x_lo, x_hi]^K`` that drives its sum highest (:math:`x_k = x_{hi}` where :math:`w_k > 0`, else
    :math:`x_{lo}`) and lowest; returns [2 O, K] rows (feed them to the datapath with every output)."""
    w = np.asarray(weights)
    hi_rows = np.where(w.T > 0, x_hi, x_lo)
    lo_rows = np.where(w.T > 0, x_lo, x_hi)
    return np.concatenate([hi_rows, lo_rows]).astype(np.int64)


def _register() -> None:
    from .registry import register
    register(AccumulatorAwareQuantizer.name, AccumulatorAwareQuantizer)


_register()      # "a2q" in the quantizer registry (configs and saved models name it)

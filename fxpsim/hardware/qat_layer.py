"""The layer wrapper of overflow-aware QAT: :class:`DatapathAware`, a Dense/Conv2D/DepthwiseConv2D whose
forward pass runs through a target's accumulator, with its straight-through backward. The computation, the
gradients and their references are in :mod:`fxpsim.hardware.qat`, which also wraps whole models.
"""
from __future__ import annotations

import types

import numpy as np

from ..nn import repro
from ..nn import conv as _conv
from ..nn.conv import Conv2D, DepthwiseConv2D
from ..nn.layers import Dense
from ..nn.module import FusedActivation, Module, check_layer_input
from .qat_grid import _code_range, _fit, _grid_fits, _model_layout, _offset, _out_first, integer_grid

__all__ = ["DatapathAware", "OVERFLOW_GRADIENTS"]

OVERFLOW_GRADIENTS = ("mask", "final", "pass")
# datapath knobs of HardwareConfig this module reproduces only at these values (zero-point folding, K-tiling,
# products rounded onto a fractional accumulator LSB, a shifted bias register)
_PLAIN_KNOBS = {"zero_point": "subtract", "tile_k": None, "accumulator_frac_bits": None, "bias_shift": 0}
_KINDS = {Dense: "dense", Conv2D: "conv2d", DepthwiseConv2D: "depthwise_conv2d"}
_OPS = {"dense": "fully_connected", "conv2d": "conv2d", "depthwise_conv2d": "depthwise_conv2d"}


def _load_config(config):
    from .config import load_config   # the target's description (imported when used)
    return load_config(config)


class DatapathAware(Module):
    """A Dense/Conv2D/DepthwiseConv2D whose forward pass runs through a target's accumulator.

    See :mod:`fxpsim.hardware.qat` for the forward computation and the straight-through backward.

    Parameters
    ----------
    layer : Dense, Conv2D or DepthwiseConv2D
        The layer (shared, not copied: its parameters are trained in place and keep their names).
    config : HardwareConfig, preset name, TOML path or mapping
        The target. Per-node overrides (``layers=``) apply through ``config.for_node`` for ``node_name``.
    input_quantizer : quantizer, optional
        The activation quantizer whose range defines this layer's input codes (the previous layer's
        ``activation_quantizer``; :func:`datapath_aware` finds it). Without one, ``input_range`` is used.
    input_range : (lo, hi), optional
        Real range of the network input when this is the first layer and there is no input quantizer
        (what :func:`fxpsim.hardware.convert` calibrates from data, e.g. ``(0.0, 1.0)`` for the digits).
    overflow_grad : {"mask", "final", "pass"}
        The straight-through rule at the accumulator's overflow (:mod:`fxpsim.hardware.qat`).
    weights : {"hardware", "quantizer"}
        Integer weights as the converter stores them (default) or as the weight quantizer's integer form.
    overflow_penalty : float
        :math:`\\lambda` of the overflow penalty (0: none); ``penalty_margin`` its :math:`m` in (0, 1].
    scale_grad : bool
        Hand the saturated sums' gradient to the weight quantizer's scale (:mod:`fxpsim.hardware.qat`).
    node_name, node_index : str, int, optional
        The node this layer becomes in the converted graph (``"<layer index>:<kind>"``), for per-node
        overrides of ``config``.
    threads : int or None
        Threads of the datapath kernels (1: training runs on one core, as :func:`fxpsim.nn.train.fit`).

    After each forward, ``overflows`` holds the adds that overflowed and ``overflowed_outputs`` the number of
    outputs with at least one; ``outputs`` the number of outputs.
    """

    def __init__(self, layer, config, *, input_quantizer=None, input_range=None, overflow_grad="mask",
                 weights="hardware", overflow_penalty=0.0, penalty_margin=1.0, scale_grad=True, node_name=None,
                 node_index=None, threads=1):
        super().__init__()
        kind = _KINDS.get(type(layer))
        if kind is None:
            raise TypeError(f"DatapathAware wraps Dense, Conv2D or DepthwiseConv2D, got {type(layer).__name__}")
        if overflow_grad not in OVERFLOW_GRADIENTS:
            raise ValueError(f"overflow_grad must be one of {OVERFLOW_GRADIENTS}, got {overflow_grad!r}")
        if weights not in ("hardware", "quantizer"):
            raise ValueError(f"weights must be 'hardware' or 'quantizer', got {weights!r}")
        if weights == "quantizer" and layer.weight_quantizer is None:
            raise ValueError("weights='quantizer' needs a layer with a weight quantizer")
        if input_quantizer is None and input_range is None:
            raise ValueError("DatapathAware: give input_quantizer (the activation quantizer before this layer) "
                             "or input_range (the real range of the network input)")
        self.layer, self.kind = layer, kind
        self.base_config = _load_config(config)
        self.node_name = node_name if node_name is not None else f"?:{kind}"
        self.node_index = node_index if node_index is not None else -1
        node = types.SimpleNamespace(name=self.node_name, op=_OPS[kind])
        self.config = self.base_config.for_node(node, self.node_index) if node_name is not None else \
            self.base_config
        for knob, default in _PLAIN_KNOBS.items():
            if getattr(self.config, knob, default) != default:
                raise NotImplementedError(
                    f"DatapathAware: the datapath knob {knob} = {getattr(self.config, knob)!r} is not simulated in "
                    f"training yet (only {knob} = {default!r}); train for the plain datapath and check the result "
                    "with fxpsim.simulate")
        self.input_quantizer = input_quantizer
        self.input_range = None if input_range is None else (float(input_range[0]), float(input_range[1]))
        self.overflow_grad, self.weights, self.threads = overflow_grad, weights, threads
        if not overflow_penalty >= 0:
            raise ValueError(f"overflow_penalty must be >= 0, got {overflow_penalty!r}")
        self.overflow_penalty = float(overflow_penalty)
        self.scale_grad = bool(scale_grad)
        if not 0 < penalty_margin <= 1:
            raise ValueError(f"penalty_margin must be in (0, 1], got {penalty_margin!r}")
        self.penalty_margin = float(penalty_margin)
        self.dtype = layer.dtype
        self.overflows = self.overflowed_outputs = self.outputs = 0

    # -- module plumbing: the wrapped layer's parameters, under the same names --------------------------
    def parameters_and_grads(self, with_grads=True, prefix="", params=None, grads=None):
        return self.layer.parameters_and_grads(with_grads, prefix, params, grads)

    def buffers(self):
        return self.layer.buffers()

    def zero_grad(self):
        self.layer.zero_grad()

    def train(self, mode=True):
        self.training = bool(mode)
        self.layer.train(mode)
        return self

    def astype(self, dtype):
        self.layer.astype(dtype)
        self.dtype = self.layer.dtype
        return self

    def get_config(self):
        return {"layer": {"class": type(self.layer).__name__, "config": self.layer.get_config()},
                "config": self.base_config.name, "overflow_grad": self.overflow_grad, "weights": self.weights,
                "node_name": self.node_name}

    def __repr__(self):
        c = self.config
        return (f"DatapathAware({self.layer!r}, acc{c.accumulator_bits} {c.accumulator_overflow.value}, "
                f"overflow_grad={self.overflow_grad!r})")

    # -- integer operands -------------------------------------------------------------------------------
    def input_params(self) -> tuple[float, int, int]:
        """``(scale, lo, hi)`` of this layer's input on the target: :math:`\\tilde x = c_x - z_x` lies in
        ``[lo, hi]`` and :math:`\\hat x = s\\, \\tilde x`.

        On the preceding quantizer's trained grid when the target can hold it (the same width; as
        :func:`fxpsim.hardware.convert` does), otherwise :func:`fxpsim.hardware.activation_params` of the real
        range (the quantizer's, or ``input_range``) under the target's activation format, clipped to the
        quantizer's range.
        """
        from .conversion import activation_params
        cfg = self.config
        grid = integer_grid(self.input_quantizer) if self.input_quantizer is not None else None
        t_lo, t_hi = _code_range(cfg.activation_bits, cfg.activation_signed)
        if grid is not None and grid["scale"].size == 1:
            s_q, z_q = float(grid["scale"][0]), int(grid["zero_point"][0])
            if _grid_fits(grid, cfg.activation_bits, cfg.activation_signed, cfg) and not (cfg.activation_symmetric and
                                                                     _offset(grid, cfg.activation_bits,
                                                                             cfg.activation_signed) + z_q != 0):
                return float(np.float32(s_q)), grid["quant_min"] - z_q, grid["quant_max"] - z_q
            rng = (s_q * (grid["quant_min"] - z_q), s_q * (grid["quant_max"] - z_q))
        elif self.input_range is not None:
            rng = self.input_range
        else:
            raise ValueError(f"{self.node_name}: the input quantizer has no per-tensor integer form; give input_range")
        scale, zp = activation_params(*rng, cfg)
        lo, hi = t_lo - zp, t_hi - zp
        if grid is not None:                        # codes clipped to the trained range
            lo = max(lo, int(np.ceil(rng[0] / scale - 1e-9)))
            hi = min(hi, int(np.floor(rng[1] / scale + 1e-9)))
        return scale, lo, hi

    def input_codes(self, x: np.ndarray, scale: float, lo: int, hi: int) -> np.ndarray:
        """:math:`c_x - z_x` of ``x`` (int16 for up to 15-bit activations), rounded as the graph's quantize."""
        from ..core.fixed import Format, from_float
        codes = from_float(x.astype(np.float64) / scale, Format.integer(62), rounding=self.config.rounding).raw
        return np.clip(codes, lo, hi).astype(np.int16 if max(-lo, hi) < 1 << 15 else np.int32)

    def integer_weights(self, w_hat: np.ndarray, s_in: float):
        """``(w_int in the model layout, per-output-channel scale, bias codes)`` on the target.

        ``weights="hardware"``: the weight quantizer's trained grid (its ``integer_form``) when the target
        stores it (same width, per-channel scales only on a per-channel target, power-of-two scales for
        ``shift``), else the target's rule (:func:`fxpsim.hardware.quantize_weights` of :math:`\\hat W`), as
        :func:`fxpsim.hardware.convert` decides; ``weights="quantizer"``: the integer form, always.
        """
        from ..core.fixed import Format, from_float
        layer, cfg, kind = self.layer, self.config, self.kind
        w_oc = _out_first(kind, w_hat.astype(np.float64))
        n_out = w_oc.shape[0]
        grid = integer_grid(layer.weight_quantizer, layer.W)
        usable = grid is not None and grid["scale"].size in (1, grid["codes"].shape[grid["axis"]] if
                                                             grid["axis"] is not None else 1)
        if usable and self.weights == "hardware":
            usable = _grid_fits(grid, cfg.weight_bits, cfg.weight_signed, cfg) and cfg.weight_format is None and not (
                grid["scale"].size > 1 and cfg.weight_scales == "per-tensor" and np.ptp(grid["scale"]) > 0)
        if self.weights == "quantizer" and not usable:
            raise ValueError(f"{self.node_name}: the weight quantizer has no per-tensor or per-channel integer form")
        if usable:
            values = grid["codes"] - grid["zero_point_full"]
            w_int = _out_first(kind, values)
            scale = grid["scale"].astype(np.float32).astype(np.float64)
            if scale.size > 1 and kind == "depthwise_conv2d" and scale.size != n_out:
                scale = np.repeat(scale, n_out // scale.size)
            s_w = np.broadcast_to(scale, (n_out,)).copy()
        else:
            from .conversion import quantize_weights
            codes, s_w, zp = quantize_weights(w_oc, cfg)
            w_int = codes - zp.reshape((-1,) + (1,) * (codes.ndim - 1))
        bias = np.zeros(n_out) if layer.b is None else layer.b.astype(np.float64)
        b_int = from_float(bias / (s_in * s_w), Format.integer(cfg.bias_bits), rounding=cfg.rounding,
                           overflow="saturate").raw
        w_int = _model_layout(kind, w_int, layer.W.shape)
        return w_int.astype(np.int16 if np.abs(w_int).max(initial=0) < 1 << 15 else np.int32), s_w, b_int

    # -- forward / backward -----------------------------------------------------------------------------
    def _accumulate_codes(self, xi, w_int, b_int, acc=True):
        """Accumulator codes and per-output overflow counts of the layer on the target (``acc=False``:
        the exact sums, no overflow)."""
        from ..datapath.accumulate import conv2d, matmul
        cfg, layer = self.config, self.layer
        bits = cfg.accumulator_bits
        preload = cfg.bias_add == "preload" or cfg.overflow_at == "end"
        if acc and cfg.overflow_at != "end":        # a bias wider than the accumulator saturates into it
            b_int = np.clip(b_int, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        kw = {"per_output": True, "threads": self.threads}
        if acc:
            kw.update(overflow=cfg.accumulator_overflow.value, order=cfg.accumulator_order,
                      overflow_at="end" if cfg.overflow_at == "end" else "every")
        if self.kind == "dense":
            shape = xi.shape[:-1] + (w_int.shape[1],)
            init = np.broadcast_to(b_int, shape) if preload or not acc else None
            res, counts = matmul(xi, w_int, bits if acc else None, init=init, **kw)
        else:
            n = xi.shape[0]
            (oh, ow), _pads = _conv._pads(xi.shape, layer.kernel_size, layer.stride, layer.padding)
            if self.kind == "conv2d":
                wk, groups = w_int, 1
            else:
                kh, kwd, c, m = w_int.shape
                wk, groups = w_int.reshape(kh, kwd, 1, c * m), c
            shape = (n, oh, ow, wk.shape[3])
            init = np.broadcast_to(b_int, shape) if preload or not acc else None
            res, counts = conv2d(xi, wk, bits if acc else None, stride=layer.stride, padding=layer.padding,
                                 groups=groups, init=init, **kw)
        codes = res.raw
        if acc and not preload:                      # bias added after the sum: one more fitted add
            codes, bad = _fit(codes + b_int, bits, cfg.accumulator_overflow.value)
            counts = counts + bad
        return codes, counts

    def forward(self, x):
        layer, kind = self.layer, self.kind
        trailing = (layer.in_features,) if kind == "dense" else \
            (None, None, layer.in_channels if kind == "conv2d" else layer.channels)
        check_layer_input(x, self.dtype, trailing, f"DatapathAware({type(layer).__name__}).forward")
        s_in, lo, hi = self.input_params()
        xi = self.input_codes(x, s_in, lo, hi)
        w_hat = layer.quantized_weight()
        w_int, s_w, b_int = self.integer_weights(w_hat, s_in)
        acc, counts = self._accumulate_codes(xi, w_int, b_int)
        bits = self.config.accumulator_bits
        self.overflows = int(counts.sum())
        self.overflowed_outputs = int(np.count_nonzero(counts))
        self.outputs = int(counts.size)
        self._keep = self._penalty_grad = self._z_rail = self._ds_penalty = None
        self._s_w, self._s_in = s_w, s_in
        limit = (1 << (bits - 1)) - 1
        mode = self.config.accumulator_overflow.value
        if self.training and self.overflowed_outputs and self.overflow_grad == "mask":
            self._keep = (counts == 0).astype(self.dtype)
        # what the backward multiplies with: the dequantized hardware weights (and the float input)
        s_model = s_w.reshape(w_int.shape[2], w_int.shape[3]) if kind == "depthwise_conv2d" else s_w
        self._w_hw = (w_int * s_model).astype(self.dtype)
        self._x_shape = x.shape
        if kind == "dense":
            self._x = x
        else:
            (oh, ow), pads = _conv._pads(x.shape, layer.kernel_size, layer.stride, layer.padding)
            self._pads, self._out_hw = pads, (oh, ow)
            kh, kw = layer.kernel_size
            patches = _conv.extract_patches(_conv.pad_nhwc(x, pads), (kh, kw), layer.stride)
            if kind == "conv2d":
                self._cols = patches.reshape(x.shape[0] * oh * ow, kh * kw * x.shape[3])
            else:
                self._patches = patches
        if self.training and self.overflow_grad == "final" and self.overflowed_outputs:
            exact, _ = self._accumulate_codes(xi, w_int, b_int, acc=False)
            inside = (exact >= -limit - 1) & (exact <= limit)
            if not inside.all():
                self._keep = inside.astype(self.dtype)
        if self.training and self.overflow_penalty:
            # P = lambda / N * sum relu(|a*| / L - m),  a* = z* / (s_x s_w):  dP/dz* and dP/ds_w, with the exact
            # sums a* from one float product of the dequantized operands (a regulariser: float32 is plenty)
            sums = self._float_sums(b_int) / (s_in * s_w).astype(np.float32)
            target = self.penalty_margin * limit
            if np.abs(sums).max() > target:
                over = np.where(np.abs(sums) > target, np.sign(sums), 0.0).astype(self.dtype)
                over /= limit * sums.shape[0]
                self._penalty_grad = (self.overflow_penalty * over / (s_in * s_w)).astype(self.dtype)
                self._ds_penalty = -self.overflow_penalty * (over * sums).reshape(-1, s_w.size).sum(
                    axis=0, dtype=np.float64) / s_w
        scale = (s_in * s_w).astype(np.float64)
        z = (acc * scale).astype(self.dtype)
        if self.training and self.scale_grad and self.overflowed_outputs and self.overflow_grad != "pass" and \
                mode in ("saturate", "saturate_symmetric", "error"):
            # a sum at the rail is z = s_x s_w (+-L): it grows with the weight scale (PACT's clip gradient)
            rail = (acc >= limit) | (acc <= (-limit if mode == "saturate_symmetric" else -limit - 1))
            self._z_rail = np.where(rail, z, 0).astype(self.dtype)
        y, self._act_mask = FusedActivation.forward(z, layer.activation)
        return y if layer.activation_quantizer is None else layer.activation_quantizer(y)

    def backward(self, dy, input_grad=True):
        layer = self.layer
        if layer.activation_quantizer is not None:
            dy = layer._quantizer_backward("activation_quantizer", dy)
        dz = FusedActivation.backward(dy, self._act_mask)
        if self.scale_grad and (self._z_rail is not None or self._ds_penalty is not None):
            ds = np.zeros(self._s_w.size) if self._ds_penalty is None else self._ds_penalty
            if self._z_rail is not None:
                ds = ds + (dz * self._z_rail).reshape(-1, self._s_w.size).sum(axis=0, dtype=np.float64) / self._s_w
            self._scale_backward(ds)
        if self._keep is not None:
            dz = dz * self._keep
        if self._penalty_grad is not None:
            dz = dz + self._penalty_grad
        if layer.b is not None:
            layer._accumulate("b", dz.reshape(-1, dz.shape[-1]).sum(axis=0))
        if self.kind == "dense":
            layer._weight_grad(repro.matmul(self._x.T, dz))
            return repro.matmul(dz, self._w_hw.T) if input_grad else None
        if self.kind == "conv2d":
            dx, dw = _conv.conv2d_backward(dz, self._cols, self._w_hw, self._x_shape, layer.stride, self._pads,
                                           input_grad)
        else:
            dx, dw = _conv.depthwise_conv2d_backward(dz, self._patches, self._w_hw, self._x_shape, layer.stride,
                                                     self._pads, input_grad)
        layer._weight_grad(dw)
        return dx


    def _float_sums(self, b_int) -> np.ndarray:
        """:math:`z^* + s_x s_w b^{int}` in float32 from the cached input and dequantized hardware weights."""
        layer = self.layer
        if self.kind == "dense":
            z = repro.matmul(self._x, self._w_hw)
        elif self.kind == "conv2d":
            z = repro.matmul(self._cols, self._w_hw.reshape(-1, self._w_hw.shape[3]))
        else:
            z = np.einsum("nhwabc,abcm->nhwcm", self._patches, self._w_hw, optimize=True)
        z = z.reshape(self._x_shape[0], -1, self._s_w.size) if self.kind != "dense" else z
        bias = (b_int * self._s_in * self._s_w).astype(self.dtype)
        out = z + bias
        shape = (self._x_shape[0],) + ((layer.out_features,) if self.kind == "dense" else
                                       tuple(self._out_hw) + (self._s_w.size,))
        return out.reshape(shape)

    def _scale_backward(self, ds: np.ndarray) -> None:
        """Hand :math:`\\partial L / \\partial s_{w,o}` (per output channel) to the weight quantizer's scale
        parameters: a learnable ``AffineQuantizer``'s ``scale``, a learnable ``FakeQuant``'s range
        (:math:`s = (b - a)/(q_{max} - q_{min})`), or a quantizer's own ``scale_grads(ds)``; others ignore it."""
        q, layer = self.layer.weight_quantizer, self.layer
        if q is None:
            return
        params = q.parameters()
        hook = getattr(q, "scale_grads", None)
        if hook is not None:
            grads = hook(ds)
        elif type(q).__name__ == "FakeQuant" and params:
            n = (1 << q.num_bits) - 1 - int(q.narrow_range)
            d = ds if q.max.size == ds.size else ds.sum()
            grads = {"max": d / n, "min": -d / n}
        elif type(q).__name__ == "AffineQuantizer" and params:
            grads = {"scale": ds if q.scale.size == ds.size else ds.sum()}
        else:
            return
        for name, g in grads.items():
            if name in params:
                layer._accumulate(f"weight_quantizer.{name}",
                                  np.asarray(g, dtype=params[name].dtype).reshape(params[name].shape), owned=False)

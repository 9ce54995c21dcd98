"""Conversion of a trained model to an integer network, and the integer network's forward pass.

:func:`convert` quantizes a :class:`~fxpsim.float_graph.FloatGraph` (or a model, extracted on the way) under
a :class:`~fxpsim.hardware_config.HardwareConfig`: weight codes, scales and zero points
(:func:`quantize_weights`), activation scales and zero points (:func:`activation_params`), integer biases in
the accumulator's scale, and each linear layer's requantizer (:func:`layer_requantizer`). The result, an
:class:`IntegerNetwork` of :class:`IntegerLayer`\\ s, runs input codes through the integer layer kernels of
:mod:`fxpsim.integer_layers` with the configured accumulator width, overflow mode, summation order and bias
placement (:meth:`IntegerNetwork.run`), bit for bit as the target hardware does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.fixed import Format
from ..graph.extract import _LINEAR_KINDS, FloatGraph, FloatStage, extract
from .config import ConfigError, HardwareConfig, load_config

__all__ = ["convert", "IntegerNetwork", "IntegerLayer", "activation_params", "quantize_weights",
           "layer_requantizer"]


@dataclass
class IntegerLayer:
    """One stage of the integer network (TFLite tensor layouts; codes as int64 arrays).

    ``weight``: dense [O, K], conv [O, KH, KW, C], depthwise [1, KH, KW, C*M]; ``bias`` int [O] in the
    accumulator's scale; ``requant`` a :class:`fxpsim.requantize.Requantizer`; ``act_min``/``act_max`` the
    output clamp (fused activation); input/output ``scale`` and ``zero_point`` as TFLite's tensors.
    """

    kind: str
    name: str
    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    act_min: int
    act_max: int
    weight: Any = None
    weight_scale: Any = None
    weight_zero_point: Any = 0
    bias: Any = None
    requant: Any = None
    activation: str | None = None
    stride: tuple = (1, 1)
    padding: str = "VALID"
    pool_size: tuple = (1, 1)
    macs: int = 0


@dataclass
class IntegerNetwork:
    """A converted network: integer layers plus the input quantization and the datapath settings."""

    config: HardwareConfig
    layers: list
    input_scale: float
    input_zero_point: int
    qmin: int
    qmax: int

    @property
    def code_dtype(self):
        return _code_dtype(self.config.activation_bits, self.config.activation_signed)

    def quantize_input(self, x) -> np.ndarray:
        """Input codes :math:`\\mathrm{clamp}(\\mathrm{round}(x / s) + z, q_{min}, q_{max})`."""
        from ..core.fixed import from_float
        x = np.asarray(x, dtype=np.float64)
        codes = from_float(x / self.input_scale, Format.integer(62), rounding=self.config.rounding).raw
        return np.clip(codes + self.input_zero_point, self.qmin, self.qmax).astype(self.code_dtype)

    def run(self, codes, trace: bool = False, batch_size: int = 256):
        """Run input codes through every layer: output codes, or ``(codes, per-layer traces)``.

        A trace is ``{"out": output codes, "hw_acc": the accumulator codes the requantizer saw (None for
        layers without an accumulator), "overflows": accumulator overflow events, "clipped": outputs clamped
        by the output range (not counting a fused ReLU's floor), "adds": accumulator additions}``.
        """
        if not trace and len(codes) > batch_size:  # cache-sized chunks: same bits, less memory traffic
            return np.concatenate([self.run(codes[i:i + batch_size], batch_size=batch_size)
                                   for i in range(0, len(codes), batch_size)])
        traces = []
        h = codes
        for layer in self.layers:
            h, info = _run_layer(layer, h, self.config, self.qmin, self.qmax, trace)
            if trace:
                traces.append(info)
        return (h, traces) if trace else h

    def predict(self, x) -> np.ndarray:
        """Dequantized outputs (logits) of the hardware for float inputs ``x``."""
        last = self.layers[-1]
        out = self.run(self.quantize_input(x)).astype(np.float64)
        return (out - last.output_zero_point) * last.output_scale


def _code_dtype(bits: int, signed: bool):
    if bits <= 8:
        return np.int8 if signed else np.uint8
    return np.int16 if signed else np.uint16


def _code_range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _round_half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _pow2_ceil(v: np.ndarray) -> np.ndarray:
    return np.exp2(np.ceil(np.log2(v)))


def activation_params(lo: float, hi: float, config: HardwareConfig) -> tuple[float, int]:
    """Scale (float32) and zero point of an activation tensor with real range ``[lo, hi]``.

    Asymmetric: :math:`s = (hi - lo)/(q_{max} - q_{min})`, :math:`z = \\mathrm{clamp}(q_{min} -
    \\mathrm{round}(lo / s))` (round half away) (the range is first widened to hold 0, as TFLite's converter does);
    symmetric: :math:`s = \\max(|lo|, |hi|) / q_{max}`, :math:`z = 0`. With the ``shift`` scheme the scale
    is rounded up to a power of two; a fixed ``activation_format`` gives :math:`s = 2^{-f}`, :math:`z = 0`.
    """
    qmin, qmax = _code_range(config.activation_bits, config.activation_signed)
    if config.activation_format is not None:
        return float(config.activation_format.lsb), 0
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-12:
        hi = lo + 1.0  # a constant tensor (e.g. a dead ReLU layer): any scale represents it
    if config.activation_symmetric:
        scale = (max(-lo, hi) if config.activation_signed else hi) / qmax  # unsigned: negatives clip to 0
        if "shift" in _schemes(config):
            scale = float(_pow2_ceil(np.float64(scale)))
        return float(np.float32(scale)), 0
    scale = (hi - lo) / (qmax - qmin)
    if "shift" in _schemes(config):
        scale = float(_pow2_ceil(np.float64(scale)))
    scale = float(np.float32(scale))
    zp = int(np.clip(qmin - _round_half_away(lo / scale), qmin, qmax))
    return scale, zp


def quantize_weights(w_oc: np.ndarray, config: HardwareConfig):
    """Integer weight codes, scales and zero points; ``w_oc`` has the output channel on axis 0.

    Signed (symmetric) per channel :math:`c`: :math:`s_c = \\max|w_c| / q_{max}`,
    :math:`q = \\mathrm{clamp}(\\mathrm{round}(w / s_c), -q_{max}, q_{max})` (narrow range; ``-q_max - 1``
    allowed otherwise). Unsigned: :math:`s_c = (\\max w_c - \\min w_c)/(2^b - 1)` with a zero point.
    ``per-tensor`` uses one scale; ``shift`` rounds scales up to powers of two; a ``weight_format`` fixes
    :math:`s = 2^{-f}`.
    """
    from ..core.fixed import from_float
    bits, signed = config.weight_bits, config.weight_signed
    qmin, qmax = _code_range(bits, signed)
    if signed and config.weight_narrow_range:
        qmin = -qmax
    n_out = w_oc.shape[0]
    flat = w_oc.reshape(n_out, -1)
    if config.weight_scales == "per-tensor":
        flat_all = flat.reshape(1, -1)
        wmin, wmax = np.full(n_out, flat_all.min()), np.full(n_out, flat_all.max())
    else:
        wmin, wmax = flat.min(axis=1), flat.max(axis=1)
    if config.weight_format is not None:
        scale = np.full(n_out, config.weight_format.lsb)
        zp = np.zeros(n_out, dtype=np.int64)
    elif signed:
        scale = np.maximum(np.maximum(-wmin, wmax), 1e-12) / qmax
        zp = np.zeros(n_out, dtype=np.int64)
    else:
        lo, hi = np.minimum(wmin, 0.0), np.maximum(wmax, 0.0)
        scale = np.maximum(hi - lo, 1e-12) / (qmax - qmin)
        zp = None
    if "shift" in _schemes(config) and config.weight_format is None:
        scale = _pow2_ceil(scale)
    scale = scale.astype(np.float32).astype(np.float64)
    if zp is None:
        zp = np.clip(qmin - _round_half_away(np.minimum(wmin, 0.0) / scale), qmin, qmax).astype(np.int64)
    shape = (n_out,) + (1,) * (w_oc.ndim - 1)
    codes = from_float(w_oc / scale.reshape(shape), Format.integer(62), rounding=config.rounding).raw
    codes = np.clip(codes + zp.reshape(shape), qmin, qmax)
    return codes, scale, zp


def convert(model, config, calibration_x=None) -> IntegerNetwork:
    """Convert a trained model (or a :class:`~fxpsim.float_graph.FloatGraph` from
    :func:`~fxpsim.float_graph.extract`) to an :class:`IntegerNetwork`.

    Batch norm is folded, weights are quantized per :func:`quantize_weights`, biases become integers in the
    accumulator's scale :math:`s_{in} s_{w,c}` (saturated to ``bias_bits``), activation ranges come from the
    model's quantizers or from ``calibration_x``, and each linear layer gets the requantizer of the
    configured scheme for :math:`M_c = s_{in} s_{w,c} / s_{out}`.
    """
    from ..core.fixed import from_float
    from ..datapath.requantize import activation_range
    config = load_config(config)
    if any(s.startswith("tflite") for s in _schemes(config)) and config.accumulator_bits > 32:
        raise ConfigError(f"accumulator.bits = {config.accumulator_bits}: the TFLite requantization schemes "
                          "use 32-bit gemmlowp arithmetic; allowed: 2..32, or requantization.scheme 'float'/'shift'")
    if isinstance(model, FloatGraph):
        graph = model
    else:
        if calibration_x is None:
            raise ValueError("convert: give calibration_x (float inputs used to calibrate activation ranges)")
        graph = extract(model, calibration_x)
    qmin, qmax = _code_range(config.activation_bits, config.activation_signed)
    dtype = _code_dtype(config.activation_bits, config.activation_signed)
    s_in, z_in = activation_params(*graph.input_range, config)
    layers = []
    s_cur, z_cur = s_in, z_in
    for st in graph.stages:
        if st.kind in _LINEAR_KINDS:
            w = st.weight
            if st.kind == "dense":
                w_oc = w.T                                     # [O, K]
            elif st.kind == "conv2d":
                w_oc = np.transpose(w, (3, 0, 1, 2))           # [O, KH, KW, C]
            else:
                kh, kw, c, m = w.shape
                w_oc = np.transpose(w.reshape(kh, kw, c * m), (2, 0, 1))[..., None]  # [C*M, KH, KW, 1]
            codes, w_scale, w_zp = quantize_weights(w_oc, config)
            if st.kind == "depthwise_conv2d":
                codes = np.transpose(codes[..., 0], (1, 2, 0))[None]  # [1, KH, KW, C*M]
            s_out, z_out = activation_params(*st.out_range, config)
            bias_scale = s_cur * w_scale
            bias = from_float(st.bias / bias_scale, Format.integer(config.bias_bits),
                              rounding=config.rounding, overflow="saturate").raw
            requant = layer_requantizer(config, st.kind, s_cur,
                                        w_scale if config.weight_scales == "per-channel" else w_scale[:1], s_out)
            act = st.activation if config.activation_clamp else None
            lo, hi = activation_range(act or "none", s_out, z_out, dtype)
            lo, hi = max(lo, qmin), min(hi, qmax)
            k = int(np.prod(w_oc.shape[1:]))
            out_elems = _stage_out_elems(st, graph)
            layers.append(IntegerLayer(st.kind, st.name, s_cur, z_cur, s_out, z_out, lo, hi,
                                       weight=codes.astype(_code_dtype(config.weight_bits, config.weight_signed)),
                                       weight_scale=w_scale, weight_zero_point=w_zp, bias=bias,
                                       requant=requant, activation=st.activation, stride=st.stride,
                                       padding=st.padding, macs=k * out_elems))
            s_cur, z_cur = s_out, z_out
        else:
            lo, hi = qmin, qmax
            if st.kind in ("relu", "relu6"):
                lo, hi = activation_range(st.kind, s_cur, z_cur, dtype)
                lo, hi = max(lo, qmin), min(hi, qmax)
            layers.append(IntegerLayer(st.kind, st.name, s_cur, z_cur, s_cur, z_cur, lo, hi,
                                       activation=st.kind if st.kind.startswith("relu") else None,
                                       stride=st.stride, padding=st.padding, pool_size=st.pool_size))
    net = IntegerNetwork(config, layers, s_in, z_in, qmin, qmax)
    return net


def _schemes(config: HardwareConfig) -> set:
    return {config.requantization, config.dense_requantization or config.requantization}


def layer_requantizer(config: HardwareConfig, kind: str, input_scale: float, weight_scales, output_scale: float):
    """The :class:`fxpsim.requantize.Requantizer` of a ``kind`` layer (``"dense"``, ``"conv2d"``, ...) under
    ``config`` for :math:`M_c = s_{in} s_{w,c} / s_{out}` (scales rounded to float32, as TFLite stores them)."""
    from ..datapath.requantize import Requantizer
    scheme = config.dense_requantization if kind == "dense" and config.dense_requantization else config.requantization
    kinds = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}
    return Requantizer.tflite(input_scale, weight_scales, output_scale, kind=kinds[scheme], rounding=config.rounding)


def _stage_out_elems(stage: FloatStage, graph: FloatGraph) -> int:
    """Output elements per sample of a linear stage (from a shape walk of the stages so far)."""
    shape = tuple(graph.input_shape)
    for st in graph.stages:
        shape = _out_shape(st, shape)
        if st is stage:
            return int(np.prod(shape))
    raise AssertionError("stage not in graph")  # pragma: no cover


def _out_shape(st: FloatStage, shape: tuple) -> tuple:
    from ..nn.conv import output_size_and_padding
    if st.kind == "dense":
        return (st.weight.shape[1],)
    if st.kind == "flatten":
        return (int(np.prod(shape)),)
    if st.kind in ("relu", "relu6"):
        return shape
    kernel = st.weight.shape[:2] if st.kind in ("conv2d", "depthwise_conv2d") else st.pool_size
    oh = output_size_and_padding(shape[0], kernel[0], st.stride[0], st.padding)[0]
    ow = output_size_and_padding(shape[1], kernel[1], st.stride[1], st.padding)[0]
    channels = {"conv2d": lambda: st.weight.shape[3],
                "depthwise_conv2d": lambda: st.weight.shape[2] * st.weight.shape[3]}.get(st.kind, lambda: shape[2])()
    return (oh, ow, channels)


def _run_layer(layer: IntegerLayer, h: np.ndarray, config: HardwareConfig, qmin: int, qmax: int, trace: bool):
    """One integer layer: (output codes, trace dict or None)."""
    from ..datapath.integer_ops import quantized_average_pool2d, quantized_conv2d, quantized_depthwise_conv2d, \
        quantized_fully_connected
    dtype = h.dtype
    info = None
    if layer.kind in _LINEAR_KINDS:
        common = dict(requant=layer.requant, x_zp=layer.input_zero_point, w_zp=layer.weight_zero_point
                      if np.any(layer.weight_zero_point) else 0, out_zp=layer.output_zero_point,
                      act_min=layer.act_min, act_max=layer.act_max, out_dtype=dtype,
                      acc=Format.integer(config.accumulator_bits), overflow=config.accumulator_overflow.value,
                      order=config.accumulator_order, bias_at="init" if config.bias_add == "preload" else "end")
        if config.overflow_at == "end":
            common.update(acc=Format.integer(62), overflow="wrap", requant=_identity_requant(),
                          act_min=None, act_max=None, out_dtype=np.int8)
        if layer.kind == "dense":
            res = quantized_fully_connected(h, layer.weight, layer.bias, **common)
        else:
            fn = quantized_conv2d if layer.kind == "conv2d" else quantized_depthwise_conv2d
            res = fn(h, layer.weight, layer.bias, stride=layer.stride, padding=layer.padding, **common)
        out, acc, overflows = res.out, res.acc, res.overflows
        if config.overflow_at == "end" or trace:
            pre, acc, overflows = _requantize_end(layer, acc, config, overflows)
            if config.overflow_at == "end":
                out = np.clip(pre, layer.act_min, layer.act_max).astype(dtype)
            if trace:
                info = {"out": out, "hw_acc": acc, "overflows": overflows,
                        "clipped": int(np.count_nonzero((pre > layer.act_max) if layer.activation else
                                                        (pre > layer.act_max) | (pre < layer.act_min))),
                        "adds": int(out.size) * (int(np.prod(layer.weight.shape[1:]))
                                                 + (config.bias_add == "after"))}
        return out, info
    if layer.kind == "max_pool2d":
        from ..nn.conv import extract_patches, output_size_and_padding, pad_nhwc
        _, top, bottom = output_size_and_padding(h.shape[1], layer.pool_size[0], layer.stride[0], layer.padding)
        _, left, right = output_size_and_padding(h.shape[2], layer.pool_size[1], layer.stride[1], layer.padding)
        windows = extract_patches(pad_nhwc(h, (top, bottom, left, right), np.iinfo(dtype).min),
                                  layer.pool_size, layer.stride)
        out = windows.max(axis=(3, 4))
    elif layer.kind == "avg_pool2d":
        res = quantized_average_pool2d(h, layer.pool_size, stride=layer.stride, padding=layer.padding,
                                       act_min=qmin, act_max=qmax, acc=Format.integer(min(config.accumulator_bits, 62)),
                                       overflow=config.accumulator_overflow.value)
        out = res.out
        if trace:
            info = {"out": out, "hw_acc": res.acc, "overflows": res.overflows, "clipped": 0,
                    "adds": int(out.size) * int(np.prod(layer.pool_size))}
        return out, info
    elif layer.kind == "flatten":
        out = h.reshape(h.shape[0], -1)
    else:  # relu / relu6 as separate integer ops
        out = np.clip(h, layer.act_min, layer.act_max).astype(dtype)
    if trace:
        info = {"out": out, "hw_acc": None, "overflows": 0, "clipped": 0, "adds": 0}
    return out, info


def _identity_requant():
    from ..datapath.requantize import Requantizer
    return Requantizer("shift", shift=(0,))


def _requantize_end(layer: IntegerLayer, acc: np.ndarray, config: HardwareConfig, overflows: int):
    """Pre-clamp output codes ``R(acc) + z``; with ``overflow_at="end"`` the wide sum is fitted first."""
    from ..core.fixed import FixedArray
    if config.overflow_at == "end":
        fitted = FixedArray(acc, Format.integer(62)).cast(Format.integer(config.accumulator_bits),
                                                          overflow=config.accumulator_overflow.value)
        overflows = int(fitted.overflows)
        acc = fitted.raw
    return layer.requant(acc, axis=-1) + layer.output_zero_point, acc, overflows

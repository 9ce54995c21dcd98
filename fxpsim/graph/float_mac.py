"""A MAC layer (dense or conv2d) on a float / block-scaled datapath: quantize, accumulate, rescale.

For a dense layer :math:`y = x W + b` (``x`` (M, K), ``W`` (K, N)) on :class:`FloatMacSettings`
(weight format, activation format, :class:`~fxpsim.datapath.floatacc.FloatAccumulator`):

1. **Operands.**  An element format ``F`` (E4M3, E5M2, E2M1, ...) has a power-of-two scale
   :math:`2^{e}`, :math:`e = \\lceil \\log_2(\\mathrm{amax} / F_{max}) \\rceil` (0 for amax 0; the rule
   of :class:`~fxpsim.quant.FloatQuantizer`): for the weights per output channel (``per-channel``) or
   per tensor, for the activations per tensor from the calibrated amax of the layer's input; ``"none"``
   (weights or activations) sets :math:`e = 0`, the values as they are: what a float32 / bfloat16 / float16
   FPU or tensor core runs.  The scale rule maps amax onto :math:`F_{max}`, so it is refused for a format
   whose :math:`F_{max}` is at least half the accumulator output's (float32 into float32, bfloat16 into
   float32, float16 into float16): its first product would overflow.  Codes are
   :math:`\\mathrm{fl}_F(v\\, 2^{-e})`, round half to even, saturating (values beyond :math:`F_{max}` are
   counted as ``saturated``).  A block format (MXFP8/6/4, NVFP4) quantizes along K with its own block
   scales (:func:`~fxpsim.core.block_format.quantize_block`; the activations' block scales follow the
   data, as MX hardware computes them); NVFP4's float32 tensor scale :math:`T` is applied outside.
   K is padded with zeros to a multiple of the accumulator's ``chunk`` and of the block size.
2. **Accumulation.**  :math:`D = \\mathrm{acc}(C;\\, A_{i1} B_{1j}, \\dots)` with
   :func:`~fxpsim.datapath.floatacc.float_matmul` on the codes (block scales passed to it), the bias
   preloaded as :math:`C_{ij} = \\mathrm{fl}_{out}(b_j / s_j)`, round half to even, with the outer scale
   :math:`s_j = 2^{e_x + e_{w,j}}\\, T_x T_w` (factors of 1 where absent).
3. **Output.**  :math:`y_{ij} = \\mathrm{decode}(D_{ij})\\, s_j` in float64 (exact for power-of-two
   ``s``); the caller applies the activation and re-quantizes to the next layer's format.

The **exact datapath** of the same layer is the same quantized operands and the same ``C`` summed
exactly (Kulisch) and rounded once into ``acc.output`` (:class:`FloatAccumulator` ``kind="exact"``,
round half to even): block-scaled operands enter it as their float32 values ``element x scale``
(always exact in float32).  :func:`float_mac` returns both, with the accumulator's counts.

A conv2d layer (NHWC ``x``, HWIO ``W``, stride, ``SAME``/``VALID``) is the dense layer on its im2col
rows (:func:`float_conv2d`); K runs over ``(kh, kw, c)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.block_format import BlockFormat, quantize_block
from ..core.float_codec import decode, encode
from ..core.float_format import FloatFormat
from ..datapath.floatacc import FloatAccumulator, float_matmul
from ..nn.conv import extract_patches, output_size_and_padding, pad_nhwc
from ..quant.float_quantizers import FloatQuantizer

__all__ = ["FloatMacSettings", "FloatMacResult", "float_mac", "float_conv2d", "WEIGHT_SCALES",
           "ACTIVATION_SCALES"]

WEIGHT_SCALES = ("per-channel", "per-tensor", "none")
ACTIVATION_SCALES = ("per-tensor", "none")
_F32 = FloatFormat.parse("float32")


@dataclass(frozen=True)
class FloatMacSettings:
    """What one MAC layer's datapath is: weight and activation formats, the accumulator.

    Parameters
    ----------
    weights, activations : FloatFormat or BlockFormat
    accumulator : FloatAccumulator
    weight_scales : {"per-channel", "per-tensor", "none"}
        The weights' power-of-two scale for an element format (block formats carry their own).
    activation_scales : {"per-tensor", "none"}
        The activations' power-of-two scale for an element format.
    """

    weights: FloatFormat | BlockFormat
    activations: FloatFormat | BlockFormat
    accumulator: FloatAccumulator
    weight_scales: str = "per-channel"
    activation_scales: str = "per-tensor"

    def __post_init__(self):
        for what in ("weights", "activations"):
            fmt = getattr(self, what)
            if not isinstance(fmt, (FloatFormat, BlockFormat)):
                raise TypeError(f"FloatMacSettings.{what} must be a FloatFormat or BlockFormat, "
                                f"got {type(fmt).__name__}")
            if isinstance(fmt, BlockFormat) and not isinstance(fmt.element, FloatFormat):
                raise ValueError(f"FloatMacSettings.{what}: {fmt.name} has integer elements; the float "
                                 f"datapath takes float elements (mxfp8/mxfp6/mxfp4/nvfp4)")
        if not isinstance(self.accumulator, FloatAccumulator):
            raise TypeError(f"FloatMacSettings.accumulator must be a FloatAccumulator, got "
                            f"{type(self.accumulator).__name__}")
        if self.weight_scales not in WEIGHT_SCALES:
            raise ValueError(f"FloatMacSettings.weight_scales must be one of {', '.join(WEIGHT_SCALES)}, "
                             f"got {self.weight_scales!r}")
        if self.activation_scales not in ACTIVATION_SCALES:
            raise ValueError(f"FloatMacSettings.activation_scales must be one of {', '.join(ACTIVATION_SCALES)}, "
                             f"got {self.activation_scales!r}")
        out = self.accumulator.output
        for what, scales in (("weights", self.weight_scales), ("activations", self.activation_scales)):
            fmt = getattr(self, what)
            if isinstance(fmt, BlockFormat) and scales == "none":
                raise ValueError(f"FloatMacSettings: {what} {fmt.name} carries its own block scales; "
                                 f"{what} scales 'none' does not apply to it")
            if isinstance(fmt, FloatFormat) and scales != "none" and 2 * fmt.max_finite >= out.max_finite:
                raise ValueError(f"FloatMacSettings: {what} {_name(fmt)} (largest {fmt.max_finite:.4g}) with a "
                                 f"{scales} scale: the scale maps amax onto it, and the products overflow the "
                                 f"accumulator's output {_name(out)} (largest {out.max_finite:.4g}); set "
                                 f"{what}.scales = \"none\" (the values as they are)")
        blocks = [f for f in (self.weights, self.activations) if isinstance(f, BlockFormat)]
        if len(blocks) == 2 and (blocks[0].block_size != blocks[1].block_size
                                 or blocks[0].scale_format != blocks[1].scale_format):
            raise ValueError(f"FloatMacSettings: weights {blocks[0].name} and activations {blocks[1].name} "
                             f"need the same block size and scale format (one scaled MMA reads both)")
        acc = self.accumulator
        if blocks:
            if acc.kind not in ("fused", "block"):
                raise ValueError(f"FloatMacSettings: block-scaled operands ({blocks[0].name}) need an "
                                 f"accumulator that reads block scales (kind 'fused' or 'block'), "
                                 f"got {acc.name or acc.kind!r}")
            if acc.block is not None and acc.block != blocks[0].block_size:
                raise ValueError(f"FloatMacSettings: accumulator {acc.name or acc.kind!r} reads a scale per "
                                 f"{acc.block} elements, {blocks[0].name} has blocks of {blocks[0].block_size}")
        elif acc.kind == "block" or acc.block is not None:
            raise ValueError(f"FloatMacSettings: accumulator {acc.name or acc.kind!r} expects block-scaled "
                             f"operands; weights {_name(self.weights)} and activations "
                             f"{_name(self.activations)} have none")

    @property
    def block(self) -> BlockFormat | None:
        return next((f for f in (self.weights, self.activations) if isinstance(f, BlockFormat)), None)


@dataclass
class FloatMacResult:
    """One MAC layer's outputs and counts.

    Attributes
    ----------
    values : ndarray (M, N) float64 -- the datapath's outputs (before the activation)
    exact : ndarray (M, N) float64 -- the exact datapath's outputs (same operands, Kulisch sum)
    overflows, nans, underflows, terms_inexact : int -- :class:`~fxpsim.datapath.floatacc.FloatMatmulResult`'s
        counts (``terms_inexact``: products whose alignment dropped nonzero bits)
    saturated : int -- weight and activation elements clamped to their format's largest value
    """

    values: np.ndarray
    exact: np.ndarray
    overflows: int = 0
    nans: int = 0
    underflows: int = 0
    terms_inexact: int = 0
    saturated: int = 0


def _name(fmt) -> str:
    return fmt.name or str(fmt)


@dataclass
class _Operand:
    codes: np.ndarray            # (rows, K) element codes, K along axis 1
    fmt: FloatFormat             # the element format
    scales: np.ndarray | None    # (rows, K / block) scale codes, or None
    outer: np.ndarray            # (rows,) factor applied outside the accumulator
    values: np.ndarray           # (rows, K) exact values element x block scale (without ``outer``)
    saturated: int


def _quantize(v: np.ndarray, fmt, per_row: bool, amax=None, unscaled: bool = False) -> _Operand:
    """``v`` (rows, K) quantized along K (module docstring, step 1); ``unscaled``: e = 0."""
    if isinstance(fmt, BlockFormat):
        q = quantize_block(v, fmt, axis=1)
        sf = fmt.scale_format
        values = decode(q.elements, fmt.element) * np.repeat(decode(q.scales, sf), fmt.block_size, axis=1)
        outer = np.full(v.shape[0], 1.0 if q.tensor_scale is None else float(q.tensor_scale))
        return _Operand(q.elements.astype(np.int64), fmt.element, q.scales.astype(np.int64), outer, values,
                        q.clamped)
    if unscaled:
        e = np.zeros((v.shape[0], 1))
    elif amax is not None:
        e = FloatQuantizer(fmt, scale="tensor")._exponent(np.array([float(amax)]))
        e = np.full((v.shape[0], 1), e.reshape(-1)[0])
    elif per_row:
        e = FloatQuantizer(fmt, scale="channel", axis=0)._exponent(v)
    else:
        e = FloatQuantizer(fmt, scale="tensor")._exponent(v)
    e = np.broadcast_to(e, (v.shape[0], 1)).astype(np.int64)
    scaled = np.ldexp(v, -e)
    codes = encode(scaled, fmt, rounding="half_even", overflow="saturate").bits.astype(np.int64)
    return _Operand(codes, fmt, None, np.ldexp(1.0, e[:, 0]), decode(codes, fmt),
                    int((np.abs(scaled) > fmt.max_finite).sum()))


def _unit_scales(other: _Operand, rows: int, block: BlockFormat) -> np.ndarray:
    """Scale codes of 1.0 for an element-format operand beside a block-scaled one."""
    one = encode(np.ones(1), block.scale_format).bits.astype(np.int64)[0]
    return np.full((rows, other.codes.shape[1] // block.block_size), one, np.int64)


def _scale_name(block: BlockFormat) -> str:
    return "e8m0" if block.power_of_two_scale else "ue4m3"


def _padded(v: np.ndarray, k: int) -> np.ndarray:
    return v if v.shape[1] == k else np.pad(v, ((0, 0), (0, k - v.shape[1])))


def _finite_amax(x: np.ndarray) -> float:
    return float(np.abs(np.where(np.isfinite(x), x, 0.0)).max(initial=0.0))


def float_mac(x, w, bias, settings: FloatMacSettings, x_amax: float | None = None,
              w_amax: float | None = None) -> FloatMacResult:
    """``x @ w + bias`` on ``settings`` (module docstring): ``x`` (M, K), ``w`` (K, N), ``bias`` (N,) or
    None, float64; ``x_amax``: the activations' calibrated amax (element formats; default the batch's finite
    amax); ``w_amax``: the amax a per-tensor weight scale is taken from (default ``w``'s: a depthwise layer
    passes its whole kernel's).  Non-finite activations (a previous layer's overflow) quantize as the format does: ±Inf saturates
    to its largest value (block formats: the block's scale becomes NaN), NaN stays NaN."""
    if not isinstance(settings, FloatMacSettings):
        raise TypeError(f"float_mac: settings must be FloatMacSettings, got {type(settings).__name__}")
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"float_mac: x {x.shape} @ w {w.shape} do not chain (need (M, K) @ (K, N))")
    if not np.isfinite(w).all():
        raise ValueError(f"float_mac: w holds {int(w.size - np.isfinite(w).sum())} NaN/inf value(s)")
    M, K = x.shape
    N = w.shape[1]
    acc, block = settings.accumulator, settings.block
    step = math.lcm(acc.chunk or 1, block.block_size if block else 1)
    Kp = -(-K // step) * step
    if acc.chunk is None and block is None:
        Kp = K
    a = _quantize(_padded(x, Kp), settings.activations, per_row=False,
                  amax=_finite_amax(x) if x_amax is None else x_amax, unscaled=settings.activation_scales == "none")
    b = _quantize(_padded(w.T, Kp), settings.weights, per_row=settings.weight_scales == "per-channel",
                  amax=w_amax if settings.weight_scales == "per-tensor" else None,
                  unscaled=settings.weight_scales == "none")
    outer = a.outer[0] * b.outer                               # (N,): every row of x has one scale
    bias = np.zeros(N) if bias is None else np.asarray(bias, np.float64).reshape(N)
    out = acc.output
    C = np.broadcast_to(encode(bias / outer, out, rounding="half_even",
                               overflow="inf" if out.has_inf else "saturate").bits.astype(np.int64), (M, N))
    kw = {}
    if block is not None:
        kw = dict(scale_a=a.scales if a.scales is not None else _unit_scales(a, M, block),
                  scale_b=(b.scales if b.scales is not None else _unit_scales(b, N, block)).T,
                  scale_fmt=_scale_name(block))
    res = float_matmul(a.codes, b.codes.T, a.fmt, b.fmt, acc, C, **kw)
    values = res.to_float().astype(np.float64) * outer
    exact_acc = FloatAccumulator(kind="exact", output=out)
    if block is None:
        ex = float_matmul(a.codes, b.codes.T, a.fmt, b.fmt, exact_acc, C)
    else:
        ex = float_matmul(a.values, b.values.T, _F32, _F32, exact_acc, C)
    return FloatMacResult(values, ex.to_float().astype(np.float64) * outer, res.overflows, res.nans,
                          res.underflows, res.terms_inexact, a.saturated + b.saturated)


def conv_patches(x: np.ndarray, kernel, stride, padding) -> np.ndarray:
    """The patches ``(N, OH, OW, KH, KW, C)`` of NHWC ``x``; ``padding`` is ``"SAME"``/``"VALID"``
    (TensorFlow's rules) or explicit zero pads ``(top, bottom, left, right)`` (ONNX's ``pads``)."""
    kh, kw = kernel
    if isinstance(padding, str):
        _, top, bottom = output_size_and_padding(x.shape[1], kh, stride[0], padding)
        _, left, right = output_size_and_padding(x.shape[2], kw, stride[1], padding)
        pads = (top, bottom, left, right)
    else:
        pads = tuple(int(p) for p in padding)
        if len(pads) != 4 or min(pads) < 0:
            raise ValueError(f"padding must be 'SAME', 'VALID' or 4 non-negative pads (top, bottom, left, "
                             f"right), got {padding!r}")
    xp = pad_nhwc(x, pads)
    if xp.shape[1] < kh or xp.shape[2] < kw:
        raise ValueError(f"a {kh}x{kw} kernel does not fit the padded input {xp.shape[1]}x{xp.shape[2]}")
    return extract_patches(xp, (kh, kw), tuple(stride))


def conv_rows(x: np.ndarray, kernel, stride, padding) -> tuple[np.ndarray, tuple]:
    """The im2col rows ``(N*OH*OW, KH*KW*C)`` of NHWC ``x`` and the output's spatial shape ``(N, OH, OW)``."""
    cols = conv_patches(x, kernel, stride, padding)
    n, oh, ow = cols.shape[:3]
    return cols.reshape(n * oh * ow, -1), (n, oh, ow)


def float_conv2d(x, w, bias, settings: FloatMacSettings, stride=(1, 1), padding="VALID",
                 x_amax: float | None = None) -> FloatMacResult:
    """conv2d of NHWC ``x`` with HWIO ``w`` on ``settings``: :func:`float_mac` on the im2col rows; the
    result's arrays are shaped NHWC."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    if x.ndim != 4 or w.ndim != 4 or x.shape[3] != w.shape[2]:
        raise ValueError(f"float_conv2d: x must be NHWC and w HWIO with matching channels, got {x.shape}, {w.shape}")
    rows, (n, oh, ow) = conv_rows(x, w.shape[:2], stride, padding)
    amax = _finite_amax(x) if x_amax is None else x_amax
    r = float_mac(rows, w.reshape(-1, w.shape[3]), bias, settings, amax)
    shape = (n, oh, ow, w.shape[3])
    r.values, r.exact = r.values.reshape(shape), r.exact.reshape(shape)
    return r

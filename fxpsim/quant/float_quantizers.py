"""Fake quantization to float and block-scaled formats, with straight-through gradients.

:class:`FloatQuantizer` rounds every element to a float format (FP8 E4M3/E5M2 and their fnuz variants, FP6,
FP4, bfloat16, float16, ...) in one correctly rounded step (:func:`fxpsim.core.float_codec.encode`),
optionally after a per-tensor or per-channel power-of-two scale:

.. math::

    q(x) = 2^{e}\\, \\mathrm{fl}_F\\!\\left(x\\, 2^{-e}\\right), \\qquad
    e = \\begin{cases} 0 & \\text{scale = "none"} \\\\
        \\lceil \\log_2(\\max|x_c| / F_{max}) \\rceil & \\text{"tensor" / "channel" (over } c\\text{)}
        \\end{cases}

(the smallest power of two that brings the channel's largest magnitude within :math:`F_{max}`: no element
saturates; an all-zero channel keeps :math:`e = 0`). Values beyond :math:`F_{max}` without scaling saturate
(``overflow="saturate"``) as a saturating cast does.

:class:`BlockQuantizer` is the OCP MX / NVFP4 fake quantizer: :func:`fxpsim.core.block_format.quantize_block`
then its dequantization (blocks of 32 (MX) or 16 (NVFP4) along ``axis``, shared E8M0 / E4M3 scales); an axis
that is not a multiple of the block is padded with zeros into a last, shorter block.

Gradients (``gradient=``): ``"clipped_ste"`` (FloatQuantizer's default): :math:`\\partial q/\\partial x =
1_{|x\\, 2^{-e}| \\le F_{max}}` -- the identity inside the representable range, zero where the element saturated
(what TensorFlow's and PyTorch's fake quantization do at their range ends); ``"ste"``: the identity everywhere
(BlockQuantizer's default: its scales follow the data, so no element leaves the range); a float or a callable
as for every quantizer. The formats' codes are not integers: :meth:`integer_form` raises, so
:func:`fxpsim.convert` to an integer target treats such a layer as float (post-training quantization to the
target's formats, activation ranges from the calibration data, as the report's notes say); the float datapaths
themselves are :class:`fxpsim.FloatAccumulator` / :func:`fxpsim.float_matmul`.
"""
from __future__ import annotations

import numpy as np

from ..core.block_format import BlockFormat, quantize_block
from ..core.float_codec import decode, encode
from ..core.float_format import FloatFormat
from .base import Quantizer, _normalize_axis

__all__ = ["FloatQuantizer", "BlockQuantizer"]

_SCALES = ("none", "tensor", "channel")


def _format(fmt, cls, where):
    try:
        return cls.parse(fmt)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None


class FloatQuantizer(Quantizer):
    """Fake quantization to the float format ``fmt`` (module docstring: the math and the gradients).

    Parameters
    ----------
    fmt : str or FloatFormat
        ``"e4m3"``, ``"e5m2"``, ``"e4m3fnuz"``, ``"e2m1"``, ``"bfloat16"``, ... (``fxpsim formats`` lists them).
    rounding : str
        As :func:`fxpsim.core.float_codec.encode` (``half_even`` default; ``stochastic`` needs ``seed``).
    scale : {"none", "tensor", "channel"}
        Power-of-two pre-scaling: none, one for the tensor, or one per index of ``axis``.
    axis : int
        The channel axis for ``scale="channel"`` (default -1, the output channels of a Dense/Conv2D kernel).
    seed : int, optional
        Stochastic rounding's random stream.
    amax_history : int
        With ``scale="tensor"``: the scale uses the largest of the last ``amax_history`` forward passes' amax
        (this one included) while training, as Transformer Engine's amax history does; 1 (default) uses this
        pass's amax only. In eval mode the history stays as it is.
    """

    name = "float"
    default_gradient = "clipped_ste"

    def __init__(self, fmt="e4m3", rounding: str = "half_even", scale: str = "none", axis: int = -1,
                 seed=None, amax_history: int = 1, gradient=None):
        super().__init__(gradient)
        self.fmt = _format(fmt, FloatFormat, "FloatQuantizer")
        if scale not in _SCALES:
            raise ValueError(f"FloatQuantizer: scale must be one of {_SCALES}, got {scale!r}")
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"FloatQuantizer: axis must be an int, got {axis!r}")
        encode(np.zeros(1), self.fmt, rounding=rounding, seed=0 if rounding == "stochastic" and seed is None
               else seed)                                   # checks rounding (and its seed) now
        self.rounding, self.scale, self.axis, self.seed = rounding, scale, int(axis), seed
        if isinstance(amax_history, bool) or not isinstance(amax_history, (int, np.integer)) or amax_history < 1:
            raise ValueError(f"FloatQuantizer: amax_history must be a positive int, got {amax_history!r}")
        if amax_history > 1 and scale != "tensor":
            raise ValueError("FloatQuantizer: amax_history applies to scale='tensor' only")
        self.amax_history = int(amax_history)
        self._history: list = []

    def _exponent(self, x):
        if self.scale == "none":
            return np.zeros((1,) * x.ndim)
        if self.scale == "tensor":
            amax = np.abs(x).max(initial=0.0, keepdims=True) if x.size else np.zeros((1,) * x.ndim)
            if self.amax_history > 1:
                if self.training:
                    self._history = (self._history + [float(amax.reshape(-1)[0])])[-self.amax_history:]
                amax = np.full_like(amax, max(self._history + [float(amax.reshape(-1)[0])]) if self.training
                                    else max(self._history or [float(amax.reshape(-1)[0])]))
        else:
            axis = _normalize_axis(self.axis, x.ndim, "FloatQuantizer")
            others = tuple(i for i in range(x.ndim) if i != axis)
            amax = np.abs(x).max(axis=others, keepdims=True, initial=0.0)
        with np.errstate(divide="ignore"):
            e = np.ceil(np.log2(amax / self.fmt.max_finite))
        return np.where(amax > 0, e, 0.0)

    def _forward(self, x):
        if np.isnan(x).any():
            raise ValueError("FloatQuantizer: input contains NaN")
        e = self._exponent(x)
        scaled = np.ldexp(x.astype(np.float64), (-e).astype(np.int64))
        codes = encode(scaled, self.fmt, rounding=self.rounding, overflow="saturate", seed=self.seed).bits
        self._ctx = (e, np.abs(scaled) <= self.fmt.max_finite)
        return np.ldexp(decode(codes, self.fmt), e.astype(np.int64)).astype(x.dtype)

    def _clipped_ste(self, dy):
        return dy * self._ctx[1]

    def _config(self):
        return {"fmt": self.fmt.name or str(self.fmt), "rounding": self.rounding, "scale": self.scale,
                "axis": self.axis, "seed": self.seed, "amax_history": self.amax_history}


class BlockQuantizer(Quantizer):
    """Fake quantization to an OCP MX or NVFP4 block format (module docstring).

    Parameters
    ----------
    fmt : str or BlockFormat
        ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp6_e2m3"``, ``"mxfp6_e3m2"``, ``"mxfp4"``, ``"mxint8"``,
        ``"nvfp4"``.
    axis : int, optional
        The blocked axis (default: the format's own, the last).
    rounding : str
        Element rounding (``half_even`` default).
    scale_rule : str, optional
        E8M0 scale rule (``floor``, the OCP rule, by default; see :func:`~fxpsim.core.block_format.quantize_block`).
    """

    name = "block"
    default_gradient = "ste"

    def __init__(self, fmt="mxfp8_e4m3", axis=None, rounding: str = "half_even", scale_rule=None, gradient=None):
        super().__init__(gradient)
        self.fmt = _format(fmt, BlockFormat, "BlockQuantizer")
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))):
            raise TypeError(f"BlockQuantizer: axis must be an int or None, got {axis!r}")
        self.axis, self.rounding, self.scale_rule = None if axis is None else int(axis), rounding, scale_rule
        quantize_block(np.zeros(self.fmt.sizes[-1]), self.fmt, rounding=rounding, scale_rule=scale_rule)

    def _forward(self, x):
        if not np.isfinite(x).all():
            raise ValueError("BlockQuantizer: input contains NaN or Inf")
        axis = _normalize_axis(self.fmt.axes[-1] if self.axis is None else self.axis, x.ndim, "BlockQuantizer")
        n, block = x.shape[axis], self.fmt.sizes[-1]
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, -n % block)          # a short last block: zeros after it (they change no block's amax)
        xp = np.pad(x.astype(np.float64), pad)
        q = quantize_block(xp, self.fmt, axis=axis, scale_rule=self.scale_rule, rounding=self.rounding)
        return np.take(q.dequantize(), np.arange(n), axis=axis).astype(x.dtype)

    def _config(self):
        return {"fmt": self.fmt.name, "axis": self.axis, "rounding": self.rounding, "scale_rule": self.scale_rule}

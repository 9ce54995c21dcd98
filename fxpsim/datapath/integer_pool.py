"""Integer average pooling (TFLite ``AVERAGE_POOL_2D``, int8): :func:`quantized_average_pool2d`.

The window sums run through the datapath's accumulating convolution (any accumulator width and
overflow mode), then divide by the count of valid pixels as TFLite's reference kernel does.
"""
from __future__ import annotations

import numpy as np

from ..core.fixed import Format, Overflow
from .accumulate import conv2d as _datapath_conv2d
from .integer_layer_args import IntegerResult, _acc_format, _clamp_range, _explicit_padding, _operand, _pair

__all__ = ["quantized_average_pool2d"]


def quantized_average_pool2d(x, pool_size, *, stride=None, padding="VALID", act_min=None, act_max=None,
                             acc=32, overflow="wrap") -> IntegerResult:
    r"""Integer average pooling (TFLite ``AVERAGE_POOL_2D``, int8: same scale and zero point in and out).

    The window sum :math:`S` (padded pixels excluded, :math:`c` = number of valid pixels) runs
    through :func:`fxpsim.datapath.conv2d` (a depthwise all-ones kernel) with accumulator ``acc``;
    then, as TFLite's reference kernel, with truncating integer division:

    .. math::

        y = \begin{cases} \operatorname{trunc}\big((S + \lfloor c/2 \rfloor)/c\big) & S > 0 \\
        \operatorname{trunc}\big((S - \lfloor c/2 \rfloor)/c\big) & S \le 0\end{cases}
        \quad = \mathrm{round\_half\_away}(S / c)

    Parameters
    ----------
    x : ndarray of int, shape (N, H, W, C)
    pool_size, stride : int or (int, int)
        ``stride`` defaults to ``pool_size``.
    padding : "SAME", "VALID" or ((top, bottom), (left, right))
    act_min, act_max : int, optional
        Clamp (default: the dtype range of ``x``).
    acc : Format or int
    overflow : str

    Returns
    -------
    IntegerResult
        ``out`` of shape (N, OH, OW, C) and dtype of ``x``.
    """
    x = _operand(x, "x", 4)
    lo, hi = _clamp_range(act_min, act_max, np.iinfo(x.dtype))
    k = _pair(pool_size, "pool_size")
    stride = k if stride is None else _pair(stride, "stride")
    fmt = _acc_format(acc)
    Overflow.parse(overflow)
    pads = _explicit_padding(padding, x.shape[1:3], k, stride, (1, 1))
    for n, kk, (p0, p1), axis in zip(x.shape[1:3], k, pads, ("height", "width")):
        if n + p0 + p1 < kk:
            raise ValueError(f"pool_size {kk} is larger than the padded input {axis} ({n + p0 + p1})")
        if max(p0, p1) >= kk:
            raise ValueError(f"padding {(p0, p1)} leaves windows without any input pixel ({axis})")
    c = x.shape[3]
    ones = np.ones(k + (1, c), dtype=np.int64)
    a = _datapath_conv2d(x.astype(np.int64), ones, acc=fmt, stride=stride, padding=pads, groups=c,
                         overflow=overflow)
    valid = np.ones((1,) + x.shape[1:3] + (1,), dtype=np.int64)
    count = _datapath_conv2d(valid, np.ones(k + (1, 1), dtype=np.int64), acc=Format.integer(32),
                             stride=stride, padding=pads).raw
    s = a.raw
    num = np.where(s > 0, s + count // 2, s - count // 2)
    avg = np.sign(num) * (np.abs(num) // count)       # C division truncates toward zero
    return IntegerResult(np.clip(avg, lo, hi).astype(x.dtype), s, int(a.overflows))

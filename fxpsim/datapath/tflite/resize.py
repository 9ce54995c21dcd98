r"""TFLite ``RESIZE_NEAREST_NEIGHBOR`` and ``RESIZE_BILINEAR`` on quantized codes (NHWC, the same scale and zero
point in and out: both kernels work on the codes themselves).

Nearest neighbour picks one input pixel per output pixel, per spatial axis independently
(:func:`resize_nearest_indices`); every kernel set copies codes.

Bilinear, int8 and int16: LiteRT's reference and optimized builtin kernels run the integer path
``reference_ops::ResizeBilinearInteger`` (:func:`_bilinear_reference`, 10-bit fixed-point coordinates); the
XNNPACK delegate runs its own ``ibilinear`` kernel with 11-bit weights computed in float32
(:func:`_bilinear_xnnpack`); :func:`resize_bilinear_float` is the real-valued reference.  Both integer paths are checked against LiteRT itself by
``tests/frontends/test_tflite_more_ops.py``.
"""
from __future__ import annotations

import numpy as np

from ._common import _kernels

__all__ = ["resize_nearest_indices", "quantized_resize_nearest", "quantized_resize_bilinear", "resize_bilinear_float"]

_RESIZE_TYPES = (np.int8, np.int16)


def _sizes(in_size: int, out_size: int) -> tuple[int, int]:
    for what, v in (("input size", in_size), ("output size", out_size)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 1 <= int(v) < 1 << 24:
            raise ValueError(f"{what} must be an int in [1, 2^24), got {v!r}")
    return int(in_size), int(out_size)


def _flags(align_corners, half_pixel_centers, kernels=None):
    if align_corners and half_pixel_centers and kernels in ("reference", "builtin"):
        raise ValueError("RESIZE_BILINEAR with both align_corners and half_pixel_centers: LiteRT's builtin "
                         "kernels refuse it (Prepare fails); only XNNPACK runs it, as align_corners")
    return bool(align_corners), bool(half_pixel_centers)


def _c_div(a, b: int):
    """C's integer division (truncation toward zero) of int64 arrays by a positive ``b``."""
    a = np.asarray(a, np.int64)
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def resize_nearest_indices(in_size: int, out_size: int, *, align_corners: bool = False,
                           half_pixel_centers: bool = False, kernels: str = "reference") -> np.ndarray:
    r"""The input index each output index of one spatial axis reads in ``RESIZE_NEAREST_NEIGHBOR``.

    ``reference_ops::GetNearestNeighbor``, in float32: :math:`c = \mathrm{fl}_{32}((n_{in} - 1) / (n_{out} - 1))`
    with ``align_corners`` (and :math:`n_{out} > 1`), else :math:`\mathrm{fl}_{32}(n_{in} / n_{out})`;
    :math:`o = 0.5` with ``half_pixel_centers`` else 0;

    .. math:: i_{in} = \min(\mathrm{rha}(\mathrm{fl}_{32}((i + o) c))\ \text{or}\ \lfloor\mathrm{fl}_{32}((i + o) c)
              \rfloor,\ n_{in} - 1)

    (round half away with ``align_corners``, floor otherwise), and :math:`\max(\cdot, 0)` with
    ``half_pixel_centers`` (both flags may be set).  The optimized builtin kernel (and XNNPACK, which leaves the op to it) computes the
    plain case (neither flag) in 16.16 fixed point: :math:`c_{16} = \lfloor 2^{16} n_{in} / n_{out} \rfloor + 1`,
    :math:`i_{in} = \min(\lfloor i c_{16} / 2^{16} \rfloor, n_{in} - 1)`.
    """
    n_in, n_out = _sizes(in_size, out_size)
    align, half = _flags(align_corners, half_pixel_centers)
    _kernels(kernels)
    i = np.arange(n_out, dtype=np.int64)
    if kernels != "reference" and not (align or half):
        return np.minimum((i * (((n_in << 16) // n_out) + 1)) >> 16, n_in - 1)
    if align and n_out > 1:
        scale = np.float32(np.float32(n_in - 1) / np.float32(n_out - 1))
    else:
        scale = np.float32(np.float32(n_in) / np.float32(n_out))
    pos = (i.astype(np.float32) + np.float32(0.5 if half else 0.0)) * scale       # float32 products
    pos = pos.astype(np.float64)
    v = np.copysign(np.floor(np.abs(pos) + 0.5), pos) if align else np.floor(pos)
    v = np.minimum(v.astype(np.int64), n_in - 1)
    return np.maximum(v, 0) if half else v


def _check_x(x, size):
    arr = np.asarray(x)
    if arr.dtype not in tuple(np.dtype(t) for t in _RESIZE_TYPES):
        raise TypeError(f"x must hold int8 or int16 codes, got dtype {arr.dtype}")
    if arr.ndim != 4:
        raise ValueError(f"x must be NHWC (4-D), got shape {arr.shape}")
    try:
        oh, ow = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"size must be (height, width), got {size!r}") from None
    return arr, oh, ow


def quantized_resize_nearest(x, size, *, align_corners: bool = False, half_pixel_centers: bool = False,
                             kernels: str = "reference") -> np.ndarray:
    """TFLite ``RESIZE_NEAREST_NEIGHBOR`` of NHWC codes to ``size = (height, width)``: the input pixels of
    :func:`resize_nearest_indices` on each spatial axis, codes copied."""
    arr, oh, ow = _check_x(x, size)
    ys = resize_nearest_indices(arr.shape[1], oh, align_corners=align_corners,
                                half_pixel_centers=half_pixel_centers, kernels=kernels)
    xs = resize_nearest_indices(arr.shape[2], ow, align_corners=align_corners,
                                half_pixel_centers=half_pixel_centers, kernels=kernels)
    return np.ascontiguousarray(arr[:, ys][:, :, xs])


def quantized_resize_bilinear(x, size, *, align_corners: bool = False, half_pixel_centers: bool = False,
                              kernels: str = "reference") -> np.ndarray:
    """TFLite ``RESIZE_BILINEAR`` of int8/int16 NHWC codes to ``size = (height, width)``: LiteRT's integer
    kernel (``kernels="reference"`` or ``"builtin"``, :func:`_bilinear_reference`) or XNNPACK's
    (``kernels="xnnpack"``, int8 only, :func:`_bilinear_xnnpack`)."""
    arr, oh, ow = _check_x(x, size)
    align, half = _flags(align_corners, half_pixel_centers, _kernels(kernels))
    if kernels == "xnnpack":
        if arr.dtype != np.int8:
            raise NotImplementedError("XNNPACK's int16 RESIZE_BILINEAR")
        return _bilinear_xnnpack(arr, oh, ow, align, half)
    return _bilinear_reference(arr, oh, ow, align, half)


def _axis_reference(n_in: int, n_out: int, align: bool, half: bool):
    r"""One axis of ``ResizeBilinearInteger``: the 10-bit scale
    :math:`c = \lfloor (2^{10} n_{in} + \lfloor n_{out}/2 \rfloor) / n_{out} \rfloor` (with ``align_corners`` and
    :math:`n_{out} > 1`: :math:`\lfloor (2^{10}(n_{in}-1) + \lfloor (n_{out}-1)/2 \rfloor) / (n_{out}-1) \rfloor`),
    the position :math:`p = i c` (:math:`i c + \lfloor c/2 \rfloor - 2^9` with ``half_pixel_centers``), the
    neighbours :math:`i_0 = \max(\mathrm{tdiv}(p, 2^{10}), 0)`, :math:`i_1 = \min(\mathrm{tdiv}(p + 2^{10} - 1,
    2^{10}), n_{in} - 1)` (C division) and the weights :math:`(2^{10} - (p - 2^{10} i_0),\ p - 2^{10} i_0)`."""
    n_in, n_out = _sizes(n_in, n_out)
    if align and n_out > 1:
        c = ((1 << 10) * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1)
    else:
        c = ((1 << 10) * n_in + n_out // 2) // n_out
    i = np.arange(n_out, dtype=np.int64)
    p = i * c + (c // 2 - (1 << 9) if half else 0)
    lo = np.maximum(_c_div(p, 1 << 10), 0)
    hi = np.minimum(_c_div(p + (1 << 10) - 1, 1 << 10), n_in - 1)
    frac = p - (1 << 10) * lo
    return lo, hi, (1 << 10) - frac, frac


def _bilinear_reference(arr, oh, ow, align, half):
    r"""``reference_ops::ResizeBilinearInteger``: with the axis terms of :func:`_axis_reference`,

    .. math:: S = \sum_{a, b \in \{0, 1\}} x[y_a, x_b]\, w^y_a\, w^x_b \quad (\text{int64}),\qquad
              y = \mathrm{tdiv}(S \pm 2^{19}, 2^{20})

    (the rounding term takes the sign of :math:`S`: round half away from zero).  :math:`|S| \le 2^{15} \cdot 2^{22}`
    for int16 codes and weights :math:`|w| < 2^{11}`, well inside int64."""
    y0, y1, wy0, wy1 = _axis_reference(arr.shape[1], oh, align, half)
    x0, x1, wx0, wx1 = _axis_reference(arr.shape[2], ow, align, half)
    v = arr.astype(np.int64)
    wy0, wy1 = wy0[:, None, None], wy1[:, None, None]
    wx0, wx1 = wx0[None, :, None], wx1[None, :, None]
    top, bot = v[:, y0], v[:, y1]
    s = (top[:, :, x0] * wy0 * wx0 + bot[:, :, x0] * wy1 * wx0 + top[:, :, x1] * wy0 * wx1 +
         bot[:, :, x1] * wy1 * wx1)
    out = _c_div(s + np.where(s > 0, 1 << 19, -(1 << 19)), 1 << 20)
    return out.astype(arr.dtype)


def _axis_xnnpack(n_in: int, n_out: int, align: bool, half: bool):
    r"""One axis of XNNPACK's ``xnn_indirection_init_resize_bilinear2d_hwc_q11`` (float32 throughout):
    :math:`c = \mathrm{fl}_{32}((n_{in} - a) / (n_{out} - a))`, :math:`a = 1` with ``align_corners`` and
    :math:`n_{out} \ne 1`; the position :math:`p = \mathrm{fl}_{32}(i c)` (align corners or TensorFlow's legacy
    mode, i.e. no half-pixel centers), else :math:`p = \mathrm{clamp}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(i c) +
    \mathrm{fl}_{32}(\mathrm{fl}_{32}(c/2) - 1/2)),\ 0,\ n_{in} - 1)`; neighbours :math:`i_0 = \lfloor p \rfloor`,
    :math:`i_1 = \min(i_0 + 1, n_{in} - 1)`; the weight :math:`\alpha = \mathrm{rne}(2^{11} (p - i_0))`."""
    n_in, n_out = _sizes(n_in, n_out)
    adj = 1 if align and n_out != 1 else 0
    c = np.float32(np.float32(n_in - adj) / np.float32(n_out - adj))
    p = np.arange(n_out, dtype=np.float32) * c
    if not (align or not half):
        off = np.float32(np.float32(np.float32(0.5) * c) - np.float32(0.5))
        p = np.clip(np.float32(p + off), np.float32(0), np.float32(n_in - 1)).astype(np.float32)
    lo = np.trunc(p).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    alpha = np.rint((p - lo.astype(np.float32)).astype(np.float32) * np.float32(2048)).astype(np.int64)
    return lo, hi, alpha


def _bilinear_xnnpack(arr, oh, ow, align, half):
    r"""XNNPACK's ``s8-ibilinear`` kernel on the 11-bit weights of :func:`_axis_xnnpack`:
    :math:`t = 2^{11} x_{tl} + (x_{tr} - x_{tl})\alpha_h`, :math:`b = 2^{11} x_{bl} + (x_{br} - x_{bl})\alpha_h`,
    :math:`y = \lfloor (2^{11} t + (b - t)\alpha_v + 2^{21}) / 2^{22} \rfloor` (arithmetic shift: round half up);
    every term fits in int32 for int8 codes (:math:`|2^{11} t| \le 2^{29}`)."""
    y0, y1, av = _axis_xnnpack(arr.shape[1], oh, align, half)
    x0, x1, ah = _axis_xnnpack(arr.shape[2], ow, align, half)
    v = arr.astype(np.int64)
    top, bot = v[:, y0], v[:, y1]
    ah = ah[None, :, None]
    t = (top[:, :, x0] << 11) + (top[:, :, x1] - top[:, :, x0]) * ah
    b = (bot[:, :, x0] << 11) + (bot[:, :, x1] - bot[:, :, x0]) * ah
    acc = (t << 11) + (b - t) * av[:, None, None]
    return ((acc + (1 << 21)) >> 22).astype(np.int8)


# --------------------------------------------------------------------------- float reference

def _axis_float(n_in: int, n_out: int, align: bool, half: bool):
    r"""Positions :math:`p = i c` (:math:`(i + 1/2) c - 1/2` with half-pixel centers), :math:`c = (n_{in} - 1) /
    (n_{out} - 1)` with ``align_corners`` (and :math:`n_{out} > 1`) else :math:`n_{in} / n_{out}`; neighbours
    :math:`\max(\lfloor p \rfloor, 0)`, :math:`\min(\lceil p \rceil, n_{in} - 1)` and the fraction
    :math:`p - \lfloor p \rfloor`."""
    c = (n_in - 1) / (n_out - 1) if align and n_out > 1 else n_in / n_out
    i = np.arange(n_out, dtype=np.float64)
    p = (i + 0.5) * c - 0.5 if half and not align else i * c
    lo = np.floor(p)
    frac = p - lo
    return (np.clip(lo, 0, n_in - 1).astype(np.int64), np.clip(np.ceil(p), 0, n_in - 1).astype(np.int64), frac)


def resize_bilinear_float(x, size, *, align_corners: bool = False, half_pixel_centers: bool = False) -> np.ndarray:
    """Bilinear resize of real NHWC values to ``size = (height, width)``:
    :math:`y = (1 - f_y)((1 - f_x) x_{00} + f_x x_{01}) + f_y((1 - f_x) x_{10} + f_x x_{11})` with the neighbours
    and fractions of each axis (:func:`_axis_float`)."""
    v = np.asarray(x, dtype=np.float64)
    oh, ow = (int(s) for s in size)
    y0, y1, fy = _axis_float(v.shape[1], oh, bool(align_corners), bool(half_pixel_centers))
    x0, x1, fx = _axis_float(v.shape[2], ow, bool(align_corners), bool(half_pixel_centers))
    fy, fx = fy[:, None, None], fx[None, :, None]
    top, bot = v[:, y0], v[:, y1]
    t = top[:, :, x0] * (1 - fx) + top[:, :, x1] * fx
    b = bot[:, :, x0] * (1 - fx) + bot[:, :, x1] * fx
    return t * (1 - fy) + b * fy

r"""onnxruntime's linear (bilinear) ``Resize`` of a 4-D tensor, bit for bit, in numpy (CPU kernels of
``upsample.h``, onnxruntime 1.32; measured live in ``tests/frontends/test_onnx_resize.py``).

Per spatial axis of input length :math:`d`, output length :math:`o` and float32 scale :math:`s`, output
position :math:`i` reads the input coordinate :math:`c_i` (:func:`original_coordinate`, float32; :math:`c_i = i`
when :math:`s = 1`), clamped to :math:`[0, d - 1]`, between the neighbours
:math:`i_1 = \lfloor c_i \rfloor` and :math:`i_2 = \min(i_1 + 1, d - 1)`. Three kernels, by what runs:

* **float** (the float32 Resize between a DequantizeLinear and a QuantizeLinear, and on codes in NCHW):
  :math:`\delta_1 = |c - i_1|`, :math:`\delta_2 = |c - i_2|` in float32 (both :math:`1/2` when
  :math:`i_1 = i_2`), coefficients :math:`\mathrm{fl}(\delta^x \delta^y)`, and

  .. math:: y = \mathrm{fl}(\mathrm{fl}(\mathrm{fl}(k_{11} x_{11} + k_{21} x_{21}) + k_{12} x_{12}) + k_{22} x_{22})

  with :math:`k_{11} = \delta^x_2 \delta^y_2`, :math:`k_{21} = \delta^x_1 \delta^y_2`,
  :math:`k_{12} = \delta^x_2 \delta^y_1`, :math:`k_{22} = \delta^x_1 \delta^y_1` (every product and sum one
  float32 operation). On uint8 / int8 codes in NCHW the result is truncated toward zero (a C cast).
* **integer** (codes in NHWC, where onnxruntime's layout transformer puts a Resize between NHWC QLinearConvs):
  :math:`w_1 = \lfloor \mathrm{fl}(\mathrm{fl}(c - i_1) \cdot 1024) \rfloor`, :math:`w_2 = 1024 - w_1`
  (both 512 when :math:`i_1 = i_2`), and
  :math:`y = \mathrm{trunc}((w^x_2 w^y_2 x_{11} + w^x_1 w^y_2 x_{21} + w^x_2 w^y_1 x_{12} + w^x_1 w^y_1 x_{22})
  / 2^{20})` in integers (division rounding toward zero).

Rejected by the probes (``tools/fixtures/onnx/probe_resize_reduce.py``, up to this many of 90 … 990 outputs
differ): rounding :math:`w_1` to nearest (79), an arithmetic shift for the division (int8: 485), the float
kernel on NHWC codes (72) and the integer kernel on NCHW codes (91).
"""
from __future__ import annotations

import numpy as np

__all__ = ["original_coordinate", "axis_table", "bilinear_nhwc", "COORDINATE_MODES", "KERNELS"]

F32 = np.float32
#: The coordinate transformations the linear kernels are proven for.
COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
#: ``float`` (float32 values), ``float_codes`` (the float kernel on codes, truncated), ``integer``.
KERNELS = ("float", "float_codes", "integer")


def original_coordinate(ctm, i, s, out_len, in_len):
    """onnxruntime's float32 input coordinate of output position ``i`` (``upsamplebase.h``)."""
    x, s, lr, lo = F32(i), F32(s), F32(out_len), F32(in_len)
    if ctm == "asymmetric":
        return F32(x / s)
    if ctm == "pytorch_half_pixel":
        return F32(F32(F32(x + F32(0.5)) / s) - F32(0.5)) if lr > 1 else F32(0)
    if ctm == "align_corners":
        return F32(0) if lr == 1 else F32(F32(x * F32(lo - 1)) / F32(lr - 1))
    if ctm == "half_pixel_symmetric":
        adjustment = F32(lr / F32(s * lo))
        offset = F32(F32(lo / 2) * F32(1 - adjustment))
        return F32(float(offset) + (float(x) + 0.5) / float(s) - 0.5)
    if ctm == "half_pixel":
        return F32(F32(F32(x + F32(0.5)) / s) - F32(0.5))
    raise ValueError(f"coordinate_transformation_mode {ctm!r} is not one onnxruntime knows")


def axis_table(ctm, s, out_len, in_len, integer: bool):
    """``(i1, i2, w1, w2)`` of one axis: neighbour indices and weights (float32, or integers of 1/1024)."""
    if ctm not in COORDINATE_MODES:
        raise ValueError(f"linear Resize: coordinate_transformation_mode {ctm!r} is not one of {COORDINATE_MODES}")
    if out_len < 1 or in_len < 1:
        raise ValueError(f"linear Resize: an axis of {in_len} resized to {out_len}")
    i1, i2, w1, w2 = [], [], [], []
    for i in range(int(out_len)):
        c = F32(i) if F32(s) == 1 else original_coordinate(ctm, i, s, out_len, in_len)
        c = F32(max(F32(0), min(c, F32(in_len - 1))))
        a = min(int(c), in_len - 1)
        b = min(a + 1, in_len - 1)
        if integer:
            d1 = 512 if a == b else int(F32(F32(c - F32(a)) * F32(1024)))
            d2 = 512 if a == b else 1024 - d1
        else:
            d1 = F32(0.5) if a == b else F32(abs(F32(c - F32(a))))
            d2 = F32(0.5) if a == b else F32(abs(F32(c - F32(b))))
        i1.append(a), i2.append(b), w1.append(d1), w2.append(d2)
    dt = np.int64 if integer else F32
    return np.array(i1), np.array(i2), np.array(w1, dt), np.array(w2, dt)


def bilinear_nhwc(x, ctm, scale_h, scale_w, out_h, out_w, kernel):
    """Resize ``x`` [N, H, W, C] (float32 values for ``"float"``, integer codes otherwise) to
    [N, out_h, out_w, C] with one of :data:`KERNELS`; codes come back as int64."""
    if kernel not in KERNELS:
        raise ValueError(f"linear Resize kernel {kernel!r} is not one of {KERNELS}")
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError(f"linear Resize needs a 4-D [N, H, W, C] tensor, got shape {list(x.shape)}")
    h, w = x.shape[1:3]
    integer = kernel == "integer"
    y1, y2, dy1, dy2 = axis_table(ctm, scale_h, out_h, h, integer)
    x1, x2, dx1, dx2 = axis_table(ctm, scale_w, out_w, w, integer)
    top, bot = x[:, y1], x[:, y2]
    corners = (top[:, :, x1], top[:, :, x2], bot[:, :, x1], bot[:, :, x2])       # X11, X21, X12, X22
    coef = (dx2[None, :] * dy2[:, None], dx1[None, :] * dy2[:, None],
            dx2[None, :] * dy1[:, None], dx1[None, :] * dy1[:, None])
    if integer:
        acc = sum(k[None, :, :, None] * v.astype(np.int64) for k, v in zip(coef, corners))
        return np.sign(acc) * (np.abs(acc) >> 20)
    acc = None
    for k, v in zip(coef, corners):
        term = k.astype(F32)[None, :, :, None] * v.astype(F32)
        acc = term if acc is None else (acc + term).astype(F32)
    if kernel == "float":
        return acc.astype(F32)
    return np.trunc(acc).astype(np.int64)

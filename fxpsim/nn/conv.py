"""Convolution and pooling: vectorised NHWC numpy kernels and the layers built on them.

Kernels
-------
Every kernel function is pure: it takes arrays and returns arrays, validates nothing (the layers below
do) and never loops over pixels.  Patches are *read-only* strided views of the (padded) input
(:func:`numpy.lib.stride_tricks.as_strided` with ``writeable=False``); a convolution copies them once
into an im2col matrix and multiplies it with the HWIO weights by BLAS (``np.matmul``).  Backward passes
scatter patch gradients back with one vectorised add per kernel tap (``KH*KW`` adds, not ``H*W``).

Padding follows TensorFlow: ``"VALID"`` uses no padding and
:math:`O = \\lfloor (I - K) / S \\rfloor + 1`; ``"SAME"`` gives :math:`O = \\lceil I / S \\rceil` with
:math:`P = \\max((O - 1) S + K - I, 0)` zeros split as :math:`\\lfloor P/2 \\rfloor` before and the rest after.

Layers
------
:class:`Conv2D` and :class:`DepthwiseConv2D` (weight-quantized, on :class:`fxpsim.layers_base.LinearLayer`),
:class:`MaxPool2D` and :class:`AvgPool2D` validate their input, call the kernels above in ``forward`` /
``backward`` and keep what backward needs. :mod:`fxpsim.nn` re-exports them; its docstring lists the
conventions every layer follows and the attributes the hardware simulation reads.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import repro
from .module import LinearLayer, Module, check_layer_input, glorot_uniform

__all__ = ["output_size_and_padding", "pad_nhwc", "extract_patches", "scatter_patches",
           "conv2d_forward", "conv2d_backward", "depthwise_conv2d_forward", "depthwise_conv2d_backward",
           "max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward",
           "Conv2D", "DepthwiseConv2D", "MaxPool2D", "AvgPool2D"]

PADDINGS = ("SAME", "VALID")


def output_size_and_padding(size: int, kernel: int, stride: int, padding: str) -> tuple[int, int, int]:
    """Output length and (before, after) padding of one spatial axis, TensorFlow rules (module docstring)."""
    if padding == "VALID":
        if size < kernel:
            raise ValueError(f"VALID padding needs an input of at least the kernel size {kernel}, got {size}")
        return (size - kernel) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def pad_nhwc(x: np.ndarray, pads: tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    """Return ``x`` [N, H, W, C] padded by ``pads = (top, bottom, left, right)`` with ``value``."""
    top, bottom, left, right = pads
    if not (top or bottom or left or right):
        return x
    n, h, w, c = x.shape
    xp = np.full((n, h + top + bottom, w + left + right, c), value, dtype=x.dtype)
    xp[:, top:top + h, left:left + w, :] = x
    return xp


def extract_patches(xp: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int]) -> np.ndarray:
    """Read-only view ``[N, OH, OW, KH, KW, C]`` of the patches of a padded NHWC array.

    .. math:: P[n, i, j, a, b, c] = x_p[n, i S_h + a, j S_w + b, c]
    """
    n, hp, wp, c = xp.shape
    kh, kw = kernel
    sh, sw = stride
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    s_n, s_h, s_w, s_c = xp.strides
    return as_strided(xp, (n, oh, ow, kh, kw, c), (s_n, s_h * sh, s_w * sw, s_h, s_w, s_c), writeable=False)


def scatter_patches(dpatches: np.ndarray, padded_shape: tuple[int, ...], stride: tuple[int, int],
                    pads: tuple[int, int, int, int]) -> np.ndarray:
    """Adjoint of :func:`extract_patches` followed by un-padding: sum patch gradients into the input.

    .. math:: dx_p[n, i S_h + a, j S_w + b, c] \\mathrel{+}= dP[n, i, j, a, b, c]
    """
    n, oh, ow, kh, kw, c = dpatches.shape
    dxp = np.zeros(padded_shape, dtype=dpatches.dtype)
    for a in range(kh):          # one strided add per kernel tap
        for b in range(kw):
            _tap(dxp, a, b, (oh, ow), stride)[...] += dpatches[:, :, :, a, b, :]
    top, bottom, left, right = pads
    return dxp[:, top:padded_shape[1] - bottom, left:padded_shape[2] - right, :]


def _pads(x_shape, kernel, stride, padding):
    oh, top, bottom = output_size_and_padding(x_shape[1], kernel[0], stride[0], padding)
    ow, left, right = output_size_and_padding(x_shape[2], kernel[1], stride[1], padding)
    return (oh, ow), (top, bottom, left, right)


def conv2d_forward(x, w, stride, padding):
    """2-D convolution (cross-correlation) of NHWC ``x`` with HWIO ``w`` by im2col + matmul.

    .. math:: y[n, i, j, o] = \\sum_{a, b, c} x_p[n, i S_h + a, j S_w + b, c]\\, w[a, b, c, o]

    Returns ``(y, cols, pads)``; ``cols`` ([N*OH*OW, KH*KW*C]) and ``pads`` feed :func:`conv2d_backward`.
    """
    kh, kw, cin, cout = w.shape
    (oh, ow), pads = _pads(x.shape, (kh, kw), stride, padding)
    n = x.shape[0]
    if kh == kw == 1 and stride == (1, 1):
        cols = x.reshape(n * oh * ow, cin)
    else:
        cols = extract_patches(pad_nhwc(x, pads), (kh, kw), stride).reshape(n * oh * ow, kh * kw * cin)
    y = repro.matmul(cols, w.reshape(kh * kw * cin, cout))
    return y.reshape(n, oh, ow, cout), cols, pads


def conv2d_backward(dy, cols, w, x_shape, stride, pads, input_grad=True):
    """Gradients ``(dx, dw)`` of :func:`conv2d_forward`; ``dx`` is None when ``input_grad`` is False.

    .. math:: dw = \\mathrm{cols}^T\\, dY, \\qquad d\\mathrm{cols} = dY\\, W^T \\;\\to\\; dx \\text{ by scatter}

    (for stride 1, equivalently :math:`dx = \\mathrm{corr}(\\mathrm{pad}(dY), W_{flip}^T)` by im2col).
    """
    kh, kw, cin, cout = w.shape
    n, oh, ow, _ = dy.shape
    dy2 = dy.reshape(n * oh * ow, cout)
    dw = repro.matmul(cols.T, dy2).reshape(w.shape)
    if not input_grad:
        return None, dw
    if kh == kw == 1 and stride == (1, 1):
        return repro.matmul(dy2, w.reshape(cin, cout).T).reshape(x_shape), dw
    top, bottom, left, right = pads
    if stride == (1, 1) and cout <= 4 * cin:
        # dx is the correlation of dy (padded by K-1-pad) with the flipped, transposed kernel: one more
        # im2col + matmul, cheaper than scattering KH*KW strided patch gradients when Cout is not >> Cin
        dyp = pad_nhwc(dy, (kh - 1 - top, kh - 1 - bottom, kw - 1 - left, kw - 1 - right))
        dcols = extract_patches(dyp, (kh, kw), (1, 1)).reshape(-1, kh * kw * cout)
        w_flip = w[::-1, ::-1].transpose(0, 1, 3, 2).reshape(kh * kw * cout, cin)
        return repro.matmul(dcols, w_flip).reshape(x_shape), dw
    dcols = repro.matmul(dy2, w.reshape(kh * kw * cin, cout).T)
    padded = (x_shape[0], x_shape[1] + top + bottom, x_shape[2] + left + right, cin)
    dx = scatter_patches(dcols.reshape(n, oh, ow, kh, kw, cin), padded, stride, pads)
    return dx, dw


def depthwise_conv2d_forward(x, w, stride, padding):
    """Depthwise convolution, TensorFlow layout ``w`` [KH, KW, C, M]; output channel ``c*M + m``.

    .. math:: y[n, i, j, cM + m] = \\sum_{a, b} x_p[n, i S_h + a, j S_w + b, c]\\, w[a, b, c, m]

    Returns ``(y, patches, pads)`` (``patches`` is the read-only view of the padded input).
    """
    kh, kw, c, m = w.shape
    (oh, ow), pads = _pads(x.shape, (kh, kw), stride, padding)
    patches = extract_patches(pad_nhwc(x, pads), (kh, kw), stride)
    y = np.einsum("nhwabc,abcm->nhwcm", patches, w, optimize=True)
    return y.reshape(x.shape[0], oh, ow, c * m), patches, pads


def depthwise_conv2d_backward(dy, patches, w, x_shape, stride, pads, input_grad=True):
    """Gradients ``(dx, dw)`` of :func:`depthwise_conv2d_forward` (``dx`` None unless ``input_grad``)."""
    kh, kw, c, m = w.shape
    n, oh, ow, _ = dy.shape
    dy5 = dy.reshape(n, oh, ow, c, m)
    dw = np.einsum("nhwabc,nhwcm->abcm", patches, dy5, optimize=True)
    if not input_grad:
        return None, dw
    dpatches = np.einsum("nhwcm,abcm->nhwabc", dy5, w, optimize=True)
    top, bottom, left, right = pads
    padded = (x_shape[0], x_shape[1] + top + bottom, x_shape[2] + left + right, c)
    return scatter_patches(dpatches, padded, stride, pads), dw


def _tap(xp, a, b, out_hw, stride):
    """View of the padded input seen by kernel tap (a, b) at every output pixel: [N, OH, OW, C]."""
    (oh, ow), (sh, sw) = out_hw, stride
    return xp[:, a:a + sh * (oh - 1) + 1:sh, b:b + sw * (ow - 1) + 1:sw, :]


def max_pool2d_forward(x, pool, stride, padding):
    """Max pooling; SAME pads with :math:`-\\infty`. Returns ``(y, xp, pads)`` (``xp``: padded input).

    .. math:: y[n, i, j, c] = \\max_{a, b} x_p[n, i S_h + a, j S_w + b, c]

    One branch-free ``np.maximum`` per kernel tap.
    """
    kh, kw = pool
    out_hw, pads = _pads(x.shape, pool, stride, padding)
    xp = pad_nhwc(x, pads, -np.inf)
    y = _tap(xp, 0, 0, out_hw, stride).copy()
    for t in range(1, kh * kw):
        np.maximum(y, _tap(xp, t // kw, t % kw, out_hw, stride), out=y)
    return y, xp, pads


def max_pool2d_backward(dy, y, xp, pool, stride, pads):
    """Gradient of :func:`max_pool2d_forward`: each window's ``dy`` goes to its *first* maximum in
    row-major tap order (as TensorFlow), found tap by tap with equality masks."""
    n, oh, ow, c = dy.shape
    kh, kw = pool
    dxp = np.zeros(xp.shape, dtype=dy.dtype)
    unrouted = dy
    for t in range(kh * kw):
        hit = _tap(xp, t // kw, t % kw, (oh, ow), stride) == y
        _tap(dxp, t // kw, t % kw, (oh, ow), stride)[...] += np.where(hit, unrouted, 0)
        if t < kh * kw - 1:
            unrouted = np.where(hit, 0, unrouted)
    top, bottom, left, right = pads
    return dxp[:, top:xp.shape[1] - bottom, left:xp.shape[2] - right, :]


def _window_counts(x_shape, pool, stride, pads, dtype):
    """Number of real (non-padding) inputs per window, shape [OH, OW, 1] (TensorFlow SAME average)."""
    ones = pad_nhwc(np.ones((1, x_shape[1], x_shape[2], 1), dtype=dtype), pads)
    return extract_patches(ones, pool, stride).sum(axis=(3, 4))[0]


def avg_pool2d_forward(x, pool, stride, padding):
    """Average pooling; with SAME, padding is excluded from the count (TensorFlow). Returns ``(y, counts, pads)``.

    .. math:: y[n, i, j, c] = \\frac{1}{|W_{ij}|} \\sum_{(a, b) \\in W_{ij}} x[n, i S_h + a - p_t, j S_w + b - p_l, c]
    """
    out_hw, pads = _pads(x.shape, pool, stride, padding)
    counts = _window_counts(x.shape, pool, stride, pads, x.dtype)
    xp = pad_nhwc(x, pads)
    y = _tap(xp, 0, 0, out_hw, stride).copy()
    for t in range(1, pool[0] * pool[1]):
        y += _tap(xp, t // pool[1], t % pool[1], out_hw, stride)
    y /= counts
    return y, counts, pads


def avg_pool2d_backward(dy, counts, x_shape, pool, stride, pads):
    """Gradient of :func:`avg_pool2d_forward`: each input gets ``dy / count`` of every window holding it."""
    n, oh, ow, c = dy.shape
    share = (dy / counts)[:, :, :, None, None, :]
    dpatches = np.broadcast_to(share, (n, oh, ow, pool[0], pool[1], c))
    top, bottom, left, right = pads
    padded = (n, x_shape[1] + top + bottom, x_shape[2] + left + right, c)
    return scatter_patches(dpatches, padded, stride, pads)


# ------------------------------------------------------------------------------------ layers
def positive_int(v, name: str) -> int:
    """``v`` as an int >= 1; a float (even 2.0), bool or string is a TypeError naming ``name``."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be a positive int, got {v!r}")
    if v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return int(v)


def _pair(v, name):
    """``(v, v)`` for an int, else the pair ``v``; both positive ints (ValueError naming ``name`` otherwise)."""
    pair = (v, v) if np.isscalar(v) else tuple(v)
    if len(pair) != 2 or any(isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, np.integer)) or p < 1
                             for p in pair):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {v!r}")
    return tuple(int(p) for p in pair)


def _padding(p):
    """``p`` as ``"SAME"`` or ``"VALID"`` (case-insensitive), else ValueError."""
    p = str(p).upper()
    if p not in PADDINGS:
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {p!r}")
    return p


def init_conv_weights(layer, in_channels, filters, kernel_size, stride, padding, seed, dtype) -> None:
    """Geometry and Glorot-uniform HWIO weights of a 2-D convolution layer (``Conv2D`` and its folded
    batch-norm twin)."""
    layer.in_channels, layer.filters = positive_int(in_channels, "in_channels"), positive_int(filters, "filters")
    layer.kernel_size, layer.stride = _pair(kernel_size, "kernel_size"), _pair(stride, "stride")
    layer.padding = _padding(padding)
    kh, kw = layer.kernel_size
    layer.W = glorot_uniform(np.random.default_rng(seed), (kh, kw, layer.in_channels, layer.filters),
                             kh * kw * layer.in_channels, kh * kw * layer.filters, dtype)


class Conv2D(LinearLayer):
    """2-D convolution, NHWC input, HWIO weights ``W`` [KH, KW, Cin, Cout], TensorFlow SAME/VALID padding.

    .. math:: y[n,i,j,o] = q_a\\Big(\\phi\\big(\\sum_{a,b,c} x_p[n, iS_h + a, jS_w + b, c]\\, q_w(W)[a,b,c,o]
              + b_o\\big)\\Big)

    computed by im2col + BLAS matmul (:func:`conv2d_forward`).
    """

    def __init__(self, in_channels: int, filters: int, kernel_size=3, *, stride=1, padding="SAME",
                 activation=None, use_bias=True, weight_quantizer=None, activation_quantizer=None, seed=None,
                 dtype=np.float32):
        super().__init__()
        init_conv_weights(self, in_channels, filters, kernel_size, stride, padding, seed, dtype)
        self._setup(self.filters, activation, use_bias, weight_quantizer, activation_quantizer, dtype)

    def forward(self, x):
        check_layer_input(x, self.dtype, (None, None, self.in_channels), f"{type(self).__name__}.forward")
        self._x_shape = x.shape
        self._w_hat = self.quantized_weight()
        z, self._cols, self._pads = conv2d_forward(x, self._w_hat, self.stride, self.padding)
        return self._finish_forward(z)

    def backward(self, dy, input_grad=True):
        dz = self._start_backward(dy)
        dx, dw = conv2d_backward(dz, self._cols, self._w_hat, self._x_shape, self.stride, self._pads, input_grad)
        self._weight_grad(dw)
        return dx

    def _repr_args(self, lead="", skip=()):
        return super()._repr_args(f"{self.in_channels} -> {self.filters}", ("in_channels", "filters"))

    def get_config(self):
        return {"in_channels": self.in_channels, "filters": self.filters, "kernel_size": list(self.kernel_size),
                "stride": list(self.stride), "padding": self.padding, **self._linear_config()}


class DepthwiseConv2D(LinearLayer):
    """Depthwise convolution, ``W`` [KH, KW, C, M] (TensorFlow layout), output channel ``c*M + m``.

    .. math:: y[n,i,j,cM+m] = q_a\\Big(\\phi\\big(\\sum_{a,b} x_p[n, iS_h+a, jS_w+b, c]\\, q_w(W)[a,b,c,m]
              + b_{cM+m}\\big)\\Big)
    """

    def __init__(self, channels: int, kernel_size=3, *, depth_multiplier=1, stride=1, padding="SAME",
                 activation=None, use_bias=True, weight_quantizer=None, activation_quantizer=None, seed=None,
                 dtype=np.float32):
        super().__init__()
        self.channels = positive_int(channels, "channels")
        self.depth_multiplier = positive_int(depth_multiplier, "depth_multiplier")
        self.kernel_size, self.stride = _pair(kernel_size, "kernel_size"), _pair(stride, "stride")
        self.padding = _padding(padding)
        kh, kw = self.kernel_size
        rng = np.random.default_rng(seed)
        self.W = glorot_uniform(rng, (kh, kw, self.channels, self.depth_multiplier), kh * kw,
                                kh * kw * self.depth_multiplier, dtype)
        self._setup(self.channels * self.depth_multiplier, activation, use_bias, weight_quantizer,
                    activation_quantizer, dtype)

    def forward(self, x):
        check_layer_input(x, self.dtype, (None, None, self.channels), f"{type(self).__name__}.forward")
        self._x_shape = x.shape
        self._w_hat = self.quantized_weight()
        z, self._patches, self._pads = depthwise_conv2d_forward(x, self._w_hat, self.stride, self.padding)
        return self._finish_forward(z)

    def backward(self, dy, input_grad=True):
        dz = self._start_backward(dy)
        dx, dw = depthwise_conv2d_backward(dz, self._patches, self._w_hat, self._x_shape, self.stride,
                                           self._pads, input_grad)
        self._weight_grad(dw)
        return dx

    def get_config(self):
        return {"channels": self.channels, "kernel_size": list(self.kernel_size),
                "depth_multiplier": self.depth_multiplier, "stride": list(self.stride),
                "padding": self.padding, **self._linear_config()}


class _Pool(Module):
    """Shared constructor and config of the pooling layers (``stride`` defaults to ``pool_size``)."""

    def __init__(self, pool_size=2, *, stride=None, padding="VALID", dtype=np.float32):
        super().__init__()
        self.pool_size = _pair(pool_size, "pool_size")
        self.stride = self.pool_size if stride is None else _pair(stride, "stride")
        self.padding = _padding(padding)
        self.dtype = np.dtype(dtype)

    def get_config(self):
        return {"pool_size": list(self.pool_size), "stride": list(self.stride), "padding": self.padding,
                "dtype": self.dtype.name}


class MaxPool2D(_Pool):
    """Max pooling over NHWC windows (SAME pads with -inf); the gradient goes to each window's first max."""

    def forward(self, x):
        check_layer_input(x, self.dtype, (None, None, None), "MaxPool2D.forward")
        self._y, self._xp, self._pads = max_pool2d_forward(x, self.pool_size, self.stride, self.padding)
        return self._y

    def backward(self, dy, input_grad=True):
        return max_pool2d_backward(dy, self._y, self._xp, self.pool_size, self.stride, self._pads)


class AvgPool2D(_Pool):
    """Average pooling over NHWC windows; SAME excludes padding from the divisor (TensorFlow)."""

    def forward(self, x):
        check_layer_input(x, self.dtype, (None, None, None), "AvgPool2D.forward")
        self._x_shape = x.shape
        y, self._counts, self._pads = avg_pool2d_forward(x, self.pool_size, self.stride, self.padding)
        return y

    def backward(self, dy, input_grad=True):
        return avg_pool2d_backward(dy, self._counts, self._x_shape, self.pool_size, self.stride, self._pads)

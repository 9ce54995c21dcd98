"""hls4ml's layer kernels on ``ap_fixed`` types (io_parallel; ``nnet_dense_latency.h``, ``nnet_activation.h``).

**Dense** (``dense_latency``; ``x`` of ``data_t``, ``W`` of ``weight_t``, ``b`` of ``bias_t``):

.. math::

    m_{kj} = A(x_k w_{kj}), \\qquad s_j^{(0)} = A(b_j), \\qquad
    s_j^{(k+1)} = A\\big(s_j^{(k)} + m_{kj}\\big) \\;(k = 0, \\dots, K-1), \\qquad y_j = R\\big(s_j^{(K)}\\big)

where :math:`A` is the assignment to ``accum_t`` (its quantization *and* overflow mode: each product is
quantized and fitted on its own, ``mult[index] = product(cache, weights[index])``), the accumulator starts
at the bias (``acc = (accum_t) biases``), every ``acc += mult`` is fitted (exact in ``accum_t``'s LSB, so only
its overflow mode acts), inputs in order :math:`k = 0, \\dots, K-1`, and :math:`R` is the cast to
``result_t``.  Each product is rounded and fitted from its exact value in one step (any :math:`W_x + W_w`).

**Conv2D** (``conv_2d_latency_cl``, channels last): the same Dense on every output pixel's patch
:math:`p = (x_{h s_h + i - t,\\; w s_w + j - l,\\; c})_{i, j, c}` flattened in the order ``(i, j, c)`` (hls4ml's
``fill_buffer``), with the kernel ``[f_h, f_w, C, F]`` flattened to ``[f_h f_w C, F]``; padded positions
(``t``, ``l``: top and left padding) hold 0, whose products add nothing.

**ReLU**: :math:`y = R(x)` where :math:`x > 0`, else 0.  **linear**: :math:`y = R(x)`.
"""
from __future__ import annotations

import numpy as np

from ...core.fixed import FixedArray, mul
from ..accumulate import sum as acc_sum
from .ap_types import ApType

__all__ = ["dense", "conv2d", "conv_patches", "relu", "linear"]


def _fixed(value, name: str) -> FixedArray:
    if not isinstance(value, FixedArray):
        raise TypeError(f"{name} must be a FixedArray (codes of its ap_fixed type), got {type(value).__name__}")
    return value


def _ap(value, name: str) -> ApType:
    if not isinstance(value, ApType):
        raise TypeError(f"{name} must be an ApType (see parse_ap_type), got {type(value).__name__}")
    return value


def dense(x: FixedArray, weight: FixedArray, bias: FixedArray, accum_t: ApType, result_t: ApType,
          *, return_accumulator: bool = False, bias_add: str = "preload", stats: dict | None = None):
    """hls4ml's Dense on ``x`` ``[..., K]``, ``weight`` ``[K, N]``, ``bias`` ``[N]`` (see the module formula).

    Returns ``y`` in ``result_t``'s format (and the final accumulators with ``return_accumulator``); the
    accumulators' ``.overflows`` counts the adds that overflowed (products and bias casts not included).
    ``bias_add="after"`` (not hls4ml's: a datapath that adds the bias last) starts the sum at 0 and adds
    :math:`A(b_j)` after the :math:`K` products, one more fitted add.  ``stats``, a dict when given, receives
    every overflow by cast: ``product_overflows`` (:math:`A(x_k w_{kj})`), ``bias_overflows``
    (:math:`A(b_j)`, cast for every row as each call does), ``add_overflows``, ``result_overflows``
    (:math:`R`) and ``adds`` (the fitted adds)."""
    x, weight, bias = _fixed(x, "dense: x"), _fixed(weight, "dense: weight"), _fixed(bias, "dense: bias")
    accum_t, result_t = _ap(accum_t, "dense: accum_t"), _ap(result_t, "dense: result_t")
    if weight.ndim != 2 or bias.ndim != 1 or x.ndim < 1:
        raise ValueError(f"dense: expects x [..., K], weight [K, N], bias [N]; got {x.shape}, {weight.shape}, "
                         f"{bias.shape}")
    k, n = weight.shape
    if x.shape[-1] != k or bias.shape[0] != n:
        raise ValueError(f"dense: x {x.shape}, weight {weight.shape} and bias {bias.shape} do not align "
                         f"(x's last axis must be K = {k}, bias N = {n})")
    if accum_t.n_bits:
        raise ValueError(f"dense: accum_t {accum_t} with N > 0 saturated bits is not modelled for the adds")
    if bias_add not in ("preload", "after"):
        raise ValueError(f"dense: bias_add must be 'preload' or 'after', got {bias_add!r}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    products = mul(x2.reshape(x2.shape[0], k, 1), weight.reshape(1, k, n), accum_t.fmt, accum_t.rounding,
                   accum_t.overflow)
    b_acc = accum_t.cast(bias)
    if bias_add == "preload":
        init = np.broadcast_to(b_acc.raw, (x2.shape[0], n))
        terms = products
    else:
        init = np.zeros((x2.shape[0], n), np.int64)
        last = np.broadcast_to(b_acc.raw, (x2.shape[0], 1, n))
        terms = FixedArray(np.concatenate([products.raw, last], axis=1), products.fmt)
    acc = acc_sum(terms, axis=1, acc=accum_t.fmt, overflow=accum_t.overflow, init=init)
    acc = FixedArray(acc.raw.reshape(*lead, n), acc.fmt, overflows=acc.overflows)
    y = result_t.cast(acc)
    if stats is not None:
        stats.update(product_overflows=int(products.overflows), bias_overflows=int(b_acc.overflows) * x2.shape[0],
                     add_overflows=int(acc.overflows), result_overflows=int(y.overflows),
                     adds=int(terms.raw.size))
    return (y, acc) if return_accumulator else y


def conv_patches(x: FixedArray, weight: FixedArray, stride=(1, 1), padding=(0, 0, 0, 0)) -> FixedArray:
    """The patches Conv2D multiplies: ``[B, OH, OW, fh fw C]`` in hls4ml's ``(i, j, c)`` order (see the module
    docstring), padded positions 0; ``x`` ``[B, H, W, C]``, ``weight`` ``[fh, fw, C, F]``."""
    x, weight = _fixed(x, "conv2d: x"), _fixed(weight, "conv2d: weight")
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"conv2d: expects x [B, H, W, C] and weight [fh, fw, C, F]; got {x.shape}, {weight.shape}")
    fh, fw, c, f = weight.shape
    if x.shape[3] != c:
        raise ValueError(f"conv2d: x has {x.shape[3]} channels, the weight {c}")
    sh, sw = (int(v) for v in stride)
    top, bottom, left, right = (int(v) for v in padding)
    if sh < 1 or sw < 1 or min(top, bottom, left, right) < 0:
        raise ValueError(f"conv2d: strides must be >= 1 and paddings >= 0, got {stride}, {padding}")
    codes = np.pad(x.raw, ((0, 0), (top, bottom), (left, right), (0, 0)))
    if codes.shape[1] < fh or codes.shape[2] < fw:
        raise ValueError(f"conv2d: the padded input {codes.shape[1:3]} is smaller than the kernel {(fh, fw)}")
    windows = np.lib.stride_tricks.sliding_window_view(codes, (fh, fw), axis=(1, 2))[:, ::sh, ::sw]
    patches = np.ascontiguousarray(np.moveaxis(windows, 3, -1))        # [B, OH, OW, fh, fw, C]
    b, oh, ow = patches.shape[:3]
    return FixedArray(patches.reshape(b, oh, ow, fh * fw * c), x.fmt)


def conv2d(x: FixedArray, weight: FixedArray, bias: FixedArray, accum_t: ApType, result_t: ApType, *,
           stride=(1, 1), padding=(0, 0, 0, 0), bias_add: str = "preload", stats: dict | None = None,
           return_accumulator: bool = False):
    """hls4ml's io_parallel Conv2D on ``x`` ``[B, H, W, C]``, ``weight`` ``[fh, fw, C, F]``, ``bias`` ``[F]``;
    ``stride`` ``(s_h, s_w)``, ``padding`` ``(top, bottom, left, right)``.  Returns ``[B, OH, OW, F]``
    (``bias_add``, ``stats``, ``return_accumulator``: as :func:`dense`; padded taps are products too)."""
    patches = conv_patches(x, weight, stride, padding)
    fh, fw, c, f = weight.shape
    return dense(patches, weight.reshape(fh * fw * c, f), bias, accum_t, result_t, bias_add=bias_add, stats=stats,
                 return_accumulator=return_accumulator)


def relu(x: FixedArray, result_t: ApType) -> FixedArray:
    """hls4ml's ``relu``: ``res = data > 0 ? (res_T) data : 0``; ``.overflows`` counts the casts that
    overflowed (those of positive values: the others are not cast)."""
    x, result_t = _fixed(x, "relu: x"), _ap(result_t, "relu: result_t")
    positive = x.raw > 0
    y = result_t.cast(FixedArray(np.where(positive, x.raw, 0), x.fmt))
    return FixedArray(np.where(positive, y.raw, 0), y.fmt, overflows=y.overflows)


def linear(x: FixedArray, result_t: ApType) -> FixedArray:
    """hls4ml's ``linear`` activation: ``res = (res_T) data``."""
    return _ap(result_t, "linear: result_t").cast(_fixed(x, "linear: x"))

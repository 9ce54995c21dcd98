"""Overflow-aware quantization-aware training: train for the datapath you have.

Plain QAT simulates the rounding of weights and activations but multiplies and adds in float, as if the
accumulator were infinitely wide. On a MAC array with a narrow accumulator (16 bits, saturating or wrapping
at every add) the integer sums leave its range and the network the hardware runs is not the one that was
trained. :class:`DatapathAware` runs a linear layer's forward pass through the target datapath instead, so
the loss sees what the hardware computes:

1. the input is brought to the integer codes of the target (scale and zero point of the preceding
   activation quantizer's range under the target's activation format, exactly as
   :func:`fxpsim.hardware.convert` derives them): :math:`\\tilde x = c_x - z_x`;
2. the weights the layer multiplies with, :math:`\\hat W = q_w(W)`, become the target's integer weights
   (``weights="hardware"``: the codes, per-channel scales :math:`s_{w,o}` and zero points that
   :func:`fxpsim.hardware.quantize_weights` gives, i.e. what the converted graph stores; a weight quantizer
   with a ``hardware_weights`` method, such as the accumulator-aware one of
   :mod:`fxpsim.quant.accumulator_aware`, supplies its own; ``weights="quantizer"``: the weight
   quantizer's :meth:`~fxpsim.quant.Quantizer.integer_form` as it is): :math:`\\tilde w = c_w - z_w`;
3. the bias becomes :math:`b_o^{int} = \\mathrm{round}(b_o / (s_x s_{w,o}))`, saturated to the bias
   register and then into the accumulator;
4. the datapath kernels (:func:`fxpsim.matmul` / :func:`fxpsim.conv2d` with ``acc=``) accumulate
   :math:`a = \\mathrm{fit}(\\cdots\\mathrm{fit}(b^{int} + \\tilde x_0 \\tilde w_0) \\cdots + \\tilde x_{K-1}
   \\tilde w_{K-1})` with the target's accumulator width, overflow mode (saturate, wrap, ...), order
   (sequential / adder tree), overflow point (every add / once at the end) and bias placement (preloaded or
   one more add after the sum) -- per add, never a Python loop over adds;
5. the accumulator is dequantized, :math:`z = s_x s_{w,o}\\, a`, and the layer finishes as usual: fused
   activation, then its activation quantizer (whose rounding stands in for the requantizer).

Backward (a straight-through estimator)
---------------------------------------
With :math:`\\hat x = s_x \\tilde x` and :math:`\\hat w = s_w \\tilde w` the dequantized operands, the STE
treats the code roundings as the identity and the exact sum as :math:`z^* = \\hat x\\, \\hat w + b`. The
accumulator's fit :math:`z = F(z^*)` is handled by ``overflow_grad``, giving a mask :math:`m \\in \\{0,1\\}`
per output:

.. math::

    \\frac{\\partial L}{\\partial z^*} = m \\odot \\frac{\\partial L}{\\partial z}, \\qquad
    \\frac{\\partial L}{\\partial \\hat W} = \\hat X^T \\Big(m \\odot \\frac{\\partial L}{\\partial z}\\Big), \\qquad
    \\frac{\\partial L}{\\partial x} = \\Big(m \\odot \\frac{\\partial L}{\\partial z}\\Big) \\hat W_{hw}^T, \\qquad
    \\frac{\\partial L}{\\partial b} = \\sum m \\odot \\frac{\\partial L}{\\partial z}

(for convolutions the same with im2col), then through the weight quantizer's own STE to ``W``.

``overflow_grad="mask"`` (default)
    :math:`m = 0` where *any* add of that output overflowed (saturated, or wrapped), tracked exactly by the
    kernel's per-output overflow counts. For a saturating accumulator this is the gradient of the
    saturated sum wherever the last add saturated (a sum at the rail does not move when a product grows);
    it is conservative for products added after an earlier saturation that the sum recovered from (their
    true derivative is 1, the mask gives 0). For a wrapping accumulator it drops the outputs whose value is
    garbage instead of pretending they are right.
``overflow_grad="final"``
    :math:`m = 1\\{a_{min} \\le z^*_{int} \\le a_{max}\\}`: the mask is approximated at the final sum (the
    exact, infinite-precision sum is computed with one more exact kernel call), i.e. the derivative of
    one fit at the end. Partial sums that clipped and came back are passed.
``overflow_grad="pass"``
    :math:`m = 1`: the overflow is treated as the identity (plain STE through saturation and wrap).

Two optional terms give the network a way *out* of overflow rather than only a way around it:

the weight scale (``scale_grad=True``, default)
    a sum held at the rail of a saturating accumulator is :math:`z = s_x s_{w,o}(\\pm L)`, which grows with
    the weight scale (the clip of PACT, Choi et al. 2018, with the bound :math:`s_x s_w L`):
    :math:`\\partial z / \\partial s_{w,o} = z / s_{w,o}` there, handed to a learnable weight quantizer's scale
    (a ``FakeQuant``'s range :math:`s = (b - a)/(q_{max} - q_{min})`, an ``AffineQuantizer``'s ``scale``, or
    the quantizer's own ``scale_grads``) -- so coarser weights can buy headroom;
an overflow penalty (``overflow_penalty`` :math:`\\lambda`, ``penalty_margin`` :math:`m`)
    :math:`P = \\frac{\\lambda}{N} \\sum_{n,o} \\max(0, |a^*_{n,o}| / L - m)` over the exact sums
    :math:`a^* = z^* / (s_x s_{w,o})` of a batch of :math:`N` (WrapNet's overflow penalty, Ni et al. 2020;
    :math:`z^*` is one float32 product of the layer's input and the dequantized hardware weights, plus the bias),
    whose gradient :math:`\\partial P/\\partial z^* = \\frac{\\lambda}{N} \\mathrm{sign}(a^*) / (L s_x s_w)` and
    :math:`\\partial P/\\partial s_{w,o} = -\\frac{\\lambda}{N}\\sum_n |a^*| / (L s_{w,o})` (where
    :math:`|a^*| > mL`) is added to the backward pass (it is not part of the loss ``fit`` reports). A margin
    :math:`m < 1` keeps headroom for the partial sums and for inputs not seen in training; the final sum is
    exactly what matters for a wrapping accumulator (two's complement wrap-around cancels when the final sum
    is in range).

The forward is exactly what the converted graph computes up to the activation quantizer standing in for
the requantizer (the accumulators are bit for bit those of :func:`fxpsim.hardware.convert` +
:meth:`IntegerGraph.run` on the same codes; the requantized outputs may differ by one LSB where the two
roundings disagree).

Use :func:`datapath_aware` to wrap every Dense/Conv2D/DepthwiseConv2D of a ``Sequential`` (the wrappers
share the model's layers: training the wrapped model trains the model, which then converts and simulates
as usual), or wrap one layer with :class:`DatapathAware` (the layer option). Batch norm must be folded
first (the hardware multiplies folded weights).

This module wraps models; the layer wrapper lives in :mod:`fxpsim.hardware.qat_layer` and the integer-grid
helpers it uses in :mod:`fxpsim.hardware.qat_grid` (both importable from here).
"""
from __future__ import annotations

import numpy as np

from ..nn import conv as _conv
from ..nn.layers import BatchNorm, Flatten, Quantize, ReLU
from ..nn.module import Module, Sequential
from .qat_grid import integer_grid  # noqa: F401
from .qat_layer import _KINDS, OVERFLOW_GRADIENTS, DatapathAware, _load_config

__all__ = ["DatapathAware", "datapath_aware", "unwrap", "overflow_report", "OVERFLOW_GRADIENTS"]


def _stage_layout(layers):
    """(node name, run-order index) of every linear layer, as :func:`fxpsim.hardware.convert` names them
    (fused activations assumed for the run-order index)."""
    out, node_index, i = {}, 1, 0
    if layers and type(layers[0]) is Quantize:
        i = 1
    while i < len(layers):
        layer = layers[i]
        kind = _KINDS.get(type(layer))
        j = i + 1
        if kind is not None:
            out[i] = (f"{i}:{kind}", node_index)
            if layer.activation is None and layer.activation_quantizer is None and j < len(layers) and \
                    isinstance(layers[j], ReLU):
                j += 1
            if layer.activation_quantizer is None and j < len(layers) and type(layers[j]) is Quantize:
                j += 1
        node_index += 1
        i = j
    return out


def datapath_aware(model: Sequential, config, *, input_range=None, calibration_x=None, overflow_grad="mask",
                   weights="hardware", overflow_penalty=0.0, penalty_margin=1.0, scale_grad=True,
                   threads=1) -> Sequential:
    """``model`` with every Dense/Conv2D/DepthwiseConv2D running through ``config``'s datapath.

    Returns a new :class:`Sequential` whose linear layers are :class:`DatapathAware` wrappers around the
    model's own layers and whose other layers are the model's (nothing is copied): ``fit`` the returned model
    to train ``model`` for the target, then convert / simulate ``model`` as usual (or :func:`unwrap`).

    Each wrapper's input codes follow the nearest activation quantizer before it (a linear layer's, a
    ``ReLU``/``Quantize`` layer's; pooling and flatten keep codes). The first layer's input range is the
    leading ``Quantize``'s, else ``input_range``, else the min/max of ``calibration_x`` (as the converter
    calibrates it). Batch norm must be folded first (:func:`fxpsim.nn.fold_batchnorm`).

    Parameters
    ----------
    model : Sequential
    config : HardwareConfig, preset name, TOML path or mapping
    input_range : (lo, hi), optional
    calibration_x : ndarray, optional
    overflow_grad, weights, overflow_penalty, penalty_margin, scale_grad, threads
        As :class:`DatapathAware`.
    """
    if not isinstance(model, Sequential):
        raise TypeError(f"datapath_aware expects a Sequential, got {type(model).__name__}")
    config = _load_config(config)
    layers = list(unwrap(model).layers)
    if any(isinstance(layer, BatchNorm) for layer in layers):
        raise ValueError("datapath_aware: the model has BatchNorm layers; the hardware multiplies folded weights, "
                         "so fold them first (fxpsim.nn.fold_batchnorm) or train without batch norm")
    if input_range is None and calibration_x is not None:
        input_range = (float(np.min(calibration_x)), float(np.max(calibration_x)))
    names = _stage_layout(layers)
    current = None                       # the quantizer whose range the next layer's input has
    out: list[Module] = []
    for i, layer in enumerate(layers):
        if i in names:
            if current is None and input_range is None and any(j < i for j in names):
                raise ValueError(f"datapath_aware: layer {i} ({type(layer).__name__}) has no activation quantizer "
                                 "before it that defines its input codes")
            if current is None and input_range is None:
                raise ValueError("datapath_aware: the model has no leading Quantize layer; give input_range (the "
                                 "real range of the network input) or calibration_x")
            name, index = names[i]
            out.append(DatapathAware(layer, config, input_quantizer=current,
                                     input_range=input_range if current is None else None,
                                     overflow_grad=overflow_grad, weights=weights, overflow_penalty=overflow_penalty,
                                     penalty_margin=penalty_margin, scale_grad=scale_grad, node_name=name,
                                     node_index=index,
                                     threads=threads))
            current = layer.activation_quantizer
            input_range = None
        else:
            out.append(layer)
            q = getattr(layer, "activation_quantizer", None)
            if q is not None:
                current = q
            elif not isinstance(layer, (Flatten, ReLU, Quantize, _conv.MaxPool2D, _conv.AvgPool2D)):
                current = None                   # an unknown layer: its outputs are off the grid
    return Sequential(out)


def unwrap(model):
    """The plain model: :class:`DatapathAware` wrappers replaced by their layers (nothing copied)."""
    if isinstance(model, DatapathAware):
        return model.layer
    if isinstance(model, Sequential):
        return Sequential([unwrap(layer) for layer in model.layers])
    return model


def overflow_report(model) -> list[dict]:
    """Per wrapped layer of the last forward pass: node name, adds that overflowed, outputs with an overflow,
    outputs."""
    layers = model.layers if isinstance(model, Sequential) else [model]
    return [{"node": m.node_name, "overflows": m.overflows, "overflowed_outputs": m.overflowed_outputs,
             "outputs": m.outputs} for m in layers if isinstance(m, DatapathAware)]

"""TensorFlow- and PyTorch-compatible fake quantization, bit-exact, in numpy + Cython.

TensorFlow (2.x CPU kernels, float32, denormals flushed to zero)
----------------------------------------------------------------
Same names and arguments as ``tf.quantization.*``:
:func:`fake_quant_with_min_max_args`, :func:`fake_quant_with_min_max_args_gradient`,
:func:`fake_quant_with_min_max_vars`, :func:`fake_quant_with_min_max_vars_gradient`,
:func:`fake_quant_with_min_max_vars_per_channel`,
:func:`fake_quant_with_min_max_vars_per_channel_gradient` (channel = last axis), and
:func:`fake_quant_with_min_max_vars_fused` (forward + gradient in one pass).

The range is nudged so that real zero is exactly a code (:func:`tf_nudge`), then

.. math::

    q(x) = s \\left\\lfloor (\\mathrm{clamp}(x, a', b') - a') \\cdot s^{-1} - z_q + \\tfrac12 \\right\\rfloor,
    \\qquad z_q = \\lfloor -a' s^{-1} + \\tfrac12 \\rfloor

with every operation rounded to float32.  The *args* and *per-channel* ops multiply by
the precomputed ``inv_scale`` = fl((q_max - q_min) / (b - a)); the *vars* op divides by
``scale`` = fl((b - a) / (q_max - q_min)).  The two differ within an ulp of a half step,
so the ops do not give identical bits (both are reproduced).  Gradients:

.. math::

    \\frac{\\partial L}{\\partial x} = g\\,1_{a' \\le x \\le b'}, \\quad
    \\frac{\\partial L}{\\partial a} = \\sum_{x < a'} g, \\quad
    \\frac{\\partial L}{\\partial b} = \\sum_{x > b'} g

Inputs of another float dtype are converted to float32 (TF accepts only float32).
NaN inputs give NaN outputs and zero gradients.  ``min == max == 0`` gives zeros
(vars ops; gradients pass through), as in TensorFlow.

PyTorch (2.x CPU kernels)
-------------------------
:func:`fake_quantize_per_tensor_affine`, :func:`fake_quantize_per_channel_affine` and
their ``_backward``; the learnable (LSQ) :func:`fake_quantize_learnable_per_tensor_affine`
and :func:`fake_quantize_learnable_per_tensor_affine_backward` (formulas in their docstrings).

The TensorFlow ops are in :mod:`fxpsim.quant.fake_quant_tf`, the PyTorch ops in
:mod:`fxpsim.quant.fake_quant_torch` (with :func:`check_affine_params` and :func:`affine_codes`);
all are importable from here.
"""
from __future__ import annotations

from . import fake_quant_tf, fake_quant_torch
from .fake_quant_tf import *  # noqa: F401,F403
from .fake_quant_torch import *  # noqa: F401,F403
from .fake_quant_torch import _MIN_SCALE, _learnable_backward_terms, affine_codes, check_affine_params  # noqa: F401

__all__ = list(fake_quant_tf.__all__) + list(fake_quant_torch.__all__)

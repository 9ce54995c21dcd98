r"""onnxruntime's float32 ``Erf`` on x86-64 with FMA3 (MLAS ``MlasErfKernelFma3``, the kernel its CPU ``Erf``
calls on such CPUs), bit for bit, in numpy (measured live in ``tests/frontends/test_onnx_transformer.py``;
onnxruntime 1.32). ``fma`` is a float32 fused multiply-add, every other operation one float32 rounding:

.. math::

    a = |x|, \qquad s = \mathrm{fl}(a^2)

* :math:`a < 0.921875`: :math:`r = \mathrm{fma}(P(s), a, a)` with :math:`P` evaluated by Horner's rule in
  ``fma`` steps (coefficients :data:`SMALL`);
* otherwise :math:`t = -\mathrm{fma}(B(a), a, a)` (:data:`BIG`, Horner in ``fma``),
  :math:`t = \max(t, -88.376)`, :math:`k = \mathrm{fl}(\mathrm{fma}(\log_2 e, t, C) - C)` (:math:`C = 1.5 \cdot
  2^{23}`: :math:`t \log_2 e` rounded to an integer), :math:`f = \mathrm{fma}(k, \ln 2_{lo},
  \mathrm{fma}(k, \ln 2_{hi}, t))`, :math:`E(f)` by Horner in ``fma`` (:data:`EXP`),
  :math:`r = \mathrm{fl}(1 - \mathrm{fl}(E(f) \cdot 2^k))`;

and :math:`\mathrm{erf}(x) = \mathrm{sign}(x) \cdot r` (the sign bit of :math:`x` copied, so :math:`\pm 0`,
:math:`-0.0` kept). MLAS's constant table holds an upper range 3.725 that its C kernel applies to :math:`|x|`;
the x86-64 FMA3 kernel onnxruntime 1.32 runs does not (clamping differs on 24 240 of 200 011 inputs, all with
:math:`|x| > 3.725`; without it 0 differ).
"""
from __future__ import annotations

import numpy as np

from .mlas import fma32

__all__ = ["erf", "SMALL", "BIG", "EXP"]

F32 = np.float32
#: MLAS's constants (``MlasErfConstants``), float32.
SMALL = [F32(v) for v in (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2, 1.12818025e-1, -3.76124859e-1,
                          1.28379151e-1)]
BIG = [F32(v) for v in (1.72948930e-5, -3.83208680e-4, 3.88393435e-3, -2.42545605e-2, 1.06777847e-1,
                        6.34846687e-1, 1.28717512e-1)]
EXP = [F32(v) for v in (1.38319808e-3, 8.37550033e-3, 4.16689515e-2, 1.66664466e-1, 4.99999851e-1, 1.0, 1.0)]
_SPLIT, _LOWER = F32(0.921875), F32(-88.3762626647949)
_LOG2E, _LN2_HI, _LN2_LO, _C = F32(1.44269504088896341), F32(-6.93145752e-1), F32(-1.42860677e-6), F32(1.25829120e+7)


def _horner(coeffs, v):
    r = np.full(v.shape, coeffs[0], F32)
    for c in coeffs[1:]:
        r = fma32(r, v, np.full(v.shape, c, F32))
    return r


def erf(x) -> np.ndarray:
    """MlasErfKernelFma3 (module docstring), float32 in and out."""
    x = np.asarray(x, F32)
    bits = x.view(np.uint32)
    sign = bits & np.uint32(0x80000000)
    a = (bits & np.uint32(0x7FFFFFFF)).view(F32)
    with np.errstate(all="ignore"):
        s = (a * a).astype(F32)
        small = fma32(_horner(SMALL, s), a, a)
        big_mask = _SPLIT <= a
        ab = np.where(big_mask, a, F32(0))
        t = -fma32(_horner(BIG, ab), ab, ab)
        t = np.maximum(t, _LOWER).astype(F32)
        k = (fma32(np.full(t.shape, _LOG2E, F32), t, np.full(t.shape, _C, F32)) - _C).astype(F32)
        f = fma32(k, np.full(t.shape, _LN2_LO, F32), fma32(k, np.full(t.shape, _LN2_HI, F32), t))
        e = _horner(EXP[:7], f)
        scale = ((k.astype(np.int32) + 127) << 23).astype(np.int32).view(F32)
        big = (F32(1) - (e * scale).astype(F32)).astype(F32)
    r = np.where(big_mask, big, small).astype(F32)
    return (r.view(np.uint32) | sign).view(F32)

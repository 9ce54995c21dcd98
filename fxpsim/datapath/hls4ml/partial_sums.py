"""The exact partial sums of hls4ml's Dense / Conv2D when ``accum_t`` *rounds* the products, and their worst case.

With :math:`F_{acc} < F_x + F_w` (``accum_t`` has fewer fraction bits than a product), each product is quantized
on its own before it is added (``mult[index] = product(...)`` assigns to ``accum_t``, :mod:`.layers`):

.. math::

    p_{kj} = R\\big(x_k w_{kj}\\, 2^{F_{acc} - F_x - F_w}\\big), \\qquad
    s_j^{(0)} = R\\big(b_j\\, 2^{F_{acc} - F_b}\\big), \\qquad s_j^{(k+1)} = s_j^{(k)} + p_{kj}

in the accumulator's LSB, :math:`R` the ``accum_t`` quantization mode and no overflow (the *unfitted* sums).
The bits an accumulator needs are those of these sums -- not of the exact products, whose sum can be larger or
smaller by up to :math:`K` LSBs, nor zero as fxpsim reported before.  :func:`partial_sums` gives their range
over data; :func:`worst_case_sum` the bound over every input of ``x``'s code range :math:`[l, h]`:

.. math::

    \\max_j\\; |s_j^{(0)}| + \\sum_k \\max\\big(|R(l\\,w_{kj}\\,2^{d})|,\\ |R(h\\,w_{kj}\\,2^{d})|\\big),
    \\qquad d = F_{acc} - F_x - F_w

(every mode is monotone in :math:`x`, so each product's largest magnitude is at an end of the range).  With
:math:`d \\ge 0` both reduce to the exact-product formulas.
"""
from __future__ import annotations

import numpy as np

from ...core.fixed import FixedArray, mul
from ...core.formats import Format, Overflow
from .ap_types import ApType

__all__ = ["rounded_products", "partial_sums", "worst_case_sum"]

_WIDE = 62


def _wide(accum_t: ApType) -> ApType:
    """``accum_t``'s LSB and quantization, 62 bits, wrapping (nothing the checks below let through overflows)."""
    return ApType(Format(_WIDE, accum_t.fmt.frac, True), accum_t.rounding, Overflow.WRAP)


def rounded_products(x: FixedArray, weight: FixedArray, accum_t: ApType) -> np.ndarray:
    """:math:`p_{kj}` for ``x`` ``[B, K]`` (or ``[B, 1]``: the same input for every ``k``), ``weight``
    ``[K, N]``: int64 ``[B, K, N]`` in ``accum_t``'s LSB."""
    wide = _wide(accum_t)
    bound = max(abs(x.fmt.min_code), abs(x.fmt.max_code)) * int(np.abs(weight.raw).max(initial=0))
    shift = accum_t.fmt.frac - x.fmt.frac - weight.fmt.frac
    if (bound << max(shift, 0)).bit_length() > _WIDE - 2:
        raise ValueError(f"products of {x.fmt} and {weight.fmt} in the LSB of {accum_t} exceed {_WIDE} bits")
    k, n = weight.shape
    p = mul(x.reshape(x.shape[0], x.shape[1], 1), weight.reshape(1, k, n), wide.fmt, wide.rounding, wide.overflow)
    return p.raw.astype(np.int64)


def partial_sums(x: FixedArray, weight: FixedArray, bias: FixedArray, accum_t: ApType, bias_add: str = "preload"):
    """The unfitted running sums of Dense (module formula) on ``x`` ``[..., K]``: ``(final, low, high)`` with
    ``final`` ``[..., N]`` (int64, accumulator LSB) and the smallest and largest partial sum, the starting value
    (the bias, or 0 with ``bias_add="after"``) included."""
    k, n = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    p = rounded_products(x2, weight, accum_t)
    b = _wide(accum_t).cast(bias).raw.astype(np.int64)
    if bias_add == "preload":
        start = np.broadcast_to(b, (x2.shape[0], 1, n))
        seq = np.concatenate([start, p], axis=1)
    elif bias_add == "after":
        seq = np.concatenate([np.zeros((x2.shape[0], 1, n), np.int64), p,
                              np.broadcast_to(b, (x2.shape[0], 1, n))], axis=1)
    else:
        raise ValueError(f"partial_sums: bias_add must be 'preload' or 'after', got {bias_add!r}")
    run = np.cumsum(seq, axis=1)
    final = run[:, -1, :].reshape(*lead, n)
    if run.size == 0:
        return final, 0, 0
    return final, int(run.min()), int(run.max())


def worst_case_sum(x_fmt: Format, x_range, weight: FixedArray, bias: FixedArray, accum_t: ApType) -> int:
    """The largest possible :math:`|s_j^{(k)}|` (module formula) for inputs with codes in ``x_range`` ``(l, h)``
    of format ``x_fmt``; ``weight`` ``[K, N]`` (a conv kernel flattened to ``[f_h f_w C, F]``)."""
    lo, hi = (int(v) for v in x_range)
    ends = FixedArray(np.array([lo, hi], np.int64).reshape(2, 1), x_fmt)
    p = np.abs(rounded_products(ends, weight, accum_t).astype(object))          # [2, K, N]
    per_out = np.maximum(p[0], p[1]).sum(axis=0)
    b = np.abs(_wide(accum_t).cast(bias).raw.astype(object))
    return int(max((per_out + b).ravel(), default=0))

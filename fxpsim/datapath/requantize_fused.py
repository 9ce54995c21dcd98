"""The fused output stage of a :class:`~fxpsim.datapath.requantize.Requantizer`.

For ``double``/``single`` requantizers on accumulators of at most 32 bits, gemmlowp's roundings,
the shifts and the output zero point fold into one multiply, one add and one arithmetic shift per
channel: :func:`_fused_constants` derives those constants (with the proof that they give the same
bits), :func:`_tiled_constants` repeats them along a row, and :func:`_fused_apply` applies them.
:meth:`Requantizer._output_codes <fxpsim.datapath.requantize.Requantizer._output_codes>` and the
fused int8 kernel (:mod:`fxpsim.datapath.conv_int8`) use them.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from ..core.fixed import Rounding
from .integer_checks import INT32_MAX, INT32_MIN

if TYPE_CHECKING:
    from .requantize import Requantizer


def _fused_apply(x: np.ndarray, y: np.ndarray, mult, add, nudge, shift) -> None:
    """``y = (x * mult + add - [x * mult < -2^30] * nudge) >> shift`` (see :func:`_fused_constants`)."""
    np.multiply(x, mult, out=y)
    if nudge is not None:
        y += 1 << 30
        sign = y >> 63                  # -1 where x * mult + 2^30 < 0, else 0
        sign &= nudge                   # nudge holds -2^31 (or 0 for channels without it)
        y += sign
        y += add - (1 << 30)
    else:
        y += add
    y >>= shift


@functools.lru_cache(maxsize=256)
def _tiled_constants(rq: Requantizer, acc_bits: int, zero_point: int, rep: int):
    """:func:`_fused_constants` repeated ``rep`` times (per-channel rows of ``rep`` pixels)."""
    return tuple(None if c is None else np.tile(c, rep)
                 for c in _fused_constants(rq, acc_bits, zero_point))


def _fused_constants(rq: Requantizer, acc_bits: int, zero_point: int):
    r"""Per-channel ``(multiplier, addend, nudge, shift)`` of :meth:`Requantizer._output_codes`, or None
    (:func:`_fused_constants_at`).  The constants themselves never depend on ``acc_bits``; only whether they
    are valid does, and every condition holds for all narrower accumulators once it holds for one (each bounds
    :math:`|x| \le 2^{W-1}`), so the 32-bit constants serve every ``acc_bits <= 32`` they exist for: one
    derivation per requantizer instead of one per width (an accumulator-width sweep asks for 25)."""
    if 1 <= acc_bits <= 32:
        wide = _fused_constants_at(rq, 32, zero_point)
        if wide is not None:
            return wide
    return _fused_constants_at(rq, acc_bits, zero_point)


@functools.lru_cache(maxsize=1024)
def _fused_constants_at(rq: Requantizer, acc_bits: int, zero_point: int):
    r"""Per-channel ``(multiplier, addend, nudge, shift)`` of :meth:`Requantizer._output_codes`, or None.

    For an accumulator :math:`x` with :math:`|x| \le 2^{W-1}` (``W = acc_bits`` :math:`\le 32`):

    ``double`` (:math:`\ell = \max(s, 0)`, :math:`r = \max(-s, 0)`, :math:`h = \lfloor 2^{r-1} \rfloor`):
    when :math:`W - 1 + \ell \le 31` the int32 wrap of :math:`x 2^{\ell}` is the identity and
    :math:`\mathrm{SRDHM}` never saturates (:math:`m > -2^{31}`), so with :math:`p = x\,m\,2^{\ell}`,
    :math:`v = \lfloor (p + 2^{30}) / 2^{31} \rfloor` and
    :math:`\mathrm{RDBPOT}(v, r) = \lfloor (v + h - [v < 0][r > 0]) / 2^r \rfloor`; since
    :math:`\lfloor \lfloor a / 2^{31} \rfloor / 2^r \rfloor = \lfloor a / 2^{31+r} \rfloor` and
    :math:`v < 0 \Leftrightarrow p < -2^{30}`,

    .. math:: y + z = \big\lfloor (p + 2^{30} + h 2^{31} + z 2^{31+r}
              - [p < -2^{30}][r > 0]\, 2^{31}) / 2^{31+r} \big\rfloor .

    ``double`` with ``final_rounding="half_up"`` (LiteRT's optimized x86-64 ``MultiplyByQuantizedMultiplier``:
    the last shift rounds ties toward :math:`+\infty`, :math:`\lfloor (v + h) / 2^r \rfloor`): the same without
    the :math:`[p < -2^{30}]` term (no nudge).

    ``single`` (:math:`t = 31 - s`; ``final_rounding`` None or ``"half_up"``, its own): when the int32 wrap is the identity over the whole range of
    :math:`x`, :math:`y + z = \lfloor (x m + 2^{t-1} + z 2^t) / 2^t \rfloor`.

    Every intermediate is bounded in exact integers here; None when any could leave int64.
    """
    if rq.kind not in ("double", "single") or not 1 <= acc_bits <= 32 or rq.multiplier_bits != 31 \
            or rq.final_rounding not in (None, Rounding.HALF_UP):
        return None
    tie_up = rq.final_rounding is Rounding.HALF_UP
    top = 1 << (acc_bits - 1)                       # |x| <= top
    mults, adds, nudges, shifts = [], [], [], []
    for m, s in zip(rq.multiplier, rq.shift):
        if rq.kind == "double":
            left, right = max(s, 0), max(-s, 0)
            if acc_bits - 1 + left > 31 or m == INT32_MIN:
                return None
            mult = m << left
            add = (1 << 30) + (((1 << right) >> 1) << 31) + (zero_point << (31 + right))
            nudge = -(1 << 31) if right and not tie_up else 0
            shift = 31 + right
        else:
            t = 31 - s
            lo_y, hi_y = (-top * m + (1 << (t - 1))) >> t, ((top - 1) * m + (1 << (t - 1))) >> t
            if lo_y < INT32_MIN or hi_y > INT32_MAX:
                return None                         # the int32 wrap could act
            mult, add, nudge, shift = m, (1 << (t - 1)) + (zero_point << t), 0, t
        if top * abs(mult) + abs(add) + (1 << 30) + abs(nudge) >= 1 << 63:
            return None
        mults.append(mult)
        adds.append(add)
        nudges.append(nudge)
        shifts.append(shift)
    nudge = np.array(nudges, np.int64) if any(nudges) else None
    return (np.array(mults, np.int64), np.array(adds, np.int64), nudge, np.array(shifts, np.int64))

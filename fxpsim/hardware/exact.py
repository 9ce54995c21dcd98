"""The exact datapath: the one reference every comparison, sweep and sensitivity of fxpsim uses.

For a :class:`~fxpsim.hardware.HardwareConfig` it is :meth:`HardwareConfig.exact_datapath` (an accumulator
that never overflows, the full bias, the full 31-bit multiplier, no K-tiles, no lookup tables; the user
pins any of the last ones with ``keep=``).  For a plain :class:`~fxpsim.graph.Datapath` (an imported graph's
runtime) it is the same datapath with a 32-bit (TFLite/native requantization) or 62-bit wrapping accumulator
that fits at every add.
"""
from __future__ import annotations

import dataclasses

__all__ = ["exact_datapath_of", "same_but_accumulator"]

#: Fields a width sweep changes point by point, or that only name the datapath.
ACCUMULATOR_FIELDS = ("name", "description", "accumulator_bits", "accumulator_overflow", "overflow_at",
                      "bias_bits", "tile_accumulator_bits", "layers", "activation_lut_entries",
                      "activation_lut_interpolation")


def _exact_bits(dp) -> int:
    schemes = (getattr(dp, "requantization", ""), getattr(dp, "dense_requantization", None) or "")
    return 62 if all(s in ("shift", "float", "") for s in schemes) else 32


def exact_datapath_of(datapath, keep=()):
    """The exact datapath of ``datapath`` (a HardwareConfig or a Datapath).

    Parameters
    ----------
    datapath : HardwareConfig or Datapath
    keep : iterable of str
        For a HardwareConfig, what the user pins (see :meth:`HardwareConfig.exact_datapath`).

    Returns
    -------
    The same type: :math:`a = b + \\sum_k p_k` computed without loss (every partial sum fits), everything
    else as in ``datapath``.
    """
    if hasattr(datapath, "exact_datapath"):
        return datapath.exact_datapath(keep=keep)
    if keep:
        raise ValueError(f"exact_datapath_of: keep={keep!r} applies to a HardwareConfig, not to {type(datapath).__name__}")
    changes = dict(accumulator_bits=_exact_bits(datapath), accumulator_overflow="wrap", overflow_at="add")
    fields = {f.name for f in dataclasses.fields(datapath)}
    return dataclasses.replace(datapath, **{k: v for k, v in changes.items() if k in fields})


def same_but_accumulator(a, b) -> bool:
    """Whether two node datapaths differ only in the accumulator's width, overflow mode and where it
    overflows (and in the bias register that follows the accumulator): what a width sweep's fast path
    models.  A short multiplier, K-tiles, a shifted bias or another zero-point handling differ."""
    fa = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
    fb = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
    keys = (set(fa) | set(fb)) - set(ACCUMULATOR_FIELDS)
    return all(fa.get(k) == fb.get(k) for k in keys)

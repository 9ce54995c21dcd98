"""Overflow logging: :func:`overflow_log` collects the overflow events of every fxpsim operation in a block.

Each operation that can overflow calls :func:`record_overflow` with its name, how many elements (or adds)
overflowed and the range of the exact values it was asked to represent (as MATLAB's fipref logging);
:func:`_logging` tells it whether any log is active, so that the range is computed only then
(:func:`_range`: the finite minimum and maximum).  Logs nest and are per context (a ``ContextVar``).
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["overflow_log", "OverflowLog", "record_overflow"]


@dataclass
class _LogEntry:
    count: int = 0
    calls: int = 0
    min: float = math.inf
    max: float = -math.inf


class OverflowLog:
    """Overflow events collected by :func:`overflow_log`, by operation name.

    ``log[name]`` has ``count`` (overflowed elements or adds), ``calls``, and ``min`` / ``max``
    of the exact values the operation was asked to represent (as MATLAB's fipref logging).
    """

    def __init__(self):
        self.entries: dict[str, _LogEntry] = {}

    def add(self, op: str, count: int, lo: float, hi: float) -> None:
        e = self.entries.setdefault(op, _LogEntry())
        e.count += int(count)
        e.calls += 1
        e.min, e.max = min(e.min, _as_float(lo)), max(e.max, _as_float(hi))

    def __getitem__(self, op: str) -> _LogEntry:
        return self.entries[op]

    def __contains__(self, op: str) -> bool:
        return op in self.entries

    @property
    def total(self) -> int:
        return sum(e.count for e in self.entries.values())

    def as_dict(self) -> dict:
        return {k: vars(v).copy() for k, v in self.entries.items()}

    def __repr__(self) -> str:
        return f"OverflowLog({self.as_dict()})"


def _as_float(value) -> float:
    """``float(value)``, with ±inf for exact values (huge ints, Fractions) beyond float64's range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_ACTIVE_LOGS: contextvars.ContextVar[tuple] = contextvars.ContextVar("fxpsim_logs", default=())


@contextlib.contextmanager
def overflow_log() -> Iterator[OverflowLog]:
    """Collect overflow counts and value ranges of every fxpsim operation inside the block.

    >>> with overflow_log() as log:                     # doctest: +SKIP
    ...     from_float([1.0, 300.0], "Q7.8")
    >>> log["from_float"].count                         # doctest: +SKIP
    1
    """
    log = OverflowLog()
    token = _ACTIVE_LOGS.set(_ACTIVE_LOGS.get() + (log,))
    try:
        yield log
    finally:
        _ACTIVE_LOGS.reset(token)


def record_overflow(op: str, count: int, lo: float, hi: float) -> None:
    """Add an event to every active :func:`overflow_log` (used by the datapath layer too)."""
    for log in _ACTIVE_LOGS.get():
        log.add(op, count, lo, hi)


def _logging() -> bool:
    return bool(_ACTIVE_LOGS.get())


def _range(values: np.ndarray):
    finite = values[np.isfinite(values)] if values.size else values
    if finite.size == 0:
        return math.nan, math.nan
    return float(finite.min()), float(finite.max())

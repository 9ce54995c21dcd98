"""Plain-text tables, for every layer that prints one (the graph's summary, the reports, the sweeps, the
command line): a leaf module that imports nothing of fxpsim."""
from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["format_table", "format_value"]


def format_value(value: Any, digits: int = 4) -> str:
    """One cell: ``-`` for None, yes/no for booleans, ``digits`` significant digits for floats (scientific
    beyond [1e-3, 1e6)), ``inf``/``nan`` spelled out."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if math.isnan(value):
            return "nan"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}".rstrip("0").rstrip(".") or "0"
    return str(value)


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table: numeric columns right-aligned, text columns left-aligned."""
    cells = [[format_value(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    text = [any(isinstance(row[i], str) for row in rows) for i in range(len(headers))]

    def join(values):
        return "  ".join(v.ljust(w) if t else v.rjust(w) for v, w, t in zip(values, widths, text)).rstrip()
    return "\n".join([join(headers), join(["-" * w for w in widths])] + [join(r) for r in cells])

r"""Integer lookup-table activations, as NPUs implement sigmoid, tanh, hard-swish and softmax.

An NPU evaluates an elementwise nonlinearity :math:`f` on integer codes with a table of ``entries`` output
codes (a power of two, :math:`E = 2^e`) indexed by the top :math:`e` bits of the input code, optionally
interpolating linearly between adjacent entries with the low bits; softmax becomes an exp table on code
differences, an integer sum and an integer division. This module builds those tables and applies them; every
rounding is stated below. :class:`fxpsim.HardwareConfig` selects them with ``activation_lut_entries`` and
``activation_lut_interpolation`` (TOML ``[activations] lut_entries``, ``lut_interpolation``).

Unary tables (:func:`build_table`, :func:`lut_lookup`)
------------------------------------------------------
Input codes :math:`q \in [q_{min}, q_{min} + N - 1]`, :math:`N = 2^b` (``input_bits`` :math:`b`), real value
:math:`s_x (q - z_x)`; output codes on :math:`(s_y, z_y)` clamped to :math:`[lo, hi]`. The offset code
:math:`u = q - q_{min} \in [0, N)` is split as :math:`u = i\,2^r + t` with :math:`r = b - e \ge 0`,
:math:`i = u \gg r` (the top :math:`e` bits), :math:`t = u \mathbin{\&} (2^r - 1)` (the low :math:`r` bits).
An entry is the function at a sample point :math:`u_k`, rounded to an output code:

.. math:: T_k = \mathrm{clamp}\big(\mathrm{round}(f(x_k) / s_y) + z_y,\ lo,\ hi\big), \qquad
          x_k = \mathrm{fl}_{64}\big(s_x \cdot (u_k + (q_{min} - z_x))\big)

(``round`` is the ``rounding`` argument, default half away from zero as TFLite's ``LUTPopulate``, applied
exactly to the float64 value :math:`\mathrm{fl}_{64}(f(x_k) / s_y)` by :func:`fxpsim.from_float`).

``interpolation="none"``: :math:`E` entries sampled at the segment centres :math:`u_k = k\,2^r + (2^r - 1)/2`
(a half-integer code when :math:`r \ge 1`), and :math:`y = T_i`: every code reads the sample nearest to it
among its segment's, the piecewise-constant table with the smallest error for a monotone :math:`f`. With
:math:`E = N` (:math:`r = 0`) the table has one entry per code, :math:`u_k = k`: exact per code.

``interpolation="linear"``: :math:`E + 1` entries at the segment ends :math:`u_k = k\,2^r`,
:math:`k = 0 \ldots E` (the last one at :math:`u = N`, one past the largest code, only used for the last
segment's slope, as TFLite's 513-entry int16 tables), and

.. math:: y = T_i + \left\lfloor \frac{(T_{i+1} - T_i)\, t + 2^{r-1}}{2^r} \right\rfloor

(TFLite's ``lut_lookup_with_interpolation``: ``(slope * offset + 64) >> 7`` for :math:`r = 7`; the
rounding is half up, toward :math:`+\infty`, for both signs of the slope). The result always lies between
:math:`T_i` and :math:`T_{i+1}` (:math:`0 \le t < 2^r`), so no clamp is needed after it. Linear
interpolation needs :math:`r \ge 1` (fewer entries than codes).

Softmax (:func:`lut_softmax`)
-----------------------------
Along the last axis, with :math:`m = \max_j x_j` (codes) and :math:`d_j = x_j - m \in [-(N - 1), 0]`:

1. :math:`e_j = \mathrm{lookup}(d_j + N - 1)` in an exp table built as above over the :math:`b`-bit offset
   code :math:`u = d + N - 1` with :math:`f(x) = e^{x}` on :math:`x = \mathrm{fl}_{64}(\mathrm{fl}_{64}(\beta
   s_x) \cdot (u_k - (N - 1)))`, output codes :math:`\mathrm{round}(e^x 2^{F})` (``exp_frac_bits``
   :math:`F = 15`, 1.0 = 32768) clamped to the unsigned ``exp_bits`` = 16-bit range :math:`[0, 65535]`.
2. :math:`S = \sum_j e_j` in a ``sum_bits`` = 32-bit signed accumulator that saturates at every add
   (sequential, starting from 0; saturating adds are counted as overflows).
3. :math:`y_j = \mathrm{clamp}\big(z_y + \lfloor e_j / (S\,s_y) + 1/2 \rfloor\big)`: one exact integer
   division with round half up (:math:`s_y` taken as the exact binary fraction :math:`a / 2^c` of its float
   value: :math:`\lfloor (2 e_j 2^c + S a) / (2 S a) \rfloor`).

The table must give the largest element a non-zero :math:`e` (else :math:`S` could be 0): a table too coarse
for that raises :class:`ValueError`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.fixed import Format, from_float

__all__ = ["LUT_OPS", "INTERPOLATIONS", "MAX_ENTRIES", "LutTable", "build_table", "lut_lookup",
           "register_lut_op", "lut_functions", "lut_softmax", "softmax_exp_table", "check_entries"]

#: Interpolation modes between adjacent table entries.
INTERPOLATIONS = ("none", "linear")
#: The largest table (one entry per code of a 16-bit input).
MAX_ENTRIES = 1 << 16

#: Names of the graph ops that compute through these tables when a datapath sets ``activation_lut_entries``
#: (graph modules register theirs with :func:`register_lut_op`); :class:`fxpsim.HardwareConfig` refuses
#: per-node LUT overrides on any other op.
LUT_OPS: set[str] = set()


def register_lut_op(name: str) -> None:
    """Declare that the graph op ``name`` honours ``activation_lut_entries`` / ``activation_lut_interpolation``."""
    LUT_OPS.add(str(name))


def _logistic(x):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _tanh(x):
    return np.tanh(np.asarray(x, dtype=np.float64))


def _hard_swish(x):
    x = np.asarray(x, dtype=np.float64)
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _exp(x):
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, dtype=np.float64))


def lut_functions() -> dict:
    """The real functions of the tables, float64 in and out: ``logistic`` :math:`1/(1 + e^{-x})`, ``tanh``,
    ``hard_swish`` :math:`x \\cdot \\mathrm{clip}(x + 3, 0, 6) / 6`, ``exp``."""
    return {"logistic": _logistic, "tanh": _tanh, "hard_swish": _hard_swish, "exp": _exp}


def check_entries(entries, input_bits: int, interpolation: str = "none", where: str = "entries") -> int:
    """``log2(entries)`` after checking that a table of ``entries`` fits ``input_bits``-bit codes (a power of
    two, at most :math:`2^b`; fewer than :math:`2^b` with linear interpolation); ``where`` names the knob in
    the messages."""
    if isinstance(entries, bool) or not isinstance(entries, (int, np.integer)) or entries < 2 or \
            entries > MAX_ENTRIES or entries & (entries - 1):
        raise ValueError(f"{where}: must be a power of two in 2..{MAX_ENTRIES}, got {entries!r}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"{where}: interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")
    e = int(entries).bit_length() - 1
    if e > input_bits:
        raise ValueError(f"{where}: a table of {entries} entries is larger than the {1 << input_bits} codes of a "
                         f"{input_bits}-bit input; at most {1 << input_bits} (one entry per code)")
    if interpolation == "linear" and e == input_bits:
        raise ValueError(f"{where}: linear interpolation between {entries} entries of a {input_bits}-bit input "
                         f"has no low bits to interpolate with (one entry per code); use fewer entries or "
                         f"interpolation 'none'")
    return e


@dataclass(frozen=True)
class LutTable:
    """A built table (see the module docstring): ``values`` (int64, ``entries`` or ``entries + 1`` with linear
    interpolation), the input's lowest code ``input_min`` and width ``input_bits``, ``shift`` :math:`r`."""

    values: np.ndarray
    entries: int
    interpolation: str
    input_min: int
    input_bits: int
    shift: int

    def describe(self) -> str:
        return f"{self.entries} entries, {self.interpolation} interpolation"


def build_table(fn, *, input_bits: int, input_min: int, input_scale: float, input_zero_point: int,
                output_scale: float, output_zero_point: int, output_lo: int, output_hi: int, entries: int,
                interpolation: str = "none", rounding="half_away") -> LutTable:
    """The table of ``fn`` (float64 -> float64, vectorised) as the module docstring defines it."""
    e = check_entries(entries, int(input_bits), interpolation)
    r = int(input_bits) - e
    k = np.arange(int(entries) + (interpolation == "linear"), dtype=np.float64)
    u = k * float(1 << r) + ((float((1 << r) - 1) / 2.0) if interpolation == "none" else 0.0)
    x = float(input_scale) * (u + float(int(input_min) - int(input_zero_point)))
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.asarray(fn(x), dtype=np.float64) / float(output_scale)
    if np.isnan(v).any():
        raise ValueError("lookup table: the function gives NaN at a sample point")
    codes = from_float(v, Format.integer(62), rounding=rounding).raw + int(output_zero_point)
    values = np.clip(codes, int(output_lo), int(output_hi)).astype(np.int64)
    return LutTable(values, int(entries), interpolation, int(input_min), int(input_bits), r)


def lut_lookup(codes, table: LutTable) -> np.ndarray:
    """The table applied to input codes (int64 result, same shape): :math:`y = T_i` or the interpolated
    :math:`T_i + \\lfloor ((T_{i+1} - T_i) t + 2^{r-1}) / 2^r \\rfloor` (module docstring)."""
    u = np.asarray(codes).astype(np.int64) - table.input_min
    if u.size and (int(u.min()) < 0 or int(u.max()) >= 1 << table.input_bits):
        raise ValueError(f"lookup table: input codes outside the table's {table.input_bits}-bit range "
                         f"[{table.input_min}, {table.input_min + (1 << table.input_bits) - 1}]")
    r = table.shift
    i = u >> r
    base = table.values[i]
    if table.interpolation == "none":
        return base
    t = u & ((1 << r) - 1)
    slope = table.values[i + 1] - base
    return base + ((slope * t + (1 << (r - 1))) >> r)


def _exact_ratio(value: float) -> tuple[int, int]:
    num, den = float(value).as_integer_ratio()
    return num, den


def softmax_exp_table(*, input_bits: int, input_scale: float, beta: float, entries: int, interpolation: str = "none",
                      rounding="half_away", exp_frac_bits: int = 15, exp_bits: int = 16) -> LutTable:
    """The exp table of :func:`lut_softmax` (step 1 of the module docstring), checked to give the largest
    element a non-zero value."""
    n_codes = 1 << int(input_bits)
    table = build_table(_exp, input_bits=input_bits, input_min=-(n_codes - 1),
                        input_scale=float(beta) * float(input_scale), input_zero_point=0,
                        output_scale=2.0 ** -int(exp_frac_bits), output_zero_point=0, output_lo=0,
                        output_hi=(1 << int(exp_bits)) - 1, entries=entries, interpolation=interpolation,
                        rounding=rounding)
    if int(lut_lookup(np.zeros(1, dtype=np.int64), table)[0]) < 1:
        raise ValueError(f"softmax lookup table: {entries} entries give exp = 0 for the largest element "
                         f"(beta * input scale = {float(beta) * float(input_scale):g} per code is too steep for "
                         f"segments of {1 << table.shift} codes); use more entries")
    return table


def lut_softmax(x, *, input_bits: int, input_scale: float, beta: float, output_scale: float,
                output_zero_point: int, output_lo: int, output_hi: int, entries: int, interpolation: str = "none",
                rounding="half_away", exp_frac_bits: int = 15, exp_bits: int = 16, sum_bits: int = 32,
                table: LutTable | None = None):
    """Softmax along the last axis on an exp table (module docstring): ``(codes int64, info)``, ``info``:
    ``{"overflows": saturating adds of the sum, "adds": elements summed, "table": LutTable}``. ``table``: the
    :func:`softmax_exp_table` of the same arguments, when the caller keeps it."""
    x = np.asarray(x).astype(np.int64)
    if table is None:
        table = softmax_exp_table(input_bits=input_bits, input_scale=input_scale, beta=beta, entries=entries,
                                  interpolation=interpolation, rounding=rounding, exp_frac_bits=exp_frac_bits,
                                  exp_bits=exp_bits)
    if x.size == 0:
        return x.copy(), {"overflows": 0, "adds": 0, "table": table}
    d = x - x.max(axis=-1, keepdims=True)
    e = lut_lookup(d, table)
    # sequential saturating sum from 0: all addends are >= 0, so the running sum is min(prefix, max)
    limit = (1 << (int(sum_bits) - 1)) - 1
    prefix = np.cumsum(e, axis=-1)
    before = np.minimum(np.concatenate([np.zeros(e.shape[:-1] + (1,), dtype=np.int64), prefix[..., :-1]], axis=-1),
                        limit)
    overflows = int(np.count_nonzero(before + e > limit))
    s = np.minimum(prefix[..., -1:], limit)
    num, den = _exact_ratio(output_scale)          # s_y = num / den exactly (den a power of two)
    big = max(2 * int(e.max()) * den, 2 * int(s.max()) * num) >= 1 << 62
    if big:   # scales whose exact fraction does not fit int64 arithmetic: Python integers
        e_o, s_o = e.astype(object), s.astype(object)
        q = (2 * e_o * den + s_o * num) // (2 * s_o * num)
        lo, hi = int(output_lo) - int(output_zero_point), int(output_hi) - int(output_zero_point)
        q = np.array([min(max(v, lo), hi) for v in q.reshape(-1)], dtype=np.int64).reshape(e.shape)
    else:
        q = (2 * e * den + s * num) // (2 * s * num)
    out = np.clip(q + int(output_zero_point), int(output_lo), int(output_hi))
    return out, {"overflows": overflows, "adds": int(e.size), "table": table}

"""Operands and settings of the accumulating kernels (:mod:`fxpsim.datapath.accumulate`): integer codes
and formats of the inputs, their data ranges, the accumulator and ``init`` checks, the exact accumulator
width, the thread count, the overflow-mode codes of the C kernels, and the record of the last kernel path."""
from __future__ import annotations

import os
import types

import numpy as np

from . import _accumulate as _k
from ..core.fixed import FixedArray, Format, Overflow, Rounding

#: The kernel the last call used (``last.path``) and the integer kernel behind "int64" (``last.int64_kernel``);
#: read them as ``fxpsim.datapath.accumulate.last_path`` / ``last_int64_kernel``.
last = types.SimpleNamespace(path="", int64_kernel="")

_I32 = (1 << 31) - 1
_I63 = (1 << 63) - 1

_FAST_MODES = {
    Overflow.SATURATE: _k.FAST_SATURATE, Overflow.ERROR: _k.FAST_SATURATE,
    Overflow.SATURATE_SYMMETRIC: _k.FAST_SATURATE, Overflow.SATURATE_ZERO: _k.FAST_ZERO,
    Overflow.WRAP: None,    # signed or unsigned wrap, decided with the format
}


# --------------------------------------------------------------------------- operands

def _operand(x, name: str) -> tuple[np.ndarray, Format]:
    """Integer codes (the caller's array itself when possible, never written to) and format.

    Integer arrays keep their dtype (int8 stays int8: conversions happen once, per kernel).
    """
    if isinstance(x, FixedArray):
        if x.fmt._u64:
            raise ValueError(f"{name}: unsigned 64-bit formats are not supported by the datapath "
                             f"kernels (got {x.fmt}); cast to at most 63 bits first")
        return x.raw, x.fmt
    arr = np.asarray(x)
    if arr.dtype.kind in "fc":
        raise TypeError(f"{name}: got a {arr.dtype} array; the datapath takes integer codes or "
                        f"FixedArray -- convert real values with fxpsim.from_float(x, fmt)")
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name}: expected an integer array or FixedArray, got dtype {arr.dtype}")
    signed = arr.dtype.kind == "i"
    lo, hi = _data_range(arr)
    if hi > _I63:
        raise ValueError(f"{name}: code {hi} does not fit int64")
    hi_bits = max(hi, 0).bit_length()                 # all-negative data: hi < 0 needs no bits
    bits = max(hi_bits, (-lo - 1).bit_length() if lo < 0 else 0) + 1 if signed else max(hi_bits, 1)
    if arr.dtype.kind == "b" or arr.dtype == np.uint64:
        arr = arr.astype(np.int64)
    return arr, Format.integer(bits, signed)


def _data_range(codes: np.ndarray) -> tuple[int, int]:
    """(min, max) of the codes; a broadcast view is reduced over its distinct elements only."""
    if not codes.size:
        return 0, 0
    if 0 in codes.strides:
        codes = codes[tuple(slice(0, 1) if st == 0 else slice(None) for st in codes.strides)]
    return int(codes.min()), int(codes.max())


def _parse_acc(acc, frac: int) -> Format | None:
    if acc is None:
        return None
    if isinstance(acc, (bool, np.bool_)):
        raise TypeError(f"acc must be a Format, a format string, an int (bits) or None, got {acc!r}")
    if isinstance(acc, (int, np.integer)):
        if not 1 <= int(acc) <= 64:
            raise ValueError(f"acc={acc}: an accumulator has 1..64 bits")
        return Format(int(acc), frac, True)
    fmt = Format.parse(acc) if isinstance(acc, str) else acc
    if not isinstance(fmt, Format):
        raise TypeError(f"acc must be a Format, a format string, an int (bits) or None, got {acc!r}")
    if fmt._u64:
        raise ValueError(f"acc={fmt}: unsigned 64-bit accumulators are not supported; use 63 bits")
    return fmt


def _init_codes(init, out_shape, frac: int, name: str = "init"):
    """Raw start values at LSB 2^-frac, int64, broadcast to the output shape (or None)."""
    if init is None:
        return None
    if isinstance(init, FixedArray):
        if init.fmt._u64:
            raise ValueError(f"{name}: unsigned 64-bit formats are not supported")
        shift = frac - init.fmt.frac
        if shift < 0:
            raise ValueError(f"{name} has {init.fmt.frac} fraction bits, more than the accumulator's "
                             f"{frac}; cast it to the accumulator format first")
        lo, hi = _data_range(init.raw)
        if max(abs(lo), abs(hi)) << shift > _I63:
            raise ValueError(f"{name} ({init.fmt}) does not fit 64 bits at the accumulator's LSB")
        codes = init.raw * (1 << shift) if shift and (lo or hi) else init.raw
    else:
        codes, _ = _operand(init, name)
    try:
        return np.broadcast_to(codes, out_shape)
    except ValueError:
        raise ValueError(f"{name} of shape {np.shape(codes)} does not broadcast to the output "
                         f"shape {tuple(out_shape)}") from None


def _exact_format(lo: int, hi: int, frac: int, what: str, op: str) -> Format:
    """Smallest format with LSB 2^-frac holding every integer in [lo, hi] (the exact accumulator)."""
    signed = lo < 0
    bits = max(hi.bit_length(), (-lo - 1).bit_length() if signed else 0, 1) + signed
    if bits > 63 + signed:
        raise ValueError(f"{op}: an exact accumulator for {what} needs {bits} bits (> 64); "
                         f"pass acc= explicitly")
    return Format(bits, frac, signed)


def _available_cores() -> int:
    """Cores this process may run on now (its affinity can shrink after import, e.g. a pinned benchmark
    or pool worker: more threads than cores would time-slice one core and spin in OpenMP barriers)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_CORES = _available_cores()     # at import (benchmarks report it)
_WORK_PER_THREAD = 1 << 18     # MACs below which an extra thread costs more than it saves


#: ``threads`` may be at most this many times the machine's CPU count (``os.cpu_count()``): the OpenMP
#: runtime starts every thread asked for, and tens of thousands of them exhaust the process (libgomp
#: aborts, or the process crashes).  Threads never change a bit, so more than the cores buy nothing.
THREADS_PER_CPU_LIMIT = 4


def _max_threads() -> int:
    return THREADS_PER_CPU_LIMIT * (os.cpu_count() or 1)


def _check_threads(threads) -> None:
    """``threads``: None or an int in 1..``THREADS_PER_CPU_LIMIT`` x CPU count (checked up front)."""
    if threads is None:
        return
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"threads must be a positive int or None, got {type(threads).__name__} {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if threads > _max_threads():
        raise ValueError(f"threads={threads} is more than {_max_threads()} ({THREADS_PER_CPU_LIMIT} x the "
                         f"{os.cpu_count() or 1} CPUs of this machine); threads never change a bit, so pass "
                         f"None (all cores for large problems) or at most the core count")


def _threads(threads, work: int) -> int:
    """Thread count: ``threads`` as given, or (None) all cores for large problems, 1 for tiny ones."""
    if threads is None:
        if work < 2 * _WORK_PER_THREAD:
            return 1
        return max(1, min(_available_cores(), work // _WORK_PER_THREAD))
    _check_threads(threads)
    return int(threads)


def _modes(rounding, overflow, overflow_at, order, threads=None, count=True, per_output=False):
    """Parse the modes and check ``threads`` and ``count``: everything a public function validates first."""
    _check_threads(threads)
    r, o = Rounding.parse(rounding), Overflow.parse(overflow)
    if not isinstance(count, (bool, np.bool_)):
        raise TypeError(f"count must be True or False, got {count!r}")
    if not count and per_output:
        raise ValueError("per_output=True needs the overflow counts; drop count=False")
    if not count and o is Overflow.ERROR:
        raise ValueError("overflow='error' needs the overflow counts; drop count=False")
    if r is Rounding.STOCHASTIC:
        raise ValueError("rounding='stochastic' is not supported for accumulated products; "
                         "pick a deterministic rounding mode")
    if overflow_at not in ("every", "end"):
        raise ValueError(f"overflow_at must be 'every' or 'end', got {overflow_at!r}")
    if order not in ("sequential", "tree"):
        raise ValueError(f"order must be 'sequential' or 'tree', got {order!r}")
    return r, o


# --------------------------------------------------------------------------- core
def _product_range(fa_rng, fb_rng, shift: int) -> tuple[int, int]:
    """Smallest and largest aligned product (rounding is monotonic: floor/ceil bound it)."""
    corners = [x * y for x in fa_rng for y in fb_rng]
    lo, hi = min(corners), max(corners)
    if shift >= 0:
        return lo << shift, hi << shift
    return lo >> -shift, -((-hi) >> -shift)



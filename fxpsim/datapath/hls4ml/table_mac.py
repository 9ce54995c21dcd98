"""hls4ml's Dense accumulation through a product table: the arithmetic of the compiled-plan steps of
:mod:`fxpsim.frontends.hls4ml.steps`.

hls4ml's Dense is :math:`s_j = A(\\cdots A(A(b_j) + m_{0j}) \\cdots + m_{K-1,j})` with :math:`m_{kj} = A(x_k w_{kj})`
(:mod:`.layers`).  With the weights fixed, :math:`m_{kj}` depends on the input code :math:`x_k` alone:

.. math::

    T_{k, v, j} = A(v\\, w_{kj}) \\quad \\text{for every code } v \\text{ of the input's type}

(:func:`product_table`, the datapath's own cast :func:`fxpsim.core.fixed.mul` into ``accum_t``: every
quantization and overflow mode), and :math:`s_j` is the fitted sequential sum of :math:`T_{k, x_k, j}`
(:class:`TableMac`):

* when no partial sum can leave ``accum_t`` (per output, :math:`A(b_j) + \\sum_k \\min(0, \\min_v T_{kvj})` and
  :math:`A(b_j) + \\sum_k \\max(0, \\max_v T_{kvj})` within its range) every add is exact: the plain sum;
* a wrapping ``accum_t`` (``AP_WRAP``): the plain sum reduced once modulo :math:`2^W` (the reduction commutes with
  the adds);
* a saturating one (``AP_SAT``, ``AP_SAT_SYM``: :math:`[-\\max, \\max]`, ``AP_SAT_ZERO``: 0 outside the range):
  every add fitted in input order, by the C kernel ``_table_mac`` (int32 table, accumulators within 32 bits)
  or numpy: the exact partial sums (a cumulative sum) decide which sums need the per-add fit.
"""
from __future__ import annotations

import numpy as np

from ...core.fixed import FixedArray, Overflow, mul

try:
    from .._table_mac import table_mac as _kernel
except ImportError:         # an install without the extension: numpy alone (same bits)
    _kernel = None

__all__ = ["product_table", "TableMac"]


def product_table(x_fmt, code_range, weight: FixedArray, accum_t) -> np.ndarray:
    """:math:`T_{k,v,j} = A(v\\,w_{kj})` for the codes :math:`v` of ``code_range`` (``[K, V, N]``, int64), the
    cast into ``accum_t`` of hls4ml's ``product()`` assignment."""
    lo, hi = code_range
    v = FixedArray(np.arange(lo, hi + 1, dtype=np.int64).reshape(-1, 1, 1), x_fmt)
    t = mul(v, weight.reshape(1, *weight.shape), accum_t.fmt, accum_t.rounding, accum_t.overflow)
    return np.ascontiguousarray(np.transpose(t.raw, (1, 0, 2)))


class TableMac:
    """``codes [R, K] -> s [R, N]`` (int64): hls4ml's fitted sequential sums over ``table`` (from
    :func:`product_table` for input codes ``code_range``) from the bias ``bias`` (already :math:`A(b)`).

    ``mode`` says which path the module docstring's cases chose: ``"exact"``, ``"wrap"``, ``"fit"``;
    ``ValueError`` for an ``accum_t`` it does not model (``n_bits``, ``AP_WRAP_SM``, wider than 62 bits), and
    for input codes outside ``code_range``."""

    def __init__(self, table: np.ndarray, code_range, bias: np.ndarray, accum_t, *, use_kernel: bool = True):
        fmt, ovf = accum_t.fmt, accum_t.overflow
        if accum_t.n_bits or fmt.word > 62 or ovf not in (Overflow.WRAP, Overflow.SATURATE,
                                                         Overflow.SATURATE_SYMMETRIC, Overflow.SATURATE_ZERO):
            raise ValueError(f"TableMac: accum_t {accum_t} is not modelled (N > 0, {ovf.value}, or over 62 bits)")
        k, v, n = table.shape
        self.k, self.n, self.lo_code, self.hi_code = k, n, int(code_range[0]), int(code_range[0]) + v - 1
        self.bias = np.ascontiguousarray(bias, dtype=np.int64)
        self.lo, self.hi = fmt.min_code, fmt.max_code
        if ovf == Overflow.SATURATE_SYMMETRIC and fmt.signed:
            self.lo = -self.hi
        low = self.bias + np.minimum(table.min(axis=1), 0).sum(axis=0)
        high = self.bias + np.maximum(table.max(axis=1), 0).sum(axis=0)
        if int(low.min()) >= fmt.min_code and int(high.max()) <= fmt.max_code:
            self.mode = "exact"
        else:
            self.mode = "wrap" if ovf == Overflow.WRAP else "fit"
        self.zero = ovf == Overflow.SATURATE_ZERO
        self.word, self.min_code = fmt.word, fmt.min_code
        self.offsets = np.arange(k, dtype=np.int64) * v - self.lo_code       # row of (k, v): k V + v - lo
        small = fmt.word <= 32
        self.kernel = _kernel if use_kernel and small and self.mode != "wrap" else None
        dtype = np.int32 if self.kernel is not None else (np.int16 if fmt.word <= 16 else np.int32 if small
                                                          else np.int64)
        self.table = np.ascontiguousarray(table.reshape(k * v, n).astype(dtype))   # (narrow: the gather is memory bound)
        # every value in [-2^29, 2^29): the kernel's int32 loop (any sum of two fits an int32)
        bound = 1 << 29
        self.narrow = bool(table.size and -bound <= min(int(table.min()), int(self.bias.min(initial=0)), self.lo)
                           and max(int(table.max()), int(self.bias.max(initial=0)), self.hi) < bound)

    def __call__(self, codes) -> np.ndarray:
        codes = np.asarray(codes)
        if codes.size and (int(codes.min()) < self.lo_code or int(codes.max()) > self.hi_code):
            raise ValueError(f"TableMac: input codes [{int(codes.min())}, {int(codes.max())}] outside the table's "
                             f"[{self.lo_code}, {self.hi_code}]")
        rows = codes.reshape(-1, self.k).astype(np.int64) + self.offsets
        if self.kernel is not None:
            out = np.empty((len(rows), self.n), np.int64)
            self.kernel(rows, self.table, self.bias, {"exact": 0, "fit": 2 if self.zero else 1}[self.mode],
                        self.lo, self.hi, out, self.narrow)
            return out
        g = self.table[rows.T]                                                # [K, R, N]
        if self.mode == "exact":
            return g.sum(axis=0, dtype=np.int64) + self.bias
        if self.mode == "wrap":
            s = g.sum(axis=0, dtype=np.int64) + self.bias
            return ((s - self.min_code) & np.int64((1 << self.word) - 1)) + self.min_code
        partial = np.cumsum(g, axis=0, dtype=np.int64)
        partial += self.bias
        acc = partial[-1]
        out = (partial.min(axis=0) < self.lo) | (partial.max(axis=0) > self.hi)
        if out.any():                       # only the sums some partial sum of which left the range
            seq = np.array(np.broadcast_to(self.bias, out.shape)[out])
            terms = g[:, out].astype(np.int64)
            for i in range(self.k):
                seq += terms[i]
                if self.zero:
                    seq = np.where((seq < self.lo) | (seq > self.hi), 0, seq)
                else:
                    np.minimum(np.maximum(seq, self.lo, out=seq), self.hi, out=seq)
            acc[out] = seq
        return acc

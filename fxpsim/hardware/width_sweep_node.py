"""One MAC node of the accumulator-width sweep (:func:`fxpsim.hardware.width_sweep.node_sweep`) and its sweep.

:class:`_Node` lays a node out once: the operands the multipliers see, packed for the per-add kernels, the
exact accumulators, the partial-sum bound and the reference output codes. :func:`_sweep_node` then runs the
fast path over every width and overflow mode (the bound, the per-add kernels on the rows that need them,
the items that stop overflowing leaving the work for good); the method is in the docstring of
:mod:`fxpsim.hardware.width_sweep`, which schedules the nodes and holds the public API.
"""
from __future__ import annotations

import threading

import numpy as np

from ..datapath import _accumulate as _k
from ..datapath import _acc_operands as _operands, _acc_per_add as _per_add, _acc_scratch as _scratch
from ..datapath.accumulate import matmul as _matmul
from ..datapath.accumulate import sum as _dsum
from ..datapath.partial_sums import mac_rows
from ..datapath.requantize import _fused_constants
from ..graph.ops import _clamp_codes, _pads, _padding, _pair, _spec
from ..graph.mac_ops import requantizer_for      # (after graph.ops, which imports it)

_FAST_MODES = {"saturate": _k.FAST_SATURATE, "wrap": _k.FAST_WRAP_SIGNED, "saturate_zero": _k.FAST_ZERO}
_I32 = (1 << 31) - 1


# ----------------------------------------------------------------------------------------- helpers
def _signed_bits(v: np.ndarray) -> np.ndarray:
    """Smallest two's-complement width holding each of the non-negative magnitudes ``v`` (and ``-v - 1``):
    ``bit_length(v) + 1`` (int16)."""
    v = np.asarray(v, np.int64)
    if v.size and int(v.max()) >= 1 << 52:             # beyond float64's exact integers: count by shifting
        bits = np.zeros(v.shape, np.int16)
        x = v.copy()
        for s in (32, 16, 8, 4, 2, 1):
            big = x >= (1 << s)
            bits += np.where(big, s, 0).astype(np.int16)
            x = np.where(big, x >> s, x)
        return bits + (v > 0) + 1
    _, e = np.frexp(v.astype(np.float64))               # v = m 2^e, 1/2 <= m < 1: e = bit_length(v), exactly
    return (e + 1).astype(np.int16)


def _node_knobs(node, dp):
    """``None`` when the fast path models this node on ``dp``, else why not."""
    if getattr(dp, "zero_point", "subtract") != "subtract":
        return "zero_point='fold'"
    tile_k = getattr(dp, "tile_k", None)
    if tile_k:
        return "K-tiling"
    if int(node.attrs.get("product_shift", 0)):
        return "an accumulator LSB coarser than the products'"
    if dp.accumulator_order not in ("sequential", "tree") or dp.overflow_at not in ("add", "end", "every"):
        return f"order {dp.accumulator_order!r} / overflow_at {dp.overflow_at!r}"
    return None


def _depthwise_sums(a, w2, b, has_bias, dp):
    """Products ``[R, K, O]``, exact accumulators ``[R, O]`` (int64, bias included) and a bound ``[R, O]`` on
    every partial sum of a depthwise node (``a [R, G, K]``, ``w2 [O, K]`` offset operands, ``b`` the bias
    as the accumulator sees it).  K is the kernel window, a few adds, so in sequential order the bound is
    the exact peak of the running sums (the preloaded bias, or the bias added after, included); in tree
    order :math:`|b| + \\sum_k |p_k|`."""
    n_out = w2.shape[0]
    mult = n_out // a.shape[1]
    at = a.transpose(0, 2, 1)                                            # [R, K, G] (im2col's order)
    if mult != 1:
        at = at[:, :, np.arange(n_out) // mult]
    wmax = int(np.abs(w2).max(initial=0))
    amax = int(np.abs(at).max(initial=0)) if at.size else 0
    pdt = np.int16 if amax * wmax < 1 << 15 else (np.int32 if amax * wmax < 1 << 31 else np.int64)
    prod = np.multiply(at, w2.T[None], dtype=pdt)                        # [R, K, O]
    k = prod.shape[1]
    wide = k * amax * wmax + int(np.abs(b).max(initial=0)) >= 1 << 31
    s = np.zeros((prod.shape[0], n_out), np.int64 if wide else np.int32)
    preload = dp.bias_add == "preload" and has_bias
    if preload:
        s += b.astype(s.dtype)
    if dp.accumulator_order == "sequential":
        hi, lo = s.copy(), s.copy()
        for j in range(k):
            s += prod[:, j, :]
            np.maximum(hi, s, out=hi)
            np.minimum(lo, s, out=lo)
        s_sum = s.astype(np.int64)
        if not preload:
            s_sum += b
        bound = np.maximum(np.maximum(hi, s_sum), -np.minimum(lo, s_sum) - 1)
    else:
        s += prod.sum(axis=1, dtype=s.dtype)
        s_sum = s.astype(np.int64)
        if not preload:
            s_sum += b
        bound = np.abs(prod).sum(axis=1, dtype=np.int64) + np.abs(b)
    return prod, s_sum, bound


class _Node:
    """One MAC node laid out for the sweep: the operands the multipliers see (in the datapath's K order)
    packed once for the per-add kernels, the exact accumulators, the partial-sum bound and the reference
    output codes.

    Layouts (the unit of per-add work is an *item*; ``erow`` names the rows of the exact accumulators and
    reference codes as the kernel's sweep mode reads them):

    * ``rows`` (48 or more output channels): kernel rows are the node's output rows (pixels / samples),
      named by a row index into the operand, columns its channels; an item is one output row;
    * ``cols`` (fewer channels): transposed, kernel rows are the channels and the output rows become the
      columns, packed once in slabs of 64; an item is one slab (64 output rows, every channel);
    * ``products`` (depthwise): one column per output holding its products ``(x - z_x)(w - z_w)``, channel
      by channel (each channel's rows padded to 64), packed once; an item is one slab (64 outputs of one
      channel).
    """

    def __init__(self, graph, node, ins, dp):
        self.graph, self.node, self.dp = graph, node, dp
        xspec, wspec, yspec = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
        zx = int(xspec.zero_point[0])
        x, w = ins[0], ins[1]
        zw = wspec.zero_point.reshape(wspec.channel_shape(w.ndim)).astype(np.int64)
        xlo, xhi = xspec.code_range
        wlo, whi = wspec.code_range
        # operands as the multipliers see them, int16 whenever every possible difference fits
        xdt = np.int16 if -(1 << 15) <= xlo - zx and xhi - zx < 1 << 15 else np.int32
        wdt = np.int16 if -(1 << 15) <= wlo - int(zw.max(initial=0)) and whi - int(zw.min(initial=0)) < 1 << 15 \
            else np.int32
        xo = np.subtract(x, zx, dtype=xdt)
        wo = np.subtract(w, zw, dtype=wdt)
        geometry = {}
        if node.op != "fully_connected":
            stride, dilation = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation")
            geometry = dict(stride=stride, dilation=dilation,
                            pads=_pads(x.shape[1:3], w.shape[1:3], stride, dilation, _padding(node.attrs)))
        a, w2, out_shape = mac_rows(node.op, xo, wo, **geometry)          # a [R, G, K], w2 [O, K]
        del xo
        n_out = w2.shape[0]
        self.n, self.r, self.out_shape = n_out, a.shape[0], out_shape
        self.rpad = -(-self.r // 64) * 64
        has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
        b = np.asarray(ins[2], np.int64) << int(node.attrs.get("bias_shift", 0)) if has_bias else \
            np.zeros(n_out, np.int64)
        if node.op == "depthwise_conv2d":
            prod, s_sum, bound = _depthwise_sums(a, w2, b, has_bias, dp)
            self.amax = 1
            self.bmax = max(int(prod.max(initial=0)), -int(prod.min(initial=0))) if prod.size else 0
            self.pmax = self.bmax
            self.k = k = prod.shape[1]
            p = np.zeros((k, n_out, self.rpad), np.int16 if self.bmax < 1 << 15 else np.int32)
            p[:, :, :self.r] = prod.transpose(1, 2, 0)                       # [K, O, Rpad]: channel-major columns
            self.layout = "products"
            self.p = p.reshape(k, -1)
            del prod
        else:
            a2 = np.ascontiguousarray(a[:, 0, :])
            self.k = a2.shape[1]
            wt = np.ascontiguousarray(w2.T)                                  # [K, O]
            self.amax = int(np.abs(a2).max(initial=0))
            self.bmax = int(np.abs(wt).max(initial=0))
            self.pmax = self.amax * self.bmax
            s_sum = np.array(_matmul(a2, wt).raw.reshape(self.r, n_out))     # exact (BLAS)
            u = np.array(_matmul(np.abs(a2), np.abs(wt)).raw.reshape(self.r, n_out))   # the partial-sum bound
            self.layout = "rows" if n_out >= 48 else "cols"
            self.a, self.wt = a2, wt
            s_sum += b
            u += np.abs(b)
            bound = u
        self.has_bias, self.b = has_bias, b
        # exact accumulators [R, O], and widths from per-item / per-row largest magnitudes (the width of a
        # maximum is the maximum of the widths: no per-output width arrays)
        self.e = s_sum
        self.bound_max = int(_signed_bits(np.array([bound.max(initial=0)]))[0])
        self.item_bound = _signed_bits(self.per_item(bound))
        del bound
        if n_out:
            mag = np.maximum(self.e.max(axis=1), -self.e.min(axis=1) - 1)
        else:
            mag = np.zeros(self.r, np.int64)
        self.row_e_bits = _signed_bits(mag)
        self.e_max = int(self.row_e_bits.max(initial=1))
        # requantization: the node's own requantizer, zero point and clamp
        self.rq = requantizer_for(graph, node, dp)
        self.zp = int(yspec.zero_point[0])
        self.lo, self.hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
        self.dtype = yspec.dtype
        # the node's own datapath cannot overflow: its output is the exact accumulators requantized
        self.base_exact = (self.e_max if dp.overflow_at == "end" else self.bound_max) <= int(dp.accumulator_bits)
        try:
            self.ref = self.requant(self.e, max(self.e_max, 2)).astype(np.int32)  # the exact output codes
        except ValueError:        # beyond what the requantizer takes (int32 for TFLite): see node_sweep
            self.ref = None
        self.packed = None
        self.lock = threading.Lock()            # the lazy packing, when modes run on threads
        self.threads = None                     # kernel threads: None = by the work (see _sweep_threads)
        self._fused = {}

    # -------------------------------------------------------------------------------- items
    @property
    def n_items(self) -> int:
        return self.r if self.layout == "rows" else self.rpad // 64 * (1 if self.layout == "cols" else self.n)

    def per_item(self, per_output: np.ndarray) -> np.ndarray:
        """Largest value of ``per_output`` ([R, O]) within each item."""
        if self.layout == "rows":
            return per_output.max(axis=1)
        padded = np.zeros((self.rpad, self.n), per_output.dtype)
        padded[:self.r] = per_output
        if self.layout == "cols":
            return padded.max(axis=1).reshape(-1, 64).max(axis=1)
        return padded.T.reshape(-1, 64).max(axis=1)           # products: channel-major slabs

    def item_rows(self, items: np.ndarray) -> np.ndarray:
        """The output rows an item list covers (sorted, unique)."""
        if self.layout == "rows":
            return items
        first = (items % (self.rpad // 64)) * 64 if self.layout == "products" else items * 64
        covered = np.zeros(self.rpad // 64, bool)           # slabs of 64 rows (a mask: no sort)
        covered[first // 64] = True
        rows = (np.flatnonzero(covered)[:, None] * 64 + np.arange(64)).reshape(-1)
        return rows[rows < self.r]

    # -------------------------------------------------------------------------------- requantization
    def requant(self, acc: np.ndarray, bits: int) -> np.ndarray:
        """Output codes of accumulator rows [n, O] (bit for bit the node's)."""
        return self.rq._output_codes(acc, bits, self.zp, self.lo, self.hi, self.dtype)

    def fused(self, width: int):
        """Per-channel constants of the requantizer's fused integer form (``requantize._fused_constants``:
        TFLite double/single rounding) valid for ``width``-bit accumulators, or None."""
        if width > 32:
            return None
        key = 32 if 32 in self._fused or self._fused_for(32) is not None else width
        return self._fused[key] if key == 32 else self._fused_for(width)

    def _fused_for(self, bits: int):
        if bits not in self._fused:
            consts = _fused_constants(self.rq, bits, self.zp)
            if consts is not None and len(consts[0]) not in (1, self.n):
                consts = None
            self._fused[bits] = None if consts is None else tuple(
                np.ascontiguousarray(np.broadcast_to(c, (self.n,)), np.int64) if c is not None
                else np.empty(0, np.int64) for c in consts)
        return self._fused[bits]

    def score_rows(self, rows: np.ndarray, acc: np.ndarray, width: int):
        """(not exact, sum |err|, max |err|) of accumulator rows ``acc`` [n, O] of the output rows ``rows``."""
        every = rows.size == self.r                     # all rows (narrow widths): views, no gathers
        changed = acc != (self.e if every else self.e[rows])
        sel = np.flatnonzero(changed.any(axis=1))
        if not sel.size:
            return 0, 0, 0
        if sel.size == rows.size:
            codes = self.requant(np.ascontiguousarray(acc), width).astype(np.int64)
            d = np.abs(codes - (self.ref if every else self.ref[rows]))[changed]
        else:
            codes = self.requant(np.ascontiguousarray(acc[sel]), width).astype(np.int64)
            d = np.abs(codes - self.ref[rows[sel]])[changed[sel]]
        return int(np.count_nonzero(d)), int(d.sum()), int(d.max(initial=0))

    # -------------------------------------------------------------------------------- per-add kernels
    def _prepare(self):
        if self.packed is not None:
            return
        with self.lock:
            if self.packed is None:
                self._pack()

    def _pack(self):
        if self.layout == "rows":
            self.a16 = self.a.astype(np.int16, copy=False)
            packed = _scratch._pack_slabs(self.wt[None].astype(np.int16), np.int16).copy()
            self.e_k, self.ref_k = self.e, self.ref
        else:
            if self.layout == "cols":      # few output channels: the rows of the node become the columns
                self.a16 = np.ascontiguousarray(self.wt.T, dtype=np.int16)                # [O, K]
                packed = _scratch._pack_slabs(self.a.T[None], np.int16).copy()
            else:                          # products: one column per output, a = ones
                self.a16 = np.ones((1, self.k), np.int16)
                packed = _scratch._pack_slabs(self.p[None], np.int16).copy()
            e_t = np.zeros((self.n, self.rpad), np.int64)
            e_t[:, :self.r] = self.e.T
            r_t = np.zeros((self.n, self.rpad), np.int32)
            r_t[:, :self.r] = self.ref.T
            shape = (self.n, self.rpad) if self.layout == "cols" else (1, self.n * self.rpad)
            self.e_k, self.ref_k = e_t.reshape(shape), r_t.reshape(shape)
            self.e, self.ref = e_t[:, :self.r].T, r_t[:, :self.r].T       # views: one copy of each kept
        self.slab_ch = np.arange(self.n_items, dtype=np.int64) // (self.rpad // 64) if self.layout == "products" \
            else np.empty(0, np.int64)
        self.packed = packed                    # last: other threads test it without the lock

    def kernel_ok(self, width: int, order: str):
        """``(kernel, init dtype, lane bits)`` of the SIMD kernel (AVX2 or AVX-512BW) for this width, or None."""
        if order != "sequential" or not _per_add._SIMD16 or max(self.amax, self.bmax) >= 1 << 15:
            return None
        if width <= 16 and self.pmax < 1 << 15:
            return _k.mac_fast16, np.int16, 16
        if width <= 32 and ((1 << (width - 1)) + self.pmax <= _I32 or width == 32):
            return _k.mac_fast32m, np.int32, 32
        return None

    def sweep_kernel(self, items, width, mode, bw, preload, after, fused, kern):
        """One width/mode point of the items by the kernel's sweep mode: (events, not exact, sum |err|,
        max |err|, per-item events flag)."""
        self._prepare()
        kernel, idt, lane = kern
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        fm, fa, fn, fs = fused
        erows = self.e_k.shape[0]
        n_slabs = self.e_k.shape[1] // 64 if self.layout != "rows" else -(-self.n // 64)
        flags = np.zeros((erows, n_slabs), np.uint8)
        period, nvalid = (-(-self.n // 64) * 64, self.n) if self.layout == "rows" else (self.rpad, self.r)
        sw = _k.Sweep(self.e_k, self.ref_k, {"rows": 0, "cols": 1, "products": 2}[self.layout], self.slab_ch,
                      period, nvalid, bw if after else np.empty(0, np.int64), fm, fa, fn, fs, self.lo, self.hi,
                      width, _FAST_MODES[mode], flags)
        n_items = items.size
        fast = _FAST_MODES[mode]
        sh = lane - width
        if self.layout == "rows":
            ini = np.empty((0, self.n), idt) if not preload else bw.astype(idt).reshape(1, self.n)
            cols = self.n
            krows = n_items
            nthreads = self.threads or _sweep_threads(n_items * self.k * self.n)
            out, cnt = _scratch_pair(krows, cols)
            kernel(self.a16, self.packed, ini, out, cnt, krows, fast, lo, hi, sh, nthreads, rows=items, sweep=sw)
            ev = flags[items].any(axis=1)
        else:
            krows = self.a16.shape[0]
            if not preload:
                ini = np.empty((0, 1), idt)
            elif self.layout == "cols":
                ini = bw.astype(idt).reshape(self.n, 1)
            else:
                ini = np.repeat(bw.astype(idt), self.rpad).reshape(1, -1)
            nthreads = self.threads or _sweep_threads(n_items * 64 * self.k * krows)
            out, cnt = _scratch_pair(krows, 64 * n_items)
            kernel(self.a16, self.packed, ini, out, cnt, krows, fast, lo, hi, sh, nthreads, slabs=items, sweep=sw)
            ev = flags[:, items].any(axis=0)
        return sw.result() + (ev,)

    def per_add_rows(self, rows, width, mode, init, order):
        """(codes, counts) [len(rows), O] of whole output rows by the public datapath functions (adder
        tree, wide operands, no AVX-512, or no fused requantization)."""
        ini = None if init is None else np.broadcast_to(init, (rows.size, self.n))
        every = rows.size == self.r                     # all rows: slices, no gathers
        if self.layout == "products" and every:
            # the packed products [K, O * Rpad] as they are (no copy): the padding rows hold zero products
            # and the register's initial value, so they never overflow; their columns are dropped after
            ini = None if init is None else np.repeat(np.broadcast_to(init, (self.n,)), self.rpad)
            res, cnt = _dsum(self.p, axis=0, acc=width, overflow=mode, order=order, init=ini, per_output=True)
            return (res.raw.reshape(self.n, self.rpad)[:, :self.r].T,
                    np.asarray(cnt).reshape(self.n, self.rpad)[:, :self.r].T)
        if self.layout == "products":
            p = self.p.reshape(self.k, self.n, self.rpad)[:, :, rows].transpose(0, 2, 1)
            res, cnt = _dsum(p, axis=0, acc=width, overflow=mode, order=order, init=ini, per_output=True)
        else:
            res, cnt = _matmul(self.a if every else self.a[rows], self.wt, width, overflow=mode, order=order,
                               init=ini, per_output=True)
        return res.raw.reshape(rows.size, self.n), cnt.reshape(rows.size, self.n)


#: Per-add steps below which a sweep kernel call runs on one thread: a sweep makes many short calls, and
#: on a machine with few cores the OpenMP and BLAS thread pools spinning between them cost more than the
#: second thread saves (measured: MobileNetV2 on 2 cores, 0.42 s on one thread vs 0.81 s on two).
SWEEP_THREAD_WORK = 1 << 26


def _sweep_threads(work: int) -> int:
    return 1 if work < SWEEP_THREAD_WORK else _operands._threads(None, work)


def _scratch_pair(rows: int, cols: int):
    """The kernels' out/cnt arrays in sweep mode: written only between k tiles, never returned."""
    return np.empty((rows, cols), np.int64), np.empty((rows, cols), np.int64)


def _fit_np(v: np.ndarray, w: int, mode: str):
    """Exact integers fitted into ``w`` signed bits by ``mode``: (codes, out of range)."""
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    bad = (v < lo) | (v > hi)
    if mode == "saturate":
        return np.clip(v, lo, hi), bad
    if mode == "saturate_zero":
        return np.where(bad, 0, v), bad
    sh = 64 - w
    return (v.astype(np.int64).view(np.uint64) << np.uint64(sh)).view(np.int64) >> sh, bad


def _sweep_node(nd: _Node, widths, modes):
    """The fast per-node sweep: records (without node names) in width-major order."""
    dp = nd.dp
    at_end = dp.overflow_at == "end"
    preload = dp.bias_add == "preload" and nd.has_bias
    after = dp.bias_add != "preload" and nd.has_bias
    order = dp.accumulator_order
    clean_from = np.zeros(nd.n_items, np.int16)   # per item: no overflow event from this width on (0: unknown)
    out = []
    for width in widths:
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        bw = np.clip(nd.b, lo, hi)                          # the bias as a W-bit register holds it
        clipped = bool(np.any(bw != nd.b)) and not at_end
        if at_end:                                           # a wide adder, fitted once: no per-add work
            items = np.flatnonzero(nd.row_e_bits > width)
        elif clipped:                                        # every value moves with the stored bias
            items = np.arange(nd.n_items)
        else:
            items = np.flatnonzero((nd.item_bound > width) & (clean_from == 0))
        kern = nd.kernel_ok(width, order) if items.size and not at_end else None
        fused = nd.fused(width) if kern is not None else None
        for mode in modes:
            rec = dict(overflow_count=0, not_exact=0, max_err=0, sum_err=0, width=width, overflow=mode)
            out.append(rec)
            if not items.size:
                continue
            if at_end:
                v, bad = _fit_np(nd.e[items], width, mode)
                ne, se, me = nd.score_rows(items, v, width)
                rec.update(overflow_count=int(np.count_nonzero(bad)), not_exact=ne, sum_err=se, max_err=me)
                continue
            if fused is not None:
                events, ne, se, me, ev = nd.sweep_kernel(items, width, mode, bw, preload, after, fused, kern)
            else:                                            # whole rows by the public functions
                rows = nd.item_rows(items)
                v, cnt = nd.per_add_rows(rows, width, mode, bw if preload else None, order)
                if after:                                    # the bias added after the sum, one more fitted add
                    v, bad = _fit_np(v + bw, width, mode)
                    cnt = cnt + bad
                events = int(cnt.sum())
                ne, se, me = nd.score_rows(rows, v, width)
                full = np.zeros((nd.r, nd.n), bool)
                full[rows] = cnt > 0
                ev = nd.per_item(full)[items]
            rec.update(overflow_count=int(events), not_exact=int(ne), max_err=int(me), sum_err=int(se))
            # an item without an overflow event at this width has none at any wider one
            newly = items[~ev & (clean_from[items] == 0)]
            clean_from[newly] = width
    return out

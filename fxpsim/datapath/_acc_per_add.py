"""The per-add accumulation of :mod:`fxpsim.datapath.accumulate`: the dispatch between the exact sums and
the per-add kernels (16/32/64-bit SIMD lanes, the adder tree, the generic 128-bit kernel), and the result
(:class:`~fxpsim.core.fixed.FixedArray`, overflow counts, the overflow log)."""
from __future__ import annotations


import numpy as np

from . import _accumulate as _k
from ..core.fixed import FixedArray, Format, Overflow, Rounding, record_overflow
from ..core.fixed import _logging as _overflow_log_active
from ._acc_operands import _FAST_MODES, _I32, _I63, _data_range, _exact_format, _init_codes, _parse_acc, _product_range, _threads, last
from ._acc_scratch import _count_scratch, _lane_buffers, _run_sequential, _temp_limit, _transpose_wins, _transposed
from ._acc_exact import _exact_sums, _fit_numpy, _wrap_codes

_SIMD16 = _k.simd16_level() > 0      # the AVX2 or AVX-512BW kernels (16-bit and int16-operand 32-bit lanes)
_SIMD512 = _k.simd16_level() >= 2    # AVX-512BW: the count-free 16-bit wrap loop beats BLAS (_fits_simd16)

UNCOUNTED = "uncounted"


def _exact_acc(fa: Format, fb: Format, kk: int, i_rng, op: str) -> Format:
    """The narrowest accumulator that holds every sum of ``kk`` products of ``fa`` x ``fb`` plus an ``init``
    code in ``i_rng``: :math:`[\\min(i_{lo}, 0) + K \\min(p_{lo}, 0),\\ \\max(i_{hi}, 0) + K \\max(p_{hi}, 0)]`."""
    p_lo, p_hi = _product_range((fa.min_code, fa.max_code), (fb.min_code, fb.max_code), 0)
    return _exact_format(min(i_rng[0], 0) + kk * min(p_lo, 0), max(i_rng[1], 0) + kk * max(p_hi, 0),
                         fa.frac + fb.frac, f"K={kk} products of {fa} x {fb}", op)


def _accumulate(a3, b3, fa: Format, fb: Format, acc, init, r: Rounding, o: Overflow, order: str,
                at_end: bool, threads, op: str, init_shape, to_internal, a_rng=None, count=True):
    """Per-add accumulation of a3 [B, M, K] @ b3 [1 or B, K, N] -> (codes, counts, acc, exact range).

    ``codes`` and ``counts`` are [B, M, N] (``counts`` is None when no add can overflow, ``UNCOUNTED``
    when ``count`` is false: then wrapping is the exact sum reduced once, see :func:`matmul`);
    ``exact range`` is (min, max) of the exact sums when an overflow log is active and known.

    ``init`` (None, FixedArray or raw codes) is broadcast to the caller's output shape
    ``init_shape`` and brought to the internal [B, M, N] layout by ``to_internal`` (a view: broadcast
    starts stay unmaterialised until a kernel needs them).  ``a_rng``: bounds (lo, hi) known to hold
    every code of ``a3`` (default: its min and max); a wider range only picks a wider, equally exact kernel.
    """
    nb, m, kk = a3.shape
    n = b3.shape[2]
    frac_p = fa.frac + fb.frac
    acc = _parse_acc(acc, frac_p)
    init3 = _init_codes(init, init_shape, frac_p if acc is None else acc.frac)
    if init3 is not None:
        init3 = to_internal(init3)
        if init3.dtype != np.int64:
            init3 = init3.astype(np.int64)
    if a_rng is None:
        a_rng = _data_range(a3)
    b_rng = _data_range(b3)
    i_rng = _data_range(init3) if init3 is not None else (0, 0)
    if acc is None:             # exact accumulator sized from the formats
        acc = _exact_acc(fa, fb, kk, i_rng, op)
    if o is Overflow.WRAP_SIGN_MAGNITUDE and not acc.signed:
        raise ValueError(f"overflow='wrap_sign_magnitude' needs a signed accumulator, got {acc}")
    shift = acc.frac - frac_p
    if shift < -63:
        raise ValueError(f"{op}: products have {-shift} more fraction bits than the accumulator {acc}; "
                         f"at most 63 can be rounded away")
    pf = max(abs(x) for x in _product_range((fa.min_code, fa.max_code), (fb.min_code, fb.max_code),
                                            max(shift, 0)))
    if pf > _I63:
        raise ValueError(f"{op}: products of {fa} x {fb} aligned to the accumulator {acc} need more than "
                         f"64 bits (the kernels form every product on 64 bits); use narrower operand "
                         f"formats or fewer accumulator fraction bits")
    if init3 is not None and (i_rng[0] < acc.min_code or i_rng[1] > acc.max_code):
        raise ValueError(f"{op}: init codes {i_rng[0]}..{i_rng[1]} do not fit the accumulator {acc}")
    nthreads = _threads(threads, nb * m * max(kk, 1) * n)
    rpb = m if b3.shape[0] > 1 else nb * m

    lo_acc, hi_acc = acc.min_code, acc.max_code
    if o is Overflow.SATURATE_SYMMETRIC and acc.signed:
        lo_acc = -hi_acc
    p_lo, p_hi = _product_range(a_rng, b_rng, shift)
    s_lo = min(i_rng[0], 0) + kk * min(p_lo, 0)          # every partial sum (any order) lies in
    s_hi = max(i_rng[1], 0) + kk * max(p_hi, 0)          # [s_lo, s_hi]
    never = lo_acc <= s_lo and s_hi <= hi_acc
    counts = exact_range = None
    done = False
    count = count or _overflow_log_active()         # the overflow log always gets its counts
    if not count and not never and o is Overflow.WRAP and shift >= 0 and not (
            order == "sequential" and not at_end and _fits_simd16(acc, a_rng, b_rng, p_lo, p_hi, shift)):
        # two's-complement wrapping commutes with summation: the sum modulo 2^64 (BLAS where exact),
        # reduced modulo 2^W once, is the per-add (or adder-tree, or end-fitted) wrapped accumulator.
        # (A 16-bit register on int16 operands keeps its per-add loop: without counters it is one
        # vpmullw and one vpaddw per 32 adds, faster than BLAS.)
        out = _wrap_codes(_exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, nthreads, mod64=True), acc)
        return out, UNCOUNTED, acc, None
    if shift >= 0 and -_I63 <= s_lo and s_hi <= _I63 and (never or at_end):
        out = _exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, nthreads)
        if _overflow_log_active():
            exact_range = _data_range(out)
        done = never or o is not Overflow.WRAP_SIGN_MAGNITUDE
        if not never and done:
            out, bad = _fit_numpy(out, acc, o)
            counts = bad.astype(np.int64)
    if not done:
        out, counts = _per_add(a3, b3, rpb, init3, acc, shift, r, o, order, at_end,
                               a_rng, b_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc, nthreads, count)
        if _overflow_log_active() and shift >= 0 and -_I63 <= s_lo and s_hi <= _I63:
            exact_range = _data_range(_exact_sums(a3, b3, rpb, shift, init3, a_rng, b_rng, nthreads))
    if not count:
        counts = UNCOUNTED
    return out, counts, acc, exact_range




def _per_add(a3, b3, rpb, init3, acc, shift, r, o, order, at_end, a_rng, b_rng, p_lo, p_hi, i_rng,
             lo_acc, hi_acc, nthreads, count=True):
    """Per-add kernels: ``(codes, counts)`` [B, M, N]; ``counts`` may be None when ``count`` is false."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    if not at_end and _transpose_wins(b3, nb * m, n, shift, nthreads):
        at, bt, it = _transposed(a3, b3, init3)
        res = _simd(at, bt, n, it, acc, shift, o, order, b_rng, a_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc,
                    nthreads, transposed=True, count=count)
        if res is not None:
            out = np.empty((nb * m, n), np.int64)
            out[...] = res[0].T
            return out.reshape(nb, m, n), None if res[1] is None else res[1].T.reshape(nb, m, n)
    res = _simd(a3, b3, rpb, init3, acc, shift, o, order, a_rng, b_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc,
                nthreads, count=count) if not at_end else None
    if res is not None:
        return res[0].reshape(nb, m, n), None if res[1] is None else res[1].reshape(nb, m, n)
    return _generic(a3, b3, rpb, init3, acc, shift, r, o, order, at_end, nthreads)


def _fits_simd16(acc, a_rng, b_rng, p_lo, p_hi, shift) -> bool:
    """Whether the AVX-512BW 16-bit kernel takes a (signed, <= 16-bit) wrapping accumulator of these data
    in its loop without counters (``count=False``)."""
    return (_SIMD512 and acc.signed and acc.word <= 16 and shift >= 0
            and min(a_rng[0], b_rng[0] << shift, p_lo) >= -(1 << 15)
            and max(a_rng[1], b_rng[1] << shift, p_hi) < 1 << 15)


def _simd(a3, b3, rpb, init3, acc, shift, o, order, a_rng, b_rng, p_lo, p_hi, i_rng, lo_acc, hi_acc,
          nthreads, transposed=False, count=True):
    """The 16/32/64-bit-lane sequential or adder-tree kernels: ``(out, counts)`` [R, N], or None when
    no lane width holds the data (or the mode needs the generic kernel).  ``count`` false: counts may
    be skipped (None) where a kernel has a loop without them (the 16/32-bit kernels)."""
    kk = a3.shape[2]
    fast = _FAST_MODES.get(o, -1)
    if fast is None:
        fast = _k.FAST_WRAP_SIGNED if acc.signed else _k.FAST_WRAP_UNSIGNED
    head = max(abs(acc.min_code), acc.max_code, abs(i_rng[0]), abs(i_rng[1])) + max(abs(p_lo), abs(p_hi))
    b_max = max(abs(b_rng[0]), abs(b_rng[1])) << max(shift, 0)
    a_max = max(abs(a_rng[0]), abs(a_rng[1]))
    if fast != -1 and order == "sequential" and shift >= 0:
        b_lo, b_hi = b_rng[0] << shift, b_rng[1] << shift
        in16 = min(a_rng[0], b_lo) >= -(1 << 15) and max(a_rng[1], b_hi) < 1 << 15   # int16 operands
        # (path name, operand lanes, accumulator lanes, kernel, usable, counts optional)
        lanes = [
            # 16-bit lanes, native saturating adds: any |acc + p| (see the kernel), products in int16
            ("simd16", np.int16, np.int16, _k.mac_fast16,
             _SIMD16 and acc.signed and acc.word <= 16 and fast != _k.FAST_WRAP_UNSIGNED and in16
             and p_lo >= -(1 << 15) and p_hi < 1 << 15, True),
            # 32-bit lanes from int16 operands (exact vpmaddwd products); a full signed 32-bit register
            # may wrap in the lanes (the kernel tests the signs), narrower ones must not
            ("simd32", np.int16, np.int32, _k.mac_fast32m,
             _SIMD16 and in16 and acc.word <= 32 and kk <= _I32
             and (head <= _I32 or (acc.signed and acc.word == 32 and lo_acc == acc.min_code
                                   and fast != _k.FAST_WRAP_UNSIGNED)), True),
            ("simd32w", np.int32, np.int32, _k.mac_fast,
             head <= _I32 and a_max <= _I32 and b_max <= _I32 and kk <= _I32, False),
            ("simd64", np.int64, np.int64, _k.mac_fast,
             head <= _I63 and a_max <= _I63 and b_max <= _I63 and kk <= _I32, False),
        ]
        for name, dtype, idt, kernel, usable, optional in lanes:
            if usable:
                last.path = name
                return _run_sequential(kernel, a3, b3, rpb, init3, shift, dtype, fast, lo_acc, hi_acc,
                                       8 * np.dtype(idt).itemsize - acc.word, nthreads, transposed=transposed,
                                       init_dtype=idt, counts=count or not optional)
    if fast != -1 and order == "tree" and shift >= 0:
        # a tree node adds two products or accumulator codes: twice the largest must fit the lanes
        node = 2 * max(max(abs(p_lo), abs(p_hi)), abs(acc.min_code), acc.max_code, abs(i_rng[0]), abs(i_rng[1]))
        for dtype, limit in ((np.int32, _I32), (np.int64, _I63)):
            # the tree holds all K products of FXA_JB columns per thread: no K chunks; when that and
            # the padded slabs exceed the temporaries' limit, the generic kernel (K + 1 per thread) runs
            slabs = (nthreads * max(kk, 1) + -(-b3.shape[2] // _k.slab_width()) * kk) * _k.slab_width()
            if slabs * np.dtype(dtype).itemsize > _temp_limit(a3, b3, init3):
                break
            if node <= limit and a_max <= limit and b_max <= limit and kk <= _I32:
                bits = 8 * np.dtype(dtype).itemsize
                a2, bs, ini, out, cnt = _lane_buffers(a3, b3, init3, shift, dtype, transposed=transposed)
                scratch = np.empty((nthreads, max(kk, 1) * _k.slab_width()), dtype)
                last.path = f"tree{bits}"
                _k.tree_fast(a2, bs, ini, out, cnt, scratch, rpb, fast, dtype(lo_acc), dtype(hi_acc),
                             bits - acc.word, nthreads)
                return out, cnt
    return None


def _generic(a3, b3, rpb, init3, acc, shift, r, o, order, at_end, nthreads):
    """The generic int128 kernel (any width, mode, rounding, order)."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    rows = nb * m
    scratch = np.empty((nthreads, kk + 1), np.int64)
    last.path = "generic"
    args = (shift, r.code, acc.word, acc.signed, o.code, 1 if order == "tree" else 0, at_end, nthreads)
    # int64 copies of a [R, K] and b.T [B, N, K]: in blocks of rows (whole batches when b is batched)
    # and of columns when they would exceed the temporaries' limit (outputs are independent)
    limit, per = _temp_limit(a3, b3, init3) // 2, 8 * max(kk, 1)      # half for a, half for b
    step = 1 if b3.shape[0] == 1 else m
    rc = rows if rows * per <= limit else max(step, limit // per // step * step)
    nc = n if n * per * b3.shape[0] <= limit else max(1, limit // (per * b3.shape[0]))
    a_rows = a3.reshape(rows, kk)
    i_rows = None if init3 is None else init3.reshape(rows, n)
    if rc >= rows and nc >= n:
        out, cnt = np.empty((rows, n), np.int64), _count_scratch(rows, n)
        ini = np.empty((0, n), np.int64) if i_rows is None else np.ascontiguousarray(i_rows, dtype=np.int64)
        _k.mac_generic(np.ascontiguousarray(a_rows, dtype=np.int64),
                       np.ascontiguousarray(np.swapaxes(b3, 1, 2), dtype=np.int64), ini, out, cnt, scratch,
                       rpb, *args)
        return out.reshape(nb, m, n), cnt.reshape(nb, m, n)
    out, cnt = np.empty((rows, n), np.int64), np.empty((rows, n), np.int64)
    for c0 in range(0, n, nc):
        c1 = min(n, c0 + nc)
        bt = np.ascontiguousarray(np.swapaxes(b3[:, :, c0:c1], 1, 2), dtype=np.int64)
        for r0 in range(0, rows, rc):
            r1 = min(rows, r0 + rc)
            ini = np.empty((0, c1 - c0), np.int64) if i_rows is None else \
                np.ascontiguousarray(i_rows[r0:r1, c0:c1], dtype=np.int64)
            o_c, c_c = np.empty((r1 - r0, c1 - c0), np.int64), np.empty((r1 - r0, c1 - c0), np.int64)
            _k.mac_generic(np.ascontiguousarray(a_rows[r0:r1], dtype=np.int64),
                           bt if b3.shape[0] == 1 else bt[r0 // m:r1 // m], ini, o_c, c_c, scratch,
                           r1 - r0 if b3.shape[0] == 1 else m, *args)
            out[r0:r1, c0:c1], cnt[r0:r1, c0:c1] = o_c, c_c
    return out.reshape(nb, m, n), cnt.reshape(nb, m, n)


def _reshaped(counts, shape):
    return counts if counts is None or isinstance(counts, str) else counts.reshape(shape)


def _finish(out, counts, acc: Format, o: Overflow, op: str, per_output: bool, exact_range=None):
    """Wrap codes into a FixedArray, log, raise for overflow='error'.

    The overflow log gets the range of the exact sums (``exact_range``, codes) when known,
    else of the results.
    """
    if isinstance(counts, str):                 # UNCOUNTED (count=False): nothing known about overflows
        res = FixedArray(out, acc, _trusted=True)
        res.overflows = None
        return res
    total = 0 if counts is None else int(counts.sum(dtype=np.int64))
    if _overflow_log_active():
        lo, hi = exact_range if exact_range is not None else _data_range(out)
        record_overflow(op, total, lo * acc.lsb, hi * acc.lsb)
    if o is Overflow.ERROR and total:
        first = np.unravel_index(int(np.argmax(counts.reshape(-1) > 0)), counts.shape)
        raise ValueError(f"{op}: {total} add(s) overflowed the accumulator {acc} "
                         f"[{acc.min_code}, {acc.max_code}] (first at output index "
                         f"{tuple(int(i) for i in first)}) and overflow='error'; use a wider acc")
    res = FixedArray(out, acc, overflows=total, _trusted=True,
                     overflow_mask=(counts > 0 if counts is not None else np.zeros(out.shape, bool))
                     if per_output else None)
    if not per_output:
        return res
    return res, np.zeros(out.shape, np.int64) if counts is None else np.array(counts, np.int64)



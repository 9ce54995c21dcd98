r"""Fused int8 fast path of :func:`~fxpsim.datapath.integer_ops.quantized_conv2d`,
:func:`~fxpsim.datapath.integer_ops.quantized_depthwise_conv2d` and
:func:`~fxpsim.datapath.integer_ops.quantized_fully_connected` (C kernel ``_conv_int8.h``).

One pass per layer: for every output pixel :math:`m` and channel :math:`o`

.. math::

    a_{m,o} = \mathrm{fit}\big(\cdots\mathrm{fit}(\mathrm{fit}(b^{pre}_o + p_0) + p_1)\cdots + p_{K-1}\big),
    \quad p_k = (x_k - z_x)\,w_{o,k},\qquad a_{m,o} \leftarrow \mathrm{fit}(a_{m,o} + b^{after}_o)

in the reduction order of :func:`fxpsim.datapath.conv2d` (``(kh, kw, c)``, padded taps as zero products),
then TFLite's output stage :math:`y = \mathrm{clamp}(R_o(a_{m,o}) + z_y)` in the fused integer form of
:meth:`~fxpsim.datapath.requantize.Requantizer._output_codes` (``double``/``single``, gemmlowp's roundings or
LiteRT's optimized tie-up one), or for a ``float32`` requantizer (XNNPACK's ``fp32`` requantization)
:math:`R_o(a) = \mathrm{rne}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(a)\,s_o))`, with the pre-clamp values above
``act_max`` and below ``act_min`` counted.

:func:`fused` is taken only when it models the call exactly; otherwise it returns ``None`` and the caller
runs its general path, unchanged. It models: int8 ``x``, int8 ``w`` with zero weight zero points, int8
output, depthwise multiplier 1, ``zero_point="subtract"``, no K-tiling, no product shift, no active
:func:`fxpsim.overflow_log`, and an accumulator of :math:`W` bits that either

* provably never overflows: :math:`\max_o \big(\max|x - z_x| \sum_k |w_{o,k}| + |b_o|\big) \le
  \min(2^{W-1}, 2^{31}) - 1` bounds every partial sum in any order (``exact``: no fit, no count), or
* saturates or wraps after every add in ``sequential`` order with :math:`W \le 31` (then
  :math:`|a| + |p| < 2^{31}` for 8-bit operands, :math:`|p| \le 255 \cdot 128`).

The int8 outputs and the int64 accumulators (asked for by traces) are written into buffers of a small pool
(:class:`_Pool`): a buffer is reused only when nothing outside the pool references it any more, so results a
caller holds never change, while repeated runs skip the page faults (and the kernel zeroing) of fresh
allocations (at most 512 MiB kept; :func:`release_buffers` frees them or sets the cap); the accumulators go out
with streaming stores. :func:`lut2` serves
:func:`~fxpsim.datapath.integer_ops.quantized_add`: an int8 x int8 -> int8 elementwise op read from a table
of its 65536 results.
"""
from __future__ import annotations

import functools
import math
import sys
import threading

import numpy as np

from ..core.fixed import Overflow, Rounding
from ..core.fixed import _logging as _overflow_log_active
from .requantize import _fused_constants

__all__ = ["fused", "prepare", "FusedCall", "available", "lut2", "release_buffers"]

try:
    from . import _conv_int8 as _k
except ImportError:             # pragma: no cover - a build without the extension: the general path runs
    _k = None

_MODES = {Overflow.SATURATE: 1, Overflow.WRAP: 2}


def available() -> bool:
    """True when the compiled kernel is importable (tests switch it off by setting ``_k`` to None)."""
    return _k is not None


def lut2(a: np.ndarray, b: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[(a + 128) * 256 + (b + 128)]`` for C-contiguous 1-D int8 ``a``, ``b`` of one length."""
    return _k.lut2(a, b, table)


@functools.lru_cache(maxsize=1024)
def _requant_constants(requant, bits: int, zp: int, n_out: int):
    r"""The fused output-stage constants broadcast to ``n_out`` channels, or None (the kind has none):
    ``(mult, add, nudge or None, shift)`` int64 (the integer form of :func:`_fused_constants`), or
    ``(scale, zp)`` with ``scale`` float32 for a ``float32`` requantizer rounding half to even (the kernel's
    float mode: :math:`y = \mathrm{rne}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(a)\,s_o)) + z`)."""
    if requant.kind == "float32":
        if requant.rounding is not Rounding.HALF_EVEN or len(requant.scale) not in (1, n_out):
            return None
        scale = np.ascontiguousarray(np.broadcast_to(np.asarray(requant.scale, np.float32), (n_out,)))
        scale.flags.writeable = False
        return scale, int(zp)
    consts = _fused_constants(requant, int(bits), int(zp))
    if consts is None or len(consts[0]) not in (1, n_out):
        return None
    out = tuple(None if c is None else np.ascontiguousarray(np.broadcast_to(c, (n_out,)), np.int64)
                for c in consts)
    for c in out:
        if c is not None:
            c.flags.writeable = False
    return out


class _Pool:
    """Reusable output buffers (the int8 outputs and the traces' int64 ``acc``): a buffer is handed out again
    only when this pool holds its sole reference (whoever received it, or any view of it, has let it go), so
    a caller never sees its array change; it saves the page faults (zeroing) of fresh allocations on every
    run.  At most ``limit`` bytes are kept."""

    def __init__(self, limit: int = 1 << 29):
        self.limit, self.free, self.lock = limit, {}, threading.Lock()

    def take(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        key = (nbytes, dtype.str)
        with self.lock:
            for owner, buf in self.free.get(key, ()):
                # free when only this pool refers to the owner (the list's tuple, the loop variable,
                # getrefcount's argument) and to the aligned view (the tuple, the loop variable, the argument)
                if sys.getrefcount(owner) == 4 and sys.getrefcount(buf) == 3:
                    return buf.reshape(shape)
            owner = np.empty(nbytes + 64, np.uint8)           # the owner: every view of it references it
            start = -owner.ctypes.data % 64                    # 64-byte aligned (whole cache lines)
            buf = owner[start:start + nbytes].view(dtype)
            if 2 * nbytes <= self.limit:
                bufs = self.free.setdefault(key, [])
                total = sum(b.nbytes for v in self.free.values() for _, b in v)
                while bufs and total + nbytes > self.limit:    # keep the pool under its limit
                    total -= bufs.pop(0)[1].nbytes
                if total + nbytes <= self.limit:
                    bufs.append((owner, buf))
            return buf.reshape(shape)


_POOL = _Pool()
#: Buffers of fewer bytes than this are not pooled (:class:`FusedCall`'s int8 outputs).
_SMALL = 1 << 17


def release_buffers(limit: int | None = None) -> None:
    """Drop the pool's reusable buffers (arrays handed out stay valid); ``limit``: new cap in bytes
    (default 512 MiB; 0 turns the reuse off)."""
    with _POOL.lock:
        _POOL.free.clear()
        if limit is not None:
            _POOL.limit = int(limit)


def fused(op: str, x, w, bias, *, requant, x_zp, w_zp, out_spec, fmt, overflow, order, bias_at,
          zero_point="subtract", tile_k=None, product_shift=0, stride=(1, 1), pads=((0, 0), (0, 0)),
          dilation=(1, 1), need_acc: bool = True, impl: int = 0):
    """The layer on the fused kernel, or ``None`` when the kernel does not model this call.

    Arguments as validated by :mod:`fxpsim.datapath.integer_ops` (``bias`` int64 or None, ``out_spec`` =
    ``(dtype, zero point, act_min, act_max)``, ``fmt`` the accumulator ``Format``, ``pads`` explicit);
    ``w`` in TFLite's layout. ``need_acc=False`` may return ``acc=None`` (a graph run without a trace);
    ``impl=1`` forces the portable kernel (tests). Returns ``(out, acc, overflows, above, below)`` with
    ``above``/``below`` None when the output stage ran in numpy. The exactness bound of the module docstring
    is evaluated by the kernel (on the data of ``x``). :func:`prepare` then the call it returns.
    """
    if _k is None or _overflow_log_active():
        return None
    x = np.asarray(x)
    call = prepare(op, x.shape, x.dtype, w, bias, requant=requant, x_zp=x_zp, w_zp=w_zp, out_spec=out_spec, fmt=fmt,
                   overflow=overflow, order=order, bias_at=bias_at, zero_point=zero_point, tile_k=tile_k,
                   product_shift=product_shift, stride=stride, pads=pads, dilation=dilation, impl=impl)
    if call is None:
        return None
    call.cache = None                # one call: nothing to keep
    return call(x, need_acc)


def _fixed(a, dtype) -> np.ndarray:
    """``a`` as a C-contiguous ``dtype`` array that no one can change under a :class:`FusedCall` (its cache is
    built from it once): ``a`` itself when it already is one, read-only down to its memory's owner (or to
    ``bytes``), else a read-only copy."""
    out = np.ascontiguousarray(a, dtype)
    base = out
    while isinstance(base, np.ndarray) and not base.flags.writeable:
        base = base.base
    if base is not None and not isinstance(base, bytes):
        out = out.copy()
        out.flags.writeable = False
    return out


class FusedCall:
    r"""One layer's call of the fused kernel with everything but ``x`` fixed (:func:`prepare`):
    ``call(x, need_acc)`` returns what :func:`fused` returns, ``None`` included (the kernel's data-dependent
    exactness bound, an active :func:`fxpsim.overflow_log`, the kernel switched off, another input).

    What the kernel derives from the weights, bias and output stage alone (the exactness bound's per-channel
    :math:`\sum_k |w_{o,k}|`, the weights in each kernel's layout, the output constants in lane order) is built
    by the first call that needs it and kept in ``cache`` (``_conv_int8.Cache``) for the next ones: a call then
    costs the input's scan (:math:`\max |x - z_x|`) and the sums, not the layer's weights again."""

    def __init__(self, op, x_shape, out_shape, w_flat, b32, geometry, depthwise, args, rq, requant, bits, out_spec):
        self.op, self.x_shape, self.out_shape = op, tuple(x_shape), out_shape
        self.x4_shape = (-1, 1, 1, x_shape[-1]) if op == "fully_connected" else None
        self.w_flat, self.b32, self.geometry, self.depthwise = w_flat, b32, geometry, depthwise
        self.args, self.rq, self.requant, self.bits, self.out_spec = args, rq, requant, bits, out_spec
        self.m_rows, self.n_out = math.prod(out_shape[:-1]), int(out_shape[-1])
        # int8 outputs below glibc's mmap threshold come from a fresh np.empty (recycled heap memory, no page
        # faults to save, and cheaper than the pool's search)
        self.small_out = self.m_rows * self.n_out < _SMALL
        self.bind()

    def bind(self) -> None:
        """A new ``cache`` bound to the call's layer (after a change of ``args``: tests force ``impl`` so)."""
        x_zp, mode, word, init, lo, hi, impl, seq = self.args
        self.cache = _k.Cache()
        self.cache.bind(self.w_flat, self.b32, self.geometry, self.depthwise, x_zp, mode, word, init, self.rq, lo,
                        hi, impl, seq)
        self.cache.expect(*((self.m_rows, 1, 1, self.x_shape[-1]) if self.x4_shape is not None else self.x_shape))

    def codes(self, x):
        """The output codes alone, as ``self(x, False)[0]`` gives them, by the kernel's leanest entry
        (``Cache.forward``: no accumulators, counts or buffer pool) where the output is small (a fresh array costs
        no page faults there); None where that does not apply (the caller then calls ``self``)."""
        if not self.small_out or self.cache is None or _k is None or _overflow_log_active():
            return None
        out = self.cache.forward(x if self.x4_shape is None else x.reshape(self.x4_shape))
        return None if out is None else out.reshape(self.out_shape)

    def __call__(self, x, need_acc: bool):
        if _k is None or _overflow_log_active() or x.shape != self.x_shape or x.dtype != np.int8:
            return None
        rq = self.rq
        acc_buf = _POOL.take((self.m_rows, self.n_out), np.int64) if (need_acc or rq is None) else None
        out_buf = None if rq is None or self.small_out else _POOL.take((self.m_rows, self.n_out), np.int8)
        x4 = x.reshape(self.x4_shape) if self.x4_shape is not None else x
        if not x4.flags.c_contiguous:
            x4 = np.ascontiguousarray(x4)
        if self.cache is not None:
            res = self.cache.run(x4, need_acc, acc_buf, out_buf)
        else:
            x_zp, mode, word, init, lo, hi, impl, seq = self.args
            res = _k.run(x4, self.w_flat, self.b32, self.geometry, self.depthwise, x_zp, mode, word, init, rq, lo, hi,
                         impl, bool(need_acc), seq, acc_buf, out_buf)
        if res is None:
            return None
        acc, out, overflows, above, below = res
        shape = self.out_shape
        if out is None:                           # an output stage without fused constants: numpy, as before
            _, zp, lo, hi = self.out_spec
            out = self.requant._output_codes(acc, self.bits, zp, lo, hi, self.out_spec[0])
            return out.reshape(shape), acc.reshape(shape), overflows, None, None
        return out.reshape(shape), None if acc is None else acc.reshape(shape), overflows, above, below


def prepare(op: str, x_shape, x_dtype, w, bias, *, requant, x_zp, w_zp, out_spec, fmt, overflow, order, bias_at,
            zero_point="subtract", tile_k=None, product_shift=0, stride=(1, 1), pads=((0, 0), (0, 0)),
            dilation=(1, 1), impl: int = 0) -> FusedCall | None:
    """The :class:`FusedCall` of a layer for inputs of ``x_shape`` and ``x_dtype`` (arguments as :func:`fused`),
    or ``None`` when the kernel does not model the layer."""
    if _k is None:
        return None
    w = np.asarray(w)
    if np.dtype(x_dtype) != np.int8 or w.dtype != np.int8 or out_spec[0] != np.int8 or zero_point != "subtract" \
            or product_shift or math.prod(x_shape) == 0:
        return None
    if (np.ndim(w_zp) == 0 and w_zp != 0) or (np.ndim(w_zp) and np.any(np.asarray(w_zp) != 0)):
        return None
    mode = _MODES.get(Overflow.parse(overflow))
    if mode is None:
        return None
    if op == "fully_connected":
        n_out, k = w.shape
        kh = kw = 1
        depthwise, out_hw = 0, (1, 1)
    else:
        c = x_shape[3]
        depthwise = int(op == "depthwise_conv2d")
        if depthwise and w.shape[3] != c:
            return None                      # depth multiplier > 1
        kh, kw = w.shape[1:3]
        n_out = w.shape[3] if depthwise else w.shape[0]
        k = kh * kw * (1 if depthwise else c)
        out_hw = tuple((n + p0 + p1 - (kk - 1) * d - 1) // s + 1
                       for n, kk, s, d, (p0, p1) in zip(x_shape[1:3], (kh, kw), stride, dilation, pads))
    if tile_k is not None and tile_k < k:
        return None
    if np.ndim(w_zp) and np.shape(w_zp) != (n_out,):
        return None                          # the general path reports the bad zero point
    if bias is not None and bias.size and (int(bias.min()) < -(1 << 31) or int(bias.max()) >= 1 << 31):
        return None                          # a bias beyond int32 can only come with a wide accumulator
    word = int(fmt.word)
    bits = min(word, 32)                     # word > 31: only exact sums (in int32) are modelled
    _, zp, lo, hi = out_spec
    rq = _requant_constants(requant, bits, int(zp), int(n_out))
    b32 = None if bias is None else _fixed(bias, np.int32)
    geometry = (int(kh), int(kw), int(n_out), int(out_hw[0]), int(out_hw[1]), int(stride[0]), int(stride[1]),
                int(dilation[0]), int(dilation[1]), int(pads[0][0]), int(pads[1][0]))
    shape = tuple(x_shape[:-1]) + (n_out,) if op == "fully_connected" else (x_shape[0],) + out_hw + (n_out,)
    args = (int(x_zp), mode, word, int(bias_at == "init"), int(lo), int(hi), int(impl),
            order == "sequential" and word <= 31)
    return FusedCall(op, x_shape, tuple(int(d) for d in shape), _fixed(w, np.int8).reshape(-1), b32, geometry,
                     depthwise, args, rq, requant, bits, out_spec)

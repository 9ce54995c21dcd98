"""Accumulating datapath kernels: dot / matmul / conv / sum with a finite accumulator.

A MAC array does not add with infinite precision.  Every function here models an
accumulator register of a given :class:`~fxpsim.fixed.Format` that receives one
exact product per step and applies its overflow mode after **every** add:

.. math::

    s_0 = \\mathrm{init}, \\qquad
    s_{k+1} = \\mathrm{fit}\\big(s_k + \\mathrm{round}(a_k b_k \\, 2^{f_{acc} - f_a - f_b})\\big),
    \\qquad k = 0, \\dots, K-1

``round`` (the ``rounding`` mode) acts only when the accumulator has fewer fraction bits than
the products (:math:`f_{acc} < f_a + f_b`); otherwise products are shifted left exactly.
``fit`` is the ``overflow`` mode.  ``order="tree"`` replaces the sequential chain by a balanced
pairwise adder tree (neighbours ``(0, 1), (2, 3), ...`` at each level, an odd last element passed
up unchanged, every node fitted), whose root is then added to ``init`` through one more fitted
add.  ``overflow_at="end"`` models a wide adder: the rounded products and ``init`` are summed
exactly and fitted once.

Inputs are :class:`~fxpsim.fixed.FixedArray` or integer numpy arrays (integer codes, format
``Format.integer(bits)`` with the smallest width holding the data, unsigned for unsigned dtypes).
Results are ``FixedArray`` in the accumulator format; ``result.overflows`` counts adds that
overflowed (each add at most once).  ``per_output=True`` returns ``(result, counts)`` with
``counts`` an int64 array of per-output overflow counts (also ``result.overflow_mask``).

Speed: when the data prove that no partial sum can leave the accumulator's range
(:math:`|{\\rm init}| + K \\max|a| \\max|b|` within range), the exact sum is computed with
float32/float64 BLAS (K cut into chunks whose partial sums are integers of at most :math:`2^{24}` /
:math:`2^{53}`, hence exact in any summation order; chunk sums added in int64) or integer kernels: exact
int16 sums by AVX512-VNNI, int32 operands by a register-blocked AVX-512 ``VPMULDQ`` loop (6 rows x 32 int64
columns in registers; exact 64-bit products, sums modulo :math:`2^{64}`), wider ones by an unsigned 64-bit
kernel.  ``count=False`` with ``overflow="wrap"`` takes the same exact sum modulo :math:`2^{64}` and
reduces it once (wrapping commutes with summation; see :func:`matmul`).  Otherwise per-add SIMD
kernels run: with AVX-512BW or AVX2, register-blocked loops on 16-bit lanes (native saturating adds,
int16 operands and products) or 32-bit lanes (exact VPMADDWD products of int16 operands), each counting
overflows with one compare and one (masked) add per vector (no horizontal work; lane counters flushed
once per k tile), and loops without counters for ``count=False``; with wider operands, 32/64-bit-lane
loops vectorised by the compiler (AVX-512/AVX2 variants chosen at run time).  The
adder tree is vectorised across output columns (a problem with few output columns and many rows runs
transposed, to fill the lanes), and rounded products and ``wrap_sign_magnitude`` use a generic 128-bit
kernel.  Rows run in parallel (``threads``), never the reduction, so the thread count never changes a bit.

Memory: kernel temporaries (lane copies of ``a``, the right operand packed in 64-column slabs, float
copies for BLAS, int64 copies for the generic kernel) stay within max(64 MiB, the inputs plus outputs)
(``_temp_limit``): larger problems run in chunks along the reduction axis, each starting from the
previous chunk's fitted accumulators as ``init`` (per-add fitting is sequential, so the bits are those
of one pass), or, for the adder tree, in row and column blocks of the generic kernel.  Convolutions lower to
patches in tiles of output rows (at most 4 MiB of patches each, cut from a zero-padded copy of only the input
rows the tile reads): a 38 MiB int8 input (4 x 128 x 128 x 608, 3 x 3) takes 35 MiB beyond its inputs and
outputs at ``acc=16`` and 38 MiB with the adder tree (757 MiB and 1.77 GB untiled), ``benchmarks/bench_memory.py``.
"""
from __future__ import annotations


import numpy as np

from . import _accumulate as _k
from ..core.fixed import FixedArray, Format, Overflow
from ._acc_operands import _I63, _data_range, _exact_format, _init_codes, _modes, _operand, _parse_acc, _threads
from ._acc_per_add import _accumulate, _finish, _reshaped
from ._acc_conv import _check_groups, _conv, _pair, _positive_int
from ._acc_operands import THREADS_PER_CPU_LIMIT, last as _last

__all__ = ["matmul", "dot", "conv1d", "conv2d", "sum", "cumsum"]


def __getattr__(name):
    """``last_path``: the kernel the last call used ("exact32", "blas32", "blas64", "int64", "vnni16",
    "simd16", "simd32", "simd32w", "simd64", "tree32", "tree64", "generic"), for tests and benchmarks that
    check a path is really taken (``count=False`` wrapping reports the path of its exact sum);
    ``last_int64_kernel``: which integer kernel "int64" ran ("mul32", "mul32-portable", "wrap64").
    The kernels live in ``_acc_operands`` (operands, threads), ``_acc_scratch`` (buffers, K chunks),
    ``_acc_exact`` (exact sums), ``_acc_per_add`` (the per-add kernels) and ``_acc_conv``."""
    if name == "last_path":
        return _last.path
    if name == "last_int64_kernel":
        return _last.int64_kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_COMMON_DOC = """
    acc : Format, str, int or None
        Accumulator format.  An int ``B`` means a signed ``B``-bit register with the products'
        LSB (``Format(B, f_a + f_b)``; for integer inputs ``Format.integer(B)``).  ``None``:
        exact, wide enough for every possible sum of these formats (error above 64 bits).
    overflow : str
        ``saturate``, ``wrap``, ``saturate_symmetric``, ``saturate_zero``,
        ``wrap_sign_magnitude`` or ``error`` (saturate, then raise ``ValueError`` naming the
        number of overflowing adds and the first output index); aliases as in
        :class:`~fxpsim.fixed.Overflow`.
    rounding : str
        How a product is rounded to the accumulator LSB when the accumulator has fewer
        fraction bits (any deterministic :class:`~fxpsim.fixed.Rounding`).
    order : {"sequential", "tree"}
        ``sequential``: :math:`k = 0, \\\\dots, K-1` (MAC unit, systolic array).  ``tree``:
        balanced pairwise adder tree, every node at accumulator width, then ``+ init``.
    overflow_at : {"every", "end"}
        Fit after every add, or sum exactly and fit once (a wide adder).
    init : FixedArray, int array or None
        Accumulator start value (e.g. a preloaded bias), broadcast to the output; raw codes of
        the accumulator format, or a FixedArray with at most the accumulator's fraction bits.
    per_output : bool
        Also return an int64 array of per-output overflow counts: ``(result, counts)``.
    threads : int or None
        Threads over independent output rows (None: all cores for large problems, one for
        small ones).  Never changes a bit.  The exact BLAS path uses numpy's BLAS threads.
        At most ``THREADS_PER_CPU_LIMIT`` (4) times ``os.cpu_count()`` (ValueError above).
    count : bool
        Count the adds that overflowed (default).  ``count=False`` returns the same codes with
        ``.overflows = None`` and costs less:

        * ``overflow="wrap"``: two's-complement wrapping commutes with summation, so the
          per-add (or adder-tree, or end-fitted) wrapped accumulator is the exact sum reduced
          modulo :math:`2^W` once.  The sum is computed modulo :math:`2^{64}` by float32/float64
          BLAS (exact in K chunks whose partial sums stay within :math:`2^{24}` / :math:`2^{53}`),
          exact int16 sums (AVX512-VNNI), for int32-range operands a register-blocked AVX-512
          ``VPMULDQ`` kernel (about 1.4-1.7x float64 BLAS on one thread), or an unsigned 64-bit
          kernel for wider operands (about 0.4-0.9x BLAS): BLAS speed or better instead of the
          per-add kernel's.
        * saturating modes: the per-add kernel still runs (saturation does not commute), on its
          loops without counters where it has them (AVX2 / AVX-512BW 16/32-bit lanes; with
          AVX-512BW about 2x / 1.5x faster than counting).

        With ``count=True`` every add is fitted and tested in the per-add kernels (16-bit lanes:
        one mask compare and one masked add per 32 adds; 32-bit lanes: per 16 adds), also for wrap.
        Not with ``per_output=True`` or ``overflow="error"`` (both need the counts).  Inside an
        :func:`~fxpsim.core.fixed.overflow_log` the counts are always taken.

    Returns
    -------
    FixedArray (or ``(FixedArray, ndarray)`` with ``per_output=True``)
        Codes in the accumulator format; ``.overflows`` = adds that overflowed (None with
        ``count=False``).
"""


def matmul(a, b, acc=None, *, overflow="saturate", rounding="half_up", order="sequential",
           overflow_at="every", init=None, per_output=False, threads=None, count=True):
    """Matrix product through a finite accumulator, with numpy ``matmul`` broadcasting.

    .. math::

        y_{\\dots ij} = \\mathrm{fit}\\Big(\\cdots \\mathrm{fit}\\big(\\mathrm{init}_{\\dots ij}
        + \\mathrm{round}(a_{\\dots i0} b_{\\dots 0j})\\big) \\cdots
        + \\mathrm{round}(a_{\\dots i,K-1} b_{\\dots K-1,j})\\Big)

    Parameters
    ----------
    a, b : FixedArray or integer ndarray
        ``[..., M, K]`` and ``[..., K, N]`` (1-D operands as in :func:`numpy.matmul`).
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    ca, fa = _operand(a, "a")
    cb, fb = _operand(b, "b")
    if ca.ndim == 0 or cb.ndim == 0:
        raise ValueError("matmul: operands must have at least 1 dimension (use * for scalars)")
    a2 = ca[None, :] if ca.ndim == 1 else ca
    b2 = cb[:, None] if cb.ndim == 1 else cb
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: shapes {ca.shape} and {cb.shape} do not align: a has K={a2.shape[-1]} "
                         f"(last axis), b has K={b2.shape[-2]} ({'first' if cb.ndim == 1 else 'second-to-last'} axis)")
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dimensions of {ca.shape} and {cb.shape} do not broadcast") from None
    m, kk, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    nb = int(np.prod(batch, dtype=np.int64))
    user = batch + ((m,) if ca.ndim > 1 else ()) + ((n,) if cb.ndim > 1 else ())
    a3 = np.broadcast_to(a2, batch + (m, kk)).reshape(nb, m, kk)
    if int(np.prod(b2.shape[:-2], dtype=np.int64)) == 1:
        b3 = b2.reshape(1, kk, n)
    else:
        b3 = np.broadcast_to(b2, batch + (kk, n)).reshape(nb, kk, n)
    out, counts, accf, rng = _accumulate(a3, b3, fa, fb, acc, init, r, o, order, overflow_at == "end",
                                         threads, "matmul", user, lambda t: t.reshape(nb, m, n), count=count)
    return _finish(out.reshape(user), _reshaped(counts, user), accf, o, "matmul", per_output, rng)


def dot(a, b, acc=None, *, overflow="saturate", rounding="half_up", order="sequential",
        overflow_at="every", init=None, per_output=False, threads=None, count=True):
    """Inner product of two 1-D vectors through a finite accumulator (a 0-d result).

    .. math:: y = \\mathrm{fit}(\\cdots\\mathrm{fit}(\\mathrm{init} + \\mathrm{round}(a_0 b_0))
              \\cdots + \\mathrm{round}(a_{K-1} b_{K-1}))

    Parameters
    ----------
    a, b : FixedArray or integer ndarray, 1-D of equal length
    {common}"""
    for name, v in (("a", a), ("b", b)):
        shape = v.shape if isinstance(v, FixedArray) else np.shape(v)
        if len(shape) != 1:
            raise ValueError(f"dot: {name} must be 1-D, got shape {shape}; use matmul for matrices")
    return matmul(a, b, acc, overflow=overflow, rounding=rounding, order=order, overflow_at=overflow_at,
                  init=init, per_output=per_output, threads=threads, count=count)



def conv2d(x, w, acc=None, *, stride=1, padding="VALID", dilation=1, groups=1, overflow="saturate",
           rounding="half_up", order="sequential", overflow_at="every", init=None, per_output=False,
           threads=None, count=True):
    """2-D convolution (cross-correlation, as TensorFlow) through a finite accumulator.

    .. math::

        y_{n,p,q,o} = \\mathrm{acc}_{(i,j,c)}\\Big(\\mathrm{init}_{n,p,q,o};\\;
        x_{n,\\,p s_h + i d_h - t,\\, q s_w + j d_w - l,\\, g C_g + c}\\; w_{i,j,c,o}\\Big)

    with :math:`g = \\lfloor o / (C_{out}/G) \\rfloor`; the reduction runs over
    :math:`(i, j, c)` in row-major order (``i`` slowest, ``c`` fastest), padded taps included
    as zero products.  Depthwise: ``groups = Cin`` and ``w`` of shape ``[KH, KW, 1, Cin*mult]``
    (TensorFlow's ``[KH, KW, Cin, mult]`` reshaped), output channel ``c*mult + m``.

    Parameters
    ----------
    x : FixedArray or integer ndarray, NHWC
    w : FixedArray or integer ndarray, ``[KH, KW, Cin/groups, Cout]`` (HWIO)
    stride, dilation : int or (int, int)
    padding : "VALID", "SAME" (TensorFlow's split, extra row/column at the bottom/right) or
        ``((top, bottom), (left, right))``
    groups : int
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    _pair(stride, "stride", "conv2d"), _pair(dilation, "dilation", "conv2d"), _check_groups(groups, "conv2d")
    cx, fx = _operand(x, "x")
    cw, fw = _operand(w, "w")
    out, counts, accf, rng = _conv(cx, fx, cw, fw, acc, stride, padding, dilation, groups, r, o, order,
                                   overflow_at == "end", init, threads, "conv2d", False, count)
    return _finish(out, counts, accf, o, "conv2d", per_output, rng)


def conv1d(x, w, acc=None, *, stride=1, padding="VALID", dilation=1, groups=1, overflow="saturate",
           rounding="half_up", order="sequential", overflow_at="every", init=None, per_output=False,
           threads=None, count=True):
    """1-D convolution (NWC input, ``[K, Cin/groups, Cout]`` weights) through a finite accumulator.

    .. math:: y_{n,q,o} = \\mathrm{acc}_{(j,c)}\\big(\\mathrm{init}_{n,q,o};\\;
              x_{n,\\,q s + j d - l,\\, g C_g + c}\\, w_{j,c,o}\\big)

    Same conventions as :func:`conv2d`; ``padding`` is "VALID", "SAME" or ``(left, right)``.

    Parameters
    ----------
    x : FixedArray or integer ndarray, NWC
    w : FixedArray or integer ndarray, ``[K, Cin/groups, Cout]``
    stride, dilation : int
    padding : "VALID", "SAME" or ``(left, right)``
    groups : int
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    for name, value in (("stride", stride), ("dilation", dilation)):
        if not _positive_int(value):
            raise ValueError(f"conv1d: {name} must be a positive int, got {value!r}")
    _check_groups(groups, "conv1d")
    cx, fx = _operand(x, "x")
    cw, fw = _operand(w, "w")
    if cx.ndim != 3 or cw.ndim != 3:
        raise ValueError(f"conv1d: x must be NWC (3-D) and w [K, Cin/groups, Cout] (3-D), got shapes "
                         f"{cx.shape} and {cw.shape}")
    if not isinstance(padding, str):
        try:
            padding = ((0, 0), tuple(padding))
        except TypeError:
            raise ValueError(f"conv1d: padding must be 'VALID', 'SAME' or (left, right), got {padding!r}") from None
    out, counts, accf, rng = _conv(cx[:, None], fx, cw[None], fw, acc, (1, int(stride)), padding,
                                   (1, int(dilation)), groups, r, o,
                                   order, overflow_at == "end", init, threads, "conv1d", True, count)
    return _finish(out, counts, accf, o, "conv1d", per_output, rng)


def _axes(axis, ndim: int, op: str):
    if axis is None:
        return tuple(range(ndim))
    try:
        return np.lib.array_utils.normalize_axis_tuple(axis, ndim)
    except (np.exceptions.AxisError, TypeError) as exc:
        raise ValueError(f"{op}: bad axis {axis!r} for a {ndim}-D input ({exc})") from None


def sum(x, axis=None, acc=None, *, overflow="saturate", rounding="half_up", order="sequential",
        overflow_at="every", init=None, per_output=False, threads=None, count=True):
    """Sum over ``axis`` through a finite accumulator (each element is one add).

    .. math:: y = \\mathrm{fit}(\\cdots\\mathrm{fit}(\\mathrm{init} + \\mathrm{round}(x_0))
              \\cdots + \\mathrm{round}(x_{K-1}))

    Parameters
    ----------
    x : FixedArray or integer ndarray
    axis : None, int or tuple of ints
        Axes to reduce (None: all); reduced elements are added in C order.
    {common}"""
    r, o = _modes(rounding, overflow, overflow_at, order, threads, count, per_output)
    cx, fx = _operand(x, "x")
    axes = _axes(axis, cx.ndim, "sum")
    keep = [i for i in range(cx.ndim) if i not in axes]
    user = tuple(cx.shape[i] for i in keep)
    kk = int(np.prod([cx.shape[i] for i in axes], dtype=np.int64))
    rows = int(np.prod(user, dtype=np.int64))
    a3 = np.transpose(cx, keep + list(axes)).reshape(1, rows, kk)
    ones = np.ones((1, kk, 1), np.int64)
    out, counts, accf, rng = _accumulate(a3, ones, fx, Format(1, 0, False), acc, init, r, o, order,
                                         overflow_at == "end", threads, "sum", user,
                                         lambda t: t.reshape(1, rows, 1), count=count)
    return _finish(out.reshape(user), _reshaped(counts, user), accf, o, "sum", per_output, rng)


def cumsum(x, axis=-1, acc=None, *, overflow="saturate", rounding="half_up", init=None,
           per_output=False, threads=None):
    """Running sums along ``axis`` through a finite accumulator: every step is one output.

    .. math:: y_k = \\mathrm{fit}(y_{k-1} + \\mathrm{round}(x_k)), \\qquad y_{-1} = \\mathrm{init}

    ``init`` broadcasts to ``x``'s shape without ``axis``.  ``per_output=True`` returns
    ``(result, flags)`` where ``flags[..., k]`` is 1 when step ``k`` overflowed (a per-step
    trace, as SystemC's overflow flag).  Other parameters as in :func:`matmul` (cumsum is
    sequential by nature: no ``order`` / ``overflow_at``).
    """
    r, o = _modes(rounding, overflow, "every", "sequential", threads)
    cx, fx = _operand(x, "x")
    if cx.ndim == 0:
        raise ValueError("cumsum: x must have at least 1 dimension")
    (ax,) = _axes(axis, cx.ndim, "cumsum")
    moved = np.moveaxis(cx, ax, -1)
    kk, rows = moved.shape[-1], int(np.prod(moved.shape[:-1], dtype=np.int64))
    accf = _parse_acc(acc, fx.frac)
    frac = fx.frac if accf is None else accf.frac
    init_r = _init_codes(init, moved.shape[:-1], frac)
    i_rng = _data_range(init_r) if init_r is not None else (0, 0)
    if accf is None:
        accf = _exact_format(min(i_rng[0], 0) + kk * min(fx.min_code, 0),
                             max(i_rng[1], 0) + kk * max(fx.max_code, 0), frac, f"{kk} values of {fx}",
                             "cumsum")
    shift = accf.frac - fx.frac
    if shift < -63 or max(abs(fx.min_code), fx.max_code) << max(shift, 0) > _I63:
        raise ValueError(f"cumsum: values of {fx} cannot be aligned to the accumulator {accf} within 64 bits")
    if o is Overflow.WRAP_SIGN_MAGNITUDE and not accf.signed:
        raise ValueError(f"overflow='wrap_sign_magnitude' needs a signed accumulator, got {accf}")
    if init_r is not None and (i_rng[0] < accf.min_code or i_rng[1] > accf.max_code):
        raise ValueError(f"cumsum: init codes {i_rng[0]}..{i_rng[1]} do not fit the accumulator {accf}")
    x2 = np.ascontiguousarray(moved.reshape(rows, kk), dtype=np.int64)
    ini = np.zeros(rows, np.int64) if init_r is None else np.ascontiguousarray(init_r, np.int64).reshape(rows)
    out = np.empty((rows, kk), np.int64)
    flags = np.empty((rows, kk), np.int64)
    _k.cumsum_rows(x2, ini, out, flags, shift, r.code, accf.word, accf.signed, o.code, _threads(threads, x2.size))
    out = np.moveaxis(out.reshape(moved.shape), -1, ax)
    flags = np.moveaxis(flags.reshape(moved.shape), -1, ax)
    return _finish(np.ascontiguousarray(out), np.ascontiguousarray(flags), accf, o, "cumsum", per_output)


for _f in (matmul, dot, conv1d, conv2d, sum):
    _f.__doc__ = _f.__doc__.replace("{common}", _COMMON_DOC.strip("\n").lstrip())
del _f

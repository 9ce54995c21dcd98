"""The fused, block and fused_rd kinds on the C kernels of :mod:`fxpsim.core._floatacc`.

The operands are split here (:func:`~.operands.split_codes`, O(MK + KN) numpy work) into what the
kernel reads per element: the magnitude :math:`|S|` (times the block scale's significand for the
fused kind), the alignment exponent :math:`E` (plus the scale's), a sign mask and the special
flags; the kernel then runs the same integer formula as :mod:`.fused` per output (one thread per
row, or per 16-column tile in the truncating int32 case; the thread count never changes a bit).
That case runs 16 columns on vector lanes (AVX2 where the CPU has it, see :data:`SIMD`), the
chunk ends included where a chunk holds no NaN/Inf and no promotion falls due (``close32``).
:func:`run_c` returns None where the kernel does not apply (an output that is not IEEE with
subnormals and Inf, operands too wide for int32 parts, more than 256 groups per chunk); the caller
then takes the numpy path.

Exponents of zeros and specials are clamped to :math:`\\ge -2^{28}` (a zero that never sets the
maximum, :data:`~.operands.NO_EXPONENT`, stays below every real exponent; its term is 0 either way).
"""
from __future__ import annotations

import numpy as np

from ...core.float_format import FloatFormat
from .operands import NO_EXPONENT, Operand, split_codes

__all__ = ["run_c", "kernel_available"]

try:                                             # the compiled kernels (absent in a bare source tree)
    from ...core import _floatacc
except ImportError:                              # pragma: no cover - exercised without the build
    _floatacc = None

_LOW = -(1 << 28)
_ROUND = {"toward_zero": 0, "half_even": 1, "half_away": 2, "floor": 3, "ceil": 4}
_OVF = {"inf": 0, "ieee": 1, "saturate": 2}
_ALIGN = {"truncate": 0, "floor": 1, "half_even": 2}
_I32 = 1 << 31
#: Whether the column kernel may take its AVX2 path (where the CPU has AVX2); False: the portable C
#: loops.  Both give the same integers (the tests run both).
SIMD = True


def kernel_available() -> bool:
    return _floatacc is not None


def _flags(op: Operand, extra_nan=None) -> np.ndarray:
    nan = op.nan if extra_nan is None else (op.nan | extra_nan)
    f = nan.astype(np.uint8) | (op.inf.astype(np.uint8) << 1) | (op.neg.astype(np.uint8) << 2) \
        | (op.zero.astype(np.uint8) << 3)
    return np.ascontiguousarray(f)


def _i32(x) -> np.ndarray:
    return np.ascontiguousarray(np.clip(x, _LOW, -_LOW).astype(np.int32))


def _params(acc, K: int, batched: bool) -> dict | None:
    out, prec = acc.output, acc.precision
    for f in (out, prec):
        if f.encoding != "ieee" or not f.subnormals or not f.has_inf or not f.signed:
            return None
    ze = NO_EXPONENT if acc.zero_exponent is None else int(acc.zero_exponent)
    return dict(K=K, chunk=acc.chunk or K, promote=acc.promote_every or 0, F=acc.fraction_bits,
                align=_ALIGN[acc.align], ze=ze, s_exp_bits=out.exp_bits, s_man_bits=out.man_bits, s_bias=out.bias,
                s_sign_bit=int(out.sign_bit), s_inf_code=int(out.inf_code), p_m=prec.man_bits,
                p_emin=prec._min_exponent, p_maxc=int(prec.max_mag_code), p_inf_code=int(prec.inf_code),
                p_has_inf=1, rounding=_ROUND[acc.output_rounding], overflow=_OVF[acc.overflow],
                nan_code=int(acc.nan), batched=int(batched))


def _fused_parts(op: Operand, scale: Operand | None, block):
    """(|S|, E, sign mask, flags) per element, the element's block scale folded in."""
    sig, exp, extra = op.sig, op.exp, None
    if scale is not None:
        idx = np.arange(op.sig.shape[1]) // block
        ssig = scale.sig[:, idx]
        sig = sig * ssig
        exp = np.maximum(exp, _LOW) + np.maximum(scale.exp[:, idx], _LOW)
        extra = scale.nan[:, idx]
    mag = np.abs(sig)
    if mag.size and int(mag.max()) >= _I32:
        return None
    return (np.ascontiguousarray(mag.astype(np.int32)), _i32(exp),
            np.ascontiguousarray(-(sig < 0).astype(np.int32)), _flags(op, extra))


def _f32_params(pa, pb, base: int) -> dict:
    r"""Whether the AVX2 column kernel may compute the terms on float32 planes.

    With :math:`a = \pm|a| 2^{E_a}`, :math:`b = \pm|b| 2^{E_b}` (finite nonzero elements) the term is
    :math:`\mathrm{trunc}(a b\, 2^{base - E_{max}})`.  That is exact in float32 when
    :math:`|a| |b| < 2^{24}`, every :math:`a`, :math:`b`, :math:`a b` is a normal below :math:`2^{100}`,
    and :math:`a b\, 2^{base - E_{max}} \ge 2^{-126}`: the kernel takes a chunk's lanes on floats only
    where :math:`base - E_{max} \ge` ``f32_thr`` :math:`= \max(-126 - \min(E_a + E_b), -126)` on every
    lane (else the integer loop); the sum, :math:`E_{max}` and the inexact count are the same integers."""
    lo, hi, nb = [], [], 0
    for mag, exp, _, flags in (pa, pb):
        live = (mag != 0) & ((flags & 3) == 0)
        e = exp[live]
        lo.append(int(e.min(initial=0)))
        hi.append(int(e.max(initial=0)))
        nb += int(mag[live].max(initial=0)).bit_length()
    ok = (nb <= 24 and min(lo) >= -100 and max(hi) <= 100 and sum(hi) + nb <= 100 and sum(lo) >= -120
          and base - sum(lo) <= 126)
    return dict(f32=int(ok), f32_thr=max(-126 - sum(lo), -126))


def _fused_cols(pa, pb, qa, qb, C, st, p, threads):
    """The column-vector kernel: B parts as columns, N padded with zeros to a multiple of 16.

    ``simd`` (AVX2 where the CPU has it, :data:`SIMD`) and ``small16`` (every :math:`|a| 2^{F - f_m}`
    and :math:`|b| < 2^{15}`: one 16-bit multiply-add per product) only choose how the same
    integers are computed."""
    M, N = C.shape
    Np = -(-N // 16) * 16
    pad = ((0, 0), (0, Np - N))
    ub, eb, gb, fb = (np.ascontiguousarray(np.pad(x.T, pad, constant_values=v))
                      for x, v in zip(pb, (0, _LOW, 0, 8)))
    K = ub.shape[0]
    # ub, eb, gb packed by column tile, (Np / 16, K, 16) seen as (Np / 16 * K, 16): one tile is contiguous
    ub, eb, gb = (np.ascontiguousarray(x.reshape(K, Np // 16, 16).transpose(1, 0, 2)).reshape(-1, 16)
                  for x in (ub, eb, gb))
    # whether a tile's chunk holds a NaN or Inf, (K / chunk, Np / 16)
    qbt = np.pad(qb, ((0, Np - N), (0, 0))).reshape(Np // 16, 16, -1).any(axis=1)
    qbt = np.ascontiguousarray(qbt.T.astype(np.uint8))
    Cp = np.ascontiguousarray(np.pad(C, pad))
    D = np.empty((M, Np), np.int64)
    st_tiles = np.zeros((Np // 16, 3), np.int64)                  # counts per column tile
    base = p["F"] - p["fm"]
    small16 = (int(pa[0].max(initial=0)) << base) < (1 << 15) and int(ub.max(initial=0)) < (1 << 15)
    p = dict(p, simd=int(SIMD), small16=int(small16), **_f32_params(pa, pb, base))
    _floatacc.fused_cols_kernel(*pa, ub, eb, gb, fb, qa, qbt, Cp, D, st_tiles, p, threads)
    st[0] += st_tiles.sum(axis=0)
    return D[:, :N]


def _add_stats(st, stats):
    tot = st.sum(axis=0)
    stats["overflows"] += int(tot[0])
    stats["underflows"] += int(tot[1])
    stats["terms_inexact"] += int(tot[2])


def _run_rd(A, B, a_fmt, b_fmt, C, acc, stats, batched, threads):
    """The fused_rd kind (AMD CDNA3, :mod:`.amd`) on ``fused_rd_kernel``, or None where it does not apply: a
    batched call, sums that could leave int64 (the sum bits, the products' widths and the chunk checked here)."""
    M, K = A.shape
    p = _params(acc, K, batched)
    if p is None or batched or not acc.fraction_bits <= acc.sum_bits or acc.c_fraction_bits > acc.sum_bits:
        return None
    ze = acc.zero_exponent
    a, b = split_codes(A, a_fmt, ze), split_codes(B.T, b_fmt, ze)
    pa, pb = _fused_parts(a, None, None), _fused_parts(b, None, None)
    if pa is None or pb is None:
        return None
    fm = a.man_bits + b.man_bits
    base = acc.fraction_bits - fm
    # |term| < 2^(|a| bits + |b| bits + max(base, 0)); a chunk's sum, shifted up by at most S - F, and C's
    # term below 2^(S + 2): every int64 sum is exact below 2^62
    bits = int(pa[0].max(initial=0)).bit_length() + int(pb[0].max(initial=0)).bit_length() + max(base, 0) \
        + int(p["chunk"]).bit_length() + acc.sum_bits - acc.fraction_bits + 2
    if max(bits, acc.sum_bits + 3) > 62:
        return None
    p.update(fm=fm, S=acc.sum_bits, Fc=acc.c_fraction_bits, even_odd=int(acc.even_odd))
    ch = p["chunk"]
    qa, qb = (np.ascontiguousarray((x[3] & 3).reshape(x[3].shape[0], -1, ch).any(axis=-1).astype(np.uint8))
              for x in (pa, pb))
    D = np.empty((M, B.shape[1]), np.int64)
    st = np.zeros((M, 3), np.int64)
    _floatacc.fused_rd_kernel(*pa, *pb, qa, qb, np.ascontiguousarray(C, dtype=np.int64), D, st, p, threads)
    _add_stats(st, stats)
    return D


def run_c(A, B, a_fmt: FloatFormat, b_fmt: FloatFormat, C, acc, stats, sa, sb, block, batched=False,
          threads: int = 1):
    """``_chunked``'s result on the C kernel (A (M, K); B (K, N), or (M, K) when ``batched``), or
    None where the kernel does not apply."""
    if _floatacc is None or acc.kind not in ("fused", "block", "fused_rd"):
        return None
    if acc.kind == "fused_rd":
        return _run_rd(A, B, a_fmt, b_fmt, C, acc, stats, batched, threads)
    M, K = A.shape
    N = 1 if batched else B.shape[1]
    p = _params(acc, K, batched)
    if p is None:
        return None
    ze = acc.zero_exponent
    a = split_codes(A, a_fmt, ze)
    b = split_codes(B if batched else B.T, b_fmt, ze)
    D = np.empty((M, N), np.int64)
    st = np.zeros((M, 3), np.int64)
    Cc = np.ascontiguousarray(C, dtype=np.int64)
    if acc.kind == "fused":
        pa, pb = _fused_parts(a, sa, block), _fused_parts(b, sb, block)
        if pa is None or pb is None:
            return None
        fm = a.man_bits + b.man_bits + (0 if sa is None else sa.man_bits + sb.man_bits)
        base = acc.fraction_bits - fm
        bits = int(pa[0].max(initial=0)).bit_length() + int(pb[0].max(initial=0)).bit_length() + base \
            + int(p["chunk"]).bit_length()
        p.update(fm=fm, fast32=int(acc.align == "truncate" and base >= 0 and bits <= 31))
        # |chunk sum| < 2^bits, |C's term| < 2^(F + 1): the sum with C's term stays below 2^30; the code
        # before the overflow test, <= (E_max - F - e_min + 33) 2^p_m, below 2^32
        em_max = max(int(pa[1].max(initial=_LOW)) + int(pb[1].max(initial=_LOW)), acc.output._max_exponent)
        fld = (em_max - acc.fraction_bits - acc.precision._min_exponent + 33) << acc.precision.man_bits
        p.update(close32=int(max(bits, acc.fraction_bits + 1) + 1 <= 30 and acc.output.bits <= 32
                             and fld < (1 << 32)))
        ch = p["chunk"]
        qa, qb = (np.ascontiguousarray((x[3] & 3).reshape(x[3].shape[0], -1, ch).any(axis=-1).astype(np.uint8))
                  for x in (pa, pb))
        if p["fast32"] and not batched:
            D = _fused_cols(pa, pb, qa, qb, Cc, st, p, threads)
        else:
            _floatacc.fused_kernel(*pa, *pb, qa, qb, Cc, D, st, p, threads)
    else:
        g = acc.group
        if p["chunk"] // g > 256:
            return None
        ia = np.where(a.sig != 0, a.sig << np.clip(a.exp - a_fmt._min_exponent, 0, 62), 0)
        ib = np.where(b.sig != 0, b.sig << np.clip(b.exp - b_fmt._min_exponent, 0, 62), 0)
        if max(int(np.abs(ia).max(initial=0)), int(np.abs(ib).max(initial=0))) >= _I32:
            return None
        lsb = a_fmt._min_exponent - a.man_bits + b_fmt._min_exponent - b.man_bits - sa.man_bits - sb.man_bits
        p.update(lsb=lsb, group=g, block=block)
        c64 = np.ascontiguousarray
        _floatacc.block_kernel(c64(ia.astype(np.int32)), _flags(a), c64(ib.astype(np.int32)), _flags(b),
                               c64(sa.sig, dtype=np.int64), c64(sa.exp, dtype=np.int64), c64(sa.nan, dtype=np.uint8),
                               c64(sb.sig, dtype=np.int64), c64(sb.exp, dtype=np.int64), c64(sb.nan, dtype=np.uint8),
                               Cc, D, st, p, threads)
    _add_stats(st, stats)
    return D

"""Block-scaled formats: OCP Microscaling (MXFP8/6/4, MXINT8) and NVIDIA NVFP4, exactly.

A block of ``k`` values :math:`V_i` (contiguous along ``axis``, or a 2-D tile) shares one scale
:math:`X`; each element stores :math:`P_i = \\mathrm{round}(V_i / X)` in the element format,
clamped to its largest finite value, and represents :math:`X \\cdot P_i`.

MX (OCP MX v1.0, section 6.3): :math:`X = 2^{E}` is an E8M0 code.  The spec's rule (``floor``) is
:math:`E = \\lfloor \\log_2 \\max_i |V_i| \\rfloor - e_{max,elem}` with :math:`e_{max,elem}` the
exponent of the element's largest normal (E4M3: 8, E5M2: 15, E2M3: 2, E3M2: 4, E2M1: 2, INT8: 0).
Other rules: ``ceil`` (:math:`\\lceil \\log_2 \\mathrm{amax} \\rceil - e_{max,elem}`), ``even``
(torchao: amax rounded half-up to the element's mantissa width first), ``rceil`` (cuBLAS /
torchao RCEIL: :math:`\\lceil \\log_2(\\mathrm{amax} / \\mathrm{elem\\_max}) \\rceil`, no element
clamping needed).  All are computed exactly on the integer significand of amax.  :math:`E` below
-127 is raised to -127 (the smallest E8M0 value; OCP reference code); :math:`E > 127` gives the
NaN scale.  A block containing NaN or ±Inf gets the NaN scale (0xFF), which makes every element of
the block NaN whatever its code (spec section 5.3; its element codes are 0 here).  An all-zero
block gets :math:`X = 2^{-127}` and zero elements (as the OCP reference and gfloat).  Elements are
rounded from :math:`V_i \\cdot 2^{-E}` without forming that product in float64 (exact).

MXINT8: 8-bit two's complement elements with an implicit scale :math:`2^{-6}` (values
:math:`c / 64`, :math:`-2 \\le c/64 \\le 127/64`), :math:`e_{max,elem} = 0`.

NVFP4: 16 E2M1 elements, an E4M3 block scale and one float32 per-tensor scale
:math:`T = \\mathrm{fp32}(\\mathrm{amax}_{tensor} / (6 \\cdot 448))`; the block scale is
:math:`s = \\mathrm{E4M3}(\\mathrm{amax}_{block} / (6 T))` and the elements
:math:`\\mathrm{E2M1}(V_i / (s T))`.  Each quotient is rounded once, exactly: it is first formed
round-to-odd with at least 34 significant bits (integer division), which is then rounded to the
target -- round-to-odd with two or more extra bits makes the second rounding equal the direct one
(Boldo & Melquiond, 2008) for every deterministic rounding mode.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .float_codec import (_RND_CODES, _encode_any, _encode_flat, _float64_input, _round_shifted, _split,
                          decode, parse_float_rounding, random_stream)
from .float_format import FloatFormat
from .formats import Format

try:
    from . import _float as _kernel
except ImportError:                     # not built: the float64 path (same results, slower)
    _kernel = None

__all__ = ["BlockFormat", "BlockArray", "quantize_block", "dequantize_block", "SCALE_RULES",
           "BLOCK_FORMATS"]

SCALE_RULES = ("floor", "ceil", "even", "rceil", "amax")
_E8M0 = FloatFormat.parse("float8_e8m0fnu")


@dataclass(frozen=True)
class BlockFormat:
    """Elements of ``element`` in blocks of ``block_size`` along ``axis``, one ``scale_format`` each.

    Parameters
    ----------
    element : FloatFormat or Format
        The element format; a fixed-point :class:`~fxpsim.core.formats.Format` for MXINT8 (``Format(8, 6)``).
    block_size : int or (int, int)
        Elements per block; a pair makes 2-D tiles over the last two axes of ``axis``.
    scale_format : FloatFormat
        ``float8_e8m0fnu`` (power-of-two scales, MX) or another float format (NVFP4: E4M3).
    axis : int or (int, int)
        The blocked axis (axes for 2-D tiles).
    tensor_scale : bool
        A float32 per-tensor scale as well (NVFP4).
    """

    element: FloatFormat | Format
    block_size: int | tuple
    scale_format: FloatFormat = _E8M0
    axis: int | tuple = -1
    tensor_scale: bool = False
    name: str | None = field(default=None, compare=False)

    def __post_init__(self):
        if not isinstance(self.element, (FloatFormat, Format)):
            raise TypeError(f"BlockFormat.element must be a FloatFormat or a fixed-point Format, "
                            f"got {type(self.element).__name__}")
        if not isinstance(self.scale_format, FloatFormat):
            raise TypeError(f"BlockFormat.scale_format must be a FloatFormat, got "
                            f"{type(self.scale_format).__name__}")
        sizes = self.block_size if isinstance(self.block_size, tuple) else (self.block_size,)
        axes = self.axis if isinstance(self.axis, tuple) else (self.axis,)
        if not 1 <= len(sizes) <= 2 or any(isinstance(b, bool) or not isinstance(b, (int, np.integer))
                                           or b < 1 for b in sizes):
            raise ValueError(f"BlockFormat.block_size must be a positive int or a pair, got {self.block_size!r}")
        if len(axes) != len(sizes) or any(not isinstance(a, (int, np.integer)) for a in axes):
            raise ValueError(f"BlockFormat.axis must be an int per block dimension, got {self.axis!r} "
                             f"for block_size {self.block_size!r}")
        if self.scale_format.encoding != "fnu" or self.scale_format.man_bits:
            width = self.scale_format.man_bits + 1 + (24 if self.tensor_scale else 0)
            if width > 28:
                raise ValueError(f"BlockFormat.scale_format: {self.scale_format} (with the float32 tensor "
                                 f"scale: {width} significant bits) is wider than the 28 bits supported")
        if isinstance(self.element, Format) and not self.element.signed:
            raise ValueError("BlockFormat.element: integer elements must be signed (MXINT8)")

    @property
    def sizes(self) -> tuple:
        return self.block_size if isinstance(self.block_size, tuple) else (self.block_size,)

    @property
    def axes(self) -> tuple:
        return self.axis if isinstance(self.axis, tuple) else (self.axis,)

    @property
    def power_of_two_scale(self) -> bool:
        """True for E8M0 scales: the MX rules apply."""
        return self.scale_format.encoding == "fnu" and self.scale_format.man_bits == 0

    @property
    def elem_max(self) -> float:
        e = self.element
        return e.max_finite if isinstance(e, FloatFormat) else float(e.max_value)

    @property
    def emax_elem(self) -> int:
        """The exponent of the element format's largest power of two (INT8: 0)."""
        return int(np.frexp(self.elem_max)[1]) - 1

    @property
    def elem_man_bits(self) -> int:
        e = self.element
        return e.man_bits if isinstance(e, FloatFormat) else e.word - 2

    @classmethod
    def parse(cls, name: "str | BlockFormat") -> "BlockFormat":
        """``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e2m3``, ``mxfp6_e3m2``, ``mxfp4``, ``mxint8``, ``nvfp4``."""
        if isinstance(name, BlockFormat):
            return name
        if not isinstance(name, str):
            raise TypeError(f"expected a BlockFormat or a name, got {type(name).__name__}")
        key = name.strip().lower().replace("-", "_")
        if key not in BLOCK_FORMATS:
            raise ValueError(f"unknown block format {name!r}; known: {', '.join(BLOCK_FORMATS)}")
        return BLOCK_FORMATS[key]


def _mx(elem: str, name: str) -> BlockFormat:
    return BlockFormat(FloatFormat.parse(elem), 32, _E8M0, name=name)


BLOCK_FORMATS = {
    "mxfp8_e4m3": _mx("float8_e4m3fn", "mxfp8_e4m3"),
    "mxfp8_e5m2": _mx("float8_e5m2", "mxfp8_e5m2"),
    "mxfp6_e2m3": _mx("float6_e2m3fn", "mxfp6_e2m3"),
    "mxfp6_e3m2": _mx("float6_e3m2fn", "mxfp6_e3m2"),
    "mxfp4": _mx("float4_e2m1fn", "mxfp4"),
    "mxfp4_e2m1": _mx("float4_e2m1fn", "mxfp4"),
    "mxint8": BlockFormat(Format(8, 6), 32, _E8M0, name="mxint8"),
    "nvfp4": BlockFormat(FloatFormat.parse("float4_e2m1fn"), 16, FloatFormat.parse("float8_e4m3fn"),
                         tensor_scale=True, name="nvfp4"),
}


@dataclass(frozen=True)
class BlockArray:
    """Block-quantized data: element codes, scale codes, and the per-tensor scale (NVFP4).

    Attributes
    ----------
    elements : ndarray of uint8
        Element codes, shaped as the input (two's complement bytes for MXINT8).
    scales : ndarray
        Scale codes, the input's shape with each blocked axis divided by its block size.
    format : BlockFormat
    tensor_scale : float or None
    clamped : int
        Elements that exceeded the element format's range after scaling and were clamped.
    nan_blocks : int
        Blocks given the NaN scale (NaN or Inf inside, or a scale exponent above 127).
    """

    elements: np.ndarray
    scales: np.ndarray
    format: BlockFormat
    tensor_scale: float | None = None
    clamped: int = 0
    nan_blocks: int = 0

    def dequantize(self) -> np.ndarray:
        return dequantize_block(self)

    to_float = dequantize


# --------------------------------------------------------------------------- blocking helpers
def _to_blocks(x: np.ndarray, fmt: BlockFormat):
    """(blocks of shape (n_blocks, k), restore function, grid shape)."""
    nd = x.ndim
    axes = tuple(a % nd if -nd <= a < nd else None for a in fmt.axes)
    if any(a is None for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axis {fmt.axis!r} is out of range for an array of {nd} dimension(s)")
    for a, b in zip(axes, fmt.sizes):
        if x.shape[a] % b:
            raise ValueError(f"block size {b} does not divide axis {a} of length {x.shape[a]}")
    rest = [a for a in range(nd) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    lead = moved.shape[:len(rest)]
    split = []
    for a, b in zip(axes, fmt.sizes):
        split += [x.shape[a] // b, b]
    tiled = moved.reshape(lead + tuple(split))
    nb = len(fmt.sizes)
    perm = list(range(len(lead))) + [len(lead) + 2 * i for i in range(nb)] + \
        [len(lead) + 2 * i + 1 for i in range(nb)]
    tiled = np.transpose(tiled, perm)
    grid_moved = tiled.shape[:len(lead) + nb]
    blocks = tiled.reshape(-1, int(np.prod(fmt.sizes)))

    def restore(flat_elems: np.ndarray) -> np.ndarray:
        t = flat_elems.reshape(tiled.shape)
        t = np.transpose(t, np.argsort(perm))
        t = t.reshape(moved.shape)
        return np.transpose(t, np.argsort(rest + list(axes)))

    def grid(flat_scales: np.ndarray) -> np.ndarray:
        g = flat_scales.reshape(grid_moved)
        return np.transpose(g, np.argsort(rest + list(axes)))

    return blocks, restore, grid


# --------------------------------------------------------------------------- scale rules
def _scale_exponents(amax: np.ndarray, fmt: BlockFormat, rule: str) -> np.ndarray:
    """The unclamped shared exponent E of each block (finite, nonzero amax) per ``rule``."""
    mant, ex = np.frexp(amax)                            # amax = M 2^(L - 52), M the 53-bit significand
    L = ex.astype(np.int64) - 1
    if rule == "floor":
        return L - fmt.emax_elem
    M = np.ldexp(mant, 53).astype(np.int64)
    if rule == "ceil":
        return L + (M != (1 << 52)) - fmt.emax_elem
    if rule == "even":                                   # half-up to the element's mantissa width
        s = 52 - fmt.elem_man_bits
        n = (M + (np.int64(1) << (s - 1))) >> s
        return L + (n >> (fmt.elem_man_bits + 1)) - fmt.emax_elem
    # rceil: ceil(log2(amax / elem_max)) with elem_max = P * 2^ep, P odd
    P, ep = _odd_part(fmt.elem_max)
    c = 52 - (P.bit_length() - 1)                       # M / P in [2^(c-1), 2^(c+1))
    fl = np.where((np.int64(P) << c) <= M, c, c - 1)    # floor(log2(M / P))
    exact = (np.int64(P) << fl) == M
    return fl + (~exact) + (L - 52) - ep


def _odd_part(v: float):
    m, e = np.frexp(v)
    n, e = int(np.ldexp(m, 53)), int(e) - 53
    while n % 2 == 0:
        n, e = n // 2, e + 1
    return n, e


def _rto_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Round-to-odd of |a| / b with >= 34 significant bits, as float64 (a finite, b > 0 with a
    significand of at most 28 bits); zero for a = 0."""
    _, _, _, za, _, Ma, La = _split(np.abs(a))
    _, _, _, _, _, Mb, Lb = _split(b)
    if np.any(Mb & ((1 << 25) - 1)):
        raise AssertionError("divisor significand wider than 28 bits")
    Mb = Mb >> 25
    num = Ma << 10
    q, r = np.divmod(num, Mb)
    q = q | (r != 0)
    ex = La - Lb - 35
    y = np.ldexp(q.astype(np.float64), np.maximum(ex, -1000).astype(np.int32))
    y = np.where(ex < -1000, 2.0 ** -1000, y)           # far below every element: inexact, nonzero
    return np.where(za, 0.0, y)


def _round_float32_exact(value: float) -> float:
    """float32(value) for a float64 that is a round-to-odd image (float32 + 2 bits is enough)."""
    code, *_ = _encode_flat(np.array([value]), FloatFormat.parse("float32"), "half_even", "saturate",
                            False, False, 0.0, None)
    return float(decode(code.astype(np.uint32), "float32")[0])


# --------------------------------------------------------------------------- quantize
def quantize_block(x, fmt="mxfp8_e4m3", axis=None, scale_rule=None, rounding="half_even", *,
                   scale=None, tensor_scale=None, seed=None) -> BlockArray:
    """Block-quantize ``x`` (module docstring): element codes, scale codes, counts.

    Parameters
    ----------
    x : array_like of float64 / float32 / float16
    fmt : str or BlockFormat
        ``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e2m3``, ``mxfp6_e3m2``, ``mxfp4``, ``mxint8``, ``nvfp4``.
    axis : int or (int, int), optional
        Overrides ``fmt.axis``.
    scale_rule : {"floor", "ceil", "even", "rceil", "amax"}, optional
        Power-of-two (E8M0) scales: ``floor`` (OCP, default) .. ``rceil``; other scale formats
        use ``amax`` (the scale is amax / elem_max, rounded once to the scale format).
    rounding : str
        Element rounding (see :func:`~fxpsim.core.float_codec.encode`); the elements saturate.
    scale : array_like, optional
        Caller-supplied scale *values* (the grid shape); each must be a value of the scale format.
    tensor_scale : float, optional
        NVFP4's per-tensor scale (a positive float32 value); default amax / (6 * 448).
    seed : int, optional
        For ``rounding="stochastic"``.
    """
    fmt = BlockFormat.parse(fmt)
    if axis is not None:
        fmt = BlockFormat(fmt.element, fmt.block_size, fmt.scale_format, axis, fmt.tensor_scale, fmt.name)
    rnd = parse_float_rounding(rounding)
    rule = scale_rule if scale_rule is not None else ("floor" if fmt.power_of_two_scale else "amax")
    if rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {', '.join(SCALE_RULES)}, got {scale_rule!r}")
    if (rule == "amax") == fmt.power_of_two_scale:
        raise ValueError(f"scale_rule {rule!r} does not apply to {fmt.scale_format} scales "
                         f"(floor/ceil/even/rceil: E8M0; amax: other scale formats)")
    in_dtype = np.asarray(x).dtype
    f32 = _float32_kernel_applies(fmt, rnd, in_dtype, scale)
    xs = np.asarray(x, dtype=np.float32) if f32 else _float64_input(x, "quantize_block")[0]
    if xs.ndim == 0:
        raise ValueError("quantize_block needs an array of at least one dimension")
    blocks, restore, grid = _to_blocks(xs, fmt)
    nb, k = blocks.shape
    if f32:
        blocks = np.ascontiguousarray(blocks)
        amax_bits = np.empty(nb, np.uint32)
        _kernel.block_abs_max_f32(blocks.view(np.uint32), amax_bits)
        amax = amax_bits.view(np.float32).astype(np.float64)
    else:
        amax = np.maximum(np.max(blocks, axis=1, initial=0.0),      # NaN / Inf inside a block propagate
                          -np.min(blocks, axis=1, initial=0.0))         # (two reductions, no |x| temporary)
    bad = ~np.isfinite(amax)
    amax = np.where(bad, 0.0, amax)
    sf = fmt.scale_format
    T = None
    if fmt.tensor_scale:
        T = _tensor_scale(amax, fmt, tensor_scale)
    if scale is not None:
        sv = np.broadcast_to(np.asarray(scale, dtype=np.float64), grid(np.zeros(nb)).shape)
        sv = np.ascontiguousarray(grid_inverse(sv, grid, nb))
        scodes, *_ = _encode_flat(sv, sf, "half_even", "saturate", False, False, 0.0, None)
        if not np.array_equal(decode(scodes.astype(sf.dtype), sf), sv) or np.any(sv <= 0):
            raise ValueError(f"scale: every value must be a positive value of {sf}")
    elif fmt.power_of_two_scale:
        E = _scale_exponents(np.where(amax > 0, amax, 1.0), fmt, rule)
        E = np.where(amax > 0, E, -sf.bias)
        over = E > (254 - sf.bias)
        scodes = np.where(over, sf.nan_code, np.clip(E, -sf.bias, None) + sf.bias)
        bad = bad | over
    else:
        target = _rto_divide(amax, np.full(nb, fmt.elem_max * T))       # amax / (elem_max * T)
        scodes, *_ = _encode_flat(target, sf, "half_even", "saturate", False, False, 0.0, None)
    scodes = np.where(bad, sf.nan_code, scodes)
    svals = decode(scodes.astype(sf.dtype), sf)
    # elements
    flat = blocks.reshape(-1)
    rand = None
    if rnd == "stochastic":
        rand = (random_stream(seed, flat.size, 30), 30)
    if fmt.power_of_two_scale and T is None:
        # scale = 2^E exactly: E per block (from the value, so caller-given scales work too)
        Eb = np.frexp(np.where(bad, 1.0, svals))[1].astype(np.int64) - 1
        if f32:
            codes, clamped = _elements_float32(blocks, Eb, bad, fmt.element, rnd)
            return BlockArray(np.ascontiguousarray(restore(codes)),
                              np.ascontiguousarray(grid(scodes.astype(sf.dtype))), fmt, None, clamped,
                              int(bad.sum()))
        src = blocks if not bad.any() else np.where(bad[:, None], 0.0, blocks)
        # x 2^-E is exact in float64 unless it underflows there: always for float16/float32 inputs (>= 2^-149,
        # scales <= 2^127), checked for float64 ones; then the elements encode on the kernel's fast path
        exact_ldexp = in_dtype in (np.float16, np.float32) or bool(np.all((src == 0) | (np.abs(src) >= 2.0 ** -800)))
        if exact_ldexp and isinstance(fmt.element, FloatFormat):
            codes, clamped = _elements((src * np.exp2(-Eb.astype(np.float64))[:, None]).reshape(-1), fmt, rnd,
                                       rand, None, None)
        else:
            codes, clamped = _elements(src.reshape(-1), fmt, rnd, rand, np.repeat(Eb, k), None)
    else:
        per = np.repeat(np.where(bad, 1.0, svals), k)
        div = per * (T if T is not None else 1.0)                        # exact: <= 28 significant bits
        safe = np.where(div > 0, div, 1.0)
        q = np.where(flat < 0, -1.0, 1.0) * _rto_divide(np.where(np.isfinite(flat), flat, 0.0), safe)
        q = np.where(div > 0, q, 0.0)
        codes, clamped = _elements(q, fmt, rnd, rand, None, None)
    if bad.any():
        codes = np.where(np.repeat(bad, k), 0, codes)
    elems = restore(codes.astype(np.uint8))
    return BlockArray(np.ascontiguousarray(elems), np.ascontiguousarray(grid(scodes.astype(sf.dtype))),
                      fmt, T, int(clamped), int(bad.sum()))


def _float32_kernel_applies(fmt: BlockFormat, rnd: str, in_dtype, scale) -> bool:
    """Whether :func:`_elements_float32` serves the call: float32 / float16 input, E8M0 scales from a rule,
    a signed (not ``fnu``) float element of at most 8 bits, deterministic rounding."""
    el = fmt.element
    return (_kernel is not None and in_dtype in (np.float32, np.float16) and scale is None
            and fmt.power_of_two_scale and not fmt.tensor_scale and isinstance(el, FloatFormat)
            and el.bits <= 8 and el.signed and el.encoding != "fnu" and el._min_exponent >= -126
            and rnd != "stochastic")


def _elements_float32(blocks: np.ndarray, E: np.ndarray, bad: np.ndarray, el: FloatFormat, rnd: str):
    """Element codes (uint8, the blocks' shape) of float32 ``blocks * 2^-E`` (a row per block, zero where
    ``bad``) and the count of clamped elements: the C loop ``_float.encode_blocks_f32``, the same
    rounding as :func:`_elements` on the float64 path (tests/core/test_mx_kernel.py)."""
    out = np.empty(blocks.shape, np.uint8)
    clamped = _kernel.encode_blocks_f32(
        blocks.view(np.uint32), np.ascontiguousarray(E, np.int64), bad.astype(np.uint8), out, el.man_bits, el._min_exponent,
        not el.subnormals, el.max_mag_code, el.inf_code or 0, el.nan_code or 0, el.sign_bit, el.has_neg_zero,
        el.encoding in ("ieee", "fn"), el.has_nan, el.has_zero, _RND_CODES[rnd])
    return out, int(clamped)


def grid_inverse(sv: np.ndarray, grid, nb: int) -> np.ndarray:
    """The flat block order of a grid-shaped array (inverse of ``grid``)."""
    probe = grid(np.arange(nb))
    out = np.empty(nb)
    out[probe.reshape(-1)] = sv.reshape(-1)
    return out


def _tensor_scale(amax: np.ndarray, fmt: BlockFormat, given) -> float:
    if given is not None:
        t = float(given)
        if not (t > 0 and np.isfinite(t)) or float(np.float32(t)) != t:
            raise ValueError(f"tensor_scale must be a positive float32 value, got {given!r}")
        return t
    top = float(amax.max(initial=0.0))
    if top == 0:
        return 1.0
    q = _rto_divide(np.array([top]), np.array([fmt.elem_max * fmt.scale_format.max_finite]))
    return _round_float32_exact(float(q[0]))


def _elements(vals, fmt: BlockFormat, rnd, rand, E, _):
    """Element codes (int64) of vals * 2^-E (E None: of vals) and the count of clamped elements."""
    el = fmt.element
    v = vals if np.isfinite(vals).all() else np.where(np.isfinite(vals), vals, 0.0)
    if isinstance(el, FloatFormat):
        codes, n_ovf, *_ = _encode_any(v, el, rnd, "saturate", False, False, 0.0, rand, scale_exp=E)
        return codes, n_ovf
    # two's complement integer with el.frac fraction bits: n = round(|v| * 2^(frac - E))
    neg, _, _, zero, nz_fin, M, L = _split(v)
    s = (E if E is not None else 0) - el.frac - (L - 52)
    s = np.maximum(s, -12)                             # |n| >= 2^41: beyond any integer element
    n, _, _ = _round_shifted(M, s, neg, 0, rnd, rand)
    n = np.where(nz_fin, n, 0)
    signed = np.where(neg, -n, n)
    lo, hi = el.min_code, el.max_code
    clamped = int(((signed < lo) | (signed > hi)).sum())
    return np.clip(signed, lo, hi) & ((1 << el.word) - 1), clamped


def dequantize_block(q: BlockArray) -> np.ndarray:
    """The exact float64 values ``element * scale (* tensor_scale)``; NaN for blocks with a NaN scale."""
    fmt = q.format
    sf = fmt.scale_format
    svals = decode(q.scales, sf)
    el = fmt.element
    if isinstance(el, FloatFormat):
        ev = decode(q.elements, el)
    else:
        c = q.elements.astype(np.int64)
        c = np.where(c >= (1 << (el.word - 1)), c - (1 << el.word), c)
        ev = np.ldexp(c.astype(np.float64), -el.frac)
    _, restore, grid = _to_blocks(ev, fmt)
    flat_scale = grid_inverse(svals, grid, svals.size)
    per = restore(np.repeat(flat_scale, int(np.prod(fmt.sizes))))
    out = ev * per
    if q.tensor_scale is not None:
        out = out * q.tensor_scale
    return out

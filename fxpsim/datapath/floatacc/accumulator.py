"""How a float datapath accumulates a dot product: :class:`FloatAccumulator` and its named presets.

Four kinds, each one formula (``a_k``, ``b_k`` exact decoded inputs, ``c`` the accumulator input,
``round_F`` one rounding into format ``F``):

``exact`` (Kulisch)
    :math:`d = \\mathrm{round}_{out}(c + \\sum_k a_k b_k)` -- the sum is an exact integer: an FP8
    product is an integer times a power of two, so the dot product is a fixed-point integer sum
    (U. Kulisch, *Computer Arithmetic and Validity*, 2013).  The reference every other kind is
    measured against.
``per_add`` (a scalar or SIMD FPU, IEEE 754 §5.4)
    :math:`s_0 = c,\\; s_k = \\mathrm{round}_{acc}(s_{k-1} + p_k)` with
    :math:`p_k = a_k b_k` (``fma=True``, one rounding per step) or
    :math:`p_k = \\mathrm{round}_{acc}(a_k b_k)` (product then add), sequential order.
``fused`` (a tensor core's fused dot, MMA-Sim ``fused_dot_add``; Xie et al., arXiv 2511.10909)
    per chunk of ``chunk`` elements, with :math:`a_k = A_k 2^{E_{a_k} - m_a}` (:mod:`.operands`):
    :math:`E_{max} = \\max(\\max_k (E_{a_k} + E_{b_k}), E_c)`,
    :math:`d = \\mathrm{round}_{out}\\big(2^{E_{max} - F} \\cdot
    [\\mathrm{align}(C 2^{F - m_c + E_c - E_{max}}) + \\sum_k \\mathrm{align}(A_k B_k
    2^{F - m_a - m_b + E_{a_k} + E_{b_k} - E_{max}})]\\big)` with ``F = fraction_bits`` and
    ``align`` truncation toward zero (NVIDIA), floor or ties-to-even; the chunk's ``d`` is the
    next chunk's ``c``.  Block scales (MX ``mxf8f6f4``) multiply each product and add their
    exponents to :math:`E_{a_k} + E_{b_k}`.  ``promote_every=N``: every N elements the partial
    sum is added to a float32 accumulator with one RNE rounding and restarts at +0 (DeepSeek-V3,
    arXiv 2412.19437 §3.3.2: FP8 GEMM on H800 promoted every 128 elements).
``block`` (Blackwell ``mxf4nvf4``, MMA-Sim ``nv_fused_dot_add_with_block_scale``)
    per group of ``group`` elements the products are summed exactly, :math:`G_g = \\sum a_k b_k`;
    the group value :math:`G_g s_{a,g} s_{b,g}` is aligned by the scales' exponents alone,
    :math:`E_g = E_{s_a} + E_{s_b}`, then as ``fused`` with ``F = fraction_bits`` (35 on
    Blackwell).

``fused_rd`` (AMD CDNA3 ``v_mfma``, MMA-Sim ``amd_fused_dot_rd_add``)
    per group: products truncated to ``fraction_bits`` (24) below the products' largest exponent
    (fp8: even and odd k apart, ``even_odd``), the sum then floored to ``sum_bits`` (31) and C to
    ``c_fraction_bits`` (24) below the larger of that exponent and C's, one RNE rounding into
    float32 (formula in :mod:`.amd`).

Counts reported by :func:`~.matmul.float_matmul`: overflows (finite sums that became ±Inf or
saturated), NaNs made, underflows to zero, and terms whose alignment dropped nonzero bits.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from ...core.float_format import FloatFormat
from .operands import as_format
from .rounding import OVERFLOWS, parse_output_rounding

__all__ = ["FloatAccumulator", "KINDS", "ALIGNS"]

KINDS = ("exact", "per_add", "fused", "block", "fused_rd")
ALIGNS = ("truncate", "floor", "half_even")
_ALIGN_ALIASES = {"truncate": "truncate", "toward_zero": "truncate", "trunc": "truncate", "rz": "truncate",
                  "floor": "floor", "rd": "floor", "half_even": "half_even", "rne": "half_even",
                  "round": "half_even", "nearest": "half_even"}


def _posint(value, what: str, allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"FloatAccumulator.{what} must be a positive int{' or None' if allow_none else ''}, "
                         f"got {value!r}")
    return value


@dataclass(frozen=True)
class FloatAccumulator:
    """A float accumulator (see the module docstring for each ``kind``'s formula).

    Parameters
    ----------
    kind : {"exact", "per_add", "fused", "block", "fused_rd"}
    output : FloatFormat or str
        Format of ``c`` and of the result codes (``float32``, ``float16``, ``bfloat16``, ...);
        for ``per_add`` it is also the accumulator format.
    output_man_bits : int, optional
        Round to this many fraction bits but store in ``output`` (Hopper FP8 ``f32_e8m13``: 13).
    output_rounding : str
        Rounding into the output (``toward_zero``, ``half_even``, ``half_away``, ``floor``,
        ``ceil``); default ``half_even`` except ``toward_zero`` for fused/block (NVIDIA f32).
    overflow : {"ieee", "inf", "saturate"}
        See :func:`~.rounding.round_scaled`; default ``inf`` for fused/block, ``ieee`` otherwise.
    chunk : int, optional
        Elements per fused dot (the instruction's K; Ampere's split-k halves it); None: all of K.
    fraction_bits : int
        Fraction bits kept by the alignment (fused/block); 13 = Hopper FP8.
    align : {"truncate", "floor", "half_even"}
    zero_exponent : int, optional
        Exponent a zero operand brings to the max-exponent unit (MMA-Sim: -126); None: zeros
        never set the maximum.
    promote_every : int, optional
        Promote the partial sum to a float32 accumulator every N elements (a multiple of
        ``chunk``); None: never.
    fma : bool
        ``per_add``: fused multiply-add (True) or rounded product then add.
    group : int
        ``block``: elements summed exactly per group (16 on Blackwell).
    block : int, optional
        Elements per block scale, when scales are given.
    nan_code : int, optional
        The NaN code produced (default: all magnitude bits set, NVIDIA's 0x7FFFFFFF / 0x7FFF).
    even_odd, sum_bits, c_fraction_bits :
        ``fused_rd`` (AMD CDNA3, :mod:`.amd`): even and odd products summed apart (fp8), the
        fraction bits of the second-stage (floor) alignment of the sum (31) and of C (24).
    name : str, optional
        The preset name (not part of equality).
    """

    kind: str = "fused"
    output: FloatFormat | str = "float32"
    output_man_bits: int | None = None
    output_rounding: str | None = None
    overflow: str | None = None
    chunk: int | None = None
    fraction_bits: int = 25
    align: str = "truncate"
    zero_exponent: int | None = None
    promote_every: int | None = None
    fma: bool = True
    group: int = 16
    block: int | None = None
    nan_code: int | None = None
    even_odd: bool = False
    sum_bits: int = 31
    c_fraction_bits: int = 24
    name: str | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"FloatAccumulator.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        out = as_format(self.output, "FloatAccumulator.output")
        if out.encoding not in ("ieee", "fn"):
            raise ValueError(f"FloatAccumulator.output must be an IEEE-style or fn format, got {out}")
        object.__setattr__(self, "output", out)
        if self.output_man_bits is not None:
            _posint(self.output_man_bits, "output_man_bits")
            if self.output_man_bits > out.man_bits:
                raise ValueError(f"FloatAccumulator.output_man_bits={self.output_man_bits} exceeds "
                                 f"{out}'s {out.man_bits} mantissa bits")
        fused = self.kind in ("fused", "block", "fused_rd")
        rnd = self.output_rounding or ("toward_zero" if fused else "half_even")
        object.__setattr__(self, "output_rounding", parse_output_rounding(rnd, "FloatAccumulator.output_rounding"))
        ovf = self.overflow or ("inf" if fused else "ieee")
        if ovf not in OVERFLOWS:
            raise ValueError(f"FloatAccumulator.overflow must be one of {', '.join(OVERFLOWS)}, got {ovf!r}")
        object.__setattr__(self, "overflow", ovf)
        _posint(self.chunk, "chunk")
        _posint(self.fraction_bits, "fraction_bits", allow_none=False)
        if self.fraction_bits > 40:
            raise ValueError(f"FloatAccumulator.fraction_bits must be <= 40 (int64 sums), got {self.fraction_bits}")
        al = _ALIGN_ALIASES.get(str(self.align).lower()) if isinstance(self.align, str) else None
        if al is None:
            raise ValueError(f"FloatAccumulator.align must be one of {', '.join(ALIGNS)}, got {self.align!r}")
        object.__setattr__(self, "align", al)
        if self.zero_exponent is not None and (isinstance(self.zero_exponent, bool)
                                               or not isinstance(self.zero_exponent, int)):
            raise TypeError(f"FloatAccumulator.zero_exponent must be an int or None, got {self.zero_exponent!r}")
        _posint(self.promote_every, "promote_every")
        _posint(self.sum_bits, "sum_bits", allow_none=False)
        _posint(self.c_fraction_bits, "c_fraction_bits", allow_none=False)
        if not isinstance(self.even_odd, bool):
            raise TypeError(f"FloatAccumulator.even_odd must be a bool, got {self.even_odd!r}")
        if self.kind == "fused_rd" and not (self.fraction_bits <= self.sum_bits <= 40
                                            and self.c_fraction_bits <= self.sum_bits):
            raise ValueError(f"FloatAccumulator: kind 'fused_rd' needs fraction_bits <= sum_bits <= 40 and "
                             f"c_fraction_bits <= sum_bits, got {self.fraction_bits}, {self.sum_bits}, "
                             f"{self.c_fraction_bits}")
        if self.promote_every is not None:
            if not fused:
                raise ValueError("FloatAccumulator.promote_every applies to kind 'fused' or 'block' only")
            if out != FloatFormat.parse("float32"):
                raise ValueError(f"FloatAccumulator.promote_every promotes to float32: output must be "
                                 f"float32, got {out}")
            if self.chunk is None or self.promote_every % self.chunk:
                raise ValueError(f"FloatAccumulator.promote_every={self.promote_every} must be a multiple "
                                 f"of chunk={self.chunk}")
        if not isinstance(self.fma, bool):
            raise TypeError(f"FloatAccumulator.fma must be a bool, got {self.fma!r}")
        _posint(self.group, "group", allow_none=False)
        _posint(self.block, "block")
        if self.kind == "block":
            if self.chunk is not None and self.chunk % self.group:
                raise ValueError(f"FloatAccumulator.chunk={self.chunk} must be a multiple of group={self.group}")
            if self.block is not None and self.block % self.group and self.group % self.block:
                raise ValueError(f"FloatAccumulator.block={self.block} and group={self.group} must nest")
        if self.nan_code is not None and not (0 <= self.nan_code < (1 << out.bits)):
            raise ValueError(f"FloatAccumulator.nan_code must be a code of {out}, got {self.nan_code!r}")
        self._check_unused()

    def _check_unused(self):
        """No setting silently ignored: a field that this kind does not read must keep its default."""
        used = {"exact": {"output", "output_man_bits", "output_rounding", "overflow", "nan_code"},
                "per_add": {"output", "output_rounding", "overflow", "fma", "nan_code"},
                "fused": {"output", "output_man_bits", "output_rounding", "overflow", "chunk",
                          "fraction_bits", "align", "zero_exponent", "promote_every", "block", "nan_code"},
                "fused_rd": {"output", "output_rounding", "overflow", "chunk", "fraction_bits",
                             "zero_exponent", "even_odd", "sum_bits", "c_fraction_bits", "nan_code"},
                "block": {"output", "output_man_bits", "output_rounding", "overflow", "chunk",
                          "fraction_bits", "align", "zero_exponent", "promote_every", "group", "block",
                          "nan_code"}}[self.kind]
        defaults = {f.name: f.default for f in fields(self)}
        for f in fields(self):
            if f.name in used or f.name in ("kind", "name"):
                continue
            if getattr(self, f.name) != defaults[f.name]:
                raise ValueError(f"FloatAccumulator.{f.name}={getattr(self, f.name)!r} has no effect on "
                                 f"kind {self.kind!r} (it reads: {', '.join(sorted(used))})")

    @property
    def precision(self) -> FloatFormat:
        """The format the result is rounded to (``output`` with ``output_man_bits``)."""
        out = self.output
        if self.output_man_bits is None or self.output_man_bits == out.man_bits:
            return out
        return FloatFormat(out.exp_bits, self.output_man_bits, out.bias, out.signed, out.encoding,
                           out.subnormals)

    @property
    def nan(self) -> int:
        out = self.output
        return ((1 << out.mag_bits) - 1) if self.nan_code is None else self.nan_code

    @classmethod
    def preset(cls, name: str) -> "FloatAccumulator":
        """A named instruction or datapath (:meth:`presets` lists them)."""
        from .presets import PRESETS
        if not isinstance(name, str):
            raise TypeError(f"FloatAccumulator.preset expects a name, got {type(name).__name__}")
        key = name.strip().lower()
        if key not in PRESETS:
            raise ValueError(f"unknown FloatAccumulator preset {name!r}; known: {', '.join(PRESETS)}")
        return cls(**PRESETS[key][0], name=key)

    @classmethod
    def presets(cls) -> dict:
        """``{name: one-line description}`` of every preset."""
        from .presets import PRESETS
        return {k: v[1] for k, v in PRESETS.items()}

    def replace(self, **changes) -> "FloatAccumulator":
        return replace(self, **changes)

"""Independent pure-Python reference model of fxpsim's fixed-point arithmetic.

Test-only code: no production module imports it.  Everything here works one
element at a time on exact Python integers and :class:`fractions.Fraction`,
favouring clarity over speed, so that it can serve as an oracle for the Cython
core (``fxpsim.core.fixed`` / ``fxpsim.core._core``) and for the datapath kernels.

Conventions
-----------
A *format* is ``(word, frac, signed)``: ``word`` bits, least significant bit
worth :math:`2^{-\\mathrm{frac}}`, two's complement when ``signed``.  A *code*
is the integer :math:`c` with value :math:`c \\cdot 2^{-\\mathrm{frac}}`; it
lies in ``[-2**(word-1), 2**(word-1) - 1]`` (signed) or ``[0, 2**word - 1]``
(unsigned).  Any object with ``word``, ``frac`` and ``signed`` attributes (for
example ``fxpsim.core.fixed.Format``) or a 3-tuple is accepted as a format.

Converting an exact value to a format happens in two steps, exactly as in
SystemC's ``sc_fix`` (quantization first, then overflow, both decided on exact
values):

1. :func:`round_fraction` rounds :math:`x \\cdot 2^{\\mathrm{frac}}` to an integer;
2. :func:`overflow_int` fits that integer into ``word`` bits.

The overflow modes follow SystemC 2.3.4 (``sc_fxnum.cpp``/``scfx_rep.cpp``) and
are checked against every record of ``shared/vectors/systemc_quantize.npz`` by
``tests/test_reference.py``.

Infinities
----------
SystemC rejects ``inf``.  Here ``+inf`` / ``-inf`` is defined as
:math:`\\pm 2^K` for an arbitrarily large ``K`` (a value beyond every range and a
multiple of every power of two that matters).  Consequently: the saturating
modes give the limit, ``saturate_zero`` gives 0, ``wrap`` gives 0 (or, with
``n_bits > 0``, the saturated upper bits over all-zero lower bits), and
``wrap_sign_magnitude`` gives 0 for ``+inf`` and for ``-inf`` with
``n_bits = 0``; with ``n_bits >= 1`` ``-inf`` gives ``-1`` (SystemC's
conditional inversion of ``-2^K``), or with ``n_bits >= 2`` that pattern under
the saturated sign bits.  Overflow is always flagged.  NaN raises ``ValueError``.
"""
from __future__ import annotations

import math
from collections import namedtuple
from fractions import Fraction

__all__ = [
    "ROUNDING_MODES", "DETERMINISTIC_ROUNDING_MODES", "OVERFLOW_MODES", "SC_Q_MODES", "SC_O_MODES",
    "RefFormat", "as_format", "code_range", "to_fraction",
    "round_fraction", "overflow_int", "ref_max_pool", "quantize_exact", "from_float", "cast",
    "add", "sub", "mul", "neg", "abs_", "sum_", "sum_format",
    "add_format", "sub_format", "mul_format", "neg_format", "abs_format",
    "accumulate", "accumulate_tree",
]

DETERMINISTIC_ROUNDING_MODES = (
    "half_up", "half_toward_zero", "half_down", "half_away", "half_even", "floor", "toward_zero", "ceil",
)
ROUNDING_MODES = DETERMINISTIC_ROUNDING_MODES + ("stochastic",)
OVERFLOW_MODES = ("saturate", "saturate_zero", "saturate_symmetric", "wrap", "wrap_sign_magnitude", "error")

#: SystemC quantization enum number -> rounding mode name (SC_RND, SC_RND_ZERO, ...).
SC_Q_MODES = ("half_up", "half_toward_zero", "half_down", "half_away", "half_even", "floor", "toward_zero")
#: SystemC overflow enum number -> overflow mode name (SC_SAT, SC_SAT_ZERO, SC_SAT_SYM, SC_WRAP, SC_WRAP_SM).
SC_O_MODES = ("saturate", "saturate_zero", "saturate_symmetric", "wrap", "wrap_sign_magnitude")

RefFormat = namedtuple("RefFormat", ["word", "frac", "signed"])

#: Exponent standing in for an infinite value (far above any 64-bit word + n_bits).
_INF_EXPONENT = 1 << 12


def as_format(fmt) -> RefFormat:
    """Return ``fmt`` (a 3-tuple or an object with word/frac/signed) as a :class:`RefFormat`."""
    if isinstance(fmt, tuple):
        word, frac, signed = fmt
    else:
        word, frac, signed = fmt.word, fmt.frac, fmt.signed
    return RefFormat(int(word), int(frac), bool(signed))


def code_range(word: int, signed: bool) -> tuple[int, int]:
    """Smallest and largest code of a ``word``-bit format."""
    if signed:
        return -(1 << (word - 1)), (1 << (word - 1)) - 1
    return 0, (1 << word) - 1


def to_fraction(code: int, frac: int) -> Fraction:
    """Exact value :math:`c \\cdot 2^{-\\mathrm{frac}}` of a code."""
    return Fraction(code) * Fraction(2) ** (-frac)


# --------------------------------------------------------------------------- rounding
def round_fraction(q: Fraction, mode: str, u: Fraction | float | None = None) -> int:
    """Round the exact rational ``q`` to an integer.

    ``half_*`` modes round to nearest and differ only on ties
    (:math:`q - \\lfloor q \\rfloor = 1/2`): ``half_up`` -> :math:`+\\infty`
    (SC_RND), ``half_down`` -> :math:`-\\infty` (SC_RND_MIN_INF),
    ``half_toward_zero`` (SC_RND_ZERO), ``half_away`` (SC_RND_INF), ``half_even``
    (SC_RND_CONV).  ``floor`` (SC_TRN), ``toward_zero`` (SC_TRN_ZERO), ``ceil``.
    ``stochastic`` needs ``u`` in [0, 1) and rounds up iff
    :math:`u < q - \\lfloor q \\rfloor`.
    """
    q = Fraction(q)
    fl = q.numerator // q.denominator          # floor, exact for negatives too
    rest = q - fl                              # in [0, 1)
    if rest == 0:
        return fl
    half = Fraction(1, 2)
    if mode == "floor":
        return fl
    if mode == "ceil":
        return fl + 1
    if mode == "toward_zero":
        return fl + 1 if q < 0 else fl
    if mode == "stochastic":
        if u is None:
            raise ValueError("stochastic rounding needs u in [0, 1)")
        u = Fraction(u)
        if not 0 <= u < 1:
            raise ValueError(f"u must be in [0, 1), got {u}")
        return fl + 1 if u < rest else fl
    if mode not in DETERMINISTIC_ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {mode!r}")
    if rest != half:
        return fl + 1 if rest > half else fl
    if mode == "half_up":
        return fl + 1
    if mode == "half_down":
        return fl
    if mode == "half_even":
        return fl + (fl & 1)
    if mode == "half_away":
        return fl + 1 if q > 0 else fl
    return fl + 1 if q < 0 else fl            # half_toward_zero


# --------------------------------------------------------------------------- overflow
def _bit(v: int, k: int) -> int:
    """Bit ``k`` of ``v`` in infinite two's complement (0 <= k)."""
    return (v >> k) & 1


def _wrap_twos(v: int, word: int, signed: bool) -> int:
    """Keep the low ``word`` bits of ``v`` and read them in the format's encoding."""
    m = v & ((1 << word) - 1)
    if signed and m >> (word - 1):
        m -= 1 << word
    return m


def overflow_int(v: int, word: int, signed: bool, mode: str, n_bits: int = 0) -> tuple[int, bool]:
    """Fit the exact integer ``v`` into a ``word``-bit code; return ``(code, overflowed)``.

    With ``lo, hi`` the code range (``saturate_symmetric`` on a signed format
    uses ``lo = -hi``, so ``v == -2**(word-1)`` overflows), ``v`` overflows iff
    ``v < lo`` (*under*) or ``v > hi`` (*over*).  Then:

    * ``saturate`` / ``saturate_symmetric``: ``lo`` if under else ``hi``;
      ``error`` raises :class:`OverflowError`;
    * ``saturate_zero``: 0;
    * ``wrap`` (SC_WRAP), :math:`X = 2^{W-n}`: ``n == 0``: :math:`v \\bmod 2^W` read
      in the encoding; ``0 < n < W``: :math:`(v \\bmod X) + (lo` if under else
      :math:`2^{W-1} - X` (signed) / :math:`2^W - X` (unsigned)); ``n >= W``: saturate;
    * ``wrap_sign_magnitude`` (SC_WRAP_SM, signed only): ``n == 0``: if bit W of v
      differs from bit W-1, :math:`v \\leftarrow -v-1`, then wrap to W bits;
      ``n == 1``: same with the sign of v in place of bit W; ``2 <= n < W``: if
      the sign of v equals bit W-n, :math:`v \\leftarrow -v-1`, then
      :math:`(v \\bmod X) + (-2^{W-1}` if under else :math:`2^{W-1}-X)`;
      ``n >= W``: saturate.
    """
    if not 1 <= word:
        raise ValueError(f"word must be >= 1, got {word}")
    if mode not in OVERFLOW_MODES:
        raise ValueError(f"unknown overflow mode {mode!r}")
    if mode == "wrap_sign_magnitude" and not signed:
        raise ValueError("wrap_sign_magnitude is defined for signed formats only")
    if n_bits < 0:
        raise ValueError(f"n_bits must be >= 0, got {n_bits}")
    lo, hi = code_range(word, signed)
    if mode == "saturate_symmetric" and signed:
        lo = -hi
    under, over = v < lo, v > hi
    if not (under or over):
        return v, False
    if mode == "error":
        raise OverflowError(f"{v} does not fit a {word}-bit {'signed' if signed else 'unsigned'} code")
    if mode in ("saturate", "saturate_symmetric"):
        return (lo if under else hi), True
    if mode == "saturate_zero":
        return 0, True
    if n_bits >= word:                                    # every bit saturated
        return (lo if under else hi), True
    if mode == "wrap":
        if n_bits == 0:
            return _wrap_twos(v, word, signed), True
        x = 1 << (word - n_bits)
        top = (1 << (word - 1)) if signed else (1 << word)
        return (v % x) + (lo if under else top - x), True
    # wrap_sign_magnitude (signed)
    if n_bits == 0:
        if _bit(v, word) != _bit(v, word - 1):
            v = ~v
        return _wrap_twos(v, word, True), True
    if n_bits == 1:
        if int(v < 0) != _bit(v, word - 1):
            v = ~v
        return _wrap_twos(v, word, True), True
    if int(v < 0) == _bit(v, word - n_bits):
        v = ~v
    x = 1 << (word - n_bits)
    return (v % x) + (-(1 << (word - 1)) if under else (1 << (word - 1)) - x), True


# --------------------------------------------------------------------------- conversions
def quantize_exact(value: Fraction, word: int, frac: int, signed: bool, rounding: str, overflow: str,
                   n_bits: int = 0, u=None) -> tuple[int, bool]:
    """Code of the exact rational ``value`` in format ``(word, frac, signed)``.

    .. math:: c = \\mathrm{ovf}(\\mathrm{round}(x \\cdot 2^{\\mathrm{frac}}))
    """
    scaled = Fraction(value) * Fraction(2) ** frac
    return overflow_int(round_fraction(scaled, rounding, u), word, signed, overflow, n_bits)


def from_float(x: float, word: int, frac: int, signed: bool, rounding: str, overflow: str,
               n_bits: int = 0, u=None) -> tuple[int, bool]:
    """Exact float -> code conversion; ``±inf`` is :math:`\\pm 2^K` (see module doc), NaN raises."""
    x = float(x)
    if math.isnan(x):
        raise ValueError("NaN has no fixed-point code")
    if math.isinf(x):
        big = 1 << _INF_EXPONENT
        return overflow_int(big if x > 0 else -big, word, signed, overflow, n_bits)
    return quantize_exact(Fraction(x), word, frac, signed, rounding, overflow, n_bits, u)


def cast(code: int, src_word: int, src_frac: int, src_signed: bool, dst_word: int, dst_frac: int,
         dst_signed: bool, rounding: str, overflow: str, n_bits: int = 0, u=None) -> tuple[int, bool]:
    """Requantize a code from one format to another (exact rounding, then overflow)."""
    lo, hi = code_range(src_word, src_signed)
    if not lo <= code <= hi:
        raise ValueError(f"code {code} does not fit the source format")
    return quantize_exact(to_fraction(code, src_frac), dst_word, dst_frac, dst_signed, rounding, overflow,
                          n_bits, u)


# --------------------------------------------------------------------------- exact arithmetic
def _int_bits_as(fmt: RefFormat, signed: bool) -> int:
    """Integer bits (sign included) ``fmt`` needs when expressed with signedness ``signed``."""
    bits = fmt.word - fmt.frac
    return bits + 1 if signed and not fmt.signed else bits


def _grown_sum_format(fa: RefFormat, fb: RefFormat, signed: bool) -> RefFormat:
    frac = max(fa.frac, fb.frac)
    int_bits = max(_int_bits_as(fa, signed), _int_bits_as(fb, signed)) + 1
    return RefFormat(int_bits + frac, frac, signed)


def add_format(fmt_a, fmt_b) -> RefFormat:
    """Format of an exact sum: frac = max, int bits = max (in result signedness) + 1."""
    fa, fb = as_format(fmt_a), as_format(fmt_b)
    return _grown_sum_format(fa, fb, fa.signed or fb.signed)


def sub_format(fmt_a, fmt_b) -> RefFormat:
    """Format of an exact difference: like :func:`add_format` but always signed."""
    return _grown_sum_format(as_format(fmt_a), as_format(fmt_b), True)


def mul_format(fmt_a, fmt_b) -> RefFormat:
    """Format of an exact product: words and fraction bits add, signed if either is."""
    fa, fb = as_format(fmt_a), as_format(fmt_b)
    return RefFormat(fa.word + fb.word, fa.frac + fb.frac, fa.signed or fb.signed)


def neg_format(fmt) -> RefFormat:
    """Format of an exact negation: signed, one more bit."""
    f = as_format(fmt)
    return RefFormat(f.word + 1, f.frac, True)


def abs_format(fmt) -> RefFormat:
    """Format of an exact absolute value: one more bit for signed input, unchanged for unsigned."""
    f = as_format(fmt)
    return RefFormat(f.word + 1, f.frac, True) if f.signed else f


def sum_format(fmt, n: int) -> RefFormat:
    """Format of an exact sum of ``n`` elements: :math:`W + \\lceil \\log_2 n \\rceil`."""
    f = as_format(fmt)
    grow = (n - 1).bit_length() if n > 1 else 0           # == ceil(log2(n)) exactly
    return RefFormat(f.word + grow, f.frac, f.signed)


def _checked(code: int, fmt: RefFormat) -> tuple[int, RefFormat]:
    lo, hi = code_range(fmt.word, fmt.signed)
    if not lo <= code <= hi:                               # a growth rule that does not hold its results
        raise AssertionError(f"exact result {code} does not fit the grown format {fmt}")
    return code, fmt


def _aligned(code: int, frac: int, to_frac: int) -> int:
    return code << (to_frac - frac)


def add(code_a: int, fmt_a, code_b: int, fmt_b) -> tuple[int, RefFormat]:
    """Exact sum ``(code, format)`` of two codes."""
    fmt = add_format(fmt_a, fmt_b)
    fa, fb = as_format(fmt_a), as_format(fmt_b)
    return _checked(_aligned(code_a, fa.frac, fmt.frac) + _aligned(code_b, fb.frac, fmt.frac), fmt)


def sub(code_a: int, fmt_a, code_b: int, fmt_b) -> tuple[int, RefFormat]:
    """Exact difference ``(code, format)`` of two codes."""
    fmt = sub_format(fmt_a, fmt_b)
    fa, fb = as_format(fmt_a), as_format(fmt_b)
    return _checked(_aligned(code_a, fa.frac, fmt.frac) - _aligned(code_b, fb.frac, fmt.frac), fmt)


def mul(code_a: int, fmt_a, code_b: int, fmt_b) -> tuple[int, RefFormat]:
    """Exact product ``(code, format)`` of two codes."""
    return _checked(code_a * code_b, mul_format(fmt_a, fmt_b))


def neg(code: int, fmt) -> tuple[int, RefFormat]:
    """Exact negation."""
    return _checked(-code, neg_format(fmt))


def abs_(code: int, fmt) -> tuple[int, RefFormat]:
    """Exact absolute value."""
    return _checked(abs(code), abs_format(fmt))


def sum_(codes, fmt) -> tuple[int, RefFormat]:
    """Exact sum of the codes of one format."""
    codes = list(codes)
    return _checked(sum(codes), sum_format(fmt, len(codes)))


# --------------------------------------------------------------------------- accumulators
def _check_init(init: int, acc_word: int, acc_signed: bool) -> None:
    lo, hi = code_range(acc_word, acc_signed)
    if not lo <= init <= hi:
        raise ValueError(f"init {init} does not fit the accumulator format")


def accumulate(products, init: int, acc_word: int, acc_signed: bool, overflow: str,
               n_bits: int = 0) -> tuple[int, int, list[int]]:
    """Sequential multiply-accumulate register with overflow handling after every add.

    .. math:: a_0 = \\mathrm{init},\\quad a_{k+1} = \\mathrm{ovf}(a_k + p_k)

    Products are exact integers in the accumulator's LSB units.  Returns
    ``(final code, number of adds that overflowed, [a_1, ..., a_K])``.
    """
    _check_init(init, acc_word, acc_signed)
    acc, n_overflow, trace = init, 0, []
    for p in products:
        acc, ovf = overflow_int(acc + int(p), acc_word, acc_signed, overflow, n_bits)
        n_overflow += ovf
        trace.append(acc)
    return acc, n_overflow, trace


def accumulate_tree(products, init: int, acc_word: int, acc_signed: bool, overflow: str,
                    n_bits: int = 0) -> tuple[int, int, list[list[int]]]:
    """Balanced pairwise adder tree with overflow handling at every adder.

    Tree shape (what a datapath kernel must reproduce): level 0 is the list of
    products, unchanged.  Each next level pairs neighbours ``(0, 1), (2, 3), ...``
    of the previous one; every pair's sum goes through the accumulator's
    overflow mode; an odd last element is passed up unchanged (no add, no
    overflow check).  This repeats until one element ``r`` is left (for no
    products, ``r = 0``).  Finally ``init`` is added last through one more
    overflow-checked add: ``ovf(r + init)``.

    Returns ``(final code, number of adds that overflowed, levels)`` where
    ``levels[0]`` are the products, ``levels[-1]`` is ``[r]`` and the final
    code is the root after adding ``init``.
    """
    _check_init(init, acc_word, acc_signed)
    level = [int(p) for p in products] or [0]
    levels = [level]
    n_overflow = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            s, ovf = overflow_int(level[i] + level[i + 1], acc_word, acc_signed, overflow, n_bits)
            n_overflow += ovf
            nxt.append(s)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        levels.append(level)
    final, ovf = overflow_int(level[0] + init, acc_word, acc_signed, overflow, n_bits)
    return final, n_overflow + ovf, levels


# --------------------------------------------------------------------------- gemmlowp / TFLite
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def ref_wrap32(v: int) -> int:
    return overflow_int(v, 32, True, "wrap")[0]


def ref_srdhm(a: int, b: int) -> int:
    """gemmlowp SRDHM as defined: nudge 2^30 or 1 - 2^30, then a division truncating toward zero."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    numerator = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return int(Fraction(numerator, 1 << 31))           # int() of a Fraction truncates toward zero


def ref_rdbpot(x: int, e: int) -> int:
    """gemmlowp RDBPOT: x / 2^e rounded to nearest, ties away from zero."""
    return round_fraction(Fraction(x, 1 << e), "half_away")


def ref_mbqm(x: int, m: int, s: int, rounding: str) -> int:
    if rounding == "double":
        return ref_rdbpot(ref_srdhm(ref_wrap32(x * 2 ** max(s, 0)), m), max(-s, 0))
    return ref_wrap32(round_fraction(Fraction(x * m) * Fraction(2) ** (s - 31), "half_up"))


def ref_quantize_multiplier(real: float, single: bool = False) -> tuple[int, int]:
    """(m, e) with m = round_half_away(r * 2^(31-e)), 2^(e-1) <= |r| < 2^e, from exact rationals."""
    r = Fraction(real)
    if r == 0:
        return 0, 0
    e = 0
    while abs(r) >= Fraction(2) ** e:
        e += 1
    while abs(r) < Fraction(2) ** (e - 1):
        e -= 1
    m = round_fraction(r * Fraction(2) ** (31 - e), "half_away")
    if m == 1 << 31:
        m, e = 1 << 30, e + 1
    if e < -31:
        return 0, 0
    if single and e > 30:
        return INT32_MAX, 30
    return m, e


def ref_max_pool(x, k, stride, pads, lo, hi, pad_value=None):
    """Python ints, nested lists [n][oh][ow][c]: the maximum over each window of ``x`` (NHWC) clipped to
    [lo, hi]; positions in the padding take ``pad_value``, or are left out of the window when it is None."""
    n, h, w, ch = x.shape
    (pt, pb), (pl, pr) = pads
    oh, ow = (h + pt + pb - k[0]) // stride[0] + 1, (w + pl + pr - k[1]) // stride[1] + 1

    def window(b, i, j, c):
        for y in range(i * stride[0] - pt, i * stride[0] - pt + k[0]):
            for z in range(j * stride[1] - pl, j * stride[1] - pl + k[1]):
                if 0 <= y < h and 0 <= z < w:
                    yield int(x[b, y, z, c])
                elif pad_value is not None:
                    yield pad_value

    return [[[[min(hi, max(lo, max(window(b, i, j, c)))) for c in range(ch)] for j in range(ow)]
             for i in range(oh)] for b in range(n)]

"""Independent Fraction model of the float accumulators (test-only; fxpsim never imports it).

One output element at a time, on exact rationals, from the written definitions (no bit tricks):
values come from ``reference_float.code_value`` (the encoding's definition), roundings into a
format from ``reference_float.round_exact`` (a search of the sorted value list).

* ``exact``:  round(c + sum a_k b_k) once.
* ``per_add``: s <- round(s + p_k), p_k = a_k b_k (fma) or round(a_k b_k).
* ``fused``: per chunk, E_max = max over the chunk's products (and C) of exponent(a) + exponent(b)
  [+ scale exponents], exponent(v) = max(floor(log2 |v|), emin), a zero has ``zero_exponent``;
  every term t becomes align(t / 2^(E_max - F)) (an integer), the integers are summed, and the
  sum times 2^(E_max - F) is rounded into the output.
* ``block``: per group of ``group`` elements G = sum a_k b_k exactly, the term is G * s_a * s_b
  with exponent exponent(s_a) + exponent(s_b), then as fused.
"""
from __future__ import annotations

import math
from fractions import Fraction

import reference_float as rf

NAN, POS, NEG = rf.NAN, rf.POS_INF, rf.NEG_INF
#: the exponent of a zero that never sets the maximum
NO_ZERO = -10 ** 9


def floor_log2(q: Fraction) -> int:
    q = abs(q)
    k = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** k > q:
        k -= 1
    while Fraction(2) ** (k + 1) <= q:
        k += 1
    return k


def exponent(v: Fraction, fmt, zero_exponent):
    """The exponent a datapath aligns ``v`` by: floor(log2|v|), at least the format's smallest normal exponent
    where the format has subnormals (their exponent is emin); a format without subnormals (E8M0: every code is
    2^(code - 127), code 0 is 2^-127) keeps its own exponent, as MMA-Sim's extract_significand_exponent does."""
    if v == 0:
        return zero_exponent
    if not getattr(fmt, "subnormals", True):
        return floor_log2(v)
    emin = 1 - fmt.bias
    return max(floor_log2(v), emin)


def is_neg_zero(fmt, code: int) -> bool:
    return fmt.signed and code == (1 << (fmt.exp_bits + fmt.man_bits))


def align(t: Fraction, mode: str) -> int:
    if mode == "truncate":
        return int(t)                           # toward zero
    if mode == "floor":
        return math.floor(t)
    fl = math.floor(t)
    d = t - fl
    if d > Fraction(1, 2) or (d == Fraction(1, 2) and fl % 2 == 1):
        return fl + 1
    return fl


def special_sum(terms):
    """IEEE sum of special-aware values: NAN, POS, NEG or None (finite)."""
    pos = any(t == POS for t in terms)
    neg = any(t == NEG for t in terms)
    if any(t == NAN for t in terms) or (pos and neg):
        return NAN
    return POS if pos else NEG if neg else None


def product(x, y):
    if x == NAN or y == NAN:
        return NAN
    if x in (POS, NEG) or y in (POS, NEG):
        zx = x not in (POS, NEG) and x == 0
        zy = y not in (POS, NEG) and y == 0
        if zx or zy:
            return NAN
        sx = -1 if (x == NEG or (x not in (POS, NEG) and x < 0)) else 1
        sy = -1 if (y == NEG or (y not in (POS, NEG) and y < 0)) else 1
        return POS if sx * sy > 0 else NEG
    return x * y


def _pick(x: Fraction, prec, rounding: str) -> Fraction:
    """|x| rounded to the format's grid with an unbounded exponent (by the definition:
    the two neighbours on the quantum 2^(max(floor log2 |x|, emin) - m), then the rule)."""
    a = abs(x)
    E = max(floor_log2(a), 1 - prec.bias)
    q = Fraction(2) ** (E - prec.man_bits)
    lo = math.floor(a / q)
    rem = a / q - lo
    neg = x < 0
    if rem == 0:
        up = False
    elif rounding == "toward_zero":
        up = False
    elif rounding == "half_even":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1)
    elif rounding == "half_away":
        up = rem >= Fraction(1, 2)
    elif rounding == "floor":
        up = neg
    else:
        up = not neg
    return (lo + up) * q


def _code_of(v: Fraction, prec) -> int:
    """The magnitude code of a grid value v >= 0 (may exceed the largest finite code)."""
    emin, m = 1 - prec.bias, prec.man_bits
    if v < Fraction(2) ** emin:
        return int(v / Fraction(2) ** (emin - m))
    E = floor_log2(v)
    return ((E + prec.bias) << m) + int(v / Fraction(2) ** (E - m)) - (1 << m)


def round_into(x: Fraction, prec, rounding: str, overflow: str):
    """(code of ``prec``, overflowed).  Overflowed: rounding with an unbounded exponent gives more
    than the largest finite value.  ``overflow``: 'ieee' (IEEE 754: toward-zero roundings give the
    max), 'inf' (+-Inf whatever the rounding), 'saturate'.  A zero result keeps the sign of x."""
    sign = prec.sign_bit if x < 0 else 0
    if x == 0:
        return 0, False
    v = _pick(x, prec, rounding)
    mag = _code_of(v, prec)
    if mag <= prec.max_mag_code:
        return sign | mag, False
    toward0 = rounding == "toward_zero" or (rounding == "floor" and x > 0) or (rounding == "ceil" and x < 0)
    if overflow == "saturate" or (overflow == "ieee" and toward0):
        return sign | prec.max_mag_code, True
    return sign | prec.inf_code, True


def widen(code: int, prec, out) -> int:
    sign = bool(code & prec.sign_bit)
    mag = code & (prec.sign_bit - 1)
    return (mag << (out.man_bits - prec.man_bits)) | (out.sign_bit if sign else 0)


def special_code(out, kind, nan_code):
    if kind == NAN:
        return nan_code
    return out.inf_code | (out.sign_bit if kind == NEG else 0)


def fused_chunk(a, b, c_code, out, prec, F, zero_exp, mode, rounding, overflow, nan_code,
                sa=None, sb=None, a_fmt=None, b_fmt=None, s_fmt=None, counts=None):
    """One fused chunk on codes (lists), returns the output code."""
    av = [rf.code_value(a_fmt, x) for x in a]
    bv = [rf.code_value(b_fmt, x) for x in b]
    cv = rf.code_value(out, c_code)
    prods = [product(x, y) for x, y in zip(av, bv)]
    scv = None
    if sa is not None:
        scv = [(rf.code_value(s_fmt, x), rf.code_value(s_fmt, y)) for x, y in zip(sa, sb)]
        prods = [NAN if (p == NAN or s0 == NAN or s1 == NAN) else product(product(p, s0), s1)
                 for p, (s0, s1) in zip(prods, scv)]
    sp = special_sum(prods + [cv])
    if sp is not None:
        return special_code(out, sp, nan_code)
    exps = []
    for i, (x, y) in enumerate(zip(av, bv)):
        e = exponent(x, a_fmt, zero_exp) + exponent(y, b_fmt, zero_exp)
        if scv is not None:
            e += exponent(scv[i][0], s_fmt, zero_exp) + exponent(scv[i][1], s_fmt, zero_exp)
        exps.append(e)
    emax = max(exps + [exponent(cv, out, zero_exp)])
    if emax < -2000:                            # only zeros, none with an exponent: +0
        return 0
    unit = Fraction(2) ** (emax - F)
    total = 0
    for t in prods + [cv]:
        q = align(t / unit, mode)
        total += q
        if counts is not None and t != 0 and q * unit != t:
            counts["terms_inexact"] += 1
    code, over = round_into(total * unit, prec, rounding, overflow)
    if code & (prec.sign_bit - 1) == 0:
        # NVIDIA's fused sum is a fixed-point integer: a zero result is +0 whatever the sign of the
        # sum that underflowed (MMA-Sim's nv_fused_dot_add truncates the significand to an integer)
        underflowed, code = total != 0, 0
    else:
        underflowed = False
    if counts is not None:
        counts["overflows"] += over
        counts["underflows"] += int(underflowed)
    return widen(code, prec, out)


def block_chunk(a, b, c_code, out, F, zero_exp, mode, nan_code, sa, sb, group, a_fmt, s_fmt, counts=None):
    """One block-scaled chunk: sa, sb the scale codes of each group (sign bits already cleared)."""
    av = [rf.code_value(a_fmt, x) for x in a]
    bv = [rf.code_value(a_fmt, x) for x in b]
    cv = rf.code_value(out, c_code)
    scv = [(rf.code_value(s_fmt, x), rf.code_value(s_fmt, y)) for x, y in zip(sa, sb)]
    if cv == NAN or any(s0 == NAN or s1 == NAN for s0, s1 in scv):
        return nan_code
    if cv in (POS, NEG):
        return special_code(out, cv, nan_code)
    terms, exps = [], []
    for gi, (s0, s1) in enumerate(scv):
        G = sum(x * y for x, y in zip(av[gi * group:(gi + 1) * group], bv[gi * group:(gi + 1) * group]))
        terms.append(G * s0 * s1)
        exps.append(exponent(s0, s_fmt, zero_exp) + exponent(s1, s_fmt, zero_exp))
    emax = max(exps + [exponent(cv, out, zero_exp)])
    if emax < -2000:                            # only zeros, none with an exponent: +0
        return 0
    unit = Fraction(2) ** (emax - F)
    total = 0
    for t in terms + [cv]:
        q = align(t / unit, mode)
        total += q
        if counts is not None and t != 0 and q * unit != t:
            counts["terms_inexact"] += 1
    code, over = round_into(total * unit, out, "toward_zero", "inf")
    if code & (out.sign_bit - 1) == 0:
        code = 0                                # a zero result is +0 (NVIDIA's fixed-point sum, as fused_chunk)
    if counts is not None:
        counts["overflows"] += over
    return code


def exact_dot(a, b, c_code, a_fmt, b_fmt, out, rounding, nan_code):
    av = [rf.code_value(a_fmt, x) for x in a]
    bv = [rf.code_value(b_fmt, x) for x in b]
    cv = rf.code_value(out, c_code)
    prods = [product(x, y) for x, y in zip(av, bv)]
    sp = special_sum(prods + [cv])
    if sp is not None:
        return special_code(out, sp, nan_code)
    total = sum(prods) + cv
    if total == 0:
        # -0 only when every addend is -0 (floor: unless every addend is +0)
        signs = [(is_neg_zero(a_fmt, x) or x & a_fmt.sign_bit != 0) != (y & b_fmt.sign_bit != 0)
                 for x, y in zip(a, b)] + [bool(c_code & out.sign_bit)]
        negz = all(signs) if rounding != "floor" else not all(not s for s in signs)
        return out.sign_bit if negz else 0
    code, _ = round_into(total, out, rounding, "ieee")
    return code


def per_add(a, b, c_code, a_fmt, b_fmt, out, rounding, fma, nan_code):
    """Sequential IEEE adds; returns the output code (NaN as ``nan_code``)."""
    s_code = c_code
    for x, y in zip(a, b):
        s = rf.code_value(out, s_code)
        p = product(rf.code_value(a_fmt, x), rf.code_value(b_fmt, y))
        if not fma and p not in (NAN, POS, NEG):
            pc, _ = round_into(p, out, rounding, "ieee")
            p = rf.code_value(out, pc)
        sp = special_sum([s, p])
        if sp is not None:
            s_code = special_code(out, sp, nan_code)
            continue
        total = s + p
        if total == 0:
            sneg = bool(s_code & out.sign_bit)
            pneg = (p == 0 and _neg_zero_product(x, y, a_fmt, b_fmt, fma, p)) if p == 0 else p < 0
            if p == 0 and s == 0:
                both_neg = sneg and pneg
                s_code = out.sign_bit if (both_neg or (rounding == "floor" and (sneg or pneg))) else 0
            else:
                s_code = out.sign_bit if rounding == "floor" else 0
            continue
        s_code, _ = round_into(total, out, rounding, "ieee")
    return s_code


def _neg_zero_product(x, y, a_fmt, b_fmt, fma, p):
    return bool(x & a_fmt.sign_bit) != bool(y & b_fmt.sign_bit)


def rd_chunk(a, b, c_code, a_fmt, b_fmt, out, F, S, Fc, zero_exp, even_odd, nan_code, counts=None):
    """AMD CDNA3 group (``fused_rd``): trunc-aligned sums at F bits below the products' max
    exponent (even/odd apart when ``even_odd``, then floored to F bits below the larger of the
    two), floored to S bits below max(that, E_c); C floored to Fc bits (dropped for even_odd when
    E_c < e - 25); one RNE rounding into float32 (IEEE overflow)."""
    av = [rf.code_value(a_fmt, x) for x in a]
    bv = [rf.code_value(b_fmt, x) for x in b]
    cv = rf.code_value(out, c_code)
    prods = [product(x, y) for x, y in zip(av, bv)]
    sp = special_sum(prods + [cv])
    if sp is not None:
        return special_code(out, sp, nan_code)
    big = [p for p in prods if abs(p) >= Fraction(2) ** 128]
    if big:
        pos, neg = any(p > 0 for p in big), any(p < 0 for p in big)
        return nan_code if pos and neg else special_code(out, POS if pos else NEG, nan_code)
    exps = [exponent(x, a_fmt, zero_exp) + exponent(y, b_fmt, zero_exp) for x, y in zip(av, bv)]

    def stage1(idx):
        e1 = max(exps[i] for i in idx)
        if e1 < -2000:                          # only zeros without an exponent
            return Fraction(0), e1
        unit = Fraction(2) ** (e1 - F)
        return sum(align(prods[i] / unit, "truncate") for i in idx) * unit, e1

    if even_odd:
        (v0, e0), (v1, e1) = stage1(range(0, len(a), 2)), stage1(range(1, len(a), 2))
        e = max(e0, e1)
        unit = Fraction(2) ** (e - F)
        v = (align(v0 / unit, "floor") + align(v1 / unit, "floor")) * unit
    else:
        v, e = stage1(range(len(a)))
    ec = exponent(cv, out, zero_exp)
    emax = max(e, ec)
    if emax < -2000:
        return 0
    s = align(v / Fraction(2) ** (emax - S), "floor") * Fraction(2) ** (emax - S)
    if even_odd and ec < emax - 25:
        sc = 0
    else:
        sc = align(cv / Fraction(2) ** (emax - Fc), "floor") * Fraction(2) ** (emax - Fc)
    total = s + sc
    if total == 0:
        return 0
    code, _ = round_into(total, out, "half_even", "ieee")
    return code

"""The float accumulator presets against MMA-Sim itself, bit for bit.

``tests/vectors/mma_sim/<preset>.npz`` were computed by MMA-Sim (microsoft/MMA-Sim c785138, run
in a scratch environment with torch 2.13 by ``tools/fixtures/mma_sim/make_vectors.py``): each case
is one output element of the instruction, drawn to hit cancellation, exponent spread,
subnormals, ties, large/small C, signed zeros, Inf/NaN, overflow and extreme block scales.  Every
case is compared bit for bit (NVIDIA NaNs are canonical, so NaN bits are compared too; AMD's NaN
payloads vary, so there a NaN is compared as "is NaN").
"""
from __future__ import annotations

import numpy as np
import pytest

from paths import VECTORS_DIR
from fxpsim.core.float_codec import decode
from fxpsim.datapath.floatacc import FloatAccumulator, float_dot, float_matmul

DIR = VECTORS_DIR / "mma_sim"
FILES = sorted(DIR.glob("*.npz"))
CATEGORIES = ("normal", "random_bits", "exponent_spread", "subnormal", "cancel_pairs", "cancel_c",
              "large_c", "small_c", "near_ulp_and_ties", "all_equal", "alternating_sign",
              "signed_zeros", "inf_nan", "overflow", "scale_extremes", "zero_times_large", "underflow_to_zero")
_TYPES = {"f16": "float16", "bf16": "bfloat16", "tf32": "tf32", "e4m3": "e4m3", "e5m2": "e5m2",
          "fp8": "e4m3fnuz", "bf8": "e5m2fnuz",
          "e2m1": "e2m1"}


def _case_args(name, d):
    """(a codes, b codes, a format, b format, keyword args) of a vector file: the input types are
    the name's tokens after the output type; tf32 operands are f32 words whose low 13 bits the
    instruction ignores."""
    toks = name.split("-")
    out_i = next(i for i, t in enumerate(toks) if t in ("f32", "f16"))
    ins = [t for t in toks[out_i + 1:] if t in _TYPES]
    fa = _TYPES[ins[0]]
    fb = _TYPES[ins[1]] if len(ins) > 1 else fa
    a, b = d["a_bits"].astype(np.int64), d["b_bits"].astype(np.int64)
    if fa == "tf32":
        a, b = a >> 13, b >> 13
    kw = {}
    if "scale_a_bits" in d:
        kw = dict(scale_a=d["scale_a_bits"], scale_b=d["scale_b_bits"],
                  scale_fmt="ue4m3" if "ue4m3" in name else "e8m0")
    return a, b, fa, fb, kw


def test_vectors_present_for_every_instruction_preset():
    names = {f.stem for f in FILES}
    instr = {n for n in FloatAccumulator.presets() if n.count("-") >= 3}
    assert len(FILES) >= 20
    assert instr <= names, f"presets without MMA-Sim vectors: {sorted(instr - names)}"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_preset_matches_mma_sim_bit_for_bit(path):
    d = np.load(path)
    acc = FloatAccumulator.preset(path.stem)
    a, b, fa, fb, kw = _case_args(path.stem, d)
    assert len(d["d_bits"]) >= 1000
    r = float_dot(a, b, fa, fb, acc, d["c_bits"], **kw)
    got, want = r.bits.astype(np.int64), d["d_bits"].astype(np.int64)
    want_nan = np.isnan(decode(want, acc.output))
    same = got == want
    if path.stem.startswith("cdna"):
        same |= want_nan & np.isnan(decode(got, acc.output))
    bad = np.nonzero(~same)[0]
    assert bad.size == 0, (f"{bad.size} of {want.size} differ, first cases {bad[:5].tolist()} "
                           f"(categories {[CATEGORIES[c] for c in d['category'][bad[:5]]]}): "
                           f"got {[hex(x) for x in got[bad[:5]]]}, MMA-Sim {[hex(x) for x in want[bad[:5]]]}")
    # the draws reach what they are meant to reach
    assert r.nans == int(want_nan.sum())
    assert len(set(d["category"].tolist())) >= 14


@pytest.mark.parametrize("path", FILES[::4], ids=[f.stem for f in FILES[::4]])
def test_matmul_agrees_with_batched_dot(path):
    """float_matmul on the first 8 cases as an 8 x 8 product: its diagonal is MMA-Sim's output."""
    d = np.load(path)
    acc = FloatAccumulator.preset(path.stem)
    a, b, fa, fb, kw = _case_args(path.stem, d)
    n = 8
    mkw = {}
    if kw:
        mkw = dict(scale_a=kw["scale_a"][:n], scale_b=kw["scale_b"][:n].T, scale_fmt=kw["scale_fmt"])
    c = np.zeros((n, n), d["c_bits"].dtype)
    np.fill_diagonal(c, d["c_bits"][:n])
    r = float_matmul(a[:n], b[:n].T, fa, fb, acc, c, **mkw)
    got, want = np.diag(r.bits).astype(np.int64), d["d_bits"][:n].astype(np.int64)
    ok = got == want
    if path.stem.startswith("cdna"):
        ok |= np.isnan(decode(got, acc.output)) & np.isnan(decode(want, acc.output))
    assert ok.all()


@pytest.mark.parametrize("path", [f for f in FILES if f.stem.startswith("cdna3")],
                         ids=[f.stem for f in FILES if f.stem.startswith("cdna3")])
def test_amd_matmul_kernel_matches_mma_sim_on_every_case(path):
    """Every case of an AMD CDNA3 file through ``float_matmul`` (the C kernel of the round-down kind, not the
    batched numpy path): blocks of 64 cases as 64 x 64 products with the cases' C on the diagonal, whose
    diagonal is MMA-Sim's output (NaN as NaN)."""
    d = np.load(path)
    acc = FloatAccumulator.preset(path.stem)
    a, b, fa, fb, _ = _case_args(path.stem, d)
    got = []
    for s in range(0, len(a), 64):
        n = min(64, len(a) - s)
        c = np.zeros((n, n), d["c_bits"].dtype)
        np.fill_diagonal(c, d["c_bits"][s:s + n])
        got.append(np.diag(float_matmul(a[s:s + n], b[s:s + n].T, fa, fb, acc, c).bits).astype(np.int64))
    got, want = np.concatenate(got), d["d_bits"].astype(np.int64)
    ok = (got == want) | (np.isnan(decode(got, acc.output)) & np.isnan(decode(want, acc.output)))
    assert ok.all(), f"{int((~ok).sum())} of {len(ok)} cases differ"


@pytest.mark.parametrize("change", [dict(fraction_bits=+1), dict(fraction_bits=-1), dict(zero_exponent=None),
                                    dict(align="half_even"), dict(output_rounding="half_even")])
def test_each_parameter_is_pinned_by_the_vectors(change):
    """A preset with one parameter changed no longer matches: the vectors can fail."""
    hits = 0
    for name in ("hopper-wgmma-m64n8k32-f32-e4m3", "ampere-mma-m16n8k16-f32-bf16", "hopper-wgmma-m64n8k16-f16-f16",
                 "blackwell-tcgen05-m128n8k64-f32-e2m1-ue8m0-block32", "cdna3-mfma-16x16x32-f32-fp8",
                 "cdna3-mfma-16x16x16-f32-bf16"):
        d = np.load(DIR / f"{name}.npz")
        acc = FloatAccumulator.preset(name)
        kwargs = {k: (getattr(acc, k) + v if k == "fraction_bits" else v) for k, v in change.items()}
        if "output_rounding" in kwargs and acc.output_rounding == "half_even":
            kwargs["output_rounding"] = "toward_zero"
        if acc.kind == "fused_rd" and "align" in kwargs:
            kwargs = dict(even_odd=not acc.even_odd)          # fused_rd's alignment is fixed
        if acc.kind == "fused_rd" and "fraction_bits" in kwargs and change["fraction_bits"] > 0:
            kwargs["sum_bits"] = acc.sum_bits + 1
        a, b, fa, fb, kw = _case_args(name, d)
        r = float_dot(a, b, fa, fb, acc.replace(**kwargs), d["c_bits"], **kw)
        hits += int((r.bits.astype(np.int64) != d["d_bits"].astype(np.int64)).sum())
    assert hits > 0


def test_mxf4nvf4_with_infinite_c():
    """MMA-Sim's mxf4nvf4 model raises on C = +-Inf (no such case is stored); fxpsim returns C's
    infinity (FP4 products and scales are finite), and NaN for a NaN scale."""
    acc = FloatAccumulator.preset("blackwell-tcgen05-m128n8k64-f32-e2m1-ue8m0-block32")
    a = np.full((3, 64), 0x2, np.uint8)                      # 1.0
    c = np.array([0x7F800000, 0xFF800000, 0x3F800000], np.uint32)
    sa = np.full((3, 2), 127, np.uint8)
    sb = sa.copy()
    sb[2, 1] = 0xFF                                          # E8M0 NaN
    r = float_dot(a, a, "e2m1", "e2m1", acc, c, scale_a=sa, scale_b=sb, scale_fmt="e8m0")
    assert r.bits.tolist() == [0x7F800000, 0xFF800000, 0x7FFFFFFF]
    assert r.nans == 1

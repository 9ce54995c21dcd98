"""Every format corner x every mode through every kernel path.

Run under the undefined-behaviour sanitizer build in CI (.ci/run), this is the test that
drives the kernels through extreme shifts (|frac| > 1000, shifts >= 64), 64-bit unsigned
codes, infinities, subnormals and the int64/int128 path boundaries.  Its assertions are
structural (codes fit the format, counts agree with masks, the vectorised pass agrees with
the exact 128-bit scalar pass); value correctness is proven against the big-integer
reference in test_fixed_properties.py and against SystemC in test_systemc_vectors.py.
"""
import numpy as np
import pytest

import fxpsim.core.fixed as F
from fxpsim.core.fixed import Format, Overflow, Rounding, from_float

VALUES = np.array(
    [0.0, -0.0, 5e-324, -5e-324, 1e-310, np.inf, -np.inf, 1e308, -1e308, 0.5, -0.5, 1.5, -2.5,
     2.0**63, -2.0**63, 2.0**64, 2.0**53 + 1, 0.49999999999999994, -0.49999999999999994]
    + list(np.random.default_rng(1).normal(0, 1e6, 20)) + list(np.random.default_rng(2).normal(0, 1, 20)))
WORDS = [1, 2, 8, 31, 32, 33, 62, 63, 64]
FRACS = [-1100, -70, -64, -63, -10, 0, 1, 8, 63, 64, 65, 200, 1075, 1100]


def _fits(a):
    raw = a.raw.astype(object)
    return all(a.fmt.min_code <= int(c) <= a.fmt.max_code for c in raw.ravel())


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("signed", [True, False])
def test_every_mode_every_extreme(word, signed):
    for frac in FRACS:
        fmt = Format(word, frac, signed)
        for r in Rounding:
            for o in Overflow:
                if o is Overflow.ERROR or (o is Overflow.WRAP_SIGN_MAGNITUDE and not signed):
                    continue
                n_bits_options = sorted({0, 1, min(2, word), word}) if o in (
                    Overflow.WRAP, Overflow.WRAP_SIGN_MAGNITUDE) else [0]
                for nb in n_bits_options:
                    fast = from_float(VALUES, fmt, r, o, n_bits=nb, seed=1)
                    exact = from_float(VALUES, fmt, r, o, n_bits=nb, seed=1, mask=True)
                    assert _fits(fast)
                    assert exact.overflows == int(exact.overflow_mask.sum())
                    if r is not Rounding.STOCHASTIC:
                        np.testing.assert_array_equal(fast.raw, exact.raw)
                        assert fast.overflows == exact.overflows
                    for dst in (Format(word, frac + 3, signed), Format(max(1, word // 2), frac - 5, True)):
                        c = exact.cast(dst, r, o, n_bits=min(nb, dst.word), seed=2, mask=True)
                        assert _fits(c) and c.overflows == int(c.overflow_mask.sum())
        b = from_float(VALUES, fmt)
        for op in ("add", "sub", "mul"):
            if not (op == "mul" and fmt.word == 64 and not signed):   # 128-bit unsigned product
                assert _fits(getattr(F, op)(b, b, Format(64, frac, True), "half_even", "wrap"))
            try:
                exact = getattr(F, op)(b, b)
            except ValueError as err:          # the exact result would need more than 64 bits
                assert "bits" in str(err)
            else:
                assert _fits(exact)
        np.testing.assert_array_equal(b < b[::-1], b.raw < b.raw[::-1])   # same format: order of codes
        if word < 64:
            assert _fits(abs(b)) and _fits(-b)

"""``fxpsim.from_float`` with a float format: the codes are ml_dtypes' (live) and the settings that only mean
something for fixed point are refused, not ignored."""
import numpy as np
import pytest

import fxpsim

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml-dtypes (test extra) is not installed")


@pytest.mark.parametrize("name, dtype, overflow", [
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "nan"),      # ml_dtypes: out of range -> NaN (no Inf here)
    ("float8_e5m2", ml_dtypes.float8_e5m2, "inf"),
    ("bfloat16", ml_dtypes.bfloat16, "inf"),
])
def test_codes_are_ml_dtypes_round_to_nearest_even(name, dtype, overflow):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-8, 6, 4000), [0.0, -0.0, 1e30, -1e30]])
    q = fxpsim.from_float(x, name, overflow=overflow)
    assert np.array_equal(q.bits, x.astype(dtype).view(q.bits.dtype))


def test_default_rounding_is_ieee_half_even_for_floats_and_half_up_for_fixed_point():
    tie = 1.0 + 2.0 ** -4                       # halfway between two E4M3 codes (1 and 1.125): even is 1.0
    assert fxpsim.from_float([tie], "float8_e4m3fn").to_float()[0] == 1.0
    assert fxpsim.from_float([0.5], "Q7.0").raw[0] == 1      # fixed point keeps ties toward +inf
    assert fxpsim.from_float([tie], fxpsim.FloatFormat.parse("e4m3"), rounding="half_up").to_float()[0] == 1.125


def test_saturation_is_counted():
    q = fxpsim.from_float([500.0, -1e9, 1.0], "float8_e4m3fn", overflow="saturate")
    assert q.to_float().tolist() == [448.0, -448.0, 1.0] and q.overflows == 2


@pytest.mark.parametrize("kwargs, word", [({"n_bits": 2}, "n_bits"), ({"mask": True}, "mask"),
                                          ({"nan": "zero"}, "nan")])
def test_fixed_point_only_settings_are_refused(kwargs, word):
    with pytest.raises(ValueError, match=word):
        fxpsim.from_float([1.0], "float8_e4m3fn", **kwargs)


def test_unknown_name_names_both_kinds():
    with pytest.raises(ValueError, match="float format") as info:
        fxpsim.from_float([1.0], "floaty")
    assert "Q7.8" in str(info.value)


def test_formats_command_lists_each_format_with_its_range():
    """``fxpsim formats`` prints every ml_dtypes 8-bit format with ml_dtypes' own max finite value."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "fxpsim", "formats"], capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        assert float(rows[name][5]) == float(ml_dtypes.finfo(getattr(ml_dtypes, name)).max), name

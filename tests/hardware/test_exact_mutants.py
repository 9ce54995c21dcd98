"""fxpsim.hardware.exact: the exact datapath of a Datapath / HardwareConfig and which node datapaths differ only
in the accumulator, against hand tables (every field typed out)."""
from __future__ import annotations

import dataclasses

import pytest

from fxpsim.graph import Datapath
from fxpsim.hardware import preset
from fxpsim.hardware.exact import ACCUMULATOR_FIELDS, exact_datapath_of, same_but_accumulator

BASE = preset("tflite-int8")


def test_accumulator_fields():
    assert ACCUMULATOR_FIELDS == ("name", "description", "accumulator_bits", "accumulator_overflow", "overflow_at",
                                  "bias_bits", "tile_accumulator_bits", "layers", "activation_lut_entries",
                                  "activation_lut_interpolation")


@pytest.mark.parametrize("requantization, dense, bits", [
    ("tflite-double", None, 32), ("tflite-single", None, 32), ("native", None, 32),
    ("shift", None, 62), ("float", None, 62), ("float", "", 62), ("shift", "float", 62),
    ("float", "tflite-single", 32), ("shift", "tflite-double", 32), ("tflite-double", "float", 32),
    ("float", "native", 32),
])
def test_exact_datapath_of_a_datapath(requantization, dense, bits):
    dp = Datapath(name="narrow", accumulator_bits=12, accumulator_overflow="saturate", accumulator_order="tree",
                  overflow_at="end", bias_add="preload", requantization=requantization, dense_requantization=dense,
                  rounding="half_even", activation_clamp=False)
    got = exact_datapath_of(dp)
    assert type(got) is Datapath
    assert dataclasses.asdict(got) == {
        "name": "narrow", "accumulator_bits": bits, "accumulator_overflow": "wrap", "accumulator_order": "tree",
        "overflow_at": "add", "bias_add": "preload", "requantization": requantization, "dense_requantization": dense,
        "rounding": "half_even", "activation_clamp": False}
    assert dp.accumulator_bits == 12          # a new object
    assert exact_datapath_of(dp, ()) == got and exact_datapath_of(dp, []) == got


def test_exact_datapath_of_a_datapath_refuses_keep():
    for keep in (("bias_bits",), ["multiplier_bits"], "bias_bits"):
        with pytest.raises(ValueError) as err:
            exact_datapath_of(Datapath(), keep)
        assert str(err.value) == f"exact_datapath_of: keep={keep!r} applies to a HardwareConfig, not to Datapath"


@dataclasses.dataclass(frozen=True)
class _OnlyWidth:
    accumulator_bits: int = 9
    other: str = "x"


@dataclasses.dataclass(frozen=True)
class _NoScheme:
    accumulator_bits: int = 9
    accumulator_overflow: str = "saturate"
    overflow_at: str = "end"


@dataclasses.dataclass(frozen=True)
class _Dense:
    requantization: str = "float"
    dense_requantization: str = "tflite-double"
    accumulator_bits: int = 9


def test_exact_datapath_of_other_dataclasses():
    # only the fields it has are changed; no scheme means neither TFLite's nor native: 62 bits
    assert exact_datapath_of(_OnlyWidth()) == _OnlyWidth(accumulator_bits=62, other="x")
    assert exact_datapath_of(_NoScheme()) == _NoScheme(accumulator_bits=62, accumulator_overflow="wrap",
                                                       overflow_at="add")
    assert exact_datapath_of(_Dense()) == _Dense(accumulator_bits=32)
    assert exact_datapath_of(_Dense(dense_requantization="")) == _Dense(dense_requantization="", accumulator_bits=62)


def test_exact_datapath_of_a_hardware_config_is_its_own():
    cfg = BASE.replace(accumulator_bits=14, accumulator_overflow="saturate", bias_bits=10, multiplier_bits=16)
    got = exact_datapath_of(cfg)
    assert (got.accumulator_bits, got.accumulator_overflow.value, got.bias_bits, got.multiplier_bits,
            got.overflow_at) == (32, "wrap", 32, 31, "add")
    assert got.name == f"{cfg.name} (exact datapath)"
    kept = exact_datapath_of(cfg, ("bias_bits", "multiplier_bits"))
    assert (kept.accumulator_bits, kept.bias_bits, kept.multiplier_bits) == (32, 10, 16)
    kept = exact_datapath_of(cfg, "multiplier_bits")
    assert (kept.bias_bits, kept.multiplier_bits) == (32, 16)
    float_cfg = BASE.replace(requantization="float", accumulator_bits=20)
    assert exact_datapath_of(float_cfg).accumulator_bits == 62


SAME_FIELDS = [("name", "other"), ("description", "d"), ("accumulator_bits", 16),
               ("accumulator_overflow", "saturate"), ("overflow_at", "end"), ("bias_bits", 12),
               ("tile_accumulator_bits", 20), ("activation_lut_entries", 16)]
OTHER_FIELDS = [("rounding", "half_even"), ("accumulator_order", "tree"), ("bias_add", "preload"),
                ("bias_shift", 2), ("zero_point", "fold"), ("tile_k", 4), ("multiplier_bits", 16),
                ("requantization", "float"), ("requantization_rounding", "half_even"), ("activation_clamp", False),
                ("weight_bits", 6)]


@pytest.mark.parametrize("field, value", SAME_FIELDS)
def test_same_but_accumulator_ignores_the_accumulator_fields(field, value):
    other = BASE.replace(**{field: value})
    assert getattr(other, field) != getattr(BASE, field) or field == "name"
    assert same_but_accumulator(BASE, other) and same_but_accumulator(other, BASE)


def test_same_but_accumulator_ignores_layers_and_the_lut_interpolation():
    lut = BASE.replace(activation_lut_entries=16)
    assert same_but_accumulator(lut, lut.replace(activation_lut_interpolation="linear"))
    assert same_but_accumulator(BASE, BASE.with_layer("op:conv2d", accumulator_bits=20))


@pytest.mark.parametrize("field, value", OTHER_FIELDS)
def test_same_but_accumulator_sees_every_other_field(field, value):
    other = BASE.replace(**{field: value})
    assert not same_but_accumulator(BASE, other) and not same_but_accumulator(other, BASE)


def test_same_but_accumulator_of_datapaths_and_mixed_types():
    a = Datapath(accumulator_bits=12, accumulator_overflow="saturate", overflow_at="end")
    assert same_but_accumulator(a, Datapath()) and same_but_accumulator(a, a)
    assert not same_but_accumulator(a, Datapath(rounding="half_even"))
    assert not same_but_accumulator(a, Datapath(bias_add="preload"))
    # a field only one of them has counts as different unless it is None on the other side
    assert not same_but_accumulator(_Dense(), _NoScheme())
    assert same_but_accumulator(_OnlyWidth(other=None), _NoScheme())
    assert not same_but_accumulator(_OnlyWidth(), _NoScheme())

"""The float / block-scaled datapath keys of a :class:`~fxpsim.hardware.HardwareConfig`.

A target is a *float datapath* when its TOML says what the MAC array's operands and accumulator are::

    [weights]
    format = "mxfp4"              # an element format (e4m3, e5m2, e2m1, ...) or a block format (mxfp8_e4m3,
    [activations]                 # mxfp6_e2m3, mxfp4, nvfp4): `fxpsim formats` lists them
    format = "e4m3"
    [accumulator]
    preset = "hopper-wgmma-m64n8k32-f32-e4m3"   # a FloatAccumulator preset
    fraction_bits = 13            # optional: the preset's alignment width changed
    promote_every = 128           # optional: promote to float32 every N elements (0: never)
    chunk = 32                    # optional: products per fused dot (promote_every a multiple of it)

All three of ``weights.format``, ``activations.format`` and ``accumulator.preset`` are then required
(per-node overrides under ``[layers."<selector>"]`` change them per layer), and every integer-only key
(widths, integer accumulator, requantization, LUTs, ...) must keep its default: a float key combined
with an integer-only one raises :class:`ConfigError` naming both.  The arithmetic is
:mod:`fxpsim.graph.float_mac`; :func:`float_settings` builds its :class:`FloatMacSettings`.
"""
from __future__ import annotations

import dataclasses

from ..core.block_format import BLOCK_FORMATS, BlockFormat
from ..core.float_format import FloatFormat, known_float_formats
from ..datapath.floatacc import FloatAccumulator
from ..graph.float_mac import FloatMacSettings
from .config_schema import ConfigError, _dotted

__all__ = ["FLOAT_FIELDS", "INTEGER_ONLY_FIELDS", "is_float_datapath", "parse_float_format", "float_settings",
           "check_float_datapath", "float_accumulator", "float_summary"]

#: The fields that make a target a float datapath.
FLOAT_FIELDS = ("accumulator_preset", "accumulator_fraction_bits", "accumulator_promote_every", "accumulator_chunk")
#: Fields of the integer datapath: a float target keeps their defaults.
INTEGER_ONLY_FIELDS = ("weight_bits", "weight_signed", "weight_narrow_range", "activation_bits",
                       "activation_signed", "activation_symmetric", "activation_lut_entries",
                       "activation_lut_interpolation", "bias_bits", "bias_add", "bias_shift", "accumulator_bits",
                       "accumulator_overflow", "accumulator_order", "overflow_at", "zero_point", "tile_k",
                       "tile_accumulator_bits", "accumulator_frac_bits", "product_rounding", "requantization",
                       "dense_requantization", "rounding", "requantization_rounding", "multiplier_bits",
                       "activation_clamp")


def format_name(fmt) -> str:
    """The name a float or block format is written with in TOML."""
    return fmt.name or str(fmt)


def parse_float_format(value, key: str):
    """A :class:`FloatFormat` or :class:`BlockFormat` named by ``value`` (block names first), or ``None``
    when ``value`` names neither (it may be a fixed-point notation)."""
    if isinstance(value, (FloatFormat, BlockFormat)):
        return value
    if not isinstance(value, str):
        return None
    if value.strip().lower().replace("-", "_") in BLOCK_FORMATS:
        block = BlockFormat.parse(value)
        if not isinstance(block.element, FloatFormat):
            raise ConfigError(f"{key}: {block.name} has integer elements; the float datapath takes "
                              f"{', '.join(k for k, b in BLOCK_FORMATS.items() if isinstance(b.element, FloatFormat))}")
        return block
    try:
        return FloatFormat.parse(value)
    except ValueError:
        return None


def known_format_names() -> str:
    return ", ".join(sorted({d["name"] for d in known_float_formats()})) + "; block: " + ", ".join(BLOCK_FORMATS)


def _is_number_format(v) -> bool:
    return isinstance(v, (FloatFormat, BlockFormat))


def is_float_datapath(config) -> bool:
    """True when ``config`` sets any float datapath key (a float/block weight or activation format, an
    accumulator preset or its overrides)."""
    return any(getattr(config, f, None) is not None for f in FLOAT_FIELDS) or \
        _is_number_format(getattr(config, "weight_format", None)) or \
        _is_number_format(getattr(config, "activation_format", None))


def _float_keys_set(config) -> list[str]:
    keys = [f"{_dotted(f)} = {format_name(getattr(config, f))!r}" for f in ("weight_format", "activation_format")
            if _is_number_format(getattr(config, f))]
    return keys + [f"{_dotted(f)} = {getattr(config, f)!r}" for f in FLOAT_FIELDS if getattr(config, f) is not None]


def omitted_fields(config) -> tuple:
    """The fields ``to_dict``/``to_toml`` leave out: the integer-only ones of a float target."""
    return INTEGER_ONLY_FIELDS if is_float_datapath(config) else ()


def float_accumulator(config) -> FloatAccumulator:
    """The :class:`FloatAccumulator` of a float target: its preset with ``fraction_bits`` and
    ``promote_every`` (0: never) and ``chunk`` changed when set."""
    name = config.accumulator_preset
    if not isinstance(name, str):
        raise ConfigError(f"accumulator.preset: must be a FloatAccumulator preset name, got {name!r}; known: "
                          f"{', '.join(FloatAccumulator.presets())}")
    try:
        acc = FloatAccumulator.preset(name)
    except ValueError as exc:
        raise ConfigError(f"accumulator.preset: {exc}") from None
    changes = {}
    for field, key in (("accumulator_fraction_bits", "fraction_bits"), ("accumulator_promote_every", "promote_every"),
                       ("accumulator_chunk", "chunk")):
        value = getattr(config, field)
        if value is None:
            continue
        least = 1 if key == "chunk" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{_dotted(field)}: must be an integer >= {least}, got {value!r}")
        changes[key] = None if (key == "promote_every" and value == 0) else value
    if changes:
        try:
            acc = acc.replace(**changes, name=f"{name}[{','.join(f'{k}={v}' for k, v in changes.items())}]")
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{', '.join(_dotted('accumulator_' + k) for k in changes)} on accumulator.preset "
                              f"{name!r}: {exc}") from None
    return acc


def float_settings(config) -> FloatMacSettings:
    """The :class:`~fxpsim.graph.float_mac.FloatMacSettings` of a float target (one node's config)."""
    try:
        return FloatMacSettings(config.weight_format, config.activation_format, float_accumulator(config),
                                config.weight_scales, config.activation_scales)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"weights.format {format_name(config.weight_format)!r}, activations.format "
                          f"{format_name(config.activation_format)!r}, accumulator.preset "
                          f"{config.accumulator_preset!r}: {exc}") from None


def check_float_datapath(config) -> None:
    """The float datapath rules (module docstring); nothing for an integer target."""
    if not is_float_datapath(config):
        unscaled = [f"{_dotted(f)} = {getattr(config, f)!r}" for f, default in
                    (("weight_scales", "none"), ("activation_scales", "none")) if getattr(config, f) == default]
        if unscaled:
            raise ConfigError(f"{', '.join(unscaled)}: unscaled operands are a float datapath setting (with "
                              "weights.format / activations.format a float format and accumulator.preset)")
        return
    float_keys = _float_keys_set(config)
    missing = [_dotted(f) for f in ("weight_format", "activation_format") if not _is_number_format(getattr(config, f))]
    if config.accumulator_preset is None:
        missing.append("accumulator.preset")
    if missing:
        mixed = [f"{_dotted(f)} = {getattr(config, f)}" for f in ("weight_format", "activation_format")
                 if getattr(config, f) is not None and not _is_number_format(getattr(config, f))]
        raise ConfigError(f"{', '.join(float_keys)}: a float datapath needs {', '.join(missing)} as well"
                          + (f" (a float format, not the fixed-point {', '.join(mixed)})" if mixed else "")
                          + f"; float formats: {known_format_names()}")
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    defaults["bias_bits"] = config.accumulator_bits
    clash = [f"{_dotted(f)} = {getattr(getattr(config, f), 'value', getattr(config, f))!r}"
             for f in INTEGER_ONLY_FIELDS if getattr(config, f) != defaults[f]]
    if clash:
        raise ConfigError(f"{', '.join(float_keys)} make this a float datapath, but {', '.join(clash)} "
                          f"{'is an integer-only setting' if len(clash) == 1 else 'are integer-only settings'}; "
                          "remove it (float targets quantize with round-half-even, saturating, and add the bias "
                          "as the accumulator's C)")
    if isinstance(config.weight_format, BlockFormat) and config.weight_scales != "per-channel":
        raise ConfigError(f"weights.scales = {config.weight_scales!r} with weights.format = "
                          f"{format_name(config.weight_format)!r}: a block format carries its own scale per block "
                          "of K (within each output channel); leave weights.scales out")
    if isinstance(config.activation_format, BlockFormat) and config.activation_scales != "per-tensor":
        raise ConfigError(f"activations.scales = {config.activation_scales!r} with activations.format = "
                          f"{format_name(config.activation_format)!r}: a block format carries its own scale per "
                          "block; leave activations.scales out")
    float_settings(config)


def float_summary(config) -> str:
    """One line: ``weights mxfp4, activations float8_e4m3fn, accumulator blackwell-mxfp4 (block, 35 fraction bits)``."""
    acc = float_accumulator(config)
    scale = f" {config.weight_scales}" if isinstance(config.weight_format, FloatFormat) else ""
    scale = " unscaled" if config.weight_scales == "none" else scale
    promote = f", promoted to float32 every {acc.promote_every}" if acc.promote_every else ""
    a_scale = " unscaled" if config.activation_scales == "none" else ""
    parts = [f"weights {format_name(config.weight_format)}{scale}",
             f"activations {format_name(config.activation_format)}{a_scale}",
             f"accumulator {acc.name} ({acc.kind}, {acc.fraction_bits} fraction bits, chunk {acc.chunk}{promote})"]
    if config.layers:
        parts.append(f"per-layer overrides for {', '.join(config.layers)}")
    return ", ".join(parts)

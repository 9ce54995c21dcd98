"""The TOML schema of a :class:`~fxpsim.hardware.config.HardwareConfig` and its validation.

* The allowed values of the string knobs (:data:`REQUANTIZATION_SCHEMES`, ...), the table of TOML
  ``section.key`` -> dataclass field (``_TOML_KEYS``) and its inverse, and the knobs written only when they
  differ from their defaults.
* :func:`check_config`, the checks and normalisations every config runs on construction, and the value
  parsers they use (formats, rounding and overflow modes); a violation raises :class:`ConfigError` naming
  the TOML key and what is allowed.
* :func:`_apply_changes` and :func:`_describe`, the rules of :meth:`HardwareConfig.replace`.

The dataclass lives in :mod:`fxpsim.hardware.config`, which imports this module.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from ..core.block_format import BlockFormat
from ..core.fixed import Format, Overflow, Rounding
from ..core.float_format import FloatFormat
from .overrides import LayerOverrides

REQUANTIZATION_SCHEMES = ("tflite-double", "tflite-single", "shift", "float")
WEIGHT_SCALES = ("per-channel", "per-tensor", "none")
ACTIVATION_SCALES = ("per-tensor", "none")
ACCUMULATOR_ORDERS = ("sequential", "tree")
OVERFLOW_AT = ("add", "end")
BIAS_ADD = ("preload", "after")
ZERO_POINTS = ("subtract", "fold")


class ConfigError(ValueError):
    """A hardware configuration is invalid; the message names the key and what is allowed."""


# TOML section/key -> dataclass field.  Flat field names are accepted as well (``weight_bits = 4``).
_TOML_KEYS: dict[str, dict[str, str]] = {
    "weights": {"bits": "weight_bits", "format": "weight_format", "signed": "weight_signed",
                "scales": "weight_scales", "narrow_range": "weight_narrow_range"},
    "activations": {"bits": "activation_bits", "format": "activation_format", "scales": "activation_scales",
                    "signed": "activation_signed", "symmetric": "activation_symmetric",
                    "lut_entries": "activation_lut_entries", "lut_interpolation": "activation_lut_interpolation"},
    "bias": {"bits": "bias_bits", "add": "bias_add", "shift": "bias_shift"},
    "accumulator": {"bits": "accumulator_bits", "overflow": "accumulator_overflow",
                    "order": "accumulator_order", "overflow_at": "overflow_at", "zero_point": "zero_point",
                    "tile_k": "tile_k", "tile_bits": "tile_accumulator_bits", "frac_bits": "accumulator_frac_bits",
                    "product_rounding": "product_rounding", "preset": "accumulator_preset",
                    "fraction_bits": "accumulator_fraction_bits", "promote_every": "accumulator_promote_every",
                    "chunk": "accumulator_chunk"},
    "requantization": {"scheme": "requantization", "dense_scheme": "dense_requantization", "rounding": "rounding",
                       "output_rounding": "requantization_rounding", "multiplier_bits": "multiplier_bits",
                       "activation_clamp": "activation_clamp"},
}
_FIELD_TO_TOML = {fld: (sec, key) for sec, keys in _TOML_KEYS.items() for key, fld in keys.items()}


def _dotted(field_name: str) -> str:
    sec, key = _FIELD_TO_TOML.get(field_name, (None, field_name))
    return f"{sec}.{key}" if sec else key


_FIELD_TO_TOML_REVERSE = {f"{sec}.{key}": fld for fld, (sec, key) in _FIELD_TO_TOML.items()}
_NOT_OVERRIDABLE = ("name", "description", "layers")
#: knobs written by to_dict/to_toml only when they differ from these defaults (older files stay the same)
_OMITTED_AT_DEFAULT = {"activation_scales": "per-tensor", "bias_shift": 0, "zero_point": "subtract", "multiplier_bits": 31,
                       "activation_lut_interpolation": "none"}
#: the lookup-table activation knobs (per-node overrides of them only on LUT ops)
_LUT_FIELDS = ("activation_lut_entries", "activation_lut_interpolation")


def check_config(config) -> None:
    """The checks and normalisations :meth:`HardwareConfig.__post_init__` runs: every field's type and
    range, formats and enums parsed, the LUT knobs, the cross-field rules, and every per-node override
    validated against ``config`` (its normalised values kept); a violation raises :class:`ConfigError`."""
    set_ = lambda k, v: object.__setattr__(config, k, v)  # noqa: E731  (frozen dataclass)
    set_("layers", config._normalized_layers(config.layers))
    for name in ("name", "description"):
        if not isinstance(getattr(config, name), str):
            raise ConfigError(f"{name}: must be a string, got {getattr(config, name)!r}")
    from .float_config import check_float_datapath, parse_float_format
    for prefix in ("weight", "activation"):
        fmt = getattr(config, f"{prefix}_format")
        number_format = parse_float_format(fmt, _dotted(f"{prefix}_format"))
        if number_format is not None:      # a float or block format: a float datapath (float_config)
            set_(f"{prefix}_format", number_format)
        elif fmt is not None:
            fmt = _parse_format(fmt, f"{prefix}_format")
            if not 2 <= fmt.word <= 16:
                raise ConfigError(f"{_dotted(prefix + '_format')}: word length must be 2..16, "
                                  f"got {fmt.word}")
            set_(f"{prefix}_format", fmt)
            set_(f"{prefix}_bits", fmt.word)
            set_(f"{prefix}_signed", fmt.signed)
    if isinstance(config.weight_format, Format):  # a fixed format: one power-of-two scale, full code range
        set_("weight_scales", "per-tensor")
        set_("weight_narrow_range", False)
    if isinstance(config.activation_format, Format):
        set_("activation_symmetric", True)
    for name, lo, hi in (("tile_k", 1, 1 << 24), ("tile_accumulator_bits", 2, 64),
                         ("accumulator_frac_bits", -64, 64)):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi):
            raise ConfigError(f"{_dotted(name)}: must be an integer in {lo}..{hi} (or left out), got {value!r}")
    for name, lo, hi in (("weight_bits", 2, 16), ("activation_bits", 2, 16), ("accumulator_bits", 2, 64),
                         ("bias_bits", 2, 64), ("bias_shift", 0, 62), ("multiplier_bits", 2, 31)):
        if name == "bias_bits" and config.bias_bits is None:
            set_("bias_bits", config.accumulator_bits)
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(f"{_dotted(name)}: must be an integer in {lo}..{hi}, got {value!r}")
    for name in ("weight_signed", "weight_narrow_range", "activation_signed", "activation_symmetric",
                 "activation_clamp"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(f"{_dotted(name)}: must be true or false, got {getattr(config, name)!r}")
    for name, allowed in (("weight_scales", WEIGHT_SCALES), ("activation_scales", ACTIVATION_SCALES),
                          ("accumulator_order", ACCUMULATOR_ORDERS),
                          ("overflow_at", OVERFLOW_AT), ("bias_add", BIAS_ADD),
                          ("requantization", REQUANTIZATION_SCHEMES), ("zero_point", ZERO_POINTS),
                          ("dense_requantization", (None,) + REQUANTIZATION_SCHEMES)):
        value = getattr(config, name)
        if value not in allowed:
            raise ConfigError(f"{_dotted(name)}: unknown value {value!r}; allowed: "
                              f"{', '.join(a for a in allowed if a is not None)}")
    check_lut_knobs(config)
    set_("accumulator_overflow", _parse_enum(Overflow, config.accumulator_overflow, "accumulator_overflow"))
    set_("rounding", _parse_enum(Rounding, config.rounding, "rounding"))
    if config.requantization_rounding is not None:
        set_("requantization_rounding", _parse_enum(Rounding, config.requantization_rounding,
                                                    "requantization_rounding"))
    if config.product_rounding is not None:
        set_("product_rounding", _parse_enum(Rounding, config.product_rounding, "product_rounding"))
    for name in ("rounding", "requantization_rounding", "product_rounding"):
        if getattr(config, name) == Rounding.STOCHASTIC:
            raise ConfigError(f"{_dotted(name)}: 'stochastic' is not supported by the simulation; allowed: "
                              f"{', '.join(r.value for r in Rounding if r != Rounding.STOCHASTIC)}")
    if config.bias_bits > config.accumulator_bits:
        raise ConfigError(f"bias.bits: a {config.bias_bits}-bit bias does not fit the "
                          f"{config.accumulator_bits}-bit accumulator; allowed: 2..{config.accumulator_bits} "
                          "(or leave it out: it defaults to the accumulator's width)")
    if config.tile_accumulator_bits is not None and config.tile_accumulator_bits > config.accumulator_bits:
        raise ConfigError(f"accumulator.tile_bits: a {config.tile_accumulator_bits}-bit tile accumulator is wider "
                          f"than the {config.accumulator_bits}-bit accumulator it adds into; allowed: "
                          f"2..{config.accumulator_bits}")
    if config.tile_k is not None and config.overflow_at != "add":
        raise ConfigError("accumulator.tile_k: K-tiling models narrow adders that overflow at every add; "
                          "it needs accumulator.overflow_at = 'add'")
    if config.multiplier_bits != 31 and not any(s_.startswith("tflite") for s_ in
                                              (config.requantization, config.dense_requantization or "")):
        raise ConfigError(f"requantization.multiplier_bits = {config.multiplier_bits}: only the tflite-* "
                          f"schemes have a multiplier; scheme is {config.requantization!r}")
    check_float_datapath(config)
    if config.layers:  # validate every override against this base; keep the normalised values
        items = []
        for sel, ov in config.layers.items():
            try:
                merged = config._merged(ov, keep_layers=False)
            except ConfigError as exc:
                raise ConfigError(f"layers.{json.dumps(sel)}: {exc}") from None
            items.append((sel, tuple((k, getattr(merged, k)) for k in ov)))
        set_("layers", LayerOverrides(tuple(items)))


def check_lut_knobs(config) -> None:
    """The lookup-table activation knobs: ``activation_lut_entries`` (0 means none) and
    ``activation_lut_interpolation``."""
    from ..datapath.lut import INTERPOLATIONS, MAX_ENTRIES
    entries, interp = config.activation_lut_entries, config.activation_lut_interpolation
    if entries is not None and not isinstance(entries, bool) and isinstance(entries, int) and entries == 0:
        object.__setattr__(config, "activation_lut_entries", None)
        entries = None
    if entries is not None and (isinstance(entries, bool) or not isinstance(entries, int) or
                                not 2 <= entries <= MAX_ENTRIES or entries & (entries - 1)):
        raise ConfigError(f"activations.lut_entries: must be a power of two in 2..{MAX_ENTRIES} (or 0 / left "
                          f"out: the runtime's own arithmetic), got {entries!r}")
    if interp not in INTERPOLATIONS:
        raise ConfigError(f"activations.lut_interpolation: unknown value {interp!r}; allowed: "
                          f"{', '.join(INTERPOLATIONS)}")
    if interp != "none" and entries is None:
        raise ConfigError(f"activations.lut_interpolation = {interp!r} needs a table: set "
                          "activations.lut_entries too (or leave the interpolation 'none')")


def _apply_changes(data: dict, changes: Mapping[str, Any]) -> None:
    """Apply ``changes`` (flat or dotted names) to a flat field dict with :meth:`HardwareConfig.replace`'s
    rules (a narrower accumulator narrows the bias register; new bits drop a fixed-point format)."""
    old_acc = data.get("accumulator_bits")
    for key, value in changes.items():
        name = _FIELD_TO_TOML_REVERSE.get(key, key)
        if name not in data:
            raise ConfigError(f"unknown key '{key}'; allowed: {', '.join(data)}")
        data[name] = value
    changes = {_FIELD_TO_TOML_REVERSE.get(k, k): v for k, v in changes.items()}
    acc = data.get("accumulator_bits")
    for bounded in ("bias_bits", "tile_accumulator_bits"):
        # a register the accumulator bounds: one as wide as the accumulator follows it both ways (widening
        # the accumulator widens it); a narrower one, pinned by the user, keeps its width while it fits
        if "accumulator_bits" in changes and bounded not in changes and isinstance(data.get(bounded), int) \
                and isinstance(acc, int) and isinstance(old_acc, int):
            data[bounded] = acc if data[bounded] >= old_acc else min(data[bounded], acc)
    if "weight_bits" in changes and "weight_format" not in changes:
        data["weight_format"] = None
    if "activation_bits" in changes and "activation_format" not in changes:
        data["activation_format"] = None


def _describe(name: str, changed) -> str:
    """``name[k=v,...]``: the changed fields joined to any bracket ``name`` already ends with."""
    base, items = name, {}
    if name.endswith("]") and "[" in name:
        base, inner = name[:-1].split("[", 1)
        for part in inner.split(","):
            key, sep, value = part.partition("=")
            if sep:
                items[key] = value
            else:
                base, items = name, {}
                break
    for key, value in changed:
        value = _plain_value(value)
        items[key] = (dict(value) if isinstance(value, Mapping) else value) if key != "layers" else \
            "{" + ";".join(value) + "}"
    return f"{base}[{','.join(f'{k}={v}' for k, v in items.items())}]"


def _plain_value(v: Any) -> Any:
    if isinstance(v, Format):
        return str(v)
    if isinstance(v, (FloatFormat, BlockFormat)):
        return v.name or str(v)
    if isinstance(v, (Rounding, Overflow)):
        return v.value
    return v


def _parse_enum(enum_cls, value: Any, field_name: str):
    try:
        return enum_cls.parse(value)
    except (ValueError, TypeError, KeyError, AttributeError):
        allowed = ", ".join(m.value for m in enum_cls)
        raise ConfigError(f"{_dotted(field_name)}: unknown value {value!r}; allowed: {allowed}") from None


def _parse_format(value: Any, field_name: str) -> Format:
    if isinstance(value, Format):
        return value
    if isinstance(value, Mapping):
        try:
            return Format(int(value["word"]), int(value["frac"]), bool(value.get("signed", True)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{_dotted(field_name)}: a format table needs integer 'word' and 'frac' "
                              f"(and optional 'signed'): {exc}") from None
    if isinstance(value, str):
        try:
            return Format.parse(value)
        except (ValueError, TypeError) as exc:
            from .float_config import known_format_names
            raise ConfigError(f"{_dotted(field_name)}: cannot parse format {value!r} ({exc}); allowed: "
                              "'sfix16_En8', 'ufix8_En0', 'ap_fixed<16,8>', 'Q7.8', 'UQ8.8' or "
                              "{word = 16, frac = 8, signed = true}; or a float/block format: "
                              f"{known_format_names()}") from None
    raise ConfigError(f"{_dotted(field_name)}: expected a format string or table, got {value!r}")

"""Reading hardware configs: TOML files and TOML-shaped mappings (:meth:`HardwareConfig.from_toml`,
:meth:`HardwareConfig.from_dict`), the presets shipped in ``fxpsim/hardware/presets/*.toml``
(:func:`preset_names`, :func:`preset`), and :func:`load_config`, which takes any of them.

:mod:`fxpsim.hardware.config` imports this module; the functions here that build a config import the
dataclass when called.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from importlib import resources
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .config_schema import _TOML_KEYS, ConfigError


def config_from_dict(cls, data: Mapping[str, Any], *, source: str = ""):
    """``cls`` built from a TOML-shaped mapping (sections) or flat field names; unknown keys raise
    (:meth:`HardwareConfig.from_dict`)."""
    where = f"{source}: " if source else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}a configuration must be a table/mapping, got {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    flat = {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key in _TOML_KEYS and (isinstance(value, Mapping) or key not in flat):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}[{key}] must be a table, got {value!r}")
            for sub, sub_value in value.items():
                if sub not in _TOML_KEYS[key]:
                    raise ConfigError(f"{where}unknown key '{key}.{sub}'; allowed keys in [{key}]: "
                                      f"{', '.join(_TOML_KEYS[key])}")
                kwargs[_TOML_KEYS[key][sub]] = sub_value
        elif key in flat:
            kwargs[key] = value
        elif "." in key and key.split(".", 1)[0] in _TOML_KEYS and \
                key.split(".", 1)[1] in _TOML_KEYS[key.split(".", 1)[0]]:
            sec, sub = key.split(".", 1)
            kwargs[_TOML_KEYS[sec][sub]] = value
        else:
            raise ConfigError(f"{where}unknown key '{key}'; allowed: name, description, "
                              f"[{'], ['.join(_TOML_KEYS)}] (or flat field names)")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None


def config_from_toml(cls, path: str | os.PathLike):
    """``cls`` loaded from a TOML file; errors name the file and the key (:meth:`HardwareConfig.from_toml`)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"hardware config file not found: {path}")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a TOML text file (binary data)") from None
    if not data:
        raise ConfigError(f"{path}: the file sets nothing; an empty config is not the default config "
                          "(name a preset, e.g. 'tflite-int8', or set the keys you mean)")
    data.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return cls.from_dict(data, source=path)


# ----- presets -----------------------------------------------------------------------------------------
def preset_names() -> list[str]:
    """Names of the presets shipped in ``fxpsim/hardware/presets`` (file names without ``.toml``)."""
    files = resources.files("fxpsim.hardware.presets")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def preset(name: str) -> HardwareConfig:
    """Load a shipped preset by name, e.g. ``preset("tflite-int8")``."""
    from .config import HardwareConfig
    names = preset_names()
    if name not in names:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(names)}")
    text = resources.files("fxpsim.hardware.presets").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    data.setdefault("name", name)
    return HardwareConfig.from_dict(data, source=f"preset {name}")


def load_config(spec: "str | os.PathLike | HardwareConfig | Mapping") -> HardwareConfig:
    """A config from a preset name, a TOML path, a mapping or a :class:`HardwareConfig`."""
    from .config import HardwareConfig
    if isinstance(spec, HardwareConfig):
        return spec
    if isinstance(spec, Mapping):
        return HardwareConfig.from_dict(spec)
    spec_str = os.fspath(spec)
    if spec_str.endswith(".toml") or os.sep in spec_str or os.path.exists(spec_str):
        return HardwareConfig.from_toml(spec_str)
    return preset(spec_str)

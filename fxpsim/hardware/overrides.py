"""Per-node overrides of a :class:`~fxpsim.hardware.HardwareConfig` (its ``layers`` field): the read-only,
hashable :class:`LayerOverrides` table, the parsing of override tables (flat field names, dotted TOML names
or TOML sections) and the check that every selector matches a node of a graph.

A selector is a node name (``"0:conv2d"``), a run-order index (``"#3"``) or an op type (``"op:conv2d"``).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["LayerOverrides", "is_index", "flatten_overrides", "unmatched_selectors_message"]


class LayerOverrides(Mapping):
    """The per-node overrides of a :class:`HardwareConfig`: selector -> {field: value}, read-only and
    hashable (so the frozen config stays hashable)."""

    def __init__(self, items: tuple = ()):
        self._items = tuple((sel, tuple(ov)) for sel, ov in items)
        self._dict = {sel: dict(ov) for sel, ov in self._items}

    def __getitem__(self, key):
        return dict(self._dict[key])

    def get(self, key, default=None):
        return self._dict.get(key, default)

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)

    def __hash__(self):
        return hash(tuple((sel, tuple(sorted(ov.items(), key=lambda kv: kv[0]))) for sel, ov in self._dict.items()))

    def __eq__(self, other):
        if isinstance(other, Mapping):
            return {k: dict(v) for k, v in self.items()} == {k: dict(v) for k, v in other.items()}
        if isinstance(other, tuple) and not other:
            return not self._dict
        return NotImplemented

    def __repr__(self):
        return repr({k: dict(v) for k, v in self._dict.items()})


def is_index(sel: str) -> bool:
    return sel.startswith("#") and sel[1:].isdigit()


def flatten_overrides(ov: Mapping, where: str, fields, toml_keys, reverse, error) -> dict:
    """Per-node overrides as ``{field: value}`` from flat field names, dotted TOML names (``reverse`` maps them)
    or TOML sections (``{"accumulator": {"bits": 20}}``); unknown keys raise ``error`` naming ``where``. The
    values are validated by the config, against its base (:meth:`HardwareConfig.__post_init__`)."""
    flat: dict[str, Any] = {}
    for key, value in ov.items():
        if key in toml_keys and isinstance(value, Mapping):
            for sub, sub_value in value.items():
                if sub not in toml_keys[key]:
                    raise error(f"{where}: unknown key '{key}.{sub}'; allowed keys in [{key}]: "
                                f"{', '.join(toml_keys[key])}")
                flat[toml_keys[key][sub]] = sub_value
            continue
        name = reverse.get(key, key)
        if name not in fields:
            raise error(f"{where}: unknown key '{key}'; allowed: {', '.join(sorted(fields))} "
                        "(or dotted TOML names such as 'accumulator.bits')")
        flat[name] = value
    for name, value in flat.items():
        if value is None:
            raise error(f"{where}.{name}: an override needs a value (got None)")
    return flat


def unmatched_selectors_message(layers, graph) -> str | None:
    """The error message naming the selectors of ``layers`` that select no node of ``graph`` (None if all do)."""
    if not layers:
        return None
    nodes = list(graph.nodes)
    names, ops = {n.name for n in nodes}, {n.op for n in nodes}
    bad = [sel for sel in layers
           if not (sel[3:] in ops if sel.startswith("op:") else
                   int(sel[1:]) < len(nodes) if is_index(sel) else sel in names)]
    if not bad:
        return None
    return (f"{', '.join(f'layers.{json.dumps(b)}' for b in bad)}: select(s) no node of graph "
            f"{getattr(graph, 'name', '?')!r}; a selector is a node name ({', '.join(n.name for n in nodes)}), "
            f"'#<index>' (#0..#{len(nodes) - 1}) or 'op:<type>' ({', '.join(sorted(ops))})")

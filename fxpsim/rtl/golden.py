"""A golden-vector directory (:func:`fxpsim.rtl.export_vectors`) as :func:`fxpsim.rtl.compare` reads
it, and the RTL dump's files matched to its tensors (directories, ``tb_dense`` outputs, explicit mappings)."""
from __future__ import annotations

import json
import os
from typing import Mapping

import numpy as np

from .memfile import read_csv_codes, read_mem
from .vectors import MANIFEST, ROLE_ORDER, VECTORS_FORMAT


# ----------------------------------------------------------------------------------------- golden directory
class _Golden:
    def __init__(self, directory: str):
        self.dir = directory
        path = os.path.join(directory, MANIFEST)
        if not os.path.isdir(directory):
            raise ValueError(f"{directory}: golden vector directory not found")
        if not os.path.isfile(path):
            raise ValueError(f"{directory}: not a golden vector directory (no {MANIFEST}; write one with "
                             "fxpsim.rtl.export_vectors or 'fxpsim export-vectors')")
        try:
            with open(path, encoding="utf-8") as f:
                m = json.load(f)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(m, dict) or m.get("format") != VECTORS_FORMAT:
            raise ValueError(f"{path}: not an fxpsim golden-vector manifest")
        self.manifest = m
        self.nodes = {n["name"]: n for n in m["nodes"]}
        self.by_dir = {n["dir"]: n for n in m["nodes"]}
        self.keys: dict[str, dict] = {}          # "NN_node/stem" -> {"node", "role", "port", "files": {fmt: entry}}
        for e in m["files"]:
            if e.get("set") != "golden":
                continue
            d, base = os.path.split(e["path"])
            stem = base.rsplit(".", 1)[0]
            key = f"{d}/{stem}"
            k = self.keys.setdefault(key, {"node": e["node"], "role": e["role"], "port": e.get("port", 0),
                                           "stem": stem, "dir": d, "files": {}, "meta": e})
            k["files"][e["format"]] = e
        self._cache: dict = {}

    def order(self, key: str) -> tuple:
        k = self.keys[key]
        role = k["role"]
        return (self.nodes[k["node"]]["index"], ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER),
                k["port"] or 0, key)

    def golden_path(self, key: str) -> tuple[str, str]:
        files = self.keys[key]["files"]
        fmt = next(f for f in ("npy", "hex", "mem", "csv") if f in files)
        return os.path.join(self.dir, files[fmt]["path"]), fmt

    def array(self, key: str) -> np.ndarray:
        if key not in self._cache:
            path, fmt = self.golden_path(key)
            self._cache[key] = _read(path, fmt, self.keys[key]["meta"])
        return self._cache[key]

    def key_of(self, node: str, stem: str) -> str | None:
        n = self.nodes.get(node)
        if n is None:
            return None
        key = f"{n['dir']}/{stem}"
        return key if key in self.keys else None


def _read(path: str, fmt: str, meta: dict) -> np.ndarray:
    """An array of the golden tensor described by ``meta`` from ``path`` (ValueError naming the file)."""
    shape = tuple(meta["shape"])
    bits, signed = int(meta["bits"]), bool(meta["signed"])
    if not os.path.isfile(path):
        raise ValueError(f"{path}: file not found")
    if fmt == "npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable .npy file ({exc})") from None
        if bits == 0:
            return arr
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{path}: holds {arr.dtype} values; integer codes expected")
        if tuple(arr.shape) != shape:
            raise ValueError(f"{path}: shape {tuple(arr.shape)}, expected {shape} ({meta.get('layout', '')})")
        if arr.size:
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            if int(arr.min()) < lo or int(arr.max()) > hi:
                raise ValueError(f"{path}: values outside the {bits}-bit {'signed' if signed else 'unsigned'} "
                                 f"range [{lo}, {hi}] (width mismatch?)")
        return arr.astype(np.int64)
    if bits == 0:
        raise ValueError(f"{path}: float tensors are compared as .npy only")
    if fmt == "csv":
        return read_csv_codes(path, bits=bits, signed=signed, shape=shape)
    return read_mem(path, bits, signed, radix=2 if fmt == "mem" else 16, shape=shape)


def _word_line(path: str, fmt: str, flat: int) -> int | None:
    """1-based line of word ``flat`` in a text dump (None for .npy and arrays)."""
    if fmt not in ("hex", "mem", "csv"):
        return None
    comment = "#" if fmt == "csv" else "//"
    count = 0
    with open(path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            s = line.split(comment, 1)[0].strip()
            if not s:
                continue
            n = len(s.split(",")) if fmt == "csv" else 1
            if count + n > flat:
                return lineno
            count += n
    return None


def _fmt_of(path: str) -> str:
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    return ext if ext in ("mem", "csv", "npy") else "hex"


def _samefile(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _resolve(g: _Golden, rtl_dump) -> tuple[list, str]:
    """``[(golden key, rtl path, format)]`` and a description of the dump."""
    found = []
    if isinstance(rtl_dump, Mapping):
        for k, v in rtl_dump.items():
            key = _key_from_name(g, k)
            p = os.fspath(v)
            if not os.path.isfile(p):
                raise ValueError(f"{p}: RTL file for {k!r} not found")
            found.append((key, p, _fmt_of(p)))
        if not found:
            raise ValueError("the RTL mapping is empty: name at least one tensor")
        return found, f"{len(found)} file(s)"
    dump = os.fspath(rtl_dump)
    if not os.path.exists(dump):
        raise ValueError(f"{dump}: RTL dump not found (a directory, or a mapping tensor -> file)")
    if not os.path.isdir(dump):
        raise ValueError(f"{dump}: the RTL dump must be a directory (or a mapping tensor -> file)")
    for key, k in g.keys.items():
        if k["meta"]["bits"] == 0:
            continue
        for fmt in ("hex", "mem", "csv", "npy"):
            p = os.path.join(dump, k["dir"], f"{k['stem']}.{fmt}")
            if os.path.isfile(p) and not any(_samefile(p, os.path.join(g.dir, e["path"]))
                                             for e in k["files"].values()):
                found.append((key, p, fmt))
    for n in g.manifest["nodes"]:
        tb = n.get("tb_dense")
        if not tb:
            continue
        for role, fname in tb["outputs"].items():
            p = os.path.join(dump, tb["dir"], fname)
            if os.path.isfile(p):
                found.append((f"{n['dir']}/{role}", p, "hex"))
    direct = [f for f in ("acc_out.hex", "y_out.hex") if os.path.isfile(os.path.join(dump, f))]
    if direct:
        n = _tb_node_of(g, dump)
        for fname in direct:
            role = "accumulator" if fname == "acc_out.hex" else "output"
            p = os.path.join(dump, fname)
            if not any(_samefile(p, q) for _, q, _ in found):
                found.append((f"{n['dir']}/{role}", p, "hex"))
    if not found:
        first = next(iter(k for k in g.keys.values() if k["role"] == "output"), None)
        hint = f" (e.g. {first['dir']}/{first['stem']}.hex, or a tb_dense folder's acc_out.hex/y_out.hex)" \
            if first else ""
        raise ValueError(f"{dump}: no RTL files found for any golden tensor{hint}")
    return found, dump


def _tb_node_of(g: _Golden, dump: str) -> dict:
    tbs = [n for n in g.manifest["nodes"] if n.get("tb_dense")]
    for n in tbs:
        if _samefile(dump, os.path.join(g.dir, n["tb_dense"]["dir"])):
            return n
    parent = os.path.basename(os.path.dirname(os.path.abspath(dump)))
    hits = [n for n in tbs if n["dir"] == parent]
    if len(hits) == 1:
        return hits[0]
    env = os.path.join(dump, "params.env")
    if os.path.isfile(env):
        params = {}
        for line in open(env, encoding="ascii", errors="replace"):
            k, _, v = line.split("#", 1)[0].strip().partition("=")
            if v.strip().lstrip("-").isdigit():
                params[k.strip()] = int(v)
        hits = [n for n in tbs if all(params.get(p) == n["tb_dense"]["params"][p] for p in ("K", "M", "N"))]
        if len(hits) == 1:
            return hits[0]
    if len(tbs) == 1:
        return tbs[0]
    raise ValueError(f"{dump}: holds acc_out.hex/y_out.hex but it is not clear of which node; compare the golden "
                     f"directory itself, or name the files: {{'node/accumulator': ..., 'node/output': ...}}")


def _key_from_name(g: _Golden, k) -> str:
    if isinstance(k, tuple) and len(k) == 2:
        key = g.key_of(str(k[0]), str(k[1]))
        if key:
            return key
    elif isinstance(k, str):
        s = k.replace(os.sep, "/")
        for e in g.manifest["files"]:
            if e.get("set") == "golden" and s == e["path"]:
                d, base = os.path.split(e["path"])
                return f"{d}/{base.rsplit('.', 1)[0]}"
        if s in g.keys:
            return s
        for n in g.manifest["nodes"]:
            tb = n.get("tb_dense")
            if tb:
                for role, fname in tb["outputs"].items():
                    if s == f"{tb['dir']}/{fname}":
                        return f"{n['dir']}/{role}"
        node, _, stem = s.rpartition("/")
        key = g.key_of(node, stem) if node else None
        if key:
            return key
    examples = ", ".join(repr(f"{k['node']}/{k['stem']}") for k in list(g.keys.values())[-3:])
    raise ValueError(f"unknown tensor {k!r} in the RTL mapping; name tensors 'node/role' (e.g. {examples}) or "
                     "by a golden file path")

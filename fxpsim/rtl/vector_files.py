"""Writing golden-vector files (:func:`fxpsim.rtl.export_vectors`): :class:`_Writer` puts one array in every
requested format (``$readmemh``/``$readmemb`` with a header, ``.npy``, ``.csv``) and records its manifest
entry; the small helpers name nodes for file systems and Verilog, pick the code dtype of a width, and spell
out layouts and their word-index formulas.
"""
from __future__ import annotations

import os
import re
from typing import Sequence

import numpy as np

from .memfile import write_csv_codes, write_mem


# ----------------------------------------------------------------------------------------- small helpers
def _name(value) -> str:
    """An enum's value or the string itself."""
    return str(getattr(value, "value", value))


def _safe(name: str) -> str:
    """File-system-safe form of a node name."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    return s or "node"


def _sv_id(name: str) -> str:
    """A Verilog identifier for a node: ``FXP_`` + the name in upper case, other characters as ``_``."""
    return "FXP_" + re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).strip("_").upper()


def _bits_needed(arr) -> int:
    """Signed width that holds every value of ``arr`` (at least 2)."""
    a = np.asarray(arr)
    if not a.size:
        return 2
    lo, hi = int(a.min()), int(a.max())
    return max(2, max((-lo - 1).bit_length() if lo < 0 else 0, hi.bit_length()) + 1)


def _dtype_for(bits: int, signed: bool):
    for b, s, u in ((8, np.int8, np.uint8), (16, np.int16, np.uint16), (32, np.int32, np.uint32)):
        if bits <= b:
            return np.dtype(s if signed else u)
    return np.dtype(np.int64 if signed or bits < 64 else np.uint64)


def _word_formula(axes: Sequence[str], shape: Sequence[int]) -> str:
    """``word = (n*8 + h)*8 + w`` style index formula of a C-order array."""
    if not axes:
        return "word = 0"
    expr = axes[0]
    for a, d in zip(axes[1:], shape[1:]):
        expr = f"({expr})*{d} + {a}" if "+" in expr else f"{expr}*{d} + {a}"
    return f"word = {expr}"


def _quant_json(spec) -> dict | None:
    if spec is None or spec.scale is None:
        return None
    return {"scale": [float(v) for v in spec.scale], "zero_point": [int(v) for v in spec.zero_point],
            "axis": spec.axis}


def _activation_layout(per_sample: tuple, kind: str) -> tuple[str, list]:
    """Layout string and axis names of an activation [N, *per_sample]; kind 'k' (FC input), 'm' (FC output)."""
    if len(per_sample) == 1:
        return ("[N][K]", ["n", "k"]) if kind == "k" else ("[N][M]", ["n", "m"]) if kind == "m" else \
            ("[N][C]", ["n", "c"])
    if len(per_sample) == 3:
        return "NHWC", ["n", "h", "w", "c"]
    if not per_sample:
        return "[N]", ["n"]
    axes = ["n"] + [f"d{i}" for i in range(1, len(per_sample) + 1)]
    return "".join(f"[{a.upper()}]" for a in axes), axes


# ----------------------------------------------------------------------------------------- the writer
class _Writer:
    def __init__(self, directory: str, formats: tuple):
        self.dir = directory
        self.formats = formats
        self.files: list[dict] = []

    def tensor(self, rel_dir: str, stem: str, arr, *, node: str, node_index: int, role: str, tensor: str,
               bits: int, signed: bool, layout: str, axes: Sequence[str], quant=None, port=None,
               description: str = "", formats=None, extra_header: Sequence[str] = ()) -> list[dict]:
        """Write one array in every requested format; return the manifest entries."""
        arr = np.asarray(arr)
        is_float = arr.dtype.kind == "f"
        formats = ("npy",) if is_float else (formats or self.formats)
        os.makedirs(os.path.join(self.dir, rel_dir), exist_ok=True)
        formula = _word_formula(axes, arr.shape)
        head = [f"fxpsim golden vectors: node '{node}' (#{node_index}), role {role}, tensor '{tensor}'"]
        if description:
            head.append(description)
        if quant:
            head.append("quantization: real = scale * (code - zero_point); scale "
                        + (f"{quant['scale'][0]:.9g}" if len(quant['scale']) == 1 else
                           f"per channel (axis {quant['axis']}, {len(quant['scale'])} values: see manifest.json)")
                        + f", zero_point {quant['zero_point'][0] if len(set(quant['zero_point'])) == 1 else 'per channel'}")
        head += list(extra_header)
        entries = []
        for fmt in formats:
            rel = f"{rel_dir}/{stem}.{fmt}"
            path = os.path.join(self.dir, rel)
            if fmt in ("hex", "mem"):
                write_mem(path, arr, bits, signed, radix=16 if fmt == "hex" else 2, header="\n".join(head),
                          layout=f"{layout} row-major (C order, last index fastest), axes ({', '.join(axes)}): "
                                 f"{formula}")
            elif fmt == "npy":
                np.save(path, arr if is_float else arr.astype(_dtype_for(bits, signed)), allow_pickle=False)
            elif fmt == "csv":
                flat = arr.reshape(arr.shape[0], -1) if arr.ndim > 2 else arr
                write_csv_codes(path, flat, bits=bits, signed=signed,
                                header="\n".join(head + [f"rows: first axis; shape {tuple(arr.shape)}"]))
            entry = {"path": rel, "format": fmt, "node": node, "node_index": node_index, "role": role,
                     "tensor": tensor, "shape": [int(s) for s in arr.shape], "layout": layout, "axes": list(axes),
                     "bits": 0 if is_float else int(bits), "signed": bool(signed),
                     "dtype": "float32" if is_float else str(_dtype_for(bits, signed)), "quantization": quant,
                     "set": "golden"}
            if fmt in ("hex", "mem"):
                entry["radix"] = 16 if fmt == "hex" else 2
                entry["digits"] = -(-bits // 4) if fmt == "hex" else bits
            if port is not None:
                entry["port"] = port
            if description:
                entry["description"] = description
            self.files.append(entry)
            entries.append(entry)
        return entries

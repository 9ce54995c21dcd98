r"""Memory layouts of a tensor: element order, tiling, packing and addresses, described once and used both to
write a ``$readmemh``/``$readmemb`` file and to read it (or an RTL's dump of the same memory) back.

A :class:`Layout` says how the elements of a tensor with named axes (``("n", "h", "w", "c")``, the golden
vectors' ``axes``) become memory words:

* **tiles** ``{"c": 16}`` split an axis ``a`` of size ``n`` into ``a_tile`` (which block, ``ceil(n / 16)``
  values) and ``a`` (the position inside the block, 16 values); a block that runs past ``n`` is filled with
  ``pad`` codes, so every block takes the same number of words;
* **order** lists the axes, tile axes included, from the slowest to the fastest (``("c", "n", "h", "w")`` is
  channel-major); by default the tile axes come first, in the tensor's axis order, then the tensor's axes:
  ``tiles={"c": 16}`` on NHWC gives ``(c_tile, n, h, w, c)``, 16-channel blocks;
* **pack** elements of ``bits`` bits share one word of ``pack * bits`` bits: lane ``i`` (the ``i``-th element of
  the word in memory order) holds bits ``[i*bits, (i+1)*bits)`` when ``endian="little"`` (the first element in
  the low bits) and bits ``[(pack-1-i)*bits, (pack-i)*bits)`` when ``endian="big"``; the last word is filled
  up with ``pad`` codes.  Each lane holds the element's two's-complement code in ``bits`` bits;
* **address**: the word address of the first word; when given, the file starts with an ``@address`` line
  (hexadecimal word address, as ``$readmemh`` reads it);
* **radix** 16 (``$readmemh``, ``ceil(word_bits / 4)`` hex digits a word) or 2 (``$readmemb``, ``word_bits``
  binary digits); **per_line** words on a line, separated by one space.

So slot ``s`` of memory order is word ``address + s // pack``, lane ``s % pack``, and the slots enumerate the
ordered axes like nested loops (last one fastest): for tiled axis ``a`` the element coordinate is
``a_tile * tile + a``, a padding slot when that is ``>= n``.  :meth:`Layout.slots` returns that map, from which
both directions are computed.

Reading (:meth:`Layout.read`) takes what ``$readmemh`` takes of these files: ``//`` comments, blank lines,
``@address`` lines anywhere (each sets the address of the next word), several words on a line; it requires
every word of the tensor exactly once, with exactly the word's digits, and raises ``ValueError`` naming the
file and line for anything else (a malformed word, ``x``/``z`` digits: "undefined value", a word at an address
outside the tensor, an address written twice, a missing word, a header whose ``layout:`` line describes
another layout).  ``str(layout)`` is the layout's one-line description, ``Layout.parse`` reads it back.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from typing import Mapping, Sequence

import numpy as np

from .memfile import _check_bits, _check_fits, _check_signed, _int_codes, read_ascii_lines

__all__ = ["Layout"]

LAYOUT_MAGIC = "fxpsim layout"
_DIGITS = {16: frozenset("0123456789abcdefABCDEF"), 2: frozenset("01")}


def _int(v, what: str, lo: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"Layout: {what} must be an int, got {v!r}")
    if int(v) < lo:
        raise ValueError(f"Layout: {what} must be >= {lo}, got {v}")
    return int(v)


@dataclass(frozen=True)
class Layout:
    """How a tensor's elements are laid out as memory words (see the module docstring for the exact map).

    Parameters
    ----------
    order : sequence of str, optional
        Axes from the slowest to the fastest, tile axes (``"<axis>_tile"``) included; default: the tile axes,
        then the tensor's axes.
    tiles : mapping of str to int, optional
        Axis -> block size.
    pack : int
        Elements per word (1: one element a word).
    endian : {"little", "big"}
        Where the first element of a word sits: the low bits (little) or the high bits (big).
    radix : {16, 2}
    per_line : int
        Words written on one line.
    address : int, optional
        Word address of the first word (an ``@`` line first); ``None``: no address line, first word at 0.
    pad : int
        The code written into padding slots (tile remainders, the last word's free lanes).
    """

    order: tuple = ()
    tiles: tuple = ()
    pack: int = 1
    endian: str = "little"
    radix: int = 16
    per_line: int = 1
    address: int | None = None
    pad: int = 0

    def __post_init__(self):
        order = (self.order,) if isinstance(self.order, str) else self.order
        if not all(isinstance(a, str) and a for a in order):
            raise TypeError(f"Layout: order must be a sequence of axis names, got {self.order!r}")
        if len(set(order)) != len(order):
            raise ValueError(f"Layout: order names an axis twice: {tuple(order)}")
        tiles = tuple(self.tiles.items() if isinstance(self.tiles, Mapping) else self.tiles)
        if not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in tiles):
            raise TypeError(f"Layout: tiles must map axis names to block sizes, got {self.tiles!r}")
        tiles = tuple((a, _int(t, f"tile of axis {a!r}", 1)) for a, t in tiles)
        if len({a for a, _ in tiles}) != len(tiles):
            raise ValueError(f"Layout: tiles name an axis twice: {tiles}")
        object.__setattr__(self, "order", tuple(order))
        object.__setattr__(self, "tiles", tiles)
        _int(self.pack, "pack", 1)
        _int(self.per_line, "per_line", 1)
        if self.endian not in ("little", "big"):
            raise ValueError(f"Layout: endian must be 'little' or 'big', got {self.endian!r}")
        if isinstance(self.radix, (bool, np.bool_)) or self.radix not in (16, 2):
            raise ValueError(f"Layout: radix must be 16 ($readmemh) or 2 ($readmemb), got {self.radix!r}")
        if self.address is not None:
            _int(self.address, "address", 0)
        if isinstance(self.pad, (bool, np.bool_)) or not isinstance(self.pad, (int, np.integer)):
            raise TypeError(f"Layout: pad must be an int code, got {self.pad!r}")

    # ------------------------------------------------------------------------------------- description
    def __str__(self) -> str:
        parts = []
        if self.order:
            parts.append("order=" + ",".join(self.order))
        if self.tiles:
            parts.append("tiles=" + ",".join(f"{a}:{t}" for a, t in self.tiles))
        parts += [f"pack={self.pack}", f"endian={self.endian}", f"radix={self.radix}"]
        if self.per_line != 1:
            parts.append(f"per_line={self.per_line}")
        if self.address is not None:
            parts.append(f"address=0x{self.address:x}")
        if self.pad:
            parts.append(f"pad={self.pad}")
        return " ".join(parts)

    @classmethod
    def parse(cls, spec: str) -> "Layout":
        """The layout ``str(layout)`` describes: ``"order=c_tile,n,h,w,c tiles=c:16 pack=4 endian=big"``
        (any subset of the fields, in any order; integers in decimal or ``0x`` hex)."""
        if not isinstance(spec, str):
            raise TypeError(f"Layout.parse takes a string, got {spec!r}")
        names = {f.name for f in fields(cls)}
        kw: dict = {}
        for item in spec.split():
            key, sep, value = item.partition("=")
            if not sep or key not in names or key in kw:
                raise ValueError(f"Layout.parse: {item!r} in {spec!r}: expected NAME=VALUE once each with NAME in "
                                 f"{', '.join(sorted(names))}")
            try:
                if key == "order":
                    kw[key] = tuple(a for a in value.split(",") if a)
                elif key == "tiles":
                    kw[key] = tuple((a, int(t, 0)) for a, t in (p.split(":") for p in value.split(",") if p))
                elif key == "endian":
                    kw[key] = value
                else:
                    kw[key] = int(value, 0)
            except ValueError:
                raise ValueError(f"Layout.parse: bad value in {item!r} (spec {spec!r})") from None
        return cls(**kw)

    # ------------------------------------------------------------------------------------- the slot map
    def memory_axes(self, axes: Sequence[str]) -> tuple:
        """The axes of memory order, slowest first, for a tensor with ``axes``."""
        axes = tuple(axes)
        unknown = [a for a, _ in self.tiles if a not in axes]
        if unknown:
            raise ValueError(f"Layout: tiles name axis {unknown[0]!r}; the tensor's axes are {axes}")
        tiled = [a for a in axes if a in dict(self.tiles)]
        want = [f"{a}_tile" for a in tiled] + list(axes)
        if not self.order:
            return tuple(want)
        if sorted(self.order) != sorted(want):
            missing = sorted(set(want) - set(self.order))
            extra = sorted(set(self.order) - set(want))
            raise ValueError(f"Layout: order {self.order} must list each of {tuple(want)} once"
                             + (f" (missing {missing})" if missing else "") + (f" (unknown {extra})" if extra else ""))
        return self.order

    def slots(self, shape: Sequence[int], axes: Sequence[str]) -> np.ndarray:
        """Flat C-order index of the element in every slot of memory order (``-1``: padding), the length a
        multiple of :attr:`pack`."""
        shape = tuple(int(s) for s in shape)
        axes = tuple(axes)
        if len(axes) != len(shape):
            raise ValueError(f"Layout: {len(axes)} axis names {axes} for a tensor of shape {shape}")
        tiles = dict(self.tiles)
        size = dict(zip(axes, shape))
        mem = self.memory_axes(axes)

        def extent(name):
            if name.endswith("_tile") and name[:-5] in tiles:
                return -(-size[name[:-5]] // tiles[name[:-5]])
            return tiles.get(name, size[name])
        grid = np.indices(tuple(extent(a) for a in mem), dtype=np.int64).reshape(len(mem), -1)
        where = dict(zip(mem, grid))
        coords, valid = [], np.ones(grid.shape[1], dtype=bool)
        for a, n in zip(axes, shape):
            c = where[a] + (where[f"{a}_tile"] * tiles[a] if a in tiles else 0)
            valid &= c < n
            coords.append(np.where(c < n, c, 0))
        flat = np.ravel_multi_index(tuple(coords), shape) if shape else np.zeros(grid.shape[1], np.int64)
        out = np.where(valid, flat, -1).astype(np.int64)
        extra = -len(out) % self.pack
        return np.concatenate([out, np.full(extra, -1, np.int64)]) if extra else out

    def word_bits(self, bits: int) -> int:
        return self.pack * _check_bits(bits)

    def join(self, lanes: Sequence[int], bits: int) -> int:
        """One word from ``pack`` lane codes (memory order), each taken as its ``bits``-bit code."""
        mask, word = (1 << bits) - 1, 0
        for i, v in enumerate(lanes):
            pos = i if self.endian == "little" else self.pack - 1 - i
            word |= (int(v) & mask) << (pos * bits)
        return word

    def split(self, word: int, bits: int, signed: bool) -> list:
        """The ``pack`` lane values of one word (memory order), sign-extended when ``signed``."""
        mask, half = (1 << bits) - 1, 1 << (bits - 1)
        out = []
        for i in range(self.pack):
            pos = i if self.endian == "little" else self.pack - 1 - i
            v = (int(word) >> (pos * bits)) & mask
            out.append(v - (1 << bits) if signed and v >= half else v)
        return out

    # ------------------------------------------------------------------------------------- words
    def words(self, codes, bits: int, signed: bool, axes: Sequence[str] | None = None) -> list:
        """The words (Python ints, ``pack * bits`` bits each) of ``codes`` in memory order."""
        bits, signed = _check_bits(bits), _check_signed(signed)
        arr = _int_codes(codes)
        _check_fits(arr, bits, signed)
        _check_fits(np.array([self.pad], dtype=object), bits, signed, "Layout pad")
        axes = _axes(axes, arr.ndim)
        flat = arr.reshape(-1).tolist()
        slots = self.slots(arr.shape, axes).tolist()
        vals = [flat[s] if s >= 0 else self.pad for s in slots]
        return [self.join(vals[i:i + self.pack], bits) for i in range(0, len(vals), self.pack)]

    def unwords(self, words: Sequence[int], shape, bits: int, signed: bool,
                axes: Sequence[str] | None = None) -> np.ndarray:
        """The tensor of ``shape`` the ``words`` (memory order) hold: :meth:`words` inverted."""
        bits, signed = _check_bits(bits), _check_signed(signed)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        slots = self.slots(shape, _axes(axes, len(shape)))
        if len(words) * self.pack != len(slots):
            raise ValueError(f"Layout: {len(words)} words for a tensor of shape {shape} that takes "
                             f"{len(slots) // self.pack} in layout {self}")
        out = np.zeros(math.prod(shape), dtype=object)
        for w, word in enumerate(words):
            for i, v in enumerate(self.split(word, bits, signed)):
                s = slots[w * self.pack + i]
                if s >= 0:
                    out[s] = v
        return out.astype(np.uint64 if (not signed and bits == 64) else np.int64).reshape(shape)

    # ------------------------------------------------------------------------------------- files
    def write(self, path, codes, bits: int, signed: bool, axes: Sequence[str] | None = None,
              header: bool | str = True) -> str:
        """Write ``codes`` as a ``$readmemh``/``$readmemb`` file in this layout; returns ``path``.

        ``header``: ``True`` writes a ``//`` block (shape, axes, element bits, signedness, this layout,
        words) that :meth:`read` checks; a string adds its lines as comments; ``False``: words only.
        """
        arr = _int_codes(codes)
        axes = _axes(axes, arr.ndim)
        words = self.words(arr, bits, signed, axes)
        wb = self.word_bits(bits)
        spec = f"0{-(-wb // 4)}x" if self.radix == 16 else f"0{wb}b"
        lines = []
        if header:
            lines += [f"// {LAYOUT_MAGIC}", f"// shape: {tuple(int(s) for s in arr.shape)}",
                      f"// axes: {', '.join(axes)}", f"// bits: {bits}", f"// signed: {'yes' if signed else 'no'}",
                      f"// layout: {self}", f"// words: {len(words)} of {wb} bits"]
            if isinstance(header, str):
                lines += ["// " + s for s in header.splitlines()]
        if self.address is not None:
            lines.append(f"@{self.address:x}")
        text = [format(w, spec) for w in words]
        lines += [" ".join(text[i:i + self.per_line]) for i in range(0, len(text), self.per_line)]
        path = os.fspath(path)
        with open(path, "w", encoding="ascii", newline="\n") as f:
            f.write("\n".join(lines) + ("\n" if lines else ""))
        return path

    def read(self, path, shape, bits: int, signed: bool, axes: Sequence[str] | None = None) -> np.ndarray:
        """Read a file in this layout back into a tensor of ``shape`` (``ValueError`` naming the file and line
        for anything malformed, see the module docstring)."""
        bits, signed = _check_bits(bits), _check_signed(signed)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        axes = _axes(axes, len(shape))
        n_words = len(self.slots(shape, axes)) // self.pack
        path = os.fspath(path)
        wb = self.word_bits(bits)
        ndigits = -(-wb // 4) if self.radix == 16 else wb
        digits = _DIGITS[self.radix]
        base = self.address or 0
        lines = read_ascii_lines(path)
        at, seen = base, {}
        ours = next((ln.strip() for ln in lines if ln.strip()), "") == f"// {LAYOUT_MAGIC}"
        want = {"shape": str(shape), "bits": str(bits), "signed": "yes" if signed else "no", "layout": str(self)}
        for lineno, line in enumerate(lines, 1):
            body, _, comment = line.partition("//")
            where = f"{path}, line {lineno}"
            key, sep, value = comment.partition(":")
            if ours and sep and not body.strip() and key.strip() in want and value.strip() != want[key.strip()]:
                raise ValueError(f"{where}: the file states {key.strip()} {value.strip()!r}; the reader expects "
                                 f"{want[key.strip()]!r}")
            if "/*" in body or "*/" in body:
                raise ValueError(f"{where}: /* */ comments are not supported (use //)")
            for tok in body.split():
                if tok.startswith("@"):
                    if not tok[1:] or not _DIGITS[16].issuperset(tok[1:]):
                        raise ValueError(f"{where}: malformed address {tok!r} (expected @ and a hex word address)")
                    at = int(tok[1:], 16)
                    continue
                if re.fullmatch(r"[0-9a-fA-FxXzZ?]+", tok) and set(tok) & set("xXzZ?"):
                    raise ValueError(f"{path}: undefined value at line {lineno}: {tok!r} has x/z digits")
                if not digits.issuperset(tok):
                    kind = "hexadecimal" if self.radix == 16 else "binary"
                    raise ValueError(f"{where}: malformed word {tok!r}: not a {kind} number")
                if len(tok) != ndigits:
                    raise ValueError(f"{where}: {tok!r} has {len(tok)} digits; a {wb}-bit word ({self.pack} x {bits} "
                                     f"bits) takes exactly {ndigits}")
                v = int(tok, self.radix)
                if v >> wb:
                    raise ValueError(f"{where}: {tok!r} does not fit in {wb} bits")
                if not base <= at < base + n_words:
                    raise ValueError(f"{where}: word at address 0x{at:x}, outside the tensor's words "
                                     f"[0x{base:x}, 0x{base + n_words:x})")
                if at in seen:
                    raise ValueError(f"{where}: address 0x{at:x} written twice (first at line {seen[at][1]})")
                seen[at] = (v, lineno)
                at += 1
        if len(seen) != n_words:
            missing = next(a for a in range(base, base + n_words) if a not in seen)
            raise ValueError(f"{path}: {len(seen)} of the tensor's {n_words} words present; none at address "
                             f"0x{missing:x} (shape {shape}, layout {self})")
        return self.unwords([seen[a][0] for a in range(base, base + n_words)], shape, bits, signed, axes)


def _axes(axes, ndim: int) -> tuple:
    if axes is None:
        return tuple(f"d{i}" for i in range(ndim))
    if isinstance(axes, str):
        axes = tuple(a.strip() for a in axes.split(",")) if "," in axes else tuple(axes)
    axes = tuple(axes)
    if len(axes) != ndim or len(set(axes)) != ndim or not all(isinstance(a, str) and a for a in axes):
        raise ValueError(f"Layout: axes {axes!r} must name each of the tensor's {ndim} axes once")
    return axes

r"""Memory files for RTL testbenches: ``$readmemh`` / ``$readmemb`` words and plain CSV.

File format (what :func:`write_mem` writes and :func:`read_mem` reads)
--------------------------------------------------------------------
* ASCII text, ``\n`` line ends, one word per line, first word at address 0.
* A word is the value's two's-complement code in exactly ``bits`` bits (``v & (2**bits - 1)``),
  written with **exactly** ``ceil(bits / 4)`` lower-case hexadecimal digits (``radix=16``,
  zero-padded; the top digit holds only the ``bits % 4`` low bits when ``bits`` is not a multiple
  of 4) or **exactly** ``bits`` binary digits (``radix=2``).  No ``0x`` / ``'h`` prefix, no
  underscores, no sign.  Signed values are sign-extended from bit ``bits - 1`` when read.
* Arrays are flattened in C order (row-major, last index fastest): ``codes[i, j]`` of a
  ``(R, C)`` array is word ``i * C + j``.
* ``//`` starts a comment running to the end of the line (whole-line or after the word), as in
  Verilog.  Blank lines are ignored.
* The optional header (``header=True``, the default) is a block of comment lines first::

      // fxpsim memfile
      // shape: (8, 64)
      // layout: row-major (C order, last index fastest)
      // bits: 8
      // signed: yes
      // radix: 16
      // words: 512

  followed by any lines of the caller's ``header`` text, each prefixed with ``// ``.  A file
  starting with ``// fxpsim memfile`` has its ``bits``/``signed``/``radix``/``words`` lines
  checked against the reader's arguments and the number of words it holds.

``$readmemh`` / ``$readmemb`` read these files unchanged into a ``reg [bits-1:0] mem [0:words-1]``
(``$fdisplay(fd, "%h", r)`` of a ``bits``-wide register writes the same format, so simulator dumps
read back with :func:`read_mem`).  Not supported, and reported as errors by :func:`read_mem`:
``@address`` lines, several words on one line, ``/* */`` comments, ``_`` separators, ``0x`` prefixes,
and words of the right length holding ``x`` / ``z`` / ``?`` digits (an undefined register in a
simulator dump, ``xx`` or ``1X`` as ``$fdisplay("%h")`` prints it: "undefined value at line N").

CSV (:func:`write_csv_codes` / :func:`read_csv_codes`): decimal integers, a 1-D array one value per
line, a 2-D array one row per line with values separated by ``,``; ``#`` comment lines (the header
states the shape).
"""
from __future__ import annotations

import math
import os
import re

import numpy as np

__all__ = ["write_mem", "read_mem", "read_mem_header", "write_csv_codes", "read_csv_codes"]

MEM_MAGIC = "fxpsim memfile"
_RADIX_NAMES = {16: "hexadecimal", 2: "binary"}
_DIGITS = {16: frozenset("0123456789abcdefABCDEF"), 2: frozenset("01")}
_UNDEFINED = frozenset("xXzZ?")


# --------------------------------------------------------------------------- validation helpers

def read_ascii_lines(path) -> list:
    """The lines of a memory file, which must be ASCII text (else a ValueError naming the file, the line
    and the byte)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not an ASCII text file (byte {raw[e.start]:#04x})") from None
    return text.splitlines()

def _check_bits(bits) -> int:
    if isinstance(bits, (bool, np.bool_)) or not isinstance(bits, (int, np.integer)):
        raise TypeError(f"bits must be an int, got {bits!r}")
    if not 1 <= int(bits) <= 64:
        raise ValueError(f"bits must be in [1, 64], got {bits}")
    return int(bits)


def _check_signed(signed) -> bool:
    if not isinstance(signed, (bool, np.bool_)):
        raise TypeError(f"signed must be True or False, got {signed!r}")
    return bool(signed)


def _check_radix(radix) -> int:
    if isinstance(radix, (bool, np.bool_)) or radix not in _RADIX_NAMES:
        raise ValueError(f"radix must be 16 ($readmemh) or 2 ($readmemb), got {radix!r}")
    return int(radix)


def _value_range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _range_text(bits: int, signed: bool) -> str:
    lo, hi = _value_range(bits, signed)
    return f"{bits}-bit {'signed' if signed else 'unsigned'} range [{lo}, {hi}]"


def _int_codes(codes, name: str = "codes") -> np.ndarray:
    """``codes`` as an integer ndarray (numpy integer dtype, or object holding Python ints)."""
    if not isinstance(codes, np.ndarray) and not np.isscalar(codes):
        # Python ints beyond int64 (e.g. 2**63 in a 64-bit unsigned word) would make numpy pick float64
        obj = np.array(codes, dtype=object)
        if obj.size and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                            for v in obj.flat):
            return obj if any(not -(1 << 63) <= int(v) < (1 << 63) for v in obj.flat) else obj.astype(np.int64)
    arr = np.asarray(codes)
    if arr.dtype.kind in "iu":
        return arr
    if arr.size == 0 and arr.dtype.kind in "fO":      # an empty list
        return arr.astype(np.int64)
    if arr.dtype.kind == "O":
        for v in arr.flat:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must hold integers, got {type(v).__name__} {v!r}")
        return arr
    raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")


def _first_misfit(arr: np.ndarray, bits: int, signed: bool):
    """Index and value of the first element (C order) outside the ``bits``-bit range, or None."""
    lo, hi = _value_range(bits, signed)
    flat = arr.reshape(-1)
    if arr.dtype.kind == "O":
        for i, v in enumerate(flat.tolist()):
            if not lo <= int(v) <= hi:
                return i, int(v)
        return None
    info = np.iinfo(arr.dtype)
    bad = np.zeros(flat.shape, dtype=bool)
    if lo > int(info.min):
        bad |= flat < lo
    if hi < int(info.max):
        bad |= flat > hi
    hits = np.flatnonzero(bad)
    return (int(hits[0]), int(flat[hits[0]])) if hits.size else None


def _check_fits(arr: np.ndarray, bits: int, signed: bool, name: str = "codes") -> None:
    misfit = _first_misfit(arr, bits, signed)
    if misfit is not None:
        i, v = misfit
        where = f"[{', '.join(str(int(j)) for j in np.unravel_index(i, arr.shape))}]" if arr.ndim else ""
        raise ValueError(f"{name}{where} = {v} does not fit the {_range_text(bits, signed)}")


def _header_lines(shape, layout, bits, signed, radix, count, extra) -> list:
    lines = [MEM_MAGIC, f"shape: {tuple(int(s) for s in shape)}",
             f"layout: {layout or 'row-major (C order, last index fastest)'}"]
    if bits is not None:
        lines.append(f"bits: {bits}")
    if signed is not None:
        lines.append(f"signed: {'yes' if signed else 'no'}")
    if radix is not None:
        lines.append(f"radix: {radix}")
    lines.append(f"words: {count}")
    if isinstance(extra, str):
        lines += extra.splitlines()
    return lines


# --------------------------------------------------------------------------- $readmemh / $readmemb
def write_mem(path, codes, bits: int, signed: bool, radix: int = 16, header=True,
              layout: str | None = None) -> str:
    """Write integer codes as a ``$readmemh`` (``radix=16``) or ``$readmemb`` (``radix=2``) file.

    One word per line, in C order, each the two's-complement code in ``bits`` bits: exactly
    ``ceil(bits / 4)`` zero-padded lower-case hex digits (``-1`` in 12 bits is ``fff``, ``5`` in 9
    bits is ``005``) or exactly ``bits`` binary digits.  See the module docstring for the header.

    Parameters
    ----------
    path : str or os.PathLike
    codes : array_like of int
        Any shape (numpy integer dtype, or Python ints); flattened in C order.
    bits : int
        Word width, 1 to 64.
    signed : bool
        Whether the codes are two's-complement signed (range ``[-2**(bits-1), 2**(bits-1) - 1]``)
        or unsigned (``[0, 2**bits - 1]``).
    radix : {16, 2}
    header : bool or str
        ``True``: the ``//`` header block (shape, layout, bits, signedness, radix, word count);
        ``False``: words only; a string: the header block followed by the string's lines as comments.
    layout : str, optional
        Text for the header's ``layout:`` line, e.g. ``"[M][K] row-major"``.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    ValueError
        Naming the first element (C order) that does not fit ``bits`` (e.g. ``codes[1, 3] = 200 does
        not fit the 8-bit signed range [-128, 127]``); nothing is written then.
    """
    bits, signed, radix = _check_bits(bits), _check_signed(signed), _check_radix(radix)
    arr = _int_codes(codes)
    _check_fits(arr, bits, signed)
    mask = (1 << bits) - 1
    spec = f"0{-(-bits // 4)}x" if radix == 16 else f"0{bits}b"
    lines = []
    if header:
        lines += ["// " + s if s else "//"
                  for s in _header_lines(arr.shape, layout, bits, signed, radix, arr.size, header)]
    lines += [format(int(v) & mask, spec) for v in arr.reshape(-1).tolist()]
    path = os.fspath(path)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    return path


def _parse_header(comments: list) -> dict:
    """The ``key: value`` lines of a leading comment block that starts with :data:`MEM_MAGIC`."""
    if not comments or comments[0].strip() != MEM_MAGIC:
        return {}
    info: dict = {}
    for text in comments[1:]:
        key, sep, value = text.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep:
            continue
        try:
            if key == "shape":
                info["shape"] = tuple(int(s) for s in re.findall(r"-?\d+", value))
            elif key in ("bits", "radix", "words"):
                info[key] = int(value)
            elif key == "signed":
                info["signed"] = value.lower() in ("yes", "true", "1")
            elif key == "layout":
                info["layout"] = value
        except ValueError:
            continue
    return info


def _leading_comments(lines) -> list:
    """Text of the ``//`` comment lines before the first word (blank lines skipped)."""
    out = []
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if not s.startswith("//"):
            break
        out.append(s[2:].strip())
    return out


def read_mem_header(path) -> dict:
    """The header of a file written by :func:`write_mem`: keys ``shape`` (tuple), ``layout`` (str),
    ``bits``, ``radix``, ``words`` (int) and ``signed`` (bool), those present; ``{}`` when the file
    does not start with the ``// fxpsim memfile`` block."""
    with open(os.fspath(path), encoding="ascii", errors="replace") as f:
        return _parse_header(_leading_comments(f))


def read_mem(path, bits: int, signed: bool, radix: int = 16, shape=None) -> np.ndarray:
    """Read a ``$readmemh`` / ``$readmemb`` file of one ``bits``-bit word per line.

    The exact format is :func:`write_mem`'s (module docstring): every word has exactly
    ``ceil(bits / 4)`` hex digits (either case) or ``bits`` binary digits and a value below
    ``2**bits``; ``//`` comments and blank lines are skipped.  Signed words are sign-extended.

    Parameters
    ----------
    path : str or os.PathLike
    bits : int
        Word width, 1 to 64.
    signed : bool
    radix : {16, 2}
    shape : tuple of int, optional
        Reshape the words (C order) to this shape; their number must match.  Default: 1-D.

    Returns
    -------
    ndarray of int64
        (uint64 for unsigned 64-bit words.)

    Raises
    ------
    ValueError
        With the file name and line number: a malformed word (not a number of that radix, several
        words on a line, an ``@address`` line, a ``/* */`` comment), a wrong digit count, a word that
        does not fit ``bits``, ``x``/``z`` digits ("undefined value at line N"); a word count that does
        not match ``shape`` or the ``words:`` line of an fxpsim header, or header ``bits``/``signed``/
        ``radix`` lines that contradict the arguments.
    """
    bits, signed, radix = _check_bits(bits), _check_signed(signed), _check_radix(radix)
    path = os.fspath(path)
    ndigits = -(-bits // 4) if radix == 16 else bits
    digits, rname = _DIGITS[radix], _RADIX_NAMES[radix]
    limit = 1 << bits
    half = 1 << (bits - 1)
    lines = read_ascii_lines(path)
    info = _parse_header(_leading_comments(lines))
    for key, want in (("bits", bits), ("signed", signed), ("radix", radix)):
        if key in info and info[key] != want:
            raise ValueError(f"{path}: the header states {key}: {info[key]} but read_mem was called with "
                             f"{key}={want}")
    values = []
    for lineno, line in enumerate(lines, 1):
        word = line.split("//", 1)[0].strip()
        if not word:
            continue
        where = f"{path}, line {lineno}"
        if word.startswith("@"):
            raise ValueError(f"{where}: address line {word!r}: @address lines are not supported "
                             "(one word per line from address 0)")
        if "/*" in word or "*/" in word:
            raise ValueError(f"{where}: /* */ comments are not supported (use //)")
        parts = word.split()
        if len(parts) != 1:
            raise ValueError(f"{where}: {len(parts)} words on one line ({word!r}); one word per line expected")
        if _UNDEFINED.intersection(word) and digits.union(_UNDEFINED).issuperset(word):
            if len(word) == ndigits:
                raise ValueError(f"{path}: undefined value at line {lineno}: {word!r} has x/z digits "
                                 "(an unknown or undriven value in the simulator's output)")
            raise ValueError(f"{where}: malformed word {word!r}: expected {ndigits} {rname} digits")
        if not digits.issuperset(word):
            raise ValueError(f"{where}: malformed word {word!r}: not a {rname} number")
        if len(word) != ndigits:
            raise ValueError(f"{where}: {word!r} has {len(word)} digits; a {bits}-bit word takes exactly "
                             f"{ndigits} {rname} digits")
        v = int(word, radix)
        if v >= limit:
            raise ValueError(f"{where}: {word!r} = {v} does not fit in {bits} bits")
        values.append(v - limit if signed and v >= half else v)
    if "words" in info and info["words"] != len(values):
        raise ValueError(f"{path}: the header states {info['words']} words but the file holds {len(values)}")
    dtype = np.uint64 if (not signed and bits == 64) else np.int64
    out = np.array(values, dtype=dtype)
    if shape is not None:
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if math.prod(shape) != out.size:
            raise ValueError(f"{path}: {out.size} words do not fill shape {shape} ({math.prod(shape)} words)")
        out = out.reshape(shape)
    return out


# --------------------------------------------------------------------------- CSV
def write_csv_codes(path, codes, *, bits: int | None = None, signed: bool = True, header=True) -> str:
    """Write a 0-, 1- or 2-D integer array as decimal CSV.

    A 1-D array is one value per line, a 2-D array one row per line (values separated by ``,``,
    no spaces).  ``header=True`` writes ``# fxpsim codes`` and ``# shape: (R, C)`` comment lines
    first (plus the lines of a string ``header``).  With ``bits`` the values are checked against the
    ``bits``-bit signed/unsigned range first (ValueError naming the first misfit).

    Returns
    -------
    str
        ``path``.
    """
    arr = _int_codes(codes)
    if arr.ndim > 2:
        raise ValueError(f"write_csv_codes writes 1-D or 2-D arrays, got shape {arr.shape}")
    if bits is not None:
        _check_fits(arr, _check_bits(bits), _check_signed(signed))
    lines = []
    if header:
        lines += ["# fxpsim codes", f"# shape: {tuple(int(s) for s in arr.shape)}"]
        if isinstance(header, str):
            lines += ["# " + s for s in header.splitlines()]
    rows = arr.reshape(-1, 1) if arr.ndim < 2 else arr
    lines += [",".join(str(int(v)) for v in row) for row in rows.tolist()]
    path = os.fspath(path)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    return path


def read_csv_codes(path, *, bits: int | None = None, signed: bool = True, shape=None) -> np.ndarray:
    """Read decimal integer CSV (``#`` comments and blank lines skipped) as a 2-D int64 array.

    Every row must have the same number of values.  With ``bits`` every value must fit the
    ``bits``-bit signed/unsigned range; ``shape`` reshapes the values (C order).  Errors name the file
    and line.
    """
    path = os.fspath(path)
    if bits is not None:
        bits, signed = _check_bits(bits), _check_signed(signed)
        lo, hi = _value_range(bits, signed)
    rows, width = [], None
    with open(path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            where = f"{path}, line {lineno}"
            row = []
            for field in s.split(","):
                field = field.strip()
                if not re.fullmatch(r"[+-]?\d+", field):
                    raise ValueError(f"{where}: malformed value {field!r}: not a decimal integer")
                v = int(field)
                if bits is not None and not lo <= v <= hi:
                    raise ValueError(f"{where}: {v} does not fit the {_range_text(bits, signed)}")
                row.append(v)
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise ValueError(f"{where}: {len(row)} values; the rows above have {width}")
            rows.append(row)
    dtype = np.uint64 if (bits == 64 and not signed) else np.int64
    try:
        out = np.array(rows, dtype=dtype).reshape(len(rows), width or 0)
    except OverflowError:
        raise ValueError(f"{path}: values do not fit {np.dtype(dtype)}") from None
    if shape is not None:
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if math.prod(shape) != out.size:
            raise ValueError(f"{path}: {out.size} values do not fill shape {shape}")
        out = out.reshape(shape)
    return out

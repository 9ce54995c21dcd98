r"""Reading a simulator's VCD dump (IEEE 1364 §18 value change dump, as Icarus, Verilator, Questa, Xcelium and
cocotb's simulators write it): the signals a testbench names, their values over time, and the words a
valid/ready stream transferred, for :func:`fxpsim.rtl.compare_arrays`.

A VCD file has a header (``$timescale``, ``$scope``/``$upscope``, one ``$var <type> <width> <id> <name>
[<range>] $end`` per signal) and then value changes: ``#<t>`` sets the time, ``0<id>``/``1<id>``/``x<id>``/
``z<id>`` change a 1-bit signal, ``b<bits> <id>`` a vector (fewer digits than the width are extended on the left
with ``0``, or with ``x``/``z`` when the leftmost digit is one), ``r<real> <id>`` a real. ``$dumpvars``,
``$dumpall``, ``$dumpon`` blocks list values; ``$dumpoff`` makes every signal undefined until ``$dumpon``.

Names are the dotted scope path (``tb.dut.y_data``); :meth:`Vcd.signal` also takes a unique suffix
(``dut.y_data`` or ``y_data``). A value is a non-negative ``int`` (the bits as written, unsigned) or ``None``
when any bit is ``x``/``z``; :meth:`Vcd.signed` reads a code as two's complement.

Sampling at a clock edge
------------------------
A flip-flop clocked at time :math:`t` samples the values in effect just before :math:`t`: the last change at a
time :math:`< t` (changes *at* :math:`t` are what the edge caused). So a stream beat is transferred at each rising
edge :math:`t` of the clock (a change ``0 -> 1``) where ``valid`` (and ``ready``, if named) were 1 just before
:math:`t`, and its word is ``data`` just before :math:`t`; ``last`` (``tlast``) ends a packet. An undefined
(``x``/``z``) ``valid``, ``ready`` or transferred ``data`` raises :class:`ValueError` naming the signal and time.

Bounds: the file is read line by line; only the named signals' changes are kept (all when ``signals`` is
None), at most ``max_changes`` of them (default 50 million), and a vector value may not have more digits than
its declared width: a damaged or hostile file raises :class:`ValueError` naming the file and line, never a
``MemoryError``.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["read_vcd", "Vcd", "VcdSignal"]

MAX_CHANGES = 50_000_000
_MAX_WIDTH = 1 << 16
_SCALAR = frozenset("01xzXZ")


@dataclass(frozen=True)
class VcdSignal:
    """One ``$var``: its dotted name, declared width (bits), kind (``wire``, ``reg``, ...) and id code."""

    name: str
    width: int
    kind: str
    code: str


@dataclass
class Vcd:
    """A parsed VCD dump (:func:`read_vcd`): its signals and their value changes.

    Attributes
    ----------
    path : str
    timescale : str
        The ``$timescale`` text (e.g. ``"1ps"``), ``""`` when absent; times are integers in that unit.
    signals : dict
        Dotted name -> :class:`VcdSignal`, every ``$var`` of the header.
    end_time : int
        The last ``#<t>`` of the file.
    """

    path: str
    timescale: str
    signals: dict
    end_time: int
    _changes: dict = field(default_factory=dict, repr=False)   # code -> (times list, values list)

    def signal(self, name: str) -> VcdSignal:
        """The signal ``name``: its full dotted name or a suffix of it that names exactly one signal."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.path}: a signal name is a non-empty str, got {name!r}")
        if name in self.signals:
            return self.signals[name]
        hits = [s for n, s in self.signals.items() if n.endswith("." + name)]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            near = sorted(self.signals)[:12]
            raise ValueError(f"{self.path}: no signal {name!r} (signals: {', '.join(near)}"
                             f"{', ...' if len(self.signals) > 12 else ''})")
        raise ValueError(f"{self.path}: signal {name!r} is ambiguous: {', '.join(sorted(s.name for s in hits))}")

    def changes(self, name: str) -> tuple[np.ndarray, list]:
        """``(times, values)`` of ``name``'s changes in file order (int64 times; ints, ``None`` for x/z, floats for
        reals)."""
        sig = self.signal(name)
        if sig.code not in self._changes:
            raise ValueError(f"{self.path}: signal {sig.name!r} was not read (read_vcd(..., signals=...) "
                             f"did not name it)")
        times, values = self._changes[sig.code]
        return np.asarray(times, dtype=np.int64), list(values)

    def value_before(self, name: str, t: int):
        """The value of ``name`` in effect just before time ``t`` (its last change at a time < ``t``; ``None`` if
        none)."""
        sig = self.signal(name)
        times, values = self._changes.get(sig.code, ([], []))
        i = bisect.bisect_left(times, t)
        return values[i - 1] if i else None

    def rising_edges(self, clock: str) -> np.ndarray:
        """The times at which ``clock`` changes from 0 to 1."""
        times, values = self.changes(clock)
        prev = None
        out = []
        for t, v in zip(times.tolist(), values):
            if prev == 0 and v == 1:
                out.append(t)
            prev = v
        return np.asarray(out, dtype=np.int64)

    def beats(self, clock: str, data: str, valid: str, ready: str | None = None,
              last: str | None = None) -> list[np.ndarray]:
        """The words a valid/ready stream transferred, one int64 array per packet (split after each beat with
        ``last`` = 1; one packet when ``last`` is None), sampled at ``clock``'s rising edges (see the module)."""
        names = {"data": data, "valid": valid, "ready": ready, "last": last}
        sigs = {k: self.signal(v) for k, v in names.items() if v is not None}
        if sigs["data"].width > 63:
            raise ValueError(f"{self.path}: {sigs['data'].name} is {sigs['data'].width} bits; beats() returns "
                             f"int64 words (at most 63 bits)")
        series = {}
        for k, s in sigs.items():
            if s.code not in self._changes:
                raise ValueError(f"{self.path}: signal {s.name!r} was not read")
            series[k] = self._changes[s.code]
        pos = dict.fromkeys(series, 0)
        cur = dict.fromkeys(series)
        packets, words = [], []
        for t in self.rising_edges(clock).tolist():
            for k, (times, values) in series.items():      # advance to the last change before t
                i = pos[k]
                while i < len(times) and times[i] < t:
                    cur[k] = values[i]
                    i += 1
                pos[k] = i
            fire = [cur["valid"]] + ([cur["ready"]] if "ready" in cur else [])
            for k, v in zip(("valid", "ready"), fire):
                if v is None or isinstance(v, float):
                    raise ValueError(f"{self.path}: {sigs[k].name} is undefined (x/z) at the rising edge of "
                                     f"{clock} at t={t}")
            if not all(fire):
                continue
            word = cur["data"]
            if word is None or isinstance(word, float):
                raise ValueError(f"{self.path}: {sigs['data'].name} is undefined (x/z) in a beat at t={t}")
            words.append(word)
            if "last" in cur:
                if cur["last"] is None:
                    raise ValueError(f"{self.path}: {sigs['last'].name} is undefined (x/z) in a beat at t={t}")
                if cur["last"]:
                    packets.append(np.asarray(words, dtype=np.int64))
                    words = []
        if words or not packets:
            packets.append(np.asarray(words, dtype=np.int64))
        return packets

    @staticmethod
    def signed(value: int, width: int) -> int:
        """``value`` (``width`` bits, as read) as a two's-complement integer."""
        return value - (1 << width) if value >> (width - 1) & 1 else value


def read_vcd(path, signals=None, *, max_changes: int = MAX_CHANGES) -> Vcd:
    """Parse the VCD file ``path``, keeping the value changes of ``signals`` (names or suffixes, see
    :meth:`Vcd.signal`; every signal when None)."""
    path = os.fspath(path)
    if not isinstance(max_changes, int) or isinstance(max_changes, bool) or max_changes < 1:
        raise ValueError(f"max_changes must be a positive int, got {max_changes!r}")
    try:
        f = open(path, encoding="ascii", errors="strict", newline=None)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the VCD file ({exc.strerror})") from None
    with f:
        return _Parser(path, f, max_changes).parse(signals)


class _Parser:
    def __init__(self, path, f, max_changes):
        self.path, self.f, self.max_changes = path, f, max_changes
        self.lineno = 0
        self.tokens = self._tokens()

    def _err(self, what: str) -> ValueError:
        return ValueError(f"{self.path} line {self.lineno}: {what}")

    def _tokens(self):
        try:
            for line in self.f:
                self.lineno += 1
                yield from line.split()
        except UnicodeDecodeError:
            raise self._err("not a VCD file (non-ASCII bytes)") from None

    def _until_end(self, what: str, limit: int = 64) -> list:
        out = []
        for tok in self.tokens:
            if tok == "$end":
                return out
            if len(out) > limit:
                raise self._err(f"{what} without $end")
            out.append(tok)
        raise self._err(f"the file ends inside {what}")

    def parse(self, wanted) -> Vcd:
        scope, signals, by_code, timescale = [], {}, {}, ""
        for tok in self.tokens:
            if tok == "$enddefinitions":
                self._until_end(tok)
                break
            if tok == "$scope":
                body = self._until_end(tok)
                if len(body) != 2:
                    raise self._err(f"$scope needs a kind and a name, got {' '.join(body)!r}")
                scope.append(body[1])
            elif tok == "$upscope":
                self._until_end(tok)
                if not scope:
                    raise self._err("$upscope outside any $scope")
                scope.pop()
            elif tok == "$var":
                body = self._until_end(tok)
                if len(body) < 4 or not body[1].isdigit() or not 1 <= int(body[1]) <= _MAX_WIDTH:
                    raise self._err(f"$var needs: type width(1..{_MAX_WIDTH}) id name, got {' '.join(body)!r}")
                ref = body[3] + (body[4] if len(body) > 4 and ":" not in body[4] else "")   # a bit select: bus[3]
                name = ".".join(scope + [ref])
                sig = VcdSignal(name, int(body[1]), body[0], body[2])
                if by_code.get(sig.code, sig).width != sig.width:
                    raise self._err(f"id {sig.code!r} is declared with two widths")
                signals[name] = sig
                by_code.setdefault(sig.code, sig)
            elif tok == "$timescale":
                timescale = "".join(self._until_end(tok))
            elif tok.startswith("$"):
                self._until_end(tok, limit=100_000)     # $date, $version, $comment
            else:
                raise self._err(f"unexpected {tok[:40]!r} in the header")
        else:
            raise self._err("no $enddefinitions: not a VCD file, or truncated in its header")
        vcd = Vcd(self.path, timescale, signals, 0)
        keep = set(by_code) if wanted is None else {vcd.signal(n).code for n in _names(wanted)}
        vcd._changes = {c: ([], []) for c in keep}
        self._changes(vcd, by_code, keep)
        return vcd

    def _changes(self, vcd, by_code, keep):
        t, count, off = 0, 0, False
        for tok in self.tokens:
            c = tok[0]
            if c == "#":
                try:
                    nt = int(tok[1:])
                except ValueError:
                    raise self._err(f"bad time {tok[:40]!r}") from None
                if nt < t:
                    raise self._err(f"time goes backwards ({nt} after {t})")
                t = nt
                continue
            if c == "$":
                if tok == "$dumpoff":
                    off = True
                elif tok in ("$dumpon", "$dumpvars", "$dumpall"):
                    off = False if tok == "$dumpon" else off
                elif tok != "$end":
                    self._until_end(tok, limit=100_000)
                continue
            if c in _SCALAR:
                code, value = tok[1:], (None if c in "xzXZ" else int(c))
            elif c in "bB":
                code = next(self.tokens, None)
                if code is None:
                    raise self._err("the file ends inside a vector value")
                value = self._vector(tok[1:], by_code.get(code))
            elif c in "rR":
                code = next(self.tokens, None)
                try:
                    value = float(tok[1:])
                except ValueError:
                    raise self._err(f"bad real value {tok[:40]!r}") from None
            else:
                raise self._err(f"unexpected {tok[:40]!r}")
            if code not in by_code:
                raise self._err(f"value for undeclared id {str(code)[:40]!r}")
            if code in keep:
                count += 1
                if count > self.max_changes:
                    raise self._err(f"more than {self.max_changes} value changes of the kept signals "
                                    f"(read_vcd(..., signals=[...]) keeps fewer)")
                times, values = vcd._changes[code]
                times.append(t)
                values.append(None if off else value)
        vcd.end_time = t

    def _vector(self, digits: str, sig):
        if sig is None:
            return None   # the caller reports the undeclared id
        if not digits or len(digits) > sig.width:
            raise self._err(f"vector value of {len(digits)} digits for the {sig.width}-bit {sig.name}")
        low = digits.lower()
        if "x" in low or "z" in low:
            return None
        try:
            return int(low, 2)
        except ValueError:
            raise self._err(f"bad vector value b{digits[:40]!r} for {sig.name}") from None


def _names(wanted) -> list:
    if isinstance(wanted, str):
        return [wanted]
    names = list(wanted)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"signals must be names (str), got {names!r}")
    return names

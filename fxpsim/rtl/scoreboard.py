r"""A node's golden vectors as valid/ready streams: what to drive into a DUT and what to expect back, checked word
by word as the DUT produces it (the simulator-independent half of :mod:`fxpsim.rtl.cocotb_bench`).

Port convention (:class:`StreamPorts`, every name configurable)
---------------------------------------------------------------
* One **stream** per golden tensor (:class:`Stream`): a data signal, a ``valid`` and a ``ready`` signal.  A
  word moves at a rising clock edge where ``valid`` and ``ready`` are both 1; the source keeps data and
  ``valid`` until it moves.  ``ready=None``: the sink always takes the word (an input the DUT never stalls, an
  output tap such as a MAC trace).  Streams named ``"<prefix>"`` expand to ``<prefix>_data``,
  ``<prefix>_valid``, ``<prefix>_ready``.
* **Inputs** the bench drives, one role each: ``input`` (the node's input codes, e.g. ``[N][K]``), ``weights``
  (``[M][K]``, ``OHWI``, ...), ``bias``, ``multiplier``, ``shift``; the words in the stream's :class:`Layout`
  (default: C order, one element a word, the value sign-extended to the data signal's width).
* **Outputs** the bench takes and checks: ``output``, ``accumulator`` (the value the requantizer saw) and
  ``mac_trace`` (the running accumulator after every add: ``S`` words per output element, in the outputs' C
  order, ``S`` the golden trace's columns; the words of the outputs the export traced with ``mac_trace=`` are
  checked, the others only counted).  Two outputs may share one handshake (the same ``valid``/``ready``,
  different data signals): their words of one beat are checked together, in dataflow order.
* **Scalars**: signals held at the node's values from the manifest's ``mac`` entry (``x_zp``, ``out_zp``,
  ``act_min``, ``act_max``, ``w_zp``, ``acc_bits``, ...) for the whole run.

The defaults are ``examples/rtl/dense_stream.v``'s ports.  :class:`Scoreboard` keeps the words received so
far; at the first word that differs from the golden one it raises :class:`StreamMismatch`, whose text is
``fxpsim compare``'s report (:func:`fxpsim.rtl.compare.compare_arrays`) over the elements received up to that
word: the node, the element, expected and received values, the pattern and the MAC sequence of the element.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .compare import compare_arrays
from .compare_results import CompareResult
from .golden import _Golden
from .layout import Layout

__all__ = ["Stream", "StreamPorts", "Scoreboard", "StreamMismatch", "ScoreboardError", "INPUT_ROLES",
           "OUTPUT_ROLES", "dense_parameters", "conv_parameters"]

INPUT_ROLES = ("input", "weights", "bias", "multiplier", "shift")
OUTPUT_ROLES = ("accumulator", "output", "mac_trace")


class ScoreboardError(AssertionError):
    """The DUT broke the protocol: too many or too few words, an undefined (x/z) value, a timeout."""


class StreamMismatch(ScoreboardError):
    """A word differs from the golden one; ``str()`` is the compare report, :attr:`result` the
    :class:`~fxpsim.rtl.compare.CompareResult`."""

    def __init__(self, result: CompareResult):
        super().__init__(result.to_text())
        self.result = result


@dataclass(frozen=True)
class Stream:
    """Signal names of one valid/ready stream and the layout of its words."""

    data: str
    valid: str
    ready: str | None = None
    layout: Layout = field(default_factory=Layout)

    @classmethod
    def named(cls, prefix: str, *, ready: bool = True, layout: Layout | None = None) -> "Stream":
        """``<prefix>_data``, ``<prefix>_valid`` and (``ready=True``) ``<prefix>_ready``."""
        return cls(f"{prefix}_data", f"{prefix}_valid", f"{prefix}_ready" if ready else None, layout or Layout())

    def __post_init__(self):
        for what in ("data", "valid"):
            if not isinstance(getattr(self, what), str) or not getattr(self, what):
                raise TypeError(f"Stream: {what} must be a signal name, got {getattr(self, what)!r}")
        if self.ready is not None and (not isinstance(self.ready, str) or not self.ready):
            raise TypeError(f"Stream: ready must be a signal name or None, got {self.ready!r}")
        if not isinstance(self.layout, Layout):
            raise TypeError(f"Stream: layout must be a fxpsim.rtl.layout.Layout, got {self.layout!r}")

    def to_dict(self) -> dict:
        return {"data": self.data, "valid": self.valid, "ready": self.ready, "layout": str(self.layout)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Stream":
        return cls(d["data"], d["valid"], d.get("ready"), Layout.parse(d.get("layout", "")))


def _streams(value, what: str, roles) -> dict:
    if not isinstance(value, Mapping):
        raise TypeError(f"StreamPorts: {what} must map roles to streams, got {value!r}")
    out = {}
    for role, s in value.items():
        if role not in roles:
            raise ValueError(f"StreamPorts: unknown {what} role {role!r} (one of {', '.join(roles)})")
        out[role] = Stream.named(s) if isinstance(s, str) else s
        if not isinstance(out[role], Stream):
            raise TypeError(f"StreamPorts: {what}[{role!r}] must be a Stream or a name prefix, got {s!r}")
    return out


@dataclass(frozen=True)
class StreamPorts:
    """The DUT's clock, reset, streams and scalar signals (defaults: ``examples/rtl/dense_stream.v``)."""

    inputs: Mapping = field(default_factory=lambda: {"weights": "w", "bias": "bias", "multiplier": "mult",
                                                      "shift": "shift", "input": "x"})
    outputs: Mapping = field(default_factory=lambda: {
        "output": "y", "accumulator": Stream("y_acc", "y_valid", "y_ready"),
        "mac_trace": Stream("trace_data", "trace_valid", None)})
    scalars: Mapping = field(default_factory=lambda: {"x_zp": "x_zp", "out_zp": "out_zp", "act_min": "act_min",
                                                       "act_max": "act_max"})
    clock: str = "clk"
    reset: str | None = "rst"
    reset_active: int = 1

    def __post_init__(self):
        object.__setattr__(self, "inputs", _streams(self.inputs, "inputs", INPUT_ROLES))
        object.__setattr__(self, "outputs", _streams(self.outputs, "outputs", OUTPUT_ROLES))
        if not isinstance(self.scalars, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                            for k, v in self.scalars.items()):
            raise TypeError(f"StreamPorts: scalars must map manifest fields to signal names, got {self.scalars!r}")
        object.__setattr__(self, "scalars", dict(self.scalars))
        if self.reset_active not in (0, 1) or isinstance(self.reset_active, bool):
            raise ValueError(f"StreamPorts: reset_active must be 1 (active high) or 0, got {self.reset_active!r}")
        readies = {}
        for role, s in self.outputs.items():
            if readies.setdefault(s.valid, s.ready) != s.ready:
                raise ValueError(f"StreamPorts: outputs sharing valid {s.valid!r} must share one ready signal")
        if not self.outputs:
            raise ValueError("StreamPorts: no output stream to check")

    def groups(self) -> dict:
        """``{valid signal: [output roles]}`` in dataflow order: the roles of one handshake."""
        out: dict = {}
        for role in OUTPUT_ROLES:
            if role in self.outputs:
                out.setdefault(self.outputs[role].valid, []).append(role)
        return out

    def to_json(self) -> str:
        return json.dumps({"inputs": {r: s.to_dict() for r, s in self.inputs.items()},
                           "outputs": {r: s.to_dict() for r, s in self.outputs.items()}, "scalars": self.scalars,
                           "clock": self.clock, "reset": self.reset, "reset_active": self.reset_active})

    @classmethod
    def from_json(cls, text: str) -> "StreamPorts":
        d = json.loads(text)
        return cls({r: Stream.from_dict(s) for r, s in d["inputs"].items()},
                   {r: Stream.from_dict(s) for r, s in d["outputs"].items()}, d["scalars"], d["clock"], d["reset"],
                   d["reset_active"])


def _node(g: _Golden, node: str) -> dict:
    if node not in g.nodes:
        raise ValueError(f"{g.dir}: no node {node!r} in the golden vectors (nodes: {', '.join(g.nodes)})")
    return g.nodes[node]


def dense_parameters(golden_dir, node: str) -> dict:
    """The HDL parameters of ``dense_pe``/``dense_stream`` for a fully connected node (``K``, ``M``,
    ``ACC_BITS``, ``SATURATE``, ``BIAS_PRELOAD``), from the export's ``tb_dense`` entry."""
    g = _Golden(str(golden_dir))
    n = _node(g, node)
    tb = n.get("tb_dense")
    if not tb:
        why = "; ".join(x for x in n.get("notes", []) if x.startswith("no tb_dense")) or f"a {n['op']} node"
        raise ValueError(f"node {node!r}: dense_pe cannot run it ({why})")
    return {k: int(tb["params"][k]) for k in ("K", "M", "ACC_BITS", "SATURATE", "BIAS_PRELOAD")}


def conv_parameters(golden_dir, node: str) -> dict:
    """The HDL parameters of ``examples/rtl/conv_stream.v`` for a conv2d or depthwise_conv2d node, from its
    manifest ``mac`` entry and tensor shapes: ``H, W, C`` (input NHWC), ``M`` (output channels), ``KH, KW``,
    ``SH, SW`` (stride), ``DH, DW`` (dilation), ``PT, PL`` (top and left padding), ``OH, OW``, ``DEPTHWISE``,
    ``DM``, ``ACC_BITS``, ``SATURATE``, ``BIAS_PRELOAD``.  A node the engine cannot run exactly (a weight zero
    point, another requantizer, a tree-ordered or end-of-sum accumulator, one wider than 32 bits, no bias) is
    a ``ValueError`` saying which."""
    g = _Golden(str(golden_dir))
    n = _node(g, node)
    mac = n.get("mac") or {}
    if mac.get("op") not in ("conv2d", "depthwise_conv2d"):
        raise ValueError(f"node {node!r}: conv_stream runs conv2d and depthwise_conv2d nodes, not {n['op']!r}")
    rq = mac["requantization"]
    why = [w for ok, w in ((mac["w_zp"] == 0, f"weight zero point {mac['w_zp']!r}, not 0"),
                           (rq["kind"] == "double", f"{rq['kind']!r} requantization, not gemmlowp 'double'"),
                           (mac["order"] == "sequential", f"{mac['order']!r} accumulation order"),
                           (mac["overflow_at"] == "add", f"overflow_at={mac['overflow_at']!r}"),
                           (2 <= int(mac["acc_bits"]) <= 32, f"a {mac['acc_bits']}-bit accumulator"),
                           (mac["overflow"] in ("saturate", "wrap"), f"accumulator overflow {mac['overflow']!r}"),
                           (mac["has_bias"], "no bias (the engine takes one per channel: feed zeros)"))
           if not ok]
    if why:
        raise ValueError(f"node {node!r}: conv_stream cannot run it exactly ({'; '.join(why)})")
    shape = lambda role: g.keys[g.key_of(node, role)]["meta"]["shape"]  # noqa: E731
    _, h, w, c = shape("input")
    _, oh, ow, m = shape("output")
    dw = mac["op"] == "depthwise_conv2d"
    return {"H": h, "W": w, "C": c, "M": m, "KH": mac["kernel"][0], "KW": mac["kernel"][1],
            "SH": mac["stride"][0], "SW": mac["stride"][1], "DH": mac["dilation"][0], "DW": mac["dilation"][1],
            "PT": mac["pads"][0][0], "PL": mac["pads"][1][0], "OH": oh, "OW": ow, "DEPTHWISE": int(dw),
            "DM": int(mac.get("depth_multiplier", 1)), "ACC_BITS": int(mac["acc_bits"]),
            "SATURATE": int(mac["overflow"] == "saturate"), "BIAS_PRELOAD": int(mac["bias_add"] == "preload")}


def _signed(raw: int, width: int) -> int:
    return raw - (1 << width) if width and raw >> (width - 1) & 1 else raw


class Scoreboard:
    """The words of one node's streams (:meth:`words`) and the check of the DUT's (:meth:`receive`)."""

    def __init__(self, golden_dir, node: str, ports: StreamPorts | None = None):
        self.golden_dir = str(golden_dir)
        self.ports = StreamPorts() if ports is None else ports
        if not isinstance(self.ports, StreamPorts):
            raise TypeError(f"Scoreboard: ports must be a StreamPorts, got {self.ports!r}")
        self.g = g = _Golden(self.golden_dir)
        self.node = node
        self.entry = n = _node(g, node)
        self.tensor: dict = {}              # role -> (key, meta, golden array)
        for role in list(self.ports.inputs) + list(self.ports.outputs):
            key = g.key_of(node, role)
            if key is None:
                hint = " (export it with mac_trace={'node': ..., 'outputs': [...]})" if role == "mac_trace" else ""
                raise ValueError(f"node {node!r} has no golden {role!r} tensor{hint}; drop the {role!r} stream "
                                 "from the StreamPorts")
            self.tensor[role] = (key, g.keys[key]["meta"], g.array(key))
        mac = n.get("mac") or {}
        ints = [k for k, v in mac.items() if isinstance(v, int) and not isinstance(v, bool)]
        missing = [k for k in self.ports.scalars if k not in ints]
        if missing:
            raise ValueError(f"node {node!r}: no scalar {missing[0]!r} in its manifest entry (integer fields: "
                             f"{', '.join(ints)})")
        self.scalars = {sig: int(mac[k]) for k, sig in self.ports.scalars.items()}
        self.beat_map = {role: self._beat_map(role) for role in self.ports.outputs}
        self.got = {r: np.zeros(self.tensor[r][2].shape, np.int64) for r in self.ports.outputs}
        self.known = {r: np.zeros(self.tensor[r][2].shape, bool) for r in self.ports.outputs}
        self.seen = dict.fromkeys(self.ports.outputs, 0)
        self.last_when = ""                 # when the last word arrived

    def _beat_map(self, role: str) -> np.ndarray:
        """``[beats, lanes]`` flat index into the golden tensor of every word's lanes (-1: not checked)."""
        _, meta, exp = self.tensor[role]
        if role != "mac_trace":
            lay = self.ports.outputs[role].layout
            return lay.slots(exp.shape, meta.get("axes") or None).reshape(-1, lay.pack)
        tr = self.entry.get("mac_trace") or {}
        outs = [int(i) for i in tr.get("outputs", [])]
        acc_key = self.g.key_of(self.node, "accumulator")
        n_out = int(np.prod(self.g.keys[acc_key]["meta"]["shape"])) if acc_key else max(outs) + 1
        S = exp.shape[1]
        beat = np.full((n_out * S, 1), -1, np.int64)
        for t, flat in enumerate(outs):
            beat[flat * S:(flat + 1) * S, 0] = t * S + np.arange(S)
        return beat

    # ------------------------------------------------------------------------------------- stimulus
    def words(self, role: str, width: int) -> list:
        """The unsigned words to drive on the ``role`` stream, whose data signal is ``width`` bits wide."""
        _, meta, arr = self.tensor[role]
        lay = self.ports.inputs[role].layout
        words = lay.words(arr, int(meta["bits"]), bool(meta["signed"]), meta.get("axes") or None)
        bits, signed = int(meta["bits"]), bool(meta["signed"])
        if lay.pack == 1:                          # one element a word: its value, at the signal's width
            vals = [_signed(w, bits) if signed else w for w in words]
            lo, hi = -(1 << (width - 1)), (1 << width) - 1
            bad = next((v for v in vals if not lo <= v <= hi), None)
            if bad is not None:
                raise ValueError(f"node {self.node!r}: {role} value {bad} does not fit the {width}-bit signal "
                                 f"{self.ports.inputs[role].data}")
            return [v & ((1 << width) - 1) for v in vals]
        if lay.word_bits(bits) > width:
            raise ValueError(f"node {self.node!r}: {role} words are {lay.word_bits(bits)} bits ({lay}) but "
                             f"{self.ports.inputs[role].data} has {width}")
        return words

    def beats(self, role: str) -> int:
        """Words the DUT must send on the ``role`` stream."""
        return len(self.beat_map[role])

    @property
    def done(self) -> bool:
        return all(self.seen[r] == self.beats(r) for r in self.ports.outputs)

    # ------------------------------------------------------------------------------------- checking
    def receive(self, beat: Mapping, when: str = "") -> None:
        """Check one handshake: ``{role: (raw unsigned value, signal width)}``; ``when`` names the moment
        (``"cycle 812, 8120 ns"``).  Raises :class:`StreamMismatch` at the first differing word."""
        bad = []
        for role in OUTPUT_ROLES:
            if role not in beat:
                continue
            raw, width = beat[role]
            b = self.seen[role]
            stream = self.ports.outputs[role]
            if b >= self.beats(role):
                raise ScoreboardError(f"node {self.node!r}: {stream.data} sent word {b + 1} at {when}, but the "
                                      f"{role} stream has {self.beats(role)} words")
            _, meta, exp = self.tensor[role]
            lay = stream.layout
            bits, signed = int(meta["bits"]), bool(meta["signed"])
            lanes = [_signed(int(raw), width) if signed else int(raw)] if lay.pack == 1 else \
                lay.split(int(raw), bits, signed)
            for s, v in zip(self.beat_map[role][b], lanes):
                if s >= 0:
                    self.got[role].reshape(-1)[s] = v
                    self.known[role].reshape(-1)[s] = True
                    if v != int(exp.reshape(-1)[s]):
                        bad.append(role)
            self.seen[role] = b + 1
            self.last_when = when
        if bad:
            raise StreamMismatch(self.result(when=when, at={r: self.seen[r] - 1 for r in beat}))

    def undefined(self, role: str, text: str, when: str = "") -> None:
        """The DUT sent a word with x/z bits: raise :class:`ScoreboardError` naming the element expected."""
        _, meta, exp = self.tensor[role]
        b = self.seen[role]
        s = next((int(v) for v in self.beat_map[role][min(b, self.beats(role) - 1)] if v >= 0), None)
        what = f"element {tuple(int(i) for i in np.unravel_index(s, exp.shape))} = {int(exp.reshape(-1)[s])}" \
            if s is not None else "an untraced word"
        raise ScoreboardError(f"node {self.node!r}: undefined value {text!r} (x/z bits) on "
                              f"{self.ports.outputs[role].data}, word {b} at {when}, where {role} {what} was "
                              "expected")

    def result(self, when: str = "", at: Mapping | None = None) -> CompareResult:
        """The compare report over the words received so far."""
        roles = [r for r in self.ports.outputs if self.known[r].any()]
        if not roles:
            raise ScoreboardError(f"node {self.node!r}: no word received on any output stream")
        if at is None:          # the whole run
            label = {r: f"{self.ports.outputs[r].data} ({self.seen[r]} words" + (f", the last at {when}" if when
                                                                                    else "") + ")" for r in roles}
        else:
            label = {r: f"{self.ports.outputs[r].data} (word {at.get(r, self.seen[r] - 1)}"
                        + (f" at {when}" if when else "") + ")" for r in roles}
        name = lambda r: self.tensor[r][0]  # noqa: E731
        return compare_arrays(self.golden_dir, {name(r): self.got[r] for r in roles},
                              known={name(r): self.known[r] for r in roles}, labels={name(r): label[r] for r in roles},
                              source=f"streams of node {self.node!r}")

    def finish(self) -> CompareResult:
        """After the run: every word received (else :class:`ScoreboardError`); the final report."""
        short = [f"{self.ports.outputs[r].data}: {self.seen[r]} of {self.beats(r)} words"
                 for r in self.ports.outputs if self.seen[r] != self.beats(r)]
        if short:
            raise ScoreboardError(f"node {self.node!r}: the DUT stopped early: " + "; ".join(short))
        return self.result(when=self.last_when)

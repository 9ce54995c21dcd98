"""Target-hardware description: :class:`HardwareConfig`, its TOML form and the shipped presets.

A :class:`HardwareConfig` says what the accelerator's datapath looks like: weight, activation, bias and
accumulator widths (or fixed-point :class:`~fxpsim.fixed.Format`\\ s), per-channel or per-tensor weight
scales, the rounding mode, the accumulator's overflow mode and summation order, and the requantization
scheme that brings the accumulator back to the activation format:

``tflite-double``
    TFLite/gemmlowp: ``M0, n = quantize_multiplier(s_in * s_w / s_out)`` then
    ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc, M0), n)`` (two roundings).
``tflite-single``
    The same multiplier applied with one rounding, :math:`\\lfloor acc\\,M_0\\,2^{-31-n} + 1/2\\rfloor`.
``shift``
    Power-of-two scales everywhere; the accumulator is shifted right with the configured rounding.
``float``
    :math:`\\operatorname{round}(acc \\cdot s_{in} s_w / s_{out})` in float64 with the configured rounding
    (what TFLite's reference FULLY_CONNECTED does in some builds).

Presets live in ``fxpsim/hardware/presets/*.toml`` (see :func:`preset_names`); users write their own TOML with the
same sections (``[weights]``, ``[activations]``, ``[bias]``, ``[accumulator]``, ``[requantization]``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..core.fixed import Format, Overflow, Rounding
from .overrides import LayerOverrides, flatten_overrides, is_index, unmatched_selectors_message

__all__ = ["HardwareConfig", "ConfigError", "preset", "preset_names", "load_config", "REQUANTIZATION_SCHEMES"]

REQUANTIZATION_SCHEMES = ("tflite-double", "tflite-single", "shift", "float")
WEIGHT_SCALES = ("per-channel", "per-tensor")
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
    "activations": {"bits": "activation_bits", "format": "activation_format",
                    "signed": "activation_signed", "symmetric": "activation_symmetric",
                    "lut_entries": "activation_lut_entries", "lut_interpolation": "activation_lut_interpolation"},
    "bias": {"bits": "bias_bits", "add": "bias_add", "shift": "bias_shift"},
    "accumulator": {"bits": "accumulator_bits", "overflow": "accumulator_overflow",
                    "order": "accumulator_order", "overflow_at": "overflow_at", "zero_point": "zero_point",
                    "tile_k": "tile_k", "tile_bits": "tile_accumulator_bits", "frac_bits": "accumulator_frac_bits",
                    "product_rounding": "product_rounding"},
    "requantization": {"scheme": "requantization", "dense_scheme": "dense_requantization", "rounding": "rounding",
                       "output_rounding": "requantization_rounding", "multiplier_bits": "multiplier_bits",
                       "activation_clamp": "activation_clamp"},
}
_FIELD_TO_TOML = {fld: (sec, key) for sec, keys in _TOML_KEYS.items() for key, fld in keys.items()}


def _dotted(field_name: str) -> str:
    sec, key = _FIELD_TO_TOML.get(field_name, (None, field_name))
    return f"{sec}.{key}" if sec else key


@dataclass(frozen=True)
class HardwareConfig:
    """An accelerator's integer datapath.

    Parameters
    ----------
    name, description : str
        Labels used in reports.
    weight_bits : int
        Weight code width, 2..16 (ignored when ``weight_format`` is given).
    weight_format : Format or str, optional
        Fixed-point weights: code = round(w * 2**frac), per-tensor scale ``2**-frac``.
    weight_signed : bool
        Signed weight codes (symmetric, zero point 0).
    weight_scales : {"per-channel", "per-tensor"}
        One scale per output channel or one per tensor.
    weight_narrow_range : bool
        Signed weights use ``[-(2**(b-1) - 1), 2**(b-1) - 1]`` (TFLite's int8 weights do).
    activation_bits : int
        Activation code width, 2..16.
    activation_format : Format or str, optional
        Fixed-point activations (zero point 0, scale ``2**-frac``).
    activation_signed : bool
        Signed (int8-like) or unsigned (uint8-like) activation codes.
    activation_symmetric : bool
        Zero point 0 (otherwise asymmetric: the zero point is calibrated).
    activation_lut_entries : int, optional
        TOML ``activations.lut_entries``: compute the lookup-table activations (the ops in
        :data:`fxpsim.datapath.lut.LUT_OPS`: an imported model's LOGISTIC, TANH, HARD_SWISH and SOFTMAX, a
        converted model's ``sigmoid``, ``tanh`` and ``hard_swish``) with an
        integer table of this many entries (a power of two, 2..65536, at most one per input code) indexed by
        the top bits of the input code, as NPUs do (:mod:`fxpsim.datapath.lut` states every rounding);
        ``None`` or 0 (default): the runtime's own arithmetic (one entry per code for the ops of converted
        models). Other ops are unaffected; a per-node override
        that sets it on any other op raises :class:`ConfigError`; :meth:`lut_nodes` lists the nodes of a
        graph it applies to, and their traces carry ``"lut"``. The report's "not exact" column compares with
        the arithmetic without the knob (:meth:`exact_datapath` drops the table).
    activation_lut_interpolation : {"none", "linear"}
        TOML ``activations.lut_interpolation``: ``"none"`` (default; each entry is the function at its
        segment's centre) or ``"linear"`` (``entries + 1`` values at the segment ends, interpolated with the
        low bits and TFLite's ``(slope * t + 2^(r-1)) >> r`` rounding). ``"linear"`` needs
        ``activation_lut_entries``, and fewer entries than input codes.
    bias_bits : int, optional
        Bias register width (default: the accumulator's); biases are stored in the accumulator's scale
        :math:`s_{in} s_w` and saturate to this width.
    bias_add : {"preload", "after"}
        The accumulator starts from the bias (many NPUs), or the bias is added after the dot product with
        one more overflow-checked add (TFLite's reference kernels).
    bias_shift : int
        Bias stored with fewer bits and shifted left into the accumulator (CMSIS-NN's and many fixed-point
        NPUs' ``bias << shift``): the stored code is :math:`b_q = \\mathrm{sat}_{bias\\_bits}(\\mathrm{round}(
        b / (s_{in} s_w 2^{shift})))` and the accumulator receives :math:`b_q \\cdot 2^{shift}` (saturated into
        the accumulator). 0..62, default 0. Conversion counts the biases that saturate
        (``graph.meta["bias_clipped"]``).
    accumulator_bits : int
        Accumulator width, 2..64.
    accumulator_overflow : Overflow or str
        Applied after every add (``overflow_at="add"``) or once at the end (``"end"``).
    accumulator_order : {"sequential", "tree"}
        Summation order of the MAC array.
    overflow_at : {"add", "end"}
        Per-add overflow (a narrow adder) or a wide adder with one final cast.
    zero_point : {"subtract", "fold"}
        TOML ``accumulator.zero_point``. ``"subtract"`` (default): the multipliers see offset codes,
        :math:`a = b + \\sum_k (x_k - z_x)(w_k - z_w)`. ``"fold"``: the int8 x int8 form TFLite and most NPUs
        run, :math:`a = b' + \\sum_k x_k (w_k - z_w)` with :math:`b' = \\mathrm{sat}_{bias\\_bits}(b - z_x
        \\sum_k (w_k - z_w))` (padded taps hold :math:`z_x`). The same numbers when nothing overflows; the
        partial sums differ, so under saturation (or wrap-around with a narrow bias) the results do.
    tile_k : int, optional
        TOML ``accumulator.tile_k``: K-tiling. The K products of an output are summed in tiles of ``tile_k``
        (in the datapath's order) in a ``tile_accumulator_bits`` accumulator starting from 0, overflowing
        (``accumulator_overflow``) after every add; between tiles each tile's sum is added into the
        ``accumulator_bits`` accumulator (preloaded with the bias), also overflowing:
        :math:`a = \\mathrm{fit}_{acc}(\\cdots \\mathrm{fit}_{acc}(b + T_0) \\cdots + T_{n-1})`,
        :math:`T_t = \\mathrm{fit}_{tile}(\\cdots \\mathrm{fit}_{tile}(p_{t k}) \\cdots + p_{t k + k - 1})`.
        Overflows are counted at both levels (trace: ``overflows`` in all, ``tile_overflows``). Needs
        ``overflow_at = "add"``.
    tile_accumulator_bits : int, optional
        TOML ``accumulator.tile_bits``: the tile accumulator's width (default: ``accumulator_bits``; at most
        ``accumulator_bits``, and narrowed with it by :meth:`replace`).
    accumulator_frac_bits : int, optional
        TOML ``accumulator.frac_bits``: fraction bits of the accumulator, the product of two codes having
        :math:`f_p` = ``weight_format.frac + activation_format.frac`` (0 for scaled integer codes). With
        :math:`f_{acc} < f_p` every product is rounded onto the accumulator's LSB before it is added,
        :math:`p' = \\mathrm{round}(p\\, 2^{f_{acc} - f_p})` (``product_rounding``); biases are stored in that
        LSB and the requantizer scales by :math:`2^{f_p - f_{acc}}`. Default: :math:`f_p` (exact products).
    product_rounding : Rounding or str, optional
        TOML ``accumulator.product_rounding``: rounding of products into an accumulator with fewer fraction
        bits (default: ``rounding``; hardware often truncates: ``floor``).
    requantization : {"tflite-double", "tflite-single", "shift", "float"}
        How the accumulator is scaled to the output's codes (see the module docstring).
    dense_requantization : str, optional
        A different scheme for fully connected layers (default: ``requantization``). TFLite's reference
        FULLY_CONNECTED (the build of the shared vectors, TF 2.21) requantizes in float64 with round half
        away while its convolutions use ``tflite-double``; the ``tflite-int8`` preset sets ``"float"``.
    rounding : Rounding or str
        Rounding of every float-to-code conversion (weights, biases, inputs), and the default output rounding
        of the ``shift`` and ``float`` requantizations. It does *not* change the TFLite schemes, which round as
        gemmlowp does unless ``requantization_rounding`` says otherwise (conversion notes this in
        ``graph.meta["notes"]`` when ``rounding`` differs from gemmlowp's).
    requantization_rounding : Rounding or str, optional
        TOML ``requantization.output_rounding``: the rounding of the requantizer's final shift.
        ``tflite-double``: :math:`y = \\mathrm{round}(\\mathrm{SRDHM}(acc\\,2^{\\ell}, M_0) / 2^{r})` replaces
        ``RoundingDivideByPOT`` (half away from zero); ``tflite-single``:
        :math:`y = \\mathrm{round}(acc\\, M_0 / 2^{31 - e})` replaces its half-up rounding; ``shift``/``float``:
        the rounding of the shift / the scaled value (default: ``rounding``). ``None`` (default): each
        scheme's own rounding.
    multiplier_bits : int
        TOML ``requantization.multiplier_bits``, 2..31: width of the requantization multiplier's significand,
        :math:`M \\approx m\\, 2^{e - b}`, :math:`2^{b-1} \\le m < 2^b`, :math:`m = \\mathrm{round\\_half\\_away}
        (M 2^{b - e})`; 31 is TFLite's Q31, 16 and 8 model narrower NPU multipliers. The product is then
        rounded as the scheme does (``tflite-double``: :math:`\\lfloor (acc\\, m + 2^{b-1}) / 2^b\\rfloor` then the
        final shift; ``tflite-single``: one rounding of :math:`acc\\, m / 2^{b - e}`), the final rounding being
        ``requantization_rounding``. Only the ``tflite-*`` schemes have a multiplier.
    activation_clamp : bool
        Fuse ReLU/ReLU6 into the requantized output clamp (TFLite does); otherwise they run as separate
        integer max/min ops on the codes (same result, kept for completeness of the model).
    layers : mapping of selector -> mapping of field -> value
        Per-node overrides of any other field (TOML: ``[layers."0:conv2d"] accumulator_bits = 20``). A
        selector is a node name (``"0:conv2d"``), a run-order index (``"#3"``) or an op type
        (``"op:conv2d"``); :meth:`for_node` merges op-type selectors first, then the index, then the name
        (the most specific wins). Conversion honours the overrides too (per-layer weight/activation/bias
        widths). A selector that matches no node of a graph raises :class:`ConfigError` when the graph is
        converted or run. Keys are field names or dotted TOML names (``"accumulator.bits"``).
    """

    name: str = "custom"
    description: str = ""
    weight_bits: int = 8
    weight_format: Format | None = None
    weight_signed: bool = True
    weight_scales: str = "per-channel"
    weight_narrow_range: bool = True
    activation_bits: int = 8
    activation_format: Format | None = None
    activation_signed: bool = True
    activation_symmetric: bool = False
    activation_lut_entries: int | None = None
    activation_lut_interpolation: str = "none"
    bias_bits: int | None = None
    bias_add: str = "preload"
    bias_shift: int = 0
    accumulator_bits: int = 32
    accumulator_overflow: Overflow = Overflow.WRAP
    accumulator_order: str = "sequential"
    overflow_at: str = "add"
    zero_point: str = "subtract"
    tile_k: int | None = None
    tile_accumulator_bits: int | None = None
    accumulator_frac_bits: int | None = None
    product_rounding: Rounding | None = None
    requantization: str = "tflite-double"
    dense_requantization: str | None = None
    rounding: Rounding = Rounding.HALF_AWAY
    requantization_rounding: Rounding | None = None
    multiplier_bits: int = 31
    activation_clamp: bool = True
    layers: Any = ()

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("layers", self._normalized_layers(self.layers))
        for name in ("name", "description"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name}: must be a string, got {getattr(self, name)!r}")
        for prefix in ("weight", "activation"):
            fmt = getattr(self, f"{prefix}_format")
            if fmt is not None:
                fmt = _parse_format(fmt, f"{prefix}_format")
                if not 2 <= fmt.word <= 16:
                    raise ConfigError(f"{_dotted(prefix + '_format')}: word length must be 2..16, "
                                      f"got {fmt.word}")
                set_(f"{prefix}_format", fmt)
                set_(f"{prefix}_bits", fmt.word)
                set_(f"{prefix}_signed", fmt.signed)
        if self.weight_format is not None:  # a fixed format: one power-of-two scale, full code range
            set_("weight_scales", "per-tensor")
            set_("weight_narrow_range", False)
        if self.activation_format is not None:
            set_("activation_symmetric", True)
        for name, lo, hi in (("tile_k", 1, 1 << 24), ("tile_accumulator_bits", 2, 64),
                             ("accumulator_frac_bits", -64, 64)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi):
                raise ConfigError(f"{_dotted(name)}: must be an integer in {lo}..{hi} (or left out), got {value!r}")
        for name, lo, hi in (("weight_bits", 2, 16), ("activation_bits", 2, 16), ("accumulator_bits", 2, 64),
                             ("bias_bits", 2, 64), ("bias_shift", 0, 62), ("multiplier_bits", 2, 31)):
            if name == "bias_bits" and self.bias_bits is None:
                set_("bias_bits", self.accumulator_bits)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(f"{_dotted(name)}: must be an integer in {lo}..{hi}, got {value!r}")
        for name in ("weight_signed", "weight_narrow_range", "activation_signed", "activation_symmetric",
                     "activation_clamp"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{_dotted(name)}: must be true or false, got {getattr(self, name)!r}")
        for name, allowed in (("weight_scales", WEIGHT_SCALES), ("accumulator_order", ACCUMULATOR_ORDERS),
                              ("overflow_at", OVERFLOW_AT), ("bias_add", BIAS_ADD),
                              ("requantization", REQUANTIZATION_SCHEMES), ("zero_point", ZERO_POINTS),
                              ("dense_requantization", (None,) + REQUANTIZATION_SCHEMES)):
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"{_dotted(name)}: unknown value {value!r}; allowed: "
                                  f"{', '.join(a for a in allowed if a is not None)}")
        self._check_lut_knobs()
        set_("accumulator_overflow", _parse_enum(Overflow, self.accumulator_overflow, "accumulator_overflow"))
        set_("rounding", _parse_enum(Rounding, self.rounding, "rounding"))
        if self.requantization_rounding is not None:
            set_("requantization_rounding", _parse_enum(Rounding, self.requantization_rounding,
                                                        "requantization_rounding"))
        if self.product_rounding is not None:
            set_("product_rounding", _parse_enum(Rounding, self.product_rounding, "product_rounding"))
        for name in ("rounding", "requantization_rounding", "product_rounding"):
            if getattr(self, name) == Rounding.STOCHASTIC:
                raise ConfigError(f"{_dotted(name)}: 'stochastic' is not supported by the simulation; allowed: "
                                  f"{', '.join(r.value for r in Rounding if r != Rounding.STOCHASTIC)}")
        if self.bias_bits > self.accumulator_bits:
            raise ConfigError(f"bias.bits: a {self.bias_bits}-bit bias does not fit the "
                              f"{self.accumulator_bits}-bit accumulator; allowed: 2..{self.accumulator_bits} "
                              "(or leave it out: it defaults to the accumulator's width)")
        if self.tile_accumulator_bits is not None and self.tile_accumulator_bits > self.accumulator_bits:
            raise ConfigError(f"accumulator.tile_bits: a {self.tile_accumulator_bits}-bit tile accumulator is wider "
                              f"than the {self.accumulator_bits}-bit accumulator it adds into; allowed: "
                              f"2..{self.accumulator_bits}")
        if self.tile_k is not None and self.overflow_at != "add":
            raise ConfigError("accumulator.tile_k: K-tiling models narrow adders that overflow at every add; "
                              "it needs accumulator.overflow_at = 'add'")
        if self.multiplier_bits != 31 and not any(s_.startswith("tflite") for s_ in
                                                  (self.requantization, self.dense_requantization or "")):
            raise ConfigError(f"requantization.multiplier_bits = {self.multiplier_bits}: only the tflite-* "
                              f"schemes have a multiplier; scheme is {self.requantization!r}")
        if self.layers:  # validate every override against this base; keep the normalised values
            items = []
            for sel, ov in self.layers.items():
                try:
                    merged = self._merged(ov, keep_layers=False)
                except ConfigError as exc:
                    raise ConfigError(f"layers.{json.dumps(sel)}: {exc}") from None
                items.append((sel, tuple((k, getattr(merged, k)) for k in ov)))
            set_("layers", LayerOverrides(tuple(items)))

    def _check_lut_knobs(self) -> None:
        from ..datapath.lut import INTERPOLATIONS, MAX_ENTRIES
        entries, interp = self.activation_lut_entries, self.activation_lut_interpolation
        if entries is not None and not isinstance(entries, bool) and isinstance(entries, int) and entries == 0:
            object.__setattr__(self, "activation_lut_entries", None)
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

    def lut_nodes(self, graph) -> dict:
        """The nodes of ``graph`` that this config runs as lookup tables (:attr:`activation_lut_entries`, after
        per-node overrides): node name -> ``(entries, interpolation)``; empty when the knob applies to no
        node (e.g. a graph without LOGISTIC/TANH/HARD_SWISH/SOFTMAX). Raises :class:`ConfigError` as a run
        would: for a selector that matches no node, or a per-node LUT override on an op without a table."""
        from ..datapath.lut import LUT_OPS
        from ..frontends.tflite import ops as tflite_ops  # noqa: F401  (registers the TFLite activation ops as LUT ops)
        self.check_selectors(graph)
        out = {}
        for i, node in enumerate(graph.nodes):
            cfg = self.for_node(node, i)     # raises for a per-node LUT override on an op without a table
            if node.op in LUT_OPS:
                if cfg.activation_lut_entries:
                    out[node.name] = (cfg.activation_lut_entries, cfg.activation_lut_interpolation)
        return out

    # ----- construction -------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "") -> "HardwareConfig":
        """Build from a TOML-shaped mapping (sections) or flat field names; unknown keys raise."""
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

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "HardwareConfig":
        """Load a TOML file; errors name the file and the key."""
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

    @classmethod
    def preset(cls, name: str) -> "HardwareConfig":
        """A preset shipped with fxpsim (see :func:`preset_names`)."""
        return preset(name)

    def for_node(self, node, index: int) -> "HardwareConfig":
        """The settings that apply to one node of a graph (``node``: a :class:`fxpsim.graph.Node`, ``index``
        its position in run order): this config with the :attr:`layers` overrides that select the node
        merged in, op-type selectors first, then ``"#index"``, then the node's name."""
        if not self.layers:
            return self
        name, op = getattr(node, "name", None), getattr(node, "op", None)
        cache = self.__dict__.setdefault("_node_configs", {})
        key = (name, op, int(index))
        if key not in cache:
            merged: dict[str, Any] = {}
            for wanted in (f"op:{op}", f"#{int(index)}", name):
                merged.update(self.layers.get(wanted, {}))
            lut_keys = [k for k in merged if k in _LUT_FIELDS]
            if lut_keys:
                from ..datapath.lut import LUT_OPS
                if op not in LUT_OPS:
                    raise ConfigError(f"layers: node {name!r} (#{int(index)}, op {op!r}) has a per-node "
                                      f"{', '.join(_dotted(k) for k in lut_keys)}, but its op has no lookup-table "
                                      f"form; the LUT knobs apply to the ops {', '.join(sorted(LUT_OPS)) or '(none loaded)'}")
            cache[key] = self._merged(merged) if merged else self
        return cache[key]

    def exact_datapath(self, accumulator_bits: int, name: str | None = None) -> "HardwareConfig":
        """The same target with accumulators that never overflow at ``accumulator_bits`` (wide enough for the
        network): no K-tiling, wrap-around, per-add fitting, and the per-layer accumulator overrides
        (``accumulator_bits``, ``accumulator_overflow``, ``overflow_at``, ``tile_k``,
        ``tile_accumulator_bits``) dropped; everything else (widths, scales, requantization) kept. What a
        report's "not exact" column should compare with. The lookup-table activations
        (``activation_lut_entries``, ``activation_lut_interpolation``) are dropped as well: the exact datapath
        runs them with the runtime's own arithmetic, so "not exact" counts the outputs a table changes."""
        acc_keys = {"accumulator_bits", "accumulator_overflow", "overflow_at", "tile_k", "tile_accumulator_bits",
                    *_LUT_FIELDS}
        layers = {sel: {k: v for k, v in ov.items() if k not in acc_keys} for sel, ov in self.layers.items()}
        data = self.to_flat_dict()
        data.update(name=name or f"{self.name} (exact accumulator)", accumulator_bits=int(accumulator_bits),
                    bias_bits=min(self.bias_bits, int(accumulator_bits)), accumulator_overflow="wrap",
                    overflow_at="add", tile_k=None, tile_accumulator_bits=None,
                    activation_lut_entries=None, activation_lut_interpolation="none",
                    layers={sel: ov for sel, ov in layers.items() if ov})
        return type(self)(**data)

    def with_layer(self, selector: str, **changes: Any) -> "HardwareConfig":
        """A copy with per-node overrides added for ``selector`` (merged with any it already has):
        ``config.with_layer("0:conv2d", accumulator_bits=20)``."""
        layers = {sel: dict(ov) for sel, ov in self.layers.items()}
        layers.setdefault(selector, {}).update(changes)
        return dataclasses.replace(self, layers=layers)

    def check_selectors(self, graph) -> None:
        """Raise :class:`ConfigError` naming every :attr:`layers` selector that matches no node of ``graph``."""
        message = unmatched_selectors_message(self.layers, graph)
        if message:
            raise ConfigError(message)

    def _merged(self, changes: Mapping[str, Any], keep_layers: bool = True) -> "HardwareConfig":
        """This config with ``changes`` applied (no per-node overrides of its own); with ``keep_layers`` it
        remembers this config, whose selectors :func:`fxpsim.graph.ops.run_node` checks against the graph."""
        data = self.to_flat_dict()
        data["layers"] = ()
        _apply_changes(data, dict(changes))
        merged = type(self)(**data)
        if keep_layers:
            object.__setattr__(merged, "_selector_root", self)
        return merged

    @staticmethod
    def _normalized_layers(layers) -> "LayerOverrides":
        if isinstance(layers, LayerOverrides):
            return layers
        if layers is None or (isinstance(layers, (tuple, list)) and not layers):
            return LayerOverrides(())
        if not isinstance(layers, Mapping):
            raise ConfigError(f"layers: must be a table of selector -> table of overrides, got {layers!r}")
        items = []
        for sel, ov in layers.items():
            where = f"layers.{json.dumps(str(sel))}"
            if not isinstance(sel, str) or not sel or (sel.startswith("op:") and len(sel) == 3) or \
                    (sel.startswith("#") and not is_index(sel)):
                raise ConfigError(f"{where}: a selector is a node name, '#<index>' or 'op:<type>', got {sel!r}")
            if not isinstance(ov, Mapping):
                raise ConfigError(f"{where}: must be a table of overrides, got {ov!r}")
            flat = _flatten_overrides(ov, where)
            items.append((sel, tuple(flat.items())))
        return LayerOverrides(tuple(items))

    def replace(self, **changes: Any) -> "HardwareConfig":
        """A copy with some fields changed (flat names, or dotted TOML names via ``**{"accumulator.bits": 16}``).

        Unless ``name`` is passed, the copy's name says what changed: ``"int8-acc16-sat[accumulator_bits=12]"``
        (later changes join the bracket: ``"...[accumulator_bits=12,rounding=half_even]"``).
        Changing ``accumulator_bits`` without ``bias_bits`` narrows the bias register with it:
        ``bias_bits = min(bias_bits, accumulator_bits)``; a new ``weight_bits``/``activation_bits`` drops a
        fixed-point ``*_format``.
        """
        data = self.to_flat_dict()
        _apply_changes(data, changes)
        new = type(self)(**data)
        named = any(_FIELD_TO_TOML_REVERSE.get(k, k) == "name" for k in changes)
        if not named:
            changed = [(k, getattr(new, k)) for k in (_FIELD_TO_TOML_REVERSE.get(k, k) for k in changes)
                       if k not in ("description",) and getattr(new, k) != getattr(self, k)]
            if changed:
                object.__setattr__(new, "name", _describe(self.name, changed))
        return new

    # ----- serialisation ------------------------------------------------------------------------------
    def to_flat_dict(self) -> dict[str, Any]:
        """Field name -> value (enums kept as enums, formats as :class:`Format`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """TOML-shaped plain dict (strings, ints, bools); ``from_dict(c.to_dict()) == c``."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        for sec, keys in _TOML_KEYS.items():
            out[sec] = {}
            for key, fld in keys.items():
                value = getattr(self, fld)
                if value is None or (fld in _OMITTED_AT_DEFAULT and value == _OMITTED_AT_DEFAULT[fld]):
                    continue
                if isinstance(value, Format):
                    value = str(value)
                elif isinstance(value, (Rounding, Overflow)):
                    value = value.value
                out[sec][key] = value
        for prefix, sec in (("weight", "weights"), ("activation", "activations")):
            if getattr(self, f"{prefix}_format") is not None:  # bits/signed follow from the format
                out[sec].pop("bits", None)
                out[sec].pop("signed", None)
        if self.layers:
            out["layers"] = {sel: {k: _plain_value(v) for k, v in ov.items()} for sel, ov in self.layers.items()}
        return out

    def to_toml(self) -> str:
        """The configuration as TOML text (loadable with :meth:`from_toml`)."""
        def lit(v: Any) -> str:
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, int):
                return str(v)
            return json.dumps(str(v), ensure_ascii=False).replace("\x7f", "\\u007f")  # valid TOML basic string
        d = self.to_dict()
        lines = [f"name = {lit(d['name'])}", f"description = {lit(d['description'])}"]
        for sec in _TOML_KEYS:
            lines += ["", f"[{sec}]"] + [f"{k} = {lit(v)}" for k, v in d[sec].items()]
        for sel, ov in d.get("layers", {}).items():
            lines += ["", f"[layers.{lit(sel)}]"] + [f"{k} = {lit(v)}" for k, v in ov.items()]
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        """One line: ``W8(per-channel) A8 B32 ACC32 wrap/sequential tflite-double half_away``."""
        w = str(self.weight_format) if self.weight_format else \
            f"{'' if self.weight_signed else 'u'}int{self.weight_bits}"
        a = str(self.activation_format) if self.activation_format else \
            f"{'' if self.activation_signed else 'u'}int{self.activation_bits}"
        acc = f"accumulator int{self.accumulator_bits} {self.accumulator_overflow.value}"
        if self.tile_k:
            acc += f" in tiles of {self.tile_k} (int{self.tile_accumulator_bits or self.accumulator_bits})"
        acc += f"{'' if self.overflow_at == 'add' else ' at end'} ({self.accumulator_order})"
        if self.zero_point == "fold":
            acc += ", zero point folded into the bias"
        if self.accumulator_frac_bits is not None:
            acc += f", {self.accumulator_frac_bits} fraction bits"
        rq = f"requant {self.requantization}"
        if self.dense_requantization:
            rq += f" (dense: {self.dense_requantization})"
        if self.multiplier_bits != 31:
            rq += f" with a {self.multiplier_bits}-bit multiplier"
        parts = [f"weights {w} {self.weight_scales}", f"activations {a}",
                 f"bias int{self.bias_bits}" + (f" << {self.bias_shift}" if self.bias_shift else ""), acc, rq,
                 f"rounding {self.rounding.value}"]
        if self.requantization_rounding:
            parts.append(f"output rounding {self.requantization_rounding.value}")
        if self.activation_lut_entries:
            parts.append(f"activation LUTs of {self.activation_lut_entries} entries"
                         f"{', linearly interpolated' if self.activation_lut_interpolation == 'linear' else ''}")
        if self.layers:
            parts.append(f"per-layer overrides for {', '.join(self.layers)}")
        return ", ".join(parts)


_FIELD_TO_TOML_REVERSE = {f"{sec}.{key}": fld for fld, (sec, key) in _FIELD_TO_TOML.items()}
_NOT_OVERRIDABLE = ("name", "description", "layers")
#: knobs written by to_dict/to_toml only when they differ from these defaults (older files stay the same)
_OMITTED_AT_DEFAULT = {"bias_shift": 0, "zero_point": "subtract", "multiplier_bits": 31,
                       "activation_lut_interpolation": "none"}
#: the lookup-table activation knobs (per-node overrides of them only on LUT ops)
_LUT_FIELDS = ("activation_lut_entries", "activation_lut_interpolation")


def _flatten_overrides(ov: Mapping, where: str) -> dict:
    fields = {f.name for f in dataclasses.fields(HardwareConfig)} - set(_NOT_OVERRIDABLE)
    return flatten_overrides(ov, where, fields, _TOML_KEYS, _FIELD_TO_TOML_REVERSE, ConfigError)


def _apply_changes(data: dict, changes: Mapping[str, Any]) -> None:
    """Apply ``changes`` (flat or dotted names) to a flat field dict with :meth:`HardwareConfig.replace`'s
    rules (a narrower accumulator narrows the bias register; new bits drop a fixed-point format)."""
    for key, value in changes.items():
        name = _FIELD_TO_TOML_REVERSE.get(key, key)
        if name not in data:
            raise ConfigError(f"unknown key '{key}'; allowed: {', '.join(data)}")
        data[name] = value
    changes = {_FIELD_TO_TOML_REVERSE.get(k, k): v for k, v in changes.items()}
    if "accumulator_bits" in data and "bias_bits" not in changes and isinstance(data["accumulator_bits"], int) \
            and isinstance(data["bias_bits"], int):
        data["bias_bits"] = min(data["bias_bits"], data["accumulator_bits"])
    if "accumulator_bits" in changes and "tile_accumulator_bits" not in changes and \
            isinstance(data.get("tile_accumulator_bits"), int) and isinstance(data["accumulator_bits"], int):
        data["tile_accumulator_bits"] = min(data["tile_accumulator_bits"], data["accumulator_bits"])
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
            raise ConfigError(f"{_dotted(field_name)}: cannot parse format {value!r} ({exc}); allowed: "
                              "'sfix16_En8', 'ufix8_En0', 'ap_fixed<16,8>', 'Q7.8', 'UQ8.8' or "
                              "{word = 16, frac = 8, signed = true}") from None
    raise ConfigError(f"{_dotted(field_name)}: expected a format string or table, got {value!r}")


# ----- presets -----------------------------------------------------------------------------------------
def preset_names() -> list[str]:
    """Names of the presets shipped in ``fxpsim/hardware/presets`` (file names without ``.toml``)."""
    files = resources.files("fxpsim.hardware.presets")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def preset(name: str) -> HardwareConfig:
    """Load a shipped preset by name, e.g. ``preset("tflite-int8")``."""
    names = preset_names()
    if name not in names:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(names)}")
    text = resources.files("fxpsim.hardware.presets").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    data.setdefault("name", name)
    return HardwareConfig.from_dict(data, source=f"preset {name}")


def load_config(spec: "str | os.PathLike | HardwareConfig | Mapping") -> HardwareConfig:
    """A config from a preset name, a TOML path, a mapping or a :class:`HardwareConfig`."""
    if isinstance(spec, HardwareConfig):
        return spec
    if isinstance(spec, Mapping):
        return HardwareConfig.from_dict(spec)
    spec_str = os.fspath(spec)
    if spec_str.endswith(".toml") or os.sep in spec_str or os.path.exists(spec_str):
        return HardwareConfig.from_toml(spec_str)
    return preset(spec_str)

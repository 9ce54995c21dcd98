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

This module holds the dataclass; the TOML schema and the checks every config runs live in
:mod:`fxpsim.hardware.config_schema`, reading files and presets in :mod:`fxpsim.hardware.config_files`
(their public names are importable from here).
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..core.fixed import Format, Overflow, Rounding
from .config_files import config_from_dict, config_from_toml, load_config, preset, preset_names
from .config_schema import (ACCUMULATOR_ORDERS, BIAS_ADD, OVERFLOW_AT, REQUANTIZATION_SCHEMES,  # noqa: F401
                            WEIGHT_SCALES, ZERO_POINTS, _FIELD_TO_TOML_REVERSE, _LUT_FIELDS, _NOT_OVERRIDABLE,
                            _OMITTED_AT_DEFAULT, _TOML_KEYS, ConfigError, _apply_changes, _describe, _dotted,
                            _plain_value, check_config)
from .overrides import LayerOverrides, flatten_overrides, is_index, unmatched_selectors_message

__all__ = ["HardwareConfig", "ConfigError", "preset", "preset_names", "load_config", "REQUANTIZATION_SCHEMES"]


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
    weight_scales : {"per-channel", "per-tensor", "none"}
        One scale per output channel or one per tensor; ``"none"`` (float datapaths only): unscaled.
    weight_narrow_range : bool
        Signed weights use ``[-(2**(b-1) - 1), 2**(b-1) - 1]`` (TFLite's int8 weights do).
    activation_bits : int
        Activation code width, 2..16.
    activation_format : Format or str, optional
        Fixed-point activations (zero point 0, scale ``2**-frac``).
    activation_scales : {"per-tensor", "none"}
        TOML ``activations.scales`` (float datapaths only): power-of-two scale, or ``"none"``: unscaled.
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
    accumulator_preset, accumulator_fraction_bits, accumulator_promote_every, accumulator_chunk : optional
        A float / block-scaled datapath (TOML ``accumulator.preset`` = a :class:`fxpsim.FloatAccumulator` preset,
        ``fraction_bits``, ``promote_every``, ``chunk`` (products per fused dot); with float ``weights.format``/``activations.format``, e.g. ``"e4m3"``,
        ``"mxfp4"``): :mod:`fxpsim.hardware.float_config` states the rules, :mod:`fxpsim.graph.float_mac` the math.
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
    activation_scales: str = "per-tensor"
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
    accumulator_preset: str | None = None
    accumulator_fraction_bits: int | None = None
    accumulator_promote_every: int | None = None
    accumulator_chunk: int | None = None
    layers: Any = ()

    def __post_init__(self) -> None:
        check_config(self)

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
        return config_from_dict(cls, data, source=source)

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "HardwareConfig":
        """Load a TOML file; errors name the file and the key."""
        return config_from_toml(cls, path)

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

    #: What :meth:`exact_datapath` may keep when asked (``keep=``): each field is otherwise made exact.
    EXACT_KEEPABLE = ("bias_bits", "bias_shift", "multiplier_bits", "activation_lut")

    def exact_datapath(self, accumulator_bits: int | None = None, name: str | None = None, *,
                       keep=()) -> "HardwareConfig":
        """The exact datapath of this target: the one reference every comparison, sweep and sensitivity uses.

        Everything that can lose information in the MAC datapath is made exact, everything else (weight,
        activation widths and scales, zero-point handling, order, bias placement, requantization scheme and
        its rounding) is kept:

        * an accumulator of ``accumulator_bits`` (default :meth:`exact_accumulator_bits`: 32 for the TFLite
          requantization schemes, the most they take, else 62) that wraps, at every add, with no K-tiling
          and none of the per-layer accumulator overrides (``accumulator_bits``, ``accumulator_overflow``,
          ``overflow_at``, ``tile_k``, ``tile_accumulator_bits``);
        * the full bias, :math:`b_q = \\mathrm{round}(b / (s_{in} s_w))` in a register as wide as that
          accumulator: ``bias_bits = accumulator_bits`` and ``bias_shift = 0`` (per-layer overrides of them
          dropped);
        * the full requantization multiplier, ``multiplier_bits = 31``;
        * the lookup-table activations (``activation_lut_entries``) dropped: the runtime's own arithmetic.

        Parameters
        ----------
        accumulator_bits : int, optional
            Width of the exact accumulator.
        name : str, optional
            Default ``"<name> (exact datapath)"``.
        keep : iterable of {"bias_bits", "bias_shift", "multiplier_bits", "activation_lut"}
            What the user pins: these keep this config's value (``bias_bits`` as
            :math:`\\min(bias\\_bits, accumulator\\_bits)`), so the comparison leaves them out.

        Returns
        -------
        HardwareConfig
            Its "not exact" columns count every output code that the accumulator width, overflow mode,
            tiles, a clipped or shifted bias, a short multiplier or a lookup table changes.
        """
        keep = {keep} if isinstance(keep, str) else set(keep)
        unknown = sorted(keep - set(self.EXACT_KEEPABLE))
        if unknown:
            raise ValueError(f"exact_datapath: keep names {unknown}; allowed: {', '.join(self.EXACT_KEEPABLE)}")
        if accumulator_bits is None:
            accumulator_bits = self.exact_accumulator_bits()
        if isinstance(accumulator_bits, bool) or not isinstance(accumulator_bits, (int, np.integer)):
            raise TypeError(f"exact_datapath: accumulator_bits must be an int, got {accumulator_bits!r}")
        acc = int(accumulator_bits)
        drop = {"accumulator_bits", "accumulator_overflow", "overflow_at", "tile_k", "tile_accumulator_bits"}
        if "bias_bits" not in keep:
            drop.add("bias_bits")
        if "bias_shift" not in keep:
            drop.add("bias_shift")
        if "multiplier_bits" not in keep:
            drop.add("multiplier_bits")
        if "activation_lut" not in keep:
            drop |= set(_LUT_FIELDS)
        layers = {sel: {k: v for k, v in ov.items() if k not in drop} for sel, ov in self.layers.items()}
        if "bias_bits" in keep:
            for ov in layers.values():
                if "bias_bits" in ov:
                    ov["bias_bits"] = min(int(ov["bias_bits"]), acc)
        data = self.to_flat_dict()
        data.update(name=name or f"{self.name} (exact datapath)", accumulator_bits=acc,
                    bias_bits=min(self.bias_bits, acc) if "bias_bits" in keep else acc,
                    accumulator_overflow="wrap", overflow_at="add", tile_k=None, tile_accumulator_bits=None,
                    layers={sel: ov for sel, ov in layers.items() if ov})
        if "bias_shift" not in keep:
            data["bias_shift"] = 0
        if "multiplier_bits" not in keep:
            data["multiplier_bits"] = 31
        if "activation_lut" not in keep:
            data.update(activation_lut_entries=None, activation_lut_interpolation="none")
        return type(self)(**data)

    def exact_accumulator_bits(self) -> int:
        """Width of the exact datapath's accumulator: 32 when a TFLite requantization scheme reads it (the
        most those take), else 62."""
        schemes = (self.requantization, self.dense_requantization or "",
                   *(ov.get("requantization", "") for ov in self.layers.values()),
                   *(ov.get("dense_requantization", "") or "" for ov in self.layers.values()))
        return 32 if any(str(s).startswith("tflite") for s in schemes) else 62

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
        omitted = importlib.import_module("fxpsim.hardware.float_config").omitted_fields(self)
        for sec, keys in _TOML_KEYS.items():
            out[sec] = {}
            for key, fld in keys.items():
                value = getattr(self, fld)
                if value is None or fld in omitted or \
                        (fld in _OMITTED_AT_DEFAULT and value == _OMITTED_AT_DEFAULT[fld]):
                    continue
                out[sec][key] = _plain_value(value)
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
        if self.accumulator_preset is not None:
            return importlib.import_module("fxpsim.hardware.float_config").float_summary(self)
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


def _flatten_overrides(ov: Mapping, where: str) -> dict:
    fields = {f.name for f in dataclasses.fields(HardwareConfig)} - set(_NOT_OVERRIDABLE)
    return flatten_overrides(ov, where, fields, _TOML_KEYS, _FIELD_TO_TOML_REVERSE, ConfigError)



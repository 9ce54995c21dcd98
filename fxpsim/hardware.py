"""Target-hardware description, conversion of trained networks to integer form, and simulation.

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

Presets live in ``fxpsim/presets/*.toml`` (see :func:`preset_names`); users write their own TOML with the
same sections (``[weights]``, ``[activations]``, ``[bias]``, ``[accumulator]``, ``[requantization]``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .fixed import Format, Overflow, Rounding

__all__ = ["HardwareConfig", "ConfigError", "preset", "preset_names", "load_config", "REQUANTIZATION_SCHEMES",
           "convert", "extract", "simulate", "sweep", "IntegerNetwork", "IntegerLayer", "FloatGraph",
           "FloatStage", "activation_params", "quantize_weights", "layer_requantizer"]

REQUANTIZATION_SCHEMES = ("tflite-double", "tflite-single", "shift", "float")
WEIGHT_SCALES = ("per-channel", "per-tensor")
ACCUMULATOR_ORDERS = ("sequential", "tree")
OVERFLOW_AT = ("add", "end")
BIAS_ADD = ("preload", "after")


class ConfigError(ValueError):
    """A hardware configuration is invalid; the message names the key and what is allowed."""


# TOML section/key -> dataclass field.  Flat field names are accepted as well (``weight_bits = 4``).
_TOML_KEYS: dict[str, dict[str, str]] = {
    "weights": {"bits": "weight_bits", "format": "weight_format", "signed": "weight_signed",
                "scales": "weight_scales", "narrow_range": "weight_narrow_range"},
    "activations": {"bits": "activation_bits", "format": "activation_format",
                    "signed": "activation_signed", "symmetric": "activation_symmetric"},
    "bias": {"bits": "bias_bits", "add": "bias_add"},
    "accumulator": {"bits": "accumulator_bits", "overflow": "accumulator_overflow",
                    "order": "accumulator_order", "overflow_at": "overflow_at"},
    "requantization": {"scheme": "requantization", "dense_scheme": "dense_requantization", "rounding": "rounding",
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
    bias_bits : int, optional
        Bias register width (default: the accumulator's); biases are stored in the accumulator's scale
        :math:`s_{in} s_w` and saturate to this width.
    bias_add : {"preload", "after"}
        The accumulator starts from the bias (many NPUs), or the bias is added after the dot product with
        one more overflow-checked add (TFLite's reference kernels).
    accumulator_bits : int
        Accumulator width, 2..64.
    accumulator_overflow : Overflow or str
        Applied after every add (``overflow_at="add"``) or once at the end (``"end"``).
    accumulator_order : {"sequential", "tree"}
        Summation order of the MAC array.
    overflow_at : {"add", "end"}
        Per-add overflow (a narrow adder) or a wide adder with one final cast.
    requantization : {"tflite-double", "tflite-single", "shift", "float"}
        How the accumulator is scaled to the output's codes (see the module docstring).
    dense_requantization : str, optional
        A different scheme for fully connected layers (default: ``requantization``). TFLite's reference
        FULLY_CONNECTED (the build of the shared vectors, TF 2.21) requantizes in float64 with round half
        away while its convolutions use ``tflite-double``; the ``tflite-int8`` preset sets ``"float"``.
    rounding : Rounding or str
        Rounding of every float-to-code conversion (weights, biases, inputs) and of the ``shift`` and
        ``float`` requantizations; the TFLite schemes round as gemmlowp does.
    activation_clamp : bool
        Fuse ReLU/ReLU6 into the requantized output clamp (TFLite does); otherwise they run as separate
        integer max/min ops on the codes (same result, kept for completeness of the model).
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
    bias_bits: int | None = None
    bias_add: str = "preload"
    accumulator_bits: int = 32
    accumulator_overflow: Overflow = Overflow.WRAP
    accumulator_order: str = "sequential"
    overflow_at: str = "add"
    requantization: str = "tflite-double"
    dense_requantization: str | None = None
    rounding: Rounding = Rounding.HALF_AWAY
    activation_clamp: bool = True

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
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
        for name, lo, hi in (("weight_bits", 2, 16), ("activation_bits", 2, 16), ("accumulator_bits", 2, 64),
                             ("bias_bits", 2, 64)):
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
                              ("requantization", REQUANTIZATION_SCHEMES),
                              ("dense_requantization", (None,) + REQUANTIZATION_SCHEMES)):
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"{_dotted(name)}: unknown value {value!r}; allowed: "
                                  f"{', '.join(a for a in allowed if a is not None)}")
        set_("accumulator_overflow", _parse_enum(Overflow, self.accumulator_overflow, "accumulator_overflow"))
        set_("rounding", _parse_enum(Rounding, self.rounding, "rounding"))
        if self.rounding == Rounding.STOCHASTIC:
            raise ConfigError("requantization.rounding: 'stochastic' is not supported by the simulation; "
                              f"allowed: {', '.join(r.value for r in Rounding if r != Rounding.STOCHASTIC)}")
        if self.bias_bits > self.accumulator_bits:
            raise ConfigError(f"bias.bits: a {self.bias_bits}-bit bias does not fit the "
                              f"{self.accumulator_bits}-bit accumulator; allowed: 2..{self.accumulator_bits} "
                              "(or leave it out: it defaults to the accumulator's width)")

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
        data.setdefault("name", os.path.splitext(os.path.basename(path))[0])
        return cls.from_dict(data, source=path)

    @classmethod
    def preset(cls, name: str) -> "HardwareConfig":
        """A preset shipped with fxpsim (see :func:`preset_names`)."""
        return preset(name)

    def replace(self, **changes: Any) -> "HardwareConfig":
        """A copy with some fields changed (flat names, or dotted TOML names via ``**{"accumulator.bits": 16}``).

        Changing ``accumulator_bits`` without ``bias_bits`` narrows the bias register with it:
        ``bias_bits = min(bias_bits, accumulator_bits)``; a new ``weight_bits``/``activation_bits`` drops a
        fixed-point ``*_format``.
        """
        data = self.to_flat_dict()
        for key, value in changes.items():
            name = _FIELD_TO_TOML_REVERSE.get(key, key)
            if name not in data:
                raise ConfigError(f"unknown key '{key}'; allowed: {', '.join(data)}")
            data[name] = value
        changes = {_FIELD_TO_TOML_REVERSE.get(k, k): v for k, v in changes.items()}
        if "accumulator_bits" in data and "bias_bits" not in changes and isinstance(data["accumulator_bits"], int):
            data["bias_bits"] = min(data["bias_bits"], data["accumulator_bits"])
        if "weight_bits" in changes and "weight_format" not in changes:
            data["weight_format"] = None
        if "activation_bits" in changes and "activation_format" not in changes:
            data["activation_format"] = None
        return type(self)(**data)

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
                if value is None:
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
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        """One line: ``W8(per-channel) A8 B32 ACC32 wrap/sequential tflite-double half_away``."""
        w = str(self.weight_format) if self.weight_format else \
            f"{'' if self.weight_signed else 'u'}int{self.weight_bits}"
        a = str(self.activation_format) if self.activation_format else \
            f"{'' if self.activation_signed else 'u'}int{self.activation_bits}"
        return (f"weights {w} {self.weight_scales}, activations {a}, bias int{self.bias_bits}, "
                f"accumulator int{self.accumulator_bits} {self.accumulator_overflow.value}"
                f"{'' if self.overflow_at == 'add' else ' at end'} ({self.accumulator_order}), "
                f"requant {self.requantization}"
                f"{f' (dense: {self.dense_requantization})' if self.dense_requantization else ''}, "
                f"rounding {self.rounding.value}")


_FIELD_TO_TOML_REVERSE = {f"{sec}.{key}": fld for fld, (sec, key) in _FIELD_TO_TOML.items()}


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
    """Names of the presets shipped in ``fxpsim/presets`` (file names without ``.toml``)."""
    files = resources.files("fxpsim.presets")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def preset(name: str) -> HardwareConfig:
    """Load a shipped preset by name, e.g. ``preset("tflite-int8")``."""
    names = preset_names()
    if name not in names:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(names)}")
    text = resources.files("fxpsim.presets").joinpath(f"{name}.toml").read_text(encoding="utf-8")
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


# =====================================================================================================
# Conversion of a trained model to an integer network
# =====================================================================================================
_LINEAR_KINDS = ("dense", "conv2d", "depthwise_conv2d")


@dataclass
class FloatStage:
    """One stage of the folded float network: a linear layer with its fused activation, or a shape op.

    ``weight`` is in the model's layout (dense [in, out], conv HWIO, depthwise [KH, KW, C, M]) and holds the
    weights the model multiplies with (after its weight quantizer); ``out_range`` is the float range of the
    stage's output (from the model's activation quantizer, or calibrated on data).
    """

    kind: str
    name: str
    model_layers: tuple
    weight: Any = None
    bias: Any = None
    activation: str | None = None
    stride: tuple = (1, 1)
    padding: str = "VALID"
    pool_size: tuple = (1, 1)
    out_range: tuple | None = None
    range_source: str = "calibration"


@dataclass
class FloatGraph:
    """A trained model reduced to what the hardware needs.

    ``folded`` (the batch-norm-folded eval-mode model, used for float reference outputs in this process)
    is dropped when the graph is pickled, so sweep tasks carry only arrays and numbers.
    """

    stages: list
    input_range: tuple
    input_range_source: str
    input_shape: tuple
    model_repr: str = ""
    folded: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self):
        return {**self.__dict__, "folded": None}


def _quantizer_range(q) -> tuple[float, float] | None:
    """The real range ``[s (qmin - z), s (qmax - z)]`` of an activation quantizer, when it has one."""
    if q is None:
        return None
    try:
        form = q.integer_form(np.zeros(1, dtype=np.float32))
    except (NotImplementedError, RuntimeError, ValueError, TypeError):
        return None
    scale = np.asarray(form.scale, dtype=np.float64)
    if scale.size != 1:
        return None  # per-channel activation ranges: calibrate instead
    zp = float(np.asarray(form.zero_point).reshape(-1)[0])
    s = float(scale.reshape(-1)[0])
    return (s * (form.quant_min - zp), s * (form.quant_max - zp))


def extract(model, calibration_x) -> FloatGraph:
    """Fold batch norm, group layers into hardware stages, and find every stage's output range.

    Ranges come from the model's activation quantizers (e.g. a trained ``FakeQuant``'s min/max) where
    present, and from the min/max of the float outputs on ``calibration_x`` elsewhere.
    """
    from . import nn
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"extract: expected an fxpsim.nn.Sequential model, got {type(model).__name__}")
    x = _check_x(calibration_x, "calibration_x")
    folded = nn.fold_batchnorm(model)
    layers = list(folded.layers)
    stages: list[FloatStage] = []
    input_q = None
    i = 0
    if layers and type(layers[0]) is nn.Quantize:
        input_q, i = layers[0].activation_quantizer, 1
    while i < len(layers):
        layer, covered = layers[i], [i]
        kind = {nn.Dense: "dense", nn.Conv2D: "conv2d", nn.DepthwiseConv2D: "depthwise_conv2d",
                nn.MaxPool2D: "max_pool2d", nn.AvgPool2D: "avg_pool2d", nn.Flatten: "flatten",
                nn.ReLU: "relu", nn.ReLU6: "relu6"}.get(type(layer))
        if kind is None:
            what = ("a BatchNorm that cannot be folded (it does not follow a linear layer without activation)"
                    if isinstance(layer, nn.BatchNorm) else f"a {type(layer).__name__} layer")
            raise ValueError(f"layer {i} is {what}; the integer simulation supports Dense, Conv2D, "
                             "DepthwiseConv2D (+ folded BatchNorm), ReLU, ReLU6, MaxPool2D, AvgPool2D, Flatten "
                             "and a leading Quantize")
        stage = FloatStage(kind=kind, name=f"{i}:{kind}", model_layers=())
        range_q = None
        if kind in _LINEAR_KINDS:
            stage.weight = np.asarray(layer.quantized_weight(), dtype=np.float64)
            stage.bias = (np.zeros(stage.weight.shape[-1] if kind != "depthwise_conv2d" else
                                   stage.weight.shape[2] * stage.weight.shape[3])
                          if layer.b is None else np.asarray(layer.b, dtype=np.float64))
            stage.activation = layer.activation
            range_q = layer.activation_quantizer
            if kind != "dense":
                stage.stride, stage.padding = tuple(layer.stride), layer.padding
            nxt = layers[i + 1] if i + 1 < len(layers) else None
            if layer.activation is None and range_q is None and type(nxt) in (nn.ReLU, nn.ReLU6):
                stage.activation = "relu" if type(nxt) is nn.ReLU else "relu6"
                range_q = nxt.activation_quantizer
                covered.append(i + 1)
        elif kind in ("max_pool2d", "avg_pool2d"):
            stage.pool_size, stage.stride, stage.padding = tuple(layer.pool_size), tuple(layer.stride), layer.padding
        j = covered[-1] + 1
        if kind in _LINEAR_KINDS and range_q is None and j < len(layers) and type(layers[j]) is nn.Quantize:
            range_q = layers[j].activation_quantizer
            covered.append(j)
        stage.model_layers = tuple(covered)
        stage.out_range = _quantizer_range(range_q)   # shape ops and a lone ReLU keep their input's codes
        if stage.out_range is not None:
            stage.range_source = "quantizer"
        stages.append(stage)
        i = covered[-1] + 1
    if not any(s.kind in _LINEAR_KINDS for s in stages):
        raise ValueError("the model has no Dense/Conv2D/DepthwiseConv2D layer to simulate")
    outputs = _float_trace(folded, _stage_ends(stages), x)
    x_in = x if input_q is None else outputs.pop(0)
    in_range = _quantizer_range(input_q)
    in_source = "quantizer" if in_range is not None else "calibration"
    if in_range is None:
        in_range = (float(x_in.min()), float(x_in.max()))
    for stage, out in zip(stages, outputs):
        if stage.out_range is None and stage.kind in _LINEAR_KINDS:
            stage.out_range = (float(out.min()), float(out.max()))
    return FloatGraph(stages, in_range, in_source, tuple(x.shape[1:]), repr(model), folded)


def _check_x(x, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty batch [N, ...], got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must be a float array, got dtype {x.dtype}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds {int(x.size - np.isfinite(x).sum())} NaN/inf value(s)")
    return x.astype(np.float32, copy=False)


def _stage_ends(stages) -> list[int]:
    """Model-layer indices whose outputs are the stage boundaries (plus a leading Quantize's output)."""
    ends = [s.model_layers[-1] for s in stages]
    return ([0] if stages[0].model_layers[0] > 0 else []) + ends


def _float_trace(folded, ends, x, batch_size=1024) -> list[np.ndarray]:
    """Float64 outputs of the folded, eval-mode model after each layer index in ``ends`` (ascending)."""
    chunks: list[list[np.ndarray]] = [[] for _ in ends]
    for start in range(0, len(x), batch_size):
        h = x[start:start + batch_size]
        k = 0
        for idx, layer in enumerate(folded.layers[:ends[-1] + 1]):
            h = layer.forward(h)
            while k < len(ends) and idx == ends[k]:
                chunks[k].append(np.asarray(h, dtype=np.float64))
                k += 1
    return [np.concatenate(c) for c in chunks]


@dataclass
class IntegerLayer:
    """One stage of the integer network (TFLite tensor layouts; codes as int64 arrays).

    ``weight``: dense [O, K], conv [O, KH, KW, C], depthwise [1, KH, KW, C*M]; ``bias`` int [O] in the
    accumulator's scale; ``requant`` a :class:`fxpsim.requantize.Requantizer`; ``act_min``/``act_max`` the
    output clamp (fused activation); input/output ``scale`` and ``zero_point`` as TFLite's tensors.
    """

    kind: str
    name: str
    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    act_min: int
    act_max: int
    weight: Any = None
    weight_scale: Any = None
    weight_zero_point: Any = 0
    bias: Any = None
    requant: Any = None
    activation: str | None = None
    stride: tuple = (1, 1)
    padding: str = "VALID"
    pool_size: tuple = (1, 1)
    macs: int = 0


@dataclass
class IntegerNetwork:
    """A converted network: integer layers plus the input quantization and the datapath settings."""

    config: HardwareConfig
    layers: list
    input_scale: float
    input_zero_point: int
    qmin: int
    qmax: int

    @property
    def code_dtype(self):
        return _code_dtype(self.config.activation_bits, self.config.activation_signed)

    def quantize_input(self, x) -> np.ndarray:
        """Input codes :math:`\\mathrm{clamp}(\\mathrm{round}(x / s) + z, q_{min}, q_{max})`."""
        from .fixed import from_float
        x = np.asarray(x, dtype=np.float64)
        codes = from_float(x / self.input_scale, Format.integer(62), rounding=self.config.rounding).raw
        return np.clip(codes + self.input_zero_point, self.qmin, self.qmax).astype(self.code_dtype)

    def run(self, codes, trace: bool = False, batch_size: int = 256):
        """Run input codes through every layer: output codes, or ``(codes, per-layer traces)``.

        A trace is ``{"out": output codes, "hw_acc": the accumulator codes the requantizer saw (None for
        layers without an accumulator), "overflows": accumulator overflow events, "clipped": outputs clamped
        by the output range (not counting a fused ReLU's floor), "adds": accumulator additions}``.
        """
        if not trace and len(codes) > batch_size:  # cache-sized chunks: same bits, less memory traffic
            return np.concatenate([self.run(codes[i:i + batch_size], batch_size=batch_size)
                                   for i in range(0, len(codes), batch_size)])
        traces = []
        h = codes
        for layer in self.layers:
            h, info = _run_layer(layer, h, self.config, self.qmin, self.qmax, trace)
            if trace:
                traces.append(info)
        return (h, traces) if trace else h

    def predict(self, x) -> np.ndarray:
        """Dequantized outputs (logits) of the hardware for float inputs ``x``."""
        last = self.layers[-1]
        out = self.run(self.quantize_input(x)).astype(np.float64)
        return (out - last.output_zero_point) * last.output_scale


def _code_dtype(bits: int, signed: bool):
    if bits <= 8:
        return np.int8 if signed else np.uint8
    return np.int16 if signed else np.uint16


def _code_range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _round_half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _pow2_ceil(v: np.ndarray) -> np.ndarray:
    return np.exp2(np.ceil(np.log2(v)))


def activation_params(lo: float, hi: float, config: HardwareConfig) -> tuple[float, int]:
    """Scale (float32) and zero point of an activation tensor with real range ``[lo, hi]``.

    Asymmetric: :math:`s = (hi - lo)/(q_{max} - q_{min})`, :math:`z = \\mathrm{clamp}(q_{min} -
    \\mathrm{round}(lo / s))` (round half away) (the range is first widened to hold 0, as TFLite's converter does);
    symmetric: :math:`s = \\max(|lo|, |hi|) / q_{max}`, :math:`z = 0`. With the ``shift`` scheme the scale
    is rounded up to a power of two; a fixed ``activation_format`` gives :math:`s = 2^{-f}`, :math:`z = 0`.
    """
    qmin, qmax = _code_range(config.activation_bits, config.activation_signed)
    if config.activation_format is not None:
        return float(config.activation_format.lsb), 0
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-12:
        hi = lo + 1.0  # a constant tensor (e.g. a dead ReLU layer): any scale represents it
    if config.activation_symmetric:
        scale = (max(-lo, hi) if config.activation_signed else hi) / qmax  # unsigned: negatives clip to 0
        if "shift" in _schemes(config):
            scale = float(_pow2_ceil(np.float64(scale)))
        return float(np.float32(scale)), 0
    scale = (hi - lo) / (qmax - qmin)
    if "shift" in _schemes(config):
        scale = float(_pow2_ceil(np.float64(scale)))
    scale = float(np.float32(scale))
    zp = int(np.clip(qmin - _round_half_away(lo / scale), qmin, qmax))
    return scale, zp


def quantize_weights(w_oc: np.ndarray, config: HardwareConfig):
    """Integer weight codes, scales and zero points; ``w_oc`` has the output channel on axis 0.

    Signed (symmetric) per channel :math:`c`: :math:`s_c = \\max|w_c| / q_{max}`,
    :math:`q = \\mathrm{clamp}(\\mathrm{round}(w / s_c), -q_{max}, q_{max})` (narrow range; ``-q_max - 1``
    allowed otherwise). Unsigned: :math:`s_c = (\\max w_c - \\min w_c)/(2^b - 1)` with a zero point.
    ``per-tensor`` uses one scale; ``shift`` rounds scales up to powers of two; a ``weight_format`` fixes
    :math:`s = 2^{-f}`.
    """
    from .fixed import from_float
    bits, signed = config.weight_bits, config.weight_signed
    qmin, qmax = _code_range(bits, signed)
    if signed and config.weight_narrow_range:
        qmin = -qmax
    n_out = w_oc.shape[0]
    flat = w_oc.reshape(n_out, -1)
    if config.weight_scales == "per-tensor":
        flat_all = flat.reshape(1, -1)
        wmin, wmax = np.full(n_out, flat_all.min()), np.full(n_out, flat_all.max())
    else:
        wmin, wmax = flat.min(axis=1), flat.max(axis=1)
    if config.weight_format is not None:
        scale = np.full(n_out, config.weight_format.lsb)
        zp = np.zeros(n_out, dtype=np.int64)
    elif signed:
        scale = np.maximum(np.maximum(-wmin, wmax), 1e-12) / qmax
        zp = np.zeros(n_out, dtype=np.int64)
    else:
        lo, hi = np.minimum(wmin, 0.0), np.maximum(wmax, 0.0)
        scale = np.maximum(hi - lo, 1e-12) / (qmax - qmin)
        zp = None
    if "shift" in _schemes(config) and config.weight_format is None:
        scale = _pow2_ceil(scale)
    scale = scale.astype(np.float32).astype(np.float64)
    if zp is None:
        zp = np.clip(qmin - _round_half_away(np.minimum(wmin, 0.0) / scale), qmin, qmax).astype(np.int64)
    shape = (n_out,) + (1,) * (w_oc.ndim - 1)
    codes = from_float(w_oc / scale.reshape(shape), Format.integer(62), rounding=config.rounding).raw
    codes = np.clip(codes + zp.reshape(shape), qmin, qmax)
    return codes, scale, zp


def convert(model, config, calibration_x=None) -> IntegerNetwork:
    """Convert a trained model (or a :class:`FloatGraph` from :func:`extract`) to an :class:`IntegerNetwork`.

    Batch norm is folded, weights are quantized per :func:`quantize_weights`, biases become integers in the
    accumulator's scale :math:`s_{in} s_{w,c}` (saturated to ``bias_bits``), activation ranges come from the
    model's quantizers or from ``calibration_x``, and each linear layer gets the requantizer of the
    configured scheme for :math:`M_c = s_{in} s_{w,c} / s_{out}`.
    """
    from .fixed import from_float
    from .requantize import activation_range
    config = load_config(config)
    if any(s.startswith("tflite") for s in _schemes(config)) and config.accumulator_bits > 32:
        raise ConfigError(f"accumulator.bits = {config.accumulator_bits}: the TFLite requantization schemes "
                          "use 32-bit gemmlowp arithmetic; allowed: 2..32, or requantization.scheme 'float'/'shift'")
    if isinstance(model, FloatGraph):
        graph = model
    else:
        if calibration_x is None:
            raise ValueError("convert: give calibration_x (float inputs used to calibrate activation ranges)")
        graph = extract(model, calibration_x)
    qmin, qmax = _code_range(config.activation_bits, config.activation_signed)
    dtype = _code_dtype(config.activation_bits, config.activation_signed)
    s_in, z_in = activation_params(*graph.input_range, config)
    layers = []
    s_cur, z_cur = s_in, z_in
    for st in graph.stages:
        if st.kind in _LINEAR_KINDS:
            w = st.weight
            if st.kind == "dense":
                w_oc = w.T                                     # [O, K]
            elif st.kind == "conv2d":
                w_oc = np.transpose(w, (3, 0, 1, 2))           # [O, KH, KW, C]
            else:
                kh, kw, c, m = w.shape
                w_oc = np.transpose(w.reshape(kh, kw, c * m), (2, 0, 1))[..., None]  # [C*M, KH, KW, 1]
            codes, w_scale, w_zp = quantize_weights(w_oc, config)
            if st.kind == "depthwise_conv2d":
                codes = np.transpose(codes[..., 0], (1, 2, 0))[None]  # [1, KH, KW, C*M]
            s_out, z_out = activation_params(*st.out_range, config)
            bias_scale = s_cur * w_scale
            bias = from_float(st.bias / bias_scale, Format.integer(config.bias_bits),
                              rounding=config.rounding, overflow="saturate").raw
            requant = layer_requantizer(config, st.kind, s_cur,
                                        w_scale if config.weight_scales == "per-channel" else w_scale[:1], s_out)
            act = st.activation if config.activation_clamp else None
            lo, hi = activation_range(act or "none", s_out, z_out, dtype)
            lo, hi = max(lo, qmin), min(hi, qmax)
            k = int(np.prod(w_oc.shape[1:]))
            out_elems = _stage_out_elems(st, graph)
            layers.append(IntegerLayer(st.kind, st.name, s_cur, z_cur, s_out, z_out, lo, hi,
                                       weight=codes.astype(_code_dtype(config.weight_bits, config.weight_signed)),
                                       weight_scale=w_scale, weight_zero_point=w_zp, bias=bias,
                                       requant=requant, activation=st.activation, stride=st.stride,
                                       padding=st.padding, macs=k * out_elems))
            s_cur, z_cur = s_out, z_out
        else:
            lo, hi = qmin, qmax
            if st.kind in ("relu", "relu6"):
                lo, hi = activation_range(st.kind, s_cur, z_cur, dtype)
                lo, hi = max(lo, qmin), min(hi, qmax)
            layers.append(IntegerLayer(st.kind, st.name, s_cur, z_cur, s_cur, z_cur, lo, hi,
                                       activation=st.kind if st.kind.startswith("relu") else None,
                                       stride=st.stride, padding=st.padding, pool_size=st.pool_size))
    net = IntegerNetwork(config, layers, s_in, z_in, qmin, qmax)
    return net


def _schemes(config: HardwareConfig) -> set:
    return {config.requantization, config.dense_requantization or config.requantization}


def layer_requantizer(config: HardwareConfig, kind: str, input_scale: float, weight_scales, output_scale: float):
    """The :class:`fxpsim.requantize.Requantizer` of a ``kind`` layer (``"dense"``, ``"conv2d"``, ...) under
    ``config`` for :math:`M_c = s_{in} s_{w,c} / s_{out}` (scales rounded to float32, as TFLite stores them)."""
    from .requantize import Requantizer
    scheme = config.dense_requantization if kind == "dense" and config.dense_requantization else config.requantization
    kinds = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}
    return Requantizer.tflite(input_scale, weight_scales, output_scale, kind=kinds[scheme], rounding=config.rounding)


def _stage_out_elems(stage: FloatStage, graph: FloatGraph) -> int:
    """Output elements per sample of a linear stage (from a shape walk of the stages so far)."""
    shape = tuple(graph.input_shape)
    for st in graph.stages:
        shape = _out_shape(st, shape)
        if st is stage:
            return int(np.prod(shape))
    raise AssertionError("stage not in graph")  # pragma: no cover


def _out_shape(st: FloatStage, shape: tuple) -> tuple:
    from .layers_conv import output_size_and_padding
    if st.kind == "dense":
        return (st.weight.shape[1],)
    if st.kind == "flatten":
        return (int(np.prod(shape)),)
    if st.kind in ("relu", "relu6"):
        return shape
    kernel = st.weight.shape[:2] if st.kind in ("conv2d", "depthwise_conv2d") else st.pool_size
    oh = output_size_and_padding(shape[0], kernel[0], st.stride[0], st.padding)[0]
    ow = output_size_and_padding(shape[1], kernel[1], st.stride[1], st.padding)[0]
    channels = {"conv2d": lambda: st.weight.shape[3],
                "depthwise_conv2d": lambda: st.weight.shape[2] * st.weight.shape[3]}.get(st.kind, lambda: shape[2])()
    return (oh, ow, channels)


def _run_layer(layer: IntegerLayer, h: np.ndarray, config: HardwareConfig, qmin: int, qmax: int, trace: bool):
    """One integer layer: (output codes, trace dict or None)."""
    from .requantize import quantized_average_pool2d, quantized_conv2d, quantized_depthwise_conv2d, \
        quantized_fully_connected
    dtype = h.dtype
    info = None
    if layer.kind in _LINEAR_KINDS:
        common = dict(requant=layer.requant, x_zp=layer.input_zero_point, w_zp=layer.weight_zero_point
                      if np.any(layer.weight_zero_point) else 0, out_zp=layer.output_zero_point,
                      act_min=layer.act_min, act_max=layer.act_max, out_dtype=dtype,
                      acc=Format.integer(config.accumulator_bits), overflow=config.accumulator_overflow.value,
                      order=config.accumulator_order, bias_at="init" if config.bias_add == "preload" else "end")
        if config.overflow_at == "end":
            common.update(acc=Format.integer(62), overflow="wrap", requant=_identity_requant(),
                          act_min=None, act_max=None, out_dtype=np.int8)
        if layer.kind == "dense":
            res = quantized_fully_connected(h, layer.weight, layer.bias, **common)
        else:
            fn = quantized_conv2d if layer.kind == "conv2d" else quantized_depthwise_conv2d
            res = fn(h, layer.weight, layer.bias, stride=layer.stride, padding=layer.padding, **common)
        out, acc, overflows = res.out, res.acc, res.overflows
        if config.overflow_at == "end" or trace:
            pre, acc, overflows = _requantize_end(layer, acc, config, overflows)
            if config.overflow_at == "end":
                out = np.clip(pre, layer.act_min, layer.act_max).astype(dtype)
            if trace:
                info = {"out": out, "hw_acc": acc, "overflows": overflows,
                        "clipped": int(np.count_nonzero((pre > layer.act_max) if layer.activation else
                                                        (pre > layer.act_max) | (pre < layer.act_min))),
                        "adds": int(out.size) * (int(np.prod(layer.weight.shape[1:]))
                                                 + (config.bias_add == "after"))}
        return out, info
    if layer.kind == "max_pool2d":
        from .layers_conv import extract_patches, output_size_and_padding, pad_nhwc
        _, top, bottom = output_size_and_padding(h.shape[1], layer.pool_size[0], layer.stride[0], layer.padding)
        _, left, right = output_size_and_padding(h.shape[2], layer.pool_size[1], layer.stride[1], layer.padding)
        windows = extract_patches(pad_nhwc(h, (top, bottom, left, right), np.iinfo(dtype).min),
                                  layer.pool_size, layer.stride)
        out = windows.max(axis=(3, 4))
    elif layer.kind == "avg_pool2d":
        res = quantized_average_pool2d(h, layer.pool_size, stride=layer.stride, padding=layer.padding,
                                       act_min=qmin, act_max=qmax, acc=Format.integer(min(config.accumulator_bits, 62)),
                                       overflow=config.accumulator_overflow.value)
        out = res.out
        if trace:
            info = {"out": out, "hw_acc": res.acc, "overflows": res.overflows, "clipped": 0,
                    "adds": int(out.size) * int(np.prod(layer.pool_size))}
        return out, info
    elif layer.kind == "flatten":
        out = h.reshape(h.shape[0], -1)
    else:  # relu / relu6 as separate integer ops
        out = np.clip(h, layer.act_min, layer.act_max).astype(dtype)
    if trace:
        info = {"out": out, "hw_acc": None, "overflows": 0, "clipped": 0, "adds": 0}
    return out, info


def _identity_requant():
    from .requantize import Requantizer
    return Requantizer("shift", shift=(0,))


def _requantize_end(layer: IntegerLayer, acc: np.ndarray, config: HardwareConfig, overflows: int):
    """Pre-clamp output codes ``R(acc) + z``; with ``overflow_at="end"`` the wide sum is fitted first."""
    from .fixed import FixedArray
    if config.overflow_at == "end":
        fitted = FixedArray(acc, Format.integer(62)).cast(Format.integer(config.accumulator_bits),
                                                          overflow=config.accumulator_overflow.value)
        overflows = int(fitted.overflows)
        acc = fitted.raw
    return layer.requant(acc, axis=-1) + layer.output_zero_point, acc, overflows


# =====================================================================================================
# Simulation
# =====================================================================================================
def _signed_bits(lo: int, hi: int) -> int:
    """Smallest two's complement width holding every integer in [lo, hi]."""
    return max(int(hi).bit_length() if hi >= 0 else 0, int(-lo - 1).bit_length() if lo < 0 else 0) + 1


def _exact_accumulator(layer: IntegerLayer, h: np.ndarray) -> np.ndarray:
    """Infinite-precision accumulator values :math:`\\sum (x - z_x)(w - z_w) + b` (float64 BLAS, exact
    while every partial sum stays below :math:`2^{53}`, which the code widths guarantee)."""
    from . import layers_conv
    xo = h.astype(np.float64) - layer.input_zero_point
    wz = np.asarray(layer.weight_zero_point, dtype=np.float64)
    if layer.kind == "dense":
        w = layer.weight.astype(np.float64) - (wz.reshape(-1, 1) if wz.ndim else wz)
        acc = xo @ w.T
    elif layer.kind == "conv2d":
        w = layer.weight.astype(np.float64) - (wz.reshape(-1, 1, 1, 1) if wz.ndim else wz)
        acc = layers_conv.conv2d_forward(xo, np.transpose(w, (1, 2, 3, 0)), layer.stride, layer.padding)[0]
    else:
        c = h.shape[3]
        w = layer.weight.astype(np.float64) - (wz if wz.ndim == 0 else wz.reshape(1, 1, 1, -1))
        kh, kw = w.shape[1:3]
        acc = layers_conv.depthwise_conv2d_forward(xo, w[0].reshape(kh, kw, c, -1), layer.stride,
                                                   layer.padding)[0]
    return (acc + layer.bias).astype(np.int64)


def _signed_log2_histogram(values: np.ndarray, bits: int, bins: int):
    r"""Histogram of :math:`\mathrm{sign}(v)\log_2(1 + |v|)` over ``[-bits, bits]`` (a value that needs
    :math:`b` bits sits near :math:`\pm(b - 1)`)."""
    t = np.sign(values) * np.log2(1.0 + np.abs(values.astype(np.float64)))
    counts, edges = np.histogram(t, bins=2 * (bins // 2), range=(-float(bits), float(bits)))
    return counts, edges


def _errors(hw: np.ndarray, ref: np.ndarray, lsb: float) -> tuple[float, float, float]:
    """(MSE, SQNR dB, max |error| in LSBs) of dequantized hardware outputs against a float reference."""
    err = hw - ref
    noise = float(np.sum(err * err))
    signal = float(np.sum(ref * ref))
    mse = noise / max(err.size, 1)
    if noise == 0.0:
        sqnr = math.inf
    elif signal == 0.0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    return mse, sqnr, float(np.max(np.abs(err)) / lsb) if err.size else 0.0


def _check_labels(y, n: int):
    if y is None:
        return None
    y = np.asarray(y)
    if y.dtype.kind not in "iu" or y.shape != (n,):
        raise ValueError(f"y must be integer labels of shape ({n},), got dtype {y.dtype} and shape {y.shape}")
    return y


def simulate(model, config="tflite-int8", x=None, y=None, *, calibration_x=None, histogram_bins: int = 60,
             title: str | None = None, batch_size: int = 4096):
    """Run ``model`` on the target hardware, bit for bit, and report where it differs from the float model.

    Parameters
    ----------
    model : fxpsim.nn.Sequential
        A trained model (float or QAT); batch norm is folded (:func:`fxpsim.nn.fold_batchnorm`).
    config : HardwareConfig, preset name, TOML path or mapping
    x : ndarray of float, [N, ...]
        Inputs; ``y`` optional integer labels [N].
    calibration_x : ndarray, optional
        Inputs that calibrate activation ranges not fixed by the model's quantizers (default ``x``).
    histogram_bins : int
        Bins of the exact-accumulator histograms in the report.

    Returns
    -------
    fxpsim.report.Report
        Per layer: MSE, SQNR, max error in output LSBs, overflow count/rate, exact accumulator peak,
        bits needed and headroom, clipped fraction; for the network: accuracy, float accuracy, top-1
        agreement, output SQNR, bit-ops.
    """
    import time
    from .report import LayerRecord, Report
    t0 = time.perf_counter()
    config = load_config(config)
    x = _check_x(x, "x")
    y = _check_labels(y, x.shape[0])
    graph = extract(model, x if calibration_x is None else calibration_x)
    net = convert(graph, config)
    refs = _float_trace(graph.folded, _stage_ends(graph.stages), x)
    if graph.stages[0].model_layers[0] > 0:
        refs.pop(0)  # output of the leading Quantize: the float input of the first stage
    codes_in = net.quantize_input(x)
    records, total_ovf = [], 0
    h = codes_in
    for i, (layer, st, ref) in enumerate(zip(net.layers, graph.stages, refs)):
        h_in = h
        traces = [_run_layer(layer, h_in[s:s + batch_size], config, net.qmin, net.qmax, True)[1]
                  for s in range(0, len(h_in), batch_size)]
        h = np.concatenate([t["out"] for t in traces])
        ovf = sum(t["overflows"] for t in traces)
        adds = sum(t["adds"] for t in traces)
        total_ovf += ovf
        hw = (h.astype(np.float64) - layer.output_zero_point) * layer.output_scale
        mse, sqnr, max_lsb = _errors(hw, ref.reshape(hw.shape), layer.output_scale)
        rec = LayerRecord(index=i, name=st.name, kind=st.kind, output_shape=tuple(h.shape[1:]), macs=layer.macs,
                          mse=mse, sqnr_db=sqnr, max_abs_error_lsb=max_lsb, overflow_count=int(ovf),
                          overflow_rate=ovf / adds if adds else 0.0,
                          clipped_fraction=sum(t["clipped"] for t in traces) / max(h.size, 1),
                          output_scale=float(layer.output_scale), output_zero_point=int(layer.output_zero_point))
        if layer.kind in _LINEAR_KINDS:
            exact = _exact_accumulator(layer, h_in)
            lo, hi = int(exact.min()), int(exact.max())
            counts, edges = _signed_log2_histogram(exact, max(config.accumulator_bits, _signed_bits(lo, hi)),
                                                   histogram_bins)
            bits = config.accumulator_bits
            rec.accumulator_bits = bits
            rec.acc_peak = max(abs(lo), abs(hi))
            rec.acc_limit = 1 << (bits - 1)
            rec.acc_bits_needed = _signed_bits(lo, hi)
            rec.headroom_bits = bits - rec.acc_bits_needed
            rec.acc_histogram = {"scale": "signed_log2", "edges": edges.tolist(), "counts": counts.tolist()}
        records.append(rec)
    network = network_metrics(net, h, refs[-1], y, total_ovf)
    network["seconds"] = time.perf_counter() - t0
    notes = []
    sources = {s.range_source for s in graph.stages if s.kind in _LINEAR_KINDS}
    notes.append("activation ranges from " + " and ".join(sorted(
        {"the model's quantizers" if s == "quantizer" else "calibration data" for s in sources})))
    return Report(layers=records, network=network, config=config.to_dict(), model=graph.model_repr,
                  title=title or f"fxpsim simulation on {config.name}", notes=notes)


def network_metrics(net: IntegerNetwork, out_codes: np.ndarray, ref: np.ndarray, y, overflows: int) -> dict:
    """Network-level numbers of a report from the last layer's codes and the float model's outputs."""
    last = net.layers[-1]
    hw = (out_codes.reshape(len(out_codes), -1).astype(np.float64) - last.output_zero_point) * last.output_scale
    ref = ref.reshape(hw.shape)
    hw_top, ref_top = hw.argmax(axis=1), ref.argmax(axis=1)
    cfg = net.config
    metrics = {"n_samples": int(hw.shape[0]),
               "accuracy": float(np.mean(hw_top == y)) if y is not None else None,
               "float_accuracy": float(np.mean(ref_top == y)) if y is not None else None,
               "agreement": float(np.mean(hw_top == ref_top)),
               "output_sqnr_db": _errors(hw, ref, last.output_scale)[1],
               "overflow_count": int(overflows),
               "bit_ops": int(sum(l.macs for l in net.layers) * cfg.weight_bits * cfg.activation_bits)}
    return metrics


def sweep(model, data, grid, **kwargs):
    """Simulate ``model`` on every point of a grid of hardware settings; see :func:`fxpsim.sweeps.sweep`.

    (The implementation lives in :mod:`fxpsim.sweeps`; a module named ``sweep`` would shadow this
    function as the package attribute ``fxpsim.sweep``.)
    """
    from .sweeps import sweep as _sweep
    return _sweep(model, data, grid, **kwargs)

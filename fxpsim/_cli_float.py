"""The command line on float datapaths: which reader ``--model`` takes for a float target, the one-line errors
when a float datapath meets an integer model (or the reverse), digits for a float graph, ``--grid`` parsing
and ``fxpsim sweep`` on a float target (:func:`fxpsim.hardware.float_sweep.sweep_float`).

A float target (``--config`` with ``weights.format``, ``activations.format``, ``accumulator.preset``) reads a float
``.onnx`` or ``.tflite`` file with :func:`fxpsim.import_float_model`; a quantized ``.onnx`` / ``.tflite`` file or a
saved integer graph on it is a usage error (exit 2), and so is a float model file on an integer target.
"""
from __future__ import annotations

import os

from ._cli_commands import UsageError, _load_model, _say

__all__ = ["load_model_for", "digits_for", "parse_grid", "float_sweep"]

_HOW = ("a float datapath --config (a TOML or mapping with weights.format, activations.format and "
        "accumulator.preset; see docs/float_datapaths.md)")


def _is_float(config) -> bool:
    from .hardware.float_config import is_float_datapath
    return is_float_datapath(config)


def _quantized_parts(path: str):
    """The quantized parts of a plain ``.onnx`` (its quantized ops) or ``.tflite`` file (its quantized tensors and
    operators), or ``None`` for another kind of file: an empty list is a float model."""
    if not (os.path.isfile(path) and path.lower().endswith((".onnx", ".tflite"))):
        return None
    try:
        from .frontends import _reader_of
        reader = _reader_of(path)
        if reader == "tflite":
            from .frontends.tflite.float_graph import quantized_tensors
            return quantized_tensors(path)
        if reader != "onnx":
            return None
        from .frontends.onnx.float_graph import quantized_ops
        return quantized_ops(path)
    except ImportError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except (ValueError, OSError) as exc:
        raise UsageError(f"cannot load model {path}: {str(exc).splitlines()[0]}") from None


def load_model_for(path: str, config):
    """``--model`` for ``config``: a float ``.onnx`` or ``.tflite`` as a FloatGraph on a float target, anything else
    as :func:`~fxpsim._cli_commands._load_model` reads it; a model of the other kind is a :class:`UsageError`."""
    quantized = _quantized_parts(path)
    floating = _is_float(config)
    if quantized is not None and not quantized:            # a float .onnx / .tflite file
        if not floating:
            raise UsageError(f"{path} is a float model (no quantized ops) and --config {config.name} an integer "
                             f"target: give {_HOW}")
        from .frontends import import_float_model
        try:
            return import_float_model(path)
        except (ValueError, OSError) as exc:
            raise UsageError(f"cannot load model {path}: {str(exc).splitlines()[0]}") from None
    if floating and quantized:
        raise UsageError(f"--config {config.name} is a float datapath, but {path} is a quantized model "
                         f"({', '.join(quantized[:3])}{', ...' if len(quantized) > 3 else ''}): simulate it on an "
                         "integer target (e.g. --config tflite-int8)")
    model = _load_model(path)
    if floating and hasattr(model, "nodes"):
        raise UsageError(f"--config {config.name} is a float datapath, but {path} is an integer graph (integer "
                         "codes): simulate it on an integer target (e.g. --config tflite-int8), or give the float "
                         ".onnx / .tflite model")
    return model


def digits_for(graph, seed: int, calibration: int):
    """``--data digits`` for a float graph whose input is [N, 64], [N, 8, 8, 1] or [N, 1, 8, 8] (ONNX's NCHW)."""
    from .nn.datasets import load_digits
    shape = tuple(graph.input_shape)
    if shape not in ((64,), (8, 8, 1), (1, 8, 8)):
        raise UsageError(f"the model's input is float{list(shape)}, not digits images: give --data inputs.npy "
                         "(or .npz with x, y)")
    flat = shape == (64,)
    x, y = load_digits("test", seed=seed, flatten=flat)
    xc = load_digits("train", seed=seed, flatten=flat)[0][:calibration]
    if shape == (1, 8, 8):
        x, xc = x.transpose(0, 3, 1, 2).copy(), xc.transpose(0, 3, 1, 2).copy()
    return x, y, xc


def _grid_values(key: str, text: str) -> list:
    """``8:25`` (inclusive), ``8:25:2``, ``32,128,inf``, ``e4m3,e5m2``: integers where a part is one, else the
    string."""
    out: list = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise UsageError(f"--grid {key}={text}: an empty value")
        bits = part.split(":")
        if all(b.strip().lstrip("-").isdigit() for b in bits):
            nums = [int(b) for b in bits]
            if len(nums) == 1:
                out.append(nums[0])
                continue
            if len(nums) > 3 or nums[1] < nums[0] or (len(nums) == 3 and nums[2] < 1):
                raise UsageError(f"--grid {key}={text}: a range is a:b or a:b:step with a <= b, step >= 1")
            out += list(range(nums[0], nums[1] + 1, nums[2] if len(nums) == 3 else 1))
        elif ":" in part:
            raise UsageError(f"--grid {key}={text}: a range takes integers, got {part!r}")
        else:
            out.append(part)
    return out


def parse_grid(items) -> dict:
    """``--grid KEY=VALUES ...`` as ``{key: [values]}`` (keys checked by the sweep itself)."""
    grid: dict = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise UsageError(f"--grid {item!r}: expected KEY=VALUES, e.g. accumulator.fraction_bits=8:25 or "
                             "promote_every=32,128,inf")
        if key in grid:
            raise UsageError(f"--grid: {key} given twice")
        grid[key] = _grid_values(key, text)
    return grid


def float_sweep(args, config, model, x, y, xc, grid: dict) -> int:
    """``fxpsim sweep`` on a float target: the table, the conclusion and, with ``--out``, the report."""
    from .hardware.float_sweep import FLOAT_AXES
    from .hardware.simulation import simulate
    from .hardware.sweeps import sweep
    keys = ", ".join(FLOAT_AXES)
    integer = [flag for flag, v in (("--weight-bits", args.weight_bits), ("--activation-bits", args.activation_bits),
                                    ("--acc-bits", args.acc_bits), ("--overflow", args.overflow),
                                    ("--rounding", args.rounding), ("--per-layer", args.per_layer),
                                    ("--target", args.target), ("--budget", args.budget)) if v]
    if integer:
        raise UsageError(f"{', '.join(integer)}: integer-datapath options; a float datapath sweeps --grid KEY=VALUES "
                         f"(keys: {keys})")
    if not grid:
        raise UsageError(f"give the axes with --grid KEY=VALUES, e.g. --grid accumulator.fraction_bits=8:25 "
                         f"promote_every=32,128,inf (keys: {keys})")
    if args.processes not in (None, 1):
        raise UsageError("--processes: a float-datapath sweep runs in one process")
    try:
        result = sweep(model, (x, y), grid, config=config, calibration_x=xc, tolerance=args.tolerance,
                       progress=not args.no_progress)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    _say(result.to_text())
    if args.out:
        try:
            report = simulate(model, config, x, y, calibration_x=xc, title=f"fxpsim sweep on {config.name}")
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc).splitlines()[0]) from None
        report.sweep = result.to_dict()
        paths = report.save(args.out)
        _say("", f"sweep written to {paths['sweep_csv']} and {paths['html']}")
    return 0

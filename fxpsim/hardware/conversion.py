"""Conversion of a trained model to the integer graph of a target.

:func:`convert` quantizes a :class:`~fxpsim.graph.extract.FloatGraph` (or a model, extracted on the way)
under a :class:`~fxpsim.hardware.config.HardwareConfig`: weight codes, scales and zero points
(:func:`quantize_weights`), activation scales and zero points (:func:`activation_params`) and integer biases
in the accumulator's scale, into an :class:`~fxpsim.graph.IntegerGraph`. The graph then runs on any
datapath (:meth:`IntegerGraph.run`); the requantizer of each MAC node follows the datapath's scheme
(:func:`layer_requantizer`).

Conversion lives here rather than in ``graph/`` because it needs a target's widths and scale rules.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.fixed import Format, from_float
from ..graph.extract import _LINEAR_KINDS, LUT_KINDS, FloatGraph, FloatStage, extract
from ..graph.ir import IntegerGraph, Node, TensorSpec
from .config import ConfigError, HardwareConfig, load_config

__all__ = ["convert", "activation_params", "quantize_weights", "layer_requantizer"]


def _code_dtype(bits: int, signed: bool):
    if bits <= 8:
        return np.int8 if signed else np.uint8
    return np.int16 if signed else np.uint16


def _code_range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _round_half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _pow2_ceil(v: np.ndarray) -> np.ndarray:
    """The smallest power of two :math:`\\ge v` (positive ``v``), exactly: with :math:`v = m 2^e`,
    :math:`m \\in [1/2, 1)` (``frexp``), it is :math:`v` when :math:`m = 1/2`, else :math:`2^e` (a float ``log2``
    rounds :math:`\\log_2(2^k (1 + 2^{-52}))` to ``k``, a power below ``v``)."""
    m, e = np.frexp(np.asarray(v, dtype=np.float64))
    return np.where(m == 0.5, np.ldexp(0.5, e), np.ldexp(1.0, e))


def activation_params(lo: float, hi: float, config: HardwareConfig) -> tuple[float, int]:
    """Scale (float32) and zero point of an activation tensor with real range ``[lo, hi]``.

    Asymmetric: :math:`s = (hi - lo)/(q_{max} - q_{min})`, :math:`z = \\mathrm{clamp}(q_{min} -
    \\mathrm{round}(lo / s))` (round half away) (the range is first widened to hold 0, as TFLite's converter does);
    symmetric: :math:`s = \\max(|lo|, |hi|) / q_{max}` (unsigned codes: :math:`s = hi / q_{max}`, negatives clip to 0;
    :math:`1 / q_{max}` when :math:`hi < 10^{-12}`), :math:`z = 0`. With the ``shift`` scheme the scale
    is rounded up to a power of two; a fixed ``activation_format`` gives :math:`s = 2^{-f}`, :math:`z = 0`.
    """
    qmin, qmax = _code_range(config.activation_bits, config.activation_signed)
    if config.activation_format is not None:
        return float(config.activation_format.lsb), 0
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-12:
        hi = lo + 1.0  # a constant tensor (e.g. a dead ReLU layer): any scale represents it
    if config.activation_symmetric:
        top = max(-lo, hi) if config.activation_signed else hi      # unsigned: negatives clip to 0
        if top < 1e-12:
            top = 1.0   # unsigned codes of a range with nothing above 0: every code is 0, any scale will do
        scale = top / qmax
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
    from ..core.fixed import from_float
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


def convert(model, config, calibration_x=None) -> IntegerGraph:
    """Convert a trained model (or a :class:`~fxpsim.graph.extract.FloatGraph` from
    :func:`~fxpsim.graph.extract.extract`) to the :class:`~fxpsim.graph.IntegerGraph` of a target.

    Batch norm is folded, weights are stored on the trained quantizer's grid when the target can hold it
    (else quantized per :func:`quantize_weights`, with a note in ``graph.meta["notes"]``), biases become
    integers in the accumulator's scale :math:`s_{in} s_{w,c}` (times :math:`2^{bias\\_shift}`), saturated to
    ``bias_bits`` and counted (``graph.meta["bias_clipped"]``: node -> how many), and activation ranges
    come from the model's quantizers or from ``calibration_x``. The graph's float input is quantized by its first
    node; its output is the last layer's codes. ``graph.meta["stage_outputs"]`` names the tensor holding
    each float stage's output (what a report compares with the float model). With
    ``activation_clamp = false`` a fused ReLU/ReLU6 becomes a separate ``clamp`` node.

    Per-node overrides of ``config`` (``layers``) apply: each node is converted with
    ``config.for_node(node, index)`` (its weight, bias and output widths and scale rules), and a selector
    that matches no node raises :class:`ConfigError`.
    """
    config = load_config(config)
    if config.accumulator_preset is not None:
        raise ConfigError(f"convert: {config.name!r} is a float datapath ({config.summary()}); an integer graph "
                          "holds integer codes: run the model with fxpsim.simulate(model, config, x)")
    _check_tflite_width(config)
    if isinstance(model, FloatGraph):
        fgraph = model
    else:
        if calibration_x is None:
            raise ValueError("convert: give calibration_x (float inputs used to calibrate activation ranges)")
        fgraph = extract(model, calibration_x)
    shape = tuple(fgraph.input_shape)
    qcfg = config.for_node(Node("quantize", "quantize", [], []), 0)
    notes: list[str] = []
    grids: dict = {}
    bias_clipped: dict = {}
    s_in, z_in, clip = _output_params(fgraph.input_grid, fgraph.input_range, qcfg, "quantize", grids, notes)
    tensors = [TensorSpec("input", 0, True, shape),
               TensorSpec("input_codes", qcfg.activation_bits, qcfg.activation_signed, shape, s_in, z_in)]
    nodes = [Node("quantize", "quantize", ["input"], ["input_codes"], {"clip": list(clip)} if clip else {})]
    cur, s_cur, z_cur = "input_codes", s_in, z_in
    a_bits, a_signed = qcfg.activation_bits, qcfg.activation_signed   # the type of the current tensor
    stage_outputs = []
    for st in fgraph.stages:
        shape = _out_shape(st, shape)
        if st.kind in _LINEAR_KINDS:
            op = "fully_connected" if st.kind == "dense" else st.kind
            ncfg = config.for_node(Node(st.name, op, [], []), len(nodes))
            _check_tflite_width(ncfg, f"node {st.name!r}: ")
            w_oc = _weights_out_first(st)
            trained = _trained_weights(st, ncfg)
            if isinstance(trained, str):
                codes, w_scale, w_zp = quantize_weights(w_oc, ncfg)
                grids[st.name] = {"weights": "recomputed"}
                if st.weight_grid is not None:
                    notes.append(f"{st.name}: weights re-quantized by the target's rule, not on the trained "
                                 f"{st.weight_grid['kind']} grid ({trained})")
            else:
                codes, w_scale, w_zp = trained
                grids[st.name] = {"weights": "trained"}
            per_channel = ncfg.weight_scales == "per-channel" or w_scale.size > 1 and np.ptp(w_scale) > 0
            n_out = w_oc.shape[0]
            if st.kind == "depthwise_conv2d":
                codes = np.transpose(codes[..., 0], (1, 2, 0))[None]  # [1, KH, KW, C*M]
            axis = 3 if st.kind == "depthwise_conv2d" else 0
            s_out, z_out, clip = _output_params(st.out_grid, st.out_range, ncfg, st.name, grids, notes)
            shift = _product_shift(ncfg, st.name)
            bias, n_clipped = _bias_codes(st.bias, s_cur * w_scale * 2.0 ** shift, ncfg)
            bias_clipped[st.name] = n_clipped
            if n_clipped:
                notes.append(f"{st.name}: {n_clipped} of {bias.size} biases saturated to the "
                             f"{ncfg.bias_bits}-bit bias register" + (f" (shifted left by {ncfg.bias_shift})"
                                                                       if ncfg.bias_shift else ""))
            keep = slice(None) if per_channel else slice(0, 1)
            tensors += [TensorSpec(f"{st.name}/weights", ncfg.weight_bits, ncfg.weight_signed,
                                   scale=w_scale[keep], zero_point=w_zp[keep], axis=axis if per_channel else None,
                                   data=codes.astype(_code_dtype(ncfg.weight_bits, ncfg.weight_signed))),
                        TensorSpec(f"{st.name}/bias", ncfg.bias_bits, True,
                                   scale=s_cur * w_scale * 2.0 ** (ncfg.bias_shift + shift),
                                   zero_point=np.zeros(n_out, np.int64), axis=0 if n_out > 1 else None,
                                   data=bias.astype(np.int64))]
            fused = st.activation if ncfg.activation_clamp else None
            attrs = {"activation": fused or "none"}
            if clip is not None:
                attrs["clip"] = list(clip)
            if ncfg.bias_shift:
                attrs["bias_shift"] = ncfg.bias_shift
            if shift:
                attrs.update(product_shift=shift, product_rounding=(ncfg.product_rounding or ncfg.rounding).value)
            if st.kind != "dense":
                attrs.update(stride=list(st.stride), padding=st.padding)
            out = st.name if not st.activation or fused else f"{st.name}/pre_activation"
            a_bits, a_signed = ncfg.activation_bits, ncfg.activation_signed
            tensors.append(TensorSpec(out, a_bits, a_signed, shape, s_out, z_out))
            nodes.append(Node(st.name, op, [cur, f"{st.name}/weights", f"{st.name}/bias"], [out], attrs))
            if out != st.name:  # ReLU as a separate integer op on the codes
                tensors.append(TensorSpec(st.name, a_bits, a_signed, shape, s_out, z_out))
                nodes.append(Node(f"{st.name}/{st.activation}", "clamp", [out], [st.name],
                                  {"activation": st.activation}))
            s_cur, z_cur = s_out, z_out
        elif st.kind in LUT_KINDS:          # a table lookup from the input codes onto its own output grid
            ncfg = config.for_node(Node(st.name, st.kind, [], []), len(nodes))
            s_out, z_out, clip = _output_params(st.out_grid, st.out_range, ncfg, st.name, grids, notes)
            a_bits, a_signed = ncfg.activation_bits, ncfg.activation_signed
            tensors.append(TensorSpec(st.name, a_bits, a_signed, shape, s_out, z_out))
            nodes.append(Node(st.name, st.kind, [cur], [st.name], {"clip": list(clip)} if clip else {}))
            s_cur, z_cur = s_out, z_out
        else:
            tensors.append(TensorSpec(st.name, a_bits, a_signed, shape, s_cur, z_cur))
            if st.kind in ("max_pool2d", "avg_pool2d"):
                nodes.append(Node(st.name, st.kind, [cur], [st.name],
                                  {"pool_size": list(st.pool_size), "stride": list(st.stride), "padding": st.padding}))
            elif st.kind == "flatten":
                nodes.append(Node(st.name, "reshape", [cur], [st.name], {"shape": list(shape)}))
            else:
                nodes.append(Node(st.name, "clamp", [cur], [st.name], {"activation": st.kind}))
        cur = st.name
        stage_outputs.append(st.name)
    meta = {"source": "fxpsim.nn", "model": fgraph.model_repr, "config": config.name,
            "stage_outputs": stage_outputs, "notes": notes, "grids": grids, "bias_clipped": bias_clipped}
    notes += _rounding_notes(config)
    graph = IntegerGraph(tensors, nodes, ["input"], [cur], name="fxpsim.nn model", meta=meta)
    config.check_selectors(graph)
    return graph


def _type_range(bits: int, signed: bool) -> tuple[int, int]:
    return _code_range(bits, signed)


def _grid_offset(grid: dict, bits: int, signed: bool) -> int | None:
    """The code offset that maps a quantizer's codes onto a ``bits``-bit register (TF's unsigned 8-bit codes
    onto int8: -128; signed codes onto an unsigned register: +128), or None when they do not fit."""
    if grid["bits"] != bits:
        return None
    lo, hi = _type_range(bits, signed)
    for off in (0, -(1 << (bits - 1)), 1 << (bits - 1)):
        if lo <= grid["quant_min"] + off and grid["quant_max"] + off <= hi:
            return off
    return None


def _is_pow2(scale) -> bool:
    m, _ = np.frexp(np.asarray(scale, dtype=np.float64))
    return bool(np.all(m == 0.5))


def _trained_weights(st: FloatStage, config: HardwareConfig):
    """``(codes [O, ...], scale [O], zero point [O])`` on the stage's trained weight grid, or the reason
    (a string) why the target cannot store that grid."""
    grid = st.weight_grid
    if grid is None or grid.get("codes") is None:
        return "no trained weight quantizer with an integer form"
    if config.weight_format is not None:
        return f"the target's fixed weight format {config.weight_format} sets the grid"
    if grid["bits"] != config.weight_bits:
        return (f"the target stores {config.weight_bits}-bit weights, the quantizer has {grid['bits']}-bit "
                f"codes [{grid['quant_min']}, {grid['quant_max']}]")
    off = _grid_offset(grid, config.weight_bits, config.weight_signed)
    if off is None:
        return f"its codes [{grid['quant_min']}, {grid['quant_max']}] do not fit the target's weight register"
    n_out = _weights_out_first(st).shape[0]
    scale, zp = grid["scale"], grid["zero_point"]
    if scale.size > 1 and config.weight_scales == "per-tensor" and np.ptp(scale) > 0:
        return "the quantizer has per-channel scales, the target one scale per tensor"
    if "shift" in _schemes(config) and not _is_pow2(scale):
        return "the 'shift' requantization needs power-of-two scales"
    if st.kind == "depthwise_conv2d" and scale.size > 1:      # per input channel c -> outputs c*M + m
        reps = n_out // scale.size
        scale, zp = np.repeat(scale, reps), np.repeat(zp, reps)
    if scale.size not in (1, n_out):
        return f"its {scale.size} scales do not match the {n_out} output channels"
    codes = _weights_out_first(FloatStage(st.kind, st.name, (), weight=grid["codes"]))
    scale = np.broadcast_to(scale.astype(np.float32).astype(np.float64), (n_out,)).copy()
    zp = np.broadcast_to(zp + off, (n_out,)).astype(np.int64)
    return codes.astype(np.int64) + off, scale, zp


def _output_params(grid, real_range, config: HardwareConfig, name: str, grids: dict, notes: list):
    """Scale, zero point and optional clip ``(lo, hi)`` codes of a tensor written by node ``name``.

    On the trained activation quantizer's grid when the target can hold it (same width, codes fitting the
    register; power-of-two scale for ``shift``; zero point 0 when the target is symmetric); otherwise by
    :func:`activation_params` from the real range, with the codes clipped to the trained range
    :math:`[s(q_{min} - z), s(q_{max} - z)]` when the quantizer sets one (a fixed-point target keeps the
    trained clip)."""
    lo_t, hi_t = _type_range(config.activation_bits, config.activation_signed)
    reason = None
    if grid is not None:
        off = _grid_offset(grid, config.activation_bits, config.activation_signed)
        z = int(grid["zero_point"][0]) + (off or 0)
        if config.activation_format is not None:
            reason = f"the target's fixed activation format {config.activation_format} sets the grid"
        elif off is None:
            reason = (f"the target has {config.activation_bits}-bit activations, the quantizer "
                      f"{grid['bits']}-bit codes [{grid['quant_min']}, {grid['quant_max']}]")
        elif "shift" in _schemes(config) and not _is_pow2(grid["scale"]):
            reason = "the 'shift' requantization needs power-of-two scales"
        elif config.activation_symmetric and z != 0:
            reason = f"the target's activations are symmetric (zero point 0), the quantizer's zero point is {z}"
        else:
            scale = float(np.float32(grid["scale"][0]))
            lo, hi = grid["quant_min"] + off, grid["quant_max"] + off
            grids.setdefault(name, {})["output"] = "trained"
            return scale, z, ((lo, hi) if (lo, hi) != (lo_t, hi_t) else None)
        notes.append(f"{name}: output re-scaled by the target's rule, not on the trained {grid['kind']} grid "
                     f"({reason}); its codes are clipped to the trained range")
        grids.setdefault(name, {})["output"] = "recomputed"
    scale, zp = activation_params(*real_range, config)
    if grid is None:
        return scale, zp, None
    s_q, z_q = float(grid["scale"][0]), int(grid["zero_point"][0])
    r_lo, r_hi = s_q * (grid["quant_min"] - z_q), s_q * (grid["quant_max"] - z_q)
    lo = max(lo_t, zp + math.ceil(r_lo / scale - 1e-9))
    hi = min(hi_t, zp + math.floor(r_hi / scale + 1e-9))
    return scale, zp, ((lo, hi) if (lo, hi) != (lo_t, hi_t) and lo <= hi else None)


_GEMMLOWP_ROUNDING = {"tflite-double": "half_away", "tflite-single": "half_up"}


def _rounding_notes(config: HardwareConfig) -> list:
    """Say when ``rounding`` does not reach the TFLite requantizers (they round as gemmlowp unless
    ``requantization_rounding`` is set)."""
    if config.requantization_rounding is not None:
        return []
    used = sorted(s for s in _schemes(config) if s in _GEMMLOWP_ROUNDING
                  and _GEMMLOWP_ROUNDING[s] != config.rounding.value)
    return [f"requantization {s}: the final shift rounds {_GEMMLOWP_ROUNDING[s]} as gemmlowp does; rounding = "
            f"{config.rounding.value} applies to weight/bias/input conversion only (set "
            f"requantization.output_rounding to round the output differently)" for s in used]


def _product_shift(config: HardwareConfig, name: str) -> int:
    """How many LSBs of every product the accumulator drops: :math:`f_p - f_{acc}`, with :math:`f_p` the
    fraction bits of a weight code times an activation code (their fixed formats'; 0 for scaled codes)."""
    if config.accumulator_frac_bits is None:
        return 0
    f_p = (config.weight_format.frac if config.weight_format else 0) + \
        (config.activation_format.frac if config.activation_format else 0)
    shift = f_p - config.accumulator_frac_bits
    if not 0 <= shift <= 62:
        raise ConfigError(f"node {name!r}: accumulator.frac_bits = {config.accumulator_frac_bits} with products of "
                          f"{f_p} fraction bits; allowed: {f_p - 62}..{f_p} (an accumulator cannot hold more "
                          "fraction bits than the products it sums)")
    return shift


def _round_rational(num: int, den: int, mode: str) -> int:
    """:math:`\\mathrm{round}(n / d)` (``d > 0``) exactly, in one of the deterministic rounding modes."""
    q, r = divmod(num, den)                      # floor; 0 <= r < den
    if r == 0 or mode == "floor":
        return q
    if mode == "ceil":
        return q + 1
    if mode == "toward_zero":
        return q + (num < 0)
    if 2 * r != den:                             # not a tie: to nearest
        return q + (2 * r > den)
    return q + {"half_up": 1, "half_down": 0, "half_even": q % 2, "half_away": int(num > 0),
                "half_toward_zero": int(num < 0)}[mode]


def _bias_codes(bias: np.ndarray, acc_scale: np.ndarray, config: HardwareConfig):
    """Bias codes :math:`\\mathrm{sat}(\\mathrm{round}(b / (s_{acc} 2^{shift})))` in the ``bias_bits`` register
    and how many saturated. The quotient is rounded exactly (from the float64 values as rationals): a float
    division would round twice, and underflow for tiny biases."""
    mode = getattr(config.rounding, "value", config.rounding)
    if mode == "stochastic":                     # a random draw: one rounding of the float quotient, as before
        codes = from_float(bias / (acc_scale * 2.0 ** config.bias_shift), Format.integer(config.bias_bits),
                           rounding=config.rounding, overflow="saturate")
        return codes.raw, int(codes.overflows)
    fmt = Format.integer(config.bias_bits)
    b = np.asarray(bias, dtype=np.float64)
    a = np.broadcast_to(np.asarray(acc_scale, dtype=np.float64), b.shape)
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(a)) and np.all(a > 0)):
        raise ValueError("bias codes need finite biases and positive finite accumulator scales")
    out = np.empty(b.shape, np.int64)
    clipped = 0
    for i, (bv, av) in enumerate(zip(b.reshape(-1).tolist(), a.reshape(-1).tolist())):
        nb, db = float(bv).as_integer_ratio()
        na, da = float(av).as_integer_ratio()
        q = _round_rational(nb * da, db * na << int(config.bias_shift), mode)
        c = min(max(q, fmt.min_code), fmt.max_code)
        clipped += c != q
        out.reshape(-1)[i] = c
    return out, int(clipped)


def _check_tflite_width(config: HardwareConfig, where: str = "") -> None:
    if any(s.startswith("tflite") for s in _schemes(config)) and config.accumulator_bits > 32:
        raise ConfigError(f"{where}accumulator.bits = {config.accumulator_bits}: the TFLite requantization schemes "
                          "use 32-bit gemmlowp arithmetic; allowed: 2..32, or requantization.scheme 'float'/'shift'")


def _weights_out_first(st: FloatStage) -> np.ndarray:
    """Float weights with the output channel first: dense [O, K], conv [O, KH, KW, C], depthwise
    [C*M, KH, KW, 1]."""
    w = st.weight
    if st.kind == "dense":
        return w.T
    if st.kind == "conv2d":
        return np.transpose(w, (3, 0, 1, 2))
    kh, kw, c, m = w.shape
    return np.transpose(w.reshape(kh, kw, c * m), (2, 0, 1))[..., None]


def _schemes(config: HardwareConfig) -> set:
    return {config.requantization, config.dense_requantization or config.requantization}


def layer_requantizer(config: HardwareConfig, kind: str, input_scale: float, weight_scales, output_scale: float):
    """The :class:`fxpsim.requantize.Requantizer` of a ``kind`` layer (``"dense"``, ``"conv2d"``, ...) under
    ``config`` for :math:`M_c = s_{in} s_{w,c} / s_{out}` (scales rounded to float32, as TFLite stores them)."""
    from ..datapath.requantize import Requantizer
    scheme = config.dense_requantization if kind == "dense" and config.dense_requantization else config.requantization
    kinds = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}
    final = config.requantization_rounding
    tflite = scheme.startswith("tflite")
    return Requantizer.tflite(input_scale, weight_scales, output_scale, kind=kinds[scheme],
                              rounding=config.rounding if tflite or final is None else final,
                              final_rounding=final if tflite else None,
                              multiplier_bits=config.multiplier_bits if tflite else 31)


def _out_shape(st: FloatStage, shape: tuple) -> tuple:
    """Per-sample output shape of a stage."""
    from ..nn.conv import output_size_and_padding
    if st.kind == "dense":
        return (st.weight.shape[1],)
    if st.kind == "flatten":
        return (int(np.prod(shape)),)
    if st.kind in ("relu", "relu6") + LUT_KINDS:
        return shape
    kernel = st.weight.shape[:2] if st.kind in ("conv2d", "depthwise_conv2d") else st.pool_size
    oh = output_size_and_padding(shape[0], kernel[0], st.stride[0], st.padding)[0]
    ow = output_size_and_padding(shape[1], kernel[1], st.stride[1], st.padding)[0]
    channels = {"conv2d": lambda: st.weight.shape[3],
                "depthwise_conv2d": lambda: st.weight.shape[2] * st.weight.shape[3]}.get(st.kind, lambda: shape[2])()
    return (oh, ow, channels)

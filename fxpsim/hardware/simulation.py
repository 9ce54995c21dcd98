"""Simulation of a trained network on the target hardware, bit for bit.

:func:`simulate` converts a model for a hardware configuration, runs the integer network layer by layer next
to the float model, and reports per-layer and network-level differences, accumulator peaks and overflows;
:func:`sweep` does it over a grid of configurations (implemented in :mod:`fxpsim.sweeps`).

The rest of the hardware layer lives in three modules (imports flow one way, none imports this one):

* :mod:`fxpsim.hardware_config`: :class:`HardwareConfig` (datapath widths, scales, rounding, accumulator
  overflow and order, requantization schemes), its TOML form, the presets in ``fxpsim/presets``;
* :mod:`fxpsim.float_graph`: :func:`extract`, a trained model reduced to stages with float ranges;
* :mod:`fxpsim.conversion`: :func:`convert` to an :class:`IntegerNetwork` and the integer forward pass.

Their public names are re-exported here, so ``from fxpsim.hardware import HardwareConfig, convert`` works.
"""
from __future__ import annotations

import math

import numpy as np

from .conversion import IntegerLayer, IntegerNetwork, _run_layer, activation_params, convert, layer_requantizer, \
    quantize_weights
from ..graph.extract import _LINEAR_KINDS, FloatGraph, FloatStage, _check_x, _float_trace, _stage_ends, extract
from .config import REQUANTIZATION_SCHEMES, ConfigError, HardwareConfig, load_config, preset, preset_names

__all__ = ["HardwareConfig", "ConfigError", "preset", "preset_names", "load_config", "REQUANTIZATION_SCHEMES",
           "convert", "extract", "simulate", "IntegerNetwork", "IntegerLayer", "FloatGraph",
           "FloatStage", "activation_params", "quantize_weights", "layer_requantizer"]


def _signed_bits(lo: int, hi: int) -> int:
    """Smallest two's complement width holding every integer in [lo, hi]."""
    return max(int(hi).bit_length() if hi >= 0 else 0, int(-lo - 1).bit_length() if lo < 0 else 0) + 1


def _exact_accumulator(layer: IntegerLayer, h: np.ndarray) -> np.ndarray:
    """Infinite-precision accumulator values :math:`\\sum (x - z_x)(w - z_w) + b` (float64 BLAS, exact
    while every partial sum stays below :math:`2^{53}`, which the code widths guarantee)."""
    from ..nn import conv
    xo = h.astype(np.float64) - layer.input_zero_point
    wz = np.asarray(layer.weight_zero_point, dtype=np.float64)
    if layer.kind == "dense":
        w = layer.weight.astype(np.float64) - (wz.reshape(-1, 1) if wz.ndim else wz)
        acc = xo @ w.T
    elif layer.kind == "conv2d":
        w = layer.weight.astype(np.float64) - (wz.reshape(-1, 1, 1, 1) if wz.ndim else wz)
        acc = conv.conv2d_forward(xo, np.transpose(w, (1, 2, 3, 0)), layer.stride, layer.padding)[0]
    else:
        c = h.shape[3]
        w = layer.weight.astype(np.float64) - (wz if wz.ndim == 0 else wz.reshape(1, 1, 1, -1))
        kh, kw = w.shape[1:3]
        acc = conv.depthwise_conv2d_forward(xo, w[0].reshape(kh, kw, c, -1), layer.stride,
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
    from ..report.render import LayerRecord, Report
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

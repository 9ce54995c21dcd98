"""Type readers shared by the hls4ml ops (:mod:`.ops`) and their compiled-plan steps (:mod:`.steps`): a tensor's
``ap_fixed`` format, a node's ``accum_t`` on a datapath (see :mod:`.ops` on the accumulator)."""
from __future__ import annotations

import math

import numpy as np

from ...core.fixed import FixedArray, Format, Overflow
from ...datapath.hls4ml import ApType, parse_ap_type

__all__ = ["tensor_format", "node_accum_t", "type_attr", "fixed_codes", "conv_geometry", "where"]


def where(node) -> str:
    return f"node {node.name!r} ({node.op})"


def tensor_format(graph, name: str) -> Format:
    """The fixed-point format of a tensor of an hls4ml graph: ``bits``, ``signed``, scale :math:`2^{-F}`."""
    spec = graph.tensors[name]
    if spec.is_float or spec.scale is None or spec.scale.size != 1 or int(spec.zero_point[0]) != 0:
        raise ValueError(f"tensor {name!r}: an hls4ml op needs ap_fixed codes (one power-of-two scale, zero "
                         f"point 0), got {spec.type_name} {spec.quant_text() or 'without a scale'}")
    mantissa, exponent = math.frexp(float(spec.scale[0]))
    if mantissa != 0.5:
        raise ValueError(f"tensor {name!r}: scale {spec.scale[0]!r} is not a power of two (no ap_fixed type)")
    return Format(spec.bits, 1 - exponent, spec.signed)


def fixed_codes(graph, name, codes) -> FixedArray:
    return FixedArray(np.asarray(codes).astype(np.int64), tensor_format(graph, name))


def type_attr(node, key: str) -> ApType:
    try:
        return parse_ap_type(node.attrs.get(key))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where(node)}: {key}: {err}") from None


def node_accum_t(node, datapath) -> ApType:
    """The ``accum_t`` a MAC node accumulates in on ``datapath`` (see the module docstring)."""
    own = type_attr(node, "accum_t")
    if datapath is None or getattr(datapath, "requantization", None) == "native":
        return own
    for knob, allowed in (("accumulator_order", "sequential"), ("overflow_at", "add")):
        value = getattr(datapath, knob, allowed)
        if value != allowed:
            raise ValueError(f"{where(node)}: {knob} = {value!r} is not hls4ml's arithmetic (it adds in input "
                             f"order and fits every add); use {knob} = {allowed!r}")
    if getattr(datapath, "tile_k", None):
        raise ValueError(f"{where(node)}: tile_k = {datapath.tile_k} is not hls4ml's arithmetic (one "
                         "accumulator per output); leave tile_k unset")
    bits = int(datapath.accumulator_bits)
    bias_bits, shift = getattr(datapath, "bias_bits", None), getattr(datapath, "bias_shift", 0)
    if shift or (bias_bits is not None and int(bias_bits) < bits):
        raise ValueError(f"{where(node)}: a bias register narrower than the accumulator (bias_bits = {bias_bits}, "
                         f"bias_shift = {shift}) is not hls4ml's arithmetic (the bias is cast to accum_t)")
    frac = getattr(datapath, "accumulator_frac_bits", None)
    frac = own.fmt.frac if frac is None else int(frac)
    rounding = getattr(datapath, "product_rounding", None) or own.rounding
    overflow = datapath.accumulator_overflow
    overflow = overflow if isinstance(overflow, Overflow) else Overflow(str(overflow))
    try:
        return ApType(Format(bits, frac, own.fmt.signed), rounding, overflow)
    except ValueError as err:
        raise ValueError(f"{where(node)}: the datapath's accumulator: {err}") from None


def conv_geometry(node):
    return tuple(int(v) for v in node.attrs["stride"]), tuple(int(v) for v in node.attrs["pads"])

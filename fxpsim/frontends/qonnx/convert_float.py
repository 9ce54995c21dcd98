"""The ``FloatQuant`` conversion of :func:`fxpsim.import_qonnx`: QONNX's minifloat quantizer onto the exact
unit-code kernel of :mod:`fxpsim.datapath.qonnx.minifloat` (its output is an integer tensor on the grid of the
format's smallest subnormal, scale :math:`s\\,2^{e_{min} - m}`)."""
from __future__ import annotations

import numpy as np

from ...datapath.qonnx import arithmetic as A
from ...datapath.qonnx import minifloat as MF
from ...datapath.qonnx.scales import ExactScale
from .convert import V

__all__ = ["FloatConversions"]

#: FloatQuant's attributes and the values fxpsim reads (see :mod:`fxpsim.datapath.qonnx.minifloat`).
_FLOATQUANT_ATTRS = {"rounding_mode": "ROUND", "has_inf": 0, "has_nan": 0, "has_subnormal": 0, "saturation": 1,
                     "signed": 1}


class FloatConversions:
    """Mixin of the importer: ``_c_FloatQuant``."""

    def _c_FloatQuant(self, n):
        at = self.attrs(n, _FLOATQUANT_ATTRS)
        mode = self.mode(n, at["rounding_mode"])
        if not int(at["saturation"]):
            raise self.refuse(n, "saturation=0 turns out-of-range values into Inf/NaN, which an integer graph "
                                 "cannot hold; only saturation=1 is supported")
        if not int(at["signed"]):
            raise self.refuse(n, "signed=0 is not supported: qonnx's execution of FloatQuant is always signed")
        if len(n.inputs) != 6:
            raise self.refuse(n, f"FloatQuant takes 6 inputs (x, scale, exponent_bitwidth, mantissa_bitwidth, "
                                 f"exponent_bias, max_val), got {len(n.inputs)}")
        scalars = []
        for i, what in ((2, "exponent bit width"), (3, "mantissa bit width"), (4, "exponent bias"), (5, "max_val")):
            c = self.const(n, i, what)
            if c.size != 1:
                raise self.refuse(n, f"the {what} must be a scalar, got shape {c.shape}")
            scalars.append(c.ravel()[0])
        try:
            fmt = MF.minifloat_format(*scalars[:3])
            top = MF.max_units(fmt, scalars[3])
        except (TypeError, ValueError) as exc:
            raise self.refuse(n, str(exc)) from None
        scale_raw = np.asarray(self.const(n, 1, "scale"), np.float32)
        if np.any(scale_raw <= 0) or not np.all(np.isfinite(scale_raw)):
            raise self.refuse(n, "scales must be positive and finite")
        informs = [f"{k}={int(at[k])}" for k, v in (("has_inf", 1), ("has_nan", 1), ("has_subnormal", 0))
                   if int(at[k]) == v]
        if informs:
            self.notes.append(f"FloatQuant node {n.name!r}: {', '.join(informs)} only informs backends; qonnx's "
                              f"execution, and fxpsim's, keeps subnormals and every exponent field finite "
                              f"(max_val sets the largest value)")
        unit = MF._unit_exp(fmt)
        common_attrs = dict(exp_bits=fmt.exp_bits, man_bits=fmt.man_bits, bias=fmt.bias, top=top,
                            rounding_mode=mode)
        x = self.val(n, 0)
        if x.kind == "const":
            raw = np.asarray(x.raw, np.float32)
            s32 = np.broadcast_to(scale_raw, np.broadcast_shapes(raw.shape, scale_raw.shape))
            codes = MF.minifloat_units_float(np.broadcast_to(raw, s32.shape), s32, fmt, top, mode).astype(object)
            full = ExactScale.from_float(s32).shifted(unit)
            deq = A.to_float32(codes * full.m * (1 << max(full.e, 0)), full.d << max(-full.e, 0))
            self.set(n, V("const", raw=deq, shape=codes.shape, codes=codes, scale=full, qrange=(-top, top)))
            return
        rank = len(x.shape)
        s32 = self.per_sample(n, scale_raw, rank)
        S = ExactScale.from_float(s32)
        out = self.new_act(n.outputs[0], x.shape, -top, top, S.shifted(unit), 0)
        if x.kind == "float":
            self.float_input(n, x)
            self.add_node(n, "qonnx_floatquant", [x.g], [out.g], float_in=True,
                          scale=s32.astype(np.float64).tolist(), **common_attrs)
        else:
            num, den = x.scale.ratio(S)
            self.add_node(n, "qonnx_floatquant", [x.g], [out.g], x_zp=x.zp, num=num.tolist(), den=den.tolist(),
                          **common_attrs)
        self.set(n, out)

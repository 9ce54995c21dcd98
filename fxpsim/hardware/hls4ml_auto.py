"""hls4ml's ``auto`` precision for Dense and Conv2D (``InferPrecisionTypes``, ``hls4ml/model/optimizer/passes/
infer_precision.py``; docs ``advanced/auto.rst``): ``accum_t`` and ``result_t`` set never to truncate, from the
*widths* of the input, weight and bias types alone (not their values).

With the input type :math:`(W_x, I_x, s_x)`, weight :math:`(W_w, I_w, s_w)`, bias :math:`(W_b, I_b, s_b)` (``I``
integer bits including the sign, ``ap_int<W>`` having :math:`I = W`) and :math:`L = \\lceil \\log_2 n \\rceil` for
:math:`n` products per output (Dense: ``n_in``; Conv2D: :math:`n_{chan} f_h f_w`):

.. math::

    W_p &= W_w + W_x + L, \\quad I_p = I_w + I_x + L, \\quad s_p = s_w \\lor s_x, \\quad F = W_p - I_p \\\\
    I &= \\max\\big(I_p + [s_b \\land \\lnot s_p],\\ I_b + [s_p \\land \\lnot s_b]\\big) + 1, \\quad
    W = I + \\max(F,\\ W_b - I_b), \\quad s = s_p \\lor s_b

and both types are ``ap_fixed<W, I>`` (``ap_ufixed`` when unsigned) with hls4ml's default modes ``AP_TRN`` /
``AP_WRAP``.  A ``maximum`` model precision (``Model: Precision: {default: ..., maximum: ...}``) then clamps
:math:`W` and :math:`I` separately to its own -- as hls4ml 1.3.0 does (the release fxpsim's hls4ml fixtures
come from); hls4ml's main branch after it also takes the maximum's signedness and, where they are not the
defaults, its quantization / overflow modes.

``weight_t`` / ``bias_t`` / an activation's ``result_t`` set to ``auto``: hls4ml takes the model's default
precision (a quantizer's type when the Keras layer had one: fxpsim's records carry no quantizer, so give the
types of a QKeras model explicitly).  hls4ml's ``infer_no_bias`` option (off by default) is not modelled: a bias
term is always counted, as hls4ml does by default.
"""
from __future__ import annotations

from ..datapath.hls4ml import parse_ap_type

__all__ = ["auto_accum_type", "ceil_log2"]


def ceil_log2(n: int) -> int:
    """:math:`\\lceil \\log_2 n \\rceil` of a positive integer, exactly."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"the number of products per output must be a positive integer, got {n!r}")
    return (int(n) - 1).bit_length()


def _wis(text: str):
    t = parse_ap_type(text)
    return t.fmt.word, t.fmt.int_bits, t.fmt.signed, t


def auto_accum_type(input_t: str, weight_t: str, bias_t: str, n_ops: int, maximum: str | None = None) -> str:
    """The type hls4ml's ``auto`` gives ``accum_t`` and ``result_t`` of a Dense / Conv2D (module formula)."""
    wx, ix, sx, _ = _wis(input_t)
    ww, iw, sw, _ = _wis(weight_t)
    wb, ib, sb, _ = _wis(bias_t)
    L = ceil_log2(n_ops)
    width, integer, signed = ww + wx + L, iw + ix + L, sw or sx
    frac = width - integer
    integer = max(integer + (sb and not signed), ib + (signed and not sb)) + 1
    width = integer + max(frac, wb - ib)
    signed = signed or sb
    if maximum is not None:
        mw, mi, _, _ = _wis(maximum)
        width, integer = min(width, mw), min(integer, mi)
    return f"ap_{'' if signed else 'u'}fixed<{width},{integer}>"

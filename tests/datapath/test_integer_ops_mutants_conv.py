"""Convolution paths of fxpsim.datapath.integer_ops against an independent loop model (mutation triage).

What the older tests left open (see tools/mutation/README.md, integer_ops.py): K-tiling (``tile_k`` /
``tile_acc``) of convolutions and depthwise convolutions with depth multipliers, products rounded onto a
coarser accumulator LSB (``product_shift``), the folded zero point (``zero_point="fold"``, ``bias_bits``),
non-square kernels, strides, dilations and explicit paddings, the overflow counts ``overflows``,
``tile_overflows`` and ``bias_clipped``, the fused int8 kernel's ``above`` / ``below`` counts, and the text of
every argument error.

Oracle: ``ref_layer`` below, written from the docstrings of ``quantized_conv2d`` /
``quantized_depthwise_conv2d`` and ``_MAC_KNOBS_DOC``, one output at a time on Python integers with the
accumulator model of ``tests/reference.py`` (``accumulate``, ``accumulate_tree``, ``overflow_int``,
``round_fraction``).  Nothing from fxpsim computes an expected value.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.core.fixed import Format
from fxpsim.datapath.integer_ops import (
    IntegerResult, quantized_conv2d, quantized_depthwise_conv2d, quantized_fully_connected,
)
from fxpsim.datapath import conv_int8
from fxpsim.datapath.requantize import Requantizer
from reference import accumulate, accumulate_tree, overflow_int, ref_mbqm, round_fraction


# --------------------------------------------------------------------------- reference model
def same_pads(size, k, s, d):
    """TF's SAME padding: output ceil(size / s), the odd pixel after."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def ref_requant(a: int, rq: Requantizer, ch: int) -> int:
    pick = lambda t: int(t[ch] if len(t) > 1 else t[0])  # noqa: E731
    if rq.kind == "double":
        return ref_mbqm(a, pick(rq.multiplier), pick(rq.shift), "double")
    v = round_fraction(Fraction(a) * Fraction(2) ** pick(rq.shift), rq.rounding.value)
    return overflow_int(v, 32, True, "saturate")[0]


def ref_layer(x, w, *, depthwise, bias=None, x_zp=0, w_zp=0, stride=(1, 1), pads=((0, 0), (0, 0)),
              dilation=(1, 1), acc_bits=32, overflow="wrap", order="sequential", bias_at="end",
              zero_point="subtract", bias_bits=None, tile_k=None, tile_bits=None, shift=0, rounding="half_up"):
    """``(acc, overflows, tile_overflows, bias_clipped)`` of a convolution (``w`` in TFLite's (O, KH, KW, C)
    layout) or a depthwise convolution (``w`` (1, KH, KW, C*M), output channel o = cM + m sees channel c).

    Per output: the K products in (u, v, c) order, :math:`p = (x - z_x)(w - z_w)` (padded taps 0) or, folded,
    :math:`p = x (w - z_w)` (padded taps hold z_x) with the bias :math:`b - z_x \\sum (w - z_w)` (that term
    rounded to :math:`2^{-shift}` like a product) clipped to ``bias_bits``; each product rounded to
    :math:`2^{-shift}`; summed sequentially or by the pairwise tree,
    fitted after every add; with tiles: each tile from 0 in the tile accumulator, then the tile sums added one
    by one into the main accumulator (preloaded with the bias for ``init``); ``end``: one more fitted add.
    """
    x = x.astype(object)
    n_b, h, wd, c = x.shape
    if depthwise:
        _, kh, kw, n_out = w.shape
        mult = n_out // c
    else:
        n_out, kh, kw, _ = w.shape
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + pl + pr - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    zw = lambda o: int(np.asarray(w_zp).reshape(-1)[o]) if np.ndim(w_zp) else int(w_zp)  # noqa: E731

    def wprime(o):   # [(u, v, c, w - z_w)] in tap order
        if depthwise:
            return [(u, v, o // mult, int(w[0, u, v, o]) - zw(o)) for u in range(kh) for v in range(kw)]
        return [(u, v, ci, int(w[o, u, v, ci]) - zw(o)) for u in range(kh) for v in range(kw) for ci in range(c)]

    bits = acc_bits if bias_bits is None else min(bias_bits, acc_bits)
    blo, bhi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    biases, clipped = [], 0
    for o in range(n_out):
        b = None if bias is None else int(bias[o])
        if zero_point == "fold":
            term = round_fraction(Fraction(x_zp * sum(t[3] for t in wprime(o)), 1 << shift), rounding)
            folded = (b or 0) - term
            b = min(bhi, max(blo, folded))
            clipped += b != folded
        biases.append(b)
    acc = np.zeros((n_b, oh, ow, n_out), np.int64)
    ovf = tile_ovf = 0
    tbits = acc_bits if tile_bits is None else tile_bits
    for n in range(n_b):
        for i in range(oh):
            for j in range(ow):
                for o in range(n_out):
                    prods = []
                    for u, v, ci, wv in wprime(o):
                        y, xx = i * stride[0] + u * dilation[0] - pt, j * stride[1] + v * dilation[1] - pl
                        inside = 0 <= y < h and 0 <= xx < wd
                        if zero_point == "fold":
                            a = x[n, y, xx, ci] if inside else x_zp
                        else:
                            a = x[n, y, xx, ci] - x_zp if inside else 0
                        prods.append(round_fraction(Fraction(a * wv, 1 << shift), rounding))
                    b = biases[o]
                    init = b if (b is not None and bias_at == "init") else 0
                    if tile_k is not None and tile_k < len(prods):
                        sums = []
                        for t0 in range(0, len(prods), tile_k):
                            f = accumulate if order == "sequential" else accumulate_tree
                            t, k_ovf, _ = f(prods[t0:t0 + tile_k], 0, tbits, True, overflow)
                            sums.append(t)
                            tile_ovf += k_ovf
                        r, k_ovf, _ = accumulate(sums, init, acc_bits, True, overflow)
                    else:
                        f = accumulate if order == "sequential" else accumulate_tree
                        r, k_ovf, _ = f(prods, init, acc_bits, True, overflow)
                    ovf += k_ovf
                    if b is not None and bias_at == "end":
                        r, e = overflow_int(r + b, acc_bits, True, overflow)
                        ovf += e
                    acc[n, i, j, o] = r
    return acc, ovf + tile_ovf, tile_ovf, clipped


def ref_outputs(acc, rq, zp, lo, hi):
    """(codes, above, below): clamp(R(a) + z_y) and how many pre-clamp values lay above hi / below lo."""
    out = np.zeros(acc.shape, np.int64)
    above = below = 0
    for idx in np.ndindex(acc.shape):
        y = ref_requant(int(acc[idx]), rq, idx[-1]) + zp
        above, below = above + (y > hi), below + (y < lo)
        out[idx] = min(hi, max(lo, y))
    return out, above, below


def rq_shift0():
    return Requantizer("shift", shift=(0,), rounding="floor")


# --------------------------------------------------------------------------- the property
@st.composite
def layer_cases(draw, fused=False):
    """A layer and every knob; ``fused``: only calls the fused int8 kernel models (int8 codes in and out,
    zero weight zero points, subtracted input zero point, exact products, no tiles)."""
    depthwise = draw(st.booleans())
    g = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))     # the geometry (fewer draws: faster)
    pick = lambda options: options[int(g.integers(len(options)))]  # noqa: E731
    n, h, wd, c = int(g.integers(1, 3)), int(g.integers(1, 6)), int(g.integers(1, 6)), int(g.integers(1, 4))
    mult = int(g.integers(1, 2 if fused else 3)) if depthwise else 1
    n_out = c * mult if depthwise else int(g.integers(1, 4))
    kh, kw = int(g.integers(1, 4)), int(g.integers(1, 4))
    stride = (int(g.integers(1, 4)), int(g.integers(1, 4)))
    dilation = (int(g.integers(1, 3)), int(g.integers(1, 3)))
    pad_kind = pick(["VALID", "SAME", "same", "explicit"])
    explicit = tuple((int(g.integers(0, 3)), int(g.integers(0, 3))) for _ in range(2))
    kernel, dil = [kh, kw], list(dilation)
    for ax, size in enumerate((h, wd)):
        room = size + (sum(explicit[ax]) if pad_kind == "explicit" else 0)
        if pad_kind not in ("SAME", "same") and (kernel[ax] - 1) * dil[ax] + 1 > room:
            dil[ax], kernel[ax] = 1, min(kernel[ax], room)
    (kh, kw), dilation = kernel, tuple(dil)
    if pad_kind == "explicit":
        padding = pads = explicit
    elif pad_kind == "VALID":
        padding, pads = "VALID", ((0, 0), (0, 0))
    else:
        padding = pad_kind
        pads = (same_pads(h, kh, stride[0], dilation[0]), same_pads(wd, kw, stride[1], dilation[1]))
    k_total = kh * kw * (1 if depthwise else c)
    tile_k = draw(st.sampled_from([None, 1, 2, 3, 5, k_total, k_total + 1]))
    overflow = draw(st.sampled_from(["wrap", "saturate"] if fused else
                                    ["wrap", "saturate", "saturate_zero", "saturate_symmetric"]))
    bias_at = draw(st.sampled_from(["end", "init"]))
    zero_point = draw(st.sampled_from(["subtract", "fold"]))
    with_bias = draw(st.booleans())
    shift = draw(st.sampled_from([0, 0, 1, 3]))
    if fused:
        zero_point, shift, tile_k = "subtract", 0, draw(st.sampled_from([None, k_total, k_total + 3]))
    return dict(
        k_total=k_total, depthwise=depthwise, x_shape=(n, h, wd, c),
        w_shape=(1, kh, kw, n_out) if depthwise else (n_out, kh, kw, c),
        n_out=n_out, stride=stride, dilation=dilation, padding=padding, pads=pads,
        dtype=np.int8 if fused else pick([np.int8, np.int16, np.uint8]),
        acc_bits=draw(st.sampled_from([8, 10, 12, 16, 20, 32])),
        overflow=overflow,
        order=draw(st.sampled_from(["sequential", "sequential", "tree"] if fused else ["sequential", "tree"])),
        bias_at=bias_at,
        with_bias=with_bias,
        zero_point=zero_point,
        bias_bits=pick([None, 6, 9, 40]),
        tile_k=tile_k,
        tile_bits=pick([None, 7, 9, 12, 40]),
        shift=shift,
        rounding=draw(st.sampled_from(["half_up", "floor", "half_even", "ceil"])),
        per_channel_zp=pick([False, True]),
        w_zp_zero=fused or pick([False, True]),
        kind=pick(["shift", "double"]),
        out_dtype=np.int8 if fused else pick([np.int8, np.int16]),
        seed=int(g.integers(2 ** 32)),
    )


def _run_case(p):
    rng = np.random.default_rng(p["seed"])
    info = np.iinfo(p["dtype"])
    lo_x, hi_x = max(int(info.min), -128), min(int(info.max), 255)
    x = rng.integers(lo_x, hi_x + 1, size=p["x_shape"]).astype(p["dtype"])
    w = rng.integers(-128 if p["dtype"] != np.uint8 else 0, 128, size=p["w_shape"]).astype(
        np.uint8 if p["dtype"] == np.uint8 else (np.int8 if p["dtype"] == np.int8 else np.int16))
    n_out, acc_bits = p["n_out"], p["acc_bits"]
    lim = 1 << (acc_bits - 1)
    bias = rng.integers(-lim, lim, size=n_out) if p["with_bias"] else None
    x_zp = int(rng.integers(lo_x, hi_x + 1))
    winfo = np.iinfo(w.dtype)
    if p["w_zp_zero"]:
        w_zp = np.zeros(n_out, int) if p["per_channel_zp"] else 0
    elif p["per_channel_zp"]:
        w_zp = rng.integers(max(-5, int(winfo.min)), 6, size=n_out)
    else:
        w_zp = int(rng.integers(max(-5, int(winfo.min)), 6))
    oinfo = np.iinfo(p["out_dtype"])
    out_zp = int(rng.integers(-20, 21))
    act_min = int(rng.integers(int(oinfo.min), 1))
    act_max = int(rng.integers(0, int(oinfo.max) + 1))
    if p["kind"] == "shift":
        rq = Requantizer("shift", shift=tuple(int(s) for s in rng.integers(-4, 1, size=n_out)), rounding="half_even")
    else:
        m = tuple(int(v) for v in rng.integers(1 << 30, 1 << 31, size=n_out))
        rq = Requantizer("double", multiplier=m, shift=tuple(int(s) for s in rng.integers(-3, 2, size=n_out)))
    tile_acc = None if p["tile_bits"] is None else (Format.integer(p["tile_bits"]) if p["seed"] % 2 else p["tile_bits"])
    fn = quantized_depthwise_conv2d if p["depthwise"] else quantized_conv2d
    res = fn(x, w, bias, requant=rq, x_zp=x_zp, w_zp=w_zp, out_zp=out_zp, stride=p["stride"], padding=p["padding"],
             dilation=p["dilation"], act_min=act_min, act_max=act_max, out_dtype=p["out_dtype"], acc=acc_bits,
             overflow=p["overflow"], order=p["order"], bias_at=p["bias_at"], zero_point=p["zero_point"],
             bias_bits=p["bias_bits"], tile_k=p["tile_k"], tile_acc=tile_acc, product_shift=p["shift"],
             rounding=p["rounding"])
    acc, ovf, tile_ovf, clipped = ref_layer(
        x, w, depthwise=p["depthwise"], bias=bias, x_zp=x_zp, w_zp=w_zp, stride=p["stride"], pads=p["pads"],
        dilation=p["dilation"], acc_bits=acc_bits, overflow=p["overflow"], order=p["order"], bias_at=p["bias_at"],
        zero_point=p["zero_point"], bias_bits=p["bias_bits"], tile_k=p["tile_k"], tile_bits=p["tile_bits"],
        shift=p["shift"], rounding=p["rounding"])
    assert isinstance(res, IntegerResult)
    np.testing.assert_array_equal(res.acc, acc)
    assert res.acc.shape == acc.shape
    assert (res.overflows, res.tile_overflows, res.bias_clipped) == (ovf, tile_ovf, clipped)
    out, above, below = ref_outputs(acc, rq, out_zp, act_min, act_max)
    assert res.out.dtype == p["out_dtype"] and res.out.shape == acc.shape
    np.testing.assert_array_equal(res.out, out)
    if res.above is not None:
        assert (res.above, res.below) == (above, below)
    modelled = (p["dtype"] == p["out_dtype"] == np.int8 and p["zero_point"] == "subtract" and p["w_zp_zero"]
                and not p["shift"] and (p["tile_k"] is None or p["tile_k"] >= p["k_total"])
                and p["overflow"] in ("wrap", "saturate") and p["order"] == "sequential" and acc_bits <= 31
                and p["kind"] == "double" and (not p["depthwise"] or p["n_out"] == p["x_shape"][3]))
    if modelled and conv_int8.available():    # the fused kernel's calls (its module docstring): counted
        assert (res.above, res.below) == (above, below)
    return res


@given(p=layer_cases())
def test_conv_and_depthwise_vs_loop_model(p):
    """Every knob together: codes, accumulators and the three counts equal the loop model's."""
    _run_case(p)


@given(p=layer_cases(fused=True))
def test_fused_int8_calls_vs_loop_model(p):
    """The calls the fused int8 kernel takes (geometry, accumulator width, overflow mode, order, bias placement
    passed on to it): the same codes, accumulators, counts, and above/below counts when it reports them."""
    _run_case(p)


# --------------------------------------------------------------------------- hand tables
def _dw_column(xs, ws, swap=True, **kw):
    """A depthwise (K, 1) kernel over a (K, 1) image with two channels: the products of ``_conv1x1`` in (u, v)
    order once per channel (two groups: the grouped paths); the second channel has x and w swapped (the same
    products from other operands) unless ``swap`` is False."""
    xs, ws = np.asarray(xs, np.int16).reshape(1, -1, 1, 1), np.asarray(ws, np.int16).reshape(1, -1, 1, 1)
    x = np.concatenate([xs, ws if swap else xs], axis=3)
    w = np.concatenate([ws, xs if swap else ws], axis=3)
    kw.setdefault("requant", rq_shift0())
    kw.setdefault("out_dtype", np.int32)
    return quantized_depthwise_conv2d(x, w, **kw)


def _conv1x1(xs, ws, bias=None, **kw):
    """A 1x1 convolution of one pixel: the K = len(xs) taps of one output channel (or one per row of ws)."""
    x = np.asarray(xs, np.int16).reshape(1, 1, 1, -1)
    w = np.asarray(ws, np.int16).reshape(-1, 1, 1, x.shape[3])
    kw.setdefault("requant", rq_shift0())
    kw.setdefault("out_dtype", np.int32)
    return quantized_conv2d(x, w, None if bias is None else np.asarray(bias), **kw)


@pytest.mark.parametrize("rounding, plus, minus", [
    ("half_up", 2, -1), ("half_down", 1, -2), ("half_even", 2, -2), ("half_away", 2, -2),
    ("half_toward_zero", 1, -1), ("floor", 1, -2), ("ceil", 2, -1), ("toward_zero", 1, -1)])
@pytest.mark.parametrize("tile_k", [None, 1])
@pytest.mark.parametrize("depthwise", [False, True])
def test_product_shift_rounds_every_product(rounding, plus, minus, tile_k, depthwise):
    """Products 6 and -6 on an LSB of 4 (product_shift=2): +-1.5, a tie for every mode; then a product 8 = 2
    exactly. Through the tiles (tile_k=1) and without."""
    f = _dw_column if depthwise else _conv1x1
    res = f([3, -3, 4], [2, 2, 2], product_shift=2, rounding=rounding, tile_k=tile_k)
    n = 2 if depthwise else 1
    assert res.acc.reshape(-1).tolist() == [plus + minus + 2] * n
    assert res.out.reshape(-1).tolist() == [plus + minus + 2] * n


@pytest.mark.parametrize("order", ["sequential", "tree"])
@pytest.mark.parametrize("overflow", ["wrap", "saturate"])
@pytest.mark.parametrize("tile_k", [1, 4])
def test_depthwise_tiles_with_a_multiplier_vs_loop_model(order, overflow, tile_k):
    """Depthwise, 3 channels x multiplier 2, K-tiled (one tile matmul per group), rounded products: every output
    channel o sees input channel o // 2 only."""
    rng = np.random.default_rng(31)
    x = rng.integers(-128, 128, (2, 4, 5, 3)).astype(np.int16)
    w = rng.integers(-127, 128, (1, 2, 3, 6)).astype(np.int16)
    w_zp = rng.integers(-3, 4, 6)
    bias = rng.integers(-300, 300, 6)
    kw = dict(x_zp=-7, w_zp=w_zp, stride=(2, 1), acc_bits=12, overflow=overflow, order=order, tile_k=tile_k,
              tile_bits=10, shift=1, rounding="half_even")
    res = quantized_depthwise_conv2d(x, w, bias, requant=rq_shift0(), out_dtype=np.int32, padding="SAME",
                                     acc=12, tile_acc=10, product_shift=1, rounding="half_even", x_zp=-7,
                                     w_zp=w_zp, stride=(2, 1), overflow=overflow, order=order, tile_k=tile_k)
    acc, ovf, tile_ovf, _ = ref_layer(x, w, depthwise=True, bias=bias, pads=(same_pads(4, 2, 2, 1),
                                                                             same_pads(5, 3, 1, 1)), **kw)
    np.testing.assert_array_equal(res.acc, acc)
    assert (res.overflows, res.tile_overflows) == (ovf, tile_ovf)
    assert tile_ovf > 0


@pytest.mark.parametrize("overflow, want", [("wrap", 260 - 512), ("saturate", 255)])
@pytest.mark.parametrize("tile_k", [None, 1])
def test_product_shift_then_an_overflowing_end_bias(overflow, want, tile_k):
    """Product 100 * 10 = 1000 on an LSB of 4: 250; the bias 10 (in that LSB) added at the end overflows a 9-bit
    accumulator: 260 wraps to -252 or saturates at 255, one overflow (bias codes are accumulator LSBs)."""
    res = _conv1x1([100, 0], [10, 0], [10], acc=9, product_shift=2, overflow=overflow, tile_k=tile_k)
    assert overflow_int(250 + 10, 9, True, overflow) == (want, True)
    assert res.acc.reshape(-1).tolist() == [want] and res.out.reshape(-1).tolist() == [want]
    assert (res.overflows, res.tile_overflows) == (1, 0)


@pytest.mark.parametrize("depthwise", [False, True])
def test_product_shift_lsb_in_the_tile_accumulator(depthwise):
    """A tile accumulator of 4 bits on an LSB of 2^3: products 8*7 = 56 -> 7 each; two per tile give 14, which
    saturates at 7 (one overflow per tile); the tile sums 7 + 7 in the 16-bit accumulator: 14."""
    f = _dw_column if depthwise else _conv1x1
    res = f([8] * 4, [7] * 4, acc=16, tile_k=2, tile_acc=4, product_shift=3, overflow="saturate")
    n = 2 if depthwise else 1
    assert res.acc.reshape(-1).tolist() == [14] * n
    assert (res.overflows, res.tile_overflows, res.bias_clipped) == (2 * n, 2 * n, 0)


@pytest.mark.parametrize("overflow, acc, ovf, tile_ovf", [
    # tiles of 2 in an 8-bit tile accumulator: 100 + 100 = 200 -> wrap -56 / saturate 127 (1 overflow per tile),
    # the last tile one product 100; then the four tile sums in a 9-bit accumulator (-256..255)
    ("wrap", -68, 3, 3),              # -56, -112, -168, -68: no 9-bit overflow
    ("saturate", 255, 5, 3),          # 127, 254, 381 -> 255 (1), 355 -> 255 (1)
])
def test_tile_and_main_overflow_counts(overflow, acc, ovf, tile_ovf):
    """K = 7 products of 100 in tiles of 2: tile accumulator 8 bits, main 9 bits."""
    res = _conv1x1([10] * 7, [10] * 7, acc=9, tile_k=2, tile_acc=8, overflow=overflow)
    tiles, t_ovf = [], 0
    for t0 in range(0, 7, 2):
        t, n_ovf, _ = accumulate([100] * (min(t0 + 2, 7) - t0), 0, 8, True, overflow)
        tiles.append(t)
        t_ovf += n_ovf
    main, m_ovf, _ = accumulate(tiles, 0, 9, True, overflow)
    assert (main, m_ovf + t_ovf, t_ovf) == (acc, ovf, tile_ovf)
    assert res.acc.reshape(-1).tolist() == [acc]
    assert (res.overflows, res.tile_overflows, res.bias_clipped) == (ovf, tile_ovf, 0)


@pytest.mark.parametrize("depthwise", [False, True])
def test_tree_order_inside_the_tiles(depthwise):
    """Products 100, 100, -100, -100 in a tile of 4, 8-bit saturating tile accumulator: the pairwise tree gives
    127 (1) + -128 (1) = -1 with two overflows, the sequential order 127 (1), 27, -73 with one; a last tile of
    one product 1 follows."""
    xs, ws = [10, 10, -10, -10, 1], [10, 10, 10, 10, 1]
    for order, want, n in (("tree", -1, 2), ("sequential", -73, 1)):
        res = (_dw_column if depthwise else _conv1x1)(xs, ws, acc=16, tile_k=4, tile_acc=8, overflow="saturate",
                                                      order=order)
        f = accumulate if order == "sequential" else accumulate_tree
        t, n_ovf, _ = f([100, 100, -100, -100], 0, 8, True, "saturate")
        assert (t, n_ovf) == (want, n)
        c = 2 if depthwise else 1
        assert res.acc.reshape(-1).tolist() == [want + 1] * c
        assert (res.overflows, res.tile_overflows) == (n * c, n * c)


@pytest.mark.parametrize("depthwise", [False, True])
def test_main_sum_of_tiles_wraps_when_asked(depthwise):
    """Tile sums 100 + 100 in an 8-bit main accumulator with a 16-bit tile accumulator: the main add overflows,
    wrap gives -56 (saturate would give 127; an unbounded sum 200)."""
    res = (_dw_column if depthwise else _conv1x1)([10, 10], [10, 10], acc=8, tile_k=1, tile_acc=16)
    c = 2 if depthwise else 1
    assert res.acc.reshape(-1).tolist() == [-56] * c
    assert (res.overflows, res.tile_overflows) == (c, 0)


def test_int8_layers_with_tiles_or_product_shift_leave_the_fused_kernel():
    """int8 codes in and out, but K-tiling or a product shift: the fused kernel (which has neither) must not
    take them. Tiles of 2 in 8 bits, 9-bit main accumulator, 7 products of 100 (see above): -68 wrapping; products
    6, -6 and 8 on an LSB of 4: 2 - 1 + 2 = 3 (half up)."""
    x = np.full((1, 1, 1, 7), 10, np.int8)
    w = np.full((1, 1, 1, 7), 10, np.int8)
    res = quantized_conv2d(x, w, requant=rq_shift0(), acc=9, tile_k=2, tile_acc=8)
    assert res.acc.reshape(-1).tolist() == [-68] and res.out.reshape(-1).tolist() == [-68]
    assert (res.overflows, res.tile_overflows) == (3, 3)
    x = np.array([3, -3, 4], np.int8).reshape(1, 1, 1, 3)
    res = quantized_conv2d(x, np.full((1, 1, 1, 3), 2, np.int8), requant=rq_shift0(), product_shift=2)
    assert res.acc.reshape(-1).tolist() == [3] and res.out.reshape(-1).tolist() == [3]
    dw = quantized_depthwise_conv2d(x.reshape(1, 3, 1, 1), np.full((1, 3, 1, 1), 2, np.int8), requant=rq_shift0(),
                                    product_shift=2)
    assert dw.acc.reshape(-1).tolist() == [3]


@pytest.mark.parametrize("depthwise", [False, True])
def test_int8_fold_on_a_narrow_saturating_accumulator(depthwise):
    """int8 codes in and out with zero weight zero points, folded: not the fused kernel's subtract form. On a
    10-bit saturating accumulator the partial sums of the two forms differ, and the folded biases clip."""
    rng = np.random.default_rng(21)
    x = rng.integers(-128, 128, (1, 4, 4, 2)).astype(np.int8)
    w = rng.integers(-127, 128, (1, 3, 3, 2) if depthwise else (2, 3, 3, 2)).astype(np.int8)
    fn = quantized_depthwise_conv2d if depthwise else quantized_conv2d
    res = fn(x, w, requant=rq_shift0(), x_zp=-90, acc=10, overflow="saturate", zero_point="fold",
             padding="SAME")
    pads = (same_pads(4, 3, 1, 1),) * 2
    acc, ovf, _, clipped = ref_layer(x, w, depthwise=depthwise, x_zp=-90, pads=pads, acc_bits=10,
                                     overflow="saturate", zero_point="fold")
    sub, *_ = ref_layer(x, w, depthwise=depthwise, x_zp=-90, pads=pads, acc_bits=10, overflow="saturate")
    assert not np.array_equal(acc, sub) and clipped > 0
    np.testing.assert_array_equal(res.acc, acc)
    np.testing.assert_array_equal(res.out, np.clip(acc, -128, 127))
    assert (res.overflows, res.bias_clipped) == (ovf, clipped)


def test_product_shift_bounds():
    """product_shift 62 is allowed (every product here rounds to 0, half up); 63 is not (see the errors)."""
    res = _conv1x1([100, -100], [100, 100], [5], acc=62, product_shift=62)
    assert res.acc.reshape(-1).tolist() == [5]
    res = _conv1x1([100], [100], acc=16, product_shift=0)
    assert res.acc.reshape(-1).tolist() == [10000]


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("pads", [((1, 0), (0, 0)), ((0, 1), (0, 0)), ((0, 0), (1, 0)), ((0, 0), (0, 1)),
                                  ((0, 2), (1, 0))])
def test_fold_pads_every_side_with_the_zero_point(pads, depthwise):
    """Folded, a padded tap holds z_x whichever single side is padded: on a wide accumulator the result is the
    subtract form's (padded taps 0), b + sum (x - z_x)(w - z_w) over the taps inside."""
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 3, 3, 2)).astype(np.int16)
    w = rng.integers(-127, 128, (1, 2, 2, 2) if depthwise else (2, 2, 2, 2)).astype(np.int16)
    bias = np.array([100, -100])
    fn = quantized_depthwise_conv2d if depthwise else quantized_conv2d
    res = fn(x, w, bias, requant=rq_shift0(), out_dtype=np.int32, x_zp=37, w_zp=-2, zero_point="fold",
             padding=pads)
    acc, ovf, _, clipped = ref_layer(x, w, depthwise=depthwise, bias=bias, x_zp=37, w_zp=-2, pads=pads)
    np.testing.assert_array_equal(res.acc, acc)
    assert (res.overflows, res.bias_clipped) == (ovf, clipped) == (0, 0)
    folded, *_ = ref_layer(x, w, depthwise=depthwise, bias=bias, x_zp=37, w_zp=-2, pads=pads, zero_point="fold")
    np.testing.assert_array_equal(folded, acc)


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("zero_point", ["subtract", "fold"])
@pytest.mark.parametrize("padding, stride", [(((0, 2), (3, 1)), (1, 2)), (((2, 0), (0, 1)), (2, 1)), ("SAME", (2, 3))])
def test_preloaded_bias_on_padded_outputs(padding, stride, depthwise, zero_point):
    """bias_at='init' preloads every output pixel of a padded, strided layer (output size from the padding)."""
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, (2, 5, 4, 2)).astype(np.int16)
    w = rng.integers(-127, 128, (1, 2, 3, 4) if depthwise else (3, 2, 3, 2)).astype(np.int16)
    n_out = w.shape[3] if depthwise else w.shape[0]
    bias = rng.integers(-1000, 1000, n_out)
    fn = quantized_depthwise_conv2d if depthwise else quantized_conv2d
    res = fn(x, w, bias, requant=rq_shift0(), out_dtype=np.int32, acc=16, overflow="saturate", x_zp=5,
             padding=padding, stride=stride, bias_at="init", zero_point=zero_point)
    pads = padding if padding != "SAME" else (same_pads(5, 2, stride[0], 1), same_pads(4, 3, stride[1], 1))
    acc, ovf, _, clipped = ref_layer(x, w, depthwise=depthwise, bias=bias, x_zp=5, pads=pads, stride=stride,
                                     acc_bits=16, overflow="saturate", bias_at="init", zero_point=zero_point)
    np.testing.assert_array_equal(res.acc, acc)
    assert (res.overflows, res.bias_clipped) == (ovf, clipped)


@pytest.mark.parametrize("bias_bits, folded, clipped", [(None, -120, 0), (40, -120, 0), (8, -120, 0), (7, -64, 1),
                                                        (4, -8, 1)])
@pytest.mark.parametrize("depthwise", [False, True])
def test_fold_bias_register_width(bias_bits, folded, clipped, depthwise):
    """b - z_x sum(w - z_w) = 0 - 6 * 20 = -120, clipped to a bias_bits register (and the 12-bit accumulator);
    the sum of x (w - z_w) = 2*5 + 3*5 + ... then adds to it."""
    xs, ws = [2, 3, 4, 5], [6, 6, 6, 6]          # w - z_w = 5 with z_w = 1
    kw = dict(acc=12, x_zp=6, w_zp=1, zero_point="fold", bias_bits=bias_bits, bias_at="init")
    res = _dw_column(xs, ws, swap=False, **kw) if depthwise else _conv1x1(xs, ws, **kw)
    c = 2 if depthwise else 1
    assert res.acc.reshape(-1).tolist() == [folded + 5 * sum(xs)] * c
    assert res.bias_clipped == clipped * c
    assert res.overflows == 0


def test_fold_bias_saturates_high_and_counts_channels():
    """Folded biases 0 - (-5) * 4 * 30 = 600 (above a 9-bit register: 255) and 0 - (-5) * 4 * (-30) = -600
    (below: -256); a third channel 0 fits: two clipped channels, counted once each however many pixels."""
    x = np.full((1, 2, 3, 1), 1, np.int16)
    w = np.array([30, -30, 0], np.int16).reshape(3, 1, 1, 1)
    w = np.repeat(np.repeat(w, 2, axis=1), 2, axis=2)            # 2x2 kernel, K = 4
    res = quantized_conv2d(x, w, requant=rq_shift0(), out_dtype=np.int32, acc=16, x_zp=-5, zero_point="fold",
                           bias_bits=9, padding="SAME")
    assert res.bias_clipped == 2
    assert res.acc.shape == (1, 2, 3, 3)
    # the padded taps hold z_x = -5: a window with t inside taps of 1 and 4 - t padded ones
    inside = np.array([[4, 4, 2], [2, 2, 1]])
    for o, (b, wv) in enumerate(((255, 30), (-256, -30), (0, 0))):
        want = b + wv * (inside - 5 * (4 - inside))
        np.testing.assert_array_equal(res.acc[0, :, :, o], want)


def test_need_acc_false_keeps_the_codes():
    """The fused int8 kernel may drop the accumulator when asked; the codes are the same."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 4, 5, 3)).astype(np.int8)
    w = rng.integers(-127, 128, (2, 2, 3, 3)).astype(np.int8)
    rq = Requantizer("double", multiplier=(1 << 30, 1 << 30), shift=(-6, -7))
    full = quantized_conv2d(x, w, requant=rq, x_zp=3, padding="SAME", stride=(1, 2))
    lean = quantized_conv2d(x, w, requant=rq, x_zp=3, padding="SAME", stride=(1, 2), need_acc=False)
    acc, *_ = ref_layer(x, w, depthwise=False, x_zp=3, stride=(1, 2), pads=(same_pads(4, 2, 1, 1),
                                                                             same_pads(5, 3, 2, 1)))
    np.testing.assert_array_equal(full.acc, acc)
    want, above, below = ref_outputs(acc, rq, 0, -128, 127)
    np.testing.assert_array_equal(full.out, want)
    np.testing.assert_array_equal(lean.out, want)
    assert lean.acc is None or np.array_equal(lean.acc, acc)


@pytest.mark.parametrize("depthwise", [False, True])
def test_fused_int8_above_below_counts(depthwise):
    """int8 layers on the fused kernel report how many requantized values lay above act_max / below act_min;
    a layer off the kernel (int16 codes) reports None."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (2, 5, 4, 2)).astype(np.int8)
    w = rng.integers(-127, 128, (1, 3, 2, 2) if depthwise else (3, 3, 2, 2)).astype(np.int8)
    n_out = w.shape[3] if depthwise else w.shape[0]
    rq = Requantizer("double", multiplier=(1 << 30,) * n_out, shift=tuple(range(-5, -5 + n_out)))
    bias = rng.integers(-3000, 3000, n_out)
    fn = quantized_depthwise_conv2d if depthwise else quantized_conv2d
    kw = dict(requant=rq, x_zp=-4, out_zp=7, act_min=-20, act_max=25, stride=(2, 1), dilation=(1, 2),
              padding=((1, 0), (2, 1)))
    res = fn(x, w, bias, **kw)
    acc, ovf, _, _ = ref_layer(x, w, depthwise=depthwise, bias=bias, x_zp=-4, stride=(2, 1), dilation=(1, 2),
                               pads=((1, 0), (2, 1)))
    np.testing.assert_array_equal(res.acc, acc)
    want, above, below = ref_outputs(acc, rq, 7, -20, 25)
    np.testing.assert_array_equal(res.out, want)
    assert res.overflows == ovf == 0
    assert above > 0 and below > 0
    if conv_int8.available():     # int8 in and out, exact sums: the fused kernel, which counts
        assert (res.above, res.below) == (above, below)
    slow = fn(x.astype(np.int16), w.astype(np.int16), bias, **kw)
    assert (slow.above, slow.below) == (None, None)
    np.testing.assert_array_equal(slow.out, want)


@pytest.mark.parametrize("overflow", ["wrap", "saturate"])
@pytest.mark.parametrize("order", ["sequential", "tree"])
def test_k_tiling_preloads_the_main_accumulator(overflow, order):
    """The tiles' path with bias_at='init' (reached, for now, by a 2-D fully connected layer: a 1x1
    convolution of a 1x1 image): the bias is the main accumulator's first value, so a bias near the top of a
    12-bit accumulator makes the tile sums overflow there."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (3, 7)).astype(np.int8)
    w = rng.integers(-127, 128, (2, 7)).astype(np.int8)
    bias = np.array([2000, -2040])
    res = quantized_fully_connected(x, w, bias, requant=rq_shift0(), out_dtype=np.int32, acc=12, overflow=overflow,
                                    order=order, bias_at="init", tile_k=3, tile_acc=16, x_zp=-3)
    acc, ovf, tile_ovf, _ = ref_layer(x.reshape(3, 1, 1, 7), w.reshape(2, 1, 1, 7), depthwise=False, bias=bias,
                                      x_zp=-3, acc_bits=12, overflow=overflow, order=order, bias_at="init",
                                      tile_k=3, tile_bits=16)
    np.testing.assert_array_equal(res.acc, acc.reshape(3, 2))
    assert (res.overflows, res.tile_overflows) == (ovf, tile_ovf)
    assert ovf > 0 and tile_ovf == 0


# --------------------------------------------------------------------------- argument errors
def _small(**kw):
    x = np.zeros((1, 3, 3, 2), np.int8)
    w = np.zeros((2, 2, 2, 2), np.int8)
    return quantized_conv2d(x, w, requant=rq_shift0(), **kw)


@pytest.mark.parametrize("kw, exc, match", [
    ({"zero_point": "none"}, ValueError, r"zero_point must be 'subtract' or 'fold', got 'none'"),
    ({"tile_k": 0}, ValueError, r"tile_k must be a positive int or None, got 0"),
    ({"tile_k": True}, ValueError, r"tile_k must be a positive int or None, got True"),
    ({"tile_k": 2.0}, ValueError, r"tile_k must be a positive int or None, got 2\.0"),
    ({"product_shift": -1}, ValueError, r"product_shift must be an int in 0\.\.62, got -1"),
    ({"product_shift": 63}, ValueError, r"product_shift must be an int in 0\.\.62, got 63"),
    ({"product_shift": True}, ValueError, r"product_shift must be an int in 0\.\.62, got True"),
    ({"product_shift": 1.0}, ValueError, r"product_shift must be an int in 0\.\.62, got 1\.0"),
    ({"bias_at": "start"}, ValueError, r"bias_at must be 'end' \(TFLite: bias added after the sum\) or 'init' "
                                       r"\(accumulator preloaded with the bias\), got 'start'"),
    ({"order": "random"}, ValueError, r"order must be 'sequential' or 'tree', got 'random'"),
    ({"overflow": "bounce"}, ValueError, r"bounce"),
    ({"stride": 0}, ValueError, r"stride must be a positive int or a pair of them, got 0"),
    ({"stride": (1, 2, 3)}, ValueError, r"stride must be a positive int or a pair of them, got \(1, 2, 3\)"),
    ({"stride": (1, 1.0)}, ValueError, r"stride must be a positive int or a pair of them, got \(1, 1\.0\)"),
    ({"dilation": (1, 0)}, ValueError, r"dilation must be a positive int or a pair of them, got \(1, 0\)"),
    ({"padding": "FULL"}, ValueError, r"padding must be 'SAME', 'VALID' or \(\(t, b\), \(l, r\)\), got 'FULL'"),
    ({"padding": ((1, 1),)}, ValueError, r"padding must be 'SAME', 'VALID' or \(\(t, b\), \(l, r\)\), got "
                                         r"\(\(1, 1\),\)"),
    ({"padding": 1}, ValueError, r"padding must be 'SAME', 'VALID' or \(\(t, b\), \(l, r\)\), got 1"),
    ({"padding": ((0, 0), ("a", 0))}, ValueError, r"padding must be 'SAME', 'VALID' or \(\(t, b\), \(l, r\)\)"),
    ({"padding": ((0, -1), (0, 0))}, ValueError, r"padding must be non-negative, got \(\(0, -1\), \(0, 0\)\)"),
    ({"padding": ((0, 0), (-1, 0))}, ValueError, r"padding must be non-negative"),
    ({"dilation": (3, 1)}, ValueError, r"the dilated kernel \(4\) is larger than the padded input height \(3\)"),
])
def test_argument_errors(kw, exc, match):
    with pytest.raises(exc, match=match):
        _small(**kw)


def test_dilated_kernel_width_error_and_padding_that_fits():
    with pytest.raises(ValueError, match=r"the dilated kernel \(5\) is larger than the padded input width \(4\)"):
        _small(dilation=(1, 4), padding=((0, 0), (0, 1)))
    with pytest.raises(ValueError, match=r"the dilated kernel \(5\) is larger than the padded input height \(4\)"):
        _small(dilation=(4, 1), padding=((0, 1), (0, 0)))
    with pytest.raises(ValueError, match=r"the dilated kernel \(5\) is larger than the padded input height \(4\)"):
        _small(dilation=(4, 1), padding=((1, 0), (0, 0)))
    assert _small(dilation=(1, 4), padding=((0, 0), (1, 1))).acc.shape == (1, 2, 1, 2)   # 3 + 2 = 5 fits
    assert _small(dilation=2, padding="valid").acc.shape == (1, 1, 1, 2)                 # 3 = (2 - 1) * 2 + 1
    assert _small(padding=[[0, 1], [1, 0]]).acc.shape == (1, 3, 3, 2)                    # lists accepted


def test_shape_errors():
    rq = rq_shift0()
    with pytest.raises(ValueError, match=r"x has 2 channels but w \(O, KH, KW, C\) = \(1, 1, 1, 3\) expects 3"):
        quantized_conv2d(np.zeros((1, 2, 2, 2), np.int8), np.zeros((1, 1, 1, 3), np.int8), requant=rq)
    with pytest.raises(ValueError, match=r"depthwise w must have shape \(1, KH, KW, C\*M\) with C = 2 input "
                                         r"channels; got \(2, 1, 1, 2\)"):
        quantized_depthwise_conv2d(np.zeros((1, 2, 2, 2), np.int8), np.zeros((2, 1, 1, 2), np.int8), requant=rq)
    with pytest.raises(ValueError, match=r"depthwise w must have shape .* got \(1, 1, 1, 3\)"):
        quantized_depthwise_conv2d(np.zeros((1, 2, 2, 2), np.int8), np.zeros((1, 1, 1, 3), np.int8), requant=rq)
    for fn, w4 in ((quantized_conv2d, np.zeros((2, 1, 1, 2), np.int8)),
                   (quantized_depthwise_conv2d, np.zeros((1, 1, 1, 2), np.int8))):
        with pytest.raises(ValueError, match=r"^x must have 4 dimensions, got shape \(2, 2, 2\)"):
            fn(np.zeros((2, 2, 2), np.int8), w4, requant=rq)
        with pytest.raises(ValueError, match=r"^w must have 4 dimensions, got shape \(1, 1, 2\)"):
            fn(np.zeros((1, 2, 2, 2), np.int8), np.zeros((1, 1, 2), np.int8), requant=rq)
        with pytest.raises(TypeError, match=r"^x must be an integer array"):
            fn(np.zeros((1, 2, 2, 2)), w4, requant=rq)
        with pytest.raises(TypeError, match=r"^w must be an integer array"):
            fn(np.zeros((1, 2, 2, 2), np.int8), w4.astype(float), requant=rq)
        with pytest.raises(ValueError, match=r"^w_zp must be a scalar or one per channel, got shape \(3,\)"):
            fn(np.zeros((1, 2, 2, 2), np.int8), w4, requant=rq, w_zp=np.zeros(3, int))
        with pytest.raises(ValueError, match=r"^w_zp"):
            fn(np.zeros((1, 2, 2, 2), np.int8), w4, requant=rq, w_zp=200)
        with pytest.raises(ValueError, match=r"^x_zp"):
            fn(np.zeros((1, 2, 2, 2), np.int8), w4, requant=rq, x_zp=-129)


# --------------------------------------------------------------------------- three bugs the triage found (fixed)
@pytest.mark.parametrize("depthwise", [False, True])
def test_k_tiling_with_a_preloaded_bias(depthwise):
    x = np.full((1, 2, 2, 1), 10, np.int16)
    w = np.full((1, 2, 1, 1), 10, np.int16)
    fn = quantized_depthwise_conv2d if depthwise else quantized_conv2d
    res = fn(x, w, np.array([-5]), requant=rq_shift0(), out_dtype=np.int32, acc=16, tile_k=1, bias_at="init")
    assert res.acc.reshape(-1).tolist() == [195, 195]


def test_end_bias_add_saturate_symmetric():
    """-100 + -28 = -128 in an 8-bit symmetric-saturating accumulator: -127 and one overflow (as with init)."""
    init = _conv1x1([-100], [1], [-28], acc=8, overflow="saturate_symmetric", bias_at="init")
    assert (init.acc.reshape(-1).tolist(), init.overflows) == ([-127], 1)
    end = _conv1x1([-100], [1], [-28], acc=8, overflow="saturate_symmetric", bias_at="end")
    assert (end.acc.reshape(-1).tolist(), end.overflows) == ([-127], 1)


def test_fold_with_product_shift():
    """Products and the folded term all multiples of 4, product_shift=2: no rounding anywhere, so the fold form
    must equal the subtract form: sum (x - z_x)(w - z_w) / 4 + b."""
    xs, ws, zx, b = [10, 20, 30, 40], [4, 8, 12, 16], 8, 7
    want = sum((x - zx) * w for x, w in zip(xs, ws)) // 4 + b
    sub = _conv1x1(xs, ws, [b], acc=40, x_zp=zx, product_shift=2)
    assert sub.acc.reshape(-1).tolist() == [want]
    fold = _conv1x1(xs, ws, [b], acc=40, x_zp=zx, product_shift=2, zero_point="fold")
    assert fold.acc.reshape(-1).tolist() == [want]


# --------------------------------------------------------------------------- defaults
@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("case", ["int32_wrap", "int8", "shift_ties"])
def test_defaults(depthwise, case):
    """Nothing but x, w (and product_shift for the ties): zero points 0, stride/dilation 1, VALID, a 32-bit
    wrapping accumulator summing in order, the bias after the sum, products rounded half up, int8 outputs over
    the whole int8 range."""
    rng = np.random.default_rng(2)
    kw = {}
    if case == "int32_wrap":      # products 2^31: the 32-bit sum wraps at every other add
        x = np.full((1, 3, 2, 1), 1 << 30, np.int32)
        w = np.full((1, 2, 2, 1), 2, np.int16)
        bias = np.array([(1 << 31) - 1])
    elif case == "int8":
        x = rng.integers(-128, 128, (2, 4, 3, 2)).astype(np.int8)
        w = rng.integers(-127, 128, (1, 2, 2, 2) if depthwise else (2, 2, 2, 2)).astype(np.int8)
        bias = rng.integers(-200, 200, 2)
    else:
        x = np.array([3, -3, 5, -5], np.int16).reshape(1, 2, 2, 1)
        w = np.ones((1, 2, 2, 1), np.int16)
        bias, kw = None, {"product_shift": 1}
    rq = Requantizer("shift", shift=(-6,) if case == "int32_wrap" else (0,), rounding="floor")
    fn = quantized_depthwise_conv2d if depthwise else quantized_conv2d
    res = fn(x, w, bias, requant=rq, **kw)
    acc, ovf, _, _ = ref_layer(x, w, depthwise=depthwise, bias=bias, shift=kw.get("product_shift", 0))
    np.testing.assert_array_equal(res.acc, acc)
    assert res.overflows == ovf
    if case == "int32_wrap":
        assert ovf > 0
    if case == "shift_ties":
        assert acc.reshape(-1).tolist() == [2 - 1 + 3 - 2]
    want, _, _ = ref_outputs(acc, rq, 0, -128, 127)
    assert res.out.dtype == np.int8
    np.testing.assert_array_equal(res.out, want)


@pytest.mark.parametrize("rounding, term", [("half_up", 3), ("floor", 2), ("ceil", 3), ("half_even", 2)])
def test_fold_term_is_rounded_like_a_product(rounding, term):
    """z_x * sum(w') = 5 * 2 = 10 product LSBs = 2.5 accumulator LSBs (product_shift 2): the folded bias
    b - round(2.5) with the products' rounding (x = z_x: every folded product is z_x * w, so the sum is that
    term too, rounded per product: 5 * 2 / 4 = 2.5 rounds the same way)."""
    res = _conv1x1([5], [2], [100], acc=40, x_zp=5, product_shift=2, zero_point="fold", rounding=rounding)
    assert res.acc.reshape(-1).tolist() == [100 - term + term]
    res = _conv1x1([0], [2], [100], acc=40, x_zp=5, product_shift=2, zero_point="fold", rounding=rounding)
    assert res.acc.reshape(-1).tolist() == [100 - term]

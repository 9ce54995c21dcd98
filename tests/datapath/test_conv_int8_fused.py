"""The fused int8 conv / depthwise / fully-connected kernel (fxpsim.datapath.conv_int8) against a pure-Python
big-integer model written here (no fxpsim helper computes an expected value), and against the general path.

The model: per output, products (x - zx) * w added one at a time in (kh, kw, c) order into a W-bit
accumulator that saturates or wraps after every add (each add that changed the exact sum counted), bias
preloaded or added after (that add counted too), padded taps skipped (zero products); then TFLite's
MultiplyByQuantizedMultiplier (double: SRDHM + RoundingDivideByPOT; single: one rounding), output zero point,
clamp, and the pre-clamp values above act_max / below act_min counted.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.datapath import conv_int8
from fxpsim.datapath.integer_ops import quantized_conv2d, quantized_depthwise_conv2d, quantized_fully_connected
from fxpsim.datapath.requantize import Requantizer

pytestmark = pytest.mark.skipif(not conv_int8.available(), reason="the _conv_int8 extension is not built")

MODEL = Path(__file__).resolve().parents[2] / "benchmarks" / "models" / "mobilenet_v2_035_48.tflite"


# ----------------------------------------------------------------------------- the big-integer model
def _wrap(v: int, bits: int) -> int:
    m = 1 << bits
    v %= m
    return v - m if v >= m >> 1 else v


def _fit(s: int, bits: int, mode: str):
    """(fitted value, overflowed) of an exact sum in a ``bits``-bit accumulator."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if lo <= s <= hi:
        return s, False
    return (max(lo, min(hi, s)) if mode == "saturate" else _wrap(s, bits)), True


def _srdhm(a: int, b: int) -> int:
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) >> 31            # C's truncating division by 2^31
    return q if ab + nudge >= 0 else -q


def _rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    rem = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > threshold else 0)


def _mbqm(acc: int, m: int, s: int, kind: str) -> int:
    if kind == "double":
        left, right = max(s, 0), max(-s, 0)
        return _rdbpot(_srdhm(_wrap(acc * (1 << left), 32), m), right)
    total = 31 - s
    return _wrap((acc * m + (1 << (total - 1))) >> total, 32)


def _windows(op, x, w, stride, dilation, pads):
    """Per output (n, p, q): the list of (x index, w index) taps in (kh, kw, c) order, out-of-image taps skipped."""
    n, h, wd, c = x.shape
    kh, kw = (1, 1) if op == "fully_connected" else w.shape[1:3]
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + pl + pr - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    return oh, ow


def reference(op, x, w, bias, *, word, overflow, bias_at, x_zp, stride=(1, 1), dilation=(1, 1),
              pads=((0, 0), (0, 0)), rq_kind, mult, shift, out_zp, lo, hi):
    """(out, acc, overflows, above, below) by the model in the module docstring, Python ints throughout."""
    x = np.asarray(x)
    if op == "fully_connected":
        lead = x.shape[:-1]
        x = x.reshape(-1, 1, 1, x.shape[-1])
        w4 = np.asarray(w).reshape(w.shape[0], 1, 1, w.shape[1])
    else:
        w4 = np.asarray(w)
    n, h, wd, c = x.shape
    kh, kw = w4.shape[1:3]
    n_out = w4.shape[3] if op == "depthwise_conv2d" else w4.shape[0]
    oh, ow = _windows(op, x, w4, stride, dilation, pads)
    xl, wl = x.tolist(), w4.tolist()
    bl = None if bias is None else [int(b) for b in bias]
    acc = np.zeros((n, oh, ow, n_out), dtype=object)
    out = np.zeros((n, oh, ow, n_out), dtype=np.int64)
    overflows = above = below = 0
    for b in range(n):
        for p in range(oh):
            for q in range(ow):
                for o in range(n_out):
                    a = bl[o] if (bl is not None and bias_at == "init") else 0
                    for i in range(kh):
                        ih = p * stride[0] - pads[0][0] + i * dilation[0]
                        for j in range(kw):
                            iw = q * stride[1] - pads[1][0] + j * dilation[1]
                            if not (0 <= ih < h and 0 <= iw < wd):
                                continue
                            chans = [o] if op == "depthwise_conv2d" else range(c)
                            for ch in chans:
                                wv = wl[0][i][j][o] if op == "depthwise_conv2d" else wl[o][i][j][ch]
                                a, ovf = _fit(a + (xl[b][ih][iw][ch] - x_zp) * wv, word, overflow)
                                overflows += ovf
                    if bl is not None and bias_at == "end":
                        a, ovf = _fit(a + bl[o], word, overflow)
                        overflows += ovf
                    acc[b, p, q, o] = a
                    k = o if len(mult) > 1 else 0
                    y = _mbqm(a, int(mult[k]), int(shift[k]), rq_kind) + out_zp
                    above += y > hi
                    below += y < lo
                    out[b, p, q, o] = min(max(y, lo), hi)
    if op == "fully_connected":
        acc, out = acc.reshape(lead + (n_out,)), out.reshape(lead + (n_out,))
    return out.astype(np.int8), acc.astype(np.int64), overflows, above, below


# ----------------------------------------------------------------------------- helpers
def _explicit(padding, hw, khw, stride, dilation):
    if padding == "VALID":
        return ((0, 0), (0, 0))
    pads = []
    for n, k, s, d in zip(hw, khw, stride, dilation):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def _call(op, x, w, bias, **kw):
    fn = {"conv2d": quantized_conv2d, "depthwise_conv2d": quantized_depthwise_conv2d,
          "fully_connected": quantized_fully_connected}[op]
    return fn(x, w, bias, **kw)


def _general(monkeypatch, op, x, w, bias, **kw):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv_int8, "_k", None)
        return _call(op, x, w, bias, **kw)


def _with_impl(monkeypatch, impl, op, x, w, bias, **kw):
    """The layer with the fused kernel forced to ``impl`` (0 fastest, 1 portable); asserts it was taken."""
    taken = []
    orig = conv_int8.fused

    def spy(*a, **k):
        k["impl"] = impl
        r = orig(*a, **k)
        taken.append(r is not None)
        return r
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv_int8, "fused", spy)
        res = _call(op, x, w, bias, **kw)
    return res, taken == [True]


@st.composite
def layers(draw):
    op = draw(st.sampled_from(["conv2d", "depthwise_conv2d", "fully_connected"]))
    n = draw(st.sampled_from([1, 2, 3]))
    c = draw(st.integers(1, 19))
    word = draw(st.sampled_from([8, 12, 16, 16, 20, 32]))
    overflow = draw(st.sampled_from(["saturate", "wrap"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    geom = {}
    if op == "fully_connected":
        x = rng.integers(-128, 128, (n, c * draw(st.integers(1, 4)))).astype(np.int8)
        n_out = draw(st.integers(1, 70))
        w = rng.integers(-128, 128, (n_out, x.shape[1])).astype(np.int8)
    else:
        h, wd = draw(st.integers(1, 6)), draw(st.integers(1, 6))
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        padding = draw(st.sampled_from(["SAME", "VALID"]))
        if padding == "VALID" and (h < (kh - 1) * dilation[0] + 1 or wd < (kw - 1) * dilation[1] + 1):
            padding = "SAME"
        if padding == "SAME" and (h < (kh - 1) * dilation[0] + 1 - h or wd < (kw - 1) * dilation[1] + 1 - wd):
            kh = kw = 1
        x = rng.integers(-128, 128, (n, h, wd, c)).astype(np.int8)
        n_out = c if op == "depthwise_conv2d" else draw(st.integers(1, 70))
        shape = (1, kh, kw, c) if op == "depthwise_conv2d" else (n_out, kh, kw, c)
        w = rng.integers(-128, 128, shape).astype(np.int8)
        geom = dict(stride=stride, dilation=dilation, padding=padding)
    small = draw(st.booleans())          # small weights: exact sums (no overflow possible) are drawn too
    if small:
        w = (w // 64).astype(np.int8)
    bits = min(word, 32)
    bias = None
    if draw(st.booleans()):
        bias = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n_out) >> draw(st.sampled_from([0, 4, 12, 24]))
        bias = bias.astype(np.int32)
    kind = draw(st.sampled_from(["double", "single"]))
    per_channel = draw(st.booleans())
    sw = rng.uniform(0.001, 0.02, n_out) if per_channel else 0.005
    # multipliers below 1 (the usual case) and above 1 (left shifts, products beyond int32 in the output stage)
    out_scale = draw(st.sampled_from([0.00002, 0.0005, 0.05, 0.5, 5.0, 50.0, 500.0]))
    rq = Requantizer.tflite(0.02, sw, out_scale, kind=kind)
    lo = draw(st.integers(-128, 0))
    hi = draw(st.integers(lo, 127))
    kw = dict(requant=rq, x_zp=draw(st.integers(-128, 127)), out_zp=draw(st.integers(-128, 127)), acc=word,
              overflow=overflow, bias_at=draw(st.sampled_from(["end", "init"])), act_min=lo, act_max=hi, **geom)
    return op, x, w, bias, kw


def _expected(op, x, w, bias, kw):
    rq = kw["requant"]
    geom = {}
    if op != "fully_connected":
        pair = (lambda v: (v, v) if isinstance(v, int) else tuple(v))
        stride, dilation = pair(kw.get("stride", 1)), pair(kw.get("dilation", 1))
        pads = _explicit(kw.get("padding", "VALID"), x.shape[1:3], w.shape[1:3], stride, dilation)
        geom = dict(stride=stride, dilation=dilation, pads=pads)
    return reference(op, x, w, bias, word=kw["acc"], overflow=kw["overflow"], bias_at=kw["bias_at"],
                     x_zp=kw["x_zp"], rq_kind=rq.kind, mult=rq.multiplier, shift=rq.shift, out_zp=kw["out_zp"],
                     lo=kw["act_min"], hi=kw["act_max"], **geom)


def _assert_same(res, expected, counted=True):
    out, acc, overflows, above, below = expected
    np.testing.assert_array_equal(res.acc, acc)
    assert res.acc.dtype == np.int64
    np.testing.assert_array_equal(res.out, out)
    assert res.out.dtype == np.int8
    assert res.overflows == overflows
    if counted:
        assert (res.above, res.below) == (above, below)


# ----------------------------------------------------------------------------- tests
@given(layers())
def test_fused_matches_big_integer_model(layer):
    monkeypatch = None      # the helpers patch in their own MonkeyPatch contexts
    op, x, w, bias, kw = layer
    expected = _expected(op, x, w, bias, kw)
    fast_taken = False
    for impl in (0, 1):
        res, taken = _with_impl(monkeypatch, impl, op, x, w, bias, **kw)
        fast_taken |= taken
        _assert_same(res, expected, counted=taken and res.above is not None)
    general = _general(monkeypatch, op, x, w, bias, **kw)
    _assert_same(general, expected, counted=False)
    # the kernel models every drawn layer except a 32-bit accumulator that could overflow
    if kw["acc"] <= 31 or not expected[2]:
        assert fast_taken or kw["acc"] == 32


def test_sixteen_bit_saturation_counts_many_overflows(monkeypatch):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 5, 5, 37)).astype(np.int8)
    w = rng.integers(-128, 128, (67, 3, 3, 37)).astype(np.int8)
    bias = rng.integers(-32768, 32768, 67).astype(np.int32)
    rq = Requantizer.tflite(0.02, rng.uniform(0.001, 0.02, 67), 80.0, kind="single")
    for overflow in ("saturate", "wrap"):
        for bias_at in ("init", "end"):
            kw = dict(requant=rq, x_zp=-5, out_zp=3, acc=16, overflow=overflow, bias_at=bias_at, stride=(1, 2),
                      padding="SAME", act_min=-128, act_max=127)
            expected = _expected("conv2d", x, w, bias, kw)
            assert expected[2] > 1000
            for impl in (0, 1):
                res, taken = _with_impl(monkeypatch, impl, "conv2d", x, w, bias, **kw)
                assert taken
                _assert_same(res, expected)


def test_batch_many_and_depthwise_wide(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (17, 4, 4, 70)).astype(np.int8)
    w = rng.integers(-127, 128, (1, 3, 3, 70)).astype(np.int8)
    bias = rng.integers(-2000, 2000, 70).astype(np.int32)
    rq = Requantizer.tflite(0.02, rng.uniform(0.001, 0.02, 70), 0.3, kind="double")
    for acc, overflow in ((32, "wrap"), (16, "saturate"), (16, "wrap")):
        kw = dict(requant=rq, x_zp=11, out_zp=-7, acc=acc, overflow=overflow, bias_at="end", stride=2,
                  padding="SAME", act_min=-128, act_max=127)
        expected = _expected("depthwise_conv2d", x, w, bias, kw)
        res, taken = _with_impl(monkeypatch, 0, "depthwise_conv2d", x, w, bias, **kw)
        assert taken
        _assert_same(res, expected)


def test_bad_inputs_fall_back_or_raise_and_never_mutate(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (2, 6, 6, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (5, 3, 3, 8)).astype(np.int8)
    rq = Requantizer.tflite(0.02, 0.005, 0.5)
    kw = dict(requant=rq, x_zp=1, out_zp=0, padding="SAME")
    want = _general(monkeypatch, "conv2d", x, w, None, **kw)
    # non-contiguous and read-only inputs: the same result, inputs untouched
    xs = np.zeros((2, 6, 12, 8), np.int8)
    xs[:, :, ::2] = x
    view = xs[:, :, ::2]
    ro = x.copy()
    ro.flags.writeable = False
    wro = w.copy()
    wro.flags.writeable = False
    before = (xs.copy(), ro.copy(), wro.copy())
    for xi, wi in ((view, w), (ro, wro), (np.asfortranarray(x), np.asfortranarray(w))):
        res, taken = _with_impl(monkeypatch, 0, "conv2d", xi, wi, None, **kw)
        assert taken
        np.testing.assert_array_equal(res.out, want.out)
        np.testing.assert_array_equal(res.acc, want.acc)
    np.testing.assert_array_equal(xs, before[0])
    np.testing.assert_array_equal(ro, before[1])
    np.testing.assert_array_equal(wro, before[2])
    # other dtypes: the general path (not modelled by the kernel), the same numbers
    for xi in (x.astype(np.int16), x.astype(np.int32)):
        res, taken = _with_impl(monkeypatch, 0, "conv2d", xi, w, None, **kw)
        assert not taken
        np.testing.assert_array_equal(res.out, want.out)
    # a per-channel weight zero point, an int16 output, folding, tiling, a product shift: the general path
    for extra in (dict(w_zp=np.arange(5)), dict(out_dtype=np.int16), dict(zero_point="fold"), dict(tile_k=4),
                  dict(product_shift=1), dict(order="tree", acc=16, overflow="saturate"),
                  dict(acc=16, overflow="saturate_symmetric"), dict(acc=32, overflow="wrap", bias_at="init")):
        args = (x, w, np.full(5, 2 ** 31 - 1000, np.int32) if extra.get("bias_at") else None)
        _, taken = _with_impl(monkeypatch, 0, "conv2d", *args, **{**kw, **extra})
        assert not taken, extra
        want_extra = _general(monkeypatch, "conv2d", *args, **{**kw, **extra})
        got_extra = _call("conv2d", *args, **{**kw, **extra})
        np.testing.assert_array_equal(got_extra.out, want_extra.out)
        assert got_extra.overflows == want_extra.overflows
    # a depth multiplier of 2: the general path
    wdm = rng.integers(-128, 128, (1, 3, 3, 16)).astype(np.int8)
    _, taken = _with_impl(monkeypatch, 0, "depthwise_conv2d", x, wdm, None, **kw)
    assert not taken
    with pytest.raises(TypeError):
        quantized_conv2d(x.astype(np.float32), w, None, **kw)
    with pytest.raises(ValueError):
        quantized_conv2d(x, w[:, :, :, :3], None, **kw)


def test_fused_kernel_direct_errors():
    from fxpsim.datapath import _conv_int8
    x = np.zeros((1, 2, 2, 3), np.int8)
    with pytest.raises((ValueError, TypeError)):
        _conv_int8.run(x.astype(np.int16), np.zeros(27, np.int8), None, (3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1), 0, 0, 0,
                       32, 0, None, -128, 127, 0)
    with pytest.raises(ValueError):       # non-contiguous: the kernel wants C order (conv_int8.fused copies)
        _conv_int8.run(np.zeros((1, 2, 4, 3), np.int8)[:, :, ::2], np.zeros(27, np.int8), None,
                       (3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1), 0, 0, 0, 32, 0, None, -128, 127, 0)


# ----------------------------------------------------------------------------- the imported MobileNetV2
def _same_trace(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray) or isinstance(b[k], np.ndarray):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, k
        else:
            assert a[k] == b[k], k


@pytest.mark.skipif(not MODEL.exists(), reason="benchmark model missing")
def test_mobilenet_fast_and_general_paths_agree(monkeypatch):
    import fxpsim
    graph = fxpsim.import_tflite(MODEL)
    x = np.clip(np.random.default_rng(0).normal(0.0, 45.0, (3, 48, 48, 3)), -128, 127).astype(np.int8)
    for dp in (None, fxpsim.preset("int8-acc16-sat")):
        args = (x,) if dp is None else (x, dp)
        fast = graph.run(*args, trace=True, keep=True)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(conv_int8, "_k", None)
            slow = graph.run(*args, trace=True, keep=True)
        np.testing.assert_array_equal(fast[0], slow[0])
        assert fast[2].keys() == slow[2].keys()
        for name in slow[2]:
            np.testing.assert_array_equal(fast[2][name], slow[2][name], err_msg=name)
        assert fast[1].keys() == slow[1].keys()
        for name in slow[1]:
            if slow[1][name] is None:
                assert fast[1][name] is None
            else:
                _same_trace(fast[1][name], slow[1][name])
        if dp is not None:
            assert sum(t["overflows"] for t in fast[1].values() if t) > 0
        np.testing.assert_array_equal(graph.run(*args), slow[0])


# ----------------------------------------------------------------------------- ADD as a table
def _tflite_add_model(x1, x2, z1, z2, zo, params, left, kind, lo, hi):
    m1, s1, m2, s2, mo, so = (int(v) for v in params)
    out = []
    for a, b in zip(x1.tolist(), x2.tolist()):
        v1 = _mbqm(_wrap((a - z1) << left, 32), m1, s1, kind)
        v2 = _mbqm(_wrap((b - z2) << left, 32), m2, s2, kind)
        out.append(min(max(_mbqm(_wrap(v1 + v2, 32), mo, so, kind) + zo, lo), hi))
    return np.array(out, np.int8)


@given(st.integers(0, 2 ** 32 - 1), st.sampled_from(["double", "single"]), st.booleans())
def test_add_table_matches_big_integer_model(seed, kind, broadcast):
    from fxpsim.datapath.integer_ops import quantized_add
    from fxpsim.datapath.requantize import tflite_add_params
    rng = np.random.default_rng(seed)
    s1, s2, so = (float(v) for v in rng.uniform(0.01, 0.2, 3))
    z1, z2, zo = (int(v) for v in rng.integers(-128, 128, 3))
    lo = int(rng.integers(-128, 0))
    hi = int(rng.integers(lo, 128))
    x1 = rng.integers(-128, 128, (3, 4, 5)).astype(np.int8)
    x2 = rng.integers(-128, 128, (4, 1) if broadcast else (3, 4, 5)).astype(np.int8)
    before = (x1.copy(), x2.copy())
    got = quantized_add(x1, x2, scale1=s1, zp1=z1, scale2=s2, zp2=z2, out_scale=so, out_zp=zo, act_min=lo,
                        act_max=hi, rounding=kind)
    params = tflite_add_params(s1, s2, so, 20, kind == "single")
    b1, b2 = np.broadcast_arrays(x1, x2)
    want = _tflite_add_model(b1.reshape(-1), b2.reshape(-1), z1, z2, zo, params, 20, kind, lo, hi)
    np.testing.assert_array_equal(got.reshape(-1), want)
    assert got.dtype == np.int8 and got.shape == (3, 4, 5)
    np.testing.assert_array_equal(x1, before[0])
    np.testing.assert_array_equal(x2, before[1])
    with pytest.MonkeyPatch.context() as m:          # the general path, for the same inputs
        m.setattr(conv_int8, "_k", None)
        general = quantized_add(x1, x2, scale1=s1, zp1=z1, scale2=s2, zp2=z2, out_scale=so, out_zp=zo,
                                act_min=lo, act_max=hi, rounding=kind)
    np.testing.assert_array_equal(general, got)


def test_reused_accumulator_buffers_never_change_what_a_caller_holds():
    rng = np.random.default_rng(11)
    w = rng.integers(-128, 128, (9, 3, 3, 5)).astype(np.int8)
    rq = Requantizer.tflite(0.02, 0.005, 0.5, kind="single")
    kw = dict(requant=rq, x_zp=0, out_zp=0, acc=16, overflow="saturate", padding="SAME")
    xs = [rng.integers(-128, 128, (4, 6, 6, 5)).astype(np.int8) for _ in range(3)]
    first = quantized_conv2d(xs[0], w, None, **kw)
    kept_acc, kept_copy = first.acc, first.acc.copy()
    kept_out, kept_out_copy = first.out[0], first.out[0].copy()     # a view of the int8 output
    view = quantized_conv2d(xs[1], w, None, **kw).acc[1:3]     # only a view of the second one is held
    view_copy = view.copy()
    del first
    for x in xs:                                               # later runs reuse only released buffers
        again = quantized_conv2d(x, w, None, **kw)
        assert not np.shares_memory(again.acc, kept_acc) and not np.shares_memory(again.acc, view)
        assert not np.shares_memory(again.out, kept_out)
    np.testing.assert_array_equal(kept_acc, kept_copy)
    np.testing.assert_array_equal(kept_out, kept_out_copy)
    np.testing.assert_array_equal(view, view_copy)
    a1 = quantized_conv2d(xs[2], w, None, **kw).acc
    a2 = quantized_conv2d(xs[2], w, None, **kw).acc
    assert not np.shares_memory(a1, a2)
    np.testing.assert_array_equal(a1, a2)
    conv_int8.release_buffers(0)                  # no reuse at all: still the same numbers
    try:
        np.testing.assert_array_equal(quantized_conv2d(xs[2], w, None, **kw).acc, a1)
        assert not conv_int8._POOL.free
    finally:
        conv_int8.release_buffers(1 << 29)


@pytest.mark.parametrize("c", [1, 5, 16, 17])
@pytest.mark.parametrize("overflow", ["saturate", "wrap"])
def test_depthwise_pairs_of_pixels_odd_counts(monkeypatch, c, overflow):
    """Depthwise with at most 16 channels runs two pixels per register: an odd pixel count leaves the last
    pixel alone, whose overflows must be counted once."""
    rng = np.random.default_rng(c)
    x = rng.choice(np.array([-128, 127], np.int8), (1, 3, 3, c))
    w = rng.choice(np.array([-128, 127], np.int8), (1, 3, 3, c))
    bias = rng.integers(-30000, 30000, c).astype(np.int32)
    rq = Requantizer.tflite(0.02, 0.005, 5.0, kind="single")
    for bias_at in ("init", "end"):
        kw = dict(requant=rq, x_zp=-1, out_zp=0, acc=16, overflow=overflow, bias_at=bias_at, padding="SAME",
                  act_min=-128, act_max=127)
        expected = _expected("depthwise_conv2d", x, w, bias, kw)
        assert expected[2] > 0
        for impl in (0, 1):
            res, taken = _with_impl(monkeypatch, impl, "depthwise_conv2d", x, w, bias, **kw)
            assert taken
            _assert_same(res, expected)

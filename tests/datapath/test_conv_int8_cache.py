"""The fused int8 kernel's prepared calls keep what they derive from the weights (``FusedCall.cache``: the
exactness bound's weight sums, each kernel's weight layout, the output constants' lane order) between calls:
every call of one prepared layer, on inputs that take the exact sums and the per-add ones in turn (so each
call may need a layout the previous ones did not build), equals the pure-Python big-integer model of
``test_conv_int8_fused`` (no fxpsim helper computes an expected value), for the fastest and the portable
kernels; and weights changed in place after preparing do not reach the kept layouts (the call copied them).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from fxpsim.datapath import conv_int8
from test_conv_int8_fused import _call, _expected, layers

pytestmark = pytest.mark.skipif(not conv_int8.available(), reason="the _conv_int8 extension is not built")


def _prepared(op, x, w, bias, kw, impl):
    call = _call(op, x, w, bias, prepare=True, **kw)
    if call is not None and impl:
        call.args = call.args[:6] + (impl,) + call.args[7:]
        call.bind()
    return call


def _check(got, expected):
    if got is None:
        return False
    out, acc, overflows, above, below = got
    e_out, e_acc, e_ovf, e_above, e_below = expected
    np.testing.assert_array_equal(out, e_out)
    np.testing.assert_array_equal(acc, e_acc)
    assert overflows == e_ovf
    if above is not None:
        assert (above, below) == (e_above, e_below)
    return True


@settings(max_examples=60, deadline=None)
@given(layers())
def test_prepared_calls_in_turn_equal_the_big_integer_model(layer):
    op, x, w, bias, kw = layer
    zx = kw["x_zp"]
    near = np.clip(x.astype(np.int64), zx - 1, zx + 1).clip(-128, 127).astype(np.int8)   # |x - zx| <= 1
    inputs = [near, x, near, x[::-1].copy(), near]
    for impl in (0, 1):
        call = _prepared(op, x, w, bias, kw, impl)
        if call is None:
            continue
        for xi in inputs:
            expected = _expected(op, xi, w, bias, kw)
            _check(call(xi, True), expected)
            codes = call.codes(xi)                    # the lean entry: the output codes alone, or None
            if codes is not None:
                np.testing.assert_array_equal(codes, expected[0])


def test_lean_entry_takes_only_what_it_was_prepared_for():
    """``FusedCall.codes`` (``Cache.forward``): the bound input alone (int8, C-contiguous, that shape), never under
    an active overflow log (which must see the call), and the same codes as the full call."""
    import fxpsim
    from fxpsim.datapath.requantize import Requantizer
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 6, 6, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (12, 3, 3, 8)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 12).astype(np.int32)
    kw = dict(requant=Requantizer.tflite(0.02, 0.005, 0.5, kind="double"), x_zp=3, out_zp=-2, acc=32,
              overflow="saturate", bias_at="init", act_min=-128, act_max=127, stride=(1, 1), padding="SAME")
    call = _call("conv2d", x, w, bias, prepare=True, **kw)
    want = _expected("conv2d", x, w, bias, kw)[0]
    np.testing.assert_array_equal(call.codes(x), want)
    assert call.codes(x.astype(np.int16)) is None
    assert call.codes(np.concatenate([x, x])) is None                   # another batch
    wide = np.zeros((1, 6, 12, 8), np.int8)
    wide[:, :, ::2] = x
    assert call.codes(wide[:, :, ::2]) is None                        # not C-contiguous
    with fxpsim.overflow_log():
        assert call.codes(x) is None


def test_weights_changed_after_preparing_do_not_reach_the_call():
    from fxpsim.core.fixed import Format
    from fxpsim.datapath.requantize import Requantizer
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (2, 6, 6, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (12, 3, 3, 8)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 12).astype(np.int32)
    rq = Requantizer.tflite(0.02, 0.005, 0.5, kind="double")
    kw = dict(requant=rq, x_zp=3, out_zp=-2, acc=16, overflow="saturate", bias_at="end", act_min=-128,
              act_max=127, stride=(1, 1), padding="SAME")
    w0, b0 = w.copy(), bias.copy()
    call = conv_int8.prepare("conv2d", x.shape, x.dtype, w, bias, requant=rq, x_zp=3, w_zp=0,
                             out_spec=(np.int8, -2, -128, 127), fmt=Format.integer(16), overflow="saturate",
                             order="sequential", bias_at="end", pads=((1, 1), (1, 1)))
    assert _check(call(x, True), _expected("conv2d", x, w0, b0, kw))
    w[...] = -w
    bias[...] = 0
    assert _check(call(x, True), _expected("conv2d", x, w0, b0, kw))
    small = np.full_like(x, 3)                    # exact sums: a layout the first calls did not need
    assert _check(call(small, True), _expected("conv2d", small, w0, b0, kw))


def test_one_prepared_call_from_several_threads():
    """Threads sharing a fresh prepared call (each first call may build a kept layout, under the cache's lock)
    all get the big-integer model's results."""
    import threading
    from fxpsim.datapath.requantize import Requantizer
    rng = np.random.default_rng(11)
    w = rng.integers(-128, 128, (40, 3, 3, 16)).astype(np.int8)
    bias = rng.integers(-3000, 3000, 40).astype(np.int32)
    kw = dict(requant=Requantizer.tflite(0.02, 0.004, 0.3, kind="double"), x_zp=-5, out_zp=4, acc=16,
              overflow="wrap", bias_at="init", act_min=-100, act_max=120, stride=(2, 1), padding="SAME")
    xs = [rng.integers(-128, 128, (2, 7, 7, 16)).astype(np.int8) for _ in range(4)]
    xs[1][...] = -5                                   # exact sums
    xs[3] = np.clip(xs[3], -7, -3).astype(np.int8)    # |x - zx| <= 2: exact sums too
    expected = [_expected("conv2d", x, w, bias, kw) for x in xs]
    call = _call("conv2d", xs[0], w, bias, prepare=True, **kw)
    errors = []

    def work(order):
        try:
            for i in order:
                assert _check(call(xs[i], True), expected[i])
        except BaseException as exc:              # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(o,)) for o in ([0, 1, 2, 3] * 3, [1, 0, 3, 2] * 3, [3, 2] * 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

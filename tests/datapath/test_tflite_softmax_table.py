"""LiteRT's optimized SOFTMAX / LOG_SOFTMAX table (``PopulateSoftmaxLookupTable``), computed once per scale: every
entry equals :math:`\\mathrm{fl}_{32}(e^{\\mathrm{fl}_{32}(\\mathrm{fl}_{32}(-s\\beta) k)})` by Python's ``math.exp``,
the kept table cannot be written, and a second call gives the same array."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fxpsim.datapath.tflite.softmax import _softmax_exp_table


@pytest.mark.parametrize("scale, beta", [(0.1, 1.0), (1 / 256, 1.0), (0.0371, 0.5), (3.0, 2.0)])
def test_table_entries_and_kept_read_only(scale, beta):
    f32 = np.float32
    step = -f32(scale) * f32(beta)
    want = [f32(math.exp(float(f32(step * f32(k))))) if float(step * f32(k)) > -745 else f32(0) for k in range(256)]
    t = _softmax_exp_table(scale, beta)
    assert t.dtype == np.float32 and t.shape == (256,)
    assert t.tobytes() == np.array(want, np.float32).tobytes()
    assert _softmax_exp_table(scale, beta) is t
    with pytest.raises(ValueError):
        t[0] = 0

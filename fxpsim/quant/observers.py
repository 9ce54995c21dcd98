"""Range observers: calibrate (min, max) or (scale, zero_point) from data for the quantizers.

Every observer follows one small protocol:

``obs.update(x)``
    Fold a batch into the running statistics (no-op once :meth:`Observer.freeze` was
    called); returns the observer.
``obs.min_max()``
    The range :math:`[a, b]` (float64 arrays, shape ``()`` per tensor or ``(C,)`` per
    channel along ``axis``) that :class:`fxpsim.quantizers.FakeQuant` uses.
``obs.scale_zero_point(quant_min, quant_max, symmetric=False)``
    PyTorch's affine parameters for :class:`fxpsim.quantizers.AffineQuantizer`
    (float32 scale, int64 zero point), as ``torch.ao.quantization`` computes them:

    .. math::

        a_- = \\min(a, 0),\\; b_+ = \\max(b, 0), \\quad
        s = \\max\\Big(\\frac{b_+ - a_-}{q_{max} - q_{min}}, \\epsilon\\Big), \\quad
        z = \\mathrm{clamp}(q_{min} - \\mathrm{rne}(a_- / s), q_{min}, q_{max})

    or, symmetric, :math:`s = \\max(\\max(-a_-, b_+) / ((q_{max} - q_{min})/2), \\epsilon)`
    with :math:`z = 0` for signed ranges and :math:`(q_{min} + q_{max} + 1) // 2` otherwise.
``obs.freeze()`` / ``obs.unfreeze()`` / ``obs.reset()``; ``get_config()`` / ``serialize()``.

Observers: :class:`MinMaxObserver` (running extremes), :class:`MovingAverageObserver`
(``tf.contrib.quantize``'s exponential moving average), :class:`PercentileObserver`
and :class:`MSEObserver` (grid search for the range of least quantization error).
:func:`get` builds one from a name, a dict or an instance.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["Observer", "MinMaxObserver", "MovingAverageObserver", "PercentileObserver", "MSEObserver",
           "get_observer"]

_F32 = np.float32


def _batch(x, axis, where):
    """``x`` as float64 with the channel axis first, flattened to ``(C, N)`` (``(1, N)`` per tensor)."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{where}: expected a real floating-point array, got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"{where}: cannot observe an empty array")
    if np.isnan(arr).any():
        raise ValueError(f"{where}: input contains NaN")
    arr = arr.astype(np.float64)
    if axis is None:
        return arr.reshape(1, -1)
    if not -arr.ndim <= axis < arr.ndim:
        raise ValueError(f"{where}: axis {axis} is out of range for an input with {arr.ndim} dimensions")
    return np.moveaxis(arr, axis, 0).reshape(arr.shape[axis], -1)


def _shape_out(values, axis):
    return values.reshape(()) if axis is None else values


class Observer:
    """Base class: running statistics of ``(C, N)`` batches; subclasses implement ``_observe``."""

    name = ""

    def __init__(self, axis=None):
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)):
            raise TypeError(f"{type(self).__name__}: axis must be an int or None, got {axis!r}")
        self.axis = axis
        self.frozen = False
        self.min_val: np.ndarray | None = None
        self.max_val: np.ndarray | None = None

    def update(self, x) -> "Observer":
        if self.frozen:
            return self
        values = _batch(x, self.axis, f"{type(self).__name__}.update")
        if self.min_val is not None and self.min_val.shape != (values.shape[0],):
            raise ValueError(f"{type(self).__name__}.update: {values.shape[0]} channels, "
                             f"previous batches had {self.min_val.shape[0]}")
        self._observe(values)
        return self

    __call__ = update

    def _observe(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def min_max(self) -> tuple[np.ndarray, np.ndarray]:
        if self.min_val is None:
            raise RuntimeError(f"{type(self).__name__}: no data observed yet")
        return _shape_out(self.min_val.copy(), self.axis), _shape_out(self.max_val.copy(), self.axis)

    def scale_zero_point(self, quant_min: int, quant_max: int, symmetric: bool = False):
        if quant_min >= quant_max:
            raise ValueError(f"scale_zero_point: quant_min ({quant_min}) must be < quant_max ({quant_max})")
        lo, hi = self.min_max()
        lo_neg = np.minimum(lo, 0).astype(_F32)
        hi_pos = np.maximum(hi, 0).astype(_F32)
        eps = np.finfo(_F32).eps
        if symmetric:
            bound = np.maximum(-lo_neg, hi_pos)
            scale = np.maximum(bound / _F32((quant_max - quant_min) / 2), eps).astype(_F32)
            zp = 0 if quant_min < 0 else (quant_min + quant_max + 1) // 2
            zero_point = np.full(scale.shape, zp, np.int64)
        else:
            scale = np.maximum((hi_pos - lo_neg) / _F32(quant_max - quant_min), eps).astype(_F32)
            zero_point = np.clip(quant_min - np.rint(lo_neg / scale).astype(np.int64), quant_min, quant_max)
        return scale, zero_point

    def freeze(self) -> "Observer":
        self.frozen = True
        return self

    def unfreeze(self) -> "Observer":
        self.frozen = False
        return self

    def reset(self) -> "Observer":
        self.min_val = self.max_val = None
        return self

    def _config(self) -> dict:
        return {}

    def get_config(self) -> dict:
        config = {"axis": self.axis, "frozen": self.frozen,
                  "min_val": None if self.min_val is None else self.min_val.tolist(),
                  "max_val": None if self.max_val is None else self.max_val.tolist()}
        config.update(self._config())
        return config

    @classmethod
    def from_config(cls, config: dict) -> "Observer":
        config = dict(config)
        state = {key: config.pop(key, None) for key in ("frozen", "min_val", "max_val")}
        obs = cls(**config)
        if state["min_val"] is not None:
            obs.min_val = np.asarray(state["min_val"], np.float64).reshape(-1)
            obs.max_val = np.asarray(state["max_val"], np.float64).reshape(-1)
        obs.frozen = bool(state["frozen"])
        return obs

    def serialize(self) -> dict:
        return {"class_name": self.name, "config": self.get_config()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(axis={self.axis!r}, frozen={self.frozen})"


class MinMaxObserver(Observer):
    """Running extremes over every batch seen.

    .. math:: a = \\min_{t} \\min_i x^{(t)}_i, \\qquad b = \\max_t \\max_i x^{(t)}_i
    """

    name = "minmax"

    def _observe(self, values):
        lo, hi = values.min(axis=1), values.max(axis=1)
        self.min_val = lo if self.min_val is None else np.minimum(self.min_val, lo)
        self.max_val = hi if self.max_val is None else np.maximum(self.max_val, hi)


class MovingAverageObserver(Observer):
    """``tf.contrib.quantize``'s moving-average range (``MovingAvgQuantize``).

    Each batch's extremes are widened to include zero, then averaged exponentially:

    .. math::

        a \\leftarrow a - (1 - \\delta)\\,(a - \\min(\\min_i x_i, 0)), \\qquad
        b \\leftarrow b - (1 - \\delta)\\,(b - \\max(\\max_i x_i, 0))

    with decay :math:`\\delta` (0.999).  The averages start at ``init_min``/``init_max``
    (-6, 6 as TensorFlow's variables); ``init_min=None`` starts from the first batch.
    """

    name = "moving_average"

    def __init__(self, decay: float = 0.999, init_min=-6.0, init_max=6.0, axis=None):
        super().__init__(axis)
        if not (isinstance(decay, numbers.Real) and 0.0 <= decay < 1.0):
            raise ValueError(f"MovingAverageObserver: decay must be in [0, 1), got {decay!r}")
        if (init_min is None) != (init_max is None):
            raise ValueError("MovingAverageObserver: give both init_min and init_max, or neither")
        if init_min is not None and not init_min <= 0 <= init_max:
            raise ValueError(f"MovingAverageObserver: need init_min <= 0 <= init_max, got {init_min}, {init_max}")
        self.decay = float(decay)
        self.init_min, self.init_max = init_min, init_max

    def _observe(self, values):
        lo = np.minimum(values.min(axis=1), 0.0)
        hi = np.maximum(values.max(axis=1), 0.0)
        if self.min_val is None:
            if self.init_min is None:
                self.min_val, self.max_val = lo, hi
                return
            self.min_val = np.full(lo.shape, float(self.init_min))
            self.max_val = np.full(hi.shape, float(self.init_max))
        self.min_val = self.min_val - (1.0 - self.decay) * (self.min_val - lo)
        self.max_val = self.max_val - (1.0 - self.decay) * (self.max_val - hi)

    def _config(self):
        return {"decay": self.decay, "init_min": self.init_min, "init_max": self.init_max}


class PercentileObserver(Observer):
    """Clip outliers: the mean over batches of each batch's percentiles.

    .. math:: a = \\overline{P_{100 - p}(x^{(t)})}, \\qquad b = \\overline{P_{p}(x^{(t)})}

    (``p`` = ``percentile``, 99.99 by default; linear interpolation as ``np.percentile``).
    """

    name = "percentile"

    def __init__(self, percentile: float = 99.99, axis=None):
        super().__init__(axis)
        if not (isinstance(percentile, numbers.Real) and 50.0 < percentile <= 100.0):
            raise ValueError(f"PercentileObserver: percentile must be in (50, 100], got {percentile!r}")
        self.percentile = float(percentile)
        self.batches = 0

    def _observe(self, values):
        lo = np.percentile(values, 100.0 - self.percentile, axis=1)
        hi = np.percentile(values, self.percentile, axis=1)
        self.batches += 1
        if self.min_val is None:
            self.min_val, self.max_val = lo, hi
        else:
            self.min_val = self.min_val + (lo - self.min_val) / self.batches
            self.max_val = self.max_val + (hi - self.max_val) / self.batches

    def reset(self):
        self.batches = 0
        return super().reset()

    def _config(self):
        return {"percentile": self.percentile}


class MSEObserver(Observer):
    """The range of least mean squared quantization error, by grid search.

    Candidates shrink the observed extremes toward zero, :math:`[\\lambda a, \\lambda b]` for
    :math:`\\lambda \\in \\{1/G, 2/G, \\dots, 1\\}` (``grid`` = G); each is scored by

    .. math::

        \\mathrm{MSE}(\\lambda) = \\frac1N \\sum_i \\big(x_i - \\hat q_\\lambda(x_i)\\big)^2, \\quad
        \\hat q(x) = s\\,(\\mathrm{clamp}(\\mathrm{rne}(x/s) + z, 0, 2^n - 1) - z)

    with :math:`s, z` the affine parameters of the candidate range for ``num_bits`` = n
    (zero kept exact).  Scored on up to ``max_samples`` values per channel kept from the
    batches (a fixed-seed random subsample beyond that).
    """

    name = "mse"

    def __init__(self, num_bits: int = 8, grid: int = 100, max_samples: int = 65536, axis=None):
        super().__init__(axis)
        if isinstance(num_bits, bool) or not isinstance(num_bits, numbers.Integral) or not 2 <= num_bits <= 16:
            raise ValueError(f"MSEObserver: num_bits must be an int in [2, 16], got {num_bits!r}")
        if not (isinstance(grid, numbers.Integral) and grid >= 1):
            raise ValueError(f"MSEObserver: grid must be a positive int, got {grid!r}")
        self.num_bits, self.grid, self.max_samples = int(num_bits), int(grid), int(max_samples)
        self._samples: np.ndarray | None = None
        self._extremes: tuple[np.ndarray, np.ndarray] | None = None
        self._rng = np.random.default_rng(0)

    def _observe(self, values):
        lo, hi = values.min(axis=1), values.max(axis=1)
        if self._extremes is not None:
            lo, hi = np.minimum(self._extremes[0], lo), np.maximum(self._extremes[1], hi)
        self._extremes = (lo, hi)
        samples = values if self._samples is None else np.concatenate([self._samples, values], axis=1)
        if samples.shape[1] > self.max_samples:
            keep = np.sort(self._rng.choice(samples.shape[1], self.max_samples, replace=False))
            samples = samples[:, keep]
        self._samples = samples
        self.min_val, self.max_val = self._search(samples, lo, hi)

    def _search(self, samples, lo, hi):
        levels = (1 << self.num_bits) - 1
        lo0, hi0 = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
        best_err = np.full(lo.shape, np.inf)
        best_lo, best_hi = lo0.copy(), hi0.copy()
        for k in range(1, self.grid + 1):
            frac = k / self.grid
            c_lo, c_hi = lo0 * frac, hi0 * frac
            span = c_hi - c_lo
            scale = np.where(span > 0, span / levels, 1.0)
            zp = np.clip(np.rint(-c_lo / scale), 0, levels)
            q = np.clip(np.rint(samples / scale[:, None]) + zp[:, None], 0, levels)
            err = np.mean((samples - (q - zp[:, None]) * scale[:, None]) ** 2, axis=1)
            better = err < best_err
            best_err = np.where(better, err, best_err)
            best_lo, best_hi = np.where(better, c_lo, best_lo), np.where(better, c_hi, best_hi)
        return best_lo, best_hi

    def reset(self):
        self._samples = self._extremes = None
        return super().reset()

    def _config(self):
        return {"num_bits": self.num_bits, "grid": self.grid, "max_samples": self.max_samples}


_OBSERVERS = {cls.name: cls for cls in (MinMaxObserver, MovingAverageObserver, PercentileObserver, MSEObserver)}


def get_observer(spec) -> Observer:
    """An observer from a name (``"minmax"``, ``"moving_average"``, ``"percentile"``, ``"mse"`` or a
    class name), a dict ``{"class_name": ..., "config": {...}}`` (or with the kwargs inline), or an instance."""
    if isinstance(spec, Observer):
        return spec
    if isinstance(spec, str):
        return _lookup(spec)()
    if isinstance(spec, dict):
        spec = dict(spec)
        if "class_name" not in spec:
            raise ValueError(f"an observer dict needs a 'class_name' key, got keys {sorted(spec)}")
        cls = _lookup(spec.pop("class_name"))
        config = dict(spec.pop("config", {}))
        config.update(spec)
        return cls.from_config(config)
    raise TypeError(f"cannot build an observer from {type(spec).__name__} {spec!r}")


def _lookup(name: str):
    key = name.lower()
    if key in _OBSERVERS:
        return _OBSERVERS[key]
    for cls in _OBSERVERS.values():
        if cls.__name__.lower() == key:
            return cls
    raise ValueError(f"unknown observer {name!r}; known: {', '.join(sorted(_OBSERVERS))}")


get = get_observer

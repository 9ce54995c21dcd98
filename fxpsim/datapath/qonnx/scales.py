"""Exact scales: :math:`s = m\\,2^e / d` with ``m`` an array of positive integers (one per element of a
broadcast shape: per tensor, per channel or per element), ``e`` and ``d > 0`` integers.

Every float32 scale is exactly such a number (its mantissa and exponent), and so is every product, every
common scale of a sum and every average over a window: an imported QONNX graph carries one
:class:`ExactScale` per tensor, and the integer multipliers between them are exact, so no float is needed
anywhere between two quantizers. :meth:`ExactScale.ratio` gives the integer pair :math:`(n, d)` of
:math:`s_a / s_b`, :func:`common` the scale and integer multipliers of a sum.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd

import numpy as np

from .arithmetic import float_parts

__all__ = ["ExactScale", "common"]


def _ints(a) -> np.ndarray:
    return np.asarray(a, dtype=object)


def _pow2(k: int) -> int:
    return 1 << k


@dataclass(frozen=True, eq=False)
class ExactScale:
    """:math:`s = m\\,2^e / d` (see the module docstring); build one with :meth:`from_float`."""

    m: np.ndarray
    e: int = 0
    d: int = 1

    def __post_init__(self):
        m = _ints(self.m)
        if m.size == 0 or any(int(v) <= 0 for v in m.ravel()):
            raise ValueError("scales must be positive")
        if int(self.d) <= 0:
            raise ValueError("a scale's denominator must be positive")
        object.__setattr__(self, "m", m)
        object.__setattr__(self, "e", int(self.e))
        object.__setattr__(self, "d", int(self.d))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_float(cls, values, ndim: int | None = None) -> "ExactScale":
        """The exact value of positive finite floats (e.g. a float32 scale tensor), reduced."""
        v = np.asarray(values, np.float64)
        if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"scales must be positive and finite, got {values!r}")
        if ndim is not None:
            v = v.reshape((1,) * (ndim - v.ndim) + v.shape) if v.ndim < ndim else v
        m, e = float_parts(v)
        e0 = int(e.min())
        mm = _ints([int(mi) << int(ei - e0) for mi, ei in zip(m.ravel(), e.ravel())]).reshape(m.shape)
        return cls(mm, e0).reduced()

    @classmethod
    def one(cls, ndim: int = 0) -> "ExactScale":
        return cls(np.ones((1,) * ndim, object), 0, 1)

    def reduced(self) -> "ExactScale":
        """The same scale with common powers of two moved into ``e`` and common factors of ``m`` and ``d``
        cancelled."""
        m, e, d = self.m.copy(), self.e, self.d
        g = 0
        for v in m.ravel():
            g = gcd(g, int(v))
        tz = (g & -g).bit_length() - 1
        if tz:
            m = _ints([int(v) >> tz for v in m.ravel()]).reshape(m.shape)
            e += tz
            g >>= tz
        while d % 2 == 0:
            d //= 2
            e -= 1
        c = gcd(g, d)
        if c > 1:
            m = _ints([int(v) // c for v in m.ravel()]).reshape(m.shape)
            d //= c
        return ExactScale(m, e, d)

    # ------------------------------------------------------------------ algebra
    @property
    def ndim(self) -> int:
        return self.m.ndim

    def __mul__(self, other: "ExactScale") -> "ExactScale":
        return ExactScale(self.m * other.m, self.e + other.e, self.d * other.d).reduced()

    def divided(self, k: int) -> "ExactScale":
        """:math:`s / k` for a positive integer ``k`` (an average over ``k`` values)."""
        return ExactScale(self.m, self.e, self.d * int(k)).reduced()

    def shifted(self, k: int) -> "ExactScale":
        return ExactScale(self.m, self.e + int(k), self.d)

    def reshape(self, shape) -> "ExactScale":
        return ExactScale(self.m.reshape(shape), self.e, self.d)

    def broadcast(self, shape) -> "ExactScale":
        return ExactScale(np.broadcast_to(self.m, shape).copy(), self.e, self.d)

    def compact(self) -> "ExactScale":
        """One value when all are equal (the broadcast rank kept)."""
        flat = self.m.ravel()
        if all(int(v) == int(flat[0]) for v in flat):
            return ExactScale(np.full((1,) * self.m.ndim, int(flat[0]), object), self.e, self.d)
        return self

    def ratio(self, other: "ExactScale") -> tuple[np.ndarray, np.ndarray]:
        """Integer arrays ``(n, d)`` with :math:`s_{self} / s_{other} = n / d` elementwise (reduced)."""
        num = self.m * other.d * _pow2(max(0, self.e - other.e))
        den = other.m * self.d * _pow2(max(0, other.e - self.e))
        num, den = np.broadcast_arrays(num, den)
        g = np.array([gcd(int(a), int(b)) for a, b in zip(num.ravel(), den.ravel())], object).reshape(num.shape)
        return num // g, den // g

    def is_uniform_along(self, axes) -> bool:
        """Whether the scale is constant along the given axes of its broadcast shape."""
        m = self.m
        for ax in axes:
            if m.shape[ax] != 1 and not np.all(m == m.take([0], axis=ax)):
                return False
        return True

    # ------------------------------------------------------------------ readings
    def fractions(self) -> np.ndarray:
        """Each value as a :class:`fractions.Fraction` (object array)."""
        two = Fraction(2) ** self.e
        return np.vectorize(lambda v: Fraction(int(v)) * two / self.d, otypes=[object])(self.m)

    def float64(self) -> np.ndarray:
        """The float64 reading (exact when it is a float64 number)."""
        return np.array([float(f) for f in self.fractions().ravel()], np.float64).reshape(self.m.shape)

    def is_power_of_two(self) -> bool:
        return self.d == 1 and all(int(v) == 1 for v in self.m.ravel())

    def to_json(self) -> dict:
        return {"m": self.m.tolist(), "e": self.e, "d": self.d}

    @classmethod
    def from_json(cls, obj) -> "ExactScale":
        return cls(np.array(obj["m"], dtype=object), obj["e"], obj["d"])

    def __repr__(self) -> str:
        flat = self.m.ravel()
        m = str(int(flat[0])) if flat.size == 1 else f"[{flat.size} values]"
        return f"ExactScale({m} * 2^{self.e}" + (f" / {self.d})" if self.d != 1 else ")")


def common(a: ExactScale, b: ExactScale) -> tuple[ExactScale, np.ndarray, np.ndarray]:
    """The largest scale ``s`` of which both are integer multiples (elementwise), and those integers:
    :math:`s_a = k_a s`, :math:`s_b = k_b s`."""
    e = min(a.e, b.e)
    lcm = a.d * b.d // gcd(a.d, b.d)
    ka = a.m * (lcm // a.d) * _pow2(a.e - e)
    kb = b.m * (lcm // b.d) * _pow2(b.e - e)
    ka, kb = np.broadcast_arrays(ka, kb)
    g = np.array([gcd(int(x), int(y)) for x, y in zip(ka.ravel(), kb.ravel())], object).reshape(ka.shape)
    return ExactScale(g, e, lcm).reduced(), ka // g, kb // g

"""Damaged ``.onnx`` files (issue 24): every mutant the committed mutator (``tools/fixtures/onnx/mutate.py``) makes of
the fixtures (truncations, bit flips, byte bursts, varint edits) either imports or raises one ``ValueError``
that names the file, never ``TypeError`` / ``IndexError`` / ``KeyError``, each within a time limit; the
coverage table likewise. A mutant that imports must also run."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")

from fxpsim.frontends.onnx.coverage import onnx_coverage  # noqa: E402
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "vectors" / "onnx_models"
_spec = importlib.util.spec_from_file_location("onnx_mutate", ROOT / "tools" / "fixtures" / "onnx" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutate)

#: Seconds one mutant may take to import (or be refused), and to run once when it imports.
LIMIT_S = 5.0


def _feed(g):
    rng = np.random.default_rng(0)
    xs = []
    for name in g.inputs:
        s = g.tensors[name]
        shape = (2,) + tuple(s.shape)
        if s.is_float:
            xs.append(rng.standard_normal(shape).astype(np.float32))
        else:
            lo, hi = s.code_range
            xs.append(rng.integers(lo, hi + 1, shape).astype(s.dtype))
    return xs


@pytest.mark.parametrize("name", ["qs_cnn_qdq_u8_pc", "qs_cnn_qop_s8_pt", "qs_resblock_qdq_s8_pt",
                                  "hb_qlinearconv_u8u8", "hb_qlinear_concat_s8"])
def test_every_mutant_imports_or_raises_one_value_error(tmp_path, name):
    data = (MODELS / f"{name}.onnx").read_bytes()
    counts = {"imported": 0, "refused": 0}
    for label, blob in mutate.mutants(data, count=120, seed=len(name)):
        path = tmp_path / f"{name}.{label}.onnx"
        path.write_bytes(blob)
        t0 = time.perf_counter()
        try:
            g = import_onnx(path)
        except ValueError as exc:
            assert str(path) in str(exc), f"{label}: the error does not name the file: {exc}"
            counts["refused"] += 1
        else:
            counts["imported"] += 1
            try:
                xs = _feed(g)
                g.run(xs if len(xs) > 1 else xs[0])
            except ValueError as exc:   # a graph that loads may still refuse an input shape it cannot take
                assert "node" in str(exc) or "input" in str(exc), f"{label}: {exc}"
        assert time.perf_counter() - t0 < LIMIT_S, f"{label} took over {LIMIT_S} s"
        t0 = time.perf_counter()
        try:
            onnx_coverage(path, try_import=False)
        except ValueError as exc:
            assert str(path) in str(exc)
        assert time.perf_counter() - t0 < LIMIT_S
        path.unlink()
    assert counts["refused"] >= 30          # the mutator really damages: most truncations are refused


def test_mutator_is_deterministic_and_makes_what_it_says():
    data = (MODELS / "hb_qlinear_concat_s8.onnx").read_bytes()
    a = list(mutate.mutants(data, 40, seed=3))
    assert a == list(mutate.mutants(data, 40, seed=3)) and len(a) == 40
    kinds = {label.rstrip("0123456789.x") for label, _ in a}
    assert kinds == {"truncate", "flip", "burst", "varint"}
    for label, blob in a:
        if label.startswith("truncate"):
            assert data.startswith(blob) and len(blob) < len(data)
        elif label.startswith("flip"):
            diff = np.frombuffer(blob, np.uint8) ^ np.frombuffer(data, np.uint8)
            assert np.count_nonzero(diff) == 1 and bin(int(diff.max())).count("1") == 1

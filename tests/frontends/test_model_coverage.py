"""``fxpsim.model_coverage`` picks the format's coverage table as ``import_model`` picks its reader."""
from pathlib import Path

import pytest

import fxpsim

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def test_tflite_and_onnx_files_get_their_own_tables():
    pytest.importorskip("tflite", reason="tflite (test extra) is not installed")
    pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    t = fxpsim.model_coverage(VECTORS / "tflite_models" / "conv_block.tflite")
    o = fxpsim.model_coverage(VECTORS / "onnx_models" / "float_cnn.onnx")
    assert type(t).__module__.endswith("tflite.coverage") and "CONV_2D" in str(t)
    assert type(o).__module__.endswith("onnx.coverage") and "Conv" in str(o)


def test_other_files_are_refused_by_name(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match="model.bin"):
        fxpsim.model_coverage(f)
    with pytest.raises(FileNotFoundError):
        fxpsim.model_coverage(tmp_path / "missing.onnx")

"""One onnxruntime session for the ONNX tests: the CPU execution provider, default optimizations, quiet logs."""
from __future__ import annotations


def ort_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

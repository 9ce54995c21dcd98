"""Readers and writers of other tools' formats (TFLite, ONNX, ``$readmemh`` files, RTL dumps)."""

__all__: list = []

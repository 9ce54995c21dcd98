"""The README's op-coverage table (tools/coverage_table.py) is current and says only what the importers do."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tool():
    spec = importlib.util.spec_from_file_location("coverage_table", os.path.join(ROOT, "tools", "coverage_table.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_block_is_current():
    tool = _tool()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert tool.readme_block() in readme, "README's op-coverage block is stale: run python tools/coverage_table.py --write"


def test_every_listed_tflite_op_has_a_converter():
    """Each op the table lists as imported is one the TFLite builder maps (an op_<NAME> method), and each op the
    builder maps is listed."""
    from fxpsim.frontends.tflite.importer import _Builder
    listed = {op for op, _, _ in _tool().tflite_rows()}
    mapped = {name[3:] for name in dir(_Builder) if name.startswith("op_") and name[3:].isupper()}
    assert listed == mapped


def test_xnnpack_refusal_matches_the_table():
    """An op marked ``no`` for a kernel set is refused under it by the coverage check the importer runs."""
    from fxpsim.frontends.tflite.ops import kernel_support
    for op, marks, _ in _tool().tflite_rows():
        for kernels, mark in marks.items():
            assert (mark == "no") == (kernel_support(op, kernels) is not None), (op, kernels)


def test_doc_lists_the_same_supported_ops():
    pytest.importorskip("tflite", reason="the runtime op set is read from the 'tflite' schema package")
    pytest.importorskip("onnx", reason="the ONNX op set is read from the 'onnx' package")
    tool = _tool()
    with open(tool.DOC, encoding="utf-8") as f:
        doc = f.read()
    for op, _, _ in tool.tflite_rows():
        assert f"| `{op}` |" in doc, f"docs/op_coverage.md lacks {op}: run python tools/coverage_table.py --write"
    assert ", ".join(f"`{op}`" for op in tool.onnx_rows()) in doc

"""A float ONNX model on an FP8 tensor core, from the command line: how narrow may the accumulator be?

1. train fxpsim's digits MLP (64-32-10, ReLU, float, 5 epochs, seed 0) and write it as a float32 ONNX file
   (``Gemm`` + ``Relu``, built with onnx.helper) to ``OUT/digits_mlp.onnx``; onnxruntime's predictions on the 360
   held-out digits are checked against the model's own;
2. run, as a user would type it::

       fxpsim sweep --model OUT/digits_mlp.onnx --config examples/h100-fp8.toml --data digits \\
           --grid accumulator.fraction_bits=1:8,13 promote_every=32,128,inf --out OUT

   (E4M3 weights and activations, H100's FP8 GEMM accumulator: fused dots of 32 products truncated to
   ``fraction_bits`` below the largest exponent, promoted to float32 every ``promote_every`` products);
3. print the Markdown table and the conclusion docs/float_datapaths.md quotes.

Run: ``python examples/float_onnx_sweep.py --out float-onnx-sweep`` from the clone root (about a minute).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os

import numpy as np

from fxpsim import nn
from fxpsim.cli import main as fxpsim_main
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, fit, predict

GRID = ["accumulator.fraction_bits=1:8,13", "promote_every=32,128,inf"]
CONFIG = "examples/h100-fp8.toml"


def write_onnx(model, path: str) -> None:
    """The MLP as float32 ONNX: Gemm(W, b) [+ Relu] per Dense layer."""
    import onnx
    from onnx import TensorProto, helper
    nodes, inits, cur = [], [], "input"
    for i, layer in enumerate(model.layers):
        inits += [helper.make_tensor(f"W{i}", TensorProto.FLOAT, layer.W.shape, layer.W.astype(np.float32).ravel()),
                  helper.make_tensor(f"b{i}", TensorProto.FLOAT, layer.b.shape, layer.b.astype(np.float32))]
        nodes.append(helper.make_node("Gemm", [cur, f"W{i}", f"b{i}"], [f"fc{i}"], name=f"fc{i}"))
        cur = f"fc{i}"
        if layer.activation == "relu":
            nodes.append(helper.make_node("Relu", [cur], [f"relu{i}"], name=f"relu{i}"))
            cur = f"relu{i}"
    graph = helper.make_graph(nodes, "digits_mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 64])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [None, 10])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def markdown(sweep: dict) -> str:
    fbits = sorted({r["fraction_bits"] for r in sweep["records"]})
    lines = ["| promote_every | " + " | ".join(f"F={f}" for f in fbits) + " |", "|---|" + "---|" * len(fbits)]
    for p in (32, 128, 0):
        rows = {r["fraction_bits"]: r for r in sweep["records"] if r["promote_every"] == p}
        lines.append(f"| {p or 'never'} | " + " | ".join(f"{100 * rows[f]['accuracy']:.2f}%" for f in fbits) + " |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="float-onnx-sweep")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    x, y = load_digits("train", seed=0, flatten=True)
    xt, _ = load_digits("test", seed=0, flatten=True)
    model = nn.mlp((64, 32, 10), seed=0)
    fit(model, (x, y), 5, 32, Adam(3e-3), seed=0, progress=False)
    path = os.path.join(args.out, "digits_mlp.onnx")
    write_onnx(model, path)
    import onnxruntime as ort
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": xt})[0]
    assert np.array_equal(ref.argmax(1), predict(model, xt).argmax(1)), "onnxruntime disagrees with the model"
    cmd = ["sweep", "--model", path, "--config", CONFIG, "--data", "digits", "--grid", *GRID, "--no-progress",
           "--out", args.out]
    with contextlib.redirect_stdout(io.StringIO()) as text:
        assert fxpsim_main(cmd) == 0
    with open(os.path.join(args.out, "sweep.json")) as fh:
        sweep = json.load(fh)
    print(f"$ fxpsim {' '.join(cmd)}")
    print(text.getvalue().split("\n\n")[1].split("\nnote:")[0])      # the conclusion
    print()
    print(markdown(sweep))
    print(f"float64 accuracy {sweep['float64_accuracy']:.4f}, exact accumulation {sweep['exact_accuracy']:.4f}")
    return sweep


if __name__ == "__main__":
    main()

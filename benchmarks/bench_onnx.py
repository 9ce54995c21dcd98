"""Speed of imported ONNX models: fxpsim's integer graph beside onnxruntime, one thread, the same inputs.

Models: ``cnn32_qdq_s8_pc`` (built here, seeded: an int8 per-channel QDQ CNN on 3x32x32 inputs, int8
activations: Conv 3->16 3x3, two residual blocks Conv 16->16 3x3 + Add, Conv 16->32 3x3 stride 2, a residual
block Conv 32->32 3x3 + Add, 1x1 Conv 32->64, GlobalAveragePool, Gemm 64->10; onnxruntime's x86 build runs the
convs of the residual blocks, their Adds and the Gemm as dequantized float32 MLAS: an int8 tensor read twice is
not rewritten to uint8) and the quantized fixtures of ``tests/vectors/onnx_models``
(``tools/fixtures/onnx/make_models.py``):
``qs_cnn_*`` (Conv 3->8 3x3 pad 1 / depthwise stride 2 / 1x1 / MaxPool / AveragePool / GlobalAveragePool /
Gemm on 3x6x6 inputs) and ``qs_resblock_*`` (two 3x3 convs, skip Add, GlobalAveragePool, Gemm), in the
variants where onnxruntime runs the convs as dequantized float32 MLAS (``qdq_s8``: int8 activations are not
fused on x86), as QLinearConv (``qdq_u8``) and QOperator (``qop_u8``).

Rows (images/s, best of ``--repeat`` timed runs of at least ``--min-time`` s each): ``graph.run(x)`` with
``FXPSIM_ORT_THREADS=1`` (MLAS's one-thread blocking, the bits of a one-thread session) beside
``InferenceSession.run`` with ``intra_op_num_threads = inter_op_num_threads = 1`` (default optimizations,
CPU provider), batch 1 (one image per call) and the whole batch in one call; the outputs are compared bit
for bit. ``--baseline`` adds fxpsim with the C kernels switched off (MLAS's SGEMM and the AVX2 uint8 x int8 pair
saturation of ``x86_pairs``: the numpy models they replaced, the same bits). ``--profile`` prints where fxpsim's batch-1 run spends its time (cProfile).

Run: ``python benchmarks/bench_onnx.py [--batch 256] [--quick] [--baseline] [--profile] [--models NAME ...]``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["FXPSIM_ORT_THREADS"] = "1"

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from bench_import import _best_rate  # noqa: E402  (the same timing as the TFLite benchmark)

MODELS = Path(__file__).resolve().parents[1] / "tests" / "vectors" / "onnx_models"
DEFAULT = ["cnn32_qdq_s8_pc", "qs_cnn_qdq_s8_pc", "qs_cnn_qdq_u8_pc", "qs_cnn_qop_u8_pc", "qs_resblock_qdq_s8_pc",
           "qs_resblock_qdq_u8_pc"]


def cnn32_qdq_s8_pc(seed: int = 0):
    """The int8 per-channel QDQ CNN of the module docstring (an ``onnx.ModelProto``)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(arr, name):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def qdq(x, scale, tag):
        s, z = const(np.array(scale, np.float32), f"{tag}_s"), const(np.array(0, np.int8), f"{tag}_z")
        return node("DequantizeLinear", [node("QuantizeLinear", [x, s, z], f"{tag}_q"), s, z], f"{tag}_dq")

    def conv(x, cin, cout, k, stride, x_scale, tag):
        w = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
        ws = rng.uniform(0.002, 0.02, cout).astype(np.float32)
        wd = node("DequantizeLinear", [const(w, f"{tag}_wq"), const(ws, f"{tag}_ws"),
                                       const(np.zeros(cout, np.int8), f"{tag}_wz")], f"{tag}_w", axis=0)
        bs = (np.float32(x_scale) * ws).astype(np.float32)
        bd = node("DequantizeLinear", [const(rng.integers(-3000, 3000, cout).astype(np.int32), f"{tag}_bq"),
                                       const(bs, f"{tag}_bs"), const(np.zeros(cout, np.int32), f"{tag}_bz")],
                  f"{tag}_b", axis=0)
        p = k // 2
        return node("Conv", [x, wd, bd], tag, kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p])

    x = qdq("input", 0.03, "in")
    x = qdq(conv(x, 3, 16, 3, 1, 0.03, "conv1"), 0.05, "a1")
    for i, (c, s) in enumerate(((16, 0.05), (16, 0.05), (32, 0.06))):
        if i == 2:
            x = qdq(conv(x, 16, 32, 3, 2, s, "down"), s, "ad")
        r = qdq(conv(x, c, c, 3, 1, s, f"res{i}"), s, f"r{i}")
        x = qdq(node("Add", [r, x], f"add{i}"), s, f"s{i}")       # x read twice: not rewritten to uint8
    x = qdq(conv(x, 32, 64, 1, 1, 0.06, "conv4"), 0.08, "a4")
    x = qdq(node("GlobalAveragePool", [x], "gap"), 0.02, "a5")
    x = node("Flatten", [x], "flat", axis=1)
    w = rng.integers(-127, 128, (10, 64)).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, 10).astype(np.float32)
    wd = node("DequantizeLinear", [const(w, "fc_wq"), const(ws, "fc_ws"), const(np.zeros(10, np.int8), "fc_wz")],
              "fc_w", axis=0)
    y = qdq(node("Gemm", [x, wd], "fc", transB=1), 0.1, "out")
    g = helper.make_graph(nodes, "cnn32_qdq_s8_pc",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per timed run")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per row (best taken)")
    ap.add_argument("--quick", action="store_true", help="--min-time 0.3 --repeat 2")
    ap.add_argument("--profile", action="store_true", help="cProfile of fxpsim's batch-1 run of the first model")
    ap.add_argument("--models", nargs="*", default=DEFAULT)
    ap.add_argument("--baseline", action="store_true",
                    help="also time fxpsim with the C kernels off (the numpy models; same bits)")
    args = ap.parse_args(argv)
    if args.quick:
        args.min_time, args.repeat = 0.3, 2
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import fxpsim
    from fxpsim.report.render import format_table
    rows = []
    for name in args.models:
        path = MODELS / f"{name}.onnx"
        if name == "cnn32_qdq_s8_pc":
            import tempfile
            import onnx
            path = Path(tempfile.mkdtemp()) / f"{name}.onnx"
            onnx.save(cnn32_qdq_s8_pc(), str(path))
        graph = fxpsim.import_onnx(path, cpu="host")      # the arithmetic of this machine's onnxruntime
        sess = _session(path)
        i = sess.get_inputs()[0]
        shape = [d if isinstance(d, int) else args.batch for d in i.shape]
        x = np.random.default_rng(0).normal(0.0, 1.0, shape).astype(np.float32)
        same = bool(np.array_equal(graph.run(x), sess.run(None, {i.name: x})[0]))
        one = x[:1]
        for label, xs in (("batch 1", one), (f"batch {len(x)}", x)):
            ours = _best_rate(lambda: graph.run(xs), len(xs), args.min_time, args.repeat)
            peer = _best_rate(lambda: sess.run(None, {i.name: xs}), len(xs), args.min_time, args.repeat)
            rows.append([name, label, f"{ours:,.0f}", f"{peer:,.0f}", f"{ours / peer:.3f}x",
                         "yes" if same else "NO"])
            if args.baseline:
                from fxpsim.datapath.onnxruntime import mlas_kernel, x86_pairs
                kernels = mlas_kernel._k, x86_pairs._kernel
                mlas_kernel._k = x86_pairs._kernel = None
                try:
                    base = _best_rate(lambda: graph.run(xs), len(xs), args.min_time, args.repeat)
                finally:
                    mlas_kernel._k, x86_pairs._kernel = kernels
                rows.append([f"  {name}, numpy models", label, f"{base:,.0f}", f"{peer:,.0f}",
                             f"{base / peer:.3f}x", f"C kernels {ours / base:.1f}x faster"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"one thread, best of {args.repeat} runs >= {args.min_time} s; load average {load:.1f} "
          f"on {os.cpu_count()} cores")
    print(format_table(rows, ["model", "batch", "fxpsim images/s", "onnxruntime images/s", "ratio",
                              f"bit-exact (batch {args.batch})"]))
    if args.profile:
        import cProfile
        import pstats
        graph = fxpsim.import_onnx(path if len(args.models) == 1 else MODELS / f"{args.models[0]}.onnx", cpu="host")
        x1 = np.random.default_rng(0).normal(0.0, 1.0, [1] + shape[1:]).astype(np.float32)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            graph.run(x1)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()

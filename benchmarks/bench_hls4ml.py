"""The FPGA flow's speed per image, one thread: fxpsim beside qonnx's ``execute_onnx`` and hls4ml's ``predict()``.

Rows (microseconds per image, best of ``--repeat`` timed runs of at least ``--min-time`` s each; the peer
measured in the same run, on the same inputs; ``same`` says whether the outputs agree bit for bit):

* **QONNX** (``tests/vectors/qonnx/brevitas_mlp_w4.onnx``, ``brevitas_cnn_truncavgpool.onnx``: Brevitas
  exports with a fixed batch of 5 and 3): ``fxpsim.import_model(...).run(x)`` (exact integer arithmetic,
  float32 out) beside ``qonnx.core.onnx_exec.execute_onnx`` (float32 numpy per node) on that batch, and
  fxpsim on 256 images at once;
* **hls4ml** (make_vectors.py's Keras MLP 16-32-10 with its ``rnd_sat`` types, compiled by hls4ml 1.3 with
  g++): fxpsim's hls4ml graph (``Hls4mlModel.to_graph``, one ``run`` per batch) beside the compiled C
  simulation's ``predict()`` on the same batch, for batches 1, 64 and 1024 (``--batch``); ``same`` compares the
  largest batch.  hls4ml runs in a child process of an environment that has it (``--hls4ml-python``,
  pinned to the same core); without one the rows say so.

Run: ``python benchmarks/bench_hls4ml.py [--hls4ml-python PATH] [--quick]``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QONNX_MODELS = (("brevitas_mlp_w4", 5), ("brevitas_cnn_truncavgpool", 3))

_HLS4ML_CHILD = r"""
import json, os, sys, time, tempfile
os.environ["OMP_NUM_THREADS"] = "1"
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(sys.argv[3])})
import numpy as np
import hls4ml
sys.path.insert(0, os.path.join(sys.argv[1], "tools", "fixtures", "hls4ml"))
import make_vectors as mv
out_dir, min_time, repeat = sys.argv[2], float(sys.argv[4]), int(sys.argv[5])
batches = [int(b) for b in sys.argv[6].split(",")]
prec = mv.CONFIGS["rnd_sat"]
model = mv.keras_mlp(102)
cfg = hls4ml.utils.config_from_keras_model(model, granularity="name")
cfg["Model"]["Precision"] = {"default": "ap_fixed<16,6>"}
for name, lcfg in cfg["LayerName"].items():
    if name.startswith("fc"):
        lcfg["Precision"] = {k: prec[k] for k in ("weight", "bias", "accum", "result")}
    elif name.startswith("relu"):
        lcfg["Precision"] = {"result": prec["act"]}
    else:
        lcfg["Precision"] = {"result": prec["input"]}
work = tempfile.mkdtemp(prefix="bench_hls4ml_")
hm = hls4ml.converters.convert_from_keras_model(model, hls_config=cfg, output_dir=work, backend="Vitis",
                                                io_type="io_parallel")
hm.compile()
import importlib.util   # fxpsim's reader alone (numpy only: this interpreter need not load fxpsim's extension)
spec = importlib.util.spec_from_file_location("reader", os.path.join(sys.argv[1], "fxpsim", "frontends", "hls4ml",
                                                                      "reader.py"))
reader = importlib.util.module_from_spec(spec); spec.loader.exec_module(reader)
records, weights = reader.records_from_hls_model(hm)
x = mv.grid_inputs(np.random.default_rng(5), 10, 4, (max(batches), 16))
y = np.asarray(hm.predict(x), np.float64)
seconds = {}
for batch in batches:
    xb, best = x[:batch], float("inf")
    for _ in range(repeat):
        t0, n = time.perf_counter(), 0
        while True:
            hm.predict(xb); n += 1
            t = time.perf_counter() - t0
            if t >= min_time:
                break
        best = min(best, t / n / batch)
    seconds[str(batch)] = best
np.savez(os.path.join(out_dir, "hls4ml.npz"), x=x, y=y, records=json.dumps(records),
         **{f"{k}_{n}": v[k] for n, v in weights.items() for k in v})
print(json.dumps({"seconds_per_image": seconds, "version": hls4ml.__version__}))
"""


def best_per_image(fn, n_images: int, min_time: float, repeat: int) -> float:
    """Best seconds per image over ``repeat`` runs of at least ``min_time`` s each."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0, k = time.perf_counter(), 0
        while True:
            fn()
            k += 1
            t = time.perf_counter() - t0
            if t >= min_time:
                break
        best = min(best, t / k / n_images)
    return best


def qonnx_rows(min_time: float, repeat: int) -> list:
    import fxpsim
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    rows = []
    for name, batch in QONNX_MODELS:
        path = ROOT / "tests" / "vectors" / "qonnx" / f"{name}.onnx"
        graph = fxpsim.import_model(str(path))
        model = ModelWrapper(str(path))
        i_name, o_name = model.graph.input[0].name, model.graph.output[0].name
        shape = tuple(graph.tensors[graph.inputs[0]].shape)
        x = np.random.default_rng(0).uniform(-1, 1, (batch,) + shape).astype(np.float32)
        big = np.random.default_rng(1).uniform(-1, 1, (256,) + shape).astype(np.float32)
        same = bool(np.array_equal(graph.run(x), execute_onnx(model, {i_name: x})[o_name]))
        ours = best_per_image(lambda: graph.run(x), batch, min_time, repeat)
        peer = best_per_image(lambda: execute_onnx(model, {i_name: x}), batch, min_time, repeat)
        ours_big = best_per_image(lambda: graph.run(big), len(big), min_time, repeat)
        rows.append((f"QONNX {name} (batch {batch})", ours, "qonnx execute_onnx", peer, same))
        rows.append((f"QONNX {name} (fxpsim batch 256)", ours_big, "qonnx execute_onnx (batch {})".format(batch),
                     peer, same))
    return rows


def hls4ml_rows(python: str | None, min_time: float, repeat: int, batches: list) -> list:
    if not python:
        return [("hls4ml MLP rnd_sat", None, "hls4ml predict(): not measured (no --hls4ml-python)", None, None)]
    from fxpsim.frontends.hls4ml import Hls4mlModel
    with tempfile.TemporaryDirectory() as tmp:
        cpu = sorted(os.sched_getaffinity(0))[0] if hasattr(os, "sched_getaffinity") else 0
        res = subprocess.run([python, "-c", _HLS4ML_CHILD, str(ROOT), tmp, str(cpu), str(min_time), str(repeat),
                              ",".join(map(str, batches))], capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"the hls4ml child failed:\n{res.stderr[-3000:]}")
        info = json.loads(res.stdout.strip().splitlines()[-1])
        d = np.load(os.path.join(tmp, "hls4ml.npz"))
        records = json.loads(str(d["records"]))
        weights = {r["name"]: {"weight": d[f"weight_{r['name']}"], "bias": d[f"bias_{r['name']}"]}
                   for r in records if r["class"] in ("Dense", "Conv2D")}
        graph = Hls4mlModel.from_layers(records, weights).to_graph()
        x = d["x"].astype(np.float32)
        y = graph.tensors[graph.outputs[0]].dequantize(graph.run(x))
        same = bool(np.array_equal(y, d["y"].reshape(y.shape)))
        rows = []
        for b in batches:
            xb = x[:b]
            ours = best_per_image(lambda: graph.run(xb, batch_size=max(b, 256)), b, min_time, repeat)
            rows.append((f"hls4ml MLP 16-32-10 rnd_sat (batch {b})", ours,
                         f"hls4ml {info['version']} predict() (batch {b})", info["seconds_per_image"][str(b)], same))
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hls4ml-python", default=None, help="a Python with hls4ml (and TensorFlow/Keras, g++)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.3)
    p.add_argument("--batch", default="1,64,1024",
                   help="images per hls4ml predict() and per fxpsim run, comma-separated (default 1,64,1024)")
    p.add_argument("--quick", action="store_true", help="--repeat 2 --min-time 0.1")
    a = p.parse_args(argv)
    if a.quick:
        a.repeat, a.min_time = 2, 0.1
    from fxpsim.nn.train import thread_limit
    with thread_limit(1):
        rows = qonnx_rows(a.min_time, a.repeat) + hls4ml_rows(a.hls4ml_python, a.min_time, a.repeat,
                                                                [int(b) for b in str(a.batch).split(",")])
    from fxpsim._text import format_table
    us = lambda v: "-" if v is None else f"{v * 1e6:.1f}"    # noqa: E731
    table = [(name, us(ours), peer_name, us(peer), "-" if ours is None or peer is None else f"{peer / ours:.2f}x",
              "-" if same is None else str(same)) for name, ours, peer_name, peer, same in rows]
    print(format_table(table, ["model", "fxpsim us/image", "peer", "peer us/image", "fxpsim speed / peer",
                               "same bits"]))
    print(f"\none thread, best of {a.repeat} runs of >= {a.min_time} s; numpy {np.__version__}, Python "
          f"{sys.version.split()[0]}")


if __name__ == "__main__":
    main()

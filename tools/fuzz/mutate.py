"""A mutator of fxpsim graph files: a malformed-file corpus made from one good ``.npz``.

``python -m tools.fuzz.mutate OUT_DIR [--count N] [--seed S]`` writes ``seed.npz`` (a small residual network
built here: quantize, two 3x3 convolutions, a skip add, an average pool, a reshape, a fully connected layer)
and ``N`` mutants of it, each named by its kind:

``truncate``   the file cut at a random offset;
``bitflip``    1..8 random bits flipped anywhere in the file;
``json``       ``graph.json`` edited: an attribute, shape, bit width, scale, zero point, op, axis, tensor name
               or list replaced by an out-of-range or ill-typed value (0, -1, 2^31, 1.5, "x", None, [], {});
               the archive otherwise intact, so only the loader's validation stands between it and ``run``;
``bomb``       an unused entry of ``--bomb-mib`` MiB of zeros deflated (the loader must never inflate it),
               or a constant whose entry header declares a huge size;
``shape``      a constant's or activation's declared shape made huge (2^31 x 2^31, 10^12).

The test ``tests/test_bad_input_files.py`` loads every mutant under time and memory limits and requires each
to load and run, or raise one ``ValueError`` naming the file. :func:`unused_bomb` makes the issue's case
(a 3 MiB file with an unused 3 GiB deflated entry) in seconds, by repeating one fully-flushed deflate block.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import zipfile
import zlib

import numpy as np

__all__ = ["seed_graph", "sample_input", "mutants", "write_corpus", "unused_bomb"]

_BAD_VALUES = (0, -1, 2 ** 31, 2 ** 63, 1.5, -0.5, float("nan"), "x", "SAME", None, [], [0, 0], [[1]], {}, True)


def seed_graph():
    """The good graph every mutant starts from (float input ``x`` [6, 6, 2], int8 logits [4])."""
    from fxpsim.graph import IntegerGraph, Node, TensorSpec
    rng = np.random.default_rng(0)
    t = [TensorSpec("x", 0, True, (6, 6, 2)),
         TensorSpec("xq", 8, True, (6, 6, 2), 0.02, -3),
         TensorSpec("c1/w", 8, True, scale=rng.uniform(0.004, 0.01, 4), zero_point=np.zeros(4, np.int64),
                    axis=0, data=rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8)),
         TensorSpec("c1/b", 32, True, data=rng.integers(-3000, 3000, 4).astype(np.int32)),
         TensorSpec("c1", 8, True, (6, 6, 4), 0.03, -128),
         TensorSpec("c2/w", 8, True, scale=rng.uniform(0.004, 0.01, 4), zero_point=np.zeros(4, np.int64),
                    axis=0, data=rng.integers(-127, 128, (4, 3, 3, 4)).astype(np.int8)),
         TensorSpec("c2/b", 32, True, data=rng.integers(-3000, 3000, 4).astype(np.int32)),
         TensorSpec("c2", 8, True, (6, 6, 4), 0.05, 5),
         TensorSpec("sum", 8, True, (6, 6, 4), 0.06, -10),
         TensorSpec("pool", 8, True, (3, 3, 4), 0.06, -10),
         TensorSpec("flat", 8, True, (36,), 0.06, -10),
         TensorSpec("fc/w", 8, True, scale=0.01, zero_point=0,
                    data=rng.integers(-127, 128, (4, 36)).astype(np.int8)),
         TensorSpec("fc/b", 32, True, data=rng.integers(-500, 500, 4).astype(np.int32)),
         TensorSpec("logits", 8, True, (4,), 0.1, 0)]
    n = [Node("quantize", "quantize", ["x"], ["xq"]),
         Node("conv1", "conv2d", ["xq", "c1/w", "c1/b"], ["c1"], {"padding": "SAME", "activation": "relu",
                                                                   "stride": [1, 1], "dilation": [1, 1]}),
         Node("conv2", "conv2d", ["c1", "c2/w", "c2/b"], ["c2"], {"padding": [[1, 1], [1, 1]]}),
         Node("skip_add", "add", ["c2", "c1"], ["sum"]),
         Node("pool", "avg_pool2d", ["sum"], ["pool"], {"pool_size": [2, 2], "stride": [2, 2]}),
         Node("flatten", "reshape", ["pool"], ["flat"], {"shape": [36]}),
         Node("fc", "fully_connected", ["flat", "fc/w", "fc/b"], ["logits"], {"clip": [-100, 100]})]
    return IntegerGraph(t, n, ["x"], ["logits"], name="fuzz-seed", meta={"datapath": {"accumulator_bits": 32}})


def sample_input(graph, n: int = 2):
    """A small batch for each input of ``graph`` (float in [-2, 2], or codes in the type's range)."""
    rng = np.random.default_rng(1)
    xs = []
    for name in graph.inputs:
        spec = graph.tensors[name]
        shape = (n,) + spec.shape
        if spec.is_float:
            xs.append(rng.uniform(-2, 2, shape).astype(np.float32))
        else:
            lo, hi = spec.code_range
            xs.append(rng.integers(lo, hi, shape, endpoint=True).astype(spec.dtype))
    return xs


def _entries(data: bytes) -> dict:
    import io
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _zip(entries: dict) -> bytes:
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for k, v in entries.items():
            zf.writestr(k, v)
    return buf.getvalue()


def _json_entry(desc: dict) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(json.dumps(desc).encode(), dtype=np.uint8))
    return buf.getvalue()


def _paths(obj, prefix=()):
    """Every (path, value) in a JSON tree."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


_DELETE = object()


def _edit_json(entries: dict, rng: random.Random) -> dict:
    desc = json.loads(np.lib.format.read_array(__import__("io").BytesIO(entries["graph.json.npy"])).tobytes())
    desc = copy.deepcopy(desc)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        paths = [p for p, _ in _paths(desc) if p]
        path = rng.choice(paths)
        value = rng.choice(_BAD_VALUES + (_DELETE,)) if rng.random() < 0.8 else _near(rng, desc, path)
        if value is _DELETE and isinstance(path[-1], int):
            value = None
        _set(desc, path, value)
    out = dict(entries)
    out["graph.json.npy"] = _json_entry(desc)
    return out


def _near(rng, desc, path):
    """A plausible-looking edit: a number nudged, a name swapped for another name."""
    obj = desc
    for k in path:
        obj = obj[k]
    if isinstance(obj, bool):
        return not obj
    if isinstance(obj, int):
        return obj + rng.choice((-2, -1, 1, 2, 7))
    if isinstance(obj, float):
        return obj * rng.choice((-1.0, 0.0, 1e30, 1e-30))
    if isinstance(obj, str):
        names = [t["name"] for t in desc.get("tensors", []) if isinstance(t, dict) and "name" in t]
        return rng.choice(names + ["conv2d", "depthwise_conv2d", "max_pool2d", "tflite_add", ""])
    return rng.choice(_BAD_VALUES)


def _huge_shape(entries: dict, rng: random.Random) -> dict:
    import io
    desc = json.loads(np.lib.format.read_array(io.BytesIO(entries["graph.json.npy"])).tobytes())
    t = rng.choice(desc["tensors"])
    t["shape"] = rng.choice(([2 ** 31, 2 ** 31], [10 ** 12], [2 ** 20, 2 ** 20, 4], [1, 2 ** 62]))
    out = dict(entries, **{"graph.json.npy": _json_entry(desc)})
    if t.get("constant") and rng.random() < 0.5:   # the .npy header agrees with the lie
        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {"descr": "|i1", "fortran_order": False,
                                                   "shape": tuple(t["shape"])})
        out[f"const/{t['name']}.npy"] = hdr.getvalue() + b"\0" * 64
    return out


def _declared_size_bomb(data: bytes, rng: random.Random) -> bytes:
    """A constant entry whose local and central headers declare a huge uncompressed size."""
    import io
    import struct
    buf = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = [i for i in zf.infolist() if i.filename.startswith("const/")]
    info = rng.choice(infos)
    huge = rng.choice((0xFFFFFFF0, 3 << 30, 1 << 31))
    struct.pack_into("<I", buf, info.header_offset + 22, huge)          # local header: uncompressed size
    # the central directory (after every local entry) holds the name last: its record starts 46 bytes before
    pos = bytes(buf).rfind(info.filename.encode())
    if pos >= 46 and bytes(buf[pos - 46:pos - 42]) == b"PK\x01\x02":
        struct.pack_into("<I", buf, pos - 46 + 24, huge)
    return bytes(buf)


def unused_bomb(path, mib: int, base: bytes | None = None) -> int:
    """Append an unused entry ``junk.npy`` of ``mib`` MiB of zeros, deflated, to the graph file ``base``
    (default: the seed graph's), written to ``path``; returns the file's size. The deflate stream is one
    fully-flushed 1 MiB block repeated (the compressor's state is reset at each full flush, so every block
    after the first compresses identically), so a 3 GiB entry takes seconds to write."""
    import io
    if base is None:
        buf = io.BytesIO()
        g = seed_graph()
        from fxpsim.graph.serialize import save_graph
        tmp = os.fspath(path) + ".tmp.npz"
        save_graph(g, tmp)
        with open(tmp, "rb") as fh:
            base = fh.read()
        os.remove(tmp)
    with open(path, "wb") as fh:
        fh.write(base)
    block = bytes(1 << 20)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("junk.npy", "w", force_zip64=True) as fp:
            fp._compressor = _RepeatedBlocks(fp._compressor)
            for _ in range(mib):
                fp.write(block)
    return os.path.getsize(path)


class _RepeatedBlocks:
    """A deflate compressor for a stream of identical blocks: compress two with full flushes, then repeat
    the second block's output (the zipfile writer still computes the CRC over the real bytes)."""

    def __init__(self, inner):
        self.inner, self.out, self.n = inner, None, 0

    def compress(self, data):
        self.n += 1
        if self.out is not None:
            return self.out
        got = self.inner.compress(data) + self.inner.flush(zlib.Z_FULL_FLUSH)
        if self.n == 2:
            self.out = got
        return got

    def flush(self, *args):
        return self.inner.flush(*args)


def mutants(base: bytes, count: int, seed: int = 0):
    """``count`` ``(kind, bytes)`` mutants of the graph file ``base``, reproducible from ``seed``."""
    rng = random.Random(seed)
    entries = _entries(base)
    kinds = ("truncate", "bitflip", "json", "json", "json", "bomb", "shape")
    for i in range(count):
        kind = kinds[i % len(kinds)]
        if kind == "truncate":
            yield kind, base[:rng.randrange(0, len(base))]
        elif kind == "bitflip":
            buf = bytearray(base)
            for _ in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            yield kind, bytes(buf)
        elif kind == "json":
            yield kind, _zip(_edit_json(entries, rng))
        elif kind == "shape":
            yield kind, _zip(_huge_shape(entries, rng))
        else:
            yield kind, _declared_size_bomb(base, rng)


def write_corpus(out_dir, count: int = 300, seed: int = 0) -> list:
    """Write ``seed.npz`` and ``count`` mutants to ``out_dir``; returns the mutants' paths."""
    from fxpsim.graph.serialize import save_graph
    os.makedirs(out_dir, exist_ok=True)
    base_path = save_graph(seed_graph(), os.path.join(out_dir, "seed.npz"))
    with open(base_path, "rb") as fh:
        base = fh.read()
    paths = []
    for i, (kind, data) in enumerate(mutants(base, count, seed)):
        p = os.path.join(out_dir, f"{i:05d}-{kind}.npz")
        with open(p, "wb") as fh:
            fh.write(data)
        paths.append(p)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bomb-mib", type=int, default=0, help="also write bomb.npz with an unused entry this big")
    a = ap.parse_args(argv)
    paths = write_corpus(a.out_dir, a.count, a.seed)
    if a.bomb_mib:
        unused_bomb(os.path.join(a.out_dir, "bomb.npz"), a.bomb_mib)
    print(f"{len(paths)} mutants in {a.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

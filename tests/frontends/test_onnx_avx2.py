"""onnxruntime's uint8 x int8 kernels on x86-64 with AVX2 and no VNNI: ``import_onnx(path, cpu="avx2")``.

Such CPUs sum the raw products of adjacent reduction elements in int16 with saturation
(``tools/fixtures/onnx/ORT_SEMANTICS.md`` section 10). Tested here:

* the pair model (``u8s8_pairs="saturate16"`` on ``matmul_integer`` / ``conv_integer`` nodes) against an
  independent pure-Python big-integer model: odd K, K = 1, the extreme codes 0 / 255 x -128 / 127, per-channel
  weight zero points, padding, groups, the int8 -> uint8 shift;
* stored onnxruntime outputs (``tests/vectors/onnx_models/avx2_u8s8.npz``, from
  ``tools/fixtures/onnx/make_avx2_vectors.py`` on an AVX2 CPU) replayed on any host: the ``avx2`` flavour
  matches every case, the exact flavour misses every case that saturates;
* live, on fresh inputs: onnxruntime on this host against the flavour :func:`onnxruntime_cpu` detects, and
  the other flavour must differ where the cases saturate (so the test proves something on AVX2 and on VNNI
  hosts alike);
* the knob's errors: an unknown ``cpu``, ``saturate16`` on a node it cannot apply to or off onnxruntime's
  datapath.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fxpsim
from fxpsim.frontends.onnx import ops as onnx_ops  # noqa: F401  (registers the ONNX graph ops)
from fxpsim.graph.ir import Datapath, IntegerGraph, Node, TensorSpec
from fxpsim.frontends.onnx.importer import ONNXRUNTIME_DATAPATH, onnxruntime_cpu
from fxpsim.datapath.onnxruntime import x86_pairs

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "onnx_models" / "avx2_u8s8.npz"
TOOLS = Path(__file__).resolve().parents[2] / "tools" / "fixtures" / "onnx"
ORT_DP = Datapath(**ONNXRUNTIME_DATAPATH)


# ------------------------------------------------------------------------------------------ reference model
def _wrap32(v: int) -> int:
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _sat16(v: int) -> int:
    return max(-32768, min(32767, v))


def ref_u8s8_dot(a, w, az, wz) -> int:
    """One accumulator of MLAS's AVX2 uint8 x int8 kernel, in Python ints: raw codes ``a`` (0..255) and ``w``
    (-128..127), products of adjacent k summed and saturated to int16, then the zero-point terms."""
    k = len(a)
    total = 0
    for j in range(0, k, 2):
        p = a[j] * w[j] + (a[j + 1] * w[j + 1] if j + 1 < k else 0)
        total += _sat16(p)
    return _wrap32(total - az * sum(w) - wz * sum(a) + k * az * wz)


def ref_exact_dot(a, w, az, wz) -> int:
    return _wrap32(sum((ai - az) * (wi - wz) for ai, wi in zip(a, w)))


def ref_matmul(x, w, az, wz):
    """x [N, K] raw, w [O, K] raw, wz per output channel -> [N, O] Python ints."""
    return [[ref_u8s8_dot(list(row), list(w[o]), az, wz[o]) for o in range(len(w))] for row in x]


def ref_conv(x, w, az, wz, stride, pads, dilation, groups):
    """x [N, H, W, C] raw, w [O, KH, KW, C/g] raw; k in (kh, kw, c) order per group, padding = az; a depthwise
    convolution (one input and one output channel per group) exact, as onnxruntime's depthwise kernel."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    dot = ref_exact_dot if (groups > 1 and cg == 1 and o == groups) else ref_u8s8_dot
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, oh, ow, o), np.int64)
    for b in range(n):
        for y in range(oh):
            for xx in range(ow):
                for oc in range(o):
                    gi = oc // og
                    a, ws = [], []
                    for i in range(kh):
                        for j in range(kw):
                            r = y * stride[0] + i * dilation[0] - pt
                            s = xx * stride[1] + j * dilation[1] - pl
                            for ci in range(cg):
                                inside = 0 <= r < h and 0 <= s < wd
                                a.append(int(x[b, r, s, gi * cg + ci]) if inside else az)
                                ws.append(int(w[oc, i, j, ci]))
                    out[b, y, xx, oc] = dot(a, ws, az, int(wz[oc]))
    return out


# ------------------------------------------------------------------------------------------ graphs by hand
def _integer_graph(op, x_shape, w, x_signed, attrs):
    x = TensorSpec("x", 8, x_signed, x_shape)
    wt = TensorSpec("w", 8, True, w.shape, data=w)
    out_shape = attrs.pop("_out")
    y = TensorSpec("y", 32, True, out_shape)
    node = Node("mac", op, ["x", "w"], ["y"], attrs)
    return IntegerGraph([x, wt, y], [node], ["x"], ["y"], "g", {"datapath": dict(ONNXRUNTIME_DATAPATH)})


_A = st.one_of(st.sampled_from([0, 1, 127, 128, 254, 255]), st.integers(0, 255))
_W = st.one_of(st.sampled_from([-128, -127, -1, 0, 1, 126, 127]), st.integers(-128, 127))


@st.composite
def _matmul_case(draw):
    k = draw(st.integers(1, 9))
    n, o = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    x = np.array(draw(st.lists(st.lists(_A, min_size=k, max_size=k), min_size=n, max_size=n)), np.int64)
    w = np.array(draw(st.lists(st.lists(_W, min_size=k, max_size=k), min_size=o, max_size=o)), np.int64)
    wz = draw(st.lists(st.integers(-128, 127), min_size=o, max_size=o))
    return x, w, draw(st.integers(0, 255)), wz, draw(st.booleans())


@pytest.mark.parametrize("path", ["numpy", "C"])
@given(case=_matmul_case())
def test_matmul_pair_saturation_matches_a_python_integer_model(path, case):
    """Both the C kernel (``_pairs``, skipped where the extension is not built) and the numpy path."""
    if path == "C" and x86_pairs._kernel is None:
        pytest.skip("the _pairs extension is not built (pip install -e .)")
    x, w, az, wz, shift = case
    codes = (x - 128 if shift else x).astype(np.int8 if shift else np.uint8)
    g = _integer_graph("matmul_integer", (x.shape[1],), w.astype(np.int8), shift,
                       {"x_zero_point": az - 128 if shift else az, "w_zero_point": list(wz),
                        "u8s8_pairs": "saturate16", "u8_shift": shift, "_out": (w.shape[0],)})
    kernel = x86_pairs._kernel
    x86_pairs._kernel = None if path == "numpy" else kernel
    try:
        got = g.run(codes)
    finally:
        x86_pairs._kernel = kernel
    assert got.tolist() == ref_matmul(x, w, az, wz)


@st.composite
def _conv_case(draw):
    groups = draw(st.integers(1, 2))
    cg = draw(st.integers(1, 3))
    og = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h, wd = draw(st.integers(dilation[0] * (kh - 1) + 1, 5)), draw(st.integers(dilation[1] * (kw - 1) + 1, 5))
    pads = ((draw(st.integers(0, 1)), draw(st.integers(0, 1))), (draw(st.integers(0, 1)), draw(st.integers(0, 1))))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    c, o, n = groups * cg, groups * og, draw(st.integers(1, 2))
    x = np.array(draw(st.lists(_A, min_size=n * h * wd * c, max_size=n * h * wd * c)),
                 np.int64).reshape(n, h, wd, c)
    w = np.array(draw(st.lists(_W, min_size=o * kh * kw * cg, max_size=o * kh * kw * cg)),
                 np.int64).reshape(o, kh, kw, cg)
    wz = draw(st.lists(st.integers(-128, 127), min_size=o, max_size=o))
    return x, w, draw(st.integers(0, 255)), wz, pads, stride, dilation, groups


@pytest.mark.parametrize("path", ["numpy", "C"])
@given(case=_conv_case())
def test_conv_pair_saturation_matches_a_python_integer_model(path, case):
    """Pairs along (kh, kw, c) of each group, crossing kernel positions for odd C / group, with strides,
    dilations and batches; padding holds the raw zero point (conv_integer carries the knob here only to reach
    the kernel: onnxruntime's ConvInteger itself is exact). Both the C kernel (``_pairs``) and the numpy path."""
    if path == "C" and x86_pairs._kernel is None:
        pytest.skip("the _pairs extension is not built (pip install -e .)")
    x, w, az, wz, pads, stride, dilation, groups = case
    want = ref_conv(x, w, az, wz, stride, pads, dilation, groups)
    g = _integer_graph("conv_integer", x.shape[1:], w.astype(np.int8), False,
                       {"x_zero_point": az, "w_zero_point": list(wz), "stride": list(stride),
                        "padding": [list(p) for p in pads], "dilation": list(dilation), "group": groups,
                        "u8s8_pairs": "saturate16", "_out": want.shape[1:]})
    kernel = x86_pairs._kernel
    x86_pairs._kernel = None if path == "numpy" else kernel
    try:
        got = g.run(x.astype(np.uint8))
    finally:
        x86_pairs._kernel = kernel
    assert got.tolist() == want.tolist()


def test_pair_saturation_hand_table():
    """255 * 127 * 2 = 64770 saturates to 32767; 255 * -128 * 2 to -32768; a lone (odd) product never does."""
    cases = [([255, 255], [127, 127], 32767), ([255, 255], [-128, -128], -32768),
             ([255, 255, 255], [127, 127, 127], 32767 + 255 * 127), ([255], [-128], -32640),
             ([255, 0, 255, 255], [127, 127, 127, 127], 255 * 127 + 32767), ([128, 128], [127, 127], 32512)]
    for a, w, want in cases:
        assert ref_u8s8_dot(a, w, 0, 0) == want
        g = _integer_graph("matmul_integer", (len(a),), np.array([w], np.int8), False,
                           {"x_zero_point": 0, "w_zero_point": [0], "u8s8_pairs": "saturate16", "_out": (1,)})
        assert int(g.run(np.array([a], np.uint8))[0, 0]) == want


def test_host_detection_from_cpu_flags():
    from fxpsim.datapath.onnxruntime.x86_pairs import host_u8s8_pairs
    avx2 = {"sse4_1", "avx", "avx2", "fma"}
    assert onnxruntime_cpu(avx2, "x86_64") == "avx2"
    assert onnxruntime_cpu(avx2 | {"avx512f", "avx512bw"}, "x86_64") == "avx2"          # Skylake-SP
    assert onnxruntime_cpu(avx2 | {"avx512f", "avx512bw", "avx512_vnni"}, "x86_64") == "vnni"
    assert onnxruntime_cpu(avx2 | {"avx_vnni"}, "AMD64") == "vnni"
    assert onnxruntime_cpu({"sse4_1", "avx"}, "x86_64") == "exact"
    assert onnxruntime_cpu({"asimd", "asimddp"}, "aarch64") == "exact"
    assert host_u8s8_pairs(avx2, "x86_64") == "saturate16"
    assert host_u8s8_pairs(avx2 | {"avx512_vnni"}, "x86_64") == "exact"
    assert host_u8s8_pairs(avx2 | {"avx512_vnni"}, "x86_64", assume_vnni=False) == "saturate16"
    assert host_u8s8_pairs({"asimd"}, "aarch64", assume_vnni=False) == "exact"
    assert onnxruntime_cpu() in ("exact", "avx2", "vnni")


# ------------------------------------------------------------------------------------------ ONNX models
onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402

STORED = np.load(VECTORS)
CASES = sorted(k[len("model:"):] for k in STORED.files if k.startswith("model:"))


def _import(tmp_path, case, cpu, model_bytes=None):
    path = tmp_path / f"{case}.{cpu}.onnx"
    path.write_bytes(STORED[f"model:{case}"].tobytes() if model_bytes is None else model_bytes)
    return import_onnx(path, cpu=cpu)


def _differ(got, want) -> int:
    return int(np.count_nonzero(np.asarray(got) != np.asarray(want)))


def test_stored_vectors_record_where_they_came_from():
    meta = json.loads(str(STORED["meta"]))
    assert meta["onnxruntime"].startswith("1.") and "avx2" in meta["cpu_flags"].split()
    assert not {"avx512_vnni", "avx_vnni"} & set(meta["cpu_flags"].split())
    assert len(CASES) >= 15 and VECTORS.stat().st_size < 200_000
    assert sum(bool(STORED[f"saturates:{c}"]) for c in CASES) >= 12


@pytest.mark.parametrize("case", CASES)
def test_stored_avx2_outputs_replay_on_any_host(tmp_path, case):
    """onnxruntime's outputs on an AVX2 CPU without VNNI: ``cpu="avx2"`` reproduces them; where the case
    saturates, the exact flavour does not (so the stored case really exercises the saturation)."""
    x, want = STORED[f"input:{case}"], STORED[f"output:{case}"]
    assert _differ(_import(tmp_path, case, "avx2").run(x), want) == 0
    exact_bad = _differ(_import(tmp_path, case, "exact").run(x), want)
    assert (exact_bad > 0) == bool(STORED[f"saturates:{case}"])


def _builders():
    sys.path.insert(0, str(TOOLS))
    import make_avx2_vectors
    return make_avx2_vectors


@pytest.mark.parametrize("case", CASES)
def test_live_host_flavour_matches_onnxruntime_and_the_other_does_not(tmp_path, case):
    """onnxruntime on this host, fresh extreme inputs: the detected flavour matches; the other flavour
    differs wherever the case saturates (on an AVX2 host: exact is wrong; on a VNNI / ARM host: avx2 is)."""
    pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
    mk = _builders()
    model, saturates = mk.build(case)
    assert model.SerializeToString() == STORED[f"model:{case}"].tobytes()     # the generator is stable
    host = onnxruntime_cpu()
    other = "exact" if host == "avx2" else "avx2"
    mine, theirs = _import(tmp_path, case, host), _import(tmp_path, case, other)
    rng = np.random.default_rng([sum(map(ord, case)), 7])
    other_bad = 0
    for batch in (1, 4):
        x = mk.extreme_inputs(model, rng, batch)
        want = mk.run_ort(model, x)
        assert _differ(mine.run(x), want) == 0, f"{case}: cpu={host!r} differs from onnxruntime"
        other_bad += _differ(theirs.run(x), want)
    assert (other_bad > 0) == saturates, f"{case}: cpu={other!r} differs in {other_bad} values"


# ------------------------------------------------------------------------------------------ errors
def test_unknown_cpu_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cpu must be"):
        _import(tmp_path, CASES[0], "avx512")


def test_import_records_the_flavour_on_the_nodes_it_affects(tmp_path):
    g = _import(tmp_path, "qdq_conv_s8", "avx2")
    conv = next(n for n in g.nodes if n.op == "qlinear_conv")
    assert conv.attrs["u8s8_pairs"] == "saturate16" and conv.attrs["u8_shift"] is True
    assert g.meta["onnxruntime"]["cpu"] == "avx2"
    for case in ("qlinearconv_u8s8_depthwise", "qlinearconv_u8u8", "qlinearconv_s8s8", "convinteger_u8s8"):
        g = _import(tmp_path, case, "avx2")
        assert all("u8s8_pairs" not in n.attrs for n in g.nodes), case
    assert _import(tmp_path, "qgemm_u8s8_pt", "exact").meta["onnxruntime"]["cpu"] == "exact"


def test_saved_avx2_graph_reads_back(tmp_path):
    from fxpsim.graph import load_graph
    case = "qdq_conv_s8"
    g = _import(tmp_path, case, "avx2")
    back = load_graph(g.save(tmp_path / "g"))
    assert [n.attrs.get("u8s8_pairs") for n in back.nodes] == [n.attrs.get("u8s8_pairs") for n in g.nodes]
    assert _differ(back.run(STORED[f"input:{case}"]), STORED[f"output:{case}"]) == 0


def test_saturate16_off_onnxruntimes_datapath_is_refused_not_ignored(tmp_path):
    g = _import(tmp_path, "qlinearconv_u8s8_pt", "avx2")
    x = STORED["input:qlinearconv_u8s8_pt"]
    with pytest.raises(ValueError, match="exists only on onnxruntime's datapath"):
        g.run(x, fxpsim.preset("int8-acc16-sat"))
    _import(tmp_path, "qlinearconv_u8s8_pt", "exact").run(x, fxpsim.preset("int8-acc16-sat"))   # runs anywhere


def test_saturate16_on_a_node_it_cannot_apply_to_is_refused():
    w = np.ones((2, 3), np.int8)
    for x_signed, wdata, shift, why in ((True, w, False, "int8 activations without u8_shift"),
                                        (False, w.astype(np.uint8), False, "uint8 weights")):
        wt = TensorSpec("w", 8, wdata.dtype.kind == "i", wdata.shape, data=wdata)
        with pytest.raises(ValueError, match="applies to onnxruntime's integer kernel"):
            g = IntegerGraph([TensorSpec("x", 8, x_signed, (3,)), wt, TensorSpec("y", 32, True, (2,))],
                             [Node("mac", "matmul_integer", ["x", "w"], ["y"], {"u8s8_pairs": "saturate16",
                                                                                "u8_shift": shift})],
                             ["x"], ["y"], "g", {"datapath": dict(ONNXRUNTIME_DATAPATH)})
            g.run(np.zeros((1, 3), np.int8 if x_signed else np.uint8))
    with pytest.raises(ValueError, match="u8s8_pairs must be one of"):
        g = _integer_graph("matmul_integer", (3,), w, False, {"u8s8_pairs": "sat", "_out": (2,)})
        g.run(np.zeros((1, 3), np.uint8))


def test_host_detection_is_public_in_fxpsim_frontends():
    """``fxpsim.frontends.onnxruntime_cpu`` is the importer's detector, reachable without importing onnx first."""
    import fxpsim.frontends
    assert fxpsim.frontends.onnxruntime_cpu is onnxruntime_cpu
    assert "onnxruntime_cpu" in fxpsim.frontends.__all__

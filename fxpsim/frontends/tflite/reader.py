"""Reading a ``.tflite`` flatbuffer (the ``tflite`` package's generated schema) into plain dicts and arrays
for :mod:`fxpsim.frontends.tflite.importer`, with a clear error for every damaged or truncated field."""
from __future__ import annotations

import numpy as np

_INSTALL_HINT = "pip install -e '.[tflite]' from the clone"

# TensorType enum of the schema
_FLOAT32, _FLOAT16, _INT32, _UINT8, _INT64, _STRING, _BOOL, _INT16 = 0, 1, 2, 3, 4, 5, 6, 7
_INT8, _FLOAT64, _UINT32, _UINT16, _INT4 = 9, 10, 15, 16, 17
_TYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool",
               7: "int16", 8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64",
               13: "resource", 14: "variant", 15: "uint32", 16: "uint16", 17: "int4", 18: "bfloat16"}
_NUMPY_TYPES = {_FLOAT32: np.float32, _INT32: np.int32, _UINT8: np.uint8, _INT64: np.int64, _INT16: np.int16,
                _INT8: np.int8, _FLOAT64: np.float64, _BOOL: np.bool_, _FLOAT16: np.float16,
                _UINT32: np.uint32, _UINT16: np.uint16}
_ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6", 4: "tanh", 5: "sign_bit"}
# ops whose int32/int64 results are shape arithmetic, evaluated at import when their inputs are static
_SHAPE_OPS = ("SHAPE", "STRIDED_SLICE", "PACK")


# ============================================================================ flatbuffer reading
def _schema():
    try:
        import tflite  # noqa: F401
        import flatbuffers  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"reading .tflite files needs the 'tflite' and 'flatbuffers' packages "
                          f"({_INSTALL_HINT}): {exc}") from None
    return tflite


class _Malformed(Exception):
    pass


def _vec(obj, name) -> np.ndarray:
    """A flatbuffer vector field as a numpy array (empty when absent)."""
    if getattr(obj, f"{name}IsNone")():
        return np.zeros(0, np.int64)
    arr = getattr(obj, f"{name}AsNumpy")()
    if isinstance(arr, int):   # the generated code returns 0 for an absent vector
        return np.zeros(0, np.int64)
    return np.array(arr)


_OPTIONS = {
    # op name: (options class, {key: accessor})
    "CONV_2D": ("Conv2DOptions", {"padding": "Padding", "stride_w": "StrideW", "stride_h": "StrideH",
                                  "activation": "FusedActivationFunction", "dilation_w": "DilationWFactor",
                                  "dilation_h": "DilationHFactor"}),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions", {
        "padding": "Padding", "stride_w": "StrideW", "stride_h": "StrideH", "depth_multiplier": "DepthMultiplier",
        "activation": "FusedActivationFunction", "dilation_w": "DilationWFactor", "dilation_h": "DilationHFactor"}),
    "FULLY_CONNECTED": ("FullyConnectedOptions", {"activation": "FusedActivationFunction",
                                                  "weights_format": "WeightsFormat", "keep_num_dims": "KeepNumDims"}),
    "AVERAGE_POOL_2D": ("Pool2DOptions", {"padding": "Padding", "stride_w": "StrideW", "stride_h": "StrideH",
                                          "filter_w": "FilterWidth", "filter_h": "FilterHeight",
                                          "activation": "FusedActivationFunction"}),
    "MAX_POOL_2D": ("Pool2DOptions", {"padding": "Padding", "stride_w": "StrideW", "stride_h": "StrideH",
                                      "filter_w": "FilterWidth", "filter_h": "FilterHeight",
                                      "activation": "FusedActivationFunction"}),
    "ADD": ("AddOptions", {"activation": "FusedActivationFunction", "pot_scale_int16": "PotScaleInt16"}),
    "SUB": ("SubOptions", {"activation": "FusedActivationFunction", "pot_scale_int16": "PotScaleInt16"}),
    "MUL": ("MulOptions", {"activation": "FusedActivationFunction"}),
    "CONCATENATION": ("ConcatenationOptions", {"axis": "Axis", "activation": "FusedActivationFunction"}),
    "SOFTMAX": ("SoftmaxOptions", {"beta": "Beta"}),
    "LEAKY_RELU": ("LeakyReluOptions", {"alpha": "Alpha"}),
    "MEAN": ("ReducerOptions", {"keep_dims": "KeepDims"}),
    "SUM": ("ReducerOptions", {"keep_dims": "KeepDims"}),
    "REDUCE_MAX": ("ReducerOptions", {"keep_dims": "KeepDims"}),
    "RESHAPE": ("ReshapeOptions", {"new_shape": "NewShape[]"}),
    "SQUEEZE": ("SqueezeOptions", {"squeeze_dims": "SqueezeDims[]"}),
    "PACK": ("PackOptions", {"values_count": "ValuesCount", "axis": "Axis"}),
    "VAR_HANDLE": ("VarHandleOptions", {"container": "Container", "shared_name": "SharedName"}),
    "SPLIT": ("SplitOptions", {"num_splits": "NumSplits"}),
    "SPLIT_V": ("SplitVOptions", {"num_splits": "NumSplits"}),
    "GATHER": ("GatherOptions", {"axis": "Axis", "batch_dims": "BatchDims"}),
    "RESIZE_BILINEAR": ("ResizeBilinearOptions", {"align_corners": "AlignCorners",
                                                  "half_pixel_centers": "HalfPixelCenters"}),
    "RESIZE_NEAREST_NEIGHBOR": ("ResizeNearestNeighborOptions", {"align_corners": "AlignCorners",
                                                                 "half_pixel_centers": "HalfPixelCenters"}),
    "BATCH_MATMUL": ("BatchMatMulOptions", {"adj_x": "AdjX", "adj_y": "AdjY",
                                            "asymmetric_quantize_inputs": "AsymmetricQuantizeInputs"}),
    "TRANSPOSE_CONV": ("TransposeConvOptions", {"padding": "Padding", "stride_w": "StrideW", "stride_h": "StrideH",
                                                "activation": "FusedActivationFunction"}),
    "CALL_ONCE": ("CallOnceOptions", {"init_subgraph_index": "InitSubgraphIndex"}),
    "STRIDED_SLICE": ("StridedSliceOptions", {"begin_mask": "BeginMask", "end_mask": "EndMask",
                                              "ellipsis_mask": "EllipsisMask", "new_axis_mask": "NewAxisMask",
                                              "shrink_axis_mask": "ShrinkAxisMask", "offset": "Offset"}),
}


def _options(tfl, op, name: str) -> dict:
    spec = _OPTIONS.get(name)
    if spec is None:
        return {}
    table = op.BuiltinOptions()
    cls_name, fields = spec
    if table is None:
        obj = None
    else:
        obj = getattr(tfl, cls_name)()
        obj.Init(table.Bytes, table.Pos)
    out = {}
    for key, acc in fields.items():
        if obj is None:
            out[key] = [] if acc.endswith("[]") else 0
        elif acc.endswith("[]"):
            out[key] = [int(v) for v in _vec(obj, acc[:-2])]
        else:
            v = getattr(obj, acc)()
            out[key] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    if obj is None and name == "SOFTMAX":
        out["beta"] = 1.0
    return out


def _read_model(buf: bytes, path: str) -> dict:
    """A .tflite flatbuffer as plain Python data: subgraph 0 (the one an invoke runs: ``tensors``, ``ops``,
    ``inputs``, ``outputs``) and every subgraph in ``graphs`` (init subgraphs of ``CALL_ONCE`` among them)."""
    tfl = _schema()
    where = f"{path}: not a valid .tflite model"
    if len(buf) < 8:
        raise ValueError(f"{where} ({len(buf)} bytes; a .tflite flatbuffer is far longer)")
    if bytes(buf[4:8]) != b"TFL3":
        raise ValueError(f"{where} (no 'TFL3' flatbuffer identifier at bytes 4..8: not a TFLite file, "
                         f"or a damaged one)")
    size = len(buf)
    try:
        model = tfl.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() < 1:
            raise _Malformed("the model has no subgraph")
        opcodes = []
        for i in range(model.OperatorCodesLength()):
            oc = model.OperatorCodes(i)
            code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))
            custom = oc.CustomCode()
            name = tfl.utils.BUILTIN_OPCODE2NAME.get(code, f"BUILTIN_{code}")
            if name == "CUSTOM":
                name = f"CUSTOM({custom.decode('utf-8', 'replace') if custom else '?'})"
            opcodes.append(name)
        n_buffers = model.BuffersLength()
        if n_buffers > size:
            raise _Malformed("buffer count beyond the file size")
        for b in range(n_buffers):     # every buffer lies inside the file (a truncated file fails here)
            bo = model.Buffers(b)
            off, nbytes = int(bo.Offset()), int(bo.Size())
            if off > 1 and off + nbytes > size:
                raise _Malformed(f"buffer {b} lies beyond the end of the file")
            if not bo.DataIsNone() and bo.DataLength():
                start = bo._tab.Vector(bo._tab.Offset(4))
                if start + bo.DataLength() > size:
                    raise _Malformed(f"buffer {b} lies beyond the end of the file")
        n_sub = model.SubgraphsLength()
        if n_sub > size:
            raise _Malformed("subgraph count beyond the file size")
        graphs = [_read_subgraph(tfl, model, model.Subgraphs(g), g, opcodes, buf, n_buffers) for g in range(n_sub)]
    except _Malformed as exc:
        raise ValueError(f"{where} ({exc})") from None
    except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, AttributeError,
            __import__("struct").error) as exc:
        raise ValueError(f"{where} (damaged or truncated flatbuffer: {type(exc).__name__}: {exc})") from None
    main = graphs[0]
    return {"tensors": main["tensors"], "ops": main["ops"], "inputs": main["inputs"], "outputs": main["outputs"],
            "subgraphs": n_sub, "graphs": graphs}


def _read_subgraph(tfl, model, sg, g: int, opcodes: list, buf: bytes, n_buffers: int) -> dict:
    """Subgraph ``g`` as plain data: tensors, operators (names, tensor indices, options), inputs and outputs."""
    size = len(buf)
    where = f"subgraph {g}: " if g else ""
    n_tensors, n_ops = sg.TensorsLength(), sg.OperatorsLength()
    if n_tensors > size or n_ops > size:
        raise _Malformed(f"{where}tensor/operator counts beyond the file size")
    tensors = []
    for i in range(n_tensors):
        t = sg.Tensors(i)
        shape = [int(v) for v in _vec(t, "Shape")]
        sig = [int(v) for v in _vec(t, "ShapeSignature")] or list(shape)
        q = t.Quantization()
        scale = zp = None
        qdim = 0
        if q is not None:
            s, z = _vec(q, "Scale"), _vec(q, "ZeroPoint")
            if s.size:
                scale, zp = s.astype(np.float32), (z.astype(np.int64) if z.size else np.zeros(s.size, np.int64))
                qdim = int(q.QuantizedDimension())
        data = None
        b = int(t.Buffer())
        if b < 0 or b >= max(n_buffers, 1) and b != 0:
            raise _Malformed(f"{where}tensor {i} names buffer {b} of {n_buffers}")
        if 0 < b < n_buffers:
            bo = model.Buffers(b)
            off, nbytes = int(bo.Offset()), int(bo.Size())
            if off > 1:                       # data stored after the flatbuffer (models over 2 GB)
                if off + nbytes > size:
                    raise _Malformed(f"buffer {b} lies beyond the end of the file")
                raw = np.frombuffer(buf, np.uint8, nbytes, off)
            else:
                raw = _vec(bo, "Data").astype(np.uint8)
            if raw.size:
                data = raw
        name = t.Name()
        tensors.append({"index": i, "name": name.decode("utf-8", "replace") if name else "", "type": int(t.Type()),
                        "shape": shape, "signature": sig, "scale": scale, "zero_point": zp, "qdim": qdim,
                        "raw": data, "variable": bool(t.IsVariable()),
                        "sparse": t.Sparsity() is not None})
    ops = []
    for k in range(n_ops):
        op = sg.Operators(k)
        oi = int(op.OpcodeIndex())
        if not 0 <= oi < len(opcodes):
            raise _Malformed(f"{where}operator {k} names opcode {oi} of {len(opcodes)}")
        name = opcodes[oi]
        ins = [int(v) for v in _vec(op, "Inputs")]
        outs = [int(v) for v in _vec(op, "Outputs")]
        for v in ins + outs:
            if not -1 <= v < n_tensors:
                raise _Malformed(f"{where}operator {k} names tensor {v} of {n_tensors}")
        ops.append({"index": k, "op": name, "inputs": ins, "outputs": outs,
                    "options": _options(tfl, op, name)})
    inputs = [int(v) for v in _vec(sg, "Inputs")]
    outputs = [int(v) for v in _vec(sg, "Outputs")]
    for v in inputs + outputs:
        if not 0 <= v < n_tensors:
            raise _Malformed(f"{where}the subgraph's inputs/outputs name tensor {v} of {n_tensors}")
    name = sg.Name()
    return {"tensors": tensors, "ops": ops, "inputs": inputs, "outputs": outputs,
            "name": name.decode("utf-8", "replace") if name else ""}


def _const_value(t: dict) -> np.ndarray | None:
    """The value of a constant tensor (numpy, its TFLite shape), or None."""
    if t["raw"] is None:
        return None
    dtype = _NUMPY_TYPES.get(t["type"])
    if dtype is None:
        raise ValueError(f"tensor {t['index']} ({t['name']!r}): constant of type {_TYPE_NAMES.get(t['type'])} "
                         f"is not supported")
    arr = np.frombuffer(t["raw"].tobytes(), dtype=np.dtype(dtype).newbyteorder("<"))
    n = int(np.prod(t["shape"])) if t["shape"] else 1
    if arr.size != n:
        raise ValueError(f"tensor {t['index']} ({t['name']!r}): its buffer holds {arr.size} values, the shape "
                         f"{t['shape']} needs {n} (damaged file)")
    return arr.astype(dtype).reshape(t["shape"])

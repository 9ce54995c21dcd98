"""The graph being built by the ONNX importer (a mixin of :mod:`fxpsim.frontends.onnx.importer`): declaring graph
tensors and nodes, the graph tensor that reads codes with given parameters (``onnx_reinterpret`` aliases), and
what an ONNX tensor is in that graph (its value, the element types onnxruntime's selectors see, the parameters
of a QuantizeLinear)."""
from __future__ import annotations

import numpy as np

from ...graph.ir import Node
from .nodes import _unsupported, _Val


class GraphTensors:
    """Graph tensors, nodes and values (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    # ------------------------------------------------------------------ graph tensors
    def _new_tensor(self, name, bits, signed, shape, scale=None, zp=None, axis=None, data=None):
        base, i = name, 1
        while name in self.specs:
            name = f"{base}:{i}"
            i += 1
        self.specs[name] = dict(bits=bits, signed=signed, shape=tuple(int(d) for d in shape), scale=scale,
                                zp=zp, axis=axis, data=data)
        return name

    def _gname(self, onnx_name, nhwc: bool):
        """Graph name of an activation: the ONNX name, or ``name:nhwc`` for an image that is also a graph
        output (whose ONNX-named tensor is the NCHW copy)."""
        return f"{onnx_name}:nhwc" if (nhwc and onnx_name in self.outputs) else onnx_name

    @staticmethod
    def _gshape(shape):
        return (shape[1], shape[2], shape[0]) if len(shape) == 3 else tuple(shape)

    def _int_spec_args(self, dtype):
        dt = np.dtype(dtype)
        return dt.itemsize * 8, dt.kind == "i"

    def _add_node(self, op, inputs, outputs, attrs=None, name=None):
        base = name or f"{op}_{len(self.gnodes)}"
        used = {n.name for n in self.gnodes}
        nm, i = base, 1
        while nm in used:
            nm = f"{base}:{i}"
            i += 1
        self.gnodes.append(Node(nm, op, inputs, outputs, attrs or {}))
        return nm

    def _int_value(self, onnx_name, shape, dtype, scale, zp):
        """Declare an integer activation: graph tensor with the given quantization."""
        bits, signed = self._int_spec_args(dtype)
        nhwc = len(shape) == 3
        g = self._new_tensor(self._gname(onnx_name, nhwc), bits, signed, self._gshape(shape),
                             None if scale is None else float(np.float32(scale)), None if zp is None else int(zp))
        self.env[onnx_name] = _Val("int", g=g, shape=tuple(shape), dtype=np.dtype(dtype))
        return g

    def _params(self, gname):
        s = self.specs[gname]
        return s["scale"], s["zp"]

    def _check_params(self, node, onnx_name, gname, scale, zp) -> str:
        """The graph tensor holding ``gname``'s codes read with (scale, zp): ``gname`` itself when its
        quantization is those parameters (or still unknown: then it gets them), else an
        ``onnx_reinterpret`` alias (a tensor that two consumers dequantize differently)."""
        spec = self.specs[gname]
        scale = float(np.float32(np.asarray(scale).reshape(-1)[0]))
        zp = int(np.asarray(zp).reshape(-1)[0]) if zp is not None else 0
        if spec["scale"] is None:
            spec["scale"], spec["zp"] = scale, zp
            return gname
        if np.ndim(spec["scale"]) == 0 and spec["scale"] == scale and spec["zp"] == zp:
            return gname
        if np.ndim(spec["scale"]) != 0:
            raise _unsupported(node, f"reading the per-channel quantized tensor {onnx_name!r} per tensor")
        key = (gname, scale, zp)
        alias = self.aliases.get(key)
        if alias is None:
            alias = self._new_tensor(f"{gname}@{node.name}", spec["bits"], spec["signed"], spec["shape"], scale, zp)
            self._add_node("onnx_reinterpret", [gname], [alias], name=f"{node.name}/reinterpret_{onnx_name}")
            self.aliases[key] = alias
        return alias

    def _const_tensor(self, name, data, scale=None, zp=None, axis=None):
        data = np.asarray(data)
        bits = 32 if data.dtype.itemsize == 4 else data.dtype.itemsize * 8
        return self._new_tensor(name, bits, data.dtype.kind == "i", data.shape, scale, zp, axis, data)

    # ------------------------------------------------------------------ values
    def val(self, name, node):
        if name in self.env:
            return self.env[name]
        if name in self.consts:
            return _Val("const", data=self.consts[name], shape=self.consts[name].shape, dtype=self.consts[name].dtype)
        raise ValueError(f"node {node.name!r} reads {name!r}, which fxpsim could not import (see the ops "
                         "before it)")

    def _dq_type(self, v: _Val):
        """The element type onnxruntime's selectors see at a DequantizeLinear input (after int8 -> uint8)."""
        if v.kind != "dq":
            return None
        src = self.env.get(v.src)
        if src is not None and src.kind == "int":
            if src.dtype == np.int8 and v.src in self.converted:
                return np.dtype(np.uint8)
            return src.dtype
        return np.dtype(self.consts[v.src].dtype)

    def _q_type(self, q):
        z = self._q_zp_const(q)
        dt = z[1] if z is not None else np.dtype(np.uint8)
        if dt == np.int8 and q.outputs[0] in self.converted:
            return np.dtype(np.uint8)
        return np.dtype(dt)

    def _q_params(self, q):
        s = self.const(q.inputs[1])
        if s is None or s.size != 1:
            raise _unsupported(q, "a QuantizeLinear needs a constant per-tensor scale")
        if q.attrs.get("block_size"):
            raise _unsupported(q, "blocked quantization")
        if len(q.inputs) > 2 and q.inputs[2]:
            z = self.const(q.inputs[2])
            if z is None or z.size != 1:
                raise _unsupported(q, "a QuantizeLinear needs a constant per-tensor zero point")
            dtype = z.dtype
            zp = int(z.reshape(()))
        else:
            dtype = {2: np.uint8, 3: np.int8}.get(int(q.attrs.get("output_dtype", 2)), None)
            if dtype is None:
                raise _unsupported(q, "output_dtype other than int8 / uint8")
            zp = 0
        if np.dtype(dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise _unsupported(q, f"{np.dtype(dtype)} quantization (int8 and uint8 only)")
        if not np.float32(s.reshape(())) > 0:
            raise _unsupported(q, "a non-positive scale")
        return np.float32(s.reshape(())), zp, np.dtype(dtype)

"""The MAC and pooling TFLite operators (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED with their weights and int32
bias, AVERAGE_POOL_2D, MAX_POOL_2D): a mixin of :class:`fxpsim.frontends.tflite.importer._Builder`."""
from __future__ import annotations

import numpy as np

from ...graph.ir import TensorSpec
from .reader import _INT8, _INT32, _INT64


class LayerOps:
    """Methods of :class:`fxpsim.frontends.tflite.importer._Builder` for the MAC and pooling operators."""

    # ------------------------------------------------------------------ MAC ops
    def _conv_common(self, op, depthwise: bool):
        o = op["options"]
        x, w, b = (op["inputs"] + [-1, -1, -1])[:3]
        y = op["outputs"][0]
        self.check_int8(x, op)
        xn = self.activation_tensor(x, op)
        self._typed_constant(w, op, "weights", _INT8, "weights of type {type} are not supported (int8 weights are)")
        wv = self.static[w]
        if wv.ndim != 4:
            raise ValueError(f"{self.path}: {self.where(op)}: weights of shape {list(wv.shape)} (4-D expected)")
        self.quant(w, op, per_tensor=False)
        n, h, wd, c = self.shape[x]
        stride = (int(o["stride_h"]) or 1, int(o["stride_w"]) or 1)
        dil = (int(o["dilation_h"]) or 1, int(o["dilation_w"]) or 1)
        k = wv.shape[1:3]
        if depthwise:
            if wv.shape[0] != 1 or wv.shape[3] % c:
                raise ValueError(f"{self.path}: {self.where(op)}: depthwise weights {list(wv.shape)} do not match "
                                 f"{c} input channels")
            out_c = wv.shape[3]
            axis = 3
        else:
            if wv.shape[3] != c:
                raise ValueError(f"{self.path}: {self.where(op)}: grouped convolution (weights {list(wv.shape)}, "
                                 f"{c} input channels) is not supported")
            out_c = wv.shape[0]
            axis = 0
        if self.t[w]["scale"].size > 1 and self.t[w]["qdim"] != axis:
            raise ValueError(f"{self.path}: {self.where(op)}: per-channel weight scales along axis "
                             f"{self.t[w]['qdim']} (expected {axis})")
        padding = "SAME" if int(o["padding"]) == 0 else "VALID"
        out_hw = []
        for size, kk, s, d in zip((h, wd), k, stride, dil):
            ke = (kk - 1) * d + 1
            out_hw.append(-(-size // s) if padding == "SAME" else (size - ke) // s + 1)
        if min(out_hw) < 1:
            raise ValueError(f"{self.path}: {self.where(op)}: the kernel is larger than the input")
        wn = self.constant(w, op, axis=axis)
        ins = [xn, wn]
        if b >= 0:
            ins.append(self._bias(b, op, out_c))
        yn = self.declare(y, op, (n, out_hw[0], out_hw[1], out_c))
        self.node(op, self.mac_op("depthwise_conv2d" if depthwise else "conv2d"), ins, [yn],
                  {"stride": list(stride), "dilation": list(dil), "padding": padding,
                   "activation": self.activation(op)})

    def _typed_constant(self, i: int, op, what: str, tflite_type: int, wrong_type: str):
        """Check that tensor ``i`` (the op's ``what``) is a constant of ``tflite_type``; ``wrong_type`` words the
        error for another type (``{type}``: its name)."""
        if i not in self.static:
            raise ValueError(f"{self.path}: {self.where(op)}: the {what} must be a constant tensor")
        if self.t[i]["type"] != tflite_type:
            raise ValueError(f"{self.path}: {self.where(op)}: " + wrong_type.format(type=self.type_name(i)))

    def _bias(self, b: int, op, n_out: int) -> str:
        if self.act16 and self.t[b]["type"] == _INT64:      # 16x8: int64 biases (the accumulator is int64)
            self._typed_constant(b, op, "bias", _INT64, "")
        else:
            self._typed_constant(b, op, "bias", _INT32, "a bias of type {type} is not supported (int32 biases are)")
        if self.static[b].size != n_out:
            raise ValueError(f"{self.path}: {self.where(op)}: the bias has {self.static[b].size} values for "
                             f"{n_out} outputs")
        if self.static[b].shape != (n_out,):
            self.static[b] = self.static[b].reshape(n_out)
        return self.constant(b, op, axis=0)

    def op_CONV_2D(self, op):
        self._conv_common(op, depthwise=False)

    def op_DEPTHWISE_CONV_2D(self, op):
        self._conv_common(op, depthwise=True)

    def op_FULLY_CONNECTED(self, op):
        o = op["options"]
        x, w, b = (op["inputs"] + [-1, -1, -1])[:3]
        y = op["outputs"][0]
        self.check_int8(x, op)
        if int(o.get("weights_format", 0)) != 0:
            raise ValueError(f"{self.path}: {self.where(op)}: shuffled weights formats are not supported")
        if w not in self.static or self.t[w]["type"] != _INT8 or self.static[w].ndim != 2:
            raise ValueError(f"{self.path}: {self.where(op)}: the weights must be a constant int8 [O, K] tensor")
        self.quant(w, op, per_tensor=False)
        wv = self.static[w]
        n_out, k = wv.shape
        xn = self.activation_tensor(x, op)
        xs = self.shape[x]
        if o.get("keep_num_dims"):
            if xs[-1] != k:
                raise ValueError(f"{self.path}: {self.where(op)}: input {list(xs)} does not end in K = {k}")
            out_shape = tuple(xs[:-1]) + (n_out,)
        else:
            if int(np.prod(xs)) != k:
                raise ValueError(f"{self.path}: {self.where(op)}: input {list(xs)} holds {int(np.prod(xs))} values "
                                 f"per batch of 1, not K = {k}: FULLY_CONNECTED would fold rows into the batch, "
                                 f"which fxpsim graphs (batch on axis 0) do not support")
            if tuple(xs) != (1, k):
                flat = self.fresh(f"{self._unique[x]}/flatten")
                sx, zx = self.quant(x, op)
                self.specs[flat] = TensorSpec(flat, self.specs[xn].bits, True, (k,), sx.astype(np.float64), zx)
                self.node(op, "reshape", [xn], [flat], {"shape": [k]}, suffix="/input_reshape")
                xn = flat
            out_shape = (1, n_out)
        ins = [xn, self.constant(w, op, axis=0)]
        if b >= 0:
            ins.append(self._bias(b, op, n_out))
        yn = self.declare(y, op, out_shape)
        self.node(op, self.mac_op("fully_connected"), ins, [yn], {"activation": self.activation(op)})

    # ------------------------------------------------------------------ pooling
    def _pool(self, op, graph_op):
        o = op["options"]
        x, y = op["inputs"][0], op["outputs"][0]
        self.check_int8(x, op)
        n, h, w, c = self.shape[x]
        k = (int(o["filter_h"]), int(o["filter_w"]))
        s = (int(o["stride_h"]) or 1, int(o["stride_w"]) or 1)
        padding = "SAME" if int(o["padding"]) == 0 else "VALID"
        out_hw = [(-(-size // st) if padding == "SAME" else (size - kk) // st + 1) for size, kk, st in
                  zip((h, w), k, s)]
        if min(out_hw) < 1:
            raise ValueError(f"{self.path}: {self.where(op)}: the pool window is larger than the input")
        xn = self.activation_tensor(x, op)
        yn = self.declare(y, op, (n, out_hw[0], out_hw[1], c))
        (sx, zx), (sy, zy) = self.quant(x, op), self.quant(y, op)
        if float(sx[0]) != float(sy[0]) or int(zx[0]) != int(zy[0]):
            raise ValueError(f"{self.path}: {self.where(op)}: {op['op']} with different input and output "
                             f"quantization is not supported (TFLite requires them equal)")
        self.node(op, graph_op, [xn], [yn], {"pool_size": list(k), "stride": list(s), "padding": padding,
                                            "activation": self.activation(op)})

    def op_AVERAGE_POOL_2D(self, op):
        self._pool(op, "avg_pool2d")

    def op_MAX_POOL_2D(self, op):
        self._pool(op, "max_pool2d")

"""The zoo's networks (``benchmarks/zoo.py``) as ONNX models, for ONNX Runtime: the benchmark's peer.

Benchmark-only: needs the ``onnx`` and ``onnxruntime`` packages (the ``bench`` extra); uopviz
never imports them.  :func:`onnx_model` builds the model from the same :class:`zoo.Network`
(weights as initializers), :func:`ort_session` opens it on ONNX Runtime's CPU provider with
``threads`` intra-op threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from zoo import Network, Node

__all__ = ["onnx_model", "ort_session"]


class _Builder:
    def __init__(self, net: Network) -> None:
        self.net = net
        self.nodes: list[Any] = []
        self.initializers = [numpy_helper.from_array(data, name) for name, data in net.weights.items()]
        self.count = 0

    def constant(self, array: np.ndarray) -> str:
        self.count += 1
        name = f"__const{self.count}"
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def add(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))

    def layer(self, node: Node) -> None:
        out, ins, attrs = node.outputs[0], node.inputs, node.attrs
        if node.op == "conv":
            k = self.net.shapes[ins[1]][2]
            p, s = attrs["padding"], attrs["stride"]
            self.add("Conv", ins, [out], kernel_shape=[k, k], pads=[p, p, p, p], strides=[s, s],
                     group=attrs["groups"])  # fmt: skip
        elif node.op == "batch_norm":
            x, mean, variance, offset, scale = ins
            self.add(
                "BatchNormalization", [x, scale, offset, mean, variance], [out], epsilon=attrs["epsilon"]
            )
        elif node.op == "relu6":
            low, high = self.constant(np.array(0.0, np.float32)), self.constant(np.array(6.0, np.float32))
            self.add("Clip", [ins[0], low, high], [out])
        elif node.op in ("relu", "sigmoid", "tanh", "add", "mul"):
            self.add(node.op.capitalize(), ins, [out])
        elif node.op in ("max_pool", "avg_pool"):
            p, s, k = attrs["padding"], attrs["stride"], attrs["size"]
            extra = {"count_include_pad": 0} if node.op == "avg_pool" else {}
            op = "MaxPool" if node.op == "max_pool" else "AveragePool"
            self.add(op, ins, [out], kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p], **extra)
        elif node.op == "global_pool":
            self.add("GlobalAveragePool", ins, [f"{out}_pooled"])
            self.add("Flatten", [f"{out}_pooled"], [out], axis=1)
        elif node.op == "flatten":
            self.add("Flatten", ins, [out], axis=1)
        elif node.op == "concat":
            self.add("Concat", ins, [out], axis=1)
        elif node.op == "linear":
            self.add("Gemm", ins, [out], transB=1)
        elif node.op == "softmax":
            self.add("Softmax", ins, [out], axis=1)
        elif node.op == "lstm":
            self.lstm(node)
        else:
            raise ValueError(f"zoo_onnx: no ONNX form for layer {node.op}")

    def lstm(self, node: Node) -> None:
        """ONNX's LSTM gates are ordered i, o, f, c (ours: i, f, c, o), weights ``[1, 4H, I]``."""
        x, w, u, b = node.inputs
        hidden = node.attrs["hidden"]
        order = [0, 3, 1, 2]
        weights = self.net.weights

        def reorder(array: np.ndarray) -> np.ndarray:
            return np.concatenate([array[k * hidden : (k + 1) * hidden] for k in order])[None]

        self.initializers = [t for t in self.initializers if t.name not in (w, u, b)]  # reordered below
        bias = np.concatenate([reorder(weights[b])[0], np.zeros(4 * hidden, np.float32)])[None]
        inputs = [
            x,
            self.constant(reorder(weights[w])),
            self.constant(reorder(weights[u])),
            self.constant(bias),
        ]
        out = node.outputs[0]
        self.add("LSTM", inputs, ["", f"{out}_last"], hidden_size=hidden)
        self.add("Squeeze", [f"{out}_last", self.constant(np.array([0], np.int64))], [out])


def onnx_model(net: Network) -> onnx.ModelProto:
    """``net`` as an ONNX model (opset 17) with one input and one output."""
    builder = _Builder(net)
    for node in net.nodes:
        builder.layer(node)
    graph = helper.make_graph(
        builder.nodes,
        net.name,
        [helper.make_tensor_value_info(net.input_name, TensorProto.FLOAT, list(net.input_shape))],
        [helper.make_tensor_value_info(net.output, TensorProto.FLOAT, list(net.shapes[net.output]))],
        builder.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_session(net: Network, threads: int = 2) -> onnxruntime.InferenceSession:
    """An ONNX Runtime CPU session for ``net`` with ``threads`` intra-op threads."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    model = onnx_model(net).SerializeToString()
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])

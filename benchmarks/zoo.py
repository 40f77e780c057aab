"""A model zoo: classic architectures as NNEF 1.0 folders, SkriptND folders and numpy references.

Each network is described once, as a :class:`Network` (a list of layer nodes over named tensors
with seeded random weights), and written out by three emitters of our own:

- :func:`write_nnef1`: an NNEF 1.0 folder, ``graph.nnef`` plus one ``.dat`` file per weight
  (named by the variable's label);
- :func:`write_skriptnd`: a SkriptND folder, ``main.sknd`` plus ``<variable>.dat`` files;
- :func:`reference`: the forward pass in numpy (float64 accumulation, float32 result), the
  independent answer the tests and ``benchmarks/bench_zoo.py`` compare uopviz's outputs with.

``benchmarks/zoo_onnx.py`` writes the same networks as ONNX models for ONNX Runtime (the
benchmark's peer); this module needs only numpy and uopviz's ``.dat`` writer.

The builders take ``size`` (input height and width) and ``width`` (a channel multiplier), so
tests run small variants (``resnet18(size=32, width=0.125)``) and the benchmark the full ones
(``resnet50()``: 224x224, batch 1).  Architectures: AlexNet, VGG-16, ResNet-18/50 (v1.5,
batch norm), DenseNet-121, Inception-v1 (GoogLeNet without LRN and auxiliary heads),
MobileNet-v2 (depthwise and separable convolutions, ReLU6) and an LSTM over a sequence (unrolled
in NNEF 1.0, a ``for`` loop over the time steps in SkriptND).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.nnef.data import write_tensor

__all__ = ["BUILDERS", "Network", "Node", "batched", "reference", "write_nnef1", "write_skriptnd"]


@dataclass
class Node:
    """One layer: ``op`` reads ``inputs`` (tensor names) and writes ``outputs``, with ``attrs``."""

    op: str
    outputs: list[str]
    inputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Network:
    """A network: its input, layers in order, weights (name -> float32 array) and output."""

    name: str
    input_name: str
    input_shape: tuple[int, ...]
    nodes: list[Node] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    output: str = ""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        self.shapes[self.input_name] = tuple(self.input_shape)
        self._rng = np.random.default_rng(self.seed)
        self._count = 0

    def calibrate(self, seed: int = 1) -> Network:
        """Set each batch norm's mean and variance to the statistics of its input on
        ``input_data(seed)`` (as a trained network's running statistics) and scale the layer before
        the softmax so its outputs have a standard deviation of 2: activations stay of order one at
        any depth, and the softmax is neither flat nor one-hot, so output errors mean something."""
        values = {name: data.astype(np.float64) for name, data in self.weights.items()}
        values[self.input_name] = self.input_data(seed).astype(np.float64)
        logits = next((node.inputs[0] for node in self.nodes if node.op == "softmax"), None)
        for node in self.nodes:
            if node.op == "batch_norm":
                # the whole layer's statistics, the same for every channel: per-channel ones of a
                # batch of one are degenerate where the image is small (a 1x1 channel has variance
                # 0, its normalised value is rounding noise divided by sqrt(epsilon))
                x = values[node.inputs[0]]
                channels = x.shape[1]
                statistics = (np.full(channels, x.mean()), np.full(channels, x.var()))
                for name, statistic in zip(node.inputs[1:3], statistics):
                    self.weights[name] = statistic.astype(np.float32)
                    values[name] = self.weights[name].astype(np.float64)
            if node.op == "linear" and node.outputs[0] == logits:
                product = values[node.inputs[0]] @ values[node.inputs[1]].T
                factor = 2.0 / max(float(product.std()), 1e-12)
                self.weights[node.inputs[1]] = (self.weights[node.inputs[1]] * factor).astype(np.float32)
                values[node.inputs[1]] = self.weights[node.inputs[1]].astype(np.float64)
            values[node.outputs[0]] = _NUMPY[node.op](*(values[name] for name in node.inputs), **node.attrs)
        return self

    def input_data(self, seed: int = 1) -> np.ndarray:
        """A seeded random input of the network's input shape."""
        return np.random.default_rng(seed).standard_normal(self.input_shape).astype(np.float32)

    # -- building ----------------------------------------------------------------------------------

    def fresh(self, stem: str) -> str:
        """A new tensor name ``<stem><n>``."""
        self._count += 1
        return f"{stem}{self._count}"

    def weight(self, stem: str, shape: tuple[int, ...], kind: str = "normal", fan_in: int = 1) -> str:
        """A seeded random weight: ``normal`` (He-scaled by ``fan_in``), ``positive`` (variances and
        scales around 1) or ``small`` (biases and means)."""
        name = self.fresh(stem)
        if kind == "normal":
            data = self._rng.standard_normal(shape) * math.sqrt(2.0 / max(fan_in, 1))
        elif kind == "positive":
            data = self._rng.uniform(0.5, 1.5, shape)
        else:
            data = self._rng.uniform(-0.1, 0.1, shape)
        self.weights[name] = data.astype(np.float32)
        self.shapes[name] = tuple(shape)
        return name

    def add_node(
        self, op: str, inputs: list[str], shape: tuple[int, ...], stem: str = "", **attrs: Any
    ) -> str:
        """Append a one-output layer; the name of its output."""
        output = self.fresh(stem or op)
        self.nodes.append(Node(op, [output], list(inputs), attrs))
        self.shapes[output] = tuple(shape)
        return output

    def conv(
        self,
        x: str,
        channels: int,
        kernel: int,
        stride: int = 1,
        padding: int | None = None,
        groups: int = 1,
        bias: bool = True,
    ) -> str:
        """A 2-D convolution (``groups`` = input channels: depthwise)."""
        n, c, h, w = self.shapes[x]
        padding = kernel // 2 if padding is None else padding
        filter_name = self.weight(
            "filter", (channels, c // groups, kernel, kernel), fan_in=c // groups * kernel**2
        )
        inputs = [x, filter_name] + ([self.weight("bias", (channels,), "small")] if bias else [])
        out = ((h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1)
        return self.add_node(
            "conv", inputs, (n, channels, *out), stride=stride, padding=padding, groups=groups
        )

    def batch_norm(self, x: str) -> str:
        """Inference batch normalisation over axis 1 (epsilon 1e-5)."""
        c = self.shapes[x][1]
        parameters = [
            self.weight("mean", (c,), "small"),
            self.weight("variance", (c,), "positive"),
            self.weight("offset", (c,), "small"),
            self.weight("scale", (c,), "positive"),
        ]
        return self.add_node("batch_norm", [x, *parameters], self.shapes[x], epsilon=1e-5)

    def unary(self, op: str, x: str) -> str:
        """``relu``, ``relu6``, ``sigmoid`` or ``tanh``."""
        return self.add_node(op, [x], self.shapes[x])

    def binary(self, op: str, a: str, b: str) -> str:
        """``add`` or ``mul`` of two tensors of one shape."""
        return self.add_node(op, [a, b], self.shapes[a])

    def pool(self, op: str, x: str, size: int, stride: int, padding: int = 0) -> str:
        """``max_pool`` (padding never wins) or ``avg_pool`` (padding not counted) over H and W."""
        n, c, h, w = self.shapes[x]
        out = ((h + 2 * padding - size) // stride + 1, (w + 2 * padding - size) // stride + 1)
        return self.add_node(op, [x], (n, c, *out), size=size, stride=stride, padding=padding)

    def global_pool(self, x: str) -> str:
        """The mean over H and W, flattened: ``[N, C]``."""
        n, c = self.shapes[x][:2]
        return self.add_node("global_pool", [x], (n, c))

    def flatten(self, x: str) -> str:
        """``[N, ...]`` -> ``[N, prod(...)]``."""
        shape = self.shapes[x]
        return self.add_node("flatten", [x], (shape[0], math.prod(shape[1:])))

    def concat(self, xs: list[str]) -> str:
        """Concatenation along the channel axis."""
        shape = list(self.shapes[xs[0]])
        shape[1] = sum(self.shapes[x][1] for x in xs)
        return self.add_node("concat", xs, tuple(shape))

    def linear(self, x: str, features: int, bias: bool = True, scale: float = 1.0) -> str:
        """``x @ W.T + b`` with ``W: [features, in]``."""
        n, c = self.shapes[x]
        filter_name = self.weight("weight", (features, c), fan_in=c)
        self.weights[filter_name] *= np.float32(scale)
        inputs = [x, filter_name] + ([self.weight("bias", (features,), "small")] if bias else [])
        return self.add_node("linear", inputs, (n, features))

    def softmax(self, x: str) -> str:
        """Softmax over axis 1; the network's output."""
        self.output = self.add_node("softmax", [x], self.shapes[x])
        return self.output


# ------------------------------------------------------------------------------------------------
# architectures


def _channels(value: float, width: float, least: int = 4) -> int:
    return max(least, int(round(value * width)))


def _classifier(net: Network, x: str, classes: int) -> str:
    """Global pooling, a linear layer scaled so the softmax is not saturated, softmax."""
    return net.softmax(net.linear(net.global_pool(x), classes, scale=0.2))


def alexnet(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """AlexNet (one tower, as in torchvision): 5 convolutions, 3 max pools, 3 linear layers."""
    net = Network("AlexNet", "input", (1, 3, size, size), seed=11)
    x = net.unary("relu", net.conv("input", _channels(64, width), 11, 4, 2))
    x = net.pool("max_pool", x, 3, 2)
    x = net.pool("max_pool", net.unary("relu", net.conv(x, _channels(192, width), 5)), 3, 2)
    for channels in (384, 384, 256):
        x = net.unary("relu", net.conv(x, _channels(channels, width), 3))
    x = net.flatten(net.pool("max_pool", x, 3, 2))
    x = net.unary("relu", net.linear(x, _channels(4096, width)))
    x = net.unary("relu", net.linear(x, _channels(4096, width)))
    net.softmax(net.linear(x, classes, scale=0.2))
    return net.calibrate()


def vgg16(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """VGG-16: 13 3x3 convolutions in 5 stages, each stage ending in a 2x2 max pool; 3 linear layers."""
    net = Network("VGG16", "input", (1, 3, size, size), seed=16)
    x = "input"
    for channels, repeats in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(repeats):
            x = net.unary("relu", net.conv(x, _channels(channels, width), 3))
        x = net.pool("max_pool", x, 2, 2)
    x = net.flatten(x)
    x = net.unary("relu", net.linear(x, _channels(4096, width)))
    x = net.unary("relu", net.linear(x, _channels(4096, width)))
    net.softmax(net.linear(x, classes, scale=0.2))
    return net.calibrate()


def _conv_bn(
    net: Network,
    x: str,
    channels: int,
    kernel: int,
    stride: int = 1,
    relu: bool = True,
    groups: int = 1,
    activation: str = "relu",
) -> str:
    x = net.batch_norm(net.conv(x, channels, kernel, stride, groups=groups, bias=False))
    return net.unary(activation, x) if relu else x


def _resnet(
    name: str, blocks: tuple[int, ...], bottleneck: bool, size: int, width: float, classes: int, seed: int
) -> Network:
    net = Network(name, "input", (1, 3, size, size), seed=seed)
    x = _conv_bn(net, "input", _channels(64, width), 7, 2)
    x = net.pool("max_pool", x, 3, 2, 1)
    expansion = 4 if bottleneck else 1
    for stage, count in enumerate(blocks):
        planes = _channels(64 * 2**stage, width)
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            if bottleneck:
                y = _conv_bn(net, x, planes, 1)
                y = _conv_bn(net, y, planes, 3, stride)
                y = _conv_bn(net, y, planes * expansion, 1, relu=False)
            else:
                y = _conv_bn(net, x, planes, 3, stride)
                y = _conv_bn(net, y, planes, 3, relu=False)
            shortcut = x
            if stride != 1 or net.shapes[x][1] != planes * expansion:
                shortcut = _conv_bn(net, x, planes * expansion, 1, stride, relu=False)
            x = net.unary("relu", net.binary("add", y, shortcut))
    _classifier(net, x, classes)
    return net.calibrate()


def resnet18(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """ResNet-18: basic blocks [2, 2, 2, 2]."""
    return _resnet("ResNet18", (2, 2, 2, 2), False, size, width, classes, 18)


def resnet50(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """ResNet-50 (v1.5: the stride in the 3x3 convolution): bottleneck blocks [3, 4, 6, 3]."""
    return _resnet("ResNet50", (3, 4, 6, 3), True, size, width, classes, 50)


def densenet121(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """DenseNet-121: growth 32, blocks [6, 12, 24, 16] of BN-ReLU-conv1x1-BN-ReLU-conv3x3 layers,
    each concatenating its 32 new channels; transitions halve channels and size (2x2 average pool)."""
    net = Network("DenseNet121", "input", (1, 3, size, size), seed=121)
    growth = _channels(32, width, 2)
    x = net.pool("max_pool", _conv_bn(net, "input", _channels(64, width), 7, 2), 3, 2, 1)
    for stage, layers in enumerate((6, 12, 24, 16)):
        x = dense_layers(net, x, layers, growth)
        if stage < 3:
            y = net.conv(net.unary("relu", net.batch_norm(x)), net.shapes[x][1] // 2, 1, bias=False)
            x = net.pool("avg_pool", y, 2, 2)
    _classifier(net, net.unary("relu", net.batch_norm(x)), classes)
    return net.calibrate()


def dense_layers(net: Network, x: str, layers: int, growth: int) -> str:
    """``layers`` DenseNet layers on ``x`` (BN-ReLU-conv1x1 to ``4 * growth`` channels, BN-ReLU-conv3x3
    to ``growth``, concatenated after everything so far); the block's output."""
    for _ in range(layers):
        y = net.conv(net.unary("relu", net.batch_norm(x)), 4 * growth, 1, bias=False)
        y = net.conv(net.unary("relu", net.batch_norm(y)), growth, 3, bias=False)
        x = net.concat([x, y])
    return x


def dense_block(first: int, size: int, layers: int, growth: int = 32) -> Network:
    """One DenseNet block alone: ``layers`` of :func:`dense_layers` on a ``first``-channel input of
    ``size`` x ``size``, the block's concatenation its output."""
    net = Network("DenseBlock", "input", (1, first, size, size), seed=first + size)
    net.output = dense_layers(net, "input", layers, growth)
    return net.calibrate()


# Inception-v1 modules: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection)
_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}  # fmt: skip


def inception_v1(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """Inception-v1 (GoogLeNet) with ReLU convolutions, without LRN and the auxiliary classifiers."""
    net = Network("InceptionV1", "input", (1, 3, size, size), seed=1)
    relu_conv = lambda x, c, k, s=1: net.unary("relu", net.conv(x, _channels(c, width), k, s))  # noqa: E731
    x = net.pool("max_pool", relu_conv("input", 64, 7, 2), 3, 2, 1)
    x = net.pool("max_pool", relu_conv(relu_conv(x, 64, 1), 192, 3), 3, 2, 1)
    for name, (c1, r3, c3, r5, c5, cp) in _INCEPTION.items():
        if name in ("4a", "5a"):
            x = net.pool("max_pool", x, 3, 2, 1)
        branches = [
            relu_conv(x, c1, 1),
            relu_conv(relu_conv(x, r3, 1), c3, 3),
            relu_conv(relu_conv(x, r5, 1), c5, 5),
            relu_conv(net.pool("max_pool", x, 3, 1, 1), cp, 1),
        ]
        x = net.concat(branches)
    _classifier(net, x, classes)
    return net.calibrate()


# SqueezeNet-1.1 fire modules after each max pool: (squeeze, expand 1x1, expand 3x3) per module
_SQUEEZENET = (((16, 64, 64), (16, 64, 64)), ((32, 128, 128), (32, 128, 128)),
               ((48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256)))  # fmt: skip


def squeezenet(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """SqueezeNet-1.1: a 3x3 stride-2 conv, then fire modules (a 1x1 squeeze conv feeding a 1x1 and
    a 3x3 expand conv, concatenated) between 3x3 stride-2 max pools, and a 1x1 conv to the classes
    at 13x13 (no linear layer) before global pooling and the softmax."""
    net = Network("SqueezeNet11", "input", (1, 3, size, size), seed=5)
    relu_conv = lambda x, c, k, s=1, p=None: net.unary("relu", net.conv(x, c, k, s, p))  # noqa: E731
    x = relu_conv("input", _channels(64, width), 3, 2, 0)
    for modules in _SQUEEZENET:
        x = net.pool("max_pool", x, 3, 2)
        for squeeze, expand1, expand3 in modules:
            y = relu_conv(x, _channels(squeeze, width), 1)
            x = net.concat([relu_conv(y, _channels(channels, width), kernel)
                            for channels, kernel in ((expand1, 1), (expand3, 3))])
    logits = net.conv(x, classes, 1)
    net.weights[net.nodes[-1].inputs[1]] *= np.float32(0.2)  # a softmax that is not saturated
    net.softmax(net.global_pool(net.unary("relu", logits)))
    return net.calibrate()


# MobileNet-v2 stages: (expansion, channels, repeats, stride)
_MOBILENET = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(size: int = 224, width: float = 1.0, classes: int = 1000) -> Network:
    """MobileNet-v2: inverted residual blocks of a 1x1 expansion, a 3x3 depthwise convolution and a
    1x1 projection (the depthwise + pointwise pair is a separable convolution), ReLU6."""
    net = Network("MobileNetV2", "input", (1, 3, size, size), seed=2)
    x = _conv_bn(net, "input", _channels(32, width), 3, 2, activation="relu6")
    for expansion, channels, repeats, first_stride in _MOBILENET:
        out_channels = _channels(channels, width)
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            hidden = net.shapes[x][1] * expansion
            y = _conv_bn(net, x, hidden, 1, activation="relu6") if expansion != 1 else x
            y = _conv_bn(net, y, hidden, 3, stride, groups=hidden, activation="relu6")
            y = _conv_bn(net, y, out_channels, 1, relu=False)
            x = net.binary("add", x, y) if stride == 1 and net.shapes[x][1] == out_channels else y
    x = _conv_bn(net, x, _channels(1280, width), 1, activation="relu6")
    _classifier(net, x, classes)
    return net.calibrate()


def lstm(steps: int = 8, batch: int = 1, features: int = 64, hidden: int = 128, classes: int = 10) -> Network:
    """An LSTM over ``steps`` time steps of ``[batch, features]`` (input ``[steps, batch, features]``),
    gates in the order input, forget, cell, output; a linear classifier and softmax on the last
    hidden state.  Node ``lstm`` holds the whole recurrence (the emitters unroll it or loop)."""
    net = Network("LSTM", "input", (steps, batch, features), seed=7)
    w = net.weight("w", (4 * hidden, features), fan_in=features)
    u = net.weight("u", (4 * hidden, hidden), fan_in=hidden)
    b = net.weight("b", (4 * hidden,), "small")
    last = net.add_node("lstm", ["input", w, u, b], (batch, hidden), hidden=hidden)
    net.softmax(net.linear(last, classes, scale=0.5))
    return net.calibrate()


def batched(net: Network, batch: int) -> Network:
    """``net`` on a batch of ``batch`` images: the same layers and weights (calibrated on one image,
    so a model's batch-1 and batch-``batch`` forms compute the same function), every activation's
    leading axis ``batch``.  The LSTM's batch is its own builder's argument (axis 1)."""
    if net.name == "LSTM":
        raise ValueError("zoo.batched: the LSTM's batch is lstm(batch=...)'s argument, not its leading axis")
    activations = {net.input_name, *(name for node in net.nodes for name in node.outputs)}
    shape = (batch, *net.input_shape[1:])
    copy = Network(
        net.name, net.input_name, shape, list(net.nodes), dict(net.weights), net.output, seed=net.seed
    )
    copy.shapes = {
        name: (batch, *shape[1:]) if name in activations else shape for name, shape in net.shapes.items()
    }
    return copy


BUILDERS: dict[str, Callable[..., Network]] = {
    "alexnet": alexnet, "vgg16": vgg16, "resnet18": resnet18, "resnet50": resnet50,
    "densenet121": densenet121, "inception_v1": inception_v1, "mobilenet_v2": mobilenet_v2,
    "squeezenet": squeezenet, "lstm": lstm,
}  # fmt: skip


# ------------------------------------------------------------------------------------------------
# numpy reference


def _np_conv(x: np.ndarray, w: np.ndarray, stride: int, padding: int, groups: int) -> np.ndarray:
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    k = w.shape[2]
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups == 1:
        return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)
    n, c, oh, ow = windows.shape[:4]
    per = c // groups
    grouped = windows.reshape(n, groups, per, oh, ow, k, k)
    w_grouped = w.reshape(groups, w.shape[0] // groups, per, k, k)
    out = np.einsum("ngchwij,gocij->ngohw", grouped, w_grouped, optimize=True)
    return out.reshape(n, w.shape[0], oh, ow)


def _np_pool(x: np.ndarray, op: str, size: int, stride: int, padding: int) -> np.ndarray:
    pad = [(0, 0), (0, 0), (padding, padding), (padding, padding)]
    if op == "max_pool":
        xp = np.pad(x, pad, constant_values=-np.inf)
        windows = np.lib.stride_tricks.sliding_window_view(xp, (size, size), axis=(2, 3))[
            :, :, ::stride, ::stride
        ]
        return windows.max(axis=(4, 5))
    xp, ones = np.pad(x, pad), np.pad(np.ones_like(x), pad)
    view = lambda a: np.lib.stride_tricks.sliding_window_view(a, (size, size), axis=(2, 3))[
        :, :, ::stride, ::stride
    ]  # noqa: E731
    return view(xp).sum(axis=(4, 5)) / view(ones).sum(axis=(4, 5))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _np_lstm(x: np.ndarray, w: np.ndarray, u: np.ndarray, b: np.ndarray, hidden: int) -> np.ndarray:
    h = np.zeros((x.shape[1], hidden))
    c = np.zeros_like(h)
    for step in range(x.shape[0]):
        gates = x[step] @ w.T + h @ u.T + b
        i, f, g, o = (gates[:, k * hidden : (k + 1) * hidden] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return h


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


_NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "conv": lambda x, w, b=None, stride=1, padding=0, groups=1: (
        _np_conv(x, w, stride, padding, groups) + (0.0 if b is None else b.reshape(1, -1, 1, 1))
    ),
    "batch_norm": lambda x, mean, var, offset, scale, epsilon: (
        (x - mean.reshape(1, -1, 1, 1))
        / np.sqrt(var.reshape(1, -1, 1, 1) + epsilon)
        * scale.reshape(1, -1, 1, 1)
        + offset.reshape(1, -1, 1, 1)
    ),
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "add": np.add,
    "mul": np.multiply,
    "max_pool": lambda x, size, stride, padding: _np_pool(x, "max_pool", size, stride, padding),
    "avg_pool": lambda x, size, stride, padding: _np_pool(x, "avg_pool", size, stride, padding),
    "global_pool": lambda x: x.mean(axis=(2, 3)),
    "flatten": lambda x: x.reshape(x.shape[0], -1),
    "concat": lambda *xs: np.concatenate(xs, axis=1),
    "linear": lambda x, w, b=None: x @ w.T + (0.0 if b is None else b),
    "softmax": _np_softmax,
    "lstm": _np_lstm,
}


def reference(net: Network, x: np.ndarray) -> np.ndarray:
    """The network's output for input ``x``, computed in float64 by numpy."""
    values: dict[str, np.ndarray] = {name: data.astype(np.float64) for name, data in net.weights.items()}
    values[net.input_name] = np.asarray(x, np.float64)
    for node in net.nodes:
        values[node.outputs[0]] = _NUMPY[node.op](*(values[name] for name in node.inputs), **node.attrs)
    return values[net.output].astype(np.float32)


# ------------------------------------------------------------------------------------------------
# NNEF 1.0


def _nnef1_lines(net: Network, node: Node) -> list[str]:
    """The NNEF 1.0 statements of one layer (biases and normalisation parameters are ``[1, C]``)."""
    out, ins, attrs = node.outputs[0], node.inputs, node.attrs
    if node.op == "conv":
        p, s = attrs["padding"], attrs["stride"]
        bias = ins[2] if len(ins) > 2 else "0.0"
        groups = 0 if attrs["groups"] == net.shapes[ins[0]][1] and attrs["groups"] > 1 else attrs["groups"]
        return [
            f"{out} = conv({ins[0]}, {ins[1]}, {bias}, padding = [({p}, {p}), ({p}, {p})], "
            f"stride = [{s}, {s}], groups = {groups});"
        ]
    if node.op == "batch_norm":
        x, mean, variance, offset, scale = ins
        return [
            f"{out} = batch_normalization({x}, {mean}, {variance}, {offset}, {scale}, "
            f"epsilon = {attrs['epsilon']});"
        ]
    if node.op == "relu6":
        return [f"{out} = clamp({ins[0]}, 0.0, 6.0);"]
    if node.op in ("relu", "sigmoid", "tanh", "softmax"):
        return [f"{out} = {node.op}({ins[0]});"]
    if node.op in ("add", "mul"):
        return [f"{out} = {node.op}({ins[0]}, {ins[1]});"]
    if node.op in ("max_pool", "avg_pool"):
        p, s, k = attrs["padding"], attrs["stride"], attrs["size"]
        border = "ignore"  # max: padding never wins; avg: padding is not counted
        return [
            f"{out} = {node.op}({ins[0]}, size = [1, 1, {k}, {k}], stride = [1, 1, {s}, {s}], "
            f"padding = [(0, 0), (0, 0), ({p}, {p}), ({p}, {p})], border = '{border}');"
        ]
    if node.op == "global_pool":
        return [
            f"{out}_mean = mean_reduce({ins[0]}, axes = [2, 3]);",
            f"{out} = reshape({out}_mean, shape = [0, -1]);",
        ]
    if node.op == "flatten":
        return [f"{out} = reshape({ins[0]}, shape = [0, -1]);"]
    if node.op == "concat":
        return [f"{out} = concat([{', '.join(ins)}], axis = 1);"]
    if node.op == "linear":
        bias = ins[2] if len(ins) > 2 else "0.0"
        return [f"{out} = linear({ins[0]}, {ins[1]}, {bias});"]
    if node.op == "lstm":
        return _nnef1_lstm(net, node)
    raise ValueError(f"zoo: no NNEF 1.0 form for layer {node.op}")


def _nnef1_lstm(net: Network, node: Node) -> list[str]:
    """The recurrence unrolled: per step, gates = x W^T + h U^T + b, split in four."""
    x, w, u, b = node.inputs
    steps, batch, _ = net.shapes[x]
    hidden = node.attrs["hidden"]
    out = node.outputs[0]
    names = ", ".join(f"{out}_x{t}" for t in range(steps))
    lines = [f"[{names}] = unstack({x}, axis = 0);"]
    h, c = f"{out}_h0", f"{out}_c0"
    zeros = f"constant<scalar>(shape = [{batch}, {hidden}], value = [0.0])"
    lines += [f"{h} = {zeros};", f"{c} = {zeros};"]
    for t in range(steps):
        p = f"{out}_t{t}"
        lines += [
            f"{p}_xw = linear({out}_x{t}, {w}, {b});",
            f"{p}_hu = linear({h}, {u}, 0.0);",
            f"{p}_gates = add({p}_xw, {p}_hu);",
            f"[{p}_i, {p}_f, {p}_g, {p}_o] = split({p}_gates, axis = 1, ratios = [1, 1, 1, 1]);",
            f"{p}_sf = sigmoid({p}_f);",
            f"{p}_si = sigmoid({p}_i);",
            f"{p}_tg = tanh({p}_g);",
            f"{p}_so = sigmoid({p}_o);",
            f"{p}_fc = mul({p}_sf, {c});",
            f"{p}_ig = mul({p}_si, {p}_tg);",
            f"{p}_c = add({p}_fc, {p}_ig);",
            f"{p}_tc = tanh({p}_c);",
            f"{p}_h = mul({p}_so, {p}_tc);",
        ]
        h, c = f"{p}_h", f"{p}_c"
    lines.append(f"{out} = copy({h});")
    return lines


def _nnef1_weight_shape(net: Network, name: str) -> list[int]:
    """1.0 biases and normalisation parameters are ``[1, C]``."""
    shape = list(net.shapes[name])
    return [1, *shape] if len(shape) == 1 else shape


def nnef1_text(net: Network) -> str:
    """The ``graph.nnef`` text of ``net``."""
    lines = [
        "version 1.0;",
        "",
        f"graph {net.name}( {net.input_name} ) -> ( {net.output} )",
        "{",
        f"    {net.input_name} = external<scalar>(shape = {list(net.input_shape)});",
    ]
    for name in net.weights:
        lines.append(
            f"    {name} = variable<scalar>(shape = {_nnef1_weight_shape(net, name)}, label = '{name}');"
        )
    for node in net.nodes:
        lines += [f"    {line}" for line in _nnef1_lines(net, node)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_nnef1(net: Network, folder: str | Path) -> Path:
    """An NNEF 1.0 folder for ``net``: ``graph.nnef`` and ``<label>.dat`` for every weight."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.nnef").write_text(nnef1_text(net))
    for name, data in net.weights.items():
        write_tensor(folder / f"{name}.dat", data.reshape(_nnef1_weight_shape(net, name)))
    return folder


# ------------------------------------------------------------------------------------------------
# SkriptND


def _skriptnd_lines(net: Network, node: Node) -> list[str]:
    out, ins, attrs = node.outputs[0], node.inputs, node.attrs
    if node.op == "conv":
        return [
            f"{out} = nn.conv{{stride={attrs['stride']}, padding={attrs['padding']}, "
            f"groups={attrs['groups']}}}({', '.join(ins)});"
        ]
    if node.op == "batch_norm":
        x, mean, variance, offset, scale = ins
        arguments = ", ".join((x, mean, variance, offset, scale))
        return [f"{out} = nn.batch_norm{{epsilon={attrs['epsilon']}}}({arguments});"]
    if node.op == "relu6":
        return [f"{out} = math.clamp({ins[0]}, 0.0, 6.0);"]
    if node.op == "tanh":
        return [f"{out} = math.tanh({ins[0]});"]
    if node.op in ("relu", "sigmoid", "softmax"):
        return [f"{out} = nn.{node.op}({ins[0]});"]
    if node.op in ("add", "mul"):
        return [f"{out} = math.{node.op}({ins[0]}, {ins[1]});"]
    if node.op in ("max_pool", "avg_pool"):
        p, s, k = attrs["padding"], attrs["stride"], attrs["size"]
        return [f"{out} = nn.{node.op}{{size={k}, stride={s}, padding={p}}}({ins[0]});"]
    if node.op == "global_pool":
        return [f"{out} = math.mean_reduce{{axes=[2, 3], squeeze=true}}({ins[0]});"]
    if node.op == "flatten":
        return [f"{out} = layout.flatten{{axis=1}}({ins[0]});"]
    if node.op == "concat":
        return [f"{out} = layout.concat{{axis=1}}([{', '.join(ins)}]);"]
    if node.op == "linear":
        return [f"{out} = nn.linear({', '.join(ins)});"]
    if node.op == "lstm":
        return _skriptnd_lstm(net, node)
    raise ValueError(f"zoo: no SkriptND form for layer {node.op}")


def _skriptnd_lstm(net: Network, node: Node) -> list[str]:
    """The recurrence as a loop carrying h and c over the time steps (a pack from unstack)."""
    x, w, u, b = node.inputs
    steps, batch, _ = net.shapes[x]
    hidden = node.attrs["hidden"]
    out = node.outputs[0]
    return [
        f"{out}_xs = layout.unstack{{axis=0}}({x});",
        f"{out}, {out}_c = with h: real[{batch}, {hidden}] = 0.0, c: real[{batch}, {hidden}] = 0.0 "
        f"for xt : {out}_xs do {{ "
        f"xw = nn.linear(xt, {w}, {b}); hu = nn.linear(h, {u}); gates = math.add(xw, hu); "
        f"[i, f, g, o] = layout.split{{axis=1, count=4}}(gates); "
        "si = nn.sigmoid(i); sf = nn.sigmoid(f); tg = math.tanh(g); so = nn.sigmoid(o); "
        "fc = math.mul(sf, c); ig = math.mul(si, tg); c1 = math.add(fc, ig); "
        "tc = math.tanh(c1); h1 = math.mul(so, tc); "
        f"yield h1, c1; }};",
    ]


def skriptnd_text(net: Network) -> str:
    """The ``main.sknd`` text of ``net``."""
    variables = [f"        {name}: real{list(net.shapes[name])};" for name in net.weights]
    body = [f"        {line}" for node in net.nodes for line in _skriptnd_lines(net, node)]
    return "\n".join([
        "import nn;", "import math;", "import layout;", "", f"graph {net.name} {{",
        f"    @input {{ {net.input_name}: real{list(net.input_shape)}; }}",
        f"    @output {{ {net.output}: real{list(net.shapes[net.output])}; }}",
        "    @variable {", *variables, "    }", "    @compose {", *body, "    }", "}",
    ]) + "\n"  # fmt: skip


def write_skriptnd(net: Network, folder: str | Path) -> Path:
    """A SkriptND model folder for ``net``: ``main.sknd`` and ``<variable>.dat`` for every weight."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.sknd").write_text(skriptnd_text(net))
    for name, data in net.weights.items():
        write_tensor(folder / f"{name}.dat", data)
    return folder

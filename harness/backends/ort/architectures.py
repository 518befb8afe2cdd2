"""The two networks of the onnxruntime grid (ResNet-50, MobileNetV2), written once against a builder, and the
builders that turn them into an ONNX graph (OnnxBuilder) and a PyTorch evaluation (TorchBuilder).

Why one description drives both: the exported bytes of torch.onnx depend on the exporter and its version, so
two images would run different graphs and a hash comparison across images would confound the exporter with
onnxruntime. Names are torchvision's state_dict keys, so torchvision's own module can load the same weights.

Weights come from numpy's PCG64 seeded per parameter name (the same on every machine). BatchNorm running
statistics are calibrated once on a seeded random batch and quantised (variance to 2^(k/4), mean to 1/16 of
a standard deviation), so float64 rounding noise between machines cannot change a single weight bit, and
activations stay O(1) through the 50 layers as in a trained network.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

IMAGE_SIZE = 224
BN_EPS = 1e-5
MODELS = ("resnet50", "mobilenetv2")


class UnknownModel(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def check_model(model_id: str) -> str:
    if model_id not in MODELS:
        raise UnknownModel(f"unknown model {model_id!r}; known: {', '.join(MODELS)}")
    return model_id


def seeded_rng(model_id: str, name: str) -> np.random.Generator:
    """The generator of one named parameter or input of a model: the same numbers on every machine."""
    return np.random.Generator(np.random.PCG64(zlib.crc32(f"{model_id}:{name}".encode())))


def resnet50(b, x):
    """torchvision.models.resnet50 (v1.5: the stride sits on the 3x3 conv of each bottleneck)."""
    x = b.relu(b.bn(b.conv(x, "conv1", 3, 64, 7, 2, 3), "bn1", 64))
    x = b.maxpool(x)
    cin = 64
    for li, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        for bi in range(blocks):
            stride = 2 if (bi == 0 and li > 1) else 1
            p = f"layer{li}.{bi}"
            out = b.relu(b.bn(b.conv(x, f"{p}.conv1", cin, width, 1, 1, 0), f"{p}.bn1", width))
            out = b.relu(b.bn(b.conv(out, f"{p}.conv2", width, width, 3, stride, 1), f"{p}.bn2", width))
            out = b.bn(b.conv(out, f"{p}.conv3", width, width * 4, 1, 1, 0), f"{p}.bn3", width * 4, last=True)
            if bi == 0:
                x = b.bn(b.conv(x, f"{p}.downsample.0", cin, width * 4, 1, stride, 0), f"{p}.downsample.1",
                         width * 4)
            x = b.relu(b.add(out, x))
            cin = width * 4
    return b.linear(b.gap(x), "fc", 2048, 1000)


_MBV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                  (6, 320, 1, 1))


def mobilenetv2(b, x):
    """torchvision.models.mobilenet_v2 (width 1.0): inverted residuals with depthwise 3x3 convs, ReLU6."""
    x = b.relu6(b.bn(b.conv(x, "features.0.0", 3, 32, 3, 2, 1), "features.0.1", 32))
    cin, idx = 32, 1
    for t, c, n, s in _MBV2_SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = int(round(cin * t))
            p = f"features.{idx}.conv"
            y, j = x, 0
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, f"{p}.0.0", cin, hidden, 1, 1, 0), f"{p}.0.1", hidden))
                j = 1
            y = b.relu6(b.bn(b.conv(y, f"{p}.{j}.0", hidden, hidden, 3, stride, 1, groups=hidden),
                             f"{p}.{j}.1", hidden))
            y = b.bn(b.conv(y, f"{p}.{j + 1}", hidden, c, 1, 1, 0), f"{p}.{j + 2}", c, last=True)
            x = b.add(y, x) if (stride == 1 and cin == c) else y
            cin, idx = c, idx + 1
    x = b.relu6(b.bn(b.conv(x, f"features.{idx}.0", cin, 1280, 1, 1, 0), f"features.{idx}.1", 1280))
    return b.linear(b.gap(x), "classifier.1", 1280, 1000)


ARCHITECTURES = {"resnet50": resnet50, "mobilenetv2": mobilenetv2}


# --------------------------------------------------------------------------------------------------------------
# Parameters


def init_param(model_id: str, name: str, shape: tuple[int, ...], last_bn: bool = False) -> np.ndarray:
    """A seeded parameter (float32), torchvision's init where it has one; BN running stats come from calibration."""
    rng = seeded_rng(model_id, name)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "weight" and len(shape) == 4:  # conv: kaiming normal, fan_out, as torchvision
        std = math.sqrt(2.0 / (shape[0] * shape[2] * shape[3]))
        v = rng.standard_normal(shape) * std
    elif leaf == "weight" and len(shape) == 2:  # linear
        v = rng.standard_normal(shape) * 0.01
    elif leaf == "bias" and name.startswith(("fc", "classifier")):
        v = rng.standard_normal(shape) * 0.01
    elif leaf == "weight":  # BN gamma; smaller on the last BN of a residual branch, as in trained networks
        v = rng.uniform(0.1, 0.5, shape) if last_bn else rng.uniform(0.5, 1.5, shape)
    elif leaf == "bias":  # BN beta
        v = rng.standard_normal(shape) * 0.1
    else:
        raise ValueError(f"no initialiser for {name}")
    return v.astype(np.float32)


def quantise_stats(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coarse grid for calibrated statistics: float64 noise of another machine cannot move a value across it."""
    var = np.maximum(var, 1e-8)
    vq = np.exp2(np.round(np.log2(var) * 4) / 4)
    step = np.sqrt(vq) / 16
    mq = np.round(mean / step) * step
    return mq.astype(np.float32), vq.astype(np.float32)


class TorchBuilder:
    """Evaluates an architecture with torch.nn.functional in ``dtype``; with ``calibrate`` it creates the
    parameters (seeded) and sets each BN's running statistics from the batch it sees."""

    def __init__(self, model_id: str, params: dict[str, np.ndarray], calibrate: bool = False, dtype=None):
        import torch

        self.torch = torch
        self.model_id = model_id
        self.params = params
        self.calibrate = calibrate
        self.dtype = dtype or torch.float64

    def _p(self, name, shape, last_bn=False):
        if name not in self.params:
            if not self.calibrate:
                raise KeyError(f"parameter {name} missing")
            self.params[name] = init_param(self.model_id, name, shape, last_bn)
        return self.torch.from_numpy(np.array(self.params[name])).to(self.dtype)

    def conv(self, x, name, cin, cout, k, stride, pad, groups=1):
        import torch.nn.functional as F

        w = self._p(f"{name}.weight", (cout, cin // groups, k, k))
        return F.conv2d(x, w, stride=stride, padding=pad, groups=groups)

    def bn(self, x, name, c, last=False):
        import torch.nn.functional as F

        gamma = self._p(f"{name}.weight", (c,), last)
        beta = self._p(f"{name}.bias", (c,))
        if self.calibrate and f"{name}.running_mean" not in self.params:
            xd = x.to(self.torch.float64)
            mean, var = quantise_stats(xd.mean(dim=(0, 2, 3)).numpy(), xd.var(dim=(0, 2, 3), unbiased=False).numpy())
            self.params[f"{name}.running_mean"], self.params[f"{name}.running_var"] = mean, var
        mean = self._p(f"{name}.running_mean", (c,))
        var = self._p(f"{name}.running_var", (c,))
        return F.batch_norm(x, mean, var, gamma, beta, training=False, eps=BN_EPS)

    def relu(self, x):
        return self.torch.relu(x)

    def relu6(self, x):
        return self.torch.clamp(x, 0.0, 6.0)

    def add(self, a, b):
        return a + b

    def maxpool(self, x):
        import torch.nn.functional as F

        return F.max_pool2d(x, 3, 2, 1)

    def gap(self, x):
        return x.mean(dim=(2, 3))

    def linear(self, x, name, cin, cout):
        import torch.nn.functional as F

        return F.linear(x, self._p(f"{name}.weight", (cout, cin)), self._p(f"{name}.bias", (cout,)))


class OnnxBuilder:
    """Emits the architecture as ONNX nodes; initializer names are the torchvision parameter names."""

    def __init__(self, params: dict[str, np.ndarray]):
        self.params = params
        self.nodes: list = []
        self.used: list[str] = []
        self._n = 0

    def _t(self, hint):
        self._n += 1
        return f"{hint}:{self._n}"

    def _use(self, *names):
        for n in names:
            if n not in self.params:
                raise KeyError(f"parameter {n} missing")
            if n not in self.used:
                self.used.append(n)

    def _node(self, op, inputs, name, **attrs):
        from onnx import helper

        out = self._t(name)
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv(self, x, name, cin, cout, k, stride, pad, groups=1):
        self._use(f"{name}.weight")
        return self._node("Conv", [x, f"{name}.weight"], name, kernel_shape=[k, k], strides=[stride, stride],
                          pads=[pad] * 4, dilations=[1, 1], group=groups)

    def bn(self, x, name, c, last=False):
        ins = [f"{name}.weight", f"{name}.bias", f"{name}.running_mean", f"{name}.running_var"]
        self._use(*ins)
        return self._node("BatchNormalization", [x, *ins], name, epsilon=BN_EPS)

    def relu(self, x):
        return self._node("Relu", [x], self._t("relu"))

    def relu6(self, x):
        self._use("const.zero", "const.six")
        return self._node("Clip", [x, "const.zero", "const.six"], self._t("relu6"))

    def add(self, a, b):
        return self._node("Add", [a, b], self._t("add"))

    def maxpool(self, x):
        return self._node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def gap(self, x):
        y = self._node("GlobalAveragePool", [x], "avgpool")
        return self._node("Flatten", [y], "flatten", axis=1)

    def linear(self, x, name, cin, cout):
        self._use(f"{name}.weight", f"{name}.bias")
        return self._node("Gemm", [x, f"{name}.weight", f"{name}.bias"], name, transB=1)



class ShapeBuilder:
    """Walks an architecture on shapes alone, listing every conv as it is called: the layer list a workload's
    weights come from, from the same description the ONNX graph and the PyTorch reference are built from."""

    def __init__(self):
        self.convs: list[tuple[str, tuple[int, ...]]] = []

    def conv(self, x, name, cin, cout, k, stride, pad, groups=1):
        n, _, h, w = x
        self.convs.append((name, (n, cin, h, w, cout, k, k, pad, stride, groups)))
        return (n, cout, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)

    def bn(self, x, name, c, last=False):
        return x

    def relu(self, x):
        return x

    relu6 = relu

    def add(self, a, b):
        return a

    def maxpool(self, x):
        n, c, h, w = x
        return (n, c, (h + 1) // 2, (w + 1) // 2)

    def gap(self, x):
        return (x[0], x[1])

    def linear(self, x, name, cin, cout):
        return (x[0], cout)


def conv_layers(model_id: str, batch: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every conv one forward pass of the model calls, in order: (name, (N, C, H, W, K, R, S, pad, stride,
    groups)) at ``batch``."""
    b = ShapeBuilder()
    ARCHITECTURES[check_model(model_id)](b, (batch, 3, IMAGE_SIZE, IMAGE_SIZE))
    return b.convs


def calibration_batch(model_id: str) -> np.ndarray:
    """The seeded batch BatchNorm statistics are calibrated on (make_params)."""
    return seeded_rng(model_id, "calibration").standard_normal((2, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)

"""Deterministic models for the onnxruntime backend: a single Conv per catalogue case, ResNet-50 and MobileNetV2.

Why the graphs are written with onnx.helper rather than exported with torch.onnx: the exported bytes depend on
the exporter (TorchScript vs dynamo, and its version in each image), so two images would run different graphs
and a hash comparison across images would confound the exporter with onnxruntime. Here one architecture
description (torchvision's, layer for layer and with torchvision's parameter names) drives two builders: one
emits the ONNX graph, the other evaluates the same network in float64 with PyTorch as the reference. Where
torchvision imports, the reference is torchvision's own module with the same weights loaded, and a test checks
that both agree (names, shapes and outputs).

Weights come from numpy's PCG64 seeded per parameter name (the same on every machine). BatchNorm running
statistics are calibrated once on a seeded random batch and quantised (variance to 2^(k/4), mean to 1/16 of
a standard deviation), so float64 rounding noise between machines cannot change a single weight bit, and
activations stay O(1) through the 50 layers as in a trained network.
"""

from __future__ import annotations

import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.cases import Case
from ...measurement.digest import sha256_file

BUILDER_VERSION = 1  # bump when a graph or its weights change: cached files are keyed by it
OPSET = 17
IR_VERSION = 8  # loadable by onnxruntime >= 1.14
INPUT = "input"
OUTPUT = "logits"
IMAGE_SIZE = 224
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BN_EPS = 1e-5
MODELS = ("resnet50", "mobilenetv2")
SAMPLE_IMAGES = ("astronaut", "chelsea", "coffee")  # scikit-image's sample photographs, cropped
SAMPLE_DATA = Path(__file__).resolve().parents[2] / "data" / "sample_images.npz"


class UnknownModel(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def check_model(model_id: str) -> str:
    if model_id not in MODELS:
        raise UnknownModel(f"unknown model {model_id!r}; known: {', '.join(MODELS)}")
    return model_id


def cache_dir() -> Path:
    """Where built models live (not committed): CONVBENCH_CACHE, else ~/.cache/convbench."""
    root = os.environ.get("CONVBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "convbench")
    path = Path(root) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _rng(model_id: str, name: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(zlib.crc32(f"{model_id}:{name}".encode())))


# --------------------------------------------------------------------------------------------------------------
# Architectures, written once against a builder. Names are torchvision's state_dict keys.


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
    rng = _rng(model_id, name)
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


# --------------------------------------------------------------------------------------------------------------
# Inputs


def _resample_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Antialiased bilinear (triangle filter widened by the scale when shrinking), rows summing to one."""
    scale = n_in / n_out
    support = max(scale, 1.0)
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        xs = np.arange(lo, hi)
        w = np.maximum(0.0, 1.0 - np.abs((xs - center + 0.5) / support))
        m[i, lo:hi] = w / w.sum()
    return m


def imagenet_crop(img: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """HWC uint8 RGB -> size x size x 3 uint8, the ImageNet way: shorter side to 256/224*size, centre crop.

    The resize is rounded back to uint8 (as PIL does), so the crop is the same bits on every machine.
    """
    if img.ndim != 3 or img.shape[2] < 3:
        raise ValueError(f"expected an RGB image (H, W, 3), got shape {img.shape}")
    img = img[:, :, :3].astype(np.float64)
    h, w = img.shape[:2]
    short = round(size * 256 / 224)
    nh, nw = (short, max(short, round(w * short / h))) if h <= w else (max(short, round(h * short / w)), short)
    mh, mw = _resample_matrix(h, nh), _resample_matrix(w, nw)
    resized = np.stack([mh @ img[:, :, c] @ mw.T for c in range(3)], axis=2)
    resized = np.clip(np.floor(resized + 0.5), 0, 255).astype(np.uint8)
    top, left = (nh - size) // 2, (nw - size) // 2
    return np.ascontiguousarray(resized[top:top + size, left:left + size])


def imagenet_normalize(crop: np.ndarray) -> np.ndarray:
    """HWC uint8 crop -> 3xHxW float32: scaled to [0, 1], ImageNet mean and std, channels first."""
    x = crop.astype(np.float32) / np.float32(255)
    mean = np.array(IMAGENET_MEAN, dtype=np.float32)
    std = np.array(IMAGENET_STD, dtype=np.float32)
    return np.ascontiguousarray(((x - mean) / std).transpose(2, 0, 1))


def imagenet_preprocess(img: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """HWC uint8 RGB -> 3xHxW float32 the ImageNet way (imagenet_crop, then imagenet_normalize)."""
    return imagenet_normalize(imagenet_crop(img, size))


def sample_crops() -> dict[str, np.ndarray]:
    """The real-image input: scikit-image's sample photographs, already cropped (uint8, 224x224x3 each).

    Shipped as package data (harness/data/sample_images.npz, made by scripts/make_sample_images.py) so that
    no image or host needs scikit-image; tests/test_models.py proves the crops equal scikit-image's.
    """
    with np.load(SAMPLE_DATA) as data:
        return {name: data[name] for name in SAMPLE_IMAGES}


def model_inputs(model_id: str, batch: int = 1) -> dict[str, np.ndarray]:
    """{"image": real photographs (the shipped sample crops, cycled to ``batch``), "random": seeded N(0,1)}."""
    check_model(model_id)
    crops = sample_crops()
    images = [imagenet_normalize(crops[SAMPLE_IMAGES[i % len(SAMPLE_IMAGES)]]) for i in range(batch)]
    rng = _rng(model_id, f"input.random.n{batch}")
    return {"image": np.stack(images), "random": rng.standard_normal((batch, 3, IMAGE_SIZE, IMAGE_SIZE),
                                                                     dtype=np.float32)}


def calibration_batch(model_id: str) -> np.ndarray:
    return _rng(model_id, "calibration").standard_normal((2, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)


# --------------------------------------------------------------------------------------------------------------
# Building and loading


@dataclass(frozen=True)
class BuiltModel:
    model_id: str
    path: Path
    batch: int
    sha256: str
    conv_nodes: tuple[str, ...]  # Conv node names in graph order (torchvision module names)


def make_params(model_id: str) -> dict[str, np.ndarray]:
    """Seeded parameters with calibrated, quantised BN statistics (needs torch, CPU float64)."""
    import torch

    params: dict[str, np.ndarray] = {}
    with torch.no_grad():
        ARCHITECTURES[check_model(model_id)](TorchBuilder(model_id, params, calibrate=True),
                                             torch.from_numpy(calibration_batch(model_id)).double())
    return params


def build_graph(model_id: str, params: dict[str, np.ndarray], batch: int):
    from onnx import TensorProto, helper, numpy_helper

    params = dict(params)
    params["const.zero"] = np.array(0.0, dtype=np.float32)
    params["const.six"] = np.array(6.0, dtype=np.float32)
    b = OnnxBuilder(params)
    out = ARCHITECTURES[check_model(model_id)](b, INPUT)
    b.nodes[-1].output[0] = OUTPUT
    del out
    inits = [numpy_helper.from_array(params[n], n) for n in b.used]
    graph = helper.make_graph(
        b.nodes, model_id, [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [batch, 3, IMAGE_SIZE,
                                                                                     IMAGE_SIZE])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [batch, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="convbench",
                              producer_version=str(BUILDER_VERSION))
    model.ir_version = IR_VERSION
    return model


def conv_node_names(model) -> tuple[str, ...]:
    return tuple(n.name for n in model.graph.node if n.op_type == "Conv")


def build(model_id: str, batch: int = 1, directory: Path | None = None) -> BuiltModel:
    """The ONNX file of ``model_id`` at ``batch``, built once and cached (written atomically)."""
    import onnx

    check_model(model_id)
    directory = Path(directory) if directory else cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{model_id}.n{batch}.v{BUILDER_VERSION}.onnx"
    if not path.exists():
        model = build_graph(model_id, make_params(model_id), batch)
        onnx.checker.check_model(model)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        onnx.save_model(model, str(tmp))
        os.replace(tmp, path)
    model = onnx.load(str(path), load_external_data=False)
    return BuiltModel(model_id, path, batch, sha256_file(path), conv_node_names(model))


def load_params(path: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if not t.name.startswith("const.")}


def torch_state(params: dict[str, np.ndarray]) -> dict:
    """Parameters as torch tensors (copies): load_params gives onnx's read-only views of the initializer
    bytes, which torch.from_numpy takes with a UserWarning (undefined behaviour if anything writes to them)."""
    import torch

    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in params.items()}


def torchvision_module(model_id: str, params: dict[str, np.ndarray]):
    """torchvision's own module with ``params`` loaded, or None when torchvision does not import here."""
    try:
        import torchvision
    except Exception:  # ImportError, or RuntimeError "operator torchvision::nms does not exist"
        return None
    ctor = {"resnet50": torchvision.models.resnet50, "mobilenetv2": torchvision.models.mobilenet_v2}[model_id]
    module = ctor(weights=None)
    state = torch_state(params)
    missing, unexpected = module.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise RuntimeError(f"torchvision {model_id} does not match the builder: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
    return module.eval().double()


def reference(model_id: str, params: dict[str, np.ndarray], x: np.ndarray, source: str = "auto"):
    """(float64 logits, source) of the network on ``x``: torchvision where it imports, else the builder.

    ``source``: "auto", "torchvision" or "builder".
    """
    import torch

    module = torchvision_module(model_id, params) if source in ("auto", "torchvision") else None
    if source == "torchvision" and module is None:
        raise RuntimeError("torchvision does not import here")
    xt = torch.from_numpy(np.ascontiguousarray(x)).double()
    with torch.no_grad():
        if module is not None:
            return module(xt).numpy(), f"torchvision {__import__('torchvision').__version__} float64"
        return ARCHITECTURES[model_id](TorchBuilder(model_id, params), xt).numpy(), "builder float64"


def fp32_yardstick(model_id: str, params: dict[str, np.ndarray], x: np.ndarray, ref: np.ndarray) -> float:
    """Relative L2 error of an independent float32 evaluation (PyTorch CPU): this network's fp32 error level.

    Model outputs are classed by comparing their error with this one (see docs/ort.md), since the per-conv
    bounds of accuracy.py do not hold after 50 layers of error propagation.
    """
    import torch

    with torch.no_grad():
        y = ARCHITECTURES[model_id](TorchBuilder(model_id, params, dtype=torch.float32),
                                    torch.from_numpy(np.ascontiguousarray(x))).double().numpy()
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


# --------------------------------------------------------------------------------------------------------------
# Single-Conv models for catalogue cases

ONNX_DTYPES = {"fp32": "FLOAT", "fp16": "FLOAT16"}
NUMPY_DTYPES = {"fp32": np.float32, "fp16": np.float16}


def conv_case_graph(case: Case, dtype: str, w: np.ndarray):
    """One Conv node: input ``x`` (the case's shape), weight initializer ``w``, output ``y``."""
    from onnx import TensorProto, helper, numpy_helper

    if dtype not in ONNX_DTYPES:
        raise ValueError(f"no ONNX Conv model for dtype {dtype}")
    et = getattr(TensorProto, ONNX_DTYPES[dtype])
    node = helper.make_node("Conv", ["x", "w"], ["y"], name=case.id, kernel_shape=[case.r, case.s],
                            pads=[case.pad[0], case.pad[1], case.pad[0], case.pad[1]], strides=list(case.stride),
                            dilations=list(case.dilation), group=case.groups)
    graph = helper.make_graph([node], case.id, [helper.make_tensor_value_info("x", et, list(case.x_shape()))],
                              [helper.make_tensor_value_info("y", et, list(case.y_shape()))],
                              [numpy_helper.from_array(w.astype(NUMPY_DTYPES[dtype]), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="convbench",
                              producer_version=str(BUILDER_VERSION))
    model.ir_version = IR_VERSION
    return model


def build_conv_case(case: Case, dtype: str, directory: Path | None = None) -> tuple[Path, str]:
    """(path, sha256) of the single-Conv model of ``case`` in ``dtype``, weights from accuracy.host_inputs."""
    import onnx

    from ...measurement.accuracy import host_inputs

    directory = Path(directory) if directory else cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"conv.{case.id}.{dtype}.v{BUILDER_VERSION}.onnx"
    if not path.exists():
        model = conv_case_graph(case, dtype, host_inputs(case)["w"])
        onnx.checker.check_model(model)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        onnx.save_model(model, str(tmp))
        os.replace(tmp, path)
    return path, sha256_file(path)

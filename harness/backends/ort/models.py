"""The ONNX models onnxruntime runs: ResNet-50 and MobileNetV2 (architectures.py) built, cached and loaded, their
float64 references, and a single Conv per catalogue case.

Graphs are written with onnx.helper rather than exported with torch.onnx (architectures.py says why). Where
torchvision imports, the reference is torchvision's own module with the same weights loaded, and a test checks
that both agree (names, shapes and outputs). Built files are cached under CONVBENCH_CACHE, keyed by
BUILDER_VERSION, and written atomically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.cases import Case
from ...core.intake import sha256_file
from .architectures import (
    ARCHITECTURES,
    IMAGE_SIZE,
    OnnxBuilder,
    TorchBuilder,
    calibration_batch,
    check_model,
)

BUILDER_VERSION = 1  # bump when a graph or its weights change: cached files are keyed by it
OPSET = 17
IR_VERSION = 8  # loadable by onnxruntime >= 1.14
INPUT = "input"
OUTPUT = "logits"


def cache_dir() -> Path:
    """Where built models live (not committed): CONVBENCH_CACHE, else ~/.cache/convbench."""
    root = os.environ.get("CONVBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "convbench")
    path = Path(root) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _save_once(path: Path, make) -> None:
    """Write ``make()``'s model to ``path`` unless it is there: checked, then written atomically (a parallel
    builder never sees half a file)."""
    import onnx

    if path.exists():
        return
    model = make()
    onnx.checker.check_model(model)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    onnx.save_model(model, str(tmp))
    os.replace(tmp, path)


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
    _save_once(path, lambda: build_graph(model_id, make_params(model_id), batch))
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
    from ...measurement.accuracy import host_inputs

    directory = Path(directory) if directory else cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"conv.{case.id}.{dtype}.v{BUILDER_VERSION}.onnx"
    _save_once(path, lambda: conv_case_graph(case, dtype, host_inputs(case)["w"]))
    return path, sha256_file(path)

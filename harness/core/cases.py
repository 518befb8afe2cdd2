"""The words every layer shares (backends, directions, dtypes, layouts, maths, algorithms, search modes,
precision classes) and the case catalogue: named, stable conv problems that every backend runs.

Ids are part of the data format (results from different nights are joined on them), so a case is never
renamed or reshaped; a new shape gets a new id.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass

# --- The words ---
# The words the suite, the CLI, the store and the report share, each listed once.
#
# The asv suite (benchmarks/) builds its parameters from these, the backends enumerate them, the schema checks
# records against them and the report orders its tables by them, so a new dtype or algorithm is added here and
# nowhere else. Values are the names records carry: cuDNN's enum names without their prefix
# (``CUDNN_CONVOLUTION_FWD_ALGO_`` ...), in cuDNN's enum order (the binding uses the position as the enum value).

BACKENDS = ("cudnn", "torch", "ort")
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
DTYPES = ("fp32", "fp16", "bf16")
LAYOUTS = ("NCHW", "NHWC")
# cudnnMathType_t, in enum order
MATHS = ("DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION", "FMA")

# cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, in enum order
FWD_ALGOS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
             "WINOGRAD_NONFUSED")
BWD_DATA_ALGOS = ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED")
BWD_FILTER_ALGOS = ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING")
ALGOS = {"fwd": FWD_ALGOS, "bwd_data": BWD_DATA_ALGOS, "bwd_filter": BWD_FILTER_ALGOS}

# onnxruntime's CUDA EP option cudnn_conv_algo_search
SEARCH_MODES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")

# the precision an output's error puts it in (measurement.accuracy.precision_class)
PRECISION_CLASSES = ("fp32", "tf32", "fp16", "bf16", "broken")


def expected_class(dtype: str) -> str:
    """The class an output of this dtype lands in when nothing reduced the precision of the arithmetic."""
    return {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}[dtype]


# --- The cases ---

@dataclass(frozen=True)
class Case:
    id: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: tuple[int, int] = (0, 0)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    note: str = ""

    @property
    def out_hw(self) -> tuple[int, int]:
        p = (self.h + 2 * self.pad[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1
        q = (self.w + 2 * self.pad[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1
        return p, q

    @property
    def reduction(self) -> int:
        """Length of each output's dot product (C/groups x R x S): what error bounds scale with."""
        return self.c // self.groups * self.r * self.s

    @property
    def flops(self) -> int:
        p, q = self.out_hw
        return 2 * self.n * self.k * p * q * self.reduction

    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    def w_shape(self) -> tuple[int, int, int, int]:
        return (self.k, self.c // self.groups, self.r, self.s)

    def y_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.k, *self.out_hw)

    def describe(self) -> str:
        p, q = self.out_hw
        extra = []
        if self.pad != (0, 0):
            extra.append(f"pad {self.pad[0]}x{self.pad[1]}")
        if self.stride != (1, 1):
            extra.append(f"stride {self.stride[0]}")
        if self.dilation != (1, 1):
            extra.append(f"dilation {self.dilation[0]}")
        if self.groups != 1:
            extra.append(f"groups {self.groups}")
        tail = f" ({', '.join(extra)})" if extra else ""
        return (f"{self.n}x{self.c}x{self.h}x{self.w} input, {self.k}x{self.c // self.groups}x{self.r}x{self.s}"
                f" filter -> {self.n}x{self.k}x{p}x{q}{tail}")

    def to_dict(self) -> dict:
        return asdict(self)


def _resnet50_layers() -> list[tuple[str, int, int, int, int, int]]:
    """Every conv of torchvision's ResNet-50 (v1.5: stride on the 3x3) as (name, C, H, K, kernel, stride)."""
    layers = [("conv1", 3, 224, 64, 7, 2)]
    cin, hw = 64, 56
    for li, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        stride = 1 if li == 1 else 2
        for b in range(blocks):
            s = stride if b == 0 else 1
            name = f"layer{li}.{b}"
            layers.append((f"{name}.conv1", cin, hw, width, 1, 1))
            layers.append((f"{name}.conv2", width, hw, width, 3, s))
            out_hw = hw // s
            layers.append((f"{name}.conv3", width, out_hw, width * 4, 1, 1))
            if b == 0:
                layers.append((f"{name}.downsample", cin, hw, width * 4, 1, s))
            cin, hw = width * 4, out_hw
    return layers


def resnet50_calls(batch: int = 32) -> dict[str, int]:
    """How many times one ResNet-50 pass calls each layer shape, by the case id that measures it (the first layer
    with that shape): e.g. layer1.0.conv2's 3x3 shape three times, layer3.1.conv1's 1x1 five times."""
    out: dict[str, int] = {}
    first: dict[tuple, str] = {}
    for name, c, hw, k, ks, stride in _resnet50_layers():
        case = first.setdefault((c, hw, k, ks, stride), f"resnet50.{name}.n{batch}")
        out[case] = out.get(case, 0) + 1
    return out


def _build() -> dict[str, Case]:
    cases: list[Case] = []
    # The seed report: 1x64x512x512 input, 64x64x3x3 filter, no padding; and its narrow variants.
    for ch in (64, 8, 4):
        cases.append(Case(f"seed.c{ch}", 1, ch, 512, 512, ch, 3, 3, note="seed report shape"))
    # Every distinct conv layer of ResNet-50 at batch 1 and 32, named by the first layer with that shape.
    for batch in (1, 32):
        seen: set[tuple] = set()
        for name, c, hw, k, ks, stride in _resnet50_layers():
            shape = (c, hw, k, ks, stride)
            if shape in seen:
                continue
            seen.add(shape)
            pad = ks // 2
            cases.append(Case(f"resnet50.{name}.n{batch}", batch, c, hw, hw, k, ks, ks, (pad, pad),
                              (stride, stride), note="ResNet-50 layer" + (", strided 7x7 stem" if ks == 7 else "")))
    cases += [
        Case("depthwise3x3.n32", 32, 144, 56, 56, 144, 3, 3, (1, 1), groups=144, note="MobileNetV2-style depthwise"),
        Case("grouped3x3.n32", 32, 128, 56, 56, 128, 3, 3, (1, 1), groups=32, note="ResNeXt-style grouped"),
        Case("dilated3x3.n8", 8, 256, 64, 64, 256, 3, 3, (2, 2), dilation=(2, 2), note="dilated 3x3 (DeepLab-style)"),
        Case("pointwise1x1.c2048.n8", 8, 2048, 14, 14, 2048, 1, 1, note="1x1 with 2048 channels"),
    ]
    # Small enough for CI on a CPU, yet covering each feature of the full catalogue.
    cases += [
        Case("quick.seed", 1, 8, 32, 32, 8, 3, 3, note="seed shape, shrunk"),
        Case("quick.stem7x7", 1, 3, 32, 32, 8, 7, 7, (3, 3), (2, 2), note="strided 7x7 stem, shrunk"),
        Case("quick.pointwise", 2, 64, 8, 8, 32, 1, 1, note="1x1, shrunk"),
        Case("quick.depthwise", 1, 16, 16, 16, 16, 3, 3, (1, 1), groups=16, note="depthwise, shrunk"),
        Case("quick.grouped", 1, 16, 16, 16, 16, 3, 3, (1, 1), groups=4, note="grouped, shrunk"),
        Case("quick.dilated", 1, 8, 16, 16, 8, 3, 3, (2, 2), dilation=(2, 2), note="dilated, shrunk"),
    ]
    return {c.id: c for c in cases}


CATALOGUE: dict[str, Case] = _build()

SETS: dict[str, list[str]] = {
    "quick": [i for i in CATALOGUE if i.startswith("quick.")],
    "seed": [i for i in CATALOGUE if i.startswith("seed.")],
    "resnet50": [i for i in CATALOGUE if i.startswith("resnet50.")],
    # The default sweep: the seed cases and every ResNet-50 layer at batch 32.
    "default": [i for i in CATALOGUE if i.startswith("seed.") or (i.startswith("resnet50.") and i.endswith(".n32"))],
    "full": [i for i in CATALOGUE if not i.startswith("quick.")],
}
DEFAULT_SET = "default"  # what every command's --cases means when not given (scripts/bench.sh passes quick on a CPU)


class UnknownCase(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; a user should read plain words
        return self.args[0]


def get(case_id: str) -> Case:
    try:
        return CATALOGUE[case_id]
    except KeyError:
        close = difflib.get_close_matches(case_id, list(CATALOGUE) + list(SETS), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `convbench cases` lists them"
        raise UnknownCase(f"unknown case {case_id!r}{hint}") from None


def select(names: list[str] | str) -> list[Case]:
    """Resolve case ids and set names (quick, seed, resnet50, default, full), keeping order, no repeats."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    out: dict[str, Case] = {}
    for name in names:
        for cid in SETS.get(name, [name]):
            out.setdefault(cid, get(cid))
    return list(out.values())

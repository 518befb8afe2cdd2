"""The asv suite's shape as data: each class of benchmarks/ (module, name, backend, direction, kind, parameters,
methods) and the ``has_data`` predicate its ``setup`` calls, declared once.

benchmarks/ builds its classes from this table, and `convbench bench`'s selection (asvselect.py) reads the same
table, so the library never imports the suite to learn what asv will run.

The sets are wide on purpose: asv starts one process per parameter set (7-14 ms each, whatever the set does), so
a set per combination (4,244 on the H200 forward night) made asv a third of the job. A time set is one case,
dtype (PyTorch: precision) and layout, and replays the samples of the fastest combination of that group (the
algorithm and math type, or PyTorch's settings, a framework that autotunes would pick); the numerics are per case
and dtype, the count of unstable combinations per case. Every case stays an asv parameter, so `asv compare` and
`asv publish` show every case; every combination, with its own samples, stays in the run journal and the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..core import cases as vocab

TIME, NUMERICS, STABILITY, ORT = "time", "numerics", "stability", "ort"
SUITE_MODULES = ("bench_cudnn", "bench_ort", "bench_torch")
# PyTorch's operand precision on a GPU: TF32 applies to fp32 only, so it rides on the dtype (no n/a member)
TORCH_GPU_PRECISIONS = ("fp32/tf32", "fp32/ieee", "fp16", "bf16")
ORT_SETTINGS = tuple(f"{s},tf32={t},ws={w}" for s in vocab.SEARCH_MODES for t in (0, 1) for w in (0, 1)) + ("cpu",)
ORT_METHODS = ("track_latency_iobinding", "track_latency_numpy", "track_session_create", "track_first_inference",
               "track_rel_l2_error", "track_distinct_outputs", "track_max_spread")
_CLASS_WORD = {"cudnn": "Cudnn", "torch": "Torch"}
_DIRECTION_WORD = {"fwd": "Forward", "bwd_data": "BackwardData", "bwd_filter": "BackwardFilter"}
_KIND_WORD = {TIME: "", NUMERICS: "Numerics", STABILITY: "Stability"}
_METHODS = {TIME: ("time_conv",), NUMERICS: ("track_worst_rel_l2_error",), STABILITY: ("track_unstable_combinations",)}
_DOCS = {
    TIME: "{what}: per case, dtype and layout, the samples of the fastest combination ({over}).",
    NUMERICS: "{what}: per case and dtype, the worst relative L2 error against float64 ({over}).",
    STABILITY: "{what}: per case, the combinations whose output bits were not reproducible.",
}
_WHAT = {("cudnn", "fwd"): "cudnnConvolutionForward", ("cudnn", "bwd_data"): "cudnnConvolutionBackwardData",
         ("cudnn", "bwd_filter"): "cudnnConvolutionBackwardFilter", ("torch", "fwd"): "F.conv2d forward",
         ("torch", "bwd_data"): "F.conv2d's gradient with respect to the input",
         ("torch", "bwd_filter"): "F.conv2d's gradient with respect to the weight"}
_OVER = {"cudnn": "over algorithm and math type", "torch": "over PyTorch's cudnn.benchmark and deterministic"}


@dataclass(frozen=True)
class AsvClass:
    """One class of the asv suite: where it lives, what sweep it reads, its parameters and methods."""

    module: str
    name: str
    backend: str
    direction: str | None
    kind: str
    param_names: tuple[str, ...]
    methods: tuple[str, ...]
    doc: str

    @property
    def sweeps(self) -> tuple[str, str] | None:
        """(backend, direction) of the sweep `convbench bench` measures before asv, or None (ORT sweeps itself)."""
        return None if self.kind == ORT else (self.backend, self.direction or "")

    def params(self, gpu: bool, models: tuple[str, ...] = ()) -> list[list[str]]:
        """asv's parameter lists; the case axis is the whole catalogue, whatever one run measures, so that a
        published site shows every run's cases (a case a run did not measure has no data, and is not run)."""
        if self.kind == ORT:
            return [list(models), list(ORT_SETTINGS)]
        axes = {"case": list(vocab.CATALOGUE), "dtype": list(vocab.DTYPES), "layout": list(vocab.LAYOUTS),
                "precision": list(TORCH_GPU_PRECISIONS if gpu else vocab.DTYPES)}
        return [axes[p] for p in self.param_names]

    def benchmark_names(self) -> list[str]:
        return [f"{self.module}.{self.name}.{m}" for m in self.methods]

    def has_data(self, data: SweepData | None, values: tuple) -> bool:
        """Whether the parameter set ``values`` has a number in ``data`` (the suite's ``setup`` says n/a
        otherwise, and `convbench bench` does not hand the set to asv)."""
        if self.kind == ORT or data is None:
            return True
        return _key(values) in data.groups[self.kind]


def _key(values: tuple) -> tuple:
    return tuple(values) if len(values) > 1 else values[0]


@dataclass
class SweepData:
    """What one sweep's classes read, reduced to their parameter sets: ``groups[kind][key]`` (TIME: (median s,
    samples in s as float64 bytes) of the group's fastest ok combination; NUMERICS: the worst rel L2; STABILITY:
    the unstable count). Small, since asv loads it whole in every parameter set's process."""

    groups: dict[str, dict]


def _sweep_classes(backend: str, direction: str) -> list[AsvClass]:
    module = f"bench_{backend}"
    precision = "precision" if backend == "torch" else "dtype"
    base = f"{_CLASS_WORD[backend]}{_DIRECTION_WORD[direction]}"
    names = {TIME: ("case", precision, "layout"), NUMERICS: ("case", precision), STABILITY: ("case",)}
    return [AsvClass(module, base + _KIND_WORD[kind], backend, direction, kind, names[kind], _METHODS[kind],
                     _DOCS[kind].format(what=_WHAT[backend, direction], over=_OVER[backend]))
            for kind in (TIME, NUMERICS, STABILITY)]


CLASSES: tuple[AsvClass, ...] = tuple(
    cls for backend in ("cudnn", "torch") for direction in vocab.DIRECTIONS for cls in _sweep_classes(backend, direction)
) + (AsvClass("bench_ort", "OrtModels", "ort", None, ORT, ("model", "setting"), ORT_METHODS,
              "onnxruntime on whole models: latency, session creation, first inference, error, drift."),)


def classes(directions: tuple[str, ...] | list[str], module: str | None = None) -> list[AsvClass]:
    """The classes the suite defines when CONVBENCH_DIRECTIONS is ``directions`` (ORT's class always)."""
    return [c for c in CLASSES if (c.direction is None or c.direction in directions)
            and (module is None or c.module == module)]


def ort_models() -> tuple[str, ...]:
    """The models of the ORT class (CONVBENCH_ORT_MODELS, default resnet50,mobilenetv2)."""
    return tuple(m for m in os.environ.get("CONVBENCH_ORT_MODELS", "resnet50,mobilenetv2").split(",") if m)


def precision_of(rec: dict) -> str:
    """PyTorch's precision label of a record: the dtype, with fp32's TF32 flag when the record set one."""
    tf32 = (rec.get("settings") or {}).get("tf32")
    if rec["dtype"] != "fp32" or tf32 is None:
        return rec["dtype"]
    return "fp32/tf32" if tf32 else "fp32/ieee"

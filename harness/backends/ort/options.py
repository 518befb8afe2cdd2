"""The onnxruntime settings: execution providers, the session settings of a record, ModelOptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...core.records import Timing
from ...measurement.timing import TimingPolicy
from .sessions import SESSION_FUNCTION

IO_MODES = ("iobinding", "numpy")
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"
NA = "n/a"
CPU_NOTE = "cuDNN search settings do not apply to the CPU EP (MLAS kernels); recorded as n/a"
ORT_CONV_SOURCE = "onnxruntime/core/providers/cuda/nn/conv.cc"


@dataclass
class ModelOptions:
    """Knobs of the onnxruntime runs; the sweep's SweepOptions fills what it has (see from_options)."""

    device: str = "cuda"
    batch: int = 1
    sessions: int = 5  # fresh sessions in one process, per setting
    processes: int = 5  # fresh processes, per setting (the first also holds the in-process sessions)
    repeats: int = 2  # in-place repeats of the first input in the first session
    case_sessions: int = 3  # fresh sessions per setting for single-Conv catalogue cases
    parallel: int | None = None  # concurrent drift workers; None: default_parallel()
    log: bool = True  # capture cuDNN's API log and the frontend log in drift workers
    # which 5-session processes also write cuDNN's API log (slow: every cuDNN call): "setting" = every setting's,
    # "mode" = the first setting of each search mode only (the frontend log still names every engine; onnxruntime
    # <= 1.19 keeps "setting", its engines are in the API log only)
    api_log: str = "setting"
    # onnxruntime's grid keeps the 0.5 % noise target its H200 figures were measured with (docs/ort.md); the
    # tighter default of the conv sweeps was not measured on it.
    timing: TimingPolicy = field(default_factory=lambda: TimingPolicy(
        warmup_ms=50.0, min_samples=20, max_samples=300, budget_ms=400.0, batch=1, keep_samples=64,
        noise_target=0.005))
    case_timing: TimingPolicy = field(default_factory=lambda: TimingPolicy(
        warmup_ms=10.0, min_samples=7, max_samples=200, budget_ms=100.0, batch=1, keep_samples=64,
        noise_target=0.005))
    directions: tuple[str, ...] = ("fwd",)
    dtypes: tuple[str, ...] = ("fp32", "fp16")
    layouts: tuple[str, ...] = ("NCHW",)
    cache_dir: str | None = None
    keep_logs: str | None = None  # directory to keep gzipped cuDNN logs of the first drift worker per setting
    worker_timeout_s: float = 600.0
    cpu_ep: bool = True  # also run the CPU EP on GPU hosts (a cross-check; always on CPU hosts)
    # what each session process runs (WorkerPool.call names it); the tests name a fault-injecting one
    session_function: str = SESSION_FUNCTION

    @classmethod
    def from_options(cls, options: Any) -> ModelOptions:
        if isinstance(options, ModelOptions):
            return options
        out = cls()
        for name in ("device", "directions", "dtypes", "layouts", "repeats"):
            if getattr(options, name, None) is not None:
                setattr(out, name, getattr(options, name))
        for name in ("batch", "sessions", "processes", "case_sessions", "parallel", "log", "cache_dir",
                     "keep_logs", "worker_timeout_s", "cpu_ep", "api_log"):
            value = getattr(options, f"ort_{name}", None)
            if value is not None:
                setattr(out, name, value)
        return out


def timing_of(d: dict | None) -> Timing | None:
    return Timing(**d) if d else None


def combo_settings(provider: str, search: str, tf32: Any, ws: Any, io: str) -> tuple[tuple[str, object], ...]:
    return (("cudnn_conv_algo_search", search), ("use_tf32", tf32), ("cudnn_conv_use_max_workspace", ws),
            ("provider", provider), ("io", io))


def provider_options(search: str, tf32: int, ws: int) -> dict[str, str]:
    return {"device_id": "0", "cudnn_conv_algo_search": search, "use_tf32": str(tf32),
            "cudnn_conv_use_max_workspace": str(ws)}


def session_key(settings: dict) -> str:
    return "|".join(f"{k}={settings[k]}" for k in ("provider", "cudnn_conv_algo_search", "use_tf32",
                                                     "cudnn_conv_use_max_workspace"))


def policy_dict(p: TimingPolicy) -> dict:
    from dataclasses import asdict

    return asdict(p)

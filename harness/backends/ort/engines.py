"""Which cuDNN path and engine onnxruntime's Conv takes: what its source says for this version, and what
the cuDNN logs of a worker show each Conv node ran.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import cudnn_log
from .options import ORT_CONV_SOURCE
from .sessions import WorkerRun


def ort_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


def version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def expected_conv_path(version: str | None) -> dict[str, Any]:
    """What onnxruntime's source says its CUDA Conv does with each search mode, for this version."""
    if version is None:
        return {"path": None}
    if version_tuple(version) >= (1, 20):
        return {"path": "cudnn_frontend", "EXHAUSTIVE": "heuristics mode B", "HEURISTIC": "heuristics mode A",
                "DEFAULT": "heuristics FALLBACK", "max_workspace": "not used by the frontend conv path",
                "source": f"{ORT_CONV_SOURCE} (Conv::UpdateState, CreateCudnnFeExecutionPlan; PR #19470)"}
    return {"path": "legacy", "EXHAUSTIVE": "cudnnFindConvolutionForwardAlgorithmEx (timed)",
            "HEURISTIC": "cudnnGetConvolutionForwardAlgorithm_v7", "DEFAULT": "IMPLICIT_PRECOMP_GEMM",
            "max_workspace": "caps the workspace cudnnFind may use", "source": f"{ORT_CONV_SOURCE} (<= 1.19)"}


def read_log(path: str | None, limit: int = 512 << 20) -> str:
    if not path or not Path(path).exists():
        return ""
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


def node_algorithms(w: WorkerRun, cfg_result: dict, graph_convs: list[str]) -> dict[str, Any]:
    """Per-session {conv node: engine/algo} of one logged worker, or why it could not be told."""
    t0 = time.monotonic()
    api = parse_api_log(w.api_log)
    fe_text = read_log(w.fe_log)
    fe = cudnn_log.parse_frontend(fe_text) if fe_text else None
    seq, source = cudnn_log.conv_sequence(api, fe)
    info: dict[str, Any] = {
        "source": source, "executions": len(seq),
        "cudnn_version_loaded": cudnn_log.version_string(api.version) if api else None,
        "conv_path_observed": api.conv_path() if api else ("cudnn_frontend" if fe and fe.executions else None),
        "find_calls": api.finds if api else None, "get_v7_calls": api.get_v7 if api else None,
        "api_backend_executes": sum(1 for k, _ in api.events if k == "backend") if api else None,
        "frontend_heuristic_queries": fe.heuristic_queries if fe else None,
        "frontend_graph_executions": fe.graph_executions if fe else None,
        "log_bytes": {k: Path(p).stat().st_size for k, p in (("api", w.api_log), ("frontend", w.fe_log))
                      if p and Path(p).exists()},
    }
    order = cfg_result.get("conv_order") or []
    nodes = [_graph_name(n, graph_convs) for n in order] if order else list(graph_convs)
    info["node_order_from"] = "profile" if order else "graph"
    runs = [s.get("runs") for s in cfg_result.get("sessions", [])]
    if not seq:
        info["why_unmapped"] = "no conv execution in the logs (logging off, or a library without logging)"
        return info
    if any(r is None for r in runs):
        info["why_unmapped"] = "a timed session is in this worker"
        return info
    sessions, why = cudnn_log.assign(seq, runs, nodes)
    if why:
        info["why_unmapped"] = why
        info["sequence_head"] = seq[:8]
    else:
        info["sessions"] = sessions
    info["parse_s"] = round(time.monotonic() - t0, 3)
    return info


def parse_api_log(path: str | None) -> cudnn_log.ApiLog | None:
    if not path or not Path(path).exists() or not Path(path).stat().st_size:
        return None
    return cudnn_log.parse_api_file(path)


def _graph_name(profiled: str, graph_convs: list[str]) -> str:
    """onnxruntime may rename a fused node; map it back to the graph's Conv name it contains."""
    if profiled in graph_convs:
        return profiled
    hits = [g for g in graph_convs if g in profiled]
    return max(hits, key=len) if hits else profiled

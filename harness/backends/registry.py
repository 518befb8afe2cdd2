"""The registered backends, by name: the one place that imports every backend (each imports only the interface
in __init__.py), so a new backend is one branch here and one name in BACKENDS."""

from __future__ import annotations

from . import Backend

BACKENDS = ("cudnn", "torch", "ort")


def get_backend(name: str) -> Backend:
    if name == "cudnn":
        from .cudnn import CudnnBackend

        return CudnnBackend()
    if name == "torch":
        from .pytorch import TorchBackend

        return TorchBackend()
    if name == "ort":
        from .ort import OrtBackend

        return OrtBackend()
    raise ValueError(f"unknown backend {name!r}; known: cudnn, torch, ort")


def availability() -> list[dict]:
    """For each registered backend: whether it can run here, on what (``detail``), or why not (`convbench doctor`)."""
    out = []
    for name in BACKENDS:
        try:
            backend = get_backend(name)
            why = backend.available()
        except ImportError as exc:
            why = f"not built into this install ({exc.name})"
        detail = ""
        if name == "cudnn" and not why:
            lib = backend.cudnn
            detail = f" (cuDNN {lib.version} at {lib.path})"
        elif name == "torch" and not why:
            import torch

            detail = " on CUDA" if torch.cuda.is_available() else " on the CPU only"
        elif name == "ort" and not why:
            cuda_why = backend.cuda_reason()
            detail = " on CUDA and the CPU" if not cuda_why else f" on the CPU EP only: {cuda_why}"
        out.append({"name": name, "can_run": why is None, "detail": detail.strip() or None, "why_not": why})
    return out

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

"""Shared test setup: the `gpu` marker skips cleanly where CUDA is absent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    return None if torch.cuda.is_available() else "no CUDA device"


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or _cuda_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))


@pytest.fixture
def faults(monkeypatch):
    """Turn on the fault-injecting test backends with a plan {case: fault} (crash, hang, raise, ...)."""
    def use(plan: dict[str, str]):
        monkeypatch.setenv("CONVBENCH_TEST_BACKENDS", "1")
        monkeypatch.setenv("CONVBENCH_FAULTS", ",".join(f"{c}={f}" for c, f in plan.items()))
    return use

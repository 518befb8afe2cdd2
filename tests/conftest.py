"""Shared test setup: the `gpu` marker skips cleanly where CUDA is absent; tests that need a service of their own
(a Slurm cluster on fixed ports, the Docker engine, Chromium) run in one xdist group each; nothing is written
into the user's home; the fixture report is built once per test session."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _private_home() -> None:
    """HOME for this test process and everything it starts: a folder of its own, removed at the end (asv writes
    ~/.asv-machine.json, pip and Chromium their caches). The caches convbench already filled are still used
    (wheels for the images, onnxruntime's models), so that the suite does not download them again."""
    real = Path.home()
    caches = {"CONVBENCH_WHEEL_CACHE": real / ".cache" / "convbench" / "wheelhouse",
              "CONVBENCH_CACHE": real / ".cache" / "convbench"}
    for var, path in caches.items():
        if var not in os.environ and path.is_dir():
            os.environ[var] = str(path)
    home = tempfile.mkdtemp(prefix="convbench-test-home-")
    os.environ["HOME"] = home
    atexit.register(shutil.rmtree, home, True)


if not os.environ.get("CONVBENCH_TEST_HOME_SET"):
    _private_home()
    os.environ["CONVBENCH_TEST_HOME_SET"] = "1"  # xdist's workers inherit this process's HOME


# one xdist group per service: Slurm's tests start a cluster on fixed ports, Docker's share one engine
SERVICE_GROUPS = ("slurm", "docker", "browser")


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
        group = next((g for g in SERVICE_GROUPS if g in item.keywords), None)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def faults(monkeypatch):
    """Turn on the fault-injecting test backends with a plan {case: fault} (crash, hang, raise, ...)."""
    def use(plan: dict[str, str]):
        monkeypatch.setenv("CONVBENCH_TEST_BACKENDS", "1")
        monkeypatch.setenv("CONVBENCH_FAULTS", ",".join(f"{c}={f}" for c, f in plan.items()))
    return use


@pytest.fixture(scope="session")
def fixture_site(tmp_path_factory):
    """The report of every committed fixture run, collected and built once (about 95 s on a 2-core VM): the tests
    that read it only read it. Tests that use it share an xdist group, so one worker builds it."""
    from _fleet_data import fixture_tarballs

    from harness.collect.ingest import collect
    from harness.collect.store import Store
    from harness.report import build

    tars = fixture_tarballs()
    if not tars:
        pytest.skip("no fixtures committed")
    folder = tmp_path_factory.mktemp("fixture-site")
    db = folder / "f.sqlite"
    assert not collect(db, tars).refused
    with Store(db) as s:
        build(s, folder / "site")
    return folder / "site"

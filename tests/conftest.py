"""Shared test setup: the `gpu` marker skips cleanly where CUDA is absent; the fast lane's `slow` marks; nothing is
written into the user's home; the fixture report is built once per test run, shared by xdist's workers.

Tests that need a service of their own serialise on it with a lock where they start it (a Slurm cluster on fixed
ports: tests/slurm_cluster.py; the CPU image: tests/test_docker_integration.py), not through xdist groups:
pytest-xdist 3.8's --dist loadgroup does not group under pytest 9 (it renames a node id pytest no longer reads)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
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


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    return None if torch.cuda.is_available() else "no CUDA device"


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without CUDA; the fast lane's slow marks; the longest tests first (tests/_lanes.py), which
    every xdist worker computes alike from the same collection."""
    from _lanes import is_slow, start_rank

    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or _cuda_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=start_rank)  # stable: the rest keep their order


@pytest.fixture
def faults(monkeypatch):
    """Turn on the fault-injecting test backends with a plan {case: fault} (crash, hang, raise, ...)."""
    def use(plan: dict[str, str]):
        monkeypatch.setenv("CONVBENCH_TEST_BACKENDS", "1")
        monkeypatch.setenv("CONVBENCH_FAULTS", ",".join(f"{c}={f}" for c, f in plan.items()))
    return use


@dataclass(frozen=True)
class FixtureReport:
    """Every committed fixture run (or, where none are committed, real CPU runs swept here) collected into one store
    and rendered into one site through the commands a user types (`convbench collect`, `convbench report`), with
    their exit codes and what they printed. Read it; a test that adds runs works on ``copy_store``'s copy."""
    store: Path
    site: Path
    what: str
    collect_code: int
    report_code: int
    report_out: str

    def copy_store(self, dest: Path) -> Path:
        """A private copy of the store at ``dest`` (SQLite's backup API: a whole, consistent copy)."""
        import sqlite3

        with sqlite3.connect(f"file:{self.store}?mode=ro", uri=True) as src, sqlite3.connect(dest) as dst:
            src.backup(dst)
        return dest


def _shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder every xdist worker of this test run sees (the run's base temp, above each worker's own)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    folder = shared / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def fixture_report(tmp_path_factory) -> FixtureReport:
    """Built once per test run (collect and report of the fixtures take about 95 s on a 2-core VM): the first xdist
    worker to need it builds it under a file lock, the other waits and reads what it wrote."""
    import contextlib
    import fcntl
    import io
    import json

    from _fleet_data import real_sources

    from harness import cli

    folder = _shared_folder(tmp_path_factory, "fixture-report")
    made = folder / "made.json"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.is_file():
            sources, what = real_sources(folder)
            db, site = folder / "f.sqlite", folder / "site"
            collected = cli.main(["collect", *map(str, sources), "--store", str(db)])
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                reported = cli.main(["report", "--store", str(db), "--out", str(site)])
            made.write_text(json.dumps({"what": what, "collect": collected, "report": reported,
                                        "report_out": out.getvalue()}))
    facts = json.loads(made.read_text())
    return FixtureReport(folder / "f.sqlite", folder / "site", facts["what"], facts["collect"], facts["report"],
                         facts["report_out"])


@pytest.fixture(scope="session")
def fixture_site(fixture_report):
    """The fixture report's site (tests/fixtures/runs); skips where no fixture runs are committed."""
    from _fleet_data import fixture_tarballs

    if not fixture_tarballs():
        pytest.skip("no fixtures committed")
    assert fixture_report.collect_code == 0 and fixture_report.report_code == 0, fixture_report.what
    return fixture_report.site

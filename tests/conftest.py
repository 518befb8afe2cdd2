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


# The tests `scripts/test.sh --quick` leaves out, besides those marked `slow` in their files: whole modules and
# single tests that took 5 s or more each (pytest --durations, two xdist workers on the 2-core VM), so that the
# fast lane stays within 2 minutes. A module name alone marks every test in it.
SLOW = {
    "test_report_browser.py",  # Chromium: 5-130 s a test
    "test_report_pages.py",  # the fixtures' report (95 s) and every page of it in Chromium
    "test_hostile_corpus.py",  # builds the hostile corpus (29 s) before its first test
    "test_ort_isolation.py",  # onnxruntime sessions in crashing, hanging processes: 11-37 s a test
    "test_models.py",  # builds the ONNX models (22 s)
    "test_ort.py",  # onnxruntime sessions; its model fixture takes 8 s
    "test_untrusted_inputs.py::test_reader_sees_whole_runs_while_a_collect_replaces_them",
    "test_untrusted_inputs.py::test_every_record_convbench_wrote_passes_the_schema",
    "test_report.py::test_report_from_real_runs_via_cli",
    "test_report.py::test_the_gates_history_is_read_light_and_equal_to_the_records",
    "test_packed.py::test_every_fixture_run_packs_to_what_its_journal_stores",
    "test_packed.py::test_a_real_run_packs_itself_and_collect_reads_the_copy",
    "test_bench_fleet.py::test_the_fleet_marks_documented_nondeterminism_as_real_runs_do",
    "test_docs_commands.py::test_the_docs_commands_run_as_written",
    "test_hostrun.py::test_native_cpu_worker_measures_and_files_its_run",
    "test_overlays.py::test_run_no_docker_runs_each_stack_in_its_own_environment",
    "test_slurm_render.py::test_generated_hostile_values",
    "test_identity.py::test_native_run_on_two_slots_files_two_machines_of_the_node",
    "test_collect.py::test_real_cpu_sweep_collects_and_recollect_changes_nothing",
    "test_collect_concurrent.py::test_two_collects_into_one_new_store_at_once",
    "test_paired.py::test_two_gpu_backward_upgrade_in_full",
    "test_paired.py::test_two_gpu_aa_studies_fail_on_nothing_but_a_few_process_levels",
    "test_paired.py::test_upgrade_command_runs_an_aa_study_on_the_cpu",
    "test_report.py::test_the_upgrade_page_answers_what_cudnn_927_changed",
    "test_sweep_cpu.py::test_every_slice_says_where_its_time_went",
}


def _slow(item) -> bool:
    file = item.path.name
    return file in SLOW or f"{file}::{item.originalname}" in SLOW


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
        if _slow(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def faults(monkeypatch):
    """Turn on the fault-injecting test backends with a plan {case: fault} (crash, hang, raise, ...)."""
    def use(plan: dict[str, str]):
        monkeypatch.setenv("CONVBENCH_TEST_BACKENDS", "1")
        monkeypatch.setenv("CONVBENCH_FAULTS", ",".join(f"{c}={f}" for c, f in plan.items()))
    return use


@pytest.fixture(scope="session")
def fixture_site(tmp_path_factory):
    """The report of every committed fixture run, collected and built once per test run (about 95 s on a 2-core
    VM), in the folder xdist's workers share: the first worker to need it builds it, the other waits and reads it.
    The tests that use it only read it."""
    import fcntl

    from _fleet_data import fixture_tarballs

    from harness.collect.ingest import collect
    from harness.collect.store import Store
    from harness.report import build

    tars = fixture_tarballs()
    if not tars:
        pytest.skip("no fixtures committed")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    folder = shared / "fixture-site"
    folder.mkdir(exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "site" / "index.html").is_file():
            db = folder / "f.sqlite"
            assert not collect(db, tars).refused
            with Store(db) as s:
                build(s, folder / "site")
    return folder / "site"

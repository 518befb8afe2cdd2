"""The onnxruntime grid through the sweep's worker pool: a killed worker is a record, --resume continues a run.

CPU EP, one session and one process per setting: the worker path is the one a GPU host takes by default. Each
onnxruntime session process is a fresh worker of the pool too (run/pool.py): the fault-injecting session
function of tests/faulty_backend.py crashes, hangs or runs out of memory in one, and its setting's records carry
the pool's status and reason.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from _fleet_data import as_killed, journal_lines  # noqa: E402
from faulty_backend import ORT_SESSION  # noqa: E402

from harness.backends.ort import ModelOptions  # noqa: E402
from harness.cli import main as cli_main  # noqa: E402
from harness.core.records import CRASHED, OK, OOM, TIMEOUT, Record  # noqa: E402
from harness.run import ort_grid  # noqa: E402
from harness.run.journal import JOURNAL_FILE, iter_journal  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _grid(*args: str, tmp_path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CONVBENCH_CACHE=str(tmp_path / "cache"))
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "ort-grid", "--device", "cpu", "--models",
                             "mobilenetv2", "--sessions", "1", "--processes", "1", "--isolate", *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _pool_child(parent: int, timeout_s: float = 120.0) -> int:
    """The pid of the worker-pool process ``parent`` started (python -c ... child_main)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == parent and b"child_main" in cmdline:
                return int(entry.name)
        time.sleep(0.02)
    raise AssertionError("the grid started no pool worker")


def test_grid_worker_crash_becomes_a_record_and_the_rest_runs_in_a_fresh_worker(tmp_path):
    """The onnxruntime grid runs each model in the sweep's worker pool: a worker killed mid-model is a record."""
    proc = _grid("--out", str(tmp_path / "res"), tmp_path=tmp_path)
    os.kill(_pool_child(proc.pid), signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    journal = next((tmp_path / "res").glob("*/*/run.json")).with_name(JOURNAL_FILE)
    recs = [Record.from_dict(d) for d in iter_journal(journal)]
    assert len(recs) == 2 and len({r.key() for r in recs}) == 2
    crashed = [r for r in recs if r.status == CRASHED]
    assert len(crashed) == 1 and "SIGKILL" in crashed[0].reason and crashed[0].explanation
    assert [r.status for r in recs if r is not crashed[0]] == [OK]
    assert json.loads((journal.parent / "end.json").read_text())["by_status"] == {CRASHED: 1, OK: 1}


def test_grid_resume_measures_only_what_the_journal_lacks(tmp_path):
    proc = _grid("--out", str(tmp_path / "res"), tmp_path=tmp_path)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    journal = next((tmp_path / "res").glob("*/*/run.json")).with_name(JOURNAL_FILE)
    first, second = journal_lines(journal.parent)
    as_killed(journal.parent, first + "\n" + second[:40])  # killed while writing the second record
    proc = _grid("--resume", str(journal.parent), tmp_path=tmp_path)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    lines = journal_lines(journal.parent)
    assert lines[0] == first and len(lines) == 2  # the torn line dropped, the first record not measured again
    recs = [Record.from_dict(json.loads(line)) for line in lines]
    assert len({r.key() for r in recs}) == 2 and all(r.status == OK for r in recs)
    assert json.loads((journal.parent / "end.json").read_text())["records"] == 2
    assert cli_main(["ort-grid", "--resume", str(tmp_path / "res"), "--device", "cpu"]) == 2  # not a run directory


SESSION_FAULTS = {  # the fault of the setting's one drift process -> its records' status, words of the pool's reason
    "segv": (CRASHED, "SIGSEGV"),
    "hang": (TIMEOUT, "watchdog"),
    "raise_oom": (OOM, "OutOfMemoryError"),
}
GRID = ["--device", "cpu", "--models", "mobilenetv2", "--sessions", "1", "--processes", "1"]


def _faulty_grid(monkeypatch, tmp_path, *args: str) -> tuple[int, Path]:
    """`convbench ort-grid` in this process, its session processes run by the fault-injecting session function."""
    monkeypatch.setenv("CONVBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ort_grid, "ModelOptions", functools.partial(ModelOptions, session_function=ORT_SESSION,
                                                                    worker_timeout_s=8.0))
    rc = cli_main(["ort-grid", *GRID, *args])
    return rc, next((tmp_path / "res").glob("*/*/run.json")).with_name(JOURNAL_FILE)


@pytest.mark.parametrize("fault", ["hang", "raise_oom"])
def test_a_session_process_that_hangs_or_runs_out_of_memory_is_its_settings_records(tmp_path, faults, monkeypatch,
                                                                                   fault):
    status, words = SESSION_FAULTS[fault]
    faults({"drift-00-p0": fault})
    rc, journal = _faulty_grid(monkeypatch, tmp_path, "--out", str(tmp_path / "res"), "--no-isolate")
    assert rc == 1  # every record of the model failed
    recs = [Record.from_dict(d) for d in iter_journal(journal)]
    assert len(recs) == 2 and {r.status for r in recs} == {status}
    for r in recs:  # the pool's status and one-line reason, explained by run/finalize.py
        assert words in r.reason and "drift-00-p0" in r.reason and "\n" not in r.reason and r.explanation


def test_a_crashed_session_process_is_a_record_and_resume_measures_only_what_the_journal_lacks(tmp_path, faults,
                                                                                              monkeypatch):
    """In the pool's model worker (the GPU default) a session process segfaults: a crashed record per io; the
    run is torn while writing the second one, and --resume measures that one again and nothing else."""
    faults({"drift-00-p0": "segv"})
    rc, journal = _faulty_grid(monkeypatch, tmp_path, "--out", str(tmp_path / "res"), "--isolate")
    assert rc == 1
    recs = [Record.from_dict(d) for d in iter_journal(journal)]
    assert len(recs) == 2 and {r.status for r in recs} == {CRASHED}
    assert all("SIGSEGV" in r.reason and "drift-00-p0" in r.reason and r.explanation for r in recs)
    first, second = journal_lines(journal.parent)
    as_killed(journal.parent, first + "\n" + second[:40])  # killed while writing the second record
    faults({})  # the fault is gone: what --resume measures is ok
    rc, _ = _faulty_grid(monkeypatch, tmp_path, "--resume", str(journal.parent), "--isolate")
    assert rc == 0
    lines = journal_lines(journal.parent)
    assert lines[0] == first and len(lines) == 2  # the crashed record kept, not measured again
    recs = [Record.from_dict(json.loads(line)) for line in lines]
    assert [r.status for r in recs] == [CRASHED, OK] and len({r.key() for r in recs}) == 2
    assert json.loads((journal.parent / "end.json").read_text())["by_status"] == {CRASHED: 1, OK: 1}


def test_a_crashed_drift_process_among_others_is_named_and_the_others_measure(tmp_path, faults, monkeypatch):
    faults({"drift-00-p1": "abort"})
    rc, journal = _faulty_grid(monkeypatch, tmp_path, "--out", str(tmp_path / "res"), "--no-isolate",
                               "--processes", "2")
    assert rc == 0
    recs = [Record.from_dict(d) for d in iter_journal(journal)]
    assert len(recs) == 2 and {r.status for r in recs} == {OK}
    for r in recs:  # the second process is part of the measurement: its loss is said, the first one's data stands
        (problem,) = r.extra["problems"]
        assert "drift-00-p1" in problem and "crashed" in problem and "SIGABRT" in problem
        assert r.extra["drift"]["image"]["fresh_process"]["n"] == 1


def test_a_crashed_timing_process_leaves_the_drift_records_without_a_time_and_says_why(tmp_path, faults,
                                                                                       monkeypatch):
    faults({"timing-CPUExecutionProvider": "segv"})
    rc, journal = _faulty_grid(monkeypatch, tmp_path, "--out", str(tmp_path / "res"), "--no-isolate")
    assert rc == 0
    recs = [Record.from_dict(d) for d in iter_journal(journal)]
    assert len(recs) == 2 and {r.status for r in recs} == {OK} and all(r.time is None for r in recs)
    for r in recs:
        assert r.reason.startswith("timing process (timing-CPUExecutionProvider) crashed") and "SIGSEGV" in r.reason
        assert r.determinism.distinct_outputs == 1  # the drift processes measured

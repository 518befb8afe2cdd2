"""kill -9 of a running `convbench sweep` at many random points, then the same command with --resume: no
journaled combination is measured twice, none is lost, and the journal always parses."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run.journal import END_FILE, JOURNAL_FILE, RUN_FILE

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["sweep", "--cases", "quick", "--backends", "torch,cudnn", "--budget-ms", "2"]
KILL_POINTS = 20  # SIGKILLs: half in-process, half with worker isolation on (a process start each: 30 took 100 s)


def _start(results: Path, extra: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *COMMAND, "--results", str(results), *extra],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _run_dir(results: Path) -> Path | None:
    runs = [p.parent for p in results.glob(f"*/*/{RUN_FILE}")]
    assert len(runs) <= 1, runs  # a chain never starts a second run once the first has a run.json
    return runs[0] if runs else None


def _journal_keys(run_dir: Path) -> list[str]:
    """Keys of the journaled measurements; every complete line must parse, only the last may be torn."""
    from harness.core.records import Record
    from harness.run.journal import read_journal

    data = read_journal(run_dir)  # records.jsonl, or records.jsonl.gz once the run is finished
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # every line before the last ended in \n: it must parse
    keys = []
    for raw in complete:
        d = json.loads(raw)
        if d["kind"] == "measurement":
            keys.append(Record.from_dict(d).key())
    del tail  # a line cut by the kill: only the last can be torn, and resume drops it
    return keys


def _journal_size(results: Path) -> int:
    run_dir = _run_dir(results)
    path = run_dir / JOURNAL_FILE if run_dir else None
    return path.stat().st_size if path and path.exists() else 0


def _kill_point(proc: subprocess.Popen, results: Path, rng: random.Random) -> bool:
    """Wait for a random point of this process's life, then SIGKILL it; False if it finished first.

    A quarter of the points fall anywhere in start-up (imports, fingerprint, run.json); the rest fall
    while it journals: once the journal has grown, after a further random delay.
    """
    if rng.random() < 0.25:
        deadline = time.monotonic() + rng.uniform(0.0, 2.0)
    else:
        size0, deadline = _journal_size(results), None
        limit = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < limit:
            if _journal_size(results) > size0:
                deadline = time.monotonic() + rng.uniform(0.0, 0.25)
                break
            time.sleep(0.01)
        if deadline is None:
            return False
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return False
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def _chain(results: Path, rng: random.Random, isolate: bool, kills_wanted: int, stats: dict) -> list[str]:
    """Start the sweep, kill it at random points and resume it; then let it finish; return the final keys."""
    extra = ["--isolate"] if isolate else ["--no-isolate"]
    before: list[str] = []
    kills = 0
    while True:
        run_dir = _run_dir(results)
        proc = _start(results, extra + (["--resume", str(run_dir)] if run_dir else []))
        if kills < kills_wanted and _kill_point(proc, results, rng):
            kills += 1
            stats["kills"] += 1
            run_dir = _run_dir(results)
            if run_dir is None:
                stats["before_run_json"] += 1
                continue
            keys = _journal_keys(run_dir)
            assert len(keys) == len(set(keys)), "a combination was journaled twice"
            assert set(before) <= set(keys), "a journaled combination was lost"
            stats["mid_sweep"] += len(keys) > len(before)
            stats["torn"] += (run_dir / JOURNAL_FILE).exists() and not (
                run_dir / JOURNAL_FILE).read_bytes().endswith(b"\n")
            before = keys
            continue
        assert proc.wait(timeout=600) == 0, proc.stderr.read()
        run_dir = _run_dir(results)
        assert (run_dir / END_FILE).exists()
        keys = _journal_keys(run_dir)
        assert set(before) <= set(keys)
        return keys


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_loses_nothing_and_repeats_nothing(tmp_path):
    t0 = time.monotonic()
    reference = _start(tmp_path / "reference", ["--no-isolate"])
    assert reference.wait(timeout=600) == 0, reference.stderr.read()
    expected = _journal_keys(_run_dir(tmp_path / "reference"))
    assert len(expected) == len(set(expected)) > 1000

    rng = random.Random(20261129)
    stats = {"kills": 0, "mid_sweep": 0, "torn": 0, "before_run_json": 0}
    chain = 0
    while stats["kills"] < KILL_POINTS:  # a chain ends when a run finishes before its kill point
        isolate = chain % 2 == 1  # in-process and with worker processes, in turn
        keys = _chain(tmp_path / f"chain{chain}", rng, isolate, KILL_POINTS - stats["kills"], stats)
        assert len(keys) == len(set(keys)), "a combination was measured twice"
        assert sorted(keys) == sorted(expected), "a combination was lost or invented"
        chain += 1
    print(f"kill/resume: {stats}, {chain} chains, in {time.monotonic() - t0:.0f} s")
    assert stats["mid_sweep"] >= KILL_POINTS // 3  # most kills landed between journaled records

"""Two `convbench collect` processes into one store at the same time leave a consistent store."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _fleet_data import noisy, record, write_run

from harness.collect.store import Store

ROOT = Path(__file__).resolve().parents[1]
T0 = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.timezone.utc)


def _runs(results: Path, machines: list[str], nights: int, per_run: int) -> dict[tuple[str, str], int]:
    """Runs of hand-built records; returns {(run_id, machine): records}."""
    out = {}
    for m, machine in enumerate(machines):
        for night in range(nights):
            recs = [record(f"case{i % 23}", algo=f"ALGO{i // 23}", median=1.0 + m + night * 0.01,
                           samples=noisy(1.0 + m, n=9, seed=i + night)) for i in range(per_run)]
            d = write_run(results, machine, "img", T0 + dt.timedelta(days=night), recs)
            out[(d.name, machine)] = per_run
    return out


def _collect(store: Path, *sources: Path, jobs: int = 1) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "collect", *map(str, sources), "--store",
                             str(store), "--jobs", str(jobs), "-q"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _check(store: Path, expected: dict[tuple[str, str], int]) -> None:
    con = sqlite3.connect(store)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        got = dict(((r, m), n) for r, m, n in con.execute("SELECT run_id, machine, n_records FROM runs"))
        assert got == expected  # every run once, with all its records
        n_blocks = con.execute("SELECT COUNT(*) FROM run_records").fetchone()[0]
        assert n_blocks == len(expected)  # no orphaned or doubled record blocks
        keys = [k for (k,) in con.execute("SELECT key FROM combos")]
        assert len(keys) == len(set(keys))
    finally:
        con.close()
    with Store(store, create=False) as s:
        assert s.record_count() == sum(expected.values())
        for run in s.runs():
            assert len(s.records(run["id"], with_samples=False)) == expected[(run["run_id"], run["machine"])]


@pytest.mark.parametrize("jobs", [1, 2])
def test_two_collects_into_one_new_store_at_once(tmp_path, jobs):
    a = _runs(tmp_path / "a", ["m1", "m2"], nights=6, per_run=400)
    b = _runs(tmp_path / "b", ["m3"], nights=6, per_run=400)
    both = {**a, **b}
    store = tmp_path / "store.sqlite"  # does not exist yet: both processes race to create the schema too
    for _ in range(3):  # same sources again and again, overlapping: the second and third rounds change nothing
        p1 = _collect(store, tmp_path / "a", tmp_path / "b", jobs=jobs)
        p2 = _collect(store, tmp_path / "b", tmp_path / "a", jobs=jobs)
        for p in (p1, p2):
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            assert "Traceback" not in err
        _check(store, both)
    # the last round found everything already there, in both processes
    assert "0 runs added, 0 updated" in out

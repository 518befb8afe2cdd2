"""A store collect creates is built in a hidden file beside its path and appears whole (collect/fresh.py)."""

import datetime as dt
import os
import sqlite3

import pytest
from _fleet_data import record, write_run

from harness.collect import fresh, ingest
from harness.collect.ingest import collect
from harness.collect.store import Store, StoreError

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _sources(root, machines=("m1", "m2"), nights=3):
    for m in machines:
        for n in range(nights):
            write_run(root, m, "img", T0 + dt.timedelta(days=n),
                      [record(f"case{i}", algo=f"A{n}", median=1.0 + i) for i in range(5)])
    return root


def _dump(db):
    with Store(db) as s:
        return [list(s.db.execute(f"SELECT * FROM {t} ORDER BY 1, 2")) for t in ("runs", "combos", "run_records",
                                                                                  "rankings", "run_vectors")]


def test_a_new_store_is_not_in_place_until_it_is_whole(tmp_path, monkeypatch):
    src = _sources(tmp_path / "r")
    db = tmp_path / "s.sqlite"
    seen = []
    real = ingest._ingest_or_refuse

    def spy(store, item, *a, **k):
        seen.append((db.exists(), os.path.dirname(store.path), os.path.basename(store.path)))
        return real(store, item, *a, **k)

    monkeypatch.setattr(ingest, "_ingest_or_refuse", spy)
    summary = collect(db, [src])
    assert summary.added == 6 and not summary.refused
    assert len(seen) == 6
    assert all(not exists and folder == str(tmp_path) and name.startswith(".s.sqlite.new-")
               for exists, folder, name in seen)  # written beside its path, under a hidden name
    assert sorted(os.listdir(tmp_path)) == ["r", "s.sqlite"]  # the hidden file is gone, no log is left
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # as every store is
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(db).st_mode & 0o777 == 0o666 & ~umask  # readable as a store made by SQLite is


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_store_built_new_holds_what_one_written_in_place_holds(tmp_path, jobs):
    src = _sources(tmp_path / "r")
    built, in_place = tmp_path / "built.sqlite", tmp_path / "in_place.sqlite"
    Store(in_place).close()  # exists: collect writes into it through the log, run by run
    a, b = collect(built, [src], jobs=jobs), collect(in_place, [src], jobs=jobs)
    assert (a.added, a.records) == (b.added, b.records) == (6, 30)
    if jobs == 1:  # one process: the same ids in the same order
        assert _dump(built) == _dump(in_place)
    with Store(built) as s, Store(in_place) as t:
        runs = sorted((r["run_id"], r["machine"], r["n_records"]) for r in s.runs())
        assert runs == sorted((r["run_id"], r["machine"], r["n_records"]) for r in t.runs())
        assert [s.digest_of(r, m) for r, m, _ in runs] == [t.digest_of(r, m) for r, m, _ in runs]
        assert s.record_count() == t.record_count() == 30
    again = collect(built, [src], jobs=jobs)
    assert (again.added, again.unchanged) == (0, 6)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, StoreError])
def test_a_build_that_fails_leaves_nothing(tmp_path, monkeypatch, failure):
    src = _sources(tmp_path / "r")
    db = tmp_path / "s.sqlite"
    calls = []
    real = ingest._ingest_or_refuse

    def fail_on_the_third(store, item, *a, **k):
        calls.append(item)
        if len(calls) == 3:
            raise failure("stopped here")
        return real(store, item, *a, **k)

    monkeypatch.setattr(ingest, "_ingest_or_refuse", fail_on_the_third)
    with pytest.raises(failure):
        collect(db, [src])
    assert sorted(os.listdir(tmp_path)) == ["r"]  # no store, no hidden file, no log
    monkeypatch.setattr(ingest, "_ingest_or_refuse", real)
    assert collect(db, [src]).added == 6  # and the next collect builds it from the sources


def test_a_store_another_collect_made_meanwhile_is_kept_and_collected_into(tmp_path, monkeypatch):
    src = _sources(tmp_path / "r", machines=("m1",))
    other = _sources(tmp_path / "o", machines=("m9",), nights=1)
    db = tmp_path / "s.sqlite"
    real_build = fresh.build

    def race(path, fill):
        def fill_while_another_collect_finishes_first(hidden):
            fill(hidden)
            monkeypatch.setattr(fresh, "build", real_build)
            assert collect(db, [other]).added == 1  # the other collect, which finds no store either
        return real_build(path, fill_while_another_collect_finishes_first)

    monkeypatch.setattr(fresh, "build", race)
    summary = collect(db, [src])
    assert (summary.added, summary.unchanged, summary.records) == (3, 0, 15)  # counted once, from the second pass
    assert sorted(os.listdir(tmp_path)) == ["o", "r", "s.sqlite"]
    with Store(db, create=False) as s:
        assert sorted(r["machine"] for r in s.runs()) == ["m1", "m1", "m1", "m9"]  # the other's run kept


def test_a_store_in_a_folder_that_cannot_hold_it_is_one_line(tmp_path):
    with pytest.raises(StoreError, match=r"^.*missing/s\.sqlite: cannot write the store \(No such file or "
                                         r"directory; its folder does not exist\)$"):
        collect(tmp_path / "missing" / "s.sqlite", [_sources(tmp_path / "r")])
    assert sorted(os.listdir(tmp_path)) == ["r"]


def test_a_build_in_a_process_that_ignores_ctrl_c_still_guards_sigterm():
    """A shell starts `convbench collect ... &` with Ctrl-C ignored: SIGTERM is still held until the hidden file
    has its name (unguarded, a SIGTERM inside mkstemp left the file), and Ctrl-C stays ignored."""
    import signal

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with fresh._Stop() as stop:
            assert stop.usable and fresh.building_stop() is stop
            assert signal.getsignal(signal.SIGTERM) == stop._on_signal
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) != stop._on_signal and fresh.building_stop() is None
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_build_stopped_by_sigterm_leaves_nothing(tmp_path, jobs):
    """`timeout` or a stopped service sends SIGTERM: the hidden file goes as on Ctrl-C (a fleet's is gigabytes)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    src = _sources(tmp_path / "r", machines=[f"m{i}" for i in range(40)], nights=10)
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    db = tmp_path / "s.sqlite"
    p = subprocess.Popen([sys.executable, "-m", "harness.cli", "collect", str(src), "--store", str(db), "--jobs",
                          str(jobs), "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(n.startswith(".s.sqlite.new-") for n in os.listdir(tmp_path)) and p.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert p.poll() is None, "the collect ended before it could be stopped: give it more runs"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
    assert "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["r"]  # no store, no hidden file

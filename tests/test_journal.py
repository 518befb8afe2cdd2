import json

import pytest

from harness.core.records import Record
from harness.run.journal import Journal, find_runs, iter_journal


def _fp():
    return {"hostname": "testhost", "gpu": None, "image": None}


def _rec(i):
    return Record(case=f"quick.case{i}", backend="torch", direction="fwd", algo="auto", math="DEFAULT",
                  dtype="fp32", layout="NCHW")


def test_runs_never_share_a_directory(tmp_path):
    a = Journal.create(tmp_path, _fp(), {})
    b = Journal.create(tmp_path, _fp(), {})
    assert a.path != b.path and len(find_runs(tmp_path)) == 2
    with pytest.raises(FileExistsError):
        Journal.create(tmp_path, _fp(), {}, run_id=a.path.name)


def test_append_done_keys_and_torn_tail(tmp_path):
    j = Journal.create(tmp_path, _fp(), {"x": 1})
    for i in range(3):
        j.append(_rec(i))
    with open(j.path / "records.jsonl", "a") as f:
        f.write('{"kind": "measurement", "case": "torn')  # a write cut by kill -9
    assert j.done_keys() == {_rec(i).key() for i in range(3)}
    assert len(list(iter_journal(j.path / "records.jsonl"))) == 3
    j.finish({"ok": 3})
    end = json.loads((j.path / "end.json").read_text())
    assert end["ok"] == 3 and "finished" in end
    assert Journal(j.path).meta["options"] == {"x": 1}


def test_a_record_is_in_the_file_once_appended_and_on_the_disk_once_its_writer_closes(tmp_path, monkeypatch):
    """Each line is written through as it is appended (a writer killed next loses nothing: test_kill_resume.py)
    and synced once, when the writer closes at its slice's end, not once a record."""
    import os

    from harness.run import journal as journal_module

    j = Journal.create(tmp_path, _fp(), {})
    synced, fsync = [], os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    for i in range(3):
        j.append(_rec(i))
        assert len(list(iter_journal(j.path / "records.jsonl"))) == i + 1  # another reader sees it already
    assert synced == []
    j.close()
    assert len(synced) == 1
    j.close()  # closed already: nothing to sync
    assert len(synced) == 1


def test_a_nightly_job_names_its_night_and_collect_keeps_it(tmp_path, monkeypatch):
    """CONVBENCH_NIGHT (set by the rendered Slurm night to the date its job started) is the night of every run
    of the job, also of a run that starts after midnight; a label after the start or long before it is refused."""
    import datetime as dt

    from harness.collect.ingest import collect
    from harness.collect.store import Store
    from harness.core.schema import SchemaError, check_night
    from harness.run.journal import Journal, JournalError

    today = dt.datetime.now(dt.timezone.utc).date()
    monkeypatch.setenv("CONVBENCH_NIGHT", str(today - dt.timedelta(days=1)))
    j = Journal.create(tmp_path / "r", _fp(), {})
    assert j.meta["night"] == str(today - dt.timedelta(days=1))
    j.append(_rec(0))
    j.finish({"ok": 0})
    db = tmp_path / "s.sqlite"
    assert not collect(db, [tmp_path / "r"]).refused
    with Store(db) as s:
        assert [r["night"] for r in s.runs()] == [str(today - dt.timedelta(days=1))]
    for bad in (str(today + dt.timedelta(days=1)), str(today - dt.timedelta(days=3)), "yesterday", "2026-02-30"):
        monkeypatch.setenv("CONVBENCH_NIGHT", bad)
        with pytest.raises(JournalError, match="CONVBENCH_NIGHT"):
            Journal.create(tmp_path / "r", _fp(), {})
        with pytest.raises(SchemaError):
            check_night(bad, today)

"""A finished run keeps its journal compressed (records.jsonl.gz, collect/packed.py): collect stores the same as from
the plain journal, checks a packed copy against the gzip file's own bytes, refuses a damaged or bomb stream in one
line, bounds what an archive of them inflates, and a run written again (resumed) gets its plain journal back."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
from pathlib import Path

import pytest
from _fleet_data import journal_lines, record, tar_runs, write_run

from harness.collect import ingest
from harness.collect import packed as pk
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core import intake
from harness.run import journal as journal_mod
from harness.run.journal import (
    JOURNAL_FILE,
    JOURNAL_GZ_FILE,
    PACKED_FILE,
    Journal,
    iter_journal,
    read_journal,
)

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _finished(tmp_path: Path, n: int = 4, machine: str = "m1", started: dt.datetime = T0) -> Path:
    """A finished run as its host leaves it: records.jsonl.gz and its packed copy, no records.jsonl."""
    recs = [record(f"c{i}", samples=[1.0 + i, 1.5 + i], hash_=f"{i:032x}") for i in range(n)]
    d = write_run(tmp_path / "results", machine, "img", started, recs)
    assert pk.write_packed(d)
    return d


def _header(data: bytes) -> dict:
    return json.loads(data[len(pk.MAGIC):data.index(b"\n", len(pk.MAGIC))])


def _cases(db: Path) -> set[str]:
    with Store(db) as s:
        return {r[0] for r in s.db.execute("SELECT case_id FROM combos")}


def _rows(db: Path) -> list:
    with Store(db) as s:
        return [list(s.db.execute(f"SELECT * FROM {t} ORDER BY 1, 2")) for t in ("combos", "run_records")]


def test_a_finished_run_keeps_one_journal_compressed_with_the_same_lines(tmp_path):
    d = write_run(tmp_path / "results", "m1", "img", T0, [record(f"c{i}") for i in range(3)])
    lines = (d / JOURNAL_FILE).read_bytes()
    assert pk.write_packed(d)
    assert sorted(p.name for p in d.iterdir()) == ["end.json", JOURNAL_GZ_FILE, PACKED_FILE, "run.json"]
    gz = (d / JOURNAL_GZ_FILE).read_bytes()
    assert gzip.decompress(gz) == lines == read_journal(d)  # zcat gives the journal back
    assert len(gz) < len(lines)
    assert [r["case"] for r in iter_journal(d / JOURNAL_FILE)] == ["c0", "c1", "c2"]
    head = _header((d / PACKED_FILE).read_bytes())
    assert head["gz_bytes"] == len(gz) and head["journal_bytes"] == len(lines)


def test_collect_reads_a_compressed_run_from_its_copy_and_from_its_journal_alike(tmp_path, monkeypatch):
    d = _finished(tmp_path)
    with monkeypatch.context() as m:  # the copy is used: the gzip file is hashed, never inflated
        m.setattr(ingest, "parse_journal", lambda *a, **k: pytest.fail("parsed a journal its copy stands for"))
        m.setattr(intake, "gunzip", lambda *a, **k: pytest.fail("inflated a journal its copy stands for"))
        s = collect(tmp_path / "copy.sqlite", [d])
    assert s.added == 1 and s.packed == 1 and s.records == 4
    (d / PACKED_FILE).unlink()
    s = collect(tmp_path / "journal.sqlite", [d])
    assert s.added == 1 and s.packed == 0 and s.records == 4 and not s.refused
    assert _rows(tmp_path / "copy.sqlite") == _rows(tmp_path / "journal.sqlite")


def test_recollecting_a_compressed_run_changes_nothing_and_its_finish_updates_it(tmp_path):
    recs = [record(f"c{i}") for i in range(3)]
    d = write_run(tmp_path / "results", "m1", "img", T0, recs, finished=False)
    db = tmp_path / "s.sqlite"
    assert collect(db, [d]).added == 1  # collected while it ran: the plain journal, no end.json
    (d / "end.json").write_text(json.dumps({"counts": {"ok": 3}}))
    assert pk.write_packed(d)
    s = collect(db, [d])
    assert s.updated == 1 and s.packed == 1
    again = collect(db, [d])
    assert again.unchanged == 1 and again.added == again.updated == 0


@pytest.mark.parametrize("damage", ["a flipped byte", "cut short", "more after its end", "not gzip"])
@pytest.mark.parametrize("with_copy", [True, False])
def test_a_damaged_compressed_journal_is_refused_in_one_line_and_the_others_are_collected(tmp_path, damage,
                                                                                          with_copy):
    bad = _finished(tmp_path / "bad", machine="bad")
    good = _finished(tmp_path / "good", machine="good")
    gz = bytearray((bad / JOURNAL_GZ_FILE).read_bytes())
    if damage == "a flipped byte":
        gz[len(gz) // 2] ^= 0x10
    elif damage == "cut short":
        gz = gz[:-9]
    elif damage == "more after its end":
        gz += b"{}\n"
    else:
        gz = bytearray(b"c0 c1 c2\n")
    (bad / JOURNAL_GZ_FILE).write_bytes(bytes(gz))
    if not with_copy:
        (bad / PACKED_FILE).unlink()
    s = collect(tmp_path / "s.sqlite", [bad, good])
    assert s.added == 1 and len(s.refused) == 1, (s.refused, s.passed_over)
    assert str(bad) in s.refused[0] and "\n" not in s.refused[0]
    assert "records.jsonl.gz is not" in s.refused[0]  # the stream is what is refused, not a line of it
    assert s.packed == 1  # the good run's; the copy names the gzip file by its sha256, not another file's bytes


def test_a_compressed_journal_that_inflates_past_the_journal_limit_is_refused(tmp_path, monkeypatch):
    d = write_run(tmp_path / "results", "m1", "img", T0, [record("c0")])
    (d / JOURNAL_GZ_FILE).write_bytes(intake.gzip_bytes(b"{}\n" * (4 << 20)))  # 12 MiB of lines in 12 KiB
    (d / JOURNAL_FILE).unlink()
    monkeypatch.setattr(intake, "MAX_JOURNAL_BYTES", 1 << 20)
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 0 and "inflates to more than 1 MiB" in s.refused[0]


def test_an_archive_of_compressed_journals_counts_what_they_inflate_to(tmp_path, monkeypatch):
    runs = [_finished(tmp_path / f"r{i}", n=40, machine=f"m{i}") for i in range(3)]
    for r in runs:
        (r / PACKED_FILE).unlink()  # read from their journals: each inflated in memory with the others' rows
    tarball = tar_runs(runs, tmp_path / "runs.tar")
    assert collect(tmp_path / "all.sqlite", [tarball]).added == 3
    stored = sum((r / JOURNAL_GZ_FILE).stat().st_size for r in runs)
    plain = sum(len(read_journal(r)) for r in runs)
    monkeypatch.setattr(intake, "MAX_ARCHIVE_BYTES", stored + plain // 2)  # the gzip files fit, their lines not
    s = collect(tmp_path / "none.sqlite", [tarball])
    assert s.added == 0 and "refused as a whole" in s.refused[0] and "inflates to more than" in s.refused[0]


def test_a_copy_whose_gzip_fields_do_not_name_the_file_is_passed_over(tmp_path):
    d = _finished(tmp_path)
    data = (d / PACKED_FILE).read_bytes()
    head = _header(data)
    forged = dict(head, gz_sha256="0" * 64)
    (d / PACKED_FILE).write_bytes(data.replace(json.dumps(head).encode(), json.dumps(forged).encode()))
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 1 and s.packed == 0 and "sha256 is not the one it was packed from" in s.passed_over[0]
    # a copy packed beside a plain journal that was compressed by hand names no gzip file: passed over too
    d2 = write_run(tmp_path / "two", "m2", "img", T0, [record("c0"), record("c1")])
    assert pk.write_packed(d2, compress=False)
    (d2 / JOURNAL_GZ_FILE).write_bytes(gzip.compress((d2 / JOURNAL_FILE).read_bytes()))
    (d2 / JOURNAL_FILE).unlink()
    s = collect(tmp_path / "t.sqlite", [d2])
    assert s.added == 1 and s.packed == 0 and s.records == 2 and "gzip file's length" in s.passed_over[0]


def test_where_both_journals_are_there_the_plain_one_is_the_journal(tmp_path):
    """A host stopped between writing records.jsonl.gz and removing records.jsonl leaves both; a run resumed
    leaves its plain journal growing. records.jsonl is the journal then, and the copy is checked against it."""
    d = write_run(tmp_path / "results", "m1", "img", T0, [record("c0"), record("c1")])
    lines = (d / JOURNAL_FILE).read_bytes()
    assert pk.write_packed(d)
    (d / JOURNAL_FILE).write_bytes(lines)  # as the host left it before the unlink
    s = collect(tmp_path / "a.sqlite", [d])
    assert s.added == 1 and s.packed == 1 and s.records == 2
    (d / JOURNAL_FILE).write_bytes(lines + (json.dumps(json.loads(lines.splitlines()[0]) | {"case": "c9"})
                                            + "\n").encode())
    s = collect(tmp_path / "b.sqlite", [d])
    assert s.records == 3 and s.packed == 0 and _cases(tmp_path / "b.sqlite") == {"c0", "c1", "c9"}
    assert pk.write_packed(d)  # packing again: one journal, compressed, with the three lines
    assert not (d / JOURNAL_FILE).exists() and len(journal_lines(d)) == 3


def test_a_finished_run_written_again_gets_its_plain_journal_back(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVBENCH_MACHINE", "m1")
    j = Journal.create(tmp_path / "results", {"hostname": "h", "gpu": None}, {})
    j.append(record("a"))
    j.finish({"ok": 1})
    assert not (j.path / JOURNAL_FILE).exists() and (j.path / JOURNAL_GZ_FILE).is_file()
    again = Journal(j.path)  # --resume of a finished run, or a driver adding records
    assert again.done_keys() == {record("a").key()}
    again.append(record("b"))
    assert not (j.path / JOURNAL_GZ_FILE).exists() and not (j.path / PACKED_FILE).exists()
    assert [json.loads(x)["case"] for x in (j.path / JOURNAL_FILE).read_text().splitlines()] == ["a", "b"]
    again.finish({"ok": 2})
    assert sorted(p.name for p in j.path.iterdir()) == ["end.json", JOURNAL_GZ_FILE, PACKED_FILE, "run.json"]
    s = collect(tmp_path / "s.sqlite", [j.path])
    assert s.added == 1 and s.packed == 1 and s.records == 2


def test_a_packing_that_fails_midway_leaves_the_plain_journal_whole(tmp_path, monkeypatch):
    d = write_run(tmp_path / "results", "m1", "img", T0, [record("c0"), record("c1")])
    lines = (d / JOURNAL_FILE).read_bytes()
    real_unlink = os.unlink

    def full_disk(path, *a, **k):
        if Path(path).name == JOURNAL_FILE:
            raise OSError(28, "No space left on device")
        return real_unlink(path, *a, **k)

    monkeypatch.setattr(pk.os, "unlink", full_disk)
    assert not pk.write_packed(d)
    assert sorted(p.name for p in d.iterdir()) == ["end.json", JOURNAL_FILE, "run.json"]
    assert (d / JOURNAL_FILE).read_bytes() == lines


def test_a_damaged_compressed_journal_is_a_journal_error_where_a_run_is_resumed(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVBENCH_MACHINE", "m1")
    j = Journal.create(tmp_path / "results", {"hostname": "h", "gpu": None}, {})
    j.append(record("a"))
    j.finish({"ok": 1})
    (j.path / JOURNAL_GZ_FILE).write_bytes(b"\x1f\x8b not a stream")
    with pytest.raises(journal_mod.JournalError, match="records.jsonl.gz is not a whole gzip stream"):
        Journal(j.path).append(record("b"))
    assert not (j.path / JOURNAL_FILE).exists()  # nothing written beside it

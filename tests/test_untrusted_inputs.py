"""Issue 19: every input is untrusted. Each test feeds one kind of wrong input where it enters (collect, compare
on a path, --resume, repro, the store, the command line) and checks the one-line refusal, the exit code, and
that nothing measured is lost, duplicated or written elsewhere."""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from _fleet_data import record, tar_runs, write_run
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness import cli
from harness.collect.ingest import collect
from harness.collect.store import Store, StoreError
from harness.core.errors import EXIT_NO_DATA, EXIT_USAGE, printable
from harness.core.records import dumps
from harness.core.schema import SchemaError, check_record
from harness.run.journal import JOURNAL_FILE, Journal, JournalError

ROOT = Path(__file__).resolve().parents[1]
T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def _one_line(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def _run_with_line(tmp_path: Path, edit) -> Path:
    """A results tree with one finished run whose first record is changed by ``edit`` (a dict -> None)."""
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a"), record("b")])
    lines = (d / JOURNAL_FILE).read_text().splitlines()
    first = json.loads(lines[0])
    edit(first)
    (d / JOURNAL_FILE).write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    return d


# ---- 1. one typed boundary ------------------------------------------------------------------------------------

WRONG_TYPES = {
    "extra as a list": ("extra", lambda r: r.update(extra=[1, 2])),
    "clock slowdowns as an integer": ("time.clock.slowdowns",
                                      lambda r: r["time"].update(clock={"sm_mhz_min": 1, "sm_mhz_max": 2,
                                                                        "slowdowns": 7})),
    "winners as text": ("extra.winners", lambda r: r.update(extra={"winners": "ALGO_0"})),
    "near_ties as text": ("extra.near_ties", lambda r: r.update(extra={"near_ties": "none"})),
    "spread as text": ("extra.max_abs_spread", lambda r: r.update(extra={"max_abs_spread": "big"})),
    "fresh_process_equal as a list": ("extra.fresh_process_equal",
                                      lambda r: r.update(extra={"fresh_process_equal": [True]})),
    "a setting as an object": ("settings.tf32", lambda r: r.update(settings={"tf32": {"a": 1}})),
    "dtype in capitals": ("dtype", lambda r: r.update(dtype="FP32")),
    "a negative median": ("time.median_ms", lambda r: r["time"].update(median_ms=-1.0)),
    "a count as a float": ("accuracy.nan", lambda r: r["accuracy"].update(nan=0.5)),
    "an unknown field": ("colour", lambda r: r.update(colour="red")),
    "too many samples": ("time.samples_ms", lambda r: r["time"].update(samples_ms=[1.0] * 100_001)),
    "a control character in a case id": ("case", lambda r: r.update(case="a\x1b[2Jb")),
    "a 2 MiB algo name": ("algo", lambda r: r.update(algo="A" * (2 << 20))),
}


@pytest.mark.parametrize("label", sorted(WRONG_TYPES))
def test_wrongly_typed_field_is_refused_naming_file_line_and_field(tmp_path, label):
    field, edit = WRONG_TYPES[label]
    d = _run_with_line(tmp_path, edit)
    s = collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    assert s.added == 0 and len(s.refused) == 1, s
    assert str(d) in s.refused[0] and "records.jsonl line 1" in s.refused[0] and f"'{field}'" in s.refused[0], \
        s.refused[0]
    # compare on the same path refuses it in the same words, and has then nothing to decide on: its own code
    good = write_run(tmp_path / "base", "m1", "img", T0, [record("a"), record("b")])
    res = _cli("compare", str(good), str(tmp_path / "r"), "--store", str(tmp_path / "none.sqlite"))
    assert res.returncode == EXIT_NO_DATA, res.stderr
    assert "Traceback" not in res.stderr and f"'{field}'" in res.stderr


def test_schema_names_nested_fields():
    rec = json.loads(dumps(record("a")))
    rec["determinism"]["repeat_equal"] = "yes"
    with pytest.raises(SchemaError, match=r"'determinism.repeat_equal' is text \('yes'\), not true or false"):
        check_record(rec)


# ---- 2. the store keeps whole runs ----------------------------------------------------------------------------

def test_partial_copy_never_replaces_a_stored_run_unless_asked(tmp_path):
    full = write_run(tmp_path / "full", "m1", "img", T0, [record(c) for c in "abcd"])
    part = write_run(tmp_path / "part", "m1", "img", T0, [record("a")])
    db = tmp_path / "s.sqlite"
    assert collect(db, [full]).added == 1
    s = collect(db, [part])
    assert s.updated == 0 and len(s.refused) == 1 and "stored with 4 records" in s.refused[0]
    with Store(db) as st:
        assert st.runs()[0]["n_records"] == 4
    res = _cli("collect", str(part), "--store", str(db), "--replace")
    assert res.returncode == 0 and "1 updated" in res.stdout, res.stderr
    with Store(db) as st:
        assert st.runs()[0]["n_records"] == 1


@pytest.mark.parametrize("store", ["", ":memory:", "   "])
def test_store_that_keeps_nothing_is_refused(tmp_path, store):
    write_run(tmp_path / "r", "m1", "img", T0, [record("a")])
    res = _cli("collect", str(tmp_path / "r"), "--store", store)
    assert res.returncode == EXIT_USAGE and "names no file" in _one_line(res) or "empty" in res.stderr


@pytest.mark.parametrize("content", [b"", b"\n\n\n", b"   \t\n", b"\x00" * 64])
def test_empty_whitespace_or_nul_journal_is_not_a_complete_run(tmp_path, content):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a")])
    (d / JOURNAL_FILE).write_bytes(content)
    s = collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    assert s.added == 0 and len(s.refused) == 1


def test_last_line_without_newline_is_kept_when_the_run_finished(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a"), record("b")])
    (d / JOURNAL_FILE).write_bytes((d / JOURNAL_FILE).read_bytes().rstrip(b"\n"))
    s = collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    assert s.added == 1 and s.records == 2
    (d / "end.json").unlink()  # an unfinished run: the unterminated line is a torn write and is left out
    s = collect(tmp_path / "s2.sqlite", [tmp_path / "r"])
    assert s.added == 1 and s.records == 1


def test_duplicated_lines_count_once(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a"), record("b")])
    data = (d / JOURNAL_FILE).read_bytes()
    (d / JOURNAL_FILE).write_bytes(data * 3)
    s = collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    assert s.records == 2
    with Store(tmp_path / "s.sqlite") as st:
        assert st.runs()[0]["n_records"] == 2 and st.record_count() == 2


@pytest.mark.parametrize("fmt", ["w", "w:gz", "w:bz2", "w:xz"])
def test_archive_with_a_bad_member_stores_nothing(tmp_path, fmt):
    good = write_run(tmp_path / "r", "m1", "img", T0, [record("a")])
    bad = write_run(tmp_path / "r", "m2", "img", T0, [record("a")])
    (bad / JOURNAL_FILE).write_text('{"schema": 1, "kind": "measurement"\n')
    tar = tmp_path / f"runs.tar{'.' + fmt[2:] if len(fmt) > 1 else ''}"
    with tarfile.open(tar, fmt) as t:
        for d in (good, bad):
            t.add(d, arcname=f"{d.parent.name}/{d.name}")
    s = collect(tmp_path / "s.sqlite", [tar])
    assert s.added == 0 and len(s.refused) == 1 and "as a whole" in s.refused[0], s
    with Store(tmp_path / "s.sqlite") as st:
        assert st.runs() == []
    bad_free = tar_runs([good], tmp_path / "good.tar.gz")
    assert collect(tmp_path / "s.sqlite", [bad_free]).added == 1


def test_samples_keep_float64_precision_and_old_float32_stores_still_read(tmp_path):
    big = 1e39  # above float32's range: stored as float32 it became inf, and inf vs inf hid a 2x slowdown
    write_run(tmp_path / "a", "m1", "img", T0, [record("a", median=big, samples=[big, big * 1.0000001])])
    db = tmp_path / "s.sqlite"
    collect(db, [tmp_path / "a"])
    with Store(db) as st:
        (rec,) = st.records(st.runs()[0]["id"])
        assert rec.samples.tolist() == [big, big * 1.0000001]
        assert st.vectors([st.runs()[0]["id"]])[st.runs()[0]["id"]]["median"][0] == big
        # a store written before float64: the same row with float32 blobs reads back as float32 values
        st.db.execute("UPDATE run_records SET samples = ?", (np.array([1.5, 2.5], "<f4").tobytes(),))
        st.db.execute("UPDATE run_vectors SET median = ?", (np.array([1.5], "<f4").tobytes(),))
        (rec,) = st.records(st.runs()[0]["id"])
        assert rec.samples.tolist() == [1.5, 2.5]
        assert st.vectors([st.runs()[0]["id"]])[st.runs()[0]["id"]]["median"].tolist() == [1.5]


def _stored(tmp_path: Path) -> Path:
    write_run(tmp_path / "r", "m1", "img", T0, [record("a")])
    db = tmp_path / "s.sqlite"
    collect(db, [tmp_path / "r"])
    return db


DAMAGE = {
    "store_schema as text": "UPDATE meta SET value = 'two' WHERE key = 'store_schema'",
    "a missing column": "ALTER TABLE runs DROP COLUMN end_info",
    "a missing table": "DROP TABLE run_vectors",
}


@pytest.mark.parametrize("label", sorted(DAMAGE))
def test_damaged_store_is_one_line_with_the_way_out(tmp_path, label):
    db = _stored(tmp_path)
    con = sqlite3.connect(db)
    con.execute(DAMAGE[label])
    con.commit()
    con.close()
    for args in (["report", "--store", str(db), "--out", str(tmp_path / "site")],
                 ["compare", "m1", "m1", "--store", str(db)],
                 ["collect", str(tmp_path / "r"), "--store", str(db)]):
        res = _cli(*args)
        line = _one_line(res)
        assert res.returncode == EXIT_USAGE and "damaged" in line and "convbench collect" in line, line


def _rot(db: Path, pages) -> None:
    """The header bytes of each page that starts at an offset of ``pages`` rot."""
    data = bytearray(db.read_bytes())
    for start in pages:
        for i in range(start + 1, start + 8):
            data[i] ^= 0x5A
    db.write_bytes(bytes(data))


def test_bit_rot_in_a_page_is_found_on_open(tmp_path):
    db = _stored(tmp_path)
    page = 4096
    assert db.stat().st_size >= 4 * page
    _rot(db, range(page, db.stat().st_size, page))  # every b-tree page's header rots; the file header survives
    with pytest.raises(StoreError, match="damaged|not a usable"):
        Store(db, create=False)


def test_a_report_of_a_damaged_store_is_one_line_and_keeps_the_last_report(tmp_path):
    """The report checks the store's pages beside its work (Store is opened without its check): a page it reads
    and one it never reads are both refused, in one line with the way out, and the last report stays."""
    db = _stored(tmp_path)
    site = tmp_path / "site"
    assert _cli("report", "--store", str(db), "--out", str(site)).returncode == 0
    before = (site / "index.html").read_bytes()
    clean = db.read_bytes()
    for label, pages in (("every page but the header's", range(4096, len(clean), 4096)),
                         ("the last page", [len(clean) - 4096])):
        db.write_bytes(clean)
        _rot(db, pages)
        res = _cli("report", "--store", str(db), "--out", str(site))
        line = _one_line(res)
        assert res.returncode == EXIT_USAGE and "damaged" in line and "convbench collect" in line, (label, line)
        assert (site / "index.html").read_bytes() == before, label


def test_a_fleet_reports_check_runs_in_its_pool_and_refuses_a_damaged_page(tmp_path, monkeypatch):
    """With a pool of judges, the check of every page runs in one of its processes: a damaged page the report's
    own reading never meets is still refused, and nothing replaces the last report."""
    from harness import report

    db = _stored(tmp_path)
    with Store(db, create=False, verify=False) as st:
        report.build(st, tmp_path / "site", workers=1)
    before = (tmp_path / "site" / "index.html").read_bytes()
    monkeypatch.setattr(report, "_verify", _rotten)
    _ROTTEN_HERE.clear()
    with Store(db, create=False, verify=False) as st, pytest.raises(StoreError, match="rotten page"):
        report.build(st, tmp_path / "site", workers=1)
    assert (tmp_path / "site" / "index.html").read_bytes() == before
    assert _ROTTEN_HERE == []  # the check ran in the pool's process (forked with the stand-in), not in this one


_ROTTEN_HERE: list[str] = []


def _rotten(path: str) -> None:
    """A check of every page that finds one damaged (report._verify's stand-in; module level, for the pool)."""
    _ROTTEN_HERE.append(path)
    raise StoreError(f"{path} is damaged (rotten page); move the store aside and `convbench collect` it again")


def test_store_on_a_read_only_mount_is_read(tmp_path):
    db = _stored(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    os.replace(db, ro / "s.sqlite")
    try:
        subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("cannot make a read-only bind mount here")
    try:
        with Store(ro / "s.sqlite", create=False) as st:
            assert len(st.runs()) == 1
        res = _cli("collect", str(tmp_path / "r"), "--store", str(ro / "s.sqlite"))
        assert res.returncode != 0 and "Traceback" not in res.stderr
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


def test_reader_sees_whole_runs_while_a_collect_replaces_them(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record(c) for c in "ab"])
    db = tmp_path / "s.sqlite"
    collect(db, [tmp_path / "r"])
    reader = Store(db, create=False)
    (run,) = reader.runs()
    with (d / JOURNAL_FILE).open("a") as f:  # the run grew (resumed): the next collect replaces it
        f.write(dumps(record("c")) + "\n")
    started = time.monotonic()
    assert collect(db, [tmp_path / "r"]).updated == 1
    assert time.monotonic() - started < 10  # the reader does not hold the collect up (it waited 60 s at close)
    # the reader's snapshot still holds the run it listed, whole
    assert reader.run_json(run["id"])["fingerprint"] and len(reader.records(run["id"])) == 2
    reader.close()
    with Store(db, create=False) as fresh:
        (new,) = fresh.runs()
        assert len(fresh.records(new["id"])) == 3


# ---- 3. paths ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("machine", ["../../../escaped", "a/b", "..", ".hidden", "x\x1b[31m", "a" * 200])
def test_machine_name_that_is_not_one_safe_directory_is_refused(tmp_path, machine):
    res = _cli("sweep", "--cases", "quick", "--backends", "torch", "--dtypes", "fp32", "--budget-ms", "5",
               "--results", str(tmp_path / "results"), env={"CONVBENCH_MACHINE": machine})
    line = _one_line(res)
    assert res.returncode == EXIT_USAGE and "machine" in line and "\x1b" not in line
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()
    assert not list((tmp_path / "results").glob("*/*")) if (tmp_path / "results").exists() else True


def _journal_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "r", "m1", "img", T0, [record("a")], finished=False)


def test_resume_never_writes_through_a_symlinked_journal(tmp_path):
    d = _journal_run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious, no newline at the end")
    (d / JOURNAL_FILE).unlink()
    (d / JOURNAL_FILE).symlink_to(victim)
    j = Journal(d)
    with pytest.raises(JournalError, match="symbolic link|not a regular file"):
        j.done_keys()
    with pytest.raises(JournalError):
        j.append(record("b"))
    assert victim.read_text() == "precious, no newline at the end"


def test_slices_file_link_is_not_followed(tmp_path):
    from harness.run import slicetime

    d = _journal_run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("x")
    (d / slicetime.SLICES_FILE).symlink_to(victim)
    with pytest.raises(JournalError):
        slicetime.open_append(d / slicetime.SLICES_FILE)
    assert victim.read_text() == "x"


RESUME_DAMAGE = {
    "a garbage line": lambda p: p.write_bytes(p.read_bytes() + b"garbage\n"),
    "an unknown field": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "colour": 1}) + "\n"),
    "another schema": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "schema": 7}) + "\n"),
    "a byte order mark": lambda p: p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes()),
    "a directory": lambda p: (p.unlink(), p.mkdir()),
    "a link to /dev/null": lambda p: (p.unlink(), p.symlink_to("/dev/null")),
    "a FIFO": lambda p: (p.unlink(), os.mkfifo(p)),
}


@pytest.mark.parametrize("label", sorted(RESUME_DAMAGE))
def test_resuming_a_tampered_journal_is_one_line(tmp_path, label):
    d = _journal_run(tmp_path)
    RESUME_DAMAGE[label](d / JOURNAL_FILE)
    t0 = time.monotonic()
    res = _cli("sweep", "--resume", str(d), "--cases", "quick", "--backends", "torch", "--dtypes", "fp32",
               "--budget-ms", "5", timeout=60)
    assert time.monotonic() - t0 < 60
    line = _one_line(res)
    assert res.returncode == EXIT_USAGE and "records.jsonl" in line, line


def test_a_refused_machine_or_resume_never_loads_pytorch(tmp_path):
    """Both are refused before PyTorch loads (a refusal took two seconds, most of them the import)."""
    d = _journal_run(tmp_path)
    (d / JOURNAL_FILE).write_bytes(b"garbage\n")
    probe = ("import sys; from harness import cli; code = cli.main(sys.argv[1:]); "
             "print('torch loaded' if 'torch' in sys.modules else 'torch not loaded', code)")
    sweep = ["sweep", "--cases", "quick", "--backends", "torch", "--results", str(tmp_path / "results")]
    for args, env in ((sweep, {"CONVBENCH_MACHINE": "a/b"}), ([*sweep, "--resume", str(d)], {})):
        res = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, **env}, timeout=60)
        assert res.stdout.split() == ["torch", "not", "loaded", str(EXIT_USAGE)], (res.stdout, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize("header", [{"schema": "1"}, {"run_id": 5}, {"started": "yesterday"}, {"machine": ""}])
def test_resuming_a_bad_run_header_is_one_line(tmp_path, header):
    d = _journal_run(tmp_path)
    meta = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**meta, **header}))
    res = _cli("sweep", "--resume", str(d), "--cases", "quick", "--backends", "torch", "--budget-ms", "5")
    line = _one_line(res)
    assert res.returncode == EXIT_USAGE and "run.json" in line and repr(next(iter(header)))[1:-1] in line, line


# ---- 4. bounds -----------------------------------------------------------------------------------------------

def test_asv_parameter_product_is_refused_before_it_is_built(tmp_path):
    root = tmp_path / "asv" / "results" / "box"
    root.mkdir(parents=True)
    (root / "machine.json").write_text(json.dumps({"machine": "box", "version": 1}))
    params = [[f"'v{i}'" for i in range(300)]] * 4  # 300^4 = 8.1e9 combinations in a few KiB
    (root / "abc-env.json").write_text(json.dumps({
        "version": 2, "commit_hash": "abc", "env_name": "env", "date": 1, "params": {"machine": "box"},
        "result_columns": ["result", "params"], "results": {"bench_x.Cls.time_x": [[1.0], params]}}))
    t0 = time.monotonic()
    s = collect(tmp_path / "s.sqlite", [tmp_path / "asv"])
    assert time.monotonic() - t0 < 10
    assert s.added == 0 and len(s.refused) == 1 and "combinations" in s.refused[0]


def test_fifty_mib_of_newlines_is_refused_in_bounded_time(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a")])
    (d / JOURNAL_FILE).write_bytes(b"\n" * (50 << 20))
    t0 = time.monotonic()
    s = collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    assert time.monotonic() - t0 < 10
    assert len(s.refused) == 1


def test_tarball_whose_members_add_up_past_the_limit_is_refused(tmp_path, monkeypatch):
    from harness.core import intake

    monkeypatch.setattr(intake, "MAX_ARCHIVE_BYTES", 1 << 20)
    tar = tmp_path / "many.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for i in range(8):
            data = b" " * (256 << 10)
            info = tarfile.TarInfo(f"m/r{i}/extra-{i}.json")
            info.size = len(data)
            t.addfile(info, __import__("io").BytesIO(data))
    s = collect(tmp_path / "s.sqlite", [tar])
    assert len(s.refused) == 1 and "add up to over 1 MiB" in s.refused[0]


@pytest.mark.parametrize("args", [["--budget-ms", "nan"], ["--budget-ms", "inf"], ["--budget-ms", "-1"],
                                  ["--repeats", "1000000000"], ["--repeats", "-1"], ["--timeout", "nan"]])
def test_sweep_numbers_are_bounded_and_finite(tmp_path, args):
    res = _cli("sweep", "--cases", "quick", "--backends", "torch", "--results", str(tmp_path / "results"), *args,
               timeout=60)
    assert res.returncode == EXIT_USAGE and _one_line(res)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*"))


@pytest.mark.parametrize("where", ["file", "proc"])
def test_results_at_a_file_or_proc_is_one_line(tmp_path, where):
    target = tmp_path / "a-file" if where == "file" else Path("/proc/self/convbench")
    if where == "file":
        target.write_text("keep me")
    res = _cli("sweep", "--cases", "quick", "--backends", "torch", "--dtypes", "fp32", "--budget-ms", "5",
               "--results", str(target), timeout=120)
    # a file is a usage error; a folder the host will not let us make is the host's lack (EXIT_ENVIRONMENT)
    assert res.returncode == (EXIT_USAGE if where == "file" else 3) and "--results" in _one_line(res)
    if where == "file":
        assert target.read_text() == "keep me"


# ---- 5. the gate ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--time-threshold", "--error-growth", "--abs-us", "--alpha"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_thresholds_must_be_finite(tmp_path, flag, value):
    a = write_run(tmp_path / "a", "m1", "img", T0, [record("a")])
    res = _cli("compare", str(a), str(a), flag, value)
    assert res.returncode == EXIT_USAGE and flag in _one_line(res)


_FLAGS = {"--time-threshold": "time_ratio", "--alpha": "alpha", "--error-growth": "error_growth", "--abs-us": "abs_us"}


def _within(flag: str, v: float) -> bool:
    """The documented bounds (timechange.ALPHA_BOUNDS ...), written out again as the user reads them."""
    return {"--time-threshold": 1 < v <= 10, "--alpha": 1e-6 <= v <= 0.2, "--error-growth": 1 < v <= 1000,
            "--abs-us": 0 <= v <= 10_000}[flag]


@hsettings(max_examples=300, deadline=None, database=None)
@given(flag=st.sampled_from(sorted(_FLAGS)), value=st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-300, 1e300, 0.0, 1.0, 10.0, 0.2, 1e-6, 1000.0,
                                                                       10_000.0, 10_000.5, 1.0000001, -0.0])))
def test_no_threshold_outside_its_bounds_is_accepted(flag, value):
    from harness.analysis.thresholds import bounds_problem

    th = {"time_ratio": None, "alpha": 0.01, "error_growth": 4.0, "abs_us": 1.0, _FLAGS[flag]: value}
    problem = bounds_problem(**th)
    assert (problem is None) == (value == value and _within(flag, value)), (flag, value, problem)
    if problem:
        assert flag in problem and "\n" not in problem


@pytest.mark.parametrize("flag, value", [("--alpha", "1e-300"), ("--time-threshold", "1e300"),
                                         ("--abs-us", "1e300"), ("--error-growth", "1e300")])
def test_a_threshold_that_switches_the_gate_off_is_a_usage_error(tmp_path, capsys, flag, value):
    a = write_run(tmp_path / "a", "m1", "img", T0, [record("a")])
    assert cli.main(["compare", str(a), str(a), flag, value]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "Traceback" not in err[0]


def test_coverage_lost_night_over_night_fails_the_gate_unless_allowed(tmp_path, capsys):
    base = write_run(tmp_path / "r", "m1", "img", T0, [record(f"c{i}") for i in range(6)], run_id="base")
    head = write_run(tmp_path / "r", "m1", "img", T0 + dt.timedelta(days=1), [record("c0")], run_id="head")
    assert cli.main(["compare", str(base), str(head)]) == 1
    assert "5 regression(s) fail the gate" in capsys.readouterr().out
    assert cli.main(["compare", str(base), str(head), "--allow-lost-coverage"]) == 0
    again = write_run(tmp_path / "r2", "m1", "img", T0 + dt.timedelta(days=2), [record(f"c{i}") for i in range(6)],
                      run_id="again")
    assert cli.main(["compare", str(base), str(again)]) == 0  # A/A: nothing lost (a run with itself is refused)


def test_compare_json_is_strict_when_a_ratio_overflows(tmp_path, capsys):
    tiny, huge = [1e-300] * 20, [1e300] * 20
    base = write_run(tmp_path / "r", "m1", "img", T0, [record("a", median=1e-300, samples=tiny)], run_id="base")
    head = write_run(tmp_path / "r", "m1", "img", T0 + dt.timedelta(days=1),
                     [record("a", median=1e300, samples=huge)], run_id="head")
    cli.main(["compare", str(base), str(head), "--json"])
    out = capsys.readouterr().out

    def refuse(token):
        raise AssertionError(f"{token} in --json output")

    doc = json.loads(out, parse_constant=refuse)
    assert doc["findings"] and "written as null" in doc["notes"][0]


def test_nothing_in_common_or_no_records_is_its_own_exit_code(tmp_path):
    a = write_run(tmp_path / "a", "m1", "img", T0, [record("a")])
    b = write_run(tmp_path / "b", "m1", "img", T0 + dt.timedelta(days=1), [record("zzz")])
    res = _cli("compare", str(a), str(b))
    assert res.returncode == EXIT_NO_DATA and "nothing to compare" in _one_line(res)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _cli("compare", str(a), str(empty))
    assert res.returncode == EXIT_NO_DATA and "Traceback" not in res.stderr
    assert cli.main(["compare", str(a), str(a)]) == EXIT_USAGE  # the same run against itself: refused


# ---- 6. the terminal -----------------------------------------------------------------------------------------

def test_printable_escapes_control_characters():
    assert printable("a\x1b[31mb\rc\u202ed\x07") == "a\\x1b[31mb\\x0dc\\u202ed\\x07"
    assert printable("plain é ✓") == "plain é ✓"


def test_refusal_lines_reach_the_terminal_escaped(tmp_path):
    evil = tmp_path / "r\x1b[2J\r" / "m1"
    evil.mkdir(parents=True)
    (evil / "run.json").write_text("{")
    res = _cli("collect", str(tmp_path / "r\x1b[2J\r"), "--store", str(tmp_path / "s.sqlite"))
    assert res.returncode == 1
    assert "\x1b" not in res.stderr + res.stdout and "\r" not in res.stderr + res.stdout
    assert "\\x1b[2J" in res.stderr


# ---- asv results meet the rules journal records meet ------------------------------------------------------------

def _asv(name="bench_cudnn.Fwd.time_fwd", param_names=("case", "setting"), params=(["'c.a'"], ["'x'"]),
         result=1e-3, q25=0.9e-3, q75=1.1e-3, samples=(1e-3, 1.1e-3)):
    from harness.collect.discovery import AsvFile

    results = {name: [[result], list(map(list, params)), [q25], [q75], [list(samples)]]}
    data = {"version": 2, "commit_hash": "abc", "env_name": "env", "date": 1, "params": {"machine": "box"},
            "result_columns": ["result", "params", "stats_q_25", "stats_q_75", "samples"], "results": results}
    bench = {name: {"param_names": list(param_names), "unit": "seconds"}}
    return AsvFile("asv:x", json.dumps(data).encode(), json.dumps({"machine": "box"}).encode(),
                   json.dumps(bench).encode())


def _asv_refusal(f) -> str | None:
    from harness.collect.asv_results import parse_asv
    from harness.collect.discovery import Refused

    try:
        parse_asv(f)
    except Refused as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return None


@pytest.mark.parametrize("change, words", [
    ({"result": -1e-3}, "negative"),
    ({"q25": 2e-3, "q75": 1e-3}, "inverted"),
    ({"samples": (1e-3, -1e-3)}, "negative"),
    ({"params": (["'c.a'"], ["'x\x1b[2J'"])}, "control"),
    ({"name": "bench_cudnn.Fwd.time_" + "x" * (2 << 20)}, "characters"),
    ({"param_names": ("case", "a|b")}, "separate"),
    ({"param_names": ("case", "a=b")}, "separate"),
    ({"param_names": ("case", "a,b")}, "separate"),
    ({"params": (["'c|a'"], ["'x'"])}, "'|'"),
])
def test_asv_results_are_refused_where_a_journal_record_would_be(change, words):
    assert _asv_refusal(_asv()) is None
    refusal = _asv_refusal(_asv(**change))
    assert refusal is not None and words in refusal, refusal


@hsettings(max_examples=150, deadline=None, database=None)
@given(result=st.floats(-1, 1, allow_nan=False), q=st.tuples(st.floats(-1, 1), st.floats(-1, 1)),
       pname=st.text("ab|,=\x01", min_size=1, max_size=3), value=st.text("ab|,=\x01", min_size=1, max_size=4))
def test_asv_accepts_only_what_a_journal_accepts(result, q, pname, value):
    """Accepted asv results hold no negative time, no inverted quartiles, no key separator in a name and no control
    character anywhere: the rules core.schema applies to journal records."""
    f = _asv(param_names=("case", pname), params=(["'c.a'"], [f"'{value}'"]), result=result, q25=q[0], q75=q[1])
    if _asv_refusal(f) is None:
        assert result >= 0 and 0 <= q[0] <= q[1]
        assert not any(c in pname for c in "|,=\x01") and not any(c in value for c in "|\x01")


def test_the_report_fails_lost_coverage_as_compare_does(tmp_path):
    """One judge: the morning page counts the night's lost combinations as failing, as `compare` does, and the
    same flag allows them on both."""
    base = write_run(tmp_path / "r", "m1", "img", T0, [record(f"c{i}") for i in range(6)], run_id="base")
    head = write_run(tmp_path / "r", "m1", "img", T0 + dt.timedelta(days=1), [record("c0")], run_id="head")
    db = str(tmp_path / "s.sqlite")
    assert cli.main(["collect", str(base), str(head), "--store", db]) == 0
    pages = {}
    for flags in ([], ["--allow-lost-coverage"]):
        out = tmp_path / f"site{len(flags)}"
        assert cli.main(["report", "--store", db, "--out", str(out), *flags]) == 0
        pages[bool(flags)] = (out / "index.html").read_text()
    text = {allowed: html.unescape(re.sub(r"<[^>]+>", " ", page)) for allowed, page in pages.items()}
    assert "5 findings fail the gate" in text[False] and "coverage lost (ok before, not measured now) fails" in text[False]
    assert "nothing fails the gate" in text[True] and "coverage lost (ok before, not measured now) allowed" in text[True]

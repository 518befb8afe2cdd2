"""Real journal lines take collect's plain path: a timed line's clock, flags and host time, extra's wall time, replica
medians, fresh-process verdict and replica, and ranking lines are checked per run (collect.columns) instead of line
by line (check_record). The plain path stores, byte for byte, what the general path stores (every committed fixture
run, the fleet generator's runs), and refuses (by falling back to the general path) whatever check_record refuses,
in check_record's words."""

from __future__ import annotations

import datetime as dt
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from _fleet_data import fixture_tarballs, record, write_run
from _plain_checks import assert_refused_in_its_words
from _scripts import load

from harness.collect import journals as col
from harness.collect.discovery import Archive, RawRun, dir_run, discover
from harness.core import heap
from harness.core.records import dumps
from harness.core.schema import check_record

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
N = 300  # more than 256 distinct values in the text columns: their joined-text path is taken
RANKING = 7  # every RANKING-th line is a ranking line


def _real_line(i: int) -> dict:
    """A measurement line as a real sweep writes it (timer flags, host time, clock, wall time, replica medians)."""
    r = json.loads(dumps(record(f"c{i}", hash_=f"{i:032x}", samples=[1.0 + i, 1.1 + i],
                                clock={"sm_mhz_min": 1980, "sm_mhz_max": 1980, "slowdowns": []})))
    r["time"].update(flags=["wide"] if i % 3 else [], host_ms=0.01 * i)
    r["extra"] = {"wall_ms": 3.5 + i, "placement_medians_ms": [1.0 + i, 1.01 + i]}
    if i % 2:
        r["extra"].update(process_medians_ms=[1.0 + i, 1.02 + i], fresh_process_equal=True)
    if i % 5 == 0:
        r["extra"]["replica"] = f"r{i}"
    return r


def _ranking_line(i: int) -> dict:
    return {"kind": "ranking", "schema": 1, "case": f"c{i}", "direction": "fwd", "dtype": "fp32", "layout": "NCHW",
            "math": "DEFAULT", "source": "find", "rank": i % 8, "algo": f"ALGO_{i % 8}", "status": "ok",
            "time_ms": 0.5 + i, "memory_bytes": 1024 * i, "determinism": "DETERMINISTIC",
            "math_reported": "DEFAULT"}


def _lines() -> list[dict]:
    return [_ranking_line(i) if i % RANKING == 0 else _real_line(i) for i in range(N)]


def _run(tmp_path: Path, lines: list[dict]) -> tuple[RawRun, dict]:
    d = write_run(tmp_path, "m1", "img", T0, [])
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    raw = dir_run(d)
    return raw, col.journal_identity(raw)[0]


def _same(a, b) -> bool:
    """Everything the store gets from two parses is equal: the same values of the same types, vectors to the
    byte."""
    def vectors(p):
        return {k: (v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else v for k, v in p.vectors.items()}

    def types(rows):
        return [tuple(map(type, r)) for r in rows]

    return (a.run == b.run and a.combos == b.combos and a.records == b.records and a.rankings == b.rankings
            and types(a.records) == types(b.records) and types(a.rankings) == types(b.rankings)
            and vectors(a) == vectors(b))


@pytest.fixture(autouse=True)
def _verified(tmp_path_factory):
    """Every identity of the hand-built run verified once (as the first night of a machine does)."""
    col.parse_journal(*_run(tmp_path_factory.mktemp("warm"), _lines()))


def _walked_lines(monkeypatch) -> list[dict]:
    """The lines check_record is asked to walk from now on."""
    walked: list[dict] = []
    real = col.check_record

    def counting(d):
        walked.append(d)
        return real(d)

    monkeypatch.setattr(col, "check_record", counting)
    return walked


def test_real_lines_and_rankings_take_the_plain_path_and_store_what_the_general_path_stores(tmp_path, monkeypatch):
    raw, meta = _run(tmp_path, _lines())
    full = col._parse_journal(raw, meta, True)
    walked = _walked_lines(monkeypatch)
    plain = col._parse_journal(raw, meta, False)  # raises _NotPlain if a column did not pass
    assert walked == []
    assert _same(plain, full) and len(plain.rankings) == len(range(0, N, RANKING))
    stored = plain.records[0][-1]  # line 2: the clock, flags and host time travel in the stored extra
    assert stored["clock"]["sm_mhz_min"] == 1980 and stored["flags"] == ["wide"] and stored["host_ms"] == 0.01


def _set(path: str, value, line: int = 5):
    def edit(lines):
        r = lines[line]
        *parents, last = path.split(".")
        for p in parents:
            r = r[p]
        r[last] = value
        return line
    return edit


R = 14  # a ranking line (every RANKING-th)
REFUSED = {
    "host_ms negative": ("time.host_ms", _set("time.host_ms", -1.0)),
    "host_ms as text": ("time.host_ms", _set("time.host_ms", "1")),
    "host_ms as a boolean": ("time.host_ms", _set("time.host_ms", True)),
    "flags null": ("time.flags", _set("time.flags", None)),
    "flags as text": ("time.flags", _set("time.flags", "wide")),
    "a flag as a number": ("time.flags[0]", _set("time.flags", [1])),
    "a flag with a control character": ("time.flags[0]", _set("time.flags", ["wi\x07de"])),
    "a flag of 2000 characters": ("time.flags[0]", _set("time.flags", ["w" * 2000])),
    "5000 flags": ("time.flags", _set("time.flags", ["w"] * 5000)),
    "clock as a list": ("time.clock", _set("time.clock", [1980])),
    "sm_mhz_min as text": ("time.clock.sm_mhz_min", _set("time.clock.sm_mhz_min", "1980")),
    "sm_mhz_max as a boolean": ("time.clock.sm_mhz_max", _set("time.clock.sm_mhz_max", False)),
    "slowdowns null": ("time.clock.slowdowns", _set("time.clock.slowdowns", None)),
    "a slowdown as a number": ("time.clock.slowdowns[0]", _set("time.clock.slowdowns", [4])),
    "throttled_batches as a float": ("time.clock.throttled_batches", _set("time.clock.throttled_batches", 1.5)),
    "an unknown clock key as an object nested too deep": (
        "time.clock.x.a.b.c.d.e.f.g.h.i", _set("time.clock.x", {"a": {"b": {"c": {"d": {"e": {"f": {"g": {
            "h": {"i": 1}}}}}}}}})),
    "an unknown time key": ("time.colour", _set("time.colour", "red")),
    "wall_ms as text": ("extra.wall_ms", _set("extra.wall_ms", "3.5")),
    "wall_ms as a boolean": ("extra.wall_ms", _set("extra.wall_ms", True)),
    "wall_ms above 1e300": ("extra.wall_ms", _set("extra.wall_ms", 1e301)),
    "process medians as text": ("extra.process_medians_ms", _set("extra.process_medians_ms", "1")),
    "a placement median as a boolean": ("extra.placement_medians_ms[1]",
                                        _set("extra.placement_medians_ms", [1.0, True])),
    "a placement median as text": ("extra.placement_medians_ms[0]", _set("extra.placement_medians_ms", ["1"])),
    "fresh_process_equal as 1": ("extra.fresh_process_equal", _set("extra.fresh_process_equal", 1)),
    "replica as a number": ("extra.replica", _set("extra.replica", 5)),
    "replica with a control character": ("extra.replica", _set("extra.replica", "r\x00")),
    "the documented mark null": ("extra.documented_nondeterministic",
                                 _set("extra.documented_nondeterministic", None)),
    "ranking rank as text": ("rank", _set("rank", "1", R)),
    "ranking rank as a boolean": ("rank", _set("rank", True, R)),
    "ranking time as text": ("time_ms", _set("time_ms", "0.5", R)),
    "ranking memory as a float": ("memory_bytes", _set("memory_bytes", 1.5, R)),
    "ranking status empty": ("status", _set("status", "", R)),
    "ranking direction unknown": ("direction", _set("direction", "sideways", R)),
    "ranking source null": ("source", _set("source", None, R)),
    "ranking algo with a bell": ("algo", _set("algo", "A\x07", R)),
    "ranking with an unknown field": ("colour", _set("colour", "red", R)),
    "ranking schema as a float": ("schema", _set("schema", 1.0, R)),
}

ACCEPTED = {
    "host_ms null": _set("time.host_ms", None),
    "host_ms zero (not stored)": _set("time.host_ms", 0),
    "no flags, no host time, no clock": lambda lines: [lines[5]["time"].pop(k) for k in ("flags", "host_ms", "clock")],
    "clock null": _set("time.clock", None),
    "clock empty": _set("time.clock", {}),
    "clock negative (check_record allows it)": _set("time.clock.sm_mhz_min", -5),
    "clock null frequencies": _set("time.clock", {"sm_mhz_min": None, "sm_mhz_max": None, "slowdowns": []}),
    "throttled batches": _set("time.clock.throttled_batches", 3),
    "an unknown clock key": _set("time.clock.x", 1),
    "a slowdown with a long name": _set("time.clock.slowdowns", ["s" * 1000]),
    "wall_ms negative (check_record allows it)": _set("extra.wall_ms", -1.0),
    "wall_ms null": _set("extra.wall_ms", None),
    "a null placement median": _set("extra.placement_medians_ms", [1.0, None]),
    "fresh_process_equal null": _set("extra.fresh_process_equal", None),
    "replica null": _set("extra.replica", None),
    "another known key of extra": _set("extra.sweep_hash", "ab"),
    "an unknown key of extra": _set("extra.colour", "red"),
    "extra's own flags beside the time's": _set("extra.flags", ["mine"]),
    "documented as false": _set("extra.documented_nondeterministic", False),
    "ranking rank negative (a ranking's numbers may be)": _set("rank", -1, R),
    "ranking time null": _set("time_ms", None, R),
    "ranking with a field missing": lambda lines: lines[R].pop("memory_bytes"),
}


@pytest.mark.parametrize("label", sorted(REFUSED))
def test_what_check_record_refuses_on_a_real_line_is_refused_in_its_words(tmp_path, label):
    field, edit = REFUSED[label]
    lines = _lines()
    bad = lines[edit(lines)]
    raw, meta = _run(tmp_path, lines)
    assert_refused_in_its_words(raw, meta, bad, field, lines.index(bad) + 1)


@pytest.mark.parametrize("label", sorted(ACCEPTED))
def test_what_check_record_passes_on_a_real_line_is_stored_as_the_general_path_stores_it(tmp_path, label):
    lines = _lines()
    ACCEPTED[label](lines)
    for r in lines:
        check_record(r)
    raw, meta = _run(tmp_path, lines)
    try:
        got = col.parse_journal(raw, meta)
    except col.Refused as exc:  # a ranking without a field passes check_record; both paths refuse it alike
        with pytest.raises(col.Refused) as want:
            col._parse_journal(raw, meta, True)
        assert str(exc) == str(want.value)
        return
    assert _same(got, col._parse_journal(raw, meta, True))


def _raw_runs(paths: list[Path]) -> list[RawRun]:
    runs = []
    for item in discover(paths):
        if isinstance(item, Archive):
            runs += [x for x in item.items if isinstance(x, RawRun)]
        elif isinstance(item, tuple):
            runs.append(dir_run(item[1]))
    return [col.plain(r) for r in runs]  # the lines, where a finished run keeps them compressed


def _plain_equals_general(runs: list[RawRun], monkeypatch) -> int:
    """Asserts that every run, its identities verified, stores on the plain path what the general path stores;
    returns how many of the lines were still walked by check_record."""
    metas = [col.journal_identity(raw)[0] for raw in runs]
    with heap.bulk_allocations():  # as a collect's parser reads (the default thresholds cost a third more here)
        # the general path walks every line with check_record and so verifies each identity, as the first night of
        # a machine does
        fulls = [col._parse_journal(raw, meta, True) for raw, meta in zip(runs, metas, strict=True)]
        walked = _walked_lines(monkeypatch)
        for raw, meta, full in zip(runs, metas, fulls, strict=True):
            # the plain path itself, with no fall-back to the general one (parse_journal would hide a _NotPlain)
            assert _same(col._parse_journal(raw, meta, False), full), raw.origin
    monkeypatch.undo()
    return len(walked)


@pytest.mark.slow
def test_every_committed_fixture_run_is_plain_and_stores_what_the_general_path_stores(monkeypatch):
    """Also every record convbench wrote passes the schema: the general path walks each line with check_record."""
    tarballs = fixture_tarballs()
    runs = _raw_runs(tarballs)
    if not runs:
        pytest.skip("no committed fixture runs")
    journals = 0
    for path in tarballs:
        with tarfile.open(path) as tar:
            journals += sum(1 for m in tar.getmembers() if m.isfile() and m.name.endswith("/records.jsonl"))
    assert len(runs) == journals  # every journal committed is read, none passed over
    walked = _plain_equals_general(runs, monkeypatch)
    lines = sum(raw.records.count(b"\n") for raw in runs)
    assert walked < 0.02 * lines  # the few lines of other shapes (repro, autotune, ONNX Runtime's extra)


def test_the_fleet_generators_runs_are_plain_and_store_what_the_general_path_stores(tmp_path, monkeypatch):
    fleet = load("bench_fleet")
    for mi in range(2):
        fleet.gen_machine((mi, 3, 548, str(tmp_path / "fleet")))
    runs = _raw_runs([tmp_path / "fleet"])
    assert len(runs) == 6
    assert _plain_equals_general(runs, monkeypatch) == 0

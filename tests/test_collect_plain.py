"""collect checks a run's records per run (collect.columns.check_columns) instead of walking every line (check_record):
the same records are refused, with the same words, and the plain path never lets through what check_record
refuses. Each case edits one line of a run whose identities were already verified (so the line is plain) and
checks that the plain path alone does not accept it, and that collect's refusal names the field check_record
names."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from _fleet_data import record, write_run
from _plain_checks import assert_refused_in_its_words

from harness.collect import journals as col
from harness.collect.discovery import dir_run
from harness.core.records import dumps
from harness.core.schema import check_record

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
N = 300  # more than 256 distinct hashes: the hash column takes the joined-text path


def _set(path: str, value):
    def edit(r):
        *parents, last = path.split(".")
        for p in parents:
            r = r[p]
        r[last] = value
    return edit


REFUSED = {
    "negative median": ("time.median_ms", _set("time.median_ms", -1.0)),
    "median as a boolean": ("time.median_ms", _set("time.median_ms", True)),
    "median as text": ("time.median_ms", _set("time.median_ms", "1.0")),
    "median above 1e300": ("time.median_ms", _set("time.median_ms", 1e301)),
    "an integer median above 1e300": ("time.median_ms", _set("time.median_ms", 10 ** 301)),
    "n as a float": ("time.n", _set("time.n", 1.5)),
    "n as a boolean": ("time.n", _set("time.n", True)),
    "n null": ("time.n", _set("time.n", None)),
    "n negative": ("time.n", _set("time.n", -1)),
    "n past int64": ("time.n", _set("time.n", 2 ** 63)),
    "a boolean sample": ("time.samples_ms[1]", _set("time.samples_ms", [1.0, True])),
    "a negative sample": ("time.samples_ms[1]", _set("time.samples_ms", [1.0, -2.0])),
    "a text sample": ("time.samples_ms[1]", _set("time.samples_ms", [1.0, "x"])),
    "too many samples": ("time.samples_ms", _set("time.samples_ms", [1.0] * 100_001)),
    "samples as text": ("time.samples_ms", _set("time.samples_ms", "1,2")),
    "timer null": ("time.timer", _set("time.timer", None)),
    "mode as a number": ("time.mode", _set("time.mode", 7)),
    "a count as a float": ("accuracy.nan", _set("accuracy.nan", 0.5)),
    "a count as a boolean": ("accuracy.inf", _set("accuracy.inf", False)),
    "negative max_abs": ("accuracy.max_abs", _set("accuracy.max_abs", -0.5)),
    "negative reduction": ("accuracy.reduction", _set("accuracy.reduction", -1)),
    "reduction as a float": ("accuracy.reduction", _set("accuracy.reduction", 1.5)),
    "precision class with a control character": ("accuracy.precision_class",
                                                 _set("accuracy.precision_class", "fp\x0132")),
    "precision class null": ("accuracy.precision_class", _set("accuracy.precision_class", None)),
    "a 2000-character hash": ("determinism.hash", _set("determinism.hash", "a" * 2000)),
    "a hash with a NUL": ("determinism.hash", _set("determinism.hash", "ab\x00cd")),
    "a hash with a C1 control": ("determinism.hash", _set("determinism.hash", "ab\x85cd")),
    "a hash as a number": ("determinism.hash", _set("determinism.hash", 123)),
    "hash_algo as a list": ("determinism.hash_algo", _set("determinism.hash_algo", [])),
    "repeat_equal as 1": ("determinism.repeat_equal", _set("determinism.repeat_equal", 1)),
    "fresh_handle_equal as text": ("determinism.fresh_handle_equal", _set("determinism.fresh_handle_equal", "y")),
    "distinct_outputs as text": ("determinism.distinct_outputs", _set("determinism.distinct_outputs", "1")),
    "workspace negative": ("workspace_bytes", _set("workspace_bytes", -1)),
    "workspace as a boolean": ("workspace_bytes", _set("workspace_bytes", True)),
    "status empty": ("status", _set("status", "")),
    "status with a bell": ("status", _set("status", "ok\x07")),
    "reason as a number": ("reason", _set("reason", 5)),
    "a reason over 64 KiB": ("reason", _set("reason", "r" * (65 << 10))),
    "device null": ("device", _set("device", None)),
    "a 2000-character chosen algo": ("chosen_algo", _set("chosen_algo", "A" * 2000)),
    "extra as a list": ("extra", _set("extra", [1, 2])),
    "spread as text": ("extra.max_abs_spread", _set("extra", {"max_abs_spread": "big"})),
    "the documented mark as 1": ("extra.documented_nondeterministic",
                                 _set("extra", {"documented_nondeterministic": 1})),
    "the documented mark as text": ("extra.documented_nondeterministic",
                                    _set("extra", {"documented_nondeterministic": "true"})),
    "schema as a float": ("schema", _set("schema", 1.0)),
    "an unknown field": ("colour", _set("colour", "red")),
    "settings null": ("settings", _set("settings", None)),
}

ACCEPTED = {
    "iqr null": _set("time.iqr_ms", None),
    "min null": _set("time.min_ms", None),
    "an integer median": _set("time.median_ms", 2),
    "an explanation with a control character (long text allows them)": _set("explanation", "a\x01b"),
    "reduction null": _set("accuracy.reduction", None),
    "reduction set": _set("accuracy.reduction", 4608),
    "repeat_equal null": _set("determinism.repeat_equal", None),
    "extra with a known key": _set("extra", {"wall_ms": 1.5}),
    "documented non-determinism (plain)": _set("extra", {"documented_nondeterministic": True}),
    "documented as false": _set("extra", {"documented_nondeterministic": False}),
    "the documented mark and another key": _set("extra", {"documented_nondeterministic": True, "wall_ms": 2.0}),
    "no time": _set("time", None),
    "no accuracy": _set("accuracy", None),
}


def _run(tmp_path, edit=None, line=5):
    recs = [json.loads(dumps(record(f"c{i}", hash_=f"{i:032x}", samples=[1.0 + i, 1.1 + i])))
            for i in range(N)]
    if edit is not None:
        edit(recs[line])
    d = write_run(tmp_path, "m1", "img", T0, [])
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    raw = dir_run(d)
    return raw, col.journal_identity(raw)[0], recs[line]


@pytest.fixture(autouse=True)
def _verified(tmp_path_factory):
    """Every identity of the run verified once (as the first night of a machine does)."""
    raw, meta, _ = _run(tmp_path_factory.mktemp("warm"))
    col.parse_journal(raw, meta)


def test_a_clean_run_takes_the_plain_path_and_stores_what_the_full_path_stores(tmp_path):
    raw, meta, _ = _run(tmp_path)
    plain = col._parse_journal(raw, meta, False)  # raises _NotPlain if a column did not pass
    full = col._parse_journal(raw, meta, True)
    assert plain.records == full.records and plain.combos == full.combos and plain.run == full.run
    assert len(plain.records) == N


def test_records_marked_documented_non_deterministic_are_plain(tmp_path, monkeypatch):
    """cuDNN's documented non-determinism marks an eighth of a sweep's records (extra.documented_nondeterministic,
    backends/cudnn.py): they take the plain path, and store what the full path stores."""
    raw, meta, _ = _run(tmp_path, None)
    lines = [json.loads(x) for x in raw.records.decode().splitlines()]
    for r in lines[::3]:
        r["extra"] = {"documented_nondeterministic": True}
    raw.records = "".join(json.dumps(r) + "\n" for r in lines).encode()
    full = col._parse_journal(raw, meta, True)

    def walked(d):
        raise AssertionError(f"a line was walked by check_record: {d['case']}")

    monkeypatch.setattr(col, "check_record", walked)
    plain = col._parse_journal(raw, meta, False)
    assert plain.records == full.records and plain.combos == full.combos and plain.run == full.run
    assert sum(r[-1] == {"documented_nondeterministic": True} for r in plain.records) == len(lines[::3])


@pytest.mark.parametrize("label", sorted(REFUSED))
def test_what_check_record_refuses_the_plain_path_refuses_in_the_same_words(tmp_path, label):
    field, edit = REFUSED[label]
    raw, meta, bad = _run(tmp_path, edit)
    assert_refused_in_its_words(raw, meta, bad, field, 6)


@pytest.mark.parametrize("label", sorted(ACCEPTED))
def test_what_check_record_passes_is_stored_as_before(tmp_path, label):
    raw, meta, good = _run(tmp_path, ACCEPTED[label])
    check_record(good)
    got = col.parse_journal(raw, meta)
    want = col._parse_journal(raw, meta, True)
    assert got.records == want.records and got.combos == want.combos


def test_the_first_bad_line_is_named_when_a_later_line_is_refused_line_by_line(tmp_path):
    """A bad number on line 6 (found in its column) and an unknown field on line 9 (found on its line): the
    refusal names line 6, as check_record on every line does."""
    raw, meta, _ = _run(tmp_path, _set("time.median_ms", -3.0))
    lines = raw.records.decode().splitlines()
    r = json.loads(lines[8])
    r["colour"] = "red"
    lines[8] = json.dumps(r)
    raw.records = ("\n".join(lines) + "\n").encode()
    with pytest.raises(col.Refused) as exc:
        col.parse_journal(raw, meta)
    assert "line 6:" in str(exc.value) and "time.median_ms" in str(exc.value)


@pytest.mark.parametrize("blank", [b"", b"   ", b"\t\x0b"])
def test_an_empty_line_is_refused_as_such(tmp_path, blank):
    raw, meta, _ = _run(tmp_path)
    lines = raw.records.splitlines()
    raw.records = b"\n".join([*lines[:7], blank, *lines[7:]]) + b"\n"
    with pytest.raises(col.Refused) as exc:
        col.parse_journal(raw, meta)
    assert "records.jsonl line 8 is not a valid record (ValueError('the line is empty" in str(exc.value)


@pytest.mark.parametrize(("journal", "words"), [
    (b"", "holds no record"), (b" \t\r\n\n", "holds no record"),
    (b"\x0b\n", "line 1 is not a valid record"), (b"\n\x0c", "line 1 is not a valid record"),
])
def test_a_journal_of_blanks_is_told_from_one_of_other_bytes(tmp_path, journal, words):
    raw, meta, _ = _run(tmp_path)
    raw.records = journal
    with pytest.raises(col.Refused) as exc:
        col.parse_journal(raw, meta)
    assert words in str(exc.value)

"""Memory on hostile sizes (issue 42): scripts/measure_memory.py's inputs at a small scale, each command's peak RSS
within its bound and every refusal one line; the journal split without a second copy of it, line for line as
bytes.splitlines splits it. The full-size figures are in docs/reliability.md."""

from __future__ import annotations

import pytest
from _scripts import load
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness.collect import journals


@hsettings(max_examples=300, deadline=None, database=None)
@given(data=st.binary(max_size=64).map(lambda b: b.replace(b"x", b"\n").replace(b"y", b"\r")),
       chunk=st.integers(1, 8), torn=st.booleans())
def test_the_journal_is_split_as_splitlines_splits_it(data, chunk, torn):
    end = data.rfind(b"\n") + 1 if torn else len(data)
    assert list(journals._lines(data, end, chunk)) == data[:end].splitlines()


def _script():
    return load("measure_memory")


@pytest.mark.slow
def test_hostile_sizes_stay_bounded_and_refusals_are_one_line(tmp_path):
    """At 1/32 of the documented sizes (8 MiB journals, 2 lines of 16 MiB, 12 runs of 250 KiB fingerprints and
    one of 15 MiB, 3,136 asv combinations): no command past 600 MiB (Python, numpy and the store's pages are about 100 MiB),
    none ends in a traceback, a refused input is refused in one line per item, an accepted one is stored."""
    rows = _script().run_all(tmp_path, 1 / 32)
    assert {r["name"] for r in rows} == {"too-many-records", "many-records", "tarball", "many-samples", "huge-lines",
                                         "huge-fingerprints", "big-asv", "deep-json"}
    for r in rows:
        for command, m in r.items():
            if not isinstance(m, dict):
                continue
            assert not m["traceback"], (r["name"], command, m)
            assert m["peak_mib"] <= 600, (r["name"], command, m)
            assert all("\n" not in line for line in m["refusals"])
        accepted = r["name"] not in ("too-many-records", "huge-lines", "deep-json", "huge-fingerprints")
        assert r["collect"]["exit"] == (0 if accepted else 1), r
        if not accepted:
            assert r["collect"]["refusals"], r
        if r["name"] == "huge-fingerprints":  # the 15 MiB one alone
            (refusal,) = r["collect"]["refusals"]
            assert "field 'fingerprint' is" in refusal and "run-012" in refusal, refusal
        for command in ("compare_store", "compare_paths"):
            if command in r:
                assert r[command]["exit"] == 0, r  # a run against its own journal: no regression


@pytest.mark.parametrize("packed", [False, True])
def test_a_run_of_more_records_than_a_run_holds_is_refused_in_one_line(tmp_path, monkeypatch, packed):
    """A packed copy does not carry it past the bound: the copy is passed over and the journal refused."""
    import datetime as dt

    from _fleet_data import record, write_run

    from harness.collect.ingest import collect
    from harness.collect.packed import write_packed
    from harness.core import intake

    d = write_run(tmp_path / "r", "m1", "img", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                  [record(f"c{i}") for i in range(6)])
    if packed:
        assert write_packed(d)
    monkeypatch.setattr(intake, "MAX_RUN_RECORDS", 5)
    s = collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    assert s.added == 0 and len(s.refused) == 1 and "over 5 lines" in s.refused[0] and "\n" not in s.refused[0]
    monkeypatch.setattr(intake, "MAX_RUN_RECORDS", 6)
    assert collect(tmp_path / "s.sqlite", [tmp_path / "r"]).added == 1

"""The autotuner study through the sweep's worker pool: a crashed search or fresh process is a record of its kind,
the study finishes, and --resume measures only what the journal lacks.

No GPU: every stage is run by the fault-injecting tuner of tests/faulty_backend.py (its plan stands in for the
cuDNN and PyTorch runners), through the same pool, the same finalize step and the same journal.
"""

from __future__ import annotations

import json

import pytest
from _fleet_data import as_killed, journal_lines
from faulty_backend import autotune_plan

from harness.backends import SweepOptions
from harness.core import cases
from harness.core.errors import UserError
from harness.core.records import CRASHED, OK, TIMEOUT, Record
from harness.run import autotune_study, sweep
from harness.run.journal import JOURNAL_FILE, iter_journal

CASES = ["seed.c8", "quick.seed", "quick.pointwise"]
K = 3
LAYOUTS = ("NCHW",)
# per case: two cudnnFind (DEFAULT, FMA) and two torch (TF32, IEEE) records; the seed case a crosscheck too
N_RECORDS = len(CASES) * 4 + 1


def _study(tmp_path, **kw):
    seen: list[Record] = []
    journal, summary = autotune_study.run([cases.get(c) for c in CASES], K, LAYOUTS, tmp_path / "res",
                                          on_record=seen.append, log=lambda msg: None, plan=autotune_plan(), **kw)
    return journal, summary, seen


def _records(journal) -> list[Record]:
    return [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE)]


def test_a_crashed_search_and_a_crashed_fresh_process_are_records_and_the_study_finishes(tmp_path, faults):
    faults({"quick.seed": "segv", "trial": "abort"})
    journal, summary, seen = _study(tmp_path)
    recs = _records(journal)
    assert len(recs) == len({(r.kind, r.key()) for r in recs}) == N_RECORDS  # every combination once
    assert [r.key() for r in seen] == [r.key() for r in recs]
    by = {(r.case, r.backend, r.math): r for r in recs}
    crashed = by[("quick.seed", "cudnn", "FMA")]  # the search that segfaulted: its own record, its kind
    assert crashed.kind == "autotune" and crashed.status == CRASHED and "SIGSEGV" in crashed.reason
    assert crashed.explanation and autotune_study.is_finding(crashed)
    flipped = by[("quick.seed", "cudnn", "DEFAULT")]  # finalized in the worker: the autotuner's own words
    assert flipped.status == OK and flipped.explanation.startswith("autotuner picked different algorithms")
    assert all(by[(c, "cudnn", m)].status == OK for c in CASES for m in autotune_study.MATHS
               if (c, m) != ("quick.seed", "FMA"))
    torch = [r for r in recs if r.backend == "torch"]  # the fresh process aborted: every torch record says so
    assert len(torch) == len(CASES) * 2 and all(r.kind == "autotune" and r.status == CRASHED for r in torch)
    assert all("fresh process 1 of 3" in r.reason and "SIGABRT" in r.reason and r.explanation for r in torch)
    cross = [r for r in recs if r.kind == "crosscheck"]
    assert len(cross) == 1 and cross[0].status == OK and "TF32" in cross[0].explanation
    end = json.loads((journal.path / "end.json").read_text())
    assert {k: end[k] for k in summary} == summary and end["k"] == K and end["failed_backends"] == ["torch"]
    assert end["flagged"] == sum(map(autotune_study.is_finding, recs)) == 1 + 1 + len(torch)
    assert [f["status"] for f in end["worker_failures"]] == [CRASHED, CRASHED]


def test_resume_measures_only_what_the_journal_lacks(tmp_path, faults):
    faults({})
    journal, _, _ = _study(tmp_path)
    lines = journal_lines(journal.path)
    assert len(lines) == N_RECORDS and all(Record.from_dict(json.loads(x)).status == OK for x in lines)
    kept = lines[:4]  # the crosscheck and the first searches; killed while writing the next record
    as_killed(journal.path, "\n".join(kept) + "\n" + lines[4][:40])
    _, summary, seen = _study(tmp_path, resume=journal.path)
    after = journal_lines(journal.path)
    assert after[:4] == kept and len(after) == N_RECORDS  # nothing journaled twice, nothing lost
    assert len(seen) == N_RECORDS - 4 and {r.key() for r in seen}.isdisjoint(
        Record.from_dict(json.loads(x)).key() for x in kept)
    recs = _records(journal)
    assert len({(r.kind, r.key()) for r in recs}) == N_RECORDS and all(r.status == OK for r in recs)
    assert summary["k"] == K and (journal.path / "end.json").exists()
    _, _, again = _study(tmp_path, resume=journal.path)  # all done: nothing runs
    assert again == [] and len(journal_lines(journal.path)) == N_RECORDS


def test_resume_refuses_a_run_of_another_command(tmp_path, faults):
    faults({})
    other = sweep.run([cases.get("quick.seed")], ["faulty"], SweepOptions(device="cpu"), tmp_path / "res",
                      isolate=False, log=lambda msg: None)
    with pytest.raises(UserError, match="not a run of `convbench autotune`"):
        _study(tmp_path, resume=other.path)


def test_a_hung_fresh_process_is_ended_by_the_watchdog_and_its_records_say_so(tmp_path, faults):
    faults({"trial": "hang"})
    journal, summary, _ = _study(tmp_path, timeout_s=2)
    recs = _records(journal)
    torch = [r for r in recs if r.backend == "torch"]
    assert len(torch) == len(CASES) * 2 and all(r.status == TIMEOUT and "watchdog" in r.reason for r in torch)
    assert all(r.status == OK for r in recs if r.backend != "torch") and len(recs) == N_RECORDS
    assert [f["status"] for f in summary["worker_failures"]] == [TIMEOUT]

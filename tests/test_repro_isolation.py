"""`convbench repro` through the sweep's worker pool: a recomputation that crashes, hangs or runs out of memory is a
repro record with that status and reason, finalized as the sweep's are, and the rest is recomputed in a fresh worker.

No GPU: the faulty backend's sweep is recomputed by its repro runner (tests/faulty_backend.py), which meets the
case's planned fault where the sweep met none.
"""

from __future__ import annotations

from harness.backends import SweepOptions
from harness.core import cases
from harness.core.records import CRASHED, OK, OOM, TIMEOUT, Record
from harness.run import repro, sweep
from harness.run.journal import JOURNAL_FILE, iter_journal

PLAN = {"quick.seed": ("segv", CRASHED), "quick.stem7x7": ("hang", TIMEOUT), "quick.pointwise": ("raise_oom", OOM)}
CASES = [*PLAN, "quick.dilated"]


def test_a_crash_in_a_repro_is_a_record_with_its_status_and_the_repro_goes_on(tmp_path, faults):
    faults({})
    journal = sweep.run([cases.get(c) for c in CASES], ["faulty"], SweepOptions(device="cpu"), tmp_path,
                        isolate=False, log=lambda m: None)
    faults({c: f for c, (f, _) in PLAN.items()})
    lines: list[str] = []
    seen = list(repro.recompute(journal.path, runners={"faulty": "faulty_backend:FaultyRepro"}, timeout_s=3,
                          log=lines.append))
    recs = [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE)]
    measured = [r for r in recs if r.kind == "measurement"]
    again = [r for r in recs if r.kind == "repro"]
    assert len(measured) == len(again) == len({r.key() for r in again}) == len(CASES) * 4  # each recomputed once
    assert [r.key() for r in seen] == [r.key() for r in again]
    by = {(r.case, r.algo): r for r in again}
    for case_id, (_, status) in PLAN.items():
        bad = by[(case_id, "ok3")]
        assert bad.status == status and bad.reason and "\n" not in bad.reason and bad.explanation, bad
        assert bad.extra.get("fresh_process_equal") is None
    assert "SIGSEGV" in by[("quick.seed", "ok3")].reason
    assert "watchdog" in by[("quick.stem7x7", "ok3")].reason
    assert "OutOfMemoryError" in by[("quick.pointwise", "ok3")].reason
    ok = [r for r in again if (r.case, r.algo) not in {(c, "ok3") for c in PLAN}]
    assert len(ok) == len(CASES) * 4 - len(PLAN)  # before the fault, after it (a fresh worker), and the clean case
    assert all(r.status == OK and r.extra["fresh_process_equal"] is True and not r.explanation for r in ok)
    assert all(r.extra["sweep_hash"] == f"{r.case}-{r.algo}" for r in ok)
    assert sum(any(c in line for line in lines) for c in PLAN) == len(PLAN)  # each failure logged


def test_a_repros_slices_are_timed_apart_from_the_sweeps(tmp_path, faults, capsys):
    """slices.jsonl names each slice's record kind, so scripts/run_breakdown.py does not count a repro as sweeping."""
    import sys
    from pathlib import Path

    from harness.run import slicetime

    faults({})
    journal = sweep.run([cases.get("quick.dilated")], ["faulty"], SweepOptions(device="cpu"), tmp_path,
                        isolate=False, log=lambda m: None)
    list(repro.recompute(journal.path, runners={"faulty": "faulty_backend:FaultyRepro"}, log=lambda m: None))
    assert sorted(x["kind"] for x in slicetime.read(journal.path)) == ["measurement", "repro"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import run_breakdown

    run_breakdown.main(str(journal.path))
    out = capsys.readouterr().out
    assert "slices   faulty  " in out and "slices   faulty (repro)" in out

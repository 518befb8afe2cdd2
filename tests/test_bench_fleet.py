"""The synthetic fleet of scripts/bench_fleet.py: its records are what real runs write."""

from __future__ import annotations

import json
import os
from pathlib import Path

from _fleet_data import journal_lines
from _scripts import load

from harness.backends.cudnn_lib import DOCUMENTED_NONDETERMINISTIC
from harness.core.explain import nondeterminism_cause
from harness.core.records import Record
from harness.core.schema import check_record

ROOT = Path(__file__).resolve().parent.parent


def _script():
    return load("bench_fleet")


def test_the_fleet_marks_documented_nondeterminism_as_real_runs_do(tmp_path):
    bf = _script()
    n = sum(bf.gen_machine((mi, 6, 548, str(tmp_path))) for mi in range(5))
    assert n == 5 * 6 * 548
    recs = [json.loads(line) for f in sorted(tmp_path.glob("*/*/run.json")) for line in journal_lines(f.parent)]
    assert len(recs) == n
    for d in recs[:2000]:
        check_record(d)
    documented = [d for d in recs if (d["direction"], d["algo"]) in DOCUMENTED_NONDETERMINISTIC
                  and d["backend"] == "cudnn"]
    assert documented and all(d["extra"]["documented_nondeterministic"] is True for d in documented)
    assert not any("documented_nondeterministic" in d["extra"] for d in recs if d not in documented)
    # every line carries what a real sweep's does: its wall time; a timed one its clock, flags and host time, and a
    # timed cuDNN one its processes' and placements' medians (so collect reads the fleet as it reads real runs)
    assert all(d["extra"]["wall_ms"] > 0 for d in recs)
    timed = [d for d in recs if d["status"] == "ok"]
    assert timed and all({"clock", "flags", "host_ms"} <= d["time"].keys() for d in timed)
    cudnn = [d for d in timed if d["backend"] == "cudnn"]
    assert cudnn and all(len(d["extra"]["placement_medians_ms"]) == 5 and len(d["extra"]["process_medians_ms"]) == 2
                         for d in cudnn)
    unstable = [d for d in recs if d["determinism"] and not d["determinism"]["repeat_equal"]]
    explained = [d for d in unstable if nondeterminism_cause(Record.from_dict(d))]
    # most of the bits that vary are documented; a few are not (what the determinism page must stand out)
    assert len(explained) > 0.9 * len(unstable) and len(explained) < len(unstable)
    assert {d["direction"] for d in recs} == {"fwd", "bwd_data", "bwd_filter"}
    # about one timed line in twenty flagged "wide", as on a real night, and other lines on other nights: a run's
    # key sets of extras change from night to night as a real machine's do
    assert all(d["time"]["flags"] in ([], ["wide"]) for d in timed)
    assert 0.03 < sum(d["time"]["flags"] == ["wide"] for d in timed) / len(timed) < 0.07
    nights = [{(d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], str(d["settings"]))
               for d in map(json.loads, journal_lines(f.parent)) if d["status"] == "ok" and d["time"]["flags"]}
              for f in sorted(tmp_path.glob("*/*/run.json"))[:6]]  # the first machine's six nights
    assert all(nights) and len({frozenset(n) for n in nights}) == 6


def test_the_morning_collects_only_the_newest_night_and_leaves_the_fleet_as_it_was(tmp_path, capsys):
    bf = _script()
    fleet = tmp_path / "fleet"
    for mi in range(3):
        bf.gen_machine((mi, 4, 60, str(fleet)))
    before = sorted(p.relative_to(fleet) for p in fleet.rglob("*"))
    bf.morning(fleet, tmp_path, 2, {**os.environ, "PYTHONPATH": str(ROOT)})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("morning (the newest night's 3 runs into a store of the rest, then the report)")
    assert "3 runs added, 0 updated, 9 unchanged" in line and "0 refused" in line
    assert sorted(p.relative_to(fleet) for p in fleet.rglob("*")) == before  # every night back where it was
    assert (tmp_path / "site-morning" / "index.html").is_file()

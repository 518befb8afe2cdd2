"""Where a run's wall time went: measuring each record, and per slice rankings and operands/references (from
slices.jsonl), against the run's total (the rest: asv, start-up).

    python3 scripts/run_breakdown.py RUN_DIR
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.run import slicetime  # noqa: E402
from harness.run.journal import JOURNAL_FILE, iter_journal  # noqa: E402


def main(run_dir: str) -> int:
    run = Path(run_dir)
    end = json.loads((run / "end.json").read_text()) if (run / "end.json").exists() else {}
    wall = collections.Counter()
    count = collections.Counter()
    for rec in iter_journal(run / JOURNAL_FILE):  # an interrupted run's torn last line is left out
        count[(rec.get("kind"), rec.get("backend", rec.get("source")))] += 1
        ms = (rec.get("extra") or {}).get("wall_ms")
        if ms is not None:
            wall[rec["backend"]] += ms / 1e3
    total = end.get("seconds")
    for (kind, who), n in sorted(count.items(), key=str):
        print(f"{kind:12s} {who or '-':10s} {n:7d} records")
    for backend, s in sorted(wall.items()):
        print(f"measuring {backend:10s} {s:8.1f} s")
    slices = slicetime.read(run)
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in slices:  # a repro's or autotuner's slices apart from the sweep's (lines before 2026-12-01: sweep)
        who = line["backend"] + ("" if line.get("kind", "measurement") == "measurement" else f" ({line['kind']})")
        for k in ("seconds", "measure_s", "rankings_s", "other_s", "records"):
            per[who][k] += line[k]
        per[who]["slices"] += 1
    for backend, c in sorted(per.items()):
        print(f"slices   {backend:10s} {c['seconds']:8.1f} s in {c['slices']} slices: measuring {c['measure_s']:.1f} s, "
              f"rankings {c['rankings_s']:.1f} s, operands/references/sessions {c['other_s']:.1f} s")
    if "sweep_seconds" in end:  # `convbench bench`: the sweep first, then asv
        print(f"sweep before asv     {end['sweep_seconds']:8.1f} s; asv run {end['asv_seconds']:.1f} s")
    if total is not None:
        rest = total - sum(wall.values())
        print(f"run total            {total:8.1f} s; everything else (references, rankings, asv, start-up) {rest:.1f} s")
        if slices:
            outside = total - sum(c["seconds"] for c in per.values())
            print(f"outside the slices   {outside:8.1f} s (asv's processes, worker start-up, fingerprint, summaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Where a run's wall time went: measuring each record, and per slice rankings and operands/references (from
slices.jsonl), against the run's total (the rest: asv, start-up).

    python3 scripts/run_breakdown.py RUN_DIR [--against OTHER_RUN_DIR]

With --against, the records both runs timed, per backend: their measuring wall time and samples in each run, and
the median ratio of their device medians and of their host dispatch times (this run over the other); then the same
by call length (the other run's median). The same
sweep on two lent H200s took 7-27 % longer on one whose host dispatched 19-30 % slower at equal
device times: the sweep's wall follows the host as well as the GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.run import slicetime  # noqa: E402
from harness.run.journal import JOURNAL_FILE, iter_journal, journal_file  # noqa: E402
from harness.run.suite import param_key  # noqa: E402

# Call lengths, by which the sampling rules differ: host-bound short calls, and long calls whose warm-up and
# determinism repeats cost as much device time as their samples.
BANDS_MS = ((0.0, 0.05), (0.05, 0.2), (0.2, 1.0), (1.0, 5.0), (5.0, float("inf")))


def timed(run: Path) -> dict[tuple, dict]:
    """The run's timed measurement records by (backend, direction, param_key)."""
    return {(r["backend"], r["direction"], *param_key(r)): r for r in iter_journal(run / JOURNAL_FILE)
            if r.get("kind") == "measurement" and r.get("time")}


def _figures(pairs: list[tuple[dict, dict]]) -> tuple[list[float], list[int], float]:
    """For (this run's, the other's) records of the same calls: each side's measuring seconds and samples, and
    the median ratio of their device medians."""
    wall = [sum(r["extra"].get("wall_ms", 0) for r in side) / 1e3 for side in zip(*pairs, strict=True)]
    n = [sum(r["time"]["n"] for r in side) for side in zip(*pairs, strict=True)]
    device = statistics.median(x["time"]["median_ms"] / y["time"]["median_ms"] for x, y in pairs)
    return wall, n, device


def against(run: Path, other: Path) -> None:
    mine, theirs = timed(run), timed(other)
    both = [k for k in mine if k in theirs]
    for backend in sorted({k[0] for k in both}):
        pairs = [(mine[k], theirs[k]) for k in both if k[0] == backend]
        wall, n, device = _figures(pairs)
        hosts = [x["time"]["host_ms"] / y["time"]["host_ms"] for x, y in pairs
                 if x["time"].get("host_ms") and y["time"].get("host_ms")]
        host = f"{statistics.median(hosts):.3f}" if hosts else "-"
        print(f"against  {backend:10s} {len(pairs)} records in both: measuring {wall[0]:.1f} s here, {wall[1]:.1f} s "
              f"there; samples {n[0]} / {n[1]}; device median ratio {device:.3f}, host dispatch ratio {host}")
        for low, high in BANDS_MS:  # by the other run's median: where a change of the timer moved the wall
            inside = [(x, y) for x, y in pairs if low <= y["time"]["median_ms"] < high]
            if not inside:
                continue
            w, c, d = _figures(inside)
            band = f">= {low:g} ms" if high == float("inf") else f"{low:g}-{high:g} ms"
            print(f"against  {backend:10s}   {band:12s} {len(inside):5d} records: measuring {w[0]:.1f} / {w[1]:.1f} s, "
                  f"samples {c[0]} / {c[1]}, device median ratio {d:.3f}")


def main(run_dir: str, other: str | None = None) -> int:
    run = Path(run_dir)
    for d in (run, Path(other)) if other else (run,):
        if not (d / journal_file(d)).is_file():
            print(f"run_breakdown: {d} is not a run directory (no {JOURNAL_FILE})", file=sys.stderr)
            return 2
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
    for line in slices:  # a repro's or autotuner's slices apart from the sweep's (lines with no kind: sweep)
        who = line["backend"] + ("" if line.get("kind", "measurement") == "measurement" else f" ({line['kind']})")
        for k in ("seconds", "measure_s", "rankings_s", "other_s", "records", "waited_s"):
            per[who][k] += line.get(k, 0)  # waited_s: not in the lines of older runs
        per[who]["slices"] += 1
    for backend, c in sorted(per.items()):
        print(f"slices   {backend:10s} {c['seconds']:8.1f} s in {c['slices']} slices: measuring {c['measure_s']:.1f} s, "
              f"rankings {c['rankings_s']:.1f} s, operands/references/sessions {c['other_s']:.1f} s; before them "
              f"{c['waited_s']:.1f} s waiting for work made ahead")
    if "sweep_seconds" in end:  # `convbench bench`: the sweep first, then asv
        print(f"sweep before asv     {end['sweep_seconds']:8.1f} s; asv run {end['asv_seconds']:.1f} s")
    if total is not None:
        rest = total - sum(wall.values())
        print(f"run total            {total:8.1f} s; everything else (references, rankings, asv, start-up) {rest:.1f} s")
        if slices:
            outside = total - sum(c["seconds"] for c in per.values())
            print(f"outside the slices   {outside:8.1f} s (asv's processes, worker start-up, fingerprint, summaries; "
                  "a replica's timing pass too where the run's lines lack it)")
    if other:
        against(run, Path(other))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--against", help="another run of the same sweep: the records both timed, side by side")
    args = ap.parse_args()
    sys.exit(main(args.run_dir, args.against))

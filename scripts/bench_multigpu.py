#!/usr/bin/env python3
"""Throughput of `convbench run` on N GPUs against 1 GPU, measured side by side in one invocation.

Runs the same sweep twice through the real command: first on GPU 0 alone, then on every GPU at once (one
worker per GPU, in parallel). Throughput is finished combinations (records) per wall-clock second; the ratio
N-GPU / 1-GPU is the figure the issue asks for (goal: >= 0.9 x N, i.e. 1.8x on two GPUs). Prints both rows and
the ratio, and writes them to <results>/multigpu-<stamp>.json beside the run directories it made.

    python scripts/bench_multigpu.py --cases quick --backends torch,cudnn [--docker] [--check]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.measurement import fingerprint  # noqa: E402
from harness.run.journal import END_FILE, JOURNAL_FILE, find_runs, iter_journal  # noqa: E402


def count_records(run: Path) -> tuple[int, int]:
    """(measurement records, of which ok) in one run directory."""
    total = ok = 0
    for rec in iter_journal(run / JOURNAL_FILE):
        if rec.get("kind", "measurement") == "measurement":
            total += 1
            ok += rec.get("status") == "ok"
    return total, ok


def measure(gpus: str, args, results: Path) -> dict:
    before = set(find_runs(results))
    cmd = [sys.executable, "-m", "harness.cli", "run", "--gpus", gpus, "--results", str(results),
           "--cases", args.cases, "--backends", args.backends]
    if not args.docker:
        cmd.append("--no-docker")
    if args.rows:
        cmd += ["--rows", args.rows]
    print(f"$ {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT)
    wall = time.monotonic() - started
    runs = sorted(set(find_runs(results)) - before)
    counts = [count_records(r) for r in runs]
    total = sum(c[0] for c in counts)
    return {"gpus": gpus, "exit": proc.returncode, "wall_s": round(wall, 2), "runs": [str(r) for r in runs],
            "complete": sum((r / END_FILE).exists() for r in runs), "records": total,
            "ok": sum(c[1] for c in counts), "records_per_s": round(total / wall, 3) if wall > 0 else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="default")
    p.add_argument("--backends", default="torch,cudnn")
    p.add_argument("--results", type=Path, default=ROOT / "results")
    p.add_argument("--docker", action="store_true", help="containers (default: --no-docker processes)")
    p.add_argument("--rows", default=None, help="image rows with --docker")
    p.add_argument("--check", action="store_true", help="exit 1 when the ratio is below 0.9 x N")
    args = p.parse_args()
    found, why = fingerprint.gpus()
    if len(found) < 2:
        print(f"bench_multigpu: needs at least 2 GPUs, found {len(found)} ({why or 'NVML sees them'}); "
              "nothing measured", file=sys.stderr)
        return 3
    n = len(found)
    one = measure(str(found[0]["index"]), args, args.results)
    many = measure("all", args, args.results)
    ratio = many["records_per_s"] / one["records_per_s"] if one["records_per_s"] and many["records_per_s"] else None
    goal = 0.9 * n
    print()
    print(f"{'GPUs':>5} {'wall s':>8} {'records':>8} {'ok':>7} {'records/s':>10} {'runs complete':>14}  exit")
    for label, r in (("1", one), (str(n), many)):
        print(f"{label:>5} {r['wall_s']:8.1f} {r['records']:8d} {r['ok']:7d} {r['records_per_s'] or 0:10.2f} "
              f"{r['complete']:>6}/{len(r['runs']):<7}  {r['exit']}")
    verdict = "n/a" if ratio is None else ("meets" if ratio >= goal else "BELOW")
    print(f"throughput {n} GPUs / 1 GPU: {ratio:.2f}x (goal >= {goal:.1f}x: {verdict})" if ratio else
          "throughput ratio: not measurable (a run produced no records)")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.results / f"multigpu-{stamp}.json"
    out.write_text(json.dumps({"host": socket.gethostname(), "gpus": [g.get("name") for g in found],
                               "date": stamp, "mode": "docker" if args.docker else "native", "cases": args.cases,
                               "backends": args.backends, "one": one, "all": many, "ratio": ratio,
                               "goal": goal}, indent=1))
    print(f"written {out}")
    if args.check and (ratio is None or ratio < goal):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

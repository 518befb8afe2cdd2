#!/usr/bin/env python3
"""What a run's packed copy saves collect: the journal parsed (journals.parse_journal) against its packed copy read
and checked (packed.decode), side by side in one process on the same runs, CPU time per record, best of N; and
proof that both give the same store rows. Runs: the committed real fixture runs (tests/fixtures/runs) and a small
fleet of bench_fleet.py's generator.

    taskset -c 1 python scripts/bench_packed.py          # one pinned core: the figures docs/fleet.md quotes
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_fleet  # noqa: E402

from harness.collect import packed  # noqa: E402
from harness.collect.discovery import Archive, RawRun, discover  # noqa: E402
from harness.collect.journals import journal_identity, parse_journal  # noqa: E402
from harness.collect.store_packing import pack_records  # noqa: E402


def fixture_runs() -> list[RawRun]:
    runs = []
    for item in discover(sorted((ROOT / "tests" / "fixtures" / "runs").glob("*.tar.gz"))):
        if isinstance(item, Archive):
            runs += [r for r in item.items if isinstance(r, RawRun)]
    return runs


def fleet_runs(tmp: Path, machines: int, nights: int) -> list[RawRun]:
    for mi in range(machines):
        bench_fleet.gen_machine((mi, nights, 548, str(tmp), False))
    return [packed.dir_raw(d.parent) for d in sorted(tmp.glob("*/*/run.json"))]


def same(a, b) -> bool:
    """The same store rows from the copy (a) and the journal (b)."""
    vec = all(np.array_equal(a.vectors[k], v, equal_nan=True) if isinstance(v, np.ndarray) else a.vectors[k] == v
              for k, v in b.vectors.items())
    return (a.run == b.run and a.combos == b.combos and a.rankings == b.rankings and vec
            and a.packed == pack_records(list(range(len(b.records))), b.records)[2:])


def measure(name: str, runs: list[RawRun], repeats: int) -> float:
    metas = [journal_identity(r)[0] for r in runs]
    parsed = [parse_journal(r, m) for r, m in zip(runs, metas, strict=True)]  # also warms the identity memo
    copies = [RawRun(r.origin, r.run_json, r.records, r.end_json, packed.encode(p, r.records))
              for r, p in zip(runs, parsed, strict=True)]
    decoded = [packed.decode(c, m) for c, m in zip(copies, metas, strict=True)]
    if not all(same(a, b) for a, b in zip(decoded, parsed, strict=True)):
        raise SystemExit(f"{name}: the packed copy and the journal give different rows")
    n = sum(p.run["n_records"] for p in parsed)
    del parsed, decoded
    best = {"journal": float("inf"), "packed": float("inf")}
    for _ in range(repeats):  # alternated, so that the machine's moods fall on both
        for what in best:
            gc.collect()
            t = time.process_time()
            if what == "journal":
                for r, m in zip(runs, metas, strict=True):
                    parse_journal(r, m)
            else:
                for c, m in zip(copies, metas, strict=True):
                    packed.decode(c, m)
            best[what] = min(best[what], time.process_time() - t)
    j, p = best["journal"] / n * 1e6, best["packed"] / n * 1e6
    size_j = sum(len(r.records) for r in runs) / n
    size_p = sum(len(c.packed) for c in copies) / n
    print(f"{name}: {len(runs)} runs, {n} records; journal parse {j:.2f} CPU-us a record, packed copy read and "
          f"checked {p:.2f} ({p / j:.2f}x); {size_j:.0f} bytes a record of journal, {size_p:.0f} of copy; "
          f"same rows: yes")
    return p / j


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--machines", type=int, default=3)
    ap.add_argument("--nights", type=int, default=20)
    args = ap.parse_args()
    gc.set_threshold(50_000, 20, 100)  # as collect's workers
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(f"bench_packed: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()}, python "
          f"{platform.python_version()}, cores {cpus}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    real = fixture_runs()
    if real:
        measure("committed real runs", real, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        measure("generator fleet", fleet_runs(Path(tmp), args.machines, args.nights), args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What a placement's first call costs a long call: two runs of one catalogue on one GPU, the first (BASE) by a
timer that warmed every placement, the second (NEW) by one that samples a long call's placements on their first
call (TimingPolicy.long_call_ms). For the calls of --min-ms or more, each placement's median is set against its
process's first placement (which both timers warmed: the caller's checked run), in both runs; a first-call cost
shows as NEW's ratios above BASE's. The calls' medians NEW/BASE are printed beside it, with the shorter calls,
which neither change touches, as the control.

    python3 scripts/placement_warmup_effect.py BASE_RUN NEW_RUN [--min-ms 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# Pooled placement medians of a two-process run: the main process's three, then the replica's two
# (harness/run/replicas.py); each process's first placement is the one its checked run warmed.
SAMPLED_FIRST = {1: 0, 2: 0, 4: 3}


def records(run: Path) -> dict[tuple, dict]:
    out = {}
    with open(run / "records.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "measurement" and r.get("status") == "ok" and r.get("time"):
                key = (r["case"], r["backend"], r["direction"], r["algo"], r["math"], r["dtype"], r["layout"],
                       json.dumps(r.get("settings") or {}, sort_keys=True))
                out[key] = r
    return out


def pct(values: list[float]) -> str:
    if not values:
        return "-"
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else (min(values), 0, max(values))
    return f"median {statistics.median(values):+.2f} %, quartiles {q[0]:+.2f} / {q[2]:+.2f} % (n {len(values)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--min-ms", type=float, default=5.0)
    args = ap.parse_args(argv)
    try:
        base, new = records(args.base), records(args.new)
    except (OSError, ValueError) as exc:
        print(f"placement_warmup_effect: cannot read a run: {exc}", file=sys.stderr)
        return 2
    both = [k for k in base if k in new]
    long = [k for k in both if base[k]["time"]["median_ms"] >= args.min_ms]
    for name, run in (("base", base), ("new", new)):
        for i, ref in SAMPLED_FIRST.items():
            ratios = [100 * (p[i] / p[ref] - 1) for k in long
                      if len(p := run[k]["extra"].get("placement_medians_ms") or []) == 5 and p[ref] > 0]
            print(f"{name:4} placement {i} against {ref}, calls >= {args.min_ms:g} ms: {pct(ratios)}")
    for label, keys in ((f">= {args.min_ms:g} ms", long), (f"< {args.min_ms:g} ms (control)",
                                                                 [k for k in both if k not in set(long)])):
        ratios = [100 * (new[k]["time"]["median_ms"] / base[k]["time"]["median_ms"] - 1)
                  for k in keys if base[k]["time"]["median_ms"] > 0]
        print(f"median new/base, calls {label}: {pct(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

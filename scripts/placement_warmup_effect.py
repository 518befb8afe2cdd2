#!/usr/bin/env python3
"""What a placement's first call costs: two two-process runs of one catalogue on one GPU, BASE by the timer that
warms every placement and NEW by a timer that samples some placements on their first call (as tried for the
long calls of the backward nights, docs/performance.md). For the calls of --min-ms or more each placement's median
is set against its process's first placement (which every timer warms: the caller's checked run), in both runs; a
first-call cost shows as NEW's ratios above BASE's. The calls' medians NEW/BASE are printed beside it, with the
shorter calls as the control, and the --top calls whose first-call cost in NEW is largest.

    python3 scripts/placement_warmup_effect.py BASE_RUN NEW_RUN [--min-ms 5] [--top 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from kin_levels import timed as records  # noqa: E402  (identity key -> each timed record of a run)

from harness.collect.discovery import Refused  # noqa: E402
from harness.core.records import Record  # noqa: E402

# Pooled placement medians of a two-process run: the main process's three, then the replica's two
# (harness/run/replicas.py); each process's first placement is the one its checked run warmed.
AGAINST_FIRST = {1: 0, 2: 0, 4: 3}


def first_call_pct(rec: Record, i: int) -> float | None:
    """Placement i's median against its process's first placement, in per cent; None without five placements."""
    p = rec.extra.get("placement_medians_ms") or []
    ref = AGAINST_FIRST[i]
    return 100 * (p[i] / p[ref] - 1) if len(p) == 5 and p[ref] > 0 else None


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else (min(values), 0, max(values))
    return f"median {statistics.median(values):+.2f} %, quartiles {q[0]:+.2f} / {q[2]:+.2f} % (n {len(values)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--min-ms", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    try:
        base, new = records(args.base), records(args.new)
    except (OSError, ValueError, Refused) as exc:
        print(f"placement_warmup_effect: cannot read a run: {exc}", file=sys.stderr)
        return 2
    both = [k for k in base if k in new]
    long = [k for k in both if base[k].median_ms >= args.min_ms]
    for name, run in (("base", base), ("new", new)):
        for i, ref in AGAINST_FIRST.items():
            pcts = [v for k in long if (v := first_call_pct(run[k], i)) is not None]
            print(f"{name:4} placement {i} against {ref}, calls >= {args.min_ms:g} ms: {spread(pcts)}")
    short = [k for k in both if base[k].median_ms < args.min_ms]
    for label, keys in ((f">= {args.min_ms:g} ms", long), (f"< {args.min_ms:g} ms (control)", short)):
        ratios = [100 * (new[k].median_ms / base[k].median_ms - 1) for k in keys]
        print(f"median new/base, calls {label}: {spread(ratios)}")
    worst = sorted(((first_call_pct(new[k], 1) or 0.0, k) for k in long), reverse=True)[:args.top]
    for pct, k in worst:
        r = new[k]
        call = " ".join((r.case, r.backend, r.direction, r.algo, r.math, r.dtype, r.layout))
        print(f"first call {pct:+.1f} % (base {first_call_pct(base[k], 1) or 0.0:+.1f} %): {call}, "
              f"median {base[k].median_ms:.3f} -> {r.median_ms:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

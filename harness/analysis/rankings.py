"""cuDNN's own rankings held against what convbench measured in the same run.

A cuDNN sweep asks cuDNN twice which algorithm to use for each problem: ``cudnnGet*Algorithm_v7`` (the heuristic,
what a framework runs with ``cudnn.benchmark`` off) and ``cudnnFind*Algorithm`` (a timed search, what it runs
with ``benchmark`` on). The sweep then times every algorithm itself. Put side by side, they answer what a user
tuning a network asks: how much does trusting the heuristic cost on this GPU and stack, is the search worth its
time, and does cuDNN's own timing agree with ours. Pure functions over the store's ranking and record dicts.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..core.records import OK, Record, RecordKind

SUCCESS = "CUDNN_STATUS_SUCCESS"
# A pick this much slower than the measured fastest is counted as a miss a user would notice; below it, a
# pick within the run-to-run noise of a call is as good as the fastest (analysis/timechange.py: 4-10 %).
NOTICEABLE = 1.10
_PROBLEM = ("case", "direction", "dtype", "layout", "math")


def _top(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """cuDNN's first choice: the lowest rank it reports as runnable."""
    ok = [r for r in rows if r["status"] == SUCCESS]
    return min(ok, key=lambda r: r["rank"]) if ok else None


def compare_rankings(rankings: list[dict[str, Any]], records: list[Record]) -> list[dict[str, Any]]:
    """One row per problem (case, direction, dtype, layout, math) that cuDNN ranked and convbench timed: the
    measured fastest algorithm, the heuristic's and Find's first choices, and what each choice costs against
    the fastest (measured median of the choice / measured median of the fastest; None when the choice was not
    timed, e.g. its workspace was over the sweep's limit)."""
    measured: dict[tuple, dict[str, float]] = {}
    for x in records:
        if (x.backend == "cudnn" and x.kind == RecordKind.MEASUREMENT and x.status == OK and x.median_ms
                and not x.settings):
            times = measured.setdefault(tuple(getattr(x, k) for k in _PROBLEM), {})
            times[x.algo] = min(x.median_ms, times.get(x.algo, float("inf")))
    ranked: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for r in rankings:
        ranked.setdefault(tuple(r[k] for k in _PROBLEM), {}).setdefault(r["source"], []).append(r)
    rows = []
    for problem, by_source in sorted(ranked.items()):
        times = measured.get(problem)
        if not times:
            continue
        best_algo = min(times, key=times.__getitem__)
        best_ms = times[best_algo]
        row: dict[str, Any] = dict(zip(("case", "direction", "dtype", "layout", "math"), problem, strict=True))
        row.update(best_algo=best_algo, best_ms=best_ms, n_timed=len(times))
        for source, name in (("get_v7", "heuristic"), ("find", "find")):
            top = _top(by_source.get(source, []))
            algo = top["algo"] if top else None
            ms = times.get(algo) if algo else None
            row[f"{name}_algo"] = algo
            row[f"{name}_ms"] = ms
            row[f"{name}_cost"] = ms / best_ms if ms else None
            row[f"{name}_own_ms"] = top["time_ms"] if top else None  # cuDNN's own time (Find only)
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How often each of cuDNN's choices was the measured fastest, and what the heuristic costs when it is not."""
    out: dict[str, Any] = {"problems": len(rows)}
    for name in ("heuristic", "find"):
        costs = [r[f"{name}_cost"] for r in rows if r[f"{name}_cost"] is not None]
        out[name] = {
            "ranked": sum(r[f"{name}_algo"] is not None for r in rows),  # Find's: forward sweeps by default
            "timed": len(costs),
            "fastest": sum(r[f"{name}_algo"] == r["best_algo"] for r in rows),
            "noticeable": sum(c >= NOTICEABLE for c in costs),
            "median_cost": statistics.median(costs) if costs else None,
            "worst_cost": max(costs) if costs else None,
            "untimed": sum(r[f"{name}_algo"] is not None and r[f"{name}_cost"] is None for r in rows),
        }
    # Find's own time of its choice against convbench's median of the same algorithm: a cross-check of the timer
    agree = [r["find_own_ms"] / r["find_ms"] for r in rows if r["find_own_ms"] and r["find_ms"]]
    out["find_own_over_ours"] = statistics.median(agree) if agree else None
    return out

"""cuDNN's own rankings page: what cuDNN's heuristic (Get_v7) and timed search (Find) would have chosen for each
problem, against the algorithm convbench measured fastest in the same run (analysis/rankings.py).

The sweeps store both rankings beside every measurement; this page is where a user deciding between
``cudnn.benchmark`` on and off, or checking a new cuDNN's heuristics on their GPU, reads them. One section per
machine and image: the records the other pages show (the newest of each combination, model.current_records) held
against the rankings of the runs they came from, so that a ranking is only ever compared with a measurement of
its own run; the summary; and the problems where a choice cost most.
"""

from __future__ import annotations

from typing import Any

from ..analysis.rankings import NOTICEABLE, compare_rankings, summarise
from .model import MAX_ROWS, Model

SHOWN = 200  # problems per section, worst heuristic cost first; the summary counts them all


def rankings(g: Model) -> dict[str, Any]:
    sections = []
    store = g.store
    for (machine, image), current in sorted(g.current.items()):
        by_run: dict[int, list[dict[str, Any]]] = {}
        for x in current:
            if x["run"].get("n_rankings") and x["backend"] == "cudnn":
                by_run.setdefault(x["run"]["id"], []).append(x)
        runs = sorted({x["run"]["id"]: x["run"] for xs in by_run.values() for x in xs}.values(),
                      key=lambda r: r["started"])
        problems: dict[tuple, dict[str, Any]] = {}
        for run in reversed(runs):  # a problem ranked by two runs: the newer run's
            for row in compare_rankings(store.rankings(run["id"]), by_run[run["id"]]):
                problems.setdefault(tuple(row[k] for k in ("case", "direction", "dtype", "layout", "math")), row)
        rows = list(problems.values())
        if not rows:
            continue
        rows.sort(key=lambda x: (-(x["heuristic_cost"] or 0), -(x["find_cost"] or 0), x["case"]))
        shown = min(SHOWN, MAX_ROWS)
        sections.append({"machine": machine, "label": g.minfo[machine].label if machine in g.minfo else machine,
                         "image": image, "runs": [r["run_id"] for r in runs],
                         "summary": summarise(rows), "rows": rows[:shown],
                         "left_out": max(0, len(rows) - shown)})
    return {"sections": sections, "noticeable": NOTICEABLE}

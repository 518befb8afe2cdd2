"""What the report reads of the store per run: the newest record of every combination over a machine's runs
(with its samples, for the pages and the judgements), and the history runs' keys and medians the gate reads.

Shared by the model (report/model.py) and the judgements (report/judging.py), including those made in the pool's
processes, so both read the records the same way.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..collect.store import Store
from ..core.records import OK, Record, Timing


def current_records(store: Store, runs: list[dict[str, Any]], vectors: dict[int, dict[str, np.ndarray]],
                    memo: dict[int, list[Record]] | None = None) -> list[Record]:
    """The newest record of every combination over the runs of one machine and image (oldest first).

    A nightly run covers everything, so only the newest run is read; runs that each cover part of a sweep
    (a forward run, then autotune, then backward, one after another) are read in turn for what no newer run
    measured. Each record says which run it came from (Record.run)."""
    out: list[Record] = []
    for r, new in covering_runs(runs, vectors):
        if memo is None or r["id"] not in memo:
            recs = store.records(r["id"])  # with samples: comparisons test times on them
            if memo is not None:
                memo[r["id"]] = recs
        for x in memo[r["id"]] if memo is not None else recs:
            if x.combo in new:
                x.run = r
                out.append(x)
    return out


_COMBO_SETS: dict[bytes, frozenset] = {}  # a run's combination ids -> their set, shared by the runs that have them


def _combo_set(v: dict[str, Any]) -> frozenset:
    """A run's combinations as a set, made once and kept in its vectors. Runs with the same combinations (a
    machine's nights) share one set: one set a run held 0.7 GiB more in a fleet report (docs/harness.md)."""
    combos = v.get("combo_set")
    if combos is None:
        key = v["combo"].tobytes()
        combos = _COMBO_SETS.get(key)
        if combos is None:
            if len(_COMBO_SETS) >= 1024:
                _COMBO_SETS.clear()
            combos = _COMBO_SETS[key] = frozenset(v["combo"].tolist())
        v["combo_set"] = combos
    return combos


def covering_runs(runs: list[dict[str, Any]], vectors: dict[int, dict[str, np.ndarray]]) -> list[tuple[dict, set]]:
    """The runs current_records reads, newest first, each with the combinations no newer run measured (from the
    vectors alone). A fleet report asks this of a machine's runs for every judgement and every key of one: each
    run's set is made once (_combo_set; else 2.5 CPU-s of set-making a fleet report, docs/history.md)."""
    seen: set[int] = set()
    out = []
    for r in reversed(runs):
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            continue
        new = _combo_set(v) - seen
        if new:
            out.append((r, new))
            seen |= new
    return out


def combinations(store: Store) -> dict[int, tuple[tuple, dict[str, Any]]]:
    """Each combination by its id: (its COMBO_COLUMNS values, its settings), what a record of it is made of."""
    return {i: ((c["key"], c["case"], c["backend"], c["direction"], c["algo"], c["math"], c["dtype"], c["layout"],
                 c["settings"], c["kind"]), json.loads(c["settings"])) for i, c in store.combos().items()}


def history_records(store: Store, runs: list[dict[str, Any]], vectors: dict[int, dict[str, np.ndarray]],
                    combos: dict[int, tuple[tuple, dict[str, Any]]]) -> list[list[Record]]:
    """What ``compare_runs`` reads of the earlier runs it takes as the gate's history (timechange.own_noise):
    each ok record with its combination, status and median only (its other fields None, its settings shared with
    its combination's other history records: read-only), one list per run, as ``current_records(store, [run])``
    gives them otherwise. Read as the run's medians (Store.medians, float64 as the records have them) and its
    vectors' status instead of as whole records: decoding every text and sample of 500 history runs was 6.8 of
    54 CPU-s of a profiled 10^7-record report."""
    out = []
    for r in runs:
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            out.append([])
            continue
        ok = dict(zip(v["combo"].tolist(), v["ok"].tolist(), strict=True))
        ids, medians = store.medians(r["id"])
        recs = []
        for c, m in zip(ids, medians, strict=True):
            if ok.get(c):
                row, settings = combos[c]
                recs.append(Record(row[1], row[2], row[3], row[4], row[5], row[6], row[7], OK, settings=settings,
                                   time=None if m is None else Timing(m, None, None, None, None), kind=row[9],
                                   combo=c, combo_key=row[0]))
        out.append(recs)
    return out

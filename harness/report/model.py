"""The model every page renders: the store's runs grouped by machine and image, the newest record of every
combination, nightly series with change points, and the plan of the judgements (judging.py: image transitions
and each machine's nights paired for the morning question, compared with the gate's own ``compare_runs``).

The model aggregates, so the index stays small for a fleet of any size; anything per run or per combination lives
on the per-topic and per-machine pages, and long tables are capped with the count of rows left out.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis import changepoint
from ..analysis.pairing import machine_key
from ..analysis.thresholds import Thresholds
from ..collect.store import Store
from ..core import heap
from ..core.records import Record, RecordKind
from .fmt import hardware_label, settings_str, slug
from .judging import (
    Judging,
    MachineInfo,
    NightlyComparison,
    judge,
    judge_in,
    judgements,
    nightly_plan,
    transition_pairs,
)
from .reading import current_records

MAX_ROWS = 3000  # per table; more rows are counted, not shown
MAX_CHARTS = 24  # series charts per machine page
MAX_EVIDENCE_PLOTS = 40  # sample strips per page: each is two rows of up to 100 dots


# ---- the model the templates render ------------------------------------------------------------------------------

@dataclass
class Series:
    """Nightly values of one (machine, image): rows are runs (oldest first), columns combination ids."""

    machine: str
    image: str
    runs: list[dict[str, Any]]
    combos: np.ndarray
    median: np.ndarray
    hashes: np.ndarray
    chosen: np.ndarray
    changes: dict[int, list[changepoint.Change]] = field(default_factory=dict)


@dataclass
class Model:
    """What every page renders (``gather``); the judgements (nightly, transitions, regressed) after ``finish``."""

    title: str
    runs: list[dict[str, Any]]  # oldest first
    combos: dict[int, dict[str, Any]]
    names: dict[int, str]
    machines: list[MachineInfo]
    minfo: dict[str, MachineInfo]
    images: list[str]
    latest: dict[tuple[str, str], dict[str, Any]]  # (machine, image) -> its newest run
    series: list[Series]
    steps_up: Counter
    store: Store
    current: dict[tuple[str, str], list[Record]]  # (machine, image) -> newest record of each combination
    info: dict[int, dict[str, Any]]  # run id -> run.json (fingerprint, options)
    plan: list[tuple[Any, list[tuple]]]  # each machine's nightly comparisons, before they are judged
    judging: Judging | None = None
    transitions: list[dict[str, Any]] = field(default_factory=list)
    regressed: Counter = field(default_factory=Counter)
    nightly: list[tuple[Any, list[NightlyComparison]]] = field(default_factory=list)
    fp_offered: list[dict[str, Any]] | None = None  # the fingerprints page's runs, computed once
    morning: dict[str, Any] | None = None  # the index's machine blocks (morning.morning), computed once judged
    thresholds: Thresholds = field(default_factory=Thresholds)  # the gate's settings every judgement is made with


SERIES_COLUMNS = ("median", "hash", "chosen")  # the run vectors' columns a series is made of


def _series(store: Store, machine: str, image: str, runs: list[dict[str, Any]],
            vectors: dict[int, dict[str, np.ndarray]]) -> Series:
    ids = np.unique(np.concatenate([vectors[r["id"]]["combo"] for r in runs if r["id"] in vectors] or [[]]))
    ids = ids.astype(np.int64)
    T, S = len(runs), len(ids)
    med = np.full((T, S), np.nan)
    hashes = np.zeros((T, S), dtype=np.int64)
    chosen = np.full((T, S), -1, dtype=np.int32)
    for i, r in enumerate(runs):
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            continue
        cols = np.searchsorted(ids, v["combo"])
        ok = v["ok"]
        med[i, cols[ok]] = v["median"][ok]
        hashes[i, cols[ok]] = v["hash"][ok]
        chosen[i, cols] = v["chosen"]
    return Series(machine, image, runs, ids, med, hashes, chosen)


def machine_series(store: Store, m: MachineInfo, vectors: dict[int, dict[str, np.ndarray]],
                   changes: list[dict[int, list[changepoint.Change]]] | None = None) -> Iterator[Series]:
    """A machine's nightly series, one per image in its order, each with its change points; made one at a time
    (gather drops each series' columns from the vectors once it holds them). ``changes``: each series' change
    points as the report's process found them, given to a pool process that draws the machine's pages: the same
    answer, without searching a fleet's series a second time (0.9-1.2 CPU-s of a fleet report)."""
    for i, img in enumerate(m.images):
        rs = [r for r in m.runs if r["image"] == img]
        s = _series(store, m.name, img, rs, vectors)
        if changes is not None:
            s.changes = changes[i]
        else:
            s.changes = changepoint.detect_matrix(s.median) if len(rs) >= 2 * changepoint.MIN_SIZE else {}
        yield s


def distinct_per_column(M: np.ndarray, missing: int) -> np.ndarray:
    S = np.sort(M, axis=0)
    new = np.ones(S.shape, dtype=bool)
    new[1:] = S[1:] != S[:-1]
    return (new & (S != missing)).sum(axis=0)


def combo_label(c: dict[str, Any]) -> dict[str, Any]:
    settings = json.loads(c["settings"]) if isinstance(c["settings"], str) else c["settings"]
    if c.get("kind", RecordKind.MEASUREMENT) != RecordKind.MEASUREMENT:
        settings = {"record": c["kind"], **settings}
    return {"case": c["case"], "backend": c["backend"], "direction": c["direction"], "algo": c["algo"],
            "math": c["math"], "dtype": c["dtype"], "layout": c["layout"], "settings": settings_str(settings),
            "raw_settings": settings}


def one_machine_per_gpu(runs: list[dict[str, Any]], info: dict[int, dict[str, Any]]) -> None:
    """A machine is its GPU on its host, not a name: where one machine name covers several GPUs (a name reused
    when the hardware behind it changed; lent GPUs ran under one name on 18 GPUs, docs/harness.md),
    each run's name is followed by its GPU's UUID (and host where those differ), so that pages, series, change
    points and image transitions never mix two GPUs. Runs with no GPU UUID under such a name say so."""
    keys = {r["id"]: machine_key(r, info[r["id"]]["fingerprint"] or {}) for r in runs}
    by_name: dict[str, set[str]] = defaultdict(set)
    for r in runs:
        by_name[r["machine"]].add(keys[r["id"]])
    many_hosts = {name: len({k.split("/", 1)[0] for k in ids if not k.startswith("machine:")}) > 1
                  for name, ids in by_name.items() if len(ids) > 1}
    for r in runs:
        name, key = r["machine"], keys[r["id"]]
        if name not in many_hosts:
            continue
        if key.startswith("machine:"):
            r["machine"] += " (no GPU UUID)"
            continue
        host, gpu = key.split("/", 1)
        r["machine"] += f" ({host}/{gpu[:12]})" if many_hosts[name] else f" ({gpu[:12]})"


def gather(store: Store, title: str, pool: Any = None, complete: bool = True,
           thresholds: Thresholds | None = None) -> Model:
    """The model of every page. ``pool`` (a multiprocessing pool forked before the store was read): the
    judgements run in its processes. ``complete=False``: without the judgements yet (``finish(g)`` adds them).
    ``thresholds``: the gate's settings (analysis/thresholds.py; default: its calibrated ones)."""
    th = thresholds or Thresholds()
    runs = store.runs()
    info = store.run_jsons()  # fingerprint and options: stacks, studies
    one_machine_per_gpu(runs, info)
    combos = store.combos()
    names = store.names()
    fps: dict[int, dict[str, Any]] = {}
    by_machine: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_machine[r["machine"]].append(r)
    images_order: list[str] = []
    for r in runs:
        if r["image"] not in images_order:
            images_order.append(r["image"])
    machines: list[MachineInfo] = []
    for m in sorted(by_machine):
        rs = by_machine[m]
        known = [r for r in rs if r["hardware"] != "unknown"] or rs  # asv results record no hardware
        fp = info[known[-1]["id"]]["fingerprint"]
        fps[known[-1]["id"]] = fp
        imgs = list(dict.fromkeys(r["image"] for r in rs))
        machines.append(MachineInfo(m, slug(m), known[-1]["hardware"], hardware_label(known[-1], fp), imgs, rs,
                                    fp))
    minfo = {m.name: m for m in machines}
    latest = {(r["machine"], r["image"]): r for r in runs}  # runs are oldest first: the last one wins

    # nightly series and change points, per (machine, image)
    all_vectors = store.vectors([r["id"] for r in runs], ("combo", "ok", *SERIES_COLUMNS))
    runs_of: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        runs_of[(r["machine"], r["image"])].append(r)
    plan = nightly_plan(runs, info)
    pairs = transition_pairs(machines, latest, info)
    # the judgements (60% of a fleet report's CPU) run in the pool's processes while this one reads and draws
    pending = judge_in(pool, store, judgements(plan, pairs, runs_of, all_vectors), th) if pool is not None else None
    memo: dict[int, list[Record]] = {}
    current = {key: current_records(store, runs_of[key], all_vectors, memo) for key in latest}
    series: list[Series] = []
    for m in machines:
        for s in machine_series(store, m, all_vectors):
            for r in s.runs:  # the series holds them now; the rest of the report reads combo and ok alone
                for column in SERIES_COLUMNS:
                    all_vectors.get(r["id"], {}).pop(column, None)
            series.append(s)
    heap.release_freed()  # the series columns' blobs, dropped above
    steps_up: Counter = Counter()
    for s in series:
        for _col, chs in s.changes.items():
            steps_up[(s.machine, s.image)] += sum(c.ratio > 1 for c in chs)
    g = Model(title=title, runs=runs, combos=combos, names=names, machines=machines, minfo=minfo,
              images=images_order, latest=latest, series=series, steps_up=steps_up, store=store, current=current,
              info=info, plan=plan, judging=Judging(pending, pairs, runs_of, all_vectors, memo), thresholds=th)
    if complete:
        finish(g)
    return g


def finish(g: Model) -> None:
    """The part of the model made of judgements (nightly comparisons, image transitions, their counts), once the
    pool's processes have made theirs: gather(complete=False) leaves it for after the pages that need none."""
    if g.judging is None:
        return  # finished already
    j, g.judging = g.judging, None
    g.transitions, g.regressed, g.nightly = judge(j, g.plan, g.store, g.info, g.latest, g.current, g.thresholds)

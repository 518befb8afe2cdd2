"""The model every page renders: the store's runs grouped by machine and image, the newest record of every
combination, nightly series with change points, image transitions compared with the gate's own
``compare_records``, and each machine's nights paired for the morning question (pairing.py).

The model aggregates, so the index stays small for a fleet of any size; anything per run or per combination lives
on the per-topic and per-machine pages, and long tables are capped with the count of rows left out.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis import changepoint, pairing
from ..analysis.compare import compare_records
from ..analysis.timechange import Thresholds
from ..collect.store import Store
from ..core.records import OK
from .fmt import hardware_label, settings_str, slug

MAX_ROWS = 3000  # per table; more rows are counted, not shown
MAX_CHARTS = 24  # series charts per machine page
MAX_EVIDENCE_PLOTS = 40  # sample strips per page: each is two rows of up to 100 dots


# ---- the model the templates render ------------------------------------------------------------------------------

@dataclass
class MachineInfo:
    name: str
    slug: str
    hardware: str
    label: str
    images: list[str]
    runs: list[dict[str, Any]]
    latest_fp: dict[str, Any]


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
class Judging:
    """What ``finish`` needs to add the judgements: the pool's pending answer and the inputs it was given."""

    pending: Any  # multiprocessing AsyncResult, or None: judged in this process
    pairs: list[tuple]
    runs_of: dict[tuple[str, str], list[dict[str, Any]]]
    vectors: dict[int, dict[str, np.ndarray]]
    memo: dict[int, list[dict[str, Any]]]


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
    current: dict[tuple[str, str], list[dict[str, Any]]]  # (machine, image) -> newest record of each combination
    info: dict[int, dict[str, Any]]  # run id -> run.json (fingerprint, options)
    plan: list[tuple[Any, list[tuple]]]  # each machine's nightly comparisons, before they are judged
    judging: Judging | None = None
    transitions: list[dict[str, Any]] = field(default_factory=list)
    regressed: Counter = field(default_factory=Counter)
    nightly: list[tuple[Any, list[NightlyComparison]]] = field(default_factory=list)
    fp_offered: list[dict[str, Any]] | None = None  # the fingerprints page's runs, computed once


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


def _distinct_per_column(M: np.ndarray, missing: int) -> np.ndarray:
    S = np.sort(M, axis=0)
    new = np.ones(S.shape, dtype=bool)
    new[1:] = S[1:] != S[:-1]
    return (new & (S != missing)).sum(axis=0)


def _combo_label(c: dict[str, Any]) -> dict[str, Any]:
    settings = json.loads(c["settings"]) if isinstance(c["settings"], str) else c["settings"]
    if c.get("kind", "measurement") != "measurement":
        settings = {"record": c["kind"], **settings}
    return {"case": c["case"], "backend": c["backend"], "direction": c["direction"], "algo": c["algo"],
            "math": c["math"], "dtype": c["dtype"], "layout": c["layout"], "settings": settings_str(settings),
            "raw_settings": settings}


def current_records(store: Store, runs: list[dict[str, Any]], vectors: dict[int, dict[str, np.ndarray]],
                    memo: dict[int, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """The newest record of every combination over the runs of one machine and image (oldest first).

    A nightly run covers everything, so only the newest run is read; runs that each cover part of a sweep
    (a forward run, then autotune, then backward, one after another) are read in turn for what no newer run
    measured. Each record says which run it came from."""
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for r in reversed(runs):
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            continue
        new = set(v["combo"].tolist()) - seen
        if not new:
            continue
        if memo is None or r["id"] not in memo:
            recs = store.records(r["id"])  # with samples: comparisons test times on them
            if memo is not None:
                memo[r["id"]] = recs
        for x in memo[r["id"]] if memo is not None else recs:
            if x["combo"] in new:
                x["run"] = r
                out.append(x)
        seen |= new
    return out


def combo_keys(store: Store) -> dict[int, str]:
    """Each combination's record key by its id."""
    return {i: c["key"] for i, c in store.combos().items()}


def history_records(store: Store, runs: list[dict[str, Any]], vectors: dict[int, dict[str, np.ndarray]],
                    keys: dict[int, str]) -> list[list[dict[str, Any]]]:
    """What ``compare_records`` reads of the earlier runs it takes as the gate's history (timechange.own_noise):
    the key and median of each ok record, one list per run, as ``current_records(store, [run])`` would give
    them. Read as the run's medians (Store.medians, float64 as the records have them) and its vectors' status
    instead of as whole records: decoding every text and sample of 500 history runs was 6.8 of 54 CPU-s
    of a profiled 10^7-record report."""
    out = []
    for r in runs:
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            out.append([])
            continue
        ok = dict(zip(v["combo"].tolist(), v["ok"].tolist(), strict=True))
        combos, medians = store.medians(r["id"])
        out.append([{"key": keys[c], "status": OK, "median_ms": m}
                    for c, m in zip(combos, medians, strict=True) if ok.get(c)])
    return out


def gather(store: Store, title: str, pool: Any = None, complete: bool = True) -> Model:
    """The model of every page. ``pool`` (a multiprocessing pool forked before the store was read): the
    judgements run in its processes. ``complete=False``: without the judgements yet (``finish(g)`` adds them)."""
    runs = store.runs()
    info = store.run_jsons()  # fingerprint and options: stacks, studies
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
    all_vectors = store.vectors([r["id"] for r in runs])
    runs_of: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        runs_of[(r["machine"], r["image"])].append(r)
    plan = _nightly_plan(runs, info)
    pairs = _transition_pairs(machines, latest)
    # the judgements (60% of a fleet report's CPU) run in the pool's processes while this one reads and draws
    pending = _judge_in(pool, store, _judgements(plan, pairs, runs_of, all_vectors)) if pool is not None else None
    memo: dict[int, list[dict[str, Any]]] = {}
    current = {key: current_records(store, runs_of[key], all_vectors, memo) for key in latest}
    series: list[Series] = []
    for m in machines:
        for img in m.images:
            rs = [r for r in m.runs if r["image"] == img]
            s = _series(store, m.name, img, rs, all_vectors)
            s.changes = changepoint.detect_matrix(s.median) if len(rs) >= 2 * changepoint.MIN_SIZE else {}
            series.append(s)
    steps_up: Counter = Counter()
    for s in series:
        for _col, chs in s.changes.items():
            steps_up[(s.machine, s.image)] += sum(c.ratio > 1 for c in chs)
    g = Model(title=title, runs=runs, combos=combos, names=names, machines=machines, minfo=minfo,
              images=images_order, latest=latest, series=series, steps_up=steps_up, store=store, current=current,
              info=info, plan=plan, judging=Judging(pending, pairs, runs_of, all_vectors, memo))
    if complete:
        finish(g)
    return g


def finish(g: Model) -> None:
    """The part of the model made of judgements (nightly comparisons, image transitions, their counts), once the
    pool's processes have made theirs: gather(complete=False) leaves it for after the pages that need none."""
    if g.judging is None:
        return  # finished already
    j, g.judging = g.judging, None
    pending, plan, pairs, runs_of, all_vectors, memo = j.pending, g.plan, j.pairs, j.runs_of, j.vectors, j.memo
    store, info, latest, current = g.store, g.info, g.latest, g.current
    verdicts: dict[tuple, list[Any]] = {}  # one compare_records per pair of record sets, shared by the pages
    if pending is not None:
        try:
            parts = pending.get()
        except Exception:  # noqa: BLE001 - a pool that failed (a process killed, a store it could not open):
            parts = []  # this process judges instead, and an error of the judgement itself is raised here
        for part in parts:
            verdicts.update(part)
    nightly = nightly_comparisons(store, plan, info, all_vectors, memo, verdicts)
    th = Thresholds()
    del memo

    # image transitions on each machine: latest run of an image vs latest run of the image that followed it
    transitions = []
    for m, a, b in pairs:
        rb, rh = latest[(m.name, a)], latest[(m.name, b)]
        findings = judged(current[(m.name, a)], current[(m.name, b)], th, verdicts,
                          key=_key(runs_of[(m.name, a)], runs_of[(m.name, b)], (), all_vectors))
        for f in findings:
            f.machine, f.base_run, f.head_run = m.name, rb["run_id"], rh["run_id"]
        transitions.append({"machine": m.name, "slug": m.slug, "label": m.label, "base": rb, "head": rh,
                            "findings": findings})
    del all_vectors

    # per-(machine, image) regression counts for the overview
    regressed: Counter = Counter()
    for t in transitions:
        regressed[(t["machine"], t["head"]["image"])] += sum(f.verdict == "regression" for f in t["findings"])
    g.transitions, g.regressed, g.nightly = transitions, regressed, nightly



@dataclass
class NightlyComparison:
    """One machine's latest night against a base night, judged by the gate's own ``compare_records``."""

    machine: pairing.MachineNights
    comparison: pairing.Comparison
    findings: list[Any]  # compare.Finding
    base_records: dict[str, dict[str, Any]]  # by record key: the drill-down shows both records
    head_records: dict[str, dict[str, Any]]
    base_fp: dict[str, Any]
    head_fp: dict[str, Any]


def _transition_pairs(machines: list[MachineInfo], latest: dict[tuple[str, str], dict[str, Any]]) -> list[tuple]:
    """(machine, image, next image) of every image transition: the latest run of an image against the latest run
    of the image that followed it on the same machine."""
    pairs = []
    for m in machines:
        # asv results and the suite's own journals are two views, not two images: each is compared with its kind
        for source in ("journal", "asv"):
            imgs = [i for i in m.images if latest[(m.name, i)]["source"] == source]
            pairs.extend((m, a, b) for a, b in zip(imgs[:-1], imgs[1:], strict=True))
    return pairs


def _nightly_plan(runs: list[dict[str, Any]], info: dict[int, dict[str, Any]]) -> list[tuple[Any, list[tuple]]]:
    """Every machine's nights (pairing.py) with, for each of its comparisons, the earlier runs of the base's
    machine and stack that the gate reads as history."""
    out = []
    for m in pairing.machines(runs, info):
        comps = []
        for c in m.comparisons:
            earlier = pairing.history_runs(c.base.runs[-1], info[c.base.runs[-1]["id"]]["fingerprint"],
                                           [r for n in m.nights for r in n.runs],
                                           lambda r: info[r["id"]]["fingerprint"])
            comps.append((c, earlier))
        out.append((m, comps))
    return out


def _side(runs: list[dict[str, Any]], vectors: dict[int, dict[str, np.ndarray]]) -> tuple[int, ...]:
    """The ids of the runs ``current_records`` takes records from, found from the vectors alone."""
    seen: set[int] = set()
    ids = []
    for r in reversed(runs):
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            continue
        new = set(v["combo"].tolist()) - seen
        if new:
            ids.append(r["id"])
            seen |= new
    return tuple(sorted(ids))


def _key(base: list[dict[str, Any]], head: list[dict[str, Any]], history: Any,
         vectors: dict[int, dict[str, np.ndarray]]) -> tuple:
    """What a judgement is kept under: the runs each side's records come from (base, head, each history run)."""
    return (_side(base, vectors), _side(head, vectors), *(_side([r], vectors) for r in history))


def judged(base: list[dict[str, Any]], head: list[dict[str, Any]], th: Thresholds,
           verdicts: dict[tuple, list[Any]], history: Any = (), *, key: tuple | None = None) -> list[Any]:
    """``compare_records`` of two record sets (with the history of the base's machine and stack, as the gate
    has it), once per pair of the runs they come from: a machine's previous stack is usually its previous image,
    and the two pages share the one judgement. ``history`` may be a callable that reads it, called only when the
    judgement is not already known."""
    if key is None:
        key = tuple(tuple(sorted({x["run"]["id"] for x in side})) for side in (base, head, *history))
    if key not in verdicts:
        verdicts[key] = compare_records(base, head, th, history() if callable(history) else history)
    return verdicts[key]


def _judgements(plan: list[tuple[Any, list[tuple]]], pairs: list[tuple], runs_of: dict[tuple[str, str], list],
                vectors: dict[int, dict[str, np.ndarray]]) -> list[list[tuple]]:
    """Every judgement the report makes, (key, base runs, head runs, history runs), in groups of one machine
    (whose runs they share)."""
    groups: dict[str, dict[tuple, tuple]] = defaultdict(dict)
    for m, comps in plan:
        for c, earlier in comps:
            key = _key(c.base.runs, c.head.runs, earlier, vectors)
            groups[m.name].setdefault(key, (key, c.base.runs, c.head.runs, earlier))
    for m, a, b in pairs:
        key = _key(runs_of[(m.name, a)], runs_of[(m.name, b)], (), vectors)
        groups[m.name].setdefault(key, (key, runs_of[(m.name, a)], runs_of[(m.name, b)], []))
    return [list(g.values()) for g in groups.values()]


_judge_store: Store | None = None
_judge_keys: dict[int, str] = {}


def _judge_group(args: tuple[str, list[tuple]]) -> dict[tuple, list[Any]]:
    """In a pool process: the judgements of one group, reading the records from its own connection to the
    store. A judgement whose runs this connection does not see as the report's does (a run replaced by a collect
    meanwhile) is left out: the report then makes it itself."""
    global _judge_store, _judge_keys
    path, group = args
    if _judge_store is None or _judge_store.path != path:
        _judge_store = Store(path, create=False, verify=False)
        _judge_keys = combo_keys(_judge_store)
    ids = sorted({r["id"] for _, b, h, e in group for r in (*b, *h, *e)})
    vectors = _judge_store.vectors(ids)
    memo: dict[int, list[dict[str, Any]]] = {}
    th = Thresholds()
    out = {}
    for key, b, h, e in group:
        if _key(b, h, e, vectors) != key:
            continue
        base, head = current_records(_judge_store, b, vectors, memo), current_records(_judge_store, h, vectors, memo)
        out[key] = compare_records(base, head, th, history_records(_judge_store, e, vectors, _judge_keys))
    return out


def _judge_in(pool: Any, store: Store, groups: list[list[tuple]]) -> Any:
    """The judgements of ``groups`` started in ``pool``, biggest groups first; ``.get()`` waits for them."""
    groups = sorted(groups, key=len, reverse=True)
    return pool.map_async(_judge_group, [(store.path, g) for g in groups], chunksize=1)


def nightly_comparisons(store: Store, plan: list[tuple[Any, list[tuple]]], info: dict[int, dict[str, Any]],
                        vectors: dict[int, dict[str, np.ndarray]], memo: dict[int, list[dict[str, Any]]],
                        verdicts: dict[tuple, list[Any]]) -> list[tuple[pairing.MachineNights, list[NightlyComparison]]]:
    """Every machine's nights (pairing.py) with, for each of its comparisons, the findings of its latest night."""
    th = Thresholds()
    known: dict[int, str] = {}

    def keys() -> dict[int, str]:  # read once, when a judgement is made here (not in the pool)
        if not known:
            known.update(combo_keys(store))
        return known

    out = []
    for m, comps in plan:
        done = []
        for c, earlier in comps:
            base = current_records(store, c.base.runs, vectors, memo)
            head = current_records(store, c.head.runs, vectors, memo)
            fs = judged(base, head, th, verdicts,
                        lambda earlier=earlier: history_records(store, earlier, vectors, keys()),
                        key=_key(c.base.runs, c.head.runs, earlier, vectors))
            for f in fs:
                f.machine, f.base_run, f.head_run = m.name, c.base.runs[-1]["run_id"], c.head.runs[-1]["run_id"]
            done.append(NightlyComparison(m, c, fs, {x["key"]: x for x in base}, {x["key"]: x for x in head},
                                          info[c.base.runs[-1]["id"]]["fingerprint"],
                                          info[c.head.runs[-1]["id"]]["fingerprint"]))
        out.append((m, done))
    return out

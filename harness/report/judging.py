"""The judgements the report shows, made by the gate's own ``compare_runs``: each machine's latest night against
its previous night and its previous stack (pairing.py), with the base's history as the gate has it, and every
image transition. One judgement per pair of record sets, shared by the pages; in a fleet report they run in a
pool's processes (``judge_in``) while the main process reads and draws, and ``finish`` adds them to the model.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis import pairing
from ..analysis.compare import compare_runs
from ..analysis.method import method_note
from ..analysis.thresholds import Thresholds
from ..collect.store import Store
from ..core import children
from ..core.records import Record
from .reading import combinations, covering_runs, current_records, history_records


@dataclass
class MachineInfo:
    """A machine of the store: its images and runs (oldest first), the label the pages show."""

    name: str
    slug: str
    hardware: str
    label: str
    images: list[str]
    runs: list[dict[str, Any]]
    latest_fp: dict[str, Any]


@dataclass
class Judging:
    """What ``finish`` needs to add the judgements: the pool's pending answer and the inputs it was given."""

    pending: Any  # multiprocessing AsyncResult, or None: judged in this process
    pairs: list[tuple]
    runs_of: dict[tuple[str, str], list[dict[str, Any]]]
    vectors: dict[int, dict[str, np.ndarray]]
    memo: dict[int, list[Record]]


def judge(j: Judging, plan: list[tuple[Any, list[tuple]]], store: Store, info: dict[int, dict[str, Any]],
          latest: dict[tuple[str, str], dict[str, Any]], current: dict[tuple[str, str], list[Record]],
          th: Thresholds) -> tuple[list[dict[str, Any]], Counter, list[tuple[Any, list[NightlyComparison]]]]:
    """(image transitions, regressions per machine and image, nightly comparisons) of the model (model.finish),
    judged with the report's gate settings ``th``, once the pool's processes have made their judgements."""
    pending, pairs, runs_of, all_vectors, memo = j.pending, j.pairs, j.runs_of, j.vectors, j.memo
    verdicts: dict[tuple, list[Any]] = {}  # one compare_runs per pair of record sets, shared by the pages
    if pending is not None:
        try:
            parts = children.wait(pending)  # a worker killed: ChildDied, not a wait without end
        except Exception:  # noqa: BLE001 - a pool that failed (a process killed, a store it could not open):
            parts = []  # this process judges instead, and an error of the judgement itself is raised here
        for part in parts:
            verdicts.update(part)
    nightly = nightly_comparisons(store, plan, info, all_vectors, memo, verdicts, th)
    del memo

    # image transitions on each machine: latest run of an image vs latest run of the image that followed it
    transitions = []
    known: dict[int, tuple] = {}

    def combos() -> dict[int, tuple]:  # read once, when a judgement is made here (not in the pool)
        if not known:
            known.update(combinations(store))
        return known

    for m, a, b, earlier in pairs:
        rb, rh = latest[(m.name, a)], latest[(m.name, b)]
        findings = judged(current[(m.name, a)], current[(m.name, b)], th, verdicts,
                          lambda earlier=earlier, v=all_vectors: history_records(store, earlier, v, combos()),
                          key=_key(runs_of[(m.name, a)], runs_of[(m.name, b)], earlier, all_vectors))
        for f in findings:
            f.machine, f.base_run, f.head_run = m.name, rb["run_id"], rh["run_id"]
        transitions.append({"machine": m.name, "slug": m.slug, "label": m.label, "base": rb, "head": rh,
                            "findings": findings})
    del all_vectors

    # per-(machine, image) regression counts for the overview
    regressed: Counter = Counter()
    for t in transitions:
        regressed[(t["machine"], t["head"]["image"])] += sum(f.verdict == "regression" for f in t["findings"])
    return transitions, regressed, nightly


@dataclass
class NightlyComparison:
    """One machine's latest night against a base night, judged by the gate's own ``compare_runs``."""

    machine: pairing.MachineNights
    comparison: pairing.Comparison
    findings: list[Any]  # compare.Finding
    base_records: dict[str, Record]  # by Record.identity_key: the drill-down shows both records
    head_records: dict[str, Record]
    base_fp: dict[str, Any]
    head_fp: dict[str, Any]
    method: str | None = None  # how the two nights were timed, where that differs (analysis/method.py)


def transition_pairs(machines: list[MachineInfo], latest: dict[tuple[str, str], dict[str, Any]],
                     info: dict[int, dict[str, Any]] | None = None) -> list[tuple]:
    """(machine, image, next image, history runs) of every image transition: the latest run of an image against
    the latest run of the image that followed it on the same machine, with the base's history as the nightly
    comparisons and ``convbench compare`` read it (pairing.history_runs: its known levels), so that the pages
    count one judgement (``info``: every run's run_json; without it no history)."""
    pairs = []
    for m in machines:
        # asv results and the suite's own journals are two views, not two images: each is compared with its kind
        for source in ("journal", "asv"):
            imgs = [i for i in m.images if latest[(m.name, i)]["source"] == source]
            for a, b in zip(imgs[:-1], imgs[1:], strict=True):
                base = latest[(m.name, a)]
                earlier = [] if info is None else pairing.history_runs(
                    base, info[base["id"]]["fingerprint"] or {}, m.runs, lambda r: info[r["id"]]["fingerprint"] or {})
                pairs.append((m, a, b, earlier))
    return pairs


def nightly_plan(runs: list[dict[str, Any]], info: dict[int, dict[str, Any]]) -> list[tuple[Any, list[tuple]]]:
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
    return tuple(sorted(r["id"] for r, _ in covering_runs(runs, vectors)))


def _key(base: list[dict[str, Any]], head: list[dict[str, Any]], history: Any,
         vectors: dict[int, dict[str, np.ndarray]]) -> tuple:
    """What a judgement is kept under: the runs each side's records come from (base, head, each history run)."""
    return (_side(base, vectors), _side(head, vectors), *(_side([r], vectors) for r in history))


def judged(base: list[Record], head: list[Record], th: Thresholds,
           verdicts: dict[tuple, list[Any]], history: Any = (), *, key: tuple | None = None) -> list[Any]:
    """``compare_runs`` of two record sets (with the history of the base's machine and stack, as the gate
    has it), once per pair of the runs they come from: a machine's previous stack is usually its previous image,
    and the two pages share the one judgement. ``history`` may be a callable that reads it, called only when the
    judgement is not already known."""
    if key is None:
        key = tuple(tuple(sorted({x.run["id"] for x in side})) for side in (base, head, *history))
    if key not in verdicts:
        verdicts[key] = compare_runs(base, head, th, history() if callable(history) else history)
    return verdicts[key]


def judgements(plan: list[tuple[Any, list[tuple]]], pairs: list[tuple], runs_of: dict[tuple[str, str], list],
                vectors: dict[int, dict[str, np.ndarray]]) -> list[list[tuple]]:
    """Every judgement the report makes, (key, base runs, head runs, history runs), in groups of one machine
    (whose runs they share)."""
    groups: dict[str, dict[tuple, tuple]] = defaultdict(dict)
    for m, comps in plan:
        for c, earlier in comps:
            key = _key(c.base.runs, c.head.runs, earlier, vectors)
            groups[m.name].setdefault(key, (key, c.base.runs, c.head.runs, earlier))
    for m, a, b, earlier in pairs:
        key = _key(runs_of[(m.name, a)], runs_of[(m.name, b)], earlier, vectors)
        groups[m.name].setdefault(key, (key, runs_of[(m.name, a)], runs_of[(m.name, b)], earlier))
    return [list(g.values()) for g in groups.values()]


_judge_store: Store | None = None
_judge_combos: dict[int, tuple] = {}


def _judge_group(args: tuple[str, list[tuple]]) -> dict[tuple, list[Any]]:
    """In a pool process: the judgements of one group, reading the records from its own connection to the
    store. A judgement whose runs this connection does not see as the report's does (a run replaced by a collect
    meanwhile) is left out: the report then makes it itself."""
    global _judge_store, _judge_combos
    path, th, group = args
    if _judge_store is None or _judge_store.path != path:
        _judge_store = Store(path, create=False, verify=False)
        _judge_combos = combinations(_judge_store)
    ids = sorted({r["id"] for _, b, h, e in group for r in (*b, *h, *e)})
    vectors = _judge_store.vectors(ids, ("combo", "ok"))  # what current_records and history_records read
    memo: dict[int, list[Record]] = {}
    out = {}
    for key, b, h, e in group:
        if _key(b, h, e, vectors) != key:
            continue
        base, head = current_records(_judge_store, b, vectors, memo), current_records(_judge_store, h, vectors, memo)
        out[key] = compare_runs(base, head, th, history_records(_judge_store, e, vectors, _judge_combos))
    return out


def judge_in(pool: Any, store: Store, groups: list[list[tuple]], th: Thresholds) -> Any:
    """The judgements of ``groups`` started in ``pool`` with the gate's settings ``th``, biggest groups first;
    ``.get()`` waits for them."""
    groups = sorted(groups, key=len, reverse=True)
    return pool.map_async(_judge_group, [(store.path, th, g) for g in groups], chunksize=1)


def nightly_comparisons(store: Store, plan: list[tuple[Any, list[tuple]]], info: dict[int, dict[str, Any]],
                        vectors: dict[int, dict[str, np.ndarray]], memo: dict[int, list[Record]],
                        verdicts: dict[tuple, list[Any]], th: Thresholds,
                        ) -> list[tuple[pairing.MachineNights, list[NightlyComparison]]]:
    """Every machine's nights (pairing.py) with, for each of its comparisons, the findings of its latest night."""
    known: dict[int, tuple] = {}

    def combos() -> dict[int, tuple]:  # read once, when a judgement is made here (not in the pool)
        if not known:
            known.update(combinations(store))
        return known

    out = []
    for m, comps in plan:
        done = []
        for c, earlier in comps:
            base = current_records(store, c.base.runs, vectors, memo)
            head = current_records(store, c.head.runs, vectors, memo)
            fs = judged(base, head, th, verdicts,
                        lambda earlier=earlier: history_records(store, earlier, vectors, combos()),
                        key=_key(c.base.runs, c.head.runs, earlier, vectors))
            for f in fs:
                f.machine, f.base_run, f.head_run = m.name, c.base.runs[-1]["run_id"], c.head.runs[-1]["run_id"]
            jb, jh = info[c.base.runs[-1]["id"]], info[c.head.runs[-1]["id"]]
            done.append(NightlyComparison(m, c, fs, {x.identity_key(): x for x in base},
                                          {x.identity_key(): x for x in head}, jb["fingerprint"], jh["fingerprint"],
                                          method_note(jb, jh, base, head)))
        out.append((m, done))
    return out

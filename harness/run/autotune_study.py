"""`convbench autotune` as a run: the autotuner study through the worker pool, journaled as made, resumable.

The study runs, in this order, what autotune.py measures:

1. the seed cross-check of every seed.* case (F.conv2d against direct cuDNN with FMA math): a crosscheck record;
2. K cudnnFind searches on fresh handles per case x layout x math: an autotune record each;
3. K fresh processes, each autotuning every conv with PyTorch's cudnn.benchmark (WorkerPool.call: a new worker
   every time), then per case each process's output matched to the legacy cuDNN candidates: autotune records.

Every slice runs in the sweep's worker pool (run/pool.py), so a search or a process that crashes, hangs or
runs out of memory becomes a record of its kind with that status (finalized, run/finalize.py) and the study
goes on; a fresh process that fails leaves the torch records it was needed for as failed, with its reason.
``--resume RUN_DIR`` continues an interrupted study: what its journal holds (failures included) is not
measured again, with the K, layouts and cases the run was started with (run.json).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends import Combo, SweepOptions
from ..core import cases as catalogue
from ..core.cases import Case
from ..core.errors import UserError
from ..core.records import OK, Record, RecordKind, wholly_failed
from . import sweep
from .journal import JOURNAL_FILE, Journal, iter_journal
from .pool import DEFAULT_TIMEOUT_S, WorkerPool

MATHS = ("DEFAULT", "FMA")
CROSS = "torch-vs-cudnn"  # the crosscheck records' backend


@dataclass
class TuneOptions:
    """What a study's slice needs: K, and for the torch slices what the K fresh processes computed."""

    k: int
    dtype: str = "fp32"
    device: str = "cuda"
    processes: list[list[dict]] | None = None  # autotune.torch_worker's answer of each fresh process


@dataclass(frozen=True)
class Plan:
    """Who runs each stage in the pool (runners.resolve names); the tests name fault-injecting ones."""

    crosscheck: str = "harness.run.autotune:CrosscheckRunner"
    find: str = "harness.run.autotune:FindRunner"
    trial: str = "harness.run.autotune:torch_worker"  # one fresh process's cudnn.benchmark outputs
    torch: str = "harness.run.autotune:TorchRunner"


def cross_identity(rec: Record) -> str:
    """A crosscheck record names what it found (the algorithm furthest from F.conv2d, PyTorch's TF32 default):
    the combination it answers is the rest of its key."""
    return "|".join((rec.case, rec.backend, rec.direction, rec.math, rec.dtype, rec.layout, rec.kind))


def cross_combos(dtype: str) -> list[Combo]:
    return [Combo("fwd", "-", "FMA", dtype, "NCHW", (("torch_defaults", True),))]


def find_combos(k: int, layouts, dtype: str) -> list[Combo]:
    return [Combo("fwd", "auto", math, dtype, layout, (("search", "cudnnFind"), ("trials", k)))
            for layout in layouts for math in MATHS]


def torch_combos(k: int, layouts, dtype: str) -> list[Combo]:
    return [Combo("fwd", "auto", "TF32" if tf32 else "IEEE", dtype, layout,
                  (("benchmark", True), ("deterministic", False), ("tf32", tf32), ("processes", k)))
            for layout in layouts for tf32 in (True, False)]


def is_finding(rec: Record) -> bool:
    """What the command prints and counts: an autotune record with something to say, or any record that failed."""
    return bool(rec.explanation) and (rec.kind == RecordKind.AUTOTUNE or rec.status != OK)


def study(journal: Journal, pool: WorkerPool, cases: list[Case], k: int, layouts, dtype: str = "fp32",
          plan: Plan = Plan()) -> Iterator[Record]:
    """The three stages into ``journal`` through ``pool``; yields each record as it is journaled."""
    opts = TuneOptions(k=k, dtype=dtype)
    done = journal.done_keys(RecordKind.CROSSCHECK, cross_identity)
    for case in cases:
        combos = [c for c in cross_combos(dtype) if case.id.startswith("seed.")
                  and cross_identity(c.record(case, CROSS, kind=RecordKind.CROSSCHECK)) not in done]
        if combos:
            yield from pool.run_slice(CROSS, case, combos, opts, runner=plan.crosscheck, kind=RecordKind.CROSSCHECK,
                                      identity=cross_identity)
    done = journal.done_keys(RecordKind.AUTOTUNE)
    for case in cases:
        combos = [c for c in find_combos(k, layouts, dtype) if c.key(case, "cudnn") not in done]
        if combos:
            yield from pool.run_slice("cudnn", case, combos, opts, runner=plan.find, kind=RecordKind.AUTOTUNE)
    pending = {case.id: (case, combos) for case in cases
               if (combos := [c for c in torch_combos(k, layouts, dtype) if c.key(case, "torch") not in done])}
    if not pending:
        return
    spec = [{"case": case.id, "dtype": dtype, "layout": c.layout, "tf32": dict(c.settings)["tf32"]}
            for case, combos in pending.values() for c in combos]
    processes = []
    for i in range(k):
        answer, failure = pool.call(plan.trial, spec, name=f"torch cudnn.benchmark process {i + 1} of {k}")
        if failure:
            status, reason = failure
            for case, combos in pending.values():
                yield from pool.fail(case, combos, "torch", status, f"not measured: fresh process {i + 1} of {k} "
                                     f"failed ({status}: {reason})", opts.device, kind=RecordKind.AUTOTUNE)
            return
        processes.append(answer)
    opts = TuneOptions(k=k, dtype=dtype, processes=processes)
    for case, combos in pending.values():
        yield from pool.run_slice("torch", case, combos, opts, runner=plan.torch, kind=RecordKind.AUTOTUNE)


def _resumed(run_dir: Path) -> tuple[Journal, list[Case], int, tuple[str, ...]]:
    journal = Journal(run_dir)
    meta = journal.meta.get("options") or {}
    opts = meta.get("autotune")
    if meta.get("backends") != ["autotune"] or not isinstance(opts, dict):
        raise UserError(f"{run_dir}: not a run of `convbench autotune` that can be resumed")
    try:
        cases = [catalogue.get(c) for c in meta.get("cases") or []]
        k, layouts = int(opts["k"]), tuple(opts["layouts"])
    except catalogue.UnknownCase as exc:
        raise UserError(f"{run_dir}: {exc}") from None
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{run_dir}: run.json's autotune options are not K and layouts; it cannot be resumed") from None
    return journal, cases, k, layouts


def run(cases: list[Case], k: int, layouts, results: Path, resume: Path | None = None,
        libraries: dict[str, Any] | None = None, on_record: Callable[[Record], None] | None = None,
        log: Callable[[str], None] | None = None, plan: Plan = Plan(), timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit: int | None = None) -> tuple[Journal, dict[str, Any]]:
    """A new study (or ``resume``, with the K, layouts and cases it was started with), finished; the summary
    written to end.json is returned with its journal."""
    if resume is not None:
        journal, cases, k, layouts = _resumed(resume)
    else:
        journal = sweep.new_journal(results, SweepOptions(), cases, ["autotune"], libraries or {},
                                    {"autotune": {"k": k, "layouts": list(layouts)}})
    lock = sweep.lock_run(journal.path)
    pool = WorkerPool(journal, timeout_s=timeout_s, memory_limit=memory_limit, keep_fds=(lock,), log=log)
    t0 = time.perf_counter()
    try:
        for rec in study(journal, pool, cases, k, layouts, plan=plan):
            if on_record:
                on_record(rec)
    finally:
        pool.close()
        os.close(lock)
    recs = [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE)
            if d.get("kind") in (RecordKind.AUTOTUNE, RecordKind.CROSSCHECK)]
    summary: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 1),
                               "flagged": sum(map(is_finding, recs)), "k": k,
                               "failed_backends": wholly_failed((r.backend, r.status) for r in recs)}
    if pool.failures:
        summary["worker_failures"] = [{"slice": s, "status": st, "reason": r} for s, st, r in pool.failures]
    journal.finish(summary)
    return journal, summary

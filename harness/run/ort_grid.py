"""The onnxruntime grid: every model x search mode x TF32 x max workspace, into a run journal.

    convbench ort-grid --out DIR [--models resnet50,mobilenetv2] [--device cuda|cpu]

Records go to DIR/<machine>/<run_id>/records.jsonl as they are made (the same run format as `convbench
sweep`), the first drift worker's cuDNN logs to .../cudnn_logs/ (gzipped), and the end prints what the
records say about the seed question: how many distinct outputs each search mode gave across fresh sessions
and fresh processes, and which conv engines differed.

Every onnxruntime session process (the timing process and the drift processes of each setting, planned by
backends/ort) is a fresh, watched process of the worker pool (run/pool.py, through run/pool.py): one that
crashes, hangs or runs out of memory ends with the pool's status and one-line reason, and the records of its
setting carry them (classified and explained by run/finalize.py). As `convbench sweep` does, on CUDA (or with
--isolate) each model's own work (references, records) runs in the pool too: a model whose process dies becomes
records with that status, the rest of it goes to a fresh worker, and the run lock keeps a second writer out.
--resume RUN_DIR continues an interrupted run without measuring again what its journal holds.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends import Combo
from ..backends.ort import CUDA_EP, ModelOptions, OrtBackend, architectures
from ..backends.ort.model_runs import ModelSubject
from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..core.records import OK, Record, RecordKind, wholly_failed
from ..measurement import fingerprint
from .finalize import finalize
from .journal import JOURNAL_FILE, Journal, iter_journal
from .pool import DEFAULT_TIMEOUT_S, FreshProcesses, WorkerPool
from .sweep import lock_run

# the pool's runner for one model (runners.load_runner), named by its module
RUNNER = "harness.run.ort_grid:ModelRunner"


def model_records(backend: OrtBackend, model: str, combos: Iterable[Combo], opts: Any) -> Iterator[Record]:
    """One model's records: an ok record keeps the backend's own words (drift across sessions and processes,
    which only it saw), any other (a session process that crashed, hung or ran out of memory, an onnxruntime
    error, a skip) is classified and explained by finalize, as every driver's failures are."""
    for rec in backend.run_model(model, combos, opts):
        yield rec if rec.status == OK else finalize(rec)


class ModelRunner:
    """Runs one model's combinations in a worker process of the pool (runners.load_runner); its session
    processes are fresh workers of a pool of their own (run/pool.py)."""

    name = "ort"

    def run(self, subject: ModelSubject, combos: Iterable[Combo], options: Any) -> Iterator[Record]:
        backend = OrtBackend()
        backend.processes = FreshProcesses(log=backend.log)  # a failed session process is said on stderr too
        return model_records(backend, subject.model, combos, options)


def slice_timeout(opts: ModelOptions, n_combos: int) -> float:
    """The pool's watchdog for one model: records come when its session workers end, and each of those has its
    own watchdog (worker_timeout_s), so a model may take as long as its workers, one batch after another."""
    settings = max(1, n_combos // 2)  # two io modes per setting
    batches = math.ceil(settings * opts.processes / max(1, opts.parallel or 1)) + 1
    return max(DEFAULT_TIMEOUT_S, opts.worker_timeout_s * batches)


def seed_table(records) -> list[str]:
    """One line per model and setting: distinct outputs in-process / fresh-process / all, spread, engines."""
    lines = []
    seen = set()
    for r in records:
        s = r.settings
        key = (r.case, s.get("provider"), s.get("cudnn_conv_algo_search"), s.get("use_tf32"),
               s.get("cudnn_conv_use_max_workspace"))
        if key in seen:
            continue
        seen.add(key)
        if r.status != OK:
            lines.append(f"{r.case:18} {_setting(s):40} {r.status}: {(r.reason or '')[:100]}")
            continue
        d = r.extra.get("drift", {}).get("image", {})
        ip, fp, al = d.get("in_process", {}), d.get("fresh_process", {}), d.get("all", {})
        diffs = r.extra.get("node_algo_differences")
        eng = "-" if diffs is None else (f"{len(diffs)} node(s) changed engine" if diffs else "same engines")
        lines.append(f"{r.case:18} {_setting(s):40} {ip.get('distinct')}/{ip.get('n')} in-proc, "
                     f"{fp.get('distinct')}/{fp.get('n')} fresh-proc, spread {al.get('max_spread', 0):.3g}, "
                     f"{r.accuracy.precision_class if r.accuracy else '-'}, {eng}")
    return lines


def seed_rows(records) -> list[dict]:
    """One row per model and setting (both io records folded in): the numbers docs/ort.md tabulates."""
    rows: dict[tuple, dict] = {}
    for r in records:
        s = r.settings
        key = (r.case, s.get("provider"), s.get("cudnn_conv_algo_search"), s.get("use_tf32"),
               s.get("cudnn_conv_use_max_workspace"))
        row = rows.setdefault(key, {"model": r.case.removeprefix("model."), "provider": s.get("provider"),
                                    "setting": _setting(s), "status": r.status})
        if r.status != OK:
            row["status"] = r.status
            continue
        d = r.extra.get("drift", {}).get("image", {})
        heads = {tuple(i.get("sequence_head") or ()) for i in r.extra.get("algo_logs") or []}
        row.update({
            "in_process": f"{d['in_process']['distinct']}/{d['in_process']['n']}",
            "fresh_process": f"{d['fresh_process']['distinct']}/{d['fresh_process']['n']}",
            "max_spread": d["all"]["max_spread"], "class": r.accuracy.precision_class if r.accuracy else None,
            "rel_l2": r.accuracy.rel_l2 if r.accuracy else None, "hash": r.determinism.hash if r.determinism else None,
            "session_create_ms": r.extra.get("session_create_ms"),
            "first_inference_ms": r.extra.get("first_inference_ms"),
            "engines": r.chosen_algo or ",".join(dict.fromkeys(
                x for h in heads for x in h if not x.startswith("gid "))) or None,
            "engines_same_in_all_processes": (not r.extra.get("node_algo_differences")) if r.extra.get(
                "node_algos") else (len(heads) == 1 if heads else None),
        })
        if r.time:
            row["latency_ms" if s.get("io") == "iobinding" else "latency_numpy_ms"] = r.time.median_ms
    return list(rows.values())


def _setting(s: dict) -> str:
    if s.get("provider") != CUDA_EP:
        return "CPU EP"
    return (f"{s['cudnn_conv_algo_search']:10} tf32={s['use_tf32']} max_ws={s['cudnn_conv_use_max_workspace']}")


@dataclass(frozen=True)
class GridOptions:
    """What the grid measures (`convbench ort-grid`): the models, the device, the repetitions of each setting."""

    out: Path | None  # results root (a run directory is made inside); None only with ``resume``
    models: tuple[str, ...] = tuple(architectures.MODELS)
    device: str = "cuda"
    batch: int = 1
    sessions: int = 5  # fresh sessions in one process per setting
    processes: int = 5  # fresh processes per setting
    parallel: int | None = None  # concurrent drift workers; None: automatic
    cpu_ep: bool = True  # on a GPU host, the CPU EP cross-check too
    logs: bool = True  # capture cuDNN's logs
    api_log: str = "setting"  # cuDNN's API log in every setting's 5-session process, or once per search "mode"
    resume: Path | None = None  # an interrupted run to continue
    isolate: bool | None = None  # each model in the pool; None: on CUDA only

    def meta(self) -> dict[str, Any]:
        """The options as the run's header keeps them (the key names runs of every version carry)."""
        return {"out": None if self.out is None else str(self.out), "models": ",".join(self.models),
                "device": self.device, "batch": self.batch, "sessions": self.sessions, "processes": self.processes,
                "parallel": self.parallel, "no_cpu_ep": not self.cpu_ep, "no_logs": not self.logs,
                "api_log": self.api_log, "summarize": None, "resume": None, "isolate": self.isolate}


@dataclass
class GridResult:
    journal: Journal
    records: list[Record]  # the run's measurement records, those of a resumed run's journal too
    counts: dict[str, int]
    seconds: float

    def wholly_failed(self) -> list[str]:
        """The models whose every record failed: a grid that measured nothing of a model must not pass."""
        return wholly_failed((rec.case, rec.status) for rec in self.records)


def run_grid(opts: GridOptions, log: Callable[[str], None] | None = None) -> GridResult:
    """Every model x search mode x TF32 x max workspace of ``opts``, journaled as made; refused with a UserError
    (2: bad options or not a run of this command; 3: onnxruntime or its CUDA EP missing, or the run locked)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if opts.out is None and opts.resume is None:
        raise UserError("--out is required (or --resume RUN_DIR to continue a run)")
    for m in opts.models:
        try:
            architectures.check_model(m)
        except architectures.UnknownModel as exc:
            raise UserError(str(exc)) from None
    if opts.sessions < 1 or opts.processes < 1 or opts.batch < 1:
        raise UserError("--sessions, --processes and --batch must be >= 1")
    backend = OrtBackend(processes=FreshProcesses(log=log))
    why = backend.available()
    if why:
        raise UserError(why, EXIT_ENVIRONMENT)
    if opts.device == "cuda" and backend.cuda_reason():
        raise UserError(f"{backend.cuda_reason()} (use --device cpu for the CPU EP)", EXIT_ENVIRONMENT)
    model_opts = ModelOptions(device=opts.device, batch=opts.batch, sessions=opts.sessions, processes=opts.processes,
                              parallel=opts.parallel, log=opts.logs, cpu_ep=opts.cpu_ep, api_log=opts.api_log)
    if opts.resume is not None:
        journal = Journal(opts.resume)  # a JournalError is a UserError (2)
        if "ort_grid" not in (journal.meta.get("options") or {}):
            raise UserError(f"{opts.resume} is not a run of this command")
    else:
        fp = fingerprint.take(0 if opts.device == "cuda" else None)
        journal = Journal.create(opts.out, fp, {"ort_grid": opts.meta(), "models": list(opts.models)})
    model_opts.keep_logs = str(journal.path / "cudnn_logs") if opts.logs else None
    log(f"run directory: {journal.path}")
    isolate = opts.device == "cuda" if opts.isolate is None else opts.isolate
    t0 = time.monotonic()
    done = journal.done_keys()
    kept = [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE)
            if d.get("kind") == RecordKind.MEASUREMENT] if done else []
    counts: dict[str, int] = defaultdict(int)
    for rec in kept:
        counts[rec.status] += 1
    lock = lock_run(journal.path)  # another writer holds it: a UserError (3)
    pool = WorkerPool(journal, keep_fds=(lock,), log=log) if isolate else None
    try:
        for m in opts.models:
            subject = ModelSubject(m)
            combos = [c for c in backend.model_combos(m, model_opts) if c.key(subject, backend.name) not in done]
            if not combos:
                continue
            if pool is not None:
                pool.timeout_s = slice_timeout(model_opts, len(combos))
                made = pool.run_slice(backend.name, subject, combos, model_opts, runner=RUNNER, finalize=False)
            else:
                made = _in_process(journal, model_records(backend, m, combos, model_opts))
            for rec in made:
                if rec.kind == RecordKind.MEASUREMENT:
                    kept.append(rec)
                    counts[rec.status] += 1
    finally:
        if pool is not None:
            pool.close()
        os.close(lock)
    seconds = time.monotonic() - t0
    journal.finish({"records": len(kept), "by_status": dict(counts), "seconds": seconds,
                    "clocks_after": fingerprint.clocks(0) if opts.device == "cuda" else None})
    return GridResult(journal, kept, dict(counts), seconds)


def _in_process(journal: Journal, records):
    for rec in records:
        journal.append(finalize(rec, by_producer=True))  # finalized by model_records (run_slice's finalize=False)
        yield rec
    journal.close()  # the slice's records reach the disk (Journal.append)


def summary_lines(run_dir: Path) -> list[str]:
    """The seed table of a run directory already written (complete or interrupted), with each setting's latency."""
    if not (run_dir / "run.json").is_file():
        raise UserError(f"{run_dir} is not a run directory (no run.json)")
    records = [Record.from_dict(d) for d in iter_journal(run_dir / JOURNAL_FILE) if d.get("backend") == "ort"]
    lines = [f"{run_dir}: {len(records)} ort records{'' if (run_dir / 'end.json').exists() else ' (no end.json)'}"]
    lines += ["  " + line for line in seed_table(records)]
    for row in seed_rows(records):
        if row.get("latency_ms") is not None:
            lines.append(
                f"  {row['model']:12} {row['setting']:34} {row['latency_ms']:7.3f} ms iob, "
                f"{row.get('latency_numpy_ms') or float('nan'):7.3f} ms numpy, create "
                f"{row['session_create_ms'] or float('nan'):6.0f} ms, first {row['first_inference_ms'] or float('nan'):6.1f} ms, "
                f"rel_l2 {row['rel_l2']:.3g}, hash {row['hash'][:8]}, engines {row['engines']}")
    return lines

"""The onnxruntime grid in one command: every model x search mode x TF32 x max workspace, into a run journal.

    python3 -m harness.run.ort_grid --out DIR [--models resnet50,mobilenetv2] [--device cuda|cpu]

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

import argparse
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..backends import Combo
from ..backends.ort import CUDA_EP, ModelOptions, OrtBackend, architectures
from ..backends.ort.model_runs import ModelSubject
from ..core.errors import UserError
from ..core.records import OK, Record, wholly_failed
from ..measurement import fingerprint
from .finalize import finalize
from .journal import JOURNAL_FILE, Journal, JournalError, iter_journal
from .pool import DEFAULT_TIMEOUT_S, FreshProcesses, WorkerPool
from .sweep import lock_run

# the pool's runner for one model (runners.load_runner); named by its module, as this one may run as __main__
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m harness.run.ort_grid", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="results directory (a run directory is made inside; required to measure)")
    ap.add_argument("--models", default=",".join(architectures.MODELS), help="comma-separated: resnet50, mobilenetv2")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--sessions", type=int, default=5, help="fresh sessions in one process per setting (>= 1)")
    ap.add_argument("--processes", type=int, default=5, help="fresh processes per setting (>= 1)")
    ap.add_argument("--parallel", type=int, default=None, help="concurrent drift workers (default: automatic)")
    ap.add_argument("--no-cpu-ep", action="store_true", help="on a GPU host, skip the CPU EP cross-check")
    ap.add_argument("--no-logs", action="store_true", help="do not capture cuDNN logs")
    ap.add_argument("--api-log", choices=("setting", "mode"), default="setting",
                    help="cuDNN's API log in the 5-session process of every setting (default) or only of the "
                         "first setting per search mode (faster; the frontend log still names every engine)")
    ap.add_argument("--summarize", type=Path, metavar="RUN_DIR",
                    help="measure nothing: print the seed table of an existing run directory")
    ap.add_argument("--resume", type=Path, metavar="RUN_DIR",
                    help="continue an interrupted run: what its journal holds is not measured again")
    iso = ap.add_mutually_exclusive_group()
    iso.add_argument("--isolate", dest="isolate", action="store_true", default=None,
                     help="each model in the sweep's worker pool (the default on CUDA)")
    iso.add_argument("--no-isolate", dest="isolate", action="store_false",
                     help="each model in this process (the default on the CPU)")
    args = ap.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize)
    if args.out is None and args.resume is None:
        ap.error("--out is required (or --summarize RUN_DIR to read a run, --resume RUN_DIR to continue one)")
    wanted = [m for m in args.models.split(",") if m]
    try:
        for m in wanted:
            architectures.check_model(m)
    except architectures.UnknownModel as exc:
        print(f"ort_grid: error: {exc}", file=sys.stderr)
        return 2
    if args.sessions < 1 or args.processes < 1 or args.batch < 1:
        print("ort_grid: error: --sessions, --processes and --batch must be >= 1", file=sys.stderr)
        return 2
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    backend = OrtBackend(processes=FreshProcesses(log=log))
    why = backend.available()
    if why:
        print(f"ort_grid: error: {why}", file=sys.stderr)
        return 3
    if args.device == "cuda" and backend.cuda_reason():
        print(f"ort_grid: error: {backend.cuda_reason()} (use --device cpu for the CPU EP)", file=sys.stderr)
        return 3
    opts = ModelOptions(device=args.device, batch=args.batch, sessions=args.sessions, processes=args.processes,
                        parallel=args.parallel, log=not args.no_logs, cpu_ep=not args.no_cpu_ep,
                        api_log=args.api_log)
    if args.resume is not None:
        try:
            journal = Journal(args.resume)
        except JournalError as exc:
            print(f"ort_grid: error: {exc}", file=sys.stderr)
            return 2
        if "ort_grid" not in (journal.meta.get("options") or {}):
            print(f"ort_grid: error: {args.resume} is not a run of this command", file=sys.stderr)
            return 2
    else:
        fp = fingerprint.take(0 if args.device == "cuda" else None)
        journal = Journal.create(args.out, fp, {"ort_grid": vars(args) | {"out": str(args.out),
                                                                           "resume": None}, "models": wanted})
    opts.keep_logs = None if args.no_logs else str(journal.path / "cudnn_logs")
    print(f"run directory: {journal.path}", flush=True)
    isolate = args.device == "cuda" if args.isolate is None else args.isolate
    t0 = time.monotonic()
    done = journal.done_keys()
    kept = [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE)
            if d.get("kind") == "measurement"] if done else []
    counts: dict[str, int] = defaultdict(int)
    for rec in kept:
        counts[rec.status] += 1
    try:
        lock = lock_run(journal.path)
    except UserError as exc:
        print(f"ort_grid: error: {exc}", file=sys.stderr)
        return 3
    pool = WorkerPool(journal, keep_fds=(lock,), log=log) if isolate else None
    try:
        for m in wanted:
            subject = ModelSubject(m)
            combos = [c for c in backend.model_combos(m, opts) if c.key(subject, backend.name) not in done]
            if not combos:
                continue
            if pool is not None:
                pool.timeout_s = slice_timeout(opts, len(combos))
                made = pool.run_slice(backend.name, subject, combos, opts, runner=RUNNER, finalize=False)
            else:
                made = _in_process(journal, model_records(backend, m, combos, opts))
            for rec in made:
                if rec.kind == "measurement":
                    kept.append(rec)
                    counts[rec.status] += 1
    except KeyboardInterrupt:
        print("ort_grid: interrupted; what was measured is in the journal (--resume RUN_DIR continues it)",
              file=sys.stderr)
        return 130
    finally:
        if pool is not None:
            pool.close()
        os.close(lock)
    seconds = time.monotonic() - t0
    journal.finish({"records": len(kept), "by_status": dict(counts), "seconds": seconds,
                    "clocks_after": fingerprint.clocks(0) if args.device == "cuda" else None})
    print(f"\n{len(kept)} records in {seconds:.0f} s ({dict(counts)}); distinct outputs of the image input:")
    for line in seed_table(kept):
        print("  " + line)
    failed = wholly_failed((rec.case, rec.status) for rec in kept)
    if failed:
        first = next(r for r in kept if r.case == failed[0])
        print(f"ort_grid: error: every record of {', '.join(failed)} failed (first: {first.reason})", file=sys.stderr)
        return 1
    return 0


def _in_process(journal: Journal, records):
    for rec in records:
        journal.append(finalize(rec, by_producer=True))  # finalized by model_records (run_slice's finalize=False)
        yield rec


def summarize(run_dir: Path) -> int:
    """The seed table of a run directory already written (complete or interrupted)."""
    if not (run_dir / "run.json").is_file():
        print(f"ort_grid: error: {run_dir} is not a run directory (no run.json)", file=sys.stderr)
        return 2
    records = [Record.from_dict(d) for d in iter_journal(run_dir / JOURNAL_FILE) if d.get("backend") == "ort"]
    print(f"{run_dir}: {len(records)} ort records{'' if (run_dir / 'end.json').exists() else ' (no end.json)'}")
    for line in seed_table(records):
        print("  " + line)
    for row in seed_rows(records):
        if row.get("latency_ms") is not None:
            print(f"  {row['model']:12} {row['setting']:34} {row['latency_ms']:7.3f} ms iob, "
                  f"{row.get('latency_numpy_ms') or float('nan'):7.3f} ms numpy, create "
                  f"{row['session_create_ms'] or float('nan'):6.0f} ms, first {row['first_inference_ms'] or float('nan'):6.1f} ms, "
                  f"rel_l2 {row['rel_l2']:.3g}, hash {row['hash'][:8]}, engines {row['engines']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

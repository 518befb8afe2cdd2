"""A sweep: cases x backends on this machine, every record journaled the moment it is made.

The one place where the pieces meet: it takes the fingerprint, opens (or resumes) the run directory,
asks each backend for its combinations, skips those already journaled, and appends what comes back.
With ``isolate`` (the default on CUDA) each slice (one backend, one case) runs in a worker process under a
watchdog (pool.py), so a crash, hang or out-of-memory costs that combination and the sweep goes on.
The sweep holds an exclusive lock on run.json while it writes, so two sweeps never write one run.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..backends import SweepOptions
from ..core.cases import Case
from ..core.errors import UserError
from ..core.progress import Progress
from ..core.records import OK, RecordKind, wholly_failed
from ..measurement import fingerprint
from . import replicas, runners
from .finalize import finalize
from .journal import JOURNAL_FILE, RUN_FILE, Journal, check_machine, iter_journal
from .pool import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, WorkerPool
from .slicetime import SliceClock


def _cuda_device() -> tuple[bool, str | None]:
    """(CUDA usable, UUID of the device torch uses as cuda:0)."""
    try:
        import torch
    except ImportError:
        return False, None
    if not torch.cuda.is_available():
        return False, None
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    return True, (f"GPU-{uuid}" if uuid is not None else None)


def refuse_before_loading(resume: Path | None) -> None:
    """What the user named is checked before PyTorch loads (most of a refusal's two seconds otherwise): a
    machine name that cannot be a directory, a run to resume whose header or journal collect would refuse. The
    same checks run again where the run is opened, under its lock."""
    machine = os.environ.get("CONVBENCH_MACHINE")
    if machine:
        check_machine(machine)
    if resume is not None:
        Journal(resume).done_keys()


def take_fingerprint(cuda: bool, uuid: str | None) -> dict[str, Any]:
    """Fingerprint of the GPU this process runs on (matched through NVML by UUID), or of the CPU host."""
    found, _ = fingerprint.gpus()
    index = None
    if cuda:
        index = next((g["index"] for g in found if uuid and g.get("uuid") == uuid), None)
        if index is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
            index = int(visible) if visible.isdigit() else 0
    return fingerprint.take(index)


def shared_run() -> Path | None:
    """The run directory that `convbench bench` opened for all asv classes of one asv run, if any."""
    shared = os.environ.get("CONVBENCH_RUN_DIR")
    return Path(shared) if shared and (Path(shared) / "run.json").exists() else None


def load_backends(names: list[str]) -> tuple[dict[str, Any], dict[str, str | None], dict[str, Any]]:
    """(backends, why each cannot run or None, the libraries they actually loaded)."""
    backends = {name: runners.resolve_backend(name) for name in names}
    unavailable = {name: b.available() for name, b in backends.items()}
    libraries: dict[str, Any] = {}
    if "cudnn" in backends and not unavailable["cudnn"]:
        lib = backends["cudnn"].cudnn  # the library actually loaded, which may differ from what torch reports
        libraries["cudnn"] = {"version": lib.version, "version_int": lib.version_int, "path": lib.path}
    return backends, unavailable, libraries


def new_journal(results: Path, options: SweepOptions, cases: list[Case], backend_names: list[str],
                libraries: dict[str, Any], study: dict[str, Any] | None = None) -> Journal:
    """A new run; ``study``: options of a driver other than the sweep, kept in run.json for --resume."""
    cuda, uuid = _cuda_device()
    fp = take_fingerprint(cuda and options.device == "cuda", uuid)
    fp["libraries"] = libraries
    meta = {"cases": [c.id for c in cases], "backends": backend_names, "sweep": options_dict(options)}
    return Journal.create(results, fp, dict(meta, **(study or {})))


def options_dict(options: SweepOptions) -> dict[str, Any]:
    d = asdict(options)
    d["timing"] = asdict(options.timing)
    return d


def lock_run(run_dir: Path, wait_s: float = 30.0) -> int:
    """An exclusive lock on the run (flock on run.json), held until the returned fd and its copies close.

    Worker processes inherit the fd, so the lock outlives a killed sweep exactly as long as a writer does.
    """
    fd = os.open(Path(run_dir) / RUN_FILE, os.O_RDONLY | os.O_CLOEXEC)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise UserError(f"{run_dir}: another sweep is writing this run") from None
            time.sleep(0.1)


def run(cases: list[Case], backend_names: list[str], options: SweepOptions, results: Path,
        resume: Path | None = None, log: Callable[[str], None] | None = None,
        on_record: Callable[[Any], None] | None = None, isolate: bool | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = DEFAULT_RETRIES,
        memory_limit: int | None = None, into: Path | None = None) -> Journal:
    """Measure cases x backends into a (new, resumed or shared) run; ``isolate=None`` means: on CUDA only.

    ``into`` (or CONVBENCH_RUN_DIR) names a run that another command owns: it is written and left unfinished.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    cuda, uuid = _cuda_device()
    if options.device == "cuda" and not cuda:
        options.device = "cpu"
        log("no CUDA device: running the CPU backends (PyTorch on the CPU); cuDNN combinations are recorded "
            "as skipped with the reason")
    if isolate is None:
        isolate = options.device == "cuda"
    if not isolate or options.device != "cuda":
        options.processes = 1  # only the pool's workers on CUDA time a combination in a second process
    backends, unavailable, libraries = load_backends(backend_names)
    shared = into or (shared_run() if resume is None else None)
    journal = Journal(resume or shared) if (resume or shared) else new_journal(results, options, cases,
                                                                                backend_names, libraries)
    lock = lock_run(journal.path)
    pool = WorkerPool(journal, timeout_s=timeout_s, retries=retries, memory_limit=memory_limit,
                             keep_fds=(lock,), log=log) if isolate else None
    replica_pool = WorkerPool(journal, timeout_s=timeout_s, memory_limit=memory_limit, keep_fds=(lock,),
                                     log=log) if isolate and options.processes > 1 else None
    try:
        counts: Counter[str] = Counter()
        t0 = time.perf_counter()
        done = journal.done_keys()
        for name in backends:
            if unavailable[name]:
                log(f"{name}: not available here ({unavailable[name]}); its combinations are recorded as skipped")
        # Case by case, each backend in turn: the case's operands, drawn once, serve every backend.
        progress = Progress("sweep", len(cases), unit="cases")
        log = progress.around(log)
        for i, case in enumerate(cases):
            progress.step(0, case.id)
            ahead = cases[i + 1] if i + 1 < len(cases) else None
            for name, backend in backends.items():
                combos = [c for c in backend.combos(case, options) if c.key(case, name) not in done]
                if not combos:
                    continue
                n_before = sum(counts.values())
                if pool is not None and not unavailable[name]:  # journaled by the worker already
                    made = replicas.measure_slice(pool, replica_pool, name, backend, case, combos, options, ahead)
                else:
                    made = _in_process(journal, backend, case, combos, replicas.effective(options, backend, False))
                for rec in made:
                    if rec.kind == RecordKind.MEASUREMENT:
                        counts[rec.status] += 1
                    if on_record:
                        on_record(rec)
                log(f"{name} {case.id}: {sum(counts.values()) - n_before} records "
                    f"({time.perf_counter() - t0:.0f} s so far)")
            progress.step(1, case.id)
        progress.finish(f"{sum(counts.values())} records")
        pools = [p for p in (pool, replica_pool) if p is not None]
        for p in pools:
            p.close()
        if shared is None:
            summary = summarize(journal, cuda, time.perf_counter() - t0)
            if pools:
                summary["worker_failures"] = [{"slice": s, "status": st, "reason": r}
                                              for p in pools for s, st, r in p.failures]
            journal.finish(summary)
    finally:
        for p in (pool, replica_pool):
            if p is not None:
                p.close()
        os.close(lock)
    return journal


def _in_process(journal: Journal, backend: Any, case: Case, combos: list, options: SweepOptions):
    """The slice in this process (no isolation): each record journaled before it is handed on."""
    clock = SliceClock(backend.name, case.id)
    for rec in backend.run(case, combos, options):
        clock.tick(rec)
        journal.append(finalize(rec))
        yield rec
    journal.close()  # the slice's records reach the disk (Journal.append)
    clock.write(journal.path)


def summarize(journal: Journal, cuda: bool, seconds: float) -> dict[str, Any]:
    """Counts by status over the whole journal, the time taken, and the GPU clocks after the run."""
    counts: Counter[str] = Counter()
    statuses = []
    for rec in iter_journal(journal.path / JOURNAL_FILE):
        if rec.get("kind") == RecordKind.MEASUREMENT:
            counts[rec["status"]] += 1
            statuses.append((rec.get("backend", "?"), rec["status"]))
    summary: dict[str, Any] = {"counts": dict(counts), "ok": counts.get(OK, 0), "seconds": round(seconds, 1),
                               "failed_backends": wholly_failed(statuses)}
    gpu = journal.meta["fingerprint"].get("gpu")
    if cuda and gpu:
        summary["clocks_after"] = fingerprint.clocks(gpu["index"])
    return summary

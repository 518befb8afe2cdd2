"""Session processes as the backend plans them: which job each fresh onnxruntime process runs, with which
cuDNN logging, how many at a time; and the service that runs them, which the backend is given.

A session process is part of the measurement (fresh processes are one of the repetitions the drift question
needs, and cuDNN's logging can only be set before a process loads it), so the backend decides what each one
runs (``WorkerRun``: a job for session_process.py's ``session_process``, a name, the logs) and reads what they return.
Starting, watching and judging processes is not the backend's: it is the one fresh-process service of the run
layer (harness/run/pool.py's pool, through ``harness.run.pool.FreshProcesses``), which the backend cannot
import (backends come before run) and is therefore handed, as ``OrtBackend(processes=...)``. That service
ends each WorkerRun with what its function returned, or with the pool's (status, one-line reason) for a
process that crashed, hung, ran out of memory or raised, classified by run/finalize.py: the same words a
crashed sweep slice or autotuner process gets.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import cudnn_log

SESSION_FUNCTION = "harness.backends.ort.session_process:session_process"  # what a session process runs (WorkerPool.call)
NO_PROCESSES = ("onnxruntime runs in fresh session processes, and this OrtBackend was given no process service "
                "to run them (harness.run.pool.FreshProcesses)")


@dataclass
class WorkerRun:
    """One session process: its job, and once it ran, what it returned or how it failed."""

    job: dict
    result: dict | None = None
    failure: tuple[str, str] | None = None  # (status, reason), the pool's
    api_log: str | None = None
    fe_log: str | None = None
    name: str = "session"
    log: bool | str = False  # False, "frontend" (the cheap frontend log only) or True (API log too)
    function: str = SESSION_FUNCTION
    env: dict[str, str] | None = None
    started: float = 0.0
    ended: float = 0.0

    def prepare(self, workdir: Path) -> None:
        """Its directory (outputs, profiles, logs) under ``workdir`` and its environment, logging set."""
        wdir = workdir / self.name
        wdir.mkdir(parents=True, exist_ok=True)
        self.job["out_dir"] = str(wdir)
        self.job["name"] = self.name
        if self.log:
            self.fe_log = str(wdir / "cudnn_frontend.log")
        if self.log is True:
            self.api_log = str(wdir / "cudnn_api.log")
        self.env = _worker_env(self.api_log, self.fe_log)


class SessionProcesses(Protocol):
    """The run layer's fresh-process service (harness.run.pool.FreshProcesses): runs each WorkerRun's
    ``function(job)`` in a fresh, watched process with its ``env``, at most ``parallel`` at a time, in order; each
    ends with ``result`` or ``failure`` (never an exception), timed (``started``, ``ended``); ``on_done(run)`` as
    each one ends."""

    def __call__(self, runs: list[WorkerRun], parallel: int, timeout_s: float,
                 on_done: Callable[[WorkerRun], None] | None = None) -> None: ...


def _worker_env(api_log: str | None, fe_log: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("CUDNN_LOGLEVEL_DBG", "CUDNN_LOGINFO_DBG", "CUDNN_LOGDEST_DBG", "CUDNN_FRONTEND_LOG_INFO",
              "CUDNN_FRONTEND_LOG_FILE"):
        env.pop(k, None)
    if api_log or fe_log:
        full = cudnn_log.log_env(api_log or "", fe_log or "")
        env.update({k: v for k, v in full.items() if v and (api_log or not k.startswith("CUDNN_LOG"))
                    and (fe_log or not k.startswith("CUDNN_FRONTEND"))})
    return env


def api_logged_settings(modes: dict[str, str], policy: str, legacy: bool) -> set[str]:
    """Session keys whose 5-session process writes cuDNN's API log: every one, or ("mode", frontend path
    only) the first of each search mode. ``modes``: session key -> cudnn_conv_algo_search, in grid order."""
    if policy != "mode" or legacy:
        return set(modes)
    first: dict[str, str] = {}
    for key, mode in modes.items():
        first.setdefault(mode, key)
    return set(first.values())


def default_parallel(timed_search: bool, cpus: int | None = None) -> int:
    """Concurrent drift workers: 1 where a search is timed on the device (concurrency would perturb it),
    else three quarters of the cores, at most 12 (12 on the lent H200's 16 cores; its only grid so far ran 8).

    Without a timed search nothing a drift worker does depends on what runs beside it; a worker is mostly
    process start, CUDA/cuDNN initialisation and plan building on the host, so it is bounded by cores.
    """
    if timed_search:
        return 1
    return min(12, max(1, (cpus if cpus is not None else (os.cpu_count() or 2)) * 3 // 4))


def config_result(w: WorkerRun, key: str) -> dict | None:
    if not w.result:
        return None
    return next((c for c in w.result["configs"] if c["key"] == key), None)


def wall_seconds(w: WorkerRun) -> float | None:
    return round(w.ended - w.started, 2) if w.started and w.ended else None


def failed(w: WorkerRun, what: str) -> str:
    """A failed process in a record's words: its name, the pool's status and reason."""
    status, reason = w.failure
    return f"{what} ({w.name}) {status}: {reason}"


def keep_worker_logs(w: WorkerRun, directory: Path, stem: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for kind, path in (("api", w.api_log), ("frontend", w.fe_log)):
        if path and Path(path).exists() and Path(path).stat().st_size:
            # level 1: these logs are tens of MB of repetitive text; level 9 cost seconds per setting for ~10 %
            with open(path, "rb") as src, gzip.open(directory / f"{stem}.{kind}.log.gz", "wb",
                                                    compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)

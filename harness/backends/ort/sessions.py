"""Session workers: fresh onnxruntime processes (worker.py), started from a job file with cuDNN logging set
before the library loads, watched for a result, a crash or a timeout; at most ``parallel`` at a time.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...core.records import CRASHED, ERROR, TIMEOUT
from . import cudnn_log


@dataclass
class WorkerRun:
    job: dict
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ended: float = 0.0
    result: dict | None = None
    failure: tuple[str, str] | None = None  # (status, reason)
    api_log: str | None = None
    fe_log: str | None = None


def _worker_env(api_log: str | None, fe_log: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("CUDNN_LOGLEVEL_DBG", "CUDNN_LOGINFO_DBG", "CUDNN_LOGDEST_DBG", "CUDNN_FRONTEND_LOG_INFO",
              "CUDNN_FRONTEND_LOG_FILE"):
        env.pop(k, None)
    if api_log or fe_log:
        full = cudnn_log.log_env(api_log or "", fe_log or "")
        env.update({k: v for k, v in full.items() if v and (api_log or not k.startswith("CUDNN_LOG"))
                    and (fe_log or not k.startswith("CUDNN_FRONTEND"))})
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
    return env


def _start(w: WorkerRun, workdir: Path, name: str, log: bool | str) -> None:
    """Start one worker; ``log``: False, "frontend" (the cheap frontend log only) or True (API log too)."""
    wdir = workdir / name
    wdir.mkdir(parents=True, exist_ok=True)
    w.job["out_dir"] = str(wdir)
    w.job["result"] = str(wdir / "result.json")
    job_path = wdir / "job.json"
    job_path.write_text(json.dumps(w.job))
    if log:
        w.fe_log = str(wdir / "cudnn_frontend.log")
    if log is True:
        w.api_log = str(wdir / "cudnn_api.log")
    stderr = open(wdir / "stderr.txt", "wb")
    w.proc = subprocess.Popen([sys.executable, "-m", "harness.backends.ort.worker", str(job_path)], stdout=stderr,
                              stderr=subprocess.STDOUT, env=_worker_env(w.api_log, w.fe_log), cwd=str(wdir))
    stderr.close()
    w.started = time.monotonic()


def _finish(w: WorkerRun) -> None:
    w.ended = time.monotonic()
    rc = w.proc.returncode
    path = Path(w.job["result"])
    if rc == 0 and path.exists():
        w.result = json.loads(path.read_text())
        return
    tail = ""
    err = Path(w.job["out_dir"]) / "stderr.txt"
    if err.exists():
        tail = err.read_text(errors="replace")[-600:].strip().replace("\n", " | ")
    if rc is not None and rc < 0:
        w.failure = (CRASHED, f"worker died with signal {-rc}: {tail}")
    else:
        w.failure = (ERROR, f"worker exited {rc}: {tail}")


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


def run_workers(runs: list[tuple[WorkerRun, str, bool | str]], workdir: Path, parallel: int, timeout_s: float,
                log=lambda msg: None, on_done: Callable[[WorkerRun], None] | None = None) -> None:
    """Run workers, at most ``parallel`` at a time; each ends with a result or a failure, never an exception.

    ``on_done(worker)`` is called as each one ends (e.g. to hand its logs to a parser while the others run).
    """
    pending = list(runs)
    active: list[WorkerRun] = []
    while pending or active:
        while pending and len(active) < max(1, parallel):
            w, name, logged = pending.pop(0)
            try:
                _start(w, workdir, name, logged)
                active.append(w)
            except OSError as exc:
                w.failure = (ERROR, f"could not start worker: {exc}")
        time.sleep(0.02)
        for w in list(active):
            if w.proc.poll() is not None:
                _finish(w)
                active.remove(w)
            elif time.monotonic() - w.started > timeout_s:
                w.proc.kill()
                w.proc.wait()
                w.ended = time.monotonic()
                w.failure = (TIMEOUT, f"worker ran past {timeout_s:.0f} s and was ended")
                active.remove(w)
            else:
                continue
            if on_done:
                on_done(w)
        if pending or active:
            continue
    del log


def _cfg_result(w: WorkerRun, key: str) -> dict | None:
    if not w.result:
        return None
    return next((c for c in w.result["configs"] if c["key"] == key), None)


def _wall(w: WorkerRun) -> float | None:
    return round(w.ended - w.started, 2) if w.started and w.ended else None


def _keep_logs(w: WorkerRun, directory: Path, stem: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for kind, path in (("api", w.api_log), ("frontend", w.fe_log)):
        if path and Path(path).exists() and Path(path).stat().st_size:
            # level 1: these logs are tens of MB of repetitive text; level 9 cost seconds per setting for ~10 %
            with open(path, "rb") as src, gzip.open(directory / f"{stem}.{kind}.log.gz", "wb",
                                                    compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)

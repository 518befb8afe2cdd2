"""Fresh, watched processes for a backend that plans processes of its own: onnxruntime's session processes.

onnxruntime's drift measurement needs processes as part of the measurement (a second process is one of the
repetitions; cuDNN's logging must be set before a process loads it), so its backend plans them
(backends/ort/sessions.py: a job, an environment, a name per process) and this module runs them, each as a
``WorkerPool.call`` (run/worker.py): the one fresh-process service, so a session process that crashes, hangs,
runs out of memory or raises ends with the pool's status and one-line reason (run/finalize.py's ``ended`` and
``raised``), exactly as a crashed sweep slice or autotuner process does, and nothing in the backend classifies
a process.

Why the backend is handed this service instead of importing it: backends come before run (docs/architecture.md),
and the pool journals and judges records, which is the run layer's business; moving the pool below the backends
would take the journal and the finalize step with it. So the run layer builds the backend with it
(``OrtBackend(processes=FreshProcesses())``: run/ort_grid.py, run/suite.py, and the pool's resolve_backend for
the sweep), and the backend's plan stays where the measurement is understood.

A call journals nothing, so these pools have no journal; several run at once (threads, one pool and one process
each) when the backend asks for ``parallel`` processes at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .finalize import raised
from .worker import DEFAULT_TIMEOUT_S, WorkerPool


class FreshProcesses:
    """Runs each job's ``function(job)`` in a fresh worker of the pool (backends/ort/sessions.SessionProcesses)."""

    def __init__(self, log: Callable[[str], None] | None = None):
        self.log = log  # where the pool says that a process failed (its status and reason)

    def __call__(self, runs: list[Any], parallel: int, timeout_s: float = DEFAULT_TIMEOUT_S,
                 on_done: Callable[[Any], None] | None = None) -> None:
        live: set[WorkerPool] = set()  # the pools whose process runs now: a stop (Ctrl-C, SIGTERM) ends them
        stopped = threading.Event()

        def one(run: Any) -> None:
            if stopped.is_set():
                return
            pool = WorkerPool(None, timeout_s=timeout_s, env=run.env, log=self.log)
            live.add(pool)
            run.started = time.monotonic()
            try:
                run.result, run.failure = pool.call(run.function, run.job, name=run.name)
            except Exception as exc:  # noqa: BLE001 - a process that could not even start is a failed run too
                run.failure = raised(exc)
            finally:
                live.discard(pool)
                pool.close()
                run.ended = time.monotonic()
            if on_done and not stopped.is_set():
                on_done(run)

        if max(1, parallel) == 1:
            for run in runs:
                one(run)
            return
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="fresh") as threads:
            futures = [threads.submit(one, run) for run in runs]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                # the threads wait on their processes, not on this signal: end the processes, start no more
                stopped.set()
                for future in futures:
                    future.cancel()
                for pool in list(live):
                    pool.abort()
                raise

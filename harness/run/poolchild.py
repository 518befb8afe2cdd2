"""The worker process of the pool (pool.py): it runs slice after slice of records, or a single call, as the
parent asks over its socket, and says how each ended.

Each record is finalized (run/finalize.py) and journaled here the moment it is made, so nothing a worker
finished is lost when it dies; a record whose error leaves the CUDA context unusable (a sticky error) ends the
worker, and the rest of the slice goes to a fresh one. A memory limit makes exhaustion a MemoryError; the
worker dies with the parent (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..backends import SweepOptions
from ..core.records import CRASHED, Record, RecordKind
from ..measurement import accuracy
from .finalize import finalize, one_line, raised
from .journal import Journal
from .profiling import WorkerProfile
from .replicas import merge
from .runners import load_runner, resolve, resolve_backend
from .slicetime import REPLICA, SliceClock

# Messages of errors after which the CUDA context is unusable (sticky errors): the worker must be replaced.
_STICKY_CUDA = ("illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
                "illegal instruction", "device-side assert", "an illegal", "CUDA_ERROR_LAUNCH_FAILED",
                "CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_INTERNAL_ERROR")


def _cuda_broken() -> str | None:
    """The error a CUDA synchronize raises when the context is corrupted; None when it is healthy or unused."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any failure here means the context cannot be trusted
        return one_line(f"{type(exc).__name__}: {exc}")
    return None


def _limit_memory(limit: int | None) -> None:
    """Cap the address space at what is mapped now plus ``limit`` bytes, so exhaustion is a MemoryError."""
    if not limit:
        return
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = mapped + limit
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def _failed(exc: BaseException) -> tuple:
    """The reply for an exception out of a runner: (failed, error or out_of_memory, one line, blame)."""
    return ("failed", *raised(exc), True)


def _run_slice(msg: dict[str, Any]) -> tuple:
    """Measure one slice, journaling each record; the reply says how it ended."""
    if msg.get("call"):
        return _run_call(msg)
    if msg.get("collect"):
        return _collect(msg)
    journal = Journal(Path(msg["run_dir"]))
    backend = load_runner(msg["runner"]) if msg.get("runner") else resolve_backend(msg["backend"])
    by_producer = not msg.get("finalize", True)
    _limit_memory(msg.get("memory_limit"))
    clock = SliceClock(msg["backend"], msg["case"].id, msg.get("kind", RecordKind.MEASUREMENT),
                       msg.get("waited_s", 0.0))
    replicas = msg.get("replicas") or {}
    try:
        for rec in backend.run(msg["case"], msg["combos"], msg["options"]):
            clock.tick(rec)
            broken = None
            if isinstance(rec, Record):
                if rec.status != "ok" or any(w in (rec.reason or "") for w in _STICKY_CUDA):
                    broken = _cuda_broken()
                if broken:
                    rec.status = CRASHED
                    rec.reason = one_line(f"corrupted the CUDA context ({rec.reason or broken}); the rest of "
                                           "the case continues in a fresh worker")
                if isinstance(msg["options"], SweepOptions) and msg["options"].processes > 1:  # a share: pool
                    merge(rec, replicas.get(rec.key()), msg["options"].timing.keep_samples,
                          fresh_handle_in_replica=getattr(backend, "fresh_handle_in_replica", False))
                finalize(rec, by_producer=by_producer and not broken)
            journal.append(rec)
            if broken:
                journal.close()
                return ("failed", CRASHED, "", False)
    except Exception as exc:  # noqa: BLE001 - a backend must not raise; when one does, the slice says so
        journal.close()
        return _failed(exc)
    journal.close()
    clock.write(journal.path)
    broken = _cuda_broken()
    if broken:  # the last record was fine, yet the context is not: do not hand it another slice
        return ("done", broken)
    return ("done", None)


def _collect(msg: dict[str, Any]) -> tuple:
    """A replica's pass (WorkerPool.replicate): the slice's records handed back in the reply, not journaled."""
    backend = resolve_backend(msg["backend"])
    _limit_memory(msg.get("memory_limit"))
    clock = SliceClock(msg["backend"], msg["case"].id, REPLICA, msg.get("waited_s", 0.0))
    made = []
    try:
        for rec in backend.run(msg["case"], msg["combos"], msg["options"]):
            clock.tick(rec)
            if isinstance(rec, Record):
                made.append(rec)
    except Exception as exc:  # noqa: BLE001 - a backend must not raise; when one does, the replica says so
        return _failed(exc)
    clock.write(Path(msg["run_dir"]))
    return ("done", _cuda_broken(), made)


def _run_call(msg: dict[str, Any]) -> tuple:
    """Call ``msg["call"]`` (a function named as resolve() names it) with ``msg["payload"]``; the reply carries
    what it returned (WorkerPool.call)."""
    _limit_memory(msg.get("memory_limit"))
    try:
        value = resolve(msg["call"])(msg["payload"])
    except Exception as exc:  # noqa: BLE001 - the call's failure is the parent's to record
        return _failed(exc)
    return ("done", _cuda_broken(), value)


def _ahead_steps(msg: dict[str, Any]) -> Iterator[None]:
    """What the next slice needs that can be made after the reply, while the parent has the other process
    measure, in short steps: the next case's operands (accuracy.draw_ahead), then whatever the backend makes
    ahead for it (cuDNN's answers that run nothing, and fresh handles, as many as this slice had combinations).
    What fails here is made again where the slice needs it, and fails there."""
    try:
        accuracy.draw_ahead(msg["ahead"], msg["options"].directions)
    except Exception:  # noqa: BLE001 - see above
        pass
    yield
    try:
        ahead = getattr(resolve_backend(msg["backend"]), "ahead", None)
        if ahead is not None:
            yield from ahead(msg["ahead"], len(msg["combos"]), msg["options"])
    except Exception:  # noqa: BLE001 - see above
        pass


class Ahead:
    """The steps made ahead, run only while no message waits, so that they never hold a slice up. The short
    slice the other process runs next (PyTorch's, under a second) can end before this process has its cuDNN
    answers for the next case (Get_v7: 15 ms a call backward-filter); what is left when a message comes runs
    after it, beside the other process's next, longer slice. Steps for the case a slice is about to measure are
    dropped (the slice asks what it lacks itself), and so are a case's steps once a later case's come."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Iterator[None]]] = []  # (case, its steps), oldest first

    def add(self, case: Any, steps: Iterator[None]) -> None:
        """``case``'s steps, after what is left of its earlier ones; any other case's are dropped."""
        self._close([p for p in self.pending if p[0] != case])
        self.pending.append((case, steps))

    def before_slice(self, case: Any) -> None:
        """The slice of ``case`` is next: its steps are dropped."""
        self._close([p for p in self.pending if p[0] == case])

    def _close(self, dropped: list[tuple[Any, Iterator[None]]]) -> None:
        for p in dropped:
            p[1].close()
            self.pending.remove(p)

    def run_until_message(self, conn: Connection) -> None:
        while self.pending and not conn.poll():
            if next(self.pending[0][1], _DONE) is _DONE:
                self.pending.pop(0)


_DONE = object()


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def child_main(fd: int, parent: int) -> None:
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as its start line did (pool.py): the caller answers Ctrl-C
    conn = Connection(fd)
    profile = WorkerProfile()
    ahead = Ahead()
    while True:
        try:
            ahead.run_until_message(conn)
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None
        if msg is None:
            profile.dump()
            return
        msg["waited_s"] = max(0.0, time.monotonic() - msg.get("sent_at", time.monotonic()))
        ahead.before_slice(msg.get("case"))
        reply = _run_slice(msg)
        conn.send(reply)
        if reply[0] != "done" or reply[1]:
            profile.dump()
            os._exit(0)  # a failed or CUDA-tainted worker is never reused
        if msg.get("ahead") is not None:
            ahead.add(msg["ahead"], _ahead_steps(msg))

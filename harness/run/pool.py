"""Fault isolation: each slice of a sweep (one backend, one case) runs in a child process under a watchdog.

A nightly fleet runs unattended, so one bad combination must cost that combination and nothing else. The
child journals every record itself the moment it is made (written through; fsynced at the slice's end), so
nothing it finished is lost when it dies. The parent reads the new journal lines back (to feed ``on_record``
and to see progress) and watches the child: when it dies of a signal, exits, raises out of the backend, runs out
of memory, corrupts the CUDA context, or makes no progress for ``timeout_s``, the first unfinished combination is
journaled with status crashed / timeout / out_of_memory and a one-line reason, and the rest of the slice
goes to a fresh worker (at most ``retries`` times per slice; after that the rest is journaled with the
same status, so a case whose every combination hangs costs (retries + 1) timeouts, not one per combination).

One worker process serves slice after slice (a torch import and a CUDA context cost seconds); it is
replaced only after a failure; ``call`` runs one function in a fresh worker under the same watchdog and
judgement (the autotuner's fresh cudnn.benchmark processes; onnxruntime's session processes, FreshProcesses
below). The worker's side is poolchild.py. The child dies with the sweep (PR_SET_PDEATHSIG) and holds the run lock with
it, so a ``kill -9`` of the sweep never leaves a writer behind for ``--resume`` to race.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..backends import Combo, SweepOptions
from ..core.cases import Case
from ..core.records import ERROR, Ranking, Record, RecordKind
from .finalize import classify, ended, finalize, one_line, oom_kills, raised  # noqa: F401 (classify: kept)
from .journal import JOURNAL_FILE, Journal

DEFAULT_TIMEOUT_S = 600.0  # no new record for this long: the watchdog ends the worker
DEFAULT_RETRIES = 2


class _Child:
    def __init__(self, keep_fds: tuple[int, ...], env: dict[str, str] | None = None):
        parent_sock, child_sock = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        fd = child_sock.fileno()
        # Ctrl-C reaches the whole process group: the caller answers it (and ends this worker), so the worker
        # ignores it from its first line, before its imports, where a KeyboardInterrupt would print a traceback
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
             f"from harness.run.poolchild import child_main; child_main({fd}, {os.getpid()})"],
            pass_fds=(fd, *keep_fds), env=env, stdin=subprocess.DEVNULL)
        child_sock.close()
        self.conn = Connection(parent_sock.detach())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


class WorkerPool:
    """Runs slices in a child process, replacing it after every failure; records come back as journaled."""

    def __init__(self, journal: Journal | None, timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = DEFAULT_RETRIES,
                 memory_limit: int | None = None, keep_fds: tuple[int, ...] = (),
                 log: Callable[[str], None] | None = None, env: dict[str, str] | None = None):
        """``env``: the worker's environment (a stack's, stacks.Stack.env), by default this process's;
        ``journal`` None: a pool that only calls (``call`` journals nothing; run/pool.py)."""
        self.journal = journal
        self.env = env
        self.path = journal.path / JOURNAL_FILE if journal is not None else None
        self.timeout_s = timeout_s
        self.retries = retries
        self.memory_limit = memory_limit
        self.keep_fds = keep_fds
        self.log = log or (lambda msg: None)
        self.child: _Child | None = None
        self.failures: list[tuple[str, str, str]] = []  # (slice, status, reason), for the summary

    def close(self) -> None:
        """Let the worker finish and end; on the way out of a stop (Ctrl-C, or the SystemExit of SIGTERM and
        SIGHUP: core/children.py) end it at once, as ``abort`` does: what it finished is journaled already, and
        the slice it is in may run for minutes."""
        if isinstance(sys.exc_info()[1], (KeyboardInterrupt, SystemExit)):
            self.abort()
        if self.child is not None:
            self.child.stop()
            self.child = None

    def abort(self) -> None:
        """End the worker now (SIGKILL), whatever it is running; the pool says nothing more (a stopped command's
        last line is its own). Safe from another thread: the one watching the worker sees it die and reaps it."""
        self.log = lambda msg: None
        child = self.child
        if child is not None and child.proc.poll() is None:
            child.proc.kill()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _discard(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child = None

    def _end(self) -> int:
        """Drop a torn tail a dead child may have left, and return where complete lines end."""
        return self.journal.repair() if self.journal is not None else 0

    def _read_from(self, offset: int) -> tuple[list[dict[str, Any]], int]:
        if self.path is None or not self.path.exists():
            return [], offset
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        return [json.loads(line) for line in data[:end].splitlines() if line], offset + end

    def _journal(self, rec: Record) -> Record:
        finalize(rec)
        self.journal.append(rec)
        self.journal.close()
        return rec

    def _watch(self, msg: dict[str, Any]):
        """Hand ``msg`` to the worker (a fresh one after a failure) and watch it: yields each record it journals;
        returns (the reply or None, whether the watchdog killed it, the child, the OOM-kill count before)."""
        offset = self._end()
        if self.child is None:
            self.child = _Child(self.keep_fds, self.env)
        child = self.child
        oom_before = oom_kills()
        try:
            child.conn.send(dict(msg, sent_at=time.monotonic()))  # the worker tells how long it kept it waiting
        except OSError:  # the worker died before it got the message: judged below as any death is
            pass
        reply, killed, finished = None, False, False
        last = time.monotonic()
        while True:
            lines, offset = self._read_from(offset)
            for d in lines:
                last = time.monotonic()
                yield _parse(d)
            if finished:  # one last read after the reply or the death, then judge
                return reply, killed, child, oom_before
            try:
                if child.conn.poll(0.1):
                    reply = child.conn.recv()
            except (EOFError, OSError):
                child.proc.wait()
            if reply is not None or child.proc.poll() is not None:
                finished = True
            elif time.monotonic() - last > self.timeout_s:
                child.kill()
                killed = finished = True

    def run_slice(self, backend: str, case: Case, combos: list[Combo], options: SweepOptions,
                  runner: str | None = None, finalize: bool = True, kind: str = RecordKind.MEASUREMENT,
                  identity: Callable[[Record], str] = Record.key,
                  replicas: dict[str, Record] | None = None, ahead: Case | None = None) -> Iterator[Record | Ranking]:
        """Yield the slice's records as they are journaled: by the child, or by the parent for a failure.

        ``runner`` (load_runner) runs the slice instead of the backend named ``backend``, which still names the
        records; ``case`` is then whatever the runner measures (it needs an ``id``). ``finalize=False`` leaves
        the classification and explanation of the records to the runner (a crash record is still finalized).
        ``kind``: the kind of the records the combinations become (a failure record carries it too); a record of
        that kind whose ``identity`` is a combination's finishes it (a study whose records name what they found,
        as the crosscheck names its algorithm, passes a coarser identity than the whole key). ``replicas``: the
        same combinations timed in another process (``replicate``), by key, pooled into the records (replicas.py).
        ``ahead``: the case the sweep measures next, whose operands the worker draws once it has replied.
        """
        remaining = {identity(c.record(case, backend, kind=kind)): c for c in combos}
        failures = 0
        while remaining:
            reply, killed, child, oom_before = yield from self._finished(self._watch(
                {"run_dir": str(self.journal.path), "backend": backend, "case": case,
                 "combos": list(remaining.values()), "options": options, "memory_limit": self.memory_limit,
                 "runner": runner, "finalize": finalize, "kind": kind,
                 "replicas": {k: r for k, r in (replicas or {}).items() if k in remaining}, "ahead": ahead}),
                remaining, kind, identity)
            slice_name = f"{backend} {case.id}"
            if reply is not None and reply[0] == "done":
                if reply[1]:
                    self.log(f"{slice_name}: the CUDA context is unusable after the slice ({reply[1]}); "
                             "a fresh worker takes the next one")
                    self._discard()
                # a backend that yields no record for a combo: say so
                yield from self.fail(case, list(remaining.values()), backend, ERROR,
                                     "the backend returned no record for it", options.device, kind)
                return
            status, reason, blame = ended(reply, killed, self.timeout_s, child.proc.wait, oom_before)
            self._discard()
            failures += 1
            self.failures.append((slice_name, status, reason))
            self.log(f"{slice_name}: {status}: {reason}; {len(remaining)} combinations unfinished")
            if blame and remaining:
                key = next(iter(remaining))
                combo = remaining.pop(key)
                yield self._journal(combo.record(
                    case, backend, status=status, device=options.device, kind=kind,
                    reason=f"{reason} while this combination, the first unfinished of the case, was running"))
            if failures > self.retries and remaining:
                note = (f"not measured: the worker for this case failed {failures} times "
                        f"(last: {status}: {reason})")
                yield from self.fail(case, list(remaining.values()), backend, status, note, options.device, kind)
                remaining.clear()

    def replicate(self, backend: str, case: Case, combos: list[Combo], options: SweepOptions,
                  ahead: Case | None = None) -> dict[str, Record]:
        """The slice run in this pool's worker and handed back, not journaled: a replica's timing pass
        (replicas.py), by record key. A worker that fails costs the replica only: the failure is logged and
        counted, and the combinations it had not handed back are timed in the main process alone. ``ahead`` as
        for run_slice."""
        watch = self._watch({"run_dir": str(self.journal.path), "backend": backend, "case": case, "combos": combos,
                             "options": options, "memory_limit": self.memory_limit, "collect": True,
                             "ahead": ahead})
        while True:
            try:
                next(watch)  # a replica journals nothing
            except StopIteration as stop:
                reply, killed, child, oom_before = stop.value
                break
        if reply is not None and reply[0] == "done":
            if reply[1]:
                self._discard()
            return {rec.key(): rec for rec in reply[2] if isinstance(rec, Record)}
        status, reason, _ = ended(reply, killed, self.timeout_s, child.proc.wait, oom_before)
        self._discard()
        name = f"{backend} {case.id} (replica)"
        self.failures.append((name, status, reason))
        self.log(f"{name}: {status}: {reason}; the slice is timed in one process")
        return {}

    @staticmethod
    def _finished(watch, remaining: dict[str, Combo], kind: str, identity: Callable[[Record], str]):
        """Pass the watched records on, crossing off the combinations they finish; returns what _watch returns."""
        while True:
            try:
                rec = next(watch)
            except StopIteration as stop:
                return stop.value
            if rec.kind == kind:
                remaining.pop(identity(rec), None)
            yield rec

    def fail(self, case: Case, combos: list[Combo], backend: str, status: str, reason: str, device: str,
             kind: str = RecordKind.MEASUREMENT) -> Iterator[Record]:
        """Journal ``combos`` as not measured, with ``status`` and ``reason`` (what a call they needed met)."""
        for combo in combos:
            yield self._journal(combo.record(case, backend, status=status, device=device, kind=kind,
                                             reason=one_line(reason)))

    def call(self, function: str, payload: Any, name: str) -> tuple[Any, tuple[str, str] | None]:
        """``function(payload)`` (named as resolve() names it) in a fresh worker under the watchdog, which ends it
        after ``timeout_s``; returns (what it returned, None), or (None, (status, reason)) when it crashed, hung,
        ran out of memory or raised. The worker is not reused: every call is a fresh process."""
        self.close()
        watch = self._watch({"call": function, "payload": payload, "memory_limit": self.memory_limit})
        while True:
            try:
                next(watch)  # a called function journals nothing; a line it wrote is the caller's
            except StopIteration as stop:
                reply, killed, child, oom_before = stop.value
                break
        if reply is not None and reply[0] == "done":
            self.close()
            return reply[2], None
        status, reason, _ = ended(reply, killed, self.timeout_s, child.proc.wait, oom_before)
        self._discard()
        self.failures.append((name, status, reason))
        self.log(f"{name}: {status}: {reason}")
        return None, (status, reason)


def _parse(d: dict[str, Any]) -> Record | Ranking:
    if d.get("kind") == RecordKind.RANKING:
        return Ranking(**d)
    return Record.from_dict(d)


# --- fresh processes a backend plans: onnxruntime's session processes --------------------------------------
# Its drift measurement needs processes as part of the measurement (a second process is one of the repetitions;
# cuDNN's logging must be set before a process loads it), so the backend plans them (backends/ort/sessions.py)
# and is handed this service to run them, each as a ``WorkerPool.call``: a session process that crashes, hangs
# or runs out of memory ends with the pool's status and reason, and nothing in the backend classifies a process.
# Handed, not imported: backends come before run, and the pool journals and judges records (the run layer's
# business). A call journals nothing, so these pools have no journal; several run at once (threads, one pool and
# one process each) when the backend asks for ``parallel`` processes at a time.

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

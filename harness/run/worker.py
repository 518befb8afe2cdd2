"""Fault isolation: each slice of a sweep (one backend, one case) runs in a child process under a watchdog.

A nightly fleet runs unattended, so one bad combination must cost that combination and nothing else. The
child journals every record itself the moment it is made (append + fsync), so nothing it finished is lost
when it dies. The parent reads the new journal lines back (to feed ``on_record`` and to see progress) and
watches the child: when it dies of a signal, exits, raises out of the backend, runs out of memory,
corrupts the CUDA context, or makes no progress for ``timeout_s``, the first unfinished combination is
journaled with status crashed / timeout / out_of_memory and a one-line reason, and the rest of the slice
goes to a fresh worker (at most ``retries`` times per slice; after that the rest is journaled with the
same status, so a case whose every combination hangs costs (retries + 1) timeouts, not one per combination).

One worker process serves slice after slice (a torch import and a CUDA context cost seconds); it is
replaced only after a failure. The child dies with the sweep (PR_SET_PDEATHSIG) and holds the run lock
with it, so a ``kill -9`` of the sweep never leaves a writer behind for ``--resume`` to race.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..backends import Combo, SweepOptions, get_backend
from ..core.cases import Case
from ..core.explain import explain
from ..core.records import CRASHED, ERROR, OOM, TIMEOUT, Ranking, Record
from .journal import JOURNAL_FILE, Journal
from .slicetime import SliceClock

DEFAULT_TIMEOUT_S = 600.0  # no new record for this long: the watchdog ends the worker
DEFAULT_RETRIES = 2

# Messages of errors after which the CUDA context is unusable (sticky errors): the worker must be replaced.
_STICKY_CUDA = ("illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
                "illegal instruction", "device-side assert", "an illegal", "CUDA_ERROR_LAUNCH_FAILED",
                "CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_INTERNAL_ERROR")
_OOM_WORDS = ("OutOfMemoryError", "out of memory", "CUDNN_STATUS_ALLOC_FAILED", "MemoryError",
              "CUBLAS_STATUS_ALLOC_FAILED")


def _test_backend():
    """The tests' fault-injecting backend (tests/faulty_backend.py, not shipped in the wheel) when
    CONVBENCH_TEST_BACKENDS=1 and this is a checkout that has it; else None."""
    if os.environ.get("CONVBENCH_TEST_BACKENDS") != "1":
        return None
    tests = str(Path(__file__).resolve().parents[2] / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    try:
        import faulty_backend
    except ImportError:
        return None
    return faulty_backend


def resolve_backend(name: str):
    """A backend by name; the fault-injecting test backend only when CONVBENCH_TEST_BACKENDS=1."""
    faulty = _test_backend()
    if faulty and name == faulty.FaultyBackend.name:
        return faulty.FaultyBackend()
    return get_backend(name)


def backend_names() -> tuple[str, ...]:
    from ..backends import BACKENDS

    return BACKENDS + (("faulty",) if _test_backend() else ())


def load_runner(spec: str):
    """A slice runner named ``"package.module:Name"`` (a class with ``name`` and ``run(subject, combos, options)``),
    instantiated: how a driver that is not a registered backend (the onnxruntime model grid) runs its slices
    through the same pool, with the same crash, timeout and OOM records."""
    import importlib

    module, _, attr = spec.partition(":")
    if not module.startswith("harness.") or not attr:
        raise ValueError(f"slice runner {spec!r} is not a harness class")
    return getattr(importlib.import_module(module), attr)()


def classify(rec: Record) -> Record:
    """An error record whose reason is an out-of-memory error gets the out_of_memory status."""
    if rec.status == ERROR and rec.reason and any(w in rec.reason for w in _OOM_WORDS):
        rec.status = OOM
    return rec


def _one_line(text: str, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------- the child


def _cuda_broken() -> str | None:
    """The error a CUDA synchronize raises when the context is corrupted; None when it is healthy or unused."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any failure here means the context cannot be trusted
        return _one_line(f"{type(exc).__name__}: {exc}")
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


def _run_slice(msg: dict[str, Any]) -> tuple:
    """Measure one slice, journaling each record; the reply says how it ended."""
    journal = Journal(Path(msg["run_dir"]))
    backend = load_runner(msg["runner"]) if msg.get("runner") else resolve_backend(msg["backend"])
    finalize = msg.get("finalize", True)
    _limit_memory(msg.get("memory_limit"))
    clock = SliceClock(msg["backend"], msg["case"].id)
    try:
        for rec in backend.run(msg["case"], msg["combos"], msg["options"]):
            clock.tick(rec)
            broken = None
            if rec.kind == "measurement":
                if finalize:
                    classify(rec)
                if rec.status != "ok" or any(w in (rec.reason or "") for w in _STICKY_CUDA):
                    broken = _cuda_broken()
                if broken:
                    rec.status = CRASHED
                    rec.reason = _one_line(f"corrupted the CUDA context ({rec.reason or broken}); the rest of "
                                           "the case continues in a fresh worker")
                if finalize or broken:
                    rec.explanation = explain(rec)
            journal.append(rec)
            if broken:
                journal.close()
                return ("failed", CRASHED, "", False)
    except MemoryError as exc:
        journal.close()
        return ("failed", OOM, _one_line(f"MemoryError: {exc}" if str(exc) else "MemoryError"), True)
    except Exception as exc:  # noqa: BLE001 - a backend must not raise; when one does, the slice says so
        journal.close()
        kind = OOM if any(w in f"{type(exc).__name__} {exc}" for w in _OOM_WORDS) else ERROR
        return ("failed", kind, _one_line(f"{type(exc).__name__}: {exc}"), True)
    journal.close()
    clock.write(journal.path)
    broken = _cuda_broken()
    if broken:  # the last record was fine, yet the context is not: do not hand it another slice
        return ("done", broken)
    return ("done", None)


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
    conn = Connection(fd)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        reply = _run_slice(msg)
        conn.send(reply)
        if reply[0] != "done" or reply[1]:
            os._exit(0)  # a failed or CUDA-tainted worker is never reused


# ---------------------------------------------------------------------------------------------- the parent


def _oom_kills() -> int | None:
    """The cgroup's count of OOM kills (cgroup v2), to tell the kernel's OOM killer from other SIGKILLs."""
    try:
        for line in Path("/sys/fs/cgroup/memory.events").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


class _Child:
    def __init__(self, keep_fds: tuple[int, ...], env: dict[str, str] | None = None):
        parent_sock, child_sock = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        fd = child_sock.fileno()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from harness.run.worker import child_main; child_main({fd}, {os.getpid()})"],
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

    def __init__(self, journal: Journal, timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = DEFAULT_RETRIES,
                 memory_limit: int | None = None, keep_fds: tuple[int, ...] = (),
                 log: Callable[[str], None] | None = None, env: dict[str, str] | None = None):
        """``env``: the worker's environment (a stack's, stacks.Stack.env), by default this process's."""
        self.journal = journal
        self.env = env
        self.path = journal.path / JOURNAL_FILE
        self.timeout_s = timeout_s
        self.retries = retries
        self.memory_limit = memory_limit
        self.keep_fds = keep_fds
        self.log = log or (lambda msg: None)
        self.child: _Child | None = None
        self.failures: list[tuple[str, str, str]] = []  # (slice, status, reason), for the summary

    def close(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None

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
        return self.journal.repair()

    def _read_from(self, offset: int) -> tuple[list[dict[str, Any]], int]:
        if not self.path.exists():
            return [], offset
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        return [json.loads(line) for line in data[:end].splitlines() if line], offset + end

    def _journal(self, rec: Record) -> Record:
        rec.explanation = explain(rec)
        self.journal.append(rec)
        self.journal.close()
        return rec

    def run_slice(self, backend: str, case: Case, combos: list[Combo], options: SweepOptions,
                  runner: str | None = None, finalize: bool = True) -> Iterator[Record | Ranking]:
        """Yield the slice's records as they are journaled: by the child, or by the parent for a failure.

        ``runner`` (load_runner) runs the slice instead of the backend named ``backend``, which still names the
        records; ``case`` is then whatever the runner measures (it needs an ``id``). ``finalize=False`` leaves
        the classification and explanation of the records to the runner (a crash record is still explained).
        """
        remaining = {c.key(case, backend): c for c in combos}
        failures = 0
        while remaining:
            offset = self._end()
            if self.child is None:
                self.child = _Child(self.keep_fds, self.env)
            child = self.child
            oom_before = _oom_kills()
            child.conn.send({"run_dir": str(self.journal.path), "backend": backend, "case": case,
                             "combos": list(remaining.values()), "options": options,
                             "memory_limit": self.memory_limit, "runner": runner, "finalize": finalize})
            reply, killed, finished = None, False, False
            last = time.monotonic()
            while True:
                lines, offset = self._read_from(offset)
                for d in lines:
                    last = time.monotonic()
                    rec = _parse(d)
                    if rec.kind == "measurement":
                        remaining.pop(rec.key(), None)
                    yield rec
                if finished:  # one last read after the reply or the death, then judge
                    break
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
            slice_name = f"{backend} {case.id}"
            if reply is not None and reply[0] == "done":
                if reply[1]:
                    self.log(f"{slice_name}: the CUDA context is unusable after the slice ({reply[1]}); "
                             "a fresh worker takes the next one")
                    self._discard()
                for combo in remaining.values():  # a backend that yields no record for a combo: say so
                    yield self._journal(combo.record(case, backend, status=ERROR, device=options.device,
                                                     reason="the backend returned no record for it"))
                return
            status, reason, blame = self._failure(child, reply, killed, oom_before)
            self._discard()
            failures += 1
            self.failures.append((slice_name, status, reason))
            self.log(f"{slice_name}: {status}: {reason}; {len(remaining)} combinations unfinished")
            if blame and remaining:
                key = next(iter(remaining))
                combo = remaining.pop(key)
                yield self._journal(combo.record(
                    case, backend, status=status, device=options.device,
                    reason=f"{reason} while this combination, the first unfinished of the case, was running"))
            if failures > self.retries and remaining:
                note = (f"not measured: the worker for this case failed {failures} times "
                        f"(last: {status}: {reason})")
                for combo in remaining.values():
                    yield self._journal(combo.record(case, backend, status=status, device=options.device,
                                                     reason=_one_line(note)))
                remaining.clear()

    def _failure(self, child: _Child, reply: tuple | None, killed: bool,
                 oom_before: int | None) -> tuple[str, str, bool]:
        """(status, one-line reason, whether the first unfinished combination is the culprit)."""
        if killed:
            return TIMEOUT, f"no record for {self.timeout_s:g} s: the watchdog killed the worker", True
        if reply is not None and reply[0] == "failed":
            _, status, reason, blame = reply
            if status == CRASHED and not blame:
                return CRASHED, "the CUDA context was corrupted", False
            return status, reason, blame
        rc = child.proc.wait()
        if rc < 0:
            sig = signal.Signals(-rc)
            if sig == signal.SIGKILL:
                after = _oom_kills()
                if oom_before is not None and after is not None and after > oom_before:
                    return OOM, "the kernel's OOM killer ended the worker (host memory exhausted)", True
                return CRASHED, "the worker was killed (SIGKILL from outside the sweep)", True
            return CRASHED, f"the worker died of {sig.name} ({signal.strsignal(sig) or sig.name})", True
        return CRASHED, f"the worker exited with code {rc} in the middle of the case", True


def _parse(d: dict[str, Any]) -> Record | Ranking:
    if d.get("kind") == "ranking":
        return Ranking(**d)
    return Record.from_dict(d)

"""The one finalize step: every record a driver journals is classified, then explained, here and nowhere else.

A record leaves its producer (a backend, a study's runner, the worker pool's parent for a worker that crashed,
hung or ran out of memory) with the status the producer saw. Before it is journaled it passes ``finalize``:

1. classify: an error whose reason is an out-of-memory error gets the out_of_memory status (the words below are
   those PyTorch, cuDNN, cuBLAS and Python use);
2. explain: core/explain.py's rules for the record's kind (a measurement's status, accuracy and determinism; an
   autotuner record's winners; a crosscheck's difference), the first that fits.

The sweep (in a worker or in this process), the worker pool's failure records, the autotuner and the
onnxruntime grid all call it. A runner whose words come from what only it saw (onnxruntime's drift across
sessions and processes) says so with ``by_producer=True``: its records are journaled as made.

The status of a record the pool makes for a worker that failed is decided here too: ``raised`` for an
exception out of a runner (in the worker), ``ended`` for how the worker process ended (in the parent).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from ..core.explain import explain_any
from ..core.records import CRASHED, ERROR, OOM, TIMEOUT, Ranking, Record

OOM_WORDS = ("OutOfMemoryError", "out of memory", "CUDNN_STATUS_ALLOC_FAILED", "MemoryError",
             "CUBLAS_STATUS_ALLOC_FAILED")


def is_oom(text: str | None) -> bool:
    """Whether an error's text (a reason, or an exception's type and message) says memory ran out."""
    return bool(text) and any(w in text for w in OOM_WORDS)


def classify(rec: Record) -> Record:
    """An error record whose reason is an out-of-memory error gets the out_of_memory status."""
    if rec.status == ERROR and is_oom(rec.reason):
        rec.status = OOM
    return rec


def finalize(rec: Record | Ranking, by_producer: bool = False) -> Record | Ranking:
    """Classify and explain ``rec`` in place (a ranking is cuDNN's own list: kept as it came); returns it.

    ``by_producer``: the runner classified and explained its records itself; they are left as they are.
    """
    if isinstance(rec, Ranking) or by_producer:
        return rec
    classify(rec)
    rec.explanation = explain_any(rec)
    return rec


def one_line(text: str, limit: int = 300) -> str:
    """The first line of ``text``, cut to ``limit`` characters: a reason is one line."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def raised(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of an exception out of a runner, which must not raise: out_of_memory or error."""
    if isinstance(exc, MemoryError):
        return OOM, one_line(f"MemoryError: {exc}" if str(exc) else "MemoryError")
    return (OOM if is_oom(f"{type(exc).__name__} {exc}") else ERROR), one_line(f"{type(exc).__name__}: {exc}")


def oom_kills() -> int | None:
    """The cgroup's count of OOM kills (cgroup v2), to tell the kernel's OOM killer from other SIGKILLs."""
    try:
        for line in Path("/sys/fs/cgroup/memory.events").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def ended(reply: tuple | None, killed: bool, timeout_s: float, returncode: Callable[[], int],
          oom_before: int | None) -> tuple[str, str, bool]:
    """How a pool worker that did not finish its slice ended: (status, one-line reason, whether the first
    unfinished combination is the culprit), from its reply, the watchdog and its exit status."""
    if killed:
        return TIMEOUT, f"no record for {timeout_s:g} s: the watchdog killed the worker", True
    if reply is not None and reply[0] == "failed":
        _, status, reason, blame = reply
        if status == CRASHED and not blame:
            return CRASHED, "the CUDA context was corrupted", False
        return status, reason, blame
    rc = returncode()
    if rc < 0:
        sig = signal.Signals(-rc)
        if sig == signal.SIGKILL:
            after = oom_kills()
            if oom_before is not None and after is not None and after > oom_before:
                return OOM, "the kernel's OOM killer ended the worker (host memory exhausted)", True
            return CRASHED, "the worker was killed (SIGKILL from outside the sweep)", True
        return CRASHED, f"the worker died of {sig.name} ({signal.strsignal(sig) or sig.name})", True
    return CRASHED, f"the worker exited with code {rc} in the middle of the case", True

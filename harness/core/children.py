"""Signals and child processes: a long command ends within seconds of a signal or of a dead child, by its own
cleanup (the ``finally`` blocks that remove a half-built store or report and reap a pool), never by a hang.

multiprocessing.Pool replaces a worker that died (the OOM killer's SIGKILL) and loses the task it held: a
caller waiting on the result waits forever. ``results`` and ``wait`` wait in short slices and look at the
pool's workers between them; a worker gone is ChildDied. ``exit_on_signals`` turns SIGTERM and SIGHUP (a
service stopped, a terminal closed) into SystemExit in the main process, as Ctrl-C is KeyboardInterrupt, so that
cleanup runs; ``quiet_worker`` is a pool worker's start: the parent alone answers Ctrl-C (a worker would print
its own traceback) and a terminate ends a worker at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.pool as mp_pool
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

SLICE_S = 0.2  # how long a wait lasts before the workers are looked at again
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class ChildDied(RuntimeError):
    """A worker of a pool ended while its pool was in use (killed by a signal, out of memory)."""


FALLBACK_S = 10.0  # after a signal, the longest a command's cleanup and exit may take before the process just ends


_held = 0  # > 0 while a step that must not be cut short runs (``held``); a signal then waits for its end
_pending = 0
_stopped = 0  # the stop signal a handler of this command raised, if any (``raise_again``)


class held:
    """``with held():`` EXIT_SIGNALS wait until the block has ended, or until ``release()`` (a pool being forked:
    cut short there, the workers forked so far belong to no one and outlive the command)."""

    def __enter__(self) -> held:
        global _held
        _held += 1
        self.on = True
        return self

    def release(self) -> None:
        global _held, _pending
        if not self.on:
            return
        self.on = False
        _held -= 1
        if not _held and _pending:
            signum, _pending = _pending, 0
            raise_exit(signum, None)

    def __exit__(self, *exc: object) -> None:
        self.release()


def raise_exit(signum: int, frame: object) -> None:
    """The handler of EXIT_SIGNALS in a command: SystemExit, so that the command's cleanup runs. Python drops an
    exception raised where it cannot propagate (a weakref callback, a __del__: "Exception ignored in"), so the
    process ends FALLBACK_S later if it still runs then (a cleanup that hangs, an exit that waits on a child)."""
    global _pending
    if _held:
        _pending = signum
        return
    timer = threading.Timer(FALLBACK_S, os._exit, (128 + signum,))
    timer.daemon = True
    timer.start()
    stopping(signum)
    raise SystemExit(128 + signum)


def stopping(signum: int) -> None:
    """A handler is about to raise the stop of ``signum`` (SystemExit, or KeyboardInterrupt for SIGINT)."""
    global _stopped
    _stopped = signum


def raise_again() -> None:
    """Raise once more a stop a handler raised where Python dropped it (a weakref callback, a __del__): a command
    asks before the step that makes its work permanent (a store linked into place, a report swapped in) and
    before it returns, so a signal that came is not lost. On the 2-core VM a SIGHUP sent to a collect landed in
    importlib's weakref callback; the collect went on and linked its store in, exit 0."""
    if _stopped == signal.SIGINT:
        raise KeyboardInterrupt
    if _stopped:
        raise SystemExit(128 + _stopped)


def _unraisable(unraisable: Any) -> None:
    """Python's report of an exception it dropped, left out for a stop that ``raise_again`` raises where it
    propagates (the command says it in one line); any other is reported as before."""
    if _stopped and unraisable.exc_type in (SystemExit, KeyboardInterrupt):
        return
    sys.__unraisablehook__(unraisable)


def exit_on_signals() -> dict[int, Any]:
    """SIGTERM and SIGHUP raise SystemExit in this (main) thread where they would end the process unannounced;
    returns the handlers replaced, for ``restore``."""
    global _stopped
    if threading.current_thread() is not threading.main_thread():
        return {}
    _stopped = 0
    replaced = {}
    for sig in EXIT_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_DFL:
            replaced[sig] = signal.signal(sig, raise_exit)
    if replaced and sys.unraisablehook is sys.__unraisablehook__:
        sys.unraisablehook = _unraisable
    return replaced


def restore(replaced: dict[int, Any]) -> None:
    for sig, handler in replaced.items():
        signal.signal(sig, handler)
    if replaced and sys.unraisablehook is _unraisable:
        sys.unraisablehook = sys.__unraisablehook__


_BLOCKED = {signal.SIGINT, *EXIT_SIGNALS}


def quiet_worker() -> None:
    """A pool worker's first step: Ctrl-C is the parent's to answer, and SIGTERM or SIGHUP end the worker at once
    (its parent's handlers, inherited through fork, would raise inside a task). start_pool forks with these
    signals blocked, so none reaches a worker before this; they are unblocked here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in EXIT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _BLOCKED)


def start_pool(ctx: Any, processes: int, initializer: Any = None, initargs: tuple = ()) -> Any:
    """``ctx.Pool(processes, ...)`` that counts the workers it forks: a pool replaces a worker that died, so more
    forks than ``processes`` means one died (even before anyone watched, with its task lost). The workers count
    themselves too, so that one forked in place of a dead one leaves before its initializer runs."""
    started = ctx.Value("i", 0)
    # forked with Ctrl-C, SIGTERM and SIGHUP blocked: a worker meets them only once quiet_worker set them, and the
    # pool's threads (which fork the replacements) keep them blocked, so they reach this process's main thread
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    try:
        pool = _CountingPool(processes, initializer=_counted, initargs=(started, processes, initializer, initargs),
                             context=ctx)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        raise
    pool.convbench_started, pool.convbench_size = started, processes
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a Ctrl-C that came meanwhile is raised here
    except BaseException:
        shut(pool, hard=True)  # ended here: the caller never holds it
        raise
    return pool


class _CountingPool(mp_pool.Pool):
    """A pool that counts here, in its parent, every worker it forks: more than its size means one died and was
    replaced, whatever the replacement then does. The workers' own count (``_counted``) can fall short of a death:
    a worker killed while it counted itself holds the count's lock for ever, so no later one counts. A report whose
    judge was killed once waited without end in a CI run, every worker it watched alive and the count not past the
    pool's size."""

    def __init__(self, *args: Any, **kwds: Any) -> None:
        self.convbench_forks = 0
        super().__init__(*args, **kwds)

    def Process(self, ctx: Any, *args: Any, **kwds: Any) -> Any:  # noqa: N802 - multiprocessing's hook, by name
        self.convbench_forks += 1
        return ctx.Process(*args, **kwds)


def _counted(started: Any, size: int, initializer: Any, initargs: tuple) -> None:
    with started.get_lock():
        started.value += 1
        replacement = started.value > size
    if replacement:
        # a worker died and the pool forked this one in its place: its parent is ending the pool (ChildDied), and
        # what the initializer would open may have died with the worker (a store being built, torn by a parser
        # killed mid-write: each replacement printed its traceback). It leaves at once, quietly.
        os._exit(0)
    if initializer is not None:
        initializer(*initargs)


class _Workers:
    """The processes of a pool when it was watched first; any of them gone or ended, or more started than the
    pool holds (start_pool), means a task was lost."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.seen = list(getattr(pool, "_pool", None) or [])  # kept: a dead one's exit code says how it ended
        self.pids = {p.pid for p in self.seen}

    def check(self) -> None:
        procs = list(getattr(self.pool, "_pool", None) or [])
        ended = [p for p in (*self.seen, *procs) if p.exitcode is not None]
        replaced = _replaced(self.pool)
        if ended or replaced or {p.pid for p in procs} != self.pids:
            code = ended[0].exitcode if ended else None
            how = f"killed by signal {-code}" if code is not None and code < 0 else \
                f"exited with {code}" if code is not None else "ended"
            raise ChildDied(f"a worker process {how} (out of memory?); its work is lost")


def _replaced(pool: Any) -> bool:
    """Whether start_pool's pool forked more workers than its size: one died, and was replaced."""
    return getattr(pool, "convbench_forks", 0) > getattr(pool, "convbench_size", float("inf"))


def _lost(pool: Any) -> bool:
    """Whether a worker of ``pool`` (start_pool's) died: ended now, or replaced after it died."""
    if _replaced(pool):
        return True
    return any(p.exitcode is not None for p in list(getattr(pool, "_pool", None) or []))


def shut(pool: Any, hard: bool = False) -> None:
    """End ``pool`` and reap its workers. Pool.terminate takes the pool's queue locks, and a worker killed while
    it held one (sending a result) never releases it: terminate, and the exit-time finalizer after it, would wait
    for ever. A pool that lost a worker, or is ended by an exception (``hard``: a signal, Ctrl-C), has its
    workers stopped and reaped directly (SIGTERM, then SIGKILL after a second), its maintenance and finalizer
    cancelled, and its blocked threads (daemons) left to end with the process."""
    if not hard and not _lost(pool):
        pool.terminate()
        pool.join()
        return
    pool._state = mp_pool.TERMINATE
    handler = getattr(pool, "_worker_handler", None)
    if handler is not None:
        handler._state = mp_pool.TERMINATE  # no worker is started in place of those stopped below
    finalizer = getattr(pool, "_terminate", None)
    if finalizer is not None:
        finalizer.cancel()
    waits = handler is not None and handler is not threading.current_thread()
    if waits and handler.is_alive():
        handler.join(1)
    stopped: list[Any] = []
    for again in (False, True):
        workers = [p for p in list(getattr(pool, "_pool", None) or []) if p not in stopped]
        for p in workers:
            if p.exitcode is None:
                p.terminate()
        for p in workers:
            p.join(1)
            if p.exitcode is None:
                p.kill()
                p.join(5)
        stopped += workers
        if again or not (waits and handler.is_alive()):
            break
        # a worker the handler was starting when told to stop joins the pool once it has started (on a loaded host
        # that took over the second waited above): the handler is waited for and the pool looked at once more, else
        # that worker outlives this, unreaped (start_pool's replacements leave on their own, _counted; a pool made
        # otherwise has its worker run on)
        handler.join(5)


@contextlib.contextmanager
def ending(pool: Any) -> Iterator[Any]:
    """``with ending(pool):`` the pool, shut (``shut``) however the block ends."""
    try:
        yield pool
    except BaseException:
        shut(pool, hard=True)
        raise
    shut(pool)


def results(pool: Any, iterator: Any) -> Iterator[Any]:
    """The items of ``pool.imap``/``imap_unordered``'s ``iterator``, or ChildDied once a worker is gone."""
    watch = _Workers(pool)
    while True:
        try:
            yield iterator.next(SLICE_S)
        except StopIteration:
            return
        except mp.TimeoutError:
            watch.check()


def wait(pending: Any, pool: Any = None) -> Any:
    """``pending.get()`` of an ``apply_async``/``map_async`` result (of ``pool``, else the pool it names), or
    ChildDied once a worker is gone."""
    watch = _Workers(pool if pool is not None else getattr(pending, "_pool", None))
    while True:
        try:
            return pending.get(SLICE_S)
        except mp.TimeoutError:
            watch.check()

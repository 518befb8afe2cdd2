"""A store that does not exist yet is built whole in a hidden file beside its path, then linked into place.

Why: the first collect of a fleet (or the rebuild a damaged store asks for, store_schema.REBUILD) is the largest
write a store ever gets, and the write-ahead log doubles it: every page is written to the log, copied into the
store and synced once a second. On this project's 2-core VM, a fleet of 10^7 records collected with --jobs 2 into
a new store took 45.1 s through the log and 24.7 s written straight into the file with the rollback journal in
memory and no sync until the end (the sync included; 114.4 against 71.1 s while the disk was slow;
docs/harness.md). No reader can see a file that is not in place yet, so nothing needs the log's guarantees while
it is built: a failed or interrupted collect removes the hidden file (nothing measured is lost: the run
directories are untouched), and the store appears only whole, synced, in WAL mode as every store is.

A collect that finds the store in place (every nightly one) writes into it through the log, run by run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ..core import children
from ..core.rundir import sync_dir
from .store_schema import StoreError, error_line


def build(path: str | Path, fill: Callable[[str], None]) -> bool:
    """``fill(hidden)`` builds a new store in a hidden file beside ``path``, which is then synced and linked in
    as ``path``. False (and nothing left behind) when ``path`` exists, before or after the build: another collect
    made it meanwhile, and the caller collects into that one instead."""
    target = Path(path)
    if target.exists() or target.is_symlink():
        return False
    with _Stop() as stop:
        try:
            fd, hidden = tempfile.mkstemp(prefix=f".{target.name}.new-", dir=target.parent)
        except OSError as exc:
            hint = "its folder does not exist" if not target.parent.is_dir() else "a read-only mount or directory?"
            raise StoreError(f"{path}: cannot write the store ({exc.strerror}; {hint})") from None
        try:
            os.close(fd)
            stop.arm()  # a SIGTERM that came while the file had no name here is raised now
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(hidden, 0o666 & ~umask)  # mkstemp makes it private; a store is read by whoever reads reports
            fill(hidden)  # its own errors are its own (a refused store, a pool that cannot start)
            children.raise_again()  # a stop Python dropped while it filled: the store is not put in place
            return _put_in_place(str(path), hidden, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hidden)


def _put_in_place(path: str, hidden: str, target: Path) -> bool:
    """The built file sealed and given its name, unless a store took that name meanwhile (False)."""
    try:
        _seal(hidden)
        try:
            os.link(hidden, target)  # never over a store that appeared meanwhile
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: the same check, then a rename
            if target.exists() or target.is_symlink():
                return False
            os.rename(hidden, target)
        _sync_folder(target.parent)
        return True
    except OSError as exc:
        raise StoreError(f"{path}: cannot write the store ({exc.strerror or exc})") from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(error_line(path, exc)) from None


class _Stop:
    """SIGTERM (``timeout``, a service stopped) or SIGHUP (a terminal closed) while a store is built raises
    SystemExit, and Ctrl-C KeyboardInterrupt, so the hidden file is removed instead of left behind (a fleet's is
    gigabytes). Until
    ``arm()`` (the file made, its name known) such a signal only waits: raised earlier, inside ``mkstemp``, it left
    the file behind (the signal reaches another thread, numpy's, so masking it in this one did not hold it back).
    In a thread, or in a program that handles these signals itself, they are left as they are (the CLI's own
    handler, children.raise_exit, is taken over while a store is built). A process that ignores Ctrl-C (a shell
    starts `convbench collect ... &` so) keeps ignoring it, and SIGTERM is still guarded."""

    def __init__(self) -> None:
        self.armed, self.pending, self.pid = False, 0, os.getpid()
        interrupt = signal.getsignal(signal.SIGINT)
        self.usable = threading.current_thread() is threading.main_thread() and all(
            signal.getsignal(sig) in (signal.SIG_DFL, children.raise_exit) for sig in children.EXIT_SIGNALS) \
            and interrupt in (signal.default_int_handler, signal.SIG_IGN)
        self.signals = (*children.EXIT_SIGNALS, *((signal.SIGINT,) if interrupt is signal.default_int_handler else ()))
        self.before: dict[int, object] = {}

    def __enter__(self) -> _Stop:
        global _building
        if self.usable:
            self.before = {sig: signal.signal(sig, self._on_signal) for sig in self.signals}
            _building = self
        return self

    def __exit__(self, *exc) -> None:
        global _building
        if self.usable:
            for sig, handler in self.before.items():
                signal.signal(sig, handler)
            _building = None

    def _on_signal(self, signum: int, frame: object) -> None:
        if os.getpid() != self.pid:  # a parser forked with this handler, before its initializer set the default:
            signal.signal(signum, signal.SIG_DFL)  # it ends as by default (holding it there hung the pool's end)
            os.kill(os.getpid(), signum)
            return
        if not self.armed:
            self.pending = signum
            return
        self._raise(signum)

    @staticmethod
    def _raise(signum: int) -> None:
        if signum == signal.SIGINT:
            children.stopping(signum)
            raise KeyboardInterrupt
        children.raise_exit(signum, None)

    def arm(self) -> None:
        self.armed = True
        if self.pending:
            signum, self.pending = self.pending, 0
            self._raise(signum)

    def hold(self) -> None:
        """A SIGTERM waits for the next ``arm()`` (collect holds it while its pool starts: a pool cut short
        there is never terminated, and a parser it had started outlived the collect and its hidden file)."""
        self.armed = False


_building: _Stop | None = None  # the SIGTERM guard of the store being built by this process, if any


def building_stop() -> _Stop | None:
    """The guard of the store being built now, to hold SIGTERM across a step that must not be cut short."""
    return _building


def _seal(hidden: str) -> None:
    """The built file in WAL mode (as Store opens every store), its pages on disk before it gets its name."""
    db = sqlite3.connect(os.fsencode(hidden), isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
    finally:
        db.close()  # the last connection checkpoints and removes the log it just made
    fd = os.open(hidden, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    """The new name on disk too (a folder that cannot be opened or synced, on some filesystems, is let be)."""
    with contextlib.suppress(OSError):
        sync_dir(folder)

"""The run directory's file names: the written contract that the journal (run/journal.py) writes and collect reads.

    <results>/<machine>/<run_id>/run.json        who/where/what: fingerprint, options, suite revision
    <results>/<machine>/<run_id>/records.jsonl   one record or ranking per line, appended as made, fsynced by each writer
    <results>/<machine>/<run_id>/records.jsonl.gz  the same lines once the run is finished and packed: gzip, 7-10x
                                                 smaller, so a fleet's collect reads and hashes far fewer bytes;
                                                 where both are there, records.jsonl is the journal
    <results>/<machine>/<run_id>/end.json        written at the end; absent if interrupted
    <results>/<machine>/<run_id>/records.packed  the finished journal as the store keeps it (collect/packed.py)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

RUN_FILE = "run.json"
JOURNAL_FILE = "records.jsonl"
JOURNAL_GZ_FILE = "records.jsonl.gz"
END_FILE = "end.json"
PACKED_FILE = "records.packed"


def journal_file(run_dir: Path) -> str:
    """The name of a run directory's journal: records.jsonl while it is there (a run being written, resumed, or
    finished before journals were compressed), else records.jsonl.gz."""
    return JOURNAL_GZ_FILE if not os.path.lexists(run_dir / JOURNAL_FILE) and \
        os.path.lexists(run_dir / JOURNAL_GZ_FILE) else JOURNAL_FILE


class UnsafeTarget(OSError):
    """The temporary file a run file is written through is a link or not a file: nothing was written."""


def write_whole(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, appearing whole: written beside it, synced, renamed over it (a link at
    ``path`` itself is replaced, never followed). OSError where it cannot be (UnsafeTarget where the file beside
    it is a link or not a file), with ``path`` untouched."""
    tmp = path.with_name(f"{path.name}.tmp")
    if os.path.lexists(tmp) and not stat.S_ISREG(os.lstat(tmp).st_mode):
        raise UnsafeTarget(f"{tmp} is a symbolic link or not a file; nothing was written")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sync_dir(path: Path) -> None:
    """A directory's entries (a rename, an unlink) on the disk, not only its files' bytes; OSError where it cannot
    be opened or synced."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

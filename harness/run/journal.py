"""The run directory: an append-only journal of records, written as they are made.

Layout (the unit that ``collect`` ingests, alone or tarred):

    <results>/<machine>/<run_id>/run.json       who/where/what: fingerprint, options, suite revision
    <results>/<machine>/<run_id>/records.jsonl  one record or ranking per line, appended as made, fsynced by each writer
    <results>/<machine>/<run_id>/end.json       written at the end: clocks after, counts; absent if interrupted
    <results>/<machine>/<run_id>/records.packed the finished journal packed for collect (collect/packed.py)
    <results>/<machine>/<run_id>/records.jsonl.gz  the finished journal, compressed where it was packed
    <results>/<machine>/<run_id>/slices.jsonl   where each slice's time went (harness/slicetime.py; not ingested)

A run is identified by (machine, image, start time, suite revision) and its directory is created with
O_EXCL semantics, so two runs never write into each other. Resuming reopens a run directory and skips
every combination whose record is already in the journal.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import intake
from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..core.records import SCHEMA_VERSION, Ranking, Record, RecordKind, dumps
from ..core.rundir import (  # noqa: F401 (the run's files, named here too)
    END_FILE,
    JOURNAL_FILE,
    JOURNAL_GZ_FILE,
    PACKED_FILE,
    RUN_FILE,
    UnsafeTarget,
    journal_file,
    write_whole,
)
from ..core.schema import SchemaError, check_name, check_night, check_record, check_run_header
from ..measurement import fingerprint as fpmod


def suite_revision() -> str:
    """CONVBENCH_REVISION (set in images), else the checkout's git HEAD or the wheel's baked revision."""
    from ..deploy.resources import revision

    return os.environ.get("CONVBENCH_REVISION") or revision()


class JournalError(UserError):
    """A run directory that cannot be resumed or read as it is; the message names the file, line and field."""


def open_append(path: Path) -> int:
    """A descriptor appending to ``path``, a regular file in place: never through a symbolic link (which would
    append to whatever it points at), never a FIFO or device."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        what = "is a symbolic link" if os.path.islink(path) else f"cannot be opened ({exc.strerror})"
        raise JournalError(f"{path} {what}; nothing was written") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JournalError(f"{path} is not a regular file; nothing was written")
    return fd


def _write_atomic(path: Path, data: dict[str, Any] | bytes) -> None:
    """A run file (a JSON object, or bytes) appearing whole (rundir.write_whole)."""
    if isinstance(data, dict):
        data = json.dumps(data, indent=1, sort_keys=True, allow_nan=False).encode()
    try:
        write_whole(path, data)
    except UnsafeTarget as exc:
        raise JournalError(str(exc)) from None


def _run_dir(path: Path) -> Path:
    """A run directory that may be written: a real directory (not a link to one) holding run.json."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        raise JournalError(f"{path}: not a run directory (a symbolic link, a file or missing)")
    return path


def read_header(path: Path) -> dict[str, Any]:
    """run.json of a run directory, read as collect reads it and checked against the run schema."""
    try:
        meta = intake.loads(intake.read_file(path / RUN_FILE, intake.MAX_META_BYTES), f"{path / RUN_FILE}")
        return check_run_header(meta)
    except intake.Hostile as exc:
        raise JournalError(str(exc)) from None
    except SchemaError as exc:
        raise JournalError(f"{path / RUN_FILE}: {exc}") from None


def check_machine(machine: str) -> None:
    """The machine name a run is filed under: it becomes a directory name under the results root, so
    CONVBENCH_MACHINE=../../x must not escape it."""
    try:
        check_name(machine, "machine (CONVBENCH_MACHINE or the fingerprint)")
    except SchemaError as exc:
        raise JournalError(str(exc)) from None


class Journal:
    def __init__(self, path: Path):
        self.path = _run_dir(path)
        self.meta = read_header(self.path)
        self._file = None

    @classmethod
    def create(cls, results: Path, fingerprint: dict[str, Any], options: dict[str, Any],
               run_id: str | None = None) -> Journal:
        machine = os.environ.get("CONVBENCH_MACHINE") or fpmod.machine_name(fingerprint)
        check_machine(machine)
        try:
            if run_id:
                check_name(run_id, "run id")
        except SchemaError as exc:
            raise JournalError(str(exc)) from None
        revision = suite_revision()
        started = dt.datetime.now(dt.timezone.utc)
        label = os.environ.get("CONVBENCH_NIGHT") or None  # the nightly job's night, shared by all its runs
        if label:
            try:
                check_night(label, started.date())
            except SchemaError as exc:
                raise JournalError(f"CONVBENCH_NIGHT: {exc}") from None
        image = fingerprint.get("image") or "native"
        safe_image = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in image)[:64]
        results = Path(results)
        base = results / machine
        try:
            results.mkdir(parents=True, exist_ok=True)
            if base.is_symlink():
                raise JournalError(f"{base} is a symbolic link; runs are written only inside --results")
            base.mkdir(exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise JournalError(f"--results {results}: not a directory") from None
        except OSError as exc:
            raise JournalError(f"--results {results}: cannot create {base} ({exc.strerror})",
                               EXIT_ENVIRONMENT) from None
        if run_id:
            path = base / run_id
            path.mkdir(exist_ok=False)  # never write into another run
        else:
            stem = f"{started:%Y%m%dT%H%M%SZ}-{safe_image}-{revision}-{os.getpid()}"
            for n in range(1, 1000):  # two runs started in the same second by one process get a suffix
                run_id = stem if n == 1 else f"{stem}-{n}"
                path = base / run_id
                try:
                    path.mkdir(exist_ok=False)
                    break
                except FileExistsError:
                    continue
        meta = {"schema": SCHEMA_VERSION, "run_id": run_id, "machine": machine, "image": image,
                "started": started.isoformat(), "suite_revision": revision, "fingerprint": fingerprint,
                "options": options}
        if label:
            meta["night"] = label
        _write_atomic(path / RUN_FILE, meta)
        return cls(path)

    def done_keys(self, kind: str = RecordKind.MEASUREMENT, identity: Callable[[Record], str] = Record.key) -> set[str]:
        """Keys (``identity``, by default Record.key) of the records of ``kind`` already journaled, failure
        records included; a torn last line (killed mid-write) is ignored. Every line is checked as collect
        checks it: a run collect would refuse is not resumed."""
        keys: set[str] = set()
        for rec in iter_records(self.path / JOURNAL_FILE):
            if rec.get("kind") == kind:
                keys.add(identity(Record.from_dict(rec)))
        return keys

    def _reopen(self) -> None:
        """A finished run written again (resumed, or a driver's records added): its compressed journal made
        records.jsonl again, and its packed copy, which no longer matches, taken away; finish packs it again."""
        if journal_file(self.path) == JOURNAL_FILE:
            return
        _write_atomic(self.path / JOURNAL_FILE, read_journal(self.path))
        for stale in (self.path / PACKED_FILE, self.path / JOURNAL_GZ_FILE):
            if os.path.lexists(stale):
                os.unlink(stale)

    def append(self, rec: Record | Ranking) -> None:
        """Write ``rec``'s line through to the file: once this returns, a writer killed at any point (the worker a
        fault ends) has lost nothing. It reaches the disk at ``close``, a slice's end: an fsync a record cost the
        GPU's critical path 2.9 s of a forward night (docs/performance.md), and a host that crashes loses at
        most the slice it was in, which --resume measures again."""
        if self._file is None:
            self._reopen()
            _drop_torn_tail(self.path / JOURNAL_FILE)
            self._file = os.fdopen(open_append(self.path / JOURNAL_FILE), "a")
        self._file.write(dumps(rec) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Sync and close the append handle; the next append reopens it. Between writers of one journal (a
        worker pool's parent and its child processes) each closes before the other writes."""
        if self._file is not None:
            try:
                os.fsync(self._file.fileno())
            finally:
                self._file.close()
                self._file = None

    def repair(self) -> int:
        """Close, drop a last line torn by a writer that was killed mid-write, and return where the complete
        lines end (the offset a reader of new records starts from)."""
        self.close()
        self._reopen()
        path = self.path / JOURNAL_FILE
        _drop_torn_tail(path)
        return path.stat().st_size if path.exists() else 0

    def finish(self, summary: dict[str, Any]) -> None:
        self.close()
        summary = dict(summary, finished=dt.datetime.now(dt.timezone.utc).isoformat())
        _write_atomic(self.path / END_FILE, summary)
        pack(self.path)


def pack(run_dir: Path) -> None:
    """The finished run packed for collect beside its journal (collect/packed.py), by whoever finished it: the
    CLI, a plain `asv run` of the suite, the ORT grid. The journal is the record, so a packing that fails is
    said on stderr and the run stays complete (collect then reads the journal)."""
    from ..collect.packed import write_packed

    try:
        write_packed(run_dir)
    except Exception as exc:  # noqa: BLE001 - what was measured is written; its cache never fails the run
        print(f"convbench: {run_dir}: write_packed failed at the run's end ({type(exc).__name__}: "
              f"{str(exc)[:200]}); the run is complete", file=sys.stderr)


def _drop_torn_tail(path: Path) -> None:
    """A record cut short by a kill has no newline; appending after it would corrupt the next record too."""
    if not os.path.lexists(path):
        return
    fd = open_append(path)  # refuses a link, FIFO or device before anything is truncated
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - intake.MAX_LINE_BYTES)
        with open(path, "rb", opener=lambda p, _: os.open(p, os.O_RDONLY | os.O_NOFOLLOW)) as f:
            f.seek(start)
            tail = f.read()
        if tail and not tail.endswith(b"\n"):
            os.ftruncate(fd, start + tail.rfind(b"\n") + 1)
    finally:
        os.close(fd)


def read_journal(run_dir: Path) -> bytes:
    """A run's journal lines as bytes, whether it is being written (records.jsonl) or finished and kept compressed
    (records.jsonl.gz); b"" where it has none. Read as collect reads: a regular file only, bounded."""
    return _read_lines(Path(run_dir) / JOURNAL_FILE)


def _read_lines(path: Path) -> bytes:
    if path.name == JOURNAL_FILE:  # a finished run's journal is kept compressed (collect/packed.py): the same lines
        path = path.with_name(journal_file(path.parent))
    if not os.path.lexists(path):
        return b""
    try:
        data = intake.read_file(path, intake.MAX_JOURNAL_BYTES)
        return intake.gunzip(data, JOURNAL_GZ_FILE) if path.name == JOURNAL_GZ_FILE else data
    except intake.Hostile as exc:
        raise JournalError(f"{path.parent}/{exc}") from None


def iter_journal(path: Path):
    """Parsed lines of a JSON-lines file (journal, slices); stops at a torn (unterminated) last line rather than
    failing. Read as collect reads: a regular file only (no link, FIFO or device), bounded, strict JSON. A run's
    records.jsonl is read from records.jsonl.gz where the run is finished and keeps it compressed."""
    path = Path(path)
    lines = _read_lines(path).split(b"\n")
    for lineno, raw in enumerate(lines[:-1], 1):  # the last piece is empty, or a torn line
        try:
            yield intake.loads(raw, "the line")
        except intake.Hostile as exc:
            raise JournalError(f"{path}: line {lineno}: {exc}") from None


def iter_records(path: Path):
    """As iter_journal, each line checked against the record schema (records.jsonl)."""
    for lineno, rec in enumerate(iter_journal(path), 1):
        try:
            check_record(rec)
        except SchemaError as exc:
            raise JournalError(f"{path}: line {lineno}: {exc}") from None
        yield rec


def find_runs(results: Path) -> list[Path]:
    return sorted(p.parent for p in Path(results).glob(f"*/*/{RUN_FILE}"))

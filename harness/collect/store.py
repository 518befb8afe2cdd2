"""The store: one SQLite file that indexes every collected run for cross-machine, cross-image and cross-night questions.

``Store`` is the open file, one class: opening it here (read-only for compare and report, for writing by collect);
what it delegates lives in plain modules of functions it hands itself to: its schema and integrity in
store_schema.py, packing records into rows in store_packing.py, writing runs in store_writes.py, reading them back
in store_reads.py. The store file is the only thing ``collect`` writes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from ..core.records import Record
from . import store_reads, store_writes
from .store_packing import ParsedRun, UnpackableRecord, samples_array, samples_blob
from .store_schema import (
    DEFAULT_STORE,
    STORE_SCHEMA,
    StoreError,
    check_schema,
    create_schema,
    error_line,
    when_unlocked,
)

# the names callers import from here (the CLI, collect, scripts/, tests)
__all__ = ["DEFAULT_STORE", "STORE_SCHEMA", "Checkpointer", "ParsedRun", "Store", "StoreError", "UnpackableRecord",
           "samples_array", "samples_blob"]


class Checkpointer:
    """Copies the write-ahead log into the store file beside writers that leave it (``wal_autocheckpoint = 0``:
    collect's parser processes), once a second, in a thread of its own. Left to the writers, the checkpoint's
    fsync made the parser that happened to fill the log wait while it held the writers' lock: 5 of 46.6 s of a
    fleet collect on 2 cores (docs/harness.md). PASSIVE: it never waits for a writer or a reader; what it leaves is
    checkpointed when the store is closed."""

    def __init__(self, path: str | Path, every_s: float = 1.0):
        self.path, self.every_s = str(path), every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpointer", daemon=True)

    def __enter__(self) -> Checkpointer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            db = sqlite3.connect(os.fsencode(self.path), isolation_level=None, timeout=60)
        except sqlite3.Error:  # the writers' own checks say what is wrong with the store
            return
        try:
            while not self._stop.wait(self.every_s):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:  # a full disk, say: the writers report it; the log only grows meanwhile
                    pass
        finally:
            db.close()


# SQLite's page cache per connection. A collect's writes walk the same index pages again and again; a reader
# (report, compare) reads each run's rows once, so its cache only held pages it would not read again: 64 MiB in
# the report's process and in each of its judging processes.
WRITE_CACHE_KIB = 65536
READ_CACHE_KIB = 8192


class Store:
    """The store file. ``create=False`` (compare, report) opens it read-only, in one read transaction, so a
    reader sees whole runs while a collect writes, and works on a read-only mount."""

    def __init__(self, path: str | Path = DEFAULT_STORE, *, create: bool = True, verify: bool = True,
                 building: bool = False):
        """``building``: a new store no reader can see yet (fresh.py): its rollback journal kept in memory and
        nothing synced (fresh.build syncs the whole file once)."""
        self.path = str(path)
        self.verify = verify  # a collect's parser processes open a store their parent has just checked
        self.readonly = not create and self.path != ":memory:"
        if not self.path.strip():
            raise StoreError("the store path is empty; give --store a file name")
        if self.path != ":memory:" and Path(self.path).is_symlink():
            raise StoreError(f"{self.path} is a symbolic link; give the store's real path")
        if self.path != ":memory:" and Path(self.path).exists() and not Path(self.path).is_file():
            raise StoreError(f"{self.path} is not a regular file")
        if self.readonly and not Path(self.path).exists():
            raise StoreError(f"no store at {self.path} (run `convbench collect` first)")
        try:
            if self.readonly:
                self.db = self._connect_readonly()
            else:
                # a store being built exists already (fresh.build made the file): opened, never made here, so a
                # parser that starts after its collect was stopped cannot bring the removed file back
                self.db = sqlite3.connect(self._uri("mode=rw") if building else os.fsencode(self.path), uri=building,
                                          isolation_level=None, timeout=60)
                self.db.execute("PRAGMA foreign_keys = ON")
                if self.path != ":memory:":
                    # Switching a new file to WAL can answer "locked" without waiting while another collect
                    # creates the same store (SQLite skips the busy handler there): wait for it here.
                    mode = "MEMORY" if building else "WAL"
                    when_unlocked(lambda: self.db.execute(f"PRAGMA journal_mode = {mode}"))
                self.db.execute(f"PRAGMA synchronous = {'OFF' if building else 'NORMAL'}")
                self.db.execute("PRAGMA wal_autocheckpoint = 16384")  # 64 MiB between checkpoints (fsyncs)
            self.db.execute(f"PRAGMA cache_size = -{READ_CACHE_KIB if self.readonly else WRITE_CACHE_KIB}")
            if self.readonly:
                if not check_schema(self.db, self.path, self.verify):
                    raise StoreError(f"{self.path} holds no convbench store (run `convbench collect` first)")
                self.db.execute("BEGIN")  # one snapshot for the whole read: never half of a run being replaced
                self.db.execute("SELECT count(*) FROM runs").fetchone()
            else:
                create_schema(self.db, self.path, self.verify)
        except sqlite3.DatabaseError as exc:
            raise StoreError(error_line(self.path, exc)) from None
        self.combo_ids: dict[str, int] = {}
        self.name_ids: dict[str, int] = {}
        self.combo_cache: dict[int, tuple[tuple, dict[str, Any]]] = {}

    def _uri(self, query: str) -> str:
        """The store file as an SQLite URI with ``query`` (mode=ro, mode=rw, immutable=1)."""
        return "file:" + quote(os.fsencode(Path(self.path).resolve())) + "?" + query  # bytes: any path

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection; on a read-only mount (no -shm can be made) the file is read as immutable."""
        db = sqlite3.connect(self._uri("mode=ro"), uri=True, isolation_level=None, timeout=60)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            db.close()
            if os.access(Path(self.path).resolve().parent, os.W_OK):
                raise
        return sqlite3.connect(self._uri("immutable=1"), uri=True, isolation_level=None)

    def close(self) -> None:
        if self.path != ":memory:" and not self.readonly:
            try:
                # the log folded back into the file and emptied, but not waited for: a reader still holding an
                # older snapshot (a report, a compare) kept a collect at this line for the busy timeout (60 s);
                # then what can be copied now is, and the next writer's close empties the rest
                self.db.execute("PRAGMA busy_timeout = 0")
                if self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                    self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.OperationalError:
                pass
        self.db.close()

    # ---- reading (store_reads.py) ----

    def runs(self, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run rows (without the bulky JSON columns) as dicts, oldest first; ``where``: an SQL condition."""
        return store_reads.runs(self, where, params)

    def run_json(self, run_pk: int) -> dict[str, Any]:
        """A run's fingerprint, options and end."""
        return store_reads.run_json(self, run_pk)

    def run_sizes(self, run_pks: Sequence[int]) -> dict[int, tuple[str, int]]:
        """(run id, record count) of the given runs."""
        return store_reads.run_sizes(self, run_pks)

    def run_jsons(self, run_pks: Sequence[int] | None = None) -> dict[int, dict[str, Any]]:
        """``run_json`` of every run (or of ``run_pks``), in one query."""
        return store_reads.run_jsons(self, run_pks)

    def record_count(self) -> int:
        return store_reads.record_count(self)

    def records(self, run_pk: int, *, with_samples: bool = True) -> list[Record]:
        """Records of one run, as core.records' Record with their combination's id and key (samples as float64
        arrays)."""
        return store_reads.records(self, run_pk, with_samples=with_samples)

    def rankings(self, run_pk: int) -> list[dict[str, Any]]:
        return store_reads.rankings(self, run_pk)

    def combos(self) -> dict[int, dict[str, Any]]:
        return store_reads.combos(self)

    def names(self) -> dict[int, str]:
        return store_reads.names(self)

    def medians(self, run_pk: int) -> tuple[list[int], list[float | None]]:
        """(combination ids, medians in ms) of one run's records, decoding no text or sample."""
        return store_reads.medians(self, run_pk)

    def vectors(self, run_pks: Sequence[int],
                columns: Sequence[str] = store_reads.VECTOR_COLUMNS) -> dict[int, dict[str, np.ndarray]]:
        """Columnar per-run values (run_vectors) of the given runs: ``columns`` of them, their ``combo`` always."""
        return store_reads.vectors(self, run_pks, columns)

    # ---- writing (store_writes.py) ----

    def digest_of(self, run_id: str, machine: str) -> str | None:
        """The digest the store holds of a run, None where it holds none."""
        return store_writes.digest_of(self, run_id, machine)

    def ingest(self, parsed: ParsedRun, *, replace: bool = False) -> str:
        """Insert or replace one run in one transaction; returns 'added', 'updated' or 'unchanged'."""
        return store_writes.ingest_all(self, [parsed], replace=replace)[0]

    def ingest_all(self, runs: list[ParsedRun], *, replace: bool = False) -> list[str]:
        """Insert or replace runs in one transaction (an archive is stored whole or not at all)."""
        return store_writes.ingest_all(self, runs, replace=replace)

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """One write transaction for several ``ingest_part`` calls, committed whole or rolled back whole."""
        return store_writes.transaction(self)

    def ingest_part(self, runs: list[ParsedRun], *, replace: bool = False) -> list[str]:
        """Inside ``transaction()``: runs stored all or none, rolled back alone when they fail."""
        return store_writes.ingest_part(self, runs, replace=replace)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


"""The store file's schema, and whether a file is a usable store of it (else one line that says why, StoreError).

Why this shape:
- ``runs`` holds one row per (run_id, machine) with the facts a comparison groups by (machine, GPU model, image,
  night) and the run's fingerprint; indexes serve "latest run per machine and image" and "runs of a night".
- ``combos`` gives each record key (case|backend|direction|algo|math|dtype|layout|settings) a small integer id, so
  ten million records do not repeat the same seven strings.
- ``run_records`` keeps every measured value of every record of a run, and the timing samples (float64), so
  regressions can be decided with a statistical test instead of a bare percentage: one row per run, numbers as
  float64 columns, texts as one JSON array (compressed, store_packing.pack_texts), samples concatenated. Every
  reader asks for the records of a run (a comparison, a heatmap, evidence), and binding 29 parameters per record
  into a row of its own cost more CPU than parsing the record (5.5 against 1.8 us per record for the packed row,
  measured on 82 200 records): with one SQLite row per record, 10^7 records could not be collected in 60 s on
  two cores (store schema 1).
- ``run_vectors`` is a columnar copy of the few values that nightly series need (combo ids, status ok, median,
  normalised error, output hash, chosen algorithm), one row of arrays per run: reading a year of a fleet's
  series is then a few thousand blob reads instead of ten million row fetches.
Opening checks the schema version and that every table and column the readers use is there; a store of another
schema is refused, never migrated: the run directories are the source of truth and rebuild it.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from ..core.errors import UserError
from ..core.paths import DEFAULT_STORE  # noqa: F401 - re-exported by store.py

STORE_SCHEMA = 2  # 2: records packed per run (run_records) instead of one SQLite row each

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    machine TEXT NOT NULL,
    image TEXT NOT NULL,
    image_id TEXT,
    started TEXT NOT NULL,          -- ISO 8601 UTC
    night TEXT NOT NULL,            -- YYYY-MM-DD of started, the unit of nightly series
    suite_revision TEXT,
    hardware TEXT NOT NULL,         -- 'gpu' or 'cpu': said next to every comparison in the report
    gpu_model TEXT,                 -- NVML name, NULL on a CPU run
    sm TEXT,
    source TEXT NOT NULL,           -- 'journal' or 'asv'
    origin TEXT NOT NULL,           -- where it was collected from
    digest TEXT NOT NULL,           -- identifies the collected content; re-collecting equal content is a no-op
    complete INTEGER NOT NULL,      -- end.json present
    n_records INTEGER NOT NULL,
    n_ok INTEGER NOT NULL,
    n_rankings INTEGER NOT NULL,
    counts TEXT NOT NULL,           -- JSON {status: n}
    fingerprint TEXT NOT NULL,      -- JSON
    options TEXT NOT NULL,          -- JSON
    end_info TEXT,                  -- JSON of end.json
    UNIQUE (run_id, machine)
);
CREATE INDEX IF NOT EXISTS runs_machine_image ON runs (machine, image, started);
CREATE INDEX IF NOT EXISTS runs_model_image ON runs (gpu_model, image, started);
CREATE INDEX IF NOT EXISTS runs_image ON runs (image, started);
CREATE INDEX IF NOT EXISTS runs_night ON runs (night);
CREATE TABLE IF NOT EXISTS combos (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    case_id TEXT NOT NULL, backend TEXT NOT NULL, direction TEXT NOT NULL, algo TEXT NOT NULL,
    math TEXT NOT NULL, dtype TEXT NOT NULL, layout TEXT NOT NULL, settings TEXT NOT NULL,
    kind TEXT NOT NULL              -- record kind: measurement, or autotune / crosscheck / repro (own keys)
);
CREATE INDEX IF NOT EXISTS combos_backend ON combos (backend, case_id);
CREATE TABLE IF NOT EXISTS run_records (
    run INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    n INTEGER NOT NULL,             -- records of the run (the last of a combination twice in a journal)
    combo BLOB NOT NULL,            -- int32 combo ids, record order
    numbers BLOB NOT NULL,          -- float64, NUMBER_COLUMNS x n (column after column), NaN = null
    texts BLOB NOT NULL,            -- JSON {columns, shape, extras}: TEXT_COLUMNS by column, extras by key set,
                                    -- a key's values encoded (store_packing.pack_texts, encode_values; a list in
                                    -- stores written before that), their numbers binary (join_texts; JSON in
                                    -- older stores), zlib; older stores: a row per record (extra an
                                    -- object, or its JSON text), zlib or plain (store_packing.text_columns)
    sample_counts BLOB NOT NULL,    -- int32 timing samples per record
    samples BLOB NOT NULL           -- float64 (float32 in older stores) little-endian samples in ms, in order
);
CREATE TABLE IF NOT EXISTS rankings (
    run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    case_id TEXT, direction TEXT, dtype TEXT, layout TEXT, math TEXT, source TEXT, rank INTEGER,
    algo TEXT, status TEXT, time_ms REAL, memory_bytes INTEGER, determinism TEXT, math_reported TEXT
);
CREATE INDEX IF NOT EXISTS rankings_run ON rankings (run);
CREATE TABLE IF NOT EXISTS names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS run_vectors (
    run INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    combo BLOB NOT NULL,      -- int32 combo ids
    ok BLOB NOT NULL,         -- uint8 status == ok
    median BLOB NOT NULL,     -- float64 median ms (NaN when not timed); float32 in older stores
    norm_err BLOB NOT NULL,   -- float64 max_norm_err (NaN when not measured); float32 in older stores
    hash BLOB NOT NULL,       -- int64 first 64 bits of the output hash (0 when none)
    chosen BLOB NOT NULL      -- int32 names.id of chosen_algo (-1 when none)
);
"""


class StoreFile(Protocol):
    """What the store's helper modules (store_reads.py, store_writes.py) are handed of the open store (store.Store):
    its connection, its path, whether it is read-only, and its id and combination caches."""

    db: sqlite3.Connection
    path: str
    readonly: bool
    combo_ids: dict[str, int]  # combination key -> id (writes)
    name_ids: dict[str, int]  # chosen-algorithm name -> id (writes)
    combo_cache: dict[int, tuple[tuple, dict[str, Any]]]  # id -> (COMBO_COLUMNS values, settings) (reads)


class StoreError(UserError):
    """The store file cannot be used (not a convbench store, another schema, damaged, a full or read-only disk): a
    UserError, so that one escaping any command is its one line and exit code, never a traceback."""


REBUILD = ("the run directories are the source of truth: move the store aside and `convbench collect` them "
           "into a new one")


def error_line(path: str, exc: Exception) -> str:
    """An SQLite error as the one line StoreError says (damaged, disk full, read-only, not SQLite)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "malformed" in text:
        return f"{path} is damaged ({text}); {REBUILD}"
    if "full" in text:
        return f"{path}: the disk is full ({text}); nothing of the run being written was kept"
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        return f"{path}: cannot write the store ({text}; a read-only mount or directory?)"
    return f"{path} is not a usable SQLite store: {text}"


def rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is open; a failed rollback must not hide the error that caused it."""
    try:
        if db.in_transaction:
            db.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _statements(script: str) -> list[str]:
    """Split an SQL script into statements (semicolons inside comments or strings do not split)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out


IN_CHUNK = 500  # ids bound in one ``IN (...)``: under SQLite's default limit of host parameters


def select_in(db: sqlite3.Connection, sql: str, ids: Sequence[Any]) -> Iterator[tuple]:
    """The rows of ``sql`` (its ``{marks}`` the ``IN`` list) for ``ids``, bound IN_CHUNK at a time."""
    for i in range(0, len(ids), IN_CHUNK):
        chunk = list(ids[i:i + IN_CHUNK])
        yield from db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk)


def when_unlocked(statement, wait_s: float = 60.0):
    """Run ``statement`` (a callable), retrying while another connection holds the lock it needs."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as exc:
            lock_error = "locked" in str(exc) or "busy" in str(exc)
            if not lock_error or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@functools.cache
def _expected_columns() -> dict[str, set[str]]:
    """Columns of each table of _DDL, read from an empty in-memory copy of the schema."""
    db = sqlite3.connect(":memory:")
    db.executescript(_DDL)
    out = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")}
           for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    return out


def create_schema(db: sqlite3.Connection, path: str, verify: bool) -> None:
    """Check the schema; create it in one write transaction, so two collects creating one store agree."""
    if check_schema(db, path, verify):
        return
    when_unlocked(lambda: db.execute("BEGIN IMMEDIATE"))
    try:
        if not check_schema(db, path, verify):  # nobody created it while this connection waited
            for statement in _statements(_DDL):  # not executescript: it would commit first
                db.execute(statement)
            db.execute("INSERT INTO meta VALUES ('store_schema', ?)", (str(STORE_SCHEMA),))
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise


def check_schema(db: sqlite3.Connection, path: str, verify: bool) -> bool:
    """True for a whole store of this schema, False for an empty file; StoreError for anything else."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables and "meta" not in tables:
        raise StoreError(f"{path} is an SQLite file but not a convbench store")
    if "meta" not in tables:
        return False
    row = db.execute("SELECT value FROM meta WHERE key='store_schema'").fetchone()
    try:
        version = int(row[0]) if row else None
    except (TypeError, ValueError):
        raise StoreError(f"{path}: store_schema is {str(row[0])[:40]!r}, not a number: the store is "
                         f"damaged; {REBUILD}") from None
    if version != STORE_SCHEMA:
        raise StoreError(f"{path} has store schema {version}; this convbench reads {STORE_SCHEMA} "
                         "(collect the runs again into a new store)")
    _check_integrity(db, path, tables, verify)
    return True


def _check_integrity(db: sqlite3.Connection, path: str, tables: set[str], verify: bool) -> None:
    """Every table and column the code reads is there, and SQLite finds no damaged page (quick_check
    reads the whole file once: about a second per GiB; ``verify=False`` skips it)."""
    expected = _expected_columns()
    for table, columns in expected.items():
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")} if table in tables else set()
        missing = columns - have
        if missing:
            raise StoreError(f"{path}: table {table} lacks {', '.join(sorted(missing))}: the store is "
                             f"damaged; {REBUILD}")
    if path == ":memory:" or not verify:
        return
    problems = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise StoreError(f"{path} is damaged ({'; '.join(p.splitlines()[0] for p in problems)[:200]}); "
                         f"{REBUILD}")

"""The store: one SQLite file that indexes every collected run for cross-machine, cross-image and cross-night questions.

Why this shape:
- ``runs`` holds one row per (run_id, machine) with the facts a comparison groups by (machine, GPU model, image,
  night) and the run's fingerprint; indexes serve "latest run per machine and image" and "runs of a night".
- ``combos`` gives each record key (case|backend|direction|algo|math|dtype|layout|settings) a small integer id, so
  ten million records do not repeat the same seven strings.
- ``run_records`` keeps every measured value of every record of a run, and the timing samples (float64), so
  regressions can be decided with a statistical test instead of a bare percentage: one row per run, numbers as
  float64 columns, texts as one JSON array, samples concatenated. Every reader asks for the records of a run
  (a comparison, a heatmap, evidence), and binding 29 parameters per record into a row of its own cost more
  CPU than parsing the record (5.5 against 1.8 us per record for the packed row, measured on 82 200 records):
  with one SQLite row per record, 10^7 records could not be collected in 60 s on two cores (store schema 1).
- ``run_vectors`` is a columnar copy of the few values that nightly series need (combo ids, status ok, median,
  normalised error, output hash, chosen algorithm), one row of arrays per run: reading a year of a fleet's
  series is then a few thousand blob reads instead of ten million row fetches.
The store file is the only thing ``collect`` writes.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import sqlite3
import struct
import sys
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

try:  # packing a run's texts is on collect's hot path; the standard library is the fallback
    import orjson as _orjson

    _dumps_texts, _loads_texts = _orjson.dumps, _orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    def _dumps_texts(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads_texts = json.loads

STORE_SCHEMA = 2  # 2: records packed per run (run_records) instead of one SQLite row each
DEFAULT_STORE = "convbench.sqlite"
_LITTLE = sys.byteorder == "little" and array("d").itemsize == 8
_PACKERS: dict[int, Any] = {}  # struct packers of n little-endian float64, by n

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
    texts BLOB NOT NULL,            -- JSON array of [TEXT_COLUMNS...] per record
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

RECORD_COLUMNS = ("run", "combo", "status", "reason", "device", "median_ms", "iqr_ms", "min_ms", "n", "timer",
                  "mode", "samples", "workspace_bytes", "max_abs", "rel_l2", "max_norm_err", "nan", "inf",
                  "unwritten", "precision_class", "hash", "hash_algo", "repeats", "repeat_equal",
                  "fresh_handle_equal", "distinct_outputs", "chosen_algo", "explanation", "extra")
# how run_records packs RECORD_COLUMNS[2:]: numbers as float64 columns, texts as JSON, samples as float32
NUMBER_COLUMNS = ("median_ms", "iqr_ms", "min_ms", "n", "workspace_bytes", "max_abs", "rel_l2", "max_norm_err",
                  "nan", "inf", "unwritten", "repeats", "repeat_equal", "fresh_handle_equal", "distinct_outputs")
INTEGER_COLUMNS = frozenset(("n", "workspace_bytes", "nan", "inf", "unwritten", "repeats", "repeat_equal",
                             "fresh_handle_equal", "distinct_outputs"))
TEXT_COLUMNS = ("status", "reason", "device", "timer", "mode", "precision_class", "hash", "hash_algo",
                "chosen_algo", "explanation", "extra")
_POS = {c: i for i, c in enumerate(RECORD_COLUMNS[2:])}
_NUM_POS = [_POS[c] for c in NUMBER_COLUMNS]
_TXT_POS = [_POS[c] for c in TEXT_COLUMNS]
_SAMPLES_POS = _POS["samples"]
_GET_TEXTS = operator.itemgetter(*_TXT_POS)
_FIRST = operator.itemgetter(0)
_COMBO_COLUMNS = ("key", "case_id", "backend", "direction", "algo", "math", "dtype", "layout", "settings", "kind")
RANKING_COLUMNS = ("run", "case_id", "direction", "dtype", "layout", "math", "source", "rank", "algo", "status",
                   "time_ms", "memory_bytes", "determinism", "math_reported")
RUN_COLUMNS = ("run_id", "machine", "image", "image_id", "started", "night", "suite_revision", "hardware",
               "gpu_model", "sm", "source", "origin", "digest", "complete", "n_records", "n_ok", "n_rankings",
               "counts", "fingerprint", "options", "end_info")


class UnpackableRecord(ValueError):
    """A record value the store cannot keep (text where a number belongs); collect refuses the run."""


def _statements(script: str) -> list[str]:
    """Split an SQL script into statements (semicolons inside comments or strings do not split)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out


def _when_unlocked(statement, wait_s: float = 60.0):
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


class StoreError(Exception):
    """The store file cannot be used (not a convbench store, another schema, damaged, a full or read-only disk)."""


REBUILD = ("the run directories are the source of truth: move the store aside and `convbench collect` them "
           "into a new one")


def _one_line(path: str, exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "malformed" in text:
        return f"{path} is damaged ({text}); {REBUILD}"
    if "full" in text:
        return f"{path}: the disk is full ({text}); nothing of the run being written was kept"
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        return f"{path}: cannot write the store ({text}; a read-only mount or directory?)"
    return f"{path} is not a usable SQLite store: {text}"


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is open; a failed rollback must not hide the error that caused it."""
    try:
        if db.in_transaction:
            db.execute("ROLLBACK")
    except sqlite3.Error:
        pass


@functools.cache
def _expected_columns() -> dict[str, set[str]]:
    """Columns of each table of _DDL, read from an empty in-memory copy of the schema."""
    db = sqlite3.connect(":memory:")
    db.executescript(_DDL)
    out = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")}
           for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    return out


@dataclass
class ParsedRun:
    """A run as ``collect`` hands it to the store: run facts, combo definitions and row tuples ready to insert."""

    run: dict[str, Any]  # RUN_COLUMNS
    combos: list[tuple]  # (key, case, backend, direction, algo, math, dtype, layout, settings_json, kind) per record
    records: list[tuple]  # RECORD_COLUMNS without run and combo (filled in by the store)
    rankings: list[tuple]  # RANKING_COLUMNS without run
    vectors: dict[str, np.ndarray]  # ok, median, norm_err, hash (per record, in record order), chosen names


def samples_blob(samples: Sequence[float] | None) -> bytes | None:
    """Samples as float64: float32 (stores before 2026-11-30) overflows above 3.4e38 and rounds a 2x change
    in the samples of a long kernel to the same value; readers tell the width from the blob's length."""
    if not samples:
        return None
    try:  # a packer per length: half the cost of array("d") (0.11 against 0.23 us for 8 samples)
        return _PACKERS[len(samples)](*samples)
    except KeyError:
        if len(samples) <= 4096:
            _PACKERS[len(samples)] = struct.Struct(f"<{len(samples)}d").pack
            return samples_blob(samples)
    except struct.error:  # not all numbers: array's TypeError or OverflowError says what, as it did
        pass
    if _LITTLE:
        return array("d", samples).tobytes()  # ten times cheaper than numpy for a few dozen values
    return np.asarray(samples, dtype="<f8").tobytes()


def _floats(blob: bytes, n: int) -> np.ndarray:
    """``n`` floats from a blob written as float64 (now) or float32 (older stores), as float64."""
    width = len(blob) // n if n else 8
    if width not in (4, 8) or len(blob) != width * n:
        raise StoreError(f"a float column holds {len(blob)} bytes for {n} values: the store is damaged; "
                         f"{REBUILD}")
    return np.frombuffer(blob, dtype="<f8" if width == 8 else "<f4").astype(np.float64)


def pack_records(combo_ids: list[int], rows: list[tuple]) -> tuple:
    """(n, combo, numbers, texts, sample_counts, samples) of run_records for the rows of one run: one SQLite
    value per column group instead of one row per record, which is what makes a 10^7-record collect fit
    two cores (binding 29 parameters per record costs more than parsing the record)."""
    if len(set(combo_ids)) != len(combo_ids):  # a combination measured twice (a resumed run): the last one wins
        last = {cid: i for i, cid in enumerate(combo_ids)}
        keep = sorted(last.values())
        combo_ids, rows = [combo_ids[i] for i in keep], [rows[i] for i in keep]
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(RECORD_COLUMNS[2:])
    try:
        numbers = np.array([cols[i] for i in _NUM_POS], dtype=np.float64) if n else np.empty((len(_NUM_POS), 0))
    except (TypeError, ValueError):
        bad = next(f"{c}={v!r}" for c, i in zip(NUMBER_COLUMNS, _NUM_POS, strict=True) for v in cols[i]
                   if v is not None and not isinstance(v, (int, float)))
        raise UnpackableRecord(f"a record has a non-numeric value where a number belongs ({bad[:80]})") from None
    texts = _dumps_texts(list(map(_GET_TEXTS, rows)))  # tuples are JSON arrays: the same bytes, one C call a row
    blobs = cols[_SAMPLES_POS]
    counts = np.array([len(b) if b else 0 for b in blobs], dtype="<i4") // 8
    return (n, np.asarray(combo_ids, dtype="<i4").tobytes(), numbers.astype("<f8").tobytes(), texts,
            counts.tobytes(), b"".join(b for b in blobs if b))


def samples_array(blob: bytes | None) -> np.ndarray:
    if not blob:
        return np.empty(0, dtype=np.float64)
    return np.frombuffer(blob, dtype="<f8").copy()


class Store:
    """The store file. ``create=False`` (compare, report) opens it read-only, in one read transaction, so a
    reader sees whole runs while a collect writes, and works on a read-only mount."""

    def __init__(self, path: str | Path = DEFAULT_STORE, *, create: bool = True, verify: bool = True):
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
                self.db = sqlite3.connect(self.path, isolation_level=None, timeout=60)
                self.db.execute("PRAGMA foreign_keys = ON")
                if self.path != ":memory:":
                    # Switching a new file to WAL can answer "locked" without waiting while another collect
                    # creates the same store (SQLite skips the busy handler there): wait for it here.
                    _when_unlocked(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
                self.db.execute("PRAGMA synchronous = NORMAL")
                self.db.execute("PRAGMA wal_autocheckpoint = 16384")  # 64 MiB between checkpoints (fsyncs)
            self.db.execute("PRAGMA cache_size = -65536")
            if self.readonly:
                if not self._check_schema():
                    raise StoreError(f"{self.path} holds no convbench store (run `convbench collect` first)")
                self.db.execute("BEGIN")  # one snapshot for the whole read: never half of a run being replaced
                self.db.execute("SELECT count(*) FROM runs").fetchone()
            else:
                self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise StoreError(_one_line(self.path, exc)) from None
        self._combo_ids: dict[str, int] = {}
        self._name_ids: dict[str, int] = {}
        self._combo_cache: dict[int, tuple[tuple, dict[str, Any]]] = {}

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection; on a read-only mount (no -shm can be made) the file is read as immutable."""
        uri = "file:" + quote(str(Path(self.path).resolve()))
        db = sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None, timeout=60)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            db.close()
            if os.access(Path(self.path).resolve().parent, os.W_OK):
                raise
        return sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None)

    def _init_schema(self) -> None:
        """Check the schema; create it in one write transaction, so two collects creating one store agree."""
        if self._check_schema():
            return
        _when_unlocked(lambda: self.db.execute("BEGIN IMMEDIATE"))
        try:
            if not self._check_schema():  # nobody created it while this connection waited
                for statement in _statements(_DDL):  # not executescript: it would commit first
                    self.db.execute(statement)
                self.db.execute("INSERT INTO meta VALUES ('store_schema', ?)", (str(STORE_SCHEMA),))
            self.db.execute("COMMIT")
        except BaseException:
            _rollback(self.db)
            raise

    def _check_schema(self) -> bool:
        """True for a whole store of this schema, False for an empty file; StoreError for anything else."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite file but not a convbench store")
        if "meta" not in tables:
            return False
        row = self.db.execute("SELECT value FROM meta WHERE key='store_schema'").fetchone()
        try:
            version = int(row[0]) if row else None
        except (TypeError, ValueError):
            raise StoreError(f"{self.path}: store_schema is {str(row[0])[:40]!r}, not a number: the store is "
                             f"damaged; {REBUILD}") from None
        if version != STORE_SCHEMA:
            raise StoreError(f"{self.path} has store schema {version}; this convbench reads {STORE_SCHEMA} "
                             "(collect the runs again into a new store)")
        self._check_integrity(tables)
        return True

    def _check_integrity(self, tables: set[str]) -> None:
        """Every table and column the code reads is there, and SQLite finds no damaged page (quick_check
        reads the whole file once: about a second per GiB)."""
        expected = _expected_columns()
        for table, columns in expected.items():
            have = {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")} if table in tables else set()
            missing = columns - have
            if missing:
                raise StoreError(f"{self.path}: table {table} lacks {', '.join(sorted(missing))}: the store is "
                                 f"damaged; {REBUILD}")
        if self.path == ":memory:" or not self.verify:
            return
        problems = [r[0] for r in self.db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            raise StoreError(f"{self.path} is damaged ({'; '.join(p.splitlines()[0] for p in problems)[:200]}); "
                             f"{REBUILD}")

    def close(self) -> None:
        if self.path != ":memory:" and not self.readonly:
            try:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.OperationalError:
                pass
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writing -------------------------------------------------------------------------------------------

    def digest_of(self, run_id: str, machine: str) -> str | None:
        row = self.db.execute("SELECT digest FROM runs WHERE run_id=? AND machine=?", (run_id, machine)).fetchone()
        return row[0] if row else None

    def _ids(self, table: str, cache: dict[str, int], keys: Iterable[str], rows: dict[str, tuple]) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in cache]
        if not missing:
            return
        if table == "combos":
            self.db.executemany("INSERT OR IGNORE INTO combos (key, case_id, backend, direction, algo, math, dtype,"
                                " layout, settings, kind) VALUES (?,?,?,?,?,?,?,?,?,?)", [rows[k] for k in missing])
            col = "key"
        else:
            self.db.executemany("INSERT OR IGNORE INTO names (name) VALUES (?)", [(k,) for k in missing])
            col = "name"
        for i in range(0, len(missing), 500):
            chunk = missing[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for ident, key in self.db.execute(f"SELECT id, {col} FROM {table} WHERE {col} IN ({marks})", chunk):
                cache[key] = ident

    def ingest(self, parsed: ParsedRun, *, replace: bool = False) -> str:
        """Insert or replace one run in one transaction; returns 'added', 'updated' or 'unchanged'."""
        return self.ingest_all([parsed], replace=replace)[0]

    def ingest_all(self, runs: list[ParsedRun], *, replace: bool = False) -> list[str]:
        """Insert or replace runs in one transaction (an archive is stored whole or not at all)."""
        if self.readonly:
            raise StoreError(f"{self.path} is open read-only")
        try:
            _when_unlocked(lambda: self.db.execute("BEGIN IMMEDIATE"))
            try:
                outcomes = [self._ingest_one(parsed, replace) for parsed in runs]
                self.db.execute("COMMIT")
            except BaseException:
                _rollback(self.db)
                self._combo_ids.clear()  # ids handed out inside the rolled-back transaction are gone
                self._name_ids.clear()
                raise
        except sqlite3.OperationalError as exc:  # a full disk, a read-only mount, an I/O error
            raise StoreError(_one_line(self.path, exc)) from None
        return outcomes

    def _ingest_one(self, parsed: ParsedRun, replace: bool) -> str:
        run = parsed.run
        row = self.db.execute("SELECT id, digest, n_records FROM runs WHERE run_id=? AND machine=?",
                              (run["run_id"], run["machine"])).fetchone()
        if row and row[1] == run["digest"]:
            return "unchanged"
        if row and run["n_records"] < row[2] and not replace:
            raise UnpackableRecord(f"run {run['run_id']} of {run['machine']} is stored with {row[2]} records; "
                                   f"this copy has {run['n_records']}: a partial copy does not replace a run "
                                   "(collect --replace does)")
        if row:  # the journal grew (a resumed run): replace the run as a whole
            self.db.execute("DELETE FROM runs WHERE id=?", (row[0],))
        cur = self.db.execute(f"INSERT INTO runs ({','.join(RUN_COLUMNS)}) VALUES "
                              f"({','.join('?' * len(RUN_COLUMNS))})", [run[c] for c in RUN_COLUMNS])
        run_pk = cur.lastrowid
        try:  # every combination already known (all but a fleet's first runs): one C loop
            combo_ids = list(map(self._combo_ids.__getitem__, map(_FIRST, parsed.combos)))
        except KeyError:
            by_key = {c[0]: c for c in parsed.combos}
            self._ids("combos", self._combo_ids, by_key, by_key)
            combo_ids = [self._combo_ids[c[0]] for c in parsed.combos]
        self.db.execute("INSERT INTO run_records VALUES (?,?,?,?,?,?,?)", (run_pk, *pack_records(combo_ids,
                                                                                      parsed.records)))
        if parsed.rankings:
            self.db.executemany(f"INSERT INTO rankings VALUES ({','.join('?' * len(RANKING_COLUMNS))})",
                                [(run_pk, *r) for r in parsed.rankings])
        chosen_names = parsed.vectors["chosen"]
        try:
            chosen = np.array([self._name_ids[n] if n else -1 for n in chosen_names], dtype="<i4")
        except KeyError:  # a name not seen yet
            self._ids("names", self._name_ids, [n for n in chosen_names if n], {})
            chosen = np.array([self._name_ids[n] if n else -1 for n in chosen_names], dtype="<i4")
        v = parsed.vectors
        self.db.execute("INSERT INTO run_vectors VALUES (?,?,?,?,?,?,?)", (
            run_pk, np.asarray(combo_ids, dtype="<i4").tobytes(), v["ok"].astype("u1").tobytes(),
            v["median"].astype("<f8").tobytes(), v["norm_err"].astype("<f8").tobytes(),
            v["hash"].astype("<i8").tobytes(), chosen.tobytes()))
        return "updated" if row else "added"

    # ---- reading -------------------------------------------------------------------------------------------

    def runs(self, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run rows (without the bulky JSON columns) as dicts, oldest first."""
        cols = ("id", "run_id", "machine", "image", "image_id", "started", "night", "suite_revision", "hardware",
                "gpu_model", "sm", "source", "origin", "complete", "n_records", "n_ok", "n_rankings", "counts")
        sql = f"SELECT {','.join(cols)} FROM runs {('WHERE ' + where) if where else ''} ORDER BY started, id"
        out = []
        for row in self.db.execute(sql, params):
            d = dict(zip(cols, row, strict=True))
            d["counts"] = json.loads(d["counts"])
            out.append(d)
        return out

    def run_json(self, run_pk: int) -> dict[str, Any]:
        fp, opts, end = self.db.execute("SELECT fingerprint, options, end_info FROM runs WHERE id=?",
                                        (run_pk,)).fetchone()
        return {"fingerprint": json.loads(fp), "options": json.loads(opts), "end": json.loads(end) if end else None}

    def run_jsons(self) -> dict[int, dict[str, Any]]:
        """``run_json`` of every run, in one query (a fleet's report reads all 18 250 of them)."""
        def load(text: str) -> Any:
            try:
                return _loads_texts(text)
            except ValueError:  # what orjson does not read (an integer beyond 64 bits): as run_json reads it
                return json.loads(text)

        return {pk: {"fingerprint": load(fp), "options": load(opts), "end": load(end) if end else None}
                for pk, fp, opts, end in self.db.execute("SELECT id, fingerprint, options, end_info FROM runs")}

    def record_count(self) -> int:
        return self.db.execute("SELECT coalesce(sum(n), 0) FROM run_records").fetchone()[0]

    def records(self, run_pk: int, *, with_samples: bool = True) -> list[dict[str, Any]]:
        """Records of one run joined with their combination, as dicts (samples as float64 arrays)."""
        row = self.db.execute("SELECT n, combo, numbers, texts, sample_counts, samples FROM run_records WHERE run=?",
                              (run_pk,)).fetchone()
        if row is None:
            return []
        n, combo_blob, numbers, texts, counts_blob, samples_blob_ = row
        combo_ids = np.frombuffer(combo_blob, "<i4").tolist()
        combos = self._combo_rows(combo_ids)
        num = np.frombuffer(numbers, "<f8").reshape(len(NUMBER_COLUMNS), n)
        columns = []
        for j, c in enumerate(NUMBER_COLUMNS):
            col = num[j]
            vals = col.tolist()
            nan = np.isnan(col)
            if c in INTEGER_COLUMNS:
                vals = [None if m else int(v) for v, m in zip(vals, nan.tolist(), strict=True)]
            elif nan.any():
                vals = [None if m else v for v, m in zip(vals, nan.tolist(), strict=True)]
            columns.append(vals)
        text_rows = _loads_texts(texts)
        if with_samples:
            counts = np.frombuffer(counts_blob, "<i4")
            allsamples = _floats(samples_blob_, int(counts.sum()))
            samples = np.split(allsamples, np.cumsum(counts)[:-1]) if n else []
        else:
            samples = [None] * n
        # one dict(zip()) per record: the combination's values, the texts, the numbers (a C loop each)
        names = (*_COMBO_COLUMNS, "combo", *TEXT_COLUMNS, *NUMBER_COLUMNS)
        out = []
        loads = json.loads
        for cid, trow, smp, *nums in zip(combo_ids, text_rows, samples, *columns, strict=True):
            values, settings = combos[cid]
            d = dict(zip(names, (*values, cid, *trow, *nums), strict=True))
            d["settings"] = dict(settings)
            d["extra"] = loads(d["extra"]) if d["extra"] else {}
            d["samples"] = smp
            out.append(d)
        return out

    def _combo_rows(self, combo_ids: list[int]) -> dict[int, tuple[tuple, dict[str, Any]]]:
        """(values of _COMBO_COLUMNS, parsed settings) of the given combinations; a read-only store keeps them
        (its snapshot cannot change), a store being written reads them again (a rolled-back id may be reused)."""
        cache = self._combo_cache if self.readonly else {}
        wanted = sorted(set(combo_ids) - cache.keys())
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            for r in self.db.execute(f"SELECT id, {','.join(_COMBO_COLUMNS)} FROM combos WHERE id IN "
                                     f"({','.join('?' * len(chunk))})", chunk):
                settings = json.loads(r[9])
                if r[10] != "measurement":  # shown with the settings wherever a record is listed
                    settings = {"record": r[10], **settings}
                cache[r[0]] = (r[1:], settings)
        return cache

    def rankings(self, run_pk: int) -> list[dict[str, Any]]:
        cols = RANKING_COLUMNS[1:]
        return [dict(zip(cols, r, strict=True)) for r in
                self.db.execute(f"SELECT {','.join(cols)} FROM rankings WHERE run=? ORDER BY case_id, direction,"
                                " dtype, layout, math, source, rank", (run_pk,))]

    def combos(self) -> dict[int, dict[str, Any]]:
        cols = ("id", "key", "case_id", "backend", "direction", "algo", "math", "dtype", "layout", "settings",
                "kind")
        return {r[0]: dict(zip(cols, r, strict=True)) for r in self.db.execute(f"SELECT {','.join(cols)} FROM combos")}

    def names(self) -> dict[int, str]:
        return dict(self.db.execute("SELECT id, name FROM names"))

    def vectors(self, run_pks: Sequence[int]) -> dict[int, dict[str, np.ndarray]]:
        """Columnar per-run values (see ``run_vectors``) for the given runs."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for i in range(0, len(run_pks), 500):
            chunk = list(run_pks[i:i + 500])
            marks = ",".join("?" * len(chunk))
            for run, combo, ok, med, err, h, chosen in self.db.execute(
                    f"SELECT run, combo, ok, median, norm_err, hash, chosen FROM run_vectors WHERE run IN ({marks})",
                    chunk):
                n = len(combo) // 4
                out[run] = {"combo": np.frombuffer(combo, "<i4"), "ok": np.frombuffer(ok, "u1").astype(bool),
                            "median": _floats(med, n), "norm_err": _floats(err, n),
                            "hash": np.frombuffer(h, "<i8"), "chosen": np.frombuffer(chosen, "<i4")}
        return out

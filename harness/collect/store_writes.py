"""Writing runs into the store: each run whole in one transaction (an archive's runs all or none), its combinations
and chosen-algorithm names given small ids once, a run collected again replaced only when its journal grew.

Only ``collect`` writes; a write waits for another collect's lock and a failure rolls back everything of it.
"""

from __future__ import annotations

import contextlib
import operator
import sqlite3
from collections.abc import Iterable, Iterator

import numpy as np

from ..core.intake import storable
from .store_packing import RANKING_COLUMNS, RUN_COLUMNS, ParsedRun, copy_replaces, packed_records
from .store_schema import StoreError, StoreFile, error_line, rollback, select_in, when_unlocked

_FIRST = operator.itemgetter(0)


def digest_of(store: StoreFile, run_id: str, machine: str) -> str | None:
    row = store.db.execute("SELECT digest FROM runs WHERE run_id=? AND machine=?", (run_id, machine)).fetchone()
    return row[0] if row else None


def _ids(store: StoreFile, table: str, cache: dict[str, int], keys: Iterable[str], rows: dict[str, tuple]) -> None:
    missing = [k for k in dict.fromkeys(keys) if k not in cache]
    if not missing:
        return
    if table == "combos":
        store.db.executemany("INSERT OR IGNORE INTO combos (key, case_id, backend, direction, algo, math, dtype,"
                            " layout, settings, kind) VALUES (?,?,?,?,?,?,?,?,?,?)", [rows[k] for k in missing])
        col = "key"
    else:
        store.db.executemany("INSERT OR IGNORE INTO names (name) VALUES (?)", [(k,) for k in missing])
        col = "name"
    for ident, key in select_in(store.db, f"SELECT id, {col} FROM {table} WHERE {col} IN ({{marks}})", missing):
        cache[key] = ident


def ingest_all(store: StoreFile, runs: list[ParsedRun], *, replace: bool = False) -> list[str]:
    """Insert or replace runs in one transaction (an archive is stored whole or not at all)."""
    with transaction(store):
        return [_ingest_one(store, parsed, replace) for parsed in runs]


@contextlib.contextmanager
def transaction(store: StoreFile) -> Iterator[None]:
    """One write transaction: committed whole, or rolled back whole when the block raises. A full disk, a
    read-only mount or an I/O error is a StoreError."""
    if store.readonly:
        raise StoreError(f"{store.path} is open read-only")
    try:
        when_unlocked(lambda: store.db.execute("BEGIN IMMEDIATE"))
        try:
            yield
            store.db.execute("COMMIT")
        except BaseException:
            rollback(store.db)
            _forget_ids(store)
            raise
    except sqlite3.OperationalError as exc:
        raise StoreError(error_line(store.path, exc)) from None


def ingest_part(store: StoreFile, runs: list[ParsedRun], *, replace: bool = False) -> list[str]:
    """Inside ``transaction``: runs stored all or none (an archive's) under a savepoint of their own, so that
    one item refused rolls back itself alone and the others commit with the transaction."""
    try:
        store.db.execute("SAVEPOINT part")
        try:
            outcomes = [_ingest_one(store, parsed, replace) for parsed in runs]
        except BaseException:
            store.db.execute("ROLLBACK TO part")
            store.db.execute("RELEASE part")
            _forget_ids(store)
            raise
        store.db.execute("RELEASE part")
    except sqlite3.OperationalError as exc:  # the store, not the item: the transaction ends with it
        raise StoreError(error_line(store.path, exc)) from None
    return outcomes


def _forget_ids(store: StoreFile) -> None:
    """Ids handed out inside a rolled-back transaction or savepoint are gone."""
    store.combo_ids.clear()
    store.name_ids.clear()


def _ingest_one(store: StoreFile, parsed: ParsedRun, replace: bool) -> str:
    run = parsed.run
    row = store.db.execute("SELECT id, digest, n_records FROM runs WHERE run_id=? AND machine=?",
                          (run["run_id"], run["machine"])).fetchone()
    if not copy_replaces(run, row[1:] if row else None, replace):
        return "unchanged"
    if row:  # the journal grew (a resumed run): replace the run as a whole
        store.db.execute("DELETE FROM runs WHERE id=?", (row[0],))
    cur = store.db.execute(f"INSERT INTO runs ({','.join(RUN_COLUMNS)}) VALUES "
                          f"({','.join('?' * len(RUN_COLUMNS))})",
                          [storable(run[c]) if c == "origin" else run[c] for c in RUN_COLUMNS])
    run_pk = cur.lastrowid
    try:  # every combination already known (all but a fleet's first runs): one C loop
        combo_ids = list(map(store.combo_ids.__getitem__, map(_FIRST, parsed.combos)))
    except KeyError:
        by_key = {c[0]: c for c in parsed.combos}
        _ids(store, "combos", store.combo_ids, by_key, by_key)
        combo_ids = [store.combo_ids[c[0]] for c in parsed.combos]
    store.db.execute("INSERT INTO run_records VALUES (?,?,?,?,?,?,?)", (run_pk, *packed_records(combo_ids, parsed)))
    if parsed.rankings:
        store.db.executemany(f"INSERT INTO rankings VALUES ({','.join('?' * len(RANKING_COLUMNS))})",
                            [(run_pk, *r) for r in parsed.rankings])
    chosen_names = parsed.vectors["chosen"]
    try:
        chosen = np.array([store.name_ids[n] if n else -1 for n in chosen_names], dtype="<i4")
    except KeyError:  # a name not seen yet
        _ids(store, "names", store.name_ids, [n for n in chosen_names if n], {})
        chosen = np.array([store.name_ids[n] if n else -1 for n in chosen_names], dtype="<i4")
    v = parsed.vectors
    store.db.execute("INSERT INTO run_vectors VALUES (?,?,?,?,?,?,?)", (
        run_pk, np.asarray(combo_ids, dtype="<i4").tobytes(), v["ok"].astype("u1").tobytes(),
        v["median"].astype("<f8").tobytes(), v["norm_err"].astype("<f8").tobytes(),
        v["hash"].astype("<i8").tobytes(), chosen.tobytes()))
    return "updated" if row else "added"


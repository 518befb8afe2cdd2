"""Reading the store back: run rows and their JSON, a run's records unpacked into dicts joined with their
combination, cuDNN's rankings, and the columnar vectors that nightly series read instead of the records.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..core.records import RecordKind
from .store_packing import (
    COMBO_COLUMNS,
    INTEGER_COLUMNS,
    NUMBER_COLUMNS,
    RANKING_COLUMNS,
    TEXT_COLUMNS,
    floats,
    loads_texts,
    numbers_array,
    text_columns,
)
from .store_schema import REBUILD, StoreError, StoreFile, error_line

_F = TypeVar("_F", bound=Callable[..., Any])


def _damage_is_a_store_error(read: _F) -> _F:
    """A read whose stored bytes do not decode (a zlib stream broken, a blob short, JSON cut) ends in one
    StoreError naming what was read, never in the decoder's own exception: a store is a file anyone can damage."""
    @functools.wraps(read)
    def checked(self, *args, **kwargs):
        try:
            return read(self, *args, **kwargs)
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            raise StoreError(error_line(getattr(self, "path", "store"), exc)) from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError,
                zlib.error) as exc:
            first = str(exc).splitlines()[0][:120] if str(exc) else ""
            raise StoreError(f"the store is damaged ({read.__name__}: {type(exc).__name__} {first}); "
                             f"{REBUILD}") from None
    return checked  # type: ignore[return-value]


# The SQL columns combos.case_id and rankings.case_id hold the record model's ``case`` (Record.case, Ranking.case):
# the dicts read back use the model's name, the files keep theirs (a store written before reads the same).
_MODEL_NAMES = {"case_id": "case"}


@functools.cache  # a few column tuples, asked for once per row read (a store's rankings: a million rows)
def _model_names(columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_MODEL_NAMES.get(c, c) for c in columns)


def _number_values(col: np.ndarray, integer: bool) -> list:
    """A stored number column as the records hold it: None for NaN, ints in an integer column. Whole floats
    below 2**53 convert exactly in one numpy pass; larger ones (up to the schema's 2**63) one by one."""
    nan = np.isnan(col)
    if integer:
        if nan.all():
            return [None] * len(col)
        if np.abs(col[~nan]).max() < 2.0**53:
            vals = np.where(nan, 0.0, col).astype(np.int64).tolist()
        else:
            vals = [int(v) if v == v else None for v in col.tolist()]
    else:
        vals = col.tolist()
    for i in np.flatnonzero(nan).tolist():
        vals[i] = None
    return vals


def listed_settings(settings_json: str, kind: str) -> dict[str, Any]:
    """A combination's settings as a record read back carries them: a study's kind shown among them (``record``)
    wherever a record is listed."""
    settings = json.loads(settings_json)
    return settings if kind == RecordKind.MEASUREMENT else {"record": kind, **settings}


def unpack_records(n: int, combo_ids: list[int], combos: dict[int, tuple[tuple, dict[str, Any]]], numbers: bytes,
                   texts: bytes, counts_blob: bytes, samples_blob_: bytes, *, with_samples: bool = True,
                   bases: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A packed run_records row (store_packing.pack_records) as the records a reader gets, each joined with its
    combination (``combos``: id -> (COMBO_COLUMNS values, listed_settings)): the one decoding of a run's records,
    of the store's rows and of a run read straight from its directory (runread.py)."""
    num = numbers_array(numbers, n)
    columns = [_number_values(num[j], c in INTEGER_COLUMNS) for j, c in enumerate(NUMBER_COLUMNS)]
    text_cols = text_columns(texts, n)
    if with_samples:
        counts = np.frombuffer(counts_blob, "<i4")
        allsamples = floats(samples_blob_, int(counts.sum()))
        ends = np.cumsum(counts).tolist()
        samples = [allsamples[a:b] for a, b in zip([0, *ends][:n], ends, strict=True)]
    else:
        samples = [None] * n
    # a record is its combination's dict (made once per combination) copied, then its texts and numbers
    bases = {} if bases is None else bases
    names = (*TEXT_COLUMNS, *NUMBER_COLUMNS)
    out = []
    for cid, smp, *values_ in zip(combo_ids, samples, *text_cols, *columns, strict=True):
        base = bases.get(cid)
        if base is None:
            base = bases[cid] = dict(zip((*_model_names(COMBO_COLUMNS), "combo"), (*combos[cid][0], cid),
                                         strict=True))
        d = base.copy()
        d.update(zip(names, values_, strict=True))
        d["settings"] = dict(combos[cid][1])
        d["extra"] = d["extra"] or {}
        d["samples"] = smp
        out.append(d)
    return out


@_damage_is_a_store_error
def runs(store: StoreFile, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Run rows (without the bulky JSON columns) as dicts, oldest first."""
    cols = ("id", "run_id", "machine", "image", "image_id", "started", "night", "suite_revision", "hardware",
            "gpu_model", "sm", "source", "origin", "complete", "n_records", "n_ok", "n_rankings", "counts")
    sql = f"SELECT {','.join(cols)} FROM runs {('WHERE ' + where) if where else ''} ORDER BY started, id"
    out = []
    for row in store.db.execute(sql, params):
        d = dict(zip(cols, row, strict=True))
        d["counts"] = json.loads(d["counts"])
        out.append(d)
    return out


@_damage_is_a_store_error
def run_json(store: StoreFile, run_pk: int) -> dict[str, Any]:
    fp, opts, end = store.db.execute("SELECT fingerprint, options, end_info FROM runs WHERE id=?",
                                    (run_pk,)).fetchone()
    return {"fingerprint": json.loads(fp), "options": json.loads(opts), "end": json.loads(end) if end else None}


@_damage_is_a_store_error
def run_jsons(store: StoreFile) -> dict[int, dict[str, Any]]:
    """``run_json`` of every run, in one query (a fleet's report reads all 18 250 of them). Equal texts give
    one shared object (a machine's nights share their fingerprint): read-only, and what is derived from a
    fingerprint is then computed once per object (pairing.stack_fields)."""
    parsed: dict[str, Any] = {}

    def load(text: str) -> Any:
        v = parsed.get(text)
        if v is None:
            try:
                v = loads_texts(text)
            except ValueError:  # what orjson does not read (beyond 1e308): as run_json reads it
                v = json.loads(text)
            parsed[text] = v
        return v

    return {pk: {"fingerprint": load(fp), "options": load(opts), "end": load(end) if end else None}
            for pk, fp, opts, end in store.db.execute("SELECT id, fingerprint, options, end_info FROM runs")}


@_damage_is_a_store_error
def record_count(store: StoreFile) -> int:
    return store.db.execute("SELECT coalesce(sum(n), 0) FROM run_records").fetchone()[0]


@_damage_is_a_store_error
def records(store: StoreFile, run_pk: int, *, with_samples: bool = True) -> list[dict[str, Any]]:
    """Records of one run joined with their combination, as dicts (samples as float64 arrays)."""
    row = store.db.execute("SELECT n, combo, numbers, texts, sample_counts, samples FROM run_records WHERE run=?",
                          (run_pk,)).fetchone()
    if row is None:
        return []
    n, combo_blob, numbers, texts, counts_blob, samples_blob_ = row
    combo_ids = np.frombuffer(combo_blob, "<i4").tolist()
    return unpack_records(n, combo_ids, combo_rows(store, combo_ids), numbers, texts, counts_blob, samples_blob_,
                          with_samples=with_samples, bases=store.combo_bases if store.readonly else {})


def combo_rows(store: StoreFile, combo_ids: list[int]) -> dict[int, tuple[tuple, dict[str, Any]]]:
    """(values of COMBO_COLUMNS, parsed settings) of the given combinations; a read-only store keeps them
    (its snapshot cannot change), a store being written reads them again (a rolled-back id may be reused)."""
    cache = store.combo_cache if store.readonly else {}
    wanted = sorted(set(combo_ids) - cache.keys())
    for i in range(0, len(wanted), 500):
        chunk = wanted[i:i + 500]
        for r in store.db.execute(f"SELECT id, {','.join(COMBO_COLUMNS)} FROM combos WHERE id IN "
                                 f"({','.join('?' * len(chunk))})", chunk):
            cache[r[0]] = (r[1:], listed_settings(r[9], r[10]))
    return cache


@_damage_is_a_store_error
def rankings(store: StoreFile, run_pk: int) -> list[dict[str, Any]]:
    cols = RANKING_COLUMNS[1:]
    return [dict(zip(_model_names(cols), r, strict=True)) for r in
            store.db.execute(f"SELECT {','.join(cols)} FROM rankings WHERE run=? ORDER BY case_id, direction,"
                            " dtype, layout, math, source, rank", (run_pk,))]


@_damage_is_a_store_error
def combos(store: StoreFile) -> dict[int, dict[str, Any]]:
    cols = ("id", *COMBO_COLUMNS)
    return {r[0]: dict(zip(_model_names(cols), r, strict=True))
            for r in store.db.execute(f"SELECT {','.join(cols)} FROM combos")}


@_damage_is_a_store_error
def names(store: StoreFile) -> dict[int, str]:
    return dict(store.db.execute("SELECT id, name FROM names"))


@_damage_is_a_store_error
def medians(store: StoreFile, run_pk: int) -> tuple[list[int], list[float | None]]:
    """(combination ids, medians in ms as the records hold them, None where not timed) of one run's records:
    what a compare's history reads, without decoding a text or a sample."""
    row = store.db.execute("SELECT n, combo, numbers FROM run_records WHERE run=?", (run_pk,)).fetchone()
    if row is None:
        return [], []
    n, combo_blob, numbers = row
    med = numbers_array(numbers, n)[NUMBER_COLUMNS.index("median_ms")]
    return np.frombuffer(combo_blob, "<i4").tolist(), [None if m != m else m for m in med.tolist()]


@_damage_is_a_store_error
def vectors(store: StoreFile, run_pks: Sequence[int]) -> dict[int, dict[str, np.ndarray]]:
    """Columnar per-run values (see ``run_vectors``) for the given runs."""
    out: dict[int, dict[str, np.ndarray]] = {}
    for i in range(0, len(run_pks), 500):
        chunk = list(run_pks[i:i + 500])
        marks = ",".join("?" * len(chunk))
        for run, combo, ok, med, err, h, chosen in store.db.execute(
                f"SELECT run, combo, ok, median, norm_err, hash, chosen FROM run_vectors WHERE run IN ({marks})",
                chunk):
            n = len(combo) // 4
            out[run] = {"combo": np.frombuffer(combo, "<i4"), "ok": np.frombuffer(ok, "u1").astype(bool),
                        "median": floats(med, n), "norm_err": floats(err, n),
                        "hash": np.frombuffer(h, "<i8"), "chosen": np.frombuffer(chosen, "<i4")}
    return out

"""Reading the store back: run rows and their JSON, a run's records unpacked into core.records' Record (the class
the backends yield), cuDNN's rankings, and the columnar vectors that nightly series read instead of the records.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..core.records import SCHEMA_VERSION, Accuracy, Determinism, Record, Timing
from .store_packing import (
    COMBO_COLUMNS,
    INTEGER_COLUMNS,
    NUMBER_COLUMNS,
    RANKING_COLUMNS,
    floats,
    loads_texts,
    numbers_array,
    text_columns,
)
from .store_schema import REBUILD, StoreError, StoreFile, error_line, select_in

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
# the rows read back use the model's name, the files keep theirs (a store written before reads the same).
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


# which NUMBER_COLUMNS hold each part of a record: a part is there where any of its columns (these, or its texts) is
_PART_NUMBERS = {part: [NUMBER_COLUMNS.index(c) for c in cols] for part, cols in (
    ("time", ("median_ms", "iqr_ms", "min_ms", "n")),
    ("accuracy", ("max_abs", "rel_l2", "max_norm_err", "nan", "inf", "unwritten")),
    ("determinism", ("repeats", "repeat_equal", "fresh_handle_equal", "distinct_outputs")))}


def unpack_records(n: int, combo_ids: list[int], combos: dict[int, tuple[tuple, dict[str, Any]]], numbers: bytes,
                   texts: bytes, counts_blob: bytes, samples_blob_: bytes, *,
                   with_samples: bool = True) -> list[Record]:
    """A packed run_records row (store_packing.pack_records) as the Records a reader gets, each with its
    combination (``combos``: id -> (COMBO_COLUMNS values, settings)) and its id and key: the one decoding of a
    run's records, of the store's rows and of a run read straight from its directory (runread.py). A record's
    settings are its own copy; samples are float64 arrays (views of one array per run), None without samples; the
    timer's clock, host time and flags go back from the stored extra (journals._stored_extra) into Timing, and the
    two verdicts the store keeps as 0 and 1 are booleans again. The loop builds the parts inline: a function call
    a part was a third of the time of a record (profiled on the fixtures' 384,483 records)."""
    num = numbers_array(numbers, n)
    has = {part: (~np.isnan(num[rows])).any(axis=0).tolist() for part, rows in _PART_NUMBERS.items()}
    columns = [_number_values(num[j], c in INTEGER_COLUMNS) for j, c in enumerate(NUMBER_COLUMNS)]
    if with_samples:
        counts = np.frombuffer(counts_blob, "<i4")
        allsamples = floats(samples_blob_, int(counts.sum()))
        ends = np.cumsum(counts).tolist()
        samples = [allsamples[a:b] for a, b in zip([0, *ends][:n], ends, strict=True)]
    else:
        samples = [None] * n
    out = []
    for (cid, status, reason, device, timer, mode, precision, hash_, hash_algo, chosen, explanation, extra,
         median, iqr, min_ms, count, workspace, max_abs, rel_l2, norm_err, nan, inf, unwritten, repeats,
         repeat_equal, fresh_equal, distinct, smp, has_time, has_acc, has_det) in zip(
            combo_ids, *text_columns(texts, n), *columns, samples, has["time"], has["accuracy"], has["determinism"],
            strict=True):
        if extra is None:
            extra = {}
        if has_time or timer is not None or mode is not None:
            if extra:
                t = Timing(median, iqr, count, mode, timer, min_ms, smp, extra.pop("clock", None),
                           extra.pop("host_ms", None), extra.pop("flags", None) or [])
            else:
                t = Timing(median, iqr, count, mode, timer, min_ms, smp, None, None, [])
        else:
            t = None
        a = Accuracy(max_abs, rel_l2, norm_err, nan, inf, unwritten, precision) \
            if has_acc or precision is not None else None
        d = Determinism(hash_, hash_algo, repeats, None if repeat_equal is None else repeat_equal == 1,
                        None if fresh_equal is None else fresh_equal == 1, distinct) \
            if has_det or hash_ is not None or hash_algo is not None else None
        c, settings = combos[cid]
        out.append(Record(c[1], c[2], c[3], c[4], c[5], c[6], c[7], status, reason, device, dict(settings),
                          workspace, t, a, d, chosen, explanation, extra, c[9], SCHEMA_VERSION, cid, c[0]))
    return out


# a run row's columns as Store.runs gives them besides its id and counts (runread.RunsRead gives the same)
RUN_ROW_COLUMNS = ("run_id", "machine", "image", "image_id", "started", "night", "suite_revision", "hardware",
                   "gpu_model", "sm", "source", "origin", "complete", "n_records", "n_ok", "n_rankings")


@_damage_is_a_store_error
def runs(store: StoreFile, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Run rows (without the bulky JSON columns) as dicts, oldest first."""
    cols = ("id", *RUN_ROW_COLUMNS, "counts")
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
def run_sizes(store: StoreFile, run_pks: Sequence[int]) -> dict[int, tuple[str, int]]:
    """(run id, record count) of the given runs, by run key: whether a reader's runs are still the stored ones
    (a run a collect replaced has more records)."""
    return {pk: (run_id, n) for pk, run_id, n in
            select_in(store.db, "SELECT id, run_id, n_records FROM runs WHERE id IN ({marks})", run_pks)}


@_damage_is_a_store_error
def run_jsons(store: StoreFile, run_pks: Sequence[int] | None = None) -> dict[int, dict[str, Any]]:
    """``run_json`` of every run (or of ``run_pks``), in one query (a fleet's report reads all 18 250 of them).
    Equal texts give one shared object (a machine's nights share their fingerprint): read-only, and what is
    derived from a fingerprint is then computed once per object (pairing.stack_fields)."""
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

    sql = "SELECT id, fingerprint, options, end_info FROM runs"
    rows = store.db.execute(sql) if run_pks is None else select_in(store.db, sql + " WHERE id IN ({marks})", run_pks)
    return {pk: {"fingerprint": load(fp), "options": load(opts), "end": load(end) if end else None}
            for pk, fp, opts, end in rows}


@_damage_is_a_store_error
def record_count(store: StoreFile) -> int:
    return store.db.execute("SELECT coalesce(sum(n), 0) FROM run_records").fetchone()[0]


@_damage_is_a_store_error
def records(store: StoreFile, run_pk: int, *, with_samples: bool = True) -> list[Record]:
    """Records of one run (unpack_records: samples as float64 arrays)."""
    row = store.db.execute("SELECT n, combo, numbers, texts, sample_counts, samples FROM run_records WHERE run=?",
                          (run_pk,)).fetchone()
    if row is None:
        return []
    n, combo_blob, numbers, texts, counts_blob, samples_blob_ = row
    combo_ids = np.frombuffer(combo_blob, "<i4").tolist()
    return unpack_records(n, combo_ids, combo_rows(store, combo_ids), numbers, texts, counts_blob, samples_blob_,
                          with_samples=with_samples)


def combo_rows(store: StoreFile, combo_ids: list[int]) -> dict[int, tuple[tuple, dict[str, Any]]]:
    """(values of COMBO_COLUMNS, parsed settings) of the given combinations; a read-only store keeps them
    (its snapshot cannot change), a store being written reads them again (a rolled-back id may be reused)."""
    cache = store.combo_cache if store.readonly else {}
    wanted = sorted(set(combo_ids) - cache.keys())
    for r in select_in(store.db, f"SELECT id, {','.join(COMBO_COLUMNS)} FROM combos WHERE id IN ({{marks}})",
                       wanted):
        cache[r[0]] = (r[1:], json.loads(r[9]))
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


VECTOR_COLUMNS = ("combo", "ok", "median", "norm_err", "hash", "chosen")
_VECTOR_DECODE = {"ok": lambda b, n: np.frombuffer(b, "u1").astype(bool), "median": floats, "norm_err": floats,
                  "hash": lambda b, n: np.frombuffer(b, "<i8"), "chosen": lambda b, n: np.frombuffer(b, "<i4")}


@_damage_is_a_store_error
def vectors(store: StoreFile, run_pks: Sequence[int],
            columns: Sequence[str] = VECTOR_COLUMNS) -> dict[int, dict[str, np.ndarray]]:
    """Columnar per-run values (see ``run_vectors``) for the given runs: ``columns`` of them, ``combo`` always.
    A fleet report's 10^7 values cost 33 bytes each with every column, in its process and in each judging one."""
    wanted = [c for c in VECTOR_COLUMNS[1:] if c in columns]
    out: dict[int, dict[str, np.ndarray]] = {}
    for run, combo, *blobs in select_in(
            store.db, f"SELECT run, combo{''.join(', ' + c for c in wanted)} FROM run_vectors WHERE run IN ({{marks}})",
            run_pks):
        n = len(combo) // 4
        out[run] = {"combo": np.frombuffer(combo, "<i4"),
                    **{c: _VECTOR_DECODE[c](b, n) for c, b in zip(wanted, blobs, strict=True)}}
    return out

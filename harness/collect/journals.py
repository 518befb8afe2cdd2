"""The journal parser: one run directory's bytes (run.json, records.jsonl, end.json) as rows for the store.

The hot path of a fleet collect (ten million lines): one JSON parse and one tuple per line, the values of plain
lines checked per run in columns (columns.py) and anything else line by line with core/schema.py's
check_record. A run identifies itself by (run_id, machine); its digest (hash of run.json, length of the
append-only journal, hash of end.json) tells whether re-collecting it changes anything. A run that cannot be read
(other schema version, malformed line) is refused as a whole with its first bad line.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core import intake
from ..core.records import (
    OK,
    RECORD_KINDS,
    SCHEMA_VERSION,
    Accuracy,
    Determinism,
    Ranking,
    Record,
    RecordKind,
    Timing,
)
from ..core.schema import SchemaError, check_record, check_run_header
from . import columns as column_checks
from .discovery import RawRun, Refused, sha1_16
from .rows import ACC_FIELDS, DET_FIELDS, TIME_FIELDS, TOP_FIELDS, combo_row, hash64s, night
from .store_packing import ParsedRun, RecordColumns, samples_blob

try:  # three times faster on the fleet's ten million lines; the standard library is the fallback
    import orjson as _fastjson

    _loads = _fastjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    def _loads(line: bytes) -> Any:  # as strict as orjson: no NaN, Infinity, overflow or lone surrogates
        d = json.loads(line, parse_constant=intake.no_constant, parse_float=intake.finite_float)
        if b"\\u" in line:
            intake.check_text(d, "record")
        return d


_COMBO_MEMO: dict[tuple, tuple] = {}
_KINDS = frozenset(RECORD_KINDS)
_RANKING = RecordKind.RANKING.value  # a plain str: compared on every line


def _combo(d: dict[str, Any]) -> tuple:
    """rows.combo_row of a record, memoised: a fleet repeats the same few thousand combinations millions of
    times."""
    settings = d["settings"] or {}
    kind = d["kind"]
    try:
        sig = (d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], d["layout"],
               column_checks.settings_signature(settings), kind)
        hit = _COMBO_MEMO.get(sig)
    except TypeError:  # a setting with an unhashable value (list, dict)
        sig, hit = None, None
    if hit is None:
        vals = (d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], d["layout"])
        if kind not in _KINDS or not all(type(v) is str and v for v in vals) or type(settings) is not dict:
            raise ValueError(f"kind {str(kind)[:40]!r}, identity fields or settings of the wrong type "
                             f"(kinds read: ranking, {', '.join(sorted(_KINDS))})")
        hit = combo_row(vals, settings, kind)
        if sig is not None and len(_COMBO_MEMO) < 200_000:
            _COMBO_MEMO[sig] = hit
    return hit


def run_facts(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's columns taken from its fingerprint; a fingerprint is another host's JSON, so a field of another
    type (an object where the GPU's name belongs) is stored as its JSON text, never refused for it."""
    fp = meta.get("fingerprint") or {}
    gpu = fp.get("gpu") or None
    gpu = gpu if isinstance(gpu, dict) else ({"name": gpu} if gpu else None)
    return {"hardware": "gpu" if gpu else "cpu", "gpu_model": _text_or_none((gpu or {}).get("name")),
            "sm": _text_or_none((gpu or {}).get("sm")), "image_id": _text_or_none(fp.get("image_id"))}


def _text_or_none(value: Any) -> Any:
    """A scalar as it is; an object or a list as its JSON text (what a store column can hold)."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    return json.dumps(value, sort_keys=True)[:256]


def journal_digest(raw: RawRun) -> str:
    """What tells a run the store holds unchanged without reading its journal: its run.json, end.json and the size
    of its journal's file (plain or gzip, marked apart), as it was found."""
    if raw.digest is not None:
        return raw.digest
    size = len(raw.records) if raw.journal_size is None else raw.journal_size
    return f"{'jz' if raw.gz else 'j'}:{sha1_16(raw.run_json)}:{size}:{sha1_16(raw.end_json)}"


def plain(raw: RawRun, limit: int | None = None) -> RawRun:
    """``raw`` with its journal's lines: a finished run's records.jsonl.gz inflated (at most ``limit`` bytes), where
    its packed copy was not used; Refused in one line where the stream is damaged, cut short or a bomb."""
    if not raw.gz:
        return raw
    try:
        lines = intake.gunzip(raw.records, "records.jsonl.gz", limit)
    except intake.Hostile as exc:
        raise Refused(f"{raw.origin}: {exc}") from None
    return dataclasses.replace(raw, records=lines, gz=False, journal_size=None, digest=journal_digest(raw))


def journal_identity(raw: RawRun) -> tuple[dict[str, Any], str, str]:
    """(run.json, run_id, machine) after checking the run's schema version."""
    try:
        meta = intake.loads(raw.run_json, "run.json")
    except intake.Hostile as exc:
        raise Refused(f"{raw.origin}: {exc}") from None
    try:
        check_run_header(meta)
    except SchemaError as exc:
        raise Refused(f"{raw.origin}: run.json: {exc}") from None
    return meta, meta["run_id"], meta["machine"]


_REC_FIELDS = ("schema", "kind", "case", "backend", "direction", "algo", "math", "dtype", "layout", "settings",
               "time", "accuracy", "determinism", *TOP_FIELDS)
_GET_REC = operator.itemgetter(*_REC_FIELDS)
_GET_TIME, _GET_ACC, _GET_DET, _GET_TOP = (operator.itemgetter(*f) for f in (TIME_FIELDS, ACC_FIELDS, DET_FIELDS,
                                                                           TOP_FIELDS))


class _NotPlain(Exception):
    """A run whose columns did not all pass check_column: it is read again, every line through check_record."""


_PLAIN_TOP = ("status", "reason", "device", "workspace_bytes", "chosen_algo", "explanation")
RANK_FIELDS = tuple(f.name for f in dataclasses.fields(Ranking) if f.name not in ("kind", "schema"))
_GET_RANK = operator.itemgetter(*RANK_FIELDS)
_TIME_EXTRAS = ("clock", "flags", "host_ms")
_BLANK = re.compile(rb"[ \t\r\n]*\Z")  # what bytes.strip(b" \t\r\n") empties, found without copying the journal


def _plain_ranking(d: dict[str, Any]) -> tuple | None:
    """A ranking line's row where the line is every field of a ranking and nothing else (its values are checked
    per run, in columns); None for anything else, which check_record reads."""
    schema = d.get("schema")
    if len(d) != len(RANK_FIELDS) + 2 or schema.__class__ is not int or schema != SCHEMA_VERSION:  # + kind, schema
        return None
    try:
        return _GET_RANK(d)
    except KeyError:
        return None


def _stored_extra(t: dict[str, Any] | None, extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the store's extra column of a record holds (an object in the run's texts): its extra, joined by the
    clock the samples were taken at, the timer's flags and the host's dispatch time where set (the store has no
    columns of their own for them); None for nothing."""
    if t and (t.get("clock") or t.get("flags") or t.get("host_ms")):
        extra = dict(extra or ())
        for k in _TIME_EXTRAS:
            if t.get(k):
                extra[k] = t[k]
    return extra or None


def parse_journal(raw: RawRun, meta: dict[str, Any] | None = None) -> ParsedRun:
    """Rows for the store from one journal. The loop is the hot path of a fleet collect (ten million lines):
    one JSON parse and one tuple per line, everything else vectorised after it. Lines are checked against the
    schema per run (schema.check_column); a run that does not pass so, or that is refused, is read again with
    schema.check_record on every line, which gives the refusal its first bad line and its words."""
    if meta is None:
        meta = journal_identity(raw)[0]
    raw = plain(raw)
    try:
        return _parse_journal(raw, meta, False)
    except (_NotPlain, Refused):
        return _parse_journal(raw, meta, True)


LINES_CHUNK = 64 << 20


def _lines(data: bytes, end: int, chunk: int = LINES_CHUNK):
    """``data[:end].splitlines()``, split 64 MiB at a time: as fast, without a second copy of a 1 GiB journal
    (which took collect past 2 GiB)."""
    start = 0
    while start < end:
        cut = data.find(b"\n", min(start + chunk, end) - 1, end) + 1 or end
        yield from data[start:cut].splitlines()
        start = cut


def _parse_journal(raw: RawRun, meta: dict[str, Any], full: bool) -> ParsedRun:
    combos, rows, rankings, extras = [], [], [], []
    data, end = raw.records, len(raw.records)
    if data and not data.endswith(b"\n") and raw.end_json is None:
        end = data.rfind(b"\n") + 1  # a torn last line: the run was killed mid-write
    if _BLANK.match(data, 0, end):
        raise Refused(f"{raw.origin}: records.jsonl is missing or holds no record (whitespace or nothing)")
    if data.count(b"\n", 0, end) > intake.MAX_RUN_RECORDS:
        raise Refused(f"{raw.origin}: records.jsonl holds over {intake.MAX_RUN_RECORDS:,} lines (a run holds at most "
                      f"{intake.MAX_RUN_RECORDS:,} records)")
    empty: dict[str, Any] = {}
    loads, combo, blob, memo, get_rec = _loads, _combo, samples_blob, _COMBO_MEMO, _GET_REC
    get_time, get_acc, get_det, get_top = _GET_TIME, _GET_ACC, _GET_DET, _GET_TOP
    none7, none6 = (None,) * 7, (None,) * 6
    verified, remember = column_checks.VERIFIED_IDS, column_checks.remember
    take_optional, plain_ranking, stored_extra = column_checks.take_optional, _plain_ranking, _stored_extra
    max_line = intake.MAX_LINE_BYTES
    tops: list[tuple] = []
    times: list[tuple] = []
    accs: list[tuple] = []
    dets: list[tuple] = []
    reductions: list[Any] = []
    optional: defaultdict[str, list] = defaultdict(list)
    for lineno, line in enumerate(_lines(data, end), 1):
        try:
            if len(line) > max_line:
                raise ValueError(f"line is over {max_line >> 20} MiB")
            try:
                d = loads(line)
            except ValueError:  # an empty line is said as such (no JSON parser reads one)
                if not line.strip():
                    raise ValueError("the line is empty (a journal has one record per line)") from None
                raise
            if not full and d.__class__ is dict and d.get("kind") == _RANKING:
                r = plain_ranking(d)
                if r is not None:
                    rankings.append(r)
                    continue
            checked = full
            if full:
                check_record(d)
                remember(d)  # as a plain read remembers what it walked: this run's next night reads it plain
            try:  # fast path: every field there, combination seen before; anything else takes the full path
                (schema, kind, case, backend, direction, algo, math_, dtype, layout, settings, t, a, h, status,
                 reason, device, workspace, chosen_algo, explanation, extra) = get_rec(d)
                fast = schema == SCHEMA_VERSION and schema is not True and kind != _RANKING
                if fast:
                    sig = (case, backend, direction, algo, math_, dtype, layout,
                           column_checks.settings_signature(settings), kind)
                    c = memo.get(sig)
                    if c is None:
                        c = combo(d)
                    tv = get_time(t) if t else none7
                    av = get_acc(a) if a else none7
                    hv = get_det(h) if h else none6
                    # a plain line: an identity check_record passed before, every field there and nothing else
                    # but the optional parts real lines carry (columns.take_optional); its values are checked per
                    # run, in columns, after the loop
                    if not checked and (sig in verified and len(d) == 20 and settings.__class__ is dict
                                        and schema.__class__ is int and extra.__class__ is dict
                                        and (t is None or t.__class__ is dict)
                                        and (a is None or (a.__class__ is dict and (len(a) == 7 or (
                                            len(a) == 8 and "reduction" in a))))
                                        and (h is None or (h.__class__ is dict and len(h) == 6))
                                        and ((not extra and (t is None or len(t) == 7))
                                             or take_optional(t, extra, optional))):
                        checked = True
                        tops.append((status, reason, device, workspace, chosen_algo, explanation))
                        if t is not None:
                            times.append(tv)
                        if a is not None:
                            accs.append(av)
                            if len(a) == 8:
                                reductions.append(a["reduction"])
                        if h is not None:
                            dets.append(hv)
            except (KeyError, TypeError, AttributeError):
                fast = False
            if not checked:
                check_record(d)
                remember(d)
            if not fast:
                if d["schema"] != SCHEMA_VERSION or d["schema"] is True:
                    raise Refused(f"{raw.origin}: records.jsonl line {lineno} has schema {d.get('schema')!r}; "
                                  f"this convbench reads schema {SCHEMA_VERSION}")
                if d["kind"] == _RANKING:
                    rankings.append(_GET_RANK(d))
                    continue
                c = combo(d)
                t, a, h = d["time"], d["accuracy"], d["determinism"]
                try:  # one C call per part when every field is there (records.dumps writes them all)
                    tv = get_time(t) if t else none7
                    av = get_acc(a) if a else none7
                    hv = get_det(h) if h else none6
                    status, reason, device, workspace, chosen_algo, explanation, extra = get_top(d)
                except KeyError:  # a record written by hand or by another tool: missing fields are None
                    t, a, h = t or empty, a or empty, h or empty
                    tv = tuple(t.get(k) for k in TIME_FIELDS)
                    av = tuple(a.get(k) for k in ACC_FIELDS)
                    hv = tuple(h.get(k) for k in DET_FIELDS)
                    status, reason, device, workspace, chosen_algo, explanation, extra = (d.get(k)
                                                                                         for k in TOP_FIELDS)
            extras.append(stored_extra(t, extra))
            combos.append(c)
            rows.append((status, reason, device, *tv[:6], blob(tv[6]), workspace, *av, *hv, chosen_algo,
                         explanation))
        except Refused:
            raise
        except SchemaError as exc:
            raise Refused(f"{raw.origin}: records.jsonl line {lineno}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
            raise Refused(f"{raw.origin}: records.jsonl line {lineno} is not a valid record "
                          f"({repr(exc)[:200]})") from None
    if not full and not (_columns_pass(tops, times, accs, reductions, dets)
                         and column_checks.optional_pass(optional)
                         and column_checks.check_columns(rankings, Ranking, RANK_FIELDS)):
        raise _NotPlain
    rows = list(map(operator.add, rows, zip(extras)))  # the extra column
    if len({c[0] for c in combos}) != len(combos):  # a line written twice (a resumed run): the last one counts
        last = {c[0]: i for i, c in enumerate(combos)}
        keep = sorted(last.values())
        combos, rows = [combos[i] for i in keep], [rows[i] for i in keep]
    cols = RecordColumns._make(zip(*rows, strict=True) if rows else [()] * len(RecordColumns._fields))
    try:
        med = np.array(cols.median_ms, dtype=np.float64)  # None becomes NaN
        err = np.array(cols.max_norm_err, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise Refused(f"{raw.origin}: records.jsonl has text where a number belongs ({exc})") from None
    run, vectors = run_row(raw, meta, cols.status, med, err, cols.hash, cols.chosen_algo, len(rankings))
    return ParsedRun(run, combos, rows, rankings, vectors)


def run_row(raw: RawRun, meta: dict[str, Any], statuses: Sequence[str], median: np.ndarray, norm_err: np.ndarray,
            hashes: Sequence[str | None], chosen: Sequence[str | None], n_rankings: int
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run's store row (RUN_COLUMNS) and its per-record vectors, from its records' columns: the same for a
    journal and for its packed copy (packed.py)."""
    counts = dict(Counter(statuses))
    try:
        end = intake.loads(raw.end_json, "end.json") if raw.end_json else None
    except intake.Hostile as exc:
        raise Refused(f"{raw.origin}: {exc}") from None
    run = {"run_id": meta["run_id"], "machine": meta["machine"], "image": meta.get("image") or "native",
           "started": meta["started"], "night": night(meta["started"], meta.get("night")),
           "suite_revision": meta.get("suite_revision"), "source": "journal", "origin": raw.origin,
           "digest": journal_digest(raw), "complete": int(end is not None), "n_records": len(statuses),
           "n_ok": counts.get(OK, 0), "n_rankings": n_rankings, "counts": json.dumps(counts, sort_keys=True),
           "fingerprint": json.dumps(meta.get("fingerprint") or {}, sort_keys=True),
           "options": json.dumps(meta.get("options") or {}, sort_keys=True),
           "end_info": json.dumps(end, sort_keys=True) if end is not None else None, **run_facts(meta)}
    vectors = {"ok": np.fromiter(map(OK.__eq__, statuses), dtype=bool, count=len(statuses)), "median": median,
               "norm_err": norm_err, "hash": hash64s(hashes), "chosen": list(chosen)}
    return run, vectors


def _columns_pass(tops: list[tuple], times: list[tuple], accs: list[tuple], reductions: list[Any],
                  dets: list[tuple]) -> bool:
    """Every value the plain lines of a run hold passes the check check_record makes of it (columns.check_columns)."""
    check = column_checks.check_columns
    return (check(tops, Record, _PLAIN_TOP) and check(times, Timing, TIME_FIELDS) and check(accs, Accuracy, ACC_FIELDS)
            and check(dets, Determinism, DET_FIELDS) and column_checks.check_column(reductions, Accuracy, "reduction"))


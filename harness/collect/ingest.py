"""``collect``: find runs in directories, results trees, asv results trees and tarballs, and put them in the store.

Sources are read, never written: a tarball is streamed in memory, not unpacked. A run is identified by
(run_id, machine); its digest (hash of run.json, length of the append-only journal, hash of end.json) decides
whether re-collecting it changes anything, so collecting the same source twice is a no-op while a resumed run
whose journal grew replaces its earlier copy. A run that cannot be read (other schema version, malformed line)
is refused as a whole with a one-line reason; the other sources are still collected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import hashlib
import itertools
import json
import multiprocessing as mp
import operator
import os
import re
import stat
import tarfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import intake
from ..core.records import DTYPES, LAYOUTS, MATHS, OK, SCHEMA_VERSION, Accuracy, Determinism, Record, Timing
from ..core.schema import SchemaError, check_record, check_run_header
from ..run.journal import END_FILE, JOURNAL_FILE, RUN_FILE
from . import columns as column_checks
from .store import DEFAULT_STORE, ParsedRun, Store, StoreError, UnpackableRecord, samples_blob

try:  # three times faster on the fleet's ten million lines; the standard library is the fallback
    import orjson as _fastjson

    _loads = _fastjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    def _loads(line: bytes) -> Any:  # as strict as orjson: no NaN, Infinity, overflow or lone surrogates
        d = json.loads(line, parse_constant=intake._no_constant, parse_float=intake._finite_float)
        if b"\\u" in line:
            intake.check_text(d, "record")
        return d

ASV_RESULTS_VERSION = 2
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


class Refused(Exception):
    """A run that is not collected; the message says which and why, in one line."""


@dataclass
class RawRun:
    """One journal run as bytes (from a directory or a tarball)."""

    origin: str
    run_json: bytes
    records: bytes
    end_json: bytes | None


@dataclass
class AsvFile:
    """One asv results file with its machine.json and the suite's benchmarks.json (if found)."""

    origin: str
    data: bytes
    machine_json: bytes | None
    benchmarks_json: bytes | None


@dataclass
class Archive:
    """Every run of one tarball: stored whole, in one transaction, or refused whole."""

    origin: str
    items: list[Any]  # RawRun and AsvFile


@dataclass
class Summary:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    records: int = 0
    refused: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.added} runs added, {self.updated} updated, {self.unchanged} unchanged, "
                f"{self.records} records read, {len(self.refused)} refused")


# ---- discovery -------------------------------------------------------------------------------------------------

def _read(path: Path, limit: int = intake.MAX_META_BYTES) -> bytes | None:
    return intake.read_optional(path, limit)  # regular files only: never a symlink, FIFO or device


def _dir_run(path: Path) -> RawRun:
    return RawRun(str(path), intake.read_file(path / RUN_FILE, intake.MAX_META_BYTES),
                  _read(path / JOURNAL_FILE, intake.MAX_JOURNAL_BYTES) or b"", _read(path / END_FILE))


def _asv_benchmarks_json(machine_dir: Path) -> bytes | None:
    return _read(machine_dir.parent / "benchmarks.json")


def _walk_dir(root: Path) -> Iterator[Any]:
    if (root / RUN_FILE).exists():
        yield ("dir", root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        d = Path(dirpath)
        if RUN_FILE in filenames:
            dirnames[:] = []
            yield ("dir", d)
        elif "machine.json" in filenames:
            try:
                mj = intake.read_file(d / "machine.json", intake.MAX_META_BYTES)
                bj = _asv_benchmarks_json(d)
            except intake.Hostile as exc:
                yield Refused(f"{d}: {exc}")
                continue
            for name in sorted(filenames):
                if name.endswith(".json") and name not in ("machine.json", "benchmarks.json"):
                    try:
                        yield AsvFile(str(d / name), intake.read_file(d / name, intake.MAX_META_BYTES), mj, bj)
                    except intake.Hostile as exc:
                        yield Refused(f"{d / name}: {exc}")
        else:
            for name in sorted(filenames):
                if name.endswith(TAR_SUFFIXES):
                    try:
                        yield from _walk_tar(d / name)
                    except Refused as exc:  # one bad tarball in a tree costs that tarball
                        yield exc


def _walk_tar(path: Path) -> Iterator[Any]:
    """The runs of a tarball as one ``Archive``, streamed (no extraction); nothing if any member is refused."""
    groups: dict[str, dict[str, bytes]] = {}
    jsons: dict[str, bytes] = {}
    items: list[Any] = []
    st = os.lstat(path) if os.path.lexists(path) else None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path}: not a regular file (a symlink, FIFO or device is not read)")
    kept = 0  # decompressed bytes held in memory: the members' limits alone let 200 of them exhaust it
    try:
        with tarfile.open(path, "r|*") as tar:
            for n, member in enumerate(tar):
                if n >= intake.MAX_TAR_MEMBERS:
                    raise intake.Hostile(f"more than {intake.MAX_TAR_MEMBERS} members")
                parent, _, base = member.name.rpartition("/")
                intake.check_member(member, intake.MAX_JOURNAL_BYTES if base == JOURNAL_FILE
                                    else intake.MAX_META_BYTES)
                if not member.isfile() or not (base in (RUN_FILE, JOURNAL_FILE, END_FILE) or base.endswith(".json")):
                    continue
                kept += member.size
                if kept > intake.MAX_ARCHIVE_BYTES:
                    raise intake.Hostile(f"members to read add up to over {intake.MAX_ARCHIVE_BYTES >> 20} MiB "
                                         "(a decompression bomb, or split the tarball)")
                f = tar.extractfile(member)
                data = f.read() if f else b""
                if base in (RUN_FILE, JOURNAL_FILE, END_FILE):
                    g = groups.setdefault(parent, {})
                    if base in g:
                        raise intake.Hostile(f"{member.name[:120]!r} appears twice")
                    g[base] = data
                elif base.endswith(".json"):
                    jsons[member.name] = data
    except intake.Hostile as exc:
        raise Refused(f"{path}: refused as a whole: {exc}") from None
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:  # zlib/lzma errors are ValueErrors too
        raise Refused(f"{path}: not a readable tarball: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    for parent, g in groups.items():
        if RUN_FILE in g and JOURNAL_FILE not in g:
            raise Refused(f"{path}:{parent}: run.json without records.jsonl (a truncated tarball?); "
                          "the tarball is refused as a whole")
        if RUN_FILE in g:
            items.append(RawRun(f"{path}:{parent}", g[RUN_FILE], g.get(JOURNAL_FILE, b""), g.get(END_FILE)))
    for name, data in sorted(jsons.items()):
        parent, _, base = name.rpartition("/")
        machine = jsons.get(f"{parent}/machine.json")
        if base in ("machine.json", "benchmarks.json") or machine is None:
            continue
        bench = jsons.get(f"{parent.rpartition('/')[0]}/benchmarks.json")
        items.append(AsvFile(f"{path}:{name}", data, machine, bench))
    if items:
        yield Archive(str(path), items)


def discover(paths: list[str | Path]) -> Iterator[Any]:
    """Every run found under ``paths``; an unusable path yields a ``Refused``."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = False
            for item in _walk_dir(path):
                found = True
                yield item
            if not found:
                yield Refused(f"{path}: no run directories, asv results or tarballs found")
        elif path.is_file() and path.name.endswith(TAR_SUFFIXES):
            try:
                yield from _walk_tar(path)
            except Refused as exc:
                yield exc
        elif path.exists():
            yield Refused(f"{path}: not a run directory, results tree, asv results tree or tarball")
        else:
            yield Refused(f"{path}: does not exist")


# ---- parsing ---------------------------------------------------------------------------------------------------

def _sha1(data: bytes | None) -> str:
    return hashlib.sha1(data or b"").hexdigest()[:16]


def _hash64(h: str | None) -> int:
    if not h:
        return 0
    try:
        v = int(h[:16], 16)
    except ValueError:
        v = int.from_bytes(hashlib.blake2b(h.encode(), digest_size=8).digest(), "big")
    return v - (1 << 64) if v >= 1 << 63 else v


def _settings_json(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def _key(case, backend, direction, algo, math, dtype, layout, settings: dict[str, Any]) -> str:
    """Same as records.Record.key(), without building a Record per line."""
    s = ",".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return "|".join((case, backend, direction, algo, math, dtype, layout, s))


_COMBO_MEMO: dict[tuple, tuple] = {}
_KINDS = frozenset(("measurement", "autotune", "crosscheck", "repro"))


def _combo(d: dict[str, Any]) -> tuple:
    """(key, case, backend, direction, algo, math, dtype, layout, settings_json) of a record, memoised: a fleet
    repeats the same few thousand combinations millions of times."""
    settings = d["settings"] or {}
    kind = d["kind"]
    try:
        sig = (d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], d["layout"],
               tuple(sorted(settings.items())), kind)
        hit = _COMBO_MEMO.get(sig)
    except TypeError:  # a setting with an unhashable value (list, dict)
        sig, hit = None, None
    if hit is None:
        vals = (d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], d["layout"])
        if kind not in _KINDS or not all(type(v) is str and v for v in vals) or type(settings) is not dict:
            raise ValueError(f"kind {str(kind)[:40]!r}, identity fields or settings of the wrong type "
                             f"(kinds read: ranking, {', '.join(sorted(_KINDS))})")
        key = _key(*vals, settings)
        if kind != "measurement":  # autotune / crosscheck / repro records never overwrite the measurement
            key = f"{key}|kind={kind}"
        hit = (key, *vals, _settings_json(settings), kind)
        if sig is not None and len(_COMBO_MEMO) < 200_000:
            _COMBO_MEMO[sig] = hit
    return hit


def _night(started: str) -> str:
    return started[:10]


def run_facts(meta: dict[str, Any]) -> dict[str, Any]:
    fp = meta.get("fingerprint") or {}
    gpu = fp.get("gpu") or None
    return {"hardware": "gpu" if gpu else "cpu", "gpu_model": (gpu or {}).get("name"), "sm": (gpu or {}).get("sm"),
            "image_id": fp.get("image_id")}


def journal_digest(raw: RawRun) -> str:
    return f"j:{_sha1(raw.run_json)}:{len(raw.records)}:{_sha1(raw.end_json)}"


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


# record fields in the order of the store's records row (store.RECORD_COLUMNS)
_TIME_FIELDS = ("median_ms", "iqr_ms", "min_ms", "n", "timer", "mode", "samples_ms")
_ACC_FIELDS = ("max_abs", "rel_l2", "max_norm_err", "nan", "inf", "unwritten", "precision_class")
_DET_FIELDS = ("hash", "hash_algo", "repeats", "repeat_equal", "fresh_handle_equal", "distinct_outputs")
_TOP_FIELDS = ("status", "reason", "device", "workspace_bytes", "chosen_algo", "explanation", "extra")
_REC_FIELDS = ("schema", "kind", "case", "backend", "direction", "algo", "math", "dtype", "layout", "settings",
               "time", "accuracy", "determinism", *_TOP_FIELDS)
_GET_REC = operator.itemgetter(*_REC_FIELDS)
_GET_TIME, _GET_ACC, _GET_DET, _GET_TOP = (operator.itemgetter(*f) for f in (_TIME_FIELDS, _ACC_FIELDS, _DET_FIELDS,
                                                                           _TOP_FIELDS))


class _NotPlain(Exception):
    """A run whose columns did not all pass check_column: it is read again, every line through check_record."""


_PLAIN_TOP = ("status", "reason", "device", "workspace_bytes", "chosen_algo", "explanation")
_TIME_KEYS = frozenset(f.name for f in dataclasses.fields(Timing))


def _plain_time(t: dict[str, Any]) -> bool:
    """A time with the optional fields a plain line may carry, all empty (nothing joins the store's extra)."""
    return (t.keys() <= _TIME_KEYS and t.get("clock") is None and t.get("host_ms") is None
            and t.get("flags", ()) in ((), []))


def parse_journal(raw: RawRun, meta: dict[str, Any] | None = None) -> ParsedRun:
    """Rows for the store from one journal. The loop is the hot path of a fleet collect (ten million lines):
    one JSON parse and one tuple per line, everything else vectorised after it. Lines are checked against the
    schema per run (schema.check_column); a run that does not pass so, or that is refused, is read again with
    schema.check_record on every line, which gives the refusal its first bad line and its words."""
    if meta is None:
        meta = journal_identity(raw)[0]
    try:
        return _parse_journal(raw, meta, False)
    except (_NotPlain, Refused):
        return _parse_journal(raw, meta, True)


def _parse_journal(raw: RawRun, meta: dict[str, Any], full: bool) -> ParsedRun:
    combos, rows, rankings = [], [], []
    data = raw.records
    if data and not data.endswith(b"\n") and raw.end_json is None:
        data = data[:data.rfind(b"\n") + 1]  # a torn last line: the run was killed mid-write
    if not data.strip(b" \t\r\n"):
        raise Refused(f"{raw.origin}: records.jsonl is missing or holds no record (whitespace or nothing)")
    empty: dict[str, Any] = {}
    loads, combo, blob, memo, get_rec = _loads, _combo, samples_blob, _COMBO_MEMO, _GET_REC
    get_time, get_acc, get_det, get_top = _GET_TIME, _GET_ACC, _GET_DET, _GET_TOP
    none7, none6 = (None,) * 7, (None,) * 6
    verified, plain_time, remember = column_checks.VERIFIED_IDS, _plain_time, column_checks.remember
    tops: list[tuple] = []
    times: list[tuple] = []
    accs: list[tuple] = []
    dets: list[tuple] = []
    reductions: list[Any] = []
    for lineno, line in enumerate(data.splitlines(), 1):
        try:
            if len(line) > intake.MAX_LINE_BYTES:
                raise ValueError(f"line is over {intake.MAX_LINE_BYTES >> 20} MiB")
            if not line.strip():
                raise ValueError("the line is empty (a journal has one record per line)")
            d = loads(line)
            checked = full
            if full:
                check_record(d)
            try:  # fast path: every field there, combination seen before; anything else takes the full path
                (schema, kind, case, backend, direction, algo, math_, dtype, layout, settings, t, a, h, status,
                 reason, device, workspace, chosen_algo, explanation, extra) = get_rec(d)
                fast = schema == SCHEMA_VERSION and schema is not True and kind != "ranking"
                if fast:
                    sig = (case, backend, direction, algo, math_, dtype, layout,
                           tuple(sorted(settings.items())) if settings else (), kind)
                    c = memo.get(sig)
                    if c is None:
                        c = combo(d)
                    tv = get_time(t) if t else none7
                    av = get_acc(a) if a else none7
                    hv = get_det(h) if h else none6
                    # a plain line: an identity check_record passed before, every field there and nothing else,
                    # no open-ended extra; its values are checked per run, in columns, after the loop
                    if not checked and (sig in verified and len(d) == 20 and settings.__class__ is dict
                                        and schema.__class__ is int and extra.__class__ is dict and not extra
                                        and (t is None or (t.__class__ is dict and (len(t) == 7 or plain_time(t))))
                                        and (a is None or (a.__class__ is dict and (len(a) == 7 or (
                                            len(a) == 8 and "reduction" in a))))
                                        and (h is None or (h.__class__ is dict and len(h) == 6))):
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
                if d["kind"] == "ranking":
                    rankings.append((d["case"], d["direction"], d["dtype"], d["layout"], d["math"], d["source"],
                                     d["rank"], d["algo"], d["status"], d["time_ms"], d["memory_bytes"],
                                     d["determinism"], d["math_reported"]))
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
                    tv = tuple(t.get(k) for k in _TIME_FIELDS)
                    av = tuple(a.get(k) for k in _ACC_FIELDS)
                    hv = tuple(h.get(k) for k in _DET_FIELDS)
                    status, reason, device, workspace, chosen_algo, explanation, extra = (d.get(k)
                                                                                         for k in _TOP_FIELDS)
            if t and (t.get("clock") or t.get("flags") or t.get("host_ms")):
                # the clock the samples were taken at, the timer's flags and the host's dispatch time travel
                # in the store's extra column
                extra = {**(extra or empty), **{k: t[k] for k in ("clock", "flags", "host_ms") if t.get(k)}}
            combos.append(c)
            rows.append((status, reason, device, *tv[:6], blob(tv[6]), workspace, *av, *hv, chosen_algo,
                         explanation, json.dumps(extra, sort_keys=True) if extra else None))
        except Refused:
            raise
        except SchemaError as exc:
            raise Refused(f"{raw.origin}: records.jsonl line {lineno}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
            raise Refused(f"{raw.origin}: records.jsonl line {lineno} is not a valid record "
                          f"({repr(exc)[:200]})") from None
    if not full and not _columns_pass(tops, times, accs, reductions, dets):
        raise _NotPlain
    if len({c[0] for c in combos}) != len(combos):  # a line written twice (a resumed run): the last one counts
        last = {c[0]: i for i, c in enumerate(combos)}
        keep = sorted(last.values())
        combos, rows = [combos[i] for i in keep], [rows[i] for i in keep]
    cols = list(zip(*rows, strict=True)) if rows else [()] * 27
    counts = dict(Counter(cols[0]))
    ok = np.array([s == OK for s in cols[0]], dtype=bool)
    try:
        med = np.array(cols[3], dtype=np.float64)  # None becomes NaN
        err = np.array(cols[13], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise Refused(f"{raw.origin}: records.jsonl has text where a number belongs ({exc})") from None
    hashes = [_hash64(x) for x in cols[18]]
    chosen = list(cols[24])
    try:
        end = intake.loads(raw.end_json, "end.json") if raw.end_json else None
    except intake.Hostile as exc:
        raise Refused(f"{raw.origin}: {exc}") from None
    run = {"run_id": meta["run_id"], "machine": meta["machine"], "image": meta.get("image") or "native",
           "started": meta["started"], "night": _night(meta["started"]),
           "suite_revision": meta.get("suite_revision"), "source": "journal", "origin": raw.origin,
           "digest": journal_digest(raw), "complete": int(end is not None), "n_records": len(rows),
           "n_ok": counts.get(OK, 0), "n_rankings": len(rankings), "counts": json.dumps(counts, sort_keys=True),
           "fingerprint": json.dumps(meta.get("fingerprint") or {}, sort_keys=True),
           "options": json.dumps(meta.get("options") or {}, sort_keys=True),
           "end_info": json.dumps(end, sort_keys=True) if end is not None else None, **run_facts(meta)}
    vectors = {"ok": ok, "median": med, "norm_err": err, "hash": np.array(hashes, dtype=np.int64),
               "chosen": chosen}
    return ParsedRun(run, combos, rows, rankings, vectors)


def _columns_pass(tops: list[tuple], times: list[tuple], accs: list[tuple], reductions: list[Any],
                  dets: list[tuple]) -> bool:
    """Every value the plain lines of a run hold passes the check check_record makes of it (columns.check_columns)."""
    check = column_checks.check_columns
    return (check(tops, Record, _PLAIN_TOP) and check(times, Timing, _TIME_FIELDS) and check(accs, Accuracy, _ACC_FIELDS)
            and check(dets, Determinism, _DET_FIELDS) and column_checks.check_column(reductions, Accuracy, "reduction"))


_RECORD_FIELDS = ("case", "backend", "direction", "algo", "math", "dtype", "layout")
# convbench's own suite reports its CUDA-event time as a track in seconds next to two per-combination metrics;
# those metrics join the time's record (accuracy, determinism) instead of becoming records of their own.
_ASV_TIME_TRACKS = ("track_time",)
_ASV_JOINED = ("track_rel_l2_error", "track_bitwise_stable")
_CASE_ID = re.compile(r"^[a-z][a-z0-9_]*\.[A-Za-z0-9_.]+$")
_SETTING = re.compile(r"^\w+=\w+(,\w+=\w+)*$|^cpu$")
_ALGO = re.compile(r"^[A-Z][A-Z0-9_]*$")
_DIRECTION_OF_CLASS = (("BackwardData", "bwd_data"), ("BackwardFilter", "bwd_filter"), ("Forward", "fwd"))


def _asv_unit(name: str, bench: dict[str, Any]) -> str | None:
    """The benchmark's unit: benchmarks.json's when present, else seconds for time benchmarks, else unknown."""
    if bench.get("unit"):
        return bench["unit"]
    method = name.rsplit(".", 1)[-1]
    return "seconds" if method.startswith("time_") or method in _ASV_TIME_TRACKS else None


def _infer_param_name(values: list[Any]) -> str | None:
    """A parameter's name from its values, for results without benchmarks.json (asv keeps the names there)."""
    vals = [v for v in values if isinstance(v, str)]
    if not vals or len(vals) != len(values):
        return None
    s = set(vals)
    for name, vocabulary in (("dtype", DTYPES), ("layout", LAYOUTS), ("math", MATHS)):
        if s <= set(vocabulary):
            return name
    if all(_CASE_ID.match(v) for v in vals):
        return "case"
    if all(_SETTING.match(v) for v in vals):
        return "setting"
    if all(_ALGO.match(v) for v in vals):
        return "algo"
    return None


def _param_names(bench: dict[str, Any], params: list[list[Any]]) -> tuple[list[str], bool]:
    """(names, inferred): benchmarks.json's names, else names inferred from the values (else paramN)."""
    if bench.get("param_names"):
        return list(bench["param_names"]), False
    names: list[str] = []
    for i, values in enumerate(params):
        n = _infer_param_name([v.strip("'\"") if isinstance(v, str) else v for v in values])
        names.append(n if n and n not in names else f"param{i + 1}")
    return names, True


def _asv_status(value: Any) -> str:
    if value is None:
        return "failed"
    if isinstance(value, float) and value != value:
        return "skipped"
    return OK


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


MAX_ASV_COMBOS = 100_000  # parameter combinations of one asv results file (300^4 fits in 10 KiB of JSON)


def _asv_product(origin: str, name: str, params: Any) -> int:
    """How many combinations a benchmark's parameters make, refused before any is built."""
    if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
        raise Refused(f"{origin}: asv result {name[:80]!r}: 'params' is not a list of lists")
    n = 1
    for p in params:
        n *= max(1, len(p))
        if n > MAX_ASV_COMBOS:
            raise Refused(f"{origin}: asv result {name[:80]!r}: its parameters make over {MAX_ASV_COMBOS} "
                          "combinations")
    return n


def _check_asv_row(origin: str, name: str, row: dict[str, Any], bench: Any, total: int) -> None:
    """Types of one asv result row: numbers (or null/NaN) where asv writes numbers, scalars as parameters."""
    where = f"{origin}: asv result {name[:80]!r}"
    if total > MAX_ASV_COMBOS:
        raise Refused(f"{where}: the file's results make over {MAX_ASV_COMBOS} combinations")
    if not isinstance(bench, dict):
        raise Refused(f"{where}: its benchmarks.json entry is not an object")
    for p in row.get("params") or []:
        for v in p:
            if not isinstance(v, (str, int, float)) or isinstance(v, bool) or (isinstance(v, str) and len(v) > 1024):
                raise Refused(f"{where}: a parameter value is not short text or a number")
    def numbers(value: Any, key: str, depth: int = 0) -> None:
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and (value != value or abs(value) < 1e300)):
            return
        if isinstance(value, list) and depth < 2 and len(value) <= MAX_ASV_COMBOS:
            for v in value:
                numbers(v, key, depth + 1)
            return
        raise Refused(f"{where}: field {key!r} holds {type(value).__name__} where asv writes numbers")
    for key in ("result", "samples", "stats_q_25", "stats_q_75"):
        numbers(row.get(key), key)


def parse_asv(f: AsvFile) -> ParsedRun:
    """An asv results file (api version 2) as a run: one record per benchmark x parameter combination (a time
    and the per-combination metrics of the same class and parameters in one record)."""
    try:
        d = json.loads(f.data)  # asv writes NaN for skipped results, which only the stdlib parser accepts
        machine = json.loads(f.machine_json) if f.machine_json else {}
        benchmarks = json.loads(f.benchmarks_json) if f.benchmarks_json else {}
    except (ValueError, RecursionError) as exc:
        raise Refused(f"{f.origin}: not JSON ({str(exc)[:200]})") from None
    if not isinstance(d, dict) or not isinstance(d.get("results"), dict):
        raise Refused(f"{f.origin}: not an asv results file")
    if d.get("version") != ASV_RESULTS_VERSION:
        raise Refused(f"{f.origin}: asv results format {d.get('version')!r} is not {ASV_RESULTS_VERSION}; "
                      "run `asv update` to convert it")
    columns = d.get("result_columns") or []
    params_run = d.get("params") or {}
    if not isinstance(params_run, dict) or not isinstance(benchmarks, dict) or not isinstance(columns, list):
        raise Refused(f"{f.origin}: asv results 'params', 'result_columns' or benchmarks.json of the wrong type")
    machine_name = params_run.get("machine") or (machine.get("machine") if isinstance(machine, dict) else None)
    if not machine_name:
        raise Refused(f"{f.origin}: asv results name no machine")
    for what, text in (("machine", machine_name), ("env_name", d.get("env_name") or "asv"),
                       ("commit_hash", d.get("commit_hash") or "unknown")):
        if not isinstance(text, str) or not text.strip() or len(text) > 256 or intake.has_control(text):
            raise Refused(f"{f.origin}: asv results field {what!r} is not a short line of text")
    try:
        started = dt.datetime.fromtimestamp((d.get("date") or 0) / 1000, dt.timezone.utc).isoformat()
    except (TypeError, ValueError, OverflowError):
        raise Refused(f"{f.origin}: asv results date {d.get('date')!r} is not a time") from None
    rows_of: dict[str, dict[str, Any]] = {}
    for name, values in d["results"].items():
        if not isinstance(values, list):
            raise Refused(f"{f.origin}: result of {name!r} is not a list")
        rows_of[name] = dict(zip(columns, values, strict=False))
    by_class: dict[str, list[str]] = {}
    for name in sorted(rows_of):
        by_class.setdefault(name.rpartition(".")[0], []).append(name)
    combos, rows, ok, med, counts = [], [], [], [], {}
    inferred_names = False
    n_rows = 0
    for cls, names in by_class.items():
        joined: dict[str, str] = {}  # metric benchmark -> the time benchmark whose record carries it
        times = [n for n in names if n.rsplit(".", 1)[-1] in _ASV_TIME_TRACKS]
        if len(times) == 1:
            for n in names:
                if n.rsplit(".", 1)[-1] in _ASV_JOINED and rows_of[n].get("params") == rows_of[times[0]].get("params"):
                    joined[n] = times[0]
        direction = next((dv for word, dv in _DIRECTION_OF_CLASS if cls.rsplit(".", 1)[-1].endswith(word)), None)
        for name in names:
            if name in joined:
                continue
            row = rows_of[name]
            bench = benchmarks.get(name) or {}
            unit = _asv_unit(name, bench)
            is_time = unit == "seconds"
            params = row.get("params") or []
            _check_asv_row(f.origin, name, row, bench, n_rows := n_rows + _asv_product(f.origin, name, params))
            param_names, inferred = _param_names(bench, params)
            inferred_names |= inferred
            combos_here = list(itertools.product(*params)) or [()]
            results = row.get("result")
            if not isinstance(results, list) or not params:
                results = [results]
            n_here = len(combos_here)
            samples = row.get("samples") or [None] * n_here
            q25, q75 = row.get("stats_q_25") or [None] * n_here, row.get("stats_q_75") or [None] * n_here
            metrics = {m.rsplit(".", 1)[-1]: rows_of[m].get("result") for m, t in joined.items() if t == name}
            module = name.split(".")[0]
            for i, combo in enumerate(combos_here):
                pdict = {k: (v.strip("'\"") if isinstance(v, str) else v)
                         for k, v in zip(param_names, combo, strict=False)}
                fields = {k: str(pdict.pop(k)) for k in _RECORD_FIELDS if k in pdict}
                if "dtype" not in fields and "precision" in pdict:  # PyTorch's classes: "fp32/tf32", "fp16", ...
                    fields["dtype"] = str(pdict["precision"]).partition("/")[0]
                settings = {"asv_benchmark": name, **pdict}
                backend = fields.get("backend") or (module[6:] if module.startswith("bench_") else module)
                vals = (fields.get("case", name), backend, fields.get("direction", direction or "-"),
                        fields.get("algo", "-"), fields.get("math", "-"), fields.get("dtype", "-"),
                        fields.get("layout", "-"))
                combos.append((_key(*vals, settings), *vals, _settings_json(settings), "measurement"))
                value = results[i] if i < len(results) else None
                status = _asv_status(value)
                scale = 1000.0 if is_time else 1.0
                sm = samples[i] if i < len(samples) else None
                med_ms = value * scale if (status == OK and is_time) else None
                iqr = None
                if is_time and i < len(q25) and q25[i] is not None and q75[i] is not None:
                    iqr = (q75[i] - q25[i]) * scale
                extra: dict[str, Any] = {} if is_time else {"value": value if status == OK else None,
                                                            "unit": unit or "not recorded (no benchmarks.json)"}
                got = {m: (v[i] if isinstance(v, list) and i < len(v) else None) for m, v in metrics.items()}
                rel_l2 = _finite_or_none(got.get("track_rel_l2_error"))
                stable = _finite_or_none(got.get("track_bitwise_stable"))
                repeat_equal = None if stable is None else int(stable == 1.0)
                rows.append((status, None, None, med_ms, iqr, None, len(sm) if sm else None,
                             "asv" if is_time else None, None,
                             samples_blob([s * scale for s in sm]) if sm and is_time else None, None,
                             None, rel_l2, None, None, None, None, None, None, None, None, repeat_equal, None, None,
                             None, None, json.dumps(extra, sort_keys=True) if extra else None))
                counts[status] = counts.get(status, 0) + 1
                ok.append(status == OK)
                med.append(np.nan if med_ms is None else med_ms)
    env = d.get("env_name") or "asv"
    commit = d.get("commit_hash") or "unknown"
    fp = {"asv_machine": machine or params_run, "python": d.get("python"), "requirements": d.get("requirements"),
          "env_vars": d.get("env_vars"),
          "asv_param_names": "inferred from the values (no benchmarks.json)" if inferred_names else "benchmarks.json"}
    gpu = machine.get("gpu") if isinstance(machine, dict) else None
    n = len(rows)
    run = {"run_id": f"asv-{commit[:12]}-{env}", "machine": machine_name, "image": env, "image_id": None,
           "started": started, "night": _night(started), "suite_revision": commit, "hardware": "gpu" if gpu else
           "unknown", "gpu_model": gpu if isinstance(gpu, str) else None, "sm": None, "source": "asv",
           "origin": f.origin, "digest": f"a:{_sha1(f.data)}:{_sha1(f.machine_json)}", "complete": 1,
           "n_records": n, "n_ok": counts.get(OK, 0), "n_rankings": 0, "counts": json.dumps(counts, sort_keys=True),
           "fingerprint": json.dumps(fp, sort_keys=True, default=str), "options": "{}", "end_info": None}
    vectors = {"ok": np.array(ok, dtype=bool), "median": np.array(med, dtype=np.float64),
               "norm_err": np.full(n, np.nan), "hash": np.zeros(n, dtype=np.int64), "chosen": [None] * n}
    return ParsedRun(run, combos, rows, [], vectors)


# ---- collecting ------------------------------------------------------------------------------------------------

def _dir_unchanged(store: Store, path: Path) -> bool:
    """Whether a run directory's digest (run.json, journal length, end.json) is the stored one, from the journal's
    size alone. Anything unusual (unreadable, not a regular file, another schema) answers False and takes the
    full path, which reads, checks and refuses as usual."""
    try:
        run_json = intake.read_file(path / RUN_FILE, intake.MAX_META_BYTES)
        st = os.lstat(path / JOURNAL_FILE) if os.path.lexists(path / JOURNAL_FILE) else None
        if st is not None and not stat.S_ISREG(st.st_mode):
            return False
        end = _read(path / END_FILE)
        _, run_id, machine = journal_identity(RawRun(str(path), run_json, b"", end))
    except (OSError, intake.Hostile, Refused):
        return False
    size = st.st_size if st is not None else 0
    return store.digest_of(run_id, machine) == f"j:{_sha1(run_json)}:{size}:{_sha1(end)}"


def _parse(store: Store, item: Any) -> ParsedRun | None:
    """One discovered run parsed for the store, or None when the store already holds it unchanged."""
    if isinstance(item, tuple) and item[0] == "dir":
        if _dir_unchanged(store, item[1]):  # a nightly re-collect reads no journal it already holds
            return None
        try:
            item = _dir_run(item[1])
        except (OSError, intake.Hostile) as exc:
            raise Refused(f"{item[1]}: cannot read ({exc})") from None
    if isinstance(item, RawRun):
        meta, run_id, machine = journal_identity(item)
        if store.digest_of(run_id, machine) == journal_digest(item):
            return None
        return parse_journal(item, meta)
    if isinstance(item, AsvFile):
        parsed = parse_asv(item)
        if store.digest_of(parsed.run["run_id"], parsed.run["machine"]) == parsed.run["digest"]:
            return None
        return parsed
    raise TypeError(item)


def ingest_item(store: Store, item: Any, lock: Any = None, replace: bool = False) -> list[tuple[str, int]]:
    """Collect one discovered item (a run, or every run of an archive): [('added'|'updated'|'unchanged', records)].

    Parsing happens outside ``lock`` and writing inside it, so parallel parsers overlap while one writes.
    """
    members = item.items if isinstance(item, Archive) else [item]
    parsed = []
    for member in members:
        try:
            parsed.append(_parse(store, member))
        except Refused as exc:
            if isinstance(item, Archive):
                raise Refused(f"{exc} (the tarball {item.origin} is refused as a whole)") from None
            raise
    new = [p for p in parsed if p is not None]
    with lock if lock is not None else contextlib.nullcontext():
        try:
            outcomes = iter(store.ingest_all(new, replace=replace))
        except UnpackableRecord as exc:
            origin = item.origin if isinstance(item, Archive) else new[0].run["origin"]
            raise Refused(f"{origin}: {exc}") from None
    return [("unchanged", 0) if p is None else (next(outcomes), len(p.records)) for p in parsed]


_worker_store: Store | None = None
_worker_lock = None
_worker_replace = False


def _worker_init(path: str, lock, replace: bool) -> None:
    global _worker_store, _worker_lock, _worker_replace
    gc.set_threshold(50_000, 20, 100)  # a parser allocates millions of short-lived tuples and no cycles
    _worker_store = Store(path, verify=False)
    _worker_lock, _worker_replace = lock, replace


def _origin(item: Any) -> str:
    return str(item[1]) if isinstance(item, tuple) else getattr(item, "origin", repr(item)[:200])


def _ingest_or_refuse(store: Store, item: Any, lock: Any = None, replace: bool = False) -> list[tuple[str, Any]]:
    """One item; whatever goes wrong with it (even a bug exposed by hostile input) refuses it, not the collect.
    A store that cannot be written (full disk, read-only mount, damage) ends the collect: StoreError."""
    try:
        return ingest_item(store, item, lock, replace)
    except Refused as exc:
        return [("refused", str(exc))]
    except StoreError:
        raise
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - one bad file must not end a nightly collect
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        return [("refused", f"{_origin(item)}: cannot be collected ({type(exc).__name__}: {text})")]


def _worker(item: Any) -> list[tuple[str, Any]]:
    return _ingest_or_refuse(_worker_store, item, _worker_lock, _worker_replace)


def check_store_path(store_path: str | Path) -> None:
    """A store collect may write: a file name, not empty, not SQLite's in-memory name (which keeps nothing)."""
    text = str(store_path)
    if not text.strip() or text == ":memory:" or text.startswith("file:"):
        raise StoreError(f"--store {text!r} names no file; give the store's file name (default {DEFAULT_STORE})")


def collect(store_path: str | Path, paths: list[str | Path], jobs: int = 1,
            progress: Callable[[str], None] | None = None, replace: bool = False) -> Summary:
    """Collect every run under ``paths`` into the store at ``store_path``; ``jobs`` parser processes.
    ``replace``: a copy of a stored run with fewer records replaces it (otherwise it is refused)."""
    check_store_path(store_path)
    summary = Summary()
    guard = threading.Lock()  # with --jobs, refusals come from the pool's feeder thread and from results

    def account(results: list[tuple[str, Any]]) -> None:
        with guard:
            for outcome, value in results:
                _account(outcome, value)

    def _account(outcome: str, value: Any) -> None:
        if outcome == "refused":
            value = " ".join(str(value).splitlines())  # one line per refusal, whatever the input held
            summary.refused.append(value)
            if progress:
                progress(f"refused: {value}")
            return
        setattr(summary, outcome, getattr(summary, outcome) + 1)
        summary.records += value

    items = discover(paths)
    if jobs <= 1:
        store = Store(store_path)
        try:
            for item in items:
                if isinstance(item, Refused):
                    account([("refused", str(item))])
                    continue
                account(_ingest_or_refuse(store, item, replace=replace))
        finally:
            store.close()
        return summary
    Store(store_path).close()  # create (and check) the schema once, before the workers open it
    ctx = mp.get_context("fork")
    lock = ctx.Lock()
    with ctx.Pool(jobs, initializer=_worker_init, initargs=(str(store_path), lock, replace)) as pool:
        def feed():
            for item in items:
                if isinstance(item, Refused):
                    account([("refused", str(item))])
                else:
                    yield item
        for results in pool.imap_unordered(_worker, feed(), chunksize=4):
            account(results)
    Store(store_path, verify=False).close()  # checkpoint the write-ahead log into the store file
    return summary


def read_runs_into(store: Store, paths: list[str | Path]) -> Summary:
    """Collect into an already open (e.g. in-memory) store: used by ``compare`` on paths, which writes nothing.
    The same checks as ``collect``: what collect refuses, compare refuses in the same line."""
    summary = Summary()
    for item in discover(paths):
        results = [("refused", str(item))] if isinstance(item, Refused) else _ingest_or_refuse(store, item)
        for outcome, value in results:
            if outcome == "refused":
                summary.refused.append(" ".join(str(value).splitlines()))
            else:
                setattr(summary, outcome, getattr(summary, outcome) + 1)
                summary.records += value
    return summary

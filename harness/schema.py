"""The typed boundary: every record, ranking and run header is checked against its schema where it enters.

Records arrive from other hosts, other images and hand edits, and one wrongly typed value (``extra`` as a list,
``winners`` as text, a spread as a string) used to be stored and then break every later report. The schema is
the dataclasses of ``harness.records`` themselves (their type hints), plus the known keys of the open-ended
``extra`` and ``clock`` objects, so a field added to a dataclass is checked without a second list to keep in
step. Past this boundary the store, compare and report trust what they read.

Every failure is a ``SchemaError`` naming the field by its dotted path; callers add the file and the line.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import itertools
import math
import re
import types
import typing
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from .records import DIRECTIONS, DTYPES, LAYOUTS, SCHEMA_VERSION, Ranking, Record

MAX_TEXT = 1024  # an identity field, a status, a hash, a setting's value
MAX_LONG_TEXT = 64 << 10  # a reason or an explanation (an exception's message)
MAX_SAMPLES = 100_000  # timing samples of one record (compare's statistics hold both sides in memory)
MAX_ITEMS = 4096  # entries of any other list or object
MAX_DEPTH = 8  # nesting inside an open-ended object (extra)
MAX_INT = (1 << 63) - 1
KINDS = ("measurement", "autotune", "crosscheck", "repro")
_LONG_TEXTS = frozenset(("reason", "explanation"))
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# a name that becomes one path component (a machine, a run id): no separators, no dot-dot, no control characters
SAFE_NAME = re.compile(r"[^\W_][\w.+@=-]{0,127}")

# what convbench writes into Record.extra and Timing.clock; other keys of extra are kept but bounded
EXTRA_TYPES: dict[str, Any] = {
    "winners": dict[str, int], "near_ties": list[dict[str, Any]], "trials": list[dict[str, Any]],
    "max_abs_spread": float | None, "max_abs_delta": float | None, "fresh_process_equal": bool | None,
    "sweep_hash": str | None, "documented_nondeterministic": bool, "wall_ms": float | None,
    "clock": dict[str, Any] | None, "flags": list[str], "host_ms": float | None,
    "session_create_ms_drift": list[float], "first_inference_ms_drift": list[float],
}
CLOCK_TYPES: dict[str, Any] = {"sm_mhz_min": float | None, "sm_mhz_max": float | None, "slowdowns": list[str]}
_ENUMS = {"direction": DIRECTIONS, "dtype": DTYPES, "layout": LAYOUTS}
_NUMBER_TYPES = {int, float}


class SchemaError(ValueError):
    """A value that does not match its schema; ``field`` is its dotted path."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field {field!r} {problem}")
        self.field = field


def _type_name(v: Any) -> str:
    """What a value is, with the value itself when it is short (the line a user must find and fix)."""
    kind = "null" if v is None else {dict: "an object", list: "a list", str: "text", bool: "a boolean"}.get(
        type(v), "a number")
    return f"{kind} ({v[:40]!r})" if type(v) is str else kind


def _number(v: Any, path: str, nonneg: bool) -> None:
    if type(v) not in (int, float):
        raise SchemaError(path, f"is {_type_name(v)}, not a number")
    if not math.isfinite(v) or abs(v) > 1e300:
        raise SchemaError(path, "is not a finite number")
    if nonneg and v < 0:
        raise SchemaError(path, f"is negative ({v})")


def _integer(v: Any, path: str, nonneg: bool) -> None:
    if type(v) is not int:
        raise SchemaError(path, f"is {_type_name(v)}, not an integer")
    if not -MAX_INT <= v <= MAX_INT or (nonneg and v < 0):
        raise SchemaError(path, f"is out of range ({str(v)[:24]})")


def _text(v: Any, path: str, limit: int) -> None:
    if type(v) is not str:
        raise SchemaError(path, f"is {_type_name(v)}, not text")
    if len(v) > limit:
        raise SchemaError(path, f"is {len(v)} characters long (at most {limit})")
    if limit <= MAX_TEXT and _CONTROL.search(v):
        raise SchemaError(path, "holds control characters")


def _json_value(v: Any, path: str, depth: int = 0) -> None:
    """Any JSON value, bounded in nesting, entries and text length (the open-ended parts of extra)."""
    if depth > MAX_DEPTH:
        raise SchemaError(path, f"is nested more than {MAX_DEPTH} deep")
    if v is None or type(v) is bool:
        return
    if type(v) in (int, float):
        _number(v, path, False)
    elif type(v) is str:
        _text(v, path, MAX_LONG_TEXT)
    elif type(v) is list:
        if len(v) > MAX_ITEMS:
            raise SchemaError(path, f"has {len(v)} entries (at most {MAX_ITEMS})")
        for i, x in enumerate(v):
            _json_value(x, f"{path}[{i}]", depth + 1)
    elif type(v) is dict:
        if len(v) > MAX_ITEMS:
            raise SchemaError(path, f"has {len(v)} entries (at most {MAX_ITEMS})")
        for k, x in v.items():
            _json_value(x, f"{path}.{k}", depth + 1)
    else:
        raise SchemaError(path, f"is not a JSON value ({type(v).__name__})")


Check = Callable[[Any, str], None]


@functools.cache
def _checker(tp: Any, name: str, nonneg: bool) -> Check:
    """A check for one annotated type (``float | None``, ``list[str]``, ``dict[str, int]``, a dataclass...)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        check = _checker(inner[0], name, nonneg) if len(inner) == 1 else _json_value
        return lambda v, p: None if v is None else check(v, p)
    if tp is float:  # measured NaN is written as null (records._finite), so every float may be null
        return lambda v, p: None if v is None else _number(v, p, nonneg)
    if tp is int:
        return lambda v, p: _integer(v, p, nonneg)
    if tp is bool:
        def check_bool(v, p):
            if type(v) is not bool:
                raise SchemaError(p, f"is {_type_name(v)}, not true or false")
        return check_bool
    if tp is str:
        limit = MAX_LONG_TEXT if name in _LONG_TEXTS else MAX_TEXT
        allowed = _ENUMS.get(name)

        seen: set[str] = set()  # a fleet repeats the same few thousand names: each is checked once

        def check_str(v, p):
            if v.__class__ is str and v in seen:
                return
            _text(v, p, limit)
            if not v and name in _REQUIRED:
                raise SchemaError(p, "is empty")
            if allowed and v not in allowed:
                raise SchemaError(p, f"is {v[:40]!r}, not one of {', '.join(allowed)}")
            if len(seen) < 100_000:
                seen.add(v)
        return check_str
    if tp is Any:
        return _json_value
    if origin is list:
        item = _checker(args[0], name, nonneg)
        most = MAX_SAMPLES if name == "samples_ms" else MAX_ITEMS

        floats = args[0] is float

        def check_list(v, p):
            if type(v) is not list:
                raise SchemaError(p, f"is {_type_name(v)}, not a list")
            if len(v) > most:
                raise SchemaError(p, f"has {len(v)} entries (at most {most})")
            if floats and v and set(map(type, v)) <= _NUMBER_TYPES:  # timing samples: C loops, the usual case
                a = array("d", v)
                if (min(a) >= 0 or not nonneg) and max(map(abs, a)) <= 1e300:
                    return
            for i, x in enumerate(v):
                item(x, f"{p}[{i}]")
        return check_list
    if origin is dict:
        known = {"extra": EXTRA_TYPES, "clock": CLOCK_TYPES}.get(name)
        value = _checker(args[1], name, nonneg)
        scalar = name == "settings"  # a setting is part of the record's key: a scalar, never an object

        def check_dict(v, p):
            if type(v) is not dict:
                raise SchemaError(p, f"is {_type_name(v)}, not an object")
            if len(v) > MAX_ITEMS:
                raise SchemaError(p, f"has {len(v)} entries (at most {MAX_ITEMS})")
            for k, x in v.items():
                _text(k, f"{p} key", MAX_TEXT)
                if known and k in known:
                    _checker(known[k], k, False)(x, f"{p}.{k}")
                elif scalar and type(x) in (list, dict):
                    raise SchemaError(f"{p}.{k}", f"is {_type_name(x)}; a setting is text, a number or a boolean")
                else:
                    value(x, f"{p}.{k}")
        return check_dict
    if dataclasses.is_dataclass(tp):
        return _object_checker(tp, nonneg)
    raise TypeError(f"schema has no check for {tp!r}")  # a new annotation in records.py: add it above


def _nullable(tp: Any) -> bool:
    """Whether null is a value of ``tp``: an Optional, or a float (measured NaN is written as null)."""
    return tp is float or tp is Any or type(None) in typing.get_args(tp)


def _object_checker(cls: type, nonneg: bool) -> Check:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _checker(hints[f.name], f.name, nonneg) for f in dataclasses.fields(cls)
              if f.name not in ("kind", "schema")}
    not_null = {name for name in fields if not _nullable(hints[name])}

    def check_object(v, p):
        if type(v) is not dict:
            raise SchemaError(p, f"is {_type_name(v)}, not an object")
        for k, x in v.items():
            check = fields.get(k)
            if check is None:
                if k in ("kind", "schema") and p == "record":
                    continue
                raise SchemaError(f"{p}.{k}" if p != "record" else k, "is not a field of this schema")
            if x is not None or k in not_null:
                check(x, k if p == "record" else f"{p}.{k}")
    return check_object


_REQUIRED = frozenset(("case", "backend", "direction", "algo", "math", "dtype", "layout", "status"))
_record_checker = _object_checker(Record, True)
_ranking_checker = _object_checker(Ranking, False)


def check_record(d: Any) -> None:
    """A journal line (record or ranking) as parsed JSON; raises SchemaError naming the first bad field."""
    if type(d) is not dict:
        raise SchemaError("record", f"is {_type_name(d)}, not an object")
    if d.get("schema") != SCHEMA_VERSION or type(d.get("schema")) is not int:
        raise SchemaError("schema", f"is {str(d.get('schema'))[:40]!r}; this convbench reads schema {SCHEMA_VERSION}")
    kind = d.get("kind", "measurement")
    if kind == "ranking":
        _ranking_checker(d, "record")
        return
    if kind not in KINDS:
        raise SchemaError("kind", f"is {str(kind)[:40]!r}, not one of ranking, {', '.join(KINDS)}")
    for name in _REQUIRED:
        if name not in d:
            raise SchemaError(name, "is missing")
    _record_checker(d, "record")


def check_name(value: Any, what: str) -> str:
    """A machine name or run id, which becomes one path component: refused unless plainly safe."""
    if type(value) is not str or not SAFE_NAME.fullmatch(value):
        shown = repr(value)[:60]
        raise SchemaError(what, f"is {shown}: a name must be 1-128 letters, digits and . _ - + @ =, "
                                "starting with a letter or digit (it becomes a directory name)")
    return value


def check_run_header(meta: Any) -> dict[str, Any]:
    """run.json: schema version, identity (safe names, an ISO start time) and bounded JSON for the rest."""
    if type(meta) is not dict:
        raise SchemaError("run.json", f"is {_type_name(meta)}, not an object")
    if meta.get("schema") != SCHEMA_VERSION or type(meta.get("schema")) is not int:
        raise SchemaError("schema", f"is {str(meta.get('schema'))[:40]}: run schema {str(meta.get('schema'))[:40]} "
                                    f"is not supported; this convbench reads schema {SCHEMA_VERSION} (collect it "
                                    "with the convbench version that wrote it)")
    for k in ("run_id", "machine"):  # shown and stored, not made a path here (Journal.create checks those)
        if k not in meta:
            raise SchemaError(k, "is missing")
        _text(meta[k], k, 256)
        if not meta[k].strip():
            raise SchemaError(k, "is empty")
    started = meta.get("started")
    _text(started, "started", 64)
    try:
        when = dt.datetime.fromisoformat(started)
    except ValueError:
        raise SchemaError("started", f"is {started[:40]!r}, not an ISO 8601 time") from None
    if when.tzinfo is None:
        raise SchemaError("started", f"is {started[:40]!r}, a time without its UTC offset")
    for k in ("image", "suite_revision", "image_id"):
        if meta.get(k) is not None:
            _text(meta[k], k, MAX_TEXT)
    for k in ("fingerprint", "options"):
        if meta.get(k) is not None and type(meta[k]) is not dict:
            raise SchemaError(k, f"is {_type_name(meta[k])}, not an object")
        _json_value(meta.get(k), k)
    return meta


# ---- the same checks, one run at a time ---------------------------------------------------------------------
# A fleet's journal repeats one shape ten million times: the same combinations, the same few statuses, numbers in
# the same places. check_record walks every line's tree (about 5 us a line); collect.parse_journal instead checks a
# line's identity and shape against what a full check_record already passed (VERIFIED_IDS, per process), gathers
# the values that change from line to line into columns, and checks each column at once with the rule
# check_record applies to each of its values (check_column). A run any part of which is not plain, or a column
# that does not pass, is read again with check_record on every line, so what is refused, and the words of the
# refusal, stay those of check_record.
VERIFIED_IDS: set[tuple] = set()  # identity signatures (collect._combo's memo key) of records check_record passed
_MAX_VERIFIED = 200_000
_NONE = type(None)
_FLOAT_TYPES = frozenset((int, float))
_HINTS: dict[type, dict[str, Any]] = {}


def identity_signature(d: dict[str, Any]) -> tuple | None:
    """The key collect's fast path looks a record's identity up by (None where the record has no such key)."""
    try:
        settings = d["settings"]
        if type(settings) is not dict:
            return None
        return (d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], d["layout"],
                tuple(sorted(settings.items())) if settings else (), d["kind"])
    except (KeyError, TypeError):
        return None


def remember(d: dict[str, Any]) -> None:
    """After check_record(d) passed: its identity is one a plain line may reuse without a second walk."""
    if d.get("kind", "measurement") == "ranking" or len(VERIFIED_IDS) >= _MAX_VERIFIED:
        return
    sig = identity_signature(d)
    if sig is not None:
        try:
            VERIFIED_IDS.add(sig)
        except TypeError:  # a setting with an unhashable value: never a plain line
            pass


def _hint(cls: type, name: str) -> Any:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints[name]


def _numbers_ok(vals: list[Any], types: set[type], integer: bool) -> bool:
    """Every value (numbers, and None where the column may hold null) passes _integer / _number with nonneg
    (records' numbers are never negative)."""
    if integer:
        return min(vals) >= 0 and max(vals) <= MAX_INT
    if int in types:  # exact comparison, as _number makes it, for integers
        return all(v is None or 0 <= v <= 1e300 for v in vals)
    a = np.array(vals, dtype=np.float64)  # None becomes NaN (a parsed NaN cannot occur: the readers refuse it)
    if ((a < 0) | (a > 1e300)).any():
        return False
    return int(np.isnan(a).sum()) == vals.count(None) if _NONE in types else not np.isnan(a).any()


def check_column(values: list[Any], cls: type, name: str) -> bool:
    """Whether check_record would pass every value of ``values`` as field ``name`` of dataclass ``cls`` (a field
    of a record, of its time, accuracy or determinism). False also where this cannot tell at once (the caller then
    checks line by line): never True for a value check_record refuses."""
    return _values_pass(values, _hint(cls, name), name)


def check_columns(rows: list[tuple], cls: type, names: tuple[str, ...]) -> bool:
    """check_column for each field of ``rows`` (tuples of the fields ``names`` of ``cls``); numeric fields of one
    type are checked together, one pass over all their values."""
    if not rows:
        return True
    numeric: dict[Any, list[tuple]] = {}
    for name, col in zip(names, zip(*rows, strict=True), strict=True):
        tp = _hint(cls, name)
        if tp in _NUMERIC:
            numeric.setdefault(tp, []).append(col)
        elif not _values_pass(col, tp, name):
            return False
    return all(_values_pass(list(itertools.chain.from_iterable(cols)), tp, "")
               for tp, cols in numeric.items())


_NUMERIC = (float, float | None, int, int | None, bool, bool | None)


def _values_pass(values: Any, tp: Any, name: str) -> bool:
    if not values:
        return True
    if tp in (str, str | None):  # distinct values first: a str is equal only to a str, so no type hides in them
        try:
            distinct = set(values)
        except TypeError:
            return False
        if None in distinct:
            if not _nullable(tp):
                return False
            distinct.discard(None)
        if len(distinct) <= 256 or name in _REQUIRED or name in _ENUMS:
            check = _checker(str, name, True)
            try:
                for v in distinct:
                    check(v, name)
            except SchemaError:
                return False
            return True
        limit = MAX_LONG_TEXT if name in _LONG_TEXTS else MAX_TEXT
        try:
            text = " ".join(distinct)  # TypeError unless every value is text
        except TypeError:
            return False
        if max(map(len, distinct)) > limit:
            return False
        return limit > MAX_TEXT or (text.isascii() and text.isprintable()) or not _CONTROL.search(text)
    types = set(map(type, values))
    if _NONE in types and not _nullable(tp):
        return False
    if tp in (float, float | None):  # None stays in: NaN in the array
        return types - {_NONE} <= _FLOAT_TYPES and _numbers_ok(values, types, False)
    if _NONE in types:
        values = [v for v in values if v is not None]
        types.discard(_NONE)
        if not values:
            return True
    if tp in (int, int | None):
        return types == {int} and _numbers_ok(values, types, True)
    if tp in (bool, bool | None):
        return types == {bool}
    if tp == list[float]:  # timing samples (null items are left to the line-by-line check)
        if types != {list} or max(map(len, values)) > (MAX_SAMPLES if name == "samples_ms" else MAX_ITEMS):
            return False
        items = list(itertools.chain.from_iterable(values))
        types = set(map(type, items))
        return types <= _FLOAT_TYPES and _numbers_ok(items, types, False)
    return False

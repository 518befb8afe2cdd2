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
import json
import math
import re
import types
import typing
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cases import DIRECTIONS, DTYPES, LAYOUTS
from .records import (
    IDENTITY_FIELDS,
    KEY_SEPARATOR,
    READ_BACK_FIELDS,
    RECORD_KINDS,
    SCHEMA_VERSION,
    SETTING_EQUALS,
    SETTING_SEPARATOR,
    Ranking,
    Record,
    RecordKind,
)

MAX_TEXT = 1024  # an identity field, a status, a hash, a setting's value
MAX_LONG_TEXT = 64 << 10  # a reason or an explanation (an exception's message)
MAX_SAMPLES = 100_000  # timing samples of one record (compare's statistics hold both sides in memory)
MAX_ITEMS = 4096  # entries of any other list or object
MAX_DEPTH = 8  # nesting inside an open-ended object (extra)
# run.json's fingerprint and options, each as JSON: real ones are 5-50 KiB; every page of a report holds each
# run's (48 runs of 15 MiB fingerprints took a report to 1.1 GiB), so a store keeps none larger
MAX_RUN_PART_BYTES = 256 << 10
MAX_INT = (1 << 63) - 1
KINDS = RECORD_KINDS  # the kinds of Record a journal line may be (a Ranking is checked apart)
LONG_TEXTS = frozenset(("reason", "explanation"))
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# a name that becomes one path component (a machine, a run id): no separators, no dot-dot, no control characters
SAFE_NAME = re.compile(r"[^\W_][\w.+@=-]{0,127}")

# what convbench writes into Record.extra and Timing.clock; other keys of extra are kept but bounded
EXTRA_TYPES: dict[str, Any] = {
    "winners": dict[str, int], "near_ties": list[dict[str, Any]], "trials": list[dict[str, Any]],
    "max_abs_spread": float | None, "max_abs_delta": float | None, "fresh_process_equal": bool | None,
    "sweep_hash": str | None, "documented_nondeterministic": bool, "wall_ms": float | None,
    "clock": dict[str, Any] | None, "flags": list[str], "host_ms": float | None,
    "session_create_ms_drift": list[float], "first_inference_ms_drift": list[float],
    "process_medians_ms": list[float], "placement_medians_ms": list[float], "replica": str | None,
    # a crosscheck's (run/autotune.py): the report and core.explain format these as numbers and names
    "torch_class": str | None, "cudnn_fma_class": str | None, "cudnn_fma_max_abs": float | None, "sm": str | None,
}
# one near tie of an autotune record (run/autotune.py), formatted by the report as a percentage and a delta
NEAR_TIE_TYPES: dict[str, Any] = {"winner": str, "runner_up": str, "gap": float, "max_abs_delta": float | None}
CLOCK_TYPES: dict[str, Any] = {"sm_mhz_min": float | None, "sm_mhz_max": float | None, "slowdowns": list[str],
                               "throttled_batches": int}
ENUMS = {"direction": DIRECTIONS, "dtype": DTYPES, "layout": LAYOUTS}  # fields whose text is one of a list
REQUIRED = frozenset(("case", "backend", "direction", "algo", "math", "dtype", "layout", "status"))  # never empty
NUMBER_TYPES = {int, float}
_IDENTITY = frozenset(IDENTITY_FIELDS)
_NAME_SEPARATORS = (KEY_SEPARATOR, SETTING_SEPARATOR, SETTING_EQUALS)


@dataclass(frozen=True)
class Rules:
    """The rules a record's values are held to, in one public table: check_record applies them value by value,
    collect's column checks (collect/columns.py) a run's column at once, so that both refuse the same values."""

    max_text: int = MAX_TEXT
    max_long_text: int = MAX_LONG_TEXT
    max_samples: int = MAX_SAMPLES
    max_items: int = MAX_ITEMS
    max_int: int = MAX_INT
    long_texts: frozenset[str] = LONG_TEXTS
    control: re.Pattern[str] = CONTROL
    enums: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=lambda: ENUMS)
    required: frozenset[str] = REQUIRED
    number_types: frozenset[type] = frozenset(NUMBER_TYPES)
    extra_types: dict[str, Any] = dataclasses.field(default_factory=lambda: EXTRA_TYPES)
    clock_types: dict[str, Any] = dataclasses.field(default_factory=lambda: CLOCK_TYPES)


RULES = Rules()


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
    if limit <= MAX_TEXT and CONTROL.search(v):
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
def value_check(tp: Any, name: str, nonneg: bool) -> Check:
    """A check for one annotated type (``float | None``, ``list[str]``, ``dict[str, int]``, a dataclass...)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        check = value_check(inner[0], name, nonneg) if len(inner) == 1 else _json_value
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
        limit = MAX_LONG_TEXT if name in LONG_TEXTS else MAX_TEXT
        allowed = ENUMS.get(name)
        identity = name in _IDENTITY

        seen: set[str] = set()  # a fleet repeats the same few thousand names: each is checked once

        def check_str(v, p):
            if v.__class__ is str and v in seen:
                return
            _text(v, p, limit)
            if not v and name in REQUIRED:
                raise SchemaError(p, "is empty")
            if allowed and v not in allowed:
                raise SchemaError(p, f"is {v[:40]!r}, not one of {', '.join(allowed)}")
            if identity and KEY_SEPARATOR in v:
                raise SchemaError(p, f"is {v[:40]!r}: {KEY_SEPARATOR!r} separates a record's key fields")
            if len(seen) < 100_000:
                seen.add(v)
        return check_str
    if tp is Any:
        return _json_value
    if origin is list:
        item = value_check(args[0], name, nonneg)
        most = MAX_SAMPLES if name == "samples_ms" else MAX_ITEMS

        floats = args[0] is float

        def check_list(v, p):
            if type(v) is not list:
                raise SchemaError(p, f"is {_type_name(v)}, not a list")
            if len(v) > most:
                raise SchemaError(p, f"has {len(v)} entries (at most {most})")
            if floats and v and set(map(type, v)) <= NUMBER_TYPES:  # timing samples: C loops, the usual case
                a = array("d", v)
                if (min(a) >= 0 or not nonneg) and max(map(abs, a)) <= 1e300:
                    return
            for i, x in enumerate(v):
                item(x, f"{p}[{i}]")
        return check_list
    if origin is dict:
        known = {"extra": EXTRA_TYPES, "clock": CLOCK_TYPES, "near_ties": NEAR_TIE_TYPES}.get(name)
        value = value_check(args[1], name, nonneg)
        scalar = name == "settings"  # a setting is part of the record's key: a scalar, never an object

        def check_dict(v, p):
            if type(v) is not dict:
                raise SchemaError(p, f"is {_type_name(v)}, not an object")
            if len(v) > MAX_ITEMS:
                raise SchemaError(p, f"has {len(v)} entries (at most {MAX_ITEMS})")
            for k, x in v.items():
                _text(k, f"{p} key", MAX_TEXT)
                if known and k in known:
                    value_check(known[k], k, False)(x, f"{p}.{k}")
                elif scalar:
                    check_setting(k, x, f"{p}.{k}")
                else:
                    value(x, f"{p}.{k}")
        return check_dict
    if dataclasses.is_dataclass(tp):
        return _object_checker(tp, nonneg)
    raise TypeError(f"schema has no check for {tp!r}")  # a new annotation in records.py: add it above


def check_setting(name: str, value: Any, path: str, value_commas: bool = False) -> None:
    """One setting, which is part of its record's key (records.settings_key): a name without ``|``, ``,`` or ``=``
    and a scalar value without ``|`` or control characters, and without ``,`` unless ``value_commas`` (asv
    results, whose commas settings_key quotes), so that no two settings are spelled alike in a key."""
    _text(name, f"{path} (its name)", MAX_TEXT)
    if any(sep in name for sep in _NAME_SEPARATORS):
        raise SchemaError(path, f"has a name {name[:40]!r} holding one of {' '.join(_NAME_SEPARATORS)}, which "
                                "separate a record's key")
    if type(value) in (list, dict):
        raise SchemaError(path, f"is {_type_name(value)}; a setting is text, a number or a boolean")
    if type(value) is str:
        _text(value, path, MAX_TEXT)
        bad = (KEY_SEPARATOR,) if value_commas else (KEY_SEPARATOR, SETTING_SEPARATOR)
        if any(sep in value for sep in bad):
            raise SchemaError(path, f"is {value[:40]!r}: {' and '.join(map(repr, bad))} separate a record's key")
    else:
        _json_value(value, path)


def nullable(tp: Any) -> bool:
    """Whether null is a value of ``tp``: an Optional, or a float (measured NaN is written as null)."""
    return tp is float or tp is Any or type(None) in typing.get_args(tp)


# Fields a journal line holds in a narrower type than the class allows its readers: samples are a list in a line,
# a float64 array read back from the store (records.Timing).
JOURNAL_TYPES: dict[str, Any] = {"samples_ms": list[float]}


def journal_types(cls: type) -> dict[str, Any]:
    """The type a journal line's field of ``cls`` must have, by field name: its annotation, or JOURNAL_TYPES'."""
    return {**typing.get_type_hints(cls), **{k: v for k, v in JOURNAL_TYPES.items()
                                             if k in {f.name for f in dataclasses.fields(cls)}}}


def _object_checker(cls: type, nonneg: bool) -> Check:
    hints = journal_types(cls)
    fields = {f.name: value_check(hints[f.name], f.name, nonneg) for f in dataclasses.fields(cls)
              if f.name not in ("kind", "schema", *READ_BACK_FIELDS)}
    not_null = {name for name in fields if not nullable(hints[name])}

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


_record_checker = _object_checker(Record, True)
_ranking_checker = _object_checker(Ranking, False)


def check_record(d: Any) -> None:
    """A journal line (record or ranking) as parsed JSON; raises SchemaError naming the first bad field."""
    if type(d) is not dict:
        raise SchemaError("record", f"is {_type_name(d)}, not an object")
    if d.get("schema") != SCHEMA_VERSION or type(d.get("schema")) is not int:
        raise SchemaError("schema", f"is {str(d.get('schema'))[:40]!r}; this convbench reads schema {SCHEMA_VERSION}")
    kind = d.get("kind", RecordKind.MEASUREMENT)
    if kind == RecordKind.RANKING:
        _ranking_checker(d, "record")
        return
    if kind not in KINDS:
        raise SchemaError("kind", f"is {str(kind)[:40]!r}, not one of ranking, {', '.join(KINDS)}")
    for name in REQUIRED:
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


NIGHT_BEFORE_START = 2  # days: a night's job may start a run up to this long after the night it belongs to


def check_night(night: Any, started: dt.date) -> str:
    """A run's night as its job labelled it (``CONVBENCH_NIGHT``): a YYYY-MM-DD date on or up to
    NIGHT_BEFORE_START days before the run's start, so that a job crossing midnight stays one night."""
    if type(night) is not str or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", night):
        raise SchemaError("night", f"is {str(night)[:40]!r}, not a YYYY-MM-DD date")
    try:
        day = dt.date.fromisoformat(night)
    except ValueError:
        raise SchemaError("night", f"is {night!r}, not a date") from None
    if not 0 <= (started - day).days <= NIGHT_BEFORE_START:
        raise SchemaError("night", f"is {night}, but the run started on {started}: a night is the start's date or "
                                   f"up to {NIGHT_BEFORE_START} days before it")
    return night


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
    if meta.get("night") is not None:
        check_night(meta["night"], when.date())
    for k in ("image", "suite_revision", "image_id"):
        if meta.get(k) is not None:
            _text(meta[k], k, MAX_TEXT)
    for k in ("fingerprint", "options"):
        if meta.get(k) is not None and type(meta[k]) is not dict:
            raise SchemaError(k, f"is {_type_name(meta[k])}, not an object")
        _json_value(meta.get(k), k)
        size = len(json.dumps(meta.get(k), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > MAX_RUN_PART_BYTES:
            raise SchemaError(k, f"is {size >> 10} KiB of JSON (at most {MAX_RUN_PART_BYTES >> 10} KiB)")
    return meta


# ---- the same checks, one run at a time ---------------------------------------------------------------------

"""Collect's fast path: a run's plain lines checked in columns, with the rules check_record applies to each value.

Kept out of the core (it needs numpy, and only collect uses it); the rules themselves are core.schema's.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..core.records import RecordKind, Timing
from ..core.schema import RULES, SchemaError, journal_types, nullable, value_check

# A fleet's journal repeats one shape ten million times: the same combinations, the same few statuses, numbers in
# the same places. check_record walks every line's tree (about 5 us a line); journals.parse_journal instead checks a
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
_PRINTABLE_ASCII = bytes(range(0x20, 0x7F))


def settings_signature(settings: dict[str, Any]) -> tuple:
    """Settings as a memo key: each value with its type, since 1, 1.0 and True are equal in Python but spelled
    apart in a record's key (a memo keyed by equality alone gave a second combination the first one's key)."""
    return tuple(sorted((k, v, v.__class__) for k, v in settings.items())) if settings else ()


def identity_signature(d: dict[str, Any]) -> tuple | None:
    """The key collect's fast path looks a record's identity up by (None where the record has no such key)."""
    try:
        settings = d["settings"]
        if type(settings) is not dict:
            return None
        return (d["case"], d["backend"], d["direction"], d["algo"], d["math"], d["dtype"], d["layout"],
                settings_signature(settings), d["kind"])
    except (KeyError, TypeError):
        return None


def remember(d: dict[str, Any]) -> None:
    """After check_record(d) passed: its identity is one a plain line may reuse without a second walk."""
    if d.get("kind", RecordKind.MEASUREMENT) == RecordKind.RANKING or len(VERIFIED_IDS) >= _MAX_VERIFIED:
        return
    sig = identity_signature(d)
    if sig is not None:
        try:
            VERIFIED_IDS.add(sig)
        except TypeError:  # a setting with an unhashable value: never a plain line
            pass


def field_type(cls: type, name: str) -> Any:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = journal_types(cls)
    return hints[name]


def _numbers_ok(vals: list[Any], types: set[type], integer: bool) -> bool:
    """Every value (numbers, and None where the column may hold null) passes _integer / _number with nonneg
    (records' numbers are never negative)."""
    if integer:
        return min(vals) >= 0 and max(vals) <= RULES.max_int
    if int in types:
        # exact comparison, as _number makes it, for integers: min and max compare int and float exactly, and a
        # parsed value is never NaN
        if _NONE in types:
            vals = [v for v in vals if v is not None]
        return not vals or (min(vals) >= 0 and max(vals) <= 1e300)
    a = np.array(vals, dtype=np.float64)  # None becomes NaN (a parsed NaN cannot occur: the readers refuse it)
    if ((a < 0) | (a > 1e300)).any():
        return False
    return int(np.isnan(a).sum()) == vals.count(None) if _NONE in types else not np.isnan(a).any()


def check_column(values: list[Any], cls: type, name: str) -> bool:
    """Whether check_record would pass every value of ``values`` as field ``name`` of dataclass ``cls`` (a field
    of a record, of its time, accuracy or determinism). False also where this cannot tell at once (the caller then
    checks line by line): never True for a value check_record refuses."""
    return values_pass(values, field_type(cls, name), name)


def check_columns(rows: list[tuple], cls: type, names: tuple[str, ...]) -> bool:
    """check_column for each field of ``rows`` (tuples of the fields ``names`` of ``cls``); numeric fields of one
    type are checked together, one pass over all their values."""
    if not rows:
        return True
    numeric: dict[Any, list[tuple]] = {}
    for name, col in zip(names, zip(*rows, strict=True), strict=True):
        tp = field_type(cls, name)
        if tp in _NUMERIC:
            numeric.setdefault(tp, []).append(col)
        elif not values_pass(col, tp, name):
            return False
    return all(values_pass(list(itertools.chain.from_iterable(cols)), tp, "")
               for tp, cols in numeric.items())


_NUMERIC = (float, float | None, int, int | None, bool, bool | None)


class Flat:
    """The values of a column of lists, some of them given as lists (``values``) and the rest as (width, items)
    of lists of numbers kept flat (store_packing.encode_values): values_pass checks their items as they are."""

    def __init__(self, values: list, flats: list[tuple[int, list]]):
        self.values, self.flats = values, flats


class Arrays:
    """The values of a column, some given as lists (``values``: a list, or Flat) and the rest as arrays of binary
    numbers (store_packing.Area): values_pass checks the arrays as numpy arrays."""

    def __init__(self, values: Any, arrays: list[np.ndarray]):
        self.values, self.arrays = values, arrays


def _flat_pass(column: Flat, tp: Any, name: str) -> bool:
    if tp not in (list[float], list[str]) or not values_pass(column.values, tp, name):
        return False
    if max(w for w, _ in column.flats) > (RULES.max_samples if name == "samples_ms" else RULES.max_items):
        return False
    items = list(itertools.chain.from_iterable(f for _, f in column.flats if f.__class__ is list))
    arrays = [f for _, f in column.flats if f.__class__ is not list]
    item = float if tp == list[float] else str
    return values_pass(items, item, name) and (not arrays or _arrays_pass(arrays, item))


def _arrays_pass(arrays: list[np.ndarray], tp: Any) -> bool:
    """Whether every binary number passes as a value of type ``tp``, as _numbers_ok checks a column's numbers:
    a float or an integer where a number belongs, an integer where an integer does; never negative, at most
    1e300 (a number, NaN and infinity failing) or RULES.max_int (an integer)."""
    integer = tp in (int, int | None)
    if integer and any(a.dtype.kind != "i" for a in arrays) or not integer and tp not in (float, float | None):
        return False
    a = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)  # as floats where any is: signs and bounds kept
    if not len(a):
        return True
    low, high = a.min(), a.max()  # NaN where any is NaN, which no comparison passes
    return bool(low >= 0 and high <= (RULES.max_int if integer else 1e300))


def values_pass(values: Any, tp: Any, name: str) -> bool:
    if values.__class__ is Flat:
        return _flat_pass(values, tp, name)
    if values.__class__ is Arrays:
        return values_pass(values.values, tp, name) and _arrays_pass(values.arrays, tp)
    if not values:
        return True
    if tp in (str, str | None):  # distinct values first: a str is equal only to a str, so no type hides in them
        try:
            distinct = set(values)
        except TypeError:
            return False
        if None in distinct:
            if not nullable(tp):
                return False
            distinct.discard(None)
        if len(distinct) <= 256 or name in RULES.required or name in RULES.enums:
            check = value_check(str, name, True)
            try:
                for v in distinct:
                    check(v, name)
            except SchemaError:
                return False
            return True
        limit = RULES.max_long_text if name in RULES.long_texts else RULES.max_text
        try:
            text = " ".join(distinct)  # TypeError unless every value is text
        except TypeError:
            return False
        if max(map(len, distinct)) > limit:
            return False
        # printable ASCII first (a fleet's hashes: 5x quicker than str.isprintable), which holds no control character
        return (limit > RULES.max_text or (text.isascii() and not text.encode().translate(None, _PRINTABLE_ASCII))
                or not RULES.control.search(text))
    types = set(map(type, values))
    if _NONE in types and not nullable(tp):
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
    if tp == list[str]:  # a timer's flags, a clock's slowdowns: the items checked as one text column
        if types != {list} or max(map(len, values)) > RULES.max_items:
            return False
        return values_pass(list(itertools.chain.from_iterable(values)), str, name)
    if tp == list[float]:  # timing samples (null items are left to the line-by-line check)
        if types != {list} or max(map(len, values)) > (RULES.max_samples if name == "samples_ms" else RULES.max_items):
            return False
        items = list(itertools.chain.from_iterable(values))
        types = set(map(type, items))
        return types <= _FLOAT_TYPES and _numbers_ok(items, types, False)
    return False


# The optional parts every real measurement line carries (a timed line: the timer's host time and flags, the GPU's
# clock; every line: extra's wall time, and a sweep's replica medians and fresh-process verdict), each with the type
# check_record holds it to. A plain line may carry these (the clock with its known keys only, extra with these
# keys only): their values are gathered by name and checked per run; any other key makes the line not plain.
PLAIN_EXTRA = ("wall_ms", "process_medians_ms", "placement_medians_ms", "fresh_process_equal", "replica",
               "documented_nondeterministic")
_TIME_HINTS = journal_types(Timing)
OPTIONAL_TYPES: dict[str, Any] = {"host_ms": _TIME_HINTS["host_ms"], "flags": _TIME_HINTS["flags"], **RULES.clock_types,
                                  **{k: RULES.extra_types[k] for k in PLAIN_EXTRA}}
_EXTRA_KEYS = frozenset(PLAIN_EXTRA)
_CLOCK_KEYS = frozenset(RULES.clock_types)
_TIME_KEYS = frozenset(_TIME_HINTS)
assert len(OPTIONAL_TYPES) == 2 + len(RULES.clock_types) + len(PLAIN_EXTRA)  # one name, one column


def take_optional(t: dict[str, Any] | None, extra: dict[str, Any], optional: dict[str, list]) -> bool:
    """Whether a line's time and extra hold nothing but the optional parts a plain line may carry; if so their
    values are appended to ``optional`` (name -> values), to be checked per run by optional_pass."""
    if extra and not extra.keys() <= _EXTRA_KEYS:
        return False
    clock = None
    if t is not None and len(t) != 7:  # the seven fields of every time (journals.parse_journal read them) and more
        if not t.keys() <= _TIME_KEYS:
            return False
        clock = t.get("clock")
        if clock is not None and (clock.__class__ is not dict or not clock.keys() <= _CLOCK_KEYS):
            return False
        for k in ("host_ms", "flags"):
            if k in t:
                optional[k].append(t[k])
    if clock:
        for k, v in clock.items():
            optional[k].append(v)
    for k, v in extra.items():
        optional[k].append(v)
    return True


def optional_pass(optional: dict[str, list]) -> bool:
    """Every optional value take_optional gathered passes the check check_record makes of it."""
    return all(values_pass(values, OPTIONAL_TYPES[name], name) for name, values in optional.items())

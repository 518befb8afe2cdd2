"""The checks of a packed copy's extras (packed.py): each record's extra, kept by key set and each key's values
encoded as store_packing.pack_texts keeps them, checked as check_record checks an extra, without making ten
million objects of a fleet's extras.
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import Any

import numpy as np

from ..core.records import Record
from ..core.schema import MAX_ITEMS, SchemaError, value_check
from . import columns as column_checks
from .store_packing import NUMBER_KINDS, decode_values, numbers_at, reference

_TIME_EXTRAS = frozenset(("clock", "flags", "host_ms"))  # the time's parts the store keeps in extra
_PLAIN_EXTRA = frozenset(column_checks.PLAIN_EXTRA) | _TIME_EXTRAS
_CLOCK_KEYS = frozenset(column_checks.OPTIONAL_TYPES) - _PLAIN_EXTRA


class Unusable(ValueError):
    """A packed copy collect does not use (stale, damaged or hostile); the journal is read instead."""


def check_extras(shape: list, extras: list, n: int, area: Any = b"") -> None:
    """Each record's stored extra (journals._stored_extra: an object or null, by key set as pack_texts writes
    it) checked as check_record checks an extra. The keys real runs write are checked per key, a column at once
    (a fleet has ten million extras), their numbers' lists, clocks and binary numbers (``area``, the texts'
    binary part, which their references must cover exactly) as encode_values keeps them; a key set with any other
    key is made into its objects and walked whole."""
    if type(shape) is not list or len(shape) != n or type(extras) is not list:
        raise Unusable(f"extras are not {n} shapes and their key sets")
    if shape and (set(map(type, shape)) != {int} or min(shape) < -1 or max(shape) >= len(extras)):
        raise Unusable("an extra's shape is not one of its key sets")
    members = np.bincount(np.asarray(shape, dtype=np.int64) + 1, minlength=len(extras) + 1)[1:].tolist()
    by_key: dict[str, list] = {}
    seen: set[tuple] = set()
    walk = []
    refs: list[list[int]] = []
    for (keys, values), count in zip(_key_sets(extras), members, strict=True):
        if not _names_ok(keys) or tuple(keys) in seen:
            raise Unusable("a key set of the extras is empty, repeats a key or repeats another")
        seen.add(tuple(keys))
        if not count or type(values) is not list or len(values) != len(keys) or not all(
                _encoded_ok(v, count, refs) for v in values):
            raise Unusable("a key set's values are not one column per key of one value per record")
        if not _PLAIN_EXTRA.issuperset(keys):
            walk.append((keys, values, count))
            continue
        for k, col in zip(keys, values, strict=True):
            by_key.setdefault(k, []).append(col if col.__class__ is list else _Encoded(col, count))
    if not _tiled(refs, len(area) // 8):
        raise Unusable("the binary numbers are not each named once by the extras")
    if walk:
        full = value_check(column_checks.field_type(Record, "extra"), "extra", True)
        try:
            for keys, values, count in walk:
                for row in zip(*(decode_values(v, count, area) for v in values), strict=True):
                    full(dict(zip(keys, row, strict=True)), "extra")
        except (SchemaError, RecursionError):
            raise Unusable("an extra does not pass the record schema") from None
    optional: dict[str, list] = {}
    for k, parts in by_key.items():
        if k == "clock":
            _clock_columns(parts, optional, area)
        else:
            optional[k] = _plain_values(k, parts, area)
    if not column_checks.optional_pass(optional):
        raise Unusable("an extra's values do not pass the record schema")


class _Encoded:
    """One key set's values of a key, encoded (encode_values), and how many records they are for."""

    def __init__(self, encoded: dict, count: int):
        self.encoded, self.count = encoded, count


def _names_ok(keys: Any) -> bool:
    return bool(keys) and len(set(keys)) == len(keys) and set(map(type, keys)) == {str}


def _encoded_ok(values: Any, count: int, refs: list, depth: int = 0) -> bool:
    """Whether a key's values are ``count`` values as encode_values writes them: a list of them, a reference to
    ``count`` binary numbers, a width and the flat list (or reference) of ``count`` lists of that width, or an
    object's keys and each key's values so encoded. ``refs``: each reference's [first item, items], appended."""
    if values.__class__ is list:
        return len(values) == count
    if values.__class__ is not dict or depth > 8:
        return False
    if values.keys() == {"width", "flat"}:
        width, flat = values["width"], values["flat"]
        if type(width) is not int or not 0 <= width <= MAX_ITEMS:
            return False
        return len(flat) == width * count if type(flat) is list else width > 0 and _ref_ok(flat, width * count, refs)
    if values.keys() == {"keys", "columns"}:
        keys, columns = values["keys"], values["columns"]
        return (type(keys) is list and _names_ok(keys) and type(columns) is list and len(columns) == len(keys)
                and all(_encoded_ok(c, count, refs, depth + 1) for c in columns))
    return _ref_ok(values, count, refs)


def _ref_ok(ref: Any, count: int, refs: list) -> bool:
    """Whether ``ref`` is a reference to ``count`` binary numbers (store_packing.Area.ref); kept in ``refs``."""
    form = reference(ref)
    if form is None or form[1][1] != count:
        return False
    refs.append(form[1])
    return True


def _tiled(refs: list[list[int]], items: int) -> bool:
    """Whether the references name every item of the binary part once: back to back from its start to its end."""
    at = 0
    for first, size in sorted(refs):
        if first != at:
            return False
        at += size
    return at == items


def _plain_values(key: str, parts: list, area: Any) -> Any:
    """A plain key's values over its key sets, for optional_pass: binary numbers as their arrays
    (column_checks.Arrays), a list of numbers' lists kept flat where the key holds such lists
    (column_checks.Flat), anything else encoded made into its values."""
    plain = [p for p in parts if p.__class__ is list]
    encoded = [p for p in parts if p.__class__ is _Encoded]
    refs = [p for p in encoded if p.encoded.keys() <= NUMBER_KINDS.keys()]
    encoded = [p for p in encoded if not p.encoded.keys() <= NUMBER_KINDS.keys()]
    flat = []
    if column_checks.OPTIONAL_TYPES[key] in (list[float], list[str]):
        flat = [p for p in encoded if "flat" in p.encoded]
        encoded = [p for p in encoded if "flat" not in p.encoded]
    plain += [decode_values(p.encoded, p.count, area) for p in encoded]
    values: Any = list(itertools.chain.from_iterable(plain)) if len(plain) != 1 else plain[0]
    if flat:
        values = column_checks.Flat(values, [(p.encoded["width"], _items(p.encoded["flat"], area)) for p in flat])
    if refs:
        values = column_checks.Arrays(values, [numbers_at(p.encoded, area) for p in refs])
    return values


def _items(flat: Any, area: Any) -> Any:
    """A flat list's items: the list, or the array its reference names."""
    return flat if flat.__class__ is list else numbers_at(flat, area)


def _clock_columns(parts: list, optional: dict[str, list], area: Any) -> None:
    """The clocks' values by clock key into ``optional``: from clocks kept as objects (or null), and from
    clocks kept by key (encode_values)."""
    subparts: dict[str, list] = {}
    for p in parts:
        if p.__class__ is _Encoded and "keys" in p.encoded:
            if not _CLOCK_KEYS.issuperset(p.encoded["keys"]):
                raise Unusable("an extra's clock is not the clock a timer writes")
            for k, col in zip(p.encoded["keys"], p.encoded["columns"], strict=True):
                subparts.setdefault(k, []).append(col if col.__class__ is list else _Encoded(col, p.count))
            continue
        clocks = [c for c in (p if p.__class__ is list else decode_values(p.encoded, p.count, area))
                  if c is not None]
        if not clocks:
            continue
        if set(map(type, clocks)) != {dict} or not all(ks <= _CLOCK_KEYS for ks in set(map(frozenset, clocks))):
            raise Unusable("an extra's clock is not the clock a timer writes")
        for k in _CLOCK_KEYS:
            subparts.setdefault(k, []).append(_column(clocks, k))
    for k in _CLOCK_KEYS:
        optional[k] = _plain_values(k, subparts.get(k, []), area)


def _key_sets(extras: list) -> list[tuple]:
    if set(map(type, extras)) - {list} or set(map(len, extras)) - {2} or set(type(e[0]) for e in extras) - {list}:
        raise Unusable("the extras are not key sets with their values")
    return list(map(tuple, extras))


_MISSING = object()


def _column(dicts: list[dict], key: str) -> list:
    """The values of ``key`` in the dicts that hold it (one C loop each way)."""
    col = list(map(dict.get, dicts, itertools.repeat(key), itertools.repeat(_MISSING)))
    return list(filter(functools.partial(operator.is_not, _MISSING), col))

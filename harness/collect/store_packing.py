"""How a run's records become store rows, and back: the column order, the packed ``run_records`` row of a run
(numbers as float64 columns and texts by column as JSON, both compressed; samples concatenated), and the samples'
blobs.

A packed row is one SQLite value per column group instead of one row per record: binding 29 parameters per
record cost more than parsing it, and a 10^7-record collect has to fit two cores.
"""

from __future__ import annotations

import collections
import itertools
import json
import operator
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.schema import RULES
from .store_schema import REBUILD, StoreError

try:  # packing a run's texts is on collect's hot path; the standard library is the fallback
    import orjson as _orjson

    dumps_texts, loads_texts = _orjson.dumps, _orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    def dumps_texts(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    loads_texts = json.loads


_LITTLE = sys.byteorder == "little" and array("d").itemsize == 8
_PACKERS: dict[int, Any] = {}  # struct packers of n little-endian float64, by n

RECORD_COLUMNS = ("run", "combo", "status", "reason", "device", "median_ms", "iqr_ms", "min_ms", "n", "timer",
                  "mode", "samples", "workspace_bytes", "max_abs", "rel_l2", "max_norm_err", "nan", "inf",
                  "unwritten", "precision_class", "hash", "hash_algo", "repeats", "repeat_equal",
                  "fresh_handle_equal", "distinct_outputs", "chosen_algo", "explanation", "extra")
# how run_records packs RECORD_COLUMNS[2:]: numbers as float64 columns, texts by column (pack_texts), samples as float64
NUMBER_COLUMNS = ("median_ms", "iqr_ms", "min_ms", "n", "workspace_bytes", "max_abs", "rel_l2", "max_norm_err",
                  "nan", "inf", "unwritten", "repeats", "repeat_equal", "fresh_handle_equal", "distinct_outputs")
INTEGER_COLUMNS = frozenset(("n", "workspace_bytes", "nan", "inf", "unwritten", "repeats", "repeat_equal",
                             "fresh_handle_equal", "distinct_outputs"))
TEXT_COLUMNS = ("status", "reason", "device", "timer", "mode", "precision_class", "hash", "hash_algo",
                "chosen_algo", "explanation", "extra")
# a run's record rows column by column, each column by its name (a row is a plain tuple in this order: the parsers
# build millions of them; a run's columns are named once)
RecordColumns = collections.namedtuple("RecordColumns", RECORD_COLUMNS[2:])
_POS = {c: i for i, c in enumerate(RECORD_COLUMNS[2:])}
_NUM_POS = [_POS[c] for c in NUMBER_COLUMNS]
_TXT_POS = [_POS[c] for c in TEXT_COLUMNS]
_SAMPLES_POS = _POS["samples"]
COMBO_COLUMNS = ("key", "case_id", "backend", "direction", "algo", "math", "dtype", "layout", "settings", "kind")
RANKING_COLUMNS = ("run", "case_id", "direction", "dtype", "layout", "math", "source", "rank", "algo", "status",
                   "time_ms", "memory_bytes", "determinism", "math_reported")
RUN_COLUMNS = ("run_id", "machine", "image", "image_id", "started", "night", "suite_revision", "hardware",
               "gpu_model", "sm", "source", "origin", "digest", "complete", "n_records", "n_ok", "n_rankings",
               "counts", "fingerprint", "options", "end_info")


class UnpackableRecord(ValueError):
    """A record value the store cannot keep (text where a number belongs); collect refuses the run."""


@dataclass
class ParsedRun:
    """A run as ``collect`` hands it to the store: run facts, combo definitions and row tuples ready to insert."""

    run: dict[str, Any]  # RUN_COLUMNS
    combos: list[tuple]  # (key, case, backend, direction, algo, math, dtype, layout, settings_json, kind) per record
    records: list[tuple]  # RECORD_COLUMNS without run and combo (filled in by the store); empty where packed
    rankings: list[tuple]  # RANKING_COLUMNS without run
    vectors: dict[str, np.ndarray]  # ok, median, norm_err, hash (per record, in record order), chosen names
    # a run read from its packed copy (packed.py): pack_records' (numbers, texts, sample_counts, samples), checked
    packed: tuple[bytes, bytes, bytes, bytes] | None = None


def pack_texts(columns: Sequence[Sequence]) -> bytes:
    """A run's texts (its TEXT_COLUMNS) as the store keeps them: by column, zlib level 1 (text_columns reads them
    back). ``columns`` holds each text column but the extra, ``shape`` each record's extra as the index of
    its keys in ``extras`` (-1 for none), and ``extras`` per key set its keys and, per key, the values of the
    records of that set in record order. A fleet's ten million extras share a few key sets: by column they are
    read as lists and checked per key with no gathering (packed.py), where objects cost a parse and a walk each;
    a key's values are encoded by encode_values, its numbers kept as binary (join_texts). Uncompressed, the
    texts were 62 % of a fleet's store (docs/harness.md)."""
    cols = list(columns)
    shapes: dict[tuple, int] = {}
    members: list[list[dict]] = []
    ids = []
    for e in cols[-1]:
        if not e:
            ids.append(-1)
            continue
        keys = tuple(e)
        sid = shapes.get(keys)
        if sid is None:
            sid = shapes[keys] = len(members)
            members.append([])
        members[sid].append(e)
        ids.append(sid)
    area = Area()
    extras = [[keys, [encode_values(list(map(operator.itemgetter(k), group)), area) for k in keys]]
              for keys, group in zip(shapes, members, strict=True)]
    obj = {"columns": cols[:-1], "shape": ids, "extras": extras}
    try:
        plain = dumps_texts(obj)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits (an asv track value); read back as
        plain = json.dumps(obj, separators=(",", ":")).encode()  # the nearest float, as a journal's is
    return zlib.compress(join_texts(plain, area.bytes()), 1)


# The texts' binary part (join_texts): a key's numbers, all floats or all integers, as little-endian float64 or
# int64 instead of JSON text. A fleet's extras are about ten numbers a record; as JSON each was parsed into an
# object and checked one by one, as binary they are checked by numpy (packed_extras.py).
BINARY = b"\0BIN"
NUMBER_KINDS = {"f8": "<f8", "i8": "<i8"}


class Area:
    """The binary part being written: encode_values hands it a key's numbers and writes the reference it returns,
    {"f8" or "i8": [first item, items]}, items counted in 8-byte units from the part's start."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.items = 0

    def ref(self, numbers: list) -> dict | None:
        """The reference of ``numbers`` written here, or None where they are not all floats or all 64-bit
        integers (they stay JSON then, which keeps every value's type)."""
        kinds = set(map(type, numbers))
        if kinds == {float}:
            kind = "f8"
        elif kinds == {int} and -(1 << 63) <= min(numbers) and max(numbers) < 1 << 63:
            kind = "i8"
        else:
            return None
        self.parts.append(np.array(numbers, dtype=NUMBER_KINDS[kind]).tobytes())
        at, self.items = self.items, self.items + len(numbers)
        return {kind: [at, len(numbers)]}

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def join_texts(plain: bytes, area: bytes) -> bytes:
    """The texts' JSON and their binary part as one: the JSON alone where there is no binary part (as every store
    of an earlier layout kept it), else BINARY, the part's length (4 bytes, little-endian), the part, the
    JSON."""
    if not area:
        return plain
    return b"".join((BINARY, len(area).to_bytes(4, "little"), area, plain))


def split_texts(plain: bytes) -> tuple[Any, Any]:
    """(the JSON, the binary part: a view) of join_texts' bytes; ValueError where the part does not fit."""
    if not plain.startswith(BINARY):
        return plain, b""
    end = 8 + int.from_bytes(plain[4:8], "little")
    if end > len(plain) or (end - 8) % 8:
        raise ValueError("the texts' binary part does not fit them")
    return plain[end:], memoryview(plain)[8:end]


def reference(ref: Any) -> tuple[str, list[int]] | None:
    """(kind, [first item, items]) where ``ref`` is in the form Area.ref writes, else None."""
    if ref.__class__ is not dict or len(ref) != 1:
        return None
    kind, where = next(iter(ref.items()))
    if (kind not in NUMBER_KINDS or where.__class__ is not list or len(where) != 2
            or set(map(type, where)) != {int} or min(where) < 0):
        return None
    return kind, where


def numbers_at(ref: dict, area: Any) -> np.ndarray:
    """The numbers an Area reference names (ValueError where it names none, or names more than the area holds)."""
    form = reference(ref)
    if form is None:
        raise ValueError("not a reference to binary numbers")
    kind, (first, items) = form
    return np.frombuffer(area, dtype=NUMBER_KINDS[kind], count=items, offset=8 * first)


def encode_values(values: list, area: Area | None = None) -> Any:
    """A key's values (of one key set's records) as pack_texts keeps them: where every value is an object with
    the same keys in the same order, ``{"keys", "columns"}`` (each key's values encoded again); where every value
    is a list of numbers of one length, ``{"width", "flat"}`` (the lists' items as one list); with ``area``,
    numbers all floats or all integers (a key's values, a flat list's items) as their reference there
    (Area.ref); else the values themselves (a list). A fleet's ten million clocks and replica medians are then a
    few runs of binary numbers instead of 40 million small objects: the parse of a run's texts 1.3-2.0 -> 0.75 us
    a record by key (docs/harness.md), and binary numbers are checked by numpy."""
    first = values[0] if values else None
    if first.__class__ is dict and first:
        keys = tuple(first)
        if all(v.__class__ is dict and tuple(v) == keys for v in values):
            return {"keys": list(keys),
                    "columns": [encode_values(list(map(operator.itemgetter(k), values)), area) for k in keys]}
    elif first.__class__ is list:
        width = len(first)
        if all(v.__class__ is list and len(v) == width for v in values):
            flat = list(itertools.chain.from_iterable(values))
            if set(map(type, flat)) <= RULES.number_types:  # never a bool: True is not a number here
                return {"width": width, "flat": (area is not None and flat and area.ref(flat)) or flat}
    elif area is not None and (first.__class__ is float or first.__class__ is int):
        return area.ref(values) or values
    return values


def decode_values(encoded: Any, count: int, area: Any = b"") -> list:
    """The ``count`` values encode_values encoded (``area``: the binary part its references name)."""
    if encoded.__class__ is list:
        return encoded
    if "flat" in encoded:
        width, flat = encoded["width"], encoded["flat"]
        if not width:
            return [[] for _ in range(count)]
        if flat.__class__ is dict:
            flat = numbers_at(flat, area).tolist()
        return [flat[at:at + width] for at in range(0, width * count, width)]
    if "columns" not in encoded:
        return numbers_at(encoded, area).tolist()
    columns = [decode_values(c, count, area) for c in encoded["columns"]]
    return list(map(dict, map(zip, itertools.repeat(encoded["keys"]), zip(*columns, strict=True))))


def unpack_texts(blob: bytes) -> tuple[Any, Any]:
    """A run's texts from the store, parsed, and their binary part (join_texts): compressed (pack_texts), or
    plain JSON (the earliest stores). text_columns gives their columns whatever their layout."""
    text, area = split_texts(blob if blob[:1] in b"[{" else zlib.decompress(blob))
    return loads_texts(text), area


def text_columns(blob: bytes, n: int) -> list[list]:
    """The TEXT_COLUMNS of a run's ``n`` records (extras as objects, None for none) from its stored texts: by
    column (pack_texts), or, in stores of an earlier layout, a row per record with each extra an object or
    (earlier still) the object's JSON text."""
    texts, area = unpack_texts(blob)
    if type(texts) is list:
        cols = [list(c) for c in zip(*texts, strict=True)] if texts else [[] for _ in TEXT_COLUMNS]
        cols[-1] = [e if e.__class__ is not str else json.loads(e) if e else None for e in cols[-1]]
        return cols
    return [*map(list, texts["columns"]), extra_objects(texts["shape"], texts["extras"], n, area)]


def extra_objects(shape: list[int], extras: list, n: int, area: Any = b"") -> list[dict | None]:
    """Each record's extra (an object, or None) from pack_texts' ``shape`` and ``extras``; ``area``: the binary
    part their references name."""
    out: list[dict | None] = [None] * n
    if not extras:
        return out
    ids = np.asarray(shape, dtype=np.int64)
    for sid, (keys, values) in enumerate(extras):
        where = np.flatnonzero(ids == sid).tolist()
        columns = [decode_values(v, len(where), area) for v in values]
        dicts = map(dict, map(zip, itertools.repeat(keys), zip(*columns, strict=True)))
        for at, d in zip(where, dicts, strict=True):
            out[at] = d
    return out


def pack_numbers(numbers: np.ndarray) -> bytes:
    """NUMBER_COLUMNS x n float64, as the store keeps them: zlib level 1, a third of their size (counts, flags and
    nulls repeat), where that is smaller; else as they are. Half a fleet's store was these numbers, and writing
    the store costs about 5 CPU-s a GiB on a 2-core VM (SQLite's log and checkpoint; docs/harness.md)."""
    raw = numbers.astype("<f8").tobytes()
    packed = zlib.compress(raw, 1)
    return packed if len(packed) < len(raw) else raw


def numbers_array(blob: bytes, n: int) -> np.ndarray:
    """NUMBER_COLUMNS x n float64 from a run's stored numbers (pack_numbers): as they are where they are 8 x 15 x n
    bytes (as pack_numbers left them, and in every store of an earlier layout), else inflated."""
    size = 8 * len(NUMBER_COLUMNS) * n
    if len(blob) != size:
        try:
            blob = zlib.decompress(blob)
        except zlib.error:
            blob = b""
        if len(blob) != size:
            raise StoreError(f"a run's numbers are not {len(NUMBER_COLUMNS)} per record: the store is damaged; "
                             f"{REBUILD}")
    return np.frombuffer(blob, dtype="<f8").reshape(len(NUMBER_COLUMNS), n)


def samples_blob(samples: Sequence[float] | None) -> bytes | None:
    """Samples as float64: float32 (older stores) overflows above 3.4e38 and rounds a 2x change
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


def floats(blob: bytes, n: int) -> np.ndarray:
    """``n`` floats from a blob written as float64 (now) or float32 (older stores), as float64."""
    width = len(blob) // n if n else 8
    if width not in (4, 8) or len(blob) != width * n:
        raise StoreError(f"a float column holds {len(blob)} bytes for {n} values: the store is damaged; "
                         f"{REBUILD}")
    return np.frombuffer(blob, dtype="<f8" if width == 8 else "<f4").astype(np.float64)


def pack_records(combo_ids: list[int], rows: list[tuple]) -> tuple:
    """(n, combo, numbers, texts, sample_counts, samples): the run_records row of one run's record rows."""
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
    texts = pack_texts([cols[i] for i in _TXT_POS])
    blobs = cols[_SAMPLES_POS]
    counts = np.array([len(b) if b else 0 for b in blobs], dtype="<i4") // 8
    return (n, np.asarray(combo_ids, dtype="<i4").tobytes(), pack_numbers(numbers), texts,
            counts.tobytes(), b"".join(b for b in blobs if b))


def samples_array(blob: bytes | None) -> np.ndarray:
    """One record's samples blob (samples_blob) as float64."""
    if not blob:
        return np.empty(0, dtype=np.float64)
    return np.frombuffer(blob, dtype="<f8").copy()


def packed_records(combo_ids: list[int], parsed: ParsedRun) -> tuple:
    """A parsed run's records as run_records holds them (pack_records' tuple), its combinations given by id: the
    host's packed copy where it shipped one (checked against its journal by packed.py), packed here otherwise."""
    if parsed.packed is not None:
        return (len(combo_ids), np.asarray(combo_ids, dtype="<i4").tobytes(), *parsed.packed)
    return pack_records(combo_ids, parsed.records)


def copy_replaces(run: dict[str, Any], held: tuple[str, int] | None, replace: bool = False) -> bool:
    """Whether this copy of a run is kept over the copy held of it (``held``: its digest and record count, None
    where none is held): not where it is the same content; a partial copy (fewer records) is refused unless
    ``replace``; a grown journal (a resumed run) replaces the copy held. The one rule of collect and of runs read
    with no store (runread.RunsRead), so that a gate on a results tree and a report of its store judge one run."""
    if held is None:
        return True
    digest, n_records = held
    if digest == run["digest"]:
        return False
    if run["n_records"] < n_records and not replace:
        raise UnpackableRecord(f"run {run['run_id']} of {run['machine']} is stored with {n_records} records; "
                               f"this copy has {run['n_records']}: a partial copy does not replace a run "
                               "(collect --replace does)")
    return True

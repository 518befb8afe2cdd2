"""The store's rows as both parsers (journals.py, asv_results.py) build them: a record's combination row (its
key, identity fields, settings as JSON and kind), the order of a record's fields in its row, the output hash as
the int64 the store's vectors keep, and a run's night.

A combination's key is core.records.record_key's with the record's kind (Identity.key): a record of another kind
than a measurement (autotune, crosscheck, repro) never overwrites the measurement of the same combination.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.records import record_key


def settings_json(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def combo_row(identity: tuple[str, ...], settings: dict[str, Any], kind: str) -> tuple:
    """(key, case, backend, direction, algo, math, dtype, layout, settings_json, kind): store_packing.ParsedRun's combo."""
    return (record_key(*identity, settings, kind), *identity, settings_json(settings), kind)


def night(started: str, labelled: str | None = None) -> str:
    """The night a run belongs to: the night its job labelled it with (run.json ``night``, checked by
    check_run_header), else the date its start was stamped with."""
    return labelled or started[:10]


def hash64(h: str | None) -> int:
    """An output hash as a signed 64-bit integer (its first 16 hex digits; other text hashed to 8 bytes)."""
    if not h:
        return 0
    try:
        v = int(h[:16], 16)
    except ValueError:
        v = int.from_bytes(hashlib.blake2b(h.encode(), digest_size=8).digest(), "big")
    return v - (1 << 64) if v >= 1 << 63 else v


def hash64s(hashes: Sequence[str | None]) -> np.ndarray:
    """hash64 of each hash (int64; 0 for none), ten million a fleet: where every hash there is text of 16 hex
    digits or more, in one pass, their first 16 digits read as big-endian 64-bit words (fromhex skips only
    whitespace, and only between bytes: 8 bytes a hash means every digit was one); else one at a time."""
    present = np.fromiter(map(bool, hashes), dtype=bool, count=len(hashes))
    some = [h for h in hashes if h]
    try:
        if min(map(len, some), default=16) >= 16:
            words = bytes.fromhex("".join([h[:16] for h in some]))
            if len(words) == 8 * len(some):
                out = np.zeros(len(hashes), dtype=np.int64)
                out[present] = np.frombuffer(words, dtype=">u8").astype("<u8").view(np.int64)
                return out
    except (ValueError, TypeError):
        pass
    return np.array([hash64(h) for h in hashes], dtype=np.int64)


# record fields in the order of the store's records row (store_packing.RECORD_COLUMNS)
TIME_FIELDS = ("median_ms", "iqr_ms", "min_ms", "n", "timer", "mode", "samples_ms")
ACC_FIELDS = ("max_abs", "rel_l2", "max_norm_err", "nan", "inf", "unwritten", "precision_class")
DET_FIELDS = ("hash", "hash_algo", "repeats", "repeat_equal", "fresh_handle_equal", "distinct_outputs")
TOP_FIELDS = ("status", "reason", "device", "workspace_bytes", "chosen_algo", "explanation", "extra")

"""A run read straight from its directory (or tarball) into the Records a store would return for it, with no store:
what ``convbench upgrade`` judges its two fresh runs on. The same discovery, checks and refusals as ``collect``
(ingest.parse_item), the same decoding as ``Store.records`` (store_reads.unpack_records).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.records import Record
from .discovery import Refused, discover
from .ingest import parse_item
from .store_packing import ParsedRun, pack_records
from .store_reads import unpack_records


@dataclass
class PackedRun:
    """One run as the store keeps it: its row (RUN_COLUMNS), its combinations by id (their place in the run:
    (COMBO_COLUMNS values, settings)) and its packed records (n, combination ids, numbers, texts, sample counts,
    samples), the parsed lines let go."""

    run: dict[str, Any]
    combos: dict[int, tuple[tuple, dict[str, Any]]]
    packed: tuple

    def records(self, *, with_samples: bool = True) -> list[Record]:
        n, combo_ids, *blobs = self.packed
        return unpack_records(n, np.frombuffer(combo_ids, "<i4").tolist(), self.combos, *blobs,
                              with_samples=with_samples)


def pack_run(parsed: ParsedRun) -> PackedRun:
    """A parsed run packed as the store packs it (UnpackableRecord where the store would refuse it)."""
    ids: dict[str, int] = {}
    for c in parsed.combos:
        ids.setdefault(c[0], len(ids))
    combo_ids = [ids[c[0]] for c in parsed.combos]
    combos = {ids[c[0]]: (c, json.loads(c[8])) for c in parsed.combos}
    if parsed.packed is not None:  # the host's packed copy, checked against its journal (packed.py)
        packed = (len(combo_ids), np.asarray(combo_ids, dtype="<i4").tobytes(), *parsed.packed)
    else:
        packed = pack_records(combo_ids, parsed.records)
    return PackedRun(parsed.run, combos, packed)


def records_of(parsed: ParsedRun) -> list[Record]:
    """A parsed run's records as ``Store.records`` gives them (a combination's id is its place in the run)."""
    return pack_run(parsed).records()


def read_run(path: str | Path) -> tuple[dict[str, Any], list[Record]]:
    """(the run's row, its records) of the one run at ``path``; Refused, in collect's words, where it is not one
    readable run."""
    runs = []
    for item in discover([path]):
        if isinstance(item, Refused):
            raise item
        runs += [p for p in parse_item(None, item).parsed if p is not None]
    if len(runs) != 1:
        raise Refused(f"{path}: holds {len(runs)} runs, not one")
    return runs[0].run, records_of(runs[0])

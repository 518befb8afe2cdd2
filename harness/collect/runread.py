"""A run read straight from its directory (or tarball) into the records a store would return for it, with no store:
what ``convbench upgrade`` judges its two fresh runs on. The same discovery, checks and refusals as ``collect``
(ingest.parse_item), the same decoding as ``Store.records`` (store_reads.unpack_records).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .discovery import Refused, discover
from .ingest import parse_item
from .store_packing import ParsedRun, pack_records
from .store_reads import listed_settings, unpack_records


def records_of(parsed: ParsedRun) -> list[dict[str, Any]]:
    """A parsed run's records as ``Store.records`` gives them (a combination's id is its place in the run)."""
    ids: dict[str, int] = {}
    for c in parsed.combos:
        ids.setdefault(c[0], len(ids))
    combo_ids = [ids[c[0]] for c in parsed.combos]
    combos = {ids[c[0]]: (c, listed_settings(c[8], c[9])) for c in parsed.combos}
    if parsed.packed is not None:  # the host's packed copy, checked against its journal (packed.py)
        n, numbers, texts, counts, samples = len(combo_ids), *parsed.packed
    else:
        n, combo_blob, numbers, texts, counts, samples = pack_records(combo_ids, parsed.records)
        combo_ids = np.frombuffer(combo_blob, "<i4").tolist()
    return unpack_records(n, combo_ids, combos, numbers, texts, counts, samples)


def read_run(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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

"""Runs read straight from their directories, tarballs or results trees into the Records a store would return for
them, with no store: what ``convbench upgrade`` judges its two fresh runs on and what ``convbench compare`` reads of
a path operand. The same discovery, checks and refusals as ``collect`` (ingest.parse_item, and a copy of a run the
store would pass over or refuse, likewise), the same decoding as ``Store.records`` (store_reads.unpack_records).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.intake import storable
from ..core.records import Record
from .discovery import Archive, Refused, discover
from .ingest import parse_item, refusing
from .store_packing import ParsedRun, UnpackableRecord, copy_replaces, packed_records
from .store_reads import RUN_ROW_COLUMNS, unpack_records


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
    return PackedRun(parsed.run, combos, packed_records(combo_ids, parsed))


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


class RunsRead:
    """Every run under some paths (a run directory, a tarball, a results tree of a fleet), read as a store holding
    only them would give them (``runs``, ``run_json``, ``records``, as Store's), with no store: a run found twice
    is the copy a collect keeps (the same content once, a grown journal replacing its earlier copy), and what
    collect refuses is refused in the same line (``refused``)."""

    def __init__(self, paths: list[str | Path]):
        self.refused: list[str] = []
        self._held: dict[int, PackedRun] = {}  # by id, given as SQLite gives a row its id (the largest + 1)
        self._ids: dict[tuple[str, str], int] = {}  # (run_id, machine) -> id: one copy of a run
        self._top = 0  # the largest id held
        for item in discover(paths):
            results = [("refused", str(item))] if isinstance(item, Refused) else refusing(item, lambda i=item: self._add(i))
            self.refused += [" ".join(str(r[1]).splitlines()) for r in results if r[0] == "refused"]

    def _add(self, item: Any) -> list[tuple]:
        """One discovered item's runs held as collect stores them (store_writes._ingest_one): all of them or, where
        one is refused, none."""
        prepared = parse_item(None, item)
        staged: dict[tuple[str, str], PackedRun] = {}
        try:
            for parsed in prepared.parsed:
                run = parsed.run
                ident = (run["run_id"], run["machine"])
                old = staged.get(ident) or (self._held[self._ids[ident]] if ident in self._ids else None)
                if copy_replaces(run, (old.run["digest"], old.run["n_records"]) if old is not None else None):
                    staged[ident] = pack_run(parsed)
        except UnpackableRecord as exc:
            origin = item.origin if isinstance(item, Archive) else prepared.parsed[0].run["origin"]
            raise Refused(f"{origin}: {exc}") from None
        for ident, packed in staged.items():
            if ident in self._ids:
                gone = self._ids.pop(ident)
                del self._held[gone]
                if gone == self._top:
                    self._top = max(self._held, default=0)
            self._top = self._ids[ident] = self._top + 1
            self._held[self._top] = packed
        return []

    def runs(self) -> list[dict[str, Any]]:
        """Run rows as Store.runs gives them, oldest first."""
        rows = [{"id": pk, **{c: p.run[c] for c in RUN_ROW_COLUMNS}, "counts": json.loads(p.run["counts"])}
                for pk, p in self._held.items()]
        for r in rows:
            r["origin"] = storable(r["origin"])
        return sorted(rows, key=lambda r: (r["started"], r["id"]))

    def run_json(self, run_pk: int) -> dict[str, Any]:
        run = self._held[run_pk].run
        return {"fingerprint": json.loads(run["fingerprint"]), "options": json.loads(run["options"]),
                "end": json.loads(run["end_info"]) if run["end_info"] else None}

    def records(self, run_pk: int, *, with_samples: bool = True) -> list[Record]:
        return self._held[run_pk].records(with_samples=with_samples)

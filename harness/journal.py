"""The run directory: an append-only journal of records, flushed as they are made.

Layout (the unit that ``collect`` ingests, alone or tarred):

    <results>/<machine>/<run_id>/run.json       who/where/what: fingerprint, options, suite revision
    <results>/<machine>/<run_id>/records.jsonl  one record or ranking per line, appended and fsynced
    <results>/<machine>/<run_id>/end.json       written last: clocks after, counts; absent if interrupted
    <results>/<machine>/<run_id>/slices.jsonl   where each slice's time went (harness/slicetime.py; not ingested)

A run is identified by (machine, image, start time, suite revision) and its directory is created with
O_EXCL semantics, so two runs never write into each other. Resuming reopens a run directory and skips
every combination whose record is already in the journal.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from . import fingerprint as fpmod
from .records import SCHEMA_VERSION, Ranking, Record, dumps

RUN_FILE = "run.json"
JOURNAL_FILE = "records.jsonl"
END_FILE = "end.json"


def suite_revision() -> str:
    """CONVBENCH_REVISION (set in images), else the checkout's git HEAD or the wheel's baked revision."""
    from .resources import revision

    return os.environ.get("CONVBENCH_REVISION") or revision()


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Journal:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.meta = json.loads((self.path / RUN_FILE).read_text())
        self._file = None

    @classmethod
    def create(cls, results: Path, fingerprint: dict[str, Any], options: dict[str, Any],
               run_id: str | None = None) -> Journal:
        machine = os.environ.get("CONVBENCH_MACHINE") or fpmod.machine_name(fingerprint)
        revision = suite_revision()
        started = dt.datetime.now(dt.timezone.utc)
        image = fingerprint.get("image") or "native"
        safe_image = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in image)
        base = Path(results) / machine
        base.mkdir(parents=True, exist_ok=True)
        if run_id:
            path = base / run_id
            path.mkdir(exist_ok=False)  # never write into another run
        else:
            stem = f"{started:%Y%m%dT%H%M%SZ}-{safe_image}-{revision}-{os.getpid()}"
            for n in range(1, 1000):  # two runs started in the same second by one process get a suffix
                run_id = stem if n == 1 else f"{stem}-{n}"
                path = base / run_id
                try:
                    path.mkdir(exist_ok=False)
                    break
                except FileExistsError:
                    continue
        meta = {"schema": SCHEMA_VERSION, "run_id": run_id, "machine": machine, "image": image,
                "started": started.isoformat(), "suite_revision": revision, "fingerprint": fingerprint,
                "options": options}
        _write_atomic(path / RUN_FILE, meta)
        return cls(path)

    def done_keys(self) -> set[str]:
        """Keys of the measurement records already journaled; a torn last line (killed mid-write) is ignored."""
        keys: set[str] = set()
        for rec in iter_journal(self.path / JOURNAL_FILE):
            if rec.get("kind") == "measurement":
                keys.add(Record.from_dict(rec).key())
        return keys

    def append(self, rec: Record | Ranking) -> None:
        if self._file is None:
            _drop_torn_tail(self.path / JOURNAL_FILE)
            self._file = open(self.path / JOURNAL_FILE, "a")
        self._file.write(dumps(rec) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def finish(self, summary: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        summary = dict(summary, finished=dt.datetime.now(dt.timezone.utc).isoformat())
        _write_atomic(self.path / END_FILE, summary)


def _drop_torn_tail(path: Path) -> None:
    """A record cut short by a kill has no newline; appending after it would corrupt the next record too."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def iter_journal(path: Path):
    """Parsed lines of a journal; stops at a torn (unterminated) last line rather than failing."""
    if not Path(path).exists():
        return
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            yield json.loads(raw)


def find_runs(results: Path) -> list[Path]:
    return sorted(p.parent for p in Path(results).glob(f"*/*/{RUN_FILE}"))

"""``collect``: every run found under the given paths put in the store, in parallel parser processes.

Finding is discovery.py's, parsing journals.py's and asv_results.py's; this module decides per run whether the
store already holds it (its digest), hands the parsed rows to the store under one lock, and turns whatever goes
wrong with one source into a one-line refusal while the other sources are still collected. Collecting the same
source twice is a no-op; a resumed run whose journal grew replaces its earlier copy.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import children, heap, intake
from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..core.progress import Progress
from ..core.rundir import END_FILE, JOURNAL_GZ_FILE, RUN_FILE, journal_file
from . import fresh
from .asv_results import parse_asv
from .discovery import Archive, AsvFile, RawRun, Refused, count, discover, read_optional
from .journals import journal_digest, journal_identity, parse_journal, plain
from .packed import Unusable, decode, dir_raw
from .store import DEFAULT_STORE, Checkpointer, ParsedRun, Store, StoreError, UnpackableRecord


@dataclass
class Summary:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    records: int = 0
    refused: list[str] = field(default_factory=list)
    packed: int = 0  # runs read from their packed copies (packed.py) instead of their journals
    passed_over: list[str] = field(default_factory=list)  # packed copies not used (the journal was read), one line each

    def line(self) -> str:
        text = (f"{self.added} runs added, {self.updated} updated, {self.unchanged} unchanged, "
                f"{self.records} records read, {len(self.refused)} refused")
        if self.packed:
            text += f"; {self.packed} runs read from their packed copies"
        if self.passed_over:
            text += f"; {len(self.passed_over)} packed copies passed over for their journals"
        return text

    def account(self, outcome: str, value: Any, note: str | None = None) -> None:
        """One result of ingest_item: ('refused', line) or (outcome, records, how the run was read)."""
        if outcome == "refused":
            self.refused.append(" ".join(str(value).splitlines()))  # one line, whatever the input held
            return
        setattr(self, outcome, getattr(self, outcome) + 1)
        self.records += value
        if note == PACKED:
            self.packed += 1
        elif note:
            self.passed_over.append(" ".join(note.splitlines()))


PACKED = "packed"  # ingest_item's note for a run read from its packed copy


def _dir_head(path: Path) -> tuple[RawRun, tuple] | None:
    """A run directory's run.json and end.json, its journal's size and its identity (journal_identity), read
    once: enough to tell a run the store holds unchanged without reading its journal, and reused to read it when
    it is not. None where anything is unusual (unreadable, not a regular file, another schema): the full path then
    reads, checks and refuses as usual."""
    try:
        run_json = intake.read_file(path / RUN_FILE, intake.MAX_META_BYTES)
        name = journal_file(path)
        st = os.lstat(path / name) if os.path.lexists(path / name) else None
        if st is not None and not stat.S_ISREG(st.st_mode):
            return None
        head = RawRun(str(path), run_json, b"", read_optional(path / END_FILE),
                      journal_size=st.st_size if st is not None else 0, gz=name == JOURNAL_GZ_FILE)
        return head, journal_identity(head)
    except (OSError, intake.Hostile, Refused):
        return None


def _parse(store: Store | None, item: Any, room: list[int] | None = None) -> tuple[ParsedRun | None, str | None]:
    """One discovered run parsed for the store (None when the store already holds it unchanged; without a store,
    always parsed), and how it was read: PACKED, why its packed copy was passed over, or None. ``room``: what is
    left of an archive's budget of bytes in memory (intake.MAX_ARCHIVE_BYTES), which a journal inflated spends."""
    identity = None
    if isinstance(item, tuple) and item[0] == "dir":
        head = _dir_head(item[1])
        if head is not None and store is not None and store.digest_of(*head[1][1:]) == journal_digest(head[0]):
            return None, None  # a nightly re-collect reads no journal it already holds
        try:
            item = dir_raw(item[1], head[0] if head is not None else None)
        except (OSError, intake.Hostile) as exc:
            raise Refused(f"{item[1]}: cannot read ({exc})") from None
        if head is not None and item.run_json is head[0].run_json:
            identity = head[1]
    if isinstance(item, RawRun):
        meta, run_id, machine = identity or journal_identity(item)
        if store is not None and store.digest_of(run_id, machine) == journal_digest(item):
            return None, None
        note = f"{item.origin}: packed copy passed over, its journal read ({item.packed_note})" \
            if item.packed_note else None
        if item.packed is not None:  # the host's packed copy: used where it provably is the journal's (packed.py)
            try:
                return decode(item, meta), PACKED
            except Unusable as exc:
                note = f"{item.origin}: packed copy passed over, its journal read ({exc})"
        if item.gz and room is not None:  # an archive's runs are held together, so their lines count against it
            lines = plain(item, max(0, min(intake.MAX_JOURNAL_BYTES, room[0])))
            room[0] -= len(lines.records) - len(item.records)
            item = lines
        return parse_journal(item, meta), note
    if isinstance(item, AsvFile):
        parsed = parse_asv(item)
        if store is not None and store.digest_of(parsed.run["run_id"], parsed.run["machine"]) == parsed.run["digest"]:
            return None, None
        return parsed, None
    raise TypeError(item)


@dataclass
class Prepared:
    """One discovered item parsed for the store, not written yet: its runs (None where the store holds one
    unchanged) and how each was read."""

    item: Any
    parsed: list[ParsedRun | None]
    notes: list[str | None]


def parse_item(store: Store | None, item: Any) -> Prepared:
    """The parsing half of ingest_item (no lock needed): Refused with one line where the item is refused."""
    members = item.items if isinstance(item, Archive) else [item]
    room = [intake.MAX_ARCHIVE_BYTES - sum(len(m.records) + len(m.packed or b"") for m in members
                                           if isinstance(m, RawRun))] if isinstance(item, Archive) else None
    parsed = []
    for member in members:
        try:
            parsed.append(_parse(store, member, room))
        except Refused as exc:
            if isinstance(item, Archive):
                raise Refused(f"{exc} (the tarball {item.origin} is refused as a whole)") from None
            raise
    return Prepared(item, [p for p, _ in parsed], [note for _, note in parsed])


def write_item(store: Store, prepared: Prepared, replace: bool = False, part: bool = False) -> list[tuple]:
    """The writing half of ingest_item (under the writers' lock): the item's runs in one transaction, or, with
    ``part``, inside the caller's transaction (Store.ingest_part: stored or rolled back alone)."""
    new = [p for p in prepared.parsed if p is not None]
    try:
        outcomes = iter((store.ingest_part if part else store.ingest_all)(new, replace=replace))
    except UnpackableRecord as exc:
        item = prepared.item
        origin = item.origin if isinstance(item, Archive) else new[0].run["origin"]
        raise Refused(f"{origin}: {exc}") from None
    return [("unchanged", 0, None) if p is None else (next(outcomes), p.run["n_records"], note)
            for p, note in zip(prepared.parsed, prepared.notes, strict=True)]


def ingest_item(store: Store, item: Any, lock: Any = None, replace: bool = False) -> list[tuple]:
    """Collect one discovered item (a run, or every run of an archive): [('added'|'updated'|'unchanged', records,
    how it was read)] (Summary.account).

    Parsing happens outside ``lock`` and writing inside it, so parallel parsers overlap while one writes.
    """
    prepared = parse_item(store, item)
    with lock if lock is not None else contextlib.nullcontext():
        return write_item(store, prepared, replace)


_worker_store: Store | None = None
_worker_lock = None
_worker_replace = False


def _worker_init(path: str, lock, replace: bool, building: bool) -> None:
    global _worker_store, _worker_lock, _worker_replace
    heap.use_bulk_thresholds()
    heap.keep_freed()
    children.quiet_worker()  # the pool's terminate ends a parser at once; Ctrl-C is the parent's (fresh.py's too)
    _worker_store = Store(path, verify=False, building=building)
    if not building:
        _worker_store.db.execute("PRAGMA wal_autocheckpoint = 0")  # collect's Checkpointer copies the log instead
    _worker_lock, _worker_replace = lock, replace


def _origin(item: Any) -> str:
    return str(item[1]) if isinstance(item, tuple) else getattr(item, "origin", repr(item)[:200])


def refusing(item: Any, step: Callable[[], Any]) -> Any:
    """``step()`` of one item; whatever goes wrong with it (even a bug exposed by hostile input) refuses it, not
    the collect (nor a compare reading paths, runread.RunsRead): [('refused', line)]. A store that cannot be written (full disk, read-only mount, damage) ends the
    collect: StoreError."""
    try:
        return step()
    except Refused as exc:
        return [("refused", str(exc))]
    except StoreError:
        raise
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - one bad file must not end a nightly collect
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        return [("refused", f"{_origin(item)}: cannot be collected ({type(exc).__name__}: {text})")]


def _ingest_or_refuse(store: Store, item: Any, lock: Any = None, replace: bool = False) -> list[tuple]:
    """One item, refused in one line rather than failing the collect (refusing)."""
    return refusing(item, lambda: ingest_item(store, item, lock, replace))


BATCH = 8  # items a parser process takes at once
# records a parser holds parsed before it writes them, in one transaction: a fleet's batch of 8 runs of 548
# records each is one commit instead of 8 (the store's writes 340 -> 240 us a run, measured alone), while a
# real night's run (22,000 records, tens of MiB parsed) is written as soon as it is parsed, as before
WRITE_RECORDS = 4096


def _records(pending: list[tuple[int, Prepared]]) -> int:
    return sum(p.run["n_records"] for _, prepared in pending for p in prepared.parsed if p is not None)


def _worker(items: list[Any]) -> list[tuple]:
    """A batch of items in a parser process. Each is parsed; once WRITE_RECORDS records are parsed and the
    writers' lock is free, they are written; while the other parser holds it, this one parses the next item
    instead of waiting (two parsers that waited left a quarter of two cores idle: a fleet collect took 44.6 s
    with --jobs 2 and 39.5 s with --jobs 3; batches of 8 against 1: 48.9-52.3 against 62.0-63.9 s;
    docs/harness.md). What is still parsed and unwritten at the batch's end waits for the lock then. The items
    written together share one transaction, each under a savepoint of its own: an item refused rolls back
    alone, as ingest_item's own transaction would."""
    store, lock = _worker_store, _worker_lock
    results: list[Any] = [None] * len(items)
    pending: list[tuple[int, Prepared]] = []

    def write_pending() -> None:
        with store.transaction():
            for i, prepared in pending:
                results[i] = refusing(prepared.item, lambda prepared=prepared: write_item(
                    store, prepared, _worker_replace, part=True))
        pending.clear()

    for i, item in enumerate(items):
        prepared = refusing(item, lambda item=item: parse_item(store, item))
        if isinstance(prepared, list):  # refused
            results[i] = prepared
        else:
            pending.append((i, prepared))
        if pending and _records(pending) >= WRITE_RECORDS and lock.acquire(block=False):
            try:
                write_pending()
            finally:
                lock.release()
    if pending:
        with lock:
            write_pending()
    return [r for result in results for r in result]


def _batches(items: Iterator[Any]) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def check_store_path(store_path: str | Path) -> None:
    """A store collect may write: a file name, not empty, not SQLite's in-memory name (which keeps nothing)."""
    text = str(store_path)
    if not text.strip() or text == ":memory:" or text.startswith("file:"):
        raise StoreError(f"--store {text!r} names no file; give the store's file name (default {DEFAULT_STORE})")


def collect(store_path: str | Path, paths: list[str | Path], jobs: int = 1,
            progress: Callable[[str], None] | None = None, replace: bool = False, meter: bool = False) -> Summary:
    """Collect every run under ``paths`` into the store at ``store_path``; ``jobs`` parser processes.
    ``replace``: a copy of a stored run with fewer records replaces it (otherwise it is refused).
    A store that does not exist yet is built beside its path and appears whole (fresh.py); one that another
    collect made meanwhile is then collected into as it is, from the sources again.
    ``meter``: show i/N, elapsed and ETA on stderr (core/progress.py)."""
    check_store_path(store_path)
    bar = Progress("collect", count(paths), unit="items") if meter else None
    if bar is not None and progress is not None:
        progress = bar.around(progress)
    try:
        summary = Summary()
        if fresh.build(store_path,
                       lambda hidden: _collect_into(summary, hidden, paths, jobs, progress, replace, True, bar)):
            return summary
        summary = Summary()
        if bar is not None:
            bar.update(0)
        _collect_into(summary, str(store_path), paths, jobs, progress, replace, False, bar)
        return summary
    finally:
        if bar is not None:
            bar.finish()


def _collect_into(summary: Summary, store_path: str, paths: list[str | Path], jobs: int,
                  progress: Callable[[str], None] | None, replace: bool, building: bool,
                  bar: Progress | None = None) -> None:
    """collect() into one store file: ``building`` a new one no reader sees yet (fresh.py), or one in place."""
    guard = threading.Lock()  # with --jobs, refusals come from the pool's feeder thread and from results

    def account(results: list[tuple]) -> None:
        with guard:
            for result in results:
                summary.account(*result)
                if progress and result[0] == "refused":
                    progress(f"refused: {summary.refused[-1]}")
                elif progress and len(result) > 2 and result[2] not in (None, PACKED):
                    progress(summary.passed_over[-1])

    items = discover(paths)
    if jobs <= 1:
        store = Store(store_path, building=building)
        heap.keep_freed()  # as a parser process does: this process does nothing else until it ends
        try:
            with heap.bulk_allocations():
                for item in items:
                    if bar is not None:
                        bar.step()
                    if isinstance(item, Refused):
                        account([("refused", str(item))])
                        continue
                    account(_ingest_or_refuse(store, item, replace=replace))
        finally:
            store.close()
        return
    Store(store_path, building=building).close()  # create (and check) the schema once, before the workers open it
    ctx = mp.get_context("fork")
    lock = ctx.Lock()
    stop = fresh.building_stop() if building else None
    if stop is not None:
        stop.hold()  # a SIGTERM while the pool starts is raised once the pool is in the with-block that ends it
    forking = children.held().__enter__()  # the CLI's SIGTERM or SIGHUP waits until the pool is in the with-block
    try:
        pool = children.start_pool(ctx, jobs, _worker_init, (store_path, lock, replace, building))
    except BaseException:
        forking.release()
        raise
    # a store in place is written through its log, which the Checkpointer copies into it; a new one has none
    with (contextlib.nullcontext() if building else Checkpointer(store_path), children.ending(pool)):
        forking.release()
        if stop is not None:
            stop.arm()

        def feed():
            for item in items:
                if isinstance(item, Refused):
                    account([("refused", str(item))])
                else:
                    yield item
        try:
            for results in children.results(pool, pool.imap_unordered(_worker, _batches(feed()))):
                account(results)
                if bar is not None:
                    bar.step(BATCH)  # a batch's items (the last may hold fewer: the bar stops at its total)
        except children.ChildDied as exc:  # the pool ends here; a store being built is removed (fresh.build)
            raise UserError(f"{exc}; runs stored before it stay stored, run collect again for the rest"
                            if not building else f"{exc}; nothing was stored", EXIT_ENVIRONMENT) from None
    if not building:
        Store(store_path, verify=False).close()  # checkpoint the write-ahead log into the store file


def read_runs_into(store: Store, paths: list[str | Path]) -> Summary:
    """Collect into an already open (e.g. in-memory) store (the scripts' studies of committed runs). The same
    checks as ``collect``: what collect refuses, this refuses in the same line."""
    summary = Summary()
    for item in discover(paths):
        results = [("refused", str(item))] if isinstance(item, Refused) else _ingest_or_refuse(store, item)
        for result in results:
            summary.account(*result)
    return summary

"""Where runs are found: run directories, results trees, asv results trees and tarballs, read as bytes.

Sources are read, never written: a tarball is streamed in memory, not unpacked, and every file goes through
core/intake.py's limits (regular files only, sizes capped). What cannot be read becomes a ``Refused`` with a
one-line reason instead of ending the search; the parsers (journals.py, asv_results.py) take the bytes from here.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import intake
from ..core.rundir import END_FILE, JOURNAL_FILE, JOURNAL_GZ_FILE, PACKED_FILE, RUN_FILE, journal_file

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
_RUN_FILES = (RUN_FILE, JOURNAL_FILE, JOURNAL_GZ_FILE, END_FILE, PACKED_FILE)
_JOURNALS = (JOURNAL_FILE, JOURNAL_GZ_FILE, PACKED_FILE)  # members under the journal's size limit


class Refused(Exception):
    """A run that is not collected; the message says which and why, in one line."""


@dataclass
class RawRun:
    """One journal run as bytes (from a directory or a tarball), with its packed copy where there is one
    (packed.py) and why a copy found was not kept (``packed_note``). ``journal_size``: the journal's size on disk
    where its bytes are not read (``records`` empty: collect's check for a run it holds unchanged). ``gz``:
    ``records`` holds the finished run's records.jsonl.gz as it is stored, not its lines (journals.plain gives
    them; a packed copy is checked against these bytes, so a collect that uses the copy never inflates them)."""

    origin: str
    run_json: bytes
    records: bytes
    end_json: bytes | None
    packed: bytes | None = None
    journal_size: int | None = None
    packed_note: str | None = None
    gz: bool = False
    digest: str | None = None  # journals.journal_digest of the run as found, kept when its journal is inflated


@dataclass
class AsvFile:
    """One asv results file with its machine.json and the suite's benchmarks.json (if found)."""

    origin: str
    data: bytes
    machine_json: bytes | None
    benchmarks_json: bytes | None


@dataclass
class Archive:
    """Every run of one tarball: stored whole, in one transaction, or refused whole."""

    origin: str
    items: list[Any]  # RawRun and AsvFile


def sha1_16(data: bytes | None) -> str:
    """The short hash a run's digest is made of (a missing file hashes as empty)."""
    return hashlib.sha1(data or b"").hexdigest()[:16]


def read_optional(path: Path, limit: int = intake.MAX_META_BYTES) -> bytes | None:
    return intake.read_optional(path, limit)  # regular files only: never a symlink, FIFO or device


def dir_run(path: Path) -> RawRun:
    name = journal_file(path)
    return RawRun(str(path), intake.read_file(path / RUN_FILE, intake.MAX_META_BYTES),
                  read_optional(path / name, intake.MAX_JOURNAL_BYTES) or b"", read_optional(path / END_FILE),
                  gz=name == JOURNAL_GZ_FILE)


def _asv_benchmarks_json(machine_dir: Path) -> bytes | None:
    return read_optional(machine_dir.parent / "benchmarks.json")


def _walk_dir(root: Path) -> Iterator[Any]:
    if (root / RUN_FILE).exists():
        yield ("dir", root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        d = Path(dirpath)
        if RUN_FILE in filenames:
            dirnames[:] = []
            yield ("dir", d)
        elif "machine.json" in filenames:
            try:
                mj = intake.read_file(d / "machine.json", intake.MAX_META_BYTES)
                bj = _asv_benchmarks_json(d)
            except intake.Hostile as exc:
                yield Refused(f"{d}: {exc}")
                continue
            for name in sorted(filenames):
                if name.endswith(".json") and name not in ("machine.json", "benchmarks.json"):
                    try:
                        yield AsvFile(str(d / name), intake.read_file(d / name, intake.MAX_META_BYTES), mj, bj)
                    except intake.Hostile as exc:
                        yield Refused(f"{d / name}: {exc}")
        else:
            for name in sorted(filenames):
                if name.endswith(TAR_SUFFIXES):
                    try:
                        yield from _walk_tar(d / name)
                    except Refused as exc:  # one bad tarball in a tree costs that tarball
                        yield exc


def _walk_tar(path: Path) -> Iterator[Any]:
    """The runs of a tarball as one ``Archive``, streamed (no extraction); nothing if any member is refused."""
    groups: dict[str, dict[str, bytes]] = {}
    jsons: dict[str, bytes] = {}
    items: list[Any] = []
    st = os.lstat(path) if os.path.lexists(path) else None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path}: not a regular file (a symlink, FIFO or device is not read)")
    kept = 0  # decompressed bytes held in memory: the members' limits alone let 200 of them exhaust it
    copies: set[str] = set()  # packed copies seen (kept or not)
    doubled: set[str] = set()  # runs whose copy the tarball holds twice: neither is used, the journal is read
    try:
        with tarfile.open(path, "r|*") as tar:
            for n, member in enumerate(tar):
                if n >= intake.MAX_TAR_MEMBERS:
                    raise intake.Hostile(f"more than {intake.MAX_TAR_MEMBERS} members")
                parent, _, base = member.name.rpartition("/")
                intake.check_member(member, intake.MAX_JOURNAL_BYTES if base in _JOURNALS
                                    else intake.MAX_META_BYTES)
                if not member.isfile() or not (base in _RUN_FILES or base.endswith(".json")):
                    continue
                if base == PACKED_FILE:  # a cache (collect/packed.py): kept only within what the budget leaves
                    if member.name in copies or parent in doubled:  # appended twice: a cache, not the record
                        doubled.add(parent)
                        kept -= len(groups.get(parent, {}).pop(PACKED_FILE, b""))
                        continue
                    copies.add(member.name)
                    if kept + member.size > intake.MAX_ARCHIVE_BYTES:
                        continue
                kept += member.size
                if kept > intake.MAX_ARCHIVE_BYTES:  # the journals need the memory first: drop the copies kept
                    kept -= sum(len(g.pop(PACKED_FILE, b"")) for g in groups.values())
                if kept > intake.MAX_ARCHIVE_BYTES:
                    raise intake.Hostile(f"members to read add up to over {intake.MAX_ARCHIVE_BYTES >> 20} MiB "
                                         "(a decompression bomb, or split the tarball)")
                f = tar.extractfile(member)
                data = f.read() if f else b""
                if base in _RUN_FILES:
                    g = groups.setdefault(parent, {})
                    if base in g:
                        raise intake.Hostile(f"{member.name[:120]!r} appears twice")
                    g[base] = data
                elif base.endswith(".json"):
                    jsons[member.name] = data
    except intake.Hostile as exc:
        raise Refused(f"{path}: refused as a whole: {exc}") from None
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:  # zlib/lzma errors are ValueErrors too
        raise Refused(f"{path}: not a readable tarball: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    for parent, g in groups.items():
        if RUN_FILE in g and JOURNAL_FILE not in g and JOURNAL_GZ_FILE not in g:
            raise Refused(f"{path}:{parent}: run.json without records.jsonl (a truncated tarball?); "
                          "the tarball is refused as a whole")
        if RUN_FILE in g:
            gz = JOURNAL_FILE not in g  # the plain journal, where both are there (as in a run directory)
            items.append(RawRun(f"{path}:{parent}", g[RUN_FILE], g[JOURNAL_GZ_FILE if gz else JOURNAL_FILE],
                                g.get(END_FILE), g.get(PACKED_FILE), packed_note="the tarball holds it twice"
                                if parent in doubled else None, gz=gz))
    for name, data in sorted(jsons.items()):
        parent, _, base = name.rpartition("/")
        machine = jsons.get(f"{parent}/machine.json")
        if base in ("machine.json", "benchmarks.json") or machine is None:
            continue
        bench = jsons.get(f"{parent.rpartition('/')[0]}/benchmarks.json")
        items.append(AsvFile(f"{path}:{name}", data, machine, bench))
    if items:
        yield Archive(str(path), items)


def count(paths: list[str | Path]) -> int:
    """About how many items discover() yields (run directories, asv result files, tarballs), from names only:
    the total of collect's progress, read before the files themselves are."""
    n = 0
    for p in paths:
        path = Path(p)
        if not path.is_dir():
            n += 1
            continue
        if (path / RUN_FILE).exists():
            n += 1
            continue
        for _, dirnames, filenames in os.walk(path):
            if RUN_FILE in filenames:
                dirnames[:] = []
                n += 1
            elif "machine.json" in filenames:
                n += sum(name.endswith(".json") and name not in ("machine.json", "benchmarks.json")
                         for name in filenames)
            else:
                n += sum(name.endswith(TAR_SUFFIXES) for name in filenames)
    return n


def discover(paths: list[str | Path]) -> Iterator[Any]:
    """Every run found under ``paths``; an unusable path yields a ``Refused``."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = False
            for item in _walk_dir(path):
                found = True
                yield item
            if not found:
                yield Refused(f"{path}: no run directories, asv results or tarballs found")
        elif path.is_file() and path.name.endswith(TAR_SUFFIXES):
            try:
                yield from _walk_tar(path)
            except Refused as exc:
                yield exc
        elif path.exists():
            yield Refused(f"{path}: not a run directory, results tree, asv results tree or tarball")
        else:
            yield Refused(f"{path}: does not exist")


"""The refusal of untrusted input (the error contract is core/errors.py).

Reading untrusted result files: what ``collect`` may open, how much it may read, and what JSON it accepts.
Result files arrive from a fleet of machines and images, so a file can be anything: a symlink to /dev/zero,
a FIFO that never ends, a tarball member named ``../../etc/x``, a gzip bomb, JSON nested a million deep, or
NaN where a time belongs. Every check here raises ``Hostile`` with a one-line reason; collect turns that into
a refusal of the run or tarball, and goes on with the others.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

# --- Untrusted input: what collect may open, how much it may read, and what JSON it accepts ---

MAX_META_BYTES = 16 << 20  # run.json, end.json, asv machine/benchmarks files: a few KiB in practice
# one run's records.jsonl. collect holds about 4.5x a journal of small records while it parses it (their rows),
# so 256 MiB is what keeps collect and compare under 2 GiB (scripts/measure_memory.py); a real night's journal is
# 20-35 MiB (22,000 records with their samples)
MAX_JOURNAL_BYTES = int(os.environ.get("CONVBENCH_MAX_JOURNAL_BYTES", 256 << 20))
# records of one run: a report and compare hold a run's combinations (394,000 in a 256 MiB journal of small records
# took each past 2 GiB), so a run holds as many as an asv results file may (a real night: 22,000)
MAX_RUN_RECORDS = 100_000
# decompressed bytes collect holds from one tarball (the runs of an archive are stored together, so in memory)
MAX_ARCHIVE_BYTES = int(os.environ.get("CONVBENCH_MAX_ARCHIVE_BYTES", 256 << 20))
MAX_LINE_BYTES = 16 << 20  # one record (a record with 10^5 timing samples is about 1 MiB)
MAX_TAR_MEMBERS = 100_000


class Hostile(ValueError):
    """Input that collect must not read or cannot trust; the message is one line."""


def read_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file, not followed through a symlink, refused if larger than ``limit``."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Hostile(f"{path.name}: cannot read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise Hostile(f"{path.name} is a symbolic link; collect reads only regular files")
    if not stat.S_ISREG(st.st_mode):
        raise Hostile(f"{path.name} is not a regular file ({_kind(st.st_mode)})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Hostile(f"{path.name}: cannot open ({exc.strerror})") from None
    try:  # os.read, not a file object: half the cost of reading a collect's 55,000 small files (docs/history.md)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between lstat and open
            raise Hostile(f"{path.name} is not a regular file")
        # sized by the file, not the limit: read(limit + 1) allocates (and maps) the whole limit, 4 GiB per journal;
        # read on until the end of the file (it may have grown since fstat) or one byte past the limit
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(limit + 1 - total, max(st.st_size + 1 - total, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > limit:
        raise Hostile(f"{path.name} is larger than {limit >> 20} MiB")
    return data


def read_optional(path: Path, limit: int) -> bytes | None:
    """As read_file, or None when nothing (not even a dangling link) is there."""
    return read_file(path, limit) if os.path.lexists(path) else None


def gunzip(data: bytes, what: str, limit: int | None = None) -> bytes:
    """The bytes of one whole gzip stream (a finished run's journal), at most ``limit`` of them (by default
    MAX_JOURNAL_BYTES): a bomb, a cut or damaged stream, or anything after its end is Hostile in one line, found
    before more than ``limit`` is held."""
    limit = MAX_JOURNAL_BYTES if limit is None else limit
    inflate = zlib.decompressobj(wbits=31)
    try:
        plain = inflate.decompress(data, limit + 1)
    except zlib.error as exc:
        raise Hostile(f"{what} is not a whole gzip stream ({exc})") from None
    if len(plain) > limit or inflate.unconsumed_tail:
        bound = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit:,} bytes"
        raise Hostile(f"{what} inflates to more than {bound} (a decompression bomb?)")
    if not inflate.eof or inflate.unused_data:
        raise Hostile(f"{what} is not one whole gzip stream (cut short, or more after its end)")
    return plain


def gzip_bytes(plain: bytes) -> bytes:
    """``plain`` as one gzip stream at zlib's fastest level: a fleet journal 7.4x smaller in 2.5 ms, a real
    night's 10x (docs/performance.md)."""
    deflate = zlib.compressobj(1, zlib.DEFLATED, 31)
    return deflate.compress(plain) + deflate.flush()


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def check_member(member: tarfile.TarInfo, limit: int) -> None:
    """A tarball member collect may read: a regular file under a relative, UTF-8 name, of sane size."""
    name = member.name
    if "\x00" in name or any(0xDC80 <= ord(ch) <= 0xDCFF for ch in name):
        raise Hostile(f"member name {name.encode('utf-8', 'backslashreplace')[:80]!r} is not UTF-8")
    if any(ord(ch) < 32 for ch in name):
        raise Hostile(f"member name {name[:80]!r} has control characters")
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts:
        raise Hostile(f"member {name[:120]!r} points outside the tarball (absolute or '..')")
    if member.issym() or member.islnk():
        raise Hostile(f"member {name[:120]!r} is a {'symbolic' if member.issym() else 'hard'} link")
    if member.isdev() or member.isfifo():
        raise Hostile(f"member {name[:120]!r} is a device or FIFO")
    if member.isfile() and member.size > limit:
        raise Hostile(f"member {name[:120]!r} is {member.size >> 20} MiB, over the {limit >> 20} MiB limit "
                      "(a decompression bomb or not a convbench run)")


def no_constant(token: str) -> Any:
    raise Hostile(f"{token} where a number belongs (JSON has no NaN or Infinity)")


def finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise Hostile(f"number {text[:40]} overflows a double")
    return value


def loads(data: bytes | str, what: str) -> Any:
    """Strict JSON: UTF-8, finite numbers only, bounded nesting; any failure is a one-line ``Hostile``."""
    if len(data) > MAX_LINE_BYTES and what != "records":
        raise Hostile(f"{what} is larger than {MAX_LINE_BYTES >> 20} MiB")
    try:
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        value = json.loads(data, parse_constant=no_constant, parse_float=finite_float)
    except Hostile as exc:
        raise Hostile(f"{what}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise Hostile(f"{what} is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise Hostile(f"{what} is nested too deeply") from None
    except ValueError as exc:
        raise Hostile(f"{what} is not JSON ({str(exc).splitlines()[0][:120]})") from None
    check_text(value, what)
    return value


def has_control(text: str) -> bool:
    return any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in text)


def check_text(value: Any, what: str, depth: int = 0) -> None:
    """Refuse strings that cannot be stored or printed (lone surrogates from \\ud800-style escapes)."""
    if depth > 64:
        raise Hostile(f"{what} is nested too deeply")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Hostile(f"{what} holds a string that is not valid Unicode (a lone surrogate)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(k, what, depth + 1)
            check_text(v, what, depth + 1)
    elif isinstance(value, list):
        for v in value:
            check_text(v, what, depth + 1)


def storable(text: str) -> str:
    """``text`` as UTF-8 can hold it: a path's bytes that are not UTF-8 (os.fsdecode's lone surrogates, which
    SQLite and JSON refuse) written as their backslash escapes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def sha256_file(path: Path) -> str:
    """sha256 of a file (a wheel for an image's lock, a downloaded model), read in 1 MiB chunks so files of any
    size hash in constant memory: such a file is trusted only once this matches its pinned digest. Only a regular
    file is read (a link to one is followed): a FIFO would never end and /dev/zero never stop, so each is Hostile."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Hostile(f"{Path(path).name}: cannot open ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise Hostile(f"{Path(path).name} is not a regular file ({_kind(mode)})")
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

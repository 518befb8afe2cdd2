"""A run's packed copy (``records.packed``): its records as the store keeps them, written by the host at the end of
the run so that a fleet's collect does not parse ten million journal lines again.

The host packs what collect would store from its own journal (journals.parse_journal, then store_packing's
column groups), so the copy is the journal's store rows, not a second format to keep in step. The journal is the
record and the copy only a cache of it: collect uses a copy only where it provably is its journal's, that is
where the sha256 of the journal's bytes, their line count and the crc32 of the copy's own sections all match
what the copy's header says (one flipped bit, a copy of a shorter or longer journal, one made for another run:
each is passed over), and only as untrusted input: every combination goes through check_record once, every
column through the rule check_record applies to its values (columns.py), each extra's values are checked per
key, and the store keeps what was checked. A copy that is missing, stale, damaged, hostile, of an older version
(without these sums) or unreadable in any way is passed over with a note and the journal read instead: nothing
is lost and the refusal words stay the journal's.

A finished run keeps its journal compressed (records.jsonl.gz, written here with the copy): the header then also
names the gzip file by its size and sha256, which collect checks against the bytes it read, so a collect that uses
the copy reads and hashes 7-10x fewer bytes and never inflates the journal. Where records.jsonl is there (a run
resumed after it was packed, or packed before journals were compressed) it is the journal, checked as above.

Layout: ``CBPACK6``, a JSON header line {journal_bytes, journal_sha256, journal_lines, n, sizes, crc32, and for a
compressed journal gz_bytes, gz_sha256}, then six
sections back to back: the records' combinations (a JSON array per line, in record order), NUMBER_COLUMNS as
float64 (NaN for null; compressed: store_packing.pack_numbers), the texts of TEXT_COLUMNS (by column, the extras
by key set, each key's values encoded, their numbers binary, compressed as the store keeps them: pack_texts), the
samples' counts (int32), the samples (float64) and the rankings (JSON).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..core import intake
from ..core.records import SCHEMA_VERSION, Accuracy, Determinism, Ranking, Record, RecordKind, Timing
from ..core.rundir import (
    END_FILE,
    JOURNAL_FILE,
    JOURNAL_GZ_FILE,
    PACKED_FILE,
    RUN_FILE,
    journal_file,
    sync_dir,
    write_whole,
)
from ..core.schema import MAX_INT, MAX_SAMPLES, SchemaError, check_record
from . import columns as column_checks
from .discovery import RawRun, Refused, dir_run
from .packed_extras import Unusable, check_extras
from .rows import combo_row
from .store_packing import (
    NUMBER_COLUMNS,
    TEXT_COLUMNS,
    ParsedRun,
    dumps_texts,
    loads_texts,
    pack_records,
    split_texts,
)

# 6: the header names its journal by content (sha256, lines) and its sections by their crc32. Copies of versions
# 3 to 5 named their journal by size alone, so a flipped bit or a copy of another journal of that size was
# trusted: they are passed over for their journals, as every older version is
MAGIC = b"CBPACK6\n"
_SECTIONS = ("combos", "numbers", "texts", "sample_counts", "samples", "rankings")
_OWNER = {**{n: Record for n in ("status", "reason", "device", "chosen_algo", "explanation", "workspace_bytes")},
          **{n: Timing for n in ("median_ms", "iqr_ms", "min_ms", "n", "timer", "mode")},
          **{n: Accuracy for n in ("max_abs", "rel_l2", "max_norm_err", "nan", "inf", "unwritten", "precision_class")},
          **{n: Determinism for n in ("hash", "hash_algo", "repeats", "repeat_equal", "fresh_handle_equal",
                                      "distinct_outputs")}}
_COMBO_MEMO: dict[bytes, tuple] = {}  # a combination line -> its checked combo row (a fleet repeats a few thousand)
_MAX_MEMO = 200_000
_SECTION_MEMO: dict[bytes, tuple] = {}  # a run's combinations section -> its rows (a machine's nights repeat it)
_MAX_SECTIONS = 256


# --- writing (the host, at the end of a run) ---

def line_count(data: bytes) -> int:
    """How many newline bytes ``data`` holds: numpy compares them in vector registers, 38 us for a fleet run's
    582 KB journal where bytes.count took 165 us, once per run a collect reads."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 0x0A))


def encode(parsed: ParsedRun, journal: bytes, gz: bytes | None = None) -> bytes:
    """The packed copy of a run parsed from ``journal`` (its records.jsonl bytes); ``gz``: the records.jsonl.gz the
    run keeps them in."""
    n = len(parsed.combos)
    _, _, numbers, texts, counts, samples = pack_records(list(range(n)), parsed.records)
    combos = b"\n".join(dumps_texts(list(c[1:])) for c in parsed.combos)
    rankings = dumps_texts(parsed.rankings)
    sections = (combos, numbers, texts, counts, samples, rankings)
    crc = 0
    for section in sections:
        crc = zlib.crc32(section, crc)
    stored = {} if gz is None else {"gz_bytes": len(gz), "gz_sha256": hashlib.sha256(gz).hexdigest()}
    header = json.dumps({"journal_bytes": len(journal), "journal_sha256": hashlib.sha256(journal).hexdigest(),
                         "journal_lines": line_count(journal), "n": n, "sizes": [len(s) for s in sections],
                         "crc32": crc, **stored})
    return b"".join((MAGIC, header.encode(), b"\n", *sections))


def write_packed(run_dir: Path, compress: bool = True) -> bool:
    """Pack a finished run directory's journal beside it, and keep the journal compressed (records.jsonl.gz, then
    the copy, each written whole and synced before records.jsonl goes; ``compress=False`` packs it as hosts did
    before, beside records.jsonl); False where it cannot be packed, and the run directory is left as it was: a run
    is never failed by its cache, and collect then reads the journal."""
    # imported when a run ends, not when the CLI installs this hook
    from .journals import parse_journal, plain

    run_dir = Path(run_dir)
    target = run_dir / PACKED_FILE
    try:
        raw = dir_run(run_dir)
        lines = plain(raw)
        gz = raw.records if raw.gz else intake.gzip_bytes(lines.records) if compress else None
        data = encode(parse_journal(lines), lines.records, gz)
        if gz is not None and not raw.gz:
            write_whole(run_dir / JOURNAL_GZ_FILE, gz)
        write_whole(target, data)
        if gz is not None and not raw.gz:
            sync_dir(run_dir)  # both renames on the disk before the plain journal goes
            os.unlink(run_dir / JOURNAL_FILE)  # its lines are in the gzip file, synced: one journal again
        return True
    except (OSError, intake.Hostile, Refused, ValueError):
        for name in (PACKED_FILE, JOURNAL_GZ_FILE):  # an older copy would be stale; a gzip file, a half-made one
            try:
                if name == PACKED_FILE or os.path.lexists(run_dir / JOURNAL_FILE):  # never the only journal
                    if os.path.lexists(run_dir / name):
                        os.unlink(run_dir / name)
            except OSError:
                pass
        return False


# --- reading (collect) ---

def dir_raw(path: Path, head: RawRun | None = None) -> RawRun:
    """A run directory's RawRun (discovery.dir_run: run.json, the journal, end.json), with its packed copy where one
    is there: whether the copy is the journal's is decode's to prove, against the journal's bytes. ``head``: its
    run.json and end.json, already read (collect's check for a run it holds unchanged)."""
    try:
        pst = os.lstat(path / PACKED_FILE)
    except OSError:
        return dir_run(path)
    if not stat.S_ISREG(pst.st_mode) or pst.st_size > intake.MAX_JOURNAL_BYTES:
        return dir_run(path)
    try:
        data = intake.read_file(path / PACKED_FILE, intake.MAX_JOURNAL_BYTES)
    except (OSError, intake.Hostile):  # replaced by something else since: the journal decides
        return dir_run(path)
    if head is None:
        head = RawRun(str(path), intake.read_file(path / RUN_FILE, intake.MAX_META_BYTES), b"",
                      intake.read_optional(path / END_FILE, intake.MAX_META_BYTES))
    name = journal_file(path)
    records = intake.read_file(path / name, intake.MAX_JOURNAL_BYTES)
    return RawRun(str(path), head.run_json, records, head.end_json, data, gz=name == JOURNAL_GZ_FILE)


def decode(raw: RawRun, meta: dict[str, Any]) -> ParsedRun:
    """The store rows of a run from its packed copy, checked as the journal's lines would be; Unusable if the copy
    is not the journal's or does not pass. Whatever else goes wrong reading a copy is Unusable too: the copy is a
    cache, and the journal decides (a run is never refused for its copy)."""
    try:
        return _decode(raw, meta)
    except Unusable:
        raise
    except Exception as exc:  # noqa: BLE001 - a hostile copy may find an error no check names; the journal decides
        raise Unusable(f"cannot be read ({type(exc).__name__}: {str(exc)[:120]})") from None


def _decode(raw: RawRun, meta: dict[str, Any]) -> ParsedRun:
    from .journals import run_row

    data = raw.packed or b""
    journal = raw.records
    if not data.startswith(MAGIC):
        raise Unusable("packed by another convbench version (without its journal's sha256)"
                       if data.startswith(b"CBPACK") else "no packed copy header")
    try:
        end = data.index(b"\n", len(MAGIC), len(MAGIC) + 1024)
        head = json.loads(data[len(MAGIC):end])
        n, sizes, crc = head["n"], head["sizes"], head["crc32"]
        if raw.gz:  # the gzip file as it is stored: its size and sha256 (below) name it, its lines are not counted
            if head.get("gz_bytes") != len(journal):
                raise Unusable("its journal changed since it was packed (the gzip file's length differs)")
            lines, journal_bytes = head["journal_lines"], head["journal_bytes"]
            if (type(lines) is not int or type(journal_bytes) is not int or lines < 0
                    or not 0 <= journal_bytes <= intake.MAX_JOURNAL_BYTES):
                raise Unusable("its journal's length or lines are not counts")
        else:
            journal_bytes = len(journal)
            if head["journal_bytes"] != journal_bytes or head["journal_lines"] != line_count(journal):
                raise Unusable("its journal changed since it was packed (length or lines differ)")
        if (type(n) is not int or not 0 < n <= 1 << 26 or type(sizes) is not list or len(sizes) != len(_SECTIONS)
                or not all(type(s) is int and s >= 0 for s in sizes) or end + 1 + sum(sizes) != len(data)):
            raise Unusable("section sizes do not add up")
        if zlib.crc32(memoryview(data)[end + 1:]) != crc:
            raise Unusable("its sections do not match their crc32 (damaged)")
        if n > head["journal_lines"] + 1:
            raise Unusable(f"{n} records from a journal of {head['journal_lines']} lines")
        if head["journal_lines"] > intake.MAX_RUN_RECORDS:  # the journal is read, and refused, instead
            raise Unusable(f"its journal holds over {intake.MAX_RUN_RECORDS:,} lines")
        if hashlib.sha256(journal).hexdigest() != head["gz_sha256" if raw.gz else "journal_sha256"]:
            raise Unusable("its journal's sha256 is not the one it was packed from")
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, Unusable):
            raise
        raise Unusable(f"header: {str(exc)[:120]}") from None
    parts, at = {}, end + 1
    for name, size in zip(_SECTIONS, sizes, strict=True):
        parts[name], at = data[at:at + size], at + size
    combos = _combos(parts["combos"], n)
    texts, cols = _texts(parts["texts"], n, journal_bytes)
    numbers = _numbers(parts["numbers"], n)
    counts, samples = _samples(parts["sample_counts"], parts["samples"], n)
    rankings = _rankings(parts["rankings"])
    if n + len(rankings) > head["journal_lines"] + 1:
        raise Unusable(f"{n} records and {len(rankings)} rankings from a journal of {head['journal_lines']} lines")
    status, hashes, chosen = cols[0], cols[TEXT_COLUMNS.index("hash")], cols[TEXT_COLUMNS.index("chosen_algo")]
    run, vectors = run_row(raw, meta, status, numbers[NUMBER_COLUMNS.index("median_ms")].copy(),
                           numbers[NUMBER_COLUMNS.index("max_norm_err")].copy(), hashes, chosen, len(rankings))
    return ParsedRun(run, combos, [], rankings, vectors,
                     packed=(parts["numbers"], texts, counts, samples))  # the bytes checked, as they are


def _combos(section: bytes, n: int) -> list[tuple]:
    """Each record's combination row, each line checked by check_record once (per process) and its key made as
    the journal path makes it; every key once (the journal path keeps the last of a combination measured twice).
    A machine measures the same combinations night after night: a section seen before gives its rows again."""
    rows = _SECTION_MEMO.get(section)
    if rows is None:
        rows = _combo_rows(section, n)
        if len(_SECTION_MEMO) >= _MAX_SECTIONS:
            _SECTION_MEMO.pop(next(iter(_SECTION_MEMO)))
        _SECTION_MEMO[section] = rows
    if len(rows) != n:
        raise Unusable(f"{len(rows)} combinations for {n} records")
    return list(rows)


def _combo_rows(section: bytes, n: int) -> tuple[tuple, ...]:
    lines = section.split(b"\n")
    if len(lines) != n:
        raise Unusable(f"{len(lines)} combinations for {n} records")
    memo, out = _COMBO_MEMO, []
    for line in lines:
        row = memo.get(line)
        if row is None:
            row = _combo(line)
            if len(memo) < _MAX_MEMO:
                memo[line] = row
        out.append(row)
    if len({c[0] for c in out}) != n:
        raise Unusable("a combination appears twice")
    return tuple(out)


def _combo(line: bytes) -> tuple:
    try:
        v = loads_texts(line)
        if type(v) is not list or len(v) != 9 or not all(type(x) is str for x in v):
            raise Unusable("a combination is not nine texts")
        case, backend, direction, algo, math_, dtype, layout, settings_text, kind = v
        settings = json.loads(settings_text)
        if type(settings) is not dict:
            raise Unusable("a combination's settings are not an object")
        d = {"schema": SCHEMA_VERSION, "kind": kind, "case": case, "backend": backend, "direction": direction,
             "algo": algo, "math": math_, "dtype": dtype, "layout": layout, "settings": settings, "status": "ok"}
        if kind == RecordKind.RANKING:
            raise Unusable("a ranking where a record belongs")
        check_record(d)
        row = combo_row((case, backend, direction, algo, math_, dtype, layout), settings, kind)
    except (SchemaError, ValueError, TypeError, RecursionError) as exc:
        raise Unusable(f"combination: {str(exc)[:120]}") from None
    if row[8] != settings_text:
        raise Unusable("a combination's settings are not in the store's spelling")
    return row


def _texts(section: bytes, n: int, journal_bytes: int) -> tuple[bytes, list]:
    """The texts of TEXT_COLUMNS by column (store_packing.pack_texts), each column checked as check_record checks
    its values; the section, which the store keeps as it is (readers parse these bytes with the parser that
    checked them: they give what was checked), and the columns but the extra."""
    limit = 4 * journal_bytes + (1 << 20)  # texts come from the journal: an escape may triple a character, not more
    inflate = zlib.decompressobj()
    try:
        plain = inflate.decompress(section, limit)
    except zlib.error:
        raise Unusable("texts are not a compressed stream") from None
    if not inflate.eof or inflate.unconsumed_tail or inflate.unused_data:
        raise Unusable("texts are not one whole compressed stream within their bound")
    try:
        text, area = split_texts(plain)
    except ValueError:
        raise Unusable("the texts' binary part does not fit them") from None
    try:
        texts = loads_texts(text)
    except ValueError:
        raise Unusable("texts are not JSON") from None
    if type(texts) is not dict or texts.keys() != {"columns", "shape", "extras"}:
        raise Unusable("texts are not columns, shapes and extras")
    cols, width = texts["columns"], len(TEXT_COLUMNS) - 1
    if (type(cols) is not list or len(cols) != width or set(map(type, cols)) != {list}
            or set(map(len, cols)) != {n}):
        raise Unusable(f"texts are not {width} columns of {n}")
    for name, col in zip(TEXT_COLUMNS, cols, strict=False):
        tp = column_checks.field_type(_OWNER[name], name)
        if not column_checks.values_pass(col, tp if name == "status" else tp | None, name):
            raise Unusable(f"column {name} does not pass the record schema")
    check_extras(texts["shape"], texts["extras"], n, area)
    return section, cols


def _numbers(section: bytes, n: int) -> np.ndarray:
    """NUMBER_COLUMNS (rows) x records, plain or compressed (store_packing.pack_numbers), each column within what
    check_record lets through (null as NaN): never negative, at most 1e300 (a number), MAX_INT (an integer) or 1
    (a flag), and whole where an integer or a flag."""
    size = 8 * len(NUMBER_COLUMNS) * n
    if len(section) != size:  # compressed: one whole stream of exactly the numbers
        inflate = zlib.decompressobj()
        try:
            section = inflate.decompress(section, size + 1)
        except zlib.error:
            raise Unusable("numbers are neither 15 per record nor a compressed stream") from None
        if len(section) != size or not inflate.eof or inflate.unconsumed_tail or inflate.unused_data:
            raise Unusable("numbers are not one compressed stream of 15 per record")
    a = np.frombuffer(section, dtype="<f8").reshape(len(NUMBER_COLUMNS), n)
    top, whole = _number_bounds()
    with np.errstate(invalid="ignore"):  # fmin and fmax pass NaN (null) over; an infinity is out of bounds
        ok = (np.fmin.reduce(a, axis=1, initial=0.0) >= 0) & (np.fmax.reduce(a, axis=1, initial=0.0) <= top)
        w = a[whole]
        ok[whole] &= ((w == np.floor(w)) | np.isnan(w)).all(axis=1)
    if not ok.all():
        raise Unusable(f"column {NUMBER_COLUMNS[int(np.argmin(ok))]} holds a value the record schema refuses")
    return a


@functools.cache
def _number_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Per NUMBER_COLUMNS: the largest value check_record lets through, and whether it must be whole."""
    top, whole = [], []
    for name in NUMBER_COLUMNS:
        tp = column_checks.field_type(_OWNER[name], name)
        base = next(t for t in (bool, int, float) if tp in (t, t | None))
        top.append({bool: 1.0, int: float(MAX_INT), float: 1e300}[base])
        whole.append(base is not float)
    return np.array(top), np.array(whole)


def _samples(counts_section: bytes, samples: bytes, n: int) -> tuple[bytes, bytes]:
    if len(counts_section) != 4 * n:
        raise Unusable("sample counts are not one per record")
    counts = np.frombuffer(counts_section, dtype="<i4")
    if n and (counts.min() < 0 or counts.max() > MAX_SAMPLES):
        raise Unusable("a sample count is out of range")
    if int(counts.sum(dtype=np.int64)) * 8 != len(samples):
        raise Unusable("samples do not match their counts")
    s = np.frombuffer(samples, dtype="<f8")
    if len(s) and not ((s >= 0) & (s <= 1e300)).all():  # NaN fails both
        raise Unusable("a sample is negative, not finite or out of range")
    return counts_section, samples


def _rankings(section: bytes) -> list[tuple]:
    from .journals import RANK_FIELDS

    try:
        rows = loads_texts(section)
    except ValueError:
        raise Unusable("rankings are not JSON") from None
    if type(rows) is not list or (rows and (set(map(type, rows)) != {list}
                                            or set(map(len, rows)) != {len(RANK_FIELDS)})):
        raise Unusable("rankings are not rows of ranking fields")
    rows = list(map(tuple, rows))
    if not column_checks.check_columns(rows, Ranking, RANK_FIELDS):
        raise Unusable("a ranking does not pass the ranking schema")
    return rows

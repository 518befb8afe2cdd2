"""A run's packed copy (collect/packed.py): written at a run's end, read by collect instead of the journal only where
it is the journal's and passes the record schema; the store is the same either way, and a stale, damaged or
hostile copy is passed over for the journal (nothing lost, the journal's words for what is refused)."""

from __future__ import annotations

import datetime as dt
import json
import os
import struct
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fleet_data import fixture_tarballs, record, sweep_cpu_runs, tar_runs, write_run
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness.collect import ingest
from harness.collect import packed as pk
from harness.collect.discovery import Archive, RawRun, discover
from harness.collect.ingest import collect
from harness.collect.journals import journal_identity, parse_journal
from harness.collect.store import Store
from harness.collect.store_packing import (
    NUMBER_COLUMNS,
    TEXT_COLUMNS,
    decode_values,
    join_texts,
    numbers_array,
    numbers_at,
    pack_numbers,
    pack_records,
    pack_texts,
    split_texts,
    text_columns,
)
from harness.core import heap
from harness.core.records import dumps
from harness.run.journal import JOURNAL_FILE, PACKED_FILE

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _dump(db: Path) -> list:
    """Every table of a store, the runs' origins (where each was read from) aside."""
    with Store(db) as s:
        names = [r[1] for r in s.db.execute("PRAGMA table_info(runs)")]
        runs = [tuple(None if n == "origin" else v for n, v in zip(names, r, strict=True))
                for r in s.db.execute("SELECT * FROM runs ORDER BY 1")]
        return [runs] + [list(s.db.execute(f"SELECT * FROM {t} ORDER BY 1, 2"))
                         for t in ("combos", "run_records", "rankings", "run_vectors")]


def _same(decoded, parsed) -> None:
    assert decoded.run == parsed.run
    assert decoded.combos == parsed.combos
    assert decoded.rankings == parsed.rankings
    for k, v in parsed.vectors.items():
        if isinstance(v, np.ndarray):
            assert np.array_equal(decoded.vectors[k], v, equal_nan=True), k
        else:
            assert decoded.vectors[k] == v, k
    assert decoded.packed == pack_records(list(range(len(parsed.records))), parsed.records)[2:]


def test_every_fixture_run_packs_to_what_its_journal_stores():
    runs = 0
    with heap.bulk_allocations():  # as a collect's parser reads
        for tarball in fixture_tarballs():
            for item in discover([tarball]):
                assert isinstance(item, Archive), item
                for raw in item.items:
                    if not isinstance(raw, RawRun):
                        continue
                    meta = journal_identity(raw)[0]
                    parsed = parse_journal(raw, meta)
                    copy = RawRun(raw.origin, raw.run_json, raw.records, raw.end_json,
                                  pk.encode(parsed, raw.records))
                    _same(pk.decode(copy, meta), parsed)
                    runs += 1
    assert runs >= 10


def _no_journal_parse(monkeypatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("collect parsed a journal whose packed copy it should have read")
    monkeypatch.setattr(ingest, "parse_journal", refuse)


def test_a_real_run_packs_itself_and_collect_reads_the_copy(tmp_path, monkeypatch):
    runs = sweep_cpu_runs(tmp_path / "results", n=2)
    assert all((r / PACKED_FILE).is_file() for r in runs)  # Journal.finish wrote them
    bare = tmp_path / "bare"
    for r in runs:  # the same runs as hosts before the packed copy wrote them
        dest = bare / r.parent.name / r.name
        dest.mkdir(parents=True)
        for f in r.iterdir():
            if f.name != PACKED_FILE:
                dest.joinpath(f.name).write_bytes(f.read_bytes())
    journal_only = collect(tmp_path / "journal.sqlite", [bare])
    with monkeypatch.context() as m:
        _no_journal_parse(m)
        from_copies = collect(tmp_path / "packed.sqlite", [tmp_path / "results"])
        tarball = tar_runs(runs, tmp_path / "runs.tar.gz")
        from_tar = collect(tmp_path / "tar.sqlite", [tarball])
    assert from_copies.added == journal_only.added == from_tar.added == 2 and not from_copies.refused
    assert from_copies.records == journal_only.records > 0
    assert (from_copies.packed, from_tar.packed, journal_only.packed) == (2, 2, 0)
    assert "2 runs read from their packed copies" in from_copies.line()
    assert _dump(tmp_path / "packed.sqlite") == _dump(tmp_path / "journal.sqlite") == _dump(tmp_path / "tar.sqlite")
    # the digest is the journal's: the same runs from the other source change nothing
    again = collect(tmp_path / "packed.sqlite", [bare])
    assert again.unchanged == 2 and again.added == again.updated == 0


def _run(tmp_path: Path, n: int = 3, machine: str = "m1", compress: bool = False) -> Path:
    """A finished run and its copy; by default packed beside its plain journal (as hosts before compressed
    journals wrote them, and as a run reopened after packing has it), the journal the tests below change."""
    recs = [record(f"c{i}", samples=[1.0 + i, 1.5 + i], hash_=f"{i:032x}",
                   clock={"sm_mhz_min": 1980, "sm_mhz_max": 1980, "slowdowns": []}) for i in range(n)]
    for i, r in enumerate(recs):
        r.extra = {"wall_ms": 2.0 + i, "placement_medians_ms": [1.0 + i, 1.1 + i]}
    d = write_run(tmp_path / "results", machine, "img", T0, recs)
    assert pk.write_packed(d, compress)
    return d


def test_a_journal_that_grew_or_changed_since_its_copy_is_read(tmp_path):
    d = _run(tmp_path)
    with (d / JOURNAL_FILE).open("a") as f:  # a resumed run appended after the copy was made
        f.write(dumps(record("late")) + "\n")
    s = collect(tmp_path / "a.sqlite", [d])
    assert s.records == 4 and s.packed == 0 and "its journal changed since it was packed" in s.passed_over[0]
    d2 = _run(tmp_path / "two")
    journal = bytearray((d2 / JOURNAL_FILE).read_bytes())
    at = journal.index(b'"c1"') + 2
    journal[at] = ord("7")  # c1 -> c7: the same size, the same lines, another record
    (d2 / JOURNAL_FILE).write_bytes(bytes(journal))
    s = collect(tmp_path / "b.sqlite", [d2])
    assert s.packed == 0 and "sha256 is not the one it was packed from" in s.passed_over[0]
    with Store(tmp_path / "b.sqlite") as st:
        assert {r[0] for r in st.db.execute("SELECT case_id FROM combos")} == {"c0", "c7", "c2"}


def _sections(data: bytes) -> tuple[dict, dict]:
    end = data.index(b"\n", len(pk.MAGIC))
    head = json.loads(data[len(pk.MAGIC):end])
    parts, at = {}, end + 1
    for name, size in zip(pk._SECTIONS, head["sizes"], strict=True):
        parts[name], at = data[at:at + size], at + size
    return head, parts


def _assemble(head: dict, parts: dict) -> bytes:
    """A copy of ``parts``, its sizes and crc32 made to fit them (a copy damaged with its sums recomputed: what only
    the checks of its contents can refuse)."""
    sections = [parts[name] for name in pk._SECTIONS]
    head = dict(head, sizes=[len(s) for s in sections], crc32=zlib.crc32(b"".join(sections)))
    return b"".join((pk.MAGIC, json.dumps(head).encode(), b"\n", *sections))


def _n(parts: dict) -> int:
    return len(parts["sample_counts"]) // 4


def _rows(parts: dict) -> list:
    return [list(r) for r in zip(*text_columns(parts["texts"], _n(parts)), strict=True)]


def _set_rows(parts: dict, rows: list) -> None:
    parts["texts"] = pack_texts(list(zip(*rows, strict=True)))


def _texts(parts: dict, row: int, column: str, value) -> None:
    rows = _rows(parts)
    rows[row][TEXT_COLUMNS.index(column)] = value
    _set_rows(parts, rows)


def _layout(parts: dict, edit) -> None:
    """The texts as pack_texts lays them out ({columns, shape, extras}), their binary numbers as JSON lists (a
    layout a copy may hold), changed in place by ``edit``."""
    obj = _plain_layout(parts["texts"])
    edit(obj)
    parts["texts"] = zlib.compress(json.dumps(obj, separators=(",", ":")).encode(), 1)


def _plain_layout(blob: bytes) -> dict:
    """A texts blob's layout with every reference to its binary part replaced by the numbers it names."""
    text, area = split_texts(zlib.decompress(blob))
    obj = json.loads(text)

    def plain(v: Any) -> Any:
        if type(v) is list:
            return v
        if "flat" in v:
            return {"width": v["width"], "flat": plain(v["flat"]) if type(v["flat"]) is dict else v["flat"]}
        if "columns" in v:
            return {"keys": v["keys"], "columns": [plain(c) for c in v["columns"]]}
        return numbers_at(v, area).tolist()

    for _, values in obj["extras"]:
        values[:] = [plain(v) for v in values]
    return obj


def _binary(parts: dict, edit) -> None:
    """The texts as stored, their JSON and binary part changed in place by ``edit(layout, area)``."""
    text, area = split_texts(zlib.decompress(parts["texts"]))
    obj, area = json.loads(text), bytearray(area)
    edit(obj, area)
    parts["texts"] = zlib.compress(join_texts(json.dumps(obj, separators=(",", ":")).encode(), bytes(area)), 1)


def _split_key_set(obj: dict) -> None:
    """Record 0's extra moved to a second key set equal to its first."""
    keys, values = obj["extras"][0]
    values[:] = [decode_values(v, len(obj["shape"])) for v in values]  # as lists (the test's 3 records share it)
    obj["extras"].append([keys, [[col.pop(0)] for col in values]])
    obj["shape"][0] = len(obj["extras"]) - 1


def _encoded(key: str, edit) -> Any:
    """An edit of the texts' layout: ``key``'s values in the first key set (encode_values) replaced by
    ``edit(values)``, or changed in place where it returns None."""
    def change(obj: dict) -> None:
        keys, values = obj["extras"][0]
        at = keys.index(key)
        new = edit(values[at])
        if new is not None:
            values[at] = new
    return change


def _drop_last(values: list) -> None:
    values.pop()


def _bin(key: str, edit) -> Any:
    """A hostile edit of the binary numbers: ``edit(ref, area)`` given the reference to ``key``'s values in the
    first key set (a flat list's items for placement medians, the clock's maximum for the clock)."""
    def change(obj: dict, area: bytearray) -> None:
        keys, values = obj["extras"][0]
        v = values[keys.index(key)]
        edit(v["flat"] if "flat" in v else v["columns"][v["keys"].index("sm_mhz_max")] if "columns" in v else v, area)
    return lambda h, p: _binary(p, change)


def _encoded_binary(key: str, edit) -> Any:
    """_encoded's edit of the texts as stored, binary part and all."""
    return lambda h, p: _binary(p, lambda obj, area: _encoded(key, edit)(obj))


def _put(ref: dict, area: bytearray, value: float | int) -> None:
    """The first number a reference names set to ``value``."""
    kind, (first, _) = next(iter(ref.items()))
    struct.pack_into("<d" if kind == "f8" else "<q", area, 8 * first, value)


def _clock_twice(obj: dict, area: bytearray) -> None:
    """The clock's maximum made to name the numbers its minimum names (as many integers): its own are named by
    nothing."""
    keys, values = obj["extras"][0]
    clock = values[keys.index("clock")]
    columns = dict(zip(clock["keys"], clock["columns"], strict=True))
    columns["sm_mhz_max"].update(columns["sm_mhz_min"])


def _number(parts: dict, row: int, column: str, value: float) -> None:
    n = len(parts["sample_counts"]) // 4
    a = numbers_array(parts["numbers"], n).copy()
    a[NUMBER_COLUMNS.index(column), row] = value
    parts["numbers"] = pack_numbers(a)


def _combo(parts: dict, row: int, field: int, value) -> None:
    lines = parts["combos"].split(b"\n")
    c = json.loads(lines[row])
    c[field] = value
    lines[row] = json.dumps(c).encode()
    parts["combos"] = b"\n".join(lines)


def _extra(parts: dict, row: int, value) -> None:
    _texts(parts, row, "extra", value)


HOSTILE = {
    "not a packed copy": lambda h, p: None,
    "the journal's size is another": lambda h, p: h.update(journal_bytes=h["journal_bytes"] + 1),
    "a record count the sections do not have": lambda h, p: h.update(n=h["n"] + 1),
    "a negative median": lambda h, p: _number(p, 0, "median_ms", -1.0),
    "an infinite spread": lambda h, p: _number(p, 1, "iqr_ms", float("inf")),
    "a fractional sample count": lambda h, p: _number(p, 0, "n", 2.5),
    "a boolean that is 2": lambda h, p: _number(p, 0, "repeat_equal", 2.0),
    "an integer past 2**63": lambda h, p: _number(p, 0, "workspace_bytes", 2.0**64),
    "numbers compressed one record short": lambda h, p: p.update(numbers=zlib.compress(
        numbers_array(p["numbers"], 3)[:, :2].tobytes())),
    "numbers compressed with bytes after their stream": lambda h, p: p.update(numbers=p["numbers"] + b"\0"),
    "numbers that inflate past 15 a record": lambda h, p: p.update(numbers=zlib.compress(bytes(8 * 15 * 3 + 8))),
    "numbers neither plain nor compressed": lambda h, p: p.update(numbers=b"\x78" * (8 * 15 * 3 - 1)),
    "a negative median, compressed": lambda h, p: p.update(numbers=zlib.compress(np.where(
        np.arange(45) == NUMBER_COLUMNS.index("median_ms") * 3, -1.0, numbers_array(p["numbers"], 3).ravel()).tobytes())),
    "an empty status": lambda h, p: _texts(p, 0, "status", ""),
    "a status that is a number": lambda h, p: _texts(p, 0, "status", 7),
    "a device with a control character": lambda h, p: _texts(p, 0, "device", "cuda\x07"),
    "a text column short of a record": lambda h, p: _layout(p, lambda o: o["columns"][3].pop()),
    "eleven text columns besides the extras": lambda h, p: _layout(p, lambda o: o["columns"].append(o["columns"][0])),
    "texts as rows (a store's layout before 2026-12-02)": lambda h, p: p.update(
        texts=zlib.compress(json.dumps(_rows(p)).encode(), 1)),
    "texts not compressed": lambda h, p: p.update(texts=zlib.decompress(p["texts"])),
    "texts with bytes after their stream": lambda h, p: p.update(texts=p["texts"] + b"[]"),
    "texts cut short": lambda h, p: p.update(texts=p["texts"][:-3]),
    "texts that inflate past their bound": lambda h, p: p.update(texts=zlib.compress(b" " * (64 << 20), 9)),
    "a direction that is no direction": lambda h, p: _combo(p, 0, 2, "sideways"),
    "an empty algorithm": lambda h, p: _combo(p, 0, 3, ""),
    "settings not in the store's spelling": lambda h, p: _combo(p, 0, 7, '{"b":1,"a":2}'),
    "a nested setting": lambda h, p: _combo(p, 0, 7, '{"a": [1]}'),
    "a combination twice": lambda h, p: p.update(combos=b"\n".join([p["combos"].split(b"\n")[0]] * 3)),
    "an extra that is a list": lambda h, p: _layout(p, lambda o: o["extras"][0].__setitem__(0, [1, 2])),
    "an empty extra": lambda h, p: _layout(p, lambda o: (o["extras"].append([[], []]), o["shape"].__setitem__(
        0, len(o["extras"]) - 1))),
    "an extra naming a key twice": lambda h, p: _layout(p, lambda o: (
        o["extras"][0][0].append(o["extras"][0][0][0]), o["extras"][0][1].append(o["extras"][0][1][0]))),
    "two key sets alike": lambda h, p: _layout(p, _split_key_set),
    "a key set no record has": lambda h, p: _layout(p, lambda o: o["extras"].append([["wall_ms"], [[]]])),
    "a shape past the key sets": lambda h, p: _layout(p, lambda o: o["shape"].__setitem__(0, len(o["extras"]))),
    "a shape that is true": lambda h, p: _layout(p, lambda o: o["shape"].__setitem__(0, True)),
    "a key's values one short": lambda h, p: _layout(p, _encoded("wall_ms", _drop_last)),
    "a flat list one number short": lambda h, p: _layout(p, _encoded("placement_medians_ms",
                                                                     lambda v: _drop_last(v["flat"]))),
    "a width that is true": lambda h, p: _layout(p, _encoded("placement_medians_ms", lambda v: {
        "width": True, "flat": v["flat"][::2]})),
    "a width past the items a list may hold": lambda h, p: _layout(p, _encoded("placement_medians_ms", lambda v: {
        "width": 5000, "flat": [1.0] * 15000})),
    "placement medians kept flat as text": lambda h, p: _layout(p, _encoded("placement_medians_ms", lambda v: {
        "width": 2, "flat": ["1"] * 6})),
    "a negative placement median kept flat": lambda h, p: _layout(p, _encoded("placement_medians_ms", lambda v: {
        "width": 2, "flat": [1.0, -1.0] * 3})),
    "a wall time kept flat (a list where a number belongs)": lambda h, p: _layout(p, _encoded("wall_ms", lambda v: {
        "width": 1, "flat": v})),
    "placement medians kept as objects": lambda h, p: _layout(p, _encoded("placement_medians_ms", lambda v: {
        "keys": ["a"], "columns": [[1.0, 2.0, 3.0]]})),
    "values in a form nothing writes": lambda h, p: _layout(p, _encoded("wall_ms", lambda v: {"rows": v})),
    "a clock kept by key with a key a timer does not write": lambda h, p: _layout(p, _encoded(
        "clock", lambda v: v["keys"].__setitem__(0, "volts"))),
    "a clock kept by key repeating a key": lambda h, p: _layout(p, _encoded(
        "clock", lambda v: v["keys"].__setitem__(0, v["keys"][1]))),
    "a clock kept by key one column short": lambda h, p: _layout(p, _encoded("clock",
                                                                             lambda v: _drop_last(v["columns"]))),
    "a clock's minimum kept by key as text": lambda h, p: _layout(p, _encoded(
        "clock", lambda v: v["columns"].__setitem__(2, ["fast"] * 3))),
    "a clock's slowdowns kept flat as numbers": lambda h, p: _layout(p, _encoded(
        "clock", lambda v: v["columns"].__setitem__(0, {"width": 1, "flat": [1, 2, 3]}))),
    "a shape short of a record": lambda h, p: _layout(p, lambda o: o["shape"].pop()),
    "a negative wall time, binary": _bin("wall_ms", lambda r, a: _put(r, a, -1.0)),
    "an infinite wall time, binary": _bin("wall_ms", lambda r, a: _put(r, a, float("inf"))),
    "a NaN placement median, binary": _bin("placement_medians_ms", lambda r, a: _put(r, a, float("nan"))),
    "a negative clock, binary": _bin("clock", lambda r, a: _put(r, a, -5)),
    "binary numbers of a kind nothing writes": _bin("wall_ms", lambda r, a: r.update(u8=r.pop("f8"))),
    "a reference one number short": _bin("wall_ms", lambda r, a: r["f8"].__setitem__(1, 2)),
    "a reference whose start is true": _bin("wall_ms", lambda r, a: r["f8"].__setitem__(0, True)),
    "a reference past the binary part": _bin("wall_ms", lambda r, a: r["f8"].__setitem__(0, len(a))),
    "two references to the same numbers": lambda h, p: _binary(p, _clock_twice),
    "binary numbers no reference names": lambda h, p: _binary(p, lambda o, a: a.extend(bytes(8))),
    "a binary part cut short": lambda h, p: _binary(p, lambda o, a: a.__delitem__(slice(-8, None))),
    "a binary part longer than the texts": lambda h, p: p.update(texts=zlib.compress(
        b"\0BIN" + (1 << 20).to_bytes(4, "little") + b"{}", 1)),
    "placement medians as a reference with no width": _encoded_binary("placement_medians_ms", lambda v: v["flat"]),
    "a negative wall time": lambda h, p: _extra(p, 0, {"wall_ms": -1.0}),
    "a placement median that is text": lambda h, p: _extra(p, 1, {"placement_medians_ms": [1.0, "2"]}),
    "an unknown extra nested too deep": lambda h, p: _extra(p, 0, {"x": json.loads("[" * 12 + "]" * 12)}),
    "an unknown extra key with a control character": lambda h, p: _extra(p, 2, {"x\x07": 1}),
    "a clock with text for its minimum": lambda h, p: _extra(p, 0, {"clock": {"sm_mhz_min": "fast"}}),
    "a clock with a key a timer does not write": lambda h, p: _extra(p, 0, {"clock": {"volts": 1.0}}),
    "a sample count past the samples": lambda h, p: p.update(sample_counts=struct.pack("<3i", 2, 2, 3)),
    "a negative sample count": lambda h, p: p.update(sample_counts=struct.pack("<3i", -1, 2, 5)),
    "a NaN sample": lambda h, p: p.update(samples=struct.pack("<d", float("nan")) + p["samples"][8:]),
    "a ranking whose rank is text": lambda h, p: p.update(rankings=json.dumps(
        [["c1", "fwd", "fp32", "NCHW", "DEFAULT", "find", "first", "A", "ok", 1.0, 0, "DETERMINISTIC", "x"]]).encode()),
}


def test_binary_numbers_pass_where_check_record_passes_their_values():
    """The rules a key's binary numbers are held to (columns._arrays_pass) are those of its values as JSON: a
    float where an integer belongs, a number where a flag, text or a list belongs, null where none may be, a
    negative or non-finite number: each refused; each allowed value passes."""
    from harness.collect.columns import Arrays, values_pass
    from harness.core.schema import check_record

    floats, ints = np.array([1.5, 2.0]), np.array([3, 4])
    assert values_pass(Arrays([None], [floats, ints]), float | None, "wall_ms")
    assert values_pass(Arrays([], [ints]), int, "throttled_batches")
    assert not values_pass(Arrays([], [floats]), int, "throttled_batches")
    assert not values_pass(Arrays([None], [ints]), int, "throttled_batches")  # a float may be null (NaN), not so an integer
    for tp in (bool | None, str | None, list[float], list[str]):
        assert not values_pass(Arrays([], [ints]), tp, "x")
    for bad in (-1.0, float("nan"), float("inf"), 1e301):
        assert not values_pass(Arrays([], [np.array([1.0, bad])]), float | None, "wall_ms")
    assert not values_pass(Arrays([], [np.array([-1])]), float | None, "wall_ms")
    rec = record("c", clock={"sm_mhz_min": 1980, "sm_mhz_max": 1980.5, "slowdowns": [], "throttled_batches": 2})
    check_record(json.loads(dumps(rec)))  # the values above that pass are values check_record passes


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_a_hostile_copy_is_passed_over_for_the_journal(tmp_path, what):
    d = _run(tmp_path / "hostile")
    clean = _run(tmp_path / "clean")
    (clean / PACKED_FILE).unlink()
    data = (d / PACKED_FILE).read_bytes()
    if what == "not a packed copy":
        bad = pk.MAGIC + b"{" + os.urandom(64)
    else:
        head, parts = _sections(data)
        HOSTILE[what](head, parts)
        bad = _assemble(head, parts)
    assert bad != data
    (d / PACKED_FILE).write_bytes(bad)
    raw = pk.dir_raw(d)
    assert raw.packed == bad
    with pytest.raises(pk.Unusable):
        pk.decode(raw, journal_identity(raw)[0])
    s = collect(tmp_path / "h.sqlite", [d])
    assert s.added == 1 and s.records == 3 and not s.refused and s.packed == 0
    assert len(s.passed_over) == 1 and f"{d}: packed copy passed over, its journal read (" in s.passed_over[0]
    collect(tmp_path / "c.sqlite", [clean])
    assert _dump(tmp_path / "h.sqlite") == _dump(tmp_path / "c.sqlite")


@pytest.mark.parametrize("version", [b"CBPACK1\n", b"CBPACK2\n", b"CBPACK3\n", b"CBPACK4\n", b"CBPACK5\n"])
def test_a_copy_of_an_older_version_is_passed_over_and_named(tmp_path, version):
    """Versions before 6 named their journal by its size alone (a flipped bit or another journal of that size was
    trusted): their copies are read from their journals, with a note."""
    d = _run(tmp_path / "old")
    data = (d / PACKED_FILE).read_bytes()
    (d / PACKED_FILE).write_bytes(version + data[len(pk.MAGIC):])
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 1 and s.packed == 0 and not s.refused and s.records == 3
    assert s.passed_over == [f"{d}: packed copy passed over, its journal read (packed by another convbench version "
                             "(without its journal's sha256))"]


def test_a_journal_collect_refuses_is_not_packed_and_its_refusal_stays_the_journals(tmp_path):
    d = write_run(tmp_path / "results", "m1", "img", T0, [record("a")])
    with (d / JOURNAL_FILE).open("a") as f:
        f.write('{"schema": 1, "kind": "measurement", "case": 5}\n')
    assert not pk.write_packed(d)
    assert not (d / PACKED_FILE).exists()
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 0 and len(s.refused) == 1 and "line 2" in s.refused[0]


def test_a_packing_that_fails_at_the_runs_end_does_not_fail_the_run(tmp_path, monkeypatch, capsys):
    from harness.run import journal

    def broken(path):
        raise RuntimeError("disk on fire")

    monkeypatch.setenv("CONVBENCH_MACHINE", "m1")
    monkeypatch.setattr(pk, "write_packed", broken)
    j = journal.Journal.create(tmp_path / "results", {"hostname": "h", "gpu": None}, {})
    j.append(record("a"))
    j.finish({"ok": 1})
    assert (j.path / "end.json").is_file() and not (j.path / PACKED_FILE).is_file()  # the run is complete
    assert "write_packed failed at the run's end (RuntimeError: disk on fire); the run is complete" in \
        capsys.readouterr().err
    s = collect(tmp_path / "s.sqlite", [j.path])
    assert s.added == 1 and s.packed == 0 and s.records == 1  # collect read the journal instead


def test_a_run_finished_outside_the_cli_is_packed(tmp_path):
    """A run finished by the library alone (as a plain `asv run` of the suite or the ORT grid finish theirs), in
    a process that never imports the CLI, has its packed copy, and collect reads it."""
    import subprocess
    import sys

    code = ("import sys; from harness.core.cases import select; from harness.run import suite; "
            "print(suite.sweep_direction(select('quick')[:1], 'torch', 'fwd', sys.argv[1])); "
            "assert not [m for m in sys.modules if m.startswith('harness.cli')]")
    env = dict(os.environ, CONVBENCH_MACHINE="m1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "results")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = Path(proc.stdout.strip().splitlines()[-1])
    assert (run / "end.json").is_file() and (run / PACKED_FILE).is_file()
    s = collect(tmp_path / "s.sqlite", [run])
    assert s.added == 1 and s.packed == 1 and not s.refused and s.records > 0


def _read_as_an_older_store_kept_it(tmp_path, older) -> tuple[list, list]:
    """A run's records from the store as collected now, and again after its texts blob was rewritten by
    ``older`` (the blob -> the blob an older store would hold)."""
    d = _run(tmp_path)
    db = tmp_path / "s.sqlite"
    collect(db, [d])
    with Store(db) as s:
        pk_ = s.runs()[0]["id"]
        blob = s.db.execute("SELECT texts FROM run_records WHERE run=?", (pk_,)).fetchone()[0]
        now = s.records(pk_)
        s.db.execute("UPDATE run_records SET texts=? WHERE run=?", (older(blob), pk_))
        s.db.commit()
        return now, s.records(pk_)


def _as_rows(blob: bytes, extra=lambda e: e) -> list:
    """A run's texts by column (as stored now) as the row per record older stores kept, each extra made ``extra``."""
    layout = json.loads(split_texts(zlib.decompress(blob))[0])
    assert set(layout) == {"columns", "shape", "extras"}  # by column now
    cols = text_columns(blob, len(layout["shape"]))
    assert any(isinstance(e, dict) for e in cols[-1])
    return [[*r[:-1], extra(r[-1])] for r in zip(*cols, strict=True)]


def test_a_store_written_before_compressed_texts_reads_the_same(tmp_path):
    """Stores before 2026-12-01 kept the texts plain, a row per record, each extra its JSON text."""
    def plain(blob):
        return json.dumps(_as_rows(blob, lambda e: e and json.dumps(e, sort_keys=True))).encode()

    now, before = _read_as_an_older_store_kept_it(tmp_path, plain)
    assert len(now) == 3 and [x.extra for x in before] == [x.extra for x in now] and now[0].extra
    assert repr([replace(x, extra=None) for x in before]) == repr([replace(x, extra=None) for x in now])


def test_a_store_written_before_extras_were_objects_reads_the_same(tmp_path):
    """Stores before 2026-12-02 kept each extra as its JSON text (json.dumps, sort_keys) inside the texts."""
    def extras_as_text(blob):
        return zlib.compress(json.dumps(_as_rows(blob, lambda e: e and json.dumps(e, sort_keys=True))).encode())

    now, before = _read_as_an_older_store_kept_it(tmp_path, extras_as_text)
    assert len(now) == 3 and [x.extra for x in before] == [x.extra for x in now] and now[0].extra
    assert repr([replace(x, extra=None) for x in before]) == repr([replace(x, extra=None) for x in now])


def test_a_store_written_before_texts_were_by_column_reads_the_same(tmp_path):
    """Stores of 2026-12-02 before the texts were by column kept a row per record, each extra an object in it."""
    def rows(blob):
        return zlib.compress(json.dumps(_as_rows(blob)).encode(), 1)

    now, before = _read_as_an_older_store_kept_it(tmp_path, rows)
    assert len(now) == 3 and repr(before) == repr(now) and now[0].extra


def test_a_tarball_keeps_its_copies_only_within_the_memory_budget_the_journals_need_first(tmp_path, monkeypatch):
    from harness.core import intake

    runs = [_run(tmp_path / f"r{i}", machine=f"m{i}") for i in range(2)]
    tarball = tar_runs(runs, tmp_path / "runs.tar")
    journals = sum(f.stat().st_size for r in runs for f in r.iterdir() if f.name != PACKED_FILE)
    copies = sum((r / PACKED_FILE).stat().st_size for r in runs)
    monkeypatch.setattr(intake, "MAX_ARCHIVE_BYTES", journals + copies)
    assert collect(tmp_path / "all.sqlite", [tarball]).packed == 2
    monkeypatch.setattr(intake, "MAX_ARCHIVE_BYTES", journals + copies // 2)  # room for one copy at most
    s = collect(tmp_path / "some.sqlite", [tarball])
    assert s.added == 2 and s.packed < 2 and not s.refused
    assert _dump(tmp_path / "some.sqlite") == _dump(tmp_path / "all.sqlite")
    monkeypatch.setattr(intake, "MAX_ARCHIVE_BYTES", journals - 1)  # the journals alone do not fit: as before
    s = collect(tmp_path / "none.sqlite", [tarball])
    assert s.added == 0 and "refused as a whole" in s.refused[0]


def test_any_error_reading_a_copy_falls_back_to_the_journal(tmp_path, monkeypatch):
    d = _run(tmp_path)

    def overflow(*a):
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(pk, "_numbers", overflow)
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 1 and s.packed == 0 and not s.refused
    assert "cannot be read (OverflowError: int too large to convert to float)" in s.passed_over[0]


# --- the journal is the record: a copy is used only where it provably is its journal's ---

def _journal_and_copy(tmp: Path, n: int = 6) -> tuple[Path, bytes]:
    d = _run(tmp, n=n)
    return d, (d / PACKED_FILE).read_bytes()


_FLIP_RUN: dict = {}


def _flip_fixture(tmp_path_factory) -> tuple[RawRun, dict, Any]:
    if not _FLIP_RUN:
        d, _ = _journal_and_copy(tmp_path_factory.mktemp("flip"))
        raw = pk.dir_raw(d)
        meta = journal_identity(raw)[0]
        _FLIP_RUN.update(raw=raw, meta=meta, parsed=parse_journal(raw, meta))
    return _FLIP_RUN["raw"], _FLIP_RUN["meta"], _FLIP_RUN["parsed"]


@hsettings(max_examples=300, deadline=None, database=None)
@given(data=st.binary(max_size=3000) | st.lists(st.sampled_from([b"\n", b"\r\n", b"{}", b"\n\n", b"\x8a",
                                                                  b"\x0b"]), max_size=300).map(b"".join))
def test_a_journals_lines_are_counted_as_its_newline_bytes(data):
    """The count a copy's header is checked against (journal_lines): every newline byte, whatever surrounds it."""
    assert pk.line_count(data) == data.count(b"\n")


@given(bit=st.integers(min_value=0))
def test_no_flipped_bit_in_a_copy_changes_what_is_stored(tmp_path_factory, bit):
    """Any one bit of the copy flipped (the header, a case id, a median, a sample...): the copy is passed over, or
    (a bit no reader looks at) gives exactly the journal's rows."""
    raw, meta, parsed = _flip_fixture(tmp_path_factory)
    data = bytearray(raw.packed)
    bit %= 8 * len(data)
    data[bit // 8] ^= 1 << (bit % 8)
    try:
        decoded = pk.decode(RawRun(raw.origin, raw.run_json, raw.records, raw.end_json, bytes(data)), meta)
    except pk.Unusable:
        return
    _same(decoded, parsed)


@hsettings(max_examples=8, deadline=None, database=None)
@given(kept=st.integers(min_value=1, max_value=5), forged=st.booleans())
def test_a_copy_of_part_of_its_journal_is_passed_over_and_nothing_is_lost(tmp_path_factory, kept, forged):
    """A copy made when the journal held ``kept`` of its 6 records, its header left as written or forged to name
    the whole journal's length and lines: the journal's 6 are stored."""
    tmp = tmp_path_factory.mktemp("part")
    d, _ = _journal_and_copy(tmp)
    full = (d / JOURNAL_FILE).read_bytes()
    (d / JOURNAL_FILE).write_bytes(b"".join(full.splitlines(keepends=True)[:kept]))
    assert pk.write_packed(d)
    (d / JOURNAL_FILE).write_bytes(full)
    if forged:
        head, parts = _sections((d / PACKED_FILE).read_bytes())
        head.update(journal_bytes=len(full), journal_lines=full.count(b"\n"))
        (d / PACKED_FILE).write_bytes(_assemble(head, parts))
    s = collect(tmp / "s.sqlite", [d])
    assert s.records == 6 and s.packed == 0 and len(s.passed_over) == 1 and not s.refused
    assert ("sha256" if forged else "journal changed") in s.passed_over[0]


@pytest.mark.parametrize("factor", [3.0, 1 / 2])
def test_a_copy_that_says_slower_or_unchanged_does_not_reach_the_store(tmp_path, factor):
    """A copy edited to say 3x slower (the gate would fail identical journals) or half the time (a real 2x
    regression hidden): its crc32 no longer fits, so the journal's numbers are stored."""
    d, data = _journal_and_copy(tmp_path / "edited")
    clean, _ = _journal_and_copy(tmp_path / "clean")
    (clean / PACKED_FILE).unlink()
    head, parts = _sections(data)
    n = _n(parts)
    a = numbers_array(parts["numbers"], n).copy()
    a[NUMBER_COLUMNS.index("median_ms")] *= factor
    parts["numbers"] = pack_numbers(a)
    sections = [parts[name] for name in pk._SECTIONS]
    head["sizes"] = [len(x) for x in sections]  # sizes made to fit, the crc32 left as the writer made it
    (d / PACKED_FILE).write_bytes(b"".join((pk.MAGIC, json.dumps(head).encode(), b"\n", *sections)))
    s = collect(tmp_path / "e.sqlite", [d])
    assert s.packed == 0 and "crc32" in s.passed_over[0]
    collect(tmp_path / "c.sqlite", [clean])
    assert _dump(tmp_path / "e.sqlite") == _dump(tmp_path / "c.sqlite")


def test_a_tarball_holding_a_copy_twice_is_read_from_its_journal(tmp_path):
    import tarfile

    d, _ = _journal_and_copy(tmp_path / "r")
    tarball = tmp_path / "runs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(d, arcname=f"{d.parent.name}/{d.name}")
    with tarfile.open(tarball, "a") as tar:  # the copy appended again (a shipping script run twice)
        tar.add(d / PACKED_FILE, arcname=f"{d.parent.name}/{d.name}/{PACKED_FILE}")
    s = collect(tmp_path / "s.sqlite", [tarball])
    assert s.added == 1 and s.records == 6 and s.packed == 0 and not s.refused
    assert "packed copy passed over, its journal read (the tarball holds it twice)" in s.passed_over[0]

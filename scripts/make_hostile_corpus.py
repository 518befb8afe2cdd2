#!/usr/bin/env python3
"""Generate a corpus of hostile result sources for ``convbench collect``: every item must be refused.

Each item is one source path (a results tree, a run directory, a tarball or an asv results tree) under OUT,
listed in OUT/manifest.json with its category and what is wrong with it. Categories: truncated, malformed
and wrong-schema run.json / records.jsonl / end.json; NaN and Infinity where numbers go; non-UTF-8 and lone
surrogates; deep nesting; oversized files and lines; symlinks, FIFOs and devices in run directories;
tarballs that are truncated, not tarballs, or carry path traversal, absolute names, symlinks, hard links,
devices, FIFOs, non-UTF-8 names or decompression bombs (gzip, bzip2, xz: 8 GiB of zeros in a few MiB).

    python scripts/make_hostile_corpus.py OUT        # about 1,100 items, ~60 MiB on disk, ~20 s
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import lzma
import os
import random
import stat
import sys
import tarfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.core.records import Accuracy, Determinism, Record, Timing, dumps  # noqa: E402

BOMB_BYTES = 8 << 30  # decompressed size of a bomb member: over any limit collect has


def valid_meta(run_id: str = "20261129T000000Z-native-hostile-1", machine: str = "hostile-host") -> dict:
    return {"schema": 1, "run_id": run_id, "machine": machine, "image": "native", "started":
            "2026-11-29T00:00:00+00:00", "suite_revision": "hostile",
            "fingerprint": {"hostname": machine, "gpu": None, "cpu_count": 2, "clock_mhz": 1500.0},
            "options": {"cases": ["quick.seed"]}}


def valid_record(i: int = 0) -> dict:
    rec = Record(case="quick.seed", backend="torch", direction="fwd", algo="auto", math="DEFAULT", dtype="fp32",
                 layout="NCHW", settings={"device": "cpu", "n": i}, device="cpu",
                 time=Timing(0.5, 0.01, 5, "hot", "perf_counter", 0.49, [0.5, 0.51, 0.49, 0.5, 0.5]),
                 accuracy=Accuracy(1e-7, 1e-8, 1e-8, 0, 0, 0, "fp32", 72),
                 determinism=Determinism("00112233445566778899aabbccddeeff", "polyhash2x64-v1", 2, True, None))
    return json.loads(dumps(rec))


def line(d) -> bytes:
    return json.dumps(d, sort_keys=True).encode() + b"\n"


GOOD_META = json.dumps(valid_meta(), sort_keys=True).encode()
GOOD_LINES = [line(valid_record(i)) for i in range(3)]
GOOD_END = b'{"counts": {"ok": 3}}'


class Corpus:
    def __init__(self, out: Path):
        self.out = out
        self.items: list[dict] = []

    def _slot(self, category: str) -> Path:
        p = self.out / f"{len(self.items):05d}-{category}"
        p.mkdir(parents=True)
        return p

    def run_dir(self, category: str, why: str, run_json: bytes | None = GOOD_META,
                records: bytes | None = None, end: bytes | None = GOOD_END, gz: bytes | None = None) -> Path:
        """A results tree <item>/<machine>/<run> with the given files (None: leave the file out); ``gz``: the
        journal as a finished run keeps it (records.jsonl.gz), in place of records.jsonl."""
        item = self._slot(category)
        d = item / "hostile-host" / "run1"
        d.mkdir(parents=True)
        journal = ("records.jsonl.gz", gz) if gz is not None else \
            ("records.jsonl", records if records is not None else b"".join(GOOD_LINES))
        for name, data in (("run.json", run_json), journal, ("end.json", end)):
            if data is not None:
                (d / name).write_bytes(data)
        self.items.append({"path": item.name, "category": category, "why": why})
        return d

    def file(self, category: str, why: str, name: str, data: bytes) -> Path:
        item = self._slot(category)
        (item / name).write_bytes(data)
        self.items.append({"path": f"{item.name}/{name}", "category": category, "why": why})
        return item / name

    def tarball(self, category: str, why: str, members: list[tuple[tarfile.TarInfo, bytes | None]],
                mode: str = "w:gz", suffix: str = ".tar.gz") -> Path:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return self.file(category, why, "runs" + suffix, buf.getvalue())


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = 1764374400
    if kind == tarfile.REGTYPE:
        info.size = len(data)
    info.linkname = link
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 5
    return info, (data if kind == tarfile.REGTYPE else None)


def run_members(prefix: str = "hostile-host/run1") -> list[tuple]:
    return [member(f"{prefix}/run.json", GOOD_META), member(f"{prefix}/records.jsonl", b"".join(GOOD_LINES)),
            member(f"{prefix}/end.json", GOOD_END)]


def valid_tar_bytes(mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for info, data in run_members():
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


# ---- categories --------------------------------------------------------------------------------------------------

def run_json_items(c: Corpus, rng: random.Random) -> None:
    for cut in sorted(rng.sample(range(1, len(GOOD_META) - 1), 80)):
        c.run_dir("run-json-truncated", f"run.json cut at byte {cut}", run_json=GOOD_META[:cut])
    for schema in (0, 2, -1, "1", None, 1.5, True, [], {}, 10 ** 100):
        c.run_dir("run-json-schema", f"schema {schema!r}", run_json=json.dumps(dict(valid_meta(), schema=schema))
                  .encode())
    for key in ("run_id", "machine", "started"):
        for bad in ("<missing>", None, 5, [], {"x": 1}, "", "a\nb", "x" * 300, "tab\there"):
            meta = valid_meta()
            if bad == "<missing>":
                del meta[key]
            else:
                meta[key] = bad
            c.run_dir("run-json-field", f"{key} = {bad!r:.40}", run_json=json.dumps(meta).encode())
    for doc in (b"[]", b'"run"', b"1", b"null", b"true", b"", b" ", b"{", b"}", b"{}{}", b"\x00" * 64):
        c.run_dir("run-json-not-object", f"run.json is {doc[:16]!r}", run_json=doc)
    for token in (b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999"):
        c.run_dir("run-json-nonfinite", f"clock_mhz {token.decode()}",
                  run_json=GOOD_META.replace(b'"clock_mhz": 1500.0', b'"clock_mhz": ' + token))
        c.run_dir("run-json-nonfinite", f"cpu_count {token.decode()}",
                  run_json=GOOD_META.replace(b'"cpu_count": 2', b'"cpu_count": ' + token))
    for bad in (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\x80"):
        c.run_dir("run-json-not-utf8", f"machine holds bytes {bad!r}",
                  run_json=GOOD_META.replace(b'"machine": "hostile-host"', b'"machine": "host' + bad + b'"'))
    for esc in (b"\\ud800", b"\\udfff", b"\\ud83d"):
        c.run_dir("run-json-surrogate", f"machine holds the escape {esc.decode()}",
                  run_json=GOOD_META.replace(b'"machine": "hostile-host"', b'"machine": "host' + esc + b'"'))
    for depth in (100, 1000, 10_000, 100_000):
        meta = GOOD_META.replace(b'"options": {', b'"deep": ' + nested(depth) + b', "options": {')
        c.run_dir("run-json-deep", f"nested {depth} deep", run_json=meta)
    huge = GOOD_META.replace(b'"image": "native"', b'"image": "' + b"x" * (17 << 20) + b'"')
    c.run_dir("run-json-oversized", "run.json of 17 MiB", run_json=huge)
    c.run_dir("run-json-missing", "no run.json but records and end", run_json=None)


def record_items(c: Corpus, rng: random.Random) -> None:
    good = GOOD_LINES[1]
    for cut in sorted(rng.sample(range(1, len(good) - 2), 150)):
        c.run_dir("record-truncated", f"record line cut at byte {cut} (not the last line)",
                  records=GOOD_LINES[0] + good[:cut] + b"\n" + GOOD_LINES[2])
    wrong = {
        "status": (5, None, [], {"a": 1}), "case": (None, 5, []), "backend": (None, 7), "settings": ([1], "x", 5),
        "extra": ("x", 5, [1]), "time": ("fast", 5, [1]), "accuracy": ("x", 7, [1]), "determinism": (5, "x"),
        "kind": (None, 5, "banana"), "schema": (0, 2, "1", None, 1.5, True),
    }
    for key, values in wrong.items():
        for bad in values:
            rec = valid_record()
            rec[key] = bad
            c.run_dir("record-field-type", f"record {key} = {bad!r}", records=GOOD_LINES[0] + line(rec))
    for key, values in {"median_ms": ("fast", [1], {"a": 1}), "samples_ms": ("x", [["a"]], {"a": 1}, ["x"]),
                        "n": ("many", [3])}.items():
        for bad in values:
            rec = valid_record()
            rec["time"][key] = bad
            c.run_dir("record-field-type", f"time.{key} = {bad!r}", records=GOOD_LINES[0] + line(rec))
    for key in ("max_abs", "rel_l2", "max_norm_err"):
        for bad in ("small", [1]):
            rec = valid_record()
            rec["accuracy"][key] = bad
            c.run_dir("record-field-type", f"accuracy.{key} = {bad!r}", records=GOOD_LINES[0] + line(rec))
    for key in ("case", "backend", "direction", "algo", "math", "dtype", "layout", "status", "schema", "kind",
                "time", "accuracy", "determinism", "settings"):
        rec = valid_record()
        del rec[key]
        c.run_dir("record-missing-field", f"record without {key}", records=GOOD_LINES[0] + line(rec))
    numbers = [b'"median_ms": 0.5', b'"iqr_ms": 0.01', b'"min_ms": 0.49', b'"max_abs": 1e-07', b'"rel_l2": 1e-08',
               b'"samples_ms": [0.5']
    for field in numbers:
        for token in (b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"1E400"):
            head = field.rsplit(b" ", 1)[0]
            if field.startswith(b'"samples_ms"'):
                bad = good.replace(field, b'"samples_ms": [' + token, 1)
            else:
                bad = good.replace(field, head + b" " + token, 1)
            assert bad != good, field
            c.run_dir("record-nonfinite", f"{field.split(b':')[0].decode()} = {token.decode()}",
                      records=GOOD_LINES[0] + bad)
    for doc in (b"[]", b'"record"', b"1", b"null", b"true", b"{}", b"{,}", b"}{"):
        c.run_dir("record-not-object", f"line is {doc!r}", records=GOOD_LINES[0] + doc + b"\n" + GOOD_LINES[2])
    for bad in (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\x80\x81"):
        c.run_dir("record-not-utf8", f"case holds bytes {bad!r}",
                  records=GOOD_LINES[0] + good.replace(b'"quick.seed"', b'"quick.seed' + bad + b'"', 1))
    for esc in (b"\\ud800", b"\\udfff"):
        c.run_dir("record-surrogate", f"reason holds the escape {esc.decode()}",
                  records=GOOD_LINES[0] + good.replace(b'"reason": null', b'"reason": "x' + esc + b'"', 1))
    for depth in (2000, 10_000, 100_000):  # JSON parsers stop at 1024 (orjson) or the recursion limit
        c.run_dir("record-deep", f"extra nested {depth} deep",
                  records=GOOD_LINES[0] + good.replace(b'"extra": {}', b'"extra": ' + nested(depth), 1))
    c.run_dir("record-huge-line", "one record line of 17 MiB",
              records=GOOD_LINES[0] + good.replace(b'"reason": null', b'"reason": "' + b"y" * (17 << 20) + b'"'))
    for i in range(120):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))).replace(b"\n", b" ")
        c.run_dir("record-garbage", f"random bytes #{i}", records=GOOD_LINES[0] + junk + b"\n" + GOOD_LINES[2])
    rank = {"kind": "ranking", "schema": 1, "case": "quick.seed", "direction": "fwd", "dtype": "fp32",
            "layout": "NCHW", "math": "DEFAULT", "source": "find", "rank": 0, "algo": "GEMM", "status": "ok",
            "time_ms": 0.1, "memory_bytes": 0, "determinism": "DETERMINISTIC", "math_reported": "DEFAULT"}
    for key in ("case", "rank", "algo", "source"):
        bad = dict(rank)
        del bad[key]
        c.run_dir("ranking-missing-field", f"ranking without {key}", records=GOOD_LINES[0] + line(bad))


def end_items(c: Corpus) -> None:
    for doc, why in ((b"{", "truncated"), (b"not json", "not JSON"), (b'{"counts": NaN}', "NaN"),
                     (b'{"seconds": Infinity}', "Infinity"), (b'{"seconds": 1e999}', "overflow"),
                     (nested(100_000), "nested 100000 deep"), (b'{"m": "\xff"}', "not UTF-8"),
                     (b'{"m": "\\ud800"}', "lone surrogate"), (b"{}" + b" " * (17 << 20), "17 MiB")):
        c.run_dir("end-json", f"end.json {why}", end=doc)


def filesystem_items(c: Corpus) -> None:
    links = {"run.json": ("/etc/passwd", "/dev/zero", "/proc/self/environ", "../../../../etc/hostname",
                          "nonexistent-target"),
             "records.jsonl": ("/dev/zero", "/dev/urandom", "/etc/shadow", "/proc/kcore", "/proc/self/mem"),
             "end.json": ("/dev/zero", "/etc/passwd")}
    for name, targets in links.items():
        for target in targets:
            d = c.run_dir("symlink", f"{name} is a symlink to {target}")
            (d / name).unlink()
            os.symlink(target, d / name)
    for name in ("run.json", "records.jsonl", "end.json"):
        d = c.run_dir("fifo", f"{name} is a FIFO (a reader would block forever)")
        (d / name).unlink()
        os.mkfifo(d / name)
        d = c.run_dir("directory", f"{name} is a directory")
        (d / name).unlink()
        (d / name).mkdir()
        try:
            d = c.run_dir("device", f"{name} is a character device (/dev/zero's numbers)")
            (d / name).unlink()
            os.mknod(d / name, stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except (PermissionError, OSError):
            c.items[-1]["why"] += " (mknod not permitted here: left as a FIFO)"
            os.mkfifo(d / name)
    for name in ("runs.tar.gz", "x.tgz"):
        item = c._slot("tar-not-regular")
        os.mkfifo(item / name)
        c.items.append({"path": item.name, "category": "tar-not-regular", "why": f"{name} is a FIFO in a tree"})
        item = c._slot("tar-not-regular")
        os.symlink("/dev/zero", item / name)
        c.items.append({"path": item.name, "category": "tar-not-regular", "why": f"{name} links to /dev/zero"})


def tar_items(c: Corpus, rng: random.Random) -> None:
    for mode, suffix, cuts in (("w:gz", ".tar.gz", 120), ("w", ".tar", 60), ("w:bz2", ".tar.bz2", 40),
                               ("w:xz", ".tar.xz", 40)):
        data = valid_tar_bytes(mode)
        # cut before the end of the last member's data, so that no complete run is in what is left
        last = (len(data) * 8) // 10 if mode != "w" else 512 * 6
        for cut in sorted(rng.sample(range(1, last), cuts)):
            c.file("tar-truncated", f"{suffix} cut at byte {cut} of {len(data)}", "runs" + suffix, data[:cut])
    for i in range(80):
        c.file("tar-garbage", f"random bytes #{i} named .tar.gz", "runs.tar.gz",
               bytes(rng.randrange(256) for _ in range(rng.randrange(0, 2000))))
    c.file("tar-garbage", "gzip of plain text", "runs.tar.gz", gzip.compress(b"hello\n" * 100))
    c.file("tar-garbage", "a zip archive named .tar", "runs.tar", b"PK\x03\x04" + b"\x00" * 200)
    for mode, suffix in (("w:gz", ".tar.gz"), ("w", ".tar"), ("w:bz2", ".tar.bz2"), ("w:xz", ".tar.xz")):
        for prefix in ("../../../tmp/convbench-escape/run1", "/tmp/convbench-escape/run1", "a/../../b/run1",
                       "./../c/run1", "hostile-host/../../d/run1"):
            c.tarball("tar-traversal", f"{suffix}: run members under {prefix}", run_members(prefix), mode, suffix)
        for name in ("run.json", "records.jsonl", "end.json"):
            for kind, target, what in ((tarfile.SYMTYPE, "/etc/passwd", "symlink to /etc/passwd"),
                                       (tarfile.SYMTYPE, "../../../etc/shadow", "symlink out of the tarball"),
                                       (tarfile.LNKTYPE, "/etc/passwd", "hard link to /etc/passwd"),
                                       (tarfile.LNKTYPE, "hostile-host/run1/other", "hard link inside"),
                                       (tarfile.CHRTYPE, "", "character device"),
                                       (tarfile.BLKTYPE, "", "block device"), (tarfile.FIFOTYPE, "", "FIFO")):
                members = [m for m in run_members() if not m[0].name.endswith("/" + name)]
                members.insert(0, member(f"hostile-host/run1/{name}", kind=kind, link=target))
                c.tarball("tar-special-member", f"{suffix}: {name} is a {what}", members, mode, suffix)
    for raw in (b"hostile-\xff\xfe/run1", b"hostile\x01host/run1", b"host\nname/run1"):
        members = run_members(raw.decode("utf-8", "surrogateescape"))
        c.tarball("tar-bad-name", f"member names with {raw!r}", members)
    bomb_items(c)


def _bomb_stream(compressor, chunk: bytes) -> bytes:
    """A tar stream whose records.jsonl member is BOMB_BYTES of zeros, compressed by repeating one block."""
    info = tarfile.TarInfo("hostile-host/run1/records.jsonl")
    info.size = BOMB_BYTES
    head = b"".join(m[0].tobuf(tarfile.GNU_FORMAT) + m[1] + b"\x00" * (-len(m[1]) % 512)
                    for m in run_members()[:1]) + info.tobuf(tarfile.GNU_FORMAT)
    block = compressor(chunk)
    out = compressor(head) + block * (BOMB_BYTES // len(chunk)) + compressor(b"\x00" * 1024)
    return out


def bomb_items(c: Corpus) -> None:
    zeros = b"\x00" * (64 << 20)
    c.file("decompression-bomb", "gzip: records.jsonl of 8 GiB zeros", "bomb.tar.gz",
           _bomb_stream(lambda b: gzip.compress(b, 9, mtime=0), zeros))
    c.file("decompression-bomb", "bzip2: records.jsonl of 8 GiB zeros", "bomb.tar.bz2",
           _bomb_stream(lambda b: bz2.compress(b, 9), zeros))
    c.file("decompression-bomb", "xz: records.jsonl of 8 GiB zeros", "bomb.tar.xz",
           _bomb_stream(lambda b: lzma.compress(b, preset=9), zeros))
    # a small header size with no data behind it, and a run.json member of 1 GiB
    info = tarfile.TarInfo("hostile-host/run1/run.json")
    info.size = 1 << 30
    c.file("decompression-bomb", "run.json member claiming 1 GiB", "claim.tar.gz",
           gzip.compress(info.tobuf(tarfile.GNU_FORMAT) + GOOD_META, mtime=0))
    # one hundred and fifty thousand empty members
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(150_000):
            tar.addfile(tarfile.TarInfo(f"m/{i}"), io.BytesIO(b""))
    c.file("decompression-bomb", "150000 members", "many.tar.gz", buf.getvalue())


def asv_items(c: Corpus) -> None:
    good_machine = json.dumps({"machine": "hostile-host", "version": 1}).encode()
    results = {"version": 2, "commit_hash": "abc", "env_name": "e", "date": 1764374400000,
               "params": {"machine": "hostile-host"}, "python": "3.12", "requirements": {}, "env_vars": {},
               "result_columns": ["result", "params"], "results": {"b.T.time_x": [[1.0], [["'a'"]]]}}
    variants = [
        ("results not JSON", None, b"{"), ("version 1", None, json.dumps(dict(results, version=1)).encode()),
        ("results is a list", None, json.dumps(dict(results, results=[])).encode()),
        ("no machine", b"{}", json.dumps(dict(results, params={})).encode()),
        ("date is text", None, json.dumps(dict(results, date="yesterday")).encode()),
        ("date overflows", None, json.dumps(dict(results, date=10 ** 30)).encode()),
        ("deep results", None, nested(100_000)), ("machine.json deep", nested(100_000), None),
        ("not UTF-8", None, b'{"version": 2, "x": "\xff"}'), ("17 MiB results", None, b" " * (17 << 20) + b"{}"),
        ("machine.json is a FIFO", "fifo", None), ("results file is a symlink to /dev/zero", None, "link"),
    ]
    for why, machine, data in variants:
        item = c._slot("asv")
        d = item / "results" / "hostile-host"
        d.mkdir(parents=True)
        if machine == "fifo":
            os.mkfifo(d / "machine.json")
        else:
            (d / "machine.json").write_bytes(machine if machine is not None else good_machine)
        if data == "link":
            os.symlink("/dev/zero", d / "abc-e.json")
        else:
            (d / "abc-e.json").write_bytes(data if data is not None else json.dumps(results).encode())
        c.items.append({"path": item.name, "category": "asv", "why": why})


# ---- generated items of each kind the hostile run found -----------------------------------------------------------

def _set(d: dict, dotted: str, value) -> dict:
    """A copy of ``d`` with the field at the dotted path set (objects on the way created)."""
    d = json.loads(json.dumps(d))
    *head, last = dotted.split(".")
    cur = d
    for k in head:
        if not isinstance(cur.get(k), dict):
            cur[k] = {}
        cur = cur[k]
    cur[last] = value
    return d


TYPED = {  # fields that parse but hold the wrong type: each one, once stored, broke every later report
    "extra": ([1], "x", 5, True), "extra.winners": ("ALGO_0", None, [1], 5, {"a": "x"}, {"a": 1.5}),
    "extra.near_ties": ("none", 5, {"a": 1}, [1]), "extra.max_abs_spread": ("big", [1], {"a": 1}, True),
    "extra.fresh_process_equal": ([True], "yes", 1, {"a": 1}), "extra.trials": ("x", 3, [1]),
    "extra.documented_nondeterministic": ("yes", 1, None), "extra.wall_ms": ("1", [1]),
    "time.clock": ("fast", 5, [1]), "time.clock.slowdowns": (7, "power", [1], [None]),
    "time.clock.sm_mhz_min": ("low", [1]), "time.flags": ("host_bound", [1], 5), "time.host_ms": ("x", [1]),
    "time.iqr_ms": ("x", True), "time.mode": (5, None, []), "time.timer": (5, []), "time.samples_ms": ([True, 1.0],
                                                                                                   [None], [[1.0]]),
    "accuracy.nan": (0.5, "0", True), "accuracy.precision_class": (5, []), "accuracy.reduction": ("72", 1.5),
    "determinism.repeat_equal": ("yes", 1, []), "determinism.hash": (5, []), "determinism.repeats": (2.5, "2"),
    "determinism.distinct_outputs": ("1", None), "workspace_bytes": ("0", 1.5, True),
    "settings.device": ([1], {"a": 1}), "chosen_algo": (5, []), "explanation": (5, [], {"a": 1}),
    "reason": (5, []), "device": (5, None),
}
RANGES = {  # the right type, out of range or unsafe to print or hold
    "time.median_ms": (-1.0, -1e-9, 1e301), "accuracy.max_abs": (-0.5,), "time.n": (-1, 1 << 70),
    "workspace_bytes": (-4096, 1 << 64), "accuracy.unwritten": (-3,),
    "case": ("", "x" * 2000, "quick.seed\x1b[2J", "quick\rseed", "quick\x00seed", "quick\u0085seed"),
    "algo": ("A" * 5000, "ALGO\x07"), "status": ("ok\x1b]0;pwned\x07", ""), "dtype": ("FP32", "Fp32", "fp32 ", "tf32"),
    "direction": ("forward", "FWD"), "layout": ("nchw", "NCWH"), "kind": ("Measurement", "ranking2"),
    "reason": ("r" * (70 << 10),), "settings.k\x1bey": ("v",), "extra.clock": ({"slowdowns": ["x" * 2000]},),
}


def typed_items(c: Corpus, rng: random.Random) -> None:
    for dotted, values in TYPED.items():
        for bad in values:
            rec = _set(valid_record(), dotted, bad)
            c.run_dir("record-typed", f"{dotted} = {json.dumps(bad)[:40]}", records=GOOD_LINES[0] + line(rec))
    for dotted, values in RANGES.items():
        for bad in values:
            rec = _set(valid_record(), dotted, bad)
            c.run_dir("record-range", f"{dotted} = {json.dumps(bad)[:40]}", records=GOOD_LINES[0] + line(rec))
    rec = valid_record()
    rec["time"]["samples_ms"] = [0.5] * 100_001
    c.run_dir("record-range", "100001 timing samples (compare holds both sides in memory)",
              records=GOOD_LINES[0] + line(rec))
    rec = _set(valid_record(), "extra.blob", [[[[[[[[[[[1]]]]]]]]]]])
    c.run_dir("record-range", "extra nested 11 deep (under the parser's limit)", records=GOOD_LINES[0] + line(rec))
    rec = _set(valid_record(), "extra.big", list(range(5000)))
    c.run_dir("record-range", "a list of 5000 entries in extra", records=GOOD_LINES[0] + line(rec))
    scalars = ("time.iqr_ms", "time.mode", "time.timer", "accuracy.nan", "accuracy.precision_class", "reason",
               "determinism.hash", "determinism.repeats", "workspace_bytes", "chosen_algo", "explanation", "device",
               "extra.max_abs_spread", "extra.fresh_process_equal", "time.host_ms", "settings.device", "status")
    for i in range(20):  # random lists and objects where a scalar belongs
        dotted = rng.choice(scalars)
        bad = rng.choice([[rng.random()], {"k": rng.random()}, [str(rng.random())], {}])
        rec = _set(valid_record(), dotted, bad)
        c.run_dir("record-typed", f"random #{i}: {dotted} = {json.dumps(bad)[:40]}", records=GOOD_LINES[0] + line(rec))


def journal_items(c: Corpus) -> None:
    """Journals with nothing in them: each once became a complete run of 0 records."""
    for why, data in (("empty", b""), ("one newline", b"\n"), ("spaces", b"   "), ("tabs and newlines", b"\t\n\t\n"),
                      ("CRLF only", b"\r\n" * 10), ("4 KiB of NUL", b"\x00" * 4096), ("one NUL", b"\x00"),
                      ("NUL then newline", b"\x00\n"), ("50 MiB of newlines", b"\n" * (50 << 20)),
                      ("a blank line between records", GOOD_LINES[0] + b"\n" + GOOD_LINES[1]),
                      ("records after 1 MiB of spaces", b" " * (1 << 20) + b"\n" + GOOD_LINES[0])):
        c.run_dir("journal-empty", f"records.jsonl: {why}", records=data)


def _gzip_of_zeros(size: int) -> bytes:
    """One gzip stream of ``size`` zero bytes (about 1 MiB a GiB), made a chunk at a time."""
    deflate, chunk = zlib.compressobj(9, zlib.DEFLATED, 31), b"\x00" * (64 << 20)
    return b"".join(deflate.compress(chunk) for _ in range(size // len(chunk))) + deflate.flush()


def gz_journal_items(c: Corpus) -> None:
    """A finished run's compressed journal (records.jsonl.gz) that is damaged, a bomb or not gzip at all."""
    good = gzip.compress(b"".join(GOOD_LINES), mtime=0)
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    bad_crc = bytearray(good)
    bad_crc[-6] ^= 0x01  # the stream's crc32 of what it inflates to
    for why, data in (("1 GiB of zeros in one stream (a bomb)", _gzip_of_zeros(1 << 30)),
                      ("cut short", good[:-7]), ("a flipped byte", bytes(flipped)), ("a wrong crc32", bytes(bad_crc)),
                      ("bytes after the stream", good + b"{}\n"), ("two streams back to back", good + good),
                      ("not gzip (the plain lines)", b"".join(GOOD_LINES)), ("empty", b""),
                      ("a gzip header alone", good[:10]), ("gzip of nothing", gzip.compress(b"", mtime=0)),
                      ("gzip of garbage bytes", gzip.compress(b"\xff\xfe\x00garbage\n", mtime=0)),
                      ("gzip of a malformed line", gzip.compress(GOOD_LINES[0] + b"{\n", mtime=0))):
        c.run_dir("journal-gz", f"records.jsonl.gz: {why}", gz=data)
    info = tarfile.TarInfo("hostile-host/run1/records.jsonl.gz")
    bomb = _gzip_of_zeros(1 << 30)
    info.size = len(bomb)
    c.tarball("journal-gz", "a tarball whose records.jsonl.gz inflates to 1 GiB",
              [run_members()[0], (info, bomb), run_members()[2]])


def _tar(members: list[tuple], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def archive_items(c: Corpus) -> None:
    """Tarballs with good runs and one bad: stored half before; now refused as a whole."""
    bad_record = [m if not m[0].name.endswith("records.jsonl") else member(m[0].name, GOOD_LINES[0] + b"{\n")
                  for m in run_members("hostile-host/bad")]
    bad_meta = [m if not m[0].name.endswith("run.json") else member(m[0].name, b'{"schema": 1}')
                for m in run_members("hostile-host/bad")]
    bad_type = [m if not m[0].name.endswith("records.jsonl") else member(
        m[0].name, line(_set(valid_record(), "extra.winners", "ALGO"))) for m in run_members("hostile-host/bad")]
    for mode, suffix in (("w:gz", ".tar.gz"), ("w", ".tar"), ("w:bz2", ".tar.bz2"), ("w:xz", ".tar.xz")):
        for bad_name, bad in (("a malformed line", bad_record), ("a run.json without identity", bad_meta),
                              ("a wrongly typed field", bad_type)):
            for where in ("after", "before"):
                good = run_members(f"hostile-host/good-{where}")
                members = good + bad if where == "after" else bad + good
                c.file("tar-partial", f"{suffix}: a good run {where} a run with {bad_name}", "runs" + suffix,
                       _tar(members, mode))


def archive_bombs(c: Corpus) -> None:
    """Bombs under every per-member limit: many members that add up, and a journal under the old 4 GiB limit."""
    mib15 = 15 << 20
    block = gzip.compress(b"\x00" * mib15, 9, mtime=0)
    parts = []
    for i in range(200):
        info = tarfile.TarInfo(f"hostile-host/run{i}/extra-{i}.json")
        info.size = mib15
        parts.append(gzip.compress(info.tobuf(tarfile.GNU_FORMAT), mtime=0) + block)
    c.file("archive-bomb", "200 members of 15 MiB .json each (3 GiB), 13 MiB compressed", "sum.tar.gz",
           b"".join(parts) + gzip.compress(b"\x00" * 1024, mtime=0))
    info = tarfile.TarInfo("hostile-host/run1/records.jsonl")
    info.size = 3 << 30
    head = b"".join(m[0].tobuf(tarfile.GNU_FORMAT) + m[1] + b"\x00" * (-len(m[1]) % 512)
                    for m in run_members()[:1]) + info.tobuf(tarfile.GNU_FORMAT)
    chunk = gzip.compress(b"\x00" * (64 << 20), 9, mtime=0)
    c.file("archive-bomb", "a 3 GiB records.jsonl of zeros (under the old 4 GiB limit)", "sparse.tar.gz",
           gzip.compress(head, mtime=0) + chunk * 48 + gzip.compress(b"\x00" * 1024, mtime=0))


def asv_hostile_items(c: Corpus) -> None:
    machine = json.dumps({"machine": "hostile-host", "version": 1}).encode()
    base = {"version": 2, "commit_hash": "abc", "env_name": "e", "date": 1764374400000,
            "params": {"machine": "hostile-host"}, "result_columns": ["result", "params", "samples"]}

    def variant(why: str, result, bench_params, samples=None, **top) -> None:
        item = c._slot("asv-hostile")
        d = item / "results" / "hostile-host"
        d.mkdir(parents=True)
        (d / "machine.json").write_bytes(machine)
        doc = {**base, "results": {"bench_x.Cls.time_x": [result, bench_params, samples]}, **top}
        (d / "abc-e.json").write_bytes(json.dumps(doc).encode())
        c.items.append({"path": item.name, "category": "asv-hostile", "why": why})

    for n, k in ((300, 4), (1000, 2), (50, 5), (100_001, 1)):
        variant(f"parameters {n}^{k} in a few KiB", [1.0], [[f"'v{i}'" for i in range(n)]] * k)
    variant("result is text", "fast", [["'a'"]])
    variant("a result value is text", ["fast"], [["'a'"]])
    variant("a result value is an object", [{"a": 1}], [["'a'"]])
    variant("samples are text", [1.0], [["'a'"]], ["many"])
    variant("a sample is text", [1.0], [["'a'"]], [["x"]])
    variant("params is an object", [1.0], {"a": ["x"]})
    variant("a parameter is an object", [1.0], [[{"a": 1}]])
    variant("machine has an escape sequence", [1.0], [["'a'"]], params={"machine": "box\x1b[2J"})
    variant("env_name is a list", [1.0], [["'a'"]], env_name=["e"])
    variant("params of the run is a list", [1.0], [["'a'"]], params=["box"])


# ---- scenarios: hostile inputs that enter elsewhere than collect's sources --------------------------------------

SWEEP = ["sweep", "--cases", "quick", "--backends", "torch", "--dtypes", "fp32", "--budget-ms", "5"]


class Scenarios:
    """Inputs for resume, repro, the store, the gate, the command line and the terminal: each a folder under
    OUT/scenarios and commands to run there (``{dir}`` is that folder), with the exit codes that mean a clean
    refusal, the records the store must hold afterwards, and files that must not change."""

    def __init__(self, out: Path):
        self.root = out / "scenarios"
        self.items: list[dict] = []

    def add(self, category: str, why: str, argv: list[str], expect: tuple[int, ...], *, env: dict | None = None,
            before: list[list[str]] | None = None, records: int | None = None, victim: str | None = None,
            setup=None) -> Path:
        d = self.root / f"{len(self.items):05d}-{category}"
        d.mkdir(parents=True)
        if setup:
            setup(d)
        self.items.append({"path": f"scenarios/{d.name}", "category": category, "why": why, "argv": argv,
                           "expect": list(expect), "env": env or {}, "before": before or [], "records": records,
                           "victim": victim})
        return d


def _write_run(d: Path, lines: list[bytes] = GOOD_LINES, finished: bool = False, run_id: str = "run1") -> Path:
    r = d / "results" / "hostile-host" / run_id
    r.mkdir(parents=True)
    (r / "run.json").write_bytes(json.dumps(valid_meta(run_id)).encode())
    (r / "records.jsonl").write_bytes(b"".join(lines))
    if finished:
        (r / "end.json").write_bytes(GOOD_END)
    return r


def resume_scenarios(sc: Scenarios, rng: random.Random) -> None:
    journal_damage = {
        "an unknown field": lambda p: p.write_bytes(line({**valid_record(), "colour": 1})),
        "schema 2": lambda p: p.write_bytes(line({**valid_record(), "schema": 2})),
        "schema as text": lambda p: p.write_bytes(line({**valid_record(), "schema": "1"})),
        "a byte order mark": lambda p: p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes()),
        "a directory": lambda p: (p.unlink(), p.mkdir()),
        "a link to /dev/null": lambda p: (p.unlink(), p.symlink_to("/dev/null")),
        "a link to /dev/zero": lambda p: (p.unlink(), p.symlink_to("/dev/zero")),
        "a FIFO": lambda p: (p.unlink(), os.mkfifo(p)),
        "a link to a file outside": lambda p: (p.unlink(), p.symlink_to(p.parents[3] / "victim.txt")),
        "winners as text": lambda p: p.write_bytes(line(_set(valid_record(), "extra.winners", "A"))),
        "NaN median": lambda p: p.write_bytes(GOOD_LINES[0].replace(b'"median_ms": 0.5', b'"median_ms": NaN')),
    }
    for i in range(8):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b" ") + b"\n"
        journal_damage[f"garbage line #{i}"] = lambda p, junk=junk: p.write_bytes(p.read_bytes() + junk)
    header_damage = {
        "schema as text": {"schema": "1"}, "schema 2": {"schema": 2}, "run_id a number": {"run_id": 5},
        "started not a time": {"started": "yesterday"}, "machine empty": {"machine": ""},
        "options a list": {"options": [1]}, "fingerprint nested 50 deep": {"fingerprint": json.loads(nested(50))},
    }

    def victim(d: Path) -> None:
        (d / "victim.txt").write_bytes(b"precious, no newline at the end")

    for command in ("sweep", "repro"):
        for why, damage in journal_damage.items():
            def setup(d, damage=damage):
                victim(d)
                damage(_write_run(d) / "records.jsonl")
            argv = (SWEEP + ["--resume", "{dir}/results/hostile-host/run1"] if command == "sweep"
                    else ["repro", "{dir}/results/hostile-host/run1"])
            sc.add(f"{command}-tampered", f"{command}: the journal holds {why}", argv, (2,), victim="victim.txt",
                   setup=setup)
        for why, change in header_damage.items():
            def setup(d, change=change):
                victim(d)
                r = _write_run(d)
                (r / "run.json").write_bytes(json.dumps({**valid_meta(), **change}).encode())
            argv = (SWEEP + ["--resume", "{dir}/results/hostile-host/run1"] if command == "sweep"
                    else ["repro", "{dir}/results/hostile-host/run1"])
            sc.add(f"{command}-tampered", f"{command}: run.json with {why}", argv, (2,), victim="victim.txt",
                   setup=setup)


def path_scenarios(sc: Scenarios) -> None:
    for name in ("../../../escaped", "../escaped", "..", ".", "a/b", "/tmp/convbench-escape", "x\x1b[31m",
                 "a" * 200, " ", "-rf", ".hidden"):  # an empty one means unset: the fingerprint's name
        sc.add("machine-name", f"CONVBENCH_MACHINE={name[:30]!r}", SWEEP + ["--results", "{dir}/deep/a/b/results"],
               (2,), env={"CONVBENCH_MACHINE": name}, setup=lambda d: (d / "deep/a/b").mkdir(parents=True))


def cli_scenarios(sc: Scenarios) -> None:
    for flag, values in (("--budget-ms", ("nan", "inf", "-inf", "-1", "0", "1e300")),
                         ("--repeats", ("1000000000", "-1")), ("--timeout", ("nan", "inf", "0", "-5"))):
        for v in values:
            sc.add("cli-number", f"sweep {flag} {v}", SWEEP[:-2] + [flag, v, "--results", "{dir}/results"], (2,))
    # not a directory is a usage error (2); a folder the host will not let us make is the host's lack (3)
    for target, why, code in (("{dir}/a-file", "a file", 2), ("/proc/self/convbench", "/proc", 3),
                              ("/dev/null", "/dev/null", 2)):
        sc.add("cli-path", f"sweep --results at {why}", SWEEP + ["--results", target], (code,), victim="a-file",
               setup=lambda d: (d / "a-file").write_bytes(b"keep me"))
    for v in ("0", "100000", "-3"):
        sc.add("cli-number", f"collect --jobs {v}", ["collect", "{dir}", "--jobs", v, "--store", "{dir}/s.sqlite"],
               (2,))
    for v in ("", ":memory:", "  ", "file::memory:"):
        sc.add("cli-path", f"collect --store {v!r}", ["collect", "{dir}/results", "--store", v], (2,),
               setup=lambda d: _write_run(d, finished=True))
    for flag in ("--time-threshold", "--error-growth", "--abs-us", "--alpha"):
        for v in ("nan", "inf", "-inf"):
            sc.add("gate-threshold", f"compare {flag} {v}",
                   ["compare", "{dir}/results", "{dir}/results", flag, v], (2,),
                   setup=lambda d: _write_run(d, finished=True))


def store_scenarios(sc: Scenarios, rng: random.Random) -> None:
    """Damaged stores: refused in one line, never modified; made by collecting a real run first."""
    damage = {
        "store_schema as text": "UPDATE meta SET value = 'two' WHERE key = 'store_schema'",
        "store_schema 99": "UPDATE meta SET value = '99' WHERE key = 'store_schema'",
        "a missing column": "ALTER TABLE runs DROP COLUMN end_info",
        "a missing table": "DROP TABLE run_vectors",
        "no meta row": "DELETE FROM meta",
    }
    for why, sql in damage.items():
        for command in ("compare", "collect"):
            argv = (["compare", "hostile-host", "hostile-host", "--store", "{dir}/s.sqlite"] if command == "compare"
                    else ["collect", "{dir}/results", "--store", "{dir}/s.sqlite"])
            sc.add("store-damaged", f"{command} on a store with {why}", argv, (2,), victim="s.sqlite",
                   before=[["collect", "{dir}/results", "--store", "{dir}/s.sqlite"], ["sql", sql]],
                   setup=lambda d: _write_run(d, finished=True))
    for _ in range(6):
        seed = rng.randrange(1 << 30)
        for command in ("compare", "collect"):
            argv = (["compare", "hostile-host", "hostile-host", "--store", "{dir}/s.sqlite"] if command == "compare"
                    else ["collect", "{dir}/results", "--store", "{dir}/s.sqlite"])
            sc.add("store-damaged", f"{command} on a store with bit-rot (seed {seed})", argv, (2,),
                   victim="s.sqlite", before=[["collect", "{dir}/results", "--store", "{dir}/s.sqlite"],
                                              ["rot", str(seed)]], setup=lambda d: _write_run(d, finished=True))
    for why, data in (("text", b"not a store\n"), ("zeros", b"\x00" * 8192), ("a truncated header", b"SQLite fo")):
        sc.add("store-damaged", f"compare on a store file of {why}",
               ["compare", "hostile-host", "hostile-host", "--store", "{dir}/s.sqlite"], (2,), victim="s.sqlite",
               setup=lambda d, data=data: (d / "s.sqlite").write_bytes(data))
    sc.add("store-damaged", "collect into a store that is a directory",
           ["collect", "{dir}/results", "--store", "{dir}/s.sqlite"], (2,),
           setup=lambda d: (_write_run(d, finished=True), (d / "s.sqlite").mkdir()))
    sc.add("store-damaged", "collect into a store that links elsewhere",
           ["collect", "{dir}/results", "--store", "{dir}/s.sqlite"], (2,), victim="victim.sqlite",
           setup=lambda d: (_write_run(d, finished=True), (d / "victim.sqlite").write_bytes(b"x"),
                            (d / "s.sqlite").symlink_to(d / "victim.sqlite")))


def keep_scenarios(sc: Scenarios) -> None:
    """What the store holds afterwards: nothing lost, nothing duplicated."""
    many = [line(valid_record(i)) for i in range(6)]
    for n in (1, 3, 5):
        def setup(d, n=n):
            _write_run(d / "full", many, finished=True)
            _write_run(d / "part", many[:n], finished=True)
        sc.add("store-keeps", f"a partial copy ({n} of 6 records) after the whole run",
               ["collect", "{dir}/part/results", "--store", "{dir}/s.sqlite"], (1,), records=6,
               before=[["collect", "{dir}/full/results", "--store", "{dir}/s.sqlite"]], setup=setup)
    for k in (2, 3, 10):
        sc.add("store-keeps", f"every line written {k} times", ["collect", "{dir}/results", "--store",
                                                                 "{dir}/s.sqlite"], (0,), records=3,
               setup=lambda d, k=k: _write_run(d, GOOD_LINES * k, finished=True))
    sc.add("store-keeps", "a finished run's last line without its newline",
           ["collect", "{dir}/results", "--store", "{dir}/s.sqlite"], (0,), records=3,
           setup=lambda d: _write_run(d, GOOD_LINES[:2] + [GOOD_LINES[2].rstrip(b"\n")], finished=True))
    for mode, suffix in (("w:gz", ".tar.gz"), ("w", ".tar"), ("w:bz2", ".tar.bz2"), ("w:xz", ".tar.xz")):
        bad = [m if not m[0].name.endswith("records.jsonl") else member(m[0].name, b"{\n")
               for m in run_members("hostile-host/bad")]
        sc.add("store-keeps", f"{suffix} with a good run, then a bad one", ["collect", "{dir}/runs" + suffix,
                                                                            "--store", "{dir}/s.sqlite"], (1,),
               records=0, setup=lambda d, mode=mode, suffix=suffix, bad=bad: (d / ("runs" + suffix)).write_bytes(
                   _tar(run_members("hostile-host/good") + bad, mode)))


def gate_scenarios(sc: Scenarios) -> None:
    other = [line(_set(valid_record(i), "case", "quick.other")) for i in range(3)]
    sc.add("gate-no-data", "compare two runs with no combination in common",
           ["compare", "{dir}/a/results", "{dir}/b/results"], (4,),
           setup=lambda d: (_write_run(d / "a", finished=True), _write_run(d / "b", other, finished=True)))
    sc.add("gate-no-data", "compare against an empty folder", ["compare", "{dir}/a/results", "{dir}/empty"], (4,),
           setup=lambda d: (_write_run(d / "a", finished=True), (d / "empty").mkdir()))
    sc.add("gate-no-data", "compare against a head whose journal is empty",
           ["compare", "{dir}/a/results", "{dir}/b/results"], (4,),
           setup=lambda d: (_write_run(d / "a", finished=True), _write_run(d / "b", [], finished=True)))
    sc.add("gate-no-data", "compare against a head that collect refuses",
           ["compare", "{dir}/a/results", "{dir}/b/results"], (4,),
           setup=lambda d: (_write_run(d / "a", finished=True),
                            _write_run(d / "b", [line(_set(valid_record(), "extra", [1]))], finished=True)))
    sc.add("gate-no-data", "compare two machines with nothing in common",
           ["compare", "{dir}/a/results", "{dir}/b/results"], (4,),
           setup=lambda d: (_write_run(d / "a", finished=True), _write_run(d / "b", other, finished=True)))


def terminal_scenarios(sc: Scenarios) -> None:
    for why, name in (("an escape sequence", "r\x1b[2J"), ("a carriage return", "r\rX"), ("a bell", "r\x07"),
                      ("a bidi override", "r\u202eX"), ("a C1 control", "r\x9b31m"), ("a title escape",
                                                                                       "r\x1b]0;pwned\x07")):
        sc.add("terminal", f"a source folder named with {why}", ["collect", "{dir}/" + name, "--store",
                                                                 "{dir}/s.sqlite"], (1,),
               setup=lambda d, name=name: ((d / name / "m").mkdir(parents=True), (d / name / "m" / "run.json")
                                           .write_bytes(b"{")))


def make_scenarios(out: Path, rng: random.Random) -> list[dict]:
    sc = Scenarios(out)
    resume_scenarios(sc, rng)
    path_scenarios(sc)
    cli_scenarios(sc)
    store_scenarios(sc, rng)
    keep_scenarios(sc)
    gate_scenarios(sc)
    terminal_scenarios(sc)
    return sc.items


# ---- the tally: every item run where it enters, in a forked child with a time and memory limit --------------------

OUTCOMES = ("refused cleanly", "traceback", "hang", "written outside", "lost", "duplicated", "wrong outcome",
            "over 2 GiB")
ESCAPE = Path("/tmp/convbench-escape")
HANG_S = 60


def _snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every entry under ``root`` (links not followed) with its type, size and mtime, but those whose path starts
    with one of ``skip`` (a directory that does is not walked: nothing below it can be kept). Taken twice per
    scenario over the whole corpus, so it walks with scandir and plain strings."""
    snap: dict[str, str] = {}
    todo = [str(root)]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:  # as os.walk: a directory that cannot be listed is left out
            continue
        for e in entries:
            p = e.path
            if skip and p.startswith(skip):
                continue
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                snap[p] = "link:" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                snap[p] = f"file:{st.st_size}:{st.st_mtime_ns}"
            else:
                snap[p] = f"mode:{st.st_mode:o}"
                if stat.S_ISDIR(st.st_mode):
                    todo.append(p)
    return snap


def _outside(snap: dict[str, str], skip: tuple[str, ...]) -> dict[str, str]:
    """The entries of a snapshot that _snapshot with ``skip`` would have kept."""
    return {p: v for p, v in snap.items() if not p.startswith(skip)}


def _run_child(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> tuple[str, int | None, int]:
    """('done'|'hang', exit code, peak RSS KiB) of ``convbench argv`` in a forked child (the parent has
    imported what the commands import, so a child starts in milliseconds)."""
    import resource
    import traceback

    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.setpgid(0, 0)  # its own process group: a hang is ended with every worker it started
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.environ.update(env)
            os.chdir(cwd)
            resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
            from harness import cli

            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # noqa: BLE001 - what the tally counts as a traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + HANG_S
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            _kill_group(pid)  # a worker left behind would write into the next scenario's snapshot
            return "done", os.waitstatus_to_exitcode(status), usage.ru_maxrss
        if time.monotonic() > deadline:
            _kill_group(pid)
            _, status, usage = os.wait4(pid, 0)
            return "hang", None, usage.ru_maxrss
        time.sleep(0.01)


def _kill_group(pgid: int) -> None:
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _escape_state() -> dict[str, str] | None:
    """What is at /tmp/convbench-escape (where traversal names and CONVBENCH_MACHINE=/tmp/... point)."""
    return _snapshot(ESCAPE) if ESCAPE.exists() else None


def _stored_records(store: Path) -> int:
    import sqlite3

    if not store.is_file():
        return 0
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return db.execute("SELECT coalesce(sum(n_records), 0) FROM runs").fetchone()[0]
    except sqlite3.Error:
        return -1
    finally:
        db.close()


def _rot(store: Path, seed: int) -> None:
    """Flip bits in a few pages after the first (bit-rot under the file header)."""
    r = random.Random(seed)
    data = bytearray(store.read_bytes())
    for _ in range(4):
        page = r.randrange(1, max(2, len(data) // 4096))
        for i in range(page * 4096, min(len(data), page * 4096 + 16)):
            data[i] ^= r.randrange(1, 256)
    store.write_bytes(bytes(data))


def _judge(log: Path, state: str, code: int | None, rss_kib: int, expect: tuple[int, ...], checks) -> str:
    text = log.read_text(errors="replace")
    if "Traceback (most recent call last)" in text:
        return "traceback"
    if state == "hang":
        return "hang"
    if rss_kib > 2 << 20:
        return "over 2 GiB"
    verdict = checks(text)
    if verdict:
        return verdict
    if code not in expect:
        return "wrong outcome"
    return "refused cleanly"


def tally(out: Path, collect_items: bool = True) -> dict:
    """Run every item and scenario under OUT; counts per outcome and per category, and the items that failed.
    ``collect_items=False`` runs the scenarios only (the collect items have their own test)."""
    import harness.cli.bench_cmds  # noqa: F401
    import harness.cli.measure_cmds  # noqa: F401
    import harness.cli.store_cmds  # noqa: F401 - imported once here, so that each forked child starts at once
    import harness.collect.ingest  # noqa: F401
    import harness.run.sweep  # noqa: F401

    try:
        import torch  # noqa: F401 - sweep and repro import it
    except ImportError:
        pass
    sandbox = out / "sandbox"
    sandbox.mkdir(exist_ok=True)
    env = {"HOME": str(sandbox), "TMPDIR": str(sandbox)}
    items = json.loads((out / "manifest.json").read_text()) if collect_items else []
    scenarios = json.loads((out / "scenarios.json").read_text())
    results: list[dict] = []
    for i, it in enumerate(items):
        source = out / it["path"].split("/")[0]
        store = sandbox / f"c{i}.sqlite"
        before, escape = _snapshot(source), _escape_state()
        log = sandbox / "log"
        state, code, rss = _run_child(["collect", str(source), "--store", str(store), "--quiet"], env, sandbox,
                                      log)

        def checks(text, source=source, store=store, before=before, escape=escape):
            if _escape_state() != escape or _snapshot(source) != before:
                return "written outside"
            if _stored_records(store) != 0:
                return "wrong outcome"  # an item that must be refused was stored
            return None
        results.append({**it, "outcome": _judge(log, state, code, rss, (1,), checks)})
        for p in sandbox.glob(f"c{i}.sqlite*"):
            p.unlink()
    corpus = out.resolve()  # every scenario's folder is corpus/scenarios/NAME
    after: dict[str, str] | None = None  # the corpus (the sandbox left out) as the last scenario left it
    for sc in scenarios:
        d = (out / sc["path"]).resolve()
        assert d.parent.parent == corpus, d
        fill = lambda a, d=d: [x.replace("{dir}", str(d)) for x in a]  # noqa: E731
        log = sandbox / "log"
        ok = True
        for step in sc["before"]:
            if step[0] == "sql":
                import sqlite3

                db = sqlite3.connect(d / "s.sqlite")
                db.execute(step[1])
                db.commit()
                db.close()
            elif step[0] == "rot":
                _rot(d / "s.sqlite", int(step[1]))
            else:
                ok &= _run_child(fill(step), env, d, log)[1] == 0
        victim = d / sc["victim"] if sc["victim"] else None
        vbefore = (victim.read_bytes() if victim.is_file() else None) if victim else None
        elsewhere = (str(d), str(sandbox))  # the corpus and scenarios but this one and the log
        # The corpus outside this scenario as the last one left it (its before-steps write inside it only): one
        # walk of the whole corpus per scenario, not two.
        if after is None:
            after = _snapshot(corpus, skip=(str(sandbox),))
        before = _outside(after, elsewhere)
        inside = _snapshot(d, skip=(str(d / "deep/a/b/results"), str(d / "s.sqlite"), str(d / "results")))
        escape = _escape_state()
        state, code, rss = _run_child(fill(sc["argv"]), {**env, **sc["env"]}, d, log)
        after = _snapshot(corpus, skip=(str(sandbox),))

        def checks(text, d=d, sc=sc, victim=victim, vbefore=vbefore, before=before, inside=inside, ok=ok,
                   elsewhere=elsewhere, escape=escape, after=after):
            if not ok:
                return "wrong outcome"
            if _escape_state() != escape or _outside(after, elsewhere) != before:
                return "written outside"
            if victim and (victim.read_bytes() if victim.is_file() else None) != vbefore:
                return "written outside"
            now = _snapshot(d, skip=(str(d / "deep/a/b/results"), str(d / "s.sqlite"), str(d / "results")))
            if now != inside and sc["category"] != "terminal":
                return "written outside"
            if sc["records"] is not None:
                held = _stored_records(d / "s.sqlite")
                if held < sc["records"]:
                    return "lost"
                if held > sc["records"]:
                    return "duplicated"
            if any(ch in text for ch in "\x1b\r\x07\x9b\u202e"):
                return "wrong outcome"  # a raw control character reached the terminal
            lines = [x for x in text.splitlines() if x.strip()]
            if sc["expect"] == [2] and len(lines) != 1:
                return "wrong outcome"  # a refusal is one line
            return None
        results.append({**sc, "outcome": _judge(log, state, code, rss, tuple(sc["expect"]), checks)})
        # the checks read this scenario's store, which may leave SQLite's -shm beside it: the next scenario's
        # "before" is the corpus after them
        after = {**_outside(after, (str(d) + os.sep,)), **_snapshot(d)}
    counts = {o: sum(r["outcome"] == o for r in results) for o in OUTCOMES}
    by_category: dict[str, dict[str, int]] = {}
    for r in results:
        by_category.setdefault(r["category"], {}).setdefault(r["outcome"], 0)
        by_category[r["category"]][r["outcome"]] += 1
    summary = {"tried": len(results), "collect_items": len(items), "scenarios": len(scenarios), **counts,
               "by_category": by_category,
               "failed": [{k: r[k] for k in ("path", "category", "why", "outcome")} for r in results
                          if r["outcome"] != "refused cleanly"]}
    (out / "tally.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--tally", action="store_true", help="then run every item and scenario and count outcomes")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"{args.out}: exists and is not empty", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    c = Corpus(args.out)
    run_json_items(c, rng)
    record_items(c, rng)
    end_items(c)
    filesystem_items(c)
    tar_items(c, rng)
    asv_items(c)
    typed_items(c, rng)
    journal_items(c)
    gz_journal_items(c)
    archive_items(c)
    archive_bombs(c)
    asv_hostile_items(c)
    (args.out / "manifest.json").write_text(json.dumps(c.items, indent=1))
    scenarios = make_scenarios(args.out, rng)
    (args.out / "scenarios.json").write_text(json.dumps(scenarios, indent=1))
    cats: dict[str, int] = {}
    for it in c.items:
        cats[it["category"]] = cats.get(it["category"], 0) + 1
    print(f"{len(c.items)} hostile items in {args.out}: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    print(f"{len(scenarios)} scenarios (resume, repro, paths, command line, store, gate, terminal) in "
          f"{args.out / 'scenarios.json'}")
    if args.tally:
        summary = tally(args.out)
        print("tried " + str(summary["tried"]) + ": " + ", ".join(f"{o} {summary[o]}" for o in OUTCOMES))
        for f in summary["failed"][:40]:
            print(f"  {f['outcome']}: {f['category']}: {f['why'][:100]!r} ({f['path']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.records import Accuracy, Determinism, Record, Timing, dumps  # noqa: E402

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
                records: bytes | None = None, end: bytes | None = GOOD_END) -> Path:
        """A results tree <item>/<machine>/<run> with the given files (None: leave the file out)."""
        item = self._slot(category)
        d = item / "hostile-host" / "run1"
        d.mkdir(parents=True)
        for name, data in (("run.json", run_json), ("records.jsonl", records if records is not None
                                                     else b"".join(GOOD_LINES)), ("end.json", end)):
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=20261129)
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
    (args.out / "manifest.json").write_text(json.dumps(c.items, indent=1))
    cats: dict[str, int] = {}
    for it in c.items:
        cats[it["category"]] = cats.get(it["category"], 0) + 1
    print(f"{len(c.items)} hostile items in {args.out}: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

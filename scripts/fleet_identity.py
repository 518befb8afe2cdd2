#!/usr/bin/env python3
"""Proof that a faster collect or report changed no result: the same fleet collected and reported by two codes
(this checkout and ``--baseline``, another checkout's root, e.g. ``git archive OLD harness | tar -x -C DIR``),
then every table of both stores compared row by row and every page of both sites compared byte by byte (the
"generated" minute and the store's path, named on each page, aside).

    python scripts/fleet_identity.py --baseline /tmp/base --machines 10 --nights 60   # 328 800 records

Each collect runs with ``--jobs 1`` so that both stores number their runs and combinations in the same order;
exit status 1 on any difference, with the first differences printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bench_fleet  # noqa: E402

_STAMP = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d UTC")


def _texts(blob: bytes) -> bytes:
    """A run's texts as the values they hold, a row per record, one spelling: later store layouts keep them
    compressed (store_packing.pack_texts), then each extra as an object instead of its JSON text, then by
    column, each extra by its key set, then each key's values encoded (_values), and in the newest layout
    their numbers binary (a part before the JSON: b"\\0BIN", its length, the part). Read here with the standard
    library, apart from the code being compared."""
    plain = blob if blob[:1] in b"[{" else zlib.decompress(blob)
    area = b""
    if plain.startswith(b"\0BIN"):
        end = 8 + int.from_bytes(plain[4:8], "little")
        plain, area = plain[end:], plain[8:end]
    texts = json.loads(plain)
    if isinstance(texts, dict):
        extras: list = [None] * len(texts["shape"])
        for sid, (keys, values) in enumerate(texts["extras"]):
            at = [i for i, s in enumerate(texts["shape"]) if s == sid]
            for i, row in zip(at, zip(*(_values(v, len(at), area) for v in values), strict=True), strict=True):
                extras[i] = dict(zip(keys, row, strict=True))
        texts = [[*r] for r in zip(*texts["columns"], extras, strict=True)]
    rows = [[*r[:-1], json.loads(r[-1]) if isinstance(r[-1], str) else r[-1]] for r in texts]
    return json.dumps(rows, sort_keys=True).encode()


def _values(values: list | dict, count: int, area: bytes = b"") -> list:
    """A key's ``count`` values as a store keeps them since the fourth layout: a list, or objects alike
    by key ({keys, columns}), or lists of numbers of one length flat ({width, flat}), or (the newest layout) numbers
    in the binary part ({"f8" or "i8": [first, count]}, in 8-byte items)."""
    if isinstance(values, list):
        return values
    if "flat" in values:
        w, flat = values["width"], values["flat"]
        flat = _values(flat, w * count, area) if isinstance(flat, dict) else flat
        return [flat[i * w:(i + 1) * w] for i in range(count)]
    if "columns" not in values:
        (kind, (first, n)), = values.items()
        return list(struct.unpack_from(f"<{n}{'d' if kind == 'f8' else 'q'}", area, 8 * first))
    columns = [_values(c, count, area) for c in values["columns"]]
    return [dict(zip(values["keys"], row, strict=True)) for row in zip(*columns, strict=True)]


def table_digests(path: Path) -> dict[str, tuple[int, str]]:
    """(rows, sha256 of every row in primary-key order) of each table of a store; a run's texts as the values
    they hold (_texts), its numbers inflated."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = {}
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"):
        h, n = hashlib.sha256(), 0
        cur = db.execute(f"SELECT * FROM {name} ORDER BY rowid" if name != "meta" else
                         "SELECT * FROM meta ORDER BY key")
        names = [d[0] for d in cur.description]
        for row in cur:
            if name == "run_records":
                row = dict(zip(names, row, strict=True))
                # numbers as they are, or compressed (store_packing.pack_numbers) where smaller
                row.update(texts=_texts(row["texts"]), numbers=row["numbers"] if len(row["numbers"]) == 120 * row["n"]
                           else zlib.decompress(row["numbers"]))
                row = tuple(row.values())
            h.update(repr(row).encode())
            n += 1
        out[name] = (n, h.hexdigest())
    db.close()
    return out


def page_digests(site: Path, store: Path) -> dict[str, str]:
    """sha256 of each file of a site, with the minute it was generated and the store's path (named on every
    page) taken out."""
    return {str(f.relative_to(site)): hashlib.sha256(
        _STAMP.sub(b"STAMP", f.read_bytes()).replace(str(store).encode(), b"STORE")).hexdigest()
        for f in sorted(site.rglob("*")) if f.is_file()}


def run(root: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the command and its children) of `convbench ARGS` with the harness of ``root``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(bench_fleet.convbench(*args, root=root), check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other code's root (a folder holding harness/)")
    ap.add_argument("--machines", type=int, default=10)
    ap.add_argument("--nights", type=int, default=60)
    ap.add_argument("--combos", type=int, default=548)
    ap.add_argument("--workdir", default=None, help="default: a temporary folder, removed after")
    ap.add_argument("--reuse", action="store_true", help="reuse the fleet already generated in --workdir")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="convbench-identity-"))
    fleet = work / "fleet"
    if not (args.reuse and fleet.exists()):
        shutil.rmtree(fleet, ignore_errors=True)
        fleet.mkdir(parents=True)
        with mp.get_context("fork").Pool() as pool:
            n = sum(pool.imap_unordered(bench_fleet.gen_machine, [(mi, args.nights, args.combos, str(fleet))
                                                                  for mi in range(args.machines)]))
        print(f"generated {n} records in {args.machines * args.nights} runs")
    results = {}
    for side, root in (("baseline", Path(args.baseline).resolve()), ("this", ROOT)):
        store = work / f"{side}.sqlite"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(work / f"site-{side}", ignore_errors=True)
        c = run(root, ["collect", str(fleet), "--store", str(store), "--jobs", "1", "-q"])
        r = run(root, ["report", "--store", str(store), "--out", str(work / f"site-{side}")])
        print(f"{side} ({root}): collect {c[0]:.1f} s, {c[1]:.1f} CPU-s; report {r[0]:.1f} s, {r[1]:.1f} CPU-s")
        results[side] = (table_digests(store), page_digests(work / f"site-{side}", store))
    (tb, pb), (tt, pt) = results["baseline"], results["this"]
    bad = [f"table {k}: {tb.get(k)} vs {tt.get(k)}" for k in sorted(tb.keys() | tt.keys()) if tb.get(k) != tt.get(k)]
    bad += [f"page {k} differs" if k in pb and k in pt else f"page {k} only in {'baseline' if k in pb else 'this'}"
            for k in sorted(pb.keys() | pt.keys()) if pb.get(k) != pt.get(k)]
    print(f"{len(tb)} tables ({sum(n for n, _ in tb.values())} rows), {len(pb)} files of the site compared")
    for line in bad[:20]:
        print("  DIFFERS:", line)
    print("identical" if not bad else f"{len(bad)} differences")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Two runs' output hashes, combination by combination: a trust figure of issue 40 ("output hashes identical to the
committed runs for every deterministic combination") as a count rather than by eye.

A combination counts where both runs measured it (status ok) and its record names one output: a hash, every repeat
and a fresh handle giving the same bits, one distinct output, and no other bits in the replica's process. Those
stable in both runs are equal or differ; the others are counted by why (unstable in both: documented
non-determinism or not; stable in one run only). A change of code that alters no kernel leaves every stable hash
equal; a GPU of another model may pick another kernel (compare words it "another engine/algorithm was chosen").

    python3 scripts/run_hashes.py BASE HEAD          # each a run folder or tarball, as `convbench collect` reads it
    python3 scripts/run_hashes.py PAIR               # a tarball of two runs (a paired study): older against newer
    python3 scripts/run_hashes.py --list BASE HEAD   # also each stable combination whose hash differs

Exit 0 where every combination stable in both has equal hashes, 1 where one differs, 2 where a run cannot be read.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.timechange import kernel_key  # noqa: E402
from harness.collect.runread import RunsRead  # noqa: E402
from harness.core.records import OK, Record, settings_key  # noqa: E402

EQUAL, DIFFERS = "stable in both, hash equal", "stable in both, hash differs"


def one_output(rec: Record) -> bool:
    """Whether the record names one output: bits that name its kernel (timechange.kernel_key: one distinct output,
    every repeat and the replica's process alike), a fresh handle giving them too."""
    return kernel_key(rec) is not None and rec.determinism.fresh_handle_equal is not False


class Unreadable(Exception):
    """A path that is not the runs asked for (asv's results beside them hold no hashes and are passed over)."""


def sweeps(path: str) -> list[dict[str, Record]]:
    """Each sweep run under ``path``, oldest first: its records that were measured and checked for determinism,
    by identity. A tarball as the nightly job packs it holds asv's results beside its run; they keep no hashes."""
    read = RunsRead([path])
    if read.refused:
        raise Unreadable(read.refused[0])
    return [{r.identity_key(): r for r in read.records(run["id"], with_samples=False)
             if r.status == OK and r.determinism is not None}
            for run in read.runs() if run["source"] != "asv"]


def pair(paths: list[str]) -> tuple[dict[str, Record], dict[str, Record]]:
    """(base, head): one run from each of two paths, or the two runs of one path (a paired study's tarball)."""
    runs = [sweeps(p) for p in paths]
    want = 2 if len(paths) == 1 else 1
    for path, found in zip(paths, runs, strict=True):
        if len(found) != want:
            raise Unreadable(f"{path}: holds {len(found)} sweep runs, not {want}")
    return (runs[0][0], runs[0][1]) if len(paths) == 1 else (runs[0][0], runs[1][0])


def classify(base: dict[str, Record], head: dict[str, Record]) -> tuple[collections.Counter, list[Record]]:
    """Counts by class over the combinations both runs measured, and the head records whose stable hash differs."""
    counts: collections.Counter = collections.Counter()
    differing = []
    for key in sorted(base.keys() & head.keys()):
        b, h = base[key], head[key]
        sb, sh = one_output(b), one_output(h)
        if sb and sh:
            same = b.determinism.hash == h.determinism.hash
            counts[EQUAL if same else DIFFERS] += 1
            if not same:
                differing.append(h)
        elif not sb and not sh:
            documented = bool((h.extra or {}).get("documented_nondeterministic"))
            counts[f"unstable in both ({h.backend}, {'documented' if documented else 'undocumented'})"] += 1
        else:
            counts[f"stable in {'base' if sb else 'head'} only ({h.backend})"] += 1
    return counts, differing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN", help="BASE HEAD, or one path holding two runs (older: base)")
    ap.add_argument("--list", action="store_true", help="each stable combination whose hash differs")
    args = ap.parse_args(argv)
    if len(args.runs) > 2:
        ap.error("give BASE HEAD, or one path holding two runs")
    try:
        base, head = pair(args.runs)
    except Unreadable as exc:
        print(f"run_hashes: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return 2
    counts, differing = classify(base, head)
    print(f"{' -> '.join(Path(p).name for p in args.runs)}: {len(base.keys() & head.keys())} combinations measured "
          f"by both ({len(base)} / {len(head)})")
    for what in (EQUAL, DIFFERS, *sorted(set(counts) - {EQUAL, DIFFERS})):
        print(f"  {counts[what]:6d}  {what}")
    if args.list:
        for r in differing:
            print(f"  differs: {r.case} {r.backend} {r.direction} {r.algo} {r.math} {r.dtype} {r.layout} "
                  f"{settings_key(r.settings or {})}".rstrip())
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())

"""``convbench collect | compare | report``: the fleet side of convbench, from run directories to the morning report."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from ..collect.store import DEFAULT_STORE, StoreError
from ..core.errors import UserError, printable
from .gateflags import add_gate_arguments, thresholds
from .helptext import command
from .jsonout import SCHEMA, add_json

EXIT_REGRESSION = 1  # `compare` found a regression above the thresholds: the nightly gate fails
MAX_JOBS = 256


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "collect", help="ingest run directories, asv results and tarballs into the store",
                description="Ingest runs (run directories, results trees, asv results trees, tarballs of them) "
                            "into the SQLite store. Re-collecting a run changes nothing; a file that is not a "
                            "convbench run is refused with a reason and the others are still collected.",
                examples=["convbench collect results", f"convbench collect inbox/*.tar.gz --store {DEFAULT_STORE}",
                          "convbench collect /shared/results --jobs 8 -q"])
    p.add_argument("sources", nargs="+", help="run directories, results roots, .asv/results trees or tarballs")
    p.add_argument("--store", default=DEFAULT_STORE, help="SQLite store file (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="parser processes (default 1; the CPU count for big fleets)")
    p.add_argument("--replace", action="store_true",
                   help="let a copy of a stored run with fewer records replace it (refused otherwise)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary line (and refusals)")
    p.set_defaults(handler=cmd_collect)

    p = command(sub, "compare", help="compare two runs (or images); exits 1 on a regression (nightly CI gate)",
                description="Compare BASE with HEAD record by record. Each is a run directory, tarball or "
                            "results tree (read into memory, nothing written), or, in --store, a run id (or "
                            "unique prefix), 'image:NAME' or 'machine:NAME'. Runs are paired per machine (latest "
                            "of each side; asv's results only with asv's); with one machine on each side and none "
                            "in common, the two machines are compared. Exit 0: no regression; 1: a regression "
                            "fails the gate; 4: nothing to decide on.",
                examples=["convbench compare results/m1/RUN_A results/m1/RUN_B",
                          "convbench compare image:cu124-torch25 image:cu126-torch26 --all",
                          "convbench compare 2026-12-01T01 2026-12-02T01 --json | jq '.findings[0]'"])
    p.add_argument("base", help="the reference: a path, run id (or prefix), image:NAME or machine:NAME")
    p.add_argument("head", help="what is judged against it, in the same forms")
    p.add_argument("--store", default=DEFAULT_STORE, help="SQLite store for ids and names (default: %(default)s)")
    add_json(p)
    add_gate_arguments(p)
    p.add_argument("--all", action="store_true", help="also list improvements and changes")
    p.set_defaults(handler=cmd_compare)

    p = command(sub, "report", help="write the static HTML report (offline, one folder)",
                description="Render the store as a static site: index.html plus per-topic and per-machine pages, "
                            "every asset inline, usable from a file:// URL.",
                examples=["convbench report", "convbench report --store fleet.sqlite --out /srv/www/convbench"])
    p.add_argument("--store", default=DEFAULT_STORE, help="SQLite store to render (default: %(default)s)")
    p.add_argument("--out", default="reports/site", help="output folder (default: reports/site, git-ignored)")
    p.add_argument("--title", default="convbench fleet report", help="the pages' title (default: %(default)s)")
    add_gate_arguments(p)
    p.set_defaults(handler=cmd_report)


def cmd_collect(args: argparse.Namespace) -> int:
    from ..collect.ingest import collect

    if not 1 <= args.jobs <= MAX_JOBS:
        raise UserError(f"--jobs must be 1 to {MAX_JOBS}")
    missing = [s for s in args.sources if not os.path.lexists(s)]
    if missing:  # a mistyped path is a usage error, found before any store is made
        raise UserError(f"{missing[0]}: does not exist" + (f" (and {len(missing) - 1} more)" if len(missing) > 1
                                                          else "") + "; nothing collected")
    say = None if args.quiet else (lambda line: print(printable(line), file=sys.stderr))
    if args.store == DEFAULT_STORE:  # the default store lives in the results folder, made on first use
        Path(DEFAULT_STORE).parent.mkdir(parents=True, exist_ok=True)
    try:
        summary = collect(args.store, args.sources, jobs=args.jobs, progress=say, replace=args.replace,
                          meter=not args.quiet)
    except StoreError as exc:
        raise UserError(str(exc)) from None
    print(printable(f"{args.store}: {summary.line()}"))
    if summary.refused:
        return 1
    return 0


# ---- compare ---------------------------------------------------------------------------------------------------

def cmd_compare(args: argparse.Namespace) -> int:
    from ..collect.operands import judge, operands

    th = thresholds(args)  # checked before any store is read
    ops = operands(args.base, args.head, args.store,
                   refused=lambda line: print(printable(f"convbench compare: refused: {line}"), file=sys.stderr))
    j = judge(ops, th)
    if args.json:
        print(strict_json({"schema": SCHEMA, "pairs": j.notes, "thresholds": th.__dict__, "regressions": len(j.failing),
                           "impact": j.impacts, "findings": [f.to_dict() for f in j.findings]}))
    else:
        shown = j.findings if args.all else [f for f in j.findings if f.verdict in ("regression", "ambiguous")]
        print(printable_lines(render_table(shown, j.notes + impact_notes(j.impacts), len(j.failing))))
    return EXIT_REGRESSION if j.failing else 0


def impact_notes(rows: list[dict[str, Any]]) -> list[str]:
    """The workload impact as the table's notes: each row with a number, and the rows without one once per model,
    pass and what is missing."""
    out = [f"impact: {r['line']}" for r in rows if r["change"] is not None]
    gaps: dict[tuple, int] = {}
    for r in rows:
        if r["change"] is None:
            key = (r["model"], r["framework"], r["pass"], r["missing"])
            gaps[key] = gaps.get(key, 0) + 1
    out += [f"impact: {m} ({fw}) {p}: no number for {n} dtype/layout/choice row(s): {why}"
            for (m, fw, p, why), n in gaps.items()]
    return out


def strict_json(doc: dict[str, Any]) -> str:
    """``doc`` as strict JSON (no NaN or Infinity, which JSON readers refuse): a non-finite number (a ratio that
    overflowed) is written as null, and a note in ``notes`` says how many were."""
    count = 0

    def finite(v: Any) -> Any:
        nonlocal count
        if isinstance(v, float) and not math.isfinite(v):
            count += 1
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    clean = finite(doc)
    if count:
        clean["notes"] = [f"{count} number(s) not finite (a ratio that overflowed, say) are written as null"]
    return json.dumps(clean, indent=1, default=str, allow_nan=False)


def printable_lines(text: str) -> str:
    """Each line escaped for the terminal (names in a table come from other hosts' files)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def render_table(findings, notes: list[str], n_failing: int) -> str:
    lines = [f"compare: {n}" for n in notes]
    cols = ("words", "kind", "machine", "case", "backend", "direction", "algo", "math", "dtype", "layout",
            "base", "head", "evidence")
    rows = [[str(getattr(f, c)) for c in cols[:-1]] + [f.evidence + (f"; why: {f.explanation}" if f.explanation else "")]
            for f in sorted(findings, key=lambda f: (f.verdict != "regression", f.kind, f.key))]
    if rows:
        widths = [min(28, max(len(c), *(len(r[i]) for r in rows))) for i, c in enumerate(cols[:-1])]
        fmt = "  ".join(f"{{:<{w}.{w}}}" for w in widths) + "  {}"
        lines.append(fmt.format(*cols))
        lines += [fmt.format(*r) for r in rows]
    lines.append(f"{n_failing} regression(s) fail the gate; {len(findings)} finding(s) listed")
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> int:
    from ..collect.operands import open_store
    from ..report import build, output

    output.check(args.out)  # an empty or dangerous --out is refused before the store is read
    th = thresholds(args)
    store = open_store(args.store, verify=False)  # build checks every page beside its work
    try:
        pages = build(store, args.out, title=args.title, meter=True, thresholds=th)
    except StoreError as exc:
        raise UserError(str(exc)) from None
    finally:
        store.close()
    print(printable(f"report written: {Path(args.out) / 'index.html'} ({len(pages)} pages)"))
    return 0

"""The index: what changed last night, machine by machine, in the gate's own verdicts and words.

For each machine (a GPU on a host) its latest night against its previous night on the same stack and against its
previous stack (pairing.py), judged by ``compare.compare_runs`` and ``compare.gate`` with the report's gate
settings (``Model.thresholds``, named on the index): the counts first, then the top findings with their explanation, then what the machine stopped
running and why. Verdict words come from the findings themselves, so a new verdict shows up without a change here.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import Any

from ..analysis import pairing, rollup
from ..analysis.compare import BITS_CHANGED, fingerprint_field, gate
from ..analysis.thresholds import Thresholds, settings_lines
from ..analysis.workload import workload
from ..core.records import OK, SKIPPED
from .fmt import minute, settings_str, slug
from .judging import NightlyComparison
from .model import Model

TOP = 5  # findings per comparison on the index; the machine's changes page has them all
TOP_GROUPS = 5  # roll-up groups per comparison on the index; the changes page has them all
# more machines with findings than this: the index opens with one line per machine (the answer on the first
# screen), shows the first OPEN_BLOCKS machines' findings and folds the others' (a 50-machine fleet's index was
# 35 000 px tall); a permalink to a machine opens its fold
OPEN_BLOCKS = 3
# what matters most first: a gate failure, then an undecided time, then what stopped running
ORDER = {"regression": 0, "ambiguous": 1, "improvement": 3, "change": 4}
PAGE_ROWS = 200  # rows per comparison on one changes page; more go to the pages after it (changes/<slug>-2.html ...)


def neutral(status: str) -> bool:
    """A status that is the expected answer, not a failure: the library does not support the combination, or the
    host cannot run it. It is counted apart and never colours a machine red."""
    return status.endswith("NOT_SUPPORTED") or status == SKIPPED


def label(f: Any) -> str:
    """The finding's verdict as ``convbench compare`` words it, with its kind where the words alone are vague."""
    if f.bits:
        return BITS_CHANGED + ("" if f.verdict == "change" else f" ({f.words})")
    return f.words if f.kind == "time" else f"{f.kind} {f.words}"


def rank(f: Any, failing: set[int]) -> tuple:
    size = abs(math.log(f.ratio)) if f.ratio and f.ratio > 0 else 0.0
    return (id(f) not in failing, ORDER.get(f.verdict, 2), -size, f.key)


def anchor(f: Any) -> str:
    """The permalink id of a finding on its machine's changes page: stable for the same finding night after night."""
    return f"f-{f.kind}-" + hashlib.sha1(f"{f.key}|{f.evidence.split(',')[0]}".encode()).hexdigest()[:12]


def listed(c: NightlyComparison, failing: set[int]) -> list[tuple[Any, list[Any]]]:
    """The rows of a comparison on its machine's changes pages, in their order: every finding but the
    combinations measured on one side only (counted there, not listed), settings variants of one call with the
    same bits and times collapsed into one row (rollup.collapse), gate failures first."""
    return rollup.collapse(sorted((f for f in c.findings if not (f.kind == "availability" and f.verdict == "change")),
                                  key=lambda f: rank(f, failing)), c.base_records, c.head_records)


def page_file(machine_slug: str, number: int) -> str:
    """The file of a machine's changes page ``number`` (1: the page the index links to)."""
    return f"{machine_slug}.html" if number == 1 else f"{machine_slug}-{number}.html"


def lost(c: NightlyComparison) -> list[dict[str, Any]]:
    """What the latest night ran less than its base, grouped by why: combinations that were ok and now fail with
    a status and reason, and combinations the night did not measure at all."""
    why: Counter = Counter()
    for f in c.findings:
        if f.kind != "availability":
            continue
        if f.verdict == "regression":
            rec = c.head_records.get(f.key)
            why[(f"ran before, now {f.head}", (rec and rec.reason) or "no reason recorded")] += 1
        elif f.head == "not measured":
            rec = c.base_records.get(f.key)
            where = f"{rec.backend} {rec.direction}" if rec is not None else "? ?"
            why[("not measured in the latest night", f"{where}: no run of the night covered it")] += 1
    return [{"n": n, "what": what, "why": reason} for (what, reason), n in why.most_common()]


def variants_str(variants: list[Any]) -> str:
    """The settings of a finding, or of each settings variant collapsed into it (rollup.collapse)."""
    if len(variants) == 1:
        return settings_str(variants[0].settings)
    return f"{len(variants)} settings, same bits and times: " + "; ".join(settings_str(v.settings) for v in variants)


def comparison(c: NightlyComparison, th: Thresholds, machine_slug: str) -> dict[str, Any]:
    failing = {id(f) for f in gate(c.findings, th)}
    counts = Counter(label(f) for f in c.findings)
    order = {label(f): rank(f, failing)[:2] for f in c.findings}
    # what stopped running is summed up by why (lost), not listed combination by combination; a top finding links
    # to the changes page that lists it (the ones before it there may be thousands of lost combinations)
    rows = listed(c, failing)
    top = [(f, vs, page_file(machine_slug, k // PAGE_ROWS + 1)) for k, (f, vs) in enumerate(rows)
           if f.kind != "availability"][:TOP]
    shared = len(c.base_records.keys() & c.head_records.keys())
    n = rollup.net(c.findings, c.base_records, c.head_records, len(failing))
    gpu = str(fingerprint_field(c.head_fp, "gpu.name") or c.machine.name) if c.head_fp else c.machine.name
    wl = workload(c.base_records, c.head_records, gpu)
    return {"what": c.comparison.what, "base": c.comparison.base, "head": c.comparison.head, "shared": shared,
            "n_base": len(c.base_records), "n_head": len(c.head_records),
            "n_failing": len(failing), "n": len(c.findings),
            # what the changes pages list: every finding but the combinations measured on one side only (counted)
            "n_listed": sum(1 for f in c.findings if not (f.kind == "availability" and f.verdict == "change")),
            "counts": [(lab, n, order[lab][1] == 0) for lab, n in
                       sorted(counts.items(), key=lambda kv: (order[kv[0]], -kv[1]))],
            "top": [{"f": f, "label": label(f), "gated": id(f) in failing, "settings": variants_str(vs),
                     "anchor": anchor(f), "file": file} for f, vs, file in top],
            "groups": rollup.groups(c.findings)[:TOP_GROUPS], "net": n, "net_line": rollup.net_line(n),
            "impact": wl,
            # rows whose 95 % interval excludes no change, largest first: a quiet machine's index row names them
            "moved": sorted((r for r in wl if r["change"] is not None and (r["low"] > 0 or r["high"] < 0)),
                            key=lambda r: -abs(r["change"])),
            "lost": lost(c), "stack_change": pairing.stack_change(c.comparison.base, c.comparison.head)}


def morning(g: Model) -> dict[str, Any]:
    """Index context: one block per machine, the ones with gate failures first; made once the judgements are
    in and kept (the index and the changes pages read the same blocks)."""
    if g.morning is not None:
        return g.morning
    th = g.thresholds
    blocks = []
    for m, comps in g.nightly:
        latest = m.latest
        cs = [comparison(c, th, slug(m.key)) for c in comps]
        minfo = g.minfo.get(m.name)
        where = "" if m.key.startswith("machine:") else "host {}, {}".format(*m.key.split("/", 1))
        blocks.append({"name": m.name, "key": m.key, "where": where, "source": m.source, "slug": slug(m.key),
                       "machine_slug": minfo.slug if minfo else None, "label": minfo.label if minfo else "",
                       "night": latest.night, "runs": latest.runs, "stack": latest.stack_line,
                       "started": minute(latest.runs[0]["started"]), "comparisons": cs,
                       "n_failing": sum(c["n_failing"] for c in cs),
                       "n_findings": sum(c["n"] for c in cs), "n_nights": len(m.nights)})
    blocks.sort(key=lambda b: (-b["n_failing"], -b["n_findings"], b["source"] != "journal", b["name"]))
    last = max((b["night"] for b in blocks), default=None)
    loud = [b for b in blocks if b["n_findings"]]
    out = {"blocks": blocks, "night": last, "n_failing": sum(b["n_failing"] for b in blocks),
           "loud": loud, "open": loud if len(loud) <= OPEN_BLOCKS else loud[:OPEN_BLOCKS],
           "folded": [] if len(loud) <= OPEN_BLOCKS else loud[OPEN_BLOCKS:],
           "quiet": [b for b in blocks if not b["n_findings"]],
           "silent": [b for b in blocks if b["night"] != last],  # no run last night: their latest is read
           "machines_failing": sum(1 for b in blocks if b["n_failing"]), "thresholds": th,
           "settings": settings_lines(th)}
    if g.judging is None:  # judged (model.finish): the blocks are final
        g.morning = out
    return out


def overview(g: Model) -> dict[str, Any]:
    """Machines x images: what ran, what failed (neutral statuses apart), what regressed between images."""
    rows = []
    for m in g.machines:
        cells = []
        for img in g.images:
            rs = [r for r in m.runs if r["image"] == img]
            if not rs:
                cells.append(None)
                continue
            last = rs[-1]
            cur = g.current.get((m.name, img), [])
            statuses = Counter(x.status for x in cur)
            failed = {k: v for k, v in statuses.items() if k != OK and not neutral(k)}
            expected = {k: v for k, v in statuses.items() if neutral(k)}
            cells.append({"runs": len(rs), "last_night": last["night"], "records": len(cur),
                          "ok": statuses.get(OK, 0), "failed": sum(failed.values()), "failed_by": failed,
                          "expected": sum(expected.values()), "expected_by": expected,
                          "asv": last["source"] == "asv",
                          "from_runs": len({x.run["id"] for x in cur}),
                          "incomplete": sum(1 for r in rs if not r["complete"]),
                          "regressions": g.regressed.get((m.name, img), 0),
                          "steps": g.steps_up.get((m.name, img), 0)})
        rows.append({"machine": m, "cells": cells})
    total_records = sum(r["n_records"] for r in g.runs)
    hw = Counter(m.label for m in g.machines)
    return {"rows": rows, "n_runs": len(g.runs), "n_records": total_records, "hardware": sorted(hw.items()),
            "n_regressions": sum(g.regressed.values()), "n_steps": sum(g.steps_up.values())}

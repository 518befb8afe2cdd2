"""Determinism: what was not bitwise reproducible, with documented non-determinism (the record's explanation
says why) grouped and collapsed apart from what nothing explains."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..core.explain import documented_nondeterminism
from ..core.records import OK, Record, RecordKind
from .fmt import settings_str
from .investigations import findings
from .model import Model, combo_label, distinct_per_column
from .paging import Parts

GROUP_INLINE = 10  # rows of a documented cause's group on the page itself


def documented_cause(rec: Record) -> str | None:
    """Why a stored record may differ run to run by documentation (explain.nondeterminism_cause), or None."""
    return documented_nondeterminism(rec.backend, rec.direction, rec.listed_settings, rec.extra)


def _same_problem(x: Record) -> tuple:
    """A record's combination without its kind: a repro record names the measurement it ran again."""
    settings = {k: v for k, v in x.settings.items() if k != "record"}
    return (x.case, x.backend, x.direction, x.algo, x.math, x.dtype, x.layout, settings_str(settings))


def _differs(x: Record) -> bool:
    """Repeats or a fresh handle gave other bits, or more than one distinct output."""
    d = x.determinism
    return d is not None and (d.repeat_equal == 0 or d.fresh_handle_equal == 0 or (d.distinct_outputs or 1) > 1)


def _grouped(rows: list[dict[str, Any]], parts: Parts, tid: str, macro: str, what: str,
             **args: Any) -> list[dict[str, Any]]:
    """Rows with a documented cause, a group per cause (largest first): its first rows on the page, all of them
    on pages of their own (the same explanation again and again says nothing new on the page itself)."""
    by_cause: dict[str, list[dict[str, Any]]] = {}
    for w in rows:
        by_cause.setdefault(w["cause"], []).append(w)
    return [{"cause": cause, "n": len(ws), "machines": sorted({w["machine"] for w in ws}),
             "t": parts.table(f"{tid}-{i}", ws, macro, f"{what}: {cause}", inline=GROUP_INLINE, **args)}
            for i, (cause, ws) in enumerate(sorted(by_cause.items(), key=lambda kv: -len(kv[1])), 1)]


def _most_common(values: np.ndarray) -> list[tuple[int, int]]:
    """(value, count) pairs in Counter(values).most_common()'s order, the most frequent first and ties in the
    order first seen, in one sort: a fleet's series have tens of thousands of columns to count."""
    u, first, n = np.unique(values, return_index=True, return_counts=True)
    order = np.lexsort((first, -n))
    return list(zip(u[order].tolist(), n[order].tolist(), strict=True))


INLINE = 50  # rows of a table of what nothing documents shown on the page itself; all on pages of their own


def determinism(g: Model, parts: Parts | None = None) -> dict[str, Any]:
    """The page's context; its long tables are registered with ``parts`` (the build writes their pages)."""
    parts = parts or Parts("determinism", "Determinism")
    within = []  # newest record of each combination per (machine, image) whose repeats / fresh handles differ
    summary = []
    repro_diff = []
    causes_of: dict[tuple[str, str], dict[Any, str | None]] = {}  # (machine, image) -> combo id -> documented cause
    for (machine, img), cur in sorted(g.current.items()):
        recs = [x for x in cur if x.status == OK and x.kind == RecordKind.MEASUREMENT]
        cause_of = {x.combo: documented_cause(x) for x in recs}
        by_problem = {_same_problem(x): cause_of[x.combo] for x in recs}
        causes_of[(machine, img)] = cause_of
        nd = [x for x in recs if _differs(x)]
        checked = [x for x in recs if x.determinism is not None and x.determinism.repeat_equal is not None]
        repro = [x for x in cur if x.kind == RecordKind.REPRO]
        fpe = Counter(x.extra.get("fresh_process_equal") for x in repro)
        repro_causes = [documented_cause(x) or by_problem.get(_same_problem(x)) for x in repro]
        differs_documented = sum(1 for x, c in zip(repro, repro_causes, strict=True)
                                 if c is not None and x.extra.get("fresh_process_equal") is False)
        causes = [cause_of[x.combo] for x in nd]  # nd is of recs: one record per combination
        expected_nd = sum(c is not None for c in causes)
        summary.append({"machine": machine, "label": g.minfo[machine].label, "image": img,
                        "runs": list(dict.fromkeys(x.run["run_id"] for x in cur)),
                        "ok": len(recs), "checked": len(checked), "nondeterministic": len(nd),
                        "expected": expected_nd, "unexpected": len(nd) - expected_nd,
                        "repro": len(repro), "repro_equal": fpe.get(True, 0),
                        "repro_differs": fpe.get(False, 0) - differs_documented,
                        "repro_differs_documented": differs_documented,
                        "repro_unknown": len(repro) - fpe.get(True, 0) - fpe.get(False, 0)})
        for x, cause in zip(nd, causes, strict=True):
            within.append({"machine": machine, "image": img, "rec": x, "settings": settings_str(x.listed_settings),
                           "cause": cause})
        for x, cause in zip(repro, repro_causes, strict=True):
            if x.extra.get("fresh_process_equal") is False:
                repro_diff.append({"machine": machine, "image": img, "rec": x,
                                   "settings": settings_str(x.listed_settings), "cause": cause})
    across = []
    autotune = []
    n_series = 0
    for s in g.series:
        if len(s.runs) < 2:
            continue
        n_series += 1
        distinct = distinct_per_column(s.hashes, 0)
        for col in np.flatnonzero(distinct > 1):
            c = combo_label(g.combos[int(s.combos[col])])
            hashes = s.hashes[:, col][s.hashes[:, col] != 0]
            across.append({"machine": s.machine, "image": s.image, "combo": c, "distinct": int(distinct[col]),
                           "nights": len(hashes), "top_share": _most_common(hashes)[0][1] / max(1, len(hashes)),
                           "cause": causes_of.get((s.machine, s.image), {}).get(int(s.combos[col]))})
        has = (s.chosen >= 0).any(axis=0)
        dch = distinct_per_column(s.chosen, -1)
        for col in np.flatnonzero(has):
            chosen = s.chosen[:, col][s.chosen[:, col] >= 0]
            if len(chosen) < 2:  # one night says nothing about stability across nights
                continue
            c = combo_label(g.combos[int(s.combos[col])])
            counts = _most_common(chosen)
            top, top_n = counts[0]
            autotune.append({"machine": s.machine, "image": s.image, "combo": c, "distinct": int(dch[col]),
                             "nights": len(chosen), "top": g.names.get(top, "?"), "top_share": top_n / len(chosen),
                             "all": ", ".join(f"{g.names.get(k, '?')} x{n}" for k, n in counts)})
    autotune.sort(key=lambda a: (a["top_share"], a["machine"]))
    across.sort(key=lambda a: (-a["distinct"], a["machine"]))
    unexpected = [w for w in within if w["cause"] is None]
    across_unexpected = [a for a in across if a["cause"] is None]
    repro_unexpected = [w for w in repro_diff if w["cause"] is None]
    for row in summary:  # what nothing documents stands out; documented non-determinism is neutral
        row["stands_out"] = bool(row["unexpected"] or row["repro_differs"])
    summary.sort(key=lambda row: not row["stands_out"])  # stable: machine and image order within each group
    return {"summary": summary, "standing_out": [row for row in summary if row["stands_out"]],
            "n_expected": sum(row["expected"] for row in summary),
            "within": parts.table("within", unexpected, "records", "records not bitwise reproducible with nothing "
                                  "documenting why", inline=INLINE, cols="within"),
            "expected": _grouped([w for w in within if w["cause"] is not None], parts, "expected", "records",
                                 "records not bitwise reproducible, as documented", cols="expected"),
            "across": parts.table("across", across_unexpected, "across", "combinations with different bits on "
                                  "different nights", inline=INLINE),
            "across_expected": _grouped([a for a in across if a["cause"] is not None], parts, "across-expected",
                                        "across", "combinations with different bits on different nights, as "
                                        "documented"),
            "autotune": parts.table("autotune", autotune, "chosen", "combinations with a chosen algorithm",
                                    inline=INLINE),
            "n_autotune_unstable": sum(1 for a in autotune if a["distinct"] > 1), "n_series": n_series,
            "repro_diff": parts.table("reprodiff", repro_unexpected, "records", "repro records with other bits "
                                      "than the sweep and nothing documenting why", inline=INLINE, cols="repro"),
            "repro_expected": _grouped([w for w in repro_diff if w["cause"] is not None], parts, "repro-expected",
                                       "records", "repro records with other bits than the sweep, as documented",
                                       cols="repro_expected"),
            "sessions": (sessions := findings(g)),
            "sessions_all": parts.table("sessions-table", sessions["autotune"], "autotune", "autotune records",
                                        inline=INLINE)}

"""The paired judgement of an upgrade: stack B against stack A on one GPU (a leg of a study, run/paired.py), one
verdict per combination, by the gate's own ``compare_runs``, so that the gate, the report's upgrade page and
``convbench upgrade`` say the same; the legs of a study confirmed against each other.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..core.records import OK, Record
from .compare import compare_runs
from .findings import Finding, FindingKind
from .thresholds import Thresholds

ROLES = ("A", "B")  # the base stack and the stack judged against it
KINDS = ("time", "bits", "expected bits", "accuracy", "availability", "determinism")  # Finding.judged_kind


def judge(a_records: list[Record], b_records: list[Record], th: Thresholds | None = None) -> dict[str, Any]:
    """One upgrade verdict per combination: time (faster / slower / same / ambiguous), bits (changed or
    not), accuracy, availability (status), determinism. The findings are compare's, so the gate, the report and
    the upgrade page say the same."""
    findings = compare_runs(a_records, b_records, th or Thresholds())
    per_key: dict[str, list[Finding]] = {}
    for f in findings:
        per_key.setdefault(f.key, []).append(f)
    counts: Counter[str] = Counter()
    for fs in per_key.values():
        for f in fs:
            counts[f"{f.judged_kind}:{f.words}"] += 1
    both = {r.identity_key() for r in a_records} & {r.identity_key() for r in b_records}
    ran = ({r.identity_key() for r in a_records if r.status == OK}
           & {r.identity_key() for r in b_records if r.status == OK})
    timed = {f.key for f in findings if f.kind == FindingKind.TIME}
    counts["time:same"] = len(ran - timed)
    return {"combinations": len(both), "both_ok": len(ran), "counts": dict(sorted(counts.items())),
            "findings": findings}


def confirm(legs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Across GPUs: for each (combination, kind), the verdicts of each leg; confirmed when every leg that
    measured the combination gave the same verdict (with one GPU nothing can be confirmed: ``legs`` = 1)."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for gpu, judged in legs.items():
        for f in judged["findings"]:
            seen.setdefault((f.key, f.judged_kind), {})[gpu] = f.words
    confirmed = sum(1 for v in seen.values() if len(v) == len(legs) and len(set(v.values())) == 1)
    return {"legs": len(legs), "findings": len(seen), "confirmed": confirmed if len(legs) > 1 else None}


# ---- studies in a store ----------------------------------------------------------------------------------------

def studies(store: Any, th: Thresholds | None = None,
            info: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every paired study in a store (an object with the store's ``runs``, ``run_json`` and ``records``), newest
    first: its stacks, and per GPU leg the two runs and their judgement (``judge``), with the agreement across legs
    (``confirm``). What the report's upgrade page shows. ``info``:
    every run's run_json, where the caller has read them already (Store.run_jsons; a fleet report's 18,250 runs
    read one by one again took 1.3 s)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for run in store.runs():
        meta = info[run["id"]] if info is not None else store.run_json(run["id"])
        p = (meta.get("options") or {}).get("paired")
        if isinstance(p, dict) and p.get("role") in ROLES and p.get("study"):
            leg = found.setdefault(str(p["study"]), {}).setdefault(str(p.get("gpu", "0")), {})
            leg[p["role"]] = {"run": run, "stack": p.get("stack"), "fingerprint": meta["fingerprint"]}
    out = []
    for study, legs in sorted(found.items(), reverse=True):
        judged = {}
        for gpu, sides in sorted(legs.items()):
            if set(sides) != set(ROLES):
                continue  # half a study (one side not collected): nothing to judge
            recs = {r: store.records(sides[r]["run"]["id"]) for r in ROLES}
            j = judge(recs["A"], recs["B"], th)
            judged[gpu] = {**j, "A": sides["A"], "B": sides["B"], "records": recs}  # the workload impact reads them
        if judged:
            first = next(iter(judged.values()))
            out.append({"study": study, "stacks": {r: first[r]["stack"] for r in ROLES}, "legs": judged,
                        "agreement": confirm(judged)})
    return out

"""The upgrade page: whether to take stack B over stack A, from the paired studies (`convbench upgrade`).

First screen: one verdict per stack pair over all its studies and GPUs (the workload impact on ResNet-50 and onnxruntime's models, the
slower / faster / unchanged counts, output bits changed, less accurate, status changes, how many findings a second
GPU confirmed, the worst changes grouped); then each study. A/A studies (one stack on both sides) prove the judge
quiet and are folded under "calibration". The judgement is judgement.judge, which is the gate's compare: the page,
`convbench upgrade` and `convbench compare` say the same words.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..analysis import paired_judgement as judgement
from ..analysis import rollup
from ..analysis.compare import PRECISION_RANK, fingerprint_field
from ..analysis.pairing import fields_change, stack_fields, stack_line
from ..analysis.workload import over_gpus, workload
from .model import Model

TOP = 15  # rows of each table of a study (25 made the sample's page 318 KB; 300 KB is the budget)
TOP_GROUPS = 10  # grouped worst changes in a stack pair's verdict
# judgement.judge's counts in the order and words a reader wants them; bad ones are marked
LABELS = (("time:slower", "slower", True), ("time:faster", "faster", False),
          ("bits:change", "output bits changed vs base", False),
          ("expected bits:change", "bits of documented non-deterministic algorithms", False),
          ("accuracy:regression", "less accurate", True), ("accuracy:improvement", "more accurate", False),
          ("accuracy:change", "accuracy changed", False), ("availability:regression", "stopped running", True),
          ("availability:improvement", "now run", False), ("availability:change", "measured on one side only", False),
          ("determinism:regression", "no longer deterministic", True),
          ("determinism:improvement", "now deterministic", False),
          ("determinism:change", "flips of documented non-determinism", False),
          ("time:ambiguous", "timing ambiguous", False))
# the verdict's counts: (label, keys of judgement.judge's counts summed, bad)
VERDICT = (("slower", ("time:slower",), True), ("faster", ("time:faster",), False),
           ("unchanged", ("time:same",), False), ("output bits changed vs base", ("bits:change",), False),
           ("less accurate", ("accuracy:regression",), True),
           ("status changes", ("availability:regression", "availability:improvement"), True))


def _row(f) -> dict[str, Any]:
    return {"f": f, "size": abs(math.log(f.ratio)) if f.ratio and f.ratio > 0 else 0.0}


def accuracy_order(f) -> tuple:
    """Class changes first (the largest step of PRECISION_RANK first), then regressions by their error growth."""
    step = 0
    if f.evidence.startswith("precision class"):
        step = abs(PRECISION_RANK.get(f.head, 3) - PRECISION_RANK.get(f.base, 3)) or 1
    return (-step, {"regression": 0, "change": 1}.get(f.verdict, 2), -(f.ratio or 0.0), f.key)


def _gpu_name(leg: dict[str, Any]) -> str:
    return str(fingerprint_field(leg["B"]["fingerprint"], "gpu.name") or "")


def verdict(pair: tuple[str, str], studies: list[dict[str, Any]]) -> dict[str, Any]:
    """One stack pair over its studies and GPUs: counts summed, findings confirmed, the workload impact per GPU,
    the worst changes grouped."""
    counts: Counter = Counter()
    findings = []
    confirmed = checked = 0
    # each GPU's records of every study of the pair pooled (studies come newest first; a combination timed by two
    # studies: the newer study's): a forward study and a backward study on one GPU make its training step
    pooled: dict[str, dict[str, Any]] = {}
    for s in studies:
        for gpu, leg in s["legs"].items():
            counts.update(leg["counts"])
            findings += leg["findings"]
            uuid = leg["A"]["fingerprint"].get("gpu", {}).get("uuid") or f"{s['study']}/{gpu}"
            side = pooled.setdefault(uuid, {"name": f"{_gpu_name(leg)} GPU {gpu}", "A": {}, "B": {}})
            for role in ("A", "B"):
                recs = (leg.get("records") or {}).get(role) or ()
                for r in (recs.values() if isinstance(recs, dict) else recs):
                    side[role].setdefault(r.identity_key(), r)
        if s["agreement"]["confirmed"] is not None:
            confirmed += s["agreement"]["confirmed"]
            checked += s["agreement"]["findings"]
    impacts = [row for p in pooled.values() for row in workload(p["A"], p["B"], p["name"])]
    return {"A": pair[0], "B": pair[1], "n_studies": len(studies), "n_gpus": len(pooled),
            "counts": [(label, sum(counts.get(k, 0) for k in keys), bad) for label, keys, bad in VERDICT],
            "confirmed": confirmed, "checked": checked, "impact": over_gpus(impacts),
            "groups": rollup.groups(findings)[:TOP_GROUPS]}


def upgrade(g: Model) -> dict[str, Any]:
    studies, calibration = [], []
    for s in judgement.studies(g.store, g.thresholds, info=g.info):
        legs = []
        for gpu, leg in s["legs"].items():
            fs = leg["findings"]
            time = sorted((_row(f) for f in fs if f.kind == "time" and f.verdict in ("regression", "improvement")),
                          key=lambda r: -r["size"])
            legs.append({
                "gpu": gpu, "counts": [(label, leg["counts"][k], bad) for k, label, bad in LABELS
                                       if leg["counts"].get(k)],
                "change": fields_change(stack_fields(leg["A"]["fingerprint"]), stack_fields(leg["B"]["fingerprint"])),
                "same": leg["counts"].get("time:same", 0), "combinations": leg["combinations"],
                "both_ok": leg["both_ok"], "runs": {r: leg[r]["run"] for r in judgement.ROLES},
                "stacks": {r: stack_line(leg[r]["fingerprint"]) for r in judgement.ROLES},
                "slower": [r for r in time if r["f"].verdict == "regression"][:TOP],
                "faster": [r for r in time if r["f"].verdict == "improvement"][:TOP],
                "accuracy": sorted((f for f in fs if f.kind == "accuracy"), key=accuracy_order)[:TOP],
                "availability": [f for f in fs if f.kind == "availability"][:TOP],
                "determinism": [f for f in fs if f.kind == "determinism" and f.verdict != "change"][:TOP],
            })
        entry = {"study": s["study"], "stacks": s["stacks"], "legs": legs, "agreement": s["agreement"], "raw": s}
        # one stack on both sides (no stack field differs on any GPU): a calibration of the judge, not an upgrade
        (calibration if not any(leg["change"] for leg in legs) else studies).append(entry)
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in studies:
        pairs.setdefault((str(e["stacks"]["A"]), str(e["stacks"]["B"])), []).append(e["raw"])
    for e in studies + calibration:
        del e["raw"]
    return {"verdicts": [verdict(p, ss) for p, ss in pairs.items()], "studies": studies, "calibration": calibration}

"""The upgrade page: what stack B changed against stack A, per paired study (`convbench upgrade`).

First screen: the counts (faster, slower, changed bits, accuracy, status, determinism) and whether another GPU
confirmed them; then the largest changes with their explanations. The judgement is paired.judge, which is the
gate's compare: the page, `convbench upgrade` and `convbench compare` say the same words.
"""

from __future__ import annotations

import math
from typing import Any

from ..analysis.pairing import fields_change, stack_fields, stack_line
from ..run import paired
from .model import Model

TOP = 25
# paired.judge's counts in the order and words a reader wants them; bad ones are marked
LABELS = (("time:slower", "slower", True), ("time:faster", "faster", False), ("bits:change", "changed bits", False),
          ("expected bits:change", "bits of documented non-deterministic algorithms", False),
          ("accuracy:regression", "less accurate", True), ("accuracy:improvement", "more accurate", False),
          ("accuracy:change", "accuracy changed", False), ("availability:regression", "stopped running", True),
          ("availability:improvement", "now run", False), ("availability:change", "measured on one side only", False),
          ("determinism:regression", "no longer deterministic", True),
          ("determinism:improvement", "now deterministic", False),
          ("determinism:change", "flips of documented non-determinism", False),
          ("time:ambiguous", "timing ambiguous", False))


def _row(f) -> dict[str, Any]:
    return {"f": f, "size": abs(math.log(f.ratio)) if f.ratio and f.ratio > 0 else 0.0}


def upgrade(g: Model) -> dict[str, Any]:
    studies = []
    for s in paired.studies(g.store, info=g.info):
        legs = []
        for gpu, leg in s["legs"].items():
            fs = leg["findings"]
            time = sorted((_row(f) for f in fs if f.kind == "time" and f.verdict in ("regression", "improvement")),
                          key=lambda r: -r["size"])
            legs.append({
                "gpu": gpu, "counts": [(label, leg["counts"][k], bad) for k, label, bad in LABELS
                                       if leg["counts"].get(k)],
                "change": fields_change(stack_fields(leg["A"]["fingerprint"]), stack_fields(leg["B"]["fingerprint"]))
                or "the same stack on both sides (an A/A study)",
                "same": leg["counts"].get("time:same", 0), "combinations": leg["combinations"],
                "both_ok": leg["both_ok"], "runs": {r: leg[r]["run"] for r in paired.ROLES},
                "stacks": {r: stack_line(leg[r]["fingerprint"]) for r in paired.ROLES},
                "slower": [r for r in time if r["f"].verdict == "regression"][:TOP],
                "faster": [r for r in time if r["f"].verdict == "improvement"][:TOP],
                "accuracy": [f for f in fs if f.kind == "accuracy"][:TOP],
                "availability": [f for f in fs if f.kind == "availability"][:TOP],
                "determinism": [f for f in fs if f.kind == "determinism" and f.verdict != "change"][:TOP],
            })
        studies.append({"study": s["study"], "stacks": s["stacks"], "legs": legs, "agreement": s["agreement"]})
    return {"studies": studies}

"""What a change costs a real model: the change in ResNet-50's convolution time at batch 32 for what PyTorch runs
(a forward pass, a backward pass, a training step), with a bootstrap interval.

Per-combination findings say which kernels moved; a user deciding on an upgrade asks how much slower their model
gets. What PyTorch runs is the torch backend's records with cudnn.deterministic off and TF32 allowed for fp32 (its
default for convolutions), under each of its two ways of choosing a kernel: its default (cudnn.benchmark off:
cuDNN's heuristic picks) and cudnn.benchmark on (the autotuner's picks, as training scripts set it). Each layer
shape is weighted by how often one pass calls it (cases.resnet50_calls): the forward pass by fwd, the backward pass
by bwd_data and bwd_filter, a training step by all three. The stem's input is the image, which needs no gradient:
a real training step runs no bwd_data there, so the stem counts in fwd and bwd_filter only. The interval resamples
each layer's samples on both sides.

A pass whose every direction is measured on both sides for some layers gets a number (with its coverage when not
every call was measured); a training step lacking a direction on a side says which instead of a number.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.cases import resnet50_calls
from ..core.records import OK, Record, RecordKind
from .timechange import row_medians

PASSES = (("forward", ("fwd",)), ("backward", ("bwd_data", "bwd_filter")))
TRAINING = (("training step", ("fwd", "bwd_data", "bwd_filter")),)
STEM = "resnet50.conv1.n32"
N_BOOT = 1000
# PyTorch's two ways of choosing a conv kernel: choice -> (cudnn.benchmark, the words a line ends with)
CHOICES = {"defaults": (False, "cudnn.benchmark off"), "cudnn.benchmark": (True, "cudnn.benchmark on")}
UNIT = {"forward": "pass", "backward": "pass", "training step": "step"}


def framework_default(rec: Record, choice: str = "cudnn.benchmark") -> bool:
    """A record of what PyTorch runs when a model calls a convolution with its settings left alone, cudnn.benchmark
    as ``choice`` sets it."""
    s = rec.settings
    return (rec.backend == "torch" and rec.kind == RecordKind.MEASUREMENT
            and s.get("benchmark") is CHOICES[choice][0] and s.get("deterministic") is False
            and s.get("tf32") in (True, None))


def _weights(direction: str) -> dict[str, int]:
    calls = resnet50_calls(32)
    return {c: n for c, n in calls.items() if not (direction == "bwd_data" and c == STEM)}


def boot_medians(rec: Record, rng: np.random.Generator) -> np.ndarray:
    """N_BOOT bootstrap medians of a record's samples (its median repeated where it kept fewer than three)."""
    s = rec.samples
    if s is None or len(s) < 3:
        return np.full(N_BOOT, float(rec.median_ms))
    a = np.asarray(s, dtype=np.float64)
    return row_medians(a[rng.integers(0, len(a), (N_BOOT, len(a)))])


def interval(terms: list[tuple[int, Record, Record]], rng: np.random.Generator) -> tuple[float, float]:
    """The 95 % bootstrap interval of sum(n * head) / sum(n * base) - 1 over (n, base, head) terms."""
    bb = sum(n * boot_medians(b, rng) for n, b, _ in terms)
    bh = sum(n * boot_medians(h, rng) for n, _, h in terms)
    lo, hi = np.quantile(bh / bb - 1, [0.025, 0.975])
    return float(lo), float(hi)


def _missing(directions: tuple[str, ...], have: set[tuple[str, str]]) -> str:
    """Which directions of a pass are not measured on which side, e.g. 'bwd_data, bwd_filter not measured on head'."""
    parts = []
    for sides, words in ((("base", "head"), "base nor head"), (("base",), "base"), (("head",), "head")):
        ds = [d for d in directions if all((s, d) not in have for s in sides)
              and all((s, d) in have for s in ("base", "head") if s not in sides)]
        if ds:
            parts.append(f"{', '.join(ds)} not measured on {words}")
    return "; ".join(parts) or f"no layer of {', '.join(directions)} measured on both sides"


def impact(base: list[Record] | dict[str, Record], head: list[Record] | dict[str, Record],
           gpu: str = "", choice: str = "cudnn.benchmark", passes: tuple = PASSES,
           gaps: bool = False) -> list[dict[str, Any]]:
    """Per pass, dtype and layout: the ResNet-50 convolution time of each side (ms, calls weighted), the change
    head/base - 1 with its bootstrap 95 % interval, and how much of the model it covers. A pass with a direction
    measured on no layer of both sides is left out, or with ``gaps`` a row saying what is missing (change None)."""
    pick = {}
    for side, recs in (("base", base), ("head", head)):
        for r in (recs.values() if isinstance(recs, dict) else recs):
            if (r.status == OK and r.median_ms and framework_default(r, choice)
                    and r.case.endswith(".n32") and r.case.startswith("resnet50.")):
                pick[(side, r.direction, r.dtype, r.layout, r.case)] = r
    have = {(side, d, t, lay) for (side, d, t, lay, _) in pick}
    out = []
    rng = np.random.default_rng(0)
    for name, directions in passes:
        for dtype, layout in sorted({(t, lay) for _, d, t, lay in have if d in directions}):
            terms, calls, total, measured, per = [], 0, 0, set(), {}
            for d in directions:
                per[d] = [0, sum(_weights(d).values())]
                for case, n in _weights(d).items():
                    total += n
                    b, h = pick.get(("base", d, dtype, layout, case)), pick.get(("head", d, dtype, layout, case))
                    if b is not None and h is not None:
                        terms.append((n, b, h))
                        calls += n
                        per[d][0] += n
                        measured.add(d)
            row = {"model": "ResNet-50", "batch": 32, "framework": "PyTorch", "choice": choice, "pass": name,
                   "dtype": dtype, "layout": layout, "gpu": gpu, "basis": "per-layer", "calls": calls,
                   "all_calls": total, "shapes": len({b.case for _, b, _ in terms}),
                   "all_shapes": len(resnet50_calls(32)), "coverage": {d: tuple(v) for d, v in per.items()}}
            if measured != set(directions):
                if gaps:
                    got = {(s, d) for s, d, t, lay in have if (t, lay) == (dtype, layout)}
                    row.update(change=None, low=None, high=None, base_ms=None, head_ms=None,
                               missing=_missing(directions, got))
                    row["line"] = impact_line(row)
                    out.append(row)
                continue
            tb = sum(n * b.median_ms for n, b, _ in terms)
            th = sum(n * h.median_ms for n, _, h in terms)
            lo, hi = interval(terms, rng)
            row.update(base_ms=tb, head_ms=th, change=th / tb - 1, low=lo, high=hi, missing=None)
            row["line"] = impact_line(row)
            out.append(row)
    return out


def impact_line(row: dict[str, Any]) -> str:
    """'ResNet-50 convolutions (batch 32, PyTorch defaults), training step fp16 NCHW, H200: +4.1 % (+3.6 to
    +4.6 %), ...; cudnn.benchmark on', with the coverage when partial and what is missing instead of a number."""
    row["subject"] = (f"{row['model']} convolutions (batch {row['batch']}, PyTorch defaults), {row['pass']} "
                      f"{row['dtype']} {row['layout']}")
    row["tail"] = CHOICES[row["choice"]][1]
    head = f"{row['subject']}{', ' + row['gpu'] if row['gpu'] else ''}: "
    if row["change"] is None:
        return f"{head}no number: {row['missing']}; {row['tail']}"
    text = (f"{head}{row['change'] * 100:+.1f} % ({row['low'] * 100:+.1f} to {row['high'] * 100:+.1f} %)"
            f", {row['base_ms']:.3g} → {row['head_ms']:.3g} ms a {UNIT[row['pass']]}; {row['tail']}")
    if row["calls"] < row["all_calls"]:
        each = ", ".join(f"{d} {n} of {m}" for d, (n, m) in row["coverage"].items()) if len(row["coverage"]) > 1 else ""
        text += (f"; partial: {row['calls']} of the {UNIT[row['pass']]}'s {row['all_calls']} convolution calls "
                 f"measured on both sides ({each + '; ' if each else ''}{row['shapes']} of {row['all_shapes']} layer "
                 f"shapes)")
    return text

"""What a change costs a real model: the change in ResNet-50's end-to-end convolution time at batch 32 for what
PyTorch runs by default, with a bootstrap interval.

Per-combination findings say which kernels moved; a user deciding on an upgrade asks how much slower their model
gets. PyTorch's defaults are the torch backend's records with cudnn.benchmark on, cudnn.deterministic off and
TF32 allowed for fp32 (its default for convolutions); each layer shape is weighted by how often one pass calls it
(cases.resnet50_calls), the forward pass by fwd, the backward pass by bwd_data and bwd_filter (the stem's input
needs no gradient: no bwd_data there). The interval resamples each layer's samples on both sides.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.cases import resnet50_calls
from ..core.records import OK, RecordKind

PASSES = (("forward", ("fwd",)), ("backward", ("bwd_data", "bwd_filter")))
STEM = "resnet50.conv1.n32"
N_BOOT = 1000


def framework_default(rec: dict[str, Any]) -> bool:
    """A record of what PyTorch runs when a model calls a convolution with the settings left alone (and
    cudnn.benchmark on, as training scripts set it)."""
    s = rec.get("settings") or {}
    return (rec.get("backend") == "torch" and rec.get("kind", RecordKind.MEASUREMENT) == RecordKind.MEASUREMENT
            and s.get("benchmark") is True and s.get("deterministic") is False and s.get("tf32") in (True, None))


def _weights(direction: str) -> dict[str, int]:
    calls = resnet50_calls(32)
    return {c: n for c, n in calls.items() if not (direction == "bwd_data" and c == STEM)}


def _boot_medians(rec: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    s = rec.get("samples")
    if s is None or len(s) < 3:
        return np.full(N_BOOT, float(rec["median_ms"]))
    a = np.asarray(s, dtype=np.float64)
    return np.median(a[rng.integers(0, len(a), (N_BOOT, len(a)))], axis=1)


def impact(base: list[dict[str, Any]] | dict[str, dict[str, Any]], head: list[dict[str, Any]] | dict[str, dict[str, Any]],
           gpu: str = "") -> list[dict[str, Any]]:
    """Per pass, dtype and layout measured on both sides: the ResNet-50 convolution time of each side (ms, calls
    weighted), the change head/base - 1 with its bootstrap 95 % interval, and how much of the model it covers."""
    pick = {}
    for side, recs in (("base", base), ("head", head)):
        for r in (recs.values() if isinstance(recs, dict) else recs):
            if r.get("status") == OK and r.get("median_ms") and framework_default(r) and r["case"].endswith(".n32"):
                pick[(side, r["direction"], r["dtype"], r["layout"], r["case"])] = r
    out = []
    rng = np.random.default_rng(0)
    groups = sorted({(d, t, lay) for (_, d, t, lay, _) in pick})
    for name, directions in PASSES:
        for dtype, layout in sorted({(t, lay) for d, t, lay in groups if d in directions}):
            terms, calls, total = [], 0, 0
            for d in directions:
                for case, n in _weights(d).items():
                    total += n
                    b, h = pick.get(("base", d, dtype, layout, case)), pick.get(("head", d, dtype, layout, case))
                    if b is not None and h is not None:
                        terms.append((n, b, h))
                        calls += n
            if not terms:
                continue
            tb = sum(n * b["median_ms"] for n, b, _ in terms)
            th = sum(n * h["median_ms"] for n, _, h in terms)
            bb = sum(n * _boot_medians(b, rng) for n, b, _ in terms)
            bh = sum(n * _boot_medians(h, rng) for n, _, h in terms)
            lo, hi = np.quantile(bh / bb - 1, [0.025, 0.975])
            row = {"model": "ResNet-50", "batch": 32, "pass": name, "dtype": dtype, "layout": layout, "gpu": gpu,
                   "base_ms": tb, "head_ms": th, "change": th / tb - 1, "low": float(lo), "high": float(hi),
                   "calls": calls, "all_calls": total,
                   "shapes": len({b["case"] for _, b, _ in terms}), "all_shapes": len(resnet50_calls(32))}
            row["line"] = impact_line(row)
            out.append(row)
    return out


def impact_line(row: dict[str, Any]) -> str:
    """'ResNet-50 convolutions, forward fp16 NCHW, H200: +4.1 % (3.6 to 4.6 %)', with the coverage when partial."""
    gpu = f", {row['gpu']}" if row["gpu"] else ""
    text = (f"{row['model']} convolutions (batch {row['batch']}, PyTorch defaults), {row['pass']} {row['dtype']} "
            f"{row['layout']}{gpu}: {row['change'] * 100:+.1f} % ({row['low'] * 100:+.1f} to {row['high'] * 100:+.1f} %)"
            f", {row['base_ms']:.3g} → {row['head_ms']:.3g} ms a pass")
    if row["calls"] < row["all_calls"]:
        text += (f"; partial: {row['calls']} of the pass's {row['all_calls']} convolution calls measured on both sides"
                 f" ({row['shapes']} of {row['all_shapes']} layer shapes)")
    return text

"""What a change costs a model onnxruntime runs (ResNet-50, MobileNetV2): the change in its whole-model latency
under onnxruntime's own conv picks, HEURISTIC and EXHAUSTIVE, with a bootstrap interval.

The store holds onnxruntime's models as whole-model records (one session run of the ONNX graph at the grid's
batch), not per layer: per-layer onnxruntime records exist only for the catalogue's single-Conv cases, which are
not the models' layers. So the impact is the end-to-end latency, which counts every op of the graph (the convs
and the BatchNorm, activations, pooling and classifier around them) and says so, with how many of the model's
conv shapes the store has per-layer records of. The layer list comes from the architecture the ONNX graph is
built from (architectures.conv_layers). What onnxruntime runs when left alone: the CUDA execution provider with
its defaults use_tf32=1 and cudnn_conv_use_max_workspace=1 (CUDAExecutionProviderInfo in onnxruntime's
cuda_execution_provider_info.h), I/O bound on the device (the host copies are the
application's, not the library's), under each search mode a user picks.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import numpy as np

from ..backends.ort.architectures import MODELS, conv_layers
from ..core.cases import CATALOGUE, Case
from ..core.records import OK, Record, RecordKind
from .impact import interval

SEARCHES = ("EXHAUSTIVE", "HEURISTIC")
NAMES = {"resnet50": "ResNet-50", "mobilenetv2": "MobileNetV2"}
DEFAULTS = {"provider": "CUDAExecutionProvider", "use_tf32": 1, "cudnn_conv_use_max_workspace": 1, "io": "iobinding"}


def _geometry(c: Case) -> tuple[int, ...]:
    return (c.n, c.c, c.h, c.w, c.k, c.r, c.s, c.pad[0], c.stride[0], c.groups)


@cache
def conv_shapes(model_id: str, batch: int) -> Counter:
    """How many times one forward pass calls each conv shape (N, C, H, W, K, R, S, pad, stride, groups)."""
    return Counter(g for _, g in conv_layers(model_id, batch))


def _search(rec: Record) -> str | None:
    s = rec.settings
    if all(s.get(k) == v for k, v in DEFAULTS.items()) and s.get("cudnn_conv_algo_search") in SEARCHES:
        return s["cudnn_conv_algo_search"]
    return None


def _layer_cases(model_id: str, batch: int, base: list, head: list) -> int:
    """How many of the model's conv shapes have a per-layer onnxruntime record (a catalogue case of that
    geometry) on both sides."""
    shapes = set(conv_shapes(model_id, batch))
    sides = [{_geometry(CATALOGUE[r.case]) for r in recs if r.backend == "ort"
              and r.case in CATALOGUE and r.status == OK} for recs in (base, head)]
    return len(shapes & sides[0] & sides[1])


def ort_impact(base: list[Record] | dict[str, Record], head: list[Record] | dict[str, Record],
               gpu: str = "") -> list[dict[str, Any]]:
    """Per model onnxruntime ran on either side, search mode and dtype: the whole-model latency of each side, the
    change head/base - 1 with its bootstrap 95 % interval; where a side lacks the model under that setting, a row
    saying so (change None)."""
    recs = {side: list(r.values() if isinstance(r, dict) else r) for side, r in (("base", base), ("head", head))}
    pick: dict[tuple, Record] = {}
    ran: set[tuple[str, str, str]] = set()
    for side, rs in recs.items():
        for r in rs:
            if r.backend != "ort" or not r.case.startswith("model."):
                continue
            model = r.case.split(".", 1)[1]
            if model not in MODELS or r.kind != RecordKind.MEASUREMENT:
                continue
            ran.add((model, r.dtype, r.layout))
            mode = _search(r)
            if mode and r.status == OK and r.median_ms:
                pick[(side, model, mode, r.dtype, r.layout)] = r
    out = []
    rng = np.random.default_rng(0)
    for model, dtype, layout in sorted(ran):
        for mode in SEARCHES:
            b, h = pick.get(("base", model, mode, dtype, layout)), pick.get(("head", model, mode, dtype, layout))
            batch = int((b or h).extra.get("batch") or 1) if (b or h) else 1
            shapes = conv_shapes(model, batch)
            row = {"model": NAMES[model], "batch": batch, "framework": "onnxruntime", "choice": mode,
                   "pass": "whole model", "dtype": dtype, "layout": layout, "gpu": gpu, "basis": "whole-model",
                   "calls": sum(shapes.values()), "all_calls": sum(shapes.values()), "all_shapes": len(shapes),
                   "shapes": _layer_cases(model, batch, recs["base"], recs["head"]), "coverage": {}}
            if b is None or h is None:
                sides = [s for s, x in (("base", b), ("head", h)) if x is None]
                row.update(change=None, low=None, high=None, base_ms=None, head_ms=None,
                           missing=f"not measured on {' nor '.join(sides)} (onnxruntime {mode} with its defaults "
                                   f"use_tf32=1, max workspace, I/O binding)")
            else:
                lo, hi = interval([(1, b, h)], rng)
                row.update(base_ms=b.median_ms, head_ms=h.median_ms, change=h.median_ms / b.median_ms - 1,
                           low=lo, high=hi, missing=None)
            row["line"] = ort_line(row)
            out.append(row)
    return out


def ort_line(row: dict[str, Any]) -> str:
    """'MobileNetV2 inference (batch 1, onnxruntime EXHAUSTIVE), whole model fp32 NCHW, H200: +3.0 % (...), from
    whole-model latency ...' or what is missing instead of a number."""
    row["subject"] = (f"{row['model']} inference (batch {row['batch']}, onnxruntime {row['choice']}), whole model "
                      f"{row['dtype']} {row['layout']}")
    row["tail"] = (f"from whole-model latency (its {row['all_calls']} convolutions and every other op of the graph): "
                   f"the store has per-layer onnxruntime records of {row['shapes']} of its {row['all_shapes']} conv "
                   f"shapes on both sides")
    head = f"{row['subject']}{', ' + row['gpu'] if row['gpu'] else ''}: "
    if row["change"] is None:
        return f"{head}no number: {row['missing']}"
    return (f"{head}{row['change'] * 100:+.1f} % ({row['low'] * 100:+.1f} to {row['high'] * 100:+.1f} %), "
            f"{row['base_ms']:.3g} → {row['head_ms']:.3g} ms a run; {row['tail']}")

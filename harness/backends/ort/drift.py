"""Numerics of whole-model outputs: the spread across sessions and processes, the error against the
float64 reference in the model's own yardstick, and the torch tensors the references are computed with.
"""

from __future__ import annotations

import numpy as np

from ...core.records import Accuracy
from ...measurement import accuracy


def spread(arrays: list[np.ndarray]) -> float:
    if len(arrays) < 2:
        return 0.0
    stack = np.stack([a.astype(np.float64) for a in arrays])
    return float(np.nanmax(stack.max(axis=0) - stack.min(axis=0)))


def model_accuracy(y: np.ndarray, ref: np.ndarray, yardstick: float, unwritten: int) -> Accuracy:
    """Error against the float64 reference; the class compares the error with this model's fp32 yardstick.

    A network's output error is (to first order) proportional to the unit roundoff of its arithmetic:
    err = A * u. The yardstick (an independent float32 evaluation) measures A * u_fp32, so err / yardstick *
    u_fp32 is the error a single conv would show, and accuracy.precision_class applies its usual bounds.
    """
    y64 = y.astype(np.float64)
    nan = max(0, int(np.isnan(y64).sum()) - unwritten)  # unwritten elements hold a NaN poison
    inf = int(np.isinf(y64).sum())
    bad = nan + inf + unwritten
    diff = np.abs(y64 - ref)
    diff = np.where(np.isfinite(diff), diff, 0.0)
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = float(np.linalg.norm(diff) / np.linalg.norm(ref)) if np.linalg.norm(ref) > 0 else 0.0
    scale = float(np.abs(ref).max()) or 1.0
    equiv = rel / yardstick * accuracy.U["fp32"] if yardstick > 0 else rel
    if bad:
        max_abs = rel = float("nan")
    return Accuracy(max_abs=max_abs, rel_l2=rel, max_norm_err=max_abs / scale if not bad else float("nan"),
                    nan=nan, inf=inf, unwritten=unwritten,
                    precision_class=accuracy.precision_class(equiv, "fp32", bad))


def to_torch(a: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def reference_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"

"""Plain-words explanations for records whose status, accuracy or determinism is not what a user expects.

Rules are checked in order and the first that fits names the cause; a record that behaves as expected
gets no explanation. The wording is meant for the morning report, read by someone who did not run it.
"""

from __future__ import annotations

from typing import Any

from .cases import expected_class
from .records import OK, SKIPPED, UNSUPPORTED_ARCH, WORKSPACE_TOO_LARGE, Record, RecordKind

TF32_CAUSE = ("TF32 tensor-core math: fp32 operands rounded to 10-bit mantissas (allowed by cuDNN's DEFAULT and "
              "TENSOR_OP math and by PyTorch's default on Ampere and newer); FMA math gives fp32-class error")


def _status(rec: Record) -> str | None:
    s = rec.status
    if s == OK:
        return None
    if s == SKIPPED:
        return f"not run here: {rec.reason}"
    if s == UNSUPPORTED_ARCH:
        return f"not supported on this architecture: {rec.reason}"
    if s == WORKSPACE_TOO_LARGE:
        return f"algorithm needs more workspace than allowed ({rec.reason})"
    if "NOT_SUPPORTED" in s:
        what = f"{rec.algo} with {rec.math} math for {rec.dtype} {rec.layout}"
        return f"cuDNN does not implement {what} for this shape ({s})"
    if "BAD_PARAM" in s:
        return f"cuDNN rejected the parameters for {rec.algo} ({s})"
    return f"{s}: {rec.reason}" if rec.reason else s


def _accuracy(rec: Record) -> str | None:
    acc = rec.accuracy
    if acc is None:
        return None
    got, want = acc.precision_class, expected_class(rec.dtype)
    if got == want:
        return None
    if got == "broken":
        parts = []
        if acc.unwritten:
            parts.append(f"{acc.unwritten} output elements never written")
        if acc.nan:
            parts.append(f"{acc.nan} NaN")
        if acc.inf:
            parts.append(f"{acc.inf} Inf")
        detail = ", ".join(parts) or f"relative error {acc.rel_l2:.2g}"
        return f"broken output: {detail}"
    if rec.dtype == "fp32" and got == "tf32":
        if rec.backend == "cudnn" and rec.math == "FMA":
            return "FMA math asked for, yet the error is TF32-class: cuDNN did not honour the math type"
        return TF32_CAUSE
    if rec.dtype == "fp32" and got == "bf16":
        return "fp32 data computed with bf16-class error: a conversion to bf16 (TENSOR_OP_ALLOW_CONVERSION or a bf16 path)"
    if rec.dtype == "fp16" and got == "bf16":
        return "fp16 data computed with bf16-class error: a down-conversion inside the algorithm"
    if got == "fp32" and rec.dtype in ("fp16", "bf16"):
        return None  # better than the dtype needs (e.g. exactly representable results): nothing to explain
    return f"precision class {got}, expected {want} for {rec.dtype}"


TORCH_NONDETERMINISTIC = ("PyTorch with cudnn.deterministic=False lets cuDNN pick an algorithm documented as "
                          "non-deterministic (atomics, e.g. BWD_FILTER_ALGO_0/3, BWD_DATA_ALGO_0); "
                          "cudnn.deterministic=True rules them out")


def nondeterminism_cause(rec: Record) -> str | None:
    """The documented reason a call may give different bits run to run, or None when none applies."""
    return documented_nondeterminism(rec.backend, rec.direction, rec.settings, rec.extra)


def documented_nondeterminism(backend: str, direction: str, settings: dict[str, Any] | None,
                              extra: dict[str, Any] | None) -> str | None:
    """nondeterminism_cause from the four fields it reads (a stored record's, a measured one's)."""
    if (extra or {}).get("documented_nondeterministic"):
        return "algorithm documented as non-deterministic (atomics)"
    if backend == "torch" and direction != "fwd" and (settings or {}).get("deterministic") is False:
        return TORCH_NONDETERMINISTIC
    return None


def _determinism(rec: Record) -> str | None:
    det = rec.determinism
    if det is None:
        return None
    if det.repeat_equal is False or det.fresh_handle_equal is False:
        where = "repeats" if det.repeat_equal is False else "a fresh handle"
        cause = nondeterminism_cause(rec)
        if cause:
            return f"{cause}: {det.distinct_outputs} distinct outputs over {where}"
        return f"non-deterministic although not documented so: {det.distinct_outputs} distinct outputs over {where}"
    return None


def explain(rec: Record) -> str | None:
    parts = [p for p in (_status(rec), _accuracy(rec), _determinism(rec)) if p]
    return "; ".join(parts) or None


def explain_autotune(rec: Record) -> str | None:
    """An autotuner record (run/autotune.py): winners that differ across fresh searches, outputs that differ, or
    a near tie between candidates that compute different bits."""
    winners = rec.extra.get("winners", {})
    det = rec.determinism
    if len(winners) > 1 and det.distinct_outputs > 1:
        spread = rec.extra.get("max_abs_spread")
        size = f" (max |delta| {spread:.3g})" if spread else ""
        return (f"autotuner picked different algorithms across sessions: {' vs '.join(winners)}; their outputs "
                f"differ bitwise{size}")
    if len(winners) > 1:
        return f"autotuner picked different algorithms across sessions ({' vs '.join(winners)}) with bitwise-equal outputs"
    if det.distinct_outputs > 1:
        return f"the autotuned call gave {det.distinct_outputs} distinct outputs across {det.repeats} fresh processes"
    ties = rec.extra.get("near_ties") or []
    if ties:
        t = ties[0]
        return (f"near tie: {t.get('winner')} leads {t.get('runner_up')} by {100 * (t.get('gap') or 0):.1f} % and they differ "
                f"numerically (max |delta| {t.get('max_abs_delta') or 0:.3g}): another session may pick either")
    return None


def explain_crosscheck(rec: Record) -> str | None:
    """F.conv2d against direct cuDNN with FMA math (run/autotune.py's crosscheck), from what its extra holds."""
    x = rec.extra
    delta = x.get("max_abs_delta")
    if delta is None:  # no legacy algorithm ran
        return None
    if x.get("torch_class") == "tf32" and x.get("cudnn_fma_class") == "fp32":
        return (f"F.conv2d differs from direct cuDNN with FMA math by {delta:.3g}: "
                "TF32 tensor-core math (PyTorch allows TF32 in cuDNN convs by default; FMA math does not)")
    if delta == 0:
        return None
    return (f"F.conv2d differs from direct cuDNN with FMA math by {delta:.3g}; both are "
            f"{x.get('torch_class')}-class: a different algorithm or summation order")


# the rules of each record kind that is not a measurement (a repro record is explained where it is made: its words
# need the original record)
_BY_KIND = {RecordKind.AUTOTUNE: explain_autotune, RecordKind.CROSSCHECK: explain_crosscheck}


def explain_any(rec: Record) -> str | None:
    """The explanation of a record of any kind: a failed one says why it failed, a study's record what it found."""
    rules = _BY_KIND.get(rec.kind)
    if rules is None or rec.status != OK:
        return explain(rec)
    return rules(rec)

"""The one finalize step: every record a driver journals is classified, then explained, here and nowhere else.

A record leaves its producer (a backend, a study's runner, the worker pool's parent for a worker that crashed,
hung or ran out of memory) with the status the producer saw. Before it is journaled it passes ``finalize``:

1. classify: an error whose reason is an out-of-memory error gets the out_of_memory status (the words below are
   those PyTorch, cuDNN, cuBLAS and Python use);
2. explain: core/explain.py's rules for the record's kind (a measurement's status, accuracy and determinism; an
   autotuner record's winners; a crosscheck's difference), the first that fits.

The sweep (in a worker or in this process), the worker pool's failure records, the autotuner and the
onnxruntime grid all call it. A runner whose words come from what only it saw (onnxruntime's drift across
sessions and processes) says so with ``by_producer=True``: its records are journaled as made.
"""

from __future__ import annotations

from ..core.explain import explain_any
from ..core.records import ERROR, OOM, Ranking, Record

OOM_WORDS = ("OutOfMemoryError", "out of memory", "CUDNN_STATUS_ALLOC_FAILED", "MemoryError",
             "CUBLAS_STATUS_ALLOC_FAILED")


def is_oom(text: str | None) -> bool:
    """Whether an error's text (a reason, or an exception's type and message) says memory ran out."""
    return bool(text) and any(w in text for w in OOM_WORDS)


def classify(rec: Record) -> Record:
    """An error record whose reason is an out-of-memory error gets the out_of_memory status."""
    if rec.status == ERROR and is_oom(rec.reason):
        rec.status = OOM
    return rec


def finalize(rec: Record | Ranking, by_producer: bool = False) -> Record | Ranking:
    """Classify and explain ``rec`` in place (a ranking is cuDNN's own list: kept as it came); returns it.

    ``by_producer``: the runner classified and explained its records itself; they are left as they are.
    """
    if isinstance(rec, Ranking) or by_producer:
        return rec
    classify(rec)
    rec.explanation = explain_any(rec)
    return rec

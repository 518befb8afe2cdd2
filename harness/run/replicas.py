"""Each combination timed in two processes of one run, pooled into one record.

A fresh process can put a call at a level of its own that no placement of its operands inside the process moves:
in the H200 x2 A/A study (docs/performance.md) `resnet50.layer3.0.conv2.n32` GEMM bf16 NCHW ran
0.415, 0.445, 0.448 and 0.422 ms in four processes, each tight over its five placements (0.3 % apart), and such
per-process levels (GEMM fp16/bf16, FFT_TILING on the seed cases, 4-7 %) were every failing finding left in the
forward A/A pairs. A run that times each combination in one process draws one level and a compare of two runs
reads the draw as a change. So the sweep's worker pool runs each slice twice: first in a second worker process,
timing only (``SweepOptions.timing_only``: one checked run for its output's hash, then the timer), whose records
come back to the parent and are not journaled; then in the main worker, which measures everything and, before it
journals a record, pools the replica's samples into it (``merge``). Each process samples half the budget and
half the floor (``TimingPolicy.share``) on its share of the placements (``cudnn.placements``: 3 + 2), yet a second
process still costs a second session per slice and its own checked run, warm-up and batches: on the H200
the backward sweep came to about 1.2x of one process's (docs/performance.md), which it fits in its 10 minutes since
PyTorch's backward is timed as its one op (``backends.DEFAULT_PROCESSES``). The record keeps each process's
median (``extra.process_medians_ms``): a compare reads their spread as the call's own level noise
(analysis/timechange.py), and ``extra.fresh_process_equal`` says whether the two processes computed the same bits;
where the backend's main process runs no fresh handle of its own (cuDNN's, cudnn_determinism), that is the
record's ``fresh_handle_equal`` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..backends import Combo, SweepOptions
from ..core.cases import Case
from ..core.records import OK, Ranking, Record
from ..measurement.timing import pooled


def effective(options: SweepOptions, backend: Any, isolated: bool) -> SweepOptions:
    """The options a backend's slices run with: its processes only where the pool replicates them (isolated
    workers on CUDA, a backend that can time alone), else one."""
    if options.processes > 1 and isolated and options.device == "cuda" and getattr(backend, "replicable", False):
        return options
    return replace(options, processes=1) if options.processes != 1 else options


def replica_options(options: SweepOptions) -> SweepOptions:
    """A replica's pass: timing only, no rankings."""
    return replace(options, timing_only=True, rankings=False)


def merge(rec: Record, replica: Record | None, keep: int, fresh_handle_in_replica: bool = False) -> Record:
    """``rec`` (the main process's, all its samples kept) with the replica's timing pooled in, in place, and
    thinned to ``keep`` samples; a replica that did not time the combination leaves ``rec`` timed in one
    process, and says why in ``extra.replica``. ``fresh_handle_in_replica``: the backend's main process left its
    fresh-handle check to the replica (cuDNN's, cudnn_determinism)."""
    if rec.status != OK or rec.time is None:
        return rec
    timings = [rec.time]
    if replica is not None and (replica.status != OK or replica.time is None):
        rec.extra["replica"] = f"{replica.status}: {replica.reason or 'no timing'}"
    elif replica is not None:
        timings.append(replica.time)
        rec.extra["process_medians_ms"] = [round(t.median_ms, 6) for t in timings]
        placements = rec.extra.get("placement_medians_ms")
        if placements is not None and replica.extra.get("placement_medians_ms") is not None:
            rec.extra["placement_medians_ms"] = placements + replica.extra["placement_medians_ms"]
        if rec.determinism is not None and replica.determinism is not None:
            equal = rec.determinism.hash == replica.determinism.hash
            rec.extra["fresh_process_equal"] = equal
            if fresh_handle_in_replica and rec.determinism.fresh_handle_equal is None:
                _fresh_handle_from_replica(rec, equal)
    rec.time = pooled(timings, keep)
    return rec


def _fresh_handle_from_replica(rec: Record, equal: bool) -> None:
    """The main process ran no fresh handle (cudnn_determinism): the replica's checked run, on a handle of its own
    in a process of its own, is that check. Its output counts as a further distinct one only where the repeats
    all gave the first output's bits; otherwise it may be one of theirs, and the count stays what they saw."""
    det = rec.determinism
    det.fresh_handle_equal = equal
    if not equal and det.repeat_equal is not False:
        det.distinct_outputs = max(det.distinct_outputs or 1, 2)


def measure_slice(pool: Any, replicas: Any, name: str, backend: Any, case: Case, combos: list[Combo],
                  options: SweepOptions, ahead: Case | None = None) -> Iterator[Record | Ranking]:
    """One slice through the worker pool, timed in ``options.processes`` processes when ``replicas`` (a second
    pool) is given and the backend can be replicated; yields the records as they are journaled. ``ahead``: the
    case measured next, whose operands each worker draws while the other measures (WorkerPool.run_slice)."""
    options = effective(options, backend, replicas is not None)
    timed: dict[str, Record] = {}
    if options.processes > 1:
        timed = replicas.replicate(name, case, combos, replica_options(options), ahead=ahead)
    yield from pool.run_slice(name, case, combos, options, replicas=timed or None, ahead=ahead)

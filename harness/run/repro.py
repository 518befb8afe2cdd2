"""Fresh-process reproducibility: recompute every measured output of a run in a new process, compare hashes.

The sweep already compares repeats on the same operands and on a fresh cuDNN handle; a new process adds what those
cannot change: a new CUDA context, new cuDNN library state, new autotuner caches. Each recomputed output
becomes a ``repro`` record beside the original in the same journal (append-only), with the sweep's hash
and whether the fresh process reproduced it bit for bit.

The recomputation runs in the sweep's worker pool (run/pool.py), one slice per backend and case, so a call
that crashes, hangs or runs out of memory becomes a repro record with that status and reason (finalized,
run/finalize.py) and the rest goes on in a fresh worker. The runners explain what they reproduced themselves:
the words need the sweep's record.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..backends import Combo, SweepOptions, by_problem
from ..core.cases import Case, get
from ..core.explain import nondeterminism_cause
from ..core.records import ERROR, OK, Determinism, Record, RecordKind
from ..measurement import accuracy
from . import sweep
from .finalize import finalize
from .journal import JOURNAL_FILE, Journal, iter_records
from .pool import DEFAULT_TIMEOUT_S, WorkerPool

KIND = RecordKind.REPRO
# the runner (runners.resolve names) that recomputes each backend's records; the tests add a fault-injecting one
RUNNERS = {"cudnn": "harness.run.repro:CudnnRepro", "torch": "harness.run.repro:TorchRepro"}


@dataclass
class ReproOptions:
    """What a repro slice needs: the sweep's records it recomputes (by key) and the device they ran on."""

    originals: dict[str, Record]
    device: str = "cuda"


def reproduced(rec: Record, digest: str | None, status: str = OK, reason: str | None = None) -> Record:
    """The repro record of the sweep's ``rec``: the fresh process's hash ``digest``, or ``status`` and ``reason``
    when the call failed (classified and explained by finalize)."""
    sweep_hash = rec.determinism.hash if rec.determinism else None
    out = Record(case=rec.case, backend=rec.backend, direction=rec.direction, algo=rec.algo, math=rec.math,
                 dtype=rec.dtype, layout=rec.layout, settings=rec.settings, device=rec.device, kind=KIND,
                 status=status, reason=reason,
                 extra={"sweep_hash": sweep_hash, "fresh_process_equal": None if digest is None else digest == sweep_hash})
    if status != OK:
        return finalize(out)
    if digest is not None:
        out.determinism = Determinism(hash=digest, hash_algo=accuracy.HASH_ALGO, repeats=1, repeat_equal=None,
                                      fresh_handle_equal=None)
        if digest != sweep_hash:
            cause = nondeterminism_cause(rec)
            out.explanation = ("a fresh process computed different bits" +
                               (f" ({cause})" if cause else
                                ": run-to-run variation not explained by a documented non-deterministic algorithm"))
    return out


class CudnnRepro:
    """A cuDNN slice recomputed: each (algorithm, math) on one session per direction, dtype and layout."""

    name = "cudnn-repro"

    def run(self, case: Case, combos: list[Combo], options: ReproOptions) -> Iterator[Record]:
        from ..backends.cudnn import ConvSession, CudnnBackend, CudnnError, WorkspaceTooLarge

        cudnn = CudnnBackend().cudnn
        for (direction, dtype, layout), members in by_problem(combos).items():
            session = ConvSession(cudnn, case, direction, dtype, layout, SweepOptions(), reference=False)
            try:
                for c in members:
                    rec = options.originals[c.key(case, "cudnn")]
                    try:
                        yield reproduced(rec, session.output_hash(c.algo, c.math))
                    except (CudnnError, WorkspaceTooLarge) as exc:
                        yield reproduced(rec, None, ERROR, str(exc))
            finally:
                session.close()


class TorchRepro:
    """A PyTorch slice recomputed: F.conv2d (or its backward) under each record's settings."""

    name = "torch-repro"

    def run(self, case: Case, combos: list[Combo], options: ReproOptions) -> Iterator[Record]:
        import torch

        from ..backends.pytorch import TorchBackend, conv_settings

        backend = TorchBackend()
        for (direction, dtype, layout), members in by_problem(combos).items():
            call = backend.prepare(case, direction, dtype, layout, options.device)[0]
            for c in members:
                s = dict(c.settings)
                with conv_settings(s.get("tf32"), s.get("benchmark"), s.get("deterministic")), torch.no_grad():
                    out = call()
                yield reproduced(options.originals[c.key(case, "torch")], accuracy.output_hash(out))


def recompute(run_dir: Path, runners: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit: int | None = None, log: Callable[[str], None] | None = None) -> Iterator[Record]:
    """Recompute every ok measurement of ``run_dir`` whose backend has a runner, in fresh worker processes under
    the run's lock; yields each repro record as it is journaled (a failed call's too)."""
    runners = RUNNERS if runners is None else runners
    run_dir = Path(run_dir)
    slices: dict[tuple[str, str, str], dict[str, Record]] = {}
    for d in iter_records(run_dir / JOURNAL_FILE):  # schema-checked lines
        if d.get("kind") == RecordKind.MEASUREMENT and d.get("status") == OK and d.get("backend") in runners:
            r = Record.from_dict(d)
            slices.setdefault((r.backend, r.case, r.device), {})[r.key()] = r
    journal = Journal(run_dir)
    lock = sweep.lock_run(run_dir)
    pool = WorkerPool(journal, timeout_s=timeout_s, memory_limit=memory_limit, keep_fds=(lock,), log=log)
    try:
        for (backend, case_id, device), originals in slices.items():
            combos = [Combo(r.direction, r.algo, r.math, r.dtype, r.layout, tuple(r.settings.items()))
                      for r in originals.values()]
            yield from pool.run_slice(backend, get(case_id), combos, ReproOptions(originals, device),
                                      runner=runners[backend], finalize=False, kind=KIND)
    finally:
        pool.close()
        os.close(lock)

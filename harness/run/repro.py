"""Fresh-process reproducibility: recompute every measured output of a run in a new process, compare hashes.

The sweep already compares repeats in place and on a fresh cuDNN handle; a new process adds what those
cannot change: a new CUDA context, new cuDNN library state, new autotuner caches. Each recomputed output
becomes a ``repro`` record beside the original in the same journal (append-only), with the sweep's hash
and whether the fresh process reproduced it bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..backends import SweepOptions
from ..backends.cudnn import ConvSession, CudnnBackend, CudnnError, WorkspaceTooLarge
from ..backends.pytorch import TorchBackend, conv_settings
from ..core.cases import get
from ..core.explain import nondeterminism_cause
from ..core.records import ERROR, OK, Determinism, Record
from ..measurement import accuracy
from .journal import JOURNAL_FILE, iter_records


def _repro(rec: Record, digest: str | None, status: str = OK, reason: str | None = None) -> Record:
    sweep_hash = rec.determinism.hash if rec.determinism else None
    out = Record(case=rec.case, backend=rec.backend, direction=rec.direction, algo=rec.algo, math=rec.math,
                 dtype=rec.dtype, layout=rec.layout, settings=rec.settings, device=rec.device, kind="repro",
                 status=status, reason=reason,
                 extra={"sweep_hash": sweep_hash, "fresh_process_equal": None if digest is None else digest == sweep_hash})
    if digest is not None:
        out.determinism = Determinism(hash=digest, hash_algo=accuracy.HASH_ALGO, repeats=1, repeat_equal=None,
                                      fresh_handle_equal=None)
        if digest != sweep_hash:
            cause = nondeterminism_cause(rec)
            out.explanation = ("a fresh process computed different bits" +
                               (f" ({cause})" if cause else
                                ": run-to-run variation not explained by a documented non-deterministic algorithm"))
    return out


def recompute(run_dir: Path) -> Iterator[Record]:
    """Recompute the output of every ok cuDNN and PyTorch measurement of ``run_dir`` in this process."""
    recs = [Record.from_dict(d) for d in iter_records(Path(run_dir) / JOURNAL_FILE)  # schema-checked lines
            if d.get("kind") == "measurement" and d.get("status") == OK and d.get("backend") in ("cudnn", "torch")]
    groups: dict[tuple, list[Record]] = {}
    for r in recs:
        groups.setdefault((r.backend, r.case, r.direction, r.dtype, r.layout), []).append(r)
    cudnn = None
    torch_backend = TorchBackend()
    for (backend, case_id, direction, dtype, layout), members in groups.items():
        case = get(case_id)
        if backend == "cudnn":
            cudnn = cudnn or CudnnBackend().cudnn
            session = ConvSession(cudnn, case, direction, dtype, layout, SweepOptions(), reference=False)
            try:
                for r in members:
                    try:
                        yield _repro(r, session.output_hash(r.algo, r.math))
                    except (CudnnError, WorkspaceTooLarge) as exc:
                        yield _repro(r, None, ERROR, str(exc))
            finally:
                session.close()
        else:
            call = torch_backend.prepare(case, direction, dtype, layout, members[0].device)[0]
            for r in members:
                s = r.settings
                with conv_settings(s.get("tf32"), s.get("benchmark"), s.get("deterministic")):
                    import torch

                    with torch.no_grad():
                        out = call()
                yield _repro(r, accuracy.output_hash(out))

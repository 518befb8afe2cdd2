"""A sweep: cases x backends on this machine, every record journaled the moment it is made.

The one place where the pieces meet: it takes the fingerprint, opens (or resumes) the run directory,
asks each backend for its combinations, skips those already journaled, and appends what comes back.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import fingerprint
from .backends import SweepOptions, get_backend
from .cases import Case
from .journal import Journal
from .records import OK


def _cuda_device() -> tuple[bool, str | None]:
    """(CUDA usable, UUID of the device torch uses as cuda:0)."""
    try:
        import torch
    except ImportError:
        return False, None
    if not torch.cuda.is_available():
        return False, None
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    return True, (f"GPU-{uuid}" if uuid is not None else None)


def take_fingerprint(cuda: bool, uuid: str | None) -> dict[str, Any]:
    """Fingerprint of the GPU this process runs on (matched through NVML by UUID), or of the CPU host."""
    found, _ = fingerprint.gpus()
    index = None
    if cuda:
        index = next((g["index"] for g in found if uuid and g.get("uuid") == uuid), None)
        if index is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
            index = int(visible) if visible.isdigit() else 0
    return fingerprint.take(index)


def open_journal(results: Path, resume: Path | None, options: SweepOptions, cases: list[Case],
                 backends: list[str], cuda: bool, uuid: str | None, libraries: dict[str, Any]) -> Journal:
    if resume is not None:
        return Journal(resume)
    shared = os.environ.get("CONVBENCH_RUN_DIR")  # one run shared by the asv classes of one `convbench bench`
    if shared and (Path(shared) / "run.json").exists():
        return Journal(Path(shared))
    fp = take_fingerprint(cuda, uuid)
    fp["libraries"] = libraries
    meta = {"cases": [c.id for c in cases], "backends": backends, "sweep": _options_dict(options)}
    return Journal.create(results, fp, meta)


def _options_dict(options: SweepOptions) -> dict[str, Any]:
    d = asdict(options)
    d["timing"] = asdict(options.timing)
    return d


def run(cases: list[Case], backend_names: list[str], options: SweepOptions, results: Path,
        resume: Path | None = None, log: Callable[[str], None] | None = None,
        on_record: Callable[[Any], None] | None = None) -> Journal:
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    cuda, uuid = _cuda_device()
    if options.device == "cuda" and not cuda:
        options.device = "cpu"
        log("no CUDA device: running the CPU backends (PyTorch on the CPU); cuDNN combinations are recorded "
            "as skipped with the reason")
    backends = {name: get_backend(name) for name in backend_names}
    libraries: dict[str, Any] = {}
    unavailable = {name: b.available() for name, b in backends.items()}
    if "cudnn" in backends and not unavailable["cudnn"]:
        lib = backends["cudnn"].cudnn  # the library actually loaded, which may differ from what torch reports
        libraries["cudnn"] = {"version": lib.version, "version_int": lib.version_int, "path": lib.path}
    journal = open_journal(results, resume, options, cases, backend_names, cuda, uuid, libraries)
    done = journal.done_keys()
    counts: Counter[str] = Counter()
    from .explain import explain

    t0 = time.perf_counter()
    for name, backend in backends.items():
        if unavailable[name]:
            log(f"{name}: not available here ({unavailable[name]}); its combinations are recorded as skipped")
        for case in cases:
            combos = [c for c in backend.combos(case, options) if c.key(case, name) not in done]
            if not combos:
                continue
            n_before = sum(counts.values())
            for rec in backend.run(case, combos, options):
                if rec.kind == "measurement":
                    rec.explanation = explain(rec)
                    counts[rec.status] += 1
                journal.append(rec)
                if on_record:
                    on_record(rec)
            log(f"{name} {case.id}: {sum(counts.values()) - n_before} records "
                f"({time.perf_counter() - t0:.0f} s so far)")
    summary = {"counts": dict(counts), "ok": counts.get(OK, 0), "seconds": round(time.perf_counter() - t0, 1)}
    if cuda:
        summary["clocks_after"] = fingerprint.clocks(journal.meta["fingerprint"].get("gpu", {}).get("index", 0)
                                                     if journal.meta["fingerprint"].get("gpu") else 0)
    journal.finish(summary)
    return journal

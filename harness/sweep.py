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
from .explain import explain
from .journal import JOURNAL_FILE, Journal, iter_journal
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


def shared_run() -> Path | None:
    """The run directory that `convbench bench` opened for all asv classes of one asv run, if any."""
    shared = os.environ.get("CONVBENCH_RUN_DIR")
    return Path(shared) if shared and (Path(shared) / "run.json").exists() else None


def load_backends(names: list[str]) -> tuple[dict[str, Any], dict[str, str | None], dict[str, Any]]:
    """(backends, why each cannot run or None, the libraries they actually loaded)."""
    backends = {name: get_backend(name) for name in names}
    unavailable = {name: b.available() for name, b in backends.items()}
    libraries: dict[str, Any] = {}
    if "cudnn" in backends and not unavailable["cudnn"]:
        lib = backends["cudnn"].cudnn  # the library actually loaded, which may differ from what torch reports
        libraries["cudnn"] = {"version": lib.version, "version_int": lib.version_int, "path": lib.path}
    return backends, unavailable, libraries


def new_journal(results: Path, options: SweepOptions, cases: list[Case], backend_names: list[str],
                libraries: dict[str, Any]) -> Journal:
    cuda, uuid = _cuda_device()
    fp = take_fingerprint(cuda and options.device == "cuda", uuid)
    fp["libraries"] = libraries
    meta = {"cases": [c.id for c in cases], "backends": backend_names, "sweep": _options_dict(options)}
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
    backends, unavailable, libraries = load_backends(backend_names)
    shared = shared_run() if resume is None else None
    journal = Journal(resume or shared) if (resume or shared) else new_journal(results, options, cases,
                                                                                backend_names, libraries)
    done = journal.done_keys()
    counts: Counter[str] = Counter()
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
    if shared is None:
        journal.finish(summarize(journal, cuda, time.perf_counter() - t0))
    return journal


def summarize(journal: Journal, cuda: bool, seconds: float) -> dict[str, Any]:
    """Counts by status over the whole journal, the time taken, and the GPU clocks after the run."""
    counts: Counter[str] = Counter()
    for rec in iter_journal(journal.path / JOURNAL_FILE):
        if rec.get("kind") == "measurement":
            counts[rec["status"]] += 1
    summary: dict[str, Any] = {"counts": dict(counts), "ok": counts.get(OK, 0), "seconds": round(seconds, 1)}
    gpu = journal.meta["fingerprint"].get("gpu")
    if cuda and gpu:
        summary["clocks_after"] = fingerprint.clocks(gpu["index"])
    return summary

"""What the asv suite (benchmarks/) asks of the library, in one place: the suite imports harness.core and this.

asv imports the suite in processes that must not touch CUDA, so nothing here imports torch, onnxruntime or a
backend at import time; each function imports what it uses when called. The table rows asv's classes read are
built here too, so `convbench bench`'s selection (asvselect.py) reads a sweep the same way the suite does
without importing the suite.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.cases import Case
from ..core.records import settings_key

# A row of the table asv gets: (status, time_s, rel_l2, bitwise_stable, samples: the timing samples in seconds as
# float64 bytes, which asv's time benchmarks replay, benchmarks/_bridge.py). asv unpickles the whole table in every
# parameter set's process (about 12,700 in the backward job), so rows are plain tuples and the key strings are
# interned (pickle then stores each once): for the 4,368 backward-filter rows of the H200 fixture the pickle
# went from 495 kB to 144 kB and unpickling from 2.3 ms to 0.9 ms (dev VM).
STATUS, TIME_S, REL_L2, BITWISE_STABLE, SAMPLES = range(5)


def gpus_seen() -> bool:
    """Whether NVML sees a GPU; NVML creates no CUDA context, so the suite may ask at import."""
    from ..measurement import fingerprint

    return bool(fingerprint.gpus()[0])


def sweep_direction(cases: list[Case], backend: str, direction: str, results_root: Path) -> Path:
    """Sweep every combination of ``backend`` in ``direction`` into a new run under ``results_root``; its path.

    On the GPU when CUDA is usable here, else on the CPU."""
    from ..backends import command_options
    from ..backends.cudnn import cuda_unavailable_reason
    from . import sweep

    gpu = cuda_unavailable_reason() is None
    opts = command_options((direction,), "cuda" if gpu else "cpu")
    return sweep.run(cases, [backend], opts, results_root).path


class Table(dict):
    """The rows asv's classes read, keyed by ``param_key``, and each case's keys (``by_case``): a summary over one
    case's rows then reads those, not the whole table. Each parameter set runs in a process of its own, so an
    index made there is made again for every set: this one is made once, in setup_cache, and pickled along."""

    def __init__(self) -> None:
        super().__init__()
        self.by_case: dict[str, list[tuple]] = {}

    def index(self) -> Table:
        self.by_case = {}
        for key in self:
            self.by_case.setdefault(key[0], []).append(key)
        return self


def read_table(run_dir: Path, backend: str, direction: str) -> Table:
    """The table asv's classes read: one row per journaled combination of ``backend`` in ``direction``."""
    from .journal import JOURNAL_FILE, iter_journal

    table = Table()
    for rec in iter_journal(run_dir / JOURNAL_FILE):
        if rec.get("kind") != "measurement" or rec["backend"] != backend or rec["direction"] != direction:
            continue
        acc, det, tim = rec.get("accuracy"), rec.get("determinism"), rec.get("time")
        table[param_key(rec)] = (
            sys.intern(rec["status"]),
            tim["median_ms"] / 1e3 if tim else None,
            acc["rel_l2"] if acc else None,
            None if det is None else int(bool(det["repeat_equal"]) and det["fresh_handle_equal"] is not False),
            # bytes, not a tuple of floats: pickled and unpickled whole in every parameter set's process
            array("d", [s / 1e3 for s in tim.get("samples_ms") or [tim["median_ms"]]]).tobytes() if tim else b"",
        )
    return table.index()


def param_key(rec: dict) -> tuple:
    setting = settings_key(rec["settings"], omit=("device",)) or "-"
    return tuple(sys.intern(part) for part in
                 (rec["case"], rec["algo"], rec["math"], rec["dtype"], rec["layout"], setting))


def ort_grid(models: list[str], results_root: Path, label: Callable[[Any], str]) -> dict:
    """Every model x setting x io of onnxruntime, journaled; {(model, label(record), io): numbers}.

    Into the run `convbench bench` shares when there is one, else into a new run under ``results_root``.
    """
    from ..backends import ort
    from ..measurement import fingerprint
    from . import sweep
    from .fresh import FreshProcesses
    from .journal import Journal
    from .ort_grid import model_records

    backend = ort.OrtBackend(processes=FreshProcesses())
    # A GPU host asks for the CUDA EP even when this onnxruntime lacks it: those settings become skipped
    # records that say why (e.g. the CPU-only onnxruntime wheel), not settings that silently never ran.
    cuda = bool(fingerprint.gpus()[0])
    opts = ort.ModelOptions(device="cuda" if cuda else "cpu")
    shared = sweep.shared_run()
    journal = Journal(shared) if shared else Journal.create(
        results_root, fingerprint.take(0 if cuda else None), {"asv": "bench_ort", "models": models})
    table: dict = {}
    for model in models:
        for rec in model_records(backend, model, backend.model_combos(model, opts), opts):
            journal.append(rec)
            drift = (rec.extra.get("drift") or {}).get("image", {}).get("all", {})
            table[(model, label(rec), rec.settings["io"])] = {
                "status": rec.status,
                "reason": rec.reason,
                "latency_s": rec.time.median_ms / 1e3 if rec.time else None,
                "session_create_s": (rec.extra.get("session_create_ms") or math.nan) / 1e3,
                "first_inference_s": (rec.extra.get("first_inference_ms") or math.nan) / 1e3,
                "rel_l2": rec.accuracy.rel_l2 if rec.accuracy else None,
                "distinct_outputs": drift.get("distinct"),
                "max_spread": drift.get("max_spread"),
            }
    if not shared:
        journal.finish({"records": len(table)})
    return table

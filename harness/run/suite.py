"""What the asv suite (benchmarks/) asks of the library, in one place: the suite imports harness.core and this.

asv imports the suite in processes that must not touch CUDA, so nothing here imports torch, onnxruntime or a
backend at import time; each function imports what it uses when called. What asv's classes read of a sweep is
built here too (read_sweeps), so `convbench bench`'s selection (asvselect.py) reads a sweep the same way the suite
does without importing the suite, and reads the journal once for both.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.cases import Case
from ..core.records import RecordKind, settings_key
from .suiteshape import NUMERICS, STABILITY, TIME, SweepData, precision_of

SWEEP_DATA_FILE = "asv-sweeps.pickle"  # what `convbench bench` read from the journal, for asv's setup_cache


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


def read_sweeps(run_dir: Path) -> dict[tuple[str, str], SweepData]:
    """(backend, direction) -> the asv classes' parameter sets with data, from one pass over the run's journal.

    Per time group (case, dtype or PyTorch precision, layout) the fastest ok combination by median, with its
    samples; per numerics group the worst rel L2 over the group's ok combinations; per case the combinations not
    bitwise reproducible."""
    from .journal import JOURNAL_FILE, iter_journal

    best: dict[tuple[str, str], dict] = {}
    sweeps: dict[tuple[str, str], SweepData] = {}
    for rec in iter_journal(run_dir / JOURNAL_FILE):
        if rec.get("kind") != RecordKind.MEASUREMENT or rec.get("backend") not in ("cudnn", "torch"):
            continue
        sweep = (rec["backend"], rec["direction"])
        data = sweeps.get(sweep)
        if data is None:
            data = sweeps[sweep] = SweepData({TIME: {}, NUMERICS: {}, STABILITY: {}})
            best[sweep] = {}
        if rec["status"] != "ok":
            continue
        case = sys.intern(rec["case"])
        precision = precision_of(rec) if rec["backend"] == "torch" else rec["dtype"]
        tim, acc, det = rec.get("time"), rec.get("accuracy"), rec.get("determinism")
        if tim:
            key = (case, precision, rec["layout"])
            if key not in best[sweep] or tim["median_ms"] < best[sweep][key]["median_ms"]:
                best[sweep][key] = tim
        if acc and acc.get("rel_l2") is not None and math.isfinite(acc["rel_l2"]):
            worst = data.groups[NUMERICS]
            worst[case, precision] = max(worst.get((case, precision), 0.0), acc["rel_l2"])
        if det is not None:
            stable = bool(det["repeat_equal"]) and det["fresh_handle_equal"] is not False
            unstable = data.groups[STABILITY]
            unstable[case] = unstable.get(case, 0) + (not stable)
    for sweep, groups in best.items():
        sweeps[sweep].groups[TIME] = {
            key: (tim["median_ms"] / 1e3,
                  array("d", [s / 1e3 for s in tim.get("samples_ms") or [tim["median_ms"]]]).tobytes())
            for key, tim in groups.items()}
    return sweeps


def sweep_data(backend: str, direction: str, swept: bool, cases: list[Case], results_root: Path) -> SweepData:
    """What a sweep's asv classes read (their setup_cache). When `convbench bench` measured it before asv started
    (``swept``), read what bench already read from the journal (its SWEEP_DATA_FILE), else the journal; otherwise
    sweep now, into a new run under ``results_root``."""
    import pickle

    from . import sweep

    run_dir = sweep.shared_run() if swept else None  # measured before asv started: read it, no CUDA here
    if run_dir is not None and (run_dir / SWEEP_DATA_FILE).is_file():
        with open(run_dir / SWEEP_DATA_FILE, "rb") as f:
            shared = pickle.load(f)
    else:
        if run_dir is None:
            run_dir = sweep_direction(cases, backend, direction, results_root)
        shared = read_sweeps(run_dir)
    return shared.get((backend, direction)) or SweepData({TIME: {}, NUMERICS: {}, STABILITY: {}})


def share_sweeps(run_dir: Path) -> dict[tuple[str, str], SweepData]:
    """Read the run's journal once for `convbench bench`: the selection uses it, and asv's setup_cache loads it
    from the run directory instead of reading the journal again."""
    import pickle

    sweeps = read_sweeps(run_dir)
    with open(run_dir / SWEEP_DATA_FILE, "wb") as f:
        pickle.dump(sweeps, f, protocol=pickle.HIGHEST_PROTOCOL)
    return sweeps


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
    from .journal import Journal
    from .ort_grid import model_records
    from .pool import FreshProcesses

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
        journal.close()  # the model's records reach the disk (Journal.append)
    if not shared:
        journal.finish({"records": len(table)})
    return table

"""Bridge between asv and the sweep: run one sweep per class in setup_cache, hand asv its numbers.

asv imports this suite in processes that must not touch CUDA and forks one process per parameter
combination, so nothing here imports torch or initialises CUDA at import time: the cases are chosen from
NVML (which creates no CUDA context) or from CONVBENCH_CASES, and all GPU work happens in setup_cache,
whose records go to the run journal (CONVBENCH_RUN_DIR when `convbench bench` shares one run between
classes, else a new run directory under CONVBENCH_RESULTS or <repo>/results).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness import cases as catalogue  # noqa: E402  (no torch, no CUDA)
from harness.fingerprint import gpus  # noqa: E402


def case_ids() -> list[str]:
    wanted = os.environ.get("CONVBENCH_CASES")
    if not wanted:
        wanted = "default" if gpus()[0] else "quick"
    return [c.id for c in catalogue.select(wanted)]


def results_root() -> Path:
    return Path(os.environ.get("CONVBENCH_RESULTS", ROOT / "results")).resolve()


def run_sweep(backend: str, direction: str) -> dict:
    """Measure every combination of ``backend`` in ``direction`` and index the summaries asv reads."""
    from harness import sweep
    from harness.backends import SweepOptions
    from harness.backends.cudnn import cuda_unavailable_reason

    gpu = cuda_unavailable_reason() is None
    opts = SweepOptions(directions=(direction,), device="cuda" if gpu else "cpu")
    table: dict = {}

    def keep(rec) -> None:
        if rec.kind != "measurement":
            return
        table[param_key(rec)] = {
            "status": rec.status,
            "time_s": rec.time.median_ms / 1e3 if rec.time else None,
            "rel_l2": rec.accuracy.rel_l2 if rec.accuracy else None,
            "max_norm_err": rec.accuracy.max_norm_err if rec.accuracy else None,
            "bitwise_stable": (None if rec.determinism is None else
                               float(bool(rec.determinism.repeat_equal) and rec.determinism.fresh_handle_equal
                                     is not False)),
        }

    cases = catalogue.select(case_ids())
    sweep.run(cases, [backend], opts, results_root(), on_record=keep)
    return table


def param_key(rec) -> tuple:
    setting = ",".join(f"{k}={v}" for k, v in sorted(rec.settings.items()) if k != "device") or "-"
    return (rec.case, rec.algo, rec.math, rec.dtype, rec.layout, setting)


def check(cache: dict, key: tuple) -> None:
    """asv ``setup``: a combination that did not run is n/a in asv (its record says why), not a failure."""
    row = cache.get(key)
    if row is None or row["status"] != "ok":
        raise NotImplementedError(row["status"] if row else "combination not in this sweep")


def value(cache: dict, key: tuple, field: str) -> float:
    v = cache[key][field]
    return float("nan") if v is None or not math.isfinite(v) else float(v)

"""Bridge between asv and the sweep: each class's setup_cache gets its sweep's records, asv gets their numbers.

asv imports this suite in processes that must not touch CUDA and forks one process per parameter
combination, so nothing here imports torch or initialises CUDA at import time: the cases are chosen from
NVML (which creates no CUDA context) or from CONVBENCH_CASES. Under `convbench bench` the sweep has run before
asv started (CONVBENCH_SWEPT names what it measured, CONVBENCH_RUN_DIR the run), and setup_cache only reads the
journal; under a plain `asv run` each setup_cache sweeps itself into a new run directory under
CONVBENCH_RESULTS or <repo>/results.
"""

from __future__ import annotations

import functools
import gc
import math
import os
import sys
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.core import cases as catalogue  # noqa: E402  (no torch, no CUDA)
from harness.core import cases as vocab  # noqa: E402,F401  (the suite's parameters: algorithms, maths, dtypes, layouts)
from harness.run import suite  # noqa: E402  (imports no backend until called)
from harness.run.suite import (  # noqa: E402,F401
    BITWISE_STABLE,
    REL_L2,
    SAMPLES,
    STATUS,
    TIME_S,
    param_key,
    read_table,
)


@functools.cache
def on_gpu() -> bool:
    """Whether NVML sees a GPU (no CUDA context is made); asked once per import, not once per class."""
    return suite.gpus_seen()


@functools.cache
def _selected(wanted: str | None) -> tuple[str, ...]:
    if not wanted:
        wanted = "default" if on_gpu() else "quick"
    return tuple(c.id for c in catalogue.select(wanted))


def settle() -> None:
    """Called at the end of each benchmark module: freeze what the import made out of the garbage collector's reach.

    asv's forkserver imports the suite once and forks one process per parameter set; a collection in that child
    walks every inherited object and so copies the parent's pages. Frozen, the child's collections see only its
    own objects: 3,744 all-n/a parameter sets took 30.5 and 32.1 s without, 29.5 and 29.0 s with (dev VM,
    2026-11-29, runs alternated): a small gain, but one line.
    """
    gc.freeze()


def case_ids() -> list[str]:
    """The cases this run measures (CONVBENCH_CASES, else the host's default set)."""
    return list(_selected(os.environ.get("CONVBENCH_CASES")))


def param_cases() -> list[str]:
    """asv's case parameter: the whole catalogue, whatever this run measures.

    asv publish reads the parameters from benchmarks.json, which each run rewrites; parameters that followed
    CONVBENCH_CASES left a published site showing only the latest run's cases (1 of 26 after an ort-only run).
    A case this run did not measure is n/a (``check``), and `convbench bench` does not hand it to asv at all.
    """
    return list(catalogue.CATALOGUE)


def results_root() -> Path:
    return Path(os.environ.get("CONVBENCH_RESULTS", ROOT / "results")).resolve()


def run_sweep(backend: str, direction: str) -> dict:
    """Measure every combination of ``backend`` in ``direction``; index what the journal holds for asv.

    The table is read back from the run journal rather than collected while measuring: records made by
    isolated worker processes count, and so do those a shared run (`convbench bench`) already holds. When
    `convbench bench` has swept this backend and direction itself (CONVBENCH_SWEPT), nothing is measured here.
    """
    from harness.run import sweep

    swept = f"{backend}:{direction}" in os.environ.get("CONVBENCH_SWEPT", "").split(",")
    run_dir = sweep.shared_run() if swept else None  # measured before asv started: read it, no CUDA here
    if run_dir is None:
        run_dir = suite.sweep_direction(catalogue.select(case_ids()), backend, direction, results_root())
    return read_table(run_dir, backend, direction)


def check(cache: dict, key: tuple) -> None:
    """asv ``setup``: a combination that did not run is n/a in asv (its record says why), not a failure."""
    row = cache.get(key)
    if row is None or row[STATUS] != "ok":
        raise NotImplementedError(row[STATUS] if row else "combination not in this sweep")


class Replay:
    """asv's ``timer`` for a combination the sweep timed: asv takes one sample per recorded sample, each as long as
    the record says, so asv's own samples and statistics (median, 99% interval, quartiles) are the device-event
    times of the record, not the time of a Python call that measures nothing."""

    def __init__(self, samples: array):
        self.samples, self.calls, self.now = samples, 0, 0.0

    def __call__(self) -> float:
        if self.calls % 2:  # timeit reads the clock before and after each sample: the second read ends it
            self.now += self.samples[(self.calls // 2) % len(self.samples)]
        self.calls += 1
        return self.now


def replay(bench: object, cache: dict, key: tuple) -> None:
    """asv ``setup`` of a time benchmark: ``key``'s record checked (n/a when it did not run), its samples given to
    asv to take (``timer``, one call per sample, no warm-up)."""
    check(cache, key)
    row = cache[key]
    samples = array("d")
    samples.frombytes(row[SAMPLES])
    if not samples:
        samples.append(row[TIME_S])
    bench.timer = Replay(samples)
    bench.repeat = (len(samples), len(samples), 1e9)


def value(cache: dict, key: tuple, field: int) -> float:
    v = cache[key][field]
    return float("nan") if v is None or not math.isfinite(v) else float(v)


def summary(cache: suite.Table, case: str, match, field: int, reduce) -> float:
    """Reduce ``field`` over the ok combinations of ``case`` whose key satisfies ``match`` (asv: n/a when none
    ran). Only the case's rows are read: with a scan of the whole table (twice, setup and track) such a parameter set
    cost about 2.3 times a track_time one (backward sweep through asv, H200, 2026-12-01 09:55 UTC: 12.8 ms against
    5.6 ms, 3.0-3.5 s a numerics class)."""
    rows = (cache[key] for key in cache.by_case.get(case, ()) if match(key))
    values = [row[field] for row in rows if row[STATUS] == "ok" and row[field] is not None]
    if not values:
        raise NotImplementedError("no combination of this group ran")
    return float(reduce(values))

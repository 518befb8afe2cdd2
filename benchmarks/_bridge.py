"""Bridge between asv and the sweep: the suite's classes built from the library's table of them
(harness/run/suiteshape.py), each sweep's setup_cache, and the replay of a record's samples as asv's timer.

asv imports this suite in processes that must not touch CUDA and forks one process per parameter
combination, so nothing here imports torch or initialises CUDA at import time: the cases are chosen from
NVML (which creates no CUDA context) or from CONVBENCH_CASES. Under `convbench bench` the sweep has run before
asv started (CONVBENCH_SWEPT names what it measured, CONVBENCH_RUN_DIR the run), and setup_cache only loads what
bench read from the journal; under a plain `asv run` each setup_cache sweeps itself into a new run directory under
CONVBENCH_RESULTS or <repo>/results.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this suite's own harness (under `asv continuous`, the commit's checkout)

from harness.core import cases as catalogue  # noqa: E402  (no torch, no CUDA)
from harness.core import cases as vocab  # noqa: E402,F401  (the suite's words: search modes for ORT)
from harness.run import suite, suiteshape  # noqa: E402  (imports no backend until called)


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
    own objects.
    """
    gc.freeze()


def case_ids() -> list[str]:
    """The cases this run measures (CONVBENCH_CASES, else the host's default set)."""
    return list(_selected(os.environ.get("CONVBENCH_CASES")))


def directions() -> list[str]:
    """The directions whose classes exist (CONVBENCH_DIRECTIONS, default fwd), as for `convbench bench`."""
    return os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(",")


def results_root() -> Path:
    return Path(os.environ.get("CONVBENCH_RESULTS", ROOT / "results")).resolve()


def sweep_cache(backend: str, direction: str) -> suiteshape.SweepData:
    """setup_cache of a sweep's classes: what they read of the sweep of ``backend`` in ``direction``.

    Read from the run `convbench bench` already measured (CONVBENCH_SWEPT), else measured now."""
    swept = f"{backend}:{direction}" in os.environ.get("CONVBENCH_SWEPT", "").split(",")
    return suite.sweep_data(backend, direction, swept, catalogue.select(case_ids()), results_root())


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


class _Sweep:
    """A class reading one sweep; ``shape`` is its row of the library's table (suiteshape.CLASSES)."""

    shape: suiteshape.AsvClass

    def check(self, cache, values) -> None:
        """asv ``setup``: a parameter set without data is n/a in asv (the journal says why), not a failure."""
        if not self.shape.has_data(cache, values):
            raise NotImplementedError("no combination of this group ran")


class _Time(_Sweep):
    rounds = number = 1
    warmup_time = 0

    def setup(self, cache, *values):
        """The group's fastest record's samples given to asv to take (``timer``, one call a sample, no warm-up)."""
        self.check(cache, values)
        median, raw = cache.groups[suiteshape.TIME][values]
        samples = array("d")
        samples.frombytes(raw)
        if not samples:
            samples.append(median)
        self.timer = Replay(samples)
        self.repeat = (len(samples), len(samples), 1e9)

    def time_conv(self, cache, *values):
        pass  # timed by the sweep, on the device; asv's timer replays those samples


class _Numerics(_Sweep):
    rounds = repeat = number = 1

    def setup(self, cache, *values):
        self.check(cache, values)

    def track_worst_rel_l2_error(self, cache, *values):
        return float(cache.groups[suiteshape.NUMERICS][values])

    track_worst_rel_l2_error.unit = "relative L2 error vs float64 (worst of the group)"


class _Stability(_Sweep):
    rounds = repeat = number = 1

    def setup(self, cache, case):
        self.check(cache, (case,))

    def track_unstable_combinations(self, cache, case):
        return float(cache.groups[suiteshape.STABILITY][case])

    track_unstable_combinations.unit = "combinations not bitwise reproducible"


_BASES = {suiteshape.TIME: _Time, suiteshape.NUMERICS: _Numerics, suiteshape.STABILITY: _Stability}


def sweep_classes(module: str, caches: dict) -> dict[str, type]:
    """The classes of ``module`` that exist for this run's directions, built from the library's table; ``caches``
    maps a direction to its setup_cache (one function each: asv keys a cache by the function's source line)."""
    made = {}
    for shape in suiteshape.classes(directions(), module):
        made[shape.name] = type(shape.name, (_BASES[shape.kind],), {
            "__module__": f"benchmarks.{module}", "__doc__": shape.doc, "shape": shape,
            "params": shape.params(on_gpu()), "param_names": list(shape.param_names),
            "setup_cache": caches[shape.direction]})
    return made

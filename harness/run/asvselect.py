"""What `convbench bench` asks asv to run: the sweeps its classes read, and only parameter sets that have data.

asv forks a process for every parameter set it runs, about 10 ms each on the H200 host, whether the set has a
number or is n/a, and the suite's case parameter is the whole catalogue. Since `convbench bench` measures before
asv starts, it knows which sets the suite's own ``setup`` would refuse (the ``has_data`` of the library's table of
the suite, suiteshape.py, which ``setup`` calls too), and hands asv a ``-b`` selection without them: asv records
those as NaN without starting a process, exactly what it records for an n/a set. The selection is built from the
user's ``-b`` regexes as asv applies them, to the names asv matches:
``bench_cudnn.CudnnForward.time_conv('seed.c64', 'fp32', 'NCHW')``. The suite itself is never imported here.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.cases import DIRECTIONS
from ..core.errors import UserError
from . import suite, suiteshape
from .suiteshape import AsvClass, SweepData

MAX_REGEX_CHARS = 100_000  # one argv string may hold 128 KiB on Linux


@dataclass
class Selection:
    """What `convbench bench` hands asv: its -b regexes (empty: everything), the parameter sets asv will run and
    the ones left out because the suite would call them n/a."""

    regexes: list[str]
    sets: int
    left_out: int


def suite_directions() -> tuple[str, ...]:
    """The directions whose classes the suite defines, as asv's processes will see CONVBENCH_DIRECTIONS."""
    return tuple(os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(","))


def _patterns(regexes: list[str]) -> list[re.Pattern]:
    try:
        return [re.compile(r) for r in regexes]
    except re.error as exc:
        raise UserError(f"-b {exc.pattern!r} is not a regular expression: {exc}") from None


def _param_names(params: list[list[str]], name: str) -> list[tuple[tuple, str]]:
    """(parameter values, the name asv matches -b against) of every parameter set of one benchmark."""
    if not params:
        return [((), name)]
    return [(values, f"{name}({', '.join(repr(v) for v in values)})") for values in itertools.product(*params)]


def _chosen(params: list[list[str]], name: str, patterns: list[re.Pattern]) -> list[tuple[tuple, str]]:
    """The parameter sets of one benchmark that asv's -b selects: any regex found in the name (no regex: all)."""
    return [(v, n) for v, n in _param_names(params, name) if not patterns or any(p.search(n) for p in patterns)]


def _selected_classes(regexes: list[str], directions: tuple[str, ...]) -> list[AsvClass]:
    patterns = _patterns(regexes)
    gpu, models = suite.gpus_seen(), suiteshape.ort_models()
    picked = [c for c in suiteshape.classes(directions)
              if any(_chosen(c.params(gpu, models), name, patterns) for name in c.benchmark_names())]
    if not picked:
        raise UserError(f"-b {' -b '.join(regexes)} selects no benchmark of the suite (directions "
                        f"{','.join(directions)}; CONVBENCH_DIRECTIONS adds classes)")
    return picked


def sweeps(regexes: list[str], directions: tuple[str, ...] | None = None) -> dict[str, tuple[str, ...]]:
    """backend -> directions that the classes selected by ``regexes`` (asv's -b; none: all) read from a sweep.

    Read from the library's table of the suite (suiteshape), not from the suite. A regex that selects no
    benchmark at all is the user's error, said before anything runs.
    """
    wanted: dict[str, set[str]] = {}
    for cls in _selected_classes(regexes, directions or suite_directions()):
        if cls.sweeps is not None:
            wanted.setdefault(cls.sweeps[0], set()).add(cls.sweeps[1])
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    return {b: tuple(sorted(ds, key=order.__getitem__)) for b, ds in wanted.items()}


def selection(regexes: list[str], data: dict[tuple[str, str], SweepData], gpu: bool,
              directions: tuple[str, ...] | None = None, models: tuple[str, ...] = ()) -> Selection:
    """The -b selection for asv: the sets ``regexes`` choose whose class's ``has_data`` holds on ``data``
    (suite.read_sweeps of the run), with the parameters asv's processes will give the classes (``gpu``: whether
    NVML sees one there; ``models``: CONVBENCH_ORT_MODELS). With nothing left out and no user regex, the regex list
    is empty: asv runs everything.
    """
    patterns = _patterns(regexes)
    out: list[str] = []
    run = skipped = 0
    for cls in suiteshape.classes(directions or suite_directions()):
        params = cls.params(gpu, models)
        sweep = data.get(cls.sweeps) if cls.sweeps else None
        has_data: dict[tuple, bool] = {}  # setup is per class: its methods share the answer
        for name in cls.benchmark_names():
            sets = _chosen(params, name, patterns)
            if not sets:
                continue
            total = len(sets)
            if cls.sweeps is not None:
                for v, _ in sets:
                    if v not in has_data:
                        has_data[v] = sweep is not None and cls.has_data(sweep, v)
                sets = [(v, n) for v, n in sets if has_data[v]]
            skipped += total - len(sets)
            run += len(sets)
            if len(sets) == len(_param_names(params, name)):
                out.append(f"^{re.escape(name)}(\\(|$)")  # every set: the benchmark by name
            elif sets:
                out += _set_regexes(name, [v for v, _ in sets])
    if not patterns and not skipped:
        return Selection([], run, 0)
    return Selection(out, run, skipped)


def bench_selection(regexes: list[str], run_dir: Path) -> Selection:
    """`convbench bench`'s selection on the run in ``run_dir``: the journal read once (suite.share_sweeps, which
    leaves what it read for asv's setup_cache), the suite's parameters as this host's asv processes see them."""
    return selection(regexes, suite.share_sweeps(run_dir), suite.gpus_seen(), models=suiteshape.ort_models())


def _set_regexes(name: str, rows: list[tuple]) -> list[str]:
    """Anchored regexes matching exactly ``name(row)`` for the given parameter rows, each within MAX_REGEX_CHARS."""
    regex = f"^{re.escape(name)}\\(" + _trie([tuple(repr(v) for v in row) for row in rows]) + "\\)$"
    if len(regex) <= MAX_REGEX_CHARS or len(rows) == 1:
        return [regex]
    half = len(rows) // 2  # rows come in asv's product order: each half still shares its leading parameters
    return _set_regexes(name, rows[:half]) + _set_regexes(name, rows[half:])


def _trie(rows: list[tuple[str, ...]]) -> str:
    """A regex for exactly these rows of parameter reprs joined by ", ", shared leading values factored out."""
    if not rows[0]:
        return ""
    groups: dict[str, list[tuple[str, ...]]] = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row[1:])
    parts = [re.escape(first) + (re.escape(", ") + _trie(rest) if rest[0] else "") for first, rest in groups.items()]
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"

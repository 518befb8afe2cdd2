"""What `convbench bench` asks asv to run: the sweeps its classes read, and only parameter sets that have data.

asv forks a process for every parameter set it runs, about 10 ms each on the H200 host, whether the set has a
number or is n/a. Nearly half of cuDNN's combinations are ones cuDNN rejects (3,036 of 4,992 forward on the
H200). Since `convbench bench` measures before asv starts, it knows which sets the suite's own ``setup`` would
refuse, and hands asv a ``-b`` selection without them: asv records those as NaN without starting a process,
exactly what it records for an n/a set. The selection is built from the user's ``-b`` regexes as asv applies
them, to the names asv matches: ``bench_cudnn.CudnnForward.time_conv('seed.c64', 'GEMM', 'FMA', 'fp32', 'NCHW')``.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.cases import DIRECTIONS
from ..core.intake import UserError
from .suite import read_table

MAX_REGEX_CHARS = 100_000  # one argv string may hold 128 KiB on Linux


def suite_benchmarks(root: Path, cases: list[str] | None = None) -> Iterator[tuple[str, type, list[str]]]:
    """(module stem, class, its benchmark names) for every benchmark class of the suite, freshly imported.

    Re-imported on each call, with CONVBENCH_CASES set to ``cases`` while it imports: which classes exist depends
    on CONVBENCH_DIRECTIONS, and their parameters on CONVBENCH_CASES, as they do for asv.
    """
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    modules = []
    before = os.environ.get("CONVBENCH_CASES")
    try:
        if cases is not None:
            os.environ["CONVBENCH_CASES"] = ",".join(cases)
        for path in sorted((root / "benchmarks").glob("bench_*.py")):
            name = f"benchmarks.{path.stem}"
            reloaded = importlib.reload(sys.modules[name]) if name in sys.modules else importlib.import_module(name)
            modules.append((path.stem, reloaded))
    finally:
        if cases is not None:
            if before is None:
                os.environ.pop("CONVBENCH_CASES", None)
            else:
                os.environ["CONVBENCH_CASES"] = before
    for stem, module in modules:
        for cls_name, cls in vars(module).items():
            if not isinstance(cls, type) or cls.__module__ != module.__name__:
                continue
            names = [f"{stem}.{cls_name}.{m}" for m in dir(cls) if m.startswith(("track_", "time_"))]
            if names:
                yield stem, cls, names


def _patterns(regexes: list[str]) -> list[re.Pattern]:
    try:
        return [re.compile(r) for r in regexes]
    except re.error as exc:
        raise UserError(f"-b {exc.pattern!r} is not a regular expression: {exc}") from None


def _param_names(cls: type, name: str) -> list[tuple[tuple, str]]:
    """(parameter values, the name asv matches -b against) of every parameter set of one benchmark."""
    params = getattr(cls, "params", None)
    if not params:
        return [((), name)]
    return [(values, f"{name}({', '.join(repr(v) for v in values)})") for values in itertools.product(*params)]


def _chosen(cls: type, name: str, patterns: list[re.Pattern]) -> list[tuple[tuple, str]]:
    """The parameter sets of one benchmark that asv's -b selects: any regex found in the name (no regex: all)."""
    return [(v, n) for v, n in _param_names(cls, name) if not patterns or any(p.search(n) for p in patterns)]


def sweeps(root: Path, regexes: list[str]) -> dict[str, tuple[str, ...]]:
    """backend -> directions that the classes selected by ``regexes`` (asv's -b; none: all) read from a sweep.

    Each sweeping setup_cache is tagged ``sweeps = (backend, direction)``. A regex that selects no benchmark at
    all is the user's error, said before anything runs.
    """
    patterns = _patterns(regexes)
    wanted: dict[str, set[str]] = {}
    selected = False
    for _, cls, names in suite_benchmarks(root):
        if not any(_chosen(cls, name, patterns) for name in names):
            continue
        selected = True
        tag = getattr(getattr(cls, "setup_cache", None), "sweeps", None)
        if tag is not None:
            wanted.setdefault(tag[0], set()).add(tag[1])
    if not selected:
        raise UserError(f"-b {' -b '.join(regexes)} selects no benchmark of the suite (directions "
                        f"{os.environ.get('CONVBENCH_DIRECTIONS', 'fwd')}; CONVBENCH_DIRECTIONS adds classes)")
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    return {b: tuple(sorted(ds, key=order.__getitem__)) for b, ds in wanted.items()}


def selection(root: Path, regexes: list[str], run_dir: Path, cases: list[str]) -> tuple[list[str], int, int]:
    """(asv -b regexes, parameter sets asv will run, sets left out because the suite would call them n/a).

    The suite is imported for ``cases``, as asv will see it. A set is left out when its class reads a sweep of
    ``run_dir`` and the class's own ``setup`` refuses it with NotImplementedError. With nothing left out and no
    user regex, the regex list is empty: asv runs everything.
    """
    patterns = _patterns(regexes)
    out: list[str] = []
    run = skipped = 0
    tables: dict[tuple[str, str], dict[Any, Any]] = {}
    for _, cls, names in suite_benchmarks(root, cases):
        tag = getattr(getattr(cls, "setup_cache", None), "sweeps", None)
        has_data: dict[tuple, bool] = {}  # setup is per class: its methods share the answer
        for name in names:
            sets = _chosen(cls, name, patterns)
            if not sets:
                continue
            total = len(sets)
            if tag is not None:
                table = tables.get(tag)
                if table is None:
                    table = tables[tag] = read_table(run_dir, *tag)
                for v, _ in sets:
                    if v not in has_data:
                        has_data[v] = _has_data(cls, table, v)
                sets = [(v, n) for v, n in sets if has_data[v]]
            skipped += total - len(sets)
            run += len(sets)
            if len(sets) == len(_param_names(cls, name)):
                out.append(f"^{re.escape(name)}(\\(|$)")  # every set: the benchmark by name
            elif sets:
                out += _set_regexes(name, [v for v, _ in sets])
    if not patterns and not skipped:
        return [], run, 0
    return out, run, skipped


def _has_data(cls: type, table: dict, values: tuple) -> bool:
    try:
        cls.setup(cls(), table, *values)
    except NotImplementedError:
        return False
    return True


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

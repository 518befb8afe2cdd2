"""What a slice of the pool names: a registered backend (built with the fresh-process service where it plans
processes of its own) or a runner class by ``"package.module:Name"``; the tests' fault-injecting backend only
where CONVBENCH_TEST_BACKENDS=1. The pool's parent (sweep, studies) and its worker process (poolchild.py) both
resolve names here.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from ..backends.registry import BACKENDS, get_backend
from .pool import FreshProcesses


def _test_backend():
    """The tests' fault-injecting backend (tests/faulty_backend.py, not shipped in the wheel) when
    CONVBENCH_TEST_BACKENDS=1 and this is a checkout that has it; else None."""
    if os.environ.get("CONVBENCH_TEST_BACKENDS") != "1":
        return None
    tests = str(Path(__file__).resolve().parents[2] / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    try:
        import faulty_backend
    except ImportError:
        return None
    return faulty_backend


def resolve_backend(name: str):
    """A backend by name; the fault-injecting test backend only when CONVBENCH_TEST_BACKENDS=1. A backend that
    runs processes of its own (``processes``: onnxruntime's sessions) gets the pool's (pool.FreshProcesses)."""
    faulty = _test_backend()
    if faulty and name == faulty.FaultyBackend.name:
        return faulty.FaultyBackend()
    backend = get_backend(name)
    if getattr(backend, "processes", False) is None:
        backend.processes = FreshProcesses()
    return backend


def backend_names() -> tuple[str, ...]:
    return BACKENDS + (("faulty",) if _test_backend() else ())


def resolve(spec: str):
    """What ``"package.module:Name"`` names, in a harness module (or in the fault-injecting test module,
    ``"faulty_backend:Name"``, only when CONVBENCH_TEST_BACKENDS=1)."""
    module, _, attr = spec.partition(":")
    faulty = _test_backend() if module == "faulty_backend" else None
    if not (module.startswith("harness.") or faulty) or not attr:
        raise ValueError(f"slice runner {spec!r} is not a harness class")
    return getattr(faulty or importlib.import_module(module), attr)


def load_runner(spec: str):
    """A slice runner named ``"package.module:Name"`` (a class with ``name`` and ``run(subject, combos, options)``),
    instantiated: how a driver that is not a registered backend (the onnxruntime model grid, the autotuner) runs
    its slices through the same pool, with the same crash, timeout and OOM records."""
    return resolve(spec)()

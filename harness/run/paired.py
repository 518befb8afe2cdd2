"""Paired A/B: stack B judged against stack A on the same GPU in one run, the way an upgrade should be judged.

Two nightly runs on different days differ in more than their stacks (the GPU's state, the host's load, the clock
it settled at), so an upgrade is measured paired: each stack has its own worker process (a stack is a process
environment, stacks.py), and the two alternate case by case in ABBA order (A then B on even cases, B then A on
odd ones) so that a drift of the GPU during the run falls on both alike. Each stack's records go to a run of its
own (a normal run: collect, compare and report read it), whose fingerprint is taken in that stack's environment,
and whose options say ``paired = {study, role, stack, gpu}``. With several GPUs the study is replicated on each
(in parallel, one ABBA leg per GPU); a verdict the legs agree on is confirmed. An A/A study (the same stack on
both sides) is the proof that the judgement reports nothing where nothing changed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.paired_judgement import ROLES
from ..backends import SweepOptions
from ..core.cases import Case
from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..core.records import RecordKind
from ..deploy.stacks import Stack
from . import replicas, runners
from .journal import Journal
from .pool import WorkerPool
from .sweep import lock_run, options_dict

PROBE_TIMEOUT_S = 600  # a bound, not a measurement: a stack whose libraries do not load in 10 minutes is broken

_PROBE = """
import json, sys
from harness.run import sweep
backends, unavailable, libraries = sweep.load_backends(sys.argv[1].split(","))
for b in backends.values():  # a backend's first use loads its libraries (torch's cuDNN, onnxruntime's EP)
    getattr(b, "cuda_reason", lambda: None)()
cuda, uuid = sweep._cuda_device()
fp = sweep.take_fingerprint(cuda and sys.argv[2] == "cuda", uuid)
fp["libraries"] = libraries
print(json.dumps({"fingerprint": fp, "unavailable": unavailable}))
"""


def probe(stack: Stack, env: dict[str, str], backends: list[str], device: str) -> dict[str, Any]:
    """The fingerprint of a process on ``stack``: what it loads (path and version), read in that process."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(env, PYTHONPATH=os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])))
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE, ",".join(backends), device], env=env,
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"stack {stack.name}: its process did not load its libraries within {PROBE_TIMEOUT_S} s",
                        EXIT_ENVIRONMENT) from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"stack {stack.name}: its process could not start: {last}", EXIT_ENVIRONMENT)
    return json.loads(out.stdout.strip().splitlines()[-1])


@dataclass
class Leg:
    """One GPU's half of a study: a worker and a run per stack."""

    gpu: str
    journals: dict[str, Journal] = field(default_factory=dict)
    pools: dict[str, WorkerPool] = field(default_factory=dict)
    replicas: dict[str, WorkerPool] = field(default_factory=dict)  # each stack's second timing process
    locks: list[int] = field(default_factory=list)


def abba(cases: list[Case]) -> Iterable[tuple[Case, tuple[str, str]]]:
    """Each case with the order its stacks run in: A, B on even cases, B, A on odd ones."""
    for i, case in enumerate(cases):
        yield case, (ROLES if i % 2 == 0 else ROLES[::-1])


def run(stacks: dict[str, Stack], cases: list[Case], backend_names: list[str], options: SweepOptions,
        results: Path, gpus: list[str], log: Callable[[str], None] | None = None,
        study: str | None = None) -> dict[str, Any]:
    """Measure the study; returns {"study", "runs": {gpu: {role: run dir}}}."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    study = study or f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{stacks['A'].name}-vs-{stacks['B'].name}"
    legs = []
    for gpu in gpus:
        leg = Leg(gpu)
        for role in ROLES:
            st = stacks[role]
            env = st.env()
            if options.device == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = gpu
            got = probe(st, env, backend_names, options.device)
            fp = got["fingerprint"]
            fp["stack"] = st.name  # the host stack sets no CONVBENCH_STACK (its image stays "native")
            meta = {"cases": [c.id for c in cases], "backends": backend_names, "sweep": options_dict(options),
                    "paired": {"study": study, "role": role, "stack": st.name, "gpu": gpu,
                               "other": stacks["B" if role == "A" else "A"].name, "order": "ABBA by case"}}
            leg.journals[role] = Journal.create(results, fp, meta)
            leg.locks.append(lock_run(leg.journals[role].path))
            leg.pools[role] = WorkerPool(leg.journals[role], keep_fds=(leg.locks[-1],), log=log, env=env)
            if options.processes > 1:
                leg.replicas[role] = WorkerPool(leg.journals[role], keep_fds=(leg.locks[-1],), log=log,
                                                env=env)
            log(f"study {study}: GPU {gpu} stack {role}={st.name}: run {leg.journals[role].path.name}, "
                f"cuDNN {fp['libraries'].get('cudnn', {}).get('version')}")
        legs.append(leg)
    errors: list[BaseException] = []

    def measure(leg: Leg) -> None:
        try:
            _measure_leg(leg, cases, backend_names, options, log)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below, after every leg has stopped
            errors.append(exc)

    threads = [threading.Thread(target=measure, args=(leg,)) for leg in legs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    finally:
        for leg in legs:
            for pool in [*leg.pools.values(), *leg.replicas.values()]:
                pool.close()
            for fd in leg.locks:
                os.close(fd)
    return {"study": study, "runs": {leg.gpu: {r: str(j.path) for r, j in leg.journals.items()} for leg in legs}}


def _measure_leg(leg: Leg, cases: list[Case], backend_names: list[str], options: SweepOptions,
                 log: Callable[[str], None]) -> None:
    backends = {name: runners.resolve_backend(name) for name in backend_names}
    counts: dict[str, Counter[str]] = {r: Counter() for r in ROLES}
    for case, order in abba(cases):
        for role in order:
            for name, backend in backends.items():
                combos = backend.combos(case, options)
                for rec in replicas.measure_slice(leg.pools[role], leg.replicas.get(role), name, backend, case,
                                                  combos, options):
                    if rec.kind == RecordKind.MEASUREMENT:
                        counts[role][rec.status] += 1
        log(f"GPU {leg.gpu} {case.id}: " + ", ".join(f"{r} {sum(counts[r].values())}" for r in order))
    for role in ROLES:
        leg.journals[role].finish({"counts": dict(counts[role]), "ok": counts[role].get("ok", 0)})

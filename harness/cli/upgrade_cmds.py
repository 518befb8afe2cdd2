"""``convbench upgrade``: stack B judged against stack A on the same GPU(s) in one paired run (paired.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..core.intake import UserError
from ..core.outputs import check_file, write_file
from .measure_cmds import add_sweep_arguments, sweep_setup


def register(sub) -> None:
    p = sub.add_parser("upgrade", help="judge stack B against stack A: paired ABBA run on each GPU, one verdict "
                                       "per combination",
                       description="Measure two stacks (each 'host', a declared overlay's name, a stack folder, "
                                   "or NAME=FOLDER) case by case in ABBA order on each GPU given, each stack in its "
                                   "own worker process, then judge B against A: faster / slower / same / "
                                   "ambiguous, changed bits, accuracy, status and determinism. The same stack "
                                   "on both sides (an A/A study) must report nothing.")
    p.add_argument("--a", required=True, help="the base stack: 'host', a declared overlay's name, or a folder")
    p.add_argument("--b", required=True, help="the stack judged against it")
    p.add_argument("--cases", default=None, help="case ids and/or sets (default: 'default' with a GPU)")
    p.add_argument("--gpus", default="0", help="GPU indices, comma-separated: one ABBA leg each, in parallel")
    p.add_argument("--json", type=Path, help="also write the judgement (counts and findings) to this file")
    add_sweep_arguments(p)
    p.set_defaults(handler=upgrade)


def upgrade(args) -> int:
    from ..collect.ingest import read_runs_into
    from ..collect.store import Store
    from ..deploy.stacks import resolve_all
    from ..run import paired

    if args.json:  # before the study: a path that cannot be written is found now, not after an hour
        check_file(args.json, "--json")
    a, b = resolve_all([args.a, args.b])
    stacks = {"A": a, "B": b}
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus) or len(set(gpus)) != len(gpus):
        raise UserError(f"--gpus {args.gpus!r}: distinct GPU indices, comma-separated (e.g. 0 or 0,1)")
    cases, options = sweep_setup(args)
    if options.device != "cuda" and len(gpus) > 1:
        raise UserError("--gpus: no CUDA GPU here; a CPU study has one leg")
    study = paired.run(stacks, cases, list(args.backends), options, args.results, gpus)
    legs: dict[str, dict[str, Any]] = {}
    for gpu, runs in study["runs"].items():
        recs = {}
        for role, path in runs.items():
            mem = Store(":memory:")
            read_runs_into(mem, [path])
            (run,) = mem.runs()
            recs[role] = mem.records(run["id"])
        legs[gpu] = paired.judge(recs["A"], recs["B"])
        legs[gpu]["runs"] = runs
    agreement = paired.confirm(legs)
    for gpu, j in legs.items():
        print(f"GPU {gpu}: {stacks['B'].name} against {stacks['A'].name}: {j['both_ok']} of {j['combinations']} "
              f"combinations ran on both; " + ", ".join(f"{k} {v}" for k, v in j["counts"].items()))
    if agreement["legs"] > 1:
        print(f"{agreement['confirmed']} of {agreement['findings']} findings confirmed on every GPU")
    if args.json:
        out = {"study": study["study"], "stacks": {r: s.name for r, s in stacks.items()}, "agreement": agreement,
               "legs": {g: {**{k: v for k, v in j.items() if k != "findings"},
                            "findings": [f.to_dict() for f in j["findings"]]} for g, j in legs.items()}}
        write_file(args.json, json.dumps(out, indent=1, default=str), "--json")
    print(f"study {study['study']}: runs under {args.results}", file=sys.stderr)
    return 0

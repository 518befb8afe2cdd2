"""``convbench upgrade``: stack B judged against stack A on the same GPU(s) in one paired run (paired.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..core.cases import DEFAULT_SET
from ..core.errors import UserError
from ..core.outputs import check_file, write_file
from .gateflags import add_gate_arguments, thresholds
from .helptext import command
from .jsonout import add_json, dumps
from .measure_cmds import add_sweep_arguments, sweep_setup


def register(sub) -> None:
    p = command(sub, "upgrade", help="judge stack B against stack A: paired ABBA run on each GPU, one verdict "
                                     "per combination",
                description="Measure two stacks (each 'host', a declared overlay's name, a stack folder, or "
                            "NAME=FOLDER) case by case in ABBA order on each GPU given, each stack in its own "
                            "worker process, then judge B against A: faster / slower / same / ambiguous, changed "
                            "bits, accuracy, status and determinism. The same stack on both sides (an A/A study) "
                            "must report nothing.",
                examples=["convbench upgrade --a host --b cudnn91 --cases seed",
                          "convbench upgrade --a host --b cudnn91 --gpus 0,1 --json-out verdict.json",
                          "convbench upgrade --a host --b cudnn91 --json | jq .legs"])
    p.add_argument("--a", required=True, help="the base stack: 'host', a declared overlay's name, or a folder")
    p.add_argument("--b", required=True, help="the stack judged against it")
    p.add_argument("--cases", default=DEFAULT_SET, help="case ids and/or sets (default: %(default)s)")
    p.add_argument("--gpus", default="0", help="GPU indices, comma-separated: one ABBA leg each, in parallel "
                                               "(default: %(default)s)")
    add_json(p)
    p.add_argument("--json-out", type=Path, metavar="FILE",
                   help="also write the judgement (counts and findings) to this file")
    add_gate_arguments(p)
    add_sweep_arguments(p)
    p.set_defaults(handler=upgrade)


def upgrade(args) -> int:
    from ..analysis import paired_judgement as judgement
    from ..collect.discovery import Refused
    from ..collect.runread import read_run
    from ..deploy.stacks import resolve_all
    from ..run import paired

    th = thresholds(args)

    if args.json_out:  # before the study: a path that cannot be written is found now, not after an hour
        check_file(args.json_out, "--json-out")
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
        try:
            recs = {role: read_run(path)[1] for role, path in runs.items()}
        except Refused as exc:
            raise UserError(f"the study's own run cannot be read back: {exc}") from None
        legs[gpu] = judgement.judge(recs["A"], recs["B"], th)
        legs[gpu]["runs"] = runs
    agreement = judgement.confirm(legs)
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the document only
    for gpu, j in legs.items():
        print(f"GPU {gpu}: {stacks['B'].name} against {stacks['A'].name}: {j['both_ok']} of {j['combinations']} "
              f"combinations ran on both; " + ", ".join(f"{k} {v}" for k, v in j["counts"].items()), file=out)
    if agreement["legs"] > 1:
        print(f"{agreement['confirmed']} of {agreement['findings']} findings confirmed on every GPU", file=out)
    doc = {"study": study["study"], "stacks": {r: s.name for r, s in stacks.items()}, "agreement": agreement,
           "legs": {g: {**{k: v for k, v in j.items() if k != "findings"},
                        "findings": [f.to_dict() for f in j["findings"]]} for g, j in legs.items()}}
    if args.json_out:
        write_file(args.json_out, dumps(doc), "--json-out")
    if args.json:
        print(dumps(doc))
    print(f"study {study['study']}: runs under {args.results}", file=sys.stderr)
    return 0

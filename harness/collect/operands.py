"""What `convbench compare` compares and decides: its two operands (each a run directory, tarball or results tree
read with no store (runread.RunsRead), or a run id, prefix, image:NAME or machine:NAME in the store) resolved to
runs, paired per machine (its GPU on its node), and judged by analysis.compare with the gate's settings (``judge``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..analysis.thresholds import Thresholds
from ..core.errors import EXIT_NO_DATA, UserError
from ..core.records import Record
from .runread import RunsRead
from .store import Store, StoreError

Run = dict[str, Any]
Source = Store | RunsRead  # where an operand's runs are read from: the store, or the paths it named


def open_store(path: str, verify: bool = True) -> Store:
    """An existing store for reading; a missing or damaged one is the user's one-line error."""
    try:
        return Store(path, create=False, verify=verify)
    except StoreError as exc:
        raise UserError(str(exc)) from None


def resolve(selector: str, store_path: str, refused: Callable[[str], None] | None = None) -> tuple[Source, list[Run]]:
    """(where the runs are read from, runs) for an operand; ``refused`` hears each source a path held that is no
    run."""
    if os.path.exists(selector):
        read = RunsRead([selector])
        for line in read.refused:
            if refused:
                refused(line)
        runs = read.runs()
        if not runs:
            raise UserError(f"{selector}: no readable runs", EXIT_NO_DATA)
        return read, runs
    store = open_store(store_path)
    if selector.startswith("image:"):
        runs = store.runs("image = ?", (selector[6:],))
    elif selector.startswith("machine:"):
        runs = store.runs("machine = ?", (selector[8:],))
    else:
        runs = store.runs("run_id = ?", (selector,)) or store.runs("run_id LIKE ? ESCAPE '\\'", (
            selector.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",))
        if len({r["run_id"] for r in runs}) > 1 and len({r["machine"] for r in runs}) == 1:
            raise UserError(f"run id prefix {selector!r} matches {len(runs)} runs; give more of it")
    if not runs:
        raise UserError(f"{selector!r} is neither a path nor a run id, image:NAME or machine:NAME in {store_path}")
    return store, runs


def pairs(sb: Source, base_runs: list[Run], sh: Source, head_runs: list[Run]) -> tuple[list[tuple[Run, Run]], list[str]]:
    """The runs compared: the report's pairing (analysis/pairing.latest_pairs: the latest run of each GPU on its
    node on both sides, journals and asv results each on their own; one machine a side and none in common: those
    two). And a line for each side's latest run that no pair holds: a pass on the GPUs in common says nothing of a
    GPU the other side has no run of."""
    from ..analysis.pairing import latest_pairs

    matched, left_base, left_head = latest_pairs(base_runs, head_runs, lambda r: sb.run_json(r["id"])["fingerprint"],
                                                 lambda r: sh.run_json(r["id"])["fingerprint"])
    if not matched:
        b, h = sorted({r["machine"] for r in base_runs}), sorted({r["machine"] for r in head_runs})
        raise UserError(f"no machine in common between BASE ({', '.join(b)}) and HEAD ({', '.join(h)})", EXIT_NO_DATA)
    left_out = [f"not compared: {side}'s {_describe(r)}: {other} has no "
                + ("asv results of its machine" if r.get("source") == "asv" else "run of its GPU")
                for side, other, runs in (("BASE", "HEAD", left_base), ("HEAD", "BASE", left_head)) for r in runs]
    return matched, left_out


def history(source: Source, base: Run, base_fp: dict[str, Any]) -> list[list[Record]]:
    """Records of the runs before ``base`` on its machine and stack (pairing.history_runs), as the report uses."""
    from ..analysis.pairing import history_runs

    before = source.runs("started < ?", (base["started"],)) if isinstance(source, Store) else \
        [r for r in source.runs() if r["started"] < base["started"]]
    earlier = history_runs(base, base_fp, before, lambda r: source.run_json(r["id"])["fingerprint"])
    return [source.records(r["id"], with_samples=False) for r in earlier]


@dataclass
class Operands:
    base_store: Source
    head_store: Source
    pairs: list[tuple[Run, Run]]  # (base run, head run) per machine
    left_out: list[str] = field(default_factory=list)  # a side's runs of a GPU the other side did not run on


def operands(base: str, head: str, store_path: str, refused: Callable[[str], None] | None = None) -> Operands:
    """BASE and HEAD resolved and paired; a run against itself (which finds nothing and would pass) refused."""
    sb, base_runs = resolve(base, store_path, refused)
    sh, head_runs = resolve(head, store_path, refused)
    matched, left_out = pairs(sb, base_runs, sh, head_runs)
    same = [rb["run_id"] for rb, rh in matched if same_run(base, head, sb, sh, rb, rh)]
    if same:
        raise UserError(f"BASE and HEAD are the same run ({same[0]}" + (f" and {len(same) - 1} more" if len(same) > 1
                                                                        else "") + "): nothing would be compared; "
                        "give two different runs (e.g. an earlier run id as BASE)")
    return Operands(sb, sh, matched, left_out)


def same_run(base: str, head: str, sb: Source, sh: Source, rb: Run, rh: Run) -> bool:
    """BASE and HEAD name one run: one row of one store (`machine:X machine:X`), or one path given twice."""
    if isinstance(sb, RunsRead) or isinstance(sh, RunsRead):
        return isinstance(sb, RunsRead) and isinstance(sh, RunsRead) and \
            os.path.realpath(base) == os.path.realpath(head)
    return os.path.realpath(sb.path) == os.path.realpath(sh.path) and rb["id"] == rh["id"]


@dataclass
class Judgement:
    """What compare decided: every finding (each naming its machine and runs), the gate's failures among them, the
    workload impact per head machine, and notes on what was paired with what and how the machines differ."""

    findings: list[Any]
    failing: list[Any]
    impacts: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def _describe(run: Run) -> str:
    hw = run.get("gpu_model") or run["hardware"]
    return f"{run['machine']} [{hw}] image {run['image']} run {run['run_id']}"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def judge(ops: Operands, th: Thresholds) -> Judgement:
    """Each pair's records compared (analysis.compare.compare_runs, with the base machine's history), a night's
    runs pooled per head machine for the workload impact, and the gate applied. Two sides with no combination in
    common are not a pass: EXIT_NO_DATA."""
    from ..analysis.compare import compare_runs, fingerprint_diff, fingerprint_field, gate, machine_identity
    from ..analysis.host import dispatch_note
    from ..analysis.method import method_note
    from ..analysis.workload import workload

    sb, sh = ops.base_store, ops.head_store
    findings: list[Any] = []
    notes: list[str] = list(ops.left_out)
    pooled: dict[str, dict[str, Any]] = {}  # per head machine, its runs' records: a night's fwd and bwd runs
    in_common = 0
    for rb, rh in ops.pairs:
        jb, jh = sb.run_json(rb["id"]), sh.run_json(rh["id"])
        fb, fh = jb["fingerprint"], jh["fingerprint"]
        across = machine_identity(fb) != machine_identity(fh)
        notes.append(f"{_describe(rb)}  ->  {_describe(rh)}")
        if across:
            notes.append(f"different machines ({machine_identity(fb)} vs {machine_identity(fh)}): findings are "
                         + ("gated (--across-hardware)" if th.across_hardware else
                            "reported, not gated; time ratios include the hardware difference"))
        diff = fingerprint_diff(fb, fh)
        notes.append("fingerprints differ in: " + ("; ".join(f"{k} {_short(a)} -> {_short(b)}" for k, a, b in diff)
                                                  if diff else "nothing but clocks, power and temperature"))
        base_recs, head_recs = sb.records(rb["id"]), sh.records(rh["id"])
        notes.extend(n for n in (dispatch_note(base_recs, head_recs), method_note(jb, jh, base_recs, head_recs)) if n)
        in_common += len({r.identity_key() for r in base_recs} & {r.identity_key() for r in head_recs})
        side = pooled.setdefault(rh["machine"], {"gpu": str(fingerprint_field(fh, "gpu.name") or rh["machine"]),
                                                 "base": {}, "head": {}})
        side["base"].update((r.identity_key(), r) for r in base_recs)
        side["head"].update((r.identity_key(), r) for r in head_recs)
        for f in compare_runs(base_recs, head_recs, th, history(sb, rb, fb)):
            f.machine, f.base_run, f.head_run = rh["machine"], rb["run_id"], rh["run_id"]
            f.extra["across_hardware"] = across
            findings.append(f)
    if not in_common:  # nothing to decide on is not a pass: the nightly gate must notice
        left = f"; {len(ops.left_out)} run(s) not compared, their machine not on the other side" if ops.left_out else ""
        raise UserError(f"BASE and HEAD have no combination in common ({len(findings)} finding(s), all of "
                        f"availability{left}): nothing to compare", EXIT_NO_DATA)
    impacts = [{**row, "machine": m} for m, p in pooled.items() for row in workload(p["base"], p["head"], p["gpu"])]
    return Judgement(findings, gate(findings, th), impacts, notes)

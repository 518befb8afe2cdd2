"""A run judged against every committed run of another GPU of the same model, as one machine (`convbench compare
--across-hardware`, no history): how many of its findings a fleet's gate would fail where a GPU was swapped, or
where a run of one GPU is the baseline of another. A trust figure of issue 40 ("against a committed run of another
H200 as one machine, 0 failing") read over every such run rather than one.

Runs are read from archives (.tar.gz, .tar.xz) or run folders, as `convbench collect` reads them. A committed run
is a base when its GPU's name is the head's, its GPU's uuid is not, its cuDNN and torch are the head's, and it
measured combinations the head did; only the combinations both measured are compared.
Runs timed before the suite timed each combination on several placements (no `placement_medians_ms` in their
records) are listed apart: a one-placement median is one draw of what five placements pool, not the same
quantity (docs/performance.md).

    python3 scripts/cross_gpu.py HEAD [BASE ...]   # default BASEs: tests/fixtures/runs/*.tar.*, docs/evidence/*/*.tar.*
    python3 scripts/cross_gpu.py --failing HEAD    # each failing finding on a line of its own, under its base run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.compare import compare_runs, fingerprint_field, gate  # noqa: E402
from harness.analysis.method import placements  # noqa: E402
from harness.analysis.pairing import stack_fields  # noqa: E402
from harness.analysis.thresholds import Thresholds  # noqa: E402
from harness.collect.ingest import read_runs_into  # noqa: E402
from harness.collect.store import Store  # noqa: E402
from harness.core.records import settings_key  # noqa: E402

DEFAULT_BASES = ("tests/fixtures/runs/*.tar.*", "docs/evidence/*/*.tar.*")


def runs_of(path: Path) -> list[tuple[dict, list]]:
    """(the store's run row with its run.json, records) of every run ``path`` holds; nothing for a path collect
    refuses."""
    store = Store(":memory:")
    try:
        read_runs_into(store, [path])
        return [({**run, **store.run_json(run["id"])}, store.records(run["id"])) for run in store.runs()]
    finally:
        store.close()


def gpu(run: dict) -> tuple[str, str]:
    fp = run.get("fingerprint") or {}
    return str(fingerprint_field(fp, "gpu.name") or ""), str(fingerprint_field(fp, "gpu.uuid") or "")


def stack(run: dict) -> tuple:
    """The software a run's numbers come from: cuDNN's version and torch's, as the report's stacks read them
    (pairing.stack_fields); the driver, CUDA and onnxruntime may differ between lent hosts."""
    fields = dict(stack_fields(run.get("fingerprint") or {}))
    return fields.get("cuDNN"), fields.get("torch")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("head", type=Path)
    ap.add_argument("bases", nargs="*", type=Path)
    ap.add_argument("--failing", action="store_true", help="list each failing finding under its base run")
    args = ap.parse_args(argv)
    heads = runs_of(args.head)
    if len(heads) != 1:
        print(f"cross_gpu: {args.head} holds {len(heads)} runs, not one", file=sys.stderr)
        return 2
    head_run, head = heads[0]
    name, uuid = gpu(head_run)
    keys = {r.identity_key() for r in head}
    bases = args.bases or sorted(p for g in DEFAULT_BASES for p in ROOT.glob(g))
    th = Thresholds(across_hardware=True)
    print(f"head {head_run['run_id']} on {name} {uuid[:12]}, {len(head):,} records")
    print(f"{'base run':58s} {'GPU':12s} {'suite':12s} {'placements':10s} {'matched':>8s} {'failing':>7s} "
          f"{'findings':>8s}")
    totals: dict[bool, list[int]] = {True: [], False: []}
    for path in bases:
        for run, records in runs_of(path):
            b_name, b_uuid = gpu(run)
            common = {r.identity_key() for r in records} & keys
            if b_name != name or b_uuid == uuid or stack(run) != stack(head_run) or not common:
                continue
            findings = compare_runs([r for r in records if r.identity_key() in common],
                                    [r for r in head if r.identity_key() in common], th)
            failed = gate(findings, th)
            failing = len(failed)
            has = placements(records) > 1
            totals[has].append(failing)
            print(f"{path.name[:24] + ' ' + run['run_id'][:33]:58s} {b_uuid[:12]:12s} "
                  f"{str(run.get('suite_revision'))[:12]:12s} {'yes' if has else 'no':10s} {len(common):8,d} "
                  f"{failing:7d} {len(findings):8d}")
            for f in failed if args.failing else ():
                call = (f.kind, f.case, f.backend, f.direction, f.algo, f.math, f.dtype, f.layout,
                        settings_key(f.settings or {}))
                print(f"    {' '.join(filter(None, call))}: {f.base} -> {f.head}; {f.evidence[:160]}")
    for has, fails in totals.items():
        if fails:
            print(f"{'with' if has else 'without'} placements: {len(fails)} base runs, {sum(f == 0 for f in fails)} "
                  f"with 0 failing, {sum(fails)} failing findings in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())

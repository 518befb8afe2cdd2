"""Placement: which image rows run on which GPU of this host, as ``Worker``s for ``convbench run``.

The plan is made before anything starts, from NVML's GPUs and the engine's image labels, so that every row left
out is said with why (no GPU, an architecture the image was not built for, a CPU row not named) and a plan
that runs nothing is an error rather than a silent success. hostrun.py then runs the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..measurement import fingerprint
from .imagematrix import IMAGE_REPO
from .images import LABEL_PREFIX


@dataclass
class Worker:
    """One unit of parallel work: a GPU (or the CPU) and, with Docker, the image rows to run on it in turn."""

    label: str  # "gpu0", "slot1", "cpu"
    machine: str
    gpu: dict[str, Any] | None
    images: list[dict[str, Any]] = field(default_factory=list)  # {"row", "tag", "id", "revision"}
    slot: int | None = None  # the node's GPU slot this worker measures (its NVML index, or the scheduler's)


def machine_for(gpu: dict[str, Any] | None, host: str, by: str = "index", slot: int | None = None) -> str:
    """The machine name a worker's runs are filed under: this node plus its GPU (or GPU slot), as the
    fingerprint names it."""
    if gpu is not None and by == "uuid":
        gpu = dict(gpu, index=(gpu.get("uuid") or "GPU-unknown").replace("GPU-", "")[:8])
    return fingerprint.machine_name({"node": {"name": host}, "gpu": gpu, "slot": slot})


def parse_slots(wanted: str | None) -> list[int] | None:
    """``--gpus`` as a list of slot indices (None: all). Slurm and the device plugins hand a job its GPUs as
    these indices (CUDA_VISIBLE_DEVICES)."""
    if not wanted or wanted == "all":
        return None
    try:
        out = [int(x) for x in wanted.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--gpus {wanted!r}: give NVML indices like 0,1 or 'all'") from None
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise UserError(f"--gpus {wanted!r}: give each GPU index (>= 0) once")
    return out


def cpu_workers(host: str, slots: list[int] | None, images: list[dict[str, Any]] | None = None) -> list[Worker]:
    """CPU workers: one per GPU slot the scheduler gave (a node whose GPUs NVML cannot see still reports each
    slot as a machine of its own), else one for the host."""
    if not slots:
        return [Worker("cpu", machine_for(None, host), None, list(images or []))]
    return [Worker(f"slot{n}", machine_for(None, host, slot=n), None, list(images or []), slot=n) for n in slots]


def sm_tag(sm: str | None) -> str:
    return "sm_" + (sm or "?").replace(".", "")



def local_rows(client) -> dict[str, dict[str, Any]]:
    """Image rows built on this engine, from their labels: row -> {tag, id, sm, gpu, revision}."""
    rows = {}
    for image in client.images.list(filters={"label": f"{LABEL_PREFIX}row"}):
        lab = image.labels or {}
        row = lab.get(f"{LABEL_PREFIX}row")
        tag = f"{IMAGE_REPO}:{row}"
        if not row or tag not in (image.tags or []):
            continue  # an older build of the row; the row's tag names the current one
        sm = lab.get(f"{LABEL_PREFIX}sm", "")
        rows[row] = {"row": row, "tag": tag, "id": image.id, "gpu": sm not in ("", "cpu"),
                     "sm": [] if sm in ("", "cpu") else sm.split(","),
                     "revision": lab.get(f"{LABEL_PREFIX}suite-revision", "unknown")}
    return rows


def select_gpus(found: list[dict[str, Any]], wanted: str | None) -> list[dict[str, Any]]:
    indices = parse_slots(wanted)
    if indices is None:
        return found
    by_index = {g["index"]: g for g in found}
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise UserError(f"--gpus: no GPU {', '.join(map(str, missing))} on this host "
                        f"(NVML sees {len(found)}: {', '.join(str(g['index']) for g in found) or 'none'})",
                        EXIT_ENVIRONMENT)
    return [by_index[i] for i in indices]


def plan_docker(gpus: list[dict[str, Any]], available: dict[str, dict[str, Any]], wanted: list[str] | None,
                host: str, by: str, log=print, slots: list[int] | None = None) -> list[Worker]:
    """Which image rows run on which GPU; every row left out is said, with why."""
    if wanted:
        missing = [r for r in wanted if r not in available]
        if missing:
            raise UserError(f"row {', '.join(missing)} has no image on this engine; build it with "
                            f"`convbench images build {' '.join(missing)}`", EXIT_ENVIRONMENT)
        rows = [available[r] for r in wanted]
    else:
        rows = sorted(available.values(), key=lambda r: r["row"])
        if not rows:
            raise UserError("no convbench image is built on this engine; run `convbench images build`",
                            EXIT_ENVIRONMENT)
    gpu_rows = [r for r in rows if r["gpu"]]
    cpu_rows = [r for r in rows if not r["gpu"]]
    workers = []
    if not gpus:
        if not cpu_rows:
            raise UserError(f"no GPU on this host, and row {', '.join(r['row'] for r in gpu_rows)} needs one; "
                            "run a CPU row (e.g. `--rows cpu`)", EXIT_ENVIRONMENT)
        for r in gpu_rows:
            log(f"skip row {r['row']}: needs a GPU")
        return cpu_workers(host, slots, cpu_rows)
    for g in gpus:
        label = f"gpu{g['index']}"
        runnable = []
        for r in gpu_rows:
            if g.get("sm") in r["sm"]:
                runnable.append(r)
            else:
                log(f"skip row {r['row']} on {label} ({g.get('name')}, {sm_tag(g.get('sm'))}): the image is built "
                    f"for {', '.join(sm_tag(s) for s in r['sm'])} only")
        if runnable:
            workers.append(Worker(label, machine_for(g, host, by), g, runnable, slot=g["index"]))
        elif gpu_rows:
            log(f"{label} ({g.get('name')}, {sm_tag(g.get('sm'))}): no built row can run on it")
    if cpu_rows and wanted:
        workers.append(Worker("cpu", machine_for(None, host), None, cpu_rows))
    elif cpu_rows:
        log(f"skip row {', '.join(r['row'] for r in cpu_rows)}: CPU rows run on GPU hosts only when named (--rows)")
    if not workers:
        raise UserError("nothing to run: no built row can run on this host's GPUs", EXIT_ENVIRONMENT)
    return workers


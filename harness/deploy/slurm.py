"""Slurm fleet nights rendered from the image matrix: one sbatch per GPU node pool, and its scrontab schedule.

One job takes every node of a pool (``#SBATCH --nodes`` = the pool's ``nodes``) with all their GPUs; ``srun``
runs the template's ``convbench_node`` once per node, which measures each GPU Slurm gave the node
(``convbench run --gpus "$CUDA_VISIBLE_DEVICES" --host-name "$SLURMD_NODENAME"``, in containers or, with
``docker=False``, on the node's own Python) and ships each GPU slot's machine folder to the outbox as a tarball of
its own. Every value that reaches the script is checked here (one printable line; words that go into ``#SBATCH``
or ``#SCRON`` directives plainer still) and quoted for bash by the ``sh`` filter (shlex.quote) in the template.
"""

from __future__ import annotations

import re
import shlex

from .imagematrix import Matrix, MatrixError, Row
from .manifests import FLEET_DIR, pool_rows

DIRECTIVE = re.compile(r"^[A-Za-z0-9._/+:-]+$")  # what a word in an #SBATCH / #SCRON line may hold
CRON = re.compile(r"^[0-9*/,-]+( [0-9*/,-]+){4}$")
TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")


class RenderError(ValueError):
    """A value that cannot go into a fleet script; the message names the flag and the value."""


def checked(what: str, value: str) -> str:
    """A value for the script body: one line of printable text (it is quoted, never pasted)."""
    if not isinstance(value, str) or not value:
        raise RenderError(f"{what} must not be empty")
    bad = [ch for ch in value if ord(ch) < 32 or ord(ch) == 127]
    if bad:
        raise RenderError(f"{what} {value!r} holds a control character ({bad[0]!r}); give one line of text")
    return value


def directive(what: str, value: str) -> str:
    """A word for an #SBATCH / #SCRON line, which sbatch reads without a shell: letters, digits, . _ / + : -"""
    checked(what, value)
    if not DIRECTIVE.match(value):
        raise RenderError(f"{what} {value!r} goes into an #SBATCH line: use only letters, digits and . _ / + : -")
    return value


def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(FLEET_DIR)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    return env


def render_slurm(matrix: Matrix, rows: list[Row], results: str, outbox: str, cases: str = "default",
                 images_dir: str = "/shared/convbench/images", docker: bool = True, convbench: str = "convbench",
                 stacks: str = "", job: str = "bench", backends: str = "torch,cudnn", time_limit: str = "08:00:00",
                 fleet_dir: str = "/shared/convbench/fleet", at: str = "0 1 * * *",
                 named: bool = False) -> dict[str, str]:
    """{relative path: text}: slurm/convbench-<pool>.sbatch and slurm/convbench-<pool>.scrontab per pool.

    With Docker a pool runs the given rows that fit its architecture, and CPU rows when ``named`` (pools no row
    fits get no script); without,
    every pool runs the node's own Python (rows pick images, so none may be named), with ``stacks`` in turn."""
    for what, value in (("--results", results), ("--outbox", outbox), ("--cases", cases),
                        ("--images-dir", images_dir), ("--convbench", convbench), ("--backends", backends)):
        checked(what, value)
    if stacks:
        checked("--stacks", stacks)
    if job not in ("bench", "sweep"):
        raise RenderError(f"--job {job!r}: bench or sweep")
    if not TIME.match(time_limit):
        raise RenderError(f"--time {time_limit!r}: give Slurm's [D-]HH:MM:SS")
    directive("--fleet-dir", fleet_dir)
    if not CRON.match(checked("--schedule", at)):
        raise RenderError(f"--schedule {at!r}: give the five fields of a crontab time, e.g. '0 1 * * *'")
    if docker:
        pools = pool_rows(matrix, rows, cpu_named=named)
    else:
        if not matrix.pools:
            raise MatrixError(f"{matrix.path}: no [[pool]] tables; fleet manifests need the GPU node pools")
        pools = {name: [] for name in matrix.pools}
    env = _env()
    night, schedule = env.get_template("slurm.sbatch.j2"), env.get_template("slurm.scrontab.j2")
    files = {}
    for name, fits in pools.items():
        pool = matrix.pools[name]
        directive("pool name", pool.name)
        directive(f"pool {pool.name}: slurm_partition", pool.slurm_partition)
        for row in fits:
            checked("row name", row.name)
        sbatch = f"slurm/convbench-{name}.sbatch"
        files[sbatch] = night.render(
            pool=pool, nodes=pool.nodes, rows=fits, sm_tag="sm_" + pool.sm.replace(".", ""), results=results,
            outbox=outbox, cases=cases, images_dir=images_dir, docker=docker, convbench=convbench, stacks=stacks,
            job=job, backends=backends, time_limit=time_limit)
        files[f"slurm/convbench-{name}.scrontab"] = schedule.render(
            pool=pool, at=at, fleet_dir=fleet_dir.rstrip("/") or "/", sbatch_path=f"{fleet_dir.rstrip('/')}/{sbatch}",
            scrontab_path=f"{fleet_dir.rstrip('/')}/slurm/convbench-{name}.scrontab")
    return files

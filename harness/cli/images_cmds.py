"""Subcommands ``images list|lock|render|base|build`` (the image matrix) and ``run`` (every GPU of this host)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..core.cases import DEFAULT_SET
from ..core.errors import EXIT_ENVIRONMENT, UserError, printable
from ..core.outputs import write_under
from ..core.paths import RESULTS_DIR
from .helptext import command
from .jsonout import add_json, emit


def register(sub) -> None:
    p = command(sub, "images", help="the image matrix: list, lock, render and build images hermetically",
                description="Work with the image matrix (docker/matrix.toml): one image per stack (CUDA, cuDNN, "
                            "torch, onnxruntime), each built offline from wheels pinned by sha256.",
                examples=["convbench images list", "convbench images lock cu126-torch26",
                          "convbench images render --slurm --out fleet/"])
    p.add_argument("--matrix", type=Path, default=None, help="matrix file (default: docker/matrix.toml)")
    isub = p.add_subparsers(dest="images_command", metavar="SUBCOMMAND")
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])

    q = command(isub, "list", help="rows, their versions and architectures, lock and local image state",
                description="List the matrix's rows: versions, GPU architectures, whether each is locked and "
                            "whether its image is built in the local Docker engine.",
                examples=["convbench images list", "convbench images list --json"])
    add_json(q)
    q.set_defaults(handler=images_list)

    q = command(isub, "lock", help="resolve rows' wheel closures and pin every wheel by sha256 (no download)",
                description="Resolve each row's (or overlay's) wheel closure from the package index and write its "
                            "lock file: every wheel pinned by URL and sha256. Nothing is downloaded.",
                examples=["convbench images lock", "convbench images lock cu126-torch26"])
    q.add_argument("rows", nargs="*", help="rows or overlays (default: all)")
    q.set_defaults(handler=images_lock)

    q = command(isub, "render", help="print the Dockerfile of rows, or fleet manifests (--slurm, --k8s)",
                description="Print (or write under --out) each row's Dockerfile, or the fleet's manifests: one "
                            "sbatch per Slurm node pool with its scrontab (--slurm), or Kubernetes CronJobs (--k8s).",
                examples=["convbench images render cu126-torch26",
                          "convbench images render --slurm --out fleet/",
                          "convbench images render --k8s --registry registry.example/convbench --out k8s/"])
    q.add_argument("rows", nargs="*", help="rows (default: all)")
    q.add_argument("--out", type=Path, help="write files under this folder instead of printing")
    kind = q.add_mutually_exclusive_group()
    kind.add_argument("--slurm", action="store_true",
                      help="one sbatch per GPU node pool over all its nodes and GPUs, and its scrontab schedule")
    kind.add_argument("--k8s", action="store_true",
                      help="Kubernetes CronJobs, one per node pool: a pod per node, every row in turn")
    q.add_argument("--results", default="/var/lib/convbench/results",
                   help="results directory on the fleet's nodes (default: %(default)s)")
    q.add_argument("--outbox", default="/shared/convbench/inbox",
                   help="where finished runs are sent as tarballs for the collecting host (default: %(default)s)")
    q.add_argument("--registry", default="", help="registry prefix the fleet pulls images from (Kubernetes)")
    q.add_argument("--cases", default=DEFAULT_SET, help="case set the nightly sweep runs (default: %(default)s)")
    k8s = q.add_argument_group("Kubernetes (--k8s)")
    k8s.add_argument("--schedule", default="0 1 * * *",
                     help="the nightly CronJobs' schedule, also the Slurm scrontab's (default: %(default)s)")
    k8s.add_argument("--time-zone", default="", help="tz database name for the schedules (default: the cluster's)")
    k8s.add_argument("--cpu", default="4", help="CPU request and limit of a benchmark pod (default: %(default)s)")
    k8s.add_argument("--memory", default="16Gi",
                     help="memory request and limit of a benchmark pod (default: %(default)s)")
    k8s.add_argument("--deadline", type=int, default=8 * 3600,
                     help="seconds a night's Job may run, every row included (default: %(default)s)")
    k8s.add_argument("--collect-schedule", default="0 7 * * *",
                     help="the collector CronJob's schedule (default: %(default)s)")
    sl = q.add_argument_group("Slurm (--slurm)")
    sl.add_argument("--no-docker", action="store_true",
                    help="nodes without a container runtime: the nodes' own Python (`convbench run --no-docker`)")
    sl.add_argument("--convbench", default="convbench",
                    help="the convbench the nodes run, e.g. a site venv's bin/convbench (default: on PATH)")
    sl.add_argument("--stacks", default="",
                    help="with --no-docker: stacks each GPU runs in turn (convbench run --stacks)")
    sl.add_argument("--job", choices=("bench", "sweep"), default="bench",
                    help="bench (the asv suite) or a plain sweep of --backends (default: %(default)s)")
    sl.add_argument("--backends", default="torch,cudnn", help="with --job sweep: backends (default: %(default)s)")
    sl.add_argument("--images-dir", default="/shared/convbench/images",
                    help="where `docker save` tarballs of the rows are (default: %(default)s)")
    sl.add_argument("--time", default="08:00:00", help="the night's time limit (default: %(default)s)")
    sl.add_argument("--fleet-dir", default="/shared/convbench/fleet",
                    help="where --out's files are on the cluster, for the scrontab (default: %(default)s)")
    q.set_defaults(handler=images_render)

    q = command(isub, "base", help="make the matrix's debootstrap base images (as root); one present is kept",
                description="Make each base image the matrix names (or those given) with `debootstrap "
                            "--variant=minbase` and import it into the Docker engine, as no registry is reachable "
                            "from the build hosts. An image of that tag already in the engine is kept. Needs root, "
                            "debootstrap and a Docker engine (exit 3 without one of them).",
                examples=["sudo convbench images base", "sudo convbench images base bookworm"])
    q.add_argument("bases", nargs="*", help="base names from the matrix (default: all)")
    q.set_defaults(handler=images_base)

    q = command(isub, "build", help="download the hashed wheelhouse, then build images with no network",
                description="Download each row's locked wheels (checked by sha256) into the wheel cache, then "
                            "build its image with no network access. Needs a Docker engine (exit 3 without one).",
                examples=["convbench images build", "convbench images build cu126-torch26 --wheel-cache /srv/wheels"])
    q.add_argument("rows", nargs="*", help="rows (default: all)")
    q.add_argument("--wheel-cache", type=Path, default=None, help="wheelhouse cache (default: ~/.cache/convbench)")
    q.set_defaults(handler=images_build)

    p = command(sub, "run", help="run the asv suite on every GPU of this host in parallel (containers or --no-docker)",
                description="Run the nightly job on every GPU slot of this host in parallel: one container per "
                            "GPU and image row, or (--no-docker) one local process per GPU over each stack in "
                            "turn. Each slot's run is named by node, slot and night.",
                examples=["convbench run --rows cu126-torch26", "convbench run --no-docker --stacks host,cudnn91",
                          "convbench run --no-docker --gpus 0,1 -- -b CudnnForward"])
    p.add_argument("--rows", type=lambda s: [x for x in s.split(",") if x], default=None,
                   help="image rows to run, comma-separated (default: every built row that fits the GPUs)")
    p.add_argument("--no-docker", action="store_true", help="run the workers as local processes, one per GPU")
    p.add_argument("--stacks", type=lambda s: [x for x in s.split(",") if x], default=None,
                   help="with --no-docker: stacks each GPU runs in turn: host, installed overlays (convbench stacks), "
                        "NAME=FOLDER (default: host)")
    p.add_argument("--gpus", default=None,
                   help="GPU slots to use: NVML indices, comma-separated, as a scheduler hands them out "
                        "(CUDA_VISIBLE_DEVICES); where NVML sees no GPU each slot runs a CPU worker (default: all)")
    p.add_argument("--job", choices=("bench", "sweep"), default="bench",
                   help="bench: the asv suite, every class the stack supports; sweep: a plain sweep of --backends "
                        "(default: %(default)s)")
    p.add_argument("--cases", default=DEFAULT_SET, help="cases or sets to measure (default: %(default)s)")
    p.add_argument("--backends", default="torch,cudnn", help="backends of --job sweep (default: %(default)s)")
    p.add_argument("--results", type=Path, default=Path(os.environ.get("CONVBENCH_RESULTS", RESULTS_DIR)),
                   help="results root on this host (default: %(default)s)")
    p.add_argument("--host-name", default=None,
                   help="the node's name as the scheduler or host names it (Slurm's node, Kubernetes' spec.nodeName); "
                        "part of every machine's identity (default: CONVBENCH_NODE, SLURMD_NODENAME, else this "
                        "host's name; refused inside a container with none of them)")
    p.add_argument("--name-gpus-by", choices=("index", "uuid"), default="index",
                   help="GPU part of machine names: NVML index, or UUID where indices are not stable (pods)")
    p.add_argument("sweep_args", nargs=argparse.REMAINDER, help="after --: more flags of `convbench bench` (e.g. -b REGEX) or `sweep`")
    p.set_defaults(handler=run)


def matrix_of(args):
    from ..deploy import imagematrix

    try:
        return imagematrix.load_matrix(args.matrix or imagematrix.DEFAULT_MATRIX)
    except imagematrix.MatrixError as exc:
        raise UserError(str(exc)) from None


def _rows(matrix, names):
    from ..deploy import imagematrix

    try:
        return matrix.select(names)
    except imagematrix.MatrixError as exc:
        raise UserError(str(exc)) from None


def images_list(args) -> int:
    from ..deploy import images

    try:
        client, engine_note = images.engine(), None
    except images.EngineError as exc:
        client, engine_note = None, str(exc)
    rows = images.row_states(matrix_of(args), client)
    if args.json:
        emit({"rows": [{k: v for k, v in r.items() if k != "lock_text"} for r in rows],
              "engine": engine_note is None, "engine_why_not": engine_note})
        return 0
    print(f"{'row':26s} {'CUDA':5s} {'cuDNN':10s} {'torch':12s} {'onnxruntime':24s} {'lock':14s} image")
    for r in rows:
        info = r["image"]
        image = "engine not running" if client is None else "not built" if info is None else \
            f"{info['id'][7:19]} rev {info['suite_revision'] or '?'}, {info['size_bytes'] / 2**30:.1f} GiB"
        print(f"{r['row']:26s} {r['cuda'] or '-':5s} {r['cudnn'] or '-':10s} {r['torch']:12s} "
              f"{r['onnxruntime']:24s} {r['lock_text']:14s} {image}")
        print(f"{'':26s} sm: {', '.join(r['sm']) or 'CPU only'}; {r['note']}")
    if engine_note:
        print(f"(image state unknown: {engine_note})")
    return 0


def images_lock(args) -> int:
    from ..deploy import imagematrix, wheels

    matrix = matrix_of(args)
    names = args.rows or list(matrix.rows) + list(matrix.overlays)
    targets = [matrix.overlays[n] for n in names if n in matrix.overlays]
    targets = _rows(matrix, [n for n in names if n not in matrix.overlays]) + targets if len(targets) < len(names) \
        else targets
    for row in targets:
        try:
            wheels.lock_row(matrix, row)
        except imagematrix.MatrixError as exc:
            raise UserError(str(exc), EXIT_ENVIRONMENT) from None
    return 0


def images_render(args) -> int:
    from ..deploy import images, wheels

    matrix = matrix_of(args)
    if args.slurm and args.no_docker and args.rows:
        raise UserError("rows pick images; with --no-docker the nodes run their own Python (pick --stacks)")
    rows = _rows(matrix, args.rows)
    if args.k8s:
        from ..deploy import k8s

        try:
            files = k8s.render_k8s(matrix, rows, registry=args.registry, cases=args.cases, schedule=args.schedule,
                                   time_zone=args.time_zone, cpu=args.cpu, memory=args.memory,
                                   deadline=args.deadline, collect_schedule=args.collect_schedule)
        except k8s.K8sError as exc:
            raise UserError(str(exc)) from None
    elif args.slurm:
        from ..deploy import imagematrix, slurm

        try:
            files = slurm.render_slurm(
                matrix, rows, results=args.results, outbox=args.outbox, cases=args.cases,
                images_dir=args.images_dir, docker=not args.no_docker, convbench=args.convbench, stacks=args.stacks,
                job=args.job, backends=args.backends, time_limit=args.time, fleet_dir=args.fleet_dir,
                at=args.schedule, named=bool(args.rows))
        except (slurm.RenderError, imagematrix.MatrixError) as exc:
            raise UserError(str(exc)) from None
    else:
        revision = images.build_revision()
        files = {}
        for row in rows:
            lock = row.lock_path()
            sha = wheels.read_lock(lock).sha256 if lock.exists() else "unlocked"
            files[f"{row.name}/Dockerfile"] = images.render(matrix, row, revision, sha)
    for name, text in files.items():
        if args.out:
            path = write_under(args.out, name, text, "--out")
            print(f"wrote {printable(str(path))}")
        else:
            print(f"# ---- {name}\n{text}")
    return 0


def images_build(args) -> int:
    from ..deploy import imagematrix, images, wheels

    matrix = matrix_of(args)
    rows = _rows(matrix, args.rows)
    try:
        client = images.engine()
        for row in rows:
            images.build(client, matrix, row, args.wheel_cache or wheels.WHEEL_CACHE)
    except images.EngineError as exc:
        raise UserError(str(exc), EXIT_ENVIRONMENT) from None
    except imagematrix.MatrixError as exc:
        raise UserError(str(exc)) from None
    return 0


def images_base(args) -> int:
    from ..deploy import baseimage, imagematrix, images

    try:
        made = baseimage.ensure_bases(matrix_of(args), args.bases)
    except (baseimage.BaseImageError, images.EngineError) as exc:
        raise UserError(str(exc), EXIT_ENVIRONMENT) from None
    except imagematrix.MatrixError as exc:
        raise UserError(str(exc)) from None
    print(f"{len(made)} base image(s) present: " + ", ".join(tag for tag, _, _ in made))
    return 0


def run(args) -> int:
    from ..deploy import hostrun
    from .measure_cmds import check_results, select_cases

    select_cases(args.cases)  # refused here (2), as bench and sweep refuse it, not in every worker (1)
    check_results(args.results)
    return hostrun.run(hostrun.HostRunOptions(
        results=args.results, cases=args.cases, job=args.job, backends=args.backends, docker=not args.no_docker,
        rows=args.rows, stacks=args.stacks, gpus=args.gpus, host_name=args.host_name,
        name_gpus_by=args.name_gpus_by, extra=tuple(args.sweep_args or ())))

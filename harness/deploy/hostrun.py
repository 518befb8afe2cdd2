"""``convbench run``: measure on every GPU of this host at once, one worker per GPU.

With Docker (the default) each worker is a container of one image row that sees exactly one GPU, runs
unprivileged with a read-only root filesystem and no network, and writes only into its machine's results
directory; rows whose ``sm`` label excludes a GPU's architecture are skipped with the reason. With
``--no-docker`` the same workers are processes of this interpreter pinned to one GPU each through
CUDA_VISIBLE_DEVICES. A worker that fails costs only its own run: the others keep going, and what the
failed one journaled before it died stays on disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..measurement import fingerprint
from .imagematrix import CONTAINER_UID
from .images import LABEL_PREFIX
from .placement import Worker, cpu_workers, local_rows, machine_for, parse_slots, plan_docker, select_gpus

NO_NVIDIA_RUNTIME = "could not select device driver"
CONTAINER_RESULTS = "/results"


@dataclass
class Outcome:
    label: str
    what: str  # image row, or "native"
    code: int
    message: str
    runs: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def sweep_args(cases: str, backends: str, results: str, extra: list[str]) -> list[str]:
    return ["sweep", "--cases", cases, "--backends", backends, "--results", results, *extra]


def worker_args(job: str, cases: str, backends: str, results: str, extra: list[str]) -> list[str]:
    """What each worker runs: the asv suite (`bench`, every class the stack supports) or a plain `sweep`."""
    if job == "bench":
        return ["bench", "--cases", cases, "--results", results, *extra]
    return sweep_args(cases, backends, results, extra)


def new_runs(machine_dir: Path, before: set[str]) -> list[Path]:
    if not machine_dir.is_dir():
        return []
    return sorted(p for p in machine_dir.iterdir() if p.is_dir() and p.name not in before)


def _listing(machine_dir: Path) -> set[str]:
    return {p.name for p in machine_dir.iterdir()} if machine_dir.is_dir() else set()


def prepare_results(results: Path, machine: str) -> tuple[Path, str]:
    """The host directory a container may write (its machine's), and the user the container runs as:
    the invoking user when not root, else the images' unprivileged user, who is given that one directory."""
    machine_dir = results / machine
    machine_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return machine_dir, f"{os.getuid()}:{os.getgid()}"
    os.chown(machine_dir, CONTAINER_UID, CONTAINER_UID)
    return machine_dir, f"{CONTAINER_UID}:{CONTAINER_UID}"


def identity_env(worker: Worker, node: str) -> dict[str, str]:
    """What names a worker's machine inside its container or process: the node (never the container's own
    hostname), the host's machine id, the GPU slot and the machine's directory name."""
    env = {"CONVBENCH_MACHINE": worker.machine, "CONVBENCH_NODE": node}
    host_id = fingerprint.host_machine_id()
    if host_id:
        env["CONVBENCH_HOST_ID"] = host_id
    if worker.slot is not None:
        env["CONVBENCH_SLOT"] = str(worker.slot)
    return env


def container_config(image: dict[str, Any], worker: Worker, machine_dir: Path, user: str,
                     command: list[str], *, node: str) -> dict[str, Any]:
    """Arguments of containers.create for one worker: one GPU, no network, read-only root, no capabilities,
    the machine's results directory the only writable mount. ``node`` names the host as the scheduler does (the
    machine's identity: never the container's hostname, never guessed from the worker)."""
    import docker

    config: dict[str, Any] = {
        "image": image["id"],
        "command": command,
        "user": user,
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "privileged": False,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,size=4g"},
        "pids_limit": 4096,
        "volumes": {str(machine_dir.resolve()): {"bind": f"{CONTAINER_RESULTS}/{worker.machine}", "mode": "rw"}},
        "environment": {
            **identity_env(worker, _required(node)),
            "CONVBENCH_IMAGE": image["tag"],
            "CONVBENCH_IMAGE_ID": image["id"],
            "CONVBENCH_REVISION": image["revision"],
        },
        "labels": {f"{LABEL_PREFIX}worker": worker.label, f"{LABEL_PREFIX}machine": worker.machine},
        "detach": True,
    }
    if worker.gpu is not None:
        config["device_requests"] = [docker.types.DeviceRequest(device_ids=[worker.gpu["uuid"]],
                                                                capabilities=[["gpu"]])]
        config["environment"]["NVIDIA_VISIBLE_DEVICES"] = worker.gpu["uuid"]
    return config


def _required(node: str) -> str:
    if not node:
        raise ValueError("a worker's node is required (the scheduler's or the host's name), not guessed")
    return node


def engine_error(exc: Exception) -> str | None:
    """The one-line fix for an engine refusal we know, or None."""
    text = str(getattr(exc, "explanation", None) or exc)
    if NO_NVIDIA_RUNTIME in text:
        return ("the Docker engine has no NVIDIA runtime (it answered: " + text.strip().splitlines()[0] + "): "
                "install nvidia-container-toolkit, run `nvidia-ctk runtime configure --runtime=docker`, restart "
                "dockerd; or use --no-docker")
    return None


class Runner:
    """Runs the workers in parallel threads and gathers their outcomes; prints each worker's output prefixed."""

    def __init__(self, log=print):
        self.log = log
        self.outcomes: list[Outcome] = []
        self.fatal: list[str] = []
        self._lock = threading.Lock()
        self._live: list[Any] = []  # containers and processes to stop on interrupt
        self.stopping = False

    def say(self, label: str, line: str) -> None:
        with self._lock:
            if not self.stopping:  # once stopped, the command's own line is the last
                self.log(f"[{label}] {line}")

    def record(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    def run_all(self, workers: list[Worker], target) -> None:
        threads = [threading.Thread(target=self._guard, args=(target, w), name=w.label, daemon=True)
                   for w in workers]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except BaseException:  # Ctrl-C, or SIGTERM and SIGHUP's SystemExit (core/children.py)
            self.stopping = True
            self.stop()
            raise

    def _guard(self, target, worker: Worker) -> None:
        try:
            target(self, worker)
        except Exception as exc:  # one worker's failure must not end the others
            self.record(Outcome(worker.label, "?", 1, f"{type(exc).__name__}: {exc}"))

    def stop(self, grace_s: float = 5.0) -> None:
        """End every worker now: a process is asked to stop (SIGTERM: its own cleanup ends its worker and keeps
        its journal), killed after ``grace_s`` and reaped; a container is killed."""
        live = list(self._live)
        for item in live:
            try:
                item.terminate() if isinstance(item, subprocess.Popen) else item.kill()
            except Exception:
                pass
        deadline = time.monotonic() + grace_s
        for item in live:
            if isinstance(item, subprocess.Popen):
                try:
                    item.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    item.kill()
                    item.wait()


def docker_worker(client, results: Path, command: list[str], *, node: str):
    import docker

    def work(runner: Runner, worker: Worker) -> None:
        machine_dir, user = prepare_results(results, worker.machine)
        for image in worker.images:
            if runner.stopping or runner.fatal:
                return
            before = _listing(machine_dir)
            started = time.monotonic()
            runner.say(worker.label, f"row {image['row']} ({image['id'][7:19]}) -> {machine_dir}")
            try:
                container = client.containers.create(**container_config(image, worker, machine_dir, user, command,
                                                                        node=node))
            except docker.errors.APIError as exc:
                runner.fatal.append(engine_error(exc) or f"could not create the container: {exc.explanation or exc}")
                runner.record(Outcome(worker.label, image["row"], EXIT_ENVIRONMENT, runner.fatal[-1]))
                return
            runner._live.append(container)
            tail: list[str] = []
            try:
                try:
                    container.start()
                except docker.errors.APIError as exc:
                    msg = engine_error(exc)
                    if msg:
                        runner.fatal.append(msg)
                    raise
                for raw in container.logs(stream=True, follow=True):
                    for line in raw.decode(errors="replace").splitlines():
                        tail = (tail + [line])[-5:]
                        runner.say(f"{worker.label} {image['row']}", line)
                code = int(container.wait().get("StatusCode", 1))
            except docker.errors.APIError as exc:
                code = EXIT_ENVIRONMENT
                tail.append(engine_error(exc) or str(exc.explanation or exc))
            finally:
                runner._live.remove(container)
                try:
                    container.remove(force=True)
                except docker.errors.APIError:
                    pass
            runs = new_runs(machine_dir, before)
            runner.record(Outcome(worker.label, image["row"], code, "" if code == 0 else
                                  f"exited {code}: {tail[-1] if tail else '(no output)'}", runs,
                                  time.monotonic() - started))
    return work


# a native worker: `convbench COMMAND...` that gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG;
# that thread waits for it), and does not start when its parent is already gone
_NATIVE_CHILD = ("import os, signal, sys\n"
                 "try:\n    import ctypes; ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
                 "except (OSError, AttributeError):\n    pass\n"
                 "if os.getppid() != int(sys.argv[1]):\n    sys.exit(1)\n"
                 "from harness.cli import main\nsys.exit(main(sys.argv[2:]))")


def native_worker(results: Path, command: list[str], stacks: list | None = None, *, node: str):
    """Processes of this interpreter, one GPU each; with ``stacks`` (stacks.Stack) each GPU runs them in turn,
    each process in its stack's environment (its libraries first on LD_LIBRARY_PATH, its wheels on PYTHONPATH)."""
    from .stacks import Stack

    def work(runner: Runner, worker: Worker) -> None:
        machine_dir = results / worker.machine
        for stack in stacks or [Stack("host")]:
            if runner.stopping:
                return
            before = _listing(machine_dir)
            base = dict(os.environ, **identity_env(worker, _required(node)), CUDA_DEVICE_ORDER="PCI_BUS_ID",
                        CUDA_VISIBLE_DEVICES=worker.gpu["uuid"] if worker.gpu else "", PYTHONUNBUFFERED="1")
            env = stack.env(base)
            started = time.monotonic()
            label = worker.label if stacks is None else f"{worker.label} {stack.name}"
            # a session of its own: a terminal's Ctrl-C or hang-up reaches this command alone, which stops each
            # worker (Runner.stop), so a stop is said once; and it ends with this command, even a SIGKILLed one
            proc = subprocess.Popen([sys.executable, "-c", _NATIVE_CHILD, str(os.getpid()), *command], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                    start_new_session=True)
            runner._live.append(proc)
            if runner.stopping:  # stopped while it started: Runner.stop did not see it
                proc.kill()
            tail: list[str] = []
            try:
                for line in proc.stdout:
                    tail = (tail + [line.rstrip()])[-5:]
                    runner.say(label, line.rstrip())
                code = proc.wait()
            finally:
                runner._live.remove(proc)
            runner.record(Outcome(worker.label, "native" if stacks is None else f"stack {stack.name}", code,
                                  "" if code == 0 else f"exited {code}: {tail[-1] if tail else '(no output)'}",
                                  new_runs(machine_dir, before), time.monotonic() - started))
    return work


@dataclass(frozen=True)
class HostRunOptions:
    """What `convbench run` was asked: the job each GPU slot runs, where, and under which names."""

    results: Path
    cases: str
    job: str = "bench"  # bench: the asv suite; sweep: a plain sweep of ``backends``
    backends: str = "torch,cudnn"
    docker: bool = True
    rows: list[str] | None = None  # image rows (Docker)
    stacks: list[str] | None = None  # stacks each GPU runs in turn (without Docker)
    gpus: str | None = None  # NVML indices as the scheduler hands them out; None: all
    host_name: str | None = None  # the node's name as the scheduler names it; None: found here
    name_gpus_by: str = "index"
    extra: tuple[str, ...] = ()  # more flags of the job's command


def _stacks(names: list[str]) -> list:
    """--stacks resolved: declared overlays by name (installed), host, or NAME=FOLDER; each once."""
    from .stacks import resolve_all

    out = resolve_all(list(names))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise UserError(f"--stacks names a stack twice: {', '.join(names)}", 2)
    return out


def run(opts: HostRunOptions, log=print) -> int:
    """Every GPU slot of this host runs ``opts.job`` in parallel; 0 when every worker's run ended well."""
    results = Path(opts.results).resolve()
    host = fingerprint.check_node_name(opts.host_name, "--host-name") if opts.host_name else fingerprint.node()["name"]
    found, why = fingerprint.gpus()
    slots = parse_slots(opts.gpus) if not found else None
    gpus = select_gpus(found, opts.gpus) if found else []
    if slots:
        log(f"NVML sees no GPU on this node ({why or 'none found'}): the {len(slots)} GPU slot(s) given "
            f"({', '.join(map(str, slots))}) run one CPU worker each")
    elif not gpus:
        log(f"no GPU on this host ({why or 'NVML sees none'}): running one CPU worker")
    extra = list(opts.extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if not opts.docker:
        if opts.rows:
            raise UserError("--rows picks image rows; it has no meaning with --no-docker", 2)
        stacks = _stacks(opts.stacks) if opts.stacks else None
        workers = [Worker(f"gpu{g['index']}", machine_for(g, host, opts.name_gpus_by), g, slot=g["index"])
                   for g in gpus] or cpu_workers(host, slots)
        target = native_worker(results, worker_args(opts.job, opts.cases, opts.backends, str(results), extra),
                               stacks, node=host)
        if stacks:
            log(f"stacks, in turn on each worker: {', '.join(s.name for s in stacks)}")
    else:
        if opts.stacks:
            raise UserError("--stacks runs overlays on this host's Python; it needs --no-docker (images are the "
                            "stacks with Docker: --rows)", 2)
        from .images import EngineError, engine

        try:
            client = engine()
        except EngineError as exc:
            raise UserError(str(exc), EXIT_ENVIRONMENT) from None
        workers = plan_docker(gpus, local_rows(client), opts.rows, host, opts.name_gpus_by, log, slots)
        target = docker_worker(client, results, worker_args(opts.job, opts.cases, opts.backends, CONTAINER_RESULTS,
                                                            extra), node=host)
    log(f"{len(workers)} worker(s) in parallel: " + ", ".join(
        f"{w.label} -> {w.machine}" + (f" [{', '.join(i['row'] for i in w.images)}]" if w.images else "")
        for w in workers))
    runner = Runner(log)
    started = time.monotonic()
    runner.run_all(workers, target)
    wall = time.monotonic() - started
    failed = [o for o in runner.outcomes if o.code != 0]
    for o in sorted(runner.outcomes, key=lambda o: (o.label, o.what)):
        runs = ", ".join(str(p) for p in o.runs) or "no run directory"
        state = "ok" if o.code == 0 else f"FAILED ({o.message})"
        log(f"{o.label} {o.what}: {state} in {o.seconds:.0f} s; {runs}")
    log(f"{len(runner.outcomes) - len(failed)} of {len(runner.outcomes)} worker run(s) ok in {wall:.0f} s; "
        f"results under {results}")
    if runner.fatal:
        raise UserError(runner.fatal[0], EXIT_ENVIRONMENT)
    return 1 if failed else 0

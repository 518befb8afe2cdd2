"""A real, small Slurm cluster on this one machine, for the fleet tests and scripts/fleet_night.py.

As root, Debian's slurmctld and several ``slurmd -N nX`` run side by side on one host (/work/shared/slurm/README.md
has the recipe). Everything lives in one folder: slurm.conf, gres.conf, state, spools, logs, pid files, a job
completion log (jobcomp/filetxt, the end state of every job without slurmdbd) and placeholder GPU device files made
with mknod, since a GPU generic resource needs device files. Slurm commands are pointed at it by ``SLURM_CONF``
(``Cluster.env``), so /etc/slurm is never touched. ``stop`` ends what ``start`` began, by pid files.

    with Cluster(folder, nodes=3, gpus=2) as c:
        job = c.sbatch(script)          # the job id
        c.wait(job)                     # {'JobState': 'COMPLETED', 'ExitCode': '0:0', ...}
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "munged")
END_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
              "BOOT_FAIL", "DEADLINE"}


LOCK = "/tmp/convbench-slurm-cluster.lock"


def unavailable() -> str | None:
    """Why a cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "a Slurm test cluster needs root (slurmd as root, mknod)"
    missing = [b for b in BINARIES if not shutil.which(b) and not Path("/usr/sbin", b).exists()]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install -y slurmctld slurmd slurm-client munge)"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key (the munge package makes it)"
    return None


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class Cluster:
    def __init__(self, folder: Path, nodes: int = 3, gpus: int = 2, cpus: int = 2, partition: str = "gpu",
                 port: int = 17001):
        self.folder = Path(folder).resolve()
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.gpus = gpus
        self.cpus = cpus
        self.partition = partition
        self.port = port
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.folder / "slurm.conf"
        self.jobcomp = self.folder / "jobcomp.log"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.started: list[Path] = []  # pid files of the daemons this cluster started
        self.munged_started = False

    # -- setup ---------------------------------------------------------------------------------------------
    def write_conf(self) -> None:
        f = self.folder
        for sub in ("state", "dev", *(f"spool/{n}" for n in self.nodes)):
            (f / sub).mkdir(parents=True, exist_ok=True)
        for i in range(self.gpus):
            dev = f / "dev" / f"fakegpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
        last = len(self.nodes)
        nodes = f"n[1-{last}]" if last > 1 else "n1"
        gpu_files = f"{f}/dev/fakegpu[0-{self.gpus - 1}]" if self.gpus > 1 else f"{f}/dev/fakegpu0"
        self.conf.write_text(f"""\
ClusterName=convbenchci
SlurmctldHost={self.host}
SlurmctldPort={self.port - 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool/%n
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd-%n.pid
SlurmctldLogFile={f}/slurmctld.log
SlurmdLogFile={f}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=600
ScronParameters=enable
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
NodeName={nodes} NodeHostname={self.host} Port={self.port}-{self.port + last - 1} CPUs={self.cpus} \
RealMemory=2000 Gres=gpu:{self.gpus} State=UNKNOWN
PartitionName={self.partition} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        (f / "gres.conf").write_text(f"AutoDetect=off\nNodeName={nodes} Name=gpu File={gpu_files}\n")

    def start(self, timeout: float = 60) -> Cluster:
        why = unavailable()
        if why:
            raise RuntimeError(why)
        # one cluster at a time on this machine (its ports are fixed): a test in another xdist worker, or another
        # checkout's suite, waits here until the running one is stopped
        self._lock = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            self.write_conf()
            self._munge()
            self._daemon([_which("slurmctld"), "-c"], self.folder / "slurmctld.pid")
            for node in self.nodes:
                self.start_node(node)
            self.wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, node: str) -> None:
        # CONVBENCH_TEST_NODE marks the node's slurmd and the slurmstepds it forks (kill_node finds them by it)
        self._daemon([_which("slurmd"), "-N", node], self.folder / f"slurmd-{node}.pid",
                     extra={"CONVBENCH_TEST_NODE": node})

    def _munge(self) -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
            return
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", _which("munged")], check=True)
        self.munged_started = True
        self.started.insert(0, Path("/run/munge/munged.pid"))  # stopped last

    def _daemon(self, cmd: list[str], pidfile: Path, extra: dict | None = None) -> None:
        if pidfile.exists():
            pidfile.unlink()
        subprocess.run(cmd, env=dict(self.env, **(extra or {})), check=True)
        deadline = time.monotonic() + 15
        while not pidfile.exists() or not pidfile.read_text().strip():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[0]} wrote no pid file {pidfile}; see its log in {self.folder}")
            time.sleep(0.1)
        self.started.append(pidfile)

    def sinfo(self) -> dict[str, str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True)
        return dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = self.sinfo()
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not idle after {timeout:.0f} s: {states}; logs in {self.folder}")
            time.sleep(0.5)

    # -- jobs ----------------------------------------------------------------------------------------------
    def sbatch(self, script: Path, *args: str, cwd: Path | None = None, env: dict | None = None) -> str:
        out = subprocess.run(["sbatch", "--parsable", *args, str(script)], env=dict(self.env, **(env or {})),
                             capture_output=True, text=True, cwd=cwd or self.folder)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch refused {script}: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def job(self, job: str) -> dict[str, str]:
        """The job's fields from `scontrol show job` (while the controller remembers it), else the jobcomp log."""
        out = subprocess.run(["scontrol", "-o", "show", "job", job], env=self.env, capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return dict(re.findall(r"(\w+)=(\S*)", out.stdout))
        return self.completed().get(job, {})

    def completed(self) -> dict[str, dict[str, str]]:
        """Job id -> its line of the job completion log (JobState, ExitCode, NodeList...)."""
        if not self.jobcomp.exists():
            return {}
        jobs = {}
        for line in self.jobcomp.read_text().splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "JobId" in fields:
                jobs[fields["JobId"]] = fields
        return jobs

    def wait(self, job: str, timeout: float = 600) -> dict[str, str]:
        """Wait until the job is in the completion log; its line there (JobState, ExitCode)."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.completed().get(job)
            if done:
                return done
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} not ended after {timeout:.0f} s: {self.job(job)}")
            time.sleep(0.5)

    def wait_running(self, job: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.job(job).get("JobState") != "RUNNING":
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} not running after {timeout:.0f} s: {self.job(job)}")
            time.sleep(0.2)

    def kill_node(self, node: str) -> list[int]:
        """The node dies: SIGKILL to its slurmd, its slurmstepds and every task the job runs on it."""
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"CONVBENCH_TEST_NODE={node}".encode() in env or f"SLURMD_NODENAME={node}".encode() in env:
                pids.append(int(proc.name))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    # -- teardown ------------------------------------------------------------------------------------------
    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
        for pidfile in reversed(self.started):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.started.clear()
        if getattr(self, "_lock", None) is not None:
            os.close(self._lock)  # releases the machine's cluster lock
            self._lock = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

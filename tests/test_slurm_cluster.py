"""Slurm nights on a real cluster (tests/slurm_cluster.py: slurmctld and three slurmd with two GPU slots each, on
this machine): the script `convbench images render --slurm --no-docker` writes is submitted with sbatch as it is,
and the real convbench of this venv runs on every node (the CPU backends: the nodes have no GPU).

Needs the contract of `convbench run --gpus LIST --host-name NODE` (a CPU node writes one machine folder per
listed slot, `<NODE>-slot<N>-cpu`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _docker_build import build_cpu_image

from tests.slurm_cluster import Cluster, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FLEET_MATRIX = Path(__file__).parent / "fixtures" / "fleet_matrix.toml"
CONVBENCH = Path(sys.executable).parent / "convbench"
SLOTS = {f"{n}-slot{s}-cpu" for n in ("n1", "n2", "n3") for s in (0, 1)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(why)
    if not CONVBENCH.exists():
        pytest.skip(f"no {CONVBENCH} (the venv's console script)")
    c = Cluster(tmp_path_factory.mktemp("slurm"), nodes=3, gpus=2)
    c.start()
    yield c
    c.stop()


def render(tmp_path: Path, convbench: Path = CONVBENCH, outbox: Path | None = None) -> Path:
    """The night as rendered; only site paths (the nodes' convbench, results and outbox folders) are given."""
    out = tmp_path / "fleet"
    subprocess.run([str(CONVBENCH), "images", "--matrix", str(FLEET_MATRIX), "render", "--slurm", "--no-docker",
                    f"--convbench={convbench}", f"--results={tmp_path / 'node-local'}",
                    f"--outbox={outbox or tmp_path / 'outbox'}", "--job", "sweep", "--backends", "torch",
                    "--cases", "quick.seed", "--fleet-dir", str(out), "--out", str(out)], check=True,
                   capture_output=True)
    return out / "slurm" / "convbench-ci.sbatch"


def slots_in(outbox: Path, job: str) -> set[str]:
    prefix = f"convbench-ci-{job}-"
    return {p.name[len(prefix):-len(".tar.gz")] for p in outbox.glob(prefix + "*.tar.gz")}


def log_of(script: Path, job: str) -> str:
    log = script.parent / f"convbench-ci-{job}.log"
    return log.read_text() if log.exists() else "(no job log)"


def test_a_night_measures_every_gpu_slot_of_every_node(cluster, tmp_path):
    (tmp_path / "outbox").mkdir()
    script = render(tmp_path)
    started = time.monotonic()
    job = cluster.sbatch(script, cwd=script.parent)
    end = cluster.wait(job, timeout=300)
    assert (end["JobState"], end["ExitCode"]) == ("COMPLETED", "0:0"), log_of(script, job)
    assert end["NodeList"] == "n[1-3]"
    assert slots_in(tmp_path / "outbox", job) == SLOTS, log_of(script, job)
    assert not list((tmp_path / "outbox").glob(".*"))
    print(f"night of 3 nodes x 2 slots: {time.monotonic() - started:.1f} s")


def test_an_unwritable_outbox_fails_the_job_and_keeps_the_runs(cluster, tmp_path):
    (tmp_path / "outbox").write_text("a file where the outbox should be")
    script = render(tmp_path)
    job = cluster.sbatch(script, cwd=script.parent)
    end = cluster.wait(job, timeout=300)
    assert end["JobState"] == "FAILED" and end["ExitCode"] != "0:0", end
    assert "could not ship GPU slot" in log_of(script, job)
    for node in ("n1", "n2", "n3"):
        kept = {p.name for p in (tmp_path / "node-local" / f"{job}-{node}").iterdir()}
        assert kept == {f"{node}-slot0-cpu", f"{node}-slot1-cpu"}
        assert all(any(p.iterdir()) for p in (tmp_path / "node-local" / f"{job}-{node}").iterdir())


def test_the_schedule_submits_the_night(cluster, tmp_path):
    """The scrontab's #SCRON options are options sbatch takes, and its line submits the night; `scrontab FILE`
    itself is run where the client has it (Debian 12's slurm-client 22.05 ships no scrontab)."""
    (tmp_path / "outbox").mkdir()
    script = render(tmp_path)
    lines = script.with_suffix(".scrontab").read_text().splitlines()
    options = [ln.split(None, 1)[1] for ln in lines if ln.startswith("#SCRON ")]
    check = subprocess.run(["sbatch", "--test-only", *options, "--wrap", "true"], env=cluster.env,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    (entry,) = [ln for ln in lines if ln and not ln.startswith("#")]
    command = entry.split(None, 5)[5]
    assert command == f"sbatch {script}"
    submitted = subprocess.run(["bash", "-c", command], env=cluster.env, capture_output=True, text=True,
                               cwd=script.parent)
    job = submitted.stdout.split()[-1]
    end = cluster.wait(job, timeout=300)
    assert (end["JobState"], end["ExitCode"]) == ("COMPLETED", "0:0"), log_of(script, job)
    if shutil.which("scrontab"):
        out = subprocess.run(["scrontab", str(script.with_suffix(".scrontab"))], env=cluster.env,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        listed = subprocess.run(["scrontab", "-l"], env=cluster.env, capture_output=True, text=True).stdout
        assert entry in listed
        subprocess.run(["scrontab", "-r"], env=cluster.env, capture_output=True)


def test_a_node_dying_mid_night_costs_its_slots_only(cluster, tmp_path):
    """n2 dies while it measures (its slurmd, slurmstepd and tasks killed): n1's and n3's slots land and the
    job does not end COMPLETED with exit 0."""
    (tmp_path / "outbox").mkdir()
    started = tmp_path / "n2-started"
    wrapper = tmp_path / "site bin" / "convbench"
    wrapper.parent.mkdir()
    wrapper.write_text(f"""#!/bin/bash
# the site's convbench; node n2 is slow tonight, and dies during its run
if [ "$SLURMD_NODENAME" = n2 ]; then touch '{started}'; sleep 600; fi
exec '{CONVBENCH}' "$@"
""")
    wrapper.chmod(0o755)
    script = render(tmp_path, convbench=wrapper)
    job = cluster.sbatch(script, cwd=script.parent)
    deadline = time.monotonic() + 120
    while not started.exists():
        assert time.monotonic() < deadline, log_of(script, job)
        time.sleep(0.2)
    killed = cluster.kill_node("n2")
    assert killed
    try:
        end = cluster.wait(job, timeout=300)
        assert (end["JobState"], end["ExitCode"]) != ("COMPLETED", "0:0"), end
        assert slots_in(tmp_path / "outbox", job) == {s for s in SLOTS if not s.startswith("n2-")}, \
            log_of(script, job)
        print(f"job {job} after n2 died: {end['JobState']} {end['ExitCode']}")
    finally:
        cluster.start_node("n2")
        subprocess.run(["scontrol", "update", "NodeName=n2", "State=RESUME"], env=cluster.env,
                       capture_output=True)
        cluster.wait_idle(120)


def test_a_docker_night_runs_one_container_per_gpu_slot_of_every_node(cluster, tmp_path):
    """The Docker variant, submitted as rendered: each node loads nothing (the CPU image is on this engine),
    `convbench run --rows cpu` starts one hardened container per GPU slot, and each slot's runs are shipped; the
    runs name their node and slot, and the image by name and id."""
    import json
    import tarfile

    pytest.importorskip("docker")
    from harness.deploy import baseimage, imagematrix, images

    try:
        client = images.engine()
    except images.EngineError as exc:
        pytest.skip(f"no Docker engine: {exc}")
    matrix = imagematrix.load_matrix()
    base = matrix.bases[matrix.rows["cpu"].base]
    try:
        baseimage.ensure(client, base.tag, base.suite, base.mirror, base.include)
    except baseimage.BaseImageError as exc:
        pytest.skip(f"cannot make the base image here: {exc}")
    image_id = build_cpu_image(client, matrix)
    (tmp_path / "outbox").mkdir()
    out = tmp_path / "fleet"
    subprocess.run([str(CONVBENCH), "images", "--matrix", str(FLEET_MATRIX), "render", "--slurm", "cpu",
                    f"--convbench={CONVBENCH}", f"--results={tmp_path / 'node-local'}",
                    f"--outbox={tmp_path / 'outbox'}", f"--images-dir={tmp_path / 'images'}", "--job", "sweep",
                    "--backends", "torch", "--cases", "quick.seed", "--fleet-dir", str(out), "--out", str(out)],
                   check=True, capture_output=True)
    script = out / "slurm" / "convbench-ci.sbatch"
    assert "docker image inspect" in script.read_text()

    def slot_containers() -> set[str]:
        return {c.id for c in client.containers.list(all=True, filters={"label": f"{images.LABEL_PREFIX}worker"})
                if c.labels.get(f"{images.LABEL_PREFIX}machine") in SLOTS}

    # a night whose engine was stopped under it leaves its containers in the engine's state: not this night's
    before = slot_containers()
    job = cluster.sbatch(script, cwd=script.parent)
    end = cluster.wait(job, timeout=600)
    assert (end["JobState"], end["ExitCode"]) == ("COMPLETED", "0:0"), log_of(script, job)
    assert slots_in(tmp_path / "outbox", job) == SLOTS, log_of(script, job)
    with tarfile.open(tmp_path / "outbox" / f"convbench-ci-{job}-n2-slot1-cpu.tar.gz") as tar:
        (meta,) = [json.load(tar.extractfile(m)) for m in tar.getmembers() if m.name.endswith("/run.json")]
    fp = meta["fingerprint"]
    assert fp["node"] == {"name": "n2", "source": "CONVBENCH_NODE", "container": "docker",
                          "machine_id": fp["node"]["machine_id"]}
    assert fp["slot"] == 1 and fp["image"] == "convbench:cpu" and fp["image_id"] == image_id
    left = slot_containers() - before
    assert not left, f"a container of this night was left behind: {sorted(left)}"

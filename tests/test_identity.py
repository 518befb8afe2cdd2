"""A machine is its GPU on its node: named by the scheduler or the host, never by a container's made-up hostname;
kept across containers, pods and images; older runs (hostname only) still pair with newer ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _report_data import next_night, unpack  # noqa: E402

from harness.analysis import pairing  # noqa: E402
from harness.analysis.compare import fingerprint_diff, machine_identity  # noqa: E402
from harness.cli import main  # noqa: E402
from harness.core.errors import UserError  # noqa: E402
from harness.deploy import hostrun, placement  # noqa: E402
from harness.measurement import fingerprint  # noqa: E402

UUID = "GPU-c0719b4a-0000-0000-0000-000000000000"


@pytest.fixture
def bare(monkeypatch):
    """No node named by anyone, on a host (no container markers)."""
    for var in ("CONVBENCH_NODE", "SLURMD_NODENAME", "KUBERNETES_SERVICE_HOST", "CONVBENCH_SLOT", "CONVBENCH_HOST_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(fingerprint, "container", lambda: None)
    return monkeypatch


def test_the_node_is_named_by_the_host_runner_then_slurm_then_the_host(bare):
    bare.setattr(fingerprint.socket, "gethostname", lambda: "h1")
    assert fingerprint.node()["name"] == "h1" and fingerprint.node()["source"] == "hostname"
    bare.setenv("SLURMD_NODENAME", "gpu-n07")
    assert (fingerprint.node()["name"], fingerprint.node()["source"]) == ("gpu-n07", "SLURMD_NODENAME")
    bare.setenv("CONVBENCH_NODE", "rack3-n07")
    assert (fingerprint.node()["name"], fingerprint.node()["source"]) == ("rack3-n07", "CONVBENCH_NODE")


@pytest.mark.parametrize("runtime,hostname", [("docker", "3f2a9c1b7d4e"), ("podman", "0123456789ab"),
                                              ("kubernetes", "convbench-h200-28931-x7k2p")])
def test_a_container_that_nothing_names_is_refused(bare, runtime, hostname):
    """Docker and Podman name a container's host after its id; a pod's hostname is the pod's name: each is new
    every night, so a run there without CONVBENCH_NODE would never be compared with its previous night."""
    bare.setattr(fingerprint, "container", lambda: runtime)
    bare.setattr(fingerprint.socket, "gethostname", lambda: hostname)
    with pytest.raises(UserError, match="nothing names the node") as err:
        fingerprint.node()
    assert err.value.code == 2 and "CONVBENCH_NODE" in str(err.value)
    bare.setenv("CONVBENCH_NODE", "n1")
    assert fingerprint.node() == {"name": "n1", "source": "CONVBENCH_NODE", "container": runtime,
                                  "machine_id": None}


def test_a_container_given_a_hostname_keeps_it(bare):
    """`docker run --hostname build-7` (or a dev container named by its owner) is a name someone chose."""
    bare.setattr(fingerprint, "container", lambda: "docker")
    bare.setattr(fingerprint.socket, "gethostname", lambda: "build-7")
    assert fingerprint.node()["name"] == "build-7"


@pytest.mark.parametrize("bad", ["../etc", "a/b", "x\ny", "\x1b[2J", "y" * 254])
def test_a_node_name_that_cannot_name_a_machine_is_refused(bare, bad):
    bare.setenv("CONVBENCH_NODE", bad)
    with pytest.raises(UserError, match="a node name is printable"):
        fingerprint.node()


def test_machine_identity_is_gpu_on_node_and_older_runs_map_to_it():
    old = {"hostname": "h1", "gpu": {"uuid": UUID, "index": 0, "name": "NVIDIA H200"}}
    new = {"hostname": "3f2a9c1b7d4e", "node": {"name": "h1", "source": "CONVBENCH_NODE", "container": "docker"},
           "slot": 0, "gpu": {"uuid": UUID, "index": 0, "name": "NVIDIA H200"}}
    other_night = dict(new, hostname="9b8c7d6e5f4a")
    assert machine_identity(old) == machine_identity(new) == machine_identity(other_night) == f"h1/{UUID}"
    # the container's hostname is no longer an identity field: two nights' fingerprints do not differ
    assert fingerprint_diff(new, other_night) == []
    cpu_slots = [{"node": {"name": "n2"}, "slot": s, "gpu": None} for s in (0, 1)]
    assert [machine_identity(fp) for fp in cpu_slots] == ["n2/slot0", "n2/slot1"]
    assert machine_identity({"hostname": "h1", "gpu": None}) == "h1/cpu"


def test_machine_names_are_per_node_and_slot():
    assert fingerprint.machine_name({"node": {"name": "n2"}, "slot": 1, "gpu": None}) == "n2-slot1-cpu"
    assert fingerprint.machine_name({"hostname": "h", "gpu": None}) == "h-cpu"
    gpu = {"uuid": "GPU-bbbbbbbb-1111", "index": 0, "name": "NVIDIA H200"}
    assert fingerprint.machine_name({"node": {"name": "n1"}, "gpu": gpu}) == "n1-gpu0-nvidia-h200"
    # inside a container NVML numbers only the GPUs it was given, from 0: the UUID tells them apart
    in_ct = {"node": {"name": "n1", "container": "docker"}, "gpu": gpu}
    assert fingerprint.machine_name(in_ct) == "n1-gpubbbbbbbb-nvidia-h200"


def test_scheduler_slots_without_a_visible_gpu_run_one_cpu_worker_each():
    workers = placement.cpu_workers("n3", [0, 1])
    assert [(w.label, w.machine, w.slot) for w in workers] == [("slot0", "n3-slot0-cpu", 0),
                                                               ("slot1", "n3-slot1-cpu", 1)]
    env = hostrun.identity_env(workers[1], "n3")
    assert env["CONVBENCH_NODE"] == "n3" and env["CONVBENCH_SLOT"] == "1" and env["CONVBENCH_MACHINE"] == "n3-slot1-cpu"
    assert [w.machine for w in placement.plan_docker([], {"cpu": {"row": "cpu", "tag": "convbench:cpu", "id": "x",
                                                                  "gpu": False, "sm": [], "revision": "r"}},
                                                     ["cpu"], "n3", "index", lambda _: None, [0, 1])] == \
        ["n3-slot0-cpu", "n3-slot1-cpu"]
    for bad in ("0,0", "-1", "a"):
        with pytest.raises(UserError):
            placement.parse_slots(bad)


def test_native_run_on_two_slots_files_two_machines_of_the_node(tmp_path, capsys, bare):
    """`convbench run --no-docker --gpus 0,1 --host-name n1` on a node whose GPUs NVML cannot see (a CPU node
    scheduled through placeholder GPU resources): one real CPU run per slot, each recording its node and slot."""
    pytest.importorskip("torch")
    bare.setattr(fingerprint, "gpus", lambda: ([], "test: no NVML"))
    results = tmp_path / "results"
    code = main(["run", "--no-docker", "--gpus", "0,1", "--host-name", "n1", "--job", "sweep", "--backends", "torch",
                 "--cases", "quick.seed", "--results", str(results), "--", "--dtypes", "fp32", "--layouts", "NCHW"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the 2 GPU slot(s) given (0, 1) run one CPU worker each" in out
    assert sorted(p.name for p in results.iterdir()) == ["n1-slot0-cpu", "n1-slot1-cpu"]
    for slot in (0, 1):
        (run,) = (results / f"n1-slot{slot}-cpu").iterdir()
        fp = json.loads((run / "run.json").read_text())["fingerprint"]
        assert fp["node"]["name"] == "n1" and fp["node"]["source"] == "CONVBENCH_NODE" and fp["slot"] == slot
        assert machine_identity(fp) == f"n1/slot{slot}"


def test_older_runs_keep_pairing_with_newer_ones(tmp_path):
    """A store's runs from before nodes were recorded (hostname only) and a new night that names its node are one
    machine's nights: the morning pairs them."""
    run = unpack("h200-aa-fwd", tmp_path / "a")
    meta = json.loads((run / "run.json").read_text())
    host = meta["fingerprint"]["hostname"]
    newer, _ = next_night(run, tmp_path / "b", fingerprint={"hostname": "3f2a9c1b7d4e",
                                                            "node": {"name": host, "source": "CONVBENCH_NODE"}})
    fps = [json.loads((r / "run.json").read_text())["fingerprint"] for r in (run, newer)]
    runs = [{"id": i, "machine": meta["machine"], "night": f"2026-12-0{i + 1}", "started": f"2026-12-0{i + 1}T00",
             "source": "journal"} for i in range(2)]
    info = {i: {"fingerprint": fp, "options": {}} for i, fp in enumerate(fps)}
    (m,) = pairing.machines(runs, info)
    assert [c.what for c in m.comparisons] == ["previous night"]


def test_the_morning_page_lists_every_node_and_slot_and_names_the_silent_ones(tmp_path):
    """Two nodes of two CPU slots each report on night 1; on night 2 node n2's slot 1 does not. The index names
    that slot in its status line and marks it in the table of nodes and slots; the other three reported."""
    import datetime as dt
    import html
    import re

    from _fleet_data import record, write_run

    from harness.collect.ingest import collect
    from harness.collect.store import Store
    from harness.report import build

    t0 = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.timezone.utc)
    results = tmp_path / "r"
    for night in range(2):
        for node in ("n1", "n2"):
            for slot in (0, 1):
                if night == 1 and (node, slot) == ("n2", 1):
                    continue
                machine = f"{node}-slot{slot}-cpu"
                d = write_run(results, machine, "cpu", t0 + dt.timedelta(days=night), [record("a", median=1.0)],
                              gpu=None)
                meta = json.loads((d / "run.json").read_text())
                meta["fingerprint"].update(hostname=f"{night}{slot}a9c1b7d4e5f"[:12], slot=slot,
                                           node={"name": node, "source": "SLURMD_NODENAME", "container": None})
                (d / "run.json").write_text(json.dumps(meta))
    db = tmp_path / "s.sqlite"
    assert not collect(db, [results]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    page = (tmp_path / "site" / "index.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "1 of 4 GPU slots did not report: n2 slot 1 (CPU: no GPU seen) (last 2026-03-01)" in " ".join(text.split())
    rows = re.findall(r"<tr( class=\"bad\")?><td>(n\d)</td><td>([^<]+)</td>.*?<td>(reported|did not report)</td></tr>",
                      page[page.index('id="fleet-slots"'):])
    assert sorted((node, slot.split(" (")[0], state, bool(bad)) for bad, node, slot, state in rows) == [
        ("n1", "slot 0", "reported", False), ("n1", "slot 1", "reported", False),
        ("n2", "slot 0", "reported", False), ("n2", "slot 1", "did not report", True)]


def test_two_real_gpu_nights_are_one_machine(tmp_path, capsys):
    """Two nights on a lent H200 (scripts/gpu/identity.sh): the runs name the node the host runner was given,
    slot 0 and the GPU's UUID; the gate compares them as one machine, and the A/A pair fails nothing."""
    import tarfile

    from _fleet_data import FIXTURES

    with tarfile.open(FIXTURES / "h200-identity-2nights.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    runs = sorted(p.parent for p in tmp_path.rglob("run.json"))
    fps = [json.loads((r / "run.json").read_text())["fingerprint"] for r in runs]
    assert len(runs) == 2 and {machine_identity(fp) for fp in fps} == {
        "lent-h200/GPU-34552e40-8e79-f54d-7e49-27edb407edd5"}
    assert all(fp["node"]["source"] == "CONVBENCH_NODE" and fp["slot"] == 0 and fp["gpu"]["name"] == "NVIDIA H200"
               for fp in fps)
    capsys.readouterr()
    assert main(["compare", str(runs[0]), str(runs[1])]) == 0
    out = capsys.readouterr().out
    assert "different machines" not in out and "0 regression(s) fail the gate" in out

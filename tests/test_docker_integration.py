"""End to end on a real Docker engine: base image, hermetic CPU image, the suite in a hardened container,
and the results collected into the store. Skips with the reason when there is no engine (scripts/host-docker.sh
starts one on CI)."""

from __future__ import annotations

import ast
import itertools
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from _docker_build import build_cpu_image
from _fleet_data import degraded_journal, journal_lines

from harness.cli import main
from harness.deploy import baseimage, hostrun, imagematrix, images, placement, wheels
from harness.measurement import fingerprint

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("docker")
    try:
        return images.engine()
    except images.EngineError as exc:
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="module")
def cpu_image(client):
    """The CPU row built from its wheelhouse with network none (the base image is made once and kept)."""
    matrix = imagematrix.load_matrix()
    row = matrix.rows["cpu"]
    started = time.monotonic()
    try:  # what `convbench images base BASE` runs
        baseimage.ensure_bases(matrix, [row.base], client=client)
    except baseimage.BaseImageError as exc:
        pytest.skip(f"cannot make the base image here: {exc}")
    made_base = time.monotonic()
    image_id = build_cpu_image(client, matrix)
    print(f"\nbase image {made_base - started:.0f} s, CPU image {time.monotonic() - made_base:.0f} s")
    return client.images.get(image_id)


def test_image_is_labelled_and_runs_as_non_root(cpu_image):
    labels = cpu_image.labels
    assert labels["org.convbench.row"] == "cpu"
    assert labels["org.convbench.torch"] == "2.13.0+cpu"
    env = dict(e.split("=", 1) for e in cpu_image.attrs["Config"]["Env"])
    assert labels["org.convbench.suite-revision"] == env["CONVBENCH_REVISION"] != "unknown"
    lock = wheels.read_lock(imagematrix.load_matrix().rows["cpu"].lock_path())
    assert labels["org.convbench.lock-sha256"] == lock.sha256
    assert cpu_image.attrs["Config"]["User"] == f"{imagematrix.CONTAINER_UID}:{imagematrix.CONTAINER_UID}"
    assert "convbench:cpu" in cpu_image.tags


def test_container_cannot_write_its_root_nor_reach_a_network(client, cpu_image, tmp_path):
    """The hardened config of `convbench run`, probed from inside: uid, read-only /, writable results, no network."""
    worker = placement.Worker("cpu", "probe-cpu", None)
    machine_dir, user = hostrun.prepare_results(tmp_path, worker.machine)
    image = {"id": cpu_image.id, "tag": "convbench:cpu", "row": "cpu", "revision": "test"}
    probe = (
        "import os, socket, json\n"
        "out = {'uid': os.getuid()}\n"
        "def attempt(fn):\n"
        "    try:\n        fn(); return 'ok'\n"
        "    except OSError as e:\n        return type(e).__name__ + ':' + str(e.errno)\n"
        "out['write_root'] = attempt(lambda: open('/opt/convbench/x', 'w'))\n"
        "out['write_results'] = attempt(lambda: open('/results/probe-cpu/x', 'w').write('1'))\n"
        "out['connect'] = attempt(lambda: socket.create_connection(('1.1.1.1', 80), timeout=3))\n"
        "out['ifaces'] = sorted(n for _, n in socket.if_nameindex())\n"
        "out['caps'] = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]\n"
        "print(json.dumps(out))\n")
    cfg = hostrun.container_config(image, worker, machine_dir, user, ["-c", probe], node="ci")
    cfg.update(entrypoint=["python3"], detach=False, remove=True)
    out = json.loads(client.containers.run(**cfg).decode().strip().splitlines()[-1])
    assert out["uid"] != 0
    assert out["write_root"].startswith("OSError:30")  # EROFS
    assert out["write_results"] == "ok" and (machine_dir / "x").read_text() == "1"
    assert out["connect"] != "ok" and out["ifaces"] == ["lo"]
    assert int(out["caps"], 16) == 0


def test_run_the_suite_in_the_image_then_collect(client, cpu_image, tmp_path, capsys, monkeypatch):
    """`convbench run` in the hardened container runs the real asv suite (PyTorch on the CPU, onnxruntime's CPU
    EP, cuDNN skipped with the reason); asv's results, machine and commit land in the run directory; the run is
    collected into a store and rendered."""
    monkeypatch.setattr(fingerprint, "gpus", lambda: ([], "test host: GPU-less CI"))
    results = tmp_path / "results"
    code = main(["run", "--rows", "cpu", "--results", str(results), "--host-name", "ci",
                 "--cases", "quick.seed,quick.grouped", "--", "-b", "TorchForward|OrtModels"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "running one CPU worker" in out and "asv run for 2 cases on ci-cpu" in out
    (run,) = [p for p in (results / "ci-cpu").iterdir() if (p / "run.json").exists()]
    meta = json.loads((run / "run.json").read_text())
    revision = cpu_image.labels["org.convbench.suite-revision"]
    assert meta["machine"] == "ci-cpu" and meta["image"] == "convbench:cpu"
    assert meta["fingerprint"]["image_id"] == cpu_image.id
    assert meta["suite_revision"] == revision
    assert meta["fingerprint"]["software"]["torch"] == "2.13.0+cpu"
    records = [json.loads(ln) for ln in journal_lines(run)]
    assert any(r.get("backend") == "torch" and r.get("status") == "ok" for r in records)
    ort_ok = [r for r in records if r.get("backend") == "ort" and r.get("status") == "ok"]
    assert ort_ok and {r["settings"]["provider"] for r in ort_ok} == {"CPUExecutionProvider"}
    end = json.loads((run / "end.json").read_text())
    assert end["counts"]["ok"] > 0 and end["asv_returncode"] == 0 and not end["failed_backends"]
    # asv's own files, written by the image's unprivileged user into the mounted results only
    asv_results = run / "asv" / "results" / "ci-cpu"
    assert json.loads((asv_results / "machine.json").read_text())["machine"] == "ci-cpu"
    (saved,) = [p for p in asv_results.glob("*.json") if p.name != "machine.json"]
    data = json.loads(saved.read_text())
    assert data["commit_hash"] == revision
    # onnxruntime's class, CPU EP: both models have numbers under the "cpu" setting, none under a CUDA one
    cols = data["result_columns"]
    measured = set()
    for name, entry in data["results"].items():
        if name.startswith("bench_ort.OrtModels."):
            grid, values = list(itertools.product(*entry[cols.index("params")])), entry[cols.index("result")]
            measured |= {(ast.literal_eval(m), ast.literal_eval(st)) for (m, st), v
                         in zip(grid, values or [None] * len(grid), strict=True) if v is not None and v == v}
    assert measured == {("resnet50", "cpu"), ("mobilenetv2", "cpu")}
    torch_times = data["results"]["bench_torch.TorchForward.time_conv"][cols.index("result")]
    assert sum(1 for v in torch_times if v is not None and v == v) == 2 * 3 * 2  # 2 cases x 3 dtypes x 2 layouts

    store = tmp_path / "store.sqlite"
    assert main(["collect", str(results), "--store", str(store)]) == 0
    with sqlite3.connect(store) as db:
        (n, image_id, ok) = db.execute("SELECT count(*), max(image_id), sum(n_ok) FROM runs").fetchone()
    assert n == 1 and image_id == cpu_image.id and ok > 0
    site = tmp_path / "site"
    assert main(["report", "--store", str(store), "--out", str(site)]) == 0
    assert "ci-cpu" in (site / "index.html").read_text()


def test_the_image_runs_the_suite_as_its_main_command(client, cpu_image, tmp_path):
    """`docker run --network none convbench:cpu bench ...` as a new user types it, root filesystem read-only."""
    machine_dir = tmp_path / "m"
    machine_dir.mkdir()
    os.chmod(machine_dir, 0o777)
    logs = client.containers.run(cpu_image.id, ["bench", "--cases", "quick.seed", "-b", "TorchForward",
                                                "--results", "/results"],
                                 network_mode="none", read_only=True, tmpfs={"/tmp": "rw,size=1g"}, remove=True,
                                 environment={"CONVBENCH_MACHINE": "plain", "CONVBENCH_NODE": "ci-node"},
                                 volumes={str(machine_dir): {"bind": "/results", "mode": "rw"}})
    assert b"asv exit code 0" in logs, logs.decode()[-2000:]
    (run,) = list((machine_dir / "plain").iterdir())
    assert list((run / "asv" / "results" / "plain").glob("*-convbench-py3.11.json"))


def test_a_failing_container_keeps_what_the_other_measured(client, cpu_image, tmp_path):
    """Two containers in parallel: one sweeps, one is refused by the sweep (unknown case). The good run is whole."""
    results = tmp_path / "results"
    image = placement.local_rows(client)["cpu"]
    good = placement.Worker("w0", "ci-good", None, [image])
    runner = hostrun.Runner(log=lambda _: None)
    work_good = hostrun.docker_worker(client, results, hostrun.sweep_args("quick", "torch", "/results", []), node="ci")
    work_bad = hostrun.docker_worker(client, results, hostrun.sweep_args("no-such-case", "torch", "/results", []),
                                      node="ci")
    bad = placement.Worker("w1", "ci-bad", None, [image])
    runner.run_all([good, bad], lambda r, w: (work_good if w is good else work_bad)(r, w))
    by = {o.label: o for o in runner.outcomes}
    assert by["w0"].code == 0 and len(by["w0"].runs) == 1
    assert (by["w0"].runs[0] / "end.json").exists()
    assert by["w1"].code == 2 and "no-such-case" in by["w1"].message


def test_gpu_request_on_an_engine_without_nvidia_runtime_says_what_to_install(client, cpu_image, tmp_path):
    """This engine has no NVIDIA runtime; asking it for a GPU must end in the one-line fix, not a traceback."""
    if "nvidia" in (client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    fake_gpu = {"index": 0, "name": "any", "sm": "9.0", "uuid": "GPU-00000000-0000-0000-0000-000000000000"}
    image = placement.local_rows(client)["cpu"]
    runner = hostrun.Runner(log=lambda _: None)
    runner.run_all([placement.Worker("gpu0", "ci-gpu0", fake_gpu, [image])],
                   hostrun.docker_worker(client, tmp_path, ["sweep", "--help"], node="ci"))
    assert runner.fatal and 'could not select device driver "" with capabilities: [[gpu]]' in runner.fatal[0]
    assert "nvidia-container-toolkit" in runner.fatal[0]
    assert not os.listdir(tmp_path / "ci-gpu0")
    assert Path(tmp_path).exists()


# ---- a machine's identity across containers: two nights, one degraded record, the gate fails ---------------------

def _degrade_one_record(run: Path) -> dict:
    """Raise one ok record's accuracy error 1000x in a run's journal (the injected regression), and drop the
    run's packed copy so the journal is what is read. Returns the record."""
    text, rec = degraded_journal("".join(ln + "\n" for ln in journal_lines(run)))
    (run / "records.jsonl").write_text(text)  # the journal where both are there; the stale copies go
    (run / "records.jsonl.gz").unlink(missing_ok=True)
    (run / "records.packed").unlink(missing_ok=True)
    return rec


def _gate(base: Path, head: Path, capsys) -> tuple[int, str]:
    """`convbench compare` as a nightly gate would run it; time is not gated: two CPU containers on a shared
    2-core machine cannot be timed to a gate's precision, and the injected change is an accuracy one."""
    capsys.readouterr()
    code = main(["compare", str(base), str(head), "--ignore", "time"])
    return code, capsys.readouterr().out


def test_two_convbench_run_nights_are_one_machine_and_the_gate_fails_on_the_degraded_record(
        client, cpu_image, tmp_path, capsys, monkeypatch):
    """Each night is a new container with a new hostname; the machine is the node the host runner names, so the
    second night is compared with the first as the same machine and one degraded record fails the gate."""
    monkeypatch.setattr(fingerprint, "gpus", lambda: ([], "test host: GPU-less CI"))
    results = tmp_path / "results"
    for _ in range(2):
        assert main(["run", "--rows", "cpu", "--results", str(results), "--host-name", "node-a", "--job", "sweep",
                     "--backends", "torch", "--cases", "quick.seed"]) == 0
    runs = sorted(p for p in (results / "node-a-cpu").iterdir() if (p / "run.json").exists())
    assert len(runs) == 2
    fps = [json.loads((r / "run.json").read_text())["fingerprint"] for r in runs]
    assert fps[0]["hostname"] != fps[1]["hostname"]  # two containers, two made-up hostnames
    for fp in fps:
        assert fp["node"]["name"] == "node-a" and fp["node"]["source"] == "CONVBENCH_NODE"
        assert fp["node"]["container"] == "docker"
        assert fp["image"] == "convbench:cpu" and fp["image_id"] == cpu_image.id
    code, out = _gate(runs[0], runs[1], capsys)
    assert code == 0 and "different machines" not in out, out
    rec = _degrade_one_record(runs[1])
    code, out = _gate(runs[0], runs[1], capsys)
    assert code == 1, out
    assert "different machines" not in out and "1 regression(s) fail the gate" in out, out
    (line,) = [ln for ln in out.splitlines() if " accuracy " in ln]
    assert all(v in line.split() for v in ("node-a-cpu", rec["case"], rec["dtype"], rec["layout"])), line


def test_two_plain_docker_run_nights_as_the_docs_write_them(client, cpu_image, tmp_path, capsys):
    """docs/images.md's `docker run`, executed as written (a shell, the user's own uid, the node and the image id
    passed in): it writes the run, names the image and the node, and two nights gate as one machine."""
    import subprocess

    from tests._docs_commands import block_after

    command = block_after(Path(__file__).parents[1] / "docs" / "images.md", "## The main command")
    work = tmp_path / "work"
    work.mkdir()
    for _ in range(2):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                               command.rstrip() + " bench --cases quick.seed -b TorchForward --results /results"],
                              cwd=work, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (machine,) = [p for p in (work / "results").iterdir() if p.is_dir()]
    runs = sorted(p for p in machine.iterdir() if (p / "run.json").exists())
    assert len(runs) == 2
    for r in runs:
        fp = json.loads((r / "run.json").read_text())["fingerprint"]
        assert fp["node"]["source"] == "CONVBENCH_NODE" and fp["node"]["name"] == os.uname().nodename
        assert fp["image"] == "convbench:cpu" and fp["image_id"] == cpu_image.id
        assert os.stat(r / "records.jsonl.gz").st_uid == os.getuid()
    _degrade_one_record(runs[1])
    code, out = _gate(runs[0], runs[1], capsys)
    assert code == 1 and "different machines" not in out, out


def test_a_container_that_nothing_names_is_refused(client, cpu_image, tmp_path):
    """Without CONVBENCH_NODE a container's made-up hostname would be a new machine every night: refused, in one
    line, before anything is measured."""
    import docker

    with pytest.raises(docker.errors.ContainerError) as err:
        client.containers.run(cpu_image.id, ["sweep", "--cases", "quick.seed", "--backends", "torch",
                                             "--results", "/tmp/r"], network_mode="none", read_only=True,
                              tmpfs={"/tmp": "rw,size=1g"}, remove=True)
    assert err.value.exit_status == 2
    assert b"nothing names the node" in err.value.stderr and b"Traceback" not in err.value.stderr

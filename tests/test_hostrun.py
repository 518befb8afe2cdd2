"""``convbench run`` without an engine: planning per GPU architecture, container hardening, native workers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _fleet_data import journal_lines

from harness.cli import main
from harness.core.errors import UserError
from harness.deploy import hostrun, placement
from harness.measurement import fingerprint

P40 = {"index": 0, "name": "Tesla P40", "sm": "6.1", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000"}
H200 = {"index": 1, "name": "NVIDIA H200", "sm": "9.0", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000"}
ROWS = {
    "cu118": {"row": "cu118", "tag": "convbench:cu118", "id": "sha256:" + "1" * 64, "gpu": True,
              "sm": ["6.0", "6.1", "9.0"], "revision": "r1"},
    "cu130": {"row": "cu130", "tag": "convbench:cu130", "id": "sha256:" + "2" * 64, "gpu": True,
              "sm": ["7.5", "9.0"], "revision": "r1"},
    "cpu": {"row": "cpu", "tag": "convbench:cpu", "id": "sha256:" + "3" * 64, "gpu": False, "sm": [],
            "revision": "r1"},
}


def test_rows_are_skipped_on_gpus_they_cannot_run_on():
    said = []
    workers = placement.plan_docker([P40, H200], ROWS, None, "host", "index", said.append)
    plan = {w.label: [i["row"] for i in w.images] for w in workers}
    assert plan == {"gpu0": ["cu118"], "gpu1": ["cu118", "cu130"]}
    skip = [s for s in said if s.startswith("skip row cu130 on gpu0")]
    assert skip and "Tesla P40, sm_61" in skip[0] and "sm_75, sm_90 only" in skip[0]
    assert any("CPU rows run on GPU hosts only when named" in s for s in said)
    assert workers[0].machine == "host-gpu0-tesla-p40" and workers[1].machine == "host-gpu1-nvidia-h200"


def test_no_gpu_runs_one_cpu_worker_and_says_so():
    said = []
    workers = placement.plan_docker([], ROWS, None, "host", "index", said.append)
    assert [(w.label, w.machine, [i["row"] for i in w.images]) for w in workers] == [("cpu", "host-cpu", ["cpu"])]
    assert "skip row cu118: needs a GPU" in said
    with pytest.raises(UserError, match="no GPU on this host, and row cu130 needs one"):
        placement.plan_docker([], ROWS, ["cu130"], "host", "index", said.append)


def test_planning_errors_are_environment_errors():
    with pytest.raises(UserError, match="has no image on this engine") as err:
        placement.plan_docker([H200], ROWS, ["cu999"], "host", "index", print)
    assert err.value.code == 3
    with pytest.raises(UserError, match="nothing to run"):
        placement.plan_docker([P40], {"cu130": ROWS["cu130"]}, None, "host", "index", lambda _: None)
    with pytest.raises(UserError, match="no GPU 4 on this host"):
        placement.select_gpus([P40, H200], "1,4")
    with pytest.raises(UserError, match="NVML indices"):
        placement.select_gpus([P40], "first")
    assert placement.select_gpus([P40, H200], "1") == [H200]


def test_uuid_machine_names_differ_per_gpu_in_pods():
    a = placement.machine_for(dict(P40, index=0), "node7", "uuid")
    b = placement.machine_for(dict(H200, index=0), "node7", "uuid")
    assert a != b and a.startswith("node7-gpuaaaaaaaa")


def test_container_is_one_gpu_unprivileged_read_only_without_network(tmp_path):
    pytest.importorskip("docker")
    worker = placement.Worker("gpu1", "host-gpu1-nvidia-h200", H200, [ROWS["cu130"]])
    cfg = hostrun.container_config(ROWS["cu130"], worker, tmp_path, "10001:10001", ["sweep"], node="host")
    assert cfg["network_mode"] == "none" and cfg["read_only"] is True and cfg["privileged"] is False
    assert cfg["cap_drop"] == ["ALL"] and "no-new-privileges" in cfg["security_opt"]
    assert cfg["user"] == "10001:10001"
    assert list(cfg["volumes"].values()) == [{"bind": "/results/host-gpu1-nvidia-h200", "mode": "rw"}]
    (req,) = cfg["device_requests"]
    assert req["DeviceIDs"] == [H200["uuid"]] and req["Capabilities"] == [["gpu"]]
    env = cfg["environment"]
    assert env["CONVBENCH_MACHINE"] == worker.machine and env["CONVBENCH_IMAGE"] == "convbench:cu130"
    assert env["CONVBENCH_IMAGE_ID"] == ROWS["cu130"]["id"] and env["CONVBENCH_REVISION"] == "r1"
    cpu = hostrun.container_config(ROWS["cpu"], placement.Worker("cpu", "h-cpu", None), tmp_path, "1:1", [], node="h")
    assert "device_requests" not in cpu


def test_a_worker_is_named_by_its_node_never_by_a_fallback(tmp_path):
    """The node is the machine's identity: a worker without one is refused, not named after its machine."""
    pytest.importorskip("docker")
    worker = placement.Worker("cpu", "h-cpu", None)
    with pytest.raises(TypeError):
        hostrun.container_config(ROWS["cpu"], worker, tmp_path, "1:1", [])  # noqa - the missing node is the point
    with pytest.raises(ValueError, match="node is required"):
        hostrun.container_config(ROWS["cpu"], worker, tmp_path, "1:1", [], node="")
    assert hostrun.container_config(ROWS["cpu"], worker, tmp_path, "1:1", [], node="node7")["environment"][
        "CONVBENCH_NODE"] == "node7"
    with pytest.raises(TypeError):
        hostrun.native_worker(tmp_path, ["sweep"])  # noqa - the missing node is the point
    with pytest.raises(ValueError, match="node is required"):
        hostrun.native_worker(tmp_path, ["sweep"], node="")(hostrun.Runner(log=lambda _: None), worker)


def test_engine_refusal_without_nvidia_runtime_names_the_fix():
    msg = hostrun.engine_error(RuntimeError('could not select device driver "" with capabilities: [[gpu]]'))
    assert "nvidia-container-toolkit" in msg and "--no-docker" in msg
    assert hostrun.engine_error(RuntimeError("something else")) is None


def test_run_without_engine_is_one_line_and_exit_3(monkeypatch, tmp_path, capsys):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setattr(fingerprint, "gpus", lambda: ([], "test: no NVML"))
    assert main(["run", "--results", str(tmp_path / "r")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Docker engine is not running" in err[0] and "--no-docker" in err[0]


def test_an_engine_that_never_answers_is_one_line_and_exit_3_within_seconds(monkeypatch, tmp_path, capsys):
    """A socket that accepts the connection and says nothing (a hung dockerd): said within the answer limit,
    not after the 600 s an engine call may take."""
    import socket
    import time

    pytest.importorskip("docker")
    from harness.deploy import images

    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setattr(images, "ENGINE_ANSWER_S", 1)
    monkeypatch.setattr(fingerprint, "gpus", lambda: ([], "test: no NVML"))
    started = time.monotonic()
    try:
        assert main(["run", "--results", str(tmp_path / "r"), "--host-name", "n1"]) == 3
    finally:
        server.close()
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not answer within 1 s" in err[0] and "--no-docker" in err[0]
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_native_cpu_worker_measures_and_files_its_run(tmp_path, capsys):
    """The real sweep in a real child process: on this GPU-less host one CPU worker, said so."""
    pytest.importorskip("torch")
    results = tmp_path / "results"
    code = main(["run", "--no-docker", "--job", "sweep", "--results", str(results), "--backends", "torch",
                 "--cases", "quick", "--host-name", "ci"])
    out = capsys.readouterr().out
    if fingerprint.gpus()[0]:
        pytest.skip("this host has a GPU; the CPU-worker path is for GPU-less hosts")
    assert code == 0, out
    assert "running one CPU worker" in out
    (run,) = sorted((results / "ci-cpu").iterdir())
    meta = json.loads((run / "run.json").read_text())
    assert meta["machine"] == "ci-cpu"
    assert (run / "end.json").exists()
    records = [json.loads(ln) for ln in journal_lines(run)]
    assert any(r.get("status") == "ok" and r.get("backend") == "torch" for r in records)


def test_a_failing_worker_keeps_what_the_others_measured(tmp_path):
    """The Runner isolates workers: two children side by side, one aborts (SIGABRT) after journaling. The other's
    run is complete, the failed one's journal stays on disk, and the failure is an outcome, not an exception."""
    results = tmp_path / "results"
    good = placement.Worker("gpu0", "h-good", None)
    bad = placement.Worker("gpu1", "h-bad", None)
    script = ("import os, sys, pathlib;"
              "d = pathlib.Path(sys.argv[1]) / os.environ['CONVBENCH_MACHINE'] / 'run1'; d.mkdir(parents=True);"
              "(d / 'records.jsonl').write_text('{}\\n');"
              "print('measured one');"
              "sys.exit(0 if os.environ['CONVBENCH_MACHINE'] == 'h-good' else os.abort())")
    runner = hostrun.Runner(log=lambda _: None)

    def target(r, w):
        import subprocess
        env = dict(__import__("os").environ, CONVBENCH_MACHINE=w.machine)
        before = hostrun._listing(results / w.machine)
        proc = subprocess.run([sys.executable, "-c", script, str(results)], env=env, capture_output=True, text=True)
        r.record(hostrun.Outcome(w.label, "native", proc.returncode, proc.stdout.strip(),
                                 hostrun.new_runs(results / w.machine, before)))

    runner.run_all([good, bad], target)
    by = {o.label: o for o in runner.outcomes}
    assert by["gpu0"].code == 0 and by["gpu0"].runs == [results / "h-good" / "run1"]
    assert by["gpu1"].code != 0 and (results / "h-bad" / "run1" / "records.jsonl").exists()
    assert (results / "h-good" / "run1" / "records.jsonl").read_text() == "{}\n"


def test_native_failure_exit_code_and_summary(tmp_path, capsys):
    code = main(["run", "--no-docker", "--results", str(tmp_path), "--job", "sweep", "--cases", "quick.seed",
                 "--", "--dtypes", "fp8"])  # the worker refuses its flags
    out = capsys.readouterr().out
    if fingerprint.gpus()[0]:
        pytest.skip("this host has a GPU")
    assert code == 1
    assert "FAILED (exited 2" in out and "0 of 1 worker run(s) ok" in out


def test_unknown_case_is_refused_before_any_worker_starts(tmp_path, capsys):
    assert main(["run", "--no-docker", "--results", str(tmp_path), "--cases", "no-such-case"]) == 2  # as bench
    assert "unknown case 'no-such-case'" in capsys.readouterr().err


def test_rows_flag_is_refused_without_docker(tmp_path, capsys):
    assert main(["run", "--no-docker", "--rows", "cpu", "--results", str(tmp_path)]) == 2
    assert "--rows picks image rows" in capsys.readouterr().err


def test_results_dir_is_given_to_the_container_user(tmp_path, monkeypatch):
    import os
    if os.geteuid() != 0:
        machine_dir, user = hostrun.prepare_results(tmp_path, "m")
        assert user == f"{os.getuid()}:{os.getgid()}"
    else:
        machine_dir, user = hostrun.prepare_results(tmp_path, "m")
        assert user == "10001:10001" and machine_dir.stat().st_uid == 10001
    assert machine_dir == Path(tmp_path) / "m" and machine_dir.is_dir()

"""The onnxruntime backend on the CPU EP (the whole session-process path), the cuDNN log parser and the grid
command."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from harness.backends import SweepOptions  # noqa: E402
from harness.backends.ort import (  # noqa: E402
    CPU_EP,
    CUDA_EP,
    ModelOptions,
    OrtBackend,
    WorkerRun,
    api_logged_settings,
    cudnn_log,
    default_parallel,
    expected_conv_path,
    model_accuracy,
    node_algorithms,
)
from harness.cli import main as cli_main  # noqa: E402
from harness.core import cases  # noqa: E402
from harness.core.records import ERROR, OK, SKIPPED, TIMEOUT, Record  # noqa: E402
from harness.measurement import accuracy  # noqa: E402
from harness.run.journal import JOURNAL_FILE, iter_journal  # noqa: E402
from harness.run.pool import FreshProcesses  # noqa: E402

# cuDNN API log lines as cuDNN prints them (format of the public logs in NVIDIA/cudnn-frontend#39 and
# pytorch/pytorch#167242); the frontend line is the literal of cudnn_frontend plans.h execute().
LEGACY = """\
I! CuDNN (v8907) function cudnnConvolutionForward() called:
i!     handle: type=cudnnHandle_t; streamId=0x0;
i!     convDesc: type=cudnnConvolutionDescriptor_t:
i!         mathType: type=cudnnMathType_t; val=CUDNN_TENSOR_OP_MATH (1);
i!     algo: type=cudnnConvolutionFwdAlgo_t; val=CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM (1);
i! Time: 2022-11-25T08:47:46.579193 (0d+0h+0m+0s since start)

I! CuDNN (v8907) function cudnnFindConvolutionForwardAlgorithmEx() called:
i!     handle: type=cudnnHandle_t; streamId=0x0;

I! CuDNN (v8907) function cudnnConvolutionForward() called:
i!     convDesc: type=cudnnConvolutionDescriptor_t:
i!         mathType: type=cudnnMathType_t; val=CUDNN_FMA_MATH (3);
i!     algo: type=cudnnConvolutionFwdAlgo_t; val=CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED (7);
"""

BACKEND = """\
I! CuDNN (v91900 17) function cudnnBackendExecute() called:
i!     handle: type=cudnnHandle_t; streamId=0x0;
i! Time: 2026-11-25T08:47:46.579193 (0d+0h+0m+0s since start)

I! CuDNN (v91900 17) function cudnnBackendExecute() called:
i!     handle: type=cudnnHandle_t; streamId=0x0;
"""

FRONTEND = """\
[cudnn_frontend] INFO:  Getting plan from heuristics for ConvFwd ...
[cudnn_frontend] INFO: Executing eng0_k2=1_k3=0...
[cudnn_frontend] INFO: Executed eng0_k2=1_k3=0.
[cudnn_frontend] INFO: Executing eng28_k2=3...
"""


def test_legacy_api_log_gives_algorithm_and_math_per_call():
    api = cudnn_log.parse_api(LEGACY)
    assert api.version == 8907 and cudnn_log.version_string(api.version) == "8.9.7"
    assert api.events == [("legacy", "IMPLICIT_PRECOMP_GEMM/TENSOR_OP_MATH"),
                          ("legacy", "WINOGRAD_NONFUSED/FMA_MATH")]
    assert api.finds == 1 and api.conv_path() == "legacy_find"


def test_frontend_tags_replace_backend_executions_one_for_one():
    api = cudnn_log.parse_api(BACKEND)
    fe = cudnn_log.parse_frontend(FRONTEND)
    assert cudnn_log.version_string(api.version) == "9.19.0"
    assert api.conv_path() == "cudnn_frontend"
    assert fe.executions == ["eng0_k2=1_k3=0", "eng28_k2=3"] and fe.heuristic_queries == 1
    seq, source = cudnn_log.conv_sequence(api, fe)
    assert seq == ["eng0_k2=1_k3=0", "eng28_k2=3"] and source == "api+frontend"
    # Counts that differ are never paired line for line. On a frontend-only API log the frontend's plan tags
    # are the sequence (the H200 run of 2026-11-29 logged two cudnnBackendExecute per conv execution), and
    # assign() still refuses a sequence whose length does not fit the runs.
    one = cudnn_log.parse_frontend(FRONTEND.splitlines()[1])
    seq, source = cudnn_log.conv_sequence(api, one)
    assert source == "frontend" and seq == ["eng0_k2=1_k3=0"]
    none, why = cudnn_log.assign(seq, [1], ["conv1", "conv2"])
    assert none is None and "1 conv executions" in why
    # with legacy calls in the API log, the API's own labels stay
    mixed = cudnn_log.parse_api(LEGACY + "\n" + BACKEND)
    seq, source = cudnn_log.conv_sequence(mixed, one)
    assert source == "api" and seq == ["IMPLICIT_PRECOMP_GEMM/TENSOR_OP_MATH", "WINOGRAD_NONFUSED/FMA_MATH", "?", "?"]


def test_api_log_read_from_a_file_line_by_line_equals_the_text_parser(tmp_path):
    text = LEGACY + "\n" + BACKEND
    path = tmp_path / "api.log"
    path.write_text(text)
    a, b = cudnn_log.parse_api(text), cudnn_log.parse_api_file(str(path))
    assert (a.version, a.events, a.finds, a.get_v7, a.calls) == (b.version, b.events, b.finds, b.get_v7, b.calls)
    assert b.calls == 5 and b.finds == 1 and len(b.events) == 4


def test_assign_names_each_execution_and_refuses_a_wrong_count():
    seq = ["a", "b", "a", "b", "a", "c", "a", "c"]
    sessions, why = cudnn_log.assign(seq, [2, 2], ["conv1", "conv2"])
    assert why is None
    assert sessions == [{"conv1": "a", "conv2": "b"}, {"conv1": "a", "conv2": "c"}]
    assert cudnn_log.differences(sessions, ["s0", "s1"]) == {"conv2": {"s0": "b", "s1": "c"}}
    assert cudnn_log.engine_counts({"x": "eng0_k2=1", "y": "eng0_k2=3", "z": "eng28"}) == "eng0:2,eng28:1"
    changed, _ = cudnn_log.assign(["a", "b"], [2], ["conv1"])
    assert changed == [{"conv1": "a->b"}]
    none, why = cudnn_log.assign(seq[:-1], [2, 2], ["conv1", "conv2"])
    assert none is None and "7 conv executions" in why


def test_log_environment_covers_cudnn8_cudnn9_and_the_frontend():
    env = cudnn_log.log_env("/tmp/a", "/tmp/b")
    assert env["CUDNN_LOGLEVEL_DBG"] == "3" and env["CUDNN_LOGINFO_DBG"] == "1"
    assert env["CUDNN_LOGDEST_DBG"] == "/tmp/a" and env["CUDNN_FRONTEND_LOG_FILE"] == "/tmp/b"


@pytest.mark.parametrize("version,path", [("1.19.2", "legacy"), ("1.20.0", "cudnn_frontend"),
                                          ("1.31.1", "cudnn_frontend"), ("1.9.0", "legacy")])
def test_conv_path_by_version(version, path):
    got = expected_conv_path(version)
    assert got["path"] == path
    if path == "cudnn_frontend":
        assert got["EXHAUSTIVE"] == "heuristics mode B" and "conv.cc" in got["source"]


def test_model_combos_cover_the_grid():
    b = OrtBackend()
    cpu = b.model_combos("resnet50", ModelOptions(device="cpu"))
    assert len(cpu) == 2 and {dict(c.settings)["io"] for c in cpu} == {"iobinding", "numpy"}
    assert all(dict(c.settings)["cudnn_conv_algo_search"] == "n/a" for c in cpu)
    gpu = b.model_combos("resnet50", ModelOptions(device="cuda"))
    cuda = [c for c in gpu if dict(c.settings)["provider"] == CUDA_EP]
    assert len(cuda) == 3 * 2 * 2 * 2 and len(gpu) == len(cuda) + 2
    keys = {Record(case="model.resnet50", backend="ort", direction=c.direction, algo=c.algo, math=c.math,
                   dtype=c.dtype, layout=c.layout, settings=dict(c.settings)).key() for c in gpu}
    assert len(keys) == len(gpu)


def test_sweep_options_map_onto_model_options():
    o = ModelOptions.from_options(SweepOptions(device="cpu", dtypes=("fp32",), repeats=4))
    assert (o.device, o.dtypes, o.repeats, o.sessions) == ("cpu", ("fp32",), 4, 5)


@pytest.fixture(scope="module")
def cpu_records(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONVBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        b = OrtBackend(log=lambda m: None, processes=FreshProcesses())
        opts = ModelOptions(device="cpu", sessions=2, processes=2, repeats=1)
        yield list(b.run_model("mobilenetv2", b.model_combos("mobilenetv2", opts), opts))


def test_cpu_ep_model_records_are_complete(cpu_records):
    assert len(cpu_records) == 2
    for r in cpu_records:
        assert r.status == OK, r.reason
        assert r.case == "model.mobilenetv2" and r.backend == "ort" and r.device == "cpu"
        assert r.settings["provider"] == CPU_EP and r.settings["cudnn_conv_algo_search"] == "n/a"
        assert "do not apply to the CPU EP" in r.explanation
        assert r.time.n >= 3 and r.time.median_ms > 0 and r.time.timer == "perf_counter"
        assert r.accuracy.precision_class == "fp32" and r.accuracy.unwritten == 0
        assert r.determinism.repeat_equal is True and r.determinism.repeats == 1
        d = r.extra["drift"]["image"]
        assert d["in_process"]["n"] == 2 and d["fresh_process"]["n"] == 2 and d["all"]["n"] == 3
        assert r.determinism.distinct_outputs == d["all"]["distinct"]
        assert r.extra["session_create_ms"] > 0 and r.extra["first_inference_ms"] > 0
        assert r.extra["model_sha256"] and set(r.extra["input_hashes"]) == {"image", "random"}
    assert cpu_records[0].settings["io"] != cpu_records[1].settings["io"]


def test_record_hash_is_accuracy_output_hash_of_the_saved_output(cpu_records, tmp_path):
    import onnxruntime as ort

    from harness.backends.ort import imagenet, models

    r = cpu_records[0]
    built = models.build("mobilenetv2", 1, tmp_path)
    assert built.sha256 == r.extra["model_sha256"]
    sess = ort.InferenceSession(str(built.path), providers=["CPUExecutionProvider"])
    y = sess.run(None, {models.INPUT: imagenet.model_inputs("mobilenetv2", 1)["image"]})[0]
    import torch

    assert accuracy.output_hash(torch.from_numpy(y)) == r.determinism.hash


def test_cuda_combos_without_a_cuda_ep_are_skipped_with_the_reason():
    b = OrtBackend(log=lambda m: None)
    if not b.cuda_reason():
        pytest.skip("this onnxruntime has a CUDA EP")
    opts = ModelOptions(device="cuda", cpu_ep=False)
    recs = list(b.run_model("resnet50", b.model_combos("resnet50", opts), opts))
    assert len(recs) == 24 and all(r.status == SKIPPED and "no CUDA EP" in r.reason for r in recs)


def test_conv_case_on_the_cpu_ep_and_the_unsupported_combinations():
    b = OrtBackend(log=lambda m: None, processes=FreshProcesses())
    case = cases.get("quick.depthwise")
    opts = SweepOptions(device="cpu", directions=("fwd", "bwd_data"), dtypes=("fp32", "bf16"),
                        layouts=("NCHW", "NHWC"))
    recs = list(b.run(case, b.combos(case, opts), opts))
    ok = [r for r in recs if r.status == OK]
    assert len(recs) == 2 * 2 * 2 * 2 and len(ok) == 2
    for r in ok:
        assert r.accuracy.precision_class == "fp32" and r.determinism.distinct_outputs == 1
        assert r.extra["sessions"] == 3 and r.time.median_ms > 0
    reasons = {(r.direction, r.dtype, r.layout): r.reason for r in recs if r.status == SKIPPED}
    assert "forward convolutions only" in reasons[("bwd_data", "fp32", "NCHW")]
    assert "no bf16 Conv kernel" in reasons[("fwd", "bf16", "NCHW")]
    assert "prefer_nhwc" in reasons[("fwd", "fp32", "NHWC")]


def test_default_parallel_drift_workers():
    assert default_parallel(False, 16) == 12  # the lent H200 host
    assert default_parallel(False, 2) == 1 and default_parallel(False, 128) == 12
    assert default_parallel(True, 16) == 1  # a timed search (onnxruntime <= 1.19 EXHAUSTIVE) runs alone


def test_h200_shaped_logs_map_every_node(tmp_path):
    """The shape the H200 wrote (onnxruntime-gpu 1.31.1): per conv execution a graph line and a plan line in the
    frontend log, and two cudnnBackendExecute calls in the API log. 2 sessions x 2 runs x 2 Conv nodes."""
    plans = {"conv_a": "eng28_k2=4_k3=0", "conv_b": "eng70_k2=12_k18=0"}
    fe_lines, gid = [], 0
    for _session in range(2):
        gids = {}
        for _run in range(2):
            for node, tag in plans.items():
                if node not in gids:
                    gid += 1
                    gids[node] = gid
                fe_lines += [f"[cudnn_frontend] INFO: Executing gid {gids[node]}",
                             f"[cudnn_frontend] INFO: Executing {tag}...", f"[cudnn_frontend] INFO: Executed {tag}."]
    (tmp_path / "fe.log").write_text("\n".join(fe_lines) + "\n")
    (tmp_path / "api.log").write_text(BACKEND * 8)  # 16 backend executions for 8 conv executions
    w = WorkerRun({}, api_log=str(tmp_path / "api.log"), fe_log=str(tmp_path / "fe.log"))
    cfg = {"status": OK, "conv_order": ["conv_a", "conv_b"], "sessions": [{"runs": 2}, {"runs": 2}]}
    info = node_algorithms(w, cfg, ["conv_a", "conv_b"])
    assert "why_unmapped" not in info, info
    assert info["sessions"] == [plans, plans] and info["source"] == "frontend"
    assert (info["executions"], info["frontend_graph_executions"], info["api_backend_executes"]) == (8, 8, 16)
    assert info["conv_path_observed"] == "cudnn_frontend" and info["cudnn_version_loaded"] == "9.19.0"
    # an unreadable log costs the engine names of that process, not its record
    w.api_log = str(tmp_path)  # a directory
    broken = OrtBackend._digest_logs("m", "k", 0, WorkerRun({}, result={"configs": [dict(cfg, key="k")]},
                                                            api_log=str(tmp_path), fe_log=w.fe_log),
                                     ["conv_a", "conv_b"], ModelOptions())
    assert broken["process"] == 0 and "reading the cuDNN logs failed" in broken["why_unmapped"]


def test_api_log_policy_per_setting_or_per_search_mode():
    modes = {f"{m}|{t}|{w}": m for m in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT") for t in (0, 1) for w in (0, 1)}
    modes["cpu"] = "n/a"
    assert api_logged_settings(modes, "setting", legacy=False) == set(modes)
    assert api_logged_settings(modes, "mode", legacy=False) == {"EXHAUSTIVE|0|0", "HEURISTIC|0|0", "DEFAULT|0|0",
                                                                "cpu"}
    assert api_logged_settings(modes, "mode", legacy=True) == set(modes)  # <= 1.19: engines are in the API log


def _sessions(runs: list[WorkerRun], workdir, parallel: int, timeout_s: float, on_done=None) -> None:
    """What OrtBackend does with its session processes: each prepared, then run by the pool's service."""
    OrtBackend(log=lambda m: None, processes=FreshProcesses())._run_sessions(runs, workdir, parallel, timeout_s,
                                                                            on_done)


def test_session_processes_are_reported_each_as_it_ends(tmp_path):
    jobs = [WorkerRun({"model": str(tmp_path / f"missing{i}.onnx"), "provider": CPU_EP, "inputs": {},
                       "configs": [{"key": "k", "provider_options": {}, "sessions": 1}]}, name=f"w{i}")
            for i in range(3)]
    seen = []
    _sessions(jobs, tmp_path, 2, 120,
              on_done=lambda w: seen.append((w, w.result is not None, w.ended >= w.started > 0)))
    assert sorted(id(w) for w, _, _ in seen) == sorted(map(id, jobs))  # each one, once
    assert all(has_result and timed for _, has_result, timed in seen)


def test_a_failing_session_process_costs_its_configuration_only(tmp_path):
    bad = WorkerRun({"model": str(tmp_path / "missing.onnx"), "provider": CPU_EP, "inputs": {},
                     "configs": [{"key": "k", "provider_options": {}, "sessions": 1}]}, name="bad")
    slow = WorkerRun({"model": str(tmp_path / "missing.onnx"), "provider": CPU_EP, "inputs": {},
                      "configs": [{"key": "k", "provider_options": {}, "sessions": 1}]}, name="slow")
    _sessions([bad], tmp_path, 1, 120)
    assert bad.result["configs"][0]["status"] == "error" and "missing.onnx" in bad.result["configs"][0]["reason"]
    _sessions([slow], tmp_path, 1, 0.001)
    assert slow.failure[0] == TIMEOUT and "watchdog" in slow.failure[1]  # the pool's words (run/finalize.py)


def test_model_accuracy_flags_unwritten_and_scales_by_the_yardstick():
    ref = np.linspace(-1, 1, 1000).reshape(1, 1000)
    y = (ref * (1 + 1e-6)).astype(np.float32)
    assert model_accuracy(y, ref, 1e-6, 0).precision_class == "fp32"
    assert model_accuracy(y, ref, 1e-9, 0).precision_class == "tf32"  # 1e-6 is 1000x this model's fp32 level
    broken = model_accuracy(y, ref, 1e-6, 3)
    assert broken.precision_class == "broken" and broken.unwritten == 3


def test_grid_command_rejects_bad_input(capsys, tmp_path):
    assert cli_main(["ort-grid", "--out", str(tmp_path), "--models", "resnet18"]) == 2
    assert "unknown model 'resnet18'" in capsys.readouterr().err
    assert cli_main(["ort-grid", "--out", str(tmp_path), "--sessions", "0", "--device", "cpu"]) == 2


def test_grid_command_writes_a_run_journal(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CONVBENCH_CACHE", str(tmp_path / "cache"))
    rc = cli_main(["ort-grid", "--out", str(tmp_path / "res"), "--device", "cpu", "--models", "mobilenetv2",
                        "--sessions", "1", "--processes", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "model.mobilenetv2" in out and "CPU EP" in out
    journal = next((tmp_path / "res").glob("*/*/run.json")).with_name(JOURNAL_FILE)  # read from its .gz
    recs = [Record.from_dict(d) for d in iter_journal(journal)]
    assert len(recs) == 2 and all(r.status == OK for r in recs)
    assert json.loads((journal.parent / "end.json").read_text())["records"] == 2
    assert ERROR not in {r.status for r in recs}


def test_grid_command_fails_when_every_record_of_a_model_failed(tmp_path, capsys, monkeypatch):
    """As it did in the images before the crops shipped: the input cannot be made, every record is an error."""
    from harness.backends.ort import imagenet

    def no_input(*_):
        raise RuntimeError("scikit-image is needed for the real-image input")

    monkeypatch.setenv("CONVBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(imagenet, "model_inputs", no_input)
    rc = cli_main(["ort-grid", "--out", str(tmp_path / "res"), "--device", "cpu", "--models", "mobilenetv2",
                        "--sessions", "1", "--processes", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "every record of model.mobilenetv2 failed" in err and "scikit-image is needed" in err
    recs = [Record.from_dict(d) for d in iter_journal(next((tmp_path / "res").glob("*/*/run.json")).with_name(JOURNAL_FILE))]
    assert recs and all(r.status == ERROR for r in recs)  # what was recorded is kept


def test_worker_environment_switches_each_log_on_its_own(monkeypatch):
    from harness.backends.ort.sessions import _worker_env

    monkeypatch.setenv("CUDNN_LOGLEVEL_DBG", "3")  # a parent's own setting must not leak into unlogged workers
    assert not {k for k in _worker_env(None, None) if k.startswith("CUDNN_")}
    fe_only = _worker_env(None, "/tmp/fe.log")
    assert fe_only["CUDNN_FRONTEND_LOG_FILE"] == "/tmp/fe.log" and "CUDNN_LOGDEST_DBG" not in fe_only
    full = _worker_env("/tmp/api.log", "/tmp/fe.log")
    assert full["CUDNN_LOGDEST_DBG"] == "/tmp/api.log" and full["CUDNN_LOGLEVEL_DBG"] == "3"


def test_the_sweep_gives_the_backend_the_pools_session_processes(tmp_path):
    """`convbench sweep -b ort`: the pool's resolve_backend hands OrtBackend its process service (run/pool.py);
    a backend built without one says so in its records instead of starting processes of its own."""
    from harness.run import sweep

    case = cases.get("quick.depthwise")
    opts = SweepOptions(device="cpu", dtypes=("fp32",), layouts=("NCHW",))
    journal = sweep.run([case], ["ort"], opts, tmp_path, isolate=False, log=lambda m: None)
    recs = [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE) if d["kind"] == "measurement"]
    assert len(recs) == 2 and all(r.status == OK and r.extra["sessions"] == 3 for r in recs)
    bare = OrtBackend(log=lambda m: None)
    recs = list(bare.run(case, bare.combos(case, opts), opts))
    assert len(recs) == 2 and all(r.status == ERROR and "no process service" in r.reason for r in recs)

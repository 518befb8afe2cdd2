"""The CUDA EP for real: every search mode runs, cuDNN's logs name an engine per Conv node, TF32 is visible."""

from __future__ import annotations

import re

import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("torch")

from harness.backends import SweepOptions  # noqa: E402
from harness.backends.ort import CUDA_EP, ModelOptions, OrtBackend, expected_conv_path  # noqa: E402
from harness.core import cases  # noqa: E402
from harness.core.records import OK  # noqa: E402
from harness.measurement import fingerprint  # noqa: E402
from harness.run.pool import FreshProcesses  # noqa: E402

pytestmark = pytest.mark.gpu
TAG = re.compile(r"eng-?\d+(?:_k\d+=-?\d+)*")


@pytest.fixture(scope="module", autouse=True)
def needs_cuda():
    if CUDA_EP not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDA EP here")
    if not fingerprint.gpus()[0]:
        pytest.skip("no NVIDIA GPU visible to NVML")


def test_single_conv_every_setting_runs_and_names_its_engine():
    b = OrtBackend(log=lambda m: None, processes=FreshProcesses())
    case = cases.get("quick.seed")
    opts = SweepOptions(device="cuda", dtypes=("fp32",), layouts=("NCHW",))
    recs = [r for r in b.run(case, b.combos(case, opts), opts) if r.settings["provider"] == CUDA_EP]
    assert len(recs) == 3 * 2 * 2 * 2
    for r in recs:
        assert r.status == OK, r.reason
        assert r.accuracy.unwritten == 0 and r.accuracy.precision_class in ("fp32", "tf32")
        if r.settings["use_tf32"] == 0:
            assert r.accuracy.precision_class == "fp32", r.key()
        assert r.chosen_algo, r.extra  # from cuDNN's logs
        if r.extra["conv_path_expected"]["path"] == "cudnn_frontend":
            # engine tags only: on the H200 (1.31.1) a graph line "gid N" once slipped in as a label
            assert all(TAG.fullmatch(part) for part in r.chosen_algo.split("->")), r.chosen_algo
        assert r.extra["cudnn_version_loaded"]


def test_model_node_algorithms_are_mapped_from_the_logs():
    b = OrtBackend(log=lambda m: None, processes=FreshProcesses())
    opts = ModelOptions(device="cuda", sessions=2, processes=2, repeats=1, cpu_ep=False)
    combos = [c for c in b.model_combos("mobilenetv2", opts) if dict(c.settings)["use_tf32"] == 0
              and dict(c.settings)["cudnn_conv_use_max_workspace"] == 1]
    recs = list(b.run_model("mobilenetv2", combos, opts))
    assert len(recs) == 3 * 2
    expected = expected_conv_path(ort.__version__)["path"]
    for r in recs:
        assert r.status == OK, r.reason
        assert r.accuracy.precision_class == "fp32"
        assert len(r.extra["node_algos"]) == 52, r.extra.get("algo_logs")
        assert "?" not in set(r.extra["node_algos"].values()), r.extra["node_algos"]  # every engine named
        if expected == "cudnn_frontend":
            assert all(TAG.fullmatch(v) for v in r.extra["node_algos"].values()), r.extra["node_algos"]
            # the 2026-11-29 H200 records: one graph line per plan execution; check it still holds
            assert all(i["frontend_graph_executions"] in (0, i["executions"]) for i in r.extra["algo_logs"])
        observed = {i["conv_path_observed"] for i in r.extra["algo_logs"]}
        assert all(expected in (o or "") or (expected == "legacy" and (o or "").startswith("legacy"))
                   for o in observed), (observed, expected)
        assert r.time.median_ms > 0 and r.extra["session_create_ms"] > 0

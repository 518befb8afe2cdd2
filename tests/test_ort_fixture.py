"""What the real onnxruntime grid on the H200 recorded (2026-11-29, onnxruntime-gpu 1.31.1), read from the fixture.

The fixture is the run directory of `python3 -m harness.ort_grid --out ... --parallel 8` (now `convbench ort-grid`), cut by its 250 s
limit while MobileNetV2's records were being written (no end.json). Every expectation below is what those
records say; docs/ort.md quotes the same numbers.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections import defaultdict
from pathlib import Path

import pytest

from harness.backends.ort import cudnn_log
from harness.core.records import OK, Record
from harness.run.journal import JOURNAL_FILE, iter_journal
from harness.run.ort_grid import seed_rows

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "h200-ort.tar.gz"
SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
CUDA = "CUDAExecutionProvider"
RESNET50_CONVS = 53  # torchvision resnet50: 53 Conv layers (tests/test_models.py checks the builder)
_COUNTS = re.compile(r"the log has (\d+) conv executions; (\d+) runs x (\d+) Conv nodes = (\d+) were expected")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    dest = tmp_path_factory.mktemp("h200-ort")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(dest, filter="data")
    (run_dir,) = [p.parent for p in dest.rglob("run.json")]
    return run_dir, [Record.from_dict(d) for d in iter_journal(run_dir / JOURNAL_FILE)]


def by_model(records, model):
    return [r for r in records if r.case == f"model.{model}"]


def cuda(records):
    return [r for r in records if r.settings["provider"] == CUDA]


def test_the_run_is_the_h200_grid_and_was_cut_before_its_end(run):
    run_dir, records = run
    meta = json.loads((run_dir / "run.json").read_text())
    fp = meta["fingerprint"]
    assert fp["gpu"]["name"] == "NVIDIA H200" and fp["software"]["onnxruntime"] == "1.31.1"
    assert meta["options"]["ort_grid"].items() >= {"sessions": 5, "processes": 5, "parallel": 8}.items()
    assert not (run_dir / "end.json").exists()  # interrupted by the call's time limit
    assert {r.extra["ort_version"] for r in records} == {"1.31.1"}


def test_resnet50_every_setting_and_io_is_present_and_ok(run):
    _, records = run
    rn = by_model(records, "resnet50")
    keys = {(r.settings["cudnn_conv_algo_search"], r.settings["use_tf32"], r.settings["cudnn_conv_use_max_workspace"],
             r.settings["io"]) for r in cuda(rn)}
    assert keys == {(s, t, w, io) for s in SEARCHES for t in (0, 1) for w in (0, 1) for io in ("iobinding", "numpy")}
    assert len([r for r in rn if r.settings["provider"] != CUDA]) == 2  # the CPU EP cross-check, both io
    assert {r.status for r in rn} == {OK}
    assert all(r.time and r.time.median_ms > 0 for r in rn)


def test_mobilenetv2_only_exhaustive_fp32_settings_completed(run):
    _, records = run
    mb = by_model(records, "mobilenetv2")
    assert {(r.settings["cudnn_conv_algo_search"], r.settings["use_tf32"], r.settings["cudnn_conv_use_max_workspace"])
            for r in mb} == {("EXHAUSTIVE", 0, 0), ("EXHAUSTIVE", 0, 1)}
    assert len(mb) == 4 and {r.status for r in mb} == {OK}


def test_no_setting_gave_more_than_one_output_in_sessions_or_processes(run):
    """The seed's measure: 5 fresh sessions in one process and 5 fresh processes, both inputs."""
    _, records = run
    for r in records:
        for name, d in r.extra["drift"].items():
            assert (d["in_process"]["n"], d["fresh_process"]["n"], d["all"]["n"]) == (5, 5, 9), (r.key(), name)
            assert (d["in_process"]["distinct"], d["fresh_process"]["distinct"], d["all"]["distinct"]) == (1, 1, 1)
            assert d["all"]["max_spread"] == 0.0 and len(set(d["all"]["hashes"])) == 1
        assert r.determinism.distinct_outputs == 1 and r.determinism.repeat_equal is True
        assert r.determinism.hash == r.extra["drift"]["image"]["all"]["hashes"][0]
        assert r.extra["unlogged_session"]["digest_in_logged_outputs"] is True  # logging changed no bit


def test_accuracy_classes_and_which_settings_share_output_bits(run):
    _, records = run
    rn = cuda(by_model(records, "resnet50"))
    hashes = defaultdict(set)
    for r in rn:
        s = r.settings
        tf32_engines = s["use_tf32"] == 1 and s["cudnn_conv_algo_search"] != "DEFAULT"
        assert r.accuracy.precision_class == ("tf32" if tf32_engines else "fp32"), r.key()
        hashes[tf32_engines].add(r.determinism.hash)
    # one output for every fp32-class setting (DEFAULT with use_tf32=1 included), one for the TF32 ones
    assert len(hashes[False]) == 1 and len(hashes[True]) == 1 and hashes[False] != hashes[True]
    cpu = [r for r in by_model(records, "resnet50") if r.settings["provider"] != CUDA]
    assert {r.determinism.hash for r in cpu}.isdisjoint(hashes[False] | hashes[True])
    assert {r.accuracy.precision_class for r in cpu} == {"fp32"}


def test_default_is_the_slow_fallback(run):
    _, records = run
    med = {(r.settings["cudnn_conv_algo_search"], r.settings["use_tf32"], r.settings["cudnn_conv_use_max_workspace"]):
           r.time.median_ms for r in cuda(by_model(records, "resnet50")) if r.settings["io"] == "iobinding"}
    for t in (0, 1):
        for w in (0, 1):
            assert med[("DEFAULT", t, w)] > 2 * max(med[("EXHAUSTIVE", t, w)], med[("HEURISTIC", t, w)])


def test_logs_show_the_frontend_path_and_why_no_node_was_mapped(run):
    """Every process ran frontend plans; the mapping failed because each conv execution gave two
    'Executing' lines (a graph 'gid N' line, then the plan's engine tag), which cudnn_log now separates."""
    _, records = run
    for r in cuda(records):
        expected = r.extra["conv_path_expected"]
        assert expected["path"] == "cudnn_frontend"
        logs = r.extra["algo_logs"]
        assert len(logs) == 5 and r.chosen_algo is None and "node_algos" not in r.extra
        assert {i["conv_path_observed"] for i in logs} == {"cudnn_frontend"}
        assert {i["cudnn_version_loaded"] for i in logs if i["process"] == 0} == {"9.14.0"}
        heads = {tuple(i["sequence_head"]) for i in logs}
        assert len(heads) == 1  # the same first engines in all five processes
        head = heads.pop()
        assert all(x.startswith("gid ") for x in head[0::2]) and all(x.startswith("eng") for x in head[1::2])
        fe = cudnn_log.parse_frontend("".join(f"[cudnn_frontend] INFO: Executing {x}...\n" for x in head))
        assert fe.executions == list(head[1::2]) and fe.graph_executions == len(head) // 2
        for i in logs:
            n, runs, nodes, want = map(int, _COUNTS.search(i["why_unmapped"]).groups())
            assert n == 2 * want == 2 * runs * nodes  # exactly one graph line per plan execution
            sessions = 5 if i["process"] == 0 else 1
            assert i["frontend_heuristic_queries"] == sessions * nodes
        if r.case == "model.resnet50":
            assert nodes == RESNET50_CONVS


def test_engine_heads_by_search_mode(run):
    _, records = run
    heads = {}
    for r in cuda(by_model(records, "resnet50")):
        s = r.settings
        heads[(s["cudnn_conv_algo_search"], s["use_tf32"], s["cudnn_conv_use_max_workspace"])] = \
            tuple(r.extra["algo_logs"][0]["sequence_head"][1::2])
    for t in (0, 1):
        # modes B and A chose the same first engines; max_workspace changed nothing
        assert heads[("EXHAUSTIVE", t, 0)] == heads[("HEURISTIC", t, 0)] == heads[("EXHAUSTIVE", t, 1)]
        assert set(heads[("DEFAULT", t, 0)]) == {"eng1"}  # FALLBACK
    assert heads[("EXHAUSTIVE", 0, 0)] != heads[("EXHAUSTIVE", 1, 0)]


def test_seed_rows_summarise_the_fixture(run):
    _, records = run
    rows = seed_rows(records)
    rn = [row for row in rows if row["model"] == "resnet50" and row["provider"] == CUDA]
    assert len(rn) == 12
    assert {(row["in_process"], row["fresh_process"], row["max_spread"]) for row in rn} == {("1/5", "1/5", 0.0)}
    assert all(row["latency_ms"] > 0 and row["session_create_ms"] > 0 for row in rn)


def test_ort_grid_summarize_prints_the_fixtures_seed_table(run, capsys, tmp_path):
    """`convbench ort-grid --summarize RUN` reads a run (here one cut before its end) and measures nothing."""
    from harness.cli import main

    run_dir, records = run
    assert main(["ort-grid", "--summarize", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{run_dir}: {len(records)} ort records (no end.json)"
    assert any("model.resnet50" in line and "EXHAUSTIVE" in line for line in out)
    assert main(["ort-grid", "--summarize", str(tmp_path)]) == 2  # not a run directory: one line, usage
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a run directory (no run.json)" in err[0]

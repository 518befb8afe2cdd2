"""Paired A/B studies: the ABBA order, the run each stack writes, and the judgement on the real H200 studies."""

import json
from pathlib import Path

import pytest
from _fleet_data import FIXTURES

from harness import cli
from harness.analysis import paired_judgement as judgement
from harness.collect.ingest import read_runs_into
from harness.collect.store import Store
from harness.core.cases import select
from harness.run import paired


def test_abba_alternates_the_order_case_by_case():
    cases = select("quick")
    orders = [order for _, order in paired.abba(cases)]
    assert orders[:4] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]
    # over any two consecutive cases each stack runs once first and once second: a linear drift cancels
    assert all(sorted([orders[i][0], orders[i + 1][0]]) == ["A", "B"] for i in range(0, len(orders) - 1, 2))


def _study(name: str) -> dict[str, list[dict]]:
    store = Store(":memory:")
    read_runs_into(store, [FIXTURES / f"{name}.tar.gz"])
    roles = {}
    for run in store.runs():
        roles[store.run_json(run["id"])["options"]["paired"]["role"]] = store.records(run["id"])
    return roles


def test_h200_aa_study_finds_nothing_but_time_noise():
    """The host stack against itself, ABBA, on one H200 (2026-11-30): no bits, accuracy, status or determinism
    finding at all; time findings are the placement-dependent levels of docs/performance.md, each under 12 %."""
    legs = _study("h200-aa-fwd")
    judged = judgement.judge(legs["A"], legs["B"])
    assert judged["combinations"] == 5824 and judged["both_ok"] == 2788
    kinds = {f.kind for f in judged["findings"]}
    assert kinds == {"time"}
    for f in judged["findings"]:
        if f.verdict in ("regression", "improvement"):
            assert 1 / 1.12 < f.ratio < 1.12, (f.key, f.ratio)
    assert sum(v for k, v in judged["counts"].items() if k.startswith("time:")) == 2788


def test_h200_cudnn_upgrade_names_what_changed():
    """cuDNN 9.19 -> 9.27 on the H200, forward: 121 outputs changed bits (as the issue's own run found), no status
    changed; backward: seed.c8's backward-data ALGO_1 became TF32-class under DEFAULT and TENSOR_OP math, and
    the documented non-deterministic algorithms' flips are changes, not regressions."""
    fwd = judgement.judge(*_study("h200-upgrade-cudnn927-fwd").values())
    assert fwd["counts"]["bits:change"] == 121
    assert not any(f.kind == "availability" for f in fwd["findings"])
    legs = _study("h200-upgrade-cudnn927-bwd")
    bwd = judgement.judge(legs["A"], legs["B"])
    tf32 = {(f.case, f.direction, f.algo, f.math) for f in bwd["findings"]
            if f.kind == "accuracy" and f.base == "fp32" and f.head == "tf32" and f.backend == "cudnn"}
    assert tf32 == {("seed.c8", "bwd_data", "ALGO_1", m) for m in ("DEFAULT", "TENSOR_OP",
                                                                    "TENSOR_OP_ALLOW_CONVERSION")}
    flips = [f for f in bwd["findings"] if f.kind == "determinism" and not f.bits]
    assert flips and all(f.verdict == "change" for f in flips)
    assert not any(f.kind == "determinism" and f.verdict == "regression" for f in bwd["findings"])


def test_upgrade_command_runs_an_aa_study_on_the_cpu(tmp_path):
    """`convbench upgrade` end to end on the CPU backends: two runs, each named by its stack and role, every
    combination judged once."""
    out = tmp_path / "study.json"
    code = cli.main(["upgrade", "--a", "host", "--b", "host", "--cases", "quick.seed,quick.pointwise",
                     "--backends", "torch", "--dtypes", "fp32", "--budget-ms", "5", "--results", str(tmp_path / "r"),
                     "--json-out", str(out)])
    assert code == 0
    study = json.loads(out.read_text())
    (leg,) = study["legs"].values()
    roles = {}
    for role, path in leg["runs"].items():
        meta = json.loads((Path(path) / "run.json").read_text())
        roles[role] = meta
        assert meta["options"]["paired"]["role"] == role and meta["fingerprint"]["stack"] == "host"
        assert "mapped" in meta["fingerprint"]
    assert set(roles) == {"A", "B"}
    assert leg["both_ok"] == leg["combinations"] == 4
    assert sum(v for k, v in leg["counts"].items() if k.startswith("time:")) == 4


def test_upgrade_refuses_bad_stacks_and_gpus(tmp_path, capsys):
    assert cli.main(["upgrade", "--a", "host", "--b", str(tmp_path / "nowhere")]) == 3
    assert "not a folder" in capsys.readouterr().err
    assert cli.main(["upgrade", "--a", "host", "--b", "host", "--gpus", "0,x"]) == 2
    assert "--gpus" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["h200-upgrade-cudnn927-fwd", "h200-upgrade-cudnn927-bwd"])
def test_each_side_of_a_study_names_the_cudnn_it_mapped(name):
    """The fingerprint of each side is read in that side's process: the overlay's cuDNN path for B."""
    store = Store(":memory:")
    read_runs_into(store, [FIXTURES / f"{name}.tar.gz"])
    seen = {}
    for run in store.runs():
        fp = store.run_json(run["id"])["fingerprint"]
        seen[fp["stack"]] = (fp["libraries"]["cudnn"]["version"], fp["mapped"]["libcudnn.so.9"]["path"])
    assert seen["host"][0] == "9.19.0" and "/opt/torch/.venv/" in seen["host"][1]
    assert seen["cudnn927"] == ("9.27.0", "/tmp/stack-cudnn927/nvidia/cudnn/lib/libcudnn.so.9")


def test_studies_in_a_store_are_found_and_judged():
    store = Store(":memory:")
    read_runs_into(store, [FIXTURES / "h200-aa-fwd.tar.gz", FIXTURES / "h200-upgrade-cudnn927-fwd.tar.gz"])
    found = judgement.studies(store)
    assert [s["stacks"] for s in found] == [{"A": "host", "B": "cudnn927"}, {"A": "host", "B": "host"}]
    upgrade = found[0]
    (leg,) = upgrade["legs"].values()
    assert leg["counts"]["bits:change"] == 121 and leg["B"]["fingerprint"]["libraries"]["cudnn"]["version"] == "9.27.0"
    assert upgrade["agreement"] == {"legs": 1, "findings": len({(f.key, f.judged_kind) for f in leg["findings"]}),
                                    "confirmed": None}


def _legs(name: str) -> dict[str, dict[str, list[dict]]]:
    """{gpu: {role: records}} of a study replicated on two GPUs."""
    store = Store(":memory:")
    read_runs_into(store, [FIXTURES / f"{name}.tar.gz"])
    legs: dict[str, dict[str, list[dict]]] = {}
    for run in store.runs():
        p = store.run_json(run["id"])["options"]["paired"]
        legs.setdefault(p["gpu"], {})[p["role"]] = store.records(run["id"])
    return legs


def test_two_gpu_aa_studies_fail_on_nothing_but_a_few_process_levels():
    """The host stack against itself on both H200s of one host, each with its operands on five placements
    (2026-11-30): forward, 2 and 4 slower / 5 and 1 faster of 2,788 per GPU at the default thresholds (the
    earlier single-placement A/A pairs had about 16); backward (6 cases), at most one; no accuracy, status or
    determinism regression; every changed output belongs to a documented non-deterministic algorithm."""
    for name, most in (("h200x2-aa-fwd", 7), ("h200x2-aa-bwd", 1)):
        legs = _legs(name)
        assert sorted(legs) == ["0", "1"]
        for sides in legs.values():
            judged = judgement.judge(sides["A"], sides["B"])
            failing = [f for f in judged["findings"] if f.verdict in ("regression", "improvement")]
            assert len(failing) <= most and all(f.kind == "time" for f in failing), (name, len(failing))
            assert all(f.ratio < 1.08 and 1 / f.ratio < 1.08 for f in failing)
            assert "bits:change" not in judged["counts"]
            if name.endswith("bwd"):
                assert judged["counts"]["expected bits:change"] >= 150
            assert not any(f.verdict == "regression" and f.kind != "time" for f in judged["findings"])


def test_two_gpu_upgrade_is_confirmed_by_the_swap():
    """cuDNN 9.19 -> 9.27 on both H200s of one host, each GPU running both stacks ABBA: the same 121 outputs
    changed bits on each, and most verdicts agree across the GPUs."""
    legs = _legs("h200x2-upgrade-cudnn927-fwd")
    judged = {gpu: judgement.judge(s["A"], s["B"]) for gpu, s in legs.items()}
    assert [j["counts"]["bits:change"] for j in judged.values()] == [121, 121]
    agreement = judgement.confirm(judged)
    assert agreement["legs"] == 2 and agreement["confirmed"] / agreement["findings"] > 0.9


def _studies(name: str) -> dict[str, dict[str, dict[str, list[dict]]]]:
    """{study: {gpu: {role: records}}}: a catalogue measured in several calls is several studies."""
    store = Store(":memory:")
    read_runs_into(store, [FIXTURES / f"{name}.tar.gz"])
    out: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for run in store.runs():
        p = store.run_json(run["id"])["options"]["paired"]
        out.setdefault(p["study"], {}).setdefault(p["gpu"], {})[p["role"]] = store.records(run["id"])
    return out


def test_two_gpu_backward_upgrade_in_full():
    """cuDNN 9.19 -> 9.27, backward default catalogue (26 cases in three calls), on both H200s of one host,
    swapped (2026-11-30/12-01): no status changed, the same 250 outputs changed bits on each GPU, seed.c8's
    backward-data ALGO_1 became TF32-class on both, and the swap confirms most verdicts."""
    studies = _studies("h200x2-upgrade-cudnn927-bwd")
    assert len(studies) == 3
    bits = {"0": 0, "1": 0}
    both, confirmed, findings = 0, 0, 0
    tf32 = {"0": set(), "1": set()}
    for legs in studies.values():
        assert sorted(legs) == ["0", "1"]
        judged = {gpu: judgement.judge(s["A"], s["B"]) for gpu, s in legs.items()}
        for gpu, j in judged.items():
            assert not any(f.kind == "availability" for f in j["findings"])
            assert not any(f.kind == "determinism" and f.verdict == "regression" for f in j["findings"])
            bits[gpu] += j["counts"].get("bits:change", 0)
            both += j["both_ok"]
            tf32[gpu] |= {(f.case, f.direction, f.algo, f.math) for f in j["findings"] if f.kind == "accuracy"
                          and f.backend == "cudnn" and f.base == "fp32" and f.head == "tf32"}
        agreement = judgement.confirm(judged)
        confirmed += agreement["confirmed"]
        findings += agreement["findings"]
    assert bits == {"0": 250, "1": 250} and both == 2 * 5080
    assert tf32["0"] == tf32["1"] == {("seed.c8", "bwd_data", "ALGO_1", m)
                                      for m in ("DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION")}
    assert confirmed / findings > 0.9


def test_cudnn8_on_the_h200_reproduces_the_fconv2d_report():
    """cuDNN 8.9.2 (with cuBLAS 12) through the ctypes binding against the host's 9.19, forward, cudnn backend, on
    both H200s (2026-11-30 23:21 UTC): every status is the same; on the report's case (1x64x512x512,
    64x64x3x3, fp32) IMPLICIT_PRECOMP_GEMM under DEFAULT math is TF32-class with max |delta| 0.04 against the
    fp64 reference, as on the RTX 3090, while FMA math stays fp32-class."""
    (legs,) = _studies("h200x2-upgrade-cudnn89-fwd").values()
    for sides in legs.values():
        judged = judgement.judge(sides["A"], sides["B"])
        assert judged["combinations"] == 4992 and judged["both_ok"] == 1956
        assert not any(f.kind == "availability" for f in judged["findings"])
        assert {(f.case, f.math, f.base, f.head) for f in judged["findings"] if f.kind == "accuracy"} == {
            ("seed.c4", m, "tf32", "fp32") for m in ("DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION")}
        b = {r.identity_key(): r for r in sides["B"]}
        seed = "seed.c64|cudnn|fwd|IMPLICIT_PRECOMP_GEMM|{}|fp32|NCHW|"
        assert b[seed.format("DEFAULT")].precision_class == "tf32"
        assert 0.03 < b[seed.format("DEFAULT")].accuracy.max_abs < 0.05
        assert b[seed.format("FMA")].precision_class == "fp32" and b[seed.format("FMA")].accuracy.max_abs < 1e-3


def test_the_cudnn8_side_names_every_library_it_mapped():
    """B's process mapped cuDNN 8.9 and cuBLAS 12 from the overlay and torch's own cuDNN 9 beside them."""
    store = Store(":memory:")
    read_runs_into(store, [FIXTURES / "h200x2-upgrade-cudnn89-fwd.tar.gz"])
    for run in store.runs():
        fp = store.run_json(run["id"])["fingerprint"]
        if fp["stack"] != "cudnn89":
            assert fp["libraries"]["cudnn"]["version"] == "9.19.0" and "libcudnn.so.8" not in fp["mapped"]
            continue
        assert fp["libraries"]["cudnn"] == {"path": "/tmp/stack-cudnn89/nvidia/cudnn/lib/libcudnn.so.8",
                                            "version": "8.9.2", "version_int": 8902}
        assert fp["mapped"]["libcublasLt.so.12"]["wheel"] == "nvidia_cublas_cu12-12.4.5.8"
        assert fp["mapped"]["libcudnn.so.9"]["wheel"] == "nvidia_cudnn_cu13-9.19.0.56"


def _failing(judged: dict) -> list:
    return [f for f in judged["findings"] if f.verdict in ("regression", "improvement")]


def test_aa_pairs_timed_in_two_processes_fail_on_at_most_one_kernel():
    """Four A/A studies on one H200 each (2026-12-01, two GPUs), every combination timed in two processes: none
    fails. The forward pairs' only failing finding had been an 11 us PyTorch record, `layer4.1.conv1` bf16 NHWC
    under cudnn.benchmark, 11.1 -> 12.5 us in one side's two processes: a kernel that settles per run at about 11.1
    or 12.4 us (the same call failed across H200s and between two codes on one, 2026-12-07), under the 1.5 us
    absolute floor since; the backward pairs: none (one kernel, backward-data ALGO_1 fp32 NHWC, failed at 1.04x
    until timechange.placements_close)."""
    legs = {name: _study(f"h200-aa2-{name}") for name in ("fwd-1", "fwd-2", "bwd-1", "bwd-2")}
    judged = {name: judgement.judge(sides["A"], sides["B"]) for name, sides in legs.items()}
    assert [len(_failing(judged[n])) for n in ("fwd-1", "fwd-2", "bwd-1", "bwd-2")] == [0, 0, 0, 0]
    a, b = ({r.identity_key(): r for r in legs["fwd-1"][side] if r.case == "resnet50.layer4.1.conv1.n32"
             and r.backend == "torch" and r.dtype == "bf16" and r.layout == "NHWC" and r.settings["benchmark"]
             and not r.settings["deterministic"]} for side in ("A", "B"))
    ((key, base),) = a.items()
    moved_us = abs(b[key].median_ms - base.median_ms) * 1e3
    assert 1.0 < moved_us < 1.5 and abs(b[key].median_ms / base.median_ms - 1) > 0.10, moved_us
    assert not [f for f in judged["fwd-1"]["findings"] if f.kind == "time" and f.key == key]
    # the backward kernel that failed (1.04x) until placements apart by less than half their spread were vetoed;
    # its DEFAULT and TENSOR_OP_ALLOW_CONVERSION twins moved as much, with placements overlapping
    alike = {f.math: f for f in judged["bwd-1"]["findings"] if f.kind == "time" and f.algo == "ALGO_1"
             and f.case == "resnet50.layer4.0.downsample.n32" and f.dtype == "fp32" and f.layout == "NHWC"}
    assert sorted(alike) == ["DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION"]
    assert all(f.verdict == "ambiguous" for f in alike.values())
    assert "placements are only 0.1 µs apart where one side's spread 2.1 µs" in alike["TENSOR_OP"].evidence
    assert "placements overlap" in alike["DEFAULT"].evidence
    for name, j in judged.items():
        assert "bits:change" not in j["counts"] and all(f.kind == "time" for f in _failing(j)), name
    # every timed cuDNN record holds both processes' medians; PyTorch's in the second study of each direction
    for name, sides in legs.items():
        timed = [r for r in sides["A"] if r.status == "ok" and r.median_ms]
        for backend in ("cudnn", "torch"):
            mine = [r for r in timed if r.backend == backend]
            two = sum(len(r.extra.get("process_medians_ms") or ()) == 2 for r in mine)
            before = backend == "torch" and name.endswith("-1")  # the first two studies timed PyTorch in one
            assert two == (0 if before else len(mine)), (name, backend, two)


def test_a_call_whose_processes_disagree_is_ambiguous_with_their_levels():
    """`resnet50.layer4.1.conv1.n32` GEMM TENSOR_OP fp32 NCHW ran 351.5 and 333.2 us in the two processes of one
    side (2026-12-01): the other side's 1.04x is within them, so it is ambiguous, not an improvement."""
    judged = judgement.judge(*_study("h200-aa2-fwd-1").values())
    (f,) = [f for f in judged["findings"] if f.case == "resnet50.layer4.1.conv1.n32" and f.algo == "GEMM"
            and f.math == "TENSOR_OP" and f.dtype == "fp32"]
    assert f.verdict == "ambiguous" and "between two processes of one run (351.5 and 333.2 µs)" in f.evidence


def test_aa_pairs_after_the_capped_batch_discard_fail_on_nothing():
    """The A/A studies of 2026-12-01 06:57 and 08:11 UTC (GPU-8d5d7508, GPU-76e4cfee; suite c0ac270: two processes, capped
    batches discarded): the forward default catalogue and the six backward cases, 0 failing findings each; the
    backward outputs that differ are all documented non-deterministic algorithms."""
    for name, both in (("fwd", 2788), ("bwd", 1184)):
        judged = judgement.judge(*_study(f"h200-aa3-{name}").values())
        assert _failing(judged) == [], name
        assert judged["counts"].get("time:same", 0) + judged["counts"].get("time:ambiguous", 0) == both, name
        assert "bits:change" not in judged["counts"], name


def test_two_gpu_aa_studies_in_two_processes_on_one_host():
    """Both H200s of one host (GPU-abd0dca1 and GPU-c77e9498, 2026-12-01 09:40-09:50 UTC, suite e7da2a3), each
    running both sides ABBA: the forward default catalogue timed in two processes fails the gate on nothing on
    either GPU (one 1.06x 'faster' before placements_close: the multi-level GEMM, both processes of each side on
    one level); the six
    backward cases, timed in one process as a backward sweep is by default, fail on 0 and 2 (4-5 %, one
    process a side: docs/performance.md); a third, backward-filter ALGO_0 at 1.04x, is ambiguous: its two
    sides' placements overlap. No bits, accuracy, status or determinism regression anywhere."""
    fwd, bwd = _legs("h200x2-aa2-fwd"), _legs("h200x2-aa2-bwd")
    assert sorted(fwd) == sorted(bwd) == ["0", "1"]
    fwd_j = {g: judgement.judge(s["A"], s["B"]) for g, s in fwd.items()}
    bwd_j = {g: judgement.judge(s["A"], s["B"]) for g, s in bwd.items()}
    assert [[f.verdict for f in _failing(fwd_j[g])] for g in ("0", "1")] == [[], []]
    # the multi-level GEMM failed as 1.06x faster until placements apart by less than half their spread were vetoed
    (gemm,) = [f for f in fwd_j["1"]["findings"] if f.kind == "time" and f.case == "resnet50.layer3.0.conv2.n32"
               and f.algo == "GEMM" and f.math == "TENSOR_OP" and f.dtype == "fp16" and f.layout == "NCHW"]
    assert gemm.verdict == "ambiguous" and "only 4.0 µs apart where one side's spread 21.1 µs" in gemm.evidence
    assert [len(_failing(bwd_j[g])) for g in ("0", "1")] == [2, 0]
    assert {(f.backend, f.direction, f.algo, f.math) for f in _failing(bwd_j["0"])} == {
        ("torch", "bwd_data", "auto", "TF32")}
    (atomics,) = [f for f in bwd_j["0"]["findings"] if f.kind == "time" and f.algo == "ALGO_0"
                  and f.case == "resnet50.layer3.0.conv1.n32" and f.math == "TENSOR_OP_ALLOW_CONVERSION"]
    assert atomics.verdict == "ambiguous" and "placements overlap" in atomics.evidence
    assert all(f.verdict == "regression" and f.ratio < 1.05 for f in _failing(bwd_j["0"]))
    for j in (*fwd_j.values(), *bwd_j.values()):
        assert j["both_ok"] in (2788, 1184) and "bits:change" not in j["counts"]
        assert not any(f.verdict == "regression" and f.kind != "time" for f in j["findings"])
    # the forward records carry both processes' medians, the backward ones one process's
    assert all(len(r.extra.get("process_medians_ms") or ()) == 2
               for r in fwd["0"]["A"] if r.status == "ok" and r.median_ms and r.backend == "cudnn")
    assert not any(r.extra.get("process_medians_ms") for r in bwd["0"]["A"])


def test_two_gpus_of_one_host_are_two_machines_and_differ_on_one_kernel(tmp_path, capsys):
    """The forward A side of each GPU of that host, compared: two machines (GPU UUIDs) under one machine name, so
    reported, not gated; gated on request, GPU-c77e9498 is 10 % slower on resnet50.layer3.0.downsample fp32 NHWC
    (29.2-29.4 us in all four processes on GPU-abd0dca1, 32.2-32.5 us in all four on GPU-c77e9498): a real
    difference between two boards of one model, not noise."""
    import tarfile
    with tarfile.open(FIXTURES / "h200x2-aa2-fwd.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    runs = sorted(p.parent for p in tmp_path.rglob("run.json"))
    gpu = {p: json.loads((p / "run.json").read_text())["fingerprint"]["gpu"]["uuid"][:12] for p in runs}
    first = {g: next(p for p in runs if gpu[p] == g) for g in sorted(set(gpu.values()))}
    base, head = first["GPU-abd0dca1"], first["GPU-c77e9498"]
    assert cli.main(["compare", str(base), str(head)]) == 0
    out = capsys.readouterr().out
    assert "different machines" in out and "reported, not gated" in out and "gpu.uuid" in out
    assert cli.main(["compare", str(base), str(head), "--across-hardware", "--json"]) == 1
    failing = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["verdict"] == "regression"]
    assert failing and {(f["case"], f["dtype"], f["layout"]) for f in failing} == {
        ("resnet50.layer3.0.downsample.n32", "fp32", "NHWC")}
    assert all(1.09 < f["ratio"] < 1.12 for f in failing)


def test_backward_aa_timed_in_two_processes_reads_their_levels():
    """The six backward cases timed in two processes (`--processes 2`, GPU-285623c9, 2026-12-01 10:12 UTC, suite
    463a0ef): 0 failing; four 1.04-1.05x differences, each within the 4.7-6.6 % between the two processes of one
    side, are ambiguous instead of slower or faster, levels that a one-process backward run cannot see."""
    judged = judgement.judge(*_study("h200-aa4-bwd").values())
    assert _failing(judged) == [] and judged["both_ok"] == 1184
    levels = [f for f in judged["findings"] if f.verdict == "ambiguous" and "between two processes" in f.evidence]
    assert len(levels) == 4 and all(1.035 < max(f.ratio, 1 / f.ratio) < 1.06 for f in levels)
    assert "bits:change" not in judged["counts"]


def test_split_placements_aa_studies_on_one_h200():
    """The two A/A studies of 2026-12-01 12:22-12:32 UTC (GPU-f481d672, suite 6990ed9 + the split of placements
    and sampling floor between a run's two processes): the forward default catalogue in two processes, 0 failing
    of 2,788 (3 ambiguous, all within the gap between two processes of one side); the six backward cases in
    one process (the backward default), 3 failing: `seed.c4` backward-data FFT_TILING fp16 NCHW at 1.04-1.05x
    under three math types, 13 samples a side, the seed cases' per-process FFT_TILING levels (issue 13), which
    one process a side cannot show."""
    fwd = judgement.judge(*_study("h200-aa5-fwd").values())
    assert fwd["both_ok"] == 2788 and _failing(fwd) == []
    ambiguous = [f for f in fwd["findings"] if f.verdict == "ambiguous"]
    assert len(ambiguous) == 3 and all("between two processes" in f.evidence for f in ambiguous)
    bwd = judgement.judge(*_study("h200-aa5-bwd").values())
    assert bwd["both_ok"] == 1184
    assert {(f.case, f.direction, f.algo, f.dtype, f.layout) for f in _failing(bwd)} == {
        ("seed.c4", "bwd_data", "FFT_TILING", "fp16", "NCHW")}
    assert len(_failing(bwd)) == 3 and all(f.verdict == "regression" and f.ratio < 1.05 for f in _failing(bwd))
    # forward: every timed cuDNN record was timed on 3 + 2 placements in its two processes
    sides = _study("h200-aa5-fwd")
    timed = [r for r in sides["A"] if r.status == "ok" and r.median_ms and r.backend == "cudnn"]
    assert timed and all(len(r.extra["placement_medians_ms"]) == 5 for r in timed)
    assert all(len(r.extra["process_medians_ms"]) == 2 for r in timed)


def test_backward_aa_with_the_cheaper_sweep():
    """The six backward cases in one process (the backward default) with the cheaper sweep of 2026-12-01 15:25 UTC
    (GPU-5ce6c12e, suite f75775d: repeats of documented non-deterministic algorithms within their budget, every
    placement's first call as the warm-up): 0 failing, 3 ambiguous (two placements overlapping, one wide pair of
    one process a side); every output that changed is a documented non-deterministic algorithm's, and the only
    determinism changes are one such algorithm found stable in one run."""
    judged = judgement.judge(*_study("h200-aa6-bwd").values())
    assert judged["both_ok"] == 1184 and _failing(judged) == []
    ambiguous = [f for f in judged["findings"] if f.verdict == "ambiguous"]
    assert len(ambiguous) == 3 and all(1.04 < max(f.ratio, 1 / f.ratio) < 1.05 for f in ambiguous)
    assert "bits:change" not in judged["counts"] and judged["counts"]["expected bits:change"] == 161
    det = [f for f in judged["findings"] if f.kind == "determinism" and f.verdict == "change"
           and "now bitwise equal" in f.evidence]
    assert len(det) == 2 and all("documented as non-deterministic" in f.evidence for f in det)


def test_two_process_aa_pairs_of_the_evening_fail_on_nothing():
    """A lent H200 (GPU-01b22bfe, 2026-12-01 17:23 UTC, suite 9e5ccb3) and another (GPU-167d2dfc, 17:31 and
    17:36): the six backward cases timed in two processes a side, twice, and the forward default catalogue once.
    Each backward pair failed on one finding (both 1.04-1.05x, every placement of one side beyond every one of
    the other's, but by less than half one side's own placement spread) until timechange.placements_close; now
    none fails. PyTorch's backward is timed as aten.convolution_backward alone since this suite: every record of
    both backends holds two processes' medians."""
    judged = {name: judgement.judge(*_study(name).values()) for name in ("h200-aa7-bwd", "h200-aa8-fwd", "h200-aa8-bwd")}
    assert [(j["both_ok"], len(_failing(j))) for j in judged.values()] == [(1184, 0), (2788, 0), (1184, 0)]
    close = {name: [f for f in j["findings"] if f.kind == "time" and "placements are only" in f.evidence]
             for name, j in judged.items()}
    assert {(f.case, f.algo, f.math) for f in close["h200-aa7-bwd"]} == {
        ("resnet50.layer4.0.downsample.n32", "ALGO_1", "DEFAULT"), ("resnet50.layer4.0.downsample.n32", "ALGO_1", "TENSOR_OP")}
    (seed,) = [f for f in close["h200-aa8-bwd"] if f.case == "seed.c4"]
    assert (seed.algo, seed.math, seed.dtype) == ("FFT_TILING", "TENSOR_OP", "fp16")
    assert "18.6 µs apart where one side's spread 110.9 µs" in seed.evidence
    for name in ("h200-aa7-bwd", "h200-aa8-bwd"):
        timed = [r for r in _study(name)["A"] if r.status == "ok" and r.median_ms]
        assert {r.backend for r in timed} == {"cudnn", "torch"}
        assert all(len(r.extra.get("process_medians_ms") or ()) == 2 for r in timed), name
        assert "bits:change" not in judged[name]["counts"]

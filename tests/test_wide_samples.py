"""Samples that are only `wide` judged on their placements (timechange.placements_apart), on the real H200 records:
the device-injected slowdowns it must detect and the A/A pairs it must leave alone (docs/evidence/
2026-12-01-session12-gate.md)."""

import itertools
import json
import lzma
import sys
from pathlib import Path

import pytest

from harness.analysis import paired_judgement as judgement
from harness.analysis.compare import compare_runs
from harness.analysis.timechange import Thresholds, placements_apart, time_verdict, untrusted
from harness.collect.ingest import read_runs_into
from harness.collect.store import Store
from harness.core.records import Record, Timing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import detection_power  # noqa: E402

EVIDENCE = ROOT / "docs" / "evidence"
RUNS = ROOT / "tests" / "fixtures" / "runs"


def _parts(session: str) -> list[dict]:
    return [json.loads(lzma.decompress((EVIDENCE / session / f"power-gpu0-part{i}.json.xz").read_bytes()))
            for i in (1, 2)]


@pytest.fixture(scope="module")
def split_study():
    """The detection-power study of 2026-12-01 12:20 UTC (GPU-f481d672): every placement's median recorded."""
    return _parts("2026-12-01-h200-session11")


def _detected(summary: dict, band: str) -> tuple[int, int]:
    return summary[band]["detected"], summary[band]["calls"]


def test_ten_percent_on_20_50us_calls_is_detected_where_placements_are_recorded(split_study):
    """Before the rule 36 of 43: seven fp32 IMPLICIT_PRECOMP_GEMM calls at 1.09-1.11x vetoed as `wide` although
    each side's five placements sat within 1 % and every head placement above every base one. +5 % on >= 50 us:
    310 of 316 before placements apart by less than half their spread were vetoed (timechange.placements_close),
    307 with that veto, 310 again since a change that moved every placement past the threshold, placement by
    placement, is not vetoed (timechange.placements_moved)."""
    summary = detection_power.judge(split_study)["summary"]
    assert _detected(summary, "20-50us +10%") == (43, 43)
    assert _detected(summary, "50-infus +5%") == (310, 316)
    assert summary["aa_false_alarms"]["regressions"] == summary["aa_false_alarms"]["improvements"] == 0


def test_a_study_without_placements_is_judged_as_before():
    """The 03:59 UTC study (another H200) recorded process medians only: nothing for the rule to read."""
    summary = detection_power.judge(_parts("2026-12-01-h200-session8"))["summary"]
    assert _detected(summary, "20-50us +10%") == (40, 44)
    assert _detected(summary, "50-infus +5%") == (306, 315)


def test_a_wide_base_is_decided_on_its_placements(split_study):
    """resnet50.layer3.0.conv2 IMPLICIT_PRECOMP_GEMM fp32 NHWC, base samples wide, +10 % injected on the device:
    placements 31.1-31.3 us against 33.8-34.3 us (2.54 us apart, spread 0.53 us), two processes a side."""
    calls = split_study[0]["calls"]
    (i,) = [i for i, c in enumerate(calls) if (c["case"], c["algo"], c["math"], c["dtype"], c["layout"]) == (
        "resnet50.layer3.0.conv2.n32", "IMPLICIT_PRECOMP_GEMM", "DEFAULT", "fp32", "NHWC")]

    def record(name: str) -> Record:
        return detection_power.as_record([Timing(**p["passes"][name][i]) for p in split_study],
                                         [p["placements"][name][i] for p in split_study])

    base, head = record("base"), record("plus10")
    assert untrusted(base) == ["wide"] and not untrusted(head)
    verdict, evidence, nums = time_verdict(base, head, Thresholds())
    assert verdict == "regression" and "samples are base wide, decided on the placements" in evidence
    assert nums["p"] == pytest.approx(1 / 252)  # five placements a side, all apart
    gap, spread, _ = placements_apart(base, head, True, 0.01)
    assert (round(gap * 1e3, 2), round(spread * 1e3, 2)) == (2.54, 0.53)


def _study(name: str) -> dict[str, list[Record]]:
    store = Store(":memory:")
    read_runs_into(store, [RUNS / f"{name}.tar.gz"])
    return {store.run_json(r["id"])["options"]["paired"]["role"]: store.records(r["id"]) for r in store.runs()}


def test_one_process_a_side_stays_vetoed():
    """The backward A/A of 08:11 UTC, one process a side: a 17 us backward-filter ALGO_1 at 1.11x faster whose
    placements sit apart by 1.6x their spread, all of them in one process's level. Decided on the placements it
    would fail an A/A pair; it stays ambiguous."""
    sides = _study("h200-aa3-bwd")
    key = "resnet50.layer3.0.conv1.n32|cudnn|bwd_filter|ALGO_1|TENSOR_OP_ALLOW_CONVERSION|fp16|NHWC|"
    base, head = ({r.identity_key(): r for r in sides[role]}[key] for role in ("A", "B"))
    assert len(base.extra["placement_medians_ms"]) == 5 and not base.extra.get("process_medians_ms")
    verdict, evidence, _ = time_verdict(base, head, Thresholds())
    assert verdict == "ambiguous" and "head wide" in evidence
    assert not [f for f in judgement.judge(sides["A"], sides["B"])["findings"] if f.verdict in ("regression",
                                                                                            "improvement")]


def test_no_wide_pair_of_eight_nights_has_its_placements_apart():
    """Eight forward nights of one stack (GPU-990e118d, 2026-12-01 09:53-09:59 UTC), two processes and ten
    placements a side, all 28 pairs: of the record pairs whose samples are only `wide`, none has its placements
    apart by more than their spread (a rank test on placements alone would call seed.c8 FFT_TILING TENSOR_OP
    fp32 1.07x slower, nights 0 -> 3: placements 2,282-2,338 us against 2,400-2,631 us)."""
    store = Store(":memory:")
    read_runs_into(store, [RUNS / "h200x2-repeat8-fwd.tar.gz"])
    nights = [{r.identity_key(): r for r in store.records(run["id"]) if r.status == "ok" and r.median_ms}
              for run in sorted(store.runs(), key=lambda r: r["started"])]
    wide = apart = 0
    for a, b in itertools.combinations(nights, 2):
        for key in a.keys() & b.keys():
            if set(untrusted(a[key])) | set(untrusted(b[key])) == {"wide"}:
                wide += 1
                apart += placements_apart(a[key], b[key], b[key].median_ms > a[key].median_ms, 0.01) is not None
    assert wide == 825 and apart == 0
    seed = "seed.c8|cudnn|fwd|FFT_TILING|TENSOR_OP|fp32|NCHW|"
    (f,) = [f for f in compare_runs(store.records(sorted(store.runs(), key=lambda r: r["started"])[0]["id"]),
                                       store.records(sorted(store.runs(), key=lambda r: r["started"])[3]["id"]))
            if f.key == seed and f.kind == "time"]
    assert f.verdict == "ambiguous" and "placements are only 62.1 µs apart where one side's spread 230.6 µs" in f.evidence


@pytest.mark.parametrize("study", ["power-1", "power-2"])
def test_five_percent_is_detected_on_the_h100_where_placements_moved_one_by_one(study):
    """Two studies on an H100 (GPU-52b62785, 2026-12-07): +5 % on >= 50 us was 304 and 305 of 321 with the
    overlap and close vetoes alone (GEMM calls whose placements spread as much as the change); each is 310 with
    the placements compared one by one, and the A/A pass of each study still fails nothing."""
    summary = detection_power.judge(_parts(f"2026-12-07-h100-bwd/{study}"))["summary"]
    assert _detected(summary, "50-infus +5%") == (310, 321)
    assert summary["aa_false_alarms"]["regressions"] == summary["aa_false_alarms"]["improvements"] == 0

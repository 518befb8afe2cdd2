"""compare names how fast each side's host enqueued its calls, and the runs it left out: a night can get slower on
a slower host with no finding, and a pass on the GPUs in common says nothing of a GPU the other side lacks.
Read on real runs: two forward nights of one H100 (2026-12-07), the same catalogue on an H200 (2026-11-30)."""

import tarfile
from pathlib import Path

from harness.analysis.host import dispatch_note, dispatch_ratio
from harness.cli import main
from harness.collect.ingest import read_runs_into
from harness.collect.store import Store

RUNS = Path(__file__).parent / "fixtures" / "runs"


def _records(tar: str) -> list:
    store = Store(":memory:")
    read_runs_into(store, [RUNS / tar])
    runs = sorted((r for r in store.runs() if "-native-" in r["run_id"]), key=lambda r: r["started"])
    return [store.records(r["id"]) for r in runs]


def test_the_host_ratio_is_near_one_on_one_host_and_named_where_the_host_moved():
    first, second = _records("h100-nights-fwd.tar.xz")
    (h200,) = _records("h200-fwd-asv-s5.tar.gz")
    ratio, n = dispatch_ratio(first, second)
    assert n == 2788 and 0.9 < ratio < 1.1  # one host, two nights back to back
    assert "enqueued" not in dispatch_note(first, second)
    ratio, n = dispatch_ratio(h200, second)
    assert n == 2788 and ratio > 1.5  # that H200's host dispatched about twice as fast as this H100's
    assert "more slowly: the job's wall time moves with it" in dispatch_note(h200, second)
    assert dispatch_ratio(first, []) is None


def test_compare_says_which_runs_it_left_out_and_the_host_ratio(tmp_path, capsys):
    with tarfile.open(RUNS / "h100-nights-fwd.tar.xz") as tar:
        tar.extractall(tmp_path / "nights", filter="data")
    first, second = sorted((tmp_path / "nights" / "h200-lent-gpu0").iterdir())
    base, head = tmp_path / "base" / "h200-lent-gpu0", tmp_path / "head" / "h200-lent-gpu0"
    base.mkdir(parents=True), head.mkdir(parents=True)
    first.rename(base / first.name), second.rename(head / second.name)
    with tarfile.open(RUNS / "h200-fwd-asv-s5.tar.gz") as tar:  # HEAD also holds a run of another GPU
        tar.extractall(tmp_path / "head", filter="data",
                       members=[m for m in tar.getmembers() if m.name.startswith("h200-lent-gpu0/")])
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "head")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare: ")]
    assert any(line.startswith("compare: not compared: HEAD's h200-lent-gpu0 [NVIDIA H200]") and
               "20261130T175326Z-native-500cf7302dff-488: BASE has no run of its GPU" in line for line in notes)
    assert any(line.startswith("compare: host dispatch: head/base 0.9") for line in notes)


def test_two_gpus_nights_are_compared_though_one_side_holds_its_asv_results(tmp_path, capsys):
    """A night's tarball holds asv's results beside its run: they are a second view of that run, paired only with
    asv results, so they neither stop one GPU's night from being compared with another GPU's (one machine a side,
    none in common) nor pass for a machine of their own."""
    with tarfile.open(RUNS / "h100-nights-fwd.tar.xz") as tar:
        tar.extractall(tmp_path / "nights", filter="data")
    first = sorted((tmp_path / "nights" / "h200-lent-gpu0").iterdir())[0]
    base = tmp_path / "base" / "h200-lent-gpu0"
    base.mkdir(parents=True)
    first.rename(base / first.name)
    head = RUNS / "h200-fwd-asv-s5.tar.gz"  # an H200's night and asv's results of it
    with tarfile.open(head) as tar:
        assert any(m.name.startswith("asv-results/") for m in tar.getmembers())
    assert main(["compare", str(tmp_path / "base"), str(head)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare: ")]
    assert any("different machines (" in line and "reported, not gated" in line for line in notes)
    assert any(line.startswith("compare: not compared: HEAD's ") and line.endswith(
        "BASE has no asv results of its machine") for line in notes)
    assert main(["compare", "--across-hardware", str(tmp_path / "base"), str(head)]) == 1  # an H100 is not an H200

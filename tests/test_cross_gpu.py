"""scripts/cross_gpu.py on real runs: the forward run of one H200 (GPU-0ed08643, docs/evidence/2026-12-07-h200)
judged as one machine against committed runs of other H200s. Against a run timed on five placements in two
processes the gate fails nothing; against the one-placement run of 2026-11-30 it fails the layer4.0.conv1 GEMM
family, whose single draw sat below every placement of the head."""

from pathlib import Path

from _scripts import load

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "docs/evidence/2026-12-07-h200/new-fwd-run.tar.xz"
RUNS = ROOT / "tests/fixtures/runs"


def _script():
    return load("cross_gpu")


def _rows(out: str) -> dict[str, int]:
    """Base run id -> failing findings, from the script's table."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[1].startswith("2026") and parts[-2].isdigit():
            rows[parts[1]] = int(parts[-2])
    return rows


def test_placed_runs_of_other_h200s_fail_nothing_and_the_one_placement_run_fails_its_family(capsys):
    assert _script().main([str(HEAD), str(RUNS / "h200-aa8-fwd.tar.gz"), str(RUNS / "h200-fwd-asv-s5.tar.gz")]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert len(rows) == 3, out
    placed = {k: v for k, v in rows.items() if "9e5ccb3" in k}
    assert len(placed) == 2 and set(placed.values()) == {0}, out
    (single,) = [v for k, v in rows.items() if "500cf73" in k]
    assert single == 7, out
    assert "with placements: 2 base runs, 2 with 0 failing, 0 failing findings in all" in out
    assert "without placements: 1 base runs, 0 with 0 failing, 7 failing findings in all" in out


def test_a_head_that_is_not_one_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert _script().main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not one" in err


def test_failing_lists_each_failing_finding_under_its_base_run(capsys):
    assert _script().main(["--failing", str(HEAD), str(RUNS / "h200-fwd-asv-s5.tar.gz")]) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [i for i, line in enumerate(lines) if "500cf73" in line]
    listed = [line for line in lines[row + 1:] if line.startswith("    ")]
    assert len(listed) == 7 == _rows("\n".join(lines))[lines[row].split()[1]], lines
    assert all(line.split()[0] == "time" and " -> " in line and "slower" in line for line in listed), listed
    assert sum("resnet50.layer4.0.conv1.n32 cudnn fwd GEMM" in line for line in listed) >= 6, listed

"""scripts/run_hashes.py on committed runs: an A/A pair of one H200 gives every stable hash equal; a cuDNN upgrade's
run against the stack it replaced names the combinations whose bits changed; a path that is not the runs asked for
is one line and exit 2."""

from pathlib import Path

from _scripts import load

RUNS = Path(__file__).parent / "fixtures" / "runs"
run_hashes = load("run_hashes")


def test_two_nights_of_one_gpu_have_every_stable_hash_equal(capsys):
    assert run_hashes.main([str(RUNS / "h200-aa2-fwd-1.tar.gz")]) == 0  # its two runs, one after the other
    out = capsys.readouterr().out
    equal = next(line for line in out.splitlines() if line.endswith(run_hashes.EQUAL))
    assert int(equal.split()[0]) > 2000
    assert f"     0  {run_hashes.DIFFERS}" in out


def test_an_upgrade_lists_the_combinations_whose_bits_changed(capsys):
    base, head = run_hashes.pair([str(RUNS / "h200-upgrade-cudnn927-fwd.tar.gz")])  # cuDNN 9.19, then 9.27
    counts, differing = run_hashes.classify(base, head)
    assert counts[run_hashes.DIFFERS] == len(differing) > 0
    for rec in differing:  # each one stable on both sides, under another hash
        b = base[rec.identity_key()]
        assert run_hashes.one_output(b) and run_hashes.one_output(rec)
        assert b.determinism.hash != rec.determinism.hash


def test_a_path_that_is_not_the_runs_asked_for_is_one_line_and_exit_2(tmp_path, capsys):
    for args in ([str(tmp_path / "missing"), str(RUNS / "h200-aa2-fwd-1.tar.gz")],
                 [str(RUNS / "h200-aa2-fwd-1.tar.gz"), str(RUNS / "h200-aa2-fwd-2.tar.gz")]):  # two runs each
        assert run_hashes.main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("run_hashes: ") and err.count("\n") == 1

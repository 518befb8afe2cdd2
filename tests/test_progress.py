"""Progress of long work: redrawn in place on a terminal, a few milestone lines in a log (core/progress.py)."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from harness.core.progress import Progress, clock_text

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_clock_text():
    assert (clock_text(7), clock_text(750), clock_text(3723)) == ("0:07", "12:30", "1:02:03")


def test_a_log_gets_milestones_and_an_end_not_a_line_per_step():
    out, clock = io.StringIO(), Clock()
    p = Progress("sweep", 200, unit="cases", stream=out, clock=clock)
    for _ in range(200):
        clock.t += 1.5
        p.step(1, "seed.c64")
    p.finish("1200 records")
    lines = out.getvalue().splitlines()
    assert lines[-1] == "sweep: 200/200 cases done in 5:00: 1200 records"
    assert len(lines) == 10  # 10% .. 90%, end
    assert lines[0] == "sweep 20/200 (10%), 0:30 elapsed, ETA 4:30: seed.c64"
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_a_terminal_gets_one_line_redrawn_in_place():
    out, clock = io.StringIO(), Clock()
    p = Progress("collect", 4, unit="items", stream=out, tty=True, clock=clock)
    for _ in range(4):
        clock.t += 1.0
        p.step()
    p.finish()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # the one line, ended once at the finish
    assert "\r\x1b[Kcollect 1/4 (25%), 0:01 elapsed, ETA 0:03" in text
    assert "collect 4/4 (100%), 0:04 elapsed" in text


def test_a_terminal_line_is_redrawn_a_few_times_a_second_at_most():
    out, clock = io.StringIO(), Clock()
    p = Progress("sweep", 1000, stream=out, tty=True, clock=clock)
    for _ in range(1000):
        clock.t += 0.001
        p.step()
    assert out.getvalue().count("\r") <= 10


def test_log_lines_do_not_run_into_the_progress_line():
    out = io.StringIO()
    p = Progress("sweep", 3, stream=out, tty=True, clock=Clock())
    p.step()
    p.around(lambda msg: out.write(msg + "\n"))("torch seed.c64: 12 records")
    assert "\r\x1b[Ktorch seed.c64: 12 records\n\r\x1b[Ksweep 1/3" in out.getvalue()


def test_asv_percentages():
    out, clock = io.StringIO(), Clock()
    with Progress("asv", 100, unit="%", stream=out, clock=clock) as p:
        clock.t = 10
        p.update(50, "bench_torch.TorchForward.time_conv")
    lines = out.getvalue().splitlines()
    assert lines == ["asv 50%, 0:10 elapsed, ETA 0:10: bench_torch.TorchForward.time_conv", "asv: done in 0:10"]


def test_short_work_in_a_log_says_nothing():
    out, clock = io.StringIO(), Clock()
    with Progress("collect", 3, stream=out, clock=clock) as p:
        for _ in range(3):
            clock.t += 0.5
            p.step()
    assert out.getvalue() == ""  # an error's one line, or a small collect's summary, stays alone


def test_disabled_says_nothing():
    out = io.StringIO()
    with Progress("report", 3, stream=out, enabled=False) as p:
        p.step(3)
    assert out.getvalue() == ""


def _runs(tmp_path: Path, n: int) -> Path:
    """A folder of n small fixture tarballs."""
    import shutil

    small = ("h200-ort.tar.gz", "h200-autotune.tar.gz")
    (tmp_path / "results").mkdir()
    for name in small[:n]:
        shutil.copy(ROOT / "tests" / "fixtures" / "runs" / name, tmp_path / "results" / name)
    return tmp_path / "results"


def test_collect_in_a_log_says_milestones(tmp_path, capsys, monkeypatch):
    from harness.cli import main
    from harness.core import progress

    monkeypatch.setattr(progress, "QUIET_S", 0.0)  # as if the collect were long
    results = _runs(tmp_path, 2)
    assert main(["collect", str(results), "--store", str(tmp_path / "s.sqlite")]) == 0
    err = capsys.readouterr().err
    assert "collect 1/2 (50%)" in err and "collect: 2/2 items done in" in err, err
    assert "\r" not in err


def test_collect_on_a_terminal_redraws(tmp_path):
    results = _runs(tmp_path, 2)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "collect", str(results), "--store",
                             str(tmp_path / "s.sqlite")], stdout=subprocess.PIPE, stderr=follower, cwd=ROOT)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty's other end closed
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=300)
    os.close(leader)
    assert b"\r\x1b[Kcollect 2/2 (100%)" in seen, seen

"""Bad input at the command line: a clear message, a non-zero exit code, never a traceback.

Complements test_cli.py (unknown case with a hint, bad dtype, --resume of a non-run, GPU-only command without a
GPU), test_images.py (bad matrix rows and files) and test_hostrun.py (no Docker engine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd or ROOT)


@pytest.mark.parametrize("args, code, text", [
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    (["sweep", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["sweep", "--backends", "nope"], 2, "unknown backend nope"),
    (["sweep", "--directions", "sideways"], 2, "unknown direction sideways"),
    (["sweep", "--layouts", "NCWH"], 2, "unknown layout NCWH"),
    (["sweep", "--budget-ms", "-1"], 2, "--budget-ms > 0"),
    (["sweep", "--repeats", "-3"], 2, "--repeats must be >= 0"),
    (["sweep", "--timeout", "0"], 2, "--timeout must be > 0"),
    (["sweep", "--timeout", "soon"], 2, "invalid float value: 'soon'"),
    (["sweep", "--cases", ","], 2, "selects no case"),
    (["sweep", "--cases", "quick.nosuch"], 2, "unknown case 'quick.nosuch'"),
    (["sweep", "--resume", "/etc"], 2, "not a run directory"),
    (["cases", "nosuch"], 2, "unknown case 'nosuch'"),
    (["compare", "a", "b", "--store", "/nonexistent/s.sqlite"], 2, "no store at /nonexistent/s.sqlite"),
    (["report", "--store", "/nonexistent/s.sqlite"], 2, "no store at /nonexistent/s.sqlite"),
    (["images", "build", "no-such-row"], 2, "unknown row no-such-row"),
    (["collect", "/nonexistent/results", "--store", "{tmp}/s.sqlite"], 2, "/nonexistent/results: does not exist"),
    (["run", "--no-docker", "--cases", "nosuch", "--results", "{tmp}/r"], 2, "unknown case 'nosuch'"),
    (["bench", "--cases", "nosuch", "--results", "{tmp}/r"], 2, "unknown case 'nosuch'"),
    (["sweep", "--cases", "quick.seed", "--results", "/sys/convbench-unwritable"], 3, "cannot be created"),
])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(tmp_path, args, code, text):
    res = _cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert res.returncode == code, res.stderr
    assert text in res.stderr and "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if "error" in line or line.startswith("refused")]
    assert len(errors) == 1, res.stderr  # argparse adds its usage line above; the error itself is one line
    assert not (tmp_path / "s.sqlite").exists() and not (tmp_path / "r").exists()  # refused: nothing left behind


def test_store_that_is_not_a_store_is_refused(tmp_path):
    bogus = tmp_path / "s.sqlite"
    bogus.write_bytes(b"this is not SQLite" * 100)
    for args in (["report", "--store", str(bogus)], ["collect", str(tmp_path), "--store", str(bogus)]):
        res = _cli(*args)
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
        assert "not a usable SQLite store" in res.stderr or "not a convbench store" in res.stderr, res.stderr

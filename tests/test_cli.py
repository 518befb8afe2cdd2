"""The command line as a user meets it: help, clear one-line errors, exit codes."""

import subprocess
import sys

import pytest

from harness.cli import main


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_python_m_convbench_is_the_command():
    res = subprocess.run([sys.executable, "-m", "convbench", "--help"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "the usual night" in res.stdout, res.stderr


def test_help_lists_subcommands():
    out = _cli("--help").stdout
    for cmd in ("doctor", "cases", "sweep", "bench", "autotune", "repro"):
        assert cmd in out


@pytest.mark.parametrize("args, code, text", [
    (["sweep", "--cases", "seed.c46"], 2, "did you mean"),
    (["sweep", "--dtypes", "fp8"], 2, "unknown dtype fp8"),
    (["sweep", "--resume", "/nonexistent"], 2, "not a run directory"),
    (["repro", "/nonexistent"], 2, "not a run directory"),
])
def test_bad_input_gets_one_line_and_an_exit_code(args, code, text):
    res = _cli(*args)
    assert res.returncode == code
    assert text in res.stderr and "Traceback" not in res.stderr


def test_gpu_only_command_without_gpu_says_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    res = _cli("autotune", "--cases", "quick")
    assert res.returncode == 3 and "needs a CUDA GPU" in res.stderr and len(res.stderr.splitlines()) == 1


def test_doctor_reports_backends(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "backend cudnn" in out and "backend torch  can run" in out


def test_cases_lists_sets(capsys):
    assert main(["cases"]) == 0
    out = capsys.readouterr().out
    assert "seed.c64" in out and "set default" in out

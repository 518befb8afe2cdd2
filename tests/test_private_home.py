"""The suite writes nothing into the user's home: HOME is a folder of the test run's own for the test processes and
everything they start (tests/conftest.py), so asv's machine file and pip's and Chromium's caches land there."""

import os
import pwd
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()


def test_the_tests_home_is_a_folder_of_their_own():
    home = Path(os.environ["HOME"]).resolve()
    assert home != REAL_HOME and REAL_HOME not in home.parents, home
    assert home.name.startswith("convbench-test-home-") and Path.home().resolve() == home


def test_asv_run_by_a_test_writes_its_machine_into_the_tests_home_only():
    """`asv machine --yes`, as the bench path runs it, in a child that inherits the test's environment."""
    probe = f"convbench-home-probe-{os.getpid()}"
    real_file = REAL_HOME / ".asv-machine.json"
    res = subprocess.run([sys.executable, "-m", "asv", "machine", "--yes", "--machine", probe], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert probe in (Path(os.environ["HOME"]) / ".asv-machine.json").read_text()
    assert not real_file.exists() or probe not in real_file.read_text()

"""The package stands on its own: the built wheel carries what the commands need and finds it without a checkout;
the sdist holds a tree whose tests run. Built from this checkout with pip, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from harness.deploy import resources

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _pip(*args, cwd=ROOT):
    res = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not (ROOT / ".git").exists():
        pytest.skip("the suite revision is read from git at build time: needs a git checkout")
    out = tmp_path_factory.mktemp("dist")
    _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(ROOT))
    (whl,) = out.glob("convbench-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """The wheel installed on its own (not editable), and a working folder inside an unrelated git repository."""
    site = tmp_path_factory.mktemp("site")
    _pip("install", "--quiet", "--no-deps", "--target", str(site), str(wheel))
    user = tmp_path_factory.mktemp("user-project")
    subprocess.run(["git", "init", "--quiet"], cwd=user, check=True)
    subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@u", "commit", "--quiet", "--allow-empty", "-m",
                    "a user's project"], cwd=user, check=True)
    return site, user


def _convbench(installed, *args, timeout=600, module="harness.cli", **extra_env):
    site, user = installed
    env = {k: v for k, v in os.environ.items() if k not in ("CONVBENCH_REVISION", "PYTHONPATH")}
    env.update(PYTHONPATH=str(site), HOME=str(user), CONVBENCH_CACHE=str(user / ".cache"), **extra_env)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=user, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_wheel_carries_the_suite_matrix_revision_and_license_but_no_test_helpers(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        baked = z.read("harness/_shipped/REVISION").decode().split()
    for path in ("harness/_shipped/docker/matrix.toml", "harness/_shipped/docker/Dockerfile.j2",
                 "harness/_shipped/docker/locks/cpu.txt", "harness/_shipped/docker/fleet/k8s-cronjob.yaml.j2",
                 "harness/_shipped/asv.conf.json", "harness/_shipped/benchmarks/bench_ort.py",
                 "harness/data/sample_images.npz", "harness/asvplugin.py", "convbench/__main__.py"):
        assert path in names, path
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not [n for n in names if "faulty" in n or n.startswith("tests/")]
    assert "License-Expression: Apache-2.0" in meta
    assert baked[0] == resources.git_revision(ROOT) and int(baked[1]) > 1_700_000_000


def test_installed_wheel_finds_its_files_and_its_own_revision(installed):
    site, _ = installed
    res = _convbench(installed, "--version")
    assert res.returncode == 0, res.stderr
    # the revision it was built from, not the HEAD of the user's repository it runs in
    assert res.stdout.strip() == f"convbench 0.1.0 (suite revision {resources.git_revision(ROOT)})"
    res = _convbench(installed, "--version", module="convbench")  # `python -m convbench`, from the wheel
    assert res.returncode == 0 and res.stdout.startswith("convbench 0.1.0"), res.stderr
    res = _convbench(installed, "images", "render", "cu130-cudnn919-torch211")
    assert res.returncode == 0 and "FROM convbench/base:bookworm-py311" in res.stdout, res.stderr
    res = _convbench(installed, "images", "render", "--k8s", "cu130-cudnn919-torch211")
    assert res.returncode == 0 and '"bench"' not in res.stderr and "kind: CronJob" in res.stdout, res.stderr
    # without an engine (an image of this very revision may already be built on a host that has one, which
    # `build` then keeps and exits 0): one line and the environment's exit code
    res = _convbench(installed, "images", "build", "cpu", DOCKER_HOST=f"unix://{site}/no-engine.sock")
    assert res.returncode == 3 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, \
        res.stderr


def test_installed_wheel_runs_the_asv_suite_without_a_checkout(installed):
    site, user = installed
    res = _convbench(installed, "bench", "--cases", "quick.seed", "-b", "TorchForward", "--results",
                     str(user / "results"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (run,) = [p for p in (user / "results").glob("*/*") if (p / "run.json").exists()]
    assert '"suite_revision": "' + resources.git_revision(ROOT) in (run / "run.json").read_text().replace(
        '":"', '": "')
    saved = [p for p in (run / "asv" / "results").glob("*/*.json") if p.name != "machine.json"]
    assert len(saved) == 1 and saved[0].name.startswith(resources.git_revision(ROOT)[:8])


def test_sdist_holds_a_tree_whose_tests_run(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    res = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; import sys; "
                          f"print(b.build_sdist({str(tmp_path)!r}))"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    (sdist,) = tmp_path.glob("convbench-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    tree = next(p for p in tmp_path.iterdir() if p.is_dir())
    for path in ("LICENSE", "REVISION", "tests/conftest.py", "tests/faulty_backend.py",
                 "tests/fixtures/runs/cpu-quick.tar.gz", "docker/matrix.toml", "benchmarks/_bridge.py"):
        assert (tree / path).exists(), path
    assert (tree / "REVISION").read_text().split()[0] == resources.git_revision(ROOT)
    env = dict(os.environ, PYTHONPATH=str(tree), CONVBENCH_TEST_BACKENDS="1")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_images.py",
                          "tests/test_records.py", "tests/test_cases.py"], cwd=tree, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0 and " passed" in res.stdout, res.stdout[-3000:]

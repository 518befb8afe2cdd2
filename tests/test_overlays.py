"""Stacks without Docker declared in the image matrix ([[overlay]]): locks, offline install, and `convbench run
--no-docker --stacks` running each stack in its own environment."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.intake import sha256_file
from harness.deploy import imagematrix, stacks, wheels


def test_shipped_overlays_pin_the_required_stacks_and_their_locks_are_fresh():
    m = imagematrix.load_matrix()
    cudnn, ort = m.overlays["cudnn927"], m.overlays["ort1192"]
    assert cudnn.requirements == ["nvidia-cudnn-cu13==9.27.0.42"] and cudnn.stands_in_for == ["cu130-cudnn919-torch211"]
    assert set(ort.requirements) == {"onnxruntime-gpu==1.19.2", "nvidia-cublas-cu12==12.4.5.8",
                                     "nvidia-cufft-cu12==11.2.1.3", "nvidia-curand-cu12==10.3.5.147",
                                     "nvidia-cuda-runtime-cu12==12.4.127"}
    assert ort.stands_in_for == ["cu124-cudnn91-torch25"]
    for ov in (cudnn, ort):
        lock = wheels.overlay_lock(ov)  # present, made from these very pins
        assert {f"{n}=={v}" for n, (v, _) in lock.pins.items()} == {r.lower() for r in ov.requirements}


def _wheel(folder: Path, name: str = "nvidia-fake-cu13", version: str = "1.0.0") -> Path:
    """A real, installable wheel that brings nvidia/fake/lib/libfake.so.9, as the nvidia-* wheels do."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {"nvidia/fake/lib/libfake.so.9": b"\x7fELF stand-in\n",
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}"
              for p, b in files.items()] + [f"{dist}.dist-info/RECORD,,"]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, b in files.items():
            z.writestr(p, b)
    return path


@pytest.fixture
def fake_overlay(tmp_path, monkeypatch):
    """A matrix with one more overlay, its lock (the wheel's sha256) and a wheelhouse holding the wheel."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel = _wheel(house)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(imagematrix.DEFAULT_MATRIX.read_text() + '''
[[overlay]]
name = "fake"
python = "3.12"
glibc = "2.39"
host = "any torch"
requirements = ["nvidia-fake-cu13==1.0.0"]
libraries = ["fake 1.0"]
stands_in_for = ["cpu"]
''')
    locks = tmp_path / "locks"
    locks.mkdir()
    monkeypatch.setattr(imagematrix, "LOCK_DIR", locks)
    ov = imagematrix.load_matrix(matrix).overlays["fake"]
    ov.lock_path().write_text(wheels.Lock(ov.digest(), {"nvidia-fake-cu13": ("1.0.0", sha256_file(wheel))})
                              .text(ov, "the test"))
    monkeypatch.setenv("CONVBENCH_STACKS", str(tmp_path / "stacks"))
    return matrix, house, wheel


def test_install_offline_from_the_wheelhouse_with_hashes(fake_overlay, tmp_path, capsys):
    matrix, house, _ = fake_overlay
    assert main(["stacks", "--matrix", str(matrix), "install", "fake", "--wheelhouse", str(house)]) == 0
    folder = tmp_path / "stacks" / "fake"
    assert (folder / "nvidia" / "fake" / "lib" / "libfake.so.9").is_file()
    manifest = json.loads((folder / stacks.MANIFEST).read_text())
    assert manifest["pins"] == {"nvidia-fake-cu13": "1.0.0"} and manifest["stands_in_for"] == ["cpu"]
    st = stacks.resolve("fake", {"fake": None})
    assert st.library_dirs() == [str(folder / "nvidia" / "fake" / "lib")]
    assert st.env({})["LD_LIBRARY_PATH"] == str(folder / "nvidia" / "fake" / "lib")
    assert main(["stacks", "--matrix", str(matrix), "list"]) == 0
    assert "installed" in capsys.readouterr().out


def test_a_wheel_whose_hash_changed_is_refused_and_nothing_installed(fake_overlay, tmp_path, capsys):
    matrix, house, wheel = fake_overlay
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("extra.txt", b"tampered")
    assert main(["stacks", "--matrix", str(matrix), "install", "fake", "--wheelhouse", str(house)]) == 3
    err = capsys.readouterr().err
    assert "refusing to build from it" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "stacks" / "fake").exists()


def test_run_no_docker_runs_each_stack_in_its_own_environment(fake_overlay, tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from harness.measurement import fingerprint

    matrix, house, _ = fake_overlay
    assert main(["stacks", "--matrix", str(matrix), "install", "fake", "--wheelhouse", str(house)]) == 0
    monkeypatch.setattr(imagematrix, "DEFAULT_MATRIX", matrix)
    if fingerprint.gpus()[0]:
        pytest.skip("this host has a GPU; the CPU-worker path is for GPU-less hosts")
    results = tmp_path / "results"
    code = main(["run", "--no-docker", "--stacks", "host,fake", "--job", "sweep", "--backends", "torch",
                 "--cases", "quick.seed", "--results", str(results), "--host-name", "ci"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "stacks, in turn on each worker: host, fake" in out
    runs = sorted((results / "ci-cpu").iterdir())
    assert len(runs) == 2
    fps = {json.loads((r / "run.json").read_text())["fingerprint"]["stack"] for r in runs}
    assert fps == {"host", "fake"}


def test_stacks_need_no_docker(tmp_path, capsys):
    assert main(["run", "--stacks", "host", "--results", str(tmp_path)]) == 2
    assert "needs --no-docker" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["stacks folder is a file", "stacks folder is a link", "overlay folder is a link",
                                   "overlay folder is a file"])
def test_install_into_what_is_not_a_folder_of_its_own_is_one_line_and_leaves_nothing(fake_overlay, tmp_path, capsys,
                                                                                       where):
    matrix, house, _ = fake_overlay
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    into = tmp_path / "into"
    if where == "stacks folder is a file":
        into.write_text("x")
    elif where == "stacks folder is a link":
        into.symlink_to(outside)
    else:
        into.mkdir()
        if where == "overlay folder is a link":
            (into / "fake").symlink_to(outside)
        else:
            (into / "fake").write_text("x")
    assert main(["stacks", "--matrix", str(matrix), "install", "fake", "--wheelhouse", str(house),
                 "--into", str(into)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a folder" in err[0], err
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    if into.is_dir() and not into.is_symlink():
        assert not [p for p in into.iterdir() if p.name.startswith(".fake-")]  # no staging folder left


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_wheel_that_is_a_fifo_or_dev_zero_is_refused_without_waiting(fake_overlay, tmp_path, capsys, kind):
    import os
    import time

    matrix, house, wheel = fake_overlay
    wheel.unlink()
    if kind == "fifo":
        os.mkfifo(wheel)
    else:
        wheel.symlink_to("/dev/zero")
    t0 = time.monotonic()
    assert main(["stacks", "--matrix", str(matrix), "install", "fake", "--wheelhouse", str(house)]) == 3
    assert time.monotonic() - t0 < 20
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a regular file" in err[0], err


def test_install_on_a_read_only_file_system_is_one_line_and_leaves_nothing(fake_overlay, tmp_path, capsys):
    import subprocess

    matrix, house, _ = fake_overlay
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        assert main(["stacks", "--matrix", str(matrix), "install", "fake", "--wheelhouse", str(house),
                     "--into", str(mnt / "stacks")]) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Read-only" in err[0], err
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)

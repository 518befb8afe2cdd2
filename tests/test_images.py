"""The image matrix, its validation, the Dockerfile, the hashed lock and the fleet manifests (no engine)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.deploy import imagematrix, images, wheels

GOOD_ROW = """
[bases.b]
tag = "convbench/base:test"
suite = "bookworm"
mirror = "http://deb.debian.org/debian"
include = ["python3"]
python = "3.11"
glibc = "2.36"

[[row]]
name = "g"
base = "b"
gpu = true
cuda = "13.0"
cudnn = "9.19.0.56"
torch = "2.11.0"
onnxruntime = "onnxruntime-gpu==1.27.0"
sm = ["9.0"]
requirements = ["torch==2.11.0", "onnxruntime-gpu==1.27.0"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


def test_shipped_matrix_has_the_required_stacks():
    m = imagematrix.load_matrix()
    by_cuda = {r.cuda: r for r in m.rows.values()}
    assert {"11.8", "13.0", ""} <= set(by_cuda)
    assert by_cuda["11.8"].cudnn.startswith("8.") and by_cuda["11.8"].torch.startswith("2.3")
    assert by_cuda["11.8"].runs_on("6.1") and by_cuda["11.8"].runs_on("6.0")  # Pascal: the P40
    cu13 = by_cuda["13.0"]
    assert cu13.cudnn.startswith("9.19") and cu13.torch == "2.11.0"
    assert int(cu13.onnxruntime.split("==")[1].split(".")[1]) >= 27
    assert not cu13.runs_on("6.1") and not cu13.runs_on("7.0") and cu13.runs_on("7.5") and cu13.runs_on("9.0")
    cu12 = [r for r in m.rows.values() if r.cuda.startswith("12.")]
    assert cu12 and cu12[0].cudnn.startswith("9.") and int(cu12[0].onnxruntime.split(".")[1]) <= 19
    assert not by_cuda[""].gpu and by_cuda[""].torch == "2.13.0+cpu"


@pytest.mark.parametrize("change, message", [
    ('sm = ["9.0"]', 'sm = "9.0"'),
    ('sm = ["9.0"]', 'sm = ["sm_90"]'),
    ('sm = ["9.0"]', "sm = []"),
    ('torch==2.11.0", "onnx', 'torch>=2.11", "onnx'),
    ('base = "b"', 'base = "nope"'),
    ('name = "g"', 'name = "G h"'),
    ('torch = "2.11.0"', 'torch = "2.10.0"'),
    ('onnxruntime = "onnxruntime-gpu==1.27.0"', 'onnxruntime = "onnxruntime==1.27.0"'),
    ('gpu = true', 'gpu = "yes"'),
    ('cuda = "13.0"', 'cuda = "13.0"\ncolour = "red"'),
    ('cudnn = "9.19.0.56"', 'cudnn = "9.19\\"; rm -rf /"'),
])
def test_bad_rows_get_one_clear_line(tmp_path, change, message):
    imagematrix.load_matrix(write(tmp_path, GOOD_ROW))  # the unchanged row is valid
    assert change in GOOD_ROW
    bad = GOOD_ROW.replace(change, message, 1)
    with pytest.raises(imagematrix.MatrixError) as err:
        imagematrix.load_matrix(write(tmp_path, bad))
    line = str(err.value)
    assert "\n" not in line and "row 1 (" in line, line


def test_matrix_file_level_errors(tmp_path):
    for text, needle in [("[[row]\nname=", "not valid TOML"), ("", "no [[row]]"),
                         (GOOD_ROW + "\n[extra]\nx = 1\n", "unknown table"),
                         (GOOD_ROW + GOOD_ROW.split("[[row]]")[1].join(["[[row]]", ""]), "duplicate row")]:
        with pytest.raises(imagematrix.MatrixError, match=re.escape(needle)):
            imagematrix.load_matrix(write(tmp_path, text))
    with pytest.raises(imagematrix.MatrixError, match="no such matrix file"):
        imagematrix.load_matrix(tmp_path / "missing.toml")


def test_cli_bad_matrix_exits_2_with_one_line(tmp_path, capsys):
    path = write(tmp_path, GOOD_ROW.replace('sm = ["9.0"]', 'sm = ["nine"]'))
    assert main(["images", "--matrix", str(path), "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sm nine" in err
    assert main(["images", "render", "no-such-row"]) == 2
    assert "unknown row no-such-row" in capsys.readouterr().err


def test_render_is_hermetic_unprivileged_and_labelled():
    m = imagematrix.load_matrix()
    for row in m.rows.values():
        text = images.render(m, row, "abc123", "locksha")
        assert f"FROM {m.bases[row.base].tag}" in text
        install = [ln for ln in text.splitlines() if "pip install" in ln]
        assert install and all("--no-index" in ln for ln in install)
        assert "--require-hashes" in text and "requirements.lock" in text
        assert re.search(r"^USER 10001:10001$", text, re.M)
        assert f'LABEL org.convbench.torch="{row.torch}"' in text
        assert 'LABEL org.convbench.suite-revision="abc123"' in text
        assert f'LABEL org.convbench.cudnn="{row.cudnn or "none"}"' in text
        assert ("ldconfig" in text) == row.gpu
        assert re.search(r'^CMD \["bench", "--results", "/results"\]$', text, re.M)  # the asv suite
        assert "COPY suite/" not in text and "CONVBENCH_CACHE=/tmp/" in text  # suite in the wheel; root read-only


def test_platform_args_target_the_image_not_the_host():
    base = imagematrix.load_matrix().bases["bookworm"]
    args = wheels.platform_args(base)
    assert args[args.index("--python-version") + 1] == "3.11"
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert "manylinux_2_36_x86_64" in platforms and "manylinux_2_28_x86_64" in platforms
    assert "manylinux1_x86_64" in platforms and not any("2_37" in p for p in platforms)


def test_wheel_pin_normalizes_names():
    assert wheels.wheel_pin("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl") == ("torch", "2.13.0+cpu")
    assert wheels.wheel_pin("typing_extensions-4.16.0-py3-none-any.whl") == ("typing-extensions", "4.16.0")
    with pytest.raises(imagematrix.MatrixError):
        wheels.wheel_pin("notawheel.tar.gz")


def test_committed_locks_match_their_rows():
    m = imagematrix.load_matrix()
    locked = [r for r in m.rows.values() if r.lock_path().exists()]
    assert any(not r.gpu for r in locked), "the CPU row must be locked (CI builds it)"
    for row in locked:
        lock = wheels.read_lock(row.lock_path())
        assert lock.row_digest == row.digest(m.bases[row.base]), f"{row.name}: lock is stale"
        for req in row.requirements:
            name, version = req.split("==")
            assert lock.pins[re.sub(r"[-_.]+", "-", name).lower()][0] == version
        assert all(re.fullmatch(r"[0-9a-f]{64}", sha) for _, sha in lock.pins.values())


def _wheel(d: Path, name: str, body: bytes) -> tuple[str, str]:
    p = d / f"{name}-1.0-py3-none-any.whl"
    p.write_bytes(body)
    return name, hashlib.sha256(body).hexdigest()


def test_verify_refuses_a_wheel_whose_hash_changed(tmp_path):
    row = imagematrix.load_matrix().rows["cpu"]
    a, sha_a = _wheel(tmp_path, "alpha", b"alpha wheel bytes")
    b, sha_b = _wheel(tmp_path, "beta", b"beta wheel bytes")
    lock = wheels.Lock("d", {a: ("1.0", sha_a), b: ("1.0", sha_b)})
    wheels.verify(tmp_path, lock, row)  # intact
    lock_path = tmp_path / "x.txt"
    lock_path.write_text(lock.text(row, "test"))
    assert wheels.read_lock(lock_path).pins == lock.pins
    (tmp_path / "beta-1.0-py3-none-any.whl").write_bytes(b"tampered")
    with pytest.raises(imagematrix.MatrixError, match="beta-1.0-py3-none-any.whl has sha256"):
        wheels.verify(tmp_path, lock, row)
    (tmp_path / "beta-1.0-py3-none-any.whl").unlink()
    with pytest.raises(imagematrix.MatrixError, match="beta==1.0 is missing"):
        wheels.verify(tmp_path, lock, row)
    lock_path.write_text("# row-digest: d\nalpha>=1 --hash=sha256:00\n")
    with pytest.raises(imagematrix.MatrixError, match="not a pinned, hashed requirement"):
        wheels.read_lock(lock_path)


def test_stale_lock_is_refused_before_any_download(tmp_path, monkeypatch):
    m = imagematrix.load_matrix()
    row = m.rows["cpu"]
    monkeypatch.setattr(imagematrix, "LOCK_DIR", tmp_path)
    (tmp_path / "cpu.txt").write_text("# row-digest: 0000\ntorch==2.13.0+cpu --hash=sha256:" + "0" * 64 + "\n")
    monkeypatch.setattr(wheels, "REPO", tmp_path)
    with pytest.raises(imagematrix.MatrixError, match="is stale"):
        wheels.wheelhouse(m, row, cache=tmp_path / "cache", log=lambda *_: None)




def test_render_cli_writes_files(tmp_path, capsys):
    assert main(["images", "render", "cpu", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "cpu" / "Dockerfile").read_text().startswith("# Rendered by")
    assert main(["images", "render", "--slurm", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "slurm" / "convbench-h200.sbatch").exists()


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_a_matrix_that_is_not_a_regular_file_is_one_line_and_no_wait(tmp_path, capsys, kind):
    """issue 19: `images --matrix` at a directory, a FIFO (hung) or /dev/zero (MemoryError) is refused, unread."""
    import os

    from harness import cli

    path = {"directory": tmp_path, "fifo": tmp_path / "m.toml", "device": "/dev/zero"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    capsys.readouterr()
    assert cli.main(["images", "--matrix", str(path), "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a regular file" in err and len(err.splitlines()) == 1


def test_images_base_refuses_an_unknown_base_before_asking_the_engine(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert main(["images", "base", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown base 'nosuch'; the matrix defines" in err[0]


def test_images_base_without_an_engine_is_one_line_and_exit_3(tmp_path, capsys, monkeypatch):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert main(["images", "base"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convbench images: error:") and "Docker engine" in err[0]

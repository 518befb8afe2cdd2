"""Stack overlays: activation environment, parsing, and the libraries a process really mapped."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.deploy import stacks
from harness.measurement import fingerprint


def _overlay(tmp_path: Path) -> Path:
    root = tmp_path / "stack-cudnn927"
    (root / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (root / "nvidia" / "cublas" / "lib").mkdir(parents=True)
    (root / "nvidia_cudnn_cu13-9.27.0.42.dist-info").mkdir()
    return root


def test_overlay_libraries_go_first(tmp_path):
    root = _overlay(tmp_path)
    st = stacks.parse(str(root))
    assert st.name == "cudnn927"
    env = st.env({"LD_LIBRARY_PATH": "/usr/lib/x", "PYTHONPATH": "/p"})
    libs = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert libs == [str(root / "nvidia/cublas/lib"), str(root / "nvidia/cudnn/lib"), "/usr/lib/x"]
    assert env["PYTHONPATH"].split(os.pathsep) == [str(root), "/p"]
    assert env["CONVBENCH_STACK"] == "cudnn927"
    assert stacks.parse("host").env({"A": "1"}) == {"A": "1"}


def test_a_cudnn_of_another_major_is_bound_by_the_binding_not_by_torch(tmp_path):
    root = _overlay(tmp_path)
    lib = root / "nvidia" / "cudnn" / "lib"
    assert "CONVBENCH_CUDNN" not in stacks.parse(str(root)).env({})  # empty: nothing to point at
    (lib / "libcudnn.so.9").touch()
    assert "CONVBENCH_CUDNN" not in stacks.parse(str(root)).env({})  # torch's major: it replaces torch's own
    (lib / "libcudnn.so.9").unlink()
    (lib / "libcudnn.so.8").touch()
    assert stacks.parse(str(root)).env({})["CONVBENCH_CUDNN"] == str(lib / "libcudnn.so.8")


def test_bad_stacks_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="not a folder"):
        stacks.parse(f"x={tmp_path / 'missing'}")
    with pytest.raises(UserError, match="name"):
        stacks.parse(f"../evil={_overlay(tmp_path)}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="neither"):
        stacks.parse(str(tmp_path / "empty"))


def test_mapped_libraries_name_the_copy_in_use(tmp_path):
    root = _overlay(tmp_path)
    lib = root / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
    other = tmp_path / "libcudnn.so.9"
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 r-xp 00000000 08:01 1 {lib}\n7f01-7f02 r--p 00001000 08:01 1 {lib}\n"
                    "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/libc.so.6\n")
    got = fingerprint.mapped_libraries(str(maps))
    assert got == {"libcudnn.so.9": {"path": str(lib), "wheel": "nvidia_cudnn_cu13-9.27.0.42"}}
    maps.write_text(maps.read_text() + f"7f04-7f05 r-xp 00000000 08:01 3 {other}\n")
    mixed = fingerprint.mapped_libraries(str(maps))["libcudnn.so.9"]
    assert mixed["mixed"] and [c["path"] for c in mixed["copies"]] == sorted([str(lib), str(other)])


def test_a_mapped_file_whose_path_is_not_utf8_does_not_stop_the_fingerprint(tmp_path):
    """A clean-clone CI run failed to start a sweep: its worker's /proc/self/maps held a path that does not decode
    as UTF-8 (a 0xc2 byte without its continuation; which file it was is not known)."""
    lib = _overlay(tmp_path) / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
    maps = tmp_path / "maps"
    maps.write_bytes(b"7f00-7f01 rw-s 00000000 08:01 9 /tmp/store-\xc2\x28/convbench.sqlite-shm\n"
                     + f"7f01-7f02 r-xp 00000000 08:01 1 {lib}\n".encode())
    assert fingerprint.mapped_libraries(str(maps)) == {
        "libcudnn.so.9": {"path": str(lib), "wheel": "nvidia_cudnn_cu13-9.27.0.42"}}


def test_a_real_process_reports_the_copy_it_loaded(tmp_path):
    """A real dlopen in a fresh process: the maps name the overlay's file, not another copy of the soname."""
    import ctypes.util

    libz = ctypes.util.find_library("z")
    if libz is None:
        pytest.skip("no libz on this host to stand in for a shared library")
    real = next(p for p in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64")
                if (Path(p) / libz).exists())
    root = _overlay(tmp_path)
    fake = root / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
    fake.write_bytes((Path(real) / libz).read_bytes())
    code = ("import ctypes, json; from harness.measurement import fingerprint; ctypes.CDLL('libcudnn.so.9'); "
            "print(json.dumps(fingerprint.mapped_libraries()))")
    env = stacks.parse(str(root)).env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env["PYTHONPATH"]])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    got = __import__("json").loads(out.stdout)
    assert got["libcudnn.so.9"] == {"path": str(fake), "wheel": "nvidia_cudnn_cu13-9.27.0.42"}


def test_the_binding_names_the_cudnn_of_its_own_major(tmp_path):
    """A process holding torch's cuDNN 9 and a cuDNN 8 bound through CONVBENCH_CUDNN (the cudnn89 overlay, H200,
    2026-11-30): the binding's path is the copy of the major it reports, not the first libcudnn in the maps."""
    from harness.backends.cudnn_lib import _mapped_libcudnn

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 00:00 1 /venv/nvidia/cudnn/lib/libcudnn.so.9\n"
                    "7f02-7f03 r-xp 0 00:00 2 /tmp/stack-cudnn89/nvidia/cudnn/lib/libcudnn.so.8\n")
    assert _mapped_libcudnn(8, str(maps)) == "/tmp/stack-cudnn89/nvidia/cudnn/lib/libcudnn.so.8"
    assert _mapped_libcudnn(9, str(maps)) == "/venv/nvidia/cudnn/lib/libcudnn.so.9"
    assert _mapped_libcudnn(7, str(maps)) is None
    # a mapped file whose name is not UTF-8 neither stops the search nor bends a path handed back to dlopen
    odd = b"/tmp/\xc2\x28/libcudnn.so.9"
    maps.write_bytes(b"7f00-7f01 rw-s 0 00:00 3 /tmp/store-\xff/convbench.sqlite-shm\n7f02-7f03 r-xp 0 00:00 4 "
                     + odd + b"\n")
    assert os.fsencode(_mapped_libcudnn(9, str(maps))) == odd

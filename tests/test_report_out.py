"""`report --out` replaces only what a report wrote, and a file system that refuses the write ends it in one line
(exit 3) with the old report whole and no build folder left: a user's own pages, a mount point, a read-only or a
full file system, and every failing step of the swap generated."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness.core.errors import EXIT_ENVIRONMENT, EXIT_USAGE, UserError
from harness.report import output


def _pages(folder: Path, n: int = 3) -> list[Path]:
    """A stand-in build: a few pages and a machines/ page, as a report writes them."""
    written = []
    for i in range(n):
        p = folder / ("machines" if i == 2 else "") / f"p{i}.html"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"<p>{i}</p>" * 50)
        written.append(p)
    return written


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(parent: Path, name: str) -> list[str]:
    return [n for n in os.listdir(parent) if n.startswith((f".{name}.new-", f".{name}.old-"))]


_name = st.text("abcxyz-_", min_size=1, max_size=8)


@hsettings(max_examples=60, deadline=None, database=None)
@given(files=st.lists(st.tuples(st.sampled_from(["", "machines", "changes", "own"]), _name,
                                st.sampled_from([".html", ".css", ".txt", ""])), min_size=1, max_size=6),
       index=st.booleans())
def test_a_folder_without_the_reports_manifest_is_never_replaced(tmp_path_factory, files, index):
    """A user's own pages (index.html among them or not, in machines/ or not): refused, and untouched."""
    out = tmp_path_factory.mktemp("user") / "site"
    out.mkdir()
    for sub, stem, suffix in files:
        (out / sub).mkdir(exist_ok=True)
        (out / sub / f"{stem}{suffix}").write_text("mine")
    if index:
        (out / "index.html").write_text("<h1>my page</h1>")
    before = _snapshot(out)
    with pytest.raises(UserError) as exc:
        output.replace(out, _pages)
    assert exc.value.code == EXIT_USAGE and "\n" not in str(exc.value)
    assert _snapshot(out) == before and _leftovers(out.parent, "site") == []


def test_a_report_replaces_its_own_report(tmp_path):
    out = tmp_path / "site"
    output.replace(out, _pages)
    assert (out / output.MANIFEST).is_file()
    output.replace(out, lambda f: _pages(f, 2))
    assert sorted(_snapshot(out)) == [output.MANIFEST, "p0.html", "p1.html"]
    assert _leftovers(tmp_path, "site") == []


_ERRNOS = [errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EXDEV, errno.EBUSY]


@hsettings(max_examples=80, deadline=None, database=None)
@given(code=st.sampled_from(_ERRNOS), step=st.sampled_from(["page", "manifest", "aside", "swap", "mkdtemp"]),
       existing=st.booleans())
def test_every_failing_step_ends_in_one_line_with_the_old_report_whole(tmp_path_factory, code, step, existing):
    tmp = tmp_path_factory.mktemp("fail")
    out = tmp / "site"
    if existing:
        output.replace(out, _pages)
    before = _snapshot(out) if existing else None
    fail = OSError(code, os.strerror(code), str(out))

    def build(folder: Path) -> list[Path]:
        written = _pages(folder)
        if step == "page":
            raise fail
        return written

    real_rename, real_write, real_mkdtemp = os.rename, Path.write_text, output.tempfile.mkdtemp
    renames = []

    def rename(a, b):
        renames.append(a)
        if (step == "aside" and Path(a) == out) or (step == "swap" and Path(b) == out and ".new-" in str(a)):
            raise fail
        return real_rename(a, b)

    def write_text(self, *a, **k):
        if step == "manifest" and self.name == output.MANIFEST:
            raise fail
        return real_write(self, *a, **k)

    def mkdtemp(*a, **k):
        if step == "mkdtemp":
            raise fail
        return real_mkdtemp(*a, **k)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(output.os, "rename", rename)
        m.setattr(Path, "write_text", write_text)
        m.setattr(output.tempfile, "mkdtemp", mkdtemp)
        if step == "aside" and not existing:
            return  # nothing to set aside
        with pytest.raises(UserError) as exc:
            output.replace(out, build)
    assert exc.value.code == EXIT_ENVIRONMENT and "\n" not in str(exc.value)
    assert _leftovers(tmp, "site") == []
    assert (_snapshot(out) if existing else out.exists()) == (before if existing else False)


@contextlib.contextmanager
def _mounted(where: Path, options: str):
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if res.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()[:80]})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_mount_point_as_out_is_refused_in_one_line(tmp_path):
    with _mounted(tmp_path / "mnt", "size=1m") as mnt:
        output.replace(mnt / "site", _pages)  # a folder in it is fine
        with pytest.raises(UserError) as exc:
            output.check(mnt)
        assert exc.value.code == EXIT_USAGE and "mount point" in str(exc.value)


def test_a_full_file_system_ends_in_one_line_and_leaves_the_old_report(tmp_path):
    with _mounted(tmp_path / "mnt", "size=64k") as mnt:
        out = mnt / "site"
        output.replace(out, _pages)
        before = _snapshot(out)

        def big(folder: Path) -> list[Path]:
            p = folder / "huge.html"
            p.write_bytes(b"x" * (1 << 20))
            return [p]

        with pytest.raises(UserError) as exc:
            output.replace(out, big)
        assert exc.value.code == EXIT_ENVIRONMENT and "No space left" in str(exc.value)
        assert _snapshot(out) == before and _leftovers(mnt, "site") == []


def test_a_read_only_file_system_ends_in_one_line(tmp_path):
    with _mounted(tmp_path / "mnt", "size=1m") as mnt:
        output.replace(mnt / "site", _pages)
        before = _snapshot(mnt / "site")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        with pytest.raises(UserError) as exc:
            output.replace(mnt / "site", _pages)
        assert exc.value.code == EXIT_ENVIRONMENT and "Read-only" in str(exc.value)
        assert _snapshot(mnt / "site") == before

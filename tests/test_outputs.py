"""Files a user names for convbench to write (core/outputs.py): `upgrade --json-out` and `images render --out` never
write through a symbolic link, into a folder, a missing folder or outside their tree, and say so in one line
before any work; generated trees with a link, a file or a FIFO wherever a folder belongs are refused whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness import cli
from harness.core.errors import EXIT_USAGE, UserError
from harness.core.outputs import check_file, write_file, write_under


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_text() if p.is_file() else "/")
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("kind", ["link to a file", "dangling link", "folder", "missing folder", "fifo"])
def test_upgrade_json_is_refused_before_the_study(tmp_path, capsys, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out.json"
    if kind == "link to a file":
        target.symlink_to(victim)
    elif kind == "dangling link":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "folder":
        target.mkdir()
    elif kind == "missing folder":
        target = tmp_path / "no" / "such" / "out.json"
    else:
        os.mkfifo(target)
    # --a names no stack at all: had the path been accepted, the study would have failed on it instead
    assert cli.main(["upgrade", "--a", "no-such-stack", "--b", "host", "--json-out", str(target)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--json-out" in err[0], err
    assert victim.read_text() == "keep me" and not (tmp_path / "nowhere").exists()


def test_a_file_is_written_whole_and_replaces_a_file_not_a_link(tmp_path):
    p = tmp_path / "a.json"
    write_file(p, "one", "--json")
    write_file(p, "two", "--json")
    assert p.read_text() == "two" and [x.name for x in tmp_path.iterdir()] == ["a.json"]


_part = st.sampled_from(["a", "b", "row", "slurm"])


@hsettings(max_examples=120, deadline=None, database=None)
@given(path=st.lists(_part, min_size=1, max_size=3), planted=st.integers(0, 2),
       what=st.sampled_from(["link to outside", "link inside", "file", "fifo", "dotdot", "absolute"]))
def test_write_under_never_writes_outside_its_tree(tmp_path_factory, path, planted, what):
    tmp = tmp_path_factory.mktemp("under")
    root, outside = tmp / "out", tmp / "outside"
    root.mkdir()
    outside.mkdir()
    relative = "/".join([*path, "Dockerfile"])
    folders = [root.joinpath(*path[:i + 1]) for i in range(len(path))]
    bad = folders[min(planted, len(folders) - 1)]
    bad.parent.mkdir(parents=True, exist_ok=True)
    if what == "link to outside":
        bad.symlink_to(outside)
    elif what == "link inside":
        (root / "elsewhere").mkdir(exist_ok=True)
        bad.symlink_to(root / "elsewhere")
    elif what == "file":
        bad.write_text("x")
    elif what == "fifo":
        os.mkfifo(bad)
    elif what == "dotdot":
        relative = "/".join([*path, "..", "..", "..", "outside", "Dockerfile"])
    else:
        relative = str(outside / "Dockerfile")
    before_out, before_root = _tree(outside), _tree(root)
    with pytest.raises(UserError) as exc:
        write_under(root, relative, "FROM scratch\n", "--out")
    assert "\n" not in str(exc.value)
    assert _tree(outside) == before_out and _tree(root) == before_root


def test_images_render_refuses_a_linked_row_folder(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "cpu").symlink_to(outside)
    assert cli.main(["images", "render", "cpu", "--out", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "symbolic link" in err[0]
    assert list(outside.iterdir()) == []


def test_check_file_accepts_a_new_or_regular_file(tmp_path):
    assert check_file(tmp_path / "new.json", "--json") == tmp_path / "new.json"
    (tmp_path / "old.json").write_text("x")
    check_file(tmp_path / "old.json", "--json")

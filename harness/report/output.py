"""Where the report goes: built in a fresh folder beside ``--out`` and swapped in whole, so a reader never sees
half a report and a failed build leaves the old one as it was. The report replaces only a folder that holds
nothing but a report (its manifest lists what it made), never writes through a symbolic link, and refuses an
empty or dangerous ``--out`` (the filesystem root, the home folder, the current folder or one above it) in one
line."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..core.intake import UserError

MANIFEST = ".convbench-report"  # the files a build made, one relative path a line


def _entries(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def _made_by_a_report(folder: Path) -> bool:
    """True when every entry of ``folder`` is one a report build made: listed in its manifest, or (a report from
    before manifests) only .html pages at the top and in machines/, with an index.html."""
    entries = _entries(folder)
    if any((folder / e).is_symlink() for e in entries):
        return False
    manifest = folder / MANIFEST
    if manifest.is_file():
        listed = set(manifest.read_text(encoding="utf-8").splitlines()) | {MANIFEST}
        # a folder is judged by what it holds (rglob lists that too): an empty one, such as changes/ on a night
        # without findings, holds nothing to lose
        return all(str(e) in listed or (folder / e).is_dir() for e in entries)
    legacy = {Path("machines")}
    return (folder / "index.html").is_file() and all(
        e in legacy or (e.suffix == ".html" and (len(e.parts) == 1 or e.parts[0] == "machines")) for e in entries)


def check(out: str | Path) -> Path:
    """``out`` as a path the report may replace, or a UserError that says why not."""
    if not str(out).strip():
        raise UserError("--out is empty; name the folder the report should be written to")
    p = Path(out)
    if p.is_symlink():
        raise UserError(f"--out {out} is a symbolic link; the report writes only to a real folder")
    target = p.resolve()
    cwd = Path.cwd().resolve()
    if target == Path(target.anchor) or target == Path.home().resolve() or cwd.is_relative_to(target):
        raise UserError(f"--out {out} is the filesystem root, the home folder or holds the current "
                        "folder; name a folder of its own for the report")
    if p.exists() and not p.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    if p.is_dir() and any(p.iterdir()) and not _made_by_a_report(p):
        raise UserError(f"--out {out} holds files the report did not make; choose a new or empty folder")
    return target


def replace(out: str | Path, build: Callable[[Path], list[Path]]) -> list[Path]:
    """Run ``build`` into a fresh folder beside ``out`` and swap it in; returns the paths as they are after."""
    target = check(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(fresh, 0o777 & ~umask)  # mkdtemp makes it private; a report folder is read by others
    try:
        written = build(fresh)
        (fresh / MANIFEST).write_text("".join(f"{p.relative_to(fresh)}\n" for p in written), encoding="utf-8")
        old = None
        if target.exists():
            check(out)  # again: nothing was added to it while the report was built
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / "report")
        try:
            os.rename(fresh, target)
        except OSError:
            if old is not None:
                os.rename(old / "report", target)  # the old report back where it was
                old.rmdir()
            raise
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old)
    return [target / p.relative_to(fresh) for p in written]

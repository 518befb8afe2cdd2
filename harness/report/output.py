"""Where the report goes: built in a fresh folder beside ``--out`` and swapped in whole, so a reader never sees
half a report and a failed build leaves the old one as it was. The report replaces only a folder that holds
nothing but a report (its manifest lists what it made: a folder without one, such as a user's own HTML pages, is
never replaced), never writes through a symbolic link, and refuses an empty or dangerous ``--out`` (the
filesystem root, the home folder, the current folder or one above it, a mount point, which cannot be swapped) in
one line. A file system that is read-only or full ends the build in one line (exit 3) with its build folders
removed."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..core import children
from ..core.errors import EXIT_ENVIRONMENT, UserError

MANIFEST = ".convbench-report"  # the files a build made, one relative path a line


def _entries(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def _made_by_a_report(folder: Path) -> bool:
    """True when every entry of ``folder`` is one a report build made: listed in its manifest (a regular file).
    A folder without a manifest is not a report's, whatever it holds: index.html and pages may be a user's own."""
    manifest = folder / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        return False
    entries = _entries(folder)
    if any((folder / e).is_symlink() for e in entries):
        return False
    try:
        listed = set(manifest.read_text(encoding="utf-8").splitlines()) | {MANIFEST}
    except (OSError, UnicodeDecodeError):
        return False
    # a folder is judged by what it holds (rglob lists that too): an empty one, such as changes/ on a night
    # without findings, holds nothing to lose
    return all(str(e) in listed or (folder / e).is_dir() for e in entries)


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
    if p.is_dir() and os.path.ismount(p):
        raise UserError(f"--out {out} is a mount point, which the report cannot swap whole; name a folder in it")
    if p.is_dir() and any(p.iterdir()) and not _made_by_a_report(p):
        raise UserError(f"--out {out} holds files the report did not make (it has no {MANIFEST} manifest, as a "
                        "report from before manifests has none); choose a new or empty folder")
    return target


def replace(out: str | Path, build: Callable[[Path], list[Path]]) -> list[Path]:
    """Run ``build`` into a fresh folder beside ``out`` and swap it in; returns the paths as they are after. A
    file system error (read-only, full, gone) is a UserError with exit 3, and no build folder is left behind."""
    target = check(out)
    try:
        return _swap(out, target, build)
    except OSError as exc:
        where = exc.filename or target
        raise UserError(f"report --out {out}: {exc.strerror or exc} ({where}); nothing was replaced",
                        EXIT_ENVIRONMENT) from None


def _swap(out: str | Path, target: Path, build: Callable[[Path], list[Path]]) -> list[Path]:
    """The build and the swap; a signal (children.raise_exit) that comes while a folder is made or the two renames
    run waits until they are done, so no folder is left unnamed and the old report is never left aside."""
    target.parent.mkdir(parents=True, exist_ok=True)
    holding = children.held().__enter__()
    fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    old: Path | None = None
    umask = os.umask(0)
    os.umask(umask)
    try:
        holding.release()  # a signal that came while the folder was made is raised here, where it is removed
        os.chmod(fresh, 0o777 & ~umask)  # mkdtemp makes it private; a report folder is read by others
        written = build(fresh)
        (fresh / MANIFEST).write_text("".join(f"{p.relative_to(fresh)}\n" for p in written), encoding="utf-8")
        children.raise_again()  # a stop Python dropped while it built: the old report stays
        holding = children.held().__enter__()
        if target.exists():
            check(out)  # again: nothing was added to it while the report was built
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / "report")
        try:
            os.rename(fresh, target)
        except OSError:
            if old is not None and (old / "report").exists():
                os.rename(old / "report", target)  # the old report back where it was
            raise
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        if old is not None and not (old / "report").exists():
            shutil.rmtree(old, ignore_errors=True)
        holding.release()
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    holding.release()  # the new report is in place: a signal held until now ends the command here
    return [target / p.relative_to(fresh) for p in written]

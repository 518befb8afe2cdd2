"""Files a user names for convbench to write (``upgrade --json``, ``images render --out``): checked before the
work that fills them, written whole and never through a symbolic link.

A path given on the command line may be a link to a file elsewhere, a folder, or sit in a folder that does not
exist; a tree to write into may hold a link where a row's folder belongs. Writing through any of them would
overwrite a file the user never named, or fail only after an hour's study, so each is refused up front in one
line (exit 2) and a file is written to a temporary name beside it and renamed over the path (the rename replaces
a link, never its target).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from .errors import EXIT_ENVIRONMENT, UserError, printable


def check_file(path: Path, flag: str) -> Path:
    """``path`` as a file convbench may create or replace: not a link, not a folder, in a folder that exists."""
    shown = printable(os.fsdecode(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"{flag} {shown}: cannot be checked ({exc.strerror})", EXIT_ENVIRONMENT) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UserError(f"{flag} {shown} is a symbolic link; convbench writes only to a path of its own")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UserError(f"{flag} {shown} exists and is not a regular file (a folder, FIFO or device)")
    parent = path.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {shown}: the folder {printable(os.fsdecode(parent))} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{flag} {shown}: the folder {printable(os.fsdecode(parent))} is not writable",
                        EXIT_ENVIRONMENT)
    return path


def write_file(path: Path, data: str | bytes, flag: str) -> None:
    """Write ``data`` to ``path`` whole (a temporary file beside it, renamed over it), checked as check_file."""
    check_file(path, flag)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    raw = data.encode() if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise UserError(f"{flag} {printable(os.fsdecode(path))}: cannot be written ({exc.strerror})",
                        EXIT_ENVIRONMENT) from None


def write_under(root: Path, relative: str, data: str | bytes, flag: str) -> Path:
    """Write ``data`` to ``root/relative``, making its folders, refusing a link or a non-folder anywhere on the way
    (a row folder linked elsewhere) and any ``..`` or absolute part."""
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
        raise UserError(f"{flag}: {printable(relative)} is not a path inside {printable(os.fsdecode(root))}")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {printable(os.fsdecode(root))}: cannot be made ({exc.strerror})",
                        EXIT_ENVIRONMENT) from None
    here = root
    for part in parts[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            try:
                os.mkdir(here)
            except OSError as exc:
                raise UserError(f"{flag} {printable(os.fsdecode(here))}: cannot be made ({exc.strerror})",
                                EXIT_ENVIRONMENT) from None
            continue
        if not stat.S_ISDIR(st.st_mode):  # a symbolic link (to a folder or not) is no folder of the tree
            raise UserError(f"{flag} {printable(os.fsdecode(here))} is a symbolic link or not a folder; convbench "
                            "writes only into folders of its own")
    path = here / parts[-1]
    write_file(path, data, flag)
    return path

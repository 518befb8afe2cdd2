"""Where the files the commands need live: a convbench checkout, else the copies shipped inside the wheel.

The image matrix and its templates (docker/), the asv suite (asv.conf.json, benchmarks/) and the suite revision
are read from the checkout when harness/ sits in one (an editable install, the tests); an installed wheel carries
them under harness/_shipped/, put there by setup.py at build time together with the revision it was built from.
So `convbench images` and `convbench bench` work from a plain `pip install convbench-*.whl`, and a run never
records the HEAD of whatever unrelated git repository the package happens to be installed in.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # harness/ (this file is harness/deploy/resources.py)
CHECKOUT = PACKAGE.parent
SHIPPED = PACKAGE / "_shipped"
REVISION_FILE = "REVISION"
SUITE_PATHS = ("harness", "benchmarks", "pyproject.toml")  # what a "-dirty" revision means


def in_git_checkout() -> bool:
    """A source tree that is a git checkout: asv can take its commits from git."""
    return in_checkout() and git_revision(CHECKOUT) is not None


def in_checkout() -> bool:
    """Whether harness/ is the one of a convbench source tree (not an installed copy)."""
    pyproject = CHECKOUT / "pyproject.toml"
    return (CHECKOUT / "benchmarks" / "_bridge.py").is_file() and pyproject.is_file() and \
        'name = "convbench"' in pyproject.read_text()


def root() -> Path:
    """The folder holding docker/, benchmarks/ and asv.conf.json."""
    return CHECKOUT if in_checkout() or not SHIPPED.is_dir() else SHIPPED


def docker_dir() -> Path:
    return root() / "docker"


def git_revision(tree: Path) -> str | None:
    """HEAD of the git checkout ``tree`` (12 hex digits), with -dirty when the suite has local edits; None if
    ``tree`` is not the top of a git checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, timeout=30)
    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != tree.resolve():
            return None
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", *SUITE_PATHS)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def git_time(tree: Path) -> int:
    """Commit time of HEAD (Unix seconds), 0 when unknown."""
    out = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=tree, capture_output=True, text=True)
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else 0


def _baked() -> list[str]:
    """The REVISION file, "<revision> <commit time>" split: the wheel's (setup.py writes it), or in a source tree
    without git (an unpacked sdist) the sdist's; [] without one."""
    for path in (SHIPPED / REVISION_FILE, CHECKOUT / REVISION_FILE if in_checkout() else None):
        if path is not None and path.is_file():
            return path.read_text().split()
    return []


def revision() -> str:
    """The suite revision: the checkout's git HEAD, else the one baked into the wheel at build time."""
    if in_checkout():
        rev = git_revision(CHECKOUT)
        if rev:
            return rev
    baked = _baked()
    return baked[0] if baked else "unknown"


def revision_time() -> int:
    """Commit time of the suite revision (Unix seconds; 0 when unknown)."""
    if in_checkout() and git_revision(CHECKOUT):
        return git_time(CHECKOUT)
    baked = _baked()
    return int(baked[1]) if len(baked) > 1 and baked[1].isdigit() else 0

"""Build steps pyproject.toml cannot declare: the wheel carries docker/, the asv suite and the suite revision.

They go to harness/_shipped/ (harness.resources finds them there when no checkout is around). The revision is
read from git at build time; an sdist has no .git, so the sdist carries it in REVISION and a wheel built from the
sdist takes it from there.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "harness" / "deploy"))
import resources  # noqa: E402  (harness/deploy/resources.py alone: it imports nothing of the package)

SHIPPED = ("docker/matrix.toml", "docker/Dockerfile.j2", "docker/make-base-image.sh", "docker/locks/*.txt",
           "docker/fleet/*.j2", "benchmarks/*.py", "asv.conf.json")


def source_revision() -> str:
    """"<revision> <commit time>" from git, else from the sdist's REVISION file."""
    rev = resources.git_revision(HERE)
    if rev:
        return f"{rev} {resources.git_time(HERE)}"
    baked = HERE / resources.REVISION_FILE
    return baked.read_text().strip() if baked.is_file() else "unknown 0"


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        target = Path(self.build_lib) / "harness" / "_shipped"
        shutil.rmtree(target, ignore_errors=True)
        for pattern in SHIPPED:
            for src in sorted(HERE.glob(pattern)):
                dst = target / src.relative_to(HERE)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        (target / resources.REVISION_FILE).write_text(source_revision() + "\n")


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        dst = Path(base_dir) / resources.REVISION_FILE
        dst.unlink(missing_ok=True)  # a hard link to the source's copy, if any
        dst.write_text(source_revision() + "\n")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})

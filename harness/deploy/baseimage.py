"""The local base image: a Debian minbase root filesystem made with debootstrap and imported into the engine.

No registry is reachable from the hosts this suite is built on, so ``FROM debian`` cannot be pulled; instead
the matrix names a base (Debian suite, mirror, packages) and this module makes it once with
``debootstrap --variant=minbase`` and ``docker import`` through the SDK (`convbench images base`). An existing image of that tag is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

# Paths of a debootstrapped tree that do not belong in an image: the engine mounts /dev, /proc and /sys,
# and the package caches only cost space.
_SKIP_UNDER = ("dev/", "proc/", "sys/", "run/", "tmp/", "var/cache/apt/archives/", "var/lib/apt/lists/")


class BaseImageError(RuntimeError):
    """Why the base image could not be made, in one line."""


def _rootfs_filter(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = member.name[2:] if member.name.startswith("./") else member.name
    if any(name.startswith(p) and name != p.rstrip("/") for p in _SKIP_UNDER):
        return None
    return member


def debootstrap(target: Path, suite: str, mirror: str, include: list[str], log=print) -> None:
    """Run debootstrap --variant=minbase into ``target`` (needs root and the debootstrap package)."""
    if os.geteuid() != 0:
        raise BaseImageError("debootstrap needs root; run this as root (e.g. via scripts/host-docker.sh)")
    exe = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None)
    if not exe:
        raise BaseImageError("debootstrap is not installed: apt-get install debootstrap")
    cmd = [exe, "--variant=minbase"]
    if include:
        cmd.append("--include=" + ",".join(include))
    cmd += [suite, str(target), mirror]
    log(f"base image: {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BaseImageError(f"debootstrap failed ({proc.returncode}): {tail[0]}")


def pack(rootfs: Path, out: Path) -> None:
    """Tar the tree with numeric owners, as ``docker import`` expects a root filesystem."""
    with tarfile.open(out, "w") as tar:
        tar.add(str(rootfs), arcname=".", filter=_rootfs_filter)


def ensure(client, tag: str, suite: str = "bookworm", mirror: str = "http://deb.debian.org/debian",
           include: list[str] | None = None, log=print) -> tuple[str, bool]:
    """(image id, made now?) for ``tag``; debootstraps and imports it only when the engine lacks it."""
    import docker

    try:
        image = client.images.get(tag)
        log(f"base image {tag}: present ({image.short_id}), kept")
        return image.id, False
    except docker.errors.ImageNotFound:
        pass
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="convbench-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        debootstrap(rootfs, suite, mirror, list(include or []), log=log)
        tar_path = Path(tmp) / "rootfs.tar"
        pack(rootfs, tar_path)
        shutil.rmtree(rootfs, ignore_errors=True)
        repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        log(f"base image: importing {tar_path.stat().st_size / 2**20:.0f} MiB as {tag}")
        client.api.import_image(src=str(tar_path), repository=repo, tag=version,
                                changes=["ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]'])
    image = client.images.get(tag)
    log(f"base image {tag}: made ({image.short_id}) in {time.monotonic() - started:.0f} s")
    return image.id, True


def ensure_bases(matrix, names: list[str], client=None, log=print) -> list[tuple[str, str, bool]]:
    """(tag, image id, made now?) of every base the matrix names (or of ``names``), each made unless present.
    An unknown name is refused before the engine is asked (imagematrix.MatrixError); ``client``: the engine's,
    else images.engine()."""
    from .imagematrix import MatrixError
    from .images import engine

    unknown = [n for n in names if n not in matrix.bases]
    if unknown:
        raise MatrixError(f"unknown base {unknown[0]!r}; the matrix defines {', '.join(sorted(matrix.bases))}")
    client = client or engine()
    out = []
    for name in names or sorted(matrix.bases):
        b = matrix.bases[name]
        out.append((b.tag, *ensure(client, b.tag, b.suite, b.mirror, b.include, log=log)))
    return out

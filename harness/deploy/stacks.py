"""Stacks that are not images: pinned wheels overlaid on the host's own Python and driver.

Many GPU fleets cannot run containers (Slurm clusters, hosts without the NVIDIA container runtime), so a stack
can also be a directory laid out as ``pip install --target`` leaves it: ``nvidia/<lib>/lib/*.so`` from the
nvidia-* wheels and Python packages (onnxruntime-gpu, ...). It is activated per worker process, never in the
process that holds the run: its library folders go first on ``LD_LIBRARY_PATH`` (torch's RUNPATH and ctypes
then resolve ``libcudnn.so.9`` and friends there) and its folder first on ``PYTHONPATH``. The host's own stack
is the empty overlay. What a process really loaded is read back from its own maps (fingerprint.mapped_libraries),
so a record can never claim a library it did not use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EXIT_ENVIRONMENT, UserError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
HOST = "host"


TORCH_CUDNN_MAJOR = 9  # the cuDNN major the supported torch (2.4 and later) links


@dataclass(frozen=True)
class Stack:
    """A named overlay (``prefix`` is its folder) or the host's own stack (``prefix`` None)."""

    name: str
    prefix: Path | None = None

    def library_dirs(self) -> list[str]:
        """Folders of shared libraries the overlay brings, in a stable order (nvidia/*/lib, then any lib/)."""
        if self.prefix is None:
            return []
        dirs = sorted(str(p) for p in self.prefix.glob("nvidia/*/lib") if p.is_dir())
        return dirs + sorted(str(p) for p in self.prefix.glob("*/capi") if p.is_dir())

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a process that runs on this stack."""
        env = dict(os.environ if base is None else base)
        if self.prefix is None:
            return env
        libs = self.library_dirs()
        if env.get("LD_LIBRARY_PATH"):
            libs.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        env["PYTHONPATH"] = os.pathsep.join([str(self.prefix)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                                   else []))
        env["CONVBENCH_STACK"] = self.name
        foreign = self.foreign_cudnn()
        if foreign:
            env["CONVBENCH_CUDNN"] = foreign
        return env

    def foreign_cudnn(self) -> str | None:
        """The overlay's libcudnn when its major differs from the one torch links (libcudnn.so.9).

        A library of another soname cannot replace torch's: torch keeps its own, and the ctypes binding is pointed
        at the overlay's instead (CONVBENCH_CUDNN), so only the cudnn backend's records are of that cuDNN. cuDNN
        8's libraries version their symbols (``@libcudnn_ops_infer.so.8``), so the two do not bind each other's."""
        if self.prefix is None:
            return None
        own = sorted(self.prefix.glob("nvidia/cudnn/lib/libcudnn.so.[0-9]*"))
        if own and not any(p.name.startswith(f"libcudnn.so.{TORCH_CUDNN_MAJOR}") for p in own):
            return str(own[0])
        return None


def parse(spec: str) -> Stack:
    """``host``, ``NAME=FOLDER`` or ``FOLDER`` (named after its last component); the folder must exist."""
    if spec == HOST:
        return Stack(HOST)
    name, sep, folder = spec.partition("=")
    if not sep:
        folder, name = spec, Path(spec).name.removeprefix("stack-")
    if not NAME.match(name) or name == HOST:
        raise UserError(f"stack {spec!r}: a stack's name is letters, digits, '.', '_', '-' (and not {HOST!r})")
    path = Path(folder)
    if not path.is_dir():
        raise UserError(f"stack {name}: {folder} is not a folder (install the overlay first)", EXIT_ENVIRONMENT)
    stack = Stack(name, path.resolve())
    if not stack.library_dirs() and not any(path.glob("*/__init__.py")):
        raise UserError(f"stack {name}: {folder} holds neither nvidia/*/lib nor a Python package",
                        EXIT_ENVIRONMENT)
    return stack


# ---- overlays declared in the image matrix ([[overlay]] in docker/matrix.toml) --------------------------------

STACKS_ENV = "CONVBENCH_STACKS"
MANIFEST = "convbench-stack.json"


def stacks_dir() -> Path:
    """Where `convbench stacks install` puts overlays: CONVBENCH_STACKS, else ~/.local/share/convbench/stacks."""
    return Path(os.environ.get(STACKS_ENV) or Path.home() / ".local" / "share" / "convbench" / "stacks")


def install(overlay, wheelhouse: Path, into: Path | None = None, log=print) -> Stack:
    """Install a declared overlay offline: exactly its locked wheels (sha256 checked twice: here and by pip's
    --require-hashes) from ``wheelhouse`` with --no-index --no-deps, into ``into/NAME``. Nothing else of the
    host changes; the folder is replaced whole only once the install succeeded."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from . import imagematrix, wheels

    try:
        lock = wheels.overlay_lock(overlay)
        wheels.verify(Path(wheelhouse), lock, overlay)
    except imagematrix.MatrixError as exc:
        raise UserError(str(exc), EXIT_ENVIRONMENT) from None
    root = Path(into) if into else stacks_dir()
    target = root / overlay.name
    for path, what in ((root, "the stacks folder"), (target, "the overlay's folder")):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise UserError(f"{what} {path} is a symbolic link or not a folder; convbench installs only into a "
                            "folder of its own")
    staging = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{overlay.name}-", dir=root))
        req = staging / "requirements.lock"
        req.write_text(lock.text(overlay, "convbench stacks install"))
        log(f"[{overlay.name}] installing {len(lock.pins)} locked wheels from {wheelhouse} into {target}")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                               str(wheelhouse), "--no-deps", "--require-hashes", "--no-compile", "--target",
                               str(staging / "tree"), "-r", str(req)], capture_output=True, text=True)
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "ERROR" in ln] or ["(no output)"]
            raise UserError(f"installing overlay {overlay.name} failed: {lines[0].strip()}", EXIT_ENVIRONMENT)
        (staging / "tree" / MANIFEST).write_text(json.dumps(
            {"name": overlay.name, "lock_sha256": lock.sha256, "libraries": overlay.libraries, "host": overlay.host,
             "stands_in_for": overlay.stands_in_for, "pins": {n: v for n, (v, _) in sorted(lock.pins.items())}},
            indent=1) + "\n")
        if target.is_symlink() or (target.exists() and not target.is_dir()):  # swapped in while pip ran
            raise UserError(f"the overlay's folder {target} became a symbolic link or a file; nothing replaced")
        if target.exists():
            shutil.rmtree(target)
        (staging / "tree").rename(target)
    except OSError as exc:
        raise UserError(f"installing overlay {overlay.name} into {root}: {exc.strerror or exc} "
                        f"({exc.filename or root})", EXIT_ENVIRONMENT) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return parse(f"{overlay.name}={target}")


def resolve(spec: str, overlays=None) -> Stack:
    """A stack for `run --stacks`: ``host``, a declared overlay's name (installed under stacks_dir()), or what
    ``parse`` accepts (NAME=FOLDER, FOLDER)."""
    if spec != HOST and "=" not in spec and "/" not in spec and spec in (overlays or {}):
        folder = stacks_dir() / spec
        if not folder.is_dir():
            raise UserError(f"stack {spec} is not installed in {stacks_dir()}: run `convbench stacks install {spec} "
                            f"--wheelhouse DIR` (or set {STACKS_ENV})", EXIT_ENVIRONMENT)
        return parse(f"{spec}={folder}")
    return parse(spec)


def resolve_all(specs: list[str]) -> list[Stack]:
    """Stacks named on a command line (`run --stacks`, `upgrade --a/--b`): declared overlays by name (from the
    image matrix, installed), ``host``, or NAME=FOLDER / FOLDER."""
    from . import imagematrix

    try:
        overlays = imagematrix.load_matrix(imagematrix.DEFAULT_MATRIX).overlays
    except imagematrix.MatrixError:
        overlays = {}
    return [resolve(spec, overlays) for spec in specs]

"""The wheelhouse: a row's (or overlay's) wheels pinned with their sha256 in docker/locks/<row>.txt, downloaded
on the host and checked against the lock, and the convbench wheel itself.

The lock is what makes a build hermetic: images.py's build sends exactly the locked files to an engine without
network, and stacks.py installs an overlay only from wheels whose hashes match. A lock made for an older
version of the row is stale and refused before anything is downloaded.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.intake import Hostile, sha256_file
from . import resources
from .imagematrix import Base, Matrix, MatrixError, Overlay, Row

REPO = resources.root()  # a checkout, or the wheel's shipped copy (harness/_shipped)
WHEEL_CACHE = Path(os.environ.get("CONVBENCH_WHEEL_CACHE", Path.home() / ".cache" / "convbench" / "wheelhouse"))


def platform_args(base: Base) -> list[str]:
    """pip flags that fetch wheels for the image's Python and glibc rather than the host's."""
    major, minor = (int(x) for x in base.glibc.split("."))
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    py = base.python.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", base.python, "--implementation", "cp", "--abi", f"cp{py}",
            "--abi", "abi3", "--abi", "none"]
    for t in tags:
        args += ["--platform", t]
    return args


def reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether an index answers at all; pip would retry an unreachable one for every package it looks up."""
    import urllib.error
    import urllib.request

    if url.startswith("file://"):
        return Path(url[len("file://"):]).exists()
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False


_SKIPPED_INDEXES: list[str] = []  # extra indexes found unreachable by the current command


def _index_args(row: Row, log=print) -> list[str]:
    args = []
    _SKIPPED_INDEXES.clear()
    for url in row.extra_index_urls:
        if reachable(url):
            args += ["--extra-index-url", url]
        else:
            _SKIPPED_INDEXES.append(url)
            log(f"[{row.name}] extra index {url} does not answer from here; using pip's configured indexes "
                "and find-links only (the lock's hashes still decide which files are accepted)")
    return args


def wheel_pin(filename: str) -> tuple[str, str]:
    """(normalized name, version) from a wheel file name."""
    parts = filename[:-4].split("-") if filename.endswith(".whl") else []
    if len(parts) < 5:
        raise MatrixError(f"{filename}: not a wheel file name")
    return re.sub(r"[-_.]+", "-", parts[0]).lower(), parts[1]


@dataclass
class Lock:
    """docker/locks/<row>.txt: the row's full wheel closure, name==version --hash=sha256:..., pip's format."""

    row_digest: str
    pins: dict[str, tuple[str, str]]  # normalized name -> (version, sha256)

    def text(self, row: Row, how: str) -> str:
        lines = [f"# convbench lock for image row {row.name}: every wheel of the image, pinned by sha256.",
                 f"# Made by {how} on {dt.date.today().isoformat()}; remake with `convbench images lock {row.name}`.",
                 f"# row-digest: {self.row_digest}"]
        for name in sorted(self.pins):
            version, sha = self.pins[name]
            lines.append(f"{name}=={version} --hash=sha256:{sha}")
        return "\n".join(lines) + "\n"

    @property
    def sha256(self) -> str:
        body = "\n".join(f"{n}=={v}:{h}" for n, (v, h) in sorted(self.pins.items()))
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def read_lock(path: Path) -> Lock:
    digest, pins = None, {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if line.startswith("# row-digest:"):
            digest = line.split(":", 1)[1].strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z0-9._-]+)==(\S+) --hash=sha256:([0-9a-f]{64})$", line)
        if not m:
            raise MatrixError(f"{path}:{n}: not a pinned, hashed requirement: {line[:80]!r}")
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = (m.group(2), m.group(3))
    if digest is None or not pins:
        raise MatrixError(f"{path}: no row-digest header or no pins; remake it with `convbench images lock`")
    return Lock(digest, pins)


def _pip(args: list[str], log, what: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "ERROR" in ln] or \
            (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        skipped = [u for u in _SKIPPED_INDEXES if u not in args]
        hint = f" (the row's extra index {', '.join(skipped)} did not answer; its pins may live only there)" \
            if skipped else ""
        raise MatrixError(f"{what} failed: {errors[0].strip()}{hint}")
    return proc


def resolve_lock(matrix: Matrix, row: Row | Overlay, log=print) -> Lock:
    """Resolve the row's closure from the indexes' metadata alone (pip --dry-run --report): no wheel is
    downloaded, so GPU rows (gigabytes of CUDA wheels) can be locked on any host that reaches the index.
    An overlay is exactly its pins (--no-deps): everything else comes from the host it is laid over."""
    base = row if isinstance(row, Overlay) else matrix.bases[row.base]
    no_deps = ["--no-deps"] if isinstance(row, Overlay) else []
    with tempfile.TemporaryDirectory(prefix="convbench-lock-") as tmp:
        report = Path(tmp) / "report.json"
        log(f"[{row.name}] resolving {len(row.requirements)} pins for Python {base.python}, glibc {base.glibc}")
        _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *no_deps,
              "--target", str(Path(tmp) / "t"), *platform_args(base), *_index_args(row, log), *row.requirements],
             log, f"resolving row {row.name}")
        data = json.loads(report.read_text())
    pins = {}
    for item in data.get("install", []):
        name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
        info = item.get("download_info", {})
        sha = (info.get("archive_info", {}).get("hashes") or {}).get("sha256")
        url = info.get("url", "")
        if not sha and url.startswith("file://"):
            sha = sha256_file(Path(url[len("file://"):]))
        if not sha:
            raise MatrixError(f"row {row.name}: the index gave no sha256 for {name}; cannot lock it")
        pins[name] = (item["metadata"]["version"], sha)
    return Lock(row.digest(base), pins)


def overlay_lock(overlay: Overlay) -> Lock:
    """The overlay's committed lock, checked fresh; a missing or stale one says the command that remakes it."""
    path = overlay.lock_path()
    if not path.is_file():
        raise MatrixError(f"overlay {overlay.name} has no lock ({path.name}); make it with "
                          f"`convbench images lock {overlay.name}` on a host that reaches the index")
    lock = read_lock(path)
    if lock.row_digest != overlay.digest():
        raise MatrixError(f"{path.name} is stale: overlay {overlay.name} changed since it was made; run "
                          f"`convbench images lock {overlay.name}`")
    return lock


def lock_row(matrix: Matrix, row: Row | Overlay, log=print) -> Path:
    lock = resolve_lock(matrix, row, log)
    path = row.lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lock.text(row, "pip's resolver (--dry-run --report, hashes from the index)"))
    log(f"[{row.name}] locked {len(lock.pins)} wheels into {path.relative_to(REPO)}")
    return path


def wheelhouse(matrix: Matrix, row: Row | Overlay, cache: Path = WHEEL_CACHE, log=print) -> tuple[Path, Lock]:
    """Download the row's wheels on the host into ``cache/<row>`` and check each against the lock.

    Without a lock, the requirements are resolved and downloaded, and the sha256 of every wheel that came
    down is written as the row's lock (commit it); with a lock, pip downloads exactly the locked files
    (--require-hashes) and each file's sha256 is checked again here before it may enter a build.
    """
    base = row if isinstance(row, Overlay) else matrix.bases[row.base]
    dest = Path(cache) / row.name
    dest.mkdir(parents=True, exist_ok=True)
    path = row.lock_path()
    common = ["download", "--quiet", "--dest", str(dest), *platform_args(base)]
    if path.exists():
        lock = read_lock(path)
        if lock.row_digest != row.digest(base):
            raise MatrixError(f"{path.relative_to(REPO)} is stale: row {row.name} changed since it was made; "
                              f"run `convbench images lock {row.name}`")
        have = {wheel_pin(p.name): p for p in dest.glob("*.whl")}
        missing = [n for n, (v, _) in lock.pins.items() if (n, v) not in have]
        if missing:
            log(f"[{row.name}] downloading {len(missing)} of {len(lock.pins)} locked wheels into {dest}")
            with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
                req.write("\n".join(f"{n}=={lock.pins[n][0]} --hash=sha256:{lock.pins[n][1]}" for n in missing))
                req.flush()
                _pip([*common, *_index_args(row, log), "--no-deps", "--require-hashes", "-r", req.name], log,
                     f"downloading the wheels of row {row.name}")
        else:
            log(f"[{row.name}] all {len(lock.pins)} locked wheels already in {dest}")
    else:
        log(f"[{row.name}] no lock yet: downloading and hashing the closure of {len(row.requirements)} pins")
        _pip([*common, *_index_args(row, log), *row.requirements], log, f"downloading the wheels of row {row.name}")
        pins = {}
        for p in sorted(dest.glob("*.whl")):
            name, version = wheel_pin(p.name)
            pins[name] = (version, sha256_file(p))
        lock = Lock(row.digest(base), pins)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(lock.text(row, "the wheelhouse step (sha256 of each downloaded wheel)"))
        log(f"[{row.name}] wrote {path.relative_to(REPO)} ({len(pins)} wheels); commit it")
    verify(dest, lock, row)
    return dest, lock


def locked_files(dest: Path, lock: Lock) -> dict[str, Path]:
    files = {}
    for p in dest.glob("*.whl"):
        name, version = wheel_pin(p.name)
        if lock.pins.get(name, (None,))[0] == version:
            files[name] = p
    return files


def verify(dest: Path, lock: Lock, row: Row) -> None:
    """Every locked wheel present with its locked sha256, or a MatrixError naming the first that is not."""
    files = locked_files(dest, lock)
    for name, (version, sha) in sorted(lock.pins.items()):
        if name not in files:
            raise MatrixError(f"row {row.name}: wheel {name}=={version} is missing from {dest}")
        try:
            got = sha256_file(files[name])
        except Hostile as exc:
            raise MatrixError(f"row {row.name}: wheel {name}=={version}: {exc}") from None
        if got != sha:
            raise MatrixError(f"row {row.name}: {files[name].name} has sha256 {got[:16]}…, the lock says "
                              f"{sha[:16]}…; refusing to build from it")


def suite_wheel(out: Path, log=print) -> Path:
    """convbench itself as a wheel, built from this source tree; the wheel carries the asv suite, the matrix
    and the suite revision (setup.py), so the image needs nothing else from the checkout."""
    if not resources.in_checkout():
        raise MatrixError("building an image needs a convbench source tree (the image installs convbench built "
                          "from it): run `convbench images build` from a checkout or an unpacked sdist")
    out.mkdir(parents=True, exist_ok=True)
    log(f"building the convbench wheel from {REPO}")
    try:
        _pip(["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(REPO)], log,
             "building the convbench wheel")
    except MatrixError:
        _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(REPO)], log,
             "building the convbench wheel")
    wheels = sorted(out.glob("convbench-*.whl"))
    if not wheels:
        raise MatrixError("building the convbench wheel produced no wheel")
    return wheels[-1]


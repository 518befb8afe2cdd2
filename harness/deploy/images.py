"""Images: the matrix of software stacks, its Dockerfile, the hashed wheelhouse and the hermetic build.

One concern per step, each callable alone: ``load_matrix`` validates docker/matrix.toml (a bad row is one
clear line), ``render`` fills docker/Dockerfile.j2, ``wheelhouse`` downloads the row's wheels on the host and
checks them against docker/locks/<row>.txt (sha256 per wheel), and ``build`` sends the rendered Dockerfile
and wheelhouse to the engine through the docker SDK with ``network_mode="none"``, so the image can only be
made from the wheels that were hashed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..measurement.digest import sha256_file
from . import resources

REPO = resources.root()  # a checkout, or the wheel's shipped copy (harness/_shipped)
DOCKER_DIR = resources.docker_dir()
DEFAULT_MATRIX = DOCKER_DIR / "matrix.toml"
TEMPLATE = DOCKER_DIR / "Dockerfile.j2"
LOCK_DIR = DOCKER_DIR / "locks"
IMAGE_REPO = "convbench"
LABEL_PREFIX = "org.convbench."
CONTAINER_UID = 10001  # the unprivileged user the images run as
WHEEL_CACHE = Path(os.environ.get("CONVBENCH_WHEEL_CACHE", Path.home() / ".cache" / "convbench" / "wheelhouse"))

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_SM = re.compile(r"^\d{1,2}\.\d$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")
_SAFE = re.compile(r"^[A-Za-z0-9.+:/=_ ,()<>-]*$")  # what may reach a LABEL or a shell line


class MatrixError(ValueError):
    """A matrix, row or lock that cannot be used; the message names the file, the row and the field."""


class EngineError(RuntimeError):
    """The Docker engine is missing, not running or cannot do what was asked; says what to install or start."""


@dataclass(frozen=True)
class Base:
    name: str
    tag: str
    suite: str
    mirror: str
    include: list[str]
    python: str
    glibc: str


@dataclass(frozen=True)
class Row:
    name: str
    base: str
    gpu: bool
    cuda: str
    cudnn: str
    torch: str
    onnxruntime: str
    sm: list[str]
    requirements: list[str]
    extra_index_urls: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def image(self) -> str:
        return f"{IMAGE_REPO}:{self.name}"

    def runs_on(self, sm: str | None) -> bool:
        """Whether this row's binaries can run on a GPU of compute capability ``sm`` ("9.0")."""
        return self.gpu and sm in self.sm

    def lock_path(self) -> Path:
        return LOCK_DIR / f"{self.name}.txt"

    def digest(self, base: Base) -> str:
        """Fingerprint of what the lock was resolved from; a lock from another digest is stale."""
        key = {"requirements": sorted(self.requirements), "indexes": self.extra_index_urls,
               "python": base.python, "glibc": base.glibc}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Pool:
    name: str
    sm: str
    gpus_per_node: int
    slurm_partition: str
    k8s_node_selector: dict[str, str]


@dataclass(frozen=True)
class Overlay:
    """A stack without Docker: pinned wheels laid over a GPU host's own Python and torch (harness.deploy.stacks).

    ``python``/``glibc`` are the host interpreter's the lock is resolved for; ``libraries`` what the wheels bring
    (said in reports, checked against what a run really mapped); ``stands_in_for`` the image rows it approximates
    where those images cannot run; ``host`` what it needs from the host (e.g. the torch it loads into).
    """

    name: str
    python: str
    glibc: str
    host: str
    requirements: list[str]
    libraries: list[str]
    stands_in_for: list[str]
    extra_index_urls: list[str] = field(default_factory=list)
    note: str = ""

    def lock_path(self) -> Path:
        return LOCK_DIR / f"overlay-{self.name}.txt"

    def digest(self, base=None) -> str:
        key = {"requirements": sorted(self.requirements), "python": self.python, "glibc": self.glibc,
               "indexes": self.extra_index_urls, "no_deps": True}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Matrix:
    path: Path
    bases: dict[str, Base]
    rows: dict[str, Row]
    pools: dict[str, Pool]
    overlays: dict[str, Overlay] = field(default_factory=dict)

    def select(self, names: list[str] | None) -> list[Row]:
        if not names:
            return list(self.rows.values())
        unknown = [n for n in names if n not in self.rows]
        if unknown:
            raise MatrixError(f"unknown row {', '.join(unknown)}; the matrix has {', '.join(self.rows)}")
        return [self.rows[n] for n in names]


MAX_MATRIX_BYTES = 4 << 20  # the matrix is a page of TOML; a larger file is not one


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise MatrixError("reading the matrix needs Python >= 3.11 or the tomli package") from None
    from ..core.intake import Hostile, read_file

    if not os.path.lexists(path):
        raise MatrixError(f"{path}: no such matrix file")
    try:  # a regular file of bounded size (a directory, FIFO or /dev/zero is refused, never read or waited on)
        data = read_file(Path(path).resolve(), MAX_MATRIX_BYTES)
    except Hostile as exc:
        raise MatrixError(f"{path}: not a matrix file: {exc}") from None
    try:
        return tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path}: not valid TOML: {exc}") from None


def _fields(where: str, table: dict[str, Any], spec: dict[str, tuple[type, bool]]) -> dict[str, Any]:
    """Check a table against {field: (type, required)}; unknown or mistyped fields are errors."""
    unknown = sorted(set(table) - set(spec))
    if unknown:
        raise MatrixError(f"{where}: unknown field {', '.join(unknown)}; known: {', '.join(spec)}")
    out = {}
    for key, (typ, required) in spec.items():
        if key not in table:
            if required:
                raise MatrixError(f"{where}: missing field {key!r}")
            continue
        value = table[key]
        if typ is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise MatrixError(f"{where}: field {key!r} must be a list of strings, got {value!r}")
        elif typ is dict:
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise MatrixError(f"{where}: field {key!r} must be a table of strings, got {value!r}")
        elif typ is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MatrixError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
        elif not isinstance(value, typ):
            raise MatrixError(f"{where}: field {key!r} must be a {typ.__name__}, got {value!r}")
        if key == "note" and any(ord(ch) < 32 for ch in value):
            raise MatrixError(f"{where}: field 'note' must be one line of text")
        elif isinstance(value, str) and key != "note" and not _SAFE.match(value):
            raise MatrixError(f"{where}: field {key!r} holds characters not allowed in an image label: {value!r}")
        if isinstance(value, list) and not all(_SAFE.match(v) for v in value):
            raise MatrixError(f"{where}: field {key!r} holds characters not allowed in an image label")
        out[key] = value
    return out


def _check_row(where: str, row: Row, bases: dict[str, Base]) -> None:
    if not _NAME.match(row.name):
        raise MatrixError(f"{where}: name {row.name!r} must be lower-case letters, digits, '.', '_' or '-'")
    if row.base not in bases:
        raise MatrixError(f"{where}: base {row.base!r} is not defined; bases: {', '.join(bases) or '(none)'}")
    bad_sm = [s for s in row.sm if not _SM.match(s)]
    if bad_sm:
        raise MatrixError(f"{where}: sm {', '.join(bad_sm)} must look like \"8.0\" (major.minor)")
    if row.gpu and not row.sm:
        raise MatrixError(f"{where}: a GPU row must list the SM architectures it runs on (sm = [\"9.0\", ...])")
    if not row.gpu and row.sm:
        raise MatrixError(f"{where}: a CPU row (gpu = false) cannot list SM architectures")
    if row.gpu and not (row.cuda and row.cudnn):
        raise MatrixError(f"{where}: a GPU row needs its cuda and cudnn versions")
    pins: dict[str, str] = {}
    for req in row.requirements:
        m = _PIN.match(req)
        if not m:
            raise MatrixError(f"{where}: requirement {req!r} must be an exact pin, name==version")
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    if pins.get("torch") != row.torch:
        raise MatrixError(f"{where}: torch = {row.torch!r} but requirements pin torch=={pins.get('torch')}")
    ort = _PIN.match(row.onnxruntime)
    if not ort or pins.get(ort.group(1).lower()) != ort.group(2):
        raise MatrixError(f"{where}: onnxruntime = {row.onnxruntime!r} is not among the requirements' pins")
    if ort.group(1).lower() != ("onnxruntime-gpu" if row.gpu else "onnxruntime"):
        raise MatrixError(f"{where}: a {'GPU' if row.gpu else 'CPU'} row needs "
                          f"{'onnxruntime-gpu' if row.gpu else 'onnxruntime'}, not {ort.group(1)}")
    for url in row.extra_index_urls:
        if not url.startswith(("https://", "http://", "file://")):
            raise MatrixError(f"{where}: extra index {url!r} is not a URL")


def load_matrix(path: Path = DEFAULT_MATRIX) -> Matrix:
    """Read and validate the matrix; every problem is a MatrixError naming the row and the field."""
    data = _load_toml(path)
    unknown = sorted(set(data) - {"bases", "row", "pool", "overlay"})
    if unknown:
        raise MatrixError(f"{path}: unknown table {', '.join(unknown)}; expected [bases.*], [[row]], [[pool]], "
                          "[[overlay]]")
    bases: dict[str, Base] = {}
    for name, table in (data.get("bases") or {}).items():
        where = f"{path}: base {name!r}"
        if not isinstance(table, dict):
            raise MatrixError(f"{where}: must be a table")
        f = _fields(where, table, {"tag": (str, True), "suite": (str, True), "mirror": (str, True),
                                   "include": (list, False), "python": (str, True), "glibc": (str, True)})
        if not re.match(r"^\d+\.\d+$", f["glibc"]) or not re.match(r"^3\.\d+$", f["python"]):
            raise MatrixError(f"{where}: python must look like \"3.11\" and glibc like \"2.36\"")
        bases[name] = Base(name=name, include=f.get("include", []), **{k: v for k, v in f.items() if k != "include"})
    rows: dict[str, Row] = {}
    raw_rows = data.get("row") or []
    if not isinstance(raw_rows, list) or not raw_rows:
        raise MatrixError(f"{path}: no [[row]] tables")
    spec = {"name": (str, True), "base": (str, True), "gpu": (bool, True), "cuda": (str, True),
            "cudnn": (str, True), "torch": (str, True), "onnxruntime": (str, True), "sm": (list, True),
            "requirements": (list, True), "extra_index_urls": (list, False), "note": (str, False)}
    for i, table in enumerate(raw_rows, 1):
        label = table.get("name") if isinstance(table, dict) and isinstance(table.get("name"), str) else "?"
        where = f"{path}: row {i} ({label})"
        if not isinstance(table, dict):
            raise MatrixError(f"{where}: must be a table")
        row = Row(**_fields(where, table, spec))
        _check_row(where, row, bases)
        if row.name in rows:
            raise MatrixError(f"{where}: duplicate row name {row.name!r}")
        rows[row.name] = row
    pools: dict[str, Pool] = {}
    for i, table in enumerate(data.get("pool") or [], 1):
        where = f"{path}: pool {i}"
        f = _fields(where, table, {"name": (str, True), "sm": (str, True), "gpus_per_node": (int, True),
                                   "slurm_partition": (str, True), "k8s_node_selector": (dict, True)})
        if not _NAME.match(f["name"]) or not _SM.match(f["sm"]):
            raise MatrixError(f"{where}: name must be a lower-case word and sm like \"9.0\"")
        pools[f["name"]] = Pool(**f)
    overlays: dict[str, Overlay] = {}
    spec = {"name": (str, True), "python": (str, True), "glibc": (str, True), "host": (str, True),
            "requirements": (list, True), "libraries": (list, True), "stands_in_for": (list, True),
            "extra_index_urls": (list, False), "note": (str, False)}
    for i, table in enumerate(data.get("overlay") or [], 1):
        label = table.get("name") if isinstance(table, dict) and isinstance(table.get("name"), str) else "?"
        where = f"{path}: overlay {i} ({label})"
        if not isinstance(table, dict):
            raise MatrixError(f"{where}: must be a table")
        ov = Overlay(**_fields(where, table, spec))
        if not _NAME.match(ov.name) or ov.name == "host" or ov.name in overlays:
            raise MatrixError(f"{where}: name must be a lower-case word, not 'host', and unique")
        bad = [r for r in ov.requirements if not _PIN.match(r)]
        if bad or not ov.requirements:
            raise MatrixError(f"{where}: requirements must be exact pins, name==version (got {bad or 'none'})")
        missing = [r for r in ov.stands_in_for if r not in rows]
        if missing:
            raise MatrixError(f"{where}: stands_in_for names no row {', '.join(missing)}; rows: {', '.join(rows)}")
        if not re.match(r"^\d+\.\d+$", ov.glibc) or not re.match(r"^3\.\d+$", ov.python):
            raise MatrixError(f"{where}: python must look like \"3.12\" and glibc like \"2.35\"")
        overlays[ov.name] = ov
    return Matrix(path=Path(path), bases=bases, rows=rows, pools=pools, overlays=overlays)


# ---- the engine -------------------------------------------------------------------------------------------

def engine():
    """A docker SDK client to a running engine, or an EngineError saying what to install or start."""
    try:
        import docker
    except ImportError:
        raise EngineError("the docker SDK is not installed: pip install 'convbench[harness]'") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except Exception as exc:  # DockerException wraps connection refused, missing socket, permission denied
        text = str(exc)
        if "ermission denied" in text:
            raise EngineError(f"no permission to use the Docker engine at {where}: run as root or join the "
                              "docker group") from None
        raise EngineError(f"the Docker engine is not running at {where}: start it (dockerd, or "
                          "`systemctl start docker`; scripts/host-docker.sh does both) or use --no-docker") from None


def build_revision() -> str:
    """The revision of the checkout an image is built from (resources.revision: git HEAD, -dirty with edits); it
    becomes the image's CONVBENCH_REVISION, which journal.suite_revision then records in every run."""
    return resources.revision()


def labels(row: Row, base: Base, revision: str, lock_sha256: str) -> dict[str, str]:
    """The image labels: enough to tell, from an image id alone, what stack and suite it measured."""
    return {
        f"{LABEL_PREFIX}row": row.name,
        f"{LABEL_PREFIX}cuda": row.cuda or "none",
        f"{LABEL_PREFIX}cudnn": row.cudnn or "none",
        f"{LABEL_PREFIX}torch": row.torch,
        f"{LABEL_PREFIX}onnxruntime": row.onnxruntime,
        f"{LABEL_PREFIX}sm": ",".join(row.sm) or "cpu",
        f"{LABEL_PREFIX}base": base.tag,
        f"{LABEL_PREFIX}python": base.python,
        f"{LABEL_PREFIX}suite-revision": revision,
        f"{LABEL_PREFIX}lock-sha256": lock_sha256,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.title": f"convbench {row.name}",
    }


# ---- rendering ---------------------------------------------------------------------------------------------

def render(matrix: Matrix, row: Row, revision: str, lock_sha256: str = "unlocked") -> str:
    """The Dockerfile of one row, from docker/Dockerfile.j2."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    template = env.from_string(TEMPLATE.read_text())
    base = matrix.bases[row.base]
    return template.render(row=row, base=base, revision=revision, uid=CONTAINER_UID,
                           labels=labels(row, base, revision, lock_sha256))


# ---- the wheelhouse ----------------------------------------------------------------------------------------

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
        got = sha256_file(files[name])
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


# ---- the build ---------------------------------------------------------------------------------------------

def build_context(matrix: Matrix, row: Row, ctx: Path, wheels: Path, lock: Lock, revision: str, log=print) -> None:
    """Lay out what the engine receives: the Dockerfile, the locked wheels, the lock and the convbench wheel
    (which carries the asv suite). Nothing else from the host enters the image."""
    (ctx / "wheelhouse").mkdir(parents=True)
    for src in locked_files(wheels, lock).values():
        dst = ctx / "wheelhouse" / src.name
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    (ctx / "wheelhouse" / "requirements.lock").write_text(lock.text(row, "convbench images build"))
    suite_wheel(ctx / "suite-wheel", log)
    (ctx / "Dockerfile").write_text(render(matrix, row, revision, lock.sha256))


def build(client, matrix: Matrix, row: Row, cache: Path = WHEEL_CACHE, log=print) -> str:
    """Build the row's image hermetically (no network during the build); returns the image id."""
    import docker

    base = matrix.bases[row.base]
    try:
        client.images.get(base.tag)
    except docker.errors.ImageNotFound:
        raise EngineError(f"base image {base.tag} is missing: make it with `python -m harness.deploy.baseimage "
                          f"{base.name}` (as root) or scripts/host-docker.sh") from None
    revision = build_revision()
    wheels, lock = wheelhouse(matrix, row, cache, log)
    tag = f"{row.image}-{revision}"
    if not revision.endswith("-dirty") and revision != "unknown":
        try:
            image = client.images.get(tag)
            if image.labels.get(f"{LABEL_PREFIX}lock-sha256") == lock.sha256:
                image.tag(IMAGE_REPO, row.name)
                log(f"[{row.name}] {tag} already built from this revision and lock ({image.short_id}); kept")
                return image.id
        except docker.errors.ImageNotFound:
            pass
    with tempfile.TemporaryDirectory(prefix=f"convbench-build-{row.name}-") as tmp:
        ctx = Path(tmp)
        build_context(matrix, row, ctx, wheels, lock, revision, log)
        log(f"[{row.name}] docker build (network none) -> {tag}")
        image_id = None
        try:
            for chunk in client.api.build(path=str(ctx), tag=tag, network_mode="none", rm=True, forcerm=True,
                                          pull=False, decode=True, labels=None):
                if "stream" in chunk:
                    for line in chunk["stream"].splitlines():
                        if line.strip() and not line.lstrip().startswith(("--->", "Removing intermediate")):
                            log(f"[{row.name}] {line}")
                if "error" in chunk:
                    raise EngineError(f"building row {row.name} failed: {chunk['error'].strip().splitlines()[-1]}")
                aux = chunk.get("aux") or {}
                image_id = aux.get("ID", image_id)
        except docker.errors.APIError as exc:
            raise EngineError(f"building row {row.name} failed: {exc.explanation or exc}") from None
    image = client.images.get(image_id or tag)
    image.tag(IMAGE_REPO, row.name)
    log(f"[{row.name}] built {image.short_id} tagged {row.image} and {tag}")
    return image.id


def image_info(client, row: Row) -> dict[str, Any] | None:
    """Labels, id and size of the row's local image, or None when it is not built."""
    import docker

    try:
        image = client.images.get(row.image)
    except docker.errors.ImageNotFound:
        return None
    return {"id": image.id, "labels": image.labels or {}, "size": image.attrs.get("Size", 0),
            "created": image.attrs.get("Created")}

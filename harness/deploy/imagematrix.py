"""The image matrix: docker/matrix.toml read and checked into bases, rows (one image each), pools and overlays.

Every other deploy module works from a ``Matrix``: images.py renders and builds a row, wheels.py locks and
downloads its wheels, slurm.py and manifests.py turn pools into Slurm and Kubernetes jobs, stacks.py installs overlays.
``load_matrix`` refuses a bad row with one clear line naming the file, the row and the field; strings that may
reach a LABEL or a shell line are checked here, once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import resources

DOCKER_DIR = resources.docker_dir()
DEFAULT_MATRIX = DOCKER_DIR / "matrix.toml"
LOCK_DIR = DOCKER_DIR / "locks"
IMAGE_REPO = "convbench"
CONTAINER_UID = 10001  # the unprivileged user the images run as

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_SM = re.compile(r"^\d{1,2}\.\d$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")
_SAFE = re.compile(r"^[A-Za-z0-9.+:/=_ ,()<>-]*$")  # what may reach a LABEL or a shell line


class MatrixError(ValueError):
    """A matrix, row or lock that cannot be used; the message names the file, the row and the field."""


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
    nodes: int = 1  # nodes in the pool: a Slurm night takes them all, Kubernetes runs a pod on each


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
        raise MatrixError(f"{path}: not valid TOML: {str(exc).splitlines()[0][:200]}") from None
    except RecursionError:  # arrays or inline tables nested thousands deep: no matrix is
        raise MatrixError(f"{path}: not a matrix: nested deeper than TOML's parser follows") from None


def _array_of_tables(path: Path, data: dict[str, Any], key: str) -> list[Any]:
    """``[[key]]``: a list (its entries are checked to be tables where each is read)."""
    value = data.get(key) or []
    if not isinstance(value, list):
        raise MatrixError(f"{path}: {key!r} must be an array of tables ([[{key}]]), not {type(value).__name__}")
    return value


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
    if not isinstance(data.get("bases") or {}, dict):
        raise MatrixError(f"{path}: 'bases' must be a table of tables ([bases.NAME])")
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
    raw_rows = _array_of_tables(path, data, "row")
    if not raw_rows:
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
    for i, table in enumerate(_array_of_tables(path, data, "pool"), 1):
        where = f"{path}: pool {i}"
        if not isinstance(table, dict):
            raise MatrixError(f"{where}: must be a table")
        f = _fields(where, table, {"name": (str, True), "sm": (str, True), "gpus_per_node": (int, True),
                                   "slurm_partition": (str, True), "k8s_node_selector": (dict, True),
                                   "nodes": (int, False)})
        if not _NAME.match(f["name"]) or not _SM.match(f["sm"]):
            raise MatrixError(f"{where}: name must be a lower-case word and sm like \"9.0\"")
        pools[f["name"]] = Pool(**f)
    overlays: dict[str, Overlay] = {}
    spec = {"name": (str, True), "python": (str, True), "glibc": (str, True), "host": (str, True),
            "requirements": (list, True), "libraries": (list, True), "stands_in_for": (list, True),
            "extra_index_urls": (list, False), "note": (str, False)}
    for i, table in enumerate(_array_of_tables(path, data, "overlay"), 1):
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


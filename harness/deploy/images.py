"""Images: a matrix row's Dockerfile rendered from docker/Dockerfile.j2 and built hermetically.

``render`` fills the template with the row, its base and the labels that tell from an image id alone what
stack and suite it measured; ``build`` sends the rendered Dockerfile and the row's locked wheelhouse
(wheels.py) to the engine through the docker SDK with ``network_mode="none"``, so the image can only be made
from the wheels that were hashed. ``engine`` says what to install or start when there is no engine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import resources
from .imagematrix import CONTAINER_UID, DOCKER_DIR, IMAGE_REPO, Base, Matrix, Row
from .wheels import WHEEL_CACHE, Lock, locked_files, suite_wheel, wheelhouse

TEMPLATE = DOCKER_DIR / "Dockerfile.j2"
LABEL_PREFIX = "org.convbench."


class EngineError(RuntimeError):
    """The Docker engine is missing, not running or cannot do what was asked; says what to install or start."""



# ---- the engine -------------------------------------------------------------------------------------------

ENGINE_ANSWER_S = 10  # an engine that accepts the connection but never answers is said within this
ENGINE_CALL_S = 600  # one engine call once it has answered (a build step, a log stream's next line)


def engine():
    """A docker SDK client to a running engine, or an EngineError saying what to install or start."""
    try:
        import docker
    except ImportError:
        raise EngineError("the docker SDK is not installed: pip install 'convbench[harness]'") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=ENGINE_ANSWER_S)
        client.ping()
        client.api.timeout = ENGINE_CALL_S  # builds and log streams take long; the first answer must not
        return client
    except Exception as exc:  # DockerException wraps connection refused, missing socket, permission denied
        text = str(exc)
        if "timed out" in text.lower():
            raise EngineError(f"the Docker engine at {where} did not answer within {ENGINE_ANSWER_S} s: restart "
                              "it (dockerd, `systemctl restart docker`) or use --no-docker") from None
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
        raise EngineError(f"base image {base.tag} is missing: make it with `convbench images base "
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


def row_states(matrix: Matrix, client=None) -> list[dict[str, Any]]:
    """Each row of the matrix with its versions, its lock's state (``lock``, ``wheels``; ``lock_text`` in words)
    and its image in the engine (None: not built, or no ``client``) for `convbench images list`."""
    from . import imagematrix, wheels

    rows: list[dict[str, Any]] = []
    for row in matrix.rows.values():
        base = matrix.bases[row.base]
        path = row.lock_path()
        wheels_pinned = None
        if not path.exists():
            lock = "not locked"
        else:
            try:
                lk = wheels.read_lock(path)
                wheels_pinned = len(lk.pins) if lk.row_digest == row.digest(base) else None
                lock = f"{wheels_pinned} wheels" if wheels_pinned is not None else "stale"
            except imagematrix.MatrixError:
                lock = "unreadable"
        info = image_info(client, row) if client else None
        rows.append({"row": row.name, "cuda": row.cuda or None, "cudnn": row.cudnn or None, "torch": row.torch,
                     "onnxruntime": row.onnxruntime, "sm": list(row.sm), "note": row.note,
                     "lock": "locked" if wheels_pinned is not None else lock, "wheels": wheels_pinned,
                     "lock_text": lock, "image": None if info is None else {
                         "id": info["id"], "size_bytes": info["size"],
                         "suite_revision": info["labels"].get(LABEL_PREFIX + "suite-revision")}})
    return rows

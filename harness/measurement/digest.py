"""File digests shared by the wheelhouse lock (images) and the model cache (models)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks so wheels and models of any size hash in constant memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

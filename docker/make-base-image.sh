#!/usr/bin/env bash
# Make the local base image(s) the matrix names: debootstrap --variant=minbase + docker import through the SDK.
# Needs root, debootstrap and a Python with the docker SDK; an image already present is kept.
# Usage: docker/make-base-image.sh [BASE...]   (see docs/images.md)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
exec env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m harness.cli images base "$@"

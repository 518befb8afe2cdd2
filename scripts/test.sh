#!/usr/bin/env bash
# The test command (README): installs what the tests need on a fresh machine and runs them all.
# No GPU is needed: GPU tests carry the `gpu` marker and skip cleanly without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
# Host services for the integration tests (Docker engine, headless Chromium); each script says what it did.
for s in scripts/host-*.sh; do [ -e "$s" ] && bash "$s"; done
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2> >(grep -v "is ignored" >&2 || true)
.venv/bin/python -m pip install -q -e '.[cpu,harness,test]' 'torch==2.13.0' 2> >(grep -v "is ignored" >&2 || true)
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -rs "$@"

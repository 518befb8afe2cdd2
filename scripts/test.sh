#!/usr/bin/env bash
# The test command (README): installs what the tests need on a fresh machine and runs them all, in three xdist
# workers on two cores: part of the suite waits on Docker, Slurm and Chromium, and three beat two and four
# (docs/history.md, "The test suite's time"). A Slurm cluster (fixed ports) runs one at a time (a lock in
# tests/slurm_cluster.py), the CPU image is built once, and the fixture report is built once for all workers
# (tests/conftest.py).
# No GPU is needed: GPU tests carry the `gpu` marker and skip cleanly without CUDA.
#
#   scripts/test.sh [--quick] [pytest arguments]
#
# --quick: the fast lane, every test not marked `slow` (no Docker, Slurm or browser services are started).
# A Docker engine this script started is stopped at the end; one that was running is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
started="$(mktemp -d)"
stop_started() {
  if [ -s "$started/dockerd.pid" ]; then
    pid="$(cat "$started/dockerd.pid")"
    echo "test.sh: stopping the dockerd this run started (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -rf "$started"
}
trap stop_started EXIT
# A clean clone's full run peaked 2.4 GB above its start, its venv included and the images cached
# (docs/evidence/2026-12-07-suite-disk.txt); building the CPU image from nothing adds 2.4 GB more
# (docs/evidence/2026-12-07-image-rebuild.txt). With less room, dozens of tests fail with "No space left on
# device" far from its cause: said once here instead.
need_gib=6
if [ "$quick" = 0 ]; then
  for dir in . "${TMPDIR:-/tmp}"; do
    free_gib=$(df -Pk "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
    if [ "$free_gib" -lt "$need_gib" ]; then
      echo "test.sh: $free_gib GiB free on $(df -P "$dir" | awk 'NR == 2 {print $6}') (holding $dir); the full suite needs about $need_gib GiB while it runs: free some, or run scripts/test.sh --quick" >&2
      exit 1
    fi
  done
fi
# Host services for the integration tests (Docker engine, headless Chromium); each script says what it did.
if [ "$quick" = 0 ]; then
  for s in scripts/host-*.sh; do [ -e "$s" ] && CONVBENCH_STARTED_DIR="$started" bash "$s"; done
fi
python3 -m venv .venv
pip_q() { .venv/bin/python -m pip install -q "$@" 2> >(grep -v "is ignored" >&2 || true); }
pip_q --upgrade pip
# pip installs one package after another on one core: PyTorch's CPU wheel goes in beside the rest (49 -> 35 s on
# the 2-core VM, docs/history.md); the last call resolves the whole set and adds whatever the two left out.
pip_q --no-deps 'torch==2.13.0' &
torch_pip=$!
pip_q -e '.[harness,test]' 'onnxruntime>=1.17' 'onnx>=1.15' 'asv>=0.6.4' sympy networkx fsspec filelock
wait "$torch_pip"
pip_q -e '.[cpu,harness,test]' 'torch==2.13.0'
.venv/bin/ruff check .
lane=()
[ "$quick" = 1 ] && lane=(-m "not slow")
# whole modules per worker, the longest first (tests/_lanes.py): a module's fixtures are made once
.venv/bin/python -m pytest -q -rs -n 3 --dist loadfile --no-loadscope-reorder --durations=20 "${lane[@]}" "$@"

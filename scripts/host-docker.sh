#!/usr/bin/env bash
# Host service for the Docker integration tests (run by scripts/test.sh before the tests):
# installs Debian's Docker engine and debootstrap if missing, starts dockerd if it is not running, waits until
# it answers, and makes the local base image the matrix names (no registry is reachable, so no `docker pull`).
# Idempotent: each step is skipped when already done, and each says what it did. With CONVBENCH_STARTED_DIR set,
# the pid of a dockerd it starts is written to dockerd.pid there. When it cannot act (not root,
# no apt) it says why and exits 0, so the `docker` tests skip with that reason instead of failing the suite.
set -u -o pipefail
cd "$(dirname "$0")/.."
say() { echo "host-docker: $*"; }

if [ "$(id -u)" != 0 ]; then say "not root: cannot install or start Docker here; the docker tests will skip"; exit 0; fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
{ command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ]; } || need+=(debootstrap)
# A Python with the docker SDK and tomllib makes the base image; Debian's python3-docker provides the SDK.
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c "import docker, tomllib" >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || need+=(python3-docker)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then say "no apt-get to install ${need[*]}; the docker tests will skip"; exit 0; fi
  say "installing ${need[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }; then
    say "apt-get could not install ${need[*]}; the docker tests will skip"; exit 0
  fi
else
  say "docker.io, debootstrap and the docker SDK already installed"
fi
[ -n "$PY" ] || PY=/usr/bin/python3

engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if engine_up; then
  say "engine already running ($(docker version --format '{{.Server.Version}}'))"
else
  say "starting dockerd (log: /var/log/convbench-dockerd.log)"
  nohup dockerd >/var/log/convbench-dockerd.log 2>&1 &
  # scripts/test.sh stops at its end the engine it started (and only that one)
  [ -n "${CONVBENCH_STARTED_DIR:-}" ] && echo $! > "$CONVBENCH_STARTED_DIR/dockerd.pid"
  for _ in $(seq 1 60); do engine_up && break; sleep 1; done
  if ! engine_up; then
    say "dockerd did not answer within 60 s (last log: $(tail -n 1 /var/log/convbench-dockerd.log)); the docker tests will skip"
    exit 0
  fi
  say "engine answering ($(docker version --format '{{.Server.Version}}'))"
fi

# The base image: made once with debootstrap + docker import (through the SDK); kept when present.
if ! PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m harness.cli images base 2>&1 | sed 's/^/host-docker: /'; then
  say "could not make the base image; the docker tests will skip"
fi
exit 0

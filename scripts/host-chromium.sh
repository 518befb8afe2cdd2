#!/usr/bin/env bash
# Host service for the browser tests: Debian's headless-capable `chromium`. Idempotent; says what it did.
# Without apt (or without root) it installs nothing and says so: tests marked `browser` then skip with a reason.
set -uo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "host-chromium: chromium already installed: $(chromium --version 2>/dev/null | head -1)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "host-chromium: apt-get not available; installed nothing (browser tests will skip)"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "host-chromium: not root; installed nothing (browser tests will skip)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq >/dev/null 2>&1; then
  echo "host-chromium: apt-get update failed; installed nothing (browser tests will skip)"
  exit 0
fi
if apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1; then
  echo "host-chromium: installed $(chromium --version 2>/dev/null | head -1)"
else
  echo "host-chromium: apt-get install chromium failed; browser tests will skip"
fi
exit 0

#!/usr/bin/env bash
# Builds the sample report from the committed fixtures (tests/fixtures/runs/*.tar.gz) and packs it as
# reports/sample.tar.xz: tens of MB of HTML packed under 1 MB, so the tree a GPU host is sent stays small.
#   bash scripts/sample_report.sh            rebuild reports/sample/ and reports/sample.tar.xz
#   tar xJf reports/sample.tar.xz -C reports  unpack the committed one, then open reports/sample/index.html
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
store=$(mktemp -d)/fixtures.sqlite
"$py" -m harness.cli collect tests/fixtures/runs/*.tar.gz --store "$store"
"$py" -m harness.cli report --store "$store" --out reports/sample \
  --title "convbench sample report (H200 and CPU fixtures)"
tar cJf reports/sample.tar.xz -C reports sample
rm -rf "$(dirname "$store")"
echo "reports/sample.tar.xz: $(du -h reports/sample.tar.xz | cut -f1) ($(find reports/sample -name '*.html' | wc -l) pages)"

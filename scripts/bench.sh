#!/usr/bin/env bash
# The main job (README): the benchmark suite on this host, collected into the store, rendered as the report.
# With a CUDA GPU: every cuDNN forward algorithm x math type x dtype x layout and PyTorch's settings grid on
# the default catalogue, using the host's own torch (its CUDA/cuDNN stack). Without one: the CPU backends on
# the quick catalogue, and it says so. Extra arguments go to `convbench bench` (e.g. --cases seed).
set -euo pipefail
cd "$(dirname "$0")/.."
quiet() { "$@" 2> >(grep -v "is ignored" >&2 || true); }
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "CUDA GPU found: using this host's PyTorch and cuDNN"
  python3 -m venv --system-site-packages .venv
  quiet .venv/bin/python -m pip install -q -e '.[gpu,harness]'
else
  echo "no CUDA GPU on this host: installing the CPU stack; the CPU backends will run"
  python3 -m venv .venv
  quiet .venv/bin/python -m pip install -q -e '.[cpu,harness]' 'torch==2.13.0'
fi
.venv/bin/convbench doctor || true
status=0
.venv/bin/convbench bench "$@" || status=$?
.venv/bin/convbench collect results --store results/convbench.sqlite -q
.venv/bin/convbench report --store results/convbench.sqlite --out reports/site
echo "report: $(pwd)/reports/site/index.html"
exit $status

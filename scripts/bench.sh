#!/usr/bin/env bash
# The main job (README): the benchmark suite on this host, collected into the store, rendered as the report.
# With a CUDA GPU: every cuDNN forward algorithm x math type x dtype x layout, PyTorch's settings grid and
# onnxruntime's search modes on the default catalogue, in this host's own Python environment (its torch, CUDA and
# cuDNN): the active venv or conda env, or the interpreter named by --python; convbench is installed into it.
# Without one: a fresh .venv with the CPU stack and the quick catalogue, and it says so.
#
#   scripts/bench.sh [--python PY] [--wheelhouse DIR] [--which] [convbench bench flags, e.g. --cases seed]
#
# --wheelhouse DIR: a host without a package registry installs from the wheels in DIR only (pip --no-index).
# --which: say which Python environment would be used, and stop.
set -euo pipefail
cd "$(dirname "$0")/.."
python="" wheelhouse="" which_only=0 args=() cpu_cases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="${2:?--python needs an interpreter}"; shift 2 ;;
    --wheelhouse) wheelhouse="${2:?--wheelhouse needs a folder}"; shift 2 ;;
    --which) which_only=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -n "$wheelhouse" ] && [ ! -d "$wheelhouse" ]; then
  echo "bench.sh: error: --wheelhouse $wheelhouse is not a folder" >&2; exit 2
fi
# The host's Python environment, in order: the one named, the active venv, the active conda env, python3.
if [ -n "$python" ]; then how="named by --python"
elif [ -n "${VIRTUAL_ENV:-}" ]; then python="$VIRTUAL_ENV/bin/python"; how="the active virtual environment"
elif [ -n "${CONDA_PREFIX:-}" ]; then python="$CONDA_PREFIX/bin/python"; how="the active conda environment"
else python="$(command -v python3 || true)"; how="python3 on PATH"
fi
if [ -z "$python" ] || ! "$python" -c "import sys" 2>/dev/null; then
  echo "bench.sh: error: no usable Python interpreter ($how: '${python:-none}')" >&2; exit 3
fi
python="$(command -v "$python")"
torch="$("$python" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda, 'cuda-usable' if torch.cuda.is_available() else 'no-gpu')" 2>/dev/null || echo "none")"
quiet() { "$@" 2> >(grep -v "is ignored" >&2 || true); }
pip_from=()
[ -n "$wheelhouse" ] && pip_from=(--no-index --find-links "$wheelhouse")
if [[ "$torch" == *cuda-usable ]]; then
  prefix="$("$python" -c "import sys; print(sys.prefix)")"
  echo "CUDA GPU found: using $python ($how, environment $prefix; torch ${torch% cuda-usable})"
  [ "$which_only" = 1 ] && exit 0
  # a venv (prefix differs from its base) or a conda env (conda-meta/): convbench goes into it, beside its torch
  if "$python" -c "import os, sys; sys.exit(0 if sys.prefix != sys.base_prefix or os.path.isdir(os.path.join(sys.prefix, 'conda-meta')) else 1)"; then
    bin="$(dirname "$python")"
    quiet "$python" -m pip install -q "${pip_from[@]}" -e '.[gpu,harness]'
  else  # a system interpreter: a venv over it keeps pip out of the system's packages and still sees its torch
    "$python" -m venv --system-site-packages .venv
    bin=.venv/bin
    quiet .venv/bin/python -m pip install -q "${pip_from[@]}" -e '.[gpu,harness]'
  fi
else
  echo "no usable CUDA GPU for $python ($how; torch: ${torch% no-gpu}): installing the CPU stack into .venv;" \
       "the CPU backends will run"
  [ "$which_only" = 1 ] && exit 0
  python3 -m venv .venv
  bin=.venv/bin
  quiet .venv/bin/python -m pip install -q "${pip_from[@]}" -e '.[cpu,harness]' 'torch==2.13.0'
  # the default catalogue (ResNet-50 at batch 32) takes hours on a CPU: the quick one unless --cases was given
  [[ " ${args[*]} " == *" --cases"* ]] || cpu_cases=(--cases quick)
fi
"$bin/convbench" --version
"$bin/convbench" doctor || true
status=0
"$bin/convbench" bench "${cpu_cases[@]}" "${args[@]}" || status=$?
"$bin/convbench" collect results -q  # into the default store, results/convbench.sqlite
"$bin/convbench" report --out reports/site
echo "report: $(pwd)/reports/site/index.html"
exit $status

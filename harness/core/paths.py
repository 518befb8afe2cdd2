"""Where convbench reads and writes by default: one results folder and one store in it, for every command
and for scripts/bench.sh, so that `collect`, `compare` and `report` find what `bench` wrote without flags."""

RESULTS_DIR = "results"
DEFAULT_STORE = "results/convbench.sqlite"

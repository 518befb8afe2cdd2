"""``python -m convbench``: the project's name as a module, beside the ``harness`` package that implements it."""

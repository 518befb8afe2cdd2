"""One run: the append-only journal, the fresh-process worker pool, the sweep, what asv runs, and the studies
built on them (autotune, crosscheck, repro, paired upgrade, the onnxruntime grid)."""

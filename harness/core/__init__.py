"""The vocabulary every layer shares: cases, the record model and its key, record kinds, the enums the suite,
CLI and report use, explanations, errors, the record schema and the guard for untrusted input.

Nothing here imports torch, onnxruntime or another layer of harness, so the asv suite (benchmarks/) may import it
in processes that must not touch CUDA.
"""

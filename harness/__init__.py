"""convbench: speed, accuracy and determinism of convolutions across GPUs, cuDNN versions and frameworks."""

__version__ = "0.1.0"

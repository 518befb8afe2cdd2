"""Remake harness/data/sample_images.npz: scikit-image's sample photographs, ImageNet-cropped to uint8.

Run once by a maintainer (needs scikit-image); the file ships with the package so nothing else needs it.
tests/test_models.py checks the shipped crops against scikit-image's when it is installed.
"""

from __future__ import annotations

import numpy as np
from skimage import data

from harness.backends.ort import imagenet

crops = {name: imagenet.imagenet_crop(getattr(data, name)()) for name in imagenet.SAMPLE_IMAGES}
with open(imagenet.SAMPLE_DATA, "wb") as f:
    np.savez_compressed(f, **crops)
print(f"wrote {imagenet.SAMPLE_DATA} ({imagenet.SAMPLE_DATA.stat().st_size} bytes): {', '.join(crops)}")

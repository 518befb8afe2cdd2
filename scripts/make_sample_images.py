"""Remake harness/data/sample_images.npz: scikit-image's sample photographs, ImageNet-cropped to uint8.

Run once by a maintainer (needs scikit-image); the file ships with the package so nothing else needs it.
tests/test_models.py checks the shipped crops against scikit-image's when it is installed.
"""

from __future__ import annotations

import numpy as np
from skimage import data

from harness.backends.ort import models

crops = {name: models.imagenet_crop(getattr(data, name)()) for name in models.SAMPLE_IMAGES}
with open(models.SAMPLE_DATA, "wb") as f:
    np.savez_compressed(f, **crops)
print(f"wrote {models.SAMPLE_DATA} ({models.SAMPLE_DATA.stat().st_size} bytes): {', '.join(crops)}")

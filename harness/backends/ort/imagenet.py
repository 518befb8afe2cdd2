"""The inputs the models run on: real photographs prepared the ImageNet way (resize, centre crop, normalise),
bit for bit the same on every machine, and a seeded random batch.

The photographs are scikit-image's samples, shipped already cropped as package data so that no host needs
scikit-image; the preprocessing is written here in numpy (not PIL or torchvision) so that its rounding is ours.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .architectures import IMAGE_SIZE, check_model, seeded_rng

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SAMPLE_IMAGES = ("astronaut", "chelsea", "coffee")  # scikit-image's sample photographs, cropped
SAMPLE_DATA = Path(__file__).resolve().parents[2] / "data" / "sample_images.npz"


def _resample_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Antialiased bilinear (triangle filter widened by the scale when shrinking), rows summing to one."""
    scale = n_in / n_out
    support = max(scale, 1.0)
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        xs = np.arange(lo, hi)
        w = np.maximum(0.0, 1.0 - np.abs((xs - center + 0.5) / support))
        m[i, lo:hi] = w / w.sum()
    return m


def imagenet_crop(img: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """HWC uint8 RGB -> size x size x 3 uint8, the ImageNet way: shorter side to 256/224*size, centre crop.

    The resize is rounded back to uint8 (as PIL does), so the crop is the same bits on every machine.
    """
    if img.ndim != 3 or img.shape[2] < 3:
        raise ValueError(f"expected an RGB image (H, W, 3), got shape {img.shape}")
    img = img[:, :, :3].astype(np.float64)
    h, w = img.shape[:2]
    short = round(size * 256 / 224)
    nh, nw = (short, max(short, round(w * short / h))) if h <= w else (max(short, round(h * short / w)), short)
    mh, mw = _resample_matrix(h, nh), _resample_matrix(w, nw)
    resized = np.stack([mh @ img[:, :, c] @ mw.T for c in range(3)], axis=2)
    resized = np.clip(np.floor(resized + 0.5), 0, 255).astype(np.uint8)
    top, left = (nh - size) // 2, (nw - size) // 2
    return np.ascontiguousarray(resized[top:top + size, left:left + size])


def imagenet_normalize(crop: np.ndarray) -> np.ndarray:
    """HWC uint8 crop -> 3xHxW float32: scaled to [0, 1], ImageNet mean and std, channels first."""
    x = crop.astype(np.float32) / np.float32(255)
    mean = np.array(IMAGENET_MEAN, dtype=np.float32)
    std = np.array(IMAGENET_STD, dtype=np.float32)
    return np.ascontiguousarray(((x - mean) / std).transpose(2, 0, 1))


def imagenet_preprocess(img: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """HWC uint8 RGB -> 3xHxW float32 the ImageNet way (imagenet_crop, then imagenet_normalize)."""
    return imagenet_normalize(imagenet_crop(img, size))


def sample_crops() -> dict[str, np.ndarray]:
    """The real-image input: scikit-image's sample photographs, already cropped (uint8, 224x224x3 each).

    Shipped as package data (harness/data/sample_images.npz, made by scripts/make_sample_images.py) so that
    no image or host needs scikit-image; tests/test_models.py proves the crops equal scikit-image's.
    """
    with np.load(SAMPLE_DATA) as data:
        return {name: data[name] for name in SAMPLE_IMAGES}


def model_inputs(model_id: str, batch: int = 1) -> dict[str, np.ndarray]:
    """{"image": real photographs (the shipped sample crops, cycled to ``batch``), "random": seeded N(0,1)}."""
    check_model(model_id)
    crops = sample_crops()
    images = [imagenet_normalize(crops[SAMPLE_IMAGES[i % len(SAMPLE_IMAGES)]]) for i in range(batch)]
    rng = seeded_rng(model_id, f"input.random.n{batch}")
    return {"image": np.stack(images), "random": rng.standard_normal((batch, 3, IMAGE_SIZE, IMAGE_SIZE),
                                                                     dtype=np.float32)}

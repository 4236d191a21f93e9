"""Fixed test images for the vision fixtures, drawn from seeded numpy noise plus simple
shapes so that resizing and cropping differences show up in the pixel values.

What this is: a generator of small odd-sized files covering each decode path (PNG, JPEG,
WebP, RGBA with transparency, greyscale). What it is not: natural photos.
"""
from __future__ import annotations

import pathlib

import numpy as np
from PIL import Image


def _rgb(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """(h, w, 3) uint8: a colour gradient, a bright rectangle and mild noise."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1),
                    (x + y) * 127 / max(w + h - 2, 1)], axis=-1)
    img[h // 4: h // 2 + 1, w // 3: 2 * w // 3 + 1] = (250, 40, 90)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# name -> (width, height, mode, format); every entry is small and deterministic
IMAGES = {
    "tall_37x91.png": (37, 91, "RGB", "PNG"),
    "wide_120x33.jpg": (120, 33, "RGB", "JPEG"),
    "tiny_5x7.png": (5, 7, "RGB", "PNG"),
    "rgba_48x40.png": (48, 40, "RGBA", "PNG"),
    "grey_50x64.png": (50, 64, "L", "PNG"),
    "square_64x64.webp": (64, 64, "RGB", "WEBP"),
}


def write_images(out_dir: pathlib.Path, seed: int = 2024) -> list[pathlib.Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (name, (w, h, mode, fmt)) in enumerate(sorted(IMAGES.items())):
        rng = np.random.default_rng(seed + i)
        rgb = _rgb(rng, w, h)
        if mode == "RGBA":
            alpha = np.full((h, w), 255, np.uint8)
            alpha[:, : w // 2] = 0                          # left half fully transparent
            alpha[h // 2:, w // 2:] = 128                   # bottom-right half transparent
            img = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
        elif mode == "L":
            img = Image.fromarray(rgb, "RGB").convert("L")
        else:
            img = Image.fromarray(rgb, "RGB")
        path = out_dir / name
        kw = {"quality": 90} if fmt in ("JPEG", "WEBP") else {"optimize": False}
        img.save(path, format=fmt, **kw)
        paths.append(path)
    return paths

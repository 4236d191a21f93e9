"""Seeded corruptions of a file's bytes, for the decoders' robustness tests."""
from __future__ import annotations

import numpy as np


def corrupted(data: bytes, rng: np.random.Generator, i: int) -> bytes:
    """The i-th corruption of ``data``, cycling through byte flips, a truncation and an
    insertion of random bytes."""
    out = bytearray(data)
    if i % 3 == 0:
        for _ in range(int(rng.integers(1, 8))):
            out[int(rng.integers(0, len(out)))] = int(rng.integers(0, 256))
    elif i % 3 == 1:
        out = out[:int(rng.integers(0, len(out)))]
    else:
        at = int(rng.integers(0, len(out)))
        out[at:at] = rng.integers(0, 256, int(rng.integers(1, 50)), dtype=np.uint8).tobytes()
    return bytes(out)

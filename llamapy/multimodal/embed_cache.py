"""A byte-bounded LRU cache of projector outputs, so a follow-up turn about the same image
encodes nothing.

Keys are (projector file identity, image content hash, preprocessing parameters, chunk
index) strings made by the handlers; values are float32 (n_tokens, n_embd) arrays, stored
read-only so a caller cannot change what a later hit returns.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Optional

import numpy as np

__all__ = ["EmbeddingCache", "projector_identity", "DEFAULT_CACHE_BYTES"]

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


def projector_identity(path: str) -> str:
    """The projector file as a cache key part: real path, size and modification time."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


class EmbeddingCache:
    """LRU over arrays, bounded by their total ``nbytes`` (``max_bytes``; 0 disables it)."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._items: "OrderedDict[str, np.ndarray]" = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str) -> Optional[np.ndarray]:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: np.ndarray) -> None:
        arr = np.array(value, dtype=np.float32, copy=True)
        arr.setflags(write=False)
        if arr.nbytes > self.max_bytes:
            return  # larger than the whole cache: not kept
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = arr
            self._bytes += arr.nbytes
            while self._bytes > self.max_bytes and self._items:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

"""``Llama.scores`` without its memory: an (n_ctx, n_vocab) float32 array
whose pages are committed only where rows are written.

llama-cpp-python users index ``llm.scores[llm.n_tokens - 1]`` (and slice
``llm.scores[:n]`` with ``logits_all=True``). For a 262k vocabulary at
n_ctx 2048 the array is 2 GiB, so it is an anonymous memory mapping: the
kernel hands out zero pages on first touch, untouched rows cost nothing, and
a row that is no longer wanted is given back (``madvise(MADV_DONTNEED)`` on
Linux, where an anonymous private page then reads as zeros again).
"""
from __future__ import annotations

import mmap
import sys

import numpy as np
import numpy.typing as npt

_LINUX = sys.platform.startswith("linux")
# Linux's MAP_NORESERVE (not exported by the mmap module): the mapping is not
# counted against overcommit, so a huge n_ctx x n_vocab array maps even where
# it exceeds RAM + swap; only the touched rows need memory.
_MAP_NORESERVE = 0x4000


class LazyRows:
    """A zero-initialised (n_rows, n_cols) float32 array backed by anonymous
    memory; ``array`` is an ordinary writable ndarray over it."""

    def __init__(self, n_rows: int, n_cols: int) -> None:
        self.n_rows, self.n_cols = int(n_rows), int(n_cols)
        nbytes = max(self.n_rows * self.n_cols * 4, 1)
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (_MAP_NORESERVE if _LINUX else 0)
        try:
            self._map = mmap.mmap(-1, nbytes, flags=flags)
        except (OSError, ValueError) as e:
            raise MemoryError(f"cannot map a {self.n_rows} x {self.n_cols} logits array ({nbytes / 2**30:.1f} GiB "
                              f"of address space): {e}") from e
        self.array: npt.NDArray[np.single] = np.frombuffer(self._map, dtype=np.single,
                                                           count=self.n_rows * self.n_cols
                                                           ).reshape(self.n_rows, self.n_cols)

    def clear_row(self, row: int) -> None:
        """Zero a row and return its whole pages to the system."""
        start = row * self.n_cols * 4
        end = start + self.n_cols * 4
        page = mmap.PAGESIZE
        first, last = -(-start // page) * page, end // page * page
        if _LINUX and last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)
            flat = self.array.reshape(-1)
            flat[start // 4:first // 4] = 0.0  # the partial pages at the row's edges
            flat[last // 4:end // 4] = 0.0
        else:
            self.array[row] = 0.0

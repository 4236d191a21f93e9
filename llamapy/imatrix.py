"""Read importance matrix files (llama-imatrix's output) for ``quantize --imatrix``.

Two formats, as llama-quantize reads them:
- GGUF (``general.type`` "imatrix"): per weight ``NAME.in_sum2`` (F32, the
  summed squared activations, ``ne0`` values per expert) and ``NAME.counts``
  (F32, tokens seen per expert), with ``imatrix.datasets``,
  ``imatrix.chunk_count`` and ``imatrix.chunk_size``. The importance of a
  column is in_sum2 / count (1 where the count is 0).
- legacy ``.dat``: i32 entry count; per entry i32 name length, name, i32
  ncall, i32 value count, f32 values (already averaged, times ncall); then,
  optionally, i32 chunk count, i32 dataset name length and the name. The
  importance is value / ncall.

Not here: computing an importance matrix (llama-imatrix), using it (the
weighted quantizers in the engine, ``quantize_gguf.py``).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Union

import numpy as np

from .gguf_file import GGUFError, GGUFFile

__all__ = ["ImportanceMatrix", "load_imatrix"]

_GGUF_MAGIC = b"GGUF"


@dataclass
class ImportanceMatrix:
    path: str
    values: Dict[str, np.ndarray]    # weight name -> float32 (n_expert * ne0,) column importances
    datasets: List[str] = field(default_factory=list)
    chunk_count: int = 0
    legacy: bool = False

    def select(self, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> "ImportanceMatrix":
        """llama-quantize's --exclude-weights / --include-weights: drop the
        entries whose name contains an excluded string, then keep only those
        containing an included one."""
        if include and exclude:
            raise ValueError("--include-weights and --exclude-weights cannot be used together")
        values = {k: v for k, v in self.values.items() if not any(s in k for s in exclude)}
        if include:
            values = {k: v for k, v in values.items() if any(s in k for s in include)}
        return ImportanceMatrix(self.path, values, list(self.datasets), self.chunk_count, self.legacy)


def load_imatrix(path: Union[str, "os.PathLike[str]"]) -> ImportanceMatrix:
    """Read an importance matrix in either format. Raises ValueError naming
    what is wrong with a malformed file, FileNotFoundError for a missing one."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    m = _load_gguf(path) if magic == _GGUF_MAGIC else _load_legacy(path)
    if not m.values:
        raise ValueError(f"importance matrix {path}: no entries")
    for name, v in m.values.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"importance matrix {path}: non-finite values for {name}")
    return m


def _load_gguf(path: str) -> ImportanceMatrix:
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        raise ValueError(f"importance matrix {path}: {e}") from None
    with f:
        md = f.metadata
        if not all(k in md for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")):
            raise ValueError(f"importance matrix {path}: missing imatrix metadata (imatrix.datasets, "
                             "imatrix.chunk_count, imatrix.chunk_size)")
        sums, counts = {}, {}
        for t in f.tensors:
            for suffix, table in ((".in_sum2", sums), (".counts", counts)):
                if t.name.endswith(suffix) and len(t.name) > len(suffix):
                    if t.type_name != "F32":
                        raise ValueError(f"importance matrix {path}: {t.name} must be F32, not {t.type_name}")
                    table[t.name[: -len(suffix)]] = np.array(f.tensor(t.name), dtype=np.float32).reshape(-1)
        values = {}
        for name in sorted(set(sums) | set(counts)):
            if name not in sums or name not in counts:
                raise ValueError(f"importance matrix {path}: mismatched sums and counts for {name}")
            c = counts[name]
            c = (np.sign(c) * np.floor(np.abs(c) + 0.5)).astype(np.float32)  # lround, as llama.cpp
            s = sums[name]
            if len(c) == 0 or len(s) % len(c):
                raise ValueError(f"importance matrix {path}: {len(s)} sums for {len(c)} counts in {name}")
            s = s.reshape(len(c), -1)
            out = np.ones_like(s)
            seen = c > 0
            out[seen] = s[seen] / c[seen, None]
            values[name] = out.reshape(-1)
        datasets = [str(d) for d in md["imatrix.datasets"]] if not isinstance(md["imatrix.datasets"], str) else \
            [md["imatrix.datasets"]]
        return ImportanceMatrix(path, values, datasets, int(md["imatrix.chunk_count"]))


class _Reader:
    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"importance matrix {self.path}: truncated at byte {self.pos} ({what})")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i32(self, what: str) -> int:
        return struct.unpack("<i", self.take(4, what))[0]


def _load_legacy(path: str) -> ImportanceMatrix:
    with open(path, "rb") as f:
        r = _Reader(f.read(), path)
    n_entries = r.i32("entry count")
    if n_entries < 1:
        raise ValueError(f"importance matrix {path}: not a GGUF file nor a legacy imatrix (entry count {n_entries})")
    values: Dict[str, np.ndarray] = {}
    for i in range(n_entries):
        name = r.take(r.i32("name length"), f"name of entry {i}").split(b"\0", 1)[0].decode("utf-8", "replace")
        ncall = r.i32(f"ncall of entry {i}")
        nval = r.i32(f"value count of entry {i}")
        if nval < 1:
            raise ValueError(f"importance matrix {path}: entry {i} ({name}) has {nval} values")
        v = np.frombuffer(r.take(4 * nval, f"values of entry {i}"), dtype="<f4").astype(np.float32)
        values[name] = v / np.float32(ncall) if ncall > 0 else v
    chunk_count, datasets = 0, []
    if r.pos < len(r.data):  # optional trailer: chunk count and dataset name
        try:
            chunk_count = r.i32("chunk count")
            n = r.i32("dataset name length")
            if n > 0:
                datasets.append(r.take(n, "dataset name").split(b"\0", 1)[0].decode("utf-8", "replace"))
        except ValueError:
            pass
    return ImportanceMatrix(path, values, datasets, chunk_count, legacy=True)

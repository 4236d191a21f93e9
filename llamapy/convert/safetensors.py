"""A small reader for Hugging Face ``.safetensors`` files (numpy only).

Layout: an 8-byte little-endian header length N, N bytes of JSON mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets
relative to the end of the header; an optional ``__metadata__`` entry), then
the raw little-endian tensor bytes. Tensors come back as read-only numpy
views of a memory map; BF16 is widened to float32. Every header field is
checked against the file before use.

Not here: writing safetensors, pickled ``.bin`` checkpoints (see bert.py).
"""
from __future__ import annotations

import json
import os
from typing import Dict, Iterator, Tuple

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """The file is not a well-formed safetensors file."""


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


class SafetensorsFile:
    """Tensors of one ``.safetensors`` file: ``names()``, ``get(name)``."""

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise SafetensorsError(f"{self.path}: too short for a safetensors header")
            n = int.from_bytes(head, "little")
            if n > _MAX_HEADER or 8 + n > size:
                raise SafetensorsError(f"{self.path}: header length {n} does not fit the file ({size} bytes)")
            try:
                header = json.loads(f.read(n).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise SafetensorsError(f"{self.path}: header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{self.path}: header is not a JSON object")
        self._data_start = 8 + n
        self._data_size = size - self._data_start
        self._entries: Dict[str, Tuple[str, Tuple[int, ...], int, int]] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            self._entries[name] = self._check(name, info)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r") if self._entries else None

    def _check(self, name: str, info: object) -> Tuple[str, Tuple[int, ...], int, int]:
        if not isinstance(info, dict):
            raise SafetensorsError(f"{self.path}: entry {name!r} is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) for o in offsets)):
            raise SafetensorsError(f"{self.path}: tensor {name!r} has a malformed shape or offsets")
        begin, end = offsets
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= begin <= end <= self._data_size or end - begin != count * _DTYPES[dtype].itemsize:
            raise SafetensorsError(f"{self.path}: tensor {name!r} offsets {offsets} do not match its "
                                   f"shape {shape} ({dtype}) within {self._data_size} data bytes")
        return dtype, tuple(shape), begin, end

    def names(self) -> Iterator[str]:
        return iter(self._entries)

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._entries[name][1]

    def get(self, name: str) -> np.ndarray:
        dtype, shape, begin, end = self._entries[name]
        assert self._map is not None
        raw = self._map[self._data_start + begin:self._data_start + end].view(_DTYPES[dtype]).reshape(shape)
        return _bf16_to_f32(raw) if dtype == "BF16" else raw


def load_safetensors(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of a file (lazy views of its memory map)."""
    f = SafetensorsFile(path)
    return {name: f.get(name) for name in f.names()}

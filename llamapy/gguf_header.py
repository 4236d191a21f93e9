"""Serialize a GGUF v3 header: metadata key/values and the tensor table.

Byte layout (little-endian), as the GGUF spec and llama.cpp's gguf.cpp write it:
``"GGUF"``, u32 version (3), u64 tensor count, u64 key/value count; each
key/value: string key, u32 value type, value (strings: u64 length + bytes;
arrays: u32 element type, u64 count, elements); each tensor: string name, u32
number of dimensions, u64 per dimension (ggml order), u32 ggml type, u64 data
offset from the start of the data section; zeros up to the alignment.

Values keep the types they had in the file they came from (``GGUFFile``'s
``metadata_type`` labels), so a copied key/value is byte-identical.

Not here: reading (``gguf_file.py``), tensor data.
"""
from __future__ import annotations

import struct
from typing import Any, Iterable, List, Sequence, Tuple

import numpy as np

__all__ = ["KV", "TensorEntry", "align_up", "header_bytes"]

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3

# GGUF value types: label -> (type id, struct code; None for string/array).
_SCALARS = {
    "u8": (0, "<B"), "i8": (1, "<b"), "u16": (2, "<H"), "i16": (3, "<h"), "u32": (4, "<I"), "i32": (5, "<i"),
    "f32": (6, "<f"), "bool": (7, "<?"), "u64": (10, "<Q"), "i64": (11, "<q"), "f64": (12, "<d"),
}
_STRING, _ARRAY = 8, 9
_NUMPY = {"u8": "<u1", "i8": "<i1", "u16": "<u2", "i16": "<i2", "u32": "<u4", "i32": "<i4", "f32": "<f4",
          "bool": "?", "u64": "<u8", "i64": "<i8", "f64": "<f8"}

KV = Tuple[str, str, Any]                         # (key, type label, value)
TensorEntry = Tuple[str, Sequence[int], int, int]  # (name, ne in ggml order, ggml type id, data offset)


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(label: str, value: Any) -> bytes:
    if label == "string":
        return _string(value)
    if label in _SCALARS:
        return struct.pack(_SCALARS[label][1], value)
    if label.startswith("array[") and label.endswith("]"):
        inner = label[6:-1]
        items = value
        if inner == "string":
            parts: List[bytes] = [struct.pack("<IQ", _STRING, len(items))]
            parts.extend(_string(s) for s in items)
            return b"".join(parts)
        if inner in _SCALARS:
            arr = items.numpy() if hasattr(items, "numpy") else np.asarray(list(items))
            data = np.ascontiguousarray(arr).astype(_NUMPY[inner], copy=False).tobytes()
            return struct.pack("<IQ", _SCALARS[inner][0], len(items)) + data
    raise NotImplementedError(f"writing GGUF metadata of type {label} is not supported")


def header_bytes(kvs: Iterable[KV], tensors: Sequence[TensorEntry], alignment: int) -> bytes:
    """The header up to the data section, padded to ``alignment``."""
    kvs = list(kvs)
    out: List[bytes] = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs))]
    for key, label, value in kvs:
        type_id = _STRING if label == "string" else _ARRAY if label.startswith("array") else _SCALARS[label][0]
        out.append(_string(key) + struct.pack("<I", type_id) + _value(label, value))
    for name, ne, type_id, offset in tensors:
        out.append(_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                   + struct.pack("<IQ", type_id, offset))
    head = b"".join(out)
    return head + b"\0" * (align_up(len(head), alignment) - len(head))

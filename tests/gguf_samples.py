"""Small GGUF files for the reader tests and the fuzzer.

Two ways to make them: ``write_with_gguf`` writes valid files with the
reference writer (``gguf.GGUFWriter``), and ``RawGGUF`` assembles bytes field
by field so tests can forge any count, length, type or offset. ``field_spans``
lists where the numeric fields of a valid file are, for targeted mutations.
Not here: assertions (tests/test_gguf*.py) or the fuzzing loop (tests/fuzz/).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

# ---------------------------------------------------------------------------
# Valid files through gguf.GGUFWriter
# ---------------------------------------------------------------------------

# (key, value, value type, element type for arrays) covering every value type.
ALL_TYPES_METADATA: List[Tuple[str, Any, VT, Optional[VT]]] = [
    ("t.u8", 200, VT.UINT8, None),
    ("t.i8", -100, VT.INT8, None),
    ("t.u16", 60000, VT.UINT16, None),
    ("t.i16", -30000, VT.INT16, None),
    ("t.u32", 4_000_000_000, VT.UINT32, None),
    ("t.i32", -2_000_000_000, VT.INT32, None),
    ("t.f32", 0.5, VT.FLOAT32, None),
    ("t.bool_true", True, VT.BOOL, None),
    ("t.bool_false", False, VT.BOOL, None),
    ("t.string", "héllo wörld ✓", VT.STRING, None),
    ("t.empty_string", "", VT.STRING, None),
    ("t.u64", 2**64 - 1, VT.UINT64, None),
    ("t.i64", -(2**63), VT.INT64, None),
    ("t.f64", -1.25e300, VT.FLOAT64, None),
    ("t.arr_u8", [0, 1, 255], VT.ARRAY, VT.UINT8),
    ("t.arr_i8", [-128, 0, 127], VT.ARRAY, VT.INT8),
    ("t.arr_u16", [0, 65535], VT.ARRAY, VT.UINT16),
    ("t.arr_i16", [-32768, 32767], VT.ARRAY, VT.INT16),
    ("t.arr_u32", [1, 2, 3], VT.ARRAY, VT.UINT32),
    ("t.arr_i32", [-1, 0, 1], VT.ARRAY, VT.INT32),
    ("t.arr_f32", [0.25, -2.0], VT.ARRAY, VT.FLOAT32),
    ("t.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL),
    ("t.arr_string", ["a", "", "ü"], VT.ARRAY, VT.STRING),
    ("t.arr_u64", [2**64 - 1, 0], VT.ARRAY, VT.UINT64),
    ("t.arr_i64", [-(2**63), 2**63 - 1], VT.ARRAY, VT.INT64),
    ("t.arr_f64", [1e-300, 3.5], VT.ARRAY, VT.FLOAT64),
    ("t.nested_i32", [[1, 2], [3, 4, 5]], VT.ARRAY, None),
    ("t.nested_str", [["x", "y"], ["z"]], VT.ARRAY, None),
    ("t.nested3", [[[1], [2, 3]], [[4]]], VT.ARRAY, None),
]


def sample_tensors(seed: int = 0) -> List[Tuple[str, np.ndarray, Optional[QT]]]:
    """(name, array as written, raw ggml type or None) for F32/F16/BF16/Q8_0/I8/I32 tensors."""
    rng = np.random.default_rng(seed)
    f32 = rng.standard_normal((3, 8)).astype(np.float32)
    q_src = rng.standard_normal((2, 64)).astype(np.float32)
    bf_src = rng.standard_normal((2, 5)).astype(np.float32)
    return [
        ("w.f32", f32, None),
        ("w.f16", rng.standard_normal((4, 6)).astype(np.float16), None),
        ("w.bf16", gguf.quants.quantize(bf_src, QT.BF16), QT.BF16),
        ("w.q8_0", gguf.quants.quantize(q_src, QT.Q8_0), QT.Q8_0),
        ("w.i8", rng.integers(-128, 127, (5,), dtype=np.int8), None),
        ("w.i32", rng.integers(-(2**31), 2**31 - 1, (2, 3, 4), dtype=np.int32), None),
        ("w.vec", rng.standard_normal((7,)).astype(np.float32), None),
    ]


def write_with_gguf(
    path: Path,
    metadata: Sequence[Tuple[str, Any, VT, Optional[VT]]] = (),
    tensors: Sequence[Tuple[str, np.ndarray, Optional[QT]]] = (),
    alignment: Optional[int] = None,
    arch: str = "testarch",
) -> Path:
    """Write a GGUF v3 file with gguf.GGUFWriter and return its path."""
    w = gguf.GGUFWriter(str(path), arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, value, vtype, sub_type in metadata:
        if vtype == VT.ARRAY and sub_type is None:
            w.add_array(key, value)
        else:
            w.add_key_value(key, value, vtype, sub_type=sub_type)
    for name, array, raw_dtype in tensors:
        w.add_tensor(name, array, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


# ---------------------------------------------------------------------------
# Byte-level builder for forged files
# ---------------------------------------------------------------------------
_SCALAR_FORMATS = {
    VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
    VT.FLOAT32: "<f", VT.BOOL: "<B", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d",
}


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def gstr(s: "str | bytes", length: Optional[int] = None) -> bytes:
    """A GGUF string; `length` forges the length field."""
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b) if length is None else length) + b


def value_bytes(vtype: VT, value: Any, sub_type: Optional[VT] = None) -> bytes:
    """Payload of a value (without its type field). For an array of arrays
    (sub_type ARRAY) each element is a pair (inner element type, values)."""
    if vtype == VT.STRING:
        return gstr(value)
    if vtype == VT.ARRAY:
        assert sub_type is not None
        if sub_type == VT.ARRAY:
            elems = [value_bytes(VT.ARRAY, inner, inner_type) for inner_type, inner in value]
        else:
            elems = [value_bytes(sub_type, v) for v in value]
        return u32(sub_type) + u64(len(value)) + b"".join(elems)
    return struct.pack(_SCALAR_FORMATS[vtype], value)


class RawGGUF:
    """Assemble a GGUF file field by field. Everything can be forged: pass
    `raw` payloads, wrong counts, or any integer for a type id."""

    def __init__(self, version: int = 3, magic: bytes = b"GGUF") -> None:
        self.magic = magic
        self.version = version
        self.kvs: List[bytes] = []
        self.infos: List[bytes] = []
        self.n_kv: Optional[int] = None         # forge the header counts
        self.n_tensors: Optional[int] = None
        self.alignment = 32
        self.data = b""

    def kv(self, key: "str | bytes", vtype: int, payload: bytes) -> "RawGGUF":
        self.kvs.append(gstr(key) + u32(vtype) + payload)
        return self

    def kv_value(self, key: str, vtype: VT, value: Any, sub_type: Optional[VT] = None) -> "RawGGUF":
        return self.kv(key, vtype, value_bytes(vtype, value, sub_type))

    def set_alignment(self, alignment: int, vtype: VT = VT.UINT32) -> "RawGGUF":
        self.alignment = alignment if alignment and alignment & (alignment - 1) == 0 else 32
        return self.kv_value("general.alignment", vtype, alignment)

    def tensor(self, name: "str | bytes", ne: Sequence[int], ggml_type: int, offset: int,
               n_dims: Optional[int] = None) -> "RawGGUF":
        info = gstr(name) + u32(len(ne) if n_dims is None else n_dims)
        info += b"".join(u64(d) for d in ne) + u32(ggml_type) + u64(offset)
        self.infos.append(info)
        return self

    def header(self) -> bytes:
        n_tensors = len(self.infos) if self.n_tensors is None else self.n_tensors
        n_kv = len(self.kvs) if self.n_kv is None else self.n_kv
        return self.magic + u32(self.version) + u64(n_tensors) + u64(n_kv)

    def build(self, pad: bool = True) -> bytes:
        body = self.header() + b"".join(self.kvs) + b"".join(self.infos)
        if pad and (self.infos or self.data):
            body += b"\0" * ((-len(body)) % self.alignment)
        return body + self.data


# ---------------------------------------------------------------------------
# Field map of a valid file (for targeted mutations)
# ---------------------------------------------------------------------------
def field_spans(data: bytes) -> List[Tuple[int, int]]:
    """(byte offset, width) of every integer field of a *valid* GGUF v2/v3
    file: counts, lengths, type ids, dims and offsets."""
    spans: List[Tuple[int, int]] = [(4, 4), (8, 8), (16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def read_string(p: int) -> int:
        spans.append((p, 8))
        return p + 8 + struct.unpack_from("<Q", data, p)[0]

    def read_value(vtype: int, p: int) -> int:
        if vtype == VT.STRING:
            return read_string(p)
        if vtype == VT.ARRAY:
            spans.extend([(p, 4), (p + 4, 8)])
            elem, count = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(count):
                p = read_value(elem, p)
            return p
        return p + struct.calcsize(_SCALAR_FORMATS[VT(vtype)])

    for _ in range(n_kv):
        pos = read_string(pos)
        spans.append((pos, 4))
        vtype = struct.unpack_from("<I", data, pos)[0]
        pos = read_value(vtype, pos + 4)
    for _ in range(n_tensors):
        pos = read_string(pos)
        n_dims = struct.unpack_from("<I", data, pos)[0]
        spans.append((pos, 4))
        pos += 4
        for _ in range(n_dims):
            spans.append((pos, 8))
            pos += 8
        spans.extend([(pos, 4), (pos + 4, 8)])
        pos += 12
    return spans

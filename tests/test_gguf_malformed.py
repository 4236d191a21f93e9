"""GGUF reader: malformed files raise llamapy.GGUFError (a ValueError) with a
message naming the problem — never a crash, a hang or a huge allocation.

Files are forged field by field with tests/gguf_samples.RawGGUF, or cut and
patched from valid ones written by gguf.GGUFWriter. Valid files: test_gguf.py.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

import llamapy
from llamapy import GGUFError, GGUFFile

from gguf_samples import ALL_TYPES_METADATA, RawGGUF, gstr, sample_tensors, u32, u64, write_with_gguf

U64_MAX = 2**64 - 1


def open_bytes(data: bytes):
    return llamapy._engine.GGUFReader.from_bytes(data)


def expect_error(data: bytes, *needles: str) -> str:
    with pytest.raises(GGUFError) as info:
        open_bytes(data)
    msg = str(info.value)
    assert msg.startswith("GGUF: "), msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def one_tensor(ne=(8,), ggml_type=QT.F32, offset=0, data_bytes=32) -> RawGGUF:
    raw = RawGGUF()
    raw.tensor("t", ne, ggml_type, offset)
    raw.data = b"\0" * data_bytes
    return raw


def test_gguf_error_is_a_value_error():
    assert issubclass(GGUFError, ValueError)
    with pytest.raises(ValueError):
        open_bytes(b"nope")


# ---------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"G", b"GGU"])
def test_too_small(data):
    expect_error(data, "too small")


def test_bad_magic():
    expect_error(b"GGML" + b"\0" * 20, "not a GGUF file", "'GGML'")


@pytest.mark.parametrize("version,needle", [
    (0, "unsupported GGUF version 0"),
    (1, "version 1 is not supported"),
    (4, "unsupported GGUF version 4"),
    (0x03000000, "big-endian"),
    (0x02000000, "big-endian"),
    (U64_MAX & 0xFFFFFFFF, "unsupported GGUF version"),
])
def test_bad_version(version, needle):
    expect_error(RawGGUF(version=version).build(), needle, "at byte 4")


@pytest.mark.parametrize("field,value,needle", [
    ("n_tensors", 2**63, "n_tensors 9223372036854775808 cannot fit"),
    ("n_tensors", U64_MAX, "n_tensors"),
    ("n_tensors", 1, "n_tensors 1 cannot fit in the remaining 14 bytes"),
    ("n_kv", 2**63, "n_kv 9223372036854775808 cannot fit"),
    ("n_kv", U64_MAX, "n_kv"),
    ("n_kv", 2, "n_kv 2 cannot fit in the remaining 14 bytes"),
])
def test_forged_header_counts(field, value, needle):
    raw = RawGGUF().kv_value("a", VT.UINT8, 1)
    setattr(raw, field, value)
    t0 = time.perf_counter()
    expect_error(raw.build(), needle)
    assert time.perf_counter() - t0 < 1.0


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("length", [2**63, U64_MAX, 10**6, 13])
def test_forged_key_length(length):
    raw = RawGGUF()
    raw.kvs.append(gstr("abc", length=length) + u32(VT.UINT8) + b"\x01")
    expect_error(raw.build(), "key #0 at byte 24", f"key length {length} exceeds remaining")


@pytest.mark.parametrize("length", [2**63, U64_MAX, 100])
def test_forged_string_value_length(length):
    raw = RawGGUF().kv_value("ok", VT.UINT8, 1).kv("s", VT.STRING, gstr("hello", length=length))
    expect_error(raw.build(), "key #1 's'", f"string length {length} exceeds remaining")


@pytest.mark.parametrize("count", [2**63, U64_MAX, 2**61, 1000])
@pytest.mark.parametrize("elem", [VT.UINT8, VT.UINT64, VT.STRING, VT.ARRAY])
def test_forged_array_count(count, elem):
    raw = RawGGUF().kv("arr", VT.ARRAY, u32(elem) + u64(count) + b"\0" * 64)
    t0 = time.perf_counter()
    expect_error(raw.build(), "key #0 'arr'", f"array of {count}", "exceeds remaining")
    assert time.perf_counter() - t0 < 1.0


def test_forged_count_inside_string_array():
    payload = u32(VT.STRING) + u64(2) + gstr("ok") + gstr("x", length=2**62)
    msg = expect_error(RawGGUF().kv("toks", VT.ARRAY, payload).build(), "'toks', element 1")
    assert "string length 4611686018427387904 exceeds remaining" in msg


@pytest.mark.parametrize("vtype", [13, 99, 2**32 - 1])
def test_unknown_value_type(vtype):
    expect_error(RawGGUF().kv("k", vtype, b"\0" * 8).build(), f"unknown value type {vtype}")


def test_unknown_array_element_type():
    expect_error(RawGGUF().kv("k", VT.ARRAY, u32(13) + u64(0)).build(), "unknown array element type 13")


@pytest.mark.parametrize("payload,needle", [
    (b"\x02", "bool value 2 is not 0 or 1"),
    (u32(VT.BOOL) + u64(3) + b"\x01\x00\xff", "bool array element 2 is 255"),
])
def test_bool_values_must_be_0_or_1(payload, needle):
    vtype = VT.ARRAY if len(payload) > 1 else VT.BOOL
    expect_error(RawGGUF().kv("b", vtype, payload).build(), needle)


def test_duplicate_key():
    raw = RawGGUF().kv_value("k", VT.UINT8, 1).kv_value("k", VT.UINT8, 2)
    expect_error(raw.build(), "key #1 'k'", "duplicate key")


def test_nesting_depth_is_bounded():
    payload = u32(VT.UINT8) + u64(0)
    for _ in range(40):
        payload = u32(VT.ARRAY) + u64(1) + payload
    expect_error(RawGGUF().kv("deep", VT.ARRAY, payload).build(), "nested deeper than 16")


def test_deep_but_allowed_nesting_reads():
    payload = u32(VT.UINT8) + u64(1) + b"\x07"
    for _ in range(14):
        payload = u32(VT.ARRAY) + u64(1) + payload
    md = open_bytes(RawGGUF().kv("deep", VT.ARRAY, payload).build()).metadata()
    value = md[0][2]
    for _ in range(15):
        value = value[0]
    assert value == 7


@pytest.mark.parametrize("alignment,needle", [
    (0, "alignment 0 is not a nonzero power of two"),
    (3, "alignment 3 is not"),
    (48, "alignment 48 is not"),
    (2**32 - 1, "is not a nonzero power of two"),
])
def test_bad_alignment(alignment, needle):
    expect_error(RawGGUF().set_alignment(alignment).build(), "'general.alignment'", needle)


def test_alignment_must_be_u32():
    expect_error(RawGGUF().set_alignment(64, VT.UINT64).build(), "general.alignment must be a u32, found u64")


# ---------------------------------------------------------------------------
# Tensor infos and data
# ---------------------------------------------------------------------------
def test_valid_forged_tensor_reads():
    raw = one_tensor()
    raw.data = np.arange(8, dtype=np.float32).tobytes()
    r = open_bytes(raw.build())
    assert r.tensor_bytes(0).view(np.float32).tolist() == list(range(8))


@pytest.mark.parametrize("n_dims", [5, 100, 2**32 - 1])
def test_too_many_dims(n_dims):
    raw = RawGGUF()
    raw.tensor("t", [1] * 5, QT.F32, 0, n_dims=n_dims)
    expect_error(raw.build(), "tensor #0 't'", f"n_dims {n_dims} exceeds 4")


@pytest.mark.parametrize("ne,needle", [
    ((2**63,), "ne[0] = 9223372036854775808 is negative"),
    ((8, U64_MAX), "ne[1] = 18446744073709551615 is negative"),
    ((2**32, 2**32), "element count overflows at ne[1]"),
    ((2**62, 4), "overflows"),
    ((2**62,), "overflows 64 bits"),
    ((2**20, 2**20), "runs past the end of the file"),
])
def test_forged_dims(ne, needle):
    expect_error(one_tensor(ne=ne).build(), needle)


@pytest.mark.parametrize("ggml_type,needle", [
    (4, "unknown tensor type 4"),
    (31, "unknown tensor type 31"),
    (40, "unknown tensor type 40"),
    (2**31, "unknown tensor type 2147483648"),
    (2**32 - 1, "unknown tensor type 4294967295"),
])
def test_unknown_tensor_type(ggml_type, needle):
    expect_error(one_tensor(ggml_type=ggml_type).build(), "tensor #0 't'", needle)


def test_row_not_a_multiple_of_block_size():
    expect_error(one_tensor(ne=(33, 1), ggml_type=QT.Q8_0, data_bytes=64).build(),
                 "ne[0] = 33 is not a multiple of the Q8_0 block size 32")


@pytest.mark.parametrize("offset,needle", [
    (1, "offset 1 is not a multiple of the alignment 32"),
    (48, "offset 48 is not a multiple"),
    (64, "runs past the end of the file"),
    (2**63, "runs past the end of the file"),
    (U64_MAX - 31, "runs past the end of the file"),
])
def test_forged_tensor_offset(offset, needle):
    expect_error(one_tensor(offset=offset).build(), needle)


def test_data_past_end_message_names_tensor_offset_and_size():
    raw = RawGGUF()
    raw.tensor("blk.3.attn_q.weight", (64, 2), QT.F32, 0)
    raw.data = b"\0" * 100
    data = raw.build()
    msg = expect_error(data, "tensor 'blk.3.attn_q.weight': data [offset")
    assert f"512 bytes] runs past the end of the file (file size {len(data)})" in msg


def test_overlapping_tensors():
    raw = RawGGUF()
    raw.tensor("a", (16,), QT.F32, 0).tensor("b", (8,), QT.F32, 32)
    raw.data = b"\0" * 96
    expect_error(raw.build(), "tensor 'b'", "overlaps tensor 'a'")


def test_duplicate_tensor_name():
    raw = RawGGUF()
    raw.tensor("a", (8,), QT.F32, 0).tensor("a", (8,), QT.F32, 32)
    raw.data = b"\0" * 64
    expect_error(raw.build(), "tensor #1 'a'", "duplicate tensor name")


def test_data_section_past_end():
    raw = one_tensor(data_bytes=0)
    expect_error(raw.build(pad=False), "data section would start at byte")


# ---------------------------------------------------------------------------
# Truncation and patching of real writer output
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def valid_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "valid.gguf"
    return write_with_gguf(path, ALL_TYPES_METADATA, sample_tensors())


def test_truncation_at_every_byte(valid_file):
    data = valid_file.read_bytes()
    with GGUFFile(valid_file) as f:
        end_of_data = max(t.offset + t.nbytes for t in f.tensors)
    for n in range(len(data)):
        if n < end_of_data:
            with pytest.raises(GGUFError):
                open_bytes(data[:n])
        else:  # only the padding after the last tensor is gone
            open_bytes(data[:n])


def test_truncation_through_the_file_api(valid_file, tmp_path):
    data = valid_file.read_bytes()
    cut = tmp_path / "cut.gguf"
    for n in (0, 3, 8, 23, 24, 25, len(data) // 2, len(data) - 64):
        cut.write_bytes(data[:n])
        with pytest.raises(GGUFError):
            GGUFFile(cut)


# ---------------------------------------------------------------------------
# Regressions found by the fuzzer
# ---------------------------------------------------------------------------
def test_invalid_utf8_name_in_error_message_is_sanitised():
    # A message quoting a name with bad UTF-8 used to surface as
    # UnicodeDecodeError instead of GGUFError.
    raw = RawGGUF().kv(b"k\xff\xc3", VT.UINT8, b"\x01").kv(b"k\xff\xc3", VT.UINT8, b"\x01")
    expect_error(raw.build(), "'k??'", "duplicate key")
    raw = RawGGUF().kv("ok\u00fc", VT.UINT8, b"\x01").kv("ok\u00fc", VT.UINT8, b"\x01")
    expect_error(raw.build(), "'ok\u00fc'")
    raw = RawGGUF()
    raw.tensor(b"a\xe2\x82", (16,), QT.F32, 0).tensor(b"b\xed\xa0\x80", (8,), QT.F32, 32)
    raw.data = b"\0" * 96
    expect_error(raw.build(), "tensor 'b???'", "overlaps tensor 'a??'")

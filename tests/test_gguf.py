"""GGUF reader: valid files read back exactly as written.

Small files are written with gguf.GGUFWriter (or forged byte by byte with
tests/gguf_samples.RawGGUF) and read with llamapy.GGUFFile; metadata and the
tensor table are also compared with gguf.GGUFReader. The Gemma 3 270M test
model, when installed, is checked too. Malformed input: test_gguf_malformed.py.
"""
from __future__ import annotations

import io
import struct
import time

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

import llamapy
from llamapy import GGUFError, GGUFFile, TensorInfo
from llamapy.gguf_file import GGUFArray
from llamapy.inspect_cmd import run_inspect

from gguf_samples import ALL_TYPES_METADATA, RawGGUF, sample_tensors, write_with_gguf


@pytest.fixture
def all_types_file(tmp_path):
    return write_with_gguf(tmp_path / "all.gguf", ALL_TYPES_METADATA, sample_tensors())


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------
def test_every_value_type_round_trips(all_types_file):
    with GGUFFile(all_types_file) as f:
        md = f.metadata
        assert md["general.architecture"] == "testarch"
        for key, value, vtype, sub_type in ALL_TYPES_METADATA:
            if sub_type == VT.FLOAT32:
                value = [float(np.float32(v)) for v in value]
            elif vtype == VT.FLOAT32:
                value = float(np.float32(value))
            assert md[key] == value, key
            assert type(md[key]) is type(value), key
        assert f.metadata_type("t.u8") == "u8"
        assert f.metadata_type("t.arr_string") == "array[string]"
        assert f.metadata_type("t.nested_i32") == "array[array]"
        assert f.metadata_type("t.f64") == "f64"


def test_metadata_matches_gguf_reader(all_types_file):
    ref = gguf.GGUFReader(all_types_file)
    with GGUFFile(all_types_file) as f:
        md = f.metadata
        for key, field in ref.fields.items():
            if key.startswith("GGUF."):
                continue
            assert key in md
            if field.types[0] == VT.ARRAY and len(field.types) > 2:
                continue  # gguf's reader flattens nested arrays; checked above against the written values
            expected = field.contents()
            got = list(md[key]) if isinstance(expected, list) else md[key]
            assert got == expected, key
        assert len(md) == len([k for k in ref.fields if not k.startswith("GGUF.")])


def test_version_2_file_reads_like_version_3(all_types_file, tmp_path):
    data = bytearray(all_types_file.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(bytes(data))
    with GGUFFile(all_types_file) as f3, GGUFFile(v2) as f2:
        assert f3.version == 3 and f2.version == 2
        assert f2.metadata == f3.metadata
        assert f2.tensors == f3.tensors
        np.testing.assert_array_equal(f2.tensor("w.f32"), f3.tensor("w.f32"))


def test_invalid_utf8_in_strings_is_replaced_not_raised():
    raw = RawGGUF().kv("bad.string", VT.STRING, b"\x0a\0\0\0\0\0\0\0ok\xff\xfe bytes")
    raw.kv(b"key\xff", VT.UINT8, b"\x01")
    raw.kv("bad.array", VT.ARRAY, struct.pack("<IQ", VT.STRING, 1) + b"\x02\0\0\0\0\0\0\0\xc3(")
    r = llamapy._engine.GGUFReader.from_bytes(raw.build())
    md = {k: v for k, _, v in r.metadata()}
    assert md["bad.string"] == "ok\ufffd\ufffd bytes"
    assert md["key\ufffd"] == 1
    assert md["bad.array"] == ["\ufffd("]


def test_empty_arrays_and_zero_dim_values(tmp_path):
    raw = RawGGUF()
    raw.kv("empty.i32", VT.ARRAY, struct.pack("<IQ", VT.INT32, 0))
    raw.kv("empty.str", VT.ARRAY, struct.pack("<IQ", VT.STRING, 0))
    raw.kv("empty.nested", VT.ARRAY, struct.pack("<IQ", VT.ARRAY, 1) + struct.pack("<IQ", VT.UINT8, 0))
    raw.tensor("empty", [0, 4], QT.F32, 0)
    raw.tensor("scalar", [], QT.F32, 0)
    raw.data = struct.pack("<f", 1.5) + b"\0" * 28
    path = tmp_path / "edge.gguf"
    path.write_bytes(raw.build())
    with GGUFFile(path) as f:
        assert f.metadata["empty.i32"] == [] and f.metadata["empty.str"] == []
        assert f.metadata["empty.nested"] == [[]]
        assert f.tensor("empty").shape == (4, 0)
        assert f.tensor("scalar").shape == () and float(f.tensor("scalar")) == 1.5
        assert f.tensor_info("empty").nbytes == 0


def test_lazy_big_arrays(tmp_path):
    words = [f"tok{i}" for i in range(5000)]
    scores = [float(i) / 4 for i in range(3000)]
    meta = [("v.tokens", words, VT.ARRAY, VT.STRING), ("v.scores", scores, VT.ARRAY, VT.FLOAT32),
            ("v.small", [1, 2, 3], VT.ARRAY, VT.INT32)]
    path = write_with_gguf(tmp_path / "vocab.gguf", meta)
    f = GGUFFile(path)
    tokens = f.metadata["v.tokens"]
    assert isinstance(tokens, GGUFArray) and tokens.elem_type == "string"
    assert isinstance(f.metadata["v.small"], list)
    assert len(tokens) == 5000
    assert tokens[0] == "tok0" and tokens[-1] == "tok4999" and tokens[4321] == "tok4321"
    assert tokens[10:13] == ["tok10", "tok11", "tok12"]
    assert tokens[4998:9999] == ["tok4998", "tok4999"]
    assert tokens[::1000] == words[::1000] and tokens[::-1][:2] == ["tok4999", "tok4998"]
    assert list(tokens) == words and tokens == words
    assert "tok77" in tokens
    with pytest.raises(IndexError):
        tokens[5000]
    with pytest.raises(IndexError):
        tokens[-5001]
    arr = f.metadata["v.scores"].numpy()
    assert arr.dtype == np.float32 and not arr.flags.writeable
    np.testing.assert_array_equal(arr, np.array(scores, dtype=np.float32))
    with pytest.raises(ValueError):
        tokens.numpy()
    f.close()
    # handed-out lazy arrays keep the mapping alive
    assert tokens[123] == "tok123" and arr[8] == 2.0


# ---------------------------------------------------------------------------
# Tensors
# ---------------------------------------------------------------------------
def test_tensor_table_matches_gguf_reader(all_types_file):
    ref = gguf.GGUFReader(all_types_file)
    with GGUFFile(all_types_file) as f:
        assert [t.name for t in f.tensors] == [t.name for t in ref.tensors]
        for mine, theirs in zip(f.tensors, ref.tensors):
            assert isinstance(mine, TensorInfo)
            assert mine.type == int(theirs.tensor_type)
            assert mine.type_name == theirs.tensor_type.name
            assert mine.ne == tuple(int(d) for d in theirs.shape)
            assert mine.shape == tuple(reversed(mine.ne))
            assert mine.offset == theirs.data_offset
            assert mine.nbytes == theirs.n_bytes
            assert bytes(f.tensor(mine.name).tobytes()) == bytes(np.asarray(theirs.data).tobytes())


def test_tensor_views_equal_written_data(all_types_file):
    with GGUFFile(all_types_file) as f:
        for name, array, raw_dtype in sample_tensors():
            view = f.tensor(name)
            assert not view.flags.writeable
            if raw_dtype is None:
                assert view.dtype == array.dtype and view.shape == array.shape
                np.testing.assert_array_equal(view, array)
            elif raw_dtype == QT.BF16:
                assert view.dtype == np.uint16
                np.testing.assert_array_equal(view, array.view(np.uint16))
            else:  # quantized: raw blocks, one row per output row
                assert view.dtype == np.uint8 and view.shape == array.shape
                assert view.tobytes() == array.tobytes()
        assert f.tensor_info("w.q8_0").shape == (2, 64)
        with pytest.raises(ValueError):
            f.tensor("w.f32")[0, 0] = 1.0


def test_custom_alignment(tmp_path):
    path = write_with_gguf(tmp_path / "a64.gguf", [("x", 1, VT.UINT32, None)], sample_tensors(), alignment=64)
    with GGUFFile(path) as f:
        assert f.alignment == 64
        assert all(t.offset % 64 == 0 for t in f.tensors)
        np.testing.assert_array_equal(f.tensor("w.f32"), sample_tensors()[0][1])
    with GGUFFile(write_with_gguf(tmp_path / "a32.gguf", tensors=sample_tensors())) as f:
        assert f.alignment == 32


def test_unknown_tensor_is_key_error(all_types_file):
    with GGUFFile(all_types_file) as f:
        with pytest.raises(KeyError, match="nope"):
            f.tensor("nope")


# ---------------------------------------------------------------------------
# Lifetime
# ---------------------------------------------------------------------------
def test_close_and_context_manager(all_types_file):
    with GGUFFile(all_types_file) as f:
        view = f.tensor("w.f32")
        md = f.metadata
    assert f.closed
    for access in (lambda: f.metadata, lambda: f.tensors, lambda: f.tensor("w.f32"), lambda: f.version,
                   lambda: f.get("t.u8"), lambda: f.architecture):
        with pytest.raises(ValueError, match="closed"):
            access()
    f.close()  # idempotent
    # views and values handed out before the close stay valid
    np.testing.assert_array_equal(view, sample_tensors()[0][1])
    assert md["t.u8"] == 200
    f = None  # the last Python reference to the reader goes; the view still holds the mapping
    np.testing.assert_array_equal(view * 1, sample_tensors()[0][1])


def test_convenience_accessors(all_types_file):
    with GGUFFile(all_types_file) as f:
        assert f.architecture == "testarch"
        assert f.get("t.u16") == 60000 and f.get("missing", 7) == 7
        assert f.path == str(all_types_file) and f.size == all_types_file.stat().st_size


def test_from_bytes_matches_mapped_file(all_types_file):
    data = all_types_file.read_bytes()
    a = llamapy._engine.GGUFReader.from_bytes(data)
    b = llamapy._engine.GGUFReader(str(all_types_file))
    assert a.metadata() == b.metadata() and a.tensor_infos() == b.tensor_infos()
    assert a.tensor_bytes(0).tobytes() == b.tensor_bytes(0).tobytes()


def test_os_errors_are_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "missing.gguf")
    with pytest.raises(IsADirectoryError):
        GGUFFile(tmp_path)
    assert issubclass(GGUFError, ValueError)


# ---------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------
def test_inspect_small_file(all_types_file):
    out = io.StringIO()
    assert run_inspect(str(all_types_file), out=out) == 0
    text = out.getvalue()
    for needle in ("GGUF version:", "testarch", "quantization mix:", "Q8_0", "w.f32", "F16", "chat template"):
        assert needle in text
    out = io.StringIO()
    assert run_inspect(str(all_types_file), out=out, show_tensors=False) == 0
    assert "w.i32" not in out.getvalue()


def test_inspect_bad_file_reports_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x07\0\0\0" + b"\0" * 16)
    out = io.StringIO()
    assert run_inspect(str(bad), out=out) == 1
    assert out.getvalue().startswith("error: GGUF: header at byte 4: unsupported GGUF version 7")


# ---------------------------------------------------------------------------
# The Gemma 3 270M test model
# ---------------------------------------------------------------------------
@pytest.mark.model
def test_real_model_opens_fast_and_reads(gemma_path):
    path = gemma_path
    GGUFFile(path).close()  # warm the page cache
    t0 = time.perf_counter()
    f = GGUFFile(path)
    md, tensors = f.metadata, f.tensors
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.2, f"open + metadata + tensors took {elapsed:.3f} s"
    assert f.architecture == "gemma3" and f.version == 3
    tokens = md["tokenizer.ggml.tokens"]
    assert len(tokens) == 262144 and tokens[:3] == ["<pad>", "<eos>", "<bos>"]
    assert md["tokenizer.ggml.scores"].numpy().shape == (262144,)
    assert md["gemma3.context_length"] == 32768 and md["gemma3.embedding_length"] == 640
    assert md["gemma3.block_count"] == 18 and md["gemma3.attention.head_count_kv"] == 1
    assert md["tokenizer.ggml.add_bos_token"] is True and md["general.file_type"] == 15
    assert len(tensors) == 236
    emb = f.tensor_info("token_embd.weight")
    assert emb.type_name == "Q8_0" and emb.shape == (262144, 640)
    assert f.tensor("token_embd.weight").shape == (262144, 680)
    assert f.tensor("output_norm.weight").dtype == np.float32
    out = io.StringIO()
    assert run_inspect(path, out=out) == 0 and "vocabulary size:  262144" in out.getvalue()
    f.close()


@pytest.mark.model
@pytest.mark.slow
def test_real_model_matches_gguf_reader(gemma_path):
    path = gemma_path
    ref = gguf.GGUFReader(path)
    with GGUFFile(path) as f:
        md = f.metadata
        for key, field in ref.fields.items():
            if key.startswith("GGUF."):
                continue
            value = field.contents()
            assert (list(md[key]) if isinstance(value, list) else md[key]) == value, key
        assert [(t.name, t.type, t.ne, t.offset, t.nbytes) for t in f.tensors] == [
            (t.name, int(t.tensor_type), tuple(int(d) for d in t.shape), t.data_offset, t.n_bytes)
            for t in ref.tensors]

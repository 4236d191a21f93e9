"""Split GGUF models (llama.cpp's gguf-split, gguf-py's split writer): a tiny
model re-written as parts named ``<prefix>-%05d-of-%05d.gguf`` loads from its
first part with the same logits, bit for bit, mapped and read into memory; the
Python reader, the memory planner, ``inspect`` and the router's model list see
one model; missing, mismatched and duplicated parts are clear errors.

``write_split`` writes the parts as gguf-split does (tools/gguf-split in
llama.cpp): the first part carries every metadata key of the source, every
part carries split.no (u16, 0-based), split.count (u16) and
split.tensors.count (i32), and each part holds its own tensor infos and data,
offsets relative to its own data section, padded to 32 bytes. Its keyword
arguments break the rules one at a time for the error tests.
"""
from __future__ import annotations

import io
import os
import shutil
import struct
from pathlib import Path
from typing import Dict, List, Optional

import gguf
import numpy as np
import pytest

import model_ref as R
from conftest import engine_context
from llamapy import GGUFError, GGUFFile, Llama, _engine as E, _params, plan_memory
from llamapy.gguf_file import split_name, split_part_paths
from llamapy.inspect_cmd import run_inspect

PROMPT = [1, 5, 17, 42, 9, 88, 3, 61, 7, 23, 11, 64]
ALIGN = 32  # gguf-split writes later parts without general.alignment: the default
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


# ---------------------------------------------------------------------------
# A splitter writing parts the way gguf-split does
# ---------------------------------------------------------------------------
def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, vtype: gguf.GGUFValueType, fmt: str, value: int) -> bytes:
    return _string(key) + struct.pack("<I", int(vtype)) + struct.pack("<" + fmt, value)


def _pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def _write_part(path: Path, kvs: List[bytes], tensors: list, align: int) -> None:
    """One GGUF v3 file: header, raw key-value records, tensor infos, data (each tensor padded to align)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for kv in kvs:
        out += kv
    offset = 0
    for t in tensors:
        ne = [int(d) for d in t.shape]
        out += _string(t.name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        out += struct.pack("<IQ", int(t.tensor_type), offset)
        offset += _pad(t.n_bytes, align)
    out += bytes(_pad(len(out), align) - len(out))
    for t in tensors:
        data = t.data.tobytes()
        assert len(data) == t.n_bytes
        out += data + bytes(_pad(len(data), align) - len(data))
    path.write_bytes(bytes(out))


def write_split(src: Path, out_dir: Path, n_parts: int, *, first_empty: bool = False,
                keys: Optional[Dict[int, Dict[str, Optional[int]]]] = None,
                extra: Optional[Dict[int, List[str]]] = None) -> List[Path]:
    """Splits src into n_parts files in out_dir, named as gguf-split names them;
    returns their paths. first_empty: the first part holds metadata only
    (gguf-split --no-tensor-first-split). keys: {part: {split key: value, or
    None to leave it out}} replacing the written values. extra: {part: tensor
    names} also written into that part (duplicates)."""
    r = gguf.GGUFReader(src)
    meta = [b"".join(p.tobytes() for p in f.parts) for name, f in r.fields.items()
            if not name.startswith("GGUF.") and name not in SPLIT_KEYS]
    align = int(r.alignment)
    tensors = list(r.tensors)
    holders = n_parts - 1 if first_empty else n_parts
    per = -(-len(tensors) // holders)
    groups = [tensors[i * per:(i + 1) * per] for i in range(holders)]
    if first_empty:
        groups.insert(0, [])
    assert all(groups[1:]), "every part after the first holds tensors"
    by_name = {t.name: t for t in tensors}
    prefix = out_dir / src.stem
    paths = []
    for i, group in enumerate(groups):
        split = {"split.no": i, "split.count": n_parts, "split.tensors.count": len(tensors)}
        split.update((keys or {}).get(i, {}))
        kvs = list(meta) if i == 0 else []
        types = {"split.no": ("H", gguf.GGUFValueType.UINT16), "split.count": ("H", gguf.GGUFValueType.UINT16),
                 "split.tensors.count": ("i", gguf.GGUFValueType.INT32)}
        for key, value in split.items():
            if value is not None:
                fmt, vtype = types[key]
                kvs.append(_kv(key, vtype, fmt, value))
        part = group + [by_name[n] for n in (extra or {}).get(i, [])]
        path = Path(f"{prefix}-{i + 1:05d}-of-{n_parts:05d}.gguf")
        _write_part(path, kvs, part, align if i == 0 else ALIGN)
        paths.append(path)
    return paths


def write_split_gguf_py(src: Path, out: Path, max_tensors: int) -> List[Path]:
    """The same model through gguf-py's own split writer (GGUFWriter(split_max_tensors=...)),
    an independent implementation of the format."""
    r = gguf.GGUFReader(src)
    arch = str(r.fields["general.architecture"].contents())
    wr = gguf.GGUFWriter(out, arch, split_max_tensors=max_tensors)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[1] if len(f.types) > 1 else None
        wr.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        wr.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return [Path(p) for p in split_part_paths(out.with_name(f"{out.stem}-00001-of-{len(wr.tensors):05d}.gguf"))]


def logits(path, **model_kw) -> np.ndarray:
    ctx = E.Context(E.Model(str(path), **model_kw), n_ctx=64, n_threads=2, n_threads_batch=2)
    n = len(PROMPT)
    ctx.decode(tokens=PROMPT, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
    return np.array(ctx.get_logits_all())


@pytest.fixture
def split3(tiny, tmp_path):
    """(unsplit path, the three parts) of the tiny llama model."""
    src = tiny("llama")[0]
    return src, write_split(src, tmp_path, 3)


# ---------------------------------------------------------------------------
# Same model, same numbers
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["llama", "qwen3moe"])
@pytest.mark.parametrize("use_mmap", [True, False])
def test_split_model_gives_bit_identical_logits(tiny, tmp_path, arch, use_mmap):
    src = tiny(arch, "Q8_0")[0]
    parts = write_split(src, tmp_path, 3)
    assert [p.name for p in parts] == [f"{src.stem}-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    whole, split = E.Model(str(src)), E.Model(str(parts[0]), use_mmap=use_mmap)
    assert split.weights_in_memory == (not use_mmap)
    assert (split.size_bytes, split.n_params, split.desc()) == (whole.size_bytes, whole.n_params, whole.desc())
    assert split.size_bytes > sum(t.n_bytes for t in gguf.GGUFReader(parts[0]).tensors)  # all parts counted
    np.testing.assert_array_equal(logits(parts[0], use_mmap=use_mmap), logits(src))


def test_metadata_only_first_part_and_gguf_py_split_writer(tiny, tmp_path):
    src = tiny("qwen3moe")[0]
    want = logits(src)
    empty_first = write_split(src, tmp_path, 4, first_empty=True)  # gguf-split --no-tensor-first-split
    with GGUFFile(empty_first[0]) as f:
        assert [p.n_tensors for p in f.parts][0] == 0 and sum(p.n_tensors for p in f.parts) == len(f.tensors)
    np.testing.assert_array_equal(logits(empty_first[0]), want)
    (tmp_path / "py").mkdir()
    parts = write_split_gguf_py(src, tmp_path / "py" / "model.gguf", max_tensors=7)
    assert len(parts) > 2 and all(p.is_file() for p in parts)
    np.testing.assert_array_equal(logits(parts[0]), want)


def test_llama_loads_the_first_part(split3):
    src, parts = split3
    runs = []
    for path in (src, parts[0]):
        with Llama(model_path=str(path), n_ctx=64, n_threads=2, verbose=False, use_mmap=False) as llm:
            llm.eval(PROMPT)
            runs.append((llm.scores[len(PROMPT) - 1].copy(), llm._model.model.size_bytes, llm.n_vocab()))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1:] == runs[1][1:]


def test_gguf_file_sees_every_part(split3):
    src, parts = split3
    with GGUFFile(src) as whole, GGUFFile(parts[0]) as f:
        assert [p.path for p in f.parts] == [str(p) for p in parts]
        assert [p.size for p in f.parts] == [p.stat().st_size for p in parts]
        assert f.size == sum(p.stat().st_size for p in parts) > whole.size
        assert sorted({t.part for t in f.tensors}) == [0, 1, 2]
        assert [t.name for t in f.tensors] == [t.name for t in whole.tensors]
        for t in whole.tensors:
            assert np.array_equal(f.tensor(t.name), whole.tensor(t.name)), t.name
            info = f.tensor_info(t.name)
            raw = parts[info.part].read_bytes()[info.offset:info.offset + info.nbytes]
            assert raw == whole.tensor(t.name).tobytes()  # offset is in the part's own file
        assert f.metadata["split.count"] == 3 and f.architecture == "llama"
        assert f.metadata["llama.block_count"] == whole.metadata["llama.block_count"]
    # A later part read alone (from bytes: no folder to look in) is a plain file.
    alone = E.GGUFReader.from_bytes(parts[1].read_bytes())
    assert len(alone.parts()) == 1 and len(alone.tensor_infos()) == len(gguf.GGUFReader(parts[1]).tensors)


def test_split_names():
    assert split_name("/m/big-00002-of-00003.gguf") == ("/m/big", 2, 3)
    assert split_name("big.gguf") is None and split_name("big-00004-of-00003.gguf") is None
    assert split_part_paths("/m/x-00001-of-00002.gguf") == ["/m/x-00001-of-00002.gguf", "/m/x-00002-of-00002.gguf"]
    assert split_part_paths("/m/x.gguf") == ["/m/x.gguf"]


# ---------------------------------------------------------------------------
# Errors: each names the problem and the file
# ---------------------------------------------------------------------------
def _all_openers(path):
    """Every way a path is opened: the reader, the engine's model and its
    metadata-only read, the memory planner, Llama."""
    return [lambda: GGUFFile(path), lambda: E.Model(str(path)), lambda: E.model_shape(str(path)),
            lambda: plan_memory(path), lambda: Llama(model_path=str(path), n_ctx=64, verbose=False)]


def test_missing_part_names_the_file(split3):
    _, parts = split3
    parts[1].unlink()
    for open_ in _all_openers(parts[0]):
        with pytest.raises(FileNotFoundError) as e:
            open_()
        assert "model is split into 3 files; part 2 is missing" in str(e.value)
        assert e.value.filename == str(parts[1])


def test_later_part_says_to_pass_the_first(split3):
    _, parts = split3
    for open_ in _all_openers(parts[2]):
        with pytest.raises(GGUFError, match=r"is part 3 of 3 of a split model; load the model from its first "
                                            r"part .*-00001-of-00003\.gguf, as llama\.cpp does"):
            open_()


@pytest.mark.parametrize("keys, message", [
    ({2: {"split.count": 4}}, r"part 3 of 3 \(.*-00003-of-00003\.gguf\): its split\.count is 4, the first part's is 3"),
    ({1: {"split.count": None}}, r"part 2 of 3 \(.*\): its split\.count is missing"),
    ({1: {"split.no": 2}}, r"part 2 of 3 \(.*\): its split\.no is 2 \(part 3\), but its name makes it part 2"),
    ({0: {"split.tensors.count": 5}}, r"split\.tensors\.count says the model has 5 tensors, its 3 parts hold \d+"),
    ({0: {"split.tensors.count": None}}, r"split model without split\.tensors\.count"),
    ({0: {"split.no": None}}, r"split\.count is 3 but split\.no is missing"),
])
def test_parts_that_do_not_fit_together(tiny, tmp_path, keys, message):
    parts = write_split(tiny("llama")[0], tmp_path, 3, keys=keys)
    for open_ in _all_openers(parts[0]):
        with pytest.raises(GGUFError, match=message):
            open_()


def test_duplicated_tensor_across_parts(tiny, tmp_path):
    src = tiny("llama")[0]
    first = gguf.GGUFReader(src).tensors[0].name
    parts = write_split(src, tmp_path, 3, extra={2: [first]})
    with pytest.raises(GGUFError, match=rf"tensor '{first}' is in both part 1 of 3 \(.*-00001-of-00003\.gguf\) "
                                        r"and part 3 of 3 \(.*-00003-of-00003\.gguf\)"):
        E.Model(str(parts[0]))


def test_renamed_first_part_and_broken_part(split3, tmp_path):
    _, parts = split3
    renamed = tmp_path / "renamed.gguf"
    shutil.copy(parts[0], renamed)
    with pytest.raises(GGUFError, match=r"first part of a model split into 3 files, but its name does not end in "
                                        r"-00001-of-00003\.gguf"):
        E.Model(str(renamed))
    # A corrupt later part: the reader's own validation, with the part named.
    parts[1].write_bytes(parts[1].read_bytes()[:100])
    with pytest.raises(GGUFError, match=r"part 2 of 3 \(.*-00002-of-00003\.gguf\): header at byte 8: n_tensors \d+ "
                                        r"cannot fit in the remaining 76 bytes"):
        GGUFFile(parts[0])
    # A part that is a folder: an OSError naming it.
    parts[1].unlink()
    parts[1].mkdir()
    with pytest.raises(IsADirectoryError) as e:
        E.Model(str(parts[0]))
    assert "cannot read part 2 of 3" in str(e.value) and e.value.filename == str(parts[1])


def test_split_count_of_the_wrong_type(tiny, tmp_path):
    src = tiny("llama")[0]
    parts = write_split(src, tmp_path, 2)
    raw = bytearray(parts[0].read_bytes())
    # split.count is a u16 (type 2); make it an i16 of -1 (type 3): still an integer, out of range.
    key = _string("split.count") + struct.pack("<I", 2)
    at = raw.index(key) + len(key) - 4
    raw[at:at + 6] = struct.pack("<Ih", 3, -1)
    parts[0].write_bytes(bytes(raw))
    with pytest.raises(GGUFError, match=r"split\.count = -1 is outside \[0, 65535\]"):
        E.Model(str(parts[0]))


# ---------------------------------------------------------------------------
# What reads sizes and tensor tables: the planner, inspect, use_mmap, the router
# ---------------------------------------------------------------------------
def test_memory_plan_counts_every_part(split3):
    src, parts = split3
    ctx = engine_context(parts[0])
    plan = plan_memory(parts[0], n_ctx=64, n_threads=2)
    whole = plan_memory(src, n_ctx=64, n_threads=2)
    dm = ctx.device_memory()[0]
    assert plan.weights_bytes == dm["weight_bytes"] == whole.weights_bytes
    assert plan.kv_bytes == ctx.kv_bytes and plan.compute_bytes == dm["activation_bytes"]
    # Each part's header is read: the split model's runtime counts three of them.
    headers = [min(t.data_offset for t in gguf.GGUFReader(p).tensors) for p in parts]
    assert plan.runtime_bytes - whole.runtime_bytes == sum(headers) - min(
        t.data_offset for t in gguf.GGUFReader(src).tensors)


def test_inspect_lists_the_parts(split3):
    _, parts = split3
    out = io.StringIO()
    assert run_inspect(str(parts[0]), out=out) == 0
    text = out.getvalue()
    assert "split into 3 files:" in text
    for i, p in enumerate(parts):
        n = len(gguf.GGUFReader(p).tensors)
        assert any(str(p) in ln and f"{n} tensors" in ln and ln.split()[0] == str(i + 1) for ln in text.splitlines())
    table = text[text.index("name "):]
    assert table.splitlines()[0].endswith("part") and table.splitlines()[-1].split()[-1] == "3"
    bad = io.StringIO()
    assert run_inspect(str(parts[1]), out=bad) == 1 and "load the model from its first part" in bad.getvalue()


def test_use_mmap_default_weighs_every_part(split3, monkeypatch):
    _, parts = split3
    first, total = parts[0].stat().st_size, sum(p.stat().st_size for p in parts)
    monkeypatch.setattr(_params, "memory_available", lambda: 2 * total)
    assert _params.use_mmap_value(str(parts[0]), None, False) is False  # all parts fit: read into memory
    monkeypatch.setattr(_params, "memory_available", lambda: 2 * first + 2)
    assert _params.use_mmap_value(str(parts[0]), None, False) is True  # the first part would fit, not the model


def test_router_lists_a_split_model_once(split3, tiny, tmp_path):
    pytest.importorskip("fastapi")
    from llamapy.server.config import parse_settings
    from llamapy.server.presets import model_entries

    _, parts = split3
    models = tmp_path / "models"
    models.mkdir()
    for p in parts:
        shutil.copy(p, models / p.name.replace("tiny-llama-F32", "big"))
    shutil.copy(tiny("llama")[0], models / "small.gguf")
    folder = models / "moe"
    folder.mkdir()
    for p in parts:
        shutil.copy(p, folder / p.name)
    entries = model_entries(parse_settings(["--models-dir", str(models)], environ={}))
    assert sorted(entries) == ["big", "moe", "small"]
    assert entries["big"].path == str(models / "big-00001-of-00003.gguf") and entries["big"].problem is None
    assert entries["moe"].path == str(folder / parts[0].name) and entries["moe"].problem is None
    (models / "big-00003-of-00003.gguf").unlink()
    entries = model_entries(parse_settings(["--models-dir", str(models)], environ={}))
    assert entries["big"].problem == ("model is split into 3 files; part 3 is missing: "
                                      + str(models / "big-00003-of-00003.gguf"))


def test_model_file_bytes_counts_every_part(split3):
    from llamapy.gguf_file import model_file_bytes, split_part_paths

    _, parts = split3
    paths = [str(p) for p in parts]
    assert split_part_paths(paths[0]) == paths
    assert model_file_bytes(paths[0]) == sum(os.path.getsize(p) for p in paths) > os.path.getsize(paths[0])
    os.remove(paths[-1])
    assert model_file_bytes(paths[0]) == sum(os.path.getsize(p) for p in paths[:-1])

"""``quantize_model`` / ``python -m llamapy quantize``: options, errors, threads, the
temporary file. Byte equality with llama.cpp is tests/test_quantize_llama_cpp.py."""
from __future__ import annotations

import pathlib
import threading

import numpy as np
import pytest

import llamapy
from llamapy import _engine
from llamapy.cli import main
from llamapy.gguf_file import GGUFFile
from llamapy.quant_mix import FILE_TYPES, ModelFacts, file_type, weight_order
import llamapy.quantize_gguf as qm

DATA = pathlib.Path(__file__).parent / "data"
SYNTH = DATA / "quantize" / "synth_llama-f16.gguf"


def test_public_name():
    assert llamapy.quantize_model is qm.quantize_model


@pytest.mark.parametrize("family", ["dense/olmo2/olmo2", "moe/qwen3moe/qwen3moe", "hybrid/qwen35/qwen35",
                                    "moe/gptoss/gptoss"])
def test_committed_fixtures_are_what_we_write(family, tmp_path):
    # The fixtures' Q8_0 / Q4_K_M files were made by llama.cpp from their F16 files.
    for ft in ("q8_0", "q4_k_m"):
        out = tmp_path / f"{ft}.gguf"
        qm.quantize_model(DATA / f"{family}-f16.gguf", out, ft)
        assert out.read_bytes() == (DATA / f"{family}-{ft}.gguf").read_bytes(), ft


def test_threads_and_chunks_do_not_change_the_bytes(tmp_path, monkeypatch):
    one = tmp_path / "one.gguf"
    qm.quantize_model(SYNTH, one, "Q4_K_M", n_threads=1)
    monkeypatch.setattr(qm, "_CHUNK_ELEMENTS", 512)  # two rows a job: many jobs per tensor
    many = tmp_path / "many.gguf"
    qm.quantize_model(SYNTH, many, "Q4_K_M", n_threads=3)
    assert one.read_bytes() == many.read_bytes()


def test_engine_quantizer_releases_the_gil():
    # While one thread quantizes, another must run Python code.
    x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    steps = 0
    t = threading.Thread(target=_engine.quantize_ref, args=(x, "Q4_K"))
    t.start()
    while t.is_alive():
        steps += 1
    t.join()
    assert steps > 1000


def test_interrupt_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "out.gguf"
    out.write_bytes(b"previous")
    calls = []

    def interrupted(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    real = qm._quantize_rows
    monkeypatch.setattr(qm, "_quantize_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        qm.quantize_model(SYNTH, out, "Q8_0", n_threads=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf"]
    assert out.read_bytes() == b"previous"


def test_interrupted_split_leaves_no_part(tmp_path, monkeypatch):
    calls = []
    real = qm._quantize_rows

    def interrupted(*args, **kw):
        calls.append(1)
        if len(calls) == 15:  # in the second part
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(qm, "_quantize_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        qm.quantize_model(DATA / "quantize" / "synth_split-00001-of-00003.gguf", tmp_path / "out.gguf", "Q8_0",
                          keep_split=True)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(qm, "_quantize_rows", real)
    r = qm.quantize_model(DATA / "quantize" / "synth_split-00001-of-00003.gguf", tmp_path / "out.gguf", "Q8_0",
                          keep_split=True)
    assert [pathlib.Path(p).name for p in r.paths] == [f"out-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [pathlib.Path(p).name for p in r.paths]


# Without an importance matrix llama.cpp refuses these file types (their IQ1 / IQ2 / IQ3_XXS /
# Q2_K tensors need one); every file type it writes is written here too.
@pytest.mark.parametrize("ftype, message", [
    ("IQ2_XXS", "needs an importance matrix"), ("IQ2_XS", "needs an importance matrix"),
    ("IQ1_S", "needs an importance matrix"), ("IQ1_M", "needs an importance matrix"),
    ("IQ3_XXS", "needs an importance matrix"), ("Q2_K_S", "needs an importance matrix"),
    ("Q7_K", "unknown file type"),
])
def test_file_types_refused(ftype, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        qm.quantize_model(SYNTH, tmp_path / "out.gguf", ftype)
    assert list(tmp_path.iterdir()) == []


def test_options_that_are_not_supported(tmp_path):
    # llama.cpp aborts here: the output (token_embd, tied) is exempt from the imatrix rule, yet IQ2_XXS needs weights
    with pytest.raises(ValueError, match="token_embd.weight would be IQ2_XXS, which needs importance matrix weights"):
        qm.quantize_model(SYNTH, tmp_path / "o.gguf", "Q4_K_M", output_tensor_type="IQ2_XXS")
    with pytest.raises(ValueError, match="unknown tensor type"):
        qm.quantize_model(SYNTH, tmp_path / "o.gguf", "Q4_K_M", token_embedding_type="Q9_9")
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_an_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(SYNTH.read_bytes()[:1000])
    with pytest.raises(ValueError):
        qm.quantize_model(bad, tmp_path / "o.gguf", "Q8_0")
    with pytest.raises(FileNotFoundError):
        qm.quantize_model(tmp_path / "missing.gguf", tmp_path / "o.gguf", "Q8_0")


def test_requantize(tmp_path):
    src = DATA / "dense/olmo2/olmo2-q8_0.gguf"
    with pytest.raises(ValueError, match="requantizing from type Q8_0 is disabled"):
        qm.quantize_model(src, tmp_path / "o.gguf", "Q4_0")
    r = qm.quantize_model(src, tmp_path / "o.gguf", "Q4_0", allow_requantize=True)
    assert r.types["blk.0.attn_q.weight"] == "Q4_0"
    # same type: a copy, allowed without the flag
    r = qm.quantize_model(src, tmp_path / "same.gguf", "Q8_0")
    assert r.types["blk.0.attn_q.weight"] == "Q8_0"


@pytest.mark.parametrize("text, expected", [
    ("general.name=str:x y", ("general.name", "string", "x y")),
    ("a.b=int:-7", ("a.b", "u32", 7)),
    ("a.b=float:0.5", ("a.b", "f32", 0.5)),
    ("a.b=bool:false", ("a.b", "bool", False)),
])
def test_parse_kv_override(text, expected):
    assert qm.parse_kv_override(text) == expected


@pytest.mark.parametrize("text", ["novalue", "a=int", "a=int:x", "a=bool:yes", "a=list:1", "=str:x"])
def test_parse_kv_override_errors(text):
    with pytest.raises(ValueError, match="--override-kv"):
        qm.parse_kv_override(text)


def test_cli(tmp_path, capsys):
    out = tmp_path / "q.gguf"
    assert main(["quantize", str(SYNTH), str(out), "q5_k_m", "-t", "2", "--override-kv", "general.name=str:cli",
                 "--tensor-type", "attn_q=q8_0", "--output-tensor-type", "q6_k"]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "74/74" in captured.err
    with GGUFFile(out) as f:
        assert f.metadata["general.name"] == "cli"
        assert f.metadata["general.file_type"] == FILE_TYPES["Q5_K_M"].ftype
        assert f.tensor_info("blk.3.attn_q.weight").type_name == "Q8_0"
    for argv, message in [(["IQ2_XS"], "importance matrix"), (["IQ1_S"], "importance matrix"),
                          (["Q4_K_M", "--imatrix", str(tmp_path / "m.dat")], "No such file"),
                          (["Q4_K_M", "--include-weights", "x"], "need --imatrix"),
                          (["Q4_K_M", "--tensor-type", "x"], "REGEX=TYPE")]:
        assert main(["quantize", str(SYNTH), str(tmp_path / "e.gguf")] + argv) == 1
        assert message in capsys.readouterr().err
    assert not (tmp_path / "e.gguf").exists()


def test_file_type_names():
    assert file_type("q4_k").name == "Q4_K_M" and file_type(15).name == "Q4_K_M" and file_type("17").name == "Q5_K_M"
    assert file_type("Q3_K").name == "Q3_K_M"
    with pytest.raises(ValueError, match="known: Q4_0"):
        file_type(99)


def test_weight_order_is_llama_cpps():
    names = ["output.weight", "blk.10.attn_q.weight", "blk.2.ffn_up.weight", "blk.2.attn_k.weight", "token_embd.weight"]
    assert weight_order(names) == ["output.weight", "token_embd.weight", "blk.2.attn_k.weight", "blk.2.ffn_up.weight",
                                   "blk.10.attn_q.weight"]


def test_model_facts():
    f = ModelFacts.from_metadata({"general.architecture": "llama", "llama.block_count": 80,
                                  "llama.attention.head_count": 64, "llama.attention.head_count_kv": 8})
    assert f.n_gqa == 8 and f.is_70b
    f = ModelFacts.from_metadata({"general.architecture": "llama", "llama.block_count": 80,
                                  "llama.attention.head_count": 64})
    assert f.n_gqa == 1 and not f.is_70b  # 65B: no GQA
    with pytest.raises(ValueError, match="block_count"):
        ModelFacts.from_metadata({"general.architecture": "llama"})


IMATRIX = DATA / "quantize" / "synth_llama.imatrix.gguf"


def test_imatrix_formats_agree(tmp_path):
    # the same importances through both file formats give the same values
    from llamapy.imatrix import load_imatrix

    m = load_imatrix(IMATRIX)
    assert m.datasets == ["random.txt"] and m.chunk_count == 10 and not m.legacy
    legacy = tmp_path / "m.dat"
    blob = [np.int32(len(m.values)).tobytes()]
    for name, v in m.values.items():
        blob += [np.int32(len(name)).tobytes(), name.encode(), np.int32(4).tobytes(), np.int32(v.size).tobytes(),
                 (v * np.float32(4)).astype(np.float32).tobytes()]
    legacy.write_bytes(b"".join(blob))
    m2 = load_imatrix(legacy)
    assert m2.legacy and m2.values.keys() == m.values.keys()
    for name in m.values:
        np.testing.assert_allclose(m2.values[name], m.values[name], rtol=1e-6)


@pytest.mark.parametrize("cut", [3, 10, 40])
def test_imatrix_truncated_is_an_error(cut, tmp_path):
    from llamapy.imatrix import load_imatrix

    bad = tmp_path / "bad.dat"
    good = b"".join([np.int32(1).tobytes(), np.int32(3).tobytes(), b"abc", np.int32(1).tobytes(),
                     np.int32(8).tobytes(), np.ones(8, np.float32).tobytes()])
    bad.write_bytes(good[:cut])
    with pytest.raises(ValueError, match="importance matrix"):
        load_imatrix(bad)


def test_imatrix_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot be used together"):
        qm.quantize_model(SYNTH, tmp_path / "o.gguf", "Q4_K_M", imatrix=IMATRIX, include_weights=["a"],
                          exclude_weights=["b"])
    other = DATA / "quantize" / "mixtral.imatrix.gguf"  # another model's: rows of 64, not 256
    with pytest.raises(ValueError, match="importance matrix size 64 is different from tensor size 256"):
        qm.quantize_model(SYNTH, tmp_path / "o.gguf", "Q4_K_M", imatrix=other)
    assert list(tmp_path.iterdir()) == []


def test_weighted_quantizer_releases_the_gil_and_checks_shapes():
    x = np.random.default_rng(1).standard_normal((2048, 1024)).astype(np.float32)
    w = np.ones(1024, np.float32)
    steps = 0
    t = threading.Thread(target=_engine.quantize_weighted, args=(x, "Q4_K", w))
    t.start()
    while t.is_alive():
        steps += 1
    t.join()
    assert steps > 1000
    with pytest.raises(ValueError, match="one value per column"):
        _engine.quantize_weighted(x, "Q4_K", w[:10])
    with pytest.raises(ValueError, match="no importance-weighted"):
        _engine.quantize_weighted(x, "Q8_0", w)  # llama.cpp's Q8_0 ignores the weights

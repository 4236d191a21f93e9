"""``llamapy convert``: a tiny Hugging Face BERT folder (written here:
config.json, model.safetensors, vocab.txt, sentence-transformers pooling)
converted to GGUF and held against the numpy reference; the safetensors
reader on malformed files; clear errors for what is not supported."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import encoder_ref as ER
from llamapy import Llama
from llamapy.cli import main as cli_main
from llamapy.convert import convert
from llamapy.convert.safetensors import SafetensorsError, SafetensorsFile, load_safetensors

HF_NAMES = {  # GGUF name -> HF name (BertModel)
    "token_embd.weight": "embeddings.word_embeddings.weight",
    "position_embd.weight": "embeddings.position_embeddings.weight",
    "token_types.weight": "embeddings.token_type_embeddings.weight",
    "token_embd_norm.weight": "embeddings.LayerNorm.weight",
    "token_embd_norm.bias": "embeddings.LayerNorm.bias",
}
LAYER = {"attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
         "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
         "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm"}


def hf_name(name: str) -> str:
    if name in HF_NAMES:
        return HF_NAMES[name]
    _, il, t, kind = name.split(".")
    return f"encoder.layer.{il}.{LAYER[t]}.{kind}"


def write_safetensors(path, tensors: dict, dtype="F32"):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        if dtype == "BF16":
            raw = (np.asarray(arr, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = np.asarray(arr, {"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf-bert")
    cfg = ER.EncoderConfig(arch="bert")
    w = ER.make_weights(cfg, seed=3)
    write_safetensors(d / "model.safetensors", {"bert." + hf_name(k): v for k, v in w.items()}
                      | {"embeddings.position_ids": np.arange(cfg.n_ctx_train, dtype=np.float32)[None],
                         "pooler.dense.weight": np.zeros((cfg.n_embd, cfg.n_embd), np.float32)})
    tokens, types = ER.vocab_tokens()
    vocab = [t if ty == 3 else (t[1:] if t.startswith("\u2581") else "##" + t) for t, ty in zip(tokens, types)]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (d / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": cfg.n_embd, "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head, "intermediate_size": cfg.n_ff, "max_position_embeddings": cfg.n_ctx_train,
        "type_vocab_size": cfg.n_types, "vocab_size": len(vocab), "layer_norm_eps": cfg.eps, "hidden_act": "gelu"}))
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                             "pooling_mode_mean_tokens": False}))
    return d, cfg, w


@pytest.mark.parametrize("outtype,tol", [("f32", 3e-4), ("f16", 3e-3), ("q8_0", 3e-2)])
def test_converted_tiny_bert_matches_reference(hf_folder, tmp_path, outtype, tol):
    d, cfg, w = hf_folder
    out = convert(str(d), str(tmp_path / "m.gguf"), outtype)
    llm = Llama(out, embedding=True, verbose=False, n_ctx=cfg.n_ctx_train)
    assert llm.pooling_type() == 2  # cls, from the sentence-transformers config
    text = "The cat sat, unbelievable!"
    toks = llm.tokenize(text.encode())
    assert toks == [2, 5, 6, 7, 22, 16, 38, 37, 24, 3]
    wtype = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}[outtype]
    ref = ER.pool(ER.forward(cfg, ER.stored(w, wtype), toks, wtype), 2)
    got = np.array(llm.embed(text))
    assert np.abs(got - ref).max() / np.abs(ref).max() < tol


def test_cli_convert_and_cased_vocab(hf_folder, tmp_path, capsys):
    import gguf

    d, _, _ = hf_folder
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    out = tmp_path / "cli.gguf"
    assert cli_main(["convert", str(d), str(out), "--outtype", "f32"]) == 0
    assert "wrote" in capsys.readouterr().out
    r = gguf.GGUFReader(str(out))
    assert bool(r.fields["tokenizer.wordpiece.lowercase"].parts[-1][0]) is bool(cfg["do_lower_case"])
    assert "pooler.dense.weight" not in {t.name for t in r.tensors}
    assert cli_main(["convert", str(tmp_path), str(tmp_path / "x.gguf")]) == 1  # not a model folder


def test_failed_conversion_leaves_no_file(hf_folder, tmp_path, monkeypatch):
    """A conversion that fails while writing tensors leaves neither OUT nor
    OUT.part, and an OUT that existed before is left as it was."""
    d, _, _ = hf_folder
    out = tmp_path / "m.gguf"
    out.write_bytes(b"earlier file")

    import gguf

    real = gguf.GGUFWriter.write_tensors_to_file

    def broken(self, *args, **kwargs):  # the header is on disk by now
        raise RuntimeError("disk full while writing the tensors")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        convert(str(d), str(out), "f32")
    assert out.read_bytes() == b"earlier file"
    assert not os.path.exists(str(out) + ".part")
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", real)
    convert(str(d), str(out), "f32")
    assert out.read_bytes()[:4] == b"GGUF" and not os.path.exists(str(out) + ".part")


def test_unsupported_inputs_raise(hf_folder, tmp_path):
    d, _, _ = hf_folder
    with pytest.raises(ValueError, match="outtype"):
        convert(str(d), str(tmp_path / "a.gguf"), "q4_0")
    with pytest.raises(FileNotFoundError):
        convert(str(tmp_path), str(tmp_path / "a.gguf"))
    other = tmp_path / "mamba"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(NotImplementedError, match="mamba.*supported.*bert"):
        convert(str(other), str(tmp_path / "a.gguf"))
    with pytest.raises(ValueError, match="bert"):
        convert(str(d), str(tmp_path / "a.gguf"), "bf16")


def test_safetensors_reader(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    write_safetensors(tmp_path / "f32.st", {"a": a})
    np.testing.assert_array_equal(load_safetensors(str(tmp_path / "f32.st"))["a"], a)
    write_safetensors(tmp_path / "f16.st", {"a": a}, "F16")
    np.testing.assert_array_equal(load_safetensors(str(tmp_path / "f16.st"))["a"], a.astype(np.float16))
    write_safetensors(tmp_path / "bf16.st", {"a": a}, "BF16")
    got = load_safetensors(str(tmp_path / "bf16.st"))["a"]
    assert got.dtype == np.float32 and np.abs(got - a).max() <= np.abs(a).max() / 128
    assert list(SafetensorsFile(str(tmp_path / "f32.st")).names()) == ["a"]


@pytest.mark.parametrize("blob", [
    b"", b"\x01\x00",
    struct.pack("<Q", 1 << 40) + b"{}",
    struct.pack("<Q", 5) + b"nope!",
    struct.pack("<Q", 2) + b"[]",
])
def test_safetensors_malformed_headers(tmp_path, blob):
    p = tmp_path / "bad.st"
    p.write_bytes(blob)
    with pytest.raises(SafetensorsError):
        SafetensorsFile(str(p))


@pytest.mark.parametrize("entry", [
    {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]},        # offsets shorter than the shape
    {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]},      # past the end of the file
    {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]},         # unknown dtype
    {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]},       # negative dimension
    {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]},        # reversed
    "not an object",
])
def test_safetensors_malformed_entries(tmp_path, entry):
    h = json.dumps({"t": entry}).encode()
    p = tmp_path / "bad.st"
    p.write_bytes(struct.pack("<Q", len(h)) + h + bytes(16))
    with pytest.raises(SafetensorsError):
        SafetensorsFile(str(p))

"""``llamapy convert`` for decoders (llama, mixtral, smollm3, granite, granitemoe, olmo2, olmo3, phi3, qwen2,
qwen3, qwen3moe, gemma2, gemma3, gpt-oss, deepseek2, glm4moe, qwen35, qwen35moe, lfm2, granitehybrid,
gemma4 as E2B / 31B / 26B-A4B shapes) against llama.cpp's converter.

tests/data/convert/<family>/ holds a tiny random Hugging Face folder (hf/: safetensors, config,
byte-level BPE tokenizer, or for gemma2 / gemma3 / mixtral a SentencePiece tokenizer.model (the
gemmas with the tokenizer.json transformers derives from it), for gemma4 a Gemma-style
SentencePiece tokenizer.json; chat template) and
reference.json: what convert_hf_to_gguf.py from the llama-cpp-python 0.3.36 sdist wrote for it at every --outtype, as a digest (every key with
its GGUF type and value, every tensor's shape, type and sha256 of its bytes; see
convert_digest.py), plus the chkhsh transformers gave the tokenizer, and logits.npz: llama.cpp's
logits on the F16 file. All made by tools/make_convert_fixtures.py (CI has neither torch nor
the reference converter). Here our converter runs on the committed folders and must match the
digest exactly, apart from PROVENANCE; the converted F16 file must give llama.cpp's logits.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest
from conftest import needs

from convert_digest import gguf_digest
from llamapy.cli import main as cli_main
from llamapy.convert import SUPPORTED, convert
from llamapy.convert.safetensors import load_safetensors

DATA = pathlib.Path(__file__).parent / "data" / "convert"
FAMILIES = ["llama", "mixtral", "smollm3", "granite", "granitemoe", "olmo2", "olmo3", "phi3", "phi3spm", "qwen2",
            "qwen3", "qwen3moe", "gemma2", "gemma3", "gptoss", "gptossmxfp4", "deepseek2", "glm4moe", "qwen35", "qwen35moe", "lfm2",
            "granitehybrid", "gemma4", "gemma4dense", "gemma4moe"]
BPE_FAMILIES = ["llama", "smollm3", "granite", "granitemoe", "olmo2", "olmo3", "phi3", "qwen2", "qwen3", "qwen3moe",
                "gptoss", "gptossmxfp4", "deepseek2", "glm4moe", "qwen35", "qwen35moe", "lfm2", "granitehybrid"]
OUTTYPES = ["f32", "f16", "bf16", "q8_0"]
# Keys that say where a file came from, not what it is: the reference names the model after
# its folder with its own capitalisation rules ("hf" -> "Hf").
PROVENANCE = {"general.name"}
# gpt-oss (sinks, 8 experts over 4 layers) measured 0.023: test_moe_llama_cpp's F16 bound, as
# llama.cpp's own flash-attention off vs on differs by up to 0.03 on such MoE files
LOGIT_TOL = {"gptoss": 5e-2, "gptossmxfp4": 5e-2}


def reference(fam: str) -> dict:
    return json.loads((DATA / fam / "reference.json").read_text())


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("fam", FAMILIES)
def test_matches_llama_cpp_converter(fam, outtype, tmp_path):
    ref = reference(fam)
    out = convert(str(DATA / fam / "hf"), str(tmp_path / "m.gguf"), outtype, tokenizer_pre=ref["tokenizer_pre"])
    got, want = gguf_digest(out), ref["outtypes"][outtype]
    for key in PROVENANCE:
        assert key in got["kv"] and key in want["kv"], key
    keys = sorted((set(got["kv"]) | set(want["kv"])) - PROVENANCE)
    diff = [k for k in keys if got["kv"].get(k) != want["kv"].get(k)]
    assert not diff, f"{fam} {outtype}: keys differ: {diff}"
    bad = [n for n in set(got["tensors"]) | set(want["tensors"]) if got["tensors"].get(n) != want["tensors"].get(n)]
    assert not bad, f"{fam} {outtype}: tensors differ: {sorted(bad)}"
    assert got["tensor_order"] == want["tensor_order"]
    assert not os.path.exists(out + ".part")


def test_pre_tokenizer_hash_matches_transformers():
    needs("tokenizers")
    from llamapy.convert.vocab import pre_tokenizer_hash

    for fam in BPE_FAMILIES:
        assert pre_tokenizer_hash(str(DATA / fam / "hf")) == reference(fam)["chkhsh"], fam


def test_unknown_pre_tokenizer_is_refused(tmp_path):
    needs("tokenizers")
    with pytest.raises(NotImplementedError, match="--tokenizer-pre"):
        convert(str(DATA / "qwen2" / "hf"), str(tmp_path / "m.gguf"))
    assert not list(tmp_path.iterdir())


def test_known_hash_names_the_pre_tokenizer(monkeypatch, tmp_path):
    from llamapy.convert import vocab

    ref = reference("qwen3")
    monkeypatch.setattr(vocab, "pre_tokenizer_hash", lambda d: "c" * 64)
    monkeypatch.setitem(vocab.PRE_BY_HASH, "c" * 64, "qwen2")
    out = convert(str(DATA / "qwen3" / "hf"), str(tmp_path / "m.gguf"), "f16")
    kv = gguf_digest(out)["kv"]
    assert kv["tokenizer.ggml.pre"][1] == "qwen2" == ref["tokenizer_pre"]


@pytest.mark.parametrize("fam", FAMILIES)
def test_converted_model_gives_llama_cpp_logits(fam, tmp_path):
    from llamapy import Llama

    ref = reference(fam)
    out = convert(str(DATA / fam / "hf"), str(tmp_path / "m.gguf"), "f16", tokenizer_pre=ref["tokenizer_pre"])
    want = np.load(DATA / fam / "logits.npz")["rows"]
    with Llama(model_path=out, n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False) as llm:
        llm.eval(ref["prompt"])
        got = np.array(llm.scores[:len(ref["prompt"])], dtype=np.float32)
        llm.reset()
        # and it generates: greedy from the prompt, the first token llama.cpp's argmax
        gen = [t for _, t in zip(range(4), llm.generate(ref["prompt"], temp=0.0))]
    assert len(gen) == 4 and gen[0] == int(want[-1].argmax())
    assert got.shape == want.shape
    # two engines, same F16 weights: summation order only (llama.cpp's own batch-vs-step noise ~1e-2)
    assert np.abs(got - want).max() < LOGIT_TOL.get(fam, 2e-2), f"{fam}: {np.abs(got - want).max()}"
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_cli_converts_a_decoder(tmp_path, capsys):
    out = tmp_path / "q.gguf"
    assert cli_main(["convert", str(DATA / "qwen3" / "hf"), str(out), "--outtype", "q8_0",
                     "--tokenizer-pre", "qwen2"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert gguf_digest(str(out))["tensors"] == reference("qwen3")["outtypes"]["q8_0"]["tensors"]


def _copy(fam: str, tmp_path) -> pathlib.Path:
    d = tmp_path / fam
    shutil.copytree(DATA / fam / "hf", d)
    return d


def _write_safetensors(path, tensors: dict) -> None:
    import struct

    header, blobs, at = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_missing_tensor_is_named(tmp_path):
    d = _copy("llama", tmp_path)
    tensors = {k: np.array(v) for k, v in load_safetensors(str(d / "model.safetensors")).items()}
    del tensors["model.layers.1.mlp.up_proj.weight"]
    _write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(ValueError, match=r"blk\.1\.ffn_up\.weight"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="llama-bpe")


def test_missing_shard_and_config_key_are_named(tmp_path):
    d = _copy("qwen2", tmp_path)
    shard = sorted(p for p in d.iterdir() if p.name.startswith("model-"))[0]
    shard.unlink()
    with pytest.raises(ValueError, match=shard.name):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="qwen2")
    d = _copy("qwen3", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["num_hidden_layers"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="qwen2")


def test_llama_tokenizer_rules(tmp_path):
    d = _copy("llama", tmp_path)
    tc = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tc, "add_prefix_space": False}))
    kv = gguf_digest(convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="llama-bpe"))["kv"]
    assert kv["tokenizer.ggml.add_space_prefix"][1] is False and kv["tokenizer.ggml.add_bos_token"][1] is True
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "vocab_size": 32016}))
    with pytest.raises(NotImplementedError, match="32016"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="llama-bpe")


def test_incomplete_experts_are_named(tmp_path):
    d = _copy("qwen3moe", tmp_path)
    tensors = {k: np.array(v, np.float32) for k, v in load_safetensors(str(d / "model.safetensors")).items()}
    del tensors["model.layers.1.mlp.experts.2.gate_proj.weight"]
    _write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(ValueError, match="layer 1 has 11 of its 12 expert"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="qwen2")


def test_unknown_tensor_and_model_type_are_refused(tmp_path):
    d = _copy("qwen3", tmp_path)
    tensors = {k: np.array(v, np.float32) for k, v in load_safetensors(str(d / "model.safetensors")).items()}
    tensors["model.layers.0.mlp.shared_expert.up_proj.weight"] = np.zeros((4, 4), np.float32)
    _write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(NotImplementedError, match="shared_expert"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="qwen2")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "mamba"}))
    with pytest.raises(NotImplementedError, match="mamba.*qwen3"):
        convert(str(d), str(tmp_path / "m.gguf"))
    assert {"llama", "mistral", "qwen2", "qwen3", "bert"} <= set(SUPPORTED)


# rope_freqs.weight as convert_hf_to_gguf.py 0.3.36 wrote it (float32 bits) for Llama 3.1's rope
# settings and head size 128 (a copy of the llama fixture with this config, converted by hand)
LLAMA31_ROPE_FREQS = ["3f800000"] * 29 + ["3f9a8ed5", "3fc6d64a", "4001af1d", "402c732e", "406bcace",
                                          "40a83c06"] + ["41000000"] * 29


def test_llama3_rope_factors_match_the_reference_bits(tmp_path):
    from llamapy.convert.llama import llama3_rope_factors

    rope = {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128, "rope_parameters": rope}
    f = llama3_rope_factors(cfg)["rope_freqs.weight"]
    assert f.dtype == np.float32 and ["%08x" % v for v in f.view(np.uint32)] == LLAMA31_ROPE_FREQS
    assert llama3_rope_factors({**cfg, "rope_parameters": {"rope_theta": 1e4}}) == {}
    # in a converted file: the tensor, F32 at every outtype, and no rope scaling keys
    d = _copy("llama", tmp_path)
    c = json.loads((d / "config.json").read_text())
    short = {**rope, "original_max_position_embeddings": 64}
    (d / "config.json").write_text(json.dumps({**c, "rope_parameters": short}))
    got = gguf_digest(convert(str(d), str(tmp_path / "m.gguf"), "q8_0", tokenizer_pre="llama-bpe"))
    assert got["tensors"]["rope_freqs.weight"][:2] == [[8], "F32"] and got["tensor_order"][0] == "rope_freqs.weight"
    assert not [k for k in got["kv"] if "rope.scaling" in k]


def test_sentencepiece_reader(tmp_path):
    from llamapy.convert.sentencepiece_model import BYTE, CONTROL, UNKNOWN, read_pieces

    pieces = read_pieces(str(DATA / "gemma3" / "hf" / "tokenizer.model"))
    assert pieces[0] == ("<unk>", 0.0, UNKNOWN) and pieces[1][2] == CONTROL
    assert sum(p[2] == BYTE for p in pieces) == 256
    good = (DATA / "gemma3" / "hf" / "tokenizer.model").read_bytes()
    for bad in (good[:1000], b"\x0a\xff\xff\xff\xff\x0f", b"\x0b", b"", b"\x80" * 20):
        p = tmp_path / "t.model"
        p.write_bytes(bad)
        with pytest.raises(ValueError):
            read_pieces(str(p))


def _rewrite(d: pathlib.Path, change) -> None:
    """Applies ``change`` (a dict of name -> float32 array, edited in place) to d's single shard."""
    tensors = {k: np.array(v, np.float32) for k, v in load_safetensors(str(d / "model.safetensors")).items()}
    change(tensors)
    _write_safetensors(d / "model.safetensors", tensors)


def test_gpt_oss_mxfp4_blocks_need_the_quantization_config(tmp_path):
    d = _copy("gptossmxfp4", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["quantization_config"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="does not say mxfp4"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="gpt-4o")
    assert not (tmp_path / "m.gguf").exists()


def test_mxfp4_repacking_puts_codes_where_ggml_reads_them():
    from llamapy.convert.gpt_oss import mxfp4_block_bytes

    # Hugging Face: byte i holds codes 2i (low nibble) and 2i+1 (high); GGML: byte i holds codes
    # i (low) and i + 16 (high), after the scale byte
    codes = np.arange(32) % 16
    hf = (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)[None, :]
    got = mxfp4_block_bytes(hf, np.array([127], np.uint8))
    assert got.shape == (17,) and got[0] == 127
    assert ((got[1:] & 0x0F) == codes[:16]).all() and ((got[1:] >> 4) == codes[16:]).all()


def test_deepseek2_mtp_layers_are_left_out(tmp_path):
    d = _copy("deepseek2", tmp_path)
    _rewrite(d, lambda t: t.update({"model.layers.3.eh_proj.weight": np.ones((64, 128), np.float32)}))
    got = gguf_digest(convert(str(d), str(tmp_path / "m.gguf"), "f16", tokenizer_pre="deepseek-v3"))
    assert got["tensors"] == reference("deepseek2")["outtypes"]["f16"]["tensors"]


def test_phi3_longrope_factors(tmp_path):
    import math

    d = _copy("phi3", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    half = cfg["hidden_size"] // cfg["num_attention_heads"] // 2
    long, short = [1.0 + i / 10 for i in range(half)], [1.0] * half
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": long, "short_factor": short,
            "original_max_position_embeddings": 1024}
    (d / "config.json").write_text(json.dumps({**cfg, "rope_parameters": rope}))
    out = convert(str(d), str(tmp_path / "m.gguf"), "q8_0", tokenizer_pre="gpt-4o")
    got = gguf_digest(out)
    assert got["tensor_order"][:2] == ["rope_factors_long.weight", "rope_factors_short.weight"]
    assert got["tensors"]["rope_factors_long.weight"][:2] == [[half], "F32"]
    import gguf
    r = gguf.GGUFReader(out)
    assert np.array_equal(r.get_tensor(0).data, np.array(long, np.float32))
    attn = got["kv"]["phi3.rope.scaling.attn_factor"][1]
    assert attn == pytest.approx(math.sqrt(1 + math.log(4096 / 1024) / math.log(1024)), rel=1e-6)
    assert got["kv"]["phi3.rope.scaling.original_context_length"][1] == 1024
    (d / "config.json").write_text(json.dumps({**cfg, "rope_parameters": {**rope, "short_factor": short[:-1]}}))
    with pytest.raises(ValueError, match="long_factor / short_factor"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="gpt-4o")


def test_granite_hybrid_without_mamba_and_bamba_are_refused(tmp_path):
    d = _copy("granitehybrid", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "layer_types": ["attention"] * cfg["num_hidden_layers"]}))
    with pytest.raises(NotImplementedError, match="without Mamba layers"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="qwen2")
    (d / "config.json").write_text(json.dumps({**cfg, "architectures": ["BambaForCausalLM"]}))
    with pytest.raises(NotImplementedError, match="Bamba"):
        convert(str(d), str(tmp_path / "m.gguf"), tokenizer_pre="qwen2")
    assert not (tmp_path / "m.gguf").exists()


def test_qwen35_value_heads_are_tiled():
    from llamapy.convert.qwen35 import tile_value_heads

    # 2 key heads, 3 value heads each, head size 2: rows (k, v, i) -> (v, k, i)
    x = np.arange(12)[:, None] * np.ones((1, 3))
    got = tile_value_heads(x, 0, 2, 3, 2)[:, 0].astype(int).tolist()
    assert got == [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]
    assert (tile_value_heads(x.T, 1, 2, 3, 2) == tile_value_heads(x, 0, 2, 3, 2).T).all()

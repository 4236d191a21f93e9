"""``llamapy convert --mmproj`` (llamapy/convert/mmproj.py) against llama.cpp's converter.

tests/data/convert/{gemma3vlm,qwen2vl,qwen25vl,idefics3}/ hold tiny random vision-language folders
(hf/: the vision tower, projector and text model, preprocessor_config.json; built by
tools/vlm/hf_models.py with tests/data/vlm's seeds, through tools/make_convert_fixtures.py) and
reference.json: the digest of what convert_hf_to_gguf.py --mmproj from the 0.3.36 sdist wrote
at every --outtype. Ours must match it apart from general.name. Each converted projector is
also the one tests/data/vlm's text model of that type was recorded with, so it must load
beside that text model and caption an image exactly as the committed projector does. The
gemma3vlm / qwen2vl / qwen25vl folders keep their text model, whose plain conversion is checked
against the reference too (text_outtypes) and is tests/data/vlm's text model; idefics3 keeps
only what --mmproj reads.
"""
from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

from convert_digest import gguf_digest
from llamapy.cli import main as cli_main
from llamapy.convert import SUPPORTED_MMPROJ, convert

DATA = pathlib.Path(__file__).parent / "data" / "convert"
HF = DATA / "gemma3vlm" / "hf"
OUTTYPES = ["f32", "f16", "bf16", "q8_0"]
# fixture folder -> tests/data/vlm type
FAMILIES = {"gemma3vlm": "gemma3", "qwen2vl": "qwen2vl", "qwen25vl": "qwen25vl", "idefics3": "idefics3"}


def reference(fam: str = "gemma3vlm") -> dict:
    return json.loads((DATA / fam / "reference.json").read_text())


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("fam", FAMILIES)
def test_matches_llama_cpp_converter(fam, outtype, tmp_path):
    out = convert(str(DATA / fam / "hf"), str(tmp_path / "mm.gguf"), outtype, mmproj=True)
    got, want = gguf_digest(out), reference(fam)["outtypes"][outtype]
    keys = sorted((set(got["kv"]) | set(want["kv"])) - {"general.name"})
    assert [k for k in keys if got["kv"].get(k) != want["kv"].get(k)] == []
    assert got["tensors"] == want["tensors"]
    assert got["tensor_order"] == want["tensor_order"]
    assert not os.path.exists(out + ".part")


@pytest.mark.parametrize("fam", FAMILIES)
def test_converted_projector_captions_like_the_committed_one(fam, tmp_path):
    pytest.importorskip("PIL")
    from vlm_recorded_encoder import IMAGES, model_paths

    from llamapy import Llama
    from llamapy import llama_chat_format as lcf

    text, committed = model_paths(FAMILIES[fam])
    ours = convert(str(DATA / fam / "hf"), str(tmp_path / "mm.gguf"), "f16", mmproj=True)
    assert gguf_digest(ours)["tensors"] == gguf_digest(committed)["tensors"]
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": os.path.join(IMAGES, "tall_37x91.png")}},
        {"type": "text", "text": "Describe this image."}]}]
    replies = []
    for proj in (ours, committed):
        handler = lcf.MTMDChatHandler(clip_model_path=proj, verbose=False)
        with Llama(text, n_ctx=1024, n_threads=2, verbose=False, chat_handler=handler) as llm:
            out = llm.create_chat_completion(messages, temperature=0, max_tokens=8, seed=0)
        replies.append((out["usage"], out["choices"][0]["message"]["content"]))
    assert replies[0] == replies[1] and replies[0][0]["completion_tokens"] > 0


def test_cli_mmproj_and_refusals(tmp_path, capsys):
    out = tmp_path / "mm.gguf"
    assert cli_main(["convert", str(HF), str(out), "--mmproj", "--outtype", "q8_0"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert gguf_digest(str(out))["tensors"] == reference()["outtypes"]["q8_0"]["tensors"]
    assert SUPPORTED_MMPROJ == ("gemma3", "idefics3", "qwen2_5_vl", "qwen2_vl", "smolvlm")
    with pytest.raises(NotImplementedError, match="qwen3.*converted: gemma3, idefics3, qwen2_5_vl"):
        convert(str(DATA / "qwen3" / "hf"), str(tmp_path / "x.gguf"), mmproj=True)
    assert not (tmp_path / "x.gguf").exists()


def test_missing_vision_tensor_is_named(tmp_path):
    import shutil

    from test_convert_decoder import _write_safetensors

    from llamapy.convert.safetensors import load_safetensors

    d = tmp_path / "hf"
    shutil.copytree(HF, d)
    tensors = {k: np.array(v, np.float32) for k, v in load_safetensors(str(d / "model.safetensors")).items()}
    del tensors["vision_tower.vision_model.encoder.layers.1.mlp.fc2.weight"]
    _write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(ValueError, match=r"v\.blk\.1\.ffn_down\.weight"):
        convert(str(d), str(tmp_path / "mm.gguf"), mmproj=True)


TEXT_TOO = ["gemma3vlm", "qwen2vl", "qwen25vl"]  # folders that keep their text model


@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
@pytest.mark.parametrize("fam", TEXT_TOO)
def test_vlm_text_model_matches_llama_cpp_converter(fam, outtype, tmp_path):
    """The text half of the same vision-language folder (``language_model.`` names, the tower's
    tensors beside it; Qwen2-VL's as architecture qwen2vl with its rope sections) converts as
    llama.cpp's converter writes it."""
    out = convert(str(DATA / fam / "hf"), str(tmp_path / "t.gguf"), outtype)
    got, want = gguf_digest(out), reference(fam)["text_outtypes"][outtype]
    keys = sorted((set(got["kv"]) | set(want["kv"])) - {"general.name"})
    assert [k for k in keys if got["kv"].get(k) != want["kv"].get(k)] == []
    assert got["tensors"] == want["tensors"] and got["tensor_order"] == want["tensor_order"]


@pytest.mark.parametrize("fam", TEXT_TOO)
def test_vlm_text_model_is_tests_data_vlms_and_generates(fam, tmp_path):
    from vlm_recorded_encoder import model_paths

    from llamapy import Llama

    text, _ = model_paths(FAMILIES[fam])
    out = convert(str(DATA / fam / "hf"), str(tmp_path / "t.gguf"), "f16")
    assert gguf_digest(out)["tensors"] == gguf_digest(text)["tensors"]
    with Llama(model_path=out, n_ctx=64, n_threads=2, verbose=False) as llm:
        ids = llm.tokenize(b"Describe this image.")
        assert len([t for _, t in zip(range(4), llm.generate(ids, temp=0.0))]) == 4

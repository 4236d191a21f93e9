"""Consistency checks of the multimodal fixtures in tests/data/vlm/ (made by
tools/make_vlm_fixtures.py): files match the manifest, GGUF metadata is readable with the
`gguf` package and describes what the README says, recorded arrays match their summaries.
These tests check the data only; they run no model and need no llama-cpp-python.
"""
import hashlib
import json
import pathlib

import gguf
import numpy as np
import pytest

DATA = pathlib.Path(__file__).parent / "data" / "vlm"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
RECORDED = sorted(p.parent.name for p in DATA.glob("*/record.json"))
PROJECTOR = {"llava15": "mlp", "llava16": "mlp", "gemma3": "gemma3", "idefics3": "idefics3",
             "qwen2vl": "qwen2vl_merger", "qwen25vl": "qwen2.5vl_merger"}


# top-2 logit gap below which two evaluations of the same model may pick either token
# (seen: idefics3/tall_37x91.png step 7, gap 0.0023, flips between the two llama.cpp paths)
NEAR_TIE = 0.01


def _field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def test_manifest_matches_files():
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*")
               if p.is_file() and p.name not in ("manifest.json", "README.md")}
    assert on_disk == set(MANIFEST)
    for rel, meta in MANIFEST.items():
        data = (DATA / rel).read_bytes()
        assert len(data) == meta["bytes"], rel
        assert hashlib.sha256(data).hexdigest() == meta["sha256"], rel


def test_total_size_is_small():
    assert sum(m["bytes"] for m in MANIFEST.values()) < 8 * 1024 * 1024


@pytest.mark.parametrize("kind", RECORDED)
def test_gguf_metadata(kind):
    files = json.loads((DATA / kind / "record.json").read_text())["files"]
    text = gguf.GGUFReader(DATA / kind / files["text_f16"])
    arch = _field(text, "general.architecture")
    n_embd = _field(text, f"{arch}.embedding_length")
    for key in ("mmproj_f16", "mmproj_q8_0"):
        if key not in files:
            continue
        mm = gguf.GGUFReader(DATA / kind / files[key])
        assert _field(mm, "general.architecture") == "clip"
        assert _field(mm, "clip.has_vision_encoder") is True
        ptype = _field(mm, "clip.projector_type") or _field(mm, "clip.vision.projector_type")
        assert ptype == PROJECTOR[kind]
        for k in ("clip.vision.image_size", "clip.vision.patch_size",
                  "clip.vision.embedding_length", "clip.vision.block_count"):
            assert _field(mm, k) is not None, k
        assert len(_field(mm, "clip.vision.image_mean")) == 3
        if key == "mmproj_q8_0":
            types = {t.tensor_type for t in mm.tensors}
            assert gguf.GGMLQuantizationType.Q8_0 in types
        if kind == "llava16":
            assert len(_field(mm, "clip.vision.image_grid_pinpoints")) % 2 == 0
            assert any(t.name == "model.image_newline" for t in mm.tensors)
        if not kind.startswith("llava"):  # the legacy LLaVA writer leaves projection_dim at CLIP's
            assert _field(mm, "clip.vision.projection_dim") == n_embd


@pytest.mark.parametrize("kind", RECORDED)
def test_recorded_arrays_match_summaries(kind):
    rec = json.loads((DATA / kind / "record.json").read_text())
    arrays = np.load(DATA / kind / rec["arrays_file"])
    n_checked = 0
    for image, entry in rec["images"].items():
        for variant in ("mmproj_f16", "mmproj_q8_0"):
            res = entry.get(variant)
            if not res or "error" in res:
                continue
            images = [c for c in res["chunks"] if c["type"] == "image"]
            for i, chunk in enumerate(images):
                if not chunk["embd"]["in_npz"]:
                    continue  # too large to keep: summary only
                emb = arrays[f"{image}.{variant}.chunk{i}.embd"]
                assert emb.shape == (chunk["n_tokens"], res["n_embd"])
                digest = hashlib.sha256(emb.astype(np.float32).tobytes()).hexdigest()
                assert digest == chunk["embd"]["sha256_f32"]
                for j, summary in enumerate(chunk["preproc"]):
                    if not summary["in_npz"]:
                        continue
                    px = arrays[f"{image}.{variant}.chunk{i}.pixels{j}"]
                    assert list(px.shape) == summary["shape"]
                    assert np.isclose(px.mean(), summary["mean"], rtol=1e-5, atol=1e-6)
                n_checked += 1
        cap = entry.get("caption_mmproj_f16", {})
        if "error" not in cap:
            assert cap["token_ids"][:16] == cap["caption_16"]
            if cap["finish_reason"] == "length":
                assert len(cap["caption_16"]) == 16
    assert n_checked > 0


# MTMDChatHandler renders the GGUF template, as the mtmd-helper recording does;
# the LLaVA handlers use their own template, so their captions are not compared.
MTMD_RECORDED = [k for k in RECORDED
                 if json.loads((DATA / k / "record.json").read_text())["handler"] == "MTMDChatHandler"]


def test_mtmd_recorded_types_are_compared():
    assert len(MTMD_RECORDED) >= 4


@pytest.mark.parametrize("kind", MTMD_RECORDED)
def test_two_caption_paths_agree_where_prompts_match(kind):
    """The two greedy captions of a type recorded with MTMDChatHandler must agree."""
    rec = json.loads((DATA / kind / "record.json").read_text())
    n_compared = 0
    for entry in rec["images"].values():
        a, b = entry["caption_mmproj_f16"], entry["caption_mtmd_helper_mmproj_f16"]
        if "error" in a or "error" in b:
            continue
        n = min(len(a["caption_16"]), len(b["token_ids"]))
        for sa, sb in zip(a["steps"][:n], b["steps"][:n]):
            gap = min(l[0] - l[1] for l in (sa["top2_logits"], sb["top2_logits"]))
            if gap < NEAR_TIE:
                break  # the reference itself is within rounding noise: divergence allowed
            assert sa["token"] == sb["token"]
        n_compared += 1
    assert n_compared > 0

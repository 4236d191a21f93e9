"""Tiny random-weight vision-language checkpoints in Hugging Face format.

What this is: one builder per projector type; each writes a seeded, randomly initialised
`transformers` model, a shared SentencePiece tokenizer, a small chat template and a
preprocessor_config.json into a folder that llama.cpp's converters accept.
What it is not: a trained model. Outputs are noise; they exist so that two implementations
of the same maths can be compared token for token.
"""
from __future__ import annotations

import json
import pathlib
import shutil

import torch

# Special tokens every type needs somewhere; defined once so all tiny models share a vocab.
SPECIAL_TOKENS = [
    "<image>", "<start_of_image>", "<end_of_image>", "<image_soft_token>",
    "<fake_token_around_image>", "<global-img>", "<end_of_utterance>",
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
    "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>",
] + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]

# The text models' vocab: the SentencePiece pieces plus EXTRA_TOKENS at the end (added through
# tokenizer_config.json; "\n\n" is looked up by mtmd for idefics3's global image).
EXTRA_TOKENS = ["\n\n"]
N_VOCAB = 400  # SentencePiece pieces: <unk> <s> </s>, SPECIAL_TOKENS, 256 byte pieces, BPE merges

CORPUS = (
    "a photo of a cat sitting on a red chair. the image shows a small dog in the park. "
    "describe this image in one sentence. there is a blue sky with white clouds over green "
    "hills. a person is riding a bicycle along the river. what is in the picture? the "
    "colours are bright and the light is warm. user assistant system question answer. "
)

# Small jinja chat templates, written for these fixtures; the media marker comes from the
# handler (llama-cpp-python puts <__media__> where the image part was).
TEMPLATE_PLAIN = (
    "{% for m in messages %}{% if m['role'] == 'user' %}USER: {% else %}ASSISTANT: {% endif %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}{% else %}<__media__>{% endif %}{% endfor %}"
    "{% endif %}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
TEMPLATE_GEMMA = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
    "else 'user' }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% else %}"
    "<__media__>{% endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
TEMPLATE_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}"
    "{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'text' %}"
    "{{ c['text'] }}{% else %}<__media__>{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
HALF = [0.5, 0.5, 0.5]


def train_tokenizer(work: pathlib.Path) -> pathlib.Path:
    """Trains the shared SentencePiece model (deterministic: one thread, fixed seed)."""
    import sentencepiece as spm

    out = work / "spm"
    out.mkdir(parents=True, exist_ok=True)
    model = out / "tokenizer.model"
    if model.exists():
        return model
    corpus = out / "corpus.txt"
    corpus.write_text((CORPUS + "\n") * 20)
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(out / "tokenizer"), vocab_size=N_VOCAB,
        model_type="bpe", character_coverage=1.0, byte_fallback=True,
        user_defined_symbols=SPECIAL_TOKENS, num_threads=1, seed_sentencepiece_size=1000,
        shuffle_input_sentence=False, hard_vocab_limit=False, bos_id=1, eos_id=2, unk_id=0,
        pad_id=-1,
    )
    return model


def token_id(spm_model: pathlib.Path, piece: str) -> int:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    i = sp.piece_to_id(piece)
    assert sp.id_to_piece(i) == piece, piece
    return i


def _write_common(out: pathlib.Path, spm_model: pathlib.Path, template: str,
                  preproc: dict, extra_tok: dict | None = None) -> None:
    shutil.copy(spm_model, out / "tokenizer.model")
    cfg = {"chat_template": template, "bos_token": "<s>", "eos_token": "</s>",
           "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}
    # Mark the special pieces as special tokens: without this the converter types them
    # NORMAL, llama.cpp's tokenizer then splits "<global-img>" into characters and
    # mtmd's lookups of the image tokens fail.
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    cfg["added_tokens_decoder"] = {
        str(sp.piece_to_id(t)): {"content": t, "special": True, "lstrip": False,
                                 "rstrip": False, "normalized": False, "single_word": False}
        for t in ["<unk>", "<s>", "</s>"] + SPECIAL_TOKENS}
    for i, t in enumerate(EXTRA_TOKENS):
        cfg["added_tokens_decoder"][str(sp.vocab_size() + i)] = {
            "content": t, "special": False, "lstrip": False, "rstrip": False,
            "normalized": False, "single_word": False}
    cfg.update(extra_tok or {})
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (out / "preprocessor_config.json").write_text(json.dumps(preproc, indent=1))


def _rename_keys(path: pathlib.Path, old: str, new: str) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    renamed = {(new + k[len(old):] if k.startswith(old) else k): v for k, v in tensors.items()}
    save_file(renamed, path, metadata={"format": "pt"})


def _seeded(seed: int) -> None:
    torch.manual_seed(seed)


def _scale_weights(model: torch.nn.Module, std: float = 0.2) -> None:
    """Re-draws every weight with a larger spread so outputs depend visibly on the input
    (HF's default init of 0.02 makes random tiny models nearly input-independent)."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name or "ln" in name.split(".")[-2]:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))


def _text_kwargs(**over) -> dict:
    kw = dict(vocab_size=N_VOCAB + len(EXTRA_TOKENS), hidden_size=64, intermediate_size=128,
              num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
              rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1,
              eos_token_id=2, pad_token_id=0)
    kw.update(over)
    return kw


def _tiny_clip_config():
    """The CLIP ViT both LLaVA fixtures use: 28 px images, 2x2 patches of 14 px
    (4 image tokens), 3 layers, quick-GELU."""
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                            num_attention_heads=4, image_size=28, patch_size=14,
                            projection_dim=32, hidden_act="quick_gelu", layer_norm_eps=1e-5)


def build_llava15(out: pathlib.Path, spm_model: pathlib.Path) -> dict:
    """LLaVA 1.5: CLIP ViT (quick-GELU, class token, feature from layer -2) + 2-layer MLP.
    Writes: out/ (full HF Llava checkpoint, for the text GGUF), out/vision/ (CLIPVisionModel
    for the legacy image-encoder converter) and out/llava.projector (projector tensors)."""
    from transformers import LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    _seeded(11)
    vcfg = _tiny_clip_config()
    tcfg = LlamaConfig(**_text_kwargs())
    cfg = LlavaConfig(vision_config=vcfg, text_config=tcfg,
                      image_token_index=token_id(spm_model, "<image>"),
                      projector_hidden_act="gelu", vision_feature_layer=-2,
                      vision_feature_select_strategy="default")
    model = LlavaForConditionalGeneration(cfg).eval()
    _scale_weights(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _write_common(out, spm_model, TEMPLATE_PLAIN, {"image_mean": CLIP_MEAN, "image_std": CLIP_STD})
    vision = out / "vision"
    model.model.vision_tower.save_pretrained(vision)
    proj = {f"multi_modal_projector.{k}": v.detach().clone()
            for k, v in model.model.multi_modal_projector.state_dict().items()}
    torch.save(proj, out / "llava.projector")
    return {"vision": vcfg.to_dict(), "text": tcfg.to_dict()}


def build_llava16(out: pathlib.Path, spm_model: pathlib.Path) -> dict:
    """LLaVA-NeXT (1.6): the LLaVA 1.5 encoder + MLP, with anyres tiling over
    image_grid_pinpoints (multiples of the 28 px tile), spatial_unpad merging and a learned
    `image_newline`. Writes out/ (HF LlavaNext checkpoint), out/text/ (its language half as
    LlamaForCausalLM: convert_hf_to_gguf has no text class for LlavaNext), out/vision/
    (CLIPVisionModel whose config.json also carries the anyres keys the legacy converter
    copies into the GGUF) and out/llava.projector (projector + image_newline)."""
    from transformers import (LlamaConfig, LlamaForCausalLM,
                              LlavaNextConfig, LlavaNextForConditionalGeneration)

    _seeded(16)
    pinpoints = [[28, 56], [56, 28], [56, 56], [28, 84], [84, 28]]
    vcfg = _tiny_clip_config()
    tcfg = LlamaConfig(**_text_kwargs())
    cfg = LlavaNextConfig(vision_config=vcfg, text_config=tcfg,
                          image_token_index=token_id(spm_model, "<image>"),
                          projector_hidden_act="gelu", vision_feature_layer=-2,
                          vision_feature_select_strategy="default",
                          image_grid_pinpoints=pinpoints)
    model = LlavaNextForConditionalGeneration(cfg).eval()
    _scale_weights(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _write_common(out, spm_model, TEMPLATE_PLAIN, {"image_mean": CLIP_MEAN, "image_std": CLIP_STD})
    text = LlamaForCausalLM(tcfg).eval()
    text.model.load_state_dict(model.model.language_model.state_dict())
    text.lm_head.load_state_dict(model.lm_head.state_dict())
    text.save_pretrained(out / "text")
    _write_common(out / "text", spm_model, TEMPLATE_PLAIN, {})
    vision = out / "vision"
    model.model.vision_tower.save_pretrained(vision)
    vjson = json.loads((vision / "config.json").read_text())
    vjson.update(image_grid_pinpoints=pinpoints, image_aspect_ratio="anyres",
                 mm_patch_merge_type="spatial_unpad")
    (vision / "config.json").write_text(json.dumps(vjson, indent=1))
    proj = {f"multi_modal_projector.{k}": v.detach().clone()
            for k, v in model.model.multi_modal_projector.state_dict().items()}
    proj["image_newline"] = model.model.image_newline.detach().clone()
    torch.save(proj, out / "llava.projector")
    return {"vision": vcfg.to_dict(), "text": tcfg.to_dict(), "image_grid_pinpoints": pinpoints}


def build_gemma3(out: pathlib.Path, spm_model: pathlib.Path) -> dict:
    """Gemma 3: SigLIP (no class token) + average pool to mm_tokens_per_image + soft-emb
    RMS norm + linear. 64 px / patch 16 = 4x4 patches, pooled to 2x2 = 4 tokens."""
    from transformers import (Gemma3Config, Gemma3ForConditionalGeneration,
                              Gemma3TextConfig, SiglipVisionConfig)

    _seeded(12)
    vcfg = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, image_size=64, patch_size=16,
                              layer_norm_eps=1e-6)
    tcfg = Gemma3TextConfig(**_text_kwargs(head_dim=16, sliding_window=64,
                                           query_pre_attn_scalar=16))
    cfg = Gemma3Config(vision_config=vcfg, text_config=tcfg, mm_tokens_per_image=4,
                       image_token_index=token_id(spm_model, "<image_soft_token>"),
                       boi_token_index=token_id(spm_model, "<start_of_image>"),
                       eoi_token_index=token_id(spm_model, "<end_of_image>"))
    model = Gemma3ForConditionalGeneration(cfg).eval()
    # 0.05, not 0.2: with Gemma's sqrt(n_embd) embedding scale, 0.2 makes every caption the
    # same repeated token whatever the image; 0.05 keeps the greedy replies image-dependent
    _scale_weights(model, std=0.05)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # transformers 5 saves the SigLIP tower as `vision_tower.<...>`; the converter knows the
    # released checkpoints' `vision_tower.vision_model.<...>`: rename on disk.
    _rename_keys(out / "model.safetensors", "vision_tower.", "vision_tower.vision_model.")
    _write_common(out, spm_model, TEMPLATE_GEMMA,
                  {"image_mean": HALF, "image_std": HALF, "image_seq_length": 4,
                   "size": {"height": 64, "width": 64}})
    return {"vision": vcfg.to_dict(), "text": tcfg.to_dict()}


def build_idefics3(out: pathlib.Path, spm_model: pathlib.Path) -> dict:
    """Idefics3 / SmolVLM: SigLIP + pixel shuffle (scale 2) + linear connector.
    64 px / patch 16 = 4x4 patches -> 2x2 after shuffle = 4 tokens per tile;
    longest edge 128 so wide/tall images are split into 64 px tiles plus a global image."""
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration,
                              Idefics3VisionConfig, LlamaConfig)

    _seeded(13)
    vcfg = Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, image_size=64, patch_size=16,
                                layer_norm_eps=1e-6)
    tcfg = LlamaConfig(**_text_kwargs())
    cfg = Idefics3Config(vision_config=vcfg.to_dict(), text_config=tcfg.to_dict(),
                         scale_factor=2, image_token_id=token_id(spm_model, "<image>"))
    model = Idefics3ForConditionalGeneration(cfg).eval()
    _scale_weights(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # convert_hf_to_gguf has no text model for Idefics3ForConditionalGeneration; the text
    # half of SmolVLM is a plain Llama, so save it as one beside the full checkpoint.
    from transformers import LlamaForCausalLM
    text = LlamaForCausalLM(tcfg).eval()
    text.model.load_state_dict(model.model.text_model.state_dict())
    text.lm_head.load_state_dict(model.lm_head.state_dict())
    text.save_pretrained(out / "text")
    _write_common(out / "text", spm_model, TEMPLATE_PLAIN, {})
    _write_common(out, spm_model, TEMPLATE_PLAIN,
                  {"image_mean": HALF, "image_std": HALF, "size": {"longest_edge": 128},
                   "max_image_size": {"longest_edge": 64}})
    return {"vision": vcfg.to_dict(), "text": tcfg.to_dict()}


def _build_qwen(out: pathlib.Path, spm_model: pathlib.Path, v25: bool) -> dict:
    if v25:
        from transformers import (Qwen2_5_VLConfig as Cfg,
                                  Qwen2_5_VLForConditionalGeneration as Model)
        vision = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=4,
                      out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                      temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                      hidden_act="silu")
    else:
        from transformers import Qwen2VLConfig as Cfg, Qwen2VLForConditionalGeneration as Model
        vision = dict(depth=3, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=4,
                      patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    _seeded(15 if v25 else 14)
    text = _text_kwargs(rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "mrope_section": [2, 3, 3]})
    cfg = Cfg(text_config=text, vision_config=vision,
              image_token_id=token_id(spm_model, "<|image_pad|>"),
              video_token_id=token_id(spm_model, "<|video_pad|>"),
              vision_start_token_id=token_id(spm_model, "<|vision_start|>"),
              vision_end_token_id=token_id(spm_model, "<|vision_end|>"))
    model = Model(cfg).eval()
    _scale_weights(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _write_common(out, spm_model, TEMPLATE_CHATML,
                  {"image_mean": CLIP_MEAN, "image_std": CLIP_STD, "patch_size": 14,
                   "merge_size": 2, "temporal_patch_size": 2,
                   "min_pixels": 56 * 56, "max_pixels": 112 * 112})
    return {"vision": vision, "text": text}


def build_qwen2vl(out, spm_model):
    """(Depth 3, not 2: convert_hf_to_gguf maps `visual.merger.mlp.{bid}` only for bid below
    the vision block count, so mlp.2 needs at least 3 blocks.)
    Qwen2-VL: ViT with 2-D RoPE, patch 14, 2x2 spatial merge, merger MLP."""
    return _build_qwen(out, spm_model, v25=False)


def build_qwen25vl(out, spm_model):
    """Qwen2.5-VL: as Qwen2-VL plus RMSNorm/SiLU-gated MLP and window attention
    (block 1 full attention, block 0 windowed)."""
    return _build_qwen(out, spm_model, v25=True)


BUILDERS = {
    "llava15": build_llava15,
    "llava16": build_llava16,
    "gemma3": build_gemma3,
    "idefics3": build_idefics3,
    "qwen2vl": build_qwen2vl,
    "qwen25vl": build_qwen25vl,
}

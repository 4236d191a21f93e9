"""Gemma 4 text checkpoints (``Gemma4ForCausalLM``, model_type ``gemma4_text``: E2B/E4B, 31B,
26B-A4B) -> GGUF architecture ``gemma4``.

What differs from the shared decoder writer:
- tokenizer: Gemma 4's SentencePiece-style tokenizer.json (BPE with byte fallback) written as
  tokenizer model "gemma4": the model vocabulary in id order, every score -1000, <0xNN> pieces
  BYTE, the named special tokens (tokenizer_config.json's bos / eos / unk / pad / ... and its
  extra special tokens) CONTROL, the chat-markup tokens that must stay visible (<|channel>,
  <tool_call|>, ...) USER_DEFINED, the rest NORMAL; added tokens past the vocabulary after it;
  merges kept; BOS always added; no pre-tokenizer name;
- sliding and global layers with their own head sizes, KV head counts and rotary sizes: the
  global values are the main key/value lengths and rotary size, the sliding ones the ``_swa``
  keys, the per-layer pattern ``sliding_window_pattern``, KV counts per layer when the global
  layers have their own; the global layers' "proportional" rope is a ``rope_freqs`` tensor
  (1 for rotated frequency pairs, 1e30 to leave the rest unrotated);
- norms are stored as the multiplier itself (no +1, unlike Gemma 2/3); names: the four
  Gemma norms, ``layer_scalar`` -> ``layer_output_scale``, E2B's per-layer embeddings
  (``embed_tokens_per_layer`` -> ``per_layer_token_embd``, ``per_layer_model_projection`` ->
  ``per_layer_model_proj``, ``per_layer_projection_norm`` -> ``per_layer_proj_norm``, per
  layer ``per_layer_input_gate`` / ``per_layer_projection`` / ``post_per_layer_input_norm`` ->
  ``inp_gate`` / ``proj`` / ``post_norm``), shared-KV layers without k/v (``shared_kv_layers``),
  E2B's double-wide FFNs (feed_forward_length per layer);
- 26B-A4B's mixture beside the dense FFN: see _MOE_NAMES.
Not here: the vision / audio towers (mmproj), Gemma 4 "unified" and assistant checkpoints.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional

import numpy as np

from .decoder import DecoderFamily, need, rope_parameters
from .vocab import BYTE, CONTROL, NORMAL, USER_DEFINED, Vocab, _chat_template, _merges, _read_json, \
    _special_ids_and_flags

MODEL_TYPES = ("gemma4_text",)

# chat-markup tokens llama.cpp renders as text so that the chat parser can read them
_VISIBLE = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>",
            "<|\"|>"}
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _token_text(entry) -> Optional[str]:
    return entry.get("content") if isinstance(entry, dict) else entry if isinstance(entry, str) else None


def read_gemma4_vocab(hf_dir: str, cfg: dict, tokenizer_pre: Optional[str] = None) -> Vocab:
    tok_json = _read_json(os.path.join(hf_dir, "tokenizer.json"))
    if tok_json is None:
        raise ValueError(f"{hf_dir} has no tokenizer.json (Gemma 4's tokenizer)")
    model = tok_json.get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback") or \
            (tok_json.get("decoder") or {}).get("type") != "Sequence":
        raise NotImplementedError(f"{hf_dir}: tokenizer.json is not Gemma 4's SentencePiece-style BPE")
    tok_cfg = _read_json(os.path.join(hf_dir, "tokenizer_config.json")) or {}
    base = {int(i): t for t, i in model.get("vocab", {}).items()}
    n_base = len(base)
    if sorted(base) != list(range(n_base)):
        raise ValueError(f"{hf_dir}: tokenizer.json's vocabulary ids are not 0..{n_base - 1}")
    added = {int(t["id"]): t["content"] for t in tok_json.get("added_tokens", [])}
    text_to_id = {t: i for i, t in base.items()}
    text_to_id.update({t: i for i, t in added.items()})
    # the special tokens transformers names: the roles in tokenizer_config.json and its extras
    named = [_token_text(tok_cfg.get(f"{r}_token")) for r in ("bos", "eos", "unk", "sep", "pad", "cls", "mask")]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = tok_cfg.get(key) or []
        named += [_token_text(e) for e in (extra.values() if isinstance(extra, dict) else extra)]
    special_ids = {text_to_id[t] for t in named if t is not None and t in text_to_id}

    tokens: List[str] = []
    types: List[int] = []
    for i in range(n_base):
        text = base[i]
        tokens.append(text)
        kind = BYTE if _BYTE_PIECE.fullmatch(text) else CONTROL if i in special_ids else NORMAL
        types.append(USER_DEFINED if text in _VISIBLE else kind)
    for i in sorted(t for t in added if t >= n_base):
        if i != len(tokens):
            raise ValueError(f"{hf_dir}: added token id {i} leaves a gap after {len(tokens) - 1}")
        text = added[i]
        tokens.append(text)
        types.append(USER_DEFINED if text in _VISIBLE else CONTROL if i in special_ids else USER_DEFINED)
    ids, add = _special_ids_and_flags(hf_dir, tok_json, tok_cfg, cfg, len(tokens))
    add["bos"] = True
    vocab = Vocab("gemma4", None, tokens, types, _merges(tok_json), [-1000.0] * len(tokens), ids, add,
                  _chat_template(hf_dir, tok_cfg))
    vocab.add_space_prefix = False
    return vocab


def _global_value(cfg: dict, key: str, per_layer_key: str):
    """A global (full-attention) layer's value: ``key`` in the config, else the first full
    layer's entry in ``per_layer_config``."""
    if cfg.get(key) is not None:
        return cfg[key]
    kinds = cfg.get("layer_types") or []
    for il, layer in sorted((cfg.get("per_layer_config") or {}).items(), key=lambda kv: int(kv[0])):
        if int(il) < len(kinds) and kinds[int(il)] == "full_attention" and per_layer_key in layer:
            return layer[per_layer_key]
    return None


def _global_head_dim(cfg: dict) -> int:
    hd = _global_value(cfg, "global_head_dim", "head_dim")
    if hd is None:
        raise ValueError("config.json names no global head size (global_head_dim / per_layer_config)")
    return int(hd)


def _prepare(cfg: dict) -> dict:
    """Puts the global layers' sizes where the shared writer reads them: head_dim (the sliding
    layers' is kept as _head_dim_swa), per-layer FFN sizes and KV head counts where they vary."""
    n_layer = int(need(cfg, "num_hidden_layers"))
    n_shared = int(need(cfg, "num_kv_shared_layers"))
    swa = [kind == "sliding_attention" for kind in need(cfg, "layer_types")]
    cfg["_head_dim_swa"] = int(need(cfg, "head_dim"))
    cfg["head_dim"] = _global_head_dim(cfg)
    if cfg.get("use_double_wide_mlp"):
        n_ff = int(need(cfg, "intermediate_size"))
        cfg["intermediate_size"] = [n_ff if il < n_layer - n_shared else 2 * n_ff for il in range(n_layer)]
    n_kv_full = _global_value(cfg, "num_global_key_value_heads", "num_key_value_heads")
    if n_kv_full is not None and cfg.get("num_key_value_heads") is not None:
        cfg["num_key_value_heads"] = [cfg["num_key_value_heads"] if s else n_kv_full for s in swa]
    return cfg


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    full = rope_parameters(cfg)
    full = full.get("full_attention", full)
    if full.get("rope_theta") is None:
        w.add_rope_freq_base(1_000_000.0)
    if cfg.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if cfg.get("sliding_window_pattern") != 1:
        w.add_sliding_window(need(cfg, "sliding_window"))
    # the global head size (key / value lengths), per-layer FFN sizes and KV head counts come
    # through the shared writer (_prepare)
    w.add_shared_kv_layers(int(cfg["num_kv_shared_layers"]))
    w.add_embedding_length_per_layer_input(cfg.get("hidden_size_per_layer_input") or 0)
    w.add_sliding_window_pattern([kind == "sliding_attention" for kind in cfg["layer_types"]])
    hd_full, hd_swa = cfg["head_dim"], cfg["_head_dim_swa"]
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    n_ff_exp = cfg.get("expert_intermediate_size") or cfg.get("moe_intermediate_size")
    if n_ff_exp is not None:
        w.add_expert_feed_forward_length(n_ff_exp)
    w.add_rope_dimension_count(hd_full)  # every pair rotates; rope_freqs leaves some unrotated
    w.add_rope_dimension_count_swa(int(hd_swa * rope_parameters(cfg).get("partial_rotary_factor", 1.0)))


def _rope_freqs(cfg: dict) -> Dict[str, np.ndarray]:
    full = rope_parameters(cfg).get("full_attention")
    if not full or full.get("rope_type") != "proportional":
        raise NotImplementedError("Gemma 4 without proportional rope on its full-attention layers is not converted")
    hd = _global_head_dim(cfg)
    n_rot = int(hd * full["partial_rotary_factor"] / 2)
    return {"rope_freqs.weight": np.array([1.0] * n_rot + [1e30] * (hd // 2 - n_rot), dtype=np.float32)}


_L = r"model\.layers\.(\d+)\."
# 26B-A4B: fused experts kept as they are stored (gate|up rows together, as llama.cpp's
# ffn_gate_up_exps), the router's projection, its input scale and the per-expert output
# scales, and the mixture branch's own norms beside the dense FFN's
_MOE_NAMES = (
    (_L + r"experts\.gate_up_proj", "blk.{0}.ffn_gate_up_exps.weight"),
    (_L + r"experts\.down_proj", "blk.{0}.ffn_down_exps.weight"),
    (_L + r"router\.proj\.weight", "blk.{0}.ffn_gate_inp.weight"),
    (_L + r"router\.scale", "blk.{0}.ffn_gate_inp.scale"),
    (_L + r"router\.per_expert_scale", "blk.{0}.ffn_down_exps.scale"),
    (_L + r"pre_feedforward_layernorm_2\.weight", "blk.{0}.pre_ffw_norm_2.weight"),
    (_L + r"post_feedforward_layernorm_(1|2)\.weight", "blk.{0}.post_ffw_norm_{1}.weight"),
)
FAMILY = DecoderFamily(
    arch="gemma4",
    required=("attn_norm", "attn_q", "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up",
              "ffn_down", "post_ffw_norm"),
    prepare_config=_prepare,
    extra_kv=_extra_kv,
    extra_tensors=_rope_freqs,
    read_vocab=read_gemma4_vocab,
    tensor_names=(
        (r"model\.embed_tokens_per_layer\.weight", "per_layer_token_embd.weight"),
        (r"model\.per_layer_model_projection\.weight", "per_layer_model_proj.weight"),
        (r"model\.per_layer_projection_norm\.weight", "per_layer_proj_norm.weight"),
        (_L + r"post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
        (_L + r"pre_feedforward_layernorm\.weight", "blk.{0}.ffn_norm.weight"),
        (_L + r"post_feedforward_layernorm\.weight", "blk.{0}.post_ffw_norm.weight"),
        (_L + r"layer_scalar", "blk.{0}.layer_output_scale.weight"),
        (_L + r"per_layer_input_gate\.weight", "blk.{0}.inp_gate.weight"),
        (_L + r"per_layer_projection\.weight", "blk.{0}.proj.weight"),
        (_L + r"post_per_layer_input_norm\.weight", "blk.{0}.post_norm.weight"),
    ) + _MOE_NAMES,
    trim_embedding=True,
    config_defaults=(("max_position_embeddings", 131072), ("num_attention_heads", 8), ("rms_norm_eps", 1e-6),
                     ("head_dim", 256), ("num_key_value_heads", 4)),
)

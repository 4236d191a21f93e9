"""Phi-3 / Phi-3.5 / Phi-4(-mini) checkpoints (``Phi3ForCausalLM``) -> GGUF architecture ``phi3``.

What differs from the shared decoder writer:
- the fused projections stay fused: ``self_attn.qkv_proj`` -> ``attn_qkv`` (q, k, v rows one
  after the other) and ``mlp.gate_up_proj`` -> ``ffn_up`` (gate rows first); the engine's phi3
  graph splits them;
- its own hyperparameter set, as llama.cpp's converter writes it for Phi-3: no key/value
  lengths, the original context length always, the rotary size from partial_rotary_factor,
  and a sliding window of 0 when the config has none (how llama.cpp tells Phi-4 apart);
- LongRoPE checkpoints (Phi-3-128k: ``long_factor`` / ``short_factor``) get the two factor
  tensors ``rope_factors_long`` / ``rope_factors_short`` and ``rope.scaling.attn_factor``;
- its own tokenizer rule (read_phi3_vocab): Phi-4's byte-level BPE when tokenizer_config.json
  says GPT2Tokenizer, else Phi-3's SentencePiece vocabulary with its added tokens.
Not here: Phi-3.5-MoE (``PhiMoEForCausalLM``) and Phi-3-small are other architectures.
"""
from __future__ import annotations

import math
import os
from typing import Dict, Optional

import numpy as np

from .decoder import DecoderFamily, need, rope_parameters
from .sentencepiece_model import read_pieces
from .vocab import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, Vocab, _chat_template, _read_json, \
    _special_ids_and_flags, read_bpe_vocab

MODEL_TYPES = ("phi3",)


def _rope_dims(cfg: dict) -> int:
    rp = rope_parameters(cfg)
    pct = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    return int(pct * need(cfg, "hidden_size")) // need(cfg, "num_attention_heads")


def _hparams(w, cfg: dict, n_layer: int) -> None:
    rp = rope_parameters(cfg)
    w.add_context_length(need(cfg, "max_position_embeddings"))
    w.add_rope_scaling_orig_ctx_len(need(rp, "original_max_position_embeddings"))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(need(cfg, "intermediate_size"))
    w.add_block_count(n_layer)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(need(cfg, "num_key_value_heads"))
    w.add_layer_norm_rms_eps(need(cfg, "rms_norm_eps"))
    w.add_rope_dimension_count(_rope_dims(cfg))
    w.add_rope_freq_base(need(rp.get("full_attention", rp), "rope_theta"))


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    # general.file_type comes between the rope base and the window in the reference; the key
    # order does not matter to readers
    w.add_sliding_window(cfg.get("sliding_window") or 0)
    attn = _longrope_attn_factor(cfg)
    if attn is not None:
        w.add_rope_scaling_attn_factors(attn)


def _longrope_attn_factor(cfg: dict):
    """The attention scale LongRoPE / YaRN factors imply (None without long factors)."""
    rp = rope_parameters(cfg)
    if not rp.get("long_factor"):
        return None
    scale = cfg["max_position_embeddings"] / rp["original_max_position_embeddings"]
    kind = str(rp.get("rope_type") or "").lower()
    if kind in ("su", "longrope"):
        return math.sqrt(1 + math.log(scale) / math.log(rp["original_max_position_embeddings"])) if scale > 1 else 1.0
    if kind == "yarn":
        return 0.1 * math.log(scale) + 1.0 if scale > 1 else 1.0
    raise NotImplementedError(f"Phi-3 rope scaling {kind or '(none given)'!r} with long/short factors is not "
                              "converted (longrope, su, yarn)")


def _rope_factors(cfg: dict) -> Dict[str, np.ndarray]:
    rp = rope_parameters(cfg)
    long, short = rp.get("long_factor"), rp.get("short_factor")
    if not long:
        return {}
    half = _rope_dims(cfg) / 2
    if short is None or len(long) != len(short) or len(long) != half:
        raise ValueError(f"Phi-3 rope long_factor / short_factor must both have {half:g} entries")
    return {"rope_factors_long.weight": np.array(long, dtype=np.float32),
            "rope_factors_short.weight": np.array(short, dtype=np.float32)}


def read_phi3_vocab(hf_dir: str, cfg: dict, tokenizer_pre: Optional[str] = None) -> Vocab:
    """Phi-3's own tokenizer rule: byte-level BPE when tokenizer_config.json says GPT2Tokenizer
    (Phi-4), else its SentencePiece tokenizer.model padded to config.json's vocab_size with
    "[PAD<id>]" (UNUSED, -10000), user-defined pieces NORMAL, then the added tokens of
    added_tokens.json, tokenizer_config.json's added_tokens_decoder and tokenizer.json's
    added_tokens in that order (score -1000; CONTROL when marked special, else USER_DEFINED,
    their text as written)."""
    tok_cfg = _read_json(os.path.join(hf_dir, "tokenizer_config.json"))
    if (tok_cfg or {}).get("tokenizer_class") == "GPT2Tokenizer":
        return read_bpe_vocab(hf_dir, cfg, tokenizer_pre)
    model = os.path.join(hf_dir, "tokenizer.model")
    if not os.path.isfile(model):
        raise ValueError(f"{hf_dir} has no tokenizer.model (Phi-3's SentencePiece vocabulary)")
    pieces = read_pieces(model)
    n = int(cfg.get("vocab_size") or len(pieces))
    if len(pieces) > n:
        raise ValueError(f"tokenizer.model has {len(pieces)} pieces but config.json's vocab_size is {n}")
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [UNUSED] * n
    for i, (text, score, kind) in enumerate(pieces):
        tokens[i], scores[i] = text, score
        types[i] = kind if kind in (UNKNOWN, CONTROL, UNUSED, BYTE) else NORMAL

    def put(i: int, text: str, kind: int) -> None:
        if not 0 <= i < n:
            raise ValueError(f"added token {text!r} has id {i}, past config.json's vocab_size {n}")
        tokens[i], scores[i], types[i] = text, -1000.0, kind

    for text, i in (_read_json(os.path.join(hf_dir, "added_tokens.json")) or {}).items():
        if int(i) < n:  # as the reference: ids past the vocabulary are ignored here
            put(int(i), text, USER_DEFINED)
    for i, t in ((tok_cfg or {}).get("added_tokens_decoder") or {}).items():
        put(int(i), t["content"], CONTROL if t.get("special") else USER_DEFINED)
    tok_json = _read_json(os.path.join(hf_dir, "tokenizer.json"))
    for t in (tok_json or {}).get("added_tokens", []):
        put(int(t["id"]), t["content"], CONTROL if t.get("special") else USER_DEFINED)
    ids, add = _special_ids_and_flags(hf_dir, tok_json, tok_cfg, cfg, n)
    return Vocab("llama", "default", tokens, types, [], scores, ids, add, _chat_template(hf_dir, tok_cfg))


FAMILY = DecoderFamily(
    arch="phi3",
    required=("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"),
    write_hparams=_hparams,
    extra_kv=_extra_kv,
    extra_tensors=_rope_factors,
    tensor_names=(
        (r"model\.layers\.(\d+)\.self_attn\.qkv_proj\.weight", "blk.{0}.attn_qkv.weight"),
        (r"model\.layers\.(\d+)\.mlp\.gate_up_proj\.weight", "blk.{0}.ffn_up.weight"),
    ),
    read_vocab=read_phi3_vocab,
)

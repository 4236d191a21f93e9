"""Gemma 2 checkpoints (``Gemma2ForCausalLM``) -> GGUF architecture ``gemma2``.

As gemma3 (gemma3.py: the four per-layer norms and their names, norm weights + 1) without q/k
norms, and with llama.cpp's own short list of hyperparameters for Gemma 2 instead of the shared
one: context, sizes, heads, RMS epsilon, key/value length, the attention and final logit
soft-caps and the sliding window (no rope keys: llama.cpp's defaults apply). The saved
``lm_head`` (a copy of the tied embedding) is left out; SentencePiece vocabularies get
``add_space_prefix`` = false.
"""
from __future__ import annotations

from . import gemma3
from .decoder import DecoderFamily, need

MODEL_TYPES = ("gemma2",)


def _hparams(w, cfg: dict, n_layer: int) -> None:
    w.add_context_length(need(cfg, "max_position_embeddings"))
    w.add_embedding_length(need(cfg, "hidden_size"))
    w.add_block_count(n_layer)
    w.add_feed_forward_length(need(cfg, "intermediate_size"))
    w.add_head_count(need(cfg, "num_attention_heads"))
    w.add_head_count_kv(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    w.add_layer_norm_rms_eps(need(cfg, "rms_norm_eps"))
    w.add_key_length(need(cfg, "head_dim"))
    w.add_value_length(cfg["head_dim"])
    w.add_attn_logit_softcapping(need(cfg, "attn_logit_softcapping"))
    w.add_final_logit_softcapping(need(cfg, "final_logit_softcapping"))
    w.add_sliding_window(need(cfg, "sliding_window"))


def _adjust_vocab(vocab, cfg: dict, hf_dir: str) -> None:
    if vocab.model != "llama":
        raise NotImplementedError("Gemma 2 converts from its SentencePiece tokenizer.model only")
    vocab.add_space_prefix = False


FAMILY = DecoderFamily(
    arch="gemma2",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "post_attention_norm", "ffn_norm",
              "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"),
    write_hparams=_hparams,
    tensor_hook=gemma3.FAMILY.tensor_hook,
    tensor_names=gemma3.FAMILY.tensor_names,
    skip=lambda hf_name, cfg: hf_name == "lm_head.weight",
    adjust_vocab=_adjust_vocab,
)

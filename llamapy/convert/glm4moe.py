"""GLM-4.5 / GLM-4.5-Air / GLM-4.6 checkpoints (``Glm4MoeForCausalLM``) -> GGUF architecture
``glm4moe``.

What differs from the shared decoder writer:
- the next-token-prediction (MTP / NextN) layers after the main ones are kept, as llama.cpp's
  converter does by default: block_count counts them, ``<arch>.nextn_predict_layers`` says how
  many, and their extra tensors get GGUF's nextn names (``eh_proj``, ``enorm``, ``hnorm``,
  ``shared_head.norm`` -> ``shared_head_norm``, and where present ``embed_tokens`` /
  ``shared_head.head``); the rest of such a layer is an ordinary MoE decoder layer;
- ``post_attention_layernorm`` -> ``post_attention_norm``; q/k/v biases; routed experts stacked
  by the shared writer, shared experts and the sigmoid selection bias as for DeepSeek-V3;
- metadata: the partial rotary size (head_dim * partial_rotary_factor, 0.5 when absent),
  sigmoid gating always, expert / shared / dense-lead counts, routed scaling, top-k norm;
- tokenizer: GLM's special roles (bos = [gMASK], eot = <|user|>, unk = <|endoftext|>,
  eom = <|observation|>).
Not here: GLM-4.5V's vision tower; the MTP-only export (llama.cpp's --mtp option).
"""
from __future__ import annotations

from .decoder import DecoderFamily, need, rope_parameters, write_gating_func

MODEL_TYPES = ("glm4_moe",)

_SPECIAL_ROLES = (("bos", "[gMASK]"), ("eot", "<|user|>"), ("unk", "<|endoftext|>"), ("eom", "<|observation|>"))


def _prepare(cfg: dict) -> dict:
    cfg["_n_main_layers"] = int(need(cfg, "num_hidden_layers"))
    cfg["num_hidden_layers"] = cfg["_n_main_layers"] + int(cfg.get("num_nextn_predict_layers") or 0)
    return cfg


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_rope_dimension_count(int(head_dim * rope_parameters(cfg).get(
        "partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))))
    # the expert count comes through the shared writer (n_routed_experts)
    if cfg.get("moe_intermediate_size") is not None:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("n_shared_experts") is not None:
        w.add_expert_shared_count(cfg["n_shared_experts"])
    if cfg.get("first_k_dense_replace") is not None:
        w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    write_gating_func(w, 2)  # sigmoid, whatever the config says
    if cfg.get("routed_scaling_factor") is not None:
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg.get("norm_topk_prob") is not None:
        w.add_expert_weights_norm(cfg["norm_topk_prob"])
    if cfg.get("num_nextn_predict_layers") is not None:
        w.add_nextn_predict_layers(cfg["num_nextn_predict_layers"])


def _special_roles(vocab, cfg: dict, hf_dir: str) -> None:
    for role, text in _SPECIAL_ROLES:
        try:
            vocab.special_ids[role] = vocab.tokens.index(text)
        except ValueError:
            raise ValueError(f"{hf_dir}: GLM's tokenizer lacks its {text} token ({role})") from None


_L = r"model\.layers\.(\d+)\."
FAMILY = DecoderFamily(
    arch="glm4moe",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "post_attention_norm",
              "ffn_gate|ffn_gate_exps", "ffn_up|ffn_up_exps", "ffn_down|ffn_down_exps"),
    prepare_config=_prepare,
    extra_kv=_extra_kv,
    adjust_vocab=_special_roles,
    tensor_names=(
        (_L + r"post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
        (_L + r"eh_proj\.weight", "blk.{0}.nextn.eh_proj.weight"),
        (_L + r"enorm\.weight", "blk.{0}.nextn.enorm.weight"),
        (_L + r"hnorm\.weight", "blk.{0}.nextn.hnorm.weight"),
        (_L + r"embed_tokens\.weight", "blk.{0}.nextn.embed_tokens.weight"),
        (_L + r"shared_head\.norm\.weight", "blk.{0}.nextn.shared_head_norm.weight"),
        (_L + r"shared_head\.head\.weight", "blk.{0}.nextn.shared_head_head.weight"),
    ),
)

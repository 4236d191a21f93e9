"""DeepSeek-V2 / V3 checkpoints (``DeepseekV2ForCausalLM``, ``DeepseekV3ForCausalLM``) -> GGUF
architecture ``deepseek2``.

What differs from the shared decoder writer:
- multi-head latent attention: the low-rank projections keep their own names (``q_a_proj`` /
  ``q_b_proj`` / ``kv_a_proj_with_mqa`` and their norms; V2-Lite's plain ``q_proj``); the
  joint up-projection ``kv_b_proj`` (n_head * (qk_nope + v_head), kv_lora) is split per head
  into ``attn_k_b`` (n_head, kv_lora, qk_nope: k part transposed, so the graph can absorb it
  into q) and ``attn_v_b`` (n_head, v_head, kv_lora), as llama.cpp's converter does;
- metadata written as MQA with one kv head whose key is the latent + rope part
  (key_length = kv_lora + qk_rope, value_length = kv_lora) plus the MLA sizes of the
  decompressed heads, the LoRA ranks, leading dense layers, shared-expert count, routed
  scaling, top-k normalisation, and YaRN's log multiplier (0.1 * mscale_all_dim);
- routing: expert groups and the score function through the shared writer; V3's selection
  bias ``mlp.gate.e_score_correction_bias`` -> ``exp_probs_b.bias``; shared experts ->
  ``ffn_*_shexp``; routed experts stacked by the shared writer;
- the multi-token-prediction layers past num_hidden_layers are left out (llama.cpp's
  deepseek2 does not load them), as is a tied lm_head.
Not here: DeepSeek-OCR / Kimi-VL / V3.2's indexer / V4 (other architectures or towers).
"""
from __future__ import annotations

import re

from .decoder import DecoderFamily, need

MODEL_TYPES = ("deepseek_v2", "deepseek_v3")

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def _prepare(cfg: dict) -> dict:
    # kv_b_proj's split needs the checkpoint's kv head count; the file says one (MQA)
    cfg["_mla_n_head"] = int(cfg.get("num_key_value_heads") or need(cfg, "num_attention_heads"))
    cfg["num_key_value_heads"] = 1
    cfg.setdefault("rms_norm_eps", 1e-6)
    cfg.pop("head_dim", None)  # the MLA key/value lengths below are the file's, not head_dim
    return cfg


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    from .decoder import rope_parameters

    has_moe = cfg.get("n_routed_experts") is not None
    dense = cfg.get("first_k_dense_replace")
    w.add_leading_dense_block_count(dense if dense is not None else (0 if has_moe else cfg["num_hidden_layers"]))
    kv_lora = cfg.get("kv_lora_rank", 512)
    w.add_vocab_size(cfg["vocab_size"])
    if cfg.get("q_lora_rank") is not None:
        w.add_q_lora_rank(cfg["q_lora_rank"])
    rope, nope, v_head = need(cfg, "qk_rope_head_dim"), need(cfg, "qk_nope_head_dim"), need(cfg, "v_head_dim")
    w.add_kv_lora_rank(kv_lora)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v_head)
    w.add_expert_feed_forward_length(cfg.get("moe_intermediate_size") or need(cfg, "intermediate_size"))
    # the expert count itself comes through the shared writer (n_routed_experts)
    w.add_expert_shared_count(cfg.get("n_shared_experts", 0))
    if cfg.get("routed_scaling_factor") is not None:
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(rope)
    mscale_all = rope_parameters(cfg).get("mscale_all_dim")
    if mscale_all is not None:
        w.add_rope_scaling_yarn_log_mul(0.1 * mscale_all)


def _split_kv_b(hf_name: str, shape, cfg: dict):
    m = re.fullmatch(r"model\.layers\.(\d+)\.self_attn\.kv_b_proj\.weight", hf_name)
    if m is None:
        return None
    n_head, v_head, nope = cfg["_mla_n_head"], int(cfg["v_head_dim"]), int(cfg["qk_nope_head_dim"])
    if len(shape) != 2 or shape[0] != n_head * (nope + v_head):
        raise ValueError(f"{hf_name} has shape {shape}, not ({n_head} * ({nope} + {v_head}), kv_lora_rank)")
    kv_lora = shape[1]
    il = m.group(1)

    def heads(x):
        return x.reshape(n_head, nope + v_head, kv_lora)

    return [(f"blk.{il}.attn_k_b.weight", (n_head, kv_lora, nope), lambda x: heads(x)[:, :nope].swapaxes(1, 2)),
            (f"blk.{il}.attn_v_b.weight", (n_head, v_head, kv_lora), lambda x: heads(x)[:, nope:])]


def _skip(hf_name: str, cfg: dict) -> bool:
    if hf_name in ("lm_head.weight", "model.lm_head.weight") and cfg.get("tie_word_embeddings", False):
        return True
    m = _LAYER.match(hf_name)
    return m is not None and int(m.group(1)) >= int(cfg["num_hidden_layers"])  # MTP layers


_L = r"model\.layers\.(\d+)\."
FAMILY = DecoderFamily(
    arch="deepseek2",
    required=("attn_norm", "attn_q_a|attn_q", "attn_kv_a_mqa", "attn_kv_a_norm", "attn_k_b", "attn_v_b",
              "attn_output", "ffn_norm", "ffn_gate|ffn_gate_exps", "ffn_up|ffn_up_exps", "ffn_down|ffn_down_exps"),
    prepare_config=_prepare,
    extra_kv=_extra_kv,
    split_tensor=_split_kv_b,
    skip=_skip,
    tensor_names=(
        (_L + r"self_attn\.q_a_proj\.weight", "blk.{0}.attn_q_a.weight"),
        (_L + r"self_attn\.q_a_layernorm\.weight", "blk.{0}.attn_q_a_norm.weight"),
        (_L + r"self_attn\.q_b_proj\.weight", "blk.{0}.attn_q_b.weight"),
        (_L + r"self_attn\.kv_a_proj_with_mqa\.weight", "blk.{0}.attn_kv_a_mqa.weight"),
        (_L + r"self_attn\.kv_a_layernorm\.weight", "blk.{0}.attn_kv_a_norm.weight"),
    ),
)

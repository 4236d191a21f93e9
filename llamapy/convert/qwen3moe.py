"""Qwen3-MoE checkpoints (``Qwen3MoeForCausalLM``) -> GGUF architecture ``qwen3moe``.

As qwen3 (q/k norms, half-split rotary order kept) with every layer's feed-forward a routed
mixture: the router ``mlp.gate`` -> ``ffn_gate_inp`` (F32) and the per-expert matrices stacked
into ``ffn_{gate,up,down}_exps`` by the shared writer; metadata adds the expert FFN size (and a
shared expert's, for configs that name one). Expert count / experts used come through the
shared writer.
Not here: layers listed in ``mlp_only_layers`` or ``decoder_sparse_step`` > 1 (dense layers
between sparse ones): refused.
"""
from __future__ import annotations

from .decoder import DecoderFamily, need

MODEL_TYPES = ("qwen3_moe",)


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    if cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step") or 1) != 1:
        raise NotImplementedError("Qwen3-MoE with dense layers (mlp_only_layers / decoder_sparse_step) "
                                  "is not converted")
    w.add_expert_feed_forward_length(need(cfg, "moe_intermediate_size"))
    if cfg.get("shared_expert_intermediate_size") is not None:
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])


FAMILY = DecoderFamily(
    arch="qwen3moe",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
              "ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),
    extra_kv=_extra_kv,
)

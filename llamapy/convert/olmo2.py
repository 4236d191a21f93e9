"""OLMo 2 checkpoints (``Olmo2ForCausalLM``) -> GGUF architecture ``olmo2``.

What differs from the shared writer: no norms before attention or the FFN; the layer's
``post_attention_layernorm`` / ``post_feedforward_layernorm`` (applied to the outputs before
each residual add) are ``post_attention_norm`` / ``post_ffw_norm``, and q/k norms span the
whole projection (all heads). Half-split rotary order kept (no permutation). A config with a
sliding window also gets the window and the per-layer sliding pattern (OLMo 3's layer_types).
"""
from __future__ import annotations

from .decoder import DecoderFamily

MODEL_TYPES = ("olmo2", "olmo3")


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    if "sliding_window" in cfg:
        w.add_sliding_window(cfg["sliding_window"])
        if "layer_types" in cfg:
            pattern = [t == "sliding_attention" for t in cfg["layer_types"]]
        else:
            pattern = [(i + 1) % 4 != 0 for i in range(int(cfg["num_hidden_layers"]))]
        w.add_sliding_window_pattern(pattern)


FAMILY = DecoderFamily(
    arch="olmo2",
    required=("attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm", "post_attention_norm",
              "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"),
    extra_kv=_extra_kv,
    tensor_names=(
        (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
        (r"model\.layers\.(\d+)\.post_feedforward_layernorm\.weight", "blk.{0}.post_ffw_norm.weight"),
    ),
)

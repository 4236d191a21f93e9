// olmo2.cpp — AllenAI OLMo 2 and OLMo 3 (both convert to this architecture).
// The block has no norm before attention or before the FFN: each sub-block
// reads the residual stream itself, and its output is RMS-normed
// (post_attention_norm, post_ffw_norm) before the residual add. q and k are
// RMS-normed as whole rows (all heads together, weights of n_embd and
// n_head_kv * head_dim) before RoPE on split halves (NeoX style). OLMo 3
// files add a sliding window (attention.sliding_window, and a per-layer
// sliding_window_pattern; without one, in every 4 layers the first 3): the
// window layers rotate with the global base and no frequency scaling or
// YaRN, the full layers with the file's scaling (llama.cpp's olmo2 graph).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.pre_norm = false;
    hp.v.qk_norm_full = true;
    hp.v.post_attn_norm = true;
    hp.v.post_ffn_norm = true;
    hp.swa_rope_plain = true;  // (window layers only)
    // llama.cpp sizes q, its norm and the output projection by n_embd
    if (hp.n_q() != hp.n_embd || hp.head_dim_v != hp.head_dim_k)
        throw gguf_error("model metadata: olmo2 needs head_count * key_length = embedding_length and "
                         "value_length = key_length, has " + std::to_string(hp.n_head) + " * " +
                         std::to_string(hp.head_dim_k) + " for " + std::to_string(hp.n_embd));
}

}  // namespace

extern const arch_def arch_olmo2 = {"olmo2", setup, /*swa_period=*/4, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

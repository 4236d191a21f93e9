// deepseek2.cpp — DeepSeek V2 / V3 / R1 and the models llama.cpp converts to
// this architecture (Kimi K2, GigaChat 3, ...): multi-head latent attention
// (model.h mla_hparams; RoPE on adjacent pairs of the last n_rot elements,
// YaRN with DeepSeek's attention-scale correction) and experts after
// leading_dense_block_count dense layers: a router (softmax unless
// expert_gating_func says sigmoid) with an optional selection bias
// (exp_probs_b, V3), group-limited top-k (expert_group_count /
// _used_count, V3), weights normalised (expert_weights_norm) and scaled
// (expert_weights_scale), plus expert_shared_count shared experts.
// Next-token-prediction layers are skipped (model.cpp).
#include <cmath>

#include "model.h"

namespace lp {

namespace {

// llama.cpp's YaRN magnitude for a scale factor f and a multiplier.
float yarn_mscale(float f, float mul) { return f <= 1.0f ? 1.0f : 0.1f * mul * std::log(f) + 1.0f; }

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::normal;
    hp.v.act = ffn_act::silu;
    mla_hparams& a = hp.mla;
    a.q_lora = arch_int(f, hp, "attention.q_lora_rank", 0);
    a.kv_lora = arch_int(f, hp, "attention.kv_lora_rank", 0);
    a.head_k = arch_int(f, hp, "attention.key_length_mla", 0);
    a.head_v = arch_int(f, hp, "attention.value_length_mla", 0);
    if (a.kv_lora <= 0 || a.head_k <= 0 || a.head_v <= 0)
        throw not_implemented_error(hp.arch + " without attention.kv_lora_rank / key_length_mla / value_length_mla: "
                                    "this file predates llama.cpp's multi-head latent attention layout; convert the "
                                    "model again with a current convert_hf_to_gguf.py");
    const int64_t R = hp.rope.n_rot;
    if (a.q_lora < 0 || a.head_k <= R || hp.n_head_kv != 1 || hp.head_dim_k != a.kv_lora + R ||
        hp.head_dim_v != a.kv_lora)
        throw gguf_error("model metadata: " + hp.arch + "'s attention sizes do not fit multi-head latent attention "
                         "(head_count_kv " + std::to_string(hp.n_head_kv) + ", key_length " +
                         std::to_string(hp.head_dim_k) + ", value_length " + std::to_string(hp.head_dim_v) +
                         ", kv_lora_rank " + std::to_string(a.kv_lora) + ", rope.dimension_count " +
                         std::to_string(R) + ", key_length_mla " + std::to_string(a.head_k) + ")");

    // YaRN: llama.cpp sets the rotation's magnitude so that the rotated part
    // keeps its length, and moves DeepSeek's mscale into q·k's scale instead.
    const float fs = hp.rope.freq_scale;
    float log_mul = (float)arch_float(f, hp, "rope.scaling.yarn_log_multiplier", 0.0) / 0.1f;
    if (hp.rope.ext_factor != 0.0f && log_mul != 0.0f) {
        const float factor = 1.0f / fs;
        const float ms = log_mul != 1.0f ? log_mul : 1.0f;
        hp.rope.attn_factor *= yarn_mscale(factor, ms) / yarn_mscale(factor, log_mul) / (1.0f + 0.1f * std::log(factor));
    } else if (hp.rope.ext_factor != 0.0f) {
        hp.rope.attn_factor *= yarn_mscale(1.0f / fs, 1.0f) / (1.0f + 0.1f * std::log(1.0f / fs));
    }
    const float org = hp.rope.ext_factor != 0.0f ? hp.rope.attn_factor * (1.0f + 0.1f * std::log(1.0f / fs))
                                                 : hp.rope.attn_factor;
    const float mscale = org * (1.0f + 0.1f * log_mul * std::log(1.0f / fs));
    hp.attn_scale = mscale * mscale / std::sqrt((float)a.head_k);

    moe_hparams& m = hp.moe;
    if (m.n_expert > 0) {
        m.n_ff_exp = arch_int(f, hp, "expert_feed_forward_length", 0);
        if (m.n_ff_exp == 0) throw gguf_error("model metadata lacks " + hp.arch + ".expert_feed_forward_length");
        m.n_layer_dense_lead = arch_int(f, hp, "leading_dense_block_count", 0);
        m.n_ff_shexp = m.n_ff_exp * arch_int(f, hp, "expert_shared_count", 0);
        m.norm_w = f.get_bool(hp.arch + ".expert_weights_norm", false);
        m.w_scale = (float)arch_float(f, hp, "expert_weights_scale", 0.0);
        m.gating = gating_of(f, hp, moe_gating::softmax);
        m.act = ffn_act::silu;
    }
}

}  // namespace

extern const arch_def arch_deepseek2 = {"deepseek2", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

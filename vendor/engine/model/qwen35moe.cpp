// qwen35moe.cpp — Qwen3.5 mixture of experts (Qwen3.5-35B-A3B, -122B-A10B,
// -397B-A17B; Qwen3.6 MoE): qwen35.cpp's hybrid layers (gated delta-net and
// gated attention, the same RoPE note) with experts in every layer: a softmax
// router, the top expert_used_count, their weights divided by their sum, plus
// a shared expert of expert_shared_feed_forward_length whose output is scaled
// by sigmoid(ffn_gate_inp_shexp · x) (blocks.cpp moe_ffn_block).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qk_norm = true;
    hp.v.attn_gate = true;
    hp.v.ffn_norm_tensor = "post_attention_norm";
    read_delta_net(f, hp);
    moe_hparams& m = hp.moe;
    if (m.n_expert == 0) throw gguf_error("model metadata: qwen35moe.expert_count is missing or 0");
    if (m.n_expert_used == 0) throw gguf_error("model metadata: qwen35moe.expert_used_count is missing or 0");
    m.n_ff_exp = arch_int(f, hp, "expert_feed_forward_length", 0);
    if (m.n_ff_exp == 0) throw gguf_error("model metadata: qwen35moe.expert_feed_forward_length is missing or 0");
    m.n_ff_shexp = arch_int(f, hp, "expert_shared_feed_forward_length", 0);
    if (hp.n_ff == 0) hp.n_ff = m.n_ff_exp;  // (no feed_forward_length: no dense layer reads it)
    m.gating = moe_gating::softmax;
    m.act = ffn_act::silu;
    m.norm_w = true;
    m.w_scale = (float)arch_float(f, hp, "expert_weights_scale", 0.0);
}

}  // namespace

extern const arch_def arch_qwen35moe = {"qwen35moe", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

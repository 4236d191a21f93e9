// qwen3moe.cpp — Qwen 3 mixture of experts (Qwen3-30B-A3B, Qwen3-235B-A22B,
// Qwen3-Coder): Qwen 3's attention (per-head RMS norms of q and k, NeoX
// RoPE, no biases) and in every layer experts instead of the dense FFN: a
// softmax router, the top expert_used_count experts, their weights divided
// by their sum. llama.cpp divides them whatever the checkpoint's
// norm_topk_prob said, and so does this (the GGUF has no key for it).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qk_norm = true;
    moe_hparams& m = hp.moe;
    if (m.n_expert == 0) throw gguf_error("model metadata: qwen3moe.expert_count is missing or 0");
    if (m.n_expert_used == 0) throw gguf_error("model metadata: qwen3moe.expert_used_count is missing or 0");
    m.n_ff_exp = arch_int(f, hp, "expert_feed_forward_length", 0);
    if (m.n_ff_exp == 0) m.n_ff_exp = hp.n_ff / m.n_expert_used;
    m.gating = moe_gating::softmax;
    m.act = ffn_act::silu;
    m.norm_w = true;
}

}  // namespace

extern const arch_def arch_qwen3moe = {"qwen3moe", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/"qwen"};

}  // namespace lp

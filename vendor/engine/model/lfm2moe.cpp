// lfm2moe.cpp — Liquid AI LFM2 with experts (LFM2-8B-A1B, LFM2-24B-A2B), as
// llama.cpp reads its GGUF: lfm2.cpp's hybrid of gated short-convolution and
// GQA attention layers (the same norms, RoPE and convolution; model.cpp
// read_short_conv), where the first leading_dense_block_count layers have a
// dense SwiGLU FFN and the others experts (blocks.cpp moe_ffn_block): a
// sigmoid router with a selection bias (exp_probs_b), the top
// expert_used_count, their weights divided by their sum, no shared expert.
// As llama.cpp, no weight scale (expert_weights_scale is not read: LFM2's
// routed_scaling_factor is 1).
// Not here: the ColBERT / embedding variants and the audio / vision towers.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qk_norm = true;
    hp.v.output_norm_tensor = "token_embd_norm";
    read_short_conv(f, hp);
    moe_hparams& m = hp.moe;
    if (m.n_expert == 0) throw gguf_error("model metadata: lfm2moe.expert_count is missing or 0");
    if (m.n_expert_used == 0) throw gguf_error("model metadata: lfm2moe.expert_used_count is missing or 0");
    m.n_ff_exp = arch_int(f, hp, "expert_feed_forward_length", 0);
    if (m.n_ff_exp == 0) throw gguf_error("model metadata: lfm2moe.expert_feed_forward_length is missing or 0");
    m.n_layer_dense_lead = arch_int(f, hp, "leading_dense_block_count", 0);
    m.gating = gating_of(f, hp, moe_gating::sigmoid);
    m.act = ffn_act::silu;
    m.norm_w = true;
    m.probs_bias_required = true;  // llama.cpp refuses a file without it; routing without it would be wrong
}

}  // namespace

extern const arch_def arch_lfm2moe = {"lfm2moe", setup, /*swa_period=*/0, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

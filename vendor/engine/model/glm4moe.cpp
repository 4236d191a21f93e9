// glm4moe.cpp — GLM-4.5 / GLM-4.6 (and the models llama.cpp maps to this
// architecture): attention with biases on q, k, v, optional per-head q/k
// RMS norms, partial NeoX RoPE (rope.dimension_count of the head), M-RoPE
// when the file gives sections; the FFN input norm is stored as
// post_attention_norm; the first leading_dense_block_count layers have a
// dense FFN, the others experts: a router (sigmoid unless
// expert_gating_func says softmax) with a selection bias (exp_probs_b), the
// top expert_used_count, weights divided by their sum when
// expert_weights_norm, times expert_weights_scale, plus expert_shared_count
// shared experts (one dense FFN of that many experts' width). The
// next-token-prediction layer the block count includes is skipped
// (model.cpp: nextn_predict_layers).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    read_rope_sections(f, hp);
    hp.v.act = ffn_act::silu;
    hp.v.ffn_norm_tensor = "post_attention_norm";
    hp.v.qk_norm_optional = true;
    moe_hparams& m = hp.moe;
    if (m.n_expert == 0) throw gguf_error("model metadata: glm4moe.expert_count is missing or 0");
    if (m.n_expert_used == 0) throw gguf_error("model metadata: glm4moe.expert_used_count is missing or 0");
    m.n_ff_exp = arch_int(f, hp, "expert_feed_forward_length", 0);
    if (m.n_ff_exp == 0) m.n_ff_exp = hp.n_ff / m.n_expert_used;
    m.n_layer_dense_lead = arch_int(f, hp, "leading_dense_block_count", 0);
    m.n_ff_shexp = m.n_ff_exp * arch_int(f, hp, "expert_shared_count", 0);
    m.norm_w = f.get_bool(hp.arch + ".expert_weights_norm", false);
    m.w_scale = (float)arch_float(f, hp, "expert_weights_scale", 0.0);
    m.gating = gating_of(f, hp, moe_gating::sigmoid);
    m.act = ffn_act::silu;
}

}  // namespace

extern const arch_def arch_glm4moe = {"glm4moe", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

// gpt_oss.cpp — OpenAI gpt-oss (20b, 120b): a mixture of experts with
// attention sinks. Per layer: RMS norm, attention with biases on q, k, v and
// the output, NeoX RoPE with YaRN, q·k scaled by 1/sqrt(n_rot), a learned
// sink logit per head in the softmax, a sliding window on every other layer
// (0, 2, 4, ...); then RMS norm (stored as post_attention_norm) and the
// experts: a router with a bias, the top expert_used_count experts weighted
// by a softmax over their logits alone (not renormalised), experts with
// biases on gate, up and down and the clamped SwiGLU
// g·sigmoid(1.702 g)·(u + 1), g = min(gate, 7), u = clamp(up, ±7).
// Its weights ship as MXFP4 (quants/mxfp4*.cpp).
#include <cmath>

#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.attn_sinks = true;
    hp.v.ffn_norm_tensor = "post_attention_norm";
    hp.attn_scale = 1.0f / std::sqrt((float)hp.rope.n_rot);
    hp.rope_freq_base_swa = (float)arch_float(f, hp, "rope.freq_base_swa", hp.rope.freq_base);
    moe_hparams& m = hp.moe;
    if (m.n_expert == 0) throw gguf_error("model metadata: gpt-oss.expert_count is missing or 0");
    m.n_ff_exp = arch_int(f, hp, "expert_feed_forward_length", 0);
    if (m.n_ff_exp == 0) throw gguf_error("model metadata lacks gpt-oss.expert_feed_forward_length");
    m.gating = moe_gating::softmax_weight;
    m.norm_w = false;
    m.act = ffn_act::swiglu_oai;
}

}  // namespace

extern const arch_def arch_gpt_oss = {"gpt-oss", setup, /*swa_period=*/2, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

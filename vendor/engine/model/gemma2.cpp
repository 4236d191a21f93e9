// gemma2.cpp — Google Gemma 2. Like Gemma 3 without the q/k norms and with
// soft-capping: attention scores are capped by tanh(s / 50) * 50 and logits
// by tanh(l / 30) * 30 (the file's values). Every other layer (starting with
// the first) attends to a sliding window; all layers share one RoPE base.
#include <cmath>

#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::gelu;
    hp.v.post_attn_norm = true;
    hp.v.post_ffn_norm = true;
    hp.v.scale_q = true;
    hp.v.embd_scale = std::sqrt((float)hp.n_embd);
    if (!arch_has(f, hp, "attn_logit_softcapping")) hp.attn_softcap = 50.0f;
    if (!arch_has(f, hp, "final_logit_softcapping")) hp.final_softcap = 30.0f;
    // Gemma 2 27B (46 layers) scales queries by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim).
    if (hp.n_layer == 46) hp.attn_scale = 1.0f / std::sqrt((float)(hp.n_embd / hp.n_head));
    else hp.attn_scale = 1.0f / std::sqrt((float)hp.head_dim_k);
}

}  // namespace

extern const arch_def arch_gemma2 = {"gemma2", setup, /*swa_period=*/2, /*encoder=*/false, /*chat_format=*/"gemma"};

}  // namespace lp

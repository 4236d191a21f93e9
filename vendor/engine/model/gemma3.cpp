// gemma3.cpp — Google Gemma 3 (the text decoder; images enter as embedding rows).
// Differences from the plain transformer: per-head RMS norm of q and k,
// RMS norms after attention and after the FFN, a GELU-gated FFN, token
// embeddings scaled by sqrt(n_embd), q scaled before attention, and
// interleaved attention: in every 6 layers the first 5 attend to a sliding
// window and use RoPE base 10000 without scaling, the 6th attends to the
// whole context with the file's RoPE base and scaling. (The GGUF converter
// already added 1 to Gemma's norm weights, so they multiply directly.)
#include <cmath>

#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::gelu;
    hp.v.qk_norm = true;
    hp.v.post_attn_norm = true;
    hp.v.post_ffn_norm = true;
    hp.v.scale_q = true;
    hp.v.embd_scale = std::sqrt((float)hp.n_embd);
    hp.mm_non_causal = true;  // mtmd: PROJECTOR_TYPE_GEMMA3 decodes images non-causally
    hp.rope_freq_base_swa = (float)arch_float(f, hp, "rope.freq_base_swa", 10000.0);
    hp.rope_freq_scale_swa = 1.0f;
    // Gemma 3 27B (62 layers) scales queries by 1/sqrt(n_embd / n_head)
    // (its query_pre_attn_scalar), the others by 1/sqrt(head_dim).
    if (arch_has(f, hp, "attention.scale")) hp.attn_scale = (float)arch_float(f, hp, "attention.scale", 0.0);
    else if (hp.n_layer == 62) hp.attn_scale = 1.0f / std::sqrt((float)(hp.n_embd / hp.n_head));
    else hp.attn_scale = 1.0f / std::sqrt((float)hp.head_dim_k);
}

}  // namespace

extern const arch_def arch_gemma3 = {"gemma3", setup, /*swa_period=*/6, /*encoder=*/false, /*chat_format=*/"gemma"};

}  // namespace lp

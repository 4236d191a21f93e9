// lfm2.cpp — Liquid AI LFM2 (LFM2-350M .. 2.6B, LFM2.5), as llama.cpp reads its
// GGUF: a hybrid of gated short-convolution layers (model.h ssm_kind::short_conv,
// blocks.h short_conv_block) and GQA attention layers, every layer with a
// pre-norm SwiGLU FFN. A layer is a convolution layer where the per-layer
// attention.head_count_kv array holds 0 (the converter's encoding of
// layer_types). Attention: per-head q / k RMS norms, NeoX RoPE, no biases,
// scores scaled by 1/sqrt(head size). The final norm is stored as
// token_embd_norm. With attention.sliding_window > 0 (LFM2.5) every attention
// layer uses the window, as in llama.cpp.
// Not here: lfm2moe (experts after dense lead layers), the ColBERT / embedding
// variants (dense_2_out projection), the audio and vision towers.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qk_norm = true;
    hp.v.output_norm_tensor = "token_embd_norm";
    if (hp.moe.n_expert > 0)
        throw not_implemented_error("lfm2 with experts (expert_count " + std::to_string(hp.moe.n_expert) +
                                    ") is not supported; LFM2's MoE models are architecture lfm2moe");

    ssm_hparams& s = hp.ssm;
    s.kind = ssm_kind::short_conv;
    if (!arch_has(f, hp, "shortconv.l_cache")) throw gguf_error("model metadata lacks lfm2.shortconv.l_cache");
    s.d_conv = arch_int(f, hp, "shortconv.l_cache", 0);
    if (s.d_conv < 2 || s.d_conv > 64) throw gguf_error("model metadata: lfm2.shortconv.l_cache is out of range (2..64)");
    s.n_conv_ch = hp.n_embd;

    // Convolution layers: head_count_kv 0. The attention layers must agree on
    // their KV heads (then the model-wide value holds it and no per-layer
    // shapes remain).
    hp.recurrent.assign((size_t)hp.n_layer, 0);
    if (!hp.shapes.empty()) {
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const layer_shape& ls = hp.shapes[(size_t)il];
            if (ls.n_ff != hp.n_ff)
                throw not_implemented_error("lfm2 with per-layer feed_forward_length is not supported");
            if (ls.n_head_kv == 0) hp.recurrent[(size_t)il] = 1;
            else if (ls.n_head_kv != hp.n_head_kv)
                throw not_implemented_error("lfm2 with attention layers of different head_count_kv (" +
                                            std::to_string(ls.n_head_kv) + ", " + std::to_string(hp.n_head_kv) +
                                            ") is not supported");
        }
        hp.shapes.clear();
    }
    if (hp.n_recurrent() == hp.n_layer)
        throw gguf_error("model metadata: lfm2.attention.head_count_kv is 0 for every layer (no attention layer)");
    // The window applies to the attention layers only (the flags on the
    // convolution layers would be unused; cleared so that no window cache is
    // sized for them).
    for (int64_t il = 0; il < hp.n_layer; ++il)
        if (hp.recurrent[(size_t)il]) hp.swa_layers[(size_t)il] = 0;
}

}  // namespace

extern const arch_def arch_lfm2 = {"lfm2", setup, /*swa_period=*/0, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

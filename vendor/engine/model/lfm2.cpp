// lfm2.cpp — Liquid AI LFM2 (LFM2-350M .. 2.6B, LFM2.5), as llama.cpp reads its
// GGUF: a hybrid of gated short-convolution layers (model.h ssm_kind::short_conv,
// blocks.h short_conv_block) and GQA attention layers, every layer with a
// pre-norm SwiGLU FFN. A layer is a convolution layer where the per-layer
// attention.head_count_kv array holds 0 (the converter's encoding of
// layer_types). Attention: per-head q / k RMS norms, NeoX RoPE, no biases,
// scores scaled by 1/sqrt(head size). The final norm is stored as
// token_embd_norm. With attention.sliding_window > 0 (LFM2.5) every attention
// layer uses the window, as in llama.cpp.
// Not here: lfm2moe (lfm2moe.cpp: experts after dense lead layers), the ColBERT / embedding
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
    read_short_conv(f, hp);
}

}  // namespace

extern const arch_def arch_lfm2 = {"lfm2", setup, /*swa_period=*/0, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

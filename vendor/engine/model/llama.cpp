// llama.cpp — Llama 2, 3, 3.1, 3.2 and Mistral-style models: the plain
// pre-norm transformer (RMS norms, SwiGLU FFN, grouped-query attention,
// RoPE on adjacent pairs since the converter permutes the q/k weights).
// Llama 3.1's frequency scaling comes as the rope_freqs.weight tensor,
// which the loader picks up for any architecture.
// Files with experts (Mixtral: expert_count > 0) have them in every layer in
// place of the dense FFN: a softmax router, the top expert_used_count
// experts of width feed_forward_length, their weights divided by their sum;
// ffn_gate_exps may be absent (then silu(up)), as llama.cpp's loader allows.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::normal;
    hp.v.act = ffn_act::silu;
    moe_hparams& m = hp.moe;
    if (m.n_expert > 0) {
        m.n_ff_exp = hp.n_ff;
        m.gating = moe_gating::softmax;
        m.act = ffn_act::silu;
        m.norm_w = true;
        m.gate_optional = true;
    }
}

}  // namespace

extern const arch_def arch_llama = {"llama", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

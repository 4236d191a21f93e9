// llama.cpp — Llama 2, 3, 3.1, 3.2 and Mistral-style models: the plain
// pre-norm transformer (RMS norms, SwiGLU FFN, grouped-query attention,
// RoPE on adjacent pairs since the converter permutes the q/k weights).
// Llama 3.1's frequency scaling comes as the rope_freqs.weight tensor,
// which the loader picks up for any architecture.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::normal;
    hp.v.act = ffn_act::silu;
}

}  // namespace

extern const arch_def arch_llama = {"llama", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

// qwen2.cpp — Qwen 2 and 2.5: the Llama block with biases on the q, k and v
// projections and RoPE on split halves (NeoX style).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qkv_bias = true;
    hp.n_swa = 0;  // Qwen 2 declares no window that llama.cpp honours
    set_swa_pattern(f, hp, 0);
}

}  // namespace

extern const arch_def arch_qwen2 = {"qwen2", setup};

}  // namespace lp

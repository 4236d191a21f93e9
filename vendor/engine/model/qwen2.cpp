// qwen2.cpp — Qwen 2 and 2.5: the Llama block with biases on the q, k and v
// projections and RoPE on split halves (NeoX style).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qkv_bias = true;
}

}  // namespace

extern const arch_def arch_qwen2 = {"qwen2", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/"qwen"};

}  // namespace lp

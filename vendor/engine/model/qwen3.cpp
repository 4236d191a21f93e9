// qwen3.cpp — Qwen 3 (dense): the Llama block with per-head RMS norms of q
// and k before RoPE, RoPE on split halves (NeoX style), no biases.
// Qwen3-Reranker files add cls.output: the LM head's "yes" and "no" rows,
// whose two scores the rank pooling turns into probabilities.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qk_norm = true;
    hp.cls_softmax = true;  // as llama.cpp scores qwen3 rerankers: P(yes), P(no)
}

}  // namespace

extern const arch_def arch_qwen3 = {"qwen3", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/"qwen"};

}  // namespace lp

// nomic_bert.cpp — nomic-embed-text (v1, v1.5): a BERT-style post-norm
// encoder without position embeddings; instead RoPE (NeoX halves) on q and k,
// one fused qkv matrix, and a SwiGLU FFN (silu(gate) * up), no biases.
// encoder.cpp runs it.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.v.norm = norm_kind::layer;
    hp.v.act = ffn_act::silu;
    hp.v.qkv_fused = true;
    hp.rope.style = rope_style::neox;
    if (!arch_has(f, hp, "attention.causal")) hp.causal = false;
}

}  // namespace

extern const arch_def arch_nomic_bert = {"nomic-bert", setup, /*swa_period=*/-1, /*encoder=*/true, /*chat_format=*/""};

}  // namespace lp

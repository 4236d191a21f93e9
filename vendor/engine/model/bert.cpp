// bert.cpp — BERT-family sentence encoders (all-MiniLM, bge, e5, ...):
// token + learned position + token-type embeddings summed and layer-normed,
// then post-norm blocks (attention -> add -> LayerNorm, GELU FFN -> add ->
// LayerNorm) with biases everywhere, bidirectional attention within each
// sequence, no RoPE and no output head. encoder.cpp runs it; the pooling of
// the token states into one vector per sequence is the context's.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.v.norm = norm_kind::layer;
    hp.v.act = ffn_act::gelu;
    hp.rope.n_rot = 0;  // positions come from position_embd
    if (!arch_has(f, hp, "attention.causal")) hp.causal = false;
}

}  // namespace

extern const arch_def arch_bert = {"bert", setup, /*swa_period=*/-1, /*encoder=*/true, /*chat_format=*/""};

}  // namespace lp

// smollm3.cpp — Hugging Face SmolLM3: the Llama block (RMS norms, SwiGLU FFN,
// grouped-query attention, RoPE on adjacent pairs since the converter
// permutes the q/k weights) in which every fourth layer (3, 7, 11, ...) has
// no RoPE: its q and k enter attention unrotated ("NoPE"). The GGUF has no
// key saying which layers: llama.cpp fixes the period at 4 (the checkpoints'
// no_rope_layer_interval), and so does this. A sliding window the file may
// declare is ignored, as llama.cpp does.
#include "model.h"

namespace lp {

namespace {

constexpr int64_t kNoRopePeriod = 4;

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::normal;
    hp.v.act = ffn_act::silu;
    hp.nope_layers.assign((size_t)hp.n_layer, 0);
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.nope_layers[(size_t)il] = (il + 1) % kNoRopePeriod == 0;
}

}  // namespace

extern const arch_def arch_smollm3 = {"smollm3", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

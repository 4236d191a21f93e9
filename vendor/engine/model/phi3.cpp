// phi3.cpp — Microsoft Phi-3 / Phi-3.5 / Phi-4 (dense): one fused q|k|v
// projection (attn_qkv, or three separate matrices in some files), one fused
// gate|up FFN matrix (ffn_up holds the gate rows first), SwiGLU, RoPE on
// split halves, q scaled by 1/sqrt(head_dim) before attention. The sliding
// window some files declare is ignored, as llama.cpp does.
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qkv_fused = f.find_tensor("blk.0.attn_qkv.weight") != nullptr;
    hp.v.gate_up_fused = true;
    hp.v.scale_q = true;
}

}  // namespace

extern const arch_def arch_phi3 = {"phi3", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/"phi-3"};

}  // namespace lp

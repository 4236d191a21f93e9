// qwen35.cpp — Qwen3.5 dense (Qwen3.5 0.8B .. 27B; Qwen3.6): a hybrid. Three
// of every four layers are gated delta-net linear attention (model.h
// ssm_hparams, blocks.h delta_net_block) with a per-sequence recurrent state
// (recurrent_state.h); every fourth is gated full attention: the q projection
// also gives a per-head output gate (sigmoid), per-head q/k RMS norms,
// partial NeoX RoPE (rope.dimension_count of the head), no biases. The FFN
// input norm is stored as post_attention_norm. The next-token-prediction
// block the block count includes is loaded by llama.cpp for speculative
// decoding only and skipped here (model.cpp: nextn_predict_layers).
// RoPE: the files give rope.dimension_sections for interleaved multi-axis
// RoPE; text rows have all axes at the same position, where it is NeoX RoPE
// bit for bit, and Qwen3.5's image input is not supported here, so the
// sections are not read (an image's rows would need the interleaved variant).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::silu;
    hp.v.qk_norm = true;
    hp.v.attn_gate = true;
    hp.v.ffn_norm_tensor = "post_attention_norm";
    read_delta_net(f, hp);
}

}  // namespace

extern const arch_def arch_qwen35 = {"qwen35", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

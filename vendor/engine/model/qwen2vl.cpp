// qwen2vl.cpp — the language half of Qwen2-VL and Qwen2.5-VL (both convert to
// this architecture): the Qwen 2 block with M-RoPE. Each row carries four
// positions (temporal, height, width, extra); rope.dimension_sections says
// how many rotated pairs, in order, follow each one (ops.h, rope_params).
// Text rows have all four equal, which is plain NeoX RoPE; image rows get
// their grid coordinates from the caller (mtmd's layout: t = n_past,
// h = n_past + row, w = n_past + column, extra 0).
#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;  // ggml rotates M-RoPE pairs as NeoX halves
    hp.v.act = ffn_act::silu;
    hp.v.qkv_bias = true;

    if (!read_rope_sections(f, hp)) throw gguf_error("model metadata lacks the array " + hp.arch + ".rope.dimension_sections");
}

}  // namespace

extern const arch_def arch_qwen2vl = {"qwen2vl", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

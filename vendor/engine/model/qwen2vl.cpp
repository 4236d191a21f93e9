// qwen2vl.cpp — the language half of Qwen2-VL and Qwen2.5-VL (both convert to
// this architecture): the Qwen 2 block with M-RoPE. Each row carries four
// positions (temporal, height, width, extra); rope.dimension_sections says
// how many rotated pairs, in order, follow each one (ops.h, rope_params).
// Text rows have all four equal, which is plain NeoX RoPE; image rows get
// their grid coordinates from the caller (mtmd's layout: t = n_past,
// h = n_past + row, w = n_past + column, extra 0).
#include <cstring>

#include "model.h"

namespace lp {

namespace {

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;  // ggml rotates M-RoPE pairs as NeoX halves
    hp.v.act = ffn_act::silu;
    hp.v.qkv_bias = true;

    const std::string key = hp.arch + ".rope.dimension_sections";
    const gguf_kv* kv = f.find_kv(key);
    if (!kv || kv->type != gguf_type::ARRAY) throw gguf_error("model metadata lacks the array " + key);
    const gguf_array& a = kv->array;
    if (a.elem_type != gguf_type::I32 && a.elem_type != gguf_type::U32)
        throw gguf_error(key + " must hold 32-bit integers");
    if (a.count < 3 || a.count > 4) throw gguf_error(key + " must have 3 or 4 entries, has " + std::to_string(a.count));
    int sum = 0;
    for (uint64_t i = 0; i < a.count; ++i) {
        int32_t x = 0;
        std::memcpy(&x, f.bytes() + f.array_elem_pos(a, i), 4);
        if (x < 0 || x > 4096) throw gguf_error(key + " has an out-of-range entry " + std::to_string(x));
        hp.rope.sections[i] = x;
        sum += x;
    }
    if (sum == 0) throw gguf_error(key + " is all zero");
}

}  // namespace

extern const arch_def arch_qwen2vl = {"qwen2vl", setup, /*swa_period=*/-1, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

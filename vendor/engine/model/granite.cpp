// granite.cpp — IBM Granite 3 (dense), and the setup granitemoe.cpp shares:
// the Llama block (RoPE on adjacent pairs, SwiGLU, optional biases on q, k,
// v, the attention output and the FFN) with four multipliers from the file:
// token embeddings times embedding_scale (also embeddings given as input,
// as llama.cpp does when the model has no deepstack layers), q·k times
// attention.scale (default 1/sqrt(head_dim)), each sub-block's output times
// residual_scale before its residual add, and the logits divided by
// logit_scale (required). rope.scaling.finetuned = false switches RoPE off
// in every layer (llama.cpp's reading; Granite writes it only for models
// without positions). With experts (granitemoe, or granite files that have
// them) every layer's FFN is a softmax router over expert_count experts of
// width feed_forward_length, the top expert_used_count weighted by their
// renormalised probabilities, plus a shared expert of
// expert_shared_feed_forward_length when the file gives one.
#include <cstring>

#include "model.h"

namespace lp {

namespace {

// Whether the file maps any layer to a deepstack input (Granite 4 Vision's
// deepstack_mapping, -1 for none): llama.cpp then scales token inputs only.
bool has_deepstack(const gguf_file& f, const hparams& hp) {
    const gguf_kv* kv = f.find_kv(hp.arch + ".deepstack_mapping");
    if (!kv) return false;
    if (kv->type != gguf_type::ARRAY || (kv->array.elem_type != gguf_type::I32 && kv->array.elem_type != gguf_type::U32))
        throw gguf_error(hp.arch + ".deepstack_mapping must be an array of 32-bit integers");
    for (uint64_t i = 0; i < kv->array.count; ++i) {
        int32_t x = 0;
        std::memcpy(&x, f.bytes() + f.array_elem_pos(kv->array, i), 4);
        if (x >= 0) return true;
    }
    return false;
}

}  // namespace

void granite_setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::normal;
    hp.v.act = ffn_act::silu;
    if (!arch_has(f, hp, "logit_scale")) throw gguf_error("model metadata lacks " + hp.arch + ".logit_scale");
    hp.logit_scale = (float)arch_float(f, hp, "logit_scale", 0.0);
    if (hp.logit_scale == 0.0f) throw gguf_error("model metadata: " + hp.arch + ".logit_scale is 0");
    hp.residual_scale = (float)arch_float(f, hp, "residual_scale", 0.0);
    const float embd_scale = (float)arch_float(f, hp, "embedding_scale", 0.0);
    if (embd_scale != 0.0f) {
        hp.v.embd_scale = embd_scale;
        hp.v.embd_scale_inputs = !has_deepstack(f, hp);
    }
    hp.attn_scale = (float)arch_float(f, hp, "attention.scale", 0.0);  // 0: 1/sqrt(head_dim)
    if (!f.get_bool(hp.arch + ".rope.scaling.finetuned", true)) hp.nope_layers.assign((size_t)hp.n_layer, 1);
    moe_hparams& m = hp.moe;
    if (m.n_expert > 0) {
        m.n_ff_exp = hp.n_ff;
        m.n_ff_shexp = arch_int(f, hp, "expert_shared_feed_forward_length", 0);
        m.gating = moe_gating::softmax;
        m.norm_w = true;
        m.act = ffn_act::silu;
        m.gate_optional = true;  // as llama.cpp's loader allows
    }
}

extern const arch_def arch_granite = {"granite", granite_setup, /*swa_period=*/-1, /*encoder=*/false,
                                      /*chat_format=*/""};

}  // namespace lp

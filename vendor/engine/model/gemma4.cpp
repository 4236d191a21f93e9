// gemma4.cpp — Google Gemma 4 (the text decoder), as llama.cpp reads its GGUF.
// Gemma 3's block (per-head q/k RMS norms, post-norms, GELU-gated FFN,
// embeddings scaled by sqrt(n_embd)) with:
// - sliding-window and global layers of different shapes: the file's
//   key_length / value_length / rope.dimension_count are the global layers',
//   the *_swa keys the sliding ones'; head_count_kv and feed_forward_length
//   may be per-layer arrays (hparams::shapes);
// - RoPE base rope.freq_base_swa on the sliding layers; on the global ones the
//   file's base with rope_freqs ("proportional" RoPE: divisors of 1e30 leave
//   the unrotated dims in place), which the sliding layers do not use;
// - values RMS-normed per head without a weight; layers without attn_v take
//   the keys' projection as values (attention_k_eq_v); scores scaled by 1;
// - the last attention.shared_kv_layers layers store no keys or values and
//   attend over the cache of the last earlier layer of their kind (llama.cpp:
//   n_kv - 2 for sliding, n_kv - 1 for global layers, n_kv the layers with a
//   cache of their own) — E2B / E4B;
// - per-layer embeddings (embedding_length_per_layer_input > 0, E2B / E4B):
//   decoder.cpp's per_layer_inputs / per_layer_embedding blocks;
// - a per-layer output scalar (layer_output_scale), the logits soft-capped.
// - 26B-A4B (expert_count > 0): a mixture of experts beside the dense FFN in
//   every layer with a router, each branch with its own norms (model.h
//   block_variant::moe_beside_dense).
// Not here: the vision and audio towers.
#include <cmath>

#include "model.h"

namespace lp {

namespace {

int64_t required(const gguf_file& f, const hparams& hp, const char* key) {
    if (!arch_has(f, hp, key)) throw gguf_error("model metadata lacks " + hp.arch + "." + key);
    return arch_int(f, hp, key, 0);
}

void setup(const gguf_file& f, hparams& hp) {
    hp.rope.style = rope_style::neox;
    hp.v.act = ffn_act::gelu;
    hp.v.qk_norm = true;
    hp.v.post_attn_norm = true;
    hp.v.post_ffn_norm = true;
    hp.v.v_norm = true;
    hp.v.v_from_k = true;
    hp.v.layer_shapes = true;
    hp.v.embd_scale = std::sqrt((float)hp.n_embd);
    hp.attn_scale = 1.0f;    // q and k are normed; Gemma 4 does not scale the scores
    hp.attn_softcap = 0.0f;  // llama.cpp's graph soft-caps the logits only
    hp.rope_freq_base_swa = (float)arch_float(f, hp, "rope.freq_base_swa", 10000.0);
    hp.rope_freq_scale_swa = 1.0f;
    hp.rope_freqs_global = true;

    if (!arch_has(f, hp, "attention.sliding_window_pattern"))
        throw gguf_error("model metadata lacks " + hp.arch + ".attention.sliding_window_pattern");
    required(f, hp, "attention.sliding_window");
    hp.n_embd_per_layer = required(f, hp, "embedding_length_per_layer_input");
    if (hp.n_embd_per_layer < 0 || hp.n_embd_per_layer > (1 << 16))
        throw gguf_error("model metadata: embedding_length_per_layer_input is out of range");
    const int64_t dk_swa = required(f, hp, "attention.key_length_swa");
    const int64_t dv_swa = required(f, hp, "attention.value_length_swa");
    const int64_t dk_full = hp.head_dim_k, dv_full = hp.head_dim_v;
    if (dk_full != dv_full || dk_swa != dv_swa)
        throw gguf_error("model metadata: Gemma 4 needs key_length == value_length (" + std::to_string(dk_full) + ", " +
                         std::to_string(dv_full) + ") and key_length_swa == value_length_swa (" +
                         std::to_string(dk_swa) + ", " + std::to_string(dv_swa) + ")");
    const int n_rot_full = hp.rope.n_rot;
    const int n_rot_swa = (int)arch_int(f, hp, "rope.dimension_count_swa", n_rot_full);
    hp.rope_n_rot_swa = n_rot_swa;

    // Every layer's shape; the model-wide values become the widest.
    if (hp.shapes.empty()) hp.shapes.assign((size_t)hp.n_layer, layer_shape{hp.n_head_kv, 0, 0, hp.n_ff, 0});
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        layer_shape& s = hp.shapes[(size_t)il];
        const bool swa = hp.swa_layers[(size_t)il];
        s.head_dim_k = swa ? dk_swa : dk_full;
        s.head_dim_v = swa ? dv_swa : dv_full;
        s.n_rot = swa ? n_rot_swa : n_rot_full;
    }
    hp.head_dim_k = std::max(dk_full, dk_swa);
    hp.head_dim_v = std::max(dv_full, dv_swa);

    // Shared KV: the last n_shared layers reuse a cache (llama.cpp's rule).
    const int64_t n_shared = arch_int(f, hp, "attention.shared_kv_layers", 0);
    if (n_shared < 0 || n_shared > hp.n_layer - 2)
        throw gguf_error("model metadata: attention.shared_kv_layers " + std::to_string(n_shared) +
                         " leaves fewer than 2 layers with a KV cache of their own");
    if (n_shared > 0) {
        const int64_t n_kv = hp.n_layer - n_shared;
        hp.kv_layer.resize((size_t)hp.n_layer);
        for (int64_t il = 0; il < hp.n_layer; ++il)
            hp.kv_layer[(size_t)il] = (int32_t)(il < n_kv ? il : n_kv - (hp.swa_layers[(size_t)il] ? 2 : 1));
    }

    // 26B-A4B: experts beside the dense FFN in the layers that have a router
    // (blocks.h dense_and_moe_ffn_block): softmax over the router's logits,
    // the top expert_used_count, their weights divided by their sum, GELU
    // experts (gate and up usually one tensor).
    moe_hparams& m = hp.moe;
    if (m.n_expert > 0) {
        if (m.n_expert_used == 0) throw gguf_error("model metadata: gemma4.expert_used_count is missing or 0");
        m.n_ff_exp = required(f, hp, "expert_feed_forward_length");
        m.gating = moe_gating::softmax;
        m.norm_w = true;
        m.w_scale = 1.0f;
        m.act = ffn_act::gelu;
        hp.v.moe_beside_dense = true;
    }
}

}  // namespace

extern const arch_def arch_gemma4 = {"gemma4", setup, /*swa_period=*/6, /*encoder=*/false, /*chat_format=*/""};

}  // namespace lp

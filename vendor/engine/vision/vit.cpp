// vit.cpp — see vit.h.
#include "vit.h"

#include <cstring>

#include "../common.h"

namespace lp {

vit_state::vit_state(const clip_model& m, run_state& rs_) : rs(rs_) {
    const clip_hparams& hp = m.hp();
    const int64_t n = m.n_pos(), E = hp.n_embd;
    patches.resize((size_t)(hp.n_patches() * 3 * hp.patch_size * hp.patch_size));
    k16.resize((size_t)(n * E));
    v16.resize((size_t)(n * E));
    cells.resize((size_t)n);
    for (int64_t i = 0; i < n; ++i) cells[(size_t)i] = (int32_t)i;
    // Every row sees every row: one full mask, built once.
    for (int64_t t = 0; t < n; ++t) {
        uint64_t* row = rs.mask[0].data() + t * rs.mask_words;
        std::memset(row, 0, sizeof(uint64_t) * (size_t)rs.mask_words);
        for (int64_t j = 0; j < n; ++j) row[j >> 6] |= (uint64_t)1 << (j & 63);
        rs.mask_lo[0][(size_t)t] = 0;
        rs.mask_hi[0][(size_t)t] = (int32_t)n;
    }
}

namespace {

// patches row (py * n_side + px) = the P x P pixels of that patch for each
// channel, in the conv kernel's (channel, y, x) order.
void im2col(const float* pixels, int64_t side_px, int64_t P, float* out) {
    const int64_t n_side = side_px / P, K = 3 * P * P;
    for (int64_t py = 0; py < n_side; ++py)
        for (int64_t px = 0; px < n_side; ++px) {
            float* row = out + (py * n_side + px) * K;
            for (int64_t c = 0; c < 3; ++c)
                for (int64_t y = 0; y < P; ++y)
                    std::memcpy(row + (c * P + y) * P, pixels + (c * side_px + py * P + y) * side_px + px * P,
                                sizeof(float) * (size_t)P);
        }
}

}  // namespace

void vit_forward(pass& p, const clip_model& m, vit_state& st, const float* pixels) {
    const clip_hparams& hp = m.hp();
    const hparams& bh = hp.blocks;
    const clip_weights& W = m.weights();
    run_state& rs = st.rs;
    const int64_t E = hp.n_embd, n = m.n_pos(), n_patch = hp.n_patches();
    const int64_t K = 3 * hp.patch_size * hp.patch_size;
    const rows x{rs.x.f32(), E};          // (n, E) residual stream
    const rows xb{rs.xb.f32(), E};        // (n, E) normalised input of a sub-block
    const rows xb2{rs.xb2.f32(), E};      // (n, E) sub-block output
    const int64_t nqkv = 3 * E;
    const rows qkv{rs.qkv.f32(), nqkv};   // (n, 3E) q | k | v
    const rows att{rs.att.f32(), E};      // (n, E)
    const rows ffn{rs.ffn.f32(), 2 * hp.n_ff};

    // ---- embeddings: conv as matmul, bias, class token, positions ----
    im2col(pixels, hp.image_size, hp.patch_size, st.patches.data());
    p.set_n(n_patch);
    p.matmul(W.patch_embd, rows{st.patches.data(), K}, x);
    p.add_bias(x, W.patch_bias);
    if (!W.class_embd.empty()) {  // one row, after the patches
        p.set_n(1);
        p.copy(rows{x.p + n_patch * E, E}, rows{const_cast<float*>(W.class_embd.data()), 0}, E);
    }
    p.set_n(n);
    p.add(x, rows{const_cast<float*>(W.pos_embd.data()), E}, E);
    p.tap("inp_pos", -1, x, E);
    if (!W.pre_ln.empty()) {
        p.norm(norm_kind::layer, x, x, W.pre_ln, W.pre_ln_b, E, hp.eps);
        p.tap("pre_ln", -1, x, E);
    }

    // Keys and values go to F16 rows, as llama.cpp's vision attention casts them.
    kv_source kv;
    kv.type_k = kv.type_v = ggml_type::F16;
    kv.k = reinterpret_cast<const uint8_t*>(st.k16.data());
    kv.v = reinterpret_cast<const uint8_t*>(st.v16.data());
    kv.k_row_bytes = kv.v_row_bytes = sizeof(uint16_t) * (size_t)E;
    const attention_args aa = attention_setup(bh, rs, 0, qkv, att, n, kv);
    uint8_t* k16 = reinterpret_cast<uint8_t*>(st.k16.data());
    uint8_t* v16 = reinterpret_cast<uint8_t*>(st.v16.data());

    for (int il = 0; il < (int)hp.n_layer_run; ++il) {
        const layer_weights& L = W.layers[(size_t)il];
        // ---- x += wo · attn(LN(x)) ----
        p.norm(norm_kind::layer, xb, x, L.attn_norm, L.attn_norm_b, E, hp.eps);
        qkv_block(p, bh, L, il, xb, qkv, nullptr);
        p.kv_store(k16, kv.k_row_bytes, ggml_type::F16, qkv.at(E), E, st.cells.data());
        p.kv_store(v16, kv.v_row_bytes, ggml_type::F16, qkv.at(2 * E), E, st.cells.data());
        p.attention(aa);
        p.tap("kqv_out", il, att, E);
        attn_output(p, bh, L, il, att, xb2);
        p.add(x, xb2, E);
        p.tap("ffn_inp", il, x, E);
        // ---- x += FFN(LN(x)) ----
        p.norm(norm_kind::layer, xb, x, L.ffn_norm, L.ffn_norm_b, E, hp.eps);
        ffn_block(p, bh, L, il, xb, ffn, xb2);
        p.add(x, xb2, E);
        p.tap("layer_out", il, x, E);
    }
    if (!W.post_ln.empty()) {
        p.norm(norm_kind::layer, x, x, W.post_ln, W.post_ln_b, E, hp.eps);
        p.tap("post_ln", -1, x, E);
    }
    p.flush();
}

}  // namespace lp

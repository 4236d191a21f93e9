// vit.cpp — see vit.h.
#include "vit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"

namespace lp {

namespace {

// Qwen2-VL's rotary table (ggml's vision M-RoPE): head_dim/2 pairs, pair i
// rotating dims i and i + head_dim/2; the first quarter of the pairs by the
// patch row, the second by its column, each quarter restarting the
// frequency ladder base^(-2k / (head_dim/2)) as ggml's running product does.
void rope_2d_row(int64_t head_dim, int32_t row, int32_t col, float* cs) {
    const int64_t n_pairs = head_dim / 2, quarter = head_dim / 4;
    const float theta_scale = std::pow(10000.0f, -2.0f / (float)n_pairs);
    float theta_r = (float)row, theta_c = (float)col;
    for (int64_t i = 0; i < n_pairs; ++i) {
        if (i == quarter) theta_c = (float)col;
        const float theta = i < quarter ? theta_r : theta_c;
        cs[2 * i] = std::cos(theta);
        cs[2 * i + 1] = std::sin(theta);
        theta_r *= theta_scale;
        theta_c *= theta_scale;
    }
}

// The patch (py, px) of token t: raster order, or 2 x 2 merge order (blocks
// in window order when inv is not empty).
void patch_of(const clip_hparams& hp, patch_grid g, const std::vector<int32_t>& inv, int64_t t, int64_t& py,
              int64_t& px) {
    if (!hp.merge_order) {
        py = t / g.nx;
        px = t % g.nx;
        return;
    }
    const int64_t block = inv.empty() ? t / 4 : inv[(size_t)(t / 4)], within = t % 4, bx = g.nx / 2;
    py = (block / bx) * 2 + within / 2;
    px = (block % bx) * 2 + within % 2;
}

// patches row t = the P x P pixels of token t's patch for each channel, in
// the conv kernel's (channel, y, x) order.
void im2col(const clip_hparams& hp, patch_grid g, const std::vector<int32_t>& inv, const float* pixels, float* out) {
    const int64_t P = hp.patch_size, K = 3 * P * P, W = g.nx * P, H = g.ny * P;
    for (int64_t t = 0; t < g.n(); ++t) {
        int64_t py, px;
        patch_of(hp, g, inv, t, py, px);
        float* row = out + t * K;
        for (int64_t c = 0; c < 3; ++c)
            for (int64_t y = 0; y < P; ++y)
                std::memcpy(row + (c * P + y) * P, pixels + (c * H + py * P + y) * W + px * P, sizeof(float) * (size_t)P);
    }
}

}  // namespace

window_layout window_order(const clip_hparams& hp, patch_grid g) {
    window_layout w;
    if (hp.window_px <= 0 || !hp.merge_order) return w;
    const int64_t bw = g.nx / 2, bh = g.ny / 2, n = bw * bh;
    const int64_t side = std::max<int64_t>(1, hp.window_px / hp.patch_size / 2);
    w.idx.resize((size_t)n);
    w.inv.resize((size_t)n);
    w.lo.resize((size_t)n);
    w.hi.resize((size_t)n);
    int32_t dst = 0;
    for (int64_t y = 0; y < bh; y += side)
        for (int64_t x = 0; x < bw; x += side) {
            const int32_t first = dst;
            for (int64_t dy = 0; dy < std::min(side, bh - y); ++dy)
                for (int64_t dx = 0; dx < std::min(side, bw - x); ++dx) {
                    const int64_t src = (y + dy) * bw + (x + dx);
                    w.idx[(size_t)src] = dst;
                    w.inv[(size_t)dst] = (int32_t)src;
                    ++dst;
                }
            for (int32_t b = first; b < dst; ++b) {
                w.lo[(size_t)b] = first;
                w.hi[(size_t)b] = dst;
            }
        }
    return w;
}

vit_state::vit_state(const clip_model& m, patch_grid g, run_state& rs_) : grid(g), rs(rs_) {
    const clip_hparams& hp = m.hp();
    const int64_t n = m.n_pos(g), E = hp.n_embd;
    patches.resize((size_t)(g.n() * 3 * hp.patch_size * hp.patch_size));
    if (m.weights().patch_embd1.data) embd1.resize((size_t)(g.n() * E));
    windows = window_order(hp, g);
    if (hp.rope_2d) {
        rope_cs.resize((size_t)(n * hp.head_dim));
        for (int64_t t = 0; t < n; ++t) {
            int64_t py, px;
            patch_of(hp, g, windows.inv, t, py, px);
            rope_2d_row(hp.head_dim, (int32_t)py, (int32_t)px, rope_cs.data() + t * hp.head_dim);
        }
    }
    if (!hp.feature_layers.empty()) stacked = float_buffer(rs.x.where(), (size_t)(n * hp.n_embd_proj()));
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
    if (!windows.lo.empty()) {  // windowed layers: a row sees the rows of its window
        for (int64_t t = 0; t < n; ++t) {
            uint64_t* row = rs.mask[1].data() + t * rs.mask_words;
            std::memset(row, 0, sizeof(uint64_t) * (size_t)rs.mask_words);
            const int64_t lo = 4 * (int64_t)windows.lo[(size_t)(t / 4)], hi = 4 * (int64_t)windows.hi[(size_t)(t / 4)];
            for (int64_t j = lo; j < hi; ++j) row[j >> 6] |= (uint64_t)1 << (j & 63);
            rs.mask_lo[1][(size_t)t] = (int32_t)lo;
            rs.mask_hi[1][(size_t)t] = (int32_t)hi;
        }
    }
}

rows vit_forward(pass& p, const clip_model& m, vit_state& st, const float* pixels) {
    const clip_hparams& hp = m.hp();
    const hparams& bh = hp.blocks;
    const clip_weights& W = m.weights();
    run_state& rs = st.rs;
    const patch_grid g = st.grid;
    const int64_t E = hp.n_embd, n = m.n_pos(g), n_patch = g.n();
    const int64_t K = 3 * hp.patch_size * hp.patch_size;
    const rows x{rs.x.f32(), E};          // (n, E) residual stream
    const rows xb{rs.xb.f32(), E};        // (n, E) normalised input of a sub-block
    const rows xb2{rs.xb2.f32(), E};      // (n, E) sub-block output
    const rows qkv{rs.qkv.f32(), 3 * E};  // (n, 3E) q | k | v
    const rows att{rs.att.f32(), E};      // (n, E)
    const rows ffn{rs.ffn.f32(), 2 * hp.n_ff};

    // ---- embeddings: conv as matmul, bias, class token, positions ----
    im2col(hp, g, st.windows.inv, pixels, st.patches.data());
    const rows patches{st.patches.data(), K};
    p.set_n(n_patch);
    p.matmul(W.patch_embd, patches, x);
    if (W.patch_embd1.data) {  // a still image is both temporal frames: conv0(img) + conv1(img)
        p.matmul(W.patch_embd1, patches, rows{st.embd1.data(), E});
        p.add(x, rows{st.embd1.data(), E}, E);
    }
    p.add_bias(x, W.patch_bias);
    if (!W.class_embd.empty()) {  // one row, after the patches
        p.set_n(1);
        p.copy(rows{x.p + n_patch * E, E}, rows{const_cast<float*>(W.class_embd.data()), 0}, E);
    }
    p.set_n(n);
    if (!W.pos_embd.empty()) p.add(x, rows{const_cast<float*>(W.pos_embd.data()), E}, E);
    p.tap("inp_pos", -1, x, E);
    if (!W.pre_ln.empty()) {
        p.norm(bh.v.norm, x, x, W.pre_ln, W.pre_ln_b, E, hp.eps);
        p.tap("pre_ln", -1, x, E);
    }

    // Keys and values go to F16 rows, as llama.cpp's vision attention casts them.
    kv_source kv;
    kv.type_k = kv.type_v = ggml_type::F16;
    kv.k = reinterpret_cast<const uint8_t*>(st.k16.data());
    kv.v = reinterpret_cast<const uint8_t*>(st.v16.data());
    kv.k_row_bytes = kv.v_row_bytes = sizeof(uint16_t) * (size_t)E;
    const attention_args aa_full = attention_setup(bh, rs, 0, qkv, att, n, kv);
    const attention_args aa_window =
        st.windows.lo.empty() ? aa_full : attention_setup(bh, rs, 1, qkv, att, n, kv);
    const norm_kind nk = bh.v.norm;
    uint8_t* k16 = reinterpret_cast<uint8_t*>(st.k16.data());
    uint8_t* v16 = reinterpret_cast<uint8_t*>(st.v16.data());
    // Feature layer k is the residual stream entering block k (k = n_layer_run:
    // the tower's output, after the post-LN below); slot j of a stacked row
    // holds the j-th of the layers, ascending.
    const std::vector<int64_t>& layers = hp.feature_layers;
    const rows stacked{st.stacked.f32(), hp.n_embd_proj()};
    size_t slot = 0;
    auto keep_if_listed = [&](int64_t layer) {
        if (slot < layers.size() && layers[slot] == layer) p.copy(stacked.at((int64_t)slot++ * E), x, E);
    };
    rope_params rp;  // 2-D RoPE: the table holds every pair's angle, applied neox-style over the whole head
    rp.n_rot = (int)hp.head_dim;
    rp.style = rope_style::neox;

    for (int il = 0; il < (int)hp.n_layer_run; ++il) {
        const layer_weights& L = W.layers[(size_t)il];
        keep_if_listed(il);
        // ---- x += wo · attn(LN(x)) ----
        p.norm(nk, xb, x, L.attn_norm, L.attn_norm_b, E, hp.eps);
        qkv_block(p, bh, L, il, xb, qkv, nullptr);
        if (hp.rope_2d) {
            p.rope(qkv, hp.n_head, hp.head_dim, rp, st.rope_cs.data());
            p.rope(qkv.at(E), hp.n_head, hp.head_dim, rp, st.rope_cs.data());
        }
        p.kv_store(k16, kv.k_row_bytes, ggml_type::F16, qkv.at(E), E, st.cells.data());
        p.kv_store(v16, kv.v_row_bytes, ggml_type::F16, qkv.at(2 * E), E, st.cells.data());
        p.attention(hp.full_attention(il) ? aa_full : aa_window);
        p.tap("kqv_out", il, att, E);
        attn_output(p, bh, L, il, att, xb2);
        p.add(x, xb2, E);
        p.tap("ffn_inp", il, x, E);
        // ---- x += FFN(LN(x)) ----
        p.norm(nk, xb, x, L.ffn_norm, L.ffn_norm_b, E, hp.eps);
        ffn_block(p, bh, L, il, xb, ffn, xb2);
        p.add(x, xb2, E);
        p.tap("layer_out", il, x, E);
    }
    if (!W.post_ln.empty()) {
        p.norm(nk, x, x, W.post_ln, W.post_ln_b, E, hp.eps);
        p.tap("post_ln", -1, x, E);
    }
    keep_if_listed(hp.n_layer_run);
    p.finish();  // the projectors may read the rows on the host
    if (layers.empty()) return x;
    if (slot != layers.size())  // load() sets n_layer_run to the deepest layer, so every one was met
        throw std::logic_error("vit_forward: feature layer " + std::to_string(layers[slot]) + " was not reached");
    return stacked;
}

}  // namespace lp

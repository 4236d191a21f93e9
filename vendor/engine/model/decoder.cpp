// decoder.cpp — see decoder.h. The forward pass reads top to bottom like the
// architecture: embed, then per layer an attention sub-block and an FFN
// sub-block, then the output norm and head. Row-wise steps of a sub-block are
// fused into one pass over the rows (one thread-pool round trip); a single
// row (token generation) runs inline without the pool.
#include "decoder.h"

#include <algorithm>
#include <cstring>

#include "../common.h"
#include "../cpu/features.h"

namespace lp {

run_state::run_state(const hparams& hp, int64_t n_ub, int64_t n_cells, int n_threads, attention_path path)
    : n_ubatch(n_ub) {
    const int64_t E = hp.n_embd;
    mask_words = (n_cells + 63) / 64;
    x.resize((size_t)(n_ub * E));
    xb.resize((size_t)(n_ub * E));
    xb2.resize((size_t)(n_ub * E));
    qkv.resize((size_t)(n_ub * (hp.n_q() + hp.n_embd_k() + hp.n_embd_v())));
    att.resize((size_t)(n_ub * hp.n_head * hp.head_dim_v));
    ffn.resize((size_t)(n_ub * 2 * hp.n_ff));
    const bool any_swa = std::find(hp.swa_layers.begin(), hp.swa_layers.end(), 1) != hp.swa_layers.end();
    for (int r = 0; r < (any_swa ? 2 : 1); ++r) {
        rope_cs[r].resize((size_t)(n_ub * std::max(hp.rope.n_rot, 2)));
        mask[r].resize((size_t)(n_ub * mask_words));
        mask_lo[r].resize((size_t)n_ub);
        mask_hi[r].resize((size_t)n_ub);
    }
    // Quantized activations: at most 4 bytes per element of the widest input.
    const int64_t widest = std::max({E, hp.n_ff, hp.n_head * hp.head_dim_v});
    mm.act.reserve((size_t)(n_ub * widest * 4 + 1024));
    attn.reserve(path, n_threads, n_cells, (int)(hp.n_head / hp.n_head_kv), (int)hp.head_dim_k, (int)hp.head_dim_v);
}

namespace {

// Runs fn(row) for rows [0, n): inline for one row, else on the pool.
template <class F> void for_rows(thread_pool& pool, int64_t n, const F& fn) {
    if (n == 1 || pool.n_threads() == 1) {
        for (int64_t t = 0; t < n; ++t) fn(t);
        return;
    }
    pool.parallel_for(n, [&](int64_t t, int) { fn(t); });
}

void norm(const hparams& hp, const float* x, const std::vector<float>& w, const std::vector<float>& b, float* y) {
    if (hp.v.norm == norm_kind::rms) rms_norm_row(x, w.data(), y, hp.n_embd, hp.norm_eps);
    else layer_norm_row(x, w.data(), b.empty() ? nullptr : b.data(), y, hp.n_embd, hp.norm_eps);
}

void add_bias(float* y, const std::vector<float>& b) {
    if (!b.empty()) add_row(y, b.data(), (int64_t)b.size());
}

// y (n, rows of w) = x (n, w.n_cols) · wᵀ
// ... plus, for each active LoRA adapter of w, scale · B (A x).
void mm(const weight_view& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride,
        thread_pool& pool, run_state& rs) {
    matmul(w, x, x_stride, n, y, y_stride, pool, rs.mm, best_isa());
    const std::vector<lora_set::term>* terms = rs.loras ? rs.loras->find(&w) : nullptr;
    if (!terms) return;
    for (const lora_set::term& t : *terms) {
        const int64_t rank = t.a.n_rows, n_out = t.b.n_rows;
        float* ax = rs.lora_ax.data();
        float* bax = rs.lora_bax.data();
        matmul(t.a, x, x_stride, n, ax, rank, pool, rs.mm, best_isa());
        matmul(t.b, ax, rank, n, bax, n_out, pool, rs.mm, best_isa());
        for_rows(pool, n, [&](int64_t r) {
            float* yr = y + r * y_stride;
            const float* br = bax + r * n_out;
            for (int64_t i = 0; i < n_out; ++i) yr[i] += t.scale * br[i];
        });
    }
}

// The fast conversion of a cache type where it has one (F16, BF16, Q8_0),
// else the reference quantizer (Q4_0, Q5_0, IQ4_NL, ...: one row per token).
from_float_fn quantizer(ggml_type t) {
    const type_traits& tt = traits(t);
    return tt.from_float ? tt.from_float : tt.from_float_ref;
}

// Writes row t's keys and values (after RoPE) into its cache cell.
void store_kv(kv_cache& kv, int il, int32_t cell, const float* k, int64_t nk, const float* v, int64_t nv) {
    uint8_t* kd = kv.k(il) + (size_t)cell * kv.k_row_bytes();
    uint8_t* vd = kv.v(il) + (size_t)cell * kv.v_row_bytes();
    if (kv.type_k() == ggml_type::F32) std::memcpy(kd, k, sizeof(float) * (size_t)nk);
    else quantizer(kv.type_k())(k, kd, nk);
    if (kv.type_v() == ggml_type::F32) std::memcpy(vd, v, sizeof(float) * (size_t)nv);
    else quantizer(kv.type_v())(v, vd, nv);
}

}  // namespace

void decoder_forward(const model& m, const rope_params rope[2], kv_cache& kv_main, kv_cache* kv_swa, run_state& rs,
                     const ubatch& ub, thread_pool& pool, float* logits, float* embd) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    const block_variant& V = hp.v;
    const int64_t E = hp.n_embd, nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v();
    const int64_t nqkv = nq + nk + nv, n_att = hp.n_head * hp.head_dim_v, n_ff = hp.n_ff;
    const int n_rot = hp.rope.n_rot;
    float* x = rs.x.data();      // (n, E)
    float* xb = rs.xb.data();    // (n, E)
    float* xb2 = rs.xb2.data();  // (n, E)
    float* qkv = rs.qkv.data();  // (n, nqkv)
    float* att = rs.att.data();  // (n, n_att)
    float* ffn = rs.ffn.data();  // (n, 2 n_ff)
    int64_t n = ub.n_tok;

    // Input rows: token embeddings (scaled for Gemma) or the given embeddings.
    const type_traits& te = traits(W.token_embd.type);
    for_rows(pool, n, [&](int64_t t) {
        if (ub.embd) {
            std::memcpy(x + t * E, ub.embd + t * E, sizeof(float) * (size_t)E);
            return;
        }
        te.to_float((const uint8_t*)W.token_embd.data + (size_t)ub.tokens[t] * W.token_embd.row_stride, x + t * E, E);
        if (V.embd_scale != 1.0f) scale_row(x + t * E, E, V.embd_scale);
    });

    // RoPE angles of this batch's positions, for global and sliding-window layers.
    for (int r = 0; r < 2; ++r) {
        if (rs.rope_cs[r].empty()) continue;
        for_rows(pool, n, [&](int64_t t) { rope_cos_sin(rope[r], ub.pos[t], rs.rope_cs[r].data() + t * n_rot); });
    }

    for (int il = 0; il < (int)hp.n_layer; ++il) {
        const layer_weights& L = W.layers[(size_t)il];
        const int r = hp.swa_layers[(size_t)il] ? 1 : 0;
        // This layer's cache and the rows' cells in it.
        kv_cache& kv = (r == 1 && kv_swa) ? *kv_swa : kv_main;
        const int32_t* cells = (r == 1 && kv_swa) ? ub.cells_swa : ub.cells;
        const bool last = il == (int)hp.n_layer - 1;

        // ---- attention sub-block ----
        for_rows(pool, n, [&](int64_t t) { norm(hp, x + t * E, L.attn_norm, L.attn_norm_b, xb + t * E); });
        if (V.qkv_fused) {
            mm(L.wqkv, xb, E, n, qkv, nqkv, pool, rs);  // q | k | v
        } else {
            mm(L.wq, xb, E, n, qkv, nqkv, pool, rs);
            mm(L.wk, xb, E, n, qkv + nq, nqkv, pool, rs);
            mm(L.wv, xb, E, n, qkv + nq + nk, nqkv, pool, rs);
        }
        for_rows(pool, n, [&](int64_t t) {
            float* q = qkv + t * nqkv;  // (n_head, hd_k)
            float* k = q + nq;          // (n_head_kv, hd_k)
            float* v = k + nk;          // (n_head_kv, hd_v)
            add_bias(q, L.bqkv);
            add_bias(q, L.bq);
            add_bias(k, L.bk);
            add_bias(v, L.bv);
            if (V.qk_norm) {
                for (int64_t h = 0; h < hp.n_head; ++h)
                    rms_norm_row(q + h * hp.head_dim_k, L.q_norm.data(), q + h * hp.head_dim_k, hp.head_dim_k, hp.norm_eps);
                for (int64_t h = 0; h < hp.n_head_kv; ++h)
                    rms_norm_row(k + h * hp.head_dim_k, L.k_norm.data(), k + h * hp.head_dim_k, hp.head_dim_k, hp.norm_eps);
            }
            const float* cs = rs.rope_cs[r].data() + t * n_rot;
            rope_apply(q, (int)hp.n_head, (int)hp.head_dim_k, n_rot, hp.rope.style, cs);
            rope_apply(k, (int)hp.n_head_kv, (int)hp.head_dim_k, n_rot, hp.rope.style, cs);
            if (V.scale_q) scale_row(q, nq, hp.attn_scale);
            if (kv.rot_k()) {
                hadamard_blocks(q, nq, kv.rot_k());
                hadamard_blocks(k, nk, kv.rot_k());
            }
            if (kv.rot_v()) hadamard_blocks(v, nv, kv.rot_v());
            store_kv(kv, il, cells[t], k, nk, v, nv);
        });
        attention_args aa;
        aa.n_tok = (int)n;
        aa.n_head = (int)hp.n_head;
        aa.n_head_kv = (int)hp.n_head_kv;
        aa.head_dim_k = (int)hp.head_dim_k;
        aa.head_dim_v = (int)hp.head_dim_v;
        aa.q = qkv;
        aa.q_stride = nqkv;
        aa.out = att;
        aa.out_stride = n_att;
        aa.type_k = kv.type_k();
        aa.type_v = kv.type_v();
        aa.k = kv.k(il);
        aa.k_row_bytes = kv.k_row_bytes();
        aa.v = kv.v(il);
        aa.v_row_bytes = kv.v_row_bytes();
        aa.cell_pos = kv.positions();
        aa.mask = rs.mask[r].data();
        aa.mask_words = rs.mask_words;
        aa.lo = rs.mask_lo[r].data();
        aa.hi = rs.mask_hi[r].data();
        aa.scale = V.scale_q ? 1.0f : hp.attn_scale;
        aa.softcap = hp.attn_softcap;
        aa.path = rs.attn.path;
        attention(aa, pool, rs.attn);
        if (kv.rot_v()) for_rows(pool, n, [&](int64_t t) { hadamard_blocks(att + t * n_att, n_att, kv.rot_v()); });

        if (last) {
            // Only the requested rows go on: gather them to the front.
            for (int64_t i = 0; i < ub.n_out; ++i) {
                const int64_t src = ub.out_rows[i];
                if (src == i) continue;
                std::memcpy(att + i * n_att, att + src * n_att, sizeof(float) * (size_t)n_att);
                std::memcpy(x + i * E, x + src * E, sizeof(float) * (size_t)E);
            }
            n = ub.n_out;
            if (n == 0) return;
        }

        mm(L.wo, att, n_att, n, xb2, E, pool, rs);
        for_rows(pool, n, [&](int64_t t) {
            add_bias(xb2 + t * E, L.bo);
            if (V.post_attn_norm) rms_norm_row(xb2 + t * E, L.post_attn_norm.data(), xb2 + t * E, E, hp.norm_eps);
            add_row(x + t * E, xb2 + t * E, E);
            norm(hp, x + t * E, L.ffn_norm, L.ffn_norm_b, xb + t * E);
        });

        // ---- FFN sub-block: down(act(gate) * up) ----
        if (V.gate_up_fused) {
            mm(L.ffn_up, xb, E, n, ffn, 2 * n_ff, pool, rs);  // gate | up
        } else {
            mm(L.ffn_gate, xb, E, n, ffn, 2 * n_ff, pool, rs);
            mm(L.ffn_up, xb, E, n, ffn + n_ff, 2 * n_ff, pool, rs);
        }
        for_rows(pool, n, [&](int64_t t) {
            float* g = ffn + t * 2 * n_ff;
            if (V.act == ffn_act::gelu) gelu_mul_row(g, g + n_ff, n_ff);
            else silu_mul_row(g, g + n_ff, n_ff);
        });
        mm(L.ffn_down, ffn, 2 * n_ff, n, xb2, E, pool, rs);
        for_rows(pool, n, [&](int64_t t) {
            if (V.post_ffn_norm) rms_norm_row(xb2 + t * E, L.post_ffn_norm.data(), xb2 + t * E, E, hp.norm_eps);
            add_row(x + t * E, xb2 + t * E, E);
        });
    }

    // Output norm, hidden states, logits.
    for_rows(pool, n, [&](int64_t t) {
        norm(hp, x + t * E, W.output_norm, W.output_norm_b, xb + t * E);
        if (embd) std::memcpy(embd + t * E, xb + t * E, sizeof(float) * (size_t)E);
    });
    if (logits) decoder_logits(m, xb, n, pool, rs, logits);
}

void decoder_logits(const model& m, const float* h, int64_t n, thread_pool& pool, run_state& rs, float* logits) {
    const hparams& hp = m.hp();
    mm(m.weights().output, h, hp.n_embd, n, logits, hp.n_vocab, pool, rs);
    if (hp.final_softcap > 0.0f)
        for_rows(pool, n, [&](int64_t t) { softcap_row(logits + t * hp.n_vocab, hp.n_vocab, hp.final_softcap); });
}

}  // namespace lp

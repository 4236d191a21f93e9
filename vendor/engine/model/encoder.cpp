// encoder.cpp — see encoder.h. Reads top to bottom like BERT: embed (token +
// position + token type, LayerNorm), then per layer attention -> add ->
// LayerNorm and FFN -> add -> LayerNorm. The keys and values of the batch are
// used in place (F32) as the "cells" the attention kernel reads; the masks
// say which rows share a sequence. Row-wise steps run on the thread pool.
#include "encoder.h"

#include <algorithm>
#include <cstring>

#include "../common.h"
#include "../cpu/features.h"

namespace lp {

namespace {

template <class F> void for_rows(thread_pool& pool, int64_t n, const F& fn) {
    if (n == 1 || pool.n_threads() == 1) {
        for (int64_t t = 0; t < n; ++t) fn(t);
        return;
    }
    pool.parallel_for(n, [&](int64_t t, int) { fn(t); });
}

void mm(const weight_view& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride,
        thread_pool& pool, run_state& rs) {
    matmul(w, x, x_stride, n, y, y_stride, pool, rs.mm, best_isa());
}

void add_bias(float* y, const std::vector<float>& b) {
    if (!b.empty()) add_row(y, b.data(), (int64_t)b.size());
}

const float* opt(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// Row t sees row j when both belong to the same sequence (and, for a causal
// model, j is not at a later position). Bits (n, words) as attention wants.
void build_masks(int64_t n, const int32_t* seq, const int32_t* pos, bool causal, run_state& rs) {
    uint64_t* mask = rs.mask[0].data();
    int32_t* lo = rs.mask_lo[0].data();
    int32_t* hi = rs.mask_hi[0].data();
    const int64_t words = rs.mask_words;
    for (int64_t t = 0; t < n; ++t) {
        uint64_t* row = mask + t * words;
        std::memset(row, 0, sizeof(uint64_t) * (size_t)((n + 63) / 64));
        int32_t first = -1, last = -1;
        for (int64_t j = 0; j < n; ++j) {
            if (seq[j] != seq[t] || (causal && pos[j] > pos[t])) continue;
            row[j >> 6] |= (uint64_t)1 << (j & 63);
            if (first < 0) first = (int32_t)j;
            last = (int32_t)j;
        }
        lo[t] = first < 0 ? 0 : first;
        hi[t] = first < 0 ? 0 : last + 1;
    }
}

}  // namespace

void encoder_forward(const model& m, const rope_params& rope, run_state& rs, const ubatch& ub, const int32_t* seq,
                     thread_pool& pool, float* hidden) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    const int64_t E = hp.n_embd, nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v();
    const int64_t nqkv = nq + nk + nv, n_att = hp.n_head * hp.head_dim_v, n_ff = hp.n_ff;
    const int n_rot = hp.rope.n_rot;
    const int64_t n = ub.n_tok;
    if (n > rs.n_ubatch) throw value_error("encoder: batch of " + std::to_string(n) + " rows exceeds n_ubatch");
    float* x = rs.x.data();      // (n, E) residual stream
    float* xb2 = rs.xb2.data();  // (n, E) sub-block output
    float* qkv = rs.qkv.data();  // (n, nqkv) queries | keys | values
    float* att = rs.att.data();  // (n, n_att)
    float* ffn = rs.ffn.data();  // (n, 2 n_ff) gate | up

    // Input: token + position + token-type embeddings, LayerNorm.
    const type_traits& te = traits(W.token_embd.type);
    const bool has_pos = W.position_embd.data != nullptr;
    const type_traits& tp = traits(W.position_embd.type);
    for_rows(pool, n, [&](int64_t t) {
        float* xt = x + t * E;
        te.to_float((const uint8_t*)W.token_embd.data + (size_t)ub.tokens[t] * W.token_embd.row_stride, xt, E);
        if (!W.token_type0.empty()) add_row(xt, W.token_type0.data(), E);
        if (has_pos) {
            float* tmp = xb2 + t * E;
            tp.to_float((const uint8_t*)W.position_embd.data + (size_t)ub.pos[t] * W.position_embd.row_stride, tmp, E);
            add_row(xt, tmp, E);
        }
        layer_norm_row(xt, W.token_embd_norm.data(), opt(W.token_embd_norm_b), xt, E, hp.norm_eps);
        if (n_rot > 0) rope_cos_sin(rope, ub.pos[t], rs.rope_cs[0].data() + t * n_rot);
    });
    build_masks(n, seq, ub.pos, hp.causal, rs);

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
    aa.type_k = ggml_type::F32;
    aa.type_v = ggml_type::F32;
    aa.k = reinterpret_cast<const uint8_t*>(qkv + nq);
    aa.k_row_bytes = sizeof(float) * (size_t)nqkv;
    aa.v = reinterpret_cast<const uint8_t*>(qkv + nq + nk);
    aa.v_row_bytes = sizeof(float) * (size_t)nqkv;
    aa.mask = rs.mask[0].data();
    aa.mask_words = rs.mask_words;
    aa.lo = rs.mask_lo[0].data();
    aa.hi = rs.mask_hi[0].data();
    aa.scale = hp.attn_scale;
    aa.path = rs.attn.path;

    for (int il = 0; il < (int)hp.n_layer; ++il) {
        const layer_weights& L = W.layers[(size_t)il];

        // ---- attention: x = LN(x + wo · attn(q, k, v)) ----
        if (hp.v.qkv_fused) {
            mm(L.wqkv, x, E, n, qkv, nqkv, pool, rs);
        } else {
            mm(L.wq, x, E, n, qkv, nqkv, pool, rs);
            mm(L.wk, x, E, n, qkv + nq, nqkv, pool, rs);
            mm(L.wv, x, E, n, qkv + nq + nk, nqkv, pool, rs);
        }
        for_rows(pool, n, [&](int64_t t) {
            float* q = qkv + t * nqkv;
            add_bias(q, L.bqkv);
            add_bias(q, L.bq);
            add_bias(q + nq, L.bk);
            add_bias(q + nq + nk, L.bv);
            if (n_rot > 0) {
                const float* cs = rs.rope_cs[0].data() + t * n_rot;
                rope_apply(q, (int)hp.n_head, (int)hp.head_dim_k, n_rot, hp.rope.style, cs);
                rope_apply(q + nq, (int)hp.n_head_kv, (int)hp.head_dim_k, n_rot, hp.rope.style, cs);
            }
        });
        attention(aa, pool, rs.attn);
        mm(L.wo, att, n_att, n, xb2, E, pool, rs);
        for_rows(pool, n, [&](int64_t t) {
            float* xt = x + t * E;
            add_bias(xb2 + t * E, L.bo);
            add_row(xt, xb2 + t * E, E);
            layer_norm_row(xt, L.attn_out_norm.data(), opt(L.attn_out_norm_b), xt, E, hp.norm_eps);
        });

        // ---- FFN: x = LN(x + down(act(up x)))  or  down(silu(gate x) * up x) ----
        const bool gated = L.ffn_gate.data != nullptr;
        if (gated) {
            mm(L.ffn_gate, x, E, n, ffn, 2 * n_ff, pool, rs);
            mm(L.ffn_up, x, E, n, ffn + n_ff, 2 * n_ff, pool, rs);
        } else {
            mm(L.ffn_up, x, E, n, ffn, 2 * n_ff, pool, rs);
        }
        for_rows(pool, n, [&](int64_t t) {
            float* g = ffn + t * 2 * n_ff;
            if (gated) {
                if (hp.v.act == ffn_act::gelu) gelu_mul_row(g, g + n_ff, n_ff);
                else silu_mul_row(g, g + n_ff, n_ff);
            } else {
                add_bias(g, L.ffn_up_b);
                if (hp.v.act == ffn_act::gelu) gelu_mul_row(g, nullptr, n_ff);
                else silu_mul_row(g, nullptr, n_ff);
            }
        });
        mm(L.ffn_down, ffn, 2 * n_ff, n, xb2, E, pool, rs);
        for_rows(pool, n, [&](int64_t t) {
            float* xt = x + t * E;
            add_bias(xb2 + t * E, L.ffn_down_b);
            add_row(xt, xb2 + t * E, E);
            layer_norm_row(xt, L.layer_out_norm.data(), opt(L.layer_out_norm_b), xt, E, hp.norm_eps);
        });
    }
    std::memcpy(hidden, x, sizeof(float) * (size_t)(n * E));
}

}  // namespace lp

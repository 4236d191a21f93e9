// encoder.cpp — see encoder.h. Reads top to bottom like BERT: embed (token +
// position + token type, LayerNorm), then per layer attention -> add ->
// LayerNorm and FFN -> add -> LayerNorm, from the shared blocks (blocks.h).
// The keys and values of the batch are used in place (F32) as the "cells"
// the attention reads; the masks say which rows share a sequence.
#include "encoder.h"

#include <cstring>

#include "../common.h"

namespace lp {

namespace {

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
                     pass& p, float* hidden) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    const int64_t E = hp.n_embd, nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v();
    const int64_t nqkv = nq + nk + nv, n_att = hp.n_head * hp.head_dim_v;
    const int64_t n = ub.n_tok;
    if (n > rs.n_ubatch) throw value_error("encoder: batch of " + std::to_string(n) + " rows exceeds n_ubatch");
    const rows x{rs.x.f32(), E};          // (n, E) residual stream
    const rows xb2{rs.xb2.f32(), E};      // (n, E) sub-block output
    const rows qkv{rs.qkv.f32(), nqkv};   // (n, nqkv) queries | keys | values
    const rows att{rs.att.f32(), n_att};  // (n, n_att)
    const rows ffn{rs.ffn.f32(), 2 * hp.n_ff};  // (n, 2 n_ff) gate | up

    const float* cos_sin = nullptr;
    p.part(0);
    if (hp.rope.n_rot > 0) {
        p.rope_table(rope, ub.pos, 0, rs.rope_cs[0].data());
        cos_sin = rs.rope_cs[0].data();
    }
    encoder_input(p, m, ub, x, xb2);
    build_masks(n, seq, ub.pos, hp.causal, rs);

    // The batch's own keys and values are the cells.
    kv_source self;
    self.k = reinterpret_cast<const uint8_t*>(qkv.p + nq);
    self.k_row_bytes = sizeof(float) * (size_t)nqkv;
    self.v = reinterpret_cast<const uint8_t*>(qkv.p + nq + nk);
    self.v_row_bytes = sizeof(float) * (size_t)nqkv;
    const attention_args aa = attention_setup(hp, rs, 0, qkv, att, n, self);

    for (int il = 0; il < (int)hp.n_layer; ++il) {
        const layer_weights& L = W.layers[(size_t)il];
        p.part((size_t)il + 1);

        // ---- attention: x = LN(x + wo · attn(q, k, v)) ----
        qkv_block(p, hp, L, il, x, qkv, cos_sin);
        p.attention(aa);
        p.tap("kqv_out", il, att, n_att);
        attn_output(p, hp, L, il, att, xb2);
        p.add(x, xb2, E);
        p.norm(norm_kind::layer, x, x, L.attn_out_norm, L.attn_out_norm_b, E, hp.norm_eps);
        p.tap("ffn_inp", il, x, E);

        // ---- FFN: x = LN(x + down(act(up x)))  or  down(act(gate x) * up x) ----
        ffn_block(p, hp, L, il, x, ffn, xb2);
        p.add(x, xb2, E);
        p.norm(norm_kind::layer, x, x, L.layer_out_norm, L.layer_out_norm_b, E, hp.norm_eps);
        p.tap("l_out", il, x, E);
    }
    p.part((size_t)hp.n_layer + 1);
    p.tap("result_embd", -1, x, E);
    p.copy(rows{hidden, E}, x, E);
    p.finish();
}

}  // namespace lp

// decoder.cpp — see decoder.h. The forward pass reads top to bottom like the
// architecture: embed, then per layer a pre-norm attention sub-block and a
// pre-norm FFN sub-block (each with an optional norm of its output before
// the residual add, and an optional scale of that output; olmo2 has only the
// output norms), then the output norm and head. The row-wise steps between
// two matrix products run fused on the backend (blocks.h, pass).
#include "decoder.h"

namespace lp {

void decoder_forward(const model& m, const rope_params rope[2], kv_cache& kv_main, kv_cache* kv_swa, run_state& rs,
                     const ubatch& ub, pass& p, float* logits, float* embd) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    const block_variant& V = hp.v;
    const int64_t E = hp.n_embd, n_att = hp.n_head * hp.head_dim_v;
    const int64_t nqkv = hp.n_q() + hp.n_embd_k() + hp.n_embd_v();
    const rows x{rs.x.f32(), E};       // (n, E) residual stream
    const rows xb{rs.xb.f32(), E};     // (n, E) normalised sub-block input
    const rows xb2{rs.xb2.f32(), E};   // (n, E) sub-block output
    const rows qkv{rs.qkv.f32(), nqkv};  // (n, nqkv) q | k | v
    const rows att{rs.att.f32(), n_att};  // (n, n_att)
    // MLA: the heads' outputs after attn_v_b; the output projection's input
    const rows heads_out{hp.is_mla() ? rs.mla_out.f32() : nullptr, hp.n_head * hp.mla.head_v};
    const rows wo_in = hp.is_mla() ? heads_out : att;
    const rows ffn{rs.ffn.f32(), 2 * hp.n_ff};  // (n, 2 n_ff) gate | up (dense layers)

    // RoPE angles of this batch's positions, for global and sliding-window layers.
    p.part(0);
    for (int r = 0; r < 2; ++r)
        if (!rs.rope_cs[r].empty()) p.rope_table(rope[r], ub.pos, ub.pos_stride, rs.rope_cs[r].data());
    decoder_input(p, m, ub, x);
    // Gemma 4's per-layer inputs: (n, n_layer * P), layer il's at column il * P.
    const int64_t P = hp.n_embd_per_layer;
    const rows ple_in{rs.ple_proj.f32(), hp.n_layer * P};
    if (P > 0) per_layer_inputs(p, m, ub, x, rs);

    for (int il = 0; il < (int)hp.n_layer; ++il) {
        const layer_weights& L = W.layers[(size_t)il];
        const hparams& lh = m.layer_hp(il);  // this layer's shape (Gemma 4's layers differ)
        const int r = hp.swa_layers[(size_t)il] ? 1 : 0;
        const float* cos_sin = hp.has_rope(il) ? rs.rope_cs[r].data() : nullptr;  // null: q, k unrotated
        p.part((size_t)il + 1);
        // This layer's cache and the rows' cells in it.
        kv_cache& kv = (r == 1 && kv_swa) ? *kv_swa : kv_main;
        const int32_t* cells = (r == 1 && kv_swa) ? ub.cells_swa : ub.cells;

        // ---- attention sub-block ----
        // (without pre_norm the sub-block reads the residual stream itself;
        // it writes only its own buffers until the residual add)
        const rows attn_in = V.pre_norm ? xb : x;
        if (V.pre_norm) {
            p.norm(V.norm, xb, x, L.attn_norm, L.attn_norm_b, E, hp.norm_eps);
            p.tap("attn_norm", il, xb, E);
        }
        const bool recurrent = hp.is_recurrent(il);
        if (recurrent) {
            // gated delta-net (Qwen3.5), short convolution (LFM2) or Mamba-2 (Granite 4.0-H): every row advances its sequence's
            // state, so the whole batch runs; the output rows are taken after.
            if (hp.ssm.kind == ssm_kind::short_conv) short_conv_block(p, hp, L, il, ub, attn_in, xb2);
            else if (hp.ssm.kind == ssm_kind::mamba2) mamba2_block(p, hp, L, il, ub, attn_in, xb2);
            else delta_net_block(p, hp, L, il, ub, attn_in, xb2);
        } else if (hp.is_mla()) {
            mla_attention(p, hp, L, il, kv, cells, rs, r, attn_in, qkv, att, cos_sin, heads_out);
        } else {
            qkv_block(p, lh, L, il, attn_in, qkv, cos_sin);
            cached_attention(p, lh, kv, il, cells, rs, r, qkv, att, L.attn_sinks);
            if (V.attn_gate) {
                p.sigmoid_mul(att, rows{rs.attn_gate.f32(), hp.n_q()}, n_att);
                p.tap("attn_gated", il, att, n_att);
            }
        }
        if (il == (int)hp.n_layer - 1) {
            // Only the requested rows go on: gather them to the front.
            if (recurrent) p.gather_rows(xb2, E, ub.out_rows, ub.n_out);
            else p.gather_rows(wo_in, wo_in.s, ub.out_rows, ub.n_out);
            p.gather_rows(x, E, ub.out_rows, ub.n_out);
            if (P > 0) p.gather_rows(ple_in.at(il * P), P, ub.out_rows, ub.n_out);
            p.set_n(ub.n_out);
            if (ub.n_out == 0) {
                p.finish();
                return;
            }
        }
        if (!recurrent) attn_output(p, lh, L, il, wo_in, xb2);
        if (V.post_attn_norm) {
            p.norm(norm_kind::rms, xb2, xb2, L.post_attn_norm, {}, E, hp.norm_eps);
            p.tap("attn_post_norm", il, xb2, E);
        }
        if (hp.residual_scale != 0.0f) p.scale(xb2, E, hp.residual_scale);
        p.add(x, xb2, E);
        // llama.cpp's names: gemma's sa_out, olmo2's (and the plain block's) ffn_inp
        p.tap(V.post_attn_norm && V.pre_norm ? "sa_out" : "ffn_inp", il, x, E);

        // ---- FFN sub-block ----
        const rows ffn_in = V.pre_norm ? xb : x;
        if (V.pre_norm) {
            p.norm(V.norm, xb, x, L.ffn_norm, L.ffn_norm_b, E, hp.norm_eps);
            p.tap("ffn_norm", il, xb, E);
        }
        if (L.moe() && V.moe_beside_dense) dense_and_moe_ffn_block(p, hp, lh, L, il, x, xb, rs, xb2);
        else if (L.moe()) moe_ffn_block(p, hp, L, il, ffn_in, rs, xb2);
        else ffn_block(p, lh, L, il, ffn_in, ffn, xb2);
        if (V.post_ffn_norm) {
            p.norm(norm_kind::rms, xb2, xb2, L.post_ffn_norm, {}, E, hp.norm_eps);
            p.tap("ffn_post_norm", il, xb2, E);
        }
        if (hp.residual_scale != 0.0f) p.scale(xb2, E, hp.residual_scale);
        p.add(x, xb2, E);
        if (P > 0) per_layer_embedding(p, hp, L, il, x, ple_in, rows{rs.ffn.f32(), P}, xb2);
        if (L.out_scale != 0.0f) {  // Gemma 4's layer scalar
            p.scale(x, E, L.out_scale);
            p.tap("out_scaled", il, x, E);
        }
        p.tap("l_out", il, x, E);
    }

    // Output norm, hidden states, logits.
    p.part((size_t)hp.n_layer + 1);
    p.norm(V.norm, xb, x, W.output_norm, W.output_norm_b, E, hp.norm_eps);
    p.tap("result_norm", -1, xb, E);
    if (embd) p.copy(rows{embd, E}, xb, E);
    if (logits) output_head(p, m, xb, logits);
    p.finish();
}

void decoder_logits(const model& m, const float* h, pass& p, float* logits) {
    p.part((size_t)m.hp().n_layer + 1);
    output_head(p, m, rows{const_cast<float*>(h), m.hp().n_embd}, logits);
    p.finish();
}

}  // namespace lp

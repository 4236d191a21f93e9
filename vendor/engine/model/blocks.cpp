// blocks.cpp — see blocks.h.
#include "blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../common.h"

namespace lp {

run_state::run_state(const hparams& hp, int64_t n_ub, int64_t n_cells, device where) : n_ubatch(n_ub) {
    const int64_t E = hp.n_embd;
    mask_words = (n_cells + 63) / 64;
    x = float_buffer(where, (size_t)(n_ub * E));
    xb = float_buffer(where, (size_t)(n_ub * E));
    xb2 = float_buffer(where, (size_t)(n_ub * E));
    qkv = float_buffer(where, (size_t)(n_ub * (hp.n_q() + hp.n_embd_k() + hp.n_embd_v())));
    att = float_buffer(where, (size_t)(n_ub * hp.n_head * hp.head_dim_v));
    ffn = float_buffer(where, (size_t)(n_ub * hp.ffn_width()));
    if (hp.moe.n_expert > 0) {
        const int64_t k = hp.moe.n_expert_used;
        moe_logits = float_buffer(where, (size_t)(n_ub * hp.moe.n_expert));
        moe_ids = device_buffer(where, sizeof(int32_t) * (size_t)(n_ub * k));
        moe_weights = float_buffer(where, (size_t)(n_ub * k));
        moe_ffn = float_buffer(where, (size_t)(n_ub * k * 2 * hp.moe.n_ff_exp));
        moe_out = float_buffer(where, (size_t)(n_ub * k * E));
    }
    if (hp.is_mla()) {
        const int64_t H = hp.n_head;
        mla_q = float_buffer(where, (size_t)(n_ub * H * hp.mla.head_k));
        mla_qa = float_buffer(where, (size_t)(n_ub * std::max<int64_t>(hp.mla.q_lora, 1)));
        mla_out = float_buffer(where, (size_t)(n_ub * H * hp.mla.head_v));
        mla_qcur = float_buffer(where, (size_t)(n_ub * hp.n_q()));
        mla_heads = device_buffer(where, sizeof(int32_t) * (size_t)(n_ub * H));
        auto* h = static_cast<int32_t*>(mla_heads.data());  // host-visible memory, written once
        for (int64_t i = 0; i < n_ub * H; ++i) h[i] = (int32_t)(i % H);
    }
    if (hp.v.attn_gate) {
        q_full = float_buffer(where, (size_t)(n_ub * 2 * hp.n_q()));
        attn_gate = float_buffer(where, (size_t)(n_ub * hp.n_q()));
    }
    if (hp.n_recurrent() > 0) {
        const ssm_hparams& sm = hp.ssm;
        dn_in = float_buffer(where, (size_t)(n_ub * sm.in_dim()));
        dn_conv = float_buffer(where, (size_t)(n_ub * sm.conv_dim()));
        dn_z = float_buffer(where, (size_t)(n_ub * sm.value_dim()));
        dn_gb = float_buffer(where, (size_t)(n_ub * 2 * sm.n_head_v));
        dn_out = float_buffer(where, (size_t)(n_ub * sm.value_dim()));
    }
    if (hp.moe.n_ff_shexp > 0) shexp_gate = float_buffer(where, (size_t)n_ub);
    if (hp.v.moe_beside_dense) moe_sum = float_buffer(where, (size_t)(n_ub * E));
    if (hp.n_embd_per_layer > 0) {  // Gemma 4's per-layer inputs
        ple = float_buffer(where, (size_t)(n_ub * hp.n_layer * hp.n_embd_per_layer));
        ple_proj = float_buffer(where, (size_t)(n_ub * hp.n_layer * hp.n_embd_per_layer));
        ple_zero_ids.assign((size_t)n_ub, 0);
    }
    const bool any_swa = std::find(hp.swa_layers.begin(), hp.swa_layers.end(), 1) != hp.swa_layers.end();
    for (int r = 0; r < (any_swa ? 2 : 1); ++r) {
        rope_cs[r].resize((size_t)(n_ub * std::max({hp.rope.n_rot, hp.rope_n_rot_swa, 2})));
        mask[r].resize((size_t)(n_ub * mask_words));
        mask_lo[r].resize((size_t)n_ub);
        mask_hi[r].resize((size_t)n_ub);
    }
}

size_t run_state::activation_bytes(const hparams& hp, int64_t n_ub) {
    const int64_t E = hp.n_embd;
    const int64_t k = hp.moe.n_expert > 0 ? hp.moe.n_expert_used : 0;
    const int64_t moe = hp.moe.n_expert > 0 ? hp.moe.n_expert + 2 * k + k * (2 * hp.moe.n_ff_exp + E) : 0;
    const int64_t mla = hp.is_mla() ? hp.n_head * (hp.mla.head_k + hp.mla.head_v + 1) + hp.n_q() +
                                          std::max<int64_t>(hp.mla.q_lora, 1)
                                    : 0;
    const int64_t gate = hp.v.attn_gate ? 3 * hp.n_q() : 0;
    const int64_t dn =
        hp.n_recurrent() > 0 ? hp.ssm.in_dim() + hp.ssm.conv_dim() + 3 * hp.ssm.value_dim() + 2 * hp.ssm.n_head_v : 0;
    const int64_t shexp = (hp.moe.n_ff_shexp > 0 ? 1 : 0) + (hp.v.moe_beside_dense ? E : 0);
    const int64_t ple = hp.n_embd_per_layer > 0 ? 2 * hp.n_layer * hp.n_embd_per_layer + 1 : 0;  // + ple_zero_ids
    return sizeof(float) * (size_t)(n_ub * (3 * E + hp.n_q() + hp.n_embd_k() + hp.n_embd_v() +
                                            hp.n_head * hp.head_dim_v + hp.ffn_width() + moe + mla + gate + dn +
                                            shexp + ple));
}

size_t run_state::bytes() const {
    size_t b = x.bytes() + xb.bytes() + xb2.bytes() + qkv.bytes() + att.bytes() + ffn.bytes() + lora_ax.bytes() +
               lora_bax.bytes() + moe_logits.bytes() + moe_ids.bytes() + moe_weights.bytes() + moe_ffn.bytes() +
               moe_out.bytes() + mla_q.bytes() + mla_qa.bytes() + mla_out.bytes() + mla_qcur.bytes() + mla_heads.bytes() +
               q_full.bytes() + attn_gate.bytes() + dn_in.bytes() + dn_conv.bytes() + dn_z.bytes() + dn_gb.bytes() +
               dn_out.bytes() + shexp_gate.bytes() + moe_sum.bytes() + ple.bytes() + ple_proj.bytes() +
               sizeof(int32_t) * ple_zero_ids.size();
    for (int r = 0; r < 2; ++r)
        b += sizeof(float) * rope_cs[r].size() + sizeof(uint64_t) * mask[r].size() +
             sizeof(int32_t) * (mask_lo[r].size() + mask_hi[r].size());
    return b;
}

// ---------------------------------------------------------------------------
// pass
// ---------------------------------------------------------------------------

namespace {

const float* opt(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

row_op op(row_op::kind k, rows y, int64_t n) {
    row_op o;
    o.k = k;
    o.y = y.p;
    o.y_stride = y.s;
    o.n = n;
    return o;
}

}  // namespace

void pass::flush() {
    if (n_ops_ == 0) return;
    const int k = n_ops_;
    n_ops_ = 0;  // the queue is empty even when the backend throws
    if (n_ > 0) be_->run_rows(ops_, k, n_);
}

void pass::finish() {
    flush();
    be_->sync();
}

void pass::part(size_t i) {
    if (!parts_ || i >= parts_->size()) return;
    backend* next = (*parts_)[i];
    if (next == be_) return;
    finish();
    be_ = next;
}

void pass::enter_kv() {
    if (!kv_be_ || kv_be_ == be_) return;
    finish();
    away_ = be_;
    be_ = kv_be_;
}

void pass::leave_kv() {
    if (!away_) return;
    finish();
    be_ = away_;
    away_ = nullptr;
}

void pass::norm(norm_kind k, rows y, rows x, const std::vector<float>& w, const std::vector<float>& b, int64_t n,
                float eps) {
    row_op o = op(k == norm_kind::rms ? row_op::kind::rms_norm : row_op::kind::layer_norm, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    o.w = opt(w);
    o.b = k == norm_kind::layer ? opt(b) : nullptr;
    o.f = eps;
    queue(o);
}

void pass::head_norm(rows y, int64_t n_head, int64_t head_dim, const std::vector<float>& w, float eps) {
    row_op o = op(row_op::kind::rms_norm, y, head_dim);
    o.x = y.p;
    o.x_stride = y.s;
    o.w = opt(w);
    o.groups = n_head;
    o.f = eps;
    queue(o);
}

void pass::add(rows y, rows x, int64_t n) {
    row_op o = op(row_op::kind::add, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    queue(o);
}

void pass::mul(rows y, rows x, int64_t n) {
    row_op o = op(row_op::kind::mul, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    queue(o);
}

void pass::add_bias(rows y, const std::vector<float>& b) {
    if (!b.empty()) add(y, rows{const_cast<float*>(b.data()), 0}, (int64_t)b.size());
}

void pass::scale(rows y, int64_t n, float f) {
    row_op o = op(row_op::kind::scale, y, n);
    o.f = f;
    queue(o);
}

void pass::softcap(rows y, int64_t n, float cap) {
    row_op o = op(row_op::kind::softcap, y, n);
    o.f = cap;
    queue(o);
}

void pass::swiglu_oai(rows g, const float* up, int64_t up_stride, int64_t n, float alpha, float limit) {
    row_op o = op(row_op::kind::swiglu_oai, g, n);
    o.x = up;
    o.x_stride = up_stride;
    o.f = limit;
    o.f2 = alpha;
    queue(o);
}

void pass::sigmoid_mul(rows y, rows x, int64_t n) {
    row_op o = op(row_op::kind::sigmoid_mul, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    queue(o);
}

void pass::softplus_mul(rows y, const std::vector<float>& b, const std::vector<float>& w, int64_t n) {
    row_op o = op(row_op::kind::softplus_mul, y, n);
    o.b = b.data();
    o.w = w.data();
    queue(o);
}

void pass::scale_by(rows y, rows x, int64_t n) {
    row_op o = op(row_op::kind::scale_by, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    queue(o);
}

void pass::ssm_conv(ssm_conv_args a) {
    flush();
    a.n_tok = n_;
    if (n_ > 0) be_->ssm_conv(a);
}

void pass::ssm_scan(ssm_scan_args a) {
    flush();
    a.n_tok = n_;
    if (n_ > 0) be_->ssm_scan(a);
}

void pass::gated_delta(gated_delta_args a) {
    flush();
    a.n_tok = n_;
    if (n_ > 0) be_->gated_delta(a);
}

void pass::act_mul(ffn_act act, rows g, const float* up, int64_t up_stride, int64_t n) {
    if (act == ffn_act::swiglu_oai) throw value_error("swiglu_oai needs its alpha and limit (pass::swiglu_oai)");
    const row_op::kind k = act == ffn_act::gelu         ? row_op::kind::gelu_mul
                           : act == ffn_act::gelu_quick ? row_op::kind::gelu_quick_mul
                                                        : row_op::kind::silu_mul;
    row_op o = op(k, g, n);
    o.x = up;
    o.x_stride = up_stride;
    queue(o);
}

void pass::rope(rows y, int64_t n_head, int64_t head_dim, const rope_params& rp, const float* cos_sin) {
    row_op o = op(row_op::kind::rope, y, head_dim);
    o.groups = n_head;
    o.a = rp.n_rot;
    o.style = rp.style;
    o.x = cos_sin;
    o.x_stride = rp.n_rot;
    queue(o);
}

void pass::hadamard(rows y, int64_t n, int block) {
    row_op o = op(row_op::kind::hadamard, y, n);
    o.a = block;
    queue(o);
}

void pass::copy(rows y, rows x, int64_t n) {
    row_op o = op(row_op::kind::copy, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    queue(o);
}

void pass::copy_groups(rows y, int64_t y_group, rows x, int64_t x_group, int64_t n, int64_t groups) {
    row_op o = op(row_op::kind::copy, y, n);
    o.x = x.p;
    o.x_stride = x.s;
    o.groups = groups;
    o.x_group = x_group;
    o.y_group = y_group;
    queue(o);
}

void pass::kv_store(uint8_t* cache, size_t row_bytes, ggml_type type, rows x, int64_t n, const int32_t* cells) {
    row_op o = op(row_op::kind::kv_store, rows{nullptr, 0}, n);
    o.x = x.p;
    o.x_stride = x.s;
    o.dst = cache;
    o.dst_row_bytes = row_bytes;
    o.type = type;
    o.cells = cells;
    queue(o);
}

backend& pass::for_weights(const void* data) {
    if (!host_w_ || be_ == host_be_ || !host_w_->count(data)) return *be_;
    be_->sync();  // the part's backend's work so far, visible in memory before the host reads it
    return *host_be_;
}

void pass::matmul(const weight_view& w, rows x, rows y) {
    flush();
    if (rs_.imatrix) {
        finish();  // x written (a CPU-only context: set_imatrix refuses GPU parts)
        rs_.imatrix->add(w, x.p, x.s, n_);
    }
    lora_work lw;
    if (rs_.loras && (lw.terms = rs_.loras->find(&w))) {
        lw.ax = rs_.lora_ax.f32();
        lw.bax = rs_.lora_bax.f32();
    }
    for_weights(w.data).matmul(w, x.p, x.s, y.p, y.s, n_, lw);
}

void pass::get_rows(const weight_view& table, const int32_t* ids, rows y) {
    flush();
    be_->get_rows(table, ids, y.p, y.s, n_);
}

void pass::gather_rows(rows data, int64_t n_cols, const int32_t* idx, int64_t n_keep) {
    flush();
    be_->gather_rows(data.p, data.s, n_cols, idx, n_keep);
}

void pass::rope_table(const rope_params& rp, const int32_t* pos, int64_t pos_stride, float* out) {
    flush();
    be_->rope_table(rp, pos, pos_stride, out, n_);
}

void pass::attention(const attention_args& a) {
    flush();
    be_->attention(a);
}

void pass::moe_route(const moe_route_args& a) {
    flush();
    be_->moe_route(a);
}

void pass::moe_matmul(const experts_view& w, rows x, int x_div, const int32_t* ids, int64_t n_slots, rows y,
                      const std::vector<float>& bias) {
    flush();
    if (rs_.imatrix) {
        finish();
        rs_.imatrix->add_experts(w, x.p, x.s, x_div, ids, n_slots);
    }
    for_weights(w.all.data).moe_matmul(w, x.p, x.s, x_div, ids, n_slots, y.p, y.s, opt(bias));
}

void pass::weighted_sum(rows y, const float* x, const float* weights, int groups, int64_t n) {
    row_op o = op(row_op::kind::weighted_sum, y, n);
    o.x = x;
    o.x_stride = groups * n;
    o.w = weights;
    o.groups = groups;
    queue(o);
}

void pass::emit(const char* name, int il, rows r, int64_t n_cols) {
    finish();
    char full[96];
    if (il >= 0) std::snprintf(full, sizeof full, "%s-%d", name, il);
    else std::snprintf(full, sizeof full, "%s", name);
    (*cb_)(tensor_dump{full, n_, n_cols, r.p, r.s});
}

// ---------------------------------------------------------------------------
// blocks
// ---------------------------------------------------------------------------

void decoder_input(pass& p, const model& m, const ubatch& ub, rows x) {
    const hparams& hp = m.hp();
    if (ub.embd) {
        p.copy(x, rows{const_cast<float*>(ub.embd), hp.n_embd}, hp.n_embd);
        p.tap("inp_embd", -1, x, hp.n_embd);
        // Given embeddings (images enter this way) are not scaled, except
        // where llama.cpp scales every input (granite).
        if (hp.v.embd_scale_inputs && hp.v.embd_scale != 1.0f) {
            p.scale(x, hp.n_embd, hp.v.embd_scale);
            p.tap("inp_scaled", -1, x, hp.n_embd);
        }
        return;
    }
    p.get_rows(m.weights().token_embd, ub.tokens, x);
    p.tap("inp_embd", -1, x, hp.n_embd);
    if (hp.v.embd_scale != 1.0f) {
        p.scale(x, hp.n_embd, hp.v.embd_scale);
        p.tap("inp_scaled", -1, x, hp.n_embd);
    }
}

void encoder_input(pass& p, const model& m, const ubatch& ub, rows x, rows tmp) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    const int64_t E = hp.n_embd;
    p.get_rows(W.token_embd, ub.tokens, x);
    p.add_bias(x, W.token_type0);
    if (W.position_embd.data) {
        p.get_rows(W.position_embd, ub.pos, tmp);
        p.add(x, tmp, E);
    }
    p.tap("inp_embd", -1, x, E);
    p.norm(norm_kind::layer, x, x, W.token_embd_norm, W.token_embd_norm_b, E, hp.norm_eps);
    p.tap("inp_norm", 0, x, E);  // llama.cpp names it for layer 0
}

void qkv_block(pass& p, const hparams& hp, const layer_weights& L, int il, rows in, rows qkv, const float* cos_sin) {
    const int64_t nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v();
    const rows q = qkv, k = qkv.at(nq), v = qkv.at(nq + nk);
    if (hp.v.qkv_fused) {
        p.matmul(L.wqkv, in, qkv);  // q | k | v
    } else if (hp.v.attn_gate) {
        // Per head q then its output gate: q to qkv, the gates to attn_gate.
        const int64_t hd = hp.head_dim_k;
        const rows full{p.state().q_full.f32(), 2 * nq};
        p.matmul(L.wq, in, full);
        p.copy_groups(q, hd, full, 2 * hd, hd, hp.n_head);
        p.copy_groups(rows{p.state().attn_gate.f32(), nq}, hd, full.at(hd), 2 * hd, hd, hp.n_head);
        p.tap("gate", il, rows{p.state().attn_gate.f32(), nq}, nq);
        p.matmul(L.wk, in, k);
        p.matmul(L.wv, in, v);
    } else {
        p.matmul(L.wq, in, q);
        // No attn_k: the layer reads another's cache (Gemma 4's shared KV)
        // and has queries only. No attn_v (v_from_k): the keys' projection,
        // before their norm, is also the values.
        if (L.wk.data) p.matmul(L.wk, in, k);
        if (L.wv.data) p.matmul(L.wv, in, v);
        else if (L.wk.data && hp.v.v_from_k) p.copy(v, k, nk);
    }
    p.add_bias(qkv, L.bqkv);
    p.add_bias(q, L.bq);
    p.add_bias(k, L.bk);
    p.add_bias(v, L.bv);
    if (hp.v.qk_norm_full) {  // one RMS norm over all heads of q, one over all of k
        p.norm(norm_kind::rms, q, q, L.q_norm, {}, nq, hp.norm_eps);
        p.norm(norm_kind::rms, k, k, L.k_norm, {}, nk, hp.norm_eps);
        p.tap("Qcur_normed", il, q, nq);
        p.tap("Kcur_normed", il, k, nk);
    } else if (!L.q_norm.empty()) {  // qk_norm, or qk_norm_optional with the norms in the file
        p.head_norm(q, hp.n_head, hp.head_dim_k, L.q_norm, hp.norm_eps);
        if (!L.k_norm.empty()) p.head_norm(k, hp.n_head_kv, hp.head_dim_k, L.k_norm, hp.norm_eps);
        p.tap("Qcur_normed", il, q, nq);
        p.tap("Kcur_normed", il, k, nk);
    }
    if (hp.v.v_norm && L.wk.data) {  // Gemma 4: each value head RMS-normed, no weight
        p.head_norm(v, hp.n_head_kv, hp.head_dim_v, {}, hp.norm_eps);
        p.tap("Vcur_normed", il, v, nv);
    }
    if (cos_sin && hp.rope.n_rot > 0) {
        p.rope(q, hp.n_head, hp.head_dim_k, hp.rope, cos_sin);
        p.rope(k, hp.n_head_kv, hp.head_dim_k, hp.rope, cos_sin);
    }
    p.tap("Qcur", il, q, nq);
    p.tap("Kcur", il, k, nk);
    p.tap("Vcur", il, v, nv);
    if (hp.v.scale_q) p.scale(q, nq, hp.attn_scale);
}

attention_args attention_setup(const hparams& hp, const run_state& rs, int mask, rows qkv, rows out, int64_t n,
                               const kv_source& kv) {
    attention_args a;
    a.n_tok = (int)n;
    a.n_head = (int)hp.n_head;
    a.n_head_kv = (int)hp.n_head_kv;
    a.head_dim_k = (int)hp.head_dim_k;
    a.head_dim_v = (int)hp.head_dim_v;
    a.q = qkv.p;
    a.q_stride = qkv.s;
    a.out = out.p;
    a.out_stride = out.s;
    a.type_k = kv.type_k;
    a.type_v = kv.type_v;
    a.k = kv.k;
    a.k_row_bytes = kv.k_row_bytes;
    a.v = kv.v;
    a.v_row_bytes = kv.v_row_bytes;
    a.cell_pos = kv.cell_pos;
    a.mask = rs.mask[mask].data();
    a.mask_words = rs.mask_words;
    a.lo = rs.mask_lo[mask].data();
    a.hi = rs.mask_hi[mask].data();
    a.scale = hp.v.scale_q ? 1.0f : hp.attn_scale;
    a.softcap = hp.attn_softcap;
    return a;
}

void cached_attention(pass& p, const hparams& hp, kv_cache& kv, int il, const int32_t* cells, const run_state& rs,
                      int mask, rows qkv, rows out, const std::vector<float>& sinks) {
    const int64_t nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v(), n_att = hp.n_head * hp.head_dim_v;
    const rows q = qkv, k = qkv.at(nq), v = qkv.at(nq + nk);
    // A layer that reuses an earlier layer's cache (hparams::kv_layer) stores nothing.
    const int kl = hp.kv_layer_of(il);
    const bool store = kl == il;
    p.enter_kv();
    if (kv.rot_k()) {
        p.hadamard(q, nq, kv.rot_k());
        if (store) p.hadamard(k, nk, kv.rot_k());
    }
    if (kv.rot_v() && store) p.hadamard(v, nv, kv.rot_v());
    if (store) {
        p.kv_store(kv.k(il), kv.k_row_bytes(il), kv.type_k(), k, nk, cells);
        p.kv_store(kv.v(il), kv.v_row_bytes(il), kv.type_v(), v, nv, cells);
    }
    kv_source src;
    src.type_k = kv.type_k();
    src.type_v = kv.type_v();
    src.k = kv.k(kl);
    src.k_row_bytes = kv.k_row_bytes(kl);
    src.v = kv.v(kl);
    src.v_row_bytes = kv.v_row_bytes(kl);
    src.cell_pos = kv.positions();
    attention_args a = attention_setup(hp, rs, mask, qkv, out, p.n(), src);
    a.sinks = sinks.empty() ? nullptr : sinks.data();
    p.attention(a);
    if (kv.rot_v()) p.hadamard(out, n_att, kv.rot_v());
    p.leave_kv();
    p.tap("kqv_out", il, out, n_att);
}

void mla_attention(pass& p, const hparams& hp, const layer_weights& L, int il, kv_cache& kv, const int32_t* cells,
                   run_state& rs, int mask, rows in, rows qkv, rows att, const float* cos_sin, rows out) {
    const mla_hparams& m = hp.mla;
    const int64_t n = p.n(), H = hp.n_head, R = hp.rope.n_rot, C = m.kv_lora;
    const int64_t dk = hp.head_dim_k;  // C + R: one absorbed query head, one cache row
    const int64_t nope = m.head_k - R;
    const rows q{rs.mla_q.f32(), H * m.head_k};        // (n, H, nope | R)
    const rows qcur{rs.mla_qcur.f32(), H * dk};        // (n, H, C | R) absorbed queries
    const rows kcur = qkv.at(hp.n_q());                // (n, C | R) the cache row
    const auto* heads = static_cast<const int32_t*>(rs.mla_heads.data());
    // q, through its low-rank bottleneck where the model has one
    if (L.wq_a.data) {
        const rows qa{rs.mla_qa.f32(), m.q_lora};
        p.matmul(L.wq_a, in, qa);
        p.norm(norm_kind::rms, qa, qa, L.q_a_norm, {}, m.q_lora, hp.norm_eps);
        p.matmul(L.wq_b, qa, q);
    } else {
        p.matmul(L.wq, in, q);
    }
    p.tap("q", il, q, H * m.head_k);
    // the latent (normed) and the shared RoPE part: the cache row itself
    p.matmul(L.wkv_a, in, kcur);
    p.norm(norm_kind::rms, kcur, kcur, L.kv_a_norm, {}, C, hp.norm_eps);
    // absorbed queries: each head's no-RoPE part times its attn_k_b, then its RoPE part beside it
    p.moe_matmul(L.wk_b, rows{q.p, m.head_k}, 1, heads, n * H, rows{qcur.p, dk}, {});
    p.copy_groups(qcur.at(C), dk, q.at(nope), m.head_k, R, H);
    if (cos_sin && R > 0) {
        p.rope(qcur.at(C), H, dk, hp.rope, cos_sin);
        p.rope(kcur.at(C), 1, dk, hp.rope, cos_sin);
    }
    p.tap("Qcur", il, qcur, H * dk);
    p.tap("Kcur", il, kcur, dk);
    // one cache row per token; the values are its first C elements
    p.enter_kv();
    p.kv_store(kv.k(il), kv.k_row_bytes(il), kv.type_k(), kcur, dk, cells);
    kv_source src;
    src.type_k = src.type_v = kv.type_k();
    src.k = src.v = kv.k(il);
    src.k_row_bytes = src.v_row_bytes = kv.k_row_bytes(il);
    src.cell_pos = kv.positions();
    p.attention(attention_setup(hp, rs, mask, qcur, att, n, src));
    p.leave_kv();
    p.tap("kqv_out", il, att, H * C);
    // each head's output from the latent: attn_v_b per head
    p.moe_matmul(L.wv_b, rows{att.p, C}, 1, heads, n * H, rows{out.p, m.head_v}, {});
    p.tap("kqv_out_v", il, out, H * m.head_v);
}

void attn_output(pass& p, const hparams& hp, const layer_weights& L, int il, rows att, rows out) {
    p.matmul(L.wo, att, out);
    p.add_bias(out, L.bo);
    p.tap("attn_out", il, out, hp.n_embd);
}

void ffn_block(pass& p, const hparams& hp, const layer_weights& L, int il, rows in, rows ffn, rows out) {
    const int64_t n_ff = hp.n_ff;
    const rows g = ffn, u = ffn.at(n_ff);
    const bool gated = hp.v.gate_up_fused || L.ffn_gate.data;
    if (hp.v.gate_up_fused) {
        p.matmul(L.ffn_up, in, ffn);  // gate | up
    } else if (gated) {
        p.matmul(L.ffn_gate, in, g);
        p.add_bias(g, L.ffn_gate_b);
        p.matmul(L.ffn_up, in, u);
    } else {
        p.matmul(L.ffn_up, in, g);  // no gate: the activation acts on up itself
    }
    p.add_bias(gated ? u : g, L.ffn_up_b);
    p.act_mul(hp.v.act, g, gated ? u.p : nullptr, u.s, n_ff);
    p.matmul(L.ffn_down, g, out);
    p.add_bias(out, L.ffn_down_b);
    p.tap("ffn_out", il, out, hp.n_embd);
}

void moe_ffn_block(pass& p, const hparams& hp, const layer_weights& L, int il, rows in, run_state& rs, rows out,
                   const rows* router_in) {
    const moe_hparams& m = hp.moe;
    const int64_t n = p.n(), E = hp.n_embd, F = m.n_ff_exp, k = m.n_expert_used;
    const rows logits{rs.moe_logits.f32(), m.n_expert};
    auto* ids = static_cast<int32_t*>(rs.moe_ids.data());
    float* weights = rs.moe_weights.f32();
    p.matmul(L.ffn_gate_inp, router_in ? *router_in : in, logits);
    p.tap("ffn_moe_logits", il, logits, m.n_expert);
    p.add_bias(logits, L.ffn_gate_inp_b);  // (llama.cpp names the sum ffn_moe_logits_biased)
    moe_route_args a;
    a.n_tok = n;
    a.n_expert = m.n_expert;
    a.k = (int)k;
    a.logits = logits.p;
    a.logits_stride = logits.s;
    a.bias = L.exp_probs_b.empty() ? nullptr : L.exp_probs_b.data();
    a.gating = m.gating;
    a.n_group = m.n_group;
    a.n_group_used = m.n_group_used;
    a.norm = m.norm_w;
    a.scale = m.w_scale;
    a.expert_scale = opt(L.ffn_down_exps_s);
    a.ids = ids;
    a.weights = weights;
    p.moe_route(a);

    // Every (token, expert) slot: gate and up read the token's row, down the slot's.
    const rows ffn{rs.moe_ffn.f32(), 2 * F}, g = ffn, u = ffn.at(F);
    const rows down{rs.moe_out.f32(), E};
    const bool fused = L.ffn_gate_up_exps.present();
    const bool gated = fused || L.ffn_gate_exps.present();
    if (fused) {
        p.moe_matmul(L.ffn_gate_up_exps, in, (int)k, ids, n * k, ffn, {});  // gate | up, as ffn holds them
    } else {
        if (gated) p.moe_matmul(L.ffn_gate_exps, in, (int)k, ids, n * k, g, L.ffn_gate_exps_b);
        p.moe_matmul(L.ffn_up_exps, in, (int)k, ids, n * k, gated ? u : g, L.ffn_up_exps_b);
    }
    p.over_rows(n * k, [&] {
        if (m.act == ffn_act::swiglu_oai) p.swiglu_oai(g, u.p, u.s, F, m.swiglu_alpha, m.swiglu_limit);
        else p.act_mul(m.act, g, gated ? u.p : nullptr, u.s, F);
    });
    p.moe_matmul(L.ffn_down_exps, g, 1, ids, n * k, down, L.ffn_down_exps_b);
    p.weighted_sum(out, down.p, weights, (int)k, E);
    p.tap("ffn_moe_out", il, out, E);

    if (L.ffn_up_shexp.data) {
        // The shared expert: a dense gated FFN every token runs, added to the experts' sum.
        const int64_t S = m.n_ff_shexp;
        const rows sg{rs.ffn.f32(), 2 * S}, su = sg.at(S);
        const rows shared = down;  // the slot rows are summed already: reuse their first n rows
        p.matmul(L.ffn_gate_shexp, in, sg);
        p.matmul(L.ffn_up_shexp, in, su);
        p.act_mul(hp.v.act, sg, su.p, su.s, S);
        p.matmul(L.ffn_down_shexp, sg, shared);
        if (L.ffn_gate_inp_shexp.data) {
            // Qwen3.5 / Qwen3-Next: the shared expert's output times sigmoid(its gate · x)
            const rows gate{rs.shexp_gate.f32(), 1};
            p.matmul(L.ffn_gate_inp_shexp, in, gate);
            p.sigmoid_mul(gate, rows{nullptr, 0}, 1);
            p.scale_by(shared, gate, E);
        }
        p.tap("ffn_shexp_out", il, shared, E);
        p.add(out, shared, E);
    }
    p.tap("ffn_out", il, out, E);
}

void dense_and_moe_ffn_block(pass& p, const hparams& hp, const hparams& lh, const layer_weights& L, int il, rows x,
                             rows xb, run_state& rs, rows out) {
    const int64_t E = hp.n_embd;
    const float eps = hp.norm_eps;
    // The dense branch, on xb = ffn_norm(x).
    ffn_block(p, lh, L, il, xb, rows{rs.ffn.f32(), 2 * hp.n_ff}, out);  // (decoder.cpp's stride)
    p.norm(norm_kind::rms, out, out, L.ffn_post_norm_1, {}, E, eps);
    p.tap("ffn_mlp", il, out, E);
    // The router's input: rms_norm(x) / sqrt(E) * scale, in that order (llama.cpp's rounding).
    const rows r{rs.moe_sum.f32(), E};
    p.norm(norm_kind::rms, r, x, {}, {}, E, eps);
    p.scale(r, E, 1.0f / std::sqrt((float)E));
    p.mul(r, rows{const_cast<float*>(L.ffn_gate_inp_s.data()), 0}, E);
    // The experts' branch, on pre_ffw_norm_2(x); its sum goes into r, which
    // the router has read by then.
    p.norm(norm_kind::rms, xb, x, L.ffn_pre_norm_2, {}, E, eps);
    p.tap("ffn_norm_2", il, xb, E);
    moe_ffn_block(p, hp, L, il, xb, rs, r, &r);
    p.norm(norm_kind::rms, r, r, L.ffn_post_norm_2, {}, E, eps);
    p.tap("ffn_moe", il, r, E);
    p.add(out, r, E);
    p.tap("ffn_moe_combined", il, out, E);
}

void per_layer_inputs(pass& p, const model& m, const ubatch& ub, rows x, run_state& rs) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    const int64_t P = hp.n_embd_per_layer, NP = hp.n_layer * P;
    const rows tok{rs.ple.f32(), NP}, out{rs.ple_proj.f32(), NP};
    p.get_rows(W.per_layer_tok_embd, ub.tokens ? ub.tokens : rs.ple_zero_ids.data(), tok);
    p.scale(tok, NP, std::sqrt((float)P));
    p.tap("inp_per_layer_selected", -1, tok, NP);
    p.matmul(W.per_layer_model_proj, x, out);
    p.scale(out, NP, 1.0f / std::sqrt((float)hp.n_embd));
    p.head_norm(out, hp.n_layer, P, W.per_layer_proj_norm, hp.norm_eps);
    p.tap("per_layer_proj", -1, out, NP);
    p.add(out, tok, NP);
    p.scale(out, NP, 1.0f / std::sqrt(2.0f));
    p.tap("inp_per_layer", -1, out, NP);
}

void per_layer_embedding(pass& p, const hparams& hp, const layer_weights& L, int il, rows x, rows inp, rows gate,
                         rows out) {
    const int64_t E = hp.n_embd, P = hp.n_embd_per_layer;
    p.tap("pe_in", il, x, E);
    p.matmul(L.ple_gate, x, gate);
    p.act_mul(ffn_act::gelu, gate, inp.p + il * P, inp.s, P);  // GELU(gate) * the layer's input
    p.matmul(L.ple_proj, gate, out);
    p.norm(norm_kind::rms, out, out, L.ple_norm, {}, E, hp.norm_eps);
    p.tap("per_layer_embd_out", il, out, E);
    p.add(x, out, E);
}

void output_head(pass& p, const model& m, rows h, float* logits) {
    const hparams& hp = m.hp();
    const rows y{logits, hp.n_vocab};
    p.matmul(m.weights().output, h, y);
    if (hp.logit_scale != 0.0f) p.scale(y, hp.n_vocab, 1.0f / hp.logit_scale);  // as llama.cpp: times the reciprocal
    if (hp.final_softcap > 0.0f) p.softcap(y, hp.n_vocab, hp.final_softcap);
    p.tap("result_output", -1, y, hp.n_vocab);
}

}  // namespace lp

// delta_net.cpp — the gated delta-net layer (blocks.h delta_net_block), as
// llama.cpp's Qwen3.5 graph computes it, on the backend seam:
//   mixed = W_qkv x (q | k | v channels), z = W_z x,
//   beta = sigmoid(W_beta x), g = softplus(W_alpha x + dt) * a   (a = -exp(A_log)),
//   c = silu(conv(mixed)) with the sequence's tail, q = l2(c_q), k = l2(c_k), v = c_v,
//   o = gated delta rule(q, k, v, g, beta) with the sequence's state,
//   out = W_out (rms_norm(o) * ssm_norm * silu(z))   per value head.
// The L2 norm is llama.cpp's: an RMS norm with eps / n, times 1 / sqrt(n).
// Not here: the ops (backend.h), the state memory (recurrent_state.h).
#include <cmath>

#include "../recurrent_state.h"
#include "blocks.h"

namespace lp {

void delta_net_block(pass& p, const hparams& hp, const layer_weights& L, int il, const ubatch& ub, rows in, rows out) {
    const ssm_hparams& sm = hp.ssm;
    run_state& rs = p.state();
    if (!ub.rstate || !ub.seq) throw std::logic_error("delta_net_block: the micro-batch has no recurrent state");
    recurrent_state& st = *ub.rstate;
    const int64_t C = sm.conv_dim(), K = sm.key_dim(), V = sm.value_dim(), S = sm.d_state;
    const int64_t Hv = sm.n_head_v, Hk = sm.n_head_k;
    const rows mixed{rs.dn_in.f32(), C}, conv{rs.dn_conv.f32(), C};
    const rows z{rs.dn_z.f32(), V}, o{rs.dn_out.f32(), V};
    const rows g{rs.dn_gb.f32(), 2 * Hv}, beta = g.at(Hv);

    p.matmul(L.ssm_in, in, mixed);
    p.tap("linear_attn_qkv_mixed", il, mixed, C);
    p.matmul(L.ssm_z, in, z);
    p.tap("z", il, z, V);
    p.matmul(L.ssm_beta, in, beta);
    p.sigmoid_mul(beta, rows{nullptr, 0}, Hv);
    p.matmul(L.ssm_alpha, in, g);
    p.softplus_mul(g, L.ssm_dt, L.ssm_a, Hv);
    p.tap("gate", il, g, Hv);

    ssm_conv_args ca;
    ca.n_ch = C;
    ca.d_conv = (int)sm.d_conv;
    ca.x = mixed.p;
    ca.x_stride = mixed.s;
    ca.y = conv.p;
    ca.y_stride = conv.s;
    ca.w = L.ssm_conv1d.data();
    ca.state = st.conv(il);
    ca.state_stride = st.conv_floats();
    ca.slot = ub.seq;
    p.ssm_conv(ca);
    p.act_mul(ffn_act::silu, conv, nullptr, 0, C);
    p.tap("conv_output_silu", il, conv, C);
    // L2 norms of every q and k head (q's and k's heads are adjacent: 2 Hk groups of S)
    p.head_norm(conv, 2 * Hk, S, {}, hp.norm_eps / (float)S);
    p.scale(conv, 2 * K, 1.0f / std::sqrt((float)S));

    gated_delta_args da;
    da.n_head_k = (int)Hk;
    da.n_head_v = (int)Hv;
    da.head_dim = (int)S;
    da.q = conv.p;
    da.k = conv.p + K;
    da.qk_stride = conv.s;
    da.v = conv.p + 2 * K;
    da.v_stride = conv.s;
    da.g = g.p;
    da.beta = beta.p;
    da.gb_stride = g.s;
    da.out = o.p;
    da.out_stride = o.s;
    da.state = st.delta(il);
    da.state_stride = st.delta_floats();
    da.slot = ub.seq;
    da.scale = 1.0f / std::sqrt((float)S);
    p.gated_delta(da);
    p.tap("attn_output", il, o, V);

    // rms_norm(o) * w per value head, times silu(z): z = silu(z) * normed
    p.head_norm(o, Hv, S, L.ssm_norm, hp.norm_eps);
    p.act_mul(ffn_act::silu, z, o.p, o.s, V);
    p.tap("final_output", il, z, V);
    p.matmul(L.ssm_out, z, out);
    p.tap("linear_attn_out", il, out, hp.n_embd);
}

}  // namespace lp

// mamba2.cpp — the Mamba-2 layer (blocks.h mamba2_block), as llama.cpp's
// build_mamba2_layer computes it, on the backend seam:
//   z | xBC | dt = W_in · in                 (d_inner | d_inner + 2 G N | H)
//   xBC = silu(conv(xBC) + conv_b)           (the sequence's tail; x | B | C after it)
//   y = selective scan(x, dt + dt_b, A, B, C) + D x   per head (backend.h ssm_scan)
//   out = W_out · (rms_norm per group(y * silu(z)) * norm_w)
// Not here: the ops (backend.h), the state memory (recurrent_state.h).
#include "../recurrent_state.h"
#include "blocks.h"

namespace lp {

void mamba2_block(pass& p, const hparams& hp, const layer_weights& L, int il, const ubatch& ub, rows in, rows out) {
    const ssm_hparams& sm = hp.ssm;
    run_state& rs = p.state();
    if (!ub.rstate || !ub.seq) throw std::logic_error("mamba2_block: the micro-batch has no recurrent state");
    recurrent_state& st = *ub.rstate;
    const int64_t Di = sm.d_inner, C = sm.conv_dim(), H = sm.n_head_v, G = sm.n_head_k, N = sm.d_state;
    const rows zxbcdt{rs.dn_in.f32(), sm.in_dim()};  // (n, in_dim) z | xBC | dt
    const rows z = zxbcdt, xbc = zxbcdt.at(Di), dt = zxbcdt.at(Di + C);
    const rows conv{rs.dn_conv.f32(), C};             // (n, C) x | B | C after the convolution
    const rows y{rs.dn_out.f32(), Di};                // (n, d_inner)

    p.matmul(L.ssm_in, in, zxbcdt);
    p.tap("mamba2_in_proj", il, zxbcdt, sm.in_dim());

    ssm_conv_args ca;
    ca.n_ch = C;
    ca.d_conv = (int)sm.d_conv;
    ca.x = xbc.p;
    ca.x_stride = xbc.s;
    ca.y = conv.p;
    ca.y_stride = conv.s;
    ca.w = L.ssm_conv1d.data();
    ca.state = st.conv(il);
    ca.state_stride = st.conv_floats();
    ca.slot = ub.seq;
    p.ssm_conv(ca);
    p.add_bias(conv, L.ssm_conv1d_b);
    p.act_mul(ffn_act::silu, conv, nullptr, 0, C);
    p.tap("mamba2_conv", il, conv, C);
    p.add_bias(dt, L.ssm_dt);

    ssm_scan_args sa;
    sa.n_head = (int)H;
    sa.head_dim = (int)(Di / H);
    sa.d_state = (int)N;
    sa.n_group = (int)G;
    sa.x = conv.p;
    sa.x_stride = conv.s;
    sa.dt = dt.p;
    sa.dt_stride = dt.s;
    sa.A = L.ssm_a.data();
    sa.B = conv.p + Di;
    sa.C = conv.p + Di + G * N;
    sa.bc_stride = conv.s;
    sa.D = L.ssm_d.data();
    sa.y = y.p;
    sa.y_stride = y.s;
    sa.state = st.delta(il);
    sa.state_stride = st.delta_floats();
    sa.slot = ub.seq;
    p.ssm_scan(sa);
    p.tap("mamba2_y_add_d", il, y, Di);

    // z = silu(z) * y, RMS-normed per group, times the norm's weight
    p.act_mul(ffn_act::silu, z, y.p, y.s, Di);
    p.head_norm(z, G, Di / G, {}, hp.norm_eps);
    p.mul(z, rows{const_cast<float*>(L.ssm_norm.data()), 0}, Di);
    p.tap("mamba2_out_norm", il, z, Di);
    p.matmul(L.ssm_out, z, out);
    p.tap("mamba2_out", il, out, hp.n_embd);
}

}  // namespace lp

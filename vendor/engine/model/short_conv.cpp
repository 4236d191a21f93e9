// short_conv.cpp — LFM2's gated short-convolution layer (blocks.h
// short_conv_block), as llama.cpp's LFM2 graph computes it, on the backend seam:
//   B | C | x = W_in · in              (three n_embd-wide chunks of one projection)
//   y = C * conv(B * x)                (depthwise causal, l_cache taps, with the sequence's tail)
//   out = W_out · y
// No activation and no bias anywhere: the gates are the products with B and C.
// Not here: the convolution op (backend.h ssm_conv), the state memory (recurrent_state.h).
#include "../recurrent_state.h"
#include "blocks.h"

namespace lp {

void short_conv_block(pass& p, const hparams& hp, const layer_weights& L, int il, const ubatch& ub, rows in, rows out) {
    const ssm_hparams& sm = hp.ssm;
    run_state& rs = p.state();
    if (!ub.rstate || !ub.seq) throw std::logic_error("short_conv_block: the micro-batch has no recurrent state");
    recurrent_state& st = *ub.rstate;
    const int64_t C = sm.conv_dim();
    const rows bcx{rs.dn_in.f32(), 3 * C};   // (n, 3 C) B | C | x
    const rows b = bcx, c = bcx.at(C), x = bcx.at(2 * C);
    const rows y{rs.dn_conv.f32(), C};       // (n, C)

    p.matmul(L.ssm_in, in, bcx);
    p.tap("model.layers.{}.conv.in_proj", il, bcx, 3 * C);
    p.mul(b, x, C);  // B * x: the convolution's input, in B's columns

    ssm_conv_args ca;
    ca.n_ch = C;
    ca.d_conv = (int)sm.d_conv;
    ca.x = b.p;
    ca.x_stride = b.s;
    ca.y = y.p;
    ca.y_stride = y.s;
    ca.w = L.ssm_conv1d.data();
    ca.state = st.conv(il);
    ca.state_stride = st.conv_floats();
    ca.slot = ub.seq;
    p.ssm_conv(ca);
    p.tap("model.layers.{}.conv.conv", il, y, C);
    p.mul(y, c, C);
    p.matmul(L.ssm_out, y, out);
    p.tap("model.layers.{}.conv.out_proj", il, out, hp.n_embd);
}

}  // namespace lp

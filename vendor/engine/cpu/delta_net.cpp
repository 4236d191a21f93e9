// delta_net.cpp — see delta_net.h. Plain loops in llama.cpp's summation order
// (the convolution sums its d_conv products left to right in float; the delta
// rule's dot products run over the state's contiguous rows), so results stay
// within rounding of its CPU backend.
#include "delta_net.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace lp {

void ssm_conv_ref(const ssm_conv_args& a, int64_t c0, int64_t c1) {
    const int d = a.d_conv, nt = d - 1;  // nt: the tail kept per channel
    float win[64];                       // d_conv is small (4 in every file seen; checked at load)
    for (int64_t t = 0; t < a.n_tok; ++t) {
        const float* x = a.x + t * a.x_stride;
        float* y = a.y + t * a.y_stride;
        float* st = a.state + (int64_t)a.slot[t] * a.state_stride;
        for (int64_t c = c0; c < c1; ++c) {
            float* tail = st + c * nt;
            const float* w = a.w + c * d;
            std::memcpy(win, tail, sizeof(float) * (size_t)nt);
            win[nt] = x[c];
            float s = 0.0f;
            for (int i = 0; i < d; ++i) s += win[i] * w[i];
            y[c] = s;
            std::memcpy(tail, win + 1, sizeof(float) * (size_t)nt);  // the window moves on by one
        }
    }
}

void gated_delta_ref(const gated_delta_args& a, int h0, int h1) {
    const int64_t S = a.head_dim;
    std::vector<float> delta((size_t)S);
    for (int h = h0; h < h1; ++h) {
        const int hk = h % a.n_head_k;
        for (int64_t t = 0; t < a.n_tok; ++t) {
            float* M = a.state + (int64_t)a.slot[t] * a.state_stride + (int64_t)h * S * S;  // M[j*S + i] = S[i][j]
            const float* q = a.q + t * a.qk_stride + hk * S;
            const float* k = a.k + t * a.qk_stride + hk * S;
            const float* v = a.v + t * a.v_stride + h * S;
            const float decay = std::exp(a.g[t * a.gb_stride + h]);
            const float beta = a.beta[t * a.gb_stride + h];
            float* o = a.out + t * a.out_stride + h * S;
            for (int64_t e = 0; e < S * S; ++e) M[e] *= decay;
            for (int64_t j = 0; j < S; ++j) {  // d[j] = (v[j] - sum_i S[i][j] k[i]) * beta
                const float* m = M + j * S;
                float s = 0.0f;
                for (int64_t i = 0; i < S; ++i) s += m[i] * k[i];
                delta[(size_t)j] = (v[j] - s) * beta;
            }
            for (int64_t j = 0; j < S; ++j) {  // S[i][j] += k[i] d[j]
                float* m = M + j * S;
                const float dj = delta[(size_t)j];
                for (int64_t i = 0; i < S; ++i) m[i] += k[i] * dj;
            }
            for (int64_t j = 0; j < S; ++j) {  // o[j] = sum_i S[i][j] q[i] * scale
                const float* m = M + j * S;
                float s = 0.0f;
                for (int64_t i = 0; i < S; ++i) s += m[i] * q[i];
                o[j] = s * a.scale;
            }
        }
    }
}

}  // namespace lp

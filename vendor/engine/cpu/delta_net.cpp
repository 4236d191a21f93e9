// delta_net.cpp — see delta_net.h. The reference loops keep llama.cpp's
// summation order (the convolution sums its d_conv products left to right in
// float; the delta rule's dot products run over the state's contiguous rows).
// The gated delta rule the backend runs (gated_delta) makes, where the CPU has
// AVX2, two passes over a head's state per token instead of the reference's
// four (the decay folded into the first dot product and into the update, the
// read-out fused with the update) with 8-wide vectors: results stay within
// rounding of the reference, which runs elsewhere; long runs of one sequence
// take the chunked form instead (delta_chunked.cpp). Mamba-2's scan (ssm_scan)
// runs its state rows with AVX2 / AVX-512 / NEON vectors where the level has
// them (scan_row_*), within rounding of its reference likewise.
#include "delta_net.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "../common.h"
#include "features.h"

#if defined(LP_HAVE_AVX2) || defined(LP_HAVE_AVX512)
#include <immintrin.h>
#endif
#if defined(LP_HAVE_NEON)
#include <arm_neon.h>
#endif

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

namespace {

// gated_delta_ref's loops over rows [t0, t1).
void delta_rows_ref(const gated_delta_args& a, int h0, int h1, int64_t t0, int64_t t1) {
    const int64_t S = a.head_dim;
    std::vector<float> delta((size_t)S);
    for (int h = h0; h < h1; ++h) {
        const int hk = h % a.n_head_k;
        for (int64_t t = t0; t < t1; ++t) {
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

}  // namespace

void gated_delta_ref(const gated_delta_args& a, int h0, int h1) { delta_rows_ref(a, h0, h1, 0, a.n_tok); }

namespace {

#if defined(LP_HAVE_AVX2)
LP_TARGET_AVX2 inline float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

// One token of one head, gated_delta_ref's four steps in two passes: state M
// (M[j*S + i] = S[i][j]) decays, takes k d^T with d = (v - (decay M)^T k) beta,
// and o = M^T q * scale; S a multiple of 16, two 8-wide accumulators per row.
// `delta`: S floats of scratch.
LP_TARGET_AVX2 void delta_step_avx2(float* M, const float* q, const float* k, const float* v, float decay,
                                    float beta, float scale, float* o, float* delta, int64_t S) {
    for (int64_t j = 0; j < S; ++j) {
        const float* m = M + j * S;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int64_t i = 0; i < S; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(m + i + 8), _mm256_loadu_ps(k + i + 8), a1);
        }
        delta[j] = (v[j] - decay * hsum8(_mm256_add_ps(a0, a1))) * beta;
    }
    const __m256 vd = _mm256_set1_ps(decay);
    for (int64_t j = 0; j < S; ++j) {
        float* m = M + j * S;
        const __m256 dj = _mm256_set1_ps(delta[j]);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int64_t i = 0; i < S; i += 16) {
            const __m256 m0 = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), vd, _mm256_mul_ps(_mm256_loadu_ps(k + i), dj));
            const __m256 m1 =
                _mm256_fmadd_ps(_mm256_loadu_ps(m + i + 8), vd, _mm256_mul_ps(_mm256_loadu_ps(k + i + 8), dj));
            _mm256_storeu_ps(m + i, m0);
            _mm256_storeu_ps(m + i + 8, m1);
            a0 = _mm256_fmadd_ps(m0, _mm256_loadu_ps(q + i), a0);
            a1 = _mm256_fmadd_ps(m1, _mm256_loadu_ps(q + i + 8), a1);
        }
        o[j] = hsum8(_mm256_add_ps(a0, a1)) * scale;
    }
}
#endif

using delta_step_fn = void (*)(float*, const float*, const float*, const float*, float, float, float, float*, float*,
                               int64_t);

// The fused step for this CPU and head size, or null: the reference loops then
// (scalar and NEON builds, odd head sizes).
delta_step_fn pick_step(int64_t S) {
#if defined(LP_HAVE_AVX2)
    if (S % 16 == 0 && isa_at_least(best_isa(), isa::avx2)) return delta_step_avx2;
#endif
    (void)S;
    return nullptr;
}

// The step form over rows [t0, t1): the fused step where the CPU has one,
// else the reference loops.
void delta_rows_step(const gated_delta_args& a, int h0, int h1, int64_t t0, int64_t t1, std::vector<float>& work) {
    const int64_t S = a.head_dim;
    const delta_step_fn step = pick_step(S);
    if (!step) {
        delta_rows_ref(a, h0, h1, t0, t1);
        return;
    }
    if ((int64_t)work.size() < S) work.resize((size_t)S);
    for (int h = h0; h < h1; ++h) {
        const int hk = h % a.n_head_k;
        for (int64_t t = t0; t < t1; ++t) {
            float* M = a.state + (int64_t)a.slot[t] * a.state_stride + (int64_t)h * S * S;
            step(M, a.q + t * a.qk_stride + hk * S, a.k + t * a.qk_stride + hk * S, a.v + t * a.v_stride + h * S,
                 std::exp(a.g[t * a.gb_stride + h]), a.beta[t * a.gb_stride + h], a.scale,
                 a.out + t * a.out_stride + h * S, work.data(), S);
        }
    }
}

}  // namespace

void gated_delta(const gated_delta_args& a, int h0, int h1, const gated_delta_plan& plan, std::vector<float>& work) {
    // Runs of consecutive rows on one slot, in batch order: rows of other
    // slots touch other states, so a run may go whole before the next.
    for (int64_t t0 = 0; t0 < a.n_tok;) {
        int64_t t1 = t0 + 1;
        while (t1 < a.n_tok && a.slot[t1] == a.slot[t0]) ++t1;
        if (t1 - t0 >= plan.min_run) {
            const int64_t need = gated_delta_chunk_floats(a.head_dim, plan.chunk);
            if ((int64_t)work.size() < need) work.resize((size_t)need);
            const isa level = best_isa();
            for (int h = h0; h < h1; ++h) gated_delta_chunked(a, h, t0, t1, plan.chunk, work.data(), level);
        } else {
            delta_rows_step(a, h0, h1, t0, t1, work);
        }
        t0 = t1;
    }
}

void gated_delta(const gated_delta_args& a, int h0, int h1) {
    std::vector<float> work;
    gated_delta(a, h0, h1, gated_delta_plan{}, work);
}

namespace {

// One state row of one head for one token of Mamba-2's scan:
//   s[i] = s[i] * decay + B[i] * x_dt;  returns sum_i s[i] C[i].
// The scalar form is the reference (summed in order); the SIMD forms hold
// 8 / 16 / 4 lanes in two accumulators (any n: a scalar tail), so their sums
// differ from it by float rounding of the partial sums only.
using scan_row_fn = float (*)(float* s, const float* B, const float* C, float decay, float x_dt, int64_t n);

float scan_row_ref(float* s, const float* B, const float* C, float decay, float x_dt, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        s[i] = s[i] * decay + B[i] * x_dt;
        sum += s[i] * C[i];
    }
    return sum;
}

#if defined(LP_HAVE_AVX2)
LP_TARGET_AVX2 float scan_row_avx2(float* s, const float* B, const float* C, float decay, float x_dt, int64_t n) {
    const __m256 vd = _mm256_set1_ps(decay), vx = _mm256_set1_ps(x_dt);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 s0 = _mm256_fmadd_ps(_mm256_loadu_ps(s + i), vd, _mm256_mul_ps(_mm256_loadu_ps(B + i), vx));
        const __m256 s1 =
            _mm256_fmadd_ps(_mm256_loadu_ps(s + i + 8), vd, _mm256_mul_ps(_mm256_loadu_ps(B + i + 8), vx));
        _mm256_storeu_ps(s + i, s0);
        _mm256_storeu_ps(s + i + 8, s1);
        a0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(C + i), a0);
        a1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(C + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 s0 = _mm256_fmadd_ps(_mm256_loadu_ps(s + i), vd, _mm256_mul_ps(_mm256_loadu_ps(B + i), vx));
        _mm256_storeu_ps(s + i, s0);
        a0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(C + i), a0);
    }
    return hsum8(_mm256_add_ps(a0, a1)) + scan_row_ref(s + i, B + i, C + i, decay, x_dt, n - i);
}
#endif

#if defined(LP_HAVE_AVX512)
LP_TARGET_AVX512 float scan_row_avx512(float* s, const float* B, const float* C, float decay, float x_dt, int64_t n) {
    const __m512 vd = _mm512_set1_ps(decay), vx = _mm512_set1_ps(x_dt);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 s0 = _mm512_fmadd_ps(_mm512_loadu_ps(s + i), vd, _mm512_mul_ps(_mm512_loadu_ps(B + i), vx));
        const __m512 s1 =
            _mm512_fmadd_ps(_mm512_loadu_ps(s + i + 16), vd, _mm512_mul_ps(_mm512_loadu_ps(B + i + 16), vx));
        _mm512_storeu_ps(s + i, s0);
        _mm512_storeu_ps(s + i + 16, s1);
        a0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(C + i), a0);
        a1 = _mm512_fmadd_ps(s1, _mm512_loadu_ps(C + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 s0 = _mm512_fmadd_ps(_mm512_loadu_ps(s + i), vd, _mm512_mul_ps(_mm512_loadu_ps(B + i), vx));
        _mm512_storeu_ps(s + i, s0);
        a0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(C + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + scan_row_ref(s + i, B + i, C + i, decay, x_dt, n - i);
}
#endif

#if defined(LP_HAVE_NEON)
float scan_row_neon(float* s, const float* B, const float* C, float decay, float x_dt, int64_t n) {
    const float32x4_t vd = vdupq_n_f32(decay), vx = vdupq_n_f32(x_dt);
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t s0 = vfmaq_f32(vmulq_f32(vld1q_f32(B + i), vx), vld1q_f32(s + i), vd);
        const float32x4_t s1 = vfmaq_f32(vmulq_f32(vld1q_f32(B + i + 4), vx), vld1q_f32(s + i + 4), vd);
        vst1q_f32(s + i, s0);
        vst1q_f32(s + i + 4, s1);
        a0 = vfmaq_f32(a0, s0, vld1q_f32(C + i));
        a1 = vfmaq_f32(a1, s1, vld1q_f32(C + i + 4));
    }
    for (; i + 4 <= n; i += 4) {
        const float32x4_t s0 = vfmaq_f32(vmulq_f32(vld1q_f32(B + i), vx), vld1q_f32(s + i), vd);
        vst1q_f32(s + i, s0);
        a0 = vfmaq_f32(a0, s0, vld1q_f32(C + i));
    }
    return vaddvq_f32(vaddq_f32(a0, a1)) + scan_row_ref(s + i, B + i, C + i, decay, x_dt, n - i);
}
#endif

scan_row_fn pick_scan_row(isa level) {
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) return scan_row_avx512;
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level, isa::avx2)) return scan_row_avx2;
#endif
#if defined(LP_HAVE_NEON)
    if (isa_at_least(level, isa::neon)) return scan_row_neon;
#endif
    (void)level;
    return scan_row_ref;
}

// Heads [h0, h1) of a, token by token, each state row by `row`.
void scan_heads(const ssm_scan_args& a, int h0, int h1, scan_row_fn row) {
    const int64_t P = a.head_dim, N = a.d_state;
    const int heads_per_group = a.n_head / a.n_group;
    for (int h = h0; h < h1; ++h) {
        const int64_t g = h / heads_per_group;
        for (int64_t t = 0; t < a.n_tok; ++t) {
            float* S = a.state + (int64_t)a.slot[t] * a.state_stride + (int64_t)h * P * N;  // S[p * N + s]
            const float d = a.dt[t * a.dt_stride + h];
            const float dt = d > 20.0f ? d : std::log1p(std::exp(d));  // softplus, as llama.cpp clamps it
            const float decay = std::exp(dt * a.A[h]);
            const float* x = a.x + t * a.x_stride + (int64_t)h * P;
            const float* B = a.B + t * a.bc_stride + g * N;
            const float* C = a.C + t * a.bc_stride + g * N;
            float* y = a.y + t * a.y_stride + (int64_t)h * P;
            for (int64_t p = 0; p < P; ++p) {
                const float sum = row(S + p * N, B, C, decay, x[p] * dt, N);
                y[p] = a.D ? sum + x[p] * a.D[h] : sum;
            }
        }
    }
}

}  // namespace

void ssm_scan_ref(const ssm_scan_args& a, int h0, int h1) { scan_heads(a, h0, h1, scan_row_ref); }

void ssm_scan(const ssm_scan_args& a, int h0, int h1, isa level) { scan_heads(a, h0, h1, pick_scan_row(level)); }

void ssm_scan(const ssm_scan_args& a, int h0, int h1) { ssm_scan(a, h0, h1, best_isa()); }

}  // namespace lp

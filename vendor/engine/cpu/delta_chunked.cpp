// delta_chunked.cpp — the gated delta rule's chunked form (delta_net.h
// gated_delta_chunked): for a run of rows of one sequence, C rows at a time,
// the same results as the step form with the sums regrouped into matrix
// products, so the (S x S) state is read twice per chunk instead of twice per
// row, and the work is register-blocked products instead of passes bound by
// memory.
//
// The math, for one value head and one chunk of rows t = 0..n-1 (Gated
// DeltaNet, Yang et al. 2024, the "WY" / UT-transform form). State S (key i,
// value j) at the chunk's start S0; G_t = g_0 + ... + g_t the cumulative log
// decay; gamma_t = exp(G_t). The step form's
//   S_t = exp(g_t) S_{t-1} + k_t d_tᵀ,  d_t = beta_t (v_t - exp(g_t) S_{t-1}ᵀ k_t)
// unrolls to
//   d_t = beta_t (v_t - gamma_t S0ᵀ k_t) - sum_{s<t} beta_t exp(G_t - G_s) (k_t·k_s) d_s
// a unit lower-triangular system (I + A) D = U solved row by row, then
//   o_t  = scale (gamma_t S0ᵀ q_t + sum_{s<=t} exp(G_t - G_s) (q_t·k_s) d_s)
//   S_n  = gamma_{n-1} S0 + sum_s exp(G_{n-1} - G_s) k_s d_sᵀ.
// Only differences G_t - G_s with t >= s are exponentiated (never a division
// by a decay that may have underflowed), and G is summed in double so the
// differences keep float precision however long the chunk.
//
// Row-major products C = c_scale C + A B of four kinds of kernel: the
// scalar reference, AVX2 (6 rows x 16 columns of accumulators), AVX-512
// (6 x 32) and NEON (6 x 16; compiled and checked, never timed here).
// Not here: choosing between the forms (delta_net.cpp gated_delta).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"
#include "delta_net.h"
#include "features.h"

#if defined(LP_HAVE_AVX2) || defined(LP_HAVE_AVX512)
// GCC 12 reports the placeholder inside its own AVX-512 intrinsics as
// uninitialised at -O3 (GCC bug 105593), as attention.cpp notes.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#if defined(LP_HAVE_NEON)
#include <arm_neon.h>
#endif

namespace lp {

namespace {

int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }

// C (m x n) = c_scale * C + A (m x k) * B (k x n), row strides lda / ldb /
// ldc. c_scale 0: C is written without being read (it may hold anything).
using gemm_fn = void (*)(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
                         float* C, int64_t ldc, float c_scale);

void gemm_ref(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, float c_scale) {
    for (int64_t i = 0; i < m; ++i) {
        float* c = C + i * ldc;
        if (c_scale == 0.0f)
            std::fill(c, c + n, 0.0f);
        else
            for (int64_t j = 0; j < n; ++j) c[j] *= c_scale;
        for (int64_t p = 0; p < k; ++p) {
            const float a = A[i * lda + p];
            const float* b = B + p * ldb;
            for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
        }
    }
}

#if defined(LP_HAVE_AVX2)
// R rows x NV vectors of 8 columns, accumulated in registers over k.
template <int R, int NV>
LP_TARGET_AVX2 inline void tile_avx2(int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                                     int64_t ldc, float c_scale) {
    __m256 acc[R][NV];
    const __m256 cs = _mm256_set1_ps(c_scale);
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v)
            acc[r][v] = c_scale == 0.0f ? _mm256_setzero_ps() : _mm256_mul_ps(_mm256_loadu_ps(C + r * ldc + 8 * v), cs);
    for (int64_t p = 0; p < k; ++p) {
        __m256 b[NV];
        for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(B + p * ldb + 8 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const __m256 a = _mm256_broadcast_ss(A + r * lda + p);
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) _mm256_storeu_ps(C + r * ldc + 8 * v, acc[r][v]);
}

template <int NV>
LP_TARGET_AVX2 void rows_avx2(int64_t m, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                              int64_t ldc, float c_scale) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) tile_avx2<6, NV>(k, A + i * lda, lda, B, ldb, C + i * ldc, ldc, c_scale);
    const float* a = A + i * lda;
    float* c = C + i * ldc;
    switch (m - i) {
        case 5: tile_avx2<5, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 4: tile_avx2<4, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 3: tile_avx2<3, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 2: tile_avx2<2, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 1: tile_avx2<1, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        default: break;
    }
}

// n a multiple of 8. Column panels outermost: a panel of B (k x 16) stays in
// L1 while every row block of A passes over it.
LP_TARGET_AVX2 void gemm_avx2(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                              int64_t ldb, float* C, int64_t ldc, float c_scale) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) rows_avx2<2>(m, k, A, lda, B + j, ldb, C + j, ldc, c_scale);
    if (j < n) rows_avx2<1>(m, k, A, lda, B + j, ldb, C + j, ldc, c_scale);
}
#endif

#if defined(LP_HAVE_AVX512)
template <int R, int NV>
LP_TARGET_AVX512 inline void tile_avx512(int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                                         int64_t ldc, float c_scale) {
    __m512 acc[R][NV];
    const __m512 cs = _mm512_set1_ps(c_scale);
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v)
            acc[r][v] =
                c_scale == 0.0f ? _mm512_setzero_ps() : _mm512_mul_ps(_mm512_loadu_ps(C + r * ldc + 16 * v), cs);
    for (int64_t p = 0; p < k; ++p) {
        __m512 b[NV];
        for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(B + p * ldb + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const __m512 a = _mm512_set1_ps(A[r * lda + p]);
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
}

template <int NV>
LP_TARGET_AVX512 void rows_avx512(int64_t m, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
                                  float* C, int64_t ldc, float c_scale) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) tile_avx512<6, NV>(k, A + i * lda, lda, B, ldb, C + i * ldc, ldc, c_scale);
    const float* a = A + i * lda;
    float* c = C + i * ldc;
    switch (m - i) {
        case 5: tile_avx512<5, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 4: tile_avx512<4, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 3: tile_avx512<3, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 2: tile_avx512<2, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 1: tile_avx512<1, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        default: break;
    }
}

// n a multiple of 16.
LP_TARGET_AVX512 void gemm_avx512(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                                  int64_t ldb, float* C, int64_t ldc, float c_scale) {
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) rows_avx512<2>(m, k, A, lda, B + j, ldb, C + j, ldc, c_scale);
    if (j < n) rows_avx512<1>(m, k, A, lda, B + j, ldb, C + j, ldc, c_scale);
}
#endif

#if defined(LP_HAVE_NEON)
template <int R, int NV>
inline void tile_neon(int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                      float c_scale) {
    float32x4_t acc[R][NV];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v)
            acc[r][v] = c_scale == 0.0f ? vdupq_n_f32(0.0f) : vmulq_n_f32(vld1q_f32(C + r * ldc + 4 * v), c_scale);
    for (int64_t p = 0; p < k; ++p) {
        float32x4_t b[NV];
        for (int v = 0; v < NV; ++v) b[v] = vld1q_f32(B + p * ldb + 4 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const float a = A[r * lda + p];
            for (int v = 0; v < NV; ++v) acc[r][v] = vfmaq_n_f32(acc[r][v], b[v], a);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) vst1q_f32(C + r * ldc + 4 * v, acc[r][v]);
}

template <int NV>
void rows_neon(int64_t m, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
               float c_scale) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) tile_neon<6, NV>(k, A + i * lda, lda, B, ldb, C + i * ldc, ldc, c_scale);
    const float* a = A + i * lda;
    float* c = C + i * ldc;
    switch (m - i) {
        case 5: tile_neon<5, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 4: tile_neon<4, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 3: tile_neon<3, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 2: tile_neon<2, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        case 1: tile_neon<1, NV>(k, a, lda, B, ldb, c, ldc, c_scale); break;
        default: break;
    }
}

// n a multiple of 4: 6 rows x 16 columns (24 of the 32 registers), then 4.
void gemm_neon(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
               int64_t ldc, float c_scale) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) rows_neon<4>(m, k, A, lda, B + j, ldb, C + j, ldc, c_scale);
    for (; j < n; j += 4) rows_neon<1>(m, k, A, lda, B + j, ldb, C + j, ldc, c_scale);
}
#endif

// The product for this level; every n it is called with is the head size or
// a multiple of 16, so the vector kernels need the head size to be a
// multiple of their width.
gemm_fn pick_gemm(isa level, int64_t S) {
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512 && S % 16 == 0) return gemm_avx512;
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level, isa::avx2) && S % 8 == 0) return gemm_avx2;
#endif
#if defined(LP_HAVE_NEON)
    if (isa_at_least(level, isa::neon) && S % 4 == 0) return gemm_neon;
#endif
    (void)level;
    (void)S;
    return gemm_ref;
}

}  // namespace

// Work memory, in floats (C rows per chunk, Cp = C rounded up to 16):
//   Z  (S, S)      the state, key-major (Z[i*S + j] = S[i][j])
//   KQ (2C, S)     the chunk's k rows, then its q rows
//   P  (2C, S)     K Z, then Q Z
//   D  (C, S)      U, then the corrected values d
//   KT (S, Cp)     kᵀ (zero past the chunk), later scaled by the decays to the end
//   X  (2C, Cp)    K Kᵀ then Q Kᵀ, turned into -A and the masked, decayed scores
//   beta (C)       per row, later the decays to the chunk's end
int64_t gated_delta_chunk_floats(int64_t S, int chunk) {
    const int64_t C = chunk, Cp = round16(C);
    return S * S + 2 * C * S + 2 * C * S + C * S + S * Cp + 2 * C * Cp + C;
}

void gated_delta_chunked(const gated_delta_args& a, int h, int64_t t0, int64_t t1, int chunk, float* work, isa level) {
    const int64_t S = a.head_dim, C = chunk, Cp = round16(C);
    const gemm_fn gemm = pick_gemm(level, S);
    double G[gated_delta_plan::max_chunk];  // the cumulative log decay of the chunk's rows
    float* Z = work;
    float* KQ = Z + S * S;
    float* P = KQ + 2 * C * S;
    float* D = P + 2 * C * S;
    float* KT = D + C * S;
    float* X = KT + S * Cp;
    float* beta = X + 2 * C * Cp;
    const int hk = h % a.n_head_k;
    float* M = a.state + (int64_t)a.slot[t0] * a.state_stride + (int64_t)h * S * S;  // M[j*S + i] = S[i][j]

    for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) Z[i * S + j] = M[j * S + i];

    for (int64_t c0 = t0; c0 < t1; c0 += C) {
        const int64_t n = std::min(C, t1 - c0), np = round16(n);
        double cum = 0.0;
        for (int64_t t = 0; t < n; ++t) {
            const int64_t r = c0 + t;
            std::memcpy(KQ + t * S, a.k + r * a.qk_stride + hk * S, sizeof(float) * (size_t)S);
            std::memcpy(KQ + (n + t) * S, a.q + r * a.qk_stride + hk * S, sizeof(float) * (size_t)S);
            cum += (double)a.g[r * a.gb_stride + h];
            G[t] = cum;
            beta[t] = a.beta[r * a.gb_stride + h];
        }
        for (int64_t i = 0; i < S; ++i) {
            float* kt = KT + i * Cp;
            for (int64_t t = 0; t < n; ++t) kt[t] = KQ[t * S + i];
            std::fill(kt + n, kt + np, 0.0f);
        }
        gemm(2 * n, S, S, KQ, S, Z, S, P, S, 0.0f);  // P = [K Z; Q Z]
        // X = [K Kᵀ; Q Kᵀ], the lower triangle in panels of 16 columns (rows t >= the panel's first)
        for (int64_t j0 = 0; j0 < np; j0 += 16) {
            gemm(n - j0, 16, S, KQ + j0 * S, S, KT + j0, Cp, X + j0 * Cp + j0, Cp, 0.0f);
            gemm(n - j0, 16, S, KQ + (n + j0) * S, S, KT + j0, Cp, X + (n + j0) * Cp + j0, Cp, 0.0f);
        }

        // U = beta (V - gamma K Z), into D
        for (int64_t t = 0; t < n; ++t) {
            const float gam = (float)std::exp(G[t]), b = beta[t];
            const float* v = a.v + (c0 + t) * a.v_stride + (int64_t)h * S;
            const float* pk = P + t * S;
            float* d = D + t * S;
            for (int64_t j = 0; j < S; ++j) d[j] = b * (v[j] - gam * pk[j]);
        }
        // -A (strictly lower) over K Kᵀ; the scaled, decayed, causal Q Kᵀ
        for (int64_t t = 0; t < n; ++t) {
            float* kk = X + t * Cp;
            float* qk = X + (n + t) * Cp;
            for (int64_t s = 0; s <= t; ++s) {
                const float e = std::exp((float)(G[t] - G[s]));
                kk[s] = -beta[t] * e * kk[s];
                qk[s] = a.scale * e * qk[s];
            }
            std::fill(qk + t + 1, qk + n, 0.0f);
        }
        // forward substitution, d_t = u_t - sum_{s<t} A[t][s] d_s, in blocks of
        // 16 rows: the rows before the block as one product, then row by row
        for (int64_t b = 0; b < n; b += 16) {
            const int64_t rows = std::min<int64_t>(16, n - b);
            if (b > 0) gemm(rows, S, b, X + b * Cp, Cp, D, S, D + b * S, S, 1.0f);
            for (int64_t t = b + 1; t < b + rows; ++t)
                gemm(1, S, t - b, X + t * Cp + b, Cp, D + b * S, S, D + t * S, S, 1.0f);
        }

        // o = scale gamma Q Z + (scaled Q Kᵀ) D
        float* out = a.out + c0 * a.out_stride + (int64_t)h * S;
        for (int64_t t = 0; t < n; ++t) {
            const float f = a.scale * (float)std::exp(G[t]);
            const float* pq = P + (n + t) * S;
            float* o = out + t * a.out_stride;
            for (int64_t j = 0; j < S; ++j) o[j] = f * pq[j];
        }
        for (int64_t b = 0; b < n; b += 16)  // causal: rows of a block read no d past its last row
            gemm(std::min<int64_t>(16, n - b), S, std::min(n, b + 16), X + (n + b) * Cp, Cp, D, S,
                 out + b * a.out_stride, a.out_stride, 1.0f);

        // Z = gamma_last Z + (K scaled by the decay to the chunk's end)ᵀ D
        const double last = G[n - 1];
        for (int64_t t = 0; t < n; ++t) beta[t] = std::exp((float)(last - G[t]));  // beta is spent: reuse
        for (int64_t i = 0; i < S; ++i) {
            float* kt = KT + i * Cp;
            for (int64_t t = 0; t < n; ++t) kt[t] *= beta[t];
        }
        gemm(S, S, n, KT, Cp, D, S, Z, S, (float)std::exp(last));
    }

    for (int64_t j = 0; j < S; ++j)
        for (int64_t i = 0; i < S; ++i) M[j * S + i] = Z[i * S + j];
}

}  // namespace lp

// ops.cpp — see ops.h. Each operation has a plain scalar version; the inner
// loops that matter (sums of squares, exp, the GELU table lookup) also have
// AVX2 and AVX-512 versions, picked once from the CPU's features.
#include "ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "../common.h"
#include "features.h"
#include "simd_math_x86.h"

#if defined(LP_X86)
// GCC 12 reports the self-initialised placeholder inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialised at -O3 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace lp {

namespace {

[[maybe_unused]] isa level() {  // unused where no SIMD level is compiled (aarch64)
    static const isa l = best_isa();
    return l;
}

// ---------------------------------------------------------------------------
// GELU table: gelu(x) for every F16 value x, rounded to F16 and kept as float
// (llama.cpp evaluates GELU this way). 256 KB, built on first use.
// ---------------------------------------------------------------------------
float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

const float* gelu_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(1 << 16);
        for (uint32_t h = 0; h < (1u << 16); ++h)
            t[h] = fp16_to_fp32(fp32_to_fp16(gelu_tanh(fp16_to_fp32((uint16_t)h))));
        return t;
    }();
    return table.data();
}

// The same for quick GELU, x / (1 + exp(-1.702 x)) (llama.cpp's
// ggml_gelu_quick table: every F16 input, the result rounded to F16).
const float* gelu_quick_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(1 << 16);
        for (uint32_t h = 0; h < (1u << 16); ++h) {
            const float x = fp16_to_fp32((uint16_t)h);
            t[h] = fp16_to_fp32(fp32_to_fp16(x * (1.0f / (1.0f + std::exp(-1.702f * x)))));
        }
        return t;
    }();
    return table.data();
}

// ---------------------------------------------------------------------------
// Scalar kernels
// ---------------------------------------------------------------------------
double sum_sq_scalar(const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (double)(x[i] * x[i]);
    return s;
}

// x[i] = exp(x[i] - max), returns the sum in double.
double exp_sum_scalar(float* x, int64_t n, float max) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max);
        sum += x[i];
    }
    return sum;
}

void gelu_mul_scalar(float* g, const float* u, int64_t n) {
    const float* table = gelu_table();
    for (int64_t i = 0; i < n; ++i) {
        const float x = g[i];
        float y;
        if (x <= -10.0f) y = 0.0f;
        else if (x >= 10.0f) y = x;
        else y = table[fp32_to_fp16(x)];
        g[i] = u ? y * u[i] : y;
    }
}

void silu_mul_scalar(float* g, const float* u, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float y = g[i] / (1.0f + std::exp(-g[i]));
        g[i] = u ? y * u[i] : y;
    }
}

// ---------------------------------------------------------------------------
// AVX2
// ---------------------------------------------------------------------------
#if defined(LP_HAVE_AVX2)



LP_TARGET_AVX2 double sum_sq_avx2(const float* x, int64_t n) {
    __m256d acc0 = _mm256_setzero_pd(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sq = _mm256_mul_ps(v, v);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(acc0, acc1));
    double s = (t[0] + t[1]) + (t[2] + t[3]);
    for (; i < n; ++i) s += (double)(x[i] * x[i]);
    return s;
}

LP_TARGET_AVX2 double exp_sum_avx2(float* x, int64_t n, float max) {
    const __m256 vm = _mm256_set1_ps(max);
    __m256d acc = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        // exactly 0 below -87.3, where exp256 clamps (and for -inf)
        const __m256 e = _mm256_and_ps(exp256(d), _mm256_cmp_ps(d, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    if (i < n) {
        // The tail goes through the same exp256 and the same lanes as a full
        // vector (lanes past n as zeros): softmax over a batch's cells (some
        // masked, -inf) then gives each visible cell the value and the sum it
        // gets when decoding token by token over fewer cells. std::exp here
        // made batches differ from single tokens by an ulp.
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + i, live), vm);
        const __m256 keep = _mm256_and_ps(_mm256_castsi256_ps(live), _mm256_cmp_ps(d, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
        const __m256 e = _mm256_and_ps(exp256(d), keep);
        _mm256_maskstore_ps(x + i, live, e);
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, acc);
    return (t[0] + t[1]) + (t[2] + t[3]);
}

LP_TARGET_AVX2 void silu_mul_avx2(float* g, const float* u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, exp256(_mm256_sub_ps(zero, x))));
        if (u) y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(g + i, y);
    }
    if (i < n) silu_mul_scalar(g + i, u ? u + i : nullptr, n - i);
}

LP_TARGET_AVX2 void gelu_mul_avx2(float* g, const float* u, int64_t n) {
    const float* table = gelu_table();
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 y = _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(h), 4);
        y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
        if (u) y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(g + i, y);
    }
    if (i < n) gelu_mul_scalar(g + i, u ? u + i : nullptr, n - i);
}

// Elementwise row kernels: the same float operations as the scalar loops
// (mul, then add, never fused: the build has -ffp-contract=off), so the same
// bits; the portable build compiles the plain loops for SSE2 only.
LP_TARGET_AVX2 void add_avx2(float* y, const float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; ++i) y[i] += x[i];
}

LP_TARGET_AVX2 void scale_avx2(float* x, int64_t n, float s) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; ++i) x[i] *= s;
}

// y = ((x - mean) · scale) · w + b, each step rounded as layer_norm_row's
// scalar passes round it (w, b optional).
LP_TARGET_AVX2 void norm_affine_avx2(const float* x, float mean, float scale, const float* w, const float* b,
                                     float* y, int64_t n) {
    const __m256 vm = _mm256_set1_ps(mean), vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vs);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; ++i) {
        float v = (x[i] - mean) * scale;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

// The largest element; NaNs aside (softmax of a NaN row is NaN either way)
// the same value as the scalar std::max scan.
LP_TARGET_AVX2 float max_avx2(const float* x, int64_t n) {
    float m = -INFINITY;
    int64_t i = 0;
    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(x);
        for (i = 8; i + 8 <= n; i += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        m = _mm_cvtss_f32(h);
    }
    for (; i < n; ++i) m = std::max(m, x[i]);
    return m;
}

#endif  // LP_HAVE_AVX2

// ---------------------------------------------------------------------------
// AVX-512
// ---------------------------------------------------------------------------
#if defined(LP_HAVE_AVX512)



LP_TARGET_AVX512 double sum_sq_avx512(const float* x, int64_t n) {
    __m512d acc0 = _mm512_setzero_pd(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 sq = _mm512_mul_ps(v, v);
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(sq, 1)));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
    for (; i < n; ++i) s += (double)(x[i] * x[i]);
    return s;
}

LP_TARGET_AVX512 double exp_sum_avx512(float* x, int64_t n, float max) {
    const __m512 vm = _mm512_set1_ps(max);
    __m512d acc = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp512_or_zero(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = exp512_or_zero(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vm));
        _mm512_mask_storeu_ps(x + i, m, e);
        const __m512 ez = _mm512_maskz_mov_ps(m, e);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(ez)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(ez, 1)));
    }
    return _mm512_reduce_add_pd(acc);
}

LP_TARGET_AVX512 void silu_mul_avx512(float* g, const float* u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(g + i);
        __m512 y = _mm512_div_ps(x, _mm512_add_ps(one, exp512(_mm512_sub_ps(zero, x))));
        if (u) y = _mm512_mul_ps(y, _mm512_loadu_ps(u + i));
        _mm512_storeu_ps(g + i, y);
    }
    if (i < n) silu_mul_scalar(g + i, u ? u + i : nullptr, n - i);
}

LP_TARGET_AVX512 void gelu_mul_avx512(float* g, const float* u, int64_t n) {
    const float* table = gelu_table();
    const __m512 lo = _mm512_set1_ps(-10.0f), hi = _mm512_set1_ps(10.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(g + i);
        const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 y = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(h), table, 4);
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), x);
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LE_OQ), _mm512_setzero_ps());
        if (u) y = _mm512_mul_ps(y, _mm512_loadu_ps(u + i));
        _mm512_storeu_ps(g + i, y);
    }
    if (i < n) gelu_mul_scalar(g + i, u ? u + i : nullptr, n - i);
}

#endif  // LP_HAVE_AVX512

// ---------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------
double sum_sq(const float* x, int64_t n) {
#if defined(LP_HAVE_AVX512)
    if (level() == isa::avx512) return sum_sq_avx512(x, n);
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return sum_sq_avx2(x, n);
#endif
    return sum_sq_scalar(x, n);
}

double exp_sum(float* x, int64_t n, float max) {
#if defined(LP_HAVE_AVX512)
    if (level() == isa::avx512) return exp_sum_avx512(x, n, max);
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return exp_sum_avx2(x, n, max);
#endif
    return exp_sum_scalar(x, n, max);
}

float max_of(const float* x, int64_t n) {
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return max_avx2(x, n);
#endif
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
    return m;
}

}  // namespace

// ---------------------------------------------------------------------------
// Row operations
// ---------------------------------------------------------------------------

void rms_norm_row(const float* x, const float* w, float* y, int64_t n, float eps) {
    const float mean = (float)(sum_sq(x, n) / (double)n);
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    }
}

void layer_norm_row(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    const float mean = (float)(sum / (double)n);
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) {
        // y = x - mean (· 1, exact), then y = ((y - 0) · scale) · w + b (- 0 exact)
        norm_affine_avx2(x, mean, 1.0f, nullptr, nullptr, y, n);
        const float scale = 1.0f / std::sqrt((float)(sum_sq(y, n) / (double)n) + eps);
        norm_affine_avx2(y, 0.0f, scale, w, b, y, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mean;
    const float var = (float)(sum_sq(y, n) / (double)n);
    const float scale = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) y[i] *= scale;
    if (w) for (int64_t i = 0; i < n; ++i) y[i] *= w[i];
    if (b) for (int64_t i = 0; i < n; ++i) y[i] += b[i];
}

void gelu_quick_mul_row(float* g, const float* u, int64_t n) {
    // A table lookup per element: no SIMD form (llama.cpp's is scalar too).
    const float* table = gelu_quick_table();
    for (int64_t i = 0; i < n; ++i) {
        const float y = table[fp32_to_fp16(g[i])];
        g[i] = u ? y * u[i] : y;
    }
}

const float* gelu_f16_table() { return gelu_table(); }
const float* gelu_quick_f16_table() { return gelu_quick_table(); }

void gelu_mul_row(float* g, const float* u, int64_t n) {
#if defined(LP_HAVE_AVX512)
    if (level() == isa::avx512) return gelu_mul_avx512(g, u, n);
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return gelu_mul_avx2(g, u, n);
#endif
    gelu_mul_scalar(g, u, n);
}

void silu_mul_row(float* g, const float* u, int64_t n) {
#if defined(LP_HAVE_AVX512)
    if (level() == isa::avx512) return silu_mul_avx512(g, u, n);
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return silu_mul_avx2(g, u, n);
#endif
    silu_mul_scalar(g, u, n);
}

void softcap_row(float* x, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv) * cap;
}

void add_row(float* y, const float* x, int64_t n) {
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return add_avx2(y, x, n);
#endif
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_row(float* x, int64_t n, float s) {
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level(), isa::avx2)) return scale_avx2(x, n, s);
#endif
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void hadamard_blocks(float* x, int64_t n, int block) {
    const float norm = 1.0f / std::sqrt((float)block);
    for (int64_t b = 0; b + block <= n; b += block) {
        float* v = x + b;
        // Butterflies of the fast Walsh-Hadamard transform: log2(block) passes.
        for (int h = 1; h < block; h *= 2)
            for (int i = 0; i < block; i += 2 * h)
                for (int j = i; j < i + h; ++j) {
                    const float a = v[j], c = v[j + h];
                    v[j] = a + c;
                    v[j + h] = a - c;
                }
        for (int i = 0; i < block; ++i) v[i] *= norm;
    }
}

void softmax_row(float* x, int64_t n) {
    if (n <= 0) return;
    const float m = max_of(x, n);
    const double sum = exp_sum(x, n, m);
    scale_row(x, n, (float)(1.0 / sum));
}

void softmax_row_sink(float* x, int64_t n, float sink) {
    if (n <= 0) return;
    const float m = std::max(max_of(x, n), sink);
    const double sum = exp_sum(x, n, m) + (double)std::exp(sink - m);
    scale_row(x, n, (float)(1.0 / sum));
}

// ---------------------------------------------------------------------------
// RoPE
// ---------------------------------------------------------------------------

namespace {

// The table for one row whose pair i turns by position pos4[comp[i]]. Each
// component keeps its own running angle (position times base^(-2i/n_rot),
// multiplied up pair by pair as ggml does), so equal components give equal
// bits whichever one a pair reads.
void rope_cos_sin_impl(const rope_params& p, const int32_t pos4[4], const uint8_t* comp, float* cs) {
    const int n_rot = p.n_rot;
    const float theta_scale = std::pow(p.freq_base, -2.0f / (float)n_rot);
    // YaRN: the dims between corr_lo and corr_hi blend interpolated and
    // extrapolated angles.
    float corr_lo = 0, corr_hi = 0;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        const float two_pi = 6.28318530717958647692f;
        auto corr_dim = [&](float n_rotations) {
            return (float)n_rot * std::log((float)p.n_ctx_orig / (n_rotations * two_pi)) / (2.0f * std::log(p.freq_base));
        };
        corr_lo = std::max(0.0f, std::floor(corr_dim(p.beta_fast)));
        corr_hi = std::min((float)(n_rot - 1), std::ceil(corr_dim(p.beta_slow)));
        mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    float theta_base[4] = {(float)pos4[0], (float)pos4[1], (float)pos4[2], (float)pos4[3]};
    for (int i = 0; i < n_rot / 2; ++i) {
        const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
        const float theta_extrap = theta_base[comp ? comp[i] : 0] / ff;
        float theta = p.freq_scale * theta_extrap;
        if (p.ext_factor != 0.0f) {
            const float y = ((float)i - corr_lo) / std::max(0.001f, corr_hi - corr_lo);
            const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
            theta = theta * (1.0f - ramp) + theta_extrap * ramp;
        }
        cs[2 * i] = std::cos(theta) * mscale;
        cs[2 * i + 1] = std::sin(theta) * mscale;
        for (float& t : theta_base) t *= theta_scale;
    }
}

}  // namespace

void rope_cos_sin(const rope_params& p, int32_t pos, float* cs) {
    const int32_t pos4[4] = {pos, pos, pos, pos};
    rope_cos_sin_impl(p, pos4, nullptr, cs);
}

void rope_table_row(const rope_params& p, const int32_t* pos, int64_t pos_stride, int64_t t, float* cs) {
    if (!p.mrope()) {
        rope_cos_sin(p, pos[t], cs);
        return;
    }
    const int32_t p4[4] = {pos[t], pos[t + pos_stride], pos[t + 2 * pos_stride], pos[t + 3 * pos_stride]};
    rope_cos_sin_mrope(p, p4, cs);
}

void rope_cos_sin_mrope(const rope_params& p, const int32_t pos4[4], float* cs) {
    // Component of each pair: sector i % sum(sections), sections in order
    // temporal, height, width, then everything past them extra.
    uint8_t comp[512];
    const int n_pair = p.n_rot / 2;
    if (n_pair > 512) throw std::invalid_argument("rope_cos_sin_mrope: n_rot above 1024");
    const int s0 = p.sections[0], s1 = s0 + p.sections[1], s2 = s1 + p.sections[2];
    const int total = s2 + p.sections[3];
    if (total <= 0) throw std::invalid_argument("rope_cos_sin_mrope: no M-RoPE sections");
    for (int i = 0; i < n_pair; ++i) {
        const int sector = i % total;
        comp[i] = sector < s0 ? 0 : sector < s1 ? 1 : sector < s2 ? 2 : 3;
    }
    rope_cos_sin_impl(p, pos4, comp, cs);
}

void rope_apply(float* x, int n_head, int head_dim, int n_rot, rope_style style, const float* cs) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_head; ++h) {
        float* xh = x + (int64_t)h * head_dim;
        if (style == rope_style::neox) {
            for (int i = 0; i < half; ++i) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                const float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * c - x1 * s;
                xh[i + half] = x0 * s + x1 * c;
            }
        } else {
            for (int i = 0; i < half; ++i) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
                xh[2 * i] = x0 * c - x1 * s;
                xh[2 * i + 1] = x0 * s + x1 * c;
            }
        }
    }
}

}  // namespace lp

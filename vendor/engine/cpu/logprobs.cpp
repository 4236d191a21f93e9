// logprobs.cpp — see logprobs.h. Four kernels per ISA level, each over one
// row of n_vocab values: the row's range (max, first index of the max, min),
// the sum of exp(x - max), the 16-bit levels of a stored row, and the KL
// sum against a stored row (with the stored row's first maximum). The
// drivers at the end put them together row by row on the thread pool.
#include "logprobs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"
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

constexpr float kMaxLevel = 65535.0f;

struct row_range {
    float max = -INFINITY;
    int64_t imax = 0;  // the first index holding max (0 when no value exceeds -inf)
    float min = INFINITY;
};

struct kernels {
    row_range (*range)(const float* x, int64_t n);
    double (*exp_sum)(const float* x, int64_t n, float max);  // sum of exp(x - max), x unchanged
    // q[i] = round(inv_scale * (x[i] - lo)) for x[i] > lo, else 0; at most 65535.
    void (*quantize)(const float* x, int64_t n, float lo, float inv_scale, uint16_t* q);
    // sum over i of p * (lp - x[i] + log_z) where lp = scale * q[i] + min_log_prob > -16 and
    // p = exp(lp); *imax_base: the first i of the largest lp.
    double (*kld_sum)(const float* x, const uint16_t* q, int64_t n, float scale, float min_log_prob, float log_z,
                      int64_t* imax_base);
};

// ---------------------------------------------------------------------------
// Scalar references
// ---------------------------------------------------------------------------

row_range range_scalar(const float* x, int64_t n) {
    row_range r;
    for (int64_t i = 0; i < n; ++i) {
        if (x[i] > r.max) {
            r.max = x[i];
            r.imax = i;
        }
        r.min = std::min(x[i], r.min);
    }
    return r;
}

double exp_sum_scalar(const float* x, int64_t n, float max) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (double)std::exp(x[i] - max);
    return s;
}

uint16_t level_of(float x, float lo, float inv_scale) {
    // Clamped before the conversion: a level past 65535 (rounding of the top
    // entry) or an overflowing product must not wrap.
    return x > lo ? (uint16_t)std::lrint(std::min(inv_scale * (x - lo), kMaxLevel)) : 0;
}

void quantize_scalar(const float* x, int64_t n, float lo, float inv_scale, uint16_t* q) {
    for (int64_t i = 0; i < n; ++i) q[i] = level_of(x[i], lo, inv_scale);
}

// One entry of the KL sum, updating the stored row's running maximum. The
// SIMD versions compute the log-probability with the same unfused multiply
// and add (the build has -ffp-contract=off), so every level finds the same
// top entry even where two levels round to equal log-probabilities.
inline void kld_entry(float x, uint16_t q, int64_t i, float scale, float min_log_prob, float log_z, double& sum,
                      float& best, int64_t& ibest) {
    const float lpb = scale * (float)q + min_log_prob;
    if (lpb > best) {
        best = lpb;
        ibest = i;
    }
    if (lpb > -kLogProbRange) sum += (double)(std::exp(lpb) * ((lpb - x) + log_z));
}

double kld_sum_scalar(const float* x, const uint16_t* q, int64_t n, float scale, float min_log_prob, float log_z,
                      int64_t* imax_base) {
    double sum = 0;
    float best = -INFINITY;
    int64_t ib = 0;
    for (int64_t i = 0; i < n; ++i) kld_entry(x[i], q[i], i, scale, min_log_prob, log_z, sum, best, ib);
    *imax_base = ib;
    return sum;
}

const kernels kScalar{range_scalar, exp_sum_scalar, quantize_scalar, kld_sum_scalar};

// ---------------------------------------------------------------------------
// AVX2: eight lanes; the last n % 8 entries go through the scalar code.
// ---------------------------------------------------------------------------
#if defined(LP_HAVE_AVX2)

// The first-maximum of per-lane maxima and their (first) indices.
LP_TARGET_AVX2 void merge_lanes_avx2(__m256 vmax, __m256i vidx, float& max, int64_t& imax) {
    alignas(32) float m[8];
    alignas(32) int32_t id[8];
    _mm256_store_ps(m, vmax);
    _mm256_store_si256((__m256i*)id, vidx);
    for (int l = 0; l < 8; ++l)
        if (m[l] > max || (m[l] == max && id[l] < imax)) {
            max = m[l];
            imax = id[l];
        }
}

LP_TARGET_AVX2 row_range range_avx2(const float* x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY), vmin = _mm256_set1_ps(INFINITY);
    __m256i vidx = _mm256_setzero_si256(), cur = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i step = _mm256_set1_epi32(8);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 gt = _mm256_cmp_ps(v, vmax, _CMP_GT_OQ);
        vmax = _mm256_blendv_ps(vmax, v, gt);
        vidx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(vidx), _mm256_castsi256_ps(cur), gt));
        vmin = _mm256_min_ps(v, vmin);
        cur = _mm256_add_epi32(cur, step);
    }
    row_range r;
    if (i) {
        merge_lanes_avx2(vmax, vidx, r.max, r.imax);
        __m128 m = _mm_min_ps(_mm256_castps256_ps128(vmin), _mm256_extractf128_ps(vmin, 1));
        m = _mm_min_ps(m, _mm_movehl_ps(m, m));
        r.min = _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
    }
    for (; i < n; ++i) {
        if (x[i] > r.max) {
            r.max = x[i];
            r.imax = i;
        }
        r.min = std::min(x[i], r.min);
    }
    return r;
}

LP_TARGET_AVX2 double exp_sum_avx2(const float* x, int64_t n, float max) {
    const __m256 vm = _mm256_set1_ps(max), floor = _mm256_set1_ps(-87.3f);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        // exactly 0 below -87.3, where exp256 clamps (and for -inf)
        const __m256 e = _mm256_and_ps(exp256(d), _mm256_cmp_ps(d, floor, _CMP_GE_OQ));
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(acc0, acc1));
    return (t[0] + t[1]) + (t[2] + t[3]) + exp_sum_scalar(x + i, n - i, max);
}

LP_TARGET_AVX2 void quantize_avx2(const float* x, int64_t n, float lo, float inv_scale, uint16_t* q) {
    const __m256 vlo = _mm256_set1_ps(lo), vinv = _mm256_set1_ps(inv_scale), top = _mm256_set1_ps(kMaxLevel);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 f = _mm256_min_ps(_mm256_mul_ps(vinv, _mm256_sub_ps(v, vlo)), top);
        const __m256i l = _mm256_castps_si256(_mm256_and_ps(_mm256_castsi256_ps(_mm256_cvtps_epi32(f)),
                                                            _mm256_cmp_ps(v, vlo, _CMP_GT_OQ)));
        _mm_storeu_si128((__m128i*)(q + i), _mm_packus_epi32(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1)));
    }
    quantize_scalar(x + i, n - i, lo, inv_scale, q + i);
}

LP_TARGET_AVX2 double kld_sum_avx2(const float* x, const uint16_t* q, int64_t n, float scale, float min_log_prob,
                                   float log_z, int64_t* imax_base) {
    const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(min_log_prob), vz = _mm256_set1_ps(log_z);
    const __m256 floor = _mm256_set1_ps(-kLogProbRange);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = acc0;
    __m256 vbest = _mm256_set1_ps(-INFINITY);
    __m256i vidx = _mm256_setzero_si256(), cur = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i step = _mm256_set1_epi32(8);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 lv = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(q + i))));
        const __m256 lpb = _mm256_add_ps(_mm256_mul_ps(vs, lv), vm);  // unfused, as the scalar code
        const __m256 gt = _mm256_cmp_ps(lpb, vbest, _CMP_GT_OQ);
        vbest = _mm256_blendv_ps(vbest, lpb, gt);
        vidx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(vidx), _mm256_castsi256_ps(cur), gt));
        cur = _mm256_add_epi32(cur, step);
        const __m256 d = _mm256_add_ps(_mm256_sub_ps(lpb, _mm256_loadu_ps(x + i)), vz);
        const __m256 t = _mm256_and_ps(_mm256_mul_ps(exp256(lpb), d), _mm256_cmp_ps(lpb, floor, _CMP_GT_OQ));
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(acc0, acc1));
    double sum = (t[0] + t[1]) + (t[2] + t[3]);
    float best = -INFINITY;
    int64_t ib = 0;
    if (i) merge_lanes_avx2(vbest, vidx, best, ib);
    for (; i < n; ++i) kld_entry(x[i], q[i], i, scale, min_log_prob, log_z, sum, best, ib);
    *imax_base = ib;
    return sum;
}

const kernels kAvx2{range_avx2, exp_sum_avx2, quantize_avx2, kld_sum_avx2};

#endif  // LP_HAVE_AVX2

// ---------------------------------------------------------------------------
// AVX-512: sixteen lanes, the tail as a masked vector.
// ---------------------------------------------------------------------------
#if defined(LP_HAVE_AVX512)

LP_TARGET_AVX512 inline __mmask16 live_lanes(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

// The largest of the per-lane maxima and the smallest index among the lanes holding it.
LP_TARGET_AVX512 void merge_lanes_avx512(__m512 vmax, __m512i vidx, float& max, int64_t& imax) {
    max = _mm512_reduce_max_ps(vmax);
    const __mmask16 at = _mm512_cmp_ps_mask(vmax, _mm512_set1_ps(max), _CMP_EQ_OQ);
    imax = at ? _mm512_mask_reduce_min_epi32(at, vidx) : 0;
}

LP_TARGET_AVX512 row_range range_avx512(const float* x, int64_t n) {
    __m512 vmax = _mm512_set1_ps(-INFINITY), vmin = _mm512_set1_ps(INFINITY);
    __m512i vidx = _mm512_setzero_si512();
    __m512i cur = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = live_lanes(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(live, x + i);
        const __mmask16 gt = _mm512_mask_cmp_ps_mask(live, v, vmax, _CMP_GT_OQ);
        vmax = _mm512_mask_mov_ps(vmax, gt, v);
        vidx = _mm512_mask_mov_epi32(vidx, gt, cur);
        vmin = _mm512_mask_min_ps(vmin, live, v, vmin);
        cur = _mm512_add_epi32(cur, step);
    }
    row_range r;
    merge_lanes_avx512(vmax, vidx, r.max, r.imax);
    r.min = _mm512_reduce_min_ps(vmin);
    return r;
}

LP_TARGET_AVX512 double exp_sum_avx512(const float* x, int64_t n, float max) {
    const __m512 vm = _mm512_set1_ps(max);
    __m512d acc0 = _mm512_setzero_pd(), acc1 = acc0;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = live_lanes(n - i);
        const __m512 e = _mm512_maskz_mov_ps(live, exp512_or_zero(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + i), vm)));
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

LP_TARGET_AVX512 void quantize_avx512(const float* x, int64_t n, float lo, float inv_scale, uint16_t* q) {
    const __m512 vlo = _mm512_set1_ps(lo), vinv = _mm512_set1_ps(inv_scale), top = _mm512_set1_ps(kMaxLevel);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = live_lanes(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(live, x + i);
        const __m512 f = _mm512_min_ps(_mm512_mul_ps(vinv, _mm512_sub_ps(v, vlo)), top);
        const __m512i l = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v, vlo, _CMP_GT_OQ), f);
        _mm256_mask_storeu_epi16(q + i, live, _mm512_cvtepi32_epi16(l));
    }
}

LP_TARGET_AVX512 double kld_sum_avx512(const float* x, const uint16_t* q, int64_t n, float scale, float min_log_prob,
                                       float log_z, int64_t* imax_base) {
    const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(min_log_prob), vz = _mm512_set1_ps(log_z);
    const __m512 floor = _mm512_set1_ps(-kLogProbRange);
    __m512d acc0 = _mm512_setzero_pd(), acc1 = acc0;
    __m512 vbest = _mm512_set1_ps(-INFINITY);
    __m512i vidx = _mm512_setzero_si512();
    __m512i cur = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = live_lanes(n - i);
        const __m512 lv = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, q + i)));
        const __m512 lpb = _mm512_add_ps(_mm512_mul_ps(vs, lv), vm);  // unfused, as the scalar code
        const __mmask16 gt = _mm512_mask_cmp_ps_mask(live, lpb, vbest, _CMP_GT_OQ);
        vbest = _mm512_mask_mov_ps(vbest, gt, lpb);
        vidx = _mm512_mask_mov_epi32(vidx, gt, cur);
        cur = _mm512_add_epi32(cur, step);
        const __mmask16 keep = _mm512_mask_cmp_ps_mask(live, lpb, floor, _CMP_GT_OQ);
        const __m512 d = _mm512_add_ps(_mm512_sub_ps(lpb, _mm512_maskz_loadu_ps(live, x + i)), vz);
        const __m512 t = _mm512_maskz_mul_ps(keep, exp512(lpb), d);
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(t)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1)));
    }
    float best;
    int64_t ib;
    merge_lanes_avx512(vbest, vidx, best, ib);
    *imax_base = ib;
    return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

const kernels kAvx512{range_avx512, exp_sum_avx512, quantize_avx512, kld_sum_avx512};

#endif  // LP_HAVE_AVX512

const kernels& kernels_for(isa level) {
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) return kAvx512;
#endif
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level, isa::avx2)) return kAvx2;
#endif
    (void)level;
    return kScalar;
}

}  // namespace

// ---------------------------------------------------------------------------
// Row drivers
// ---------------------------------------------------------------------------

void nll_rows(isa level, const float* logits, int64_t n_rows, int64_t n_vocab, const int32_t* targets,
              double* nll, thread_pool& pool) {
    const kernels& k = kernels_for(level);
    pool.parallel_for(n_rows, [&](int64_t r, int) {
        const float* x = logits + r * n_vocab;
        const float max = k.range(x, n_vocab).max;
        // llama-perplexity's order: (x[t] - max) in float, then log(sum) in double
        nll[r] = std::log(k.exp_sum(x, n_vocab, max)) - (double)(x[targets[r]] - max);
    });
}

void store_logprob_rows(isa level, const float* logits, int64_t n_rows, int64_t n_vocab, const int32_t* targets,
                        uint16_t* rows, double* nll, thread_pool& pool) {
    const kernels& k = kernels_for(level);
    const int64_t words = logprob_row_words(n_vocab);
    pool.parallel_for(n_rows, [&](int64_t r, int) {
        const float* x = logits + r * n_vocab;
        uint16_t* out = rows + r * words;
        const row_range rr = k.range(x, n_vocab);
        const float lo = std::max(rr.min, rr.max - kLogProbRange);
        const float log_sum_exp = (float)std::log(k.exp_sum(x, n_vocab, rr.max));
        const float head[2] = {(rr.max - lo) / kMaxLevel, (lo - rr.max) - log_sum_exp};  // scale, min log-prob
        std::memcpy(out, head, sizeof head);
        if (head[0] != 0.0f) k.quantize(x, n_vocab, lo, 1.0f / head[0], out + 4);
        else std::memset(out + 4, 0, sizeof(uint16_t) * (size_t)n_vocab);  // a flat row
        std::memset(out + 4 + n_vocab, 0, sizeof(uint16_t) * (size_t)(words - 4 - n_vocab));
        nll[r] = (double)((rr.max + log_sum_exp) - x[targets[r]]);
    });
}

void kld_rows(isa level, const float* logits, const uint16_t* base, int64_t n_rows, int64_t n_vocab,
              const int32_t* targets, const kld_row_out& out, thread_pool& pool) {
    const kernels& k = kernels_for(level);
    const int64_t words = logprob_row_words(n_vocab);
    pool.parallel_for(n_rows, [&](int64_t r, int) {
        const float* x = logits + r * n_vocab;
        const uint16_t* b = base + r * words;
        float head[2];  // scale, min log-prob
        std::memcpy(head, b, sizeof head);
        const row_range rr = k.range(x, n_vocab);
        const float log_z = rr.max + (float)std::log(k.exp_sum(x, n_vocab, rr.max));
        const int32_t t = targets[r];
        const float nll = log_z - x[t];
        const float nll_base = -(head[0] * (float)b[4 + t] + head[1]);
        int64_t imax_base = 0;
        out.kld[r] = k.kld_sum(x, b + 4, n_vocab, head[0], head[1], log_z, &imax_base);
        out.nll[r] = nll;
        out.nll_base[r] = nll_base;
        out.p_diff[r] = std::exp(-nll) - std::exp(-nll_base);
        out.same_top[r] = rr.imax == imax_base;
    });
}

}  // namespace lp

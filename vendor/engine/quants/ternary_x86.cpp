// ternary_x86.cpp — the AVX2 and AVX-512 dot products of TQ1_0 and TQ2_0
// against Q8_K and their 4×4 mat-mat tiles (each weight block decoded once
// for up to 4 activation rows; the same bits as vec_dot) (formats: ternary.h;
// references and registration: ternary.cpp). Compiles to nothing where the
// build has no x86 kernels.
//
// Both levels multiply the unsigned trits t (0..2) with the int8 activations
// (maddubs / vpdpbusd take unsigned x signed) and subtract the block's
// activation sum, from Q8_K's bsums: sum((t - 1) a) = sum(t a) - sum(a).
// The integer sums are exact and each block is scaled and added in order as
// the reference does, so the results are the reference's up to FMA
// contraction of that one float step.
//
// TQ2_0's trits are 2-bit fields: shift and mask. TQ1_0's are base-3 digits:
// multiplying a byte by 3 (three wrapping byte adds) brings the next digit to
// the top, and the top digit of v is (3v) >> 8, i.e. [v >= 86] + [v >= 171].
#include "ternary.h"

#include <cstring>

#include "../common.h"
#include "simd_x86.h"

#if defined(LP_HAVE_AVX512) && !defined(LP_HAVE_AVX2)
#error "the AVX-512 kernels build their trits with the AVX2 helpers; enable both"
#endif

namespace lp {

namespace {

// The reference's float step for one block: the same expression in every
// driver, so vec_dot and the tiles give the same bits.
static LP_INLINE float ternary_step(float sum, int sumi, float dw, float da) { return sum + (float)sumi * (dw * da); }

#if defined(LP_HAVE_AVX2)

using x86::half_to_float;
using x86::hsum_i32x8;

LP_TARGET_AVX2 LP_INLINE __m256i times3_avx2(__m256i v) { return _mm256_add_epi8(v, _mm256_add_epi8(v, v)); }
LP_TARGET_AVX2 LP_INLINE __m128i times3_sse(__m128i v) { return _mm_add_epi8(v, _mm_add_epi8(v, v)); }

// The top base-3 digit of each byte: (3v) >> 8 = [v >= 86] + [v >= 171].
LP_TARGET_AVX2 LP_INLINE __m256i top_trit_avx2(__m256i v) {
    const __m256i ge86 = _mm256_cmpeq_epi8(_mm256_max_epu8(v, _mm256_set1_epi8(86)), v);
    const __m256i ge171 = _mm256_cmpeq_epi8(_mm256_max_epu8(v, _mm256_set1_epi8((char)171)), v);
    return _mm256_sub_epi8(_mm256_setzero_si256(), _mm256_add_epi8(ge86, ge171));  // masks are -1
}

// The four qh bytes (trits 240..255) as 16 bytes [h, 3h, 9h, 27h]: digit n
// of byte j on top at byte 4n + j.
LP_TARGET_AVX2 LP_INLINE __m128i tq1_qh_digits(const uint8_t* qh) {
    uint32_t raw;
    std::memcpy(&raw, qh, 4);
    const __m128i h0 = _mm_set1_epi32((int)raw), h1 = times3_sse(h0), h2 = times3_sse(h1), h3 = times3_sse(h2);
    return _mm_unpacklo_epi64(_mm_unpacklo_epi32(h0, h1), _mm_unpacklo_epi32(h2, h3));
}

// sum(a) of a Q8_K block from its 16 partial sums, as 8 int32 lanes.
LP_TARGET_AVX2 LP_INLINE __m256i q8_k_sum_lanes(const block_q8_K& y) {
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)y.bsums), _mm256_set1_epi16(1));
}

// One block's trits (0..2) as 8 vectors of 32 bytes, vector k for the
// activations 32k .. 32k + 31.
struct tq1_0_avx2 {
    using block = block_tq1_0;
    LP_TARGET_AVX2 static LP_INLINE void trits(const block& b, __m256i* t) {
        __m256i v = _mm256_loadu_si256((const __m256i*)b.qs);  // elements 32n + m
        for (int k = 0; k < 5; ++k, v = times3_avx2(v)) t[k] = top_trit_avx2(v);
        const __m128i s = _mm_loadu_si128((const __m128i*)(b.qs + 32));  // elements 160 + 16n + m
        const __m256i w0 = _mm256_set_m128i(times3_sse(s), s);           // digits 0 | 1
        const __m256i w1 = times3_avx2(times3_avx2(w0));                 // digits 2 | 3
        t[5] = top_trit_avx2(w0);
        t[6] = top_trit_avx2(w1);
        t[7] = top_trit_avx2(_mm256_set_m128i(tq1_qh_digits(b.qh), times3_sse(_mm256_extracti128_si256(w1, 1))));
    }
};

// Byte m of half j holds elements 128j + 32l + m in its fields l.
struct tq2_0_avx2 {
    using block = block_tq2_0;
    LP_TARGET_AVX2 static LP_INLINE void trits(const block& b, __m256i* t) {
        const __m256i m3 = _mm256_set1_epi8(3);
        for (int j = 0; j < 2; ++j) {
            const __m256i v = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
            for (int l = 0; l < 4; ++l) t[4 * j + l] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * l), m3);
        }
    }
};

// sum((t - 1) a) over one block; the int16 pair sums stay below
// 8 maddubs x 2 x 2 x 128 = 4096.
LP_TARGET_AVX2 LP_INLINE int block_dot_avx2(const __m256i* t, const block_q8_K& y) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k)
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(t[k], _mm256_loadu_si256((const __m256i*)(y.qs + 32 * k))));
    return hsum_i32x8(_mm256_sub_epi32(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)), q8_k_sum_lanes(y)));
}

template <class F>
LP_TARGET_AVX2 void vec_dot_ternary_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const typename F::block*>(w_row);
    const auto* y = static_cast<const block_q8_K*>(a_row);
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ++ib) {
        __m256i t[8];
        F::trits(x[ib], t);
        sum = ternary_step(sum, block_dot_avx2(t, y[ib]), half_to_float(x[ib].d), y[ib].d);
    }
    *out = sum;
}

// nr x nc (gemm_tile_fn): each weight block decoded once for the nc
// activation rows; every pair adds its blocks in vec_dot's order (its bits).
template <class F>
LP_TARGET_AVX2 void gemm_tile_ternary_avx2(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,
                                           size_t os, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nc == 1) {
        for (int r = 0; r < nr; ++r) vec_dot_ternary_avx2<F>(n, out + r, wb + r * ws, a);
        return;
    }
    float sum[4][4] = {};
    for (int64_t ib = 0; ib < n / QK_K; ++ib) {
        for (int r = 0; r < nr; ++r) {
            const auto& x = reinterpret_cast<const typename F::block*>(wb + r * ws)[ib];
            __m256i t[8];
            F::trits(x, t);
            const float dw = half_to_float(x.d);
            for (int c = 0; c < nc; ++c) {
                const auto& y = reinterpret_cast<const block_q8_K*>(ab + c * as)[ib];
                sum[r][c] = ternary_step(sum[r][c], block_dot_avx2(t, y), dw, y.d);
            }
        }
    }
    for (int c = 0; c < nc; ++c)
        for (int r = 0; r < nr; ++r) out[(size_t)c * os + r] = sum[r][c];
}

#endif  // LP_HAVE_AVX2

#if defined(LP_HAVE_AVX512)

LP_TARGET_AVX512 LP_INLINE __m512i times3_avx512(__m512i v) { return _mm512_add_epi8(v, _mm512_add_epi8(v, v)); }

LP_TARGET_AVX512 LP_INLINE __m512i top_trit_avx512(__m512i v) {
    const __m512i one = _mm512_set1_epi8(1);
    const __mmask64 ge86 = _mm512_cmpge_epu8_mask(v, _mm512_set1_epi8(86));
    const __mmask64 ge171 = _mm512_cmpge_epu8_mask(v, _mm512_set1_epi8((char)171));
    return _mm512_add_epi8(_mm512_maskz_mov_epi8(ge86, one), _mm512_maskz_mov_epi8(ge171, one));
}

LP_TARGET_AVX512 LP_INLINE __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

LP_TARGET_AVX512 LP_INLINE int q8_k_sum(const block_q8_K& y) {
    return _mm512_reduce_add_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i*)y.bsums)));
}

// One block's trits as 4 vectors of 64 bytes, vector k for the activations
// 64k .. 64k + 63: TQ1_0's [digits 0 | 1], [2 | 3] of qs[0..31], [digit 4 |
// qs[32..47] digits 0, 1], [qs[32..47] digits 2, 3 | 4, qh digits].
struct tq1_0_avx512 {
    using block = block_tq1_0;
    LP_TARGET_AVX512 static LP_INLINE void trits(const block& b, __m512i* t) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)b.qs);
        const __m512i z0 = join256(v, times3_avx2(v));
        const __m512i z1 = times3_avx512(times3_avx512(z0));
        const __m128i s = _mm_loadu_si128((const __m128i*)(b.qs + 32));
        const __m256i w0 = _mm256_set_m128i(times3_sse(s), s);
        const __m256i w1 = times3_avx2(times3_avx2(w0));
        const __m256i w2 = _mm256_set_m128i(tq1_qh_digits(b.qh), times3_sse(_mm256_extracti128_si256(w1, 1)));
        t[0] = top_trit_avx512(z0);
        t[1] = top_trit_avx512(z1);
        t[2] = top_trit_avx512(join256(times3_avx2(_mm512_extracti64x4_epi64(z1, 1)), w0));
        t[3] = top_trit_avx512(join256(w1, w2));
    }
};

// Vector k: half k / 2's fields 2 (k % 2) and 2 (k % 2) + 1, shifted per
// 256-bit half (vpsrlvw).
struct tq2_0_avx512 {
    using block = block_tq2_0;
    LP_TARGET_AVX512 static LP_INLINE void trits(const block& b, __m512i* t) {
        const __m512i m3 = _mm512_set1_epi8(3);
        const __m512i shift_lo = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
        const __m512i shift_hi = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
        for (int j = 0; j < 2; ++j) {
            const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * j)));
            t[2 * j] = _mm512_and_si512(_mm512_srlv_epi16(v, shift_lo), m3);
            t[2 * j + 1] = _mm512_and_si512(_mm512_srlv_epi16(v, shift_hi), m3);
        }
    }
};

LP_TARGET_AVX512 LP_INLINE int block_dot_avx512(const __m512i* t, const block_q8_K& y) {
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) acc = _mm512_dpbusd_epi32(acc, t[k], _mm512_loadu_si512(y.qs + 64 * k));
    return _mm512_reduce_add_epi32(acc) - q8_k_sum(y);
}

template <class F>
LP_TARGET_AVX512 void vec_dot_ternary_avx512(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const typename F::block*>(w_row);
    const auto* y = static_cast<const block_q8_K*>(a_row);
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ++ib) {
        __m512i t[4];
        F::trits(x[ib], t);
        sum = ternary_step(sum, block_dot_avx512(t, y[ib]), half_to_float(x[ib].d), y[ib].d);
    }
    *out = sum;
}

template <class F>
LP_TARGET_AVX512 void gemm_tile_ternary_avx512(int64_t n, const void* w, size_t ws, const void* a, size_t as,
                                               float* out, size_t os, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nc == 1) {
        for (int r = 0; r < nr; ++r) vec_dot_ternary_avx512<F>(n, out + r, wb + r * ws, a);
        return;
    }
    float sum[4][4] = {};
    for (int64_t ib = 0; ib < n / QK_K; ++ib) {
        for (int r = 0; r < nr; ++r) {
            const auto& x = reinterpret_cast<const typename F::block*>(wb + r * ws)[ib];
            __m512i t[4];
            F::trits(x, t);
            const float dw = half_to_float(x.d);
            for (int c = 0; c < nc; ++c) {
                const auto& y = reinterpret_cast<const block_q8_K*>(ab + c * as)[ib];
                sum[r][c] = ternary_step(sum[r][c], block_dot_avx512(t, y), dw, y.d);
            }
        }
    }
    for (int c = 0; c < nc; ++c)
        for (int r = 0; r < nr; ++r) out[(size_t)c * os + r] = sum[r][c];
}

#endif  // LP_HAVE_AVX512

}  // namespace

void register_ternary_x86(type_traits* table, [[maybe_unused]] isa level) {
    [[maybe_unused]] type_traits& t1 = table[(int)ggml_type::TQ1_0];
    [[maybe_unused]] type_traits& t2 = table[(int)ggml_type::TQ2_0];
#if defined(LP_HAVE_AVX2)
    if (level == isa::avx2) {
        t1.vec_dot = vec_dot_ternary_avx2<tq1_0_avx2>;
        t1.gemm_tile = gemm_tile_ternary_avx2<tq1_0_avx2>;
        t2.vec_dot = vec_dot_ternary_avx2<tq2_0_avx2>;
        t2.gemm_tile = gemm_tile_ternary_avx2<tq2_0_avx2>;
        t1.vec_dot_isa = t2.vec_dot_isa = isa::avx2;
    }
#endif
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        t1.vec_dot = vec_dot_ternary_avx512<tq1_0_avx512>;
        t1.gemm_tile = gemm_tile_ternary_avx512<tq1_0_avx512>;
        t2.vec_dot = vec_dot_ternary_avx512<tq2_0_avx512>;
        t2.gemm_tile = gemm_tile_ternary_avx512<tq2_0_avx512>;
        t1.vec_dot_isa = t2.vec_dot_isa = isa::avx512;
    }
#endif
}

}  // namespace lp

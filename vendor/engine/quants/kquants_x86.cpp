// kquants_x86.cpp — the x86 kernels of the k-quant family (formats, reference
// code and registration: kquants.cpp): Q8_K quantization (AVX2, AVX-512) and
// the k-quant × Q8_K dot products for AVX2 (maddubs/madd); the AVX-512 ones
// and the batched tiles are in kquants_tiles_x86.cpp. Each gives the same
// result as its _ref twin up to float summation order (Q8_K quantization: the
// same bytes).
// Not here: anything scalar; a portable build without LP_ENABLE_AVX2 compiles
// this file to nothing.
//
// Every kernel evaluates, per super-block (see kquants.cpp),
//   d·d_a·Σ_g scale_g·Σ_{k∈g} q_k·a_k  −  dmin·d_a·Σ_g min_g·bsum_g
// with unsigned quants q (Q3_K / Q6_K offset by 4 / 32, their "min" being
// offset·scale_g) so that u8×s8 instructions apply.
#include "kquants_x86.h"

#include <cstddef>
#include <cstring>

#include "blocks.h"

#if defined(LP_X86)
// GCC 12 reports the self-initialised placeholder inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialised at -O3 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "kquants_x86_common.h"
#include "simd_x86.h"

namespace lp {

#if defined(LP_HAVE_AVX512) && !defined(LP_HAVE_AVX2)
#error "the AVX-512 k-quant kernels use the AVX2 helpers; LP_ENABLE_AVX512 needs LP_ENABLE_AVX2"
#endif

// ===========================================================================
// AVX2: maddubs (u8×s8 → pairs of int16) then madd with the sub-block scales
// as int16 (→ int32), 32 weights at a time.
// ===========================================================================
#if defined(LP_HAVE_AVX2)
namespace {

using kq_x86::kAheadNarrow;
using kq_x86::kAheadWide;
using kq_x86::prefetch_ahead;
using kq_x86::k4_scales_mins_avx2;
using kq_x86::q3k_scales_avx2;
using kq_x86::k_block_fma;
using kq_x86::k_scale_pattern;
using kq_x86::k_scale_pattern_f16;

// Σ over 32 weights of q·a, times the int16 scales, as 8 int32 lanes.
LP_TARGET_AVX2 LP_INLINE __m256i dot32_avx2(__m256i q, const int8_t* a, __m256i scales16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)a)), scales16);
}

// A pshufb control that broadcasts int16 word `w` (0-7) across a 128-bit lane.
LP_TARGET_AVX2 LP_INLINE __m128i word_bcast_ctrl(int w) { return _mm_set1_epi16((short)(((2 * w + 1) << 8) | (2 * w))); }

// Scales for 32 weights that span two 16-weight groups g0 = 2k, 2k+1: words
// 0-7 (first 16 weights) take scale g0, words 8-15 scale g0+1. sc_lo / sc_hi
// hold the scale words 0-7 / 8-15 in both 128-bit lanes.
LP_TARGET_AVX2 LP_INLINE __m256i group16_scales_avx2(__m256i sc_lo, __m256i sc_hi, int k) {
    const __m256i src = k < 4 ? sc_lo : sc_hi;
    const int w = (2 * k) % 8;
    return _mm256_shuffle_epi8(src, _mm256_set_m128i(word_bcast_ctrl(w + 1), word_bcast_ctrl(w)));
}

// The block term: acc += d·d_a·sum − dmin·d_a·(m16 · bsums), both terms in
// one vector (kq_x86::k_block_fma).
LP_TARGET_AVX2 LP_INLINE __m256 finish_block_avx2(__m256i sum, __m256i m16, const block_q8_K& a, __m256 pattern,
                                                  __m256 acc) {
    const __m256i ms = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i*)a.bsums));
    return k_block_fma(sum, ms, pattern, &a.d, acc);
}

// Shared by Q4_K and Q5_K: qh_off < 0 for Q4_K, which has no fifth bit.
LP_TARGET_AVX2 LP_INLINE void vec_dot_k4_avx2(int64_t n, float* out, const uint8_t* w_bytes, size_t block_bytes,
                                              size_t qs_off, ptrdiff_t qh_off, const block_q8_K* a) {
    const __m256i m4 = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
    // mins m_j multiply bsums 2j and 2j+1: duplicate each min byte
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t* b = w_bytes + i * block_bytes;  // d, dmin, scales[12] lead both layouts
        prefetch_ahead(b, block_bytes, kAheadWide);
        const __m128i sm = k4_scales_mins_avx2(b + 4);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
        __m256i high = qh_off >= 0 ? _mm256_loadu_si256((const __m256i*)(b + qh_off)) : _mm256_setzero_si256();
        __m256i sum = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            const __m256i bytes = _mm256_loadu_si256((const __m256i*)(b + qs_off + 32 * c));
            __m256i q0 = _mm256_and_si256(bytes, m4);
            __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
            if (qh_off >= 0) {  // fifth bit of weight 32k + l: bit k of qh[l]
                q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_slli_epi16(high, 4), bit4));
                q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_slli_epi16(high, 3), bit4));
                high = _mm256_srli_epi16(high, 2);
            }
            const __m128i c0 = word_bcast_ctrl(2 * c), c1 = word_bcast_ctrl(2 * c + 1);
            sum = _mm256_add_epi32(sum, dot32_avx2(q0, a[i].qs + 64 * c, _mm256_shuffle_epi8(sc16, _mm256_set_m128i(c0, c0))));
            sum = _mm256_add_epi32(sum, dot32_avx2(q1, a[i].qs + 64 * c + 32, _mm256_shuffle_epi8(sc16, _mm256_set_m128i(c1, c1))));
        }
        acc = finish_block_avx2(sum, m16, a[i], k_scale_pattern_f16(b), acc);
    }
    *out = x86::hsum_f32x8(acc);
}

}  // namespace

LP_TARGET_AVX2 void vec_dot_q2_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q2_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]), kAheadNarrow);
        const __m128i s8 = _mm_loadu_si128((const __m128i*)w[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm_set1_epi8(0xF)));
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0xF)));
        const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            __m256i bits = _mm256_loadu_si256((const __m256i*)(w[i].qs + 32 * h));
            for (int j = 0; j < 4; ++j) {
                const int k = 4 * h + j;
                sum = _mm256_add_epi32(sum, dot32_avx2(_mm256_and_si256(bits, m3), a[i].qs + 32 * k,
                                                       group16_scales_avx2(sc_lo, sc_hi, k)));
                bits = _mm256_srli_epi16(bits, 2);
            }
        }
        acc = finish_block_avx2(sum, m16, a[i], k_scale_pattern_f16((const uint8_t*)&w[i].d), acc);
    }
    *out = x86::hsum_f32x8(acc);
}

LP_TARGET_AVX2 void vec_dot_q3_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q3_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    const __m256i m3 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]), kAheadNarrow);
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3k_scales_avx2(w[i].scales));
        const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        __m256i high = _mm256_loadu_si256((const __m256i*)w[i].hmask);  // bit k of byte l: weight 32k + l
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            __m256i bits = _mm256_loadu_si256((const __m256i*)(w[i].qs + 32 * h));
            for (int j = 0; j < 4; ++j) {
                const int k = 4 * h + j;
                // quant + 4 in [0, 7]: the low crumb plus 4 where the hmask bit is set
                const __m256i q = _mm256_or_si256(_mm256_and_si256(bits, m3),
                                                  _mm256_and_si256(_mm256_slli_epi16(high, 2), bit2));
                sum = _mm256_add_epi32(sum, dot32_avx2(q, a[i].qs + 32 * k, group16_scales_avx2(sc_lo, sc_hi, k)));
                bits = _mm256_srli_epi16(bits, 2);
                high = _mm256_srli_epi16(high, 1);
            }
        }
        const float d = _cvtsh_ss(w[i].d);
        acc = finish_block_avx2(sum, _mm256_slli_epi16(sc16, 2), a[i], k_scale_pattern(d, d), acc);  // offset 4 → "min" 4·scale
    }
    *out = x86::hsum_f32x8(acc);
}

LP_TARGET_AVX2 void vec_dot_q4_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    vec_dot_k4_avx2(n, out, static_cast<const uint8_t*>(w_row), sizeof(block_q4_K), offsetof(block_q4_K, qs), -1,
                    static_cast<const block_q8_K*>(a_row));
}

LP_TARGET_AVX2 void vec_dot_q5_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    vec_dot_k4_avx2(n, out, static_cast<const uint8_t*>(w_row), sizeof(block_q5_K), offsetof(block_q5_K, qs),
                    (ptrdiff_t)offsetof(block_q5_K, qh), static_cast<const block_q8_K*>(a_row));
}

LP_TARGET_AVX2 void vec_dot_q6_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q6_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]), kAheadWide);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)w[i].scales));
        const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i*)(w[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i*)(w[i].ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i*)(w[i].qh + 32 * h));
            // quant + 32 in [0, 63] for weights h·128 + 32j + l, j = 0..3
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
            };
            for (int j = 0; j < 4; ++j) {
                const int k = 4 * h + j;
                sum = _mm256_add_epi32(sum, dot32_avx2(q[j], a[i].qs + 32 * k, group16_scales_avx2(sc_lo, sc_hi, k)));
            }
        }
        const float d = _cvtsh_ss(w[i].d);
        acc = finish_block_avx2(sum, _mm256_slli_epi16(sc16, 5), a[i], k_scale_pattern(d, d), acc);  // offset 32 → "min" 32·scale
    }
    *out = x86::hsum_f32x8(acc);
}

// Q8_K quantization, same bytes as quantize_q8_k_ref for finite input:
// cvtps rounds to nearest even like nearest_int, and the packs saturate at
// 127 like its clamp.
LP_TARGET_AVX2 void quantize_q8_k_avx2(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_K*>(dst);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int e = 0; e < QK_K; e += 8)  // max(|x|, m): a NaN x leaves m, as in the reference
            vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + e)), vmax);
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!amax) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        float mx = 0;  // the first element of that magnitude, with its sign
        const __m256 vam = _mm256_set1_ps(amax);
        for (int e = 0; e < QK_K; e += 8) {
            const __m256 v = _mm256_loadu_ps(x + e);
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), vam, _CMP_EQ_OQ));
            if (hit) { mx = x[e + __builtin_ctz((unsigned)hit)]; break; }
        }
        const float iscale = -127.f / mx;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int g = 0; g < 16; g += 2) {  // 32 values per step
            __m256i q[4];
            for (int k = 0; k < 4; ++k)
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * g + 8 * k), vs)), lim);
            const __m256i s0 = _mm256_add_epi32(q[0], q[1]), s1 = _mm256_add_epi32(q[2], q[3]);
            // per 128-bit lane: hadd → pair sums of s0 then s1; again → the lane's s0 and s1 sums
            __m256i t = _mm256_hadd_epi32(s0, s1);
            t = _mm256_hadd_epi32(t, t);
            y[i].bsums[g] = (int16_t)(_mm256_extract_epi32(t, 0) + _mm256_extract_epi32(t, 4));
            y[i].bsums[g + 1] = (int16_t)(_mm256_extract_epi32(t, 1) + _mm256_extract_epi32(t, 5));
            const __m256i w16 = _mm256_packs_epi32(q[0], q[1]), w16b = _mm256_packs_epi32(q[2], q[3]);
            const __m256i b8 = _mm256_packs_epi16(w16, w16b);  // lane order 0 2 4 6 1 3 5 7 (groups of 4)
            const __m256i ordered = _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i*)(y[i].qs + 16 * g), ordered);
        }
        y[i].d = 1 / iscale;
    }
}

#endif  // LP_HAVE_AVX2

// ===========================================================================
// AVX-512: Q8_K quantization. The AVX-512 dot products and tiles of all
// k-quants are in kquants_tiles_x86.cpp.
// ===========================================================================
#if defined(LP_HAVE_AVX512)

// Q8_K quantization, same bytes as quantize_q8_k_ref for finite input (see
// quantize_q8_k_avx2); one 16-float vector is exactly one bsums group.
LP_TARGET_AVX512 void quantize_q8_k_avx512(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m512 vmax = _mm512_setzero_ps();
        for (int e = 0; e < QK_K; e += 16) vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + e)), vmax);
        const float amax = _mm512_reduce_max_ps(vmax);
        if (!amax) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        float mx = 0;
        const __m512 vam = _mm512_set1_ps(amax);
        for (int e = 0; e < QK_K; e += 16) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + e)), vam, _CMP_EQ_OQ);
            if (hit) { mx = x[e + __builtin_ctz((unsigned)hit)]; break; }
        }
        const float iscale = -127.f / mx;
        const __m512 vs = _mm512_set1_ps(iscale);
        const __m512i lim = _mm512_set1_epi32(127);
        for (int g = 0; g < 16; ++g) {
            const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), vs)), lim);
            _mm_storeu_si128((__m128i*)(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(q));
            y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1 / iscale;
    }
}

#endif  // LP_HAVE_AVX512

}  // namespace lp

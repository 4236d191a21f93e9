// kquants_x86.cpp — the x86 kernels of the k-quant family (formats, reference
// code and registration: kquants.cpp): Q8_K quantization and the k-quant ×
// Q8_K dot products for AVX2 (maddubs/madd) and AVX-512 VNNI (maddubs/dpwssd,
// plus 4×4 tiles for batched products). Each gives the same result as its
// _ref twin up to float summation order (Q8_K quantization: the same bytes).
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

// Mat-vec streams the weights from memory once. The hardware prefetchers
// alone leave one core well short of the memory bandwidth (~0.8 of it on
// Zen 5); asking for the lines 4 KiB ahead of the block in use brings a single
// thread to ~0.95. Rows of a matrix are contiguous, so this runs on into the
// next row; prefetches past the end of the data are harmless.
LP_INLINE void prefetch_ahead(const void* block, size_t block_bytes) {
    const char* p = static_cast<const char*>(block) + 4096;
    for (size_t off = 0; off < block_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// Σ over 32 weights of q·a, times the int16 scales, as 8 int32 lanes.
LP_TARGET_AVX2 LP_INLINE __m256i dot32_avx2(__m256i q, const int8_t* a, __m256i scales16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)a)), scales16);
}

// Q4_K / Q5_K scales and mins (see k4_unpack_scales) as bytes 0-7 / 8-15 of
// one vector. Reads 16 bytes from s: the 12 scale bytes and 4 bytes of the
// quants that follow them in both layouts.
LP_TARGET_AVX2 LP_INLINE __m128i k4_scales_mins_avx2(const uint8_t* s) {
    const __m128i v = _mm_loadu_si128((const __m128i*)s);    // dwords w0 w1 w2 (w3: not scales)
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // w0 w2 w1 w2
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // w0 w0 w1 w1
    // low parts: w0 & 63, w2 & 15, w1 & 63, (w2 >> 4) & 15; top 2 bits from w0 / w1 bits 6-7
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

// Q3_K scales (see q3k_unpack_scales) as 16 signed bytes, value − 32. Reads
// exactly the 12 scale bytes (the block may end 2 bytes later).
LP_TARGET_AVX2 LP_INLINE __m128i q3k_scales_avx2(const uint8_t* s) {
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m128i v = _mm_loadl_epi64((const __m128i*)s);  // bytes 0-7: low nibbles of scales 0-7 | 8-15
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    uint32_t w2;
    std::memcpy(&w2, s + 8, 4);
    // dword k, byte b: bits 2k..2k+1 of byte 8 + b = top bits of scale 4k + b
    const __m128i top = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)w2), _mm_setr_epi32(0, 2, 4, 6)),
                                      _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
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

// The block term: acc += d·sum, accm += dmin·(m16 · bsums).
LP_TARGET_AVX2 LP_INLINE void finish_block_avx2(__m256i sum, __m256i m16, const block_q8_K& a, float d, float dmin,
                                                __m256& acc, __m256& accm) {
    const __m256i ms = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i*)a.bsums));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * a.d), acc);
    accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dmin * a.d), accm);
}

// Shared by Q4_K and Q5_K: qh_off < 0 for Q4_K, which has no fifth bit.
LP_TARGET_AVX2 LP_INLINE void vec_dot_k4_avx2(int64_t n, float* out, const uint8_t* w_bytes, size_t block_bytes,
                                              size_t qs_off, ptrdiff_t qh_off, const block_q8_K* a) {
    const __m256i m4 = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
    // mins m_j multiply bsums 2j and 2j+1: duplicate each min byte
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t* b = w_bytes + i * block_bytes;  // d, dmin, scales[12] lead both layouts
        prefetch_ahead(b, block_bytes);
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
        uint16_t d, dmin;
        std::memcpy(&d, b, 2);
        std::memcpy(&dmin, b + 2, 2);
        finish_block_avx2(sum, m16, a[i], _cvtsh_ss(d), _cvtsh_ss(dmin), acc, accm);
    }
    *out = x86::hsum_f32x8(acc) - x86::hsum_f32x8(accm);
}

}  // namespace

LP_TARGET_AVX2 void vec_dot_q2_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q2_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]));
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
        finish_block_avx2(sum, m16, a[i], _cvtsh_ss(w[i].d), _cvtsh_ss(w[i].dmin), acc, accm);
    }
    *out = x86::hsum_f32x8(acc) - x86::hsum_f32x8(accm);
}

LP_TARGET_AVX2 void vec_dot_q3_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q3_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    const __m256i m3 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]));
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
        finish_block_avx2(sum, _mm256_slli_epi16(sc16, 2), a[i], d, d, acc, accm);  // offset 4 → "min" 4·scale
    }
    *out = x86::hsum_f32x8(acc) - x86::hsum_f32x8(accm);
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
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]));
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
        finish_block_avx2(sum, _mm256_slli_epi16(sc16, 5), a[i], d, d, acc, accm);  // offset 32 → "min" 32·scale
    }
    *out = x86::hsum_f32x8(acc) - x86::hsum_f32x8(accm);
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
// AVX-512 VNNI: 64 weights per instruction pair. maddubs leaves sums of 2
// products u8×s8 in the 16-bit halves of each 32-bit lane; the 4 weights of a
// lane always share a sub-block, so VNNI dpwssd against a vector holding each
// lane's scale in both halves applies the scale and accumulates in one step.
// (This measured ~5% faster on Zen 5 than dpbusd + dpwssd, which needs a
// zeroed register per dpbusd.) Each type only says how to lay out its
// quants and scales (an "unpack"); one dot loop and one 4×N tile serve all.
// ===========================================================================
#if defined(LP_HAVE_AVX512)
namespace {

// One super-block prepared for the VNNI loop: q[z] holds weights 64z..64z+63
// as unsigned bytes, lined up with the Q8_K quants they multiply; s[z] the
// scale of each 32-bit lane (in both 16-bit halves); m16 the 16 int16
// factors of Q8_K.bsums (mins, or offset·scale); dd the block scales d, dmin.
struct kblock512 {
    __m512i q[4];
    __m512i s[4];
    __m256i m16;
    __m128 dd;  // lane 0: d, lane 1: dmin
};

// Constants with one value in the lower 256 bits and another in the upper.
LP_TARGET_AVX512 LP_INLINE __m512i halves_epi32(int lo, int hi) {
    return _mm512_setr_epi32(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi);
}
LP_TARGET_AVX512 LP_INLINE __m512i halves_epi16(int lo, int hi) {
    return halves_epi32((int)((uint32_t)(lo & 0xFFFF) * 0x10001u), (int)((uint32_t)(hi & 0xFFFF) * 0x10001u));
}
LP_TARGET_AVX512 LP_INLINE __m512i halves_epi8(int lo, int hi) {
    return halves_epi32((int)((uint32_t)(lo & 0xFF) * 0x01010101u), (int)((uint32_t)(hi & 0xFF) * 0x01010101u));
}
LP_TARGET_AVX512 LP_INLINE __m512i bcast_256(const uint8_t* p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)p));
}

// Scales of 16-weight groups (Q2_K, Q3_K, Q6_K): lane i of s[z] covers
// weights 64z + 4i .. +3, in group 4z + i/4. sc16: the 16 scales as int16.
LP_TARGET_AVX512 LP_INLINE void group16_scales_512(__m256i sc16, kblock512& u) {
    const __m512i sc = _mm512_castsi256_si512(sc16);
    for (int z = 0; z < 4; ++z)  // word j of s[z] takes scale 4z + j/8
        u.s[z] = _mm512_permutexvar_epi16(_mm512_setr_epi32(
            0x10001 * (4 * z), 0x10001 * (4 * z), 0x10001 * (4 * z), 0x10001 * (4 * z),
            0x10001 * (4 * z + 1), 0x10001 * (4 * z + 1), 0x10001 * (4 * z + 1), 0x10001 * (4 * z + 1),
            0x10001 * (4 * z + 2), 0x10001 * (4 * z + 2), 0x10001 * (4 * z + 2), 0x10001 * (4 * z + 2),
            0x10001 * (4 * z + 3), 0x10001 * (4 * z + 3), 0x10001 * (4 * z + 3), 0x10001 * (4 * z + 3)), sc);
}

// The crumb layout (Q2_K, Q3_K): weights 64z..64z+63 are bytes 32h..32h+31,
// h = z/2, in both 256-bit halves, shifted right by 2j with j = 2(z%2) in the
// lower half and j + 1 in the upper.
LP_TARGET_AVX512 LP_INLINE void crumbs_512(const uint8_t* qs, kblock512& u) {
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
        const __m512i b = bcast_256(qs + 32 * h);
        u.q[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(b, halves_epi16(0, 2)), m3);
        u.q[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(b, halves_epi16(4, 6)), m3);
    }
}

// Sets bit `to` (2 for Q3_K, 4 for Q5_K; the quants have it clear) of every
// quant whose bit is set in a 32-byte plane where bit j of byte l belongs to
// weight 32j + l (Q3_K's hmask, Q5_K's qh). For weights 64z..64z+63 the bits
// are j = 2z (lower half) and 2z+1 (upper half): a 32-bit rotate left by
// to − j brings bit j of every byte to bit `to` of the same byte.
LP_TARGET_AVX512 LP_INLINE void or_bit_plane_512(const uint8_t* plane, int to, kblock512& u) {
    const __m512i bits = bcast_256(plane);
    const __m512i bit = _mm512_set1_epi8((char)(1 << to));
    for (int z = 0; z < 4; ++z) {
        const __m512i moved = _mm512_rolv_epi32(bits, halves_epi32((to - 2 * z) & 31, (to - 2 * z - 1) & 31));
        u.q[z] = _mm512_ternarylogic_epi32(moved, bit, u.q[z], 0xEA);  // (moved & bit) | q
    }
}

// Q4_K and Q5_K: byte c·32 + k holds weights 64c + k (low nibble) and
// 64c + 32 + k (high nibble), so a broadcast of bytes 32z.. shifted by 0
// (lower half) and 4 (upper half) gives weights 64z..64z+63.
LP_TARGET_AVX512 LP_INLINE void unpack_k4_512(const uint8_t* b, size_t qs_off, kblock512& u) {
    const __m128i sm = k4_scales_mins_avx2(b + 4);
    // lane i of s[z] takes scale 2z + i/8: a pshufb of the scale bytes (in
    // every 128-bit lane) into both 16-bit halves, zero-extended
    const __m512i sm4 = _mm512_broadcast_i32x4(sm);
    const __m512i m4 = _mm512_set1_epi8(0xF);
    for (int z = 0; z < 4; ++z) {
        u.s[z] = _mm512_shuffle_epi8(sm4, halves_epi32((int)(0xFF00FF00u | (0x10001u * (2 * z))),
                                                       (int)(0xFF00FF00u | (0x10001u * (2 * z + 1)))));
        u.q[z] = _mm512_and_si512(_mm512_srlv_epi16(bcast_256(b + qs_off + 32 * z), halves_epi16(0, 4)), m4);
    }
    // min j multiplies bsums 2j and 2j+1
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    u.m16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
    uint32_t ddmin;  // d and dmin lead the block
    std::memcpy(&ddmin, b, 4);
    u.dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddmin));
}

struct q2_k_512 {
    using block = block_q2_K;
    static LP_TARGET_AVX512 LP_INLINE void unpack(const block_q2_K& b, kblock512& u) {
        crumbs_512(b.qs, u);
        const __m128i s8 = _mm_loadu_si128((const __m128i*)b.scales);
        const __m128i m4 = _mm_set1_epi8(0xF);
        group16_scales_512(_mm256_cvtepu8_epi16(_mm_and_si128(s8, m4)), u);
        u.m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
        uint32_t ddmin;  // d, dmin adjacent
        std::memcpy(&ddmin, &b.d, 4);
        u.dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddmin));
    }
};

struct q3_k_512 {
    using block = block_q3_K;
    static LP_TARGET_AVX512 LP_INLINE void unpack(const block_q3_K& b, kblock512& u) {
        crumbs_512(b.qs, u);
        or_bit_plane_512(b.hmask, 2, u);  // quant + 4, in [0, 7]
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3k_scales_avx2(b.scales));
        group16_scales_512(sc16, u);
        u.m16 = _mm256_slli_epi16(sc16, 2);  // offset 4 → "min" 4·scale
        u.dd = _mm_cvtph_ps(_mm_set1_epi16((short)b.d));
    }
};

struct q4_k_512 {
    using block = block_q4_K;
    static LP_TARGET_AVX512 LP_INLINE void unpack(const block_q4_K& b, kblock512& u) {
        unpack_k4_512(reinterpret_cast<const uint8_t*>(&b), offsetof(block, qs), u);
    }
};

struct q5_k_512 {
    using block = block_q5_K;
    static LP_TARGET_AVX512 LP_INLINE void unpack(const block_q5_K& b, kblock512& u) {
        unpack_k4_512(reinterpret_cast<const uint8_t*>(&b), offsetof(block, qs), u);
        or_bit_plane_512(b.qh, 4, u);
    }
};

struct q6_k_512 {
    using block = block_q6_K;
    // Weights h·128 + 0..63 are the low nibbles of ql[64h..64h+63], weights
    // h·128 + 64..127 the high ones; their top 2 bits are crumbs 0,1 resp. 2,3
    // of qh[32h..32h+31], moved to bits 4-5 by word shifts (4, 2) and (0, −2).
    static LP_TARGET_AVX512 LP_INLINE void unpack(const block_q6_K& b, kblock512& u) {
        const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
        for (int h = 0; h < 2; ++h) {
            const __m512i lo = _mm512_loadu_si512(b.ql + 64 * h);
            const __m512i hi = bcast_256(b.qh + 32 * h);
            // (x & 0x30) | y in one instruction: truth table 0xEA
            u.q[2 * h] = _mm512_ternarylogic_epi32(_mm512_sllv_epi16(hi, halves_epi16(4, 2)), m30,
                                                   _mm512_and_si512(lo, m4), 0xEA);
            u.q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(hi, halves_epi16(0, 2)), m30,
                                                       _mm512_and_si512(_mm512_srli_epi16(lo, 4), m4), 0xEA);
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales));
        group16_scales_512(sc16, u);
        u.m16 = _mm256_slli_epi16(sc16, 5);  // offset 32 → "min" 32·scale
        u.dd = _mm_cvtph_ps(_mm_set1_epi16((short)b.d));
    }
};

// Per 32-bit lane: Σ scale·q·a over the super-block. maddubs leaves the sums
// of 2 products in 16-bit halves (at most 2·63·127, no saturation) and dpwssd
// multiplies both halves by the lane's scale and accumulates.
LP_TARGET_AVX512 LP_INLINE __m512i block_dot_512(const kblock512& u, const int8_t* a) {
    __m512i s01 = _mm512_madd_epi16(_mm512_maddubs_epi16(u.q[0], _mm512_loadu_si512(a)), u.s[0]);
    __m512i s23 = _mm512_madd_epi16(_mm512_maddubs_epi16(u.q[2], _mm512_loadu_si512(a + 128)), u.s[2]);
    s01 = _mm512_dpwssd_epi32(s01, _mm512_maddubs_epi16(u.q[1], _mm512_loadu_si512(a + 64)), u.s[1]);
    s23 = _mm512_dpwssd_epi32(s23, _mm512_maddubs_epi16(u.q[3], _mm512_loadu_si512(a + 192)), u.s[3]);
    return _mm512_add_epi32(s01, s23);
}

template <class K>
LP_TARGET_AVX512 LP_INLINE void vec_dot_k_avx512(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const typename K::block*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]));
        kblock512 u;
        K::unpack(w[i], u);
        const __m512i sum = block_dot_512(u, a[i].qs);
        const __m256i ms = _mm256_madd_epi16(u.m16, _mm256_loadu_si256((const __m256i*)a[i].bsums));
        const __m128 f = _mm_mul_ps(u.dd, _mm_set1_ps(a[i].d));  // d·d_a, dmin·d_a
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_broadcastss_ps(f), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_broadcastss_ps(_mm_movehdup_ps(f)), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - x86::hsum_f32x8(accm);
}

// 4 weight rows × NC activation rows: each super-block is unpacked once per
// row and used for all NC columns. Per block, each column's bsums are turned
// into floats scaled by its d_a once, and each row's m16 into floats scaled by
// its dmin once, so the min term of a (row, column) pair is one fnmadd.
template <class K, int NC>
LP_TARGET_AVX512 LP_INLINE void gemm_tile_k_avx512_4xn(int64_t n, const uint8_t* w, size_t w_stride, const uint8_t* a,
                                                       size_t a_stride, float* out, size_t out_stride) {
    __m512 acc[4][NC];
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const block_q8_K* ab[NC];
        __m512 bsum[NC];  // d_a · bsums, 16 floats
        for (int c = 0; c < NC; ++c) {
            ab[c] = reinterpret_cast<const block_q8_K*>(a + c * a_stride) + i;
            const __m512i b32 = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i*)ab[c]->bsums));
            bsum[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(b32), _mm512_set1_ps(ab[c]->d));
        }
        for (int r = 0; r < 4; ++r) {
            kblock512 u;
            K::unpack(reinterpret_cast<const typename K::block*>(w + r * w_stride)[i], u);
            const __m512 mins = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(u.m16)),
                                              _mm512_broadcastss_ps(_mm_movehdup_ps(u.dd)));
            const __m512 d = _mm512_broadcastss_ps(u.dd);
            for (int c = 0; c < NC; ++c) {
                const __m512i sum = block_dot_512(u, ab[c]->qs);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(ab[c]->d)), acc[r][c]);
                acc[r][c] = _mm512_fnmadd_ps(mins, bsum[c], acc[r][c]);
            }
        }
    }
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < NC; ++c) out[c * out_stride + r] = _mm512_reduce_add_ps(acc[r][c]);
}

template <class K>
LP_TARGET_AVX512 LP_INLINE void gemm_tile_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a,
                                                   size_t a_stride, float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nr == 4) {
        switch (nc) {
            case 1:
                // Mat-vec (the driver passes 4 rows × 1 column). Row by row
                // streams each row in address order with prefetch; walking 4
                // rows block by block measured 3x slower from memory.
                for (int r = 0; r < 4; ++r) vec_dot_k_avx512<K>(n, out + r, wb + r * w_stride, ab);
                return;
            case 4: gemm_tile_k_avx512_4xn<K, 4>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            case 3: gemm_tile_k_avx512_4xn<K, 3>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            case 2: gemm_tile_k_avx512_4xn<K, 2>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            default: break;
        }
    }
    for (int r = 0; r < nr; ++r)  // edge tiles (fewer than 4 rows)
        for (int c = 0; c < nc; ++c) vec_dot_k_avx512<K>(n, out + c * out_stride + r, wb + r * w_stride, ab + c * a_stride);
}

}  // namespace

#define LP_KQUANT_AVX512_KERNELS(tname, K)                                                                       \
    LP_TARGET_AVX512 void vec_dot_##tname##_q8_k_avx512(int64_t n, float* out, const void* w, const void* a) {   \
        vec_dot_k_avx512<K>(n, out, w, a);                                                                       \
    }                                                                                                            \
    LP_TARGET_AVX512 void gemm_tile_##tname##_q8_k_avx512(int64_t n, const void* w, size_t ws, const void* a,    \
                                                          size_t as, float* out, size_t os, int nr, int nc) {    \
        gemm_tile_k_avx512<K>(n, w, ws, a, as, out, os, nr, nc);                                                 \
    }
LP_KQUANT_AVX512_KERNELS(q2_k, q2_k_512)
LP_KQUANT_AVX512_KERNELS(q3_k, q3_k_512)
LP_KQUANT_AVX512_KERNELS(q4_k, q4_k_512)
LP_KQUANT_AVX512_KERNELS(q5_k, q5_k_512)
LP_KQUANT_AVX512_KERNELS(q6_k, q6_k_512)
#undef LP_KQUANT_AVX512_KERNELS

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

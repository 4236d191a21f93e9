// legacy_x86.cpp — the x86 kernels of the legacy block formats (formats,
// reference code and registration: legacy.cpp): Q8_0 / Q8_1 activation
// quantizers and the Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 dot products for AVX2 and
// AVX-512 VNNI, with the 4 x NC tiles of batched products. Each gives its
// _ref twin's result up to float summation order (the quantizers: the same
// bytes). A portable build without LP_ENABLE_AVX2 compiles this file to the
// empty registration.
#include "legacy_x86.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "../common.h"
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

#if defined(LP_HAVE_AVX512) && !defined(LP_HAVE_AVX2)
#error "the AVX-512 kernels finish row tails with the AVX2 ones; enable both"
#endif

namespace lp {

namespace {

// ===========================================================================
// AVX2: one block (32 weights) per step, maddubs + madd to int32 lanes
// ===========================================================================
#if defined(LP_HAVE_AVX2)

using namespace x86;

// round-half-away-from-zero(v) as int32, exactly roundf: floor |v|, add one
// if the dropped fraction is >= 0.5, put the sign back.
LP_TARGET_AVX2 LP_INLINE __m256i round_away_epi32_avx2(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_andnot_ps(sign, v);
    __m256 r = _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_sub_ps(a, r), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    r = _mm256_add_ps(r, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
    return _mm256_cvttps_epi32(_mm256_or_ps(r, _mm256_and_ps(sign, v)));
}

// One Q8 block; returns d before fp16 rounding and the sum of the quants.
LP_TARGET_AVX2 LP_INLINE float quantize_block_q8_avx2(const float* x, int8_t* q, int* sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127;
    const __m256 id = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    __m256i i[4];
    for (int k = 0; k < 4; ++k) i[k] = round_away_epi32_avx2(_mm256_mul_ps(v[k], id));
    *sum = hsum_i32x8(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
    // packs interleave 128-bit lanes; the final permute restores element order
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i*)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return d;
}

LP_TARGET_AVX2 void quantize_row_q8_0_avx2(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    int sum;
    for (int64_t ib = 0; ib < n / QK8_0; ++ib, x += QK8_0)
        y[ib].d = fp32_to_fp16(quantize_block_q8_avx2(x, y[ib].qs, &sum));
}

LP_TARGET_AVX2 void quantize_row_q8_1_avx2(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_1*>(dst);
    int sum;
    for (int64_t ib = 0; ib < n / QK8_1; ++ib, x += QK8_1) {
        const float d = quantize_block_q8_avx2(x, y[ib].qs, &sum);
        y[ib].d = fp32_to_fp16(d);
        y[ib].s = fp32_to_fp16((float)sum * d);
    }
}

// 16 nibble-packed bytes -> 32 bytes 0..15 in element order.
LP_TARGET_AVX2 LP_INLINE __m256i unpack_nibbles_avx2(const uint8_t* qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i*)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

// Bit j of qh (4 bytes) -> 0x10 in byte j: the fifth bit of the Q5 quants.
LP_TARGET_AVX2 LP_INLINE __m256i unpack_q5_high_avx2(const uint8_t* qh_bytes) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)qh), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// sum((q - offset) * a) for unsigned quants q <= 31 as 8 int32 lanes.
LP_TARGET_AVX2 LP_INLINE __m256i dot_offset_avx2(__m256i q, __m256i a, int offset) {
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, a), _mm256_maddubs_epi16(_mm256_set1_epi8((char)offset), a));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

LP_TARGET_AVX2 void vec_dot_q4_0_q8_0_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q4_0*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / QK4_0; ++ib) {
        const __m256i p = dot_offset_avx2(unpack_nibbles_avx2(x[ib].qs), _mm256_loadu_si256((const __m256i*)y[ib].qs), 8);
        const __m256 s = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
    }
    *out = hsum_f32x8(acc);
}

LP_TARGET_AVX2 void vec_dot_q4_1_q8_1_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q4_1*>(w_row);
    const auto* y = static_cast<const block_q8_1*>(a_row);
    __m256 acc = _mm256_setzero_ps();
    float sum_min = 0;
    for (int64_t ib = 0; ib < n / QK4_1; ++ib) {
        const __m256i p = dot_u8i8x32(unpack_nibbles_avx2(x[ib].qs), _mm256_loadu_si256((const __m256i*)y[ib].qs));
        const __m256 s = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
        sum_min += half_to_float(x[ib].m) * half_to_float(y[ib].s);
    }
    *out = hsum_f32x8(acc) + sum_min;
}

LP_TARGET_AVX2 void vec_dot_q5_0_q8_0_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q5_0*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / QK5_0; ++ib) {
        const __m256i q = _mm256_or_si256(unpack_nibbles_avx2(x[ib].qs), unpack_q5_high_avx2(x[ib].qh));
        const __m256i p = dot_offset_avx2(q, _mm256_loadu_si256((const __m256i*)y[ib].qs), 16);
        const __m256 s = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
    }
    *out = hsum_f32x8(acc);
}

LP_TARGET_AVX2 void vec_dot_q5_1_q8_1_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q5_1*>(w_row);
    const auto* y = static_cast<const block_q8_1*>(a_row);
    __m256 acc = _mm256_setzero_ps();
    float sum_min = 0;
    for (int64_t ib = 0; ib < n / QK5_1; ++ib) {
        const __m256i q = _mm256_or_si256(unpack_nibbles_avx2(x[ib].qs), unpack_q5_high_avx2(x[ib].qh));
        const __m256i p = dot_u8i8x32(q, _mm256_loadu_si256((const __m256i*)y[ib].qs));
        const __m256 s = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
        sum_min += half_to_float(x[ib].m) * half_to_float(y[ib].s);
    }
    *out = hsum_f32x8(acc) + sum_min;
}

LP_TARGET_AVX2 void vec_dot_q8_0_q8_0_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q8_0*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    const int64_t nb = n / QK8_0;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {  // two chains so the fma latency overlaps
        const __m256i p0 = dot_i8x32(_mm256_loadu_si256((const __m256i*)x[ib].qs), _mm256_loadu_si256((const __m256i*)y[ib].qs));
        const __m256i p1 = dot_i8x32(_mm256_loadu_si256((const __m256i*)x[ib + 1].qs), _mm256_loadu_si256((const __m256i*)y[ib + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(half_to_float(x[ib + 1].d) * half_to_float(y[ib + 1].d)), acc1);
    }
    if (ib < nb) {
        const __m256i p0 = dot_i8x32(_mm256_loadu_si256((const __m256i*)x[ib].qs), _mm256_loadu_si256((const __m256i*)y[ib].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d)), acc0);
    }
    *out = hsum_f32x8(_mm256_add_ps(acc0, acc1));
}

#endif  // LP_HAVE_AVX2

// ===========================================================================
// AVX-512 + VNNI. Kernels take up to 4 weight rows against one activation row
// (simd_x86.h: gemm_tile_by_rows, which also says how mat-vec streams) and
// work on groups of 8 blocks. The design follows what a Zen 5 core sustains
// per cycle (measured): 4 vector ALU ports of which only 2 shuffle and 2
// multiply, and ~1.5 unaligned loads. So:
//  - weights come in with a few 64-byte loads per 8 blocks, and word permutes
//    take both the quants (4-bit: quads layout; 8-bit: pairs) and the fp16
//    scales out of the same registers; activations with broadcast loads;
//  - offsets (q - 8, q - 16, and +128 to make signed int8 unsigned) become one
//    activation-sum term per tile, pre-loaded into the vpdpbusd accumulator;
//  - int32 lanes are reduced with in-lane unpacks, then converted and scaled
//    once per 8 blocks against scales gathered in the same lane order.
// Blocks past the last multiple of 8 go through the AVX2 kernel.
// Mat-mat: Q8_0 also gives 4 x NC register-blocked tiles its weights and
// activations per group (load_weights / load_act, simd_x86.h:
// gemm_tile_blocked): +40-90% over walking the columns one by one, with the
// same results bit for bit. Q4_0 and Q5_0 moved to row panels
// (legacy_panels_x86.cpp: 16 weight rows in the lanes, ~2x these tiles).
// ===========================================================================
#if defined(LP_HAVE_AVX512)

LP_TARGET_AVX512 LP_INLINE __m128i round_away_epi8_avx512(__m512 v) {
    const __m512 a = _mm512_abs_ps(v);
    __m512 r = _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(a, r), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    r = _mm512_mask_add_ps(r, up, r, _mm512_set1_ps(1.0f));
    __m512i i = _mm512_cvttps_epi32(r);
    i = _mm512_mask_sub_epi32(i, _mm512_movepi32_mask(_mm512_castps_si512(v)), _mm512_setzero_si512(), i);
    return _mm512_cvtepi32_epi8(i);
}

// One Q8 block; returns d before fp16 rounding and the sum of the quants.
LP_TARGET_AVX512 LP_INLINE float quantize_block_q8_avx512(const float* x, int8_t* q, int* sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float d = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / 127;
    const __m512 id = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    const __m128i q0 = round_away_epi8_avx512(_mm512_mul_ps(v0, id));
    const __m128i q1 = round_away_epi8_avx512(_mm512_mul_ps(v1, id));
    _mm_storeu_si128((__m128i*)q, q0);
    _mm_storeu_si128((__m128i*)(q + 16), q1);
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtepi8_epi32(q0), _mm512_cvtepi8_epi32(q1)));
    return d;
}

LP_TARGET_AVX512 void quantize_row_q8_0_avx512(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    int sum;
    for (int64_t ib = 0; ib < n / QK8_0; ++ib, x += QK8_0)
        y[ib].d = fp32_to_fp16(quantize_block_q8_avx512(x, y[ib].qs, &sum));
}

LP_TARGET_AVX512 void quantize_row_q8_1_avx512(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_1*>(dst);
    int sum;
    for (int64_t ib = 0; ib < n / QK8_1; ++ib, x += QK8_1) {
        const float d = quantize_block_q8_avx512(x, y[ib].qs, &sum);
        y[ib].d = fp32_to_fp16(d);
        y[ib].s = fp32_to_fp16((float)sum * d);
    }
}

// 4-bit quants q of a quad vector as 16*q (Q4_1): the low nibbles shifted
// up, the high ones masked in place. Both halves then share one vpdpbusd
// chain, the 1/16 going into the activation scale.
LP_TARGET_AVX512 LP_INLINE __m512i low_nibbles_x16(__m512i q) {
    return _mm512_and_si512(_mm512_slli_epi16(q, 4), _mm512_set1_epi8((char)0xf0));
}
LP_TARGET_AVX512 LP_INLINE __m512i high_nibbles_x16(__m512i q) {
    return _mm512_and_si512(q, _mm512_set1_epi8((char)0xf0));
}

// 5-bit quants of a quad vector (blocks b..b+3), low or high 16 elements:
// the nibbles plus 16 where the block's qh has the bit.
template <typename block>
LP_TARGET_AVX512 LP_INLINE void unpack_q5_quad(__m512i q, const block* b, __m512i* lo, __m512i* hi) {
    uint64_t m_lo = 0, m_hi = 0;
    for (int l = 0; l < 4; ++l) {
        uint32_t h;
        std::memcpy(&h, b[l].qh, 4);
        m_lo |= (uint64_t)(h & 0xffff) << (16 * l);
        m_hi |= (uint64_t)(h >> 16) << (16 * l);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    const __m512i l = _mm512_and_si512(q, m4), h = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    *lo = _mm512_mask_add_epi8(l, _cvtu64_mask64(m_lo), l, sixteen);
    *hi = _mm512_mask_add_epi8(h, _cvtu64_mask64(m_hi), h, sixteen);
}

struct q4_1_q8_1_avx512 {
    static constexpr int stream_rows = 4;
    template <int NR, bool STREAM>
    LP_TARGET_AVX512 static void rows(int64_t n, const uint8_t* w, size_t w_stride, const void* a_row, float* out) {
        const auto* y = static_cast<const block_q8_1*>(a_row);
        const int64_t nb = n / QK4_1, nb8 = nb & ~(int64_t)7;
        __m512 acc[NR];
        __m256 acc_min[NR];
        for (int r = 0; r < NR; ++r) { acc[r] = _mm512_setzero_ps(); acc_min[r] = _mm256_setzero_ps(); }
        [[maybe_unused]] const char* pf = prefetch_start(w, w_stride, NR);
        for (int64_t ib = 0; ib < nb8; ib += 8) {
            if constexpr (STREAM) prefetch_step<NR * 8 * (int)sizeof(block_q4_1)>(pf);
            const act_quads a = load_act_quads(y + ib);
            const __m512 da = _mm512_mul_ps(gather_halves16<sizeof(block_q8_1), 0, lane_layout::quads>(y + ib),
                                            _mm512_set1_ps(1.0f / 16));
            const __m256 sa = gather_halves8<sizeof(block_q8_1), offsetof(block_q8_1, s)>(y + ib);
            for (int r = 0; r < NR; ++r) {
                const auto* x = reinterpret_cast<const block_q4_1*>(w + r * w_stride) + ib;
                const loaded<3> g = load_group_4bit<sizeof(block_q4_1)>(x);
                __m512i q[2], s[2];
                nibble_quads_of<sizeof(block_q4_1), offsetof(block_q4_1, qs)>(g, &q[0], &q[1]);
                for (int h = 0; h < 2; ++h) {
                    s[h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), low_nibbles_x16(q[h]), a.lo[h]);
                    s[h] = _mm512_dpbusd_epi32(s[h], high_nibbles_x16(q[h]), a.hi[h]);
                }
                const __m512 dw = halves_of<sizeof(block_q4_1), 0, lane_layout::quads>(g);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce_quads_x2(s[0], s[1])), _mm512_mul_ps(dw, da), acc[r]);
                const __m512 mw = halves_of<sizeof(block_q4_1), offsetof(block_q4_1, m), lane_layout::eight>(g);
                acc_min[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(mw), sa, acc_min[r]);
            }
        }
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const block_q4_1*>(w + r * w_stride);
            out[r] = _mm512_reduce_add_ps(acc[r]) + hsum_f32x8(acc_min[r]) +
                     tail_avx2(vec_dot_q4_1_q8_1_avx2, nb, nb8, x, y);
        }
    }
};

// Q5_1: quants 0..31 (no room for the x16 trick), a min per block. (The
// template also covers Q5_0's offset 16; Q5_0 itself now runs on the row
// panels of legacy_panels_x86.cpp, as does Q4_0.)
template <typename wblock_, typename ablock_, bool has_min>
struct q5_avx512 {
    static constexpr int stream_rows = 4;
    using wblock = wblock_;
    using ablock = ablock_;
    template <int NR, bool STREAM>
    LP_TARGET_AVX512 static void rows(int64_t n, const uint8_t* w, size_t w_stride, const void* a_row, float* out) {
        const auto* y = static_cast<const ablock*>(a_row);
        const int64_t nb = n / 32, nb8 = nb & ~(int64_t)7;
        __m512 acc[NR];
        __m256 acc_min[NR];
        for (int r = 0; r < NR; ++r) { acc[r] = _mm512_setzero_ps(); acc_min[r] = _mm256_setzero_ps(); }
        [[maybe_unused]] const char* pf = prefetch_start(w, w_stride, NR);
        for (int64_t ib = 0; ib < nb8; ib += 8) {
            if constexpr (STREAM) prefetch_step<NR * 8 * (int)sizeof(wblock)>(pf);
            const act_quads a = load_act_quads(y + ib);
            const __m512 da = gather_halves16<sizeof(ablock), 0, lane_layout::quads>(y + ib);
            __m512i init[2];  // -16 * sum for Q5_0's offset; 0 for Q5_1
            for (int h = 0; h < 2; ++h) init[h] = has_min ? _mm512_setzero_si512() : _mm512_srai_epi32(a.neg128[h], 3);
            __m256 sa = _mm256_setzero_ps();
            if constexpr (has_min) sa = gather_halves8<sizeof(ablock), offsetof(block_q8_1, s)>(y + ib);
            for (int r = 0; r < NR; ++r) {
                const auto* x = reinterpret_cast<const wblock*>(w + r * w_stride) + ib;
                const loaded<3> g = load_group_4bit<sizeof(wblock)>(x);
                __m512i q[2], s[2];
                nibble_quads_of<sizeof(wblock), offsetof(wblock, qs)>(g, &q[0], &q[1]);
                for (int h = 0; h < 2; ++h) {
                    __m512i lo, hi;
                    unpack_q5_quad(q[h], x + 4 * h, &lo, &hi);
                    s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init[h], lo, a.lo[h]), hi, a.hi[h]);
                }
                const __m512 dw = halves_of<sizeof(wblock), 0, lane_layout::quads>(g);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce_quads_x2(s[0], s[1])), _mm512_mul_ps(dw, da), acc[r]);
                if constexpr (has_min) {
                    const __m512 mw = halves_of<sizeof(wblock), offsetof(block_q5_1, m), lane_layout::eight>(g);
                    acc_min[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(mw), sa, acc_min[r]);
                }
            }
        }
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const wblock*>(w + r * w_stride);
            const vec_dot_fn tail = has_min ? vec_dot_q5_1_q8_1_avx2 : vec_dot_q5_0_q8_0_avx2;
            out[r] = _mm512_reduce_add_ps(acc[r]) + hsum_f32x8(acc_min[r]) + tail_avx2(tail, nb, nb8, x, y);
        }
    }
};
using q5_1_q8_1_avx512 = q5_avx512<block_q5_1, block_q8_1, true>;

// The blocks of a Q8_0 row past its last group of 8 (nb8 <= b < nb, at most
// 7), bit for bit what vec_dot_q8_0_q8_0_avx2 returns for them (rows and cols
// below finish with it, as the tiles' tile_tail does): the same 8 int32 lanes
// per block, scale d_w * d_a, two fma chains (even blocks / odd blocks) and
// horizontal sum, but two blocks per 512-bit vector (chain 0 in the low half,
// chain 1 in the high) and the activation half prepared once for every row.
// Gemma's 640-wide rows are 20 blocks: the 4-block tail is a fifth of the
// work, and as a call of the AVX2 kernel per (row, column) it cost as much as
// the other 16 blocks.
struct q8_0_tail_act {
    __m512i q[4], off[4];  // activation pairs; -128 * sum per int32 lane
    __m512 d[4];           // their scales, 8 lanes per block
    int n = 0;             // blocks (0..7)
};

LP_TARGET_AVX512 static inline void prepare_q8_0_tail(const block_q8_0* y, int64_t nb8, int64_t nb, q8_0_tail_act* t) {
    t->n = (int)(nb - nb8);
    for (int j = 0; 2 * j < t->n; ++j) {
        const block_q8_0& b0 = y[nb8 + 2 * j];
        const bool two = 2 * j + 1 < t->n;
        const block_q8_0& b1 = two ? y[nb8 + 2 * j + 1] : b0;
        t->q[j] = load_pair_32(b0.qs, b1.qs);
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), t->q[j]);
        t->off[j] = _mm512_sub_epi32(_mm512_setzero_si512(), s);
        t->d[j] = _mm512_insertf32x8(_mm512_set1_ps(half_to_float(b0.d)), _mm256_set1_ps(half_to_float(b1.d)), 1);
    }
}

// The weight half of a row's tail (+128 quants and scales per block pair):
// prepared once per row, used by every column (matvec_cols: for Gemma's
// 640-wide head the per-(row, column) half-to-float and pair loads were a
// third of the 4-column kernel).
struct q8_0_tail_w {
    __m512i q[4];
    __m512 d[4];
};

LP_TARGET_AVX512 static inline void prepare_q8_0_tail_w(const block_q8_0* x, int64_t nb8, int n, q8_0_tail_w* t) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int j = 0; 2 * j < n; ++j) {
        const block_q8_0& b0 = x[nb8 + 2 * j];
        const bool two = 2 * j + 1 < n;
        const block_q8_0& b1 = two ? x[nb8 + 2 * j + 1] : b0;
        t->q[j] = _mm512_xor_si512(load_pair_32(b0.qs, b1.qs), flip);
        t->d[j] = _mm512_insertf32x8(_mm512_set1_ps(half_to_float(b0.d)), _mm256_set1_ps(half_to_float(b1.d)), 1);
    }
}

LP_TARGET_AVX512 static inline float q8_0_tail(const q8_0_tail_w& w, const q8_0_tail_act& t) {
    if (t.n == 0) return 0.0f;
    __m512 acc = _mm512_setzero_ps();
    for (int j = 0; 2 * j < t.n; ++j) {
        const bool two = 2 * j + 1 < t.n;
        const __m512i p = _mm512_dpbusd_epi32(t.off[j], w.q[j], t.q[j]);
        // a lone last block leaves chain 1 as it is (mask3: lanes off keep acc)
        acc = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(w.d[j], t.d[j]), acc,
                                    two ? (__mmask16)0xffff : (__mmask16)0x00ff);
    }
    return hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
}

LP_TARGET_AVX512 static inline float q8_0_tail(const block_q8_0* x, int64_t nb8, const q8_0_tail_act& t) {
    if (t.n == 0) return 0.0f;
    q8_0_tail_w w;
    prepare_q8_0_tail_w(x, nb8, t.n, &w);
    return q8_0_tail(w, t);
}

// Q8_0 weights enter vpdpbusd as unsigned w + 128 (xor 0x80); the shared
// -128*sum term takes the 128 back out. Pairs layout: 32 bytes per block.
struct q8_0_q8_0_avx512 {
    static constexpr int stream_rows = 1;
    using wblock = block_q8_0;
    using ablock = block_q8_0;
    static constexpr int tail_offset = 128, tail_chains = 2;  // as vec_dot_q8_0_q8_0_avx2
    LP_TARGET_AVX2 static __m256i tail_quants(const block_q8_0& b) {
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), _mm256_set1_epi8((char)0x80));
    }
    // Tile pieces (gemm_tile_4xn): activations per column, weights (+128) per row.
    LP_TARGET_AVX512 static tile_act load_act(const block_q8_0* y) {
        __m512i v[4];
        for (int p = 0; p < 4; ++p) v[p] = load_pair_32(y[2 * p].qs, y[2 * p + 1].qs);
        tile_act a;
        transpose_pairs(v, a.v);
        a.offset = tile_offset(a.v, 0);
        a.d = gather_halves16<sizeof(block_q8_0), 0, lane_layout::pairs>(y);
        return a;
    }
    LP_TARGET_AVX512 static tile_weights load_weights(const block_q8_0* x) {
        const loaded<5> g = load_group_8bit<sizeof(block_q8_0)>(x);
        __m512i q[4];
        byte_pairs_of<sizeof(block_q8_0), offsetof(block_q8_0, qs)>(g, q);
        for (int p = 0; p < 4; ++p) q[p] = _mm512_xor_si512(q[p], _mm512_set1_epi8((char)0x80));
        tile_weights w;
        transpose_pairs(q, w.q);
        w.d = halves_of<sizeof(block_q8_0), 0>(g);
        return w;
    }
    template <int NR, bool STREAM>
    LP_TARGET_AVX512 static void rows(int64_t n, const uint8_t* w, size_t w_stride, const void* a_row, float* out) {
        const auto* y = static_cast<const block_q8_0*>(a_row);
        const int64_t nb = n / QK8_0, nb8 = nb & ~(int64_t)7;
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        __m512 acc[NR];
        for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
        [[maybe_unused]] const char* pf = prefetch_start(w, w_stride, NR);
        for (int64_t ib = 0; ib < nb8; ib += 8) {
            if constexpr (STREAM) prefetch_step<NR * 8 * (int)sizeof(block_q8_0)>(pf);
            const act_pairs a = load_act_pairs(y + ib);
            const __m512 da = gather_halves16<sizeof(block_q8_0), 0, lane_layout::pairs>(y + ib);
            for (int r = 0; r < NR; ++r) {
                const auto* x = reinterpret_cast<const block_q8_0*>(w + r * w_stride) + ib;
                const loaded<5> g = load_group_8bit<sizeof(block_q8_0)>(x);
                __m512i q[4], s[4];
                byte_pairs_of<sizeof(block_q8_0), offsetof(block_q8_0, qs)>(g, q);
                for (int p = 0; p < 4; ++p) s[p] = _mm512_dpbusd_epi32(a.neg128[p], _mm512_xor_si512(q[p], flip), a.v[p]);
                const __m512 dw = halves_of<sizeof(block_q8_0), 0>(g);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce_pairs_x4(s[0], s[1], s[2], s[3])),
                                         _mm512_mul_ps(dw, da), acc[r]);
            }
        }
        q8_0_tail_act tail;
        prepare_q8_0_tail(y, nb8, nb, &tail);
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const block_q8_0*>(w + r * w_stride);
            out[r] = _mm512_reduce_add_ps(acc[r]) + q8_0_tail(x, nb8, tail);
        }
    }
    // NC activation rows against nr weight rows (type_traits::matvec_cols): per
    // (row, column) exactly rows<1, true>'s operations in its order, so the
    // bits are mat-vec's. Each row's 8-block groups are loaded and unpacked
    // once for all NC columns, whose activations are prepared once per call
    // (the 4x4 tiles hold both in registers and spill: at 2-4 columns they
    // cost more than NC mat-vec passes).
    template <int NC>
    LP_TARGET_AVX512 static void cols(int64_t n, const uint8_t* w, size_t w_stride, int nr, const uint8_t* a,
                                      size_t a_stride, float* out, size_t out_stride) {
        const int64_t nb = n / QK8_0, nb8 = nb & ~(int64_t)7, ng = nb8 / 8;
        struct alignas(64) prep {
            act_pairs p;
            __m512 d;
        };
        static thread_local std::vector<prep> buf;
        if (buf.size() < (size_t)(ng * NC)) buf.resize((size_t)(ng * NC));
        const block_q8_0* y[NC];
        q8_0_tail_act tails[NC];
        for (int c = 0; c < NC; ++c) {
            y[c] = reinterpret_cast<const block_q8_0*>(a + c * a_stride);
            prepare_q8_0_tail(y[c], nb8, nb, &tails[c]);
            for (int64_t g = 0; g < ng; ++g) {
                buf[g * NC + c].p = load_act_pairs(y[c] + 8 * g);
                buf[g * NC + c].d = gather_halves16<sizeof(block_q8_0), 0, lane_layout::pairs>(y[c] + 8 * g);
            }
        }
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int r = 0; r < nr; ++r) {
            const uint8_t* wr = w + r * w_stride;
            const auto* x = reinterpret_cast<const block_q8_0*>(wr);
            const char* pf = prefetch_start(wr, w_stride, 1);
            __m512 acc[NC];
            for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
            for (int64_t g = 0; g < ng; ++g) {
                prefetch_step<8 * (int)sizeof(block_q8_0)>(pf);
                const loaded<5> gl = load_group_8bit<sizeof(block_q8_0)>(x + 8 * g);
                __m512i q[4];
                byte_pairs_of<sizeof(block_q8_0), offsetof(block_q8_0, qs)>(gl, q);
                for (int p = 0; p < 4; ++p) q[p] = _mm512_xor_si512(q[p], flip);
                const __m512 dw = halves_of<sizeof(block_q8_0), 0>(gl);
#pragma GCC unroll 4
                for (int c = 0; c < NC; ++c) {
                    const prep& pr = buf[g * NC + c];
                    __m512i s[4];
                    for (int p = 0; p < 4; ++p) s[p] = _mm512_dpbusd_epi32(pr.p.neg128[p], q[p], pr.p.v[p]);
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce_pairs_x4(s[0], s[1], s[2], s[3])),
                                             _mm512_mul_ps(dw, pr.d), acc[c]);
                }
            }
            q8_0_tail_w tw;
            if (nb8 < nb) prepare_q8_0_tail_w(x, nb8, (int)(nb - nb8), &tw);
            for (int c = 0; c < NC; ++c)
                out[c * out_stride + r] = _mm512_reduce_add_ps(acc[c]) + q8_0_tail(tw, tails[c]);
        }
    }
};

LP_TARGET_AVX512 void matvec_cols_q8_0(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                       float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    switch (nc) {
        case 4: q8_0_q8_0_avx512::cols<4>(n, wb, w_stride, nr, ab, a_stride, out, out_stride); return;
        case 3: q8_0_q8_0_avx512::cols<3>(n, wb, w_stride, nr, ab, a_stride, out, out_stride); return;
        case 2: q8_0_q8_0_avx512::cols<2>(n, wb, w_stride, nr, ab, a_stride, out, out_stride); return;
        default: q8_0_q8_0_avx512::cols<1>(n, wb, w_stride, nr, ab, a_stride, out, out_stride); return;
    }
}

#endif  // LP_HAVE_AVX512

}  // namespace

void register_legacy_x86(type_traits* table, isa level) {
    [[maybe_unused]] type_traits& q8_1 = table[(int)ggml_type::Q8_1];
    [[maybe_unused]] type_traits& q4_0 = table[(int)ggml_type::Q4_0];
    [[maybe_unused]] type_traits& q4_1 = table[(int)ggml_type::Q4_1];
    [[maybe_unused]] type_traits& q5_0 = table[(int)ggml_type::Q5_0];
    [[maybe_unused]] type_traits& q5_1 = table[(int)ggml_type::Q5_1];
    [[maybe_unused]] type_traits& q8_0 = table[(int)ggml_type::Q8_0];
#if defined(LP_HAVE_AVX2)
    if (level == isa::avx2) {
        q8_0.from_float = quantize_row_q8_0_avx2;
        q8_1.from_float = quantize_row_q8_1_avx2;
        q4_0.vec_dot = vec_dot_q4_0_q8_0_avx2;
        q4_1.vec_dot = vec_dot_q4_1_q8_1_avx2;
        q5_0.vec_dot = vec_dot_q5_0_q8_0_avx2;
        q5_1.vec_dot = vec_dot_q5_1_q8_1_avx2;
        q8_0.vec_dot = vec_dot_q8_0_q8_0_avx2;
        for (type_traits* t : {&q4_0, &q4_1, &q5_0, &q5_1, &q8_0}) t->vec_dot_isa = isa::avx2;
    }
#endif
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        q8_0.from_float = quantize_row_q8_0_avx512;
        q8_1.from_float = quantize_row_q8_1_avx512;
        q4_1.vec_dot = vec_dot_by_rows<q4_1_q8_1_avx512>;
        q4_1.gemm_tile = gemm_tile_by_rows<q4_1_q8_1_avx512>;
        // Q4_0, Q5_0: row panels (legacy_panels_x86.cpp, registered after this)
        q5_1.vec_dot = vec_dot_by_rows<q5_1_q8_1_avx512>;
        q5_1.gemm_tile = gemm_tile_by_rows<q5_1_q8_1_avx512>;
        q8_0.vec_dot = vec_dot_by_rows<q8_0_q8_0_avx512>;
        q8_0.gemm_tile = gemm_tile_blocked<q8_0_q8_0_avx512>;
        q8_0.matvec_cols = matvec_cols_q8_0;
        q8_0.matvec_batch_max = 8;  // matvec_cols beats the tiles below ~8 rows (Zen 4)
        // and one row: cols<1> (activations prepared once per 16 rows, rows
        // streamed one by one) reads Gemma's 170 MB head 6-9% faster than
        // the 4-row mat-vec tile, and 1B-shaped layers ~4% (Xeon, 2 threads)
        q8_0.matvec_by_cols = true;
        for (type_traits* t : {&q4_0, &q4_1, &q5_0, &q5_1, &q8_0}) t->vec_dot_isa = isa::avx512;
    }
#endif
    (void)table;
    (void)level;
}

}  // namespace lp

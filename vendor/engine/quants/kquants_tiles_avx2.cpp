// kquants_tiles_avx2.cpp — register-blocked AVX2 tiles (gemm_tile_fn) for
// Q4_K, Q5_K and Q6_K, the k-quants of Q4_K_M models. The AVX2 level used to
// run mat-mat as one vec_dot (kquants_x86.cpp) per (row, column): every
// product re-decoded the 12 packed scale bytes, re-unpacked the 4/5/6-bit
// quants and re-built the per-group scale words. Here a row's super-block is
// decoded once per chunk of 32 weights and used against up to 4 activation
// rows; from 4 columns on (panels) each row is decoded once for all columns.
//
// Per (row, column) a tile runs the vec_dot's sequence: per super-block the
// exact int32 lanes Σ_g scale_g·Σ q·a (maddubs, then madd with the scale
// words) and Σ min·bsum, paired by one vphaddd, converted and fused-multiply-
// added into one 8-lane float accumulator with [d d −dmin −dmin ...]·d_a
// (kq_x86::k_block_fma), its horizontal sum at the end. So tile, vec_dot and
// mat-vec (the driver's 4 × 1 tiles) give the same bits: batches equal
// token-by-token decoding.
//
// No AVX-VNNI variant: vpdpbusd cannot take the int16 group scales that
// madd applies for free, so it would need a multiply per group; a vpdpwssd
// variant (madd with the scale words and the add fused, the same lanes)
// measured no faster than the plain panel (159-160 GFLOP/s, Zen 5, 1 thread)
// once the panel's chains stopped spilling, so it was dropped.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../common.h"
#include "blocks.h"
#include "kquants_x86.h"

#if defined(LP_X86)
#include <immintrin.h>
#endif

#include "kquants_x86_common.h"
#include "simd_x86.h"
#include "tiles_avx2_common.h"

namespace lp {

#if defined(LP_HAVE_AVX2)

namespace {

using kq_x86::k4_scales_mins_avx2;
using kq_x86::k_block_fma;
using kq_x86::k_scale_pattern;
using kq_x86::k_scale_pattern_f16;

// pshufb control broadcasting int16 word w (0-7) across a 128-bit lane.
LP_TARGET_AVX2 LP_INLINE __m128i word_ctrl(int w) { return _mm_set1_epi16((short)(((2 * w + 1) << 8) | (2 * w))); }

// Σ over 32 weights of q·a times the int16 scale words, as 8 int32 lanes.
LP_TARGET_AVX2 LP_INLINE __m256i dot32(__m256i q, const int8_t* a, __m256i scales16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)a)), scales16);
}

// One row's super-block, decoded for the Q4_K / Q5_K chunks.
struct k4_row {
    __m256i sc16, m16, high;
    __m256 pattern;  // k_block_fma's [d d −dmin −dmin ...]
};

template <bool Q5>
LP_TARGET_AVX2 LP_INLINE k4_row k4_decode(const uint8_t* b) {
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    k4_row r;
    const __m128i sm = k4_scales_mins_avx2(b + 4);
    r.sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    r.m16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
    r.high = Q5 ? _mm256_loadu_si256((const __m256i*)(b + offsetof(block_q5_K, qh))) : _mm256_setzero_si256();
    r.pattern = k_scale_pattern_f16(b);
    return r;
}

// Q4_K / Q5_K, NR rows × NC columns over all super-blocks.
template <bool Q5, int NR, int NC>
LP_TARGET_AVX2 void k4_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                            size_t os) {
    constexpr size_t bb = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    constexpr size_t qs_off = Q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
    // acc per (row, column); NR·NC of them with the sums do not fit the
    // registers, they live in L1 between super-blocks (a load and a store
    // each per 256 weights).
    __m256 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    const block_q8_K* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * as);
    [[maybe_unused]] const char* pf = tiles_avx2::prefetch_start(w, ws, NR);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        // mat-vec and the row-by-row small batches (matvec_cols) stream the weights
        if constexpr (NC == 1 || NR == 1) tiles_avx2::prefetch_step(pf, NR * bb);
        for (int r = 0; r < NR; ++r) {
            const uint8_t* b = w + r * ws + i * bb;
            k4_row k = k4_decode<Q5>(b);
            __m256i sum[NC];
            for (int c = 0; c < NC; ++c) sum[c] = _mm256_setzero_si256();
            for (int ch = 0; ch < 4; ++ch) {
                const __m256i bytes = _mm256_loadu_si256((const __m256i*)(b + qs_off + 32 * ch));
                __m256i q0 = _mm256_and_si256(bytes, m4);
                __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
                if constexpr (Q5) {  // fifth bit of weight 32j + l: bit j of qh[l]
                    q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_slli_epi16(k.high, 4), bit4));
                    q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_slli_epi16(k.high, 3), bit4));
                    k.high = _mm256_srli_epi16(k.high, 2);
                }
                const __m128i c0 = word_ctrl(2 * ch), c1 = word_ctrl(2 * ch + 1);
                const __m256i s0 = _mm256_shuffle_epi8(k.sc16, _mm256_set_m128i(c0, c0));
                const __m256i s1 = _mm256_shuffle_epi8(k.sc16, _mm256_set_m128i(c1, c1));
                for (int c = 0; c < NC; ++c) {
                    sum[c] = _mm256_add_epi32(sum[c], dot32(q0, y[c][i].qs + 64 * ch, s0));
                    sum[c] = _mm256_add_epi32(sum[c], dot32(q1, y[c][i].qs + 64 * ch + 32, s1));
                }
            }
            for (int c = 0; c < NC; ++c) {
                const block_q8_K& yc = y[c][i];
                const __m256i ms = _mm256_madd_epi16(k.m16, _mm256_loadu_si256((const __m256i*)yc.bsums));
                acc[r][c] = k_block_fma(sum[c], ms, k.pattern, &yc.d, acc[r][c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r)
            out[(size_t)c * os + r] = x86::hsum_f32x8(acc[r][c]);
}

// Q6_K's scale words for chunk k (weights 32k..32k+31: groups 2k, 2k+1), as
// group16_scales_avx2 in kquants_x86.cpp builds them.
LP_TARGET_AVX2 LP_INLINE __m256i q6_scales(__m256i sc_lo, __m256i sc_hi, int k) {
    const __m256i src = k < 4 ? sc_lo : sc_hi;
    const int w = (2 * k) % 8;
    return _mm256_shuffle_epi8(src, _mm256_set_m128i(word_ctrl(w + 1), word_ctrl(w)));
}

template <int NR, int NC>
LP_TARGET_AVX2 void q6_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                            size_t os) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    const block_q8_K* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * as);
    [[maybe_unused]] const char* pf = tiles_avx2::prefetch_start(w, ws, NR);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        if constexpr (NC == 1 || NR == 1) tiles_avx2::prefetch_step(pf, NR * sizeof(block_q6_K));
        for (int r = 0; r < NR; ++r) {
            const block_q6_K& x = reinterpret_cast<const block_q6_K*>(w + r * ws)[i];
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x.scales));
            const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
            const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
            __m256i sum[NC];
            for (int c = 0; c < NC; ++c) sum[c] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i*)(x.ql + 64 * h));
                const __m256i l1 = _mm256_loadu_si256((const __m256i*)(x.ql + 64 * h + 32));
                const __m256i hb = _mm256_loadu_si256((const __m256i*)(x.qh + 32 * h));
                for (int j = 0; j < 4; ++j) {
                    // quant + 32 in [0, 63] for weights h·128 + 32j + l
                    __m256i q;
                    switch (j) {
                        case 0: q = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)); break;
                        case 1: q = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)); break;
                        case 2: q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)); break;
                        default:
                            q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
                    }
                    const int k = 4 * h + j;
                    const __m256i s = q6_scales(sc_lo, sc_hi, k);
                    for (int c = 0; c < NC; ++c) sum[c] = _mm256_add_epi32(sum[c], dot32(q, y[c][i].qs + 32 * k, s));
                }
            }
            const float d = _cvtsh_ss(x.d);
            const __m256 pattern = k_scale_pattern(d, d);
            const __m256i m16 = _mm256_slli_epi16(sc16, 5);  // offset 32 → "min" 32·scale
            for (int c = 0; c < NC; ++c) {
                const block_q8_K& yc = y[c][i];
                const __m256i ms = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i*)yc.bsums));
                acc[r][c] = k_block_fma(sum[c], ms, pattern, &yc.d, acc[r][c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r)
            out[(size_t)c * os + r] = x86::hsum_f32x8(acc[r][c]);
}

// 32 weights of a row's super-block (unsigned quants q, their scale words
// s) against each column's activations at byte off of its super-block i,
// added to the column's int32 sum. The empty asm keeps each sum a chain in
// this order (k4_row_cols, q6_row_cols).
template <int NC>
LP_TARGET_AVX2 LP_INLINE void row_chunk(__m256i (&sum)[NC], const block_q8_K* const (&y)[NC], int64_t i, __m256i q,
                                        __m256i s, int off) {
    for (int c = 0; c < NC; ++c) {
        sum[c] = _mm256_add_epi32(sum[c], dot32(q, y[c][i].qs + off, s));
        __asm__("" : "+x"(sum[c]));
    }
}

// One row against NC columns (matvec_cols, small batches): q6_tile<1, NC>'s
// integer sums and float steps, so the same bits, in an order that fits the
// 16 ymm registers of an AVX2-only CPU. q6_tile<1, 4> keeps 8 chunk
// operands live per super-block and GCC, free to reassociate the int32 adds,
// computes all 32 products before summing them: ~40 vectors spilled and
// reloaded per super-block in a portable build. Here each ql register feeds
// its two chunks (low nibbles, then high) before the next is loaded, and each
// column's sum is pinned to its chain, so the NC sums, the NC accumulators
// and one chunk's operands are all that is live.
template <int NC>
LP_TARGET_AVX2 void q6_row_cols(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                           size_t os) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const auto* x = reinterpret_cast<const block_q6_K*>(w);
    const block_q8_K* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * as);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    const char* pf = tiles_avx2::prefetch_start(w, ws, 1);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        tiles_avx2::prefetch_step(pf, sizeof(block_q6_K));
        const block_q6_K& b = x[i];
        __m256i sum[NC];
        for (int c = 0; c < NC; ++c) sum[c] = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            // weights h·128 + 32j + l (chunk k = 4h + j): low nibbles of
            // ql[64h + 32(j % 2) + l] (j < 2) or its high nibbles (j >= 2),
            // top bits crumb j of qh[32h + l]; scales of groups 2k, 2k + 1
            // (words 2j, 2j + 1 of this half's 8, q6_scales)
            const __m256i sc = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(b.scales + 8 * h))));
            const __m256i hb = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * h));
            const __m256i l0 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h));
            row_chunk<NC>(sum, y, i,
                          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                          q6_scales(sc, sc, 0), 128 * h);
            row_chunk<NC>(sum, y, i,
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
                          q6_scales(sc, sc, 2), 128 * h + 64);
            const __m256i l1 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h + 32));
            row_chunk<NC>(sum, y, i,
                          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                          q6_scales(sc, sc, 1), 128 * h + 32);
            row_chunk<NC>(sum, y, i,
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
                          q6_scales(sc, sc, 3), 128 * h + 96);
        }
        const float d = _cvtsh_ss(b.d);
        const __m256 pattern = k_scale_pattern(d, d);
        const __m256i m16 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales)), 5);
        for (int c = 0; c < NC; ++c) {
            const __m256i ms = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i*)y[c][i].bsums));
            acc[c] = k_block_fma(sum[c], ms, pattern, &y[c][i].d, acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) out[(size_t)c * os] = x86::hsum_f32x8(acc[c]);
}

// The same for Q4_K / Q5_K: k4_tile<Q5, 1, NC>'s sums and float steps, the
// chunks' sums pinned, the block's min words and scale pattern made after
// them (k4_tile<Q5, 1, 4> spilled as q6_tile<1, 4> did).
template <bool Q5, int NC>
LP_TARGET_AVX2 void k4_row_cols(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                           size_t os) {
    constexpr size_t bb = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    constexpr size_t qs_off = Q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    const block_q8_K* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * as);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    const char* pf = tiles_avx2::prefetch_start(w, ws, 1);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        tiles_avx2::prefetch_step(pf, bb);
        const uint8_t* b = w + i * bb;
        const __m128i sm = k4_scales_mins_avx2(b + 4);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256i high = Q5 ? _mm256_loadu_si256((const __m256i*)(b + offsetof(block_q5_K, qh))) : _mm256_setzero_si256();
        __m256i sum[NC];
        for (int c = 0; c < NC; ++c) sum[c] = _mm256_setzero_si256();
        for (int ch = 0; ch < 4; ++ch) {
            const __m256i bytes = _mm256_loadu_si256((const __m256i*)(b + qs_off + 32 * ch));
            __m256i q0 = _mm256_and_si256(bytes, m4);
            if constexpr (Q5) q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_slli_epi16(high, 4), bit4));
            const __m128i c0 = word_ctrl(2 * ch), c1 = word_ctrl(2 * ch + 1);
            row_chunk<NC>(sum, y, i, q0, _mm256_shuffle_epi8(sc16, _mm256_set_m128i(c0, c0)), 64 * ch);
            __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
            if constexpr (Q5) {
                q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_slli_epi16(high, 3), bit4));
                high = _mm256_srli_epi16(high, 2);
            }
            row_chunk<NC>(sum, y, i, q1, _mm256_shuffle_epi8(sc16, _mm256_set_m128i(c1, c1)), 64 * ch + 32);
        }
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
        const __m256 pattern = k_scale_pattern_f16(b);
        for (int c = 0; c < NC; ++c) {
            const __m256i ms = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i*)y[c][i].bsums));
            acc[c] = k_block_fma(sum[c], ms, pattern, &y[c][i].d, acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) out[(size_t)c * os] = x86::hsum_f32x8(acc[c]);
}

// The kinds of tile: K4<false> Q4_K, K4<true> Q5_K, Q6 Q6_K.
template <bool Q5>
struct k4_kind {
    static constexpr vec_dot_fn dot = Q5 ? vec_dot_q5_k_q8_k_avx2 : vec_dot_q4_k_q8_k_avx2;
    template <int NR, int NC>
    LP_TARGET_AVX2 static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                                   size_t os) {
        k4_tile<Q5, NR, NC>(n, w, ws, a, as, out, os);
    }
    template <int NC>
    LP_TARGET_AVX2 static void row(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                                   size_t os) {
        k4_row_cols<Q5, NC>(n, w, ws, a, as, out, os);
    }
};
struct q6_kind {
    static constexpr vec_dot_fn dot = vec_dot_q6_k_q8_k_avx2;
    template <int NR, int NC>
    LP_TARGET_AVX2 static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                                   size_t os) {
        q6_tile<NR, NC>(n, w, ws, a, as, out, os);
    }
    template <int NC>
    LP_TARGET_AVX2 static void row(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                                   size_t os) {
        q6_row_cols<NC>(n, w, ws, a, as, out, os);
    }
};

template <class K>
LP_TARGET_AVX2 void gemm_tile(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, size_t os,
                              int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nc == 1) {
        // Mat-vec: the vec_dot row by row (same bits as the tiles). Four
        // rows side by side measured 15-25% slower per CPU-second here
        // (1 thread, 96 MB of 1B-shaped weights): one row streams better.
        for (int r = 0; r < nr; ++r) K::dot(n, out + r, wb + r * ws, ab);
        return;
    }
#define LP_K_TILE(R, C) \
    case R * 8 + C: K::template run<R, C>(n, wb, ws, ab, as, out, os); return;
    switch (nr * 8 + nc) {
        LP_K_TILE(4, 4) LP_K_TILE(4, 3) LP_K_TILE(4, 2) LP_K_TILE(4, 1)
        LP_K_TILE(3, 4) LP_K_TILE(3, 3) LP_K_TILE(3, 2) LP_K_TILE(3, 1)
        LP_K_TILE(2, 4) LP_K_TILE(2, 3) LP_K_TILE(2, 2) LP_K_TILE(2, 1)
        LP_K_TILE(1, 4) LP_K_TILE(1, 3) LP_K_TILE(1, 2) LP_K_TILE(1, 1)
        default: return;
    }
#undef LP_K_TILE
}

// Small batches (type_traits::matvec_cols): row by row, as the mat-vec
// streams them, each super-block decoded once for the nc <= 4 columns (the
// 4-row tiles without unpacked panels measured 2-4x slower here). Zen 4 at
// the AVX2 level, 2 threads, time of 2 / 4 / 8 rows against one mat-vec:
// Q4_K 1.32x / 2.39x / 4.73x (before: 1.88x / 4.07x / 6.10x), Q6_K 1.28x /
// 1.87x / 3.58x (1.36x / 2.57x / 4.54x).
template <class K>
LP_TARGET_AVX2 void matvec_cols(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, size_t os,
                                int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    for (int r = 0; r < nr; ++r) {
        const uint8_t* wr = wb + r * ws;
        switch (nc) {
            case 4: K::template row<4>(n, wr, ws, ab, as, out + r, os); break;
            case 3: K::template row<3>(n, wr, ws, ab, as, out + r, os); break;
            case 2: K::template row<2>(n, wr, ws, ab, as, out + r, os); break;
            default: K::template row<1>(n, wr, ws, ab, as, out + r, os); break;
        }
    }
}


// Panels (gemm_panel_fn: up to 16 rows × 128 columns). From 4 columns on,
// each row's super-blocks are decoded once into this form (per thread
// buffer): the 8 operand vectors of 32 weights (quant + offset, unsigned),
// their 8 scale-word vectors, the min words and k_block_fma's scale pattern
// (Q6_K: dmin = d, the mins being 32·scale). Every 2 × 4 tile then only
// multiplies.
struct alignas(32) k_unpacked {
    __m256i q[8], s[8], m16;
    __m256 pattern;
};

LP_TARGET_AVX2 LP_INLINE void unpack_k4(const uint8_t* b, bool q5, k_unpacked* u) {
    const __m256i m4 = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
    const size_t qs_off = q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    k4_row k = q5 ? k4_decode<true>(b) : k4_decode<false>(b);
    for (int ch = 0; ch < 4; ++ch) {
        const __m256i bytes = _mm256_loadu_si256((const __m256i*)(b + qs_off + 32 * ch));
        __m256i q0 = _mm256_and_si256(bytes, m4);
        __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
        if (q5) {
            q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_slli_epi16(k.high, 4), bit4));
            q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_slli_epi16(k.high, 3), bit4));
            k.high = _mm256_srli_epi16(k.high, 2);
        }
        const __m128i c0 = word_ctrl(2 * ch), c1 = word_ctrl(2 * ch + 1);
        _mm256_store_si256(&u->q[2 * ch], q0);
        _mm256_store_si256(&u->q[2 * ch + 1], q1);
        _mm256_store_si256(&u->s[2 * ch], _mm256_shuffle_epi8(k.sc16, _mm256_set_m128i(c0, c0)));
        _mm256_store_si256(&u->s[2 * ch + 1], _mm256_shuffle_epi8(k.sc16, _mm256_set_m128i(c1, c1)));
    }
    _mm256_store_si256(&u->m16, k.m16);
    _mm256_store_ps((float*)&u->pattern, k.pattern);
}

LP_TARGET_AVX2 LP_INLINE void unpack_q6(const block_q6_K& x, k_unpacked* u) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x.scales));
    const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    for (int h = 0; h < 2; ++h) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i*)(x.ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i*)(x.ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i*)(x.qh + 32 * h));
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
        };
        for (int j = 0; j < 4; ++j) {
            _mm256_store_si256(&u->q[4 * h + j], q[j]);
            _mm256_store_si256(&u->s[4 * h + j], q6_scales(sc_lo, sc_hi, 4 * h + j));
        }
    }
    _mm256_store_si256(&u->m16, _mm256_slli_epi16(sc16, 5));
    const float d = _cvtsh_ss(x.d);
    _mm256_store_ps((float*)&u->pattern, k_scale_pattern(d, d));
}

// NR unpacked rows (nsb super-blocks each, row r at u + r·nsb) × NC columns:
// the same per-(row, column) sequence as k4_tile / q6_tile. Per group of 32
// weights the NC activation vectors are loaded once for both rows (NR <= 2:
// 2 × 4 sums, 4 activations and a row's two operands fill the 16 registers).
// Against the 4 × 4 tile that reloaded each activation vector per row (and
// half of those loads split across cache lines: q8_K's quants sit at offset
// 4): 1B-shaped Q4_K matrices, 2 threads, portable build at the AVX2 level on
// an Intel Xeon, 195-213 -> 227-253 GFLOP/s. Without the register pin below
// GCC folds the loads back into each row's maddubs (16 ymm registers), and the
// tile is no faster than the 4 × 4 one.
template <int NR, int NC>
LP_TARGET_AVX2 void unpacked_tile(int64_t nsb, const k_unpacked* u, const uint8_t* a, size_t as, float* out,
                                  size_t os) {
    static_assert(NR <= 2 && NC <= 4, "the tile's sums and activations must stay in registers");
    __m256 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    const block_q8_K* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * as);
    for (int64_t i = 0; i < nsb; ++i) {
        __m256i sum[NR][NC];
        // unrolled: with 16 registers (no -march beyond AVX2) GCC otherwise
        // keeps the loop and tests g == 0 in it
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            __m256i av[NC];
            for (int c = 0; c < NC; ++c) {
                av[c] = _mm256_loadu_si256((const __m256i*)(y[c][i].qs + 32 * g));
                // in a register for both rows (else GCC folds the load into
                // each row's maddubs again)
                __asm__("" : "+x"(av[c]));
            }
            for (int r = 0; r < NR; ++r) {
                const k_unpacked& k = u[r * nsb + i];
                const __m256i q = _mm256_load_si256(&k.q[g]), sc = _mm256_load_si256(&k.s[g]);
                for (int c = 0; c < NC; ++c) {
                    const __m256i m = _mm256_madd_epi16(_mm256_maddubs_epi16(q, av[c]), sc);
                    sum[r][c] = g == 0 ? m : _mm256_add_epi32(sum[r][c], m);
                    // Keep each chain in order: GCC otherwise computes all the
                    // products first and spills them to the stack.
                    __asm__("" : "+x"(sum[r][c]));
                }
            }
        }
        for (int r = 0; r < NR; ++r) {
            const k_unpacked& k = u[r * nsb + i];
            for (int c = 0; c < NC; ++c) {
                const block_q8_K& yc = y[c][i];
                const __m256i ms = _mm256_madd_epi16(k.m16, _mm256_loadu_si256((const __m256i*)yc.bsums));
                acc[r][c] = k_block_fma(sum[r][c], ms, k.pattern, &yc.d, acc[r][c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r)
            out[(size_t)c * os + r] = x86::hsum_f32x8(acc[r][c]);
}

template <int NR>
LP_TARGET_AVX2 void unpacked_cols(int64_t nsb, const k_unpacked* u, const uint8_t* a, size_t as, float* out,
                                  size_t os, int nc) {
    int c = 0;
    for (; c + 4 <= nc; c += 4) unpacked_tile<NR, 4>(nsb, u, a + c * as, as, out + c * os, os);
    switch (nc - c) {
        case 3: unpacked_tile<NR, 3>(nsb, u, a + c * as, as, out + c * os, os); break;
        case 2: unpacked_tile<NR, 2>(nsb, u, a + c * as, as, out + c * os, os); break;
        case 1: unpacked_tile<NR, 1>(nsb, u, a + c * as, as, out + c * os, os); break;
        default: break;
    }
}

// 0: Q4_K, 1: Q5_K, 2: Q6_K
template <int T>
LP_TARGET_AVX2 void gemm_panel(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc,
                               float* out, size_t os) {
    using K = std::conditional_t<T == 2, q6_kind, k4_kind<T == 1>>;
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nc < 4) {  // mat-vec, small batches: decode as we go
        tiles_avx2::tiles_by_fours<gemm_tile<K>>(n, wb, ws, ab, as, out, os, nr, nc);
        return;
    }
    const int64_t nsb = n / QK_K;
    thread_local std::vector<k_unpacked> buf;
    if (buf.size() < (size_t)nr * (size_t)nsb) buf.resize((size_t)nr * (size_t)nsb);
    for (int r = 0; r < nr; ++r)
        for (int64_t i = 0; i < nsb; ++i) {
            k_unpacked* u = &buf[(size_t)r * nsb + i];
            if constexpr (T == 2) unpack_q6(reinterpret_cast<const block_q6_K*>(wb + r * ws)[i], u);
            else unpack_k4(wb + r * ws + i * (T == 1 ? sizeof(block_q5_K) : sizeof(block_q4_K)), T == 1, u);
        }
    // columns in groups of 8 (their activations stay in L1 across the row tiles)
    for (int c0 = 0; c0 < nc; c0 += 8) {
        const int ncc = std::min(8, nc - c0);
        for (int r = 0; r < nr; r += 2) {
            const k_unpacked* u = buf.data() + (size_t)r * nsb;
            float* o = out + (size_t)c0 * os + r;
            if (nr - r >= 2) unpacked_cols<2>(nsb, u, ab + c0 * as, as, o, os, ncc);
            else unpacked_cols<1>(nsb, u, ab + c0 * as, as, o, os, ncc);
        }
    }
}

}  // namespace

void register_kquant_tiles_avx2(type_traits* table, isa level) {
    if (level != isa::avx2) return;
    // vec_dot stays kquants_x86.cpp's: the tiles run its sequence.
    table[(int)ggml_type::Q4_K].gemm_tile = gemm_tile<k4_kind<false>>;
    table[(int)ggml_type::Q5_K].gemm_tile = gemm_tile<k4_kind<true>>;
    table[(int)ggml_type::Q6_K].gemm_tile = gemm_tile<q6_kind>;
    table[(int)ggml_type::Q4_K].gemm_panel = gemm_panel<0>;
    table[(int)ggml_type::Q5_K].gemm_panel = gemm_panel<1>;
    table[(int)ggml_type::Q6_K].gemm_panel = gemm_panel<2>;
    table[(int)ggml_type::Q4_K].matvec_cols = matvec_cols<k4_kind<false>>;
    table[(int)ggml_type::Q5_K].matvec_cols = matvec_cols<k4_kind<true>>;
    table[(int)ggml_type::Q6_K].matvec_cols = matvec_cols<q6_kind>;
    for (ggml_type t : {ggml_type::Q4_K, ggml_type::Q5_K, ggml_type::Q6_K}) table[(int)t].matvec_batch_max = 8;
}

#else

void register_kquant_tiles_avx2(type_traits*, isa) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp

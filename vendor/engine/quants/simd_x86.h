// simd_x86.h — x86 building blocks shared by the quantization families'
// AVX2 / AVX-512 kernels (legacy.cpp, iquants.cpp; kquants uses the sums):
// horizontal sums, the lane layouts the AVX-512 kernels reduce into, word
// permutes that pull quants and fp16 fields of 8 blocks out of a few 64-byte
// loads, the activation preparation shared by all rows of a tile, and the
// multi-row kernel plumbing with its software prefetch (why: see there), and
// the 4 x NC register-blocked mat-mat tile built on the same kernels.
// Header-only; every helper carries the target attribute of its level, so a
// portable build (no -mavx2) compiles it.
// Not here: any kernel (those live with their block format).
#pragma once

#include <cstdint>

#include "../common.h"
#include "blocks.h"
#include "prefetch_x86.h"

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
namespace x86 {

#if defined(LP_HAVE_AVX2)

// All-ones in the int32 lanes below cnt (0..8): the mask of a partial vector.
LP_TARGET_AVX2 static inline __m256i first_lanes8(int cnt) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

LP_TARGET_AVX2 static inline float hsum_f32x8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

LP_TARGET_AVX2 static inline int hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

// An fp16 field as float, through F16C (exact).
LP_TARGET_AVX2 static inline float half_to_float(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Sum of the signed products of two rows of 32 int8, as 8 int32 lanes. `w`
// may be any int8 (-128 included); `a` must not be -128 (quantized
// activations never are). maddubs wants unsigned × signed, so the sign of w
// moves onto a.
LP_TARGET_AVX2 static inline __m256i dot_i8x32(__m256i w, __m256i a) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Sum of unsigned × signed products as 8 int32 lanes. maddubs saturates a
// pair of products at int16, so this is exact only while 2*u*|a| <= 32767:
// u <= 128 against activations |a| <= 127.
LP_TARGET_AVX2 static inline __m256i dot_u8i8x32(__m256i u, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

#endif  // LP_HAVE_AVX2

#if defined(LP_HAVE_AVX512)

// --- per-block fp16 fields of 8 consecutive blocks -------------------------
// Blocks of the legacy and IQ4_NL formats are 18..36 bytes, so 8 blocks span
// 144..288 bytes; their fp16 fields (scales, mins) sit at even offsets and are
// picked with word permutes (vpermt2w) from 64-byte loads. Loads never pass
// the 8th block's end.

// How the kernels lay 16 per-block values over the lanes of a vector, matching
// the way they reduce their int32 dot-product lanes:
//   pairs: four vectors of two blocks (block 2p in the low, 2p+1 in the high
//          256 bits) reduced by reduce_pairs_x4: lane 4L+j holds block 2j+L/2.
//   quads: two vectors of four blocks (block 4h+L in 128-bit lane L) reduced
//          by reduce_quads_x2: lane 4L+j holds block L+4(j%2).
//   eight: lane k (k < 8) holds block k; lanes 8..15 unused.
enum class lane_layout { pairs, quads, eight };

constexpr int block_of_lane(lane_layout layout, int i) {
    return layout == lane_layout::pairs ? 2 * (i % 4) + (i / 4) / 2
         : layout == lane_layout::quads ? i / 4 + 4 * (i % 2)
                                        : (i < 8 ? i : 0);
}

// Word indices for the fp16 field at byte OFF of 8 blocks of STRIDE bytes:
// lanes whose word lies in the first 128 bytes come from one vpermt2w over
// the loads at 0 and 64, the others from a second one over the loads at
// `second_at` and `second_at + 64`.
template <int STRIDE, int OFF, lane_layout LAYOUT>
struct half_gather {
    static_assert(STRIDE % 2 == 0 && OFF % 2 == 0, "fields must be 16-bit aligned");
    static_assert(8 * STRIDE >= 128, "needs at least 128 bytes per 8 blocks");
    static constexpr int n_bytes = 8 * STRIDE;
    static constexpr bool two_pairs = 7 * STRIDE + OFF + 2 > 128;
    static constexpr int second_at = !two_pairs ? 0 : (n_bytes - 128 < 128 ? n_bytes - 128 : 128);
    static_assert(!two_pairs || 7 * STRIDE + OFF + 2 <= second_at + 128, "8 fields span too much");
    alignas(64) uint16_t first[32] = {};
    alignas(64) uint16_t second[32] = {};
    uint32_t from_second = 0;  // bit i: lane i comes from the second pair of loads
    constexpr half_gather() {
        for (int i = 0; i < 16; ++i) {
            const int word = (block_of_lane(LAYOUT, i) * STRIDE + OFF) / 2;
            if (word < 64) {
                first[i] = (uint16_t)word;
            } else {
                second[i] = (uint16_t)(word - second_at / 2);
                from_second |= 1u << i;
            }
        }
    }
};

template <int STRIDE, int OFF, lane_layout LAYOUT>
LP_TARGET_AVX512 static inline __m256i gather_halves16_raw(const void* blocks) {
    static constexpr half_gather<STRIDE, OFF, LAYOUT> g{};
    const auto* b = static_cast<const uint8_t*>(blocks);
    __m512i v = _mm512_permutex2var_epi16(_mm512_loadu_si512(b), _mm512_load_si512(g.first),
                                          _mm512_loadu_si512(b + 64));
    if constexpr (half_gather<STRIDE, OFF, LAYOUT>::two_pairs) {
        constexpr int at = half_gather<STRIDE, OFF, LAYOUT>::second_at;
        const __m512i v2 = _mm512_permutex2var_epi16(_mm512_loadu_si512(b + at), _mm512_load_si512(g.second),
                                                     _mm512_loadu_si512(b + at + 64));
        v = _mm512_mask_blend_epi16((__mmask32)g.from_second, v, v2);
    }
    return _mm512_castsi512_si256(v);
}

// The fp16 field at byte OFF of 8 blocks of STRIDE bytes as 16 floats laid out
// as LAYOUT says.
template <int STRIDE, int OFF, lane_layout LAYOUT>
LP_TARGET_AVX512 static inline __m512 gather_halves16(const void* blocks) {
    return _mm512_cvtph_ps((gather_halves16_raw<STRIDE, OFF, LAYOUT>(blocks)));
}

// Same, 8 floats (block k in lane k).
template <int STRIDE, int OFF>
LP_TARGET_AVX512 static inline __m256 gather_halves8(const void* blocks) {
    return _mm256_cvtph_ps(_mm256_castsi256_si128(gather_halves16_raw<STRIDE, OFF, lane_layout::eight>(blocks)));
}

// --- reductions of int32 dot-product lanes ------------------------------------
// Four pair vectors (see lane_layout::pairs) -> one vector of 16 partial sums,
// 2 per block. In-lane unpacks only: the shuffle ports stay free.
LP_TARGET_AVX512 static inline __m512i reduce_pairs_x4(__m512i d0, __m512i d1, __m512i d2, __m512i d3) {
    const __m512i e01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));
    const __m512i e23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(e01, e23), _mm512_unpackhi_epi64(e01, e23));
}

// Two quad vectors (see lane_layout::quads) -> one vector, 2 partial sums per block.
LP_TARGET_AVX512 static inline __m512i reduce_quads_x2(__m512i r0, __m512i r1) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(r0, r1), _mm512_unpackhi_epi32(r0, r1));
}

// --- weights loaded once per group of 8 blocks --------------------------------
// The kernels load a group's bytes with a few 64-byte loads and take quants and
// fp16 fields out of those registers with word permutes. vpermt2w overwrites
// one of its sources, and GCC then reloads the source from memory rather than
// copying a register; on a load-bound loop that costs, so the loaded vectors
// are pinned in registers (an empty asm) and the permutes copy them instead.
template <int N>
struct loaded {
    __m512i v[N];
};

LP_TARGET_AVX512 static inline __m512i load_pinned(const uint8_t* p) {
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

// Permute indices that take per-block words out of a group's loads, for
// 4-bit formats read as three loads at 0, 64 and 8*STRIDE-64 ("third").
// Words w < 64 come from loads (0, 64), the others from (64, third): every
// word of the group is in one of the two pairs since STRIDE <= 24.
template <int STRIDE>
struct three_loads {
    static_assert(STRIDE % 2 == 0 && STRIDE >= 16 && STRIDE <= 24, "layout assumptions");
    static constexpr int third_at = 8 * STRIDE - 64;
    static constexpr uint16_t index_low(int w) { return (uint16_t)w; }  // from (l0, l1)
    static constexpr uint16_t index_high(int w) {                       // from (l1, l2)
        return (uint16_t)(w < 64 ? w - 32 : 32 + w - third_at / 2);
    }
};

// The 16 quant bytes (at byte QS_OFF) of blocks 0..3 and 4..7 as two quad
// vectors, one block per 128-bit lane.
template <int STRIDE, int QS_OFF>
struct nibble_quads {
    alignas(64) uint16_t quad0[32] = {};
    alignas(64) uint16_t quad1[32] = {};
    constexpr nibble_quads() {
        for (int L = 0; L < 4; ++L) {
            for (int t = 0; t < 8; ++t) {
                quad0[8 * L + t] = three_loads<STRIDE>::index_low((L * STRIDE + QS_OFF) / 2 + t);
                quad1[8 * L + t] = three_loads<STRIDE>::index_high(((L + 4) * STRIDE + QS_OFF) / 2 + t);
            }
        }
    }
};

// The fp16 field at byte OFF of the 8 blocks, 16 lanes laid out as LAYOUT.
template <int STRIDE, int OFF, lane_layout LAYOUT>
struct field_in_three {
    alignas(64) uint16_t low[32] = {};
    alignas(64) uint16_t high[32] = {};
    uint32_t from_high = 0;
    constexpr field_in_three() {
        for (int i = 0; i < 16; ++i) {
            const int w = (block_of_lane(LAYOUT, i) * STRIDE + OFF) / 2;
            if (w < 64) {
                low[i] = three_loads<STRIDE>::index_low(w);
            } else {
                high[i] = three_loads<STRIDE>::index_high(w);
                from_high |= 1u << i;
            }
        }
    }
    static constexpr bool needs_high = 7 * STRIDE + OFF >= 128;
};

template <int STRIDE>
LP_TARGET_AVX512 static inline loaded<3> load_group_4bit(const void* blocks) {
    const auto* b = static_cast<const uint8_t*>(blocks);
    return {{load_pinned(b), load_pinned(b + 64), load_pinned(b + three_loads<STRIDE>::third_at)}};
}

template <int STRIDE, int QS_OFF>
LP_TARGET_AVX512 static inline void nibble_quads_of(const loaded<3>& g, __m512i* quad0, __m512i* quad1) {
    static constexpr nibble_quads<STRIDE, QS_OFF> q{};
    *quad0 = _mm512_permutex2var_epi16(g.v[0], _mm512_load_si512(q.quad0), g.v[1]);
    *quad1 = _mm512_permutex2var_epi16(g.v[1], _mm512_load_si512(q.quad1), g.v[2]);
}

template <int STRIDE, int OFF, lane_layout LAYOUT>
LP_TARGET_AVX512 static inline __m512 halves_of(const loaded<3>& g) {
    using F = field_in_three<STRIDE, OFF, LAYOUT>;
    static constexpr F f{};
    __m512i v = _mm512_permutex2var_epi16(g.v[0], _mm512_load_si512(f.low), g.v[1]);
    if constexpr (F::needs_high)
        v = _mm512_mask_blend_epi16((__mmask32)f.from_high, v,
                                    _mm512_permutex2var_epi16(g.v[1], _mm512_load_si512(f.high), g.v[2]));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(v));
}

// --- 8-bit formats in the pairs layout --------------------------------------
// Five loads at 0, 64, 128, 192 and 8*STRIDE-64 per 8 blocks; pair p (blocks
// 2p and 2p+1, 32 quant bytes each) comes from loads p and p+1.
template <int STRIDE, int QS_OFF>
struct byte_pairs {
    static_assert(STRIDE % 2 == 0 && QS_OFF % 2 == 0 && 8 * STRIDE >= 256 && 8 * STRIDE <= 320, "layout");
    static constexpr int last_at = 8 * STRIDE - 64;
    alignas(64) uint16_t idx[4][32] = {};
    constexpr byte_pairs() {
        for (int p = 0; p < 4; ++p) {
            const int second_word = p < 3 ? 32 * (p + 1) : last_at / 2;
            for (int half = 0; half < 2; ++half) {
                for (int t = 0; t < 16; ++t) {
                    const int w = ((2 * p + half) * STRIDE + QS_OFF) / 2 + t;
                    idx[p][16 * half + t] = (uint16_t)(w - 32 * p < 32 ? w - 32 * p : 32 + w - second_word);
                }
            }
        }
    }
};

template <int STRIDE>
LP_TARGET_AVX512 static inline loaded<5> load_group_8bit(const void* blocks) {
    const auto* b = static_cast<const uint8_t*>(blocks);
    return {{load_pinned(b), load_pinned(b + 64), load_pinned(b + 128), load_pinned(b + 192),
             load_pinned(b + 8 * STRIDE - 64)}};
}

template <int STRIDE, int QS_OFF>
LP_TARGET_AVX512 static inline void byte_pairs_of(const loaded<5>& g, __m512i* pairs) {
    static constexpr byte_pairs<STRIDE, QS_OFF> bp{};
    for (int p = 0; p < 4; ++p) pairs[p] = _mm512_permutex2var_epi16(g.v[p], _mm512_load_si512(bp.idx[p]), g.v[p + 1]);
}

// The fp16 field at byte OFF of 8 blocks in the pairs layout, from the loads
// at 0..192: blocks 0..3 from loads (0, 64), blocks 4..7 from (128, 192).
template <int STRIDE, int OFF>
struct field_in_five {
    static_assert(3 * STRIDE + OFF + 2 <= 128 && 4 * STRIDE + OFF >= 128 && 7 * STRIDE + OFF + 2 <= 256, "layout");
    alignas(64) uint16_t low[32] = {};
    alignas(64) uint16_t high[32] = {};
    uint32_t from_high = 0;
    constexpr field_in_five() {
        for (int i = 0; i < 16; ++i) {
            const int k = block_of_lane(lane_layout::pairs, i), w = (k * STRIDE + OFF) / 2;
            if (k < 4) {
                low[i] = (uint16_t)w;
            } else {
                high[i] = (uint16_t)(w - 64);
                from_high |= 1u << i;
            }
        }
    }
};

template <int STRIDE, int OFF>
LP_TARGET_AVX512 static inline __m512 halves_of(const loaded<5>& g) {
    static constexpr field_in_five<STRIDE, OFF> f{};
    const __m512i lo = _mm512_permutex2var_epi16(g.v[0], _mm512_load_si512(f.low), g.v[1]);
    const __m512i hi = _mm512_permutex2var_epi16(g.v[2], _mm512_load_si512(f.high), g.v[3]);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16((__mmask32)f.from_high, lo, hi)));
}

// --- activations (Q8_0 / Q8_1: 32 int8 per block) ----------------------------
// Two 32-byte rows (from two blocks) as one 64-byte vector, built with loads
// only (broadcast + masked broadcast) so no shuffle port is used.
LP_TARGET_AVX512 static inline __m512i load_pair_32(const void* lo, const void* hi) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)lo));
    return _mm512_mask_broadcast_i64x4(v, 0xf0, _mm256_loadu_si256((const __m256i*)hi));
}

// -128 * (sum of the int8 activations) per int32 lane, accumulated onto acc:
// the correction for weights that enter vpdpbusd offset by +128 (or by +8 and
// scaled by 16).
LP_TARGET_AVX512 static inline __m512i minus_128_sum(__m512i acc, __m512i a) {
    return _mm512_sub_epi32(acc, _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), a));
}

// 8 activation blocks in the pairs layout, prepared once per weight tile.
struct act_pairs {
    __m512i v[4];       // blocks 2p | 2p+1
    __m512i neg128[4];  // -128 * activation sum per int32 lane of v[p]
};

template <typename block>
LP_TARGET_AVX512 static inline act_pairs load_act_pairs(const block* y) {
    act_pairs a;
    for (int p = 0; p < 4; ++p) {
        a.v[p] = load_pair_32(y[2 * p].qs, y[2 * p + 1].qs);
        a.neg128[p] = minus_128_sum(_mm512_setzero_si512(), a.v[p]);
    }
    return a;
}

// 8 activation blocks in the quads layout, for 4-bit weights: element j of a
// block pairs with the low nibble of quant byte j, element 16+j with its high
// nibble, so the first and last 16 elements go to separate vectors.
struct act_quads {
    __m512i lo[2], hi[2];  // elements 0..15 / 16..31 of blocks 4h..4h+3, block 4h+L in 128-bit lane L
    __m512i neg128[2];     // -128 * sum of lo[h] and hi[h] per int32 lane
};

template <typename block>
LP_TARGET_AVX512 static inline act_quads load_act_quads(const block* y) {
    act_quads a;
    for (int h = 0; h < 2; ++h) {
        const __m512i p0 = load_pair_32(y[4 * h].qs, y[4 * h + 1].qs);
        const __m512i p1 = load_pair_32(y[4 * h + 2].qs, y[4 * h + 3].qs);
        a.lo[h] = _mm512_shuffle_i64x2(p0, p1, 0x88);  // 128-bit lanes 0, 2 of p0, then of p1
        a.hi[h] = _mm512_shuffle_i64x2(p0, p1, 0xdd);  // lanes 1, 3
        a.neg128[h] = minus_128_sum(minus_128_sum(_mm512_setzero_si512(), a.lo[h]), a.hi[h]);
    }
    return a;
}

// The AVX2 kernel's result for the blocks past the last group of 8 (0 if none).
template <typename wblock, typename ablock>
LP_TARGET_AVX512 static inline float tail_avx2(void (*avx2_dot)(int64_t, float*, const void*, const void*), int64_t nb,
                                               int64_t nb8, const wblock* x, const ablock* y) {
    if (nb8 == nb) return 0.0f;
    float t;
    avx2_dot((nb - nb8) * 32, &t, x + nb8, y + nb8);
    return t;
}

// --- multi-row kernels ---------------------------------------------------------
// The AVX-512 kernels take NR <= 4 weight rows against one activation row,
// K::rows<NR, STREAM>(n, w, w_stride, a, out), so the activation work (loads,
// sums, scales) is done once for NR rows: 4 rows run ~1.8x faster than one
// (Q4_0, in cache). vec_dot is rows<1>; gemm_tile runs rows<nr> per
// activation row, and the mat-vec driver calls it with nc = 1.
//
// STREAM: the weights come from memory, not cache (mat-vec, vec_dot, and the
// first activation row of a mat-mat tile). Walking 4 rows side by side loses
// the hardware prefetchers (they follow one sequential stream well, four
// interleaved ones badly: ~55-65% of the read bandwidth), so the kernels
// prefetch themselves, as one linear stream over the rows' contiguous bytes
// prefetch_x86::kTileAhead past the tile: per group of blocks, the NR rows'
// share of bytes, in address order. Measured on Zen 5 with 300 MB of weights:
// 87-99% of the bandwidth probe, as a single row with no prefetch at all
// reaches when it is not compute bound. L2-only hints and per-row prefetch
// streams are worse. A row read alone (NR = 1) is itself one sequential
// stream: its prefetch runs prefetch_x86::kStreamAhead ahead of it.

// Where a tile's linear prefetch stream starts: past the NR rows it reads, or
// for one row, a little past the block it starts at.
LP_TARGET_AVX512 static inline const char* prefetch_start(const uint8_t* w, size_t w_stride, int nr) {
    if (nr == 1) return reinterpret_cast<const char*>(w) + prefetch_x86::kStreamAhead;
    return reinterpret_cast<const char*>(w) + (size_t)nr * w_stride + prefetch_x86::kTileAhead;
}

// Prefetches `bytes` bytes at p into L1 and advances p.
template <int bytes>
LP_TARGET_AVX512 static inline void prefetch_step(const char*& p) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    p += bytes;
}

// K::stream_rows: how many rows a kernel walks side by side when the weights
// stream (mat-vec, nc == 1). 4 where sharing the activation work is what
// keeps the kernel ahead of memory (4-bit formats: one row computes at about
// the per-core bandwidth); 1 where one row is fast enough on its own, since a
// single stream still prefetches best (Q8_0: 99% vs 80-85% of the bandwidth).
template <typename K>
LP_TARGET_AVX512 static void gemm_tile_by_rows(int64_t n, const void* w, size_t w_stride, const void* a,
                                               size_t a_stride, float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    if (nc == 1 && K::stream_rows == 1) {
        for (int r = 0; r < nr; ++r) K::template rows<1, true>(n, wb + r * w_stride, w_stride, a, out + r);
        return;
    }
    for (int c = 0; c < nc; ++c) {
        const void* ac = static_cast<const uint8_t*>(a) + c * a_stride;
        float* oc = out + c * out_stride;
        if (c == 0) {
            switch (nr) {
                case 4: K::template rows<4, true>(n, wb, w_stride, ac, oc); break;
                case 3: K::template rows<3, true>(n, wb, w_stride, ac, oc); break;
                case 2: K::template rows<2, true>(n, wb, w_stride, ac, oc); break;
                default: K::template rows<1, true>(n, wb, w_stride, ac, oc); break;
            }
        } else {  // the tile's weights are in cache now
            switch (nr) {
                case 4: K::template rows<4, false>(n, wb, w_stride, ac, oc); break;
                case 3: K::template rows<3, false>(n, wb, w_stride, ac, oc); break;
                case 2: K::template rows<2, false>(n, wb, w_stride, ac, oc); break;
                default: K::template rows<1, false>(n, wb, w_stride, ac, oc); break;
            }
        }
    }
}

template <typename K>
LP_TARGET_AVX512 static void vec_dot_by_rows(int64_t n, float* out, const void* w_row, const void* a_row) {
    K::template rows<1, true>(n, static_cast<const uint8_t*>(w_row), 0, a_row, out);
}


// --- 4 x NC register-blocked tiles --------------------------------------------
// For kernels K that, besides rows<NR, STREAM>, provide per group of 8 blocks
// load_act (one column) and load_weights (one row) in the tile layout below,
// and for the blocks past the last group tail_quants, tail_offset and
// tail_chains, which describe the AVX2 kernel K::rows finishes with.

// The rows kernels reduce each (row, column) pair's vpdpbusd lanes with
// unpacks (reduce_pairs_x4 / reduce_quads_x2), which in a tile would cost
// shuffles per pair. Every lane of those reductions is the dot of 16 elements
// (pairs: a 16-byte quarter of a pair vector; quads: the dwords {0,2} or {1,3}
// of a lo/hi vector pair), so the tile applies one dword permutation to both
// operands instead — once per row for the weights and once per column for the
// activations — that puts the 4 dwords of each 16-element set at the same lane
// of 4 vectors. A chain of 4 vpdpbusd then yields the reduced lanes directly,
// with the same integer values, so the float steps match K::rows bit for bit.
struct tile_act {
    __m512i v[4];    // permuted activations
    __m512i offset;  // the weights' offset term per reduced lane (vpdpbusd start)
    __m512 d;        // activation scales in the reduced lane order
};
struct tile_weights {
    __m512i q[4];  // permuted unsigned quants
    __m512 d;
};

// Pairs: lane 4L+j of the reduction is 128-bit lane L of pair j, i.e. a 4x4
// dword transpose within each 128-bit lane.
LP_TARGET_AVX512 static inline void transpose_pairs(const __m512i* in, __m512i* out) {
    const __m512i t0 = _mm512_unpacklo_epi32(in[0], in[1]), t1 = _mm512_unpackhi_epi32(in[0], in[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(in[2], in[3]), t3 = _mm512_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Quads: lane 4L+m of the reduction is dwords {0,2} (m < 2) or {1,3} of
// 128-bit lane L of quad m%2, in the lo and the hi vectors.
LP_TARGET_AVX512 static inline void interleave_quads(const __m512i* lo, const __m512i* hi, __m512i* out) {
    out[0] = _mm512_unpacklo_epi32(lo[0], lo[1]);
    out[1] = _mm512_unpackhi_epi32(lo[0], lo[1]);
    out[2] = _mm512_unpacklo_epi32(hi[0], hi[1]);
    out[3] = _mm512_unpackhi_epi32(hi[0], hi[1]);
}

// -128 * (sum of the permuted activations) per reduced lane, >> shift.
LP_TARGET_AVX512 static inline __m512i tile_offset(const __m512i* v, int shift) {
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512i s = _mm512_setzero_si512();
    for (int t = 0; t < 4; ++t) s = _mm512_dpbusd_epi32(s, k80, v[t]);
    return _mm512_srai_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), s), shift);
}

// The blocks past the last group of 8 (nb8 <= ib < nb) of a 4 x NC tile, each
// pair's value bit for bit what K::rows's AVX2 tail kernel returns: the same
// 8 int32 lanes per block (4 products each, offset applied in integers), the
// same per-block scale d_w * d_a, fma chains and horizontal sum. Weights and
// activations are unpacked once per tile instead of once per pair.
template <typename K, int NC>
LP_TARGET_AVX512 static void tile_tail(int64_t nb8, int64_t nb, const typename K::wblock* const* x,
                                       const typename K::ablock* const* y, float (*tail)[NC]) {
    const int n_tail = (int)(nb - nb8);  // 1..7
    __m256i aq[NC][7], aoff[NC][7];
    float ad[NC][7];
    for (int c = 0; c < NC; ++c) {
        for (int k = 0; k < n_tail; ++k) {
            const auto& b = y[c][nb8 + k];
            aq[c][k] = _mm256_loadu_si256((const __m256i*)b.qs);
            const __m256i off = _mm256_set1_epi8((char)K::tail_offset);
            const __m256i sum = _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, aq[c][k]);  // offset * sum(a)
            aoff[c][k] = _mm256_sub_epi32(_mm256_setzero_si256(), sum);
            ad[c][k] = half_to_float(b.d);
        }
    }
    for (int r = 0; r < 4; ++r) {
        __m256i wq[7];
        float wd[7];
        for (int k = 0; k < n_tail; ++k) {
            wq[k] = K::tail_quants(x[r][nb8 + k]);
            wd[k] = half_to_float(x[r][nb8 + k].d);
        }
        for (int c = 0; c < NC; ++c) {
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int k = 0; k < n_tail; ++k) {
                const __m256i p = _mm256_dpbusd_epi32(aoff[c][k], wq[k], aq[c][k]);
                __m256& a = acc[K::tail_chains == 2 ? (k & 1) : 0];
                a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd[k] * ad[c][k]), a);
            }
            tail[r][c] = hsum_f32x8(K::tail_chains == 2 ? _mm256_add_ps(acc[0], acc[1]) : acc[0]);
        }
    }
}

// 4 weight rows x NC activation rows, register blocked: per group of 8 blocks
// each column's activations are prepared once (K::load_act) and each row's
// weights unpacked once (K::load_weights), then each of the 4 x NC pairs is a
// chain of 4 vpdpbusd (see tile_act). Each pair goes through the same float
// operations, in the same order, as K::rows (one fma per group, the lane sum,
// the AVX2 tail), so a mat-mat output equals its mat-vec one bit for bit.
template <typename K, int NC>
LP_TARGET_AVX512 static void gemm_tile_4xn(int64_t n, const uint8_t* w, size_t w_stride, const uint8_t* a,
                                           size_t a_stride, float* out, size_t out_stride) {
    using wblock = typename K::wblock;
    using ablock = typename K::ablock;
    const int64_t nb = n / 32, nb8 = nb & ~(int64_t)7;
    const ablock* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const ablock*>(a + c * a_stride);
    const wblock* x[4];
    for (int r = 0; r < 4; ++r) x[r] = reinterpret_cast<const wblock*>(w + r * w_stride);
    __m512 acc[4][NC];
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb8; ib += 8) {
        tile_act act[NC];
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) act[c] = K::load_act(y[c] + ib);
        // unrolled whole, so that acc stays in registers
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
            const tile_weights wr = K::load_weights(x[r] + ib);
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) {
                __m512i s = act[c].offset;
                for (int t = 0; t < 4; ++t) s = _mm512_dpbusd_epi32(s, wr.q[t], act[c].v[t]);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wr.d, act[c].d), acc[r][c]);
            }
        }
    }
    float tail[4][NC] = {};
    if (nb8 < nb) tile_tail<K, NC>(nb8, nb, x, y, tail);
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < 4; ++r) out[c * out_stride + r] = _mm512_reduce_add_ps(acc[r][c]) + tail[r][c];
}

// Mat-mat tiles of 4 rows go through gemm_tile_4xn; mat-vec (nc == 1) and
// edge tiles through the rows kernels (gemm_tile_by_rows).
template <typename K>
LP_TARGET_AVX512 static void gemm_tile_blocked(int64_t n, const void* w, size_t w_stride, const void* a,
                                               size_t a_stride, float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nr == 4) {
        switch (nc) {
            case 4: gemm_tile_4xn<K, 4>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            case 3: gemm_tile_4xn<K, 3>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            case 2: gemm_tile_4xn<K, 2>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            default: break;
        }
    }
    gemm_tile_by_rows<K>(n, w, w_stride, a, a_stride, out, out_stride, nr, nc);
}

#endif  // LP_HAVE_AVX512

}  // namespace x86
}  // namespace lp

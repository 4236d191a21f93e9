// kquants_tiles_x86.cpp — the AVX-512 VNNI kernels of the k-quant family
// (Q2_K .. Q6_K weights against Q8_K activations): the dot product (mat-vec)
// and the 4×N register-blocked tile (mat-mat), which give the same result bit
// for bit, so that a batch gives what one token at a time gives. Formats,
// scalar reference and registration: kquants.cpp; AVX2 kernels and the Q8_K
// quantizers: kquants_x86.cpp. A build without LP_ENABLE_AVX512 compiles this
// to nothing.
//
// Integer part (per super-block and (row, column) pair). maddubs leaves sums
// of 2 products u8×s8 in the 16-bit halves of each 32-bit lane; the 4 weights
// of a lane share a sub-block, so VNNI dpwssd against a vector holding each
// lane's scale in both halves applies the scale and accumulates in one step:
// S, 16 int32 lanes of Σ scale·q·a (block_dot). (On Zen 5 this measured ~5%
// faster than dpbusd + dpwssd. Chaining 4 dpbusd per lane and scaling once
// needs both operands transposed so that a lane holds one sub-block; at 4×4
// tiles the activations' transposes and stores cost more than the halved
// multiplies save: a 64-byte store takes the vpdpbusd ports for a cycle.)
//
// Float part. Two pairs — one row against two columns — share one float
// vector, which halves the float work per pair: the two 256-bit halves of
// each pair's S are added in integers (fold), the first column lands in
// lanes 0..7, the second in 8..15. Per super-block, with d_a the columns'
// scales:
//   T   = fold(S_c, S_c')                    (− offset·Σ scale·bsum, integer)
//   acc = fma(float(T), d·d_a, acc)
//   acc = fnmadd(dmin·min, d_a·bsum, acc)   (Q4_K, Q5_K: per sub-block;
//   acc = fnmadd(float(Σ min·bsum), dmin·d_a, acc)        Q2_K: per group)
// Q3_K and Q6_K store quant + offset (4, 32): their offset term has the same
// float factor d·d_a as the main one and is subtracted in integers. The dot
// product does the same for its one column on 256 bits (the fold is the sum
// of S's halves; d·d_a a scalar product, the same IEEE product as the
// tile's lane) and sums its 8 lanes as the tile sums each half. Every lane
// sees the same integers and the same float operations in both, hence the
// same bits.
//
// What bounds the tile (Zen 5, measured): vpmaddubsw / vpmaddwd / vpdpwssd /
// vpdpbusd, FP multiplies and FMAs, cross-lane dword permutes and vector
// stores share two ports, which block_dot's 8 per pair plus the float steps
// nearly fill; the other two ALU ports take the row unpacking, the folds and
// the conversions. A 4×4 super-block runs in ~105 cycles (~30% of the int8
// peak; ~118 before the fold and the register-resident accumulators); 4×6
// tiles measured the same and 4×8 slower (spills): the 4×4 size is not the
// limit.

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

#if defined(LP_HAVE_AVX512)
namespace {

using kq_x86::k4_scales_mins_avx2;
using kq_x86::kAheadNarrow;
using kq_x86::kAheadWide;
using kq_x86::prefetch_ahead;
using kq_x86::q3k_scales_avx2;

// How a type's bsums term enters (see the file comment).
enum class bsum_term {
    offset,  // Q3_K, Q6_K: integer, factor d (m16 = offset·scale)
    min32,   // Q4_K, Q5_K: float per 32-weight sub-block (mins)
    min16,   // Q2_K: integer Σ min·bsum per 16-weight group, factor dmin (m16 = mins)
};

// One super-block of one row, prepared for the VNNI loop: q[z] holds weights
// 64z..64z+63 as unsigned bytes, lined up with the Q8_K quants they multiply;
// s[z] the scale of each 32-bit lane (in both 16-bit halves). The float and
// bsums factors are kept compact (one pair's worth): the dot product uses
// them as they are, the tile broadcasts them to both halves.
struct krow {
    __m512i q[4];
    __m512i s[4];
    float d, dmin;
    __m256i m16;  // offset, min16: the 16 int16 factors of bsums
    __m256 mins;  // min32: dmin·min of sub-blocks 0..7 (exact)
};

// Two columns' super-blocks for the tile (an odd last column: the same one
// twice): the first column's values in lanes 0..7, the second's in 8..15.
struct kcols {
    __m512 d;     // d_a
    __m512i b16;  // offset, min16: the 16 int16 bsums of each column
    __m512 bsum;  // min32: d_a · (bsums 2j + 2j+1) for sub-blocks j = 0..7
};

// Constants with one value in the lower 256 bits and another in the upper.
LP_TARGET_AVX512 LP_INLINE __m512i halves_epi32(int lo, int hi) {
    return _mm512_setr_epi32(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi);
}
LP_TARGET_AVX512 LP_INLINE __m512i halves_epi16(int lo, int hi) {
    return halves_epi32((int)((uint32_t)(lo & 0xFFFF) * 0x10001u), (int)((uint32_t)(hi & 0xFFFF) * 0x10001u));
}
LP_TARGET_AVX512 LP_INLINE __m512i bcast_256(const void* p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)p));
}
LP_TARGET_AVX512 LP_INLINE __m512 halves_ps(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

// --- unpacking ---------------------------------------------------------------------

// Scales of 16-weight groups (Q2_K, Q3_K, Q6_K): lane i of s[z] covers
// weights 64z + 4i .. +3, in group 4z + i/4. sc16: the 16 scales as int16.
LP_TARGET_AVX512 LP_INLINE void group16_scales(__m256i sc16, krow& u) {
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
LP_TARGET_AVX512 LP_INLINE void crumbs(const uint8_t* qs, krow& u) {
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
LP_TARGET_AVX512 LP_INLINE void or_bit_plane(const uint8_t* plane, int to, krow& u) {
    const __m512i bits = bcast_256(plane);
    const __m512i bit = _mm512_set1_epi8((char)(1 << to));
    for (int z = 0; z < 4; ++z) {
        const __m512i moved = _mm512_rolv_epi32(bits, halves_epi32((to - 2 * z) & 31, (to - 2 * z - 1) & 31));
        u.q[z] = _mm512_ternarylogic_epi32(moved, bit, u.q[z], 0xEA);  // (moved & bit) | q
    }
}

// Q4_K and Q5_K: byte c·32 + k holds weights 64c + k (low nibble) and
// 64c + 32 + k (high nibble), so a broadcast of bytes 32z.. shifted by 0
// (lower half) and 4 (upper half) gives weights 64z..64z+63. d, dmin and the
// 12 scale bytes lead both layouts.
LP_TARGET_AVX512 LP_INLINE void unpack_k4(const uint8_t* b, size_t qs_off, krow& u) {
    const __m128i sm = k4_scales_mins_avx2(b + 4);  // scales 0..7, mins 8..15
    // lane i of s[z] takes scale 2z + i/8: a pshufb of the scale bytes (in
    // every 128-bit lane) into both 16-bit halves, zero-extended
    const __m512i sm4 = _mm512_broadcast_i32x4(sm);
    const __m512i m4 = _mm512_set1_epi8(0xF);
    for (int z = 0; z < 4; ++z) {
        u.s[z] = _mm512_shuffle_epi8(sm4, halves_epi32((int)(0xFF00FF00u | (0x10001u * (2 * z))),
                                                       (int)(0xFF00FF00u | (0x10001u * (2 * z + 1)))));
        u.q[z] = _mm512_and_si512(_mm512_srlv_epi16(bcast_256(b + qs_off + 32 * z), halves_epi16(0, 4)), m4);
    }
    uint16_t d, dmin;
    std::memcpy(&d, b, 2);
    std::memcpy(&dmin, b + 2, 2);
    u.d = _cvtsh_ss(d);
    u.dmin = _cvtsh_ss(dmin);
    u.mins = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))), _mm256_set1_ps(u.dmin));
}

struct q2_k_avx512 {
    using block = block_q2_K;
    static constexpr size_t ahead = kAheadNarrow;  // prefetch distance (kquants_x86_common.h)
    static constexpr bsum_term term = bsum_term::min16;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const block& b, krow& u) {
        crumbs(b.qs, u);
        const __m128i s8 = _mm_loadu_si128((const __m128i*)b.scales);
        const __m128i m4 = _mm_set1_epi8(0xF);
        group16_scales(_mm256_cvtepu8_epi16(_mm_and_si128(s8, m4)), u);
        u.m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
        u.d = _cvtsh_ss(b.d);
        u.dmin = _cvtsh_ss(b.dmin);
    }
};

struct q3_k_avx512 {
    using block = block_q3_K;
    static constexpr size_t ahead = kAheadNarrow;  // prefetch distance (kquants_x86_common.h)
    static constexpr bsum_term term = bsum_term::offset;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const block& b, krow& u) {
        crumbs(b.qs, u);
        or_bit_plane(b.hmask, 2, u);  // quant + 4, in [0, 7]
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3k_scales_avx2(b.scales));
        group16_scales(sc16, u);
        u.m16 = _mm256_slli_epi16(sc16, 2);  // offset 4
        u.d = _cvtsh_ss(b.d);
    }
};

struct q4_k_avx512 {
    using block = block_q4_K;
    static constexpr size_t ahead = kAheadWide;  // prefetch distance (kquants_x86_common.h)
    static constexpr bsum_term term = bsum_term::min32;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const block& b, krow& u) {
        unpack_k4(reinterpret_cast<const uint8_t*>(&b), offsetof(block, qs), u);
    }
};

struct q5_k_avx512 {
    using block = block_q5_K;
    static constexpr size_t ahead = kAheadWide;  // prefetch distance (kquants_x86_common.h)
    static constexpr bsum_term term = bsum_term::min32;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const block& b, krow& u) {
        unpack_k4(reinterpret_cast<const uint8_t*>(&b), offsetof(block, qs), u);
        or_bit_plane(b.qh, 4, u);
    }
};

struct q6_k_avx512 {
    using block = block_q6_K;
    static constexpr size_t ahead = kAheadWide;  // prefetch distance (kquants_x86_common.h)
    static constexpr bsum_term term = bsum_term::offset;
    // Weights h·128 + 0..63 are the low nibbles of ql[64h..64h+63], weights
    // h·128 + 64..127 the high ones; their top 2 bits are crumbs 0,1 resp. 2,3
    // of qh[32h..32h+31], moved to bits 4-5 by word shifts (4, 2) and (0, −2).
    LP_TARGET_AVX512 static LP_INLINE void unpack(const block& b, krow& u) {
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
        group16_scales(sc16, u);
        u.m16 = _mm256_slli_epi16(sc16, 5);  // offset 32
        u.d = _cvtsh_ss(b.d);
    }
};

// --- the shared steps ------------------------------------------------------------

// Per 32-bit lane: Σ scale·q·a over the super-block. maddubs leaves the sums
// of 2 products in 16-bit halves (at most 2·63·127, no saturation) and dpwssd
// multiplies both halves by the lane's scale and accumulates.
LP_TARGET_AVX512 LP_INLINE __m512i block_dot(const krow& u, const int8_t* a) {
    __m512i s01 = _mm512_madd_epi16(_mm512_maddubs_epi16(u.q[0], _mm512_loadu_si512(a)), u.s[0]);
    __m512i s23 = _mm512_madd_epi16(_mm512_maddubs_epi16(u.q[2], _mm512_loadu_si512(a + 128)), u.s[2]);
    s01 = _mm512_dpwssd_epi32(s01, _mm512_maddubs_epi16(u.q[1], _mm512_loadu_si512(a + 64)), u.s[1]);
    s23 = _mm512_dpwssd_epi32(s23, _mm512_maddubs_epi16(u.q[3], _mm512_loadu_si512(a + 192)), u.s[3]);
    return _mm512_add_epi32(s01, s23);
}

// The halves of s0 added into lanes 0..7, those of s1 into lanes 8..15.
LP_TARGET_AVX512 LP_INLINE __m512i fold(__m512i s0, __m512i s1) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(s0, s1, 0x44), _mm512_shuffle_i64x2(s0, s1, 0xEE));
}

template <bsum_term term>
LP_TARGET_AVX512 LP_INLINE kcols col_terms(const block_q8_K& a0, const block_q8_K& a1) {
    kcols c;
    c.d = halves_ps(a0.d, a1.d);
    c.b16 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)a0.bsums)),
                               _mm256_loadu_si256((const __m256i*)a1.bsums), 1);
    if constexpr (term == bsum_term::min32)
        c.bsum = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(c.b16, _mm512_set1_epi16(1))), c.d);
    return c;
}

// A row's factors broadcast to both halves, for the tile.
struct krow2 {
    __m512 d, dmin, mins;
    __m512i m16;
};

template <bsum_term term>
LP_TARGET_AVX512 LP_INLINE krow2 both_halves(const krow& u) {
    krow2 v;
    v.d = _mm512_set1_ps(u.d);
    if constexpr (term != bsum_term::min32) v.m16 = _mm512_broadcast_i64x4(u.m16);
    if constexpr (term == bsum_term::min32) v.mins = _mm512_broadcast_f32x8(u.mins);
    if constexpr (term == bsum_term::min16) v.dmin = _mm512_set1_ps(u.dmin);
    return v;
}

// One super-block of two pairs in the tile (row u, columns c): s0, s1 from
// block_dot. Lanes 0..7 get what vec_dot_k computes for column 0, 8..15 the
// same for column 1.
template <bsum_term term>
LP_TARGET_AVX512 LP_INLINE __m512 accumulate(__m512 acc, __m512i s0, __m512i s1, const krow2& u, const kcols& c) {
    __m512i t = fold(s0, s1);
    if constexpr (term == bsum_term::offset) t = _mm512_sub_epi32(t, _mm512_madd_epi16(u.m16, c.b16));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(u.d, c.d), acc);
    if constexpr (term == bsum_term::min32) acc = _mm512_fnmadd_ps(u.mins, c.bsum, acc);
    if constexpr (term == bsum_term::min16)
        acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(u.m16, c.b16)), _mm512_mul_ps(u.dmin, c.d), acc);
    return acc;
}

// --- the kernels -------------------------------------------------------------------

template <class K>
LP_TARGET_AVX512 LP_INLINE void vec_dot_k(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const typename K::block*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    // The tile's steps for one column, on 256 bits: the fold is the sum of
    // the two halves, the products d·d_a scalar (the same IEEE product).
    constexpr bsum_term term = K::term;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(w + i, sizeof(w[i]), K::ahead);
        krow u;
        K::unpack(w[i], u);
        const __m512i s = block_dot(u, a[i].qs);
        __m256i t = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
        const __m256i b16 = _mm256_loadu_si256((const __m256i*)a[i].bsums);
        if constexpr (term == bsum_term::offset) t = _mm256_sub_epi32(t, _mm256_madd_epi16(u.m16, b16));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(u.d * a[i].d), acc);
        if constexpr (term == bsum_term::min32) {
            const __m256 bsum = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(b16, _mm256_set1_epi16(1))),
                                              _mm256_set1_ps(a[i].d));
            acc = _mm256_fnmadd_ps(u.mins, bsum, acc);
        }
        if constexpr (term == bsum_term::min16)
            acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(u.m16, b16)), _mm256_set1_ps(u.dmin * a[i].d), acc);
    }
    *out = x86::hsum_f32x8(acc);
}

// 4 weight rows × NC activation rows (NC 2..4): per super-block each row is
// unpacked once for all NC columns; columns 0,1 and 2,3 share float vectors
// (an odd last column is paired with itself). 8 accumulators.
template <class K, int NC>
LP_TARGET_AVX512 LP_INLINE void tile_4xn(int64_t n, const uint8_t* w, size_t w_stride, const uint8_t* a,
                                         size_t a_stride, float* out, size_t out_stride) {
    using block = typename K::block;
    constexpr int NP = (NC + 1) / 2;
    __m512 acc[4][NP];
    for (int r = 0; r < 4; ++r)
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const block_q8_K* y[NC];
        for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * a_stride) + i;
        kcols cols[NP];
        for (int p = 0; p < NP; ++p) cols[p] = col_terms<K::term>(*y[2 * p], *y[2 * p + 1 < NC ? 2 * p + 1 : 2 * p]);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
            krow u;
            K::unpack(reinterpret_cast<const block*>(w + r * w_stride)[i], u);
            const krow2 u2 = both_halves<K::term>(u);
#pragma GCC unroll 2
            for (int p = 0; p < NP; ++p) {
                const __m512i s0 = block_dot(u, y[2 * p]->qs);
                const __m512i s1 = 2 * p + 1 < NC ? block_dot(u, y[2 * p + 1]->qs) : s0;
                acc[r][p] = accumulate<K::term>(acc[r][p], s0, s1, u2, cols[p]);
            }
        }
    }
    for (int r = 0; r < 4; ++r) {
        for (int p = 0; p < NP; ++p) {
            out[2 * p * out_stride + r] = x86::hsum_f32x8(_mm512_castps512_ps256(acc[r][p]));
            if (2 * p + 1 < NC) out[(2 * p + 1) * out_stride + r] = x86::hsum_f32x8(_mm512_extractf32x8_ps(acc[r][p], 1));
        }
    }
}

// 4 × 2..4 tiles register blocked; mat-vec (the driver passes 4 rows × 1
// column) and edge tiles row by row through the dot product, which streams
// each row in address order with prefetch (walking 4 rows block by block
// measured 3x slower from memory).
template <class K>
LP_TARGET_AVX512 LP_INLINE void gemm_tile_k(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                            float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nr == 4) {
        switch (nc) {
            case 4: tile_4xn<K, 4>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            case 3: tile_4xn<K, 3>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            case 2: tile_4xn<K, 2>(n, wb, w_stride, ab, a_stride, out, out_stride); return;
            default: break;
        }
    }
    for (int r = 0; r < nr; ++r)
        for (int c = 0; c < nc; ++c) vec_dot_k<K>(n, out + c * out_stride + r, wb + r * w_stride, ab + c * a_stride);
}

// Small batches (type_traits::matvec_cols): nr rows × nc <= 4 columns, row
// after row as the mat-vec streams them (with its prefetch), each
// super-block unpacked once for the nc columns, with the tile's pair
// arithmetic: the dot product's bits, and one pass over the weights instead
// of one per column (a server's slots decoding together).
template <class K, int NC>
LP_TARGET_AVX512 LP_INLINE void row_cols(int64_t n, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out,
                                         size_t out_stride) {
    using block = typename K::block;
    constexpr int NP = (NC + 1) / 2;
    const auto* wr = reinterpret_cast<const block*>(w);
    __m512 acc[NP];
    for (int p = 0; p < NP; ++p) acc[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(wr + i, sizeof(wr[i]), K::ahead);
        const block_q8_K* y[NC];
        for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_K*>(a + c * a_stride) + i;
        krow u;
        K::unpack(wr[i], u);
        const krow2 u2 = both_halves<K::term>(u);
        for (int p = 0; p < NP; ++p) {
            const kcols cols = col_terms<K::term>(*y[2 * p], *y[2 * p + 1 < NC ? 2 * p + 1 : 2 * p]);
            const __m512i s0 = block_dot(u, y[2 * p]->qs);
            const __m512i s1 = 2 * p + 1 < NC ? block_dot(u, y[2 * p + 1]->qs) : s0;
            acc[p] = accumulate<K::term>(acc[p], s0, s1, u2, cols);
        }
    }
    for (int p = 0; p < NP; ++p) {
        out[2 * p * out_stride] = x86::hsum_f32x8(_mm512_castps512_ps256(acc[p]));
        if (2 * p + 1 < NC) out[(2 * p + 1) * out_stride] = x86::hsum_f32x8(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

template <class K>
LP_TARGET_AVX512 LP_INLINE void matvec_cols_k(int64_t n, const void* w, size_t w_stride, const void* a,
                                              size_t a_stride, float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    for (int r = 0; r < nr; ++r) {
        const uint8_t* wr = wb + r * w_stride;
        switch (nc) {
            case 4: row_cols<K, 4>(n, wr, ab, a_stride, out + r, out_stride); break;
            case 3: row_cols<K, 3>(n, wr, ab, a_stride, out + r, out_stride); break;
            case 2: row_cols<K, 2>(n, wr, ab, a_stride, out + r, out_stride); break;
            default: vec_dot_k<K>(n, out + r, wr, ab); break;
        }
    }
}

}  // namespace

#define LP_KQUANT_AVX512_KERNELS(tname, K)                                                                       \
    LP_TARGET_AVX512 void vec_dot_##tname##_q8_k_avx512(int64_t n, float* out, const void* w, const void* a) {   \
        vec_dot_k<K>(n, out, w, a);                                                                              \
    }                                                                                                            \
    LP_TARGET_AVX512 void gemm_tile_##tname##_q8_k_avx512(int64_t n, const void* w, size_t ws, const void* a,    \
                                                          size_t as, float* out, size_t os, int nr, int nc) {    \
        gemm_tile_k<K>(n, w, ws, a, as, out, os, nr, nc);                                                        \
    }
// Small batches for the types that keep these kernels (Q4_K / Q5_K run the
// panels of kquants_panels_x86.cpp, with their own).
#define LP_KQUANT_AVX512_COLS(tname, K)                                                                          \
    LP_TARGET_AVX512 void matvec_cols_##tname##_q8_k_avx512(int64_t n, const void* w, size_t ws, const void* a,  \
                                                            size_t as, float* out, size_t os, int nr, int nc) {  \
        matvec_cols_k<K>(n, w, ws, a, as, out, os, nr, nc);                                                      \
    }
LP_KQUANT_AVX512_KERNELS(q2_k, q2_k_avx512)
LP_KQUANT_AVX512_KERNELS(q3_k, q3_k_avx512)
LP_KQUANT_AVX512_KERNELS(q4_k, q4_k_avx512)
LP_KQUANT_AVX512_KERNELS(q5_k, q5_k_avx512)
LP_KQUANT_AVX512_KERNELS(q6_k, q6_k_avx512)
LP_KQUANT_AVX512_COLS(q2_k, q2_k_avx512)
LP_KQUANT_AVX512_COLS(q3_k, q3_k_avx512)
LP_KQUANT_AVX512_COLS(q6_k, q6_k_avx512)
#undef LP_KQUANT_AVX512_KERNELS
#undef LP_KQUANT_AVX512_COLS

#endif  // LP_HAVE_AVX512

}  // namespace lp

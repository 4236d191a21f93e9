// kquants_x86_common.h — small x86 helpers shared by the k-quant kernel files
// (kquants_x86.cpp: AVX2; kquants_tiles_avx2.cpp: AVX2 tiles and panels;
// kquants_tiles_x86.cpp: AVX-512): weight prefetch, the AVX2 super-block
// epilogue and the decoding of the packed Q3_K / Q4_K / Q5_K scales.
// Include after <immintrin.h>; everything is inline and carries its target
// attribute, so a portable build compiles it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../common.h"
#include "prefetch_x86.h"

namespace lp {
namespace kq_x86 {

#if defined(LP_HAVE_AVX2)

// Mat-vec streams the weights from memory once. The hardware prefetchers
// alone leave one core short of the memory bandwidth, so the row kernels
// prefetch the lines `ahead` bytes past the block in use. Rows of a matrix are
// contiguous, so this runs on into the next row; prefetches past the end of
// the data are harmless. The wide blocks (Q4_K, Q5_K, Q6_K) use the common
// single-stream distance (prefetch_x86.h). Q2_K and Q3_K (84- and 110-byte
// blocks, more work per byte) lost 5-7% at 2.5 KiB against 4 KiB on the Xeon
// VM with 4 KiB pages (benchmarks/LOG.md, 2026-12-07) and keep 4 KiB.
constexpr size_t kAheadWide = prefetch_x86::kStreamAhead;  // Q4_K, Q5_K, Q6_K rows
constexpr size_t kAheadNarrow = 4096;  // Q2_K, Q3_K rows

LP_INLINE void prefetch_ahead(const void* block, size_t block_bytes, size_t ahead) {
    const char* p = static_cast<const char*>(block) + ahead;
    for (size_t off = 0; off < block_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// Q4_K / Q5_K scales and mins (see k4_unpack_scales in kquants.cpp) as bytes
// 0-7 / 8-15 of one vector. Reads 16 bytes from s: the 12 scale bytes and 4
// bytes of what follows them in both layouts.
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

// The epilogue of a super-block, shared by every AVX2 k-quant kernel (the
// vec_dots in kquants_x86.cpp, the tiles and panels in kquants_tiles_avx2.cpp)
// so that they give the same bits. sum holds the 8 int32 lanes of
// Σ_g scale_g·Σ q·a, ms those of Σ_g min_g·bsum_g. One vphaddd (port 5) puts
// both into one vector — lanes 0-1 and 4-5 pairs of sum, 2-3 and 6-7 pairs of
// ms, exact in int32 — so one conversion, one scale multiply and one FMA
// serve both terms, where two of each did (the epilogue was about a fifth of
// the port-0/1 work of a 2 × 4 panel tile). pattern is
// [d d −dmin −dmin d d −dmin −dmin]: its product with d_a has the bits of
// the scalar products d·d_a, −(dmin·d_a).
LP_TARGET_AVX2 LP_INLINE __m256 k_block_fma(__m256i sum, __m256i ms, __m256 pattern, const float* da, __m256 acc) {
    const __m256 terms = _mm256_cvtepi32_ps(_mm256_hadd_epi32(sum, ms));
    return _mm256_fmadd_ps(terms, _mm256_mul_ps(pattern, _mm256_broadcast_ss(da)), acc);
}

// k_block_fma's scale pattern from d and dmin (Q3_K / Q6_K: dmin = d, their
// "mins" being offset·scale).
LP_TARGET_AVX2 LP_INLINE __m256 k_scale_pattern(float d, float dmin) {
    return _mm256_blend_ps(_mm256_set1_ps(d), _mm256_set1_ps(-dmin), 0xCC);
}

// The same from the F16 pair (d, dmin) at p, as Q2_K / Q4_K / Q5_K store it:
// one conversion, one permute and a sign flip.
LP_TARGET_AVX2 LP_INLINE __m256 k_scale_pattern_f16(const uint8_t* p) {
    uint32_t bits;
    std::memcpy(&bits, p, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)bits));  // d dmin 0 0
    const __m256 pat = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), _mm256_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1));
    return _mm256_xor_ps(pat, _mm256_setr_ps(0.f, 0.f, -0.f, -0.f, 0.f, 0.f, -0.f, -0.f));
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

#endif  // LP_HAVE_AVX2

}  // namespace kq_x86
}  // namespace lp

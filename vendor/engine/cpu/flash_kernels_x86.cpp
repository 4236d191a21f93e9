// flash_kernels_x86.cpp — the AVX2 and AVX-512 kernels of the flash path
// (flash_attention.h: q·k over a tile, weights · values, exp and sum of a
// tile). Keys and values are converted from F32 / F16 / BF16 as they are
// loaded, never copied. Each kernel is written so that a query's (or an
// output element's) result comes from the same operations whatever the
// number of queries or cells in the call: queries are processed in groups by
// one template whose per-query work does not depend on the group size.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>

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


#if defined(LP_HAVE_AVX2)

template <flash_elem E> LP_TARGET_AVX2 LP_INLINE __m256 load8(const uint8_t* row, int e) {
    if constexpr (E == flash_elem::f32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
    } else {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + e));
        if constexpr (E == flash_elem::f16) return _mm256_cvtph_ps(h);
        else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
}

template <flash_elem E> float elem(const uint8_t* row, int e) {
    if constexpr (E == flash_elem::f32) {
        return reinterpret_cast<const float*>(row)[e];
    } else {
        const uint16_t h = reinterpret_cast<const uint16_t*>(row)[e];
        return E == flash_elem::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
}


// One dot product per (query, key) pair: a single 8-lane FMA chain over the
// whole multiples of 8, the lanes summed by hsum256's pairing (j with j+4, j+2,
// j+1), then the tail added one element at a time. The 4×2 block below and
// the single pair compute each pair exactly this way.
template <flash_elem E>
LP_TARGET_AVX2 LP_INLINE float dot_tail_avx2(const uint8_t* row, const float* q, int d8, int d, float sum) {
    for (int t = d8; t < d; ++t) sum += q[t] * elem<E>(row, t);
    return sum;
}

template <flash_elem E>
LP_TARGET_AVX2 LP_INLINE float dot_pair_avx2(const uint8_t* row, const float* q, int d) {
    const int d8 = d & ~7;
    __m256 acc = _mm256_setzero_ps();
    for (int e = 0; e < d8; e += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + e), load8<E>(row, e), acc);
    return dot_tail_avx2<E>(row, q, d8, d, hsum256(acc));
}

// Lane sums of 8 accumulators with hsum256's pairing in every lane; the sum of
// a[i] (i = 4m + 2h + L) lands in lane 4L + 2m + h.
LP_TARGET_AVX2 LP_INLINE __m256 reduce8_avx2(const __m256 a[8]) {
    __m256 b[4];
    for (int k = 0; k < 4; ++k)  // j + j+4: 128-bit lane 0 <- a[2k], lane 1 <- a[2k+1]
        b[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
    __m256 c[2];
    for (int k = 0; k < 2; ++k) {  // j + j+2
        const __m256d x = _mm256_castps_pd(b[2 * k]), y = _mm256_castps_pd(b[2 * k + 1]);
        c[k] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    return _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x88), _mm256_shuffle_ps(c[0], c[1], 0xdd));  // j + j+1
}
constexpr int reduce8_lane(int i) { return 4 * (i % 2) + 2 * (i / 4) + (i / 2) % 2; }

// 2 queries × NC cells (4 or 6) when d is a multiple of 8 (no tails): the
// pair (query j, cell c < 4) accumulates in a[j + 2·(c & 1) + 4·(c >> 1)],
// which reduce8_avx2 sums into lane 4j + c, so each query's 4 scores leave as
// one 128-bit store; cells 4-5 (a[8 + j + 2·(c - 4)]) go through a second
// reduce8_avx2 whose zero slots leave each chain's tree unchanged. At head
// size 64 a pair's chain is 8 FMAs, and the 4 × 2 tile's scalar scatter of
// its 8 sums cost about as much as the FMAs. 6 cells give 12 chains: with 8,
// each taking one FMA per 8 elements, the FMA latency paced the loop.
template <flash_elem E, int NC>
LP_TARGET_AVX2 LP_INLINE void dots_2xn_avx2(const uint8_t* const rows[NC], const float* q0, int d, float* s0,
                                            float* s1) {
    static_assert(NC == 4 || NC == 6, "cells 0-3 in one reduction, 4-5 in a second");
    constexpr int na = NC == 4 ? 8 : 16;
    __m256 a[na];
    for (int t = 0; t < na; ++t) a[t] = _mm256_setzero_ps();
    for (int e = 0; e < d; e += 8) {
        const __m256 qa = _mm256_loadu_ps(q0 + e), qb = _mm256_loadu_ps(q0 + (size_t)d + e);
        for (int c = 0; c < NC; ++c) {
            const __m256 kv = load8<E>(rows[c], e);
            const int t = c < 4 ? 2 * (c & 1) + 4 * (c >> 1) : 8 + 2 * (c - 4);
            a[t] = _mm256_fmadd_ps(qa, kv, a[t]);
            a[t + 1] = _mm256_fmadd_ps(qb, kv, a[t + 1]);
        }
    }
    const __m256 sums = reduce8_avx2(a);
    _mm_storeu_ps(s0, _mm256_castps256_ps128(sums));
    _mm_storeu_ps(s1, _mm256_extractf128_ps(sums, 1));
    if constexpr (NC == 6) {
        const __m256 more = reduce8_avx2(a + 8);
        _mm_storel_pi(reinterpret_cast<__m64*>(s0 + 4), _mm256_castps256_ps128(more));
        _mm_storel_pi(reinterpret_cast<__m64*>(s1 + 4), _mm256_extractf128_ps(more, 1));
    }
}

// 4 queries × 3 cells (d a multiple of 8): 12 chains as the 2 × 6 block, but
// each key vector's F16 conversion (2 uops, one on the FMA ports) serves 4
// FMAs instead of 2. Cells 0-1 sit in a[] so that reduce8_avx2 leaves query
// j's two scores side by side in lanes 2j, 2j + 1; cell 2 in b[2j] (b's odd
// slots stay zero, which leaves each chain's tree unchanged) lands in lane j.
template <flash_elem E>
LP_TARGET_AVX2 LP_INLINE void dots_4x3_avx2(const uint8_t* const rows[3], const float* q0, int d, float* s,
                                            int s_stride) {
    __m256 a[8], b[8];
    for (int t = 0; t < 8; ++t) a[t] = b[t] = _mm256_setzero_ps();
    for (int e = 0; e < d; e += 8) {
        const __m256 k0 = load8<E>(rows[0], e), k1 = load8<E>(rows[1], e), k2 = load8<E>(rows[2], e);
        for (int j = 0; j < 4; ++j) {
            const __m256 qv = _mm256_loadu_ps(q0 + (size_t)j * d + e);
            const int t = (j >> 1) + 4 * (j & 1);
            a[t] = _mm256_fmadd_ps(qv, k0, a[t]);
            a[t + 2] = _mm256_fmadd_ps(qv, k1, a[t + 2]);
            b[2 * j] = _mm256_fmadd_ps(qv, k2, b[2 * j]);
        }
    }
    const __m256 pairs = reduce8_avx2(a);
    const __m128 lo = _mm256_castps256_ps128(pairs), hi = _mm256_extractf128_ps(pairs, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(s), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + (size_t)s_stride), lo);
    _mm_storel_pi(reinterpret_cast<__m64*>(s + 2 * (size_t)s_stride), hi);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + 3 * (size_t)s_stride), hi);
    alignas(16) float third[4];
    _mm_store_ps(third, _mm256_castps256_ps128(reduce8_avx2(b)));
    for (int j = 0; j < 4; ++j) s[(size_t)j * s_stride + 2] = third[j];
}

// Cells [i, i + NC) against every query: pairs of queries in dots_2xn_avx2, an
// odd last query pair by pair.
template <flash_elem E, int NC>
LP_TARGET_AVX2 LP_INLINE void dots_cells_avx2(const uint8_t* k, size_t k_row_bytes, const int32_t* cells,
                                              const float* q, int nq, int d, float* s, int s_stride) {
    const uint8_t* rows[NC];
    for (int c = 0; c < NC; ++c) rows[c] = k + (size_t)cells[c] * k_row_bytes;
    int qi = 0;
    for (; qi + 2 <= nq; qi += 2)
        dots_2xn_avx2<E, NC>(rows, q + (size_t)qi * d, d, s + (size_t)qi * s_stride, s + (size_t)(qi + 1) * s_stride);
    for (; qi < nq; ++qi)
        for (int c = 0; c < NC; ++c) s[(size_t)qi * s_stride + c] = dot_pair_avx2<E>(rows[c], q + (size_t)qi * d, d);
}

template <flash_elem E>
LP_TARGET_AVX2 void dots_avx2(const uint8_t* k, size_t k_row_bytes, const int32_t* cells, int n, const float* q, int nq,
                              int d, float* s, int s_stride) {
    const int d8 = d & ~7;
    int i = 0;
    if (d8 == d && nq % 4 == 0) {
        for (; i + 3 <= n; i += 3) {
            const uint8_t* rows[3];
            for (int c = 0; c < 3; ++c) rows[c] = k + (size_t)cells[i + c] * k_row_bytes;
            for (int qi = 0; qi < nq; qi += 4)
                dots_4x3_avx2<E>(rows, q + (size_t)qi * d, d, s + (size_t)qi * s_stride + i, s_stride);
        }
    }
    if (d8 == d) {
        for (; i + 6 <= n; i += 6) dots_cells_avx2<E, 6>(k, k_row_bytes, cells + i, q, nq, d, s + i, s_stride);
        for (; i + 4 <= n; i += 4) dots_cells_avx2<E, 4>(k, k_row_bytes, cells + i, q, nq, d, s + i, s_stride);
    }
    for (; i + 2 <= n; i += 2) {
        const uint8_t* rows[2] = {k + (size_t)cells[i] * k_row_bytes, k + (size_t)cells[i + 1] * k_row_bytes};
        int qi = 0;
        for (; qi + 4 <= nq; qi += 4) {
            __m256 a[8];  // a[2 * query + cell]
            for (int t = 0; t < 8; ++t) a[t] = _mm256_setzero_ps();
            const float* q0 = q + (size_t)qi * d;
            for (int e = 0; e < d8; e += 8) {
                const __m256 k0 = load8<E>(rows[0], e), k1 = load8<E>(rows[1], e);
                for (int j = 0; j < 4; ++j) {
                    const __m256 qv = _mm256_loadu_ps(q0 + (size_t)j * d + e);
                    a[2 * j] = _mm256_fmadd_ps(qv, k0, a[2 * j]);
                    a[2 * j + 1] = _mm256_fmadd_ps(qv, k1, a[2 * j + 1]);
                }
            }
            alignas(32) float sums[8];
            _mm256_store_ps(sums, reduce8_avx2(a));
            for (int j = 0; j < 4; ++j)
                for (int c = 0; c < 2; ++c)
                    s[(size_t)(qi + j) * s_stride + i + c] =
                        dot_tail_avx2<E>(rows[c], q0 + (size_t)j * d, d8, d, sums[reduce8_lane(2 * j + c)]);
        }
        for (; qi < nq; ++qi)
            for (int c = 0; c < 2; ++c) s[(size_t)qi * s_stride + i + c] = dot_pair_avx2<E>(rows[c], q + (size_t)qi * d, d);
    }
    for (; i < n; ++i) {
        const uint8_t* row = k + (size_t)cells[i] * k_row_bytes;
        for (int qi = 0; qi < nq; ++qi) s[(size_t)qi * s_stride + i] = dot_pair_avx2<E>(row, q + (size_t)qi * d, d);
    }
}

// NQ queries × 16 output dims [e, e + 16) over n cells. pv_avx2 takes 6
// queries at a time where it can (12 chains: with 8, one FMA per chain per
// cell, the FMA latency paced the loop; a 1B layer at depth 4096, AVX2, 2
// threads: the flash op 205 -> 197 ms).
template <flash_elem E, int NQ>
LP_TARGET_AVX2 LP_INLINE void pv_group_avx2(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n,
                                            const float* p, int p_stride, int e, float* acc, int acc_stride) {
    __m256 a0[NQ], a1[NQ];
    for (int j = 0; j < NQ; ++j) {
        a0[j] = _mm256_loadu_ps(acc + (size_t)j * acc_stride + e);
        a1[j] = _mm256_loadu_ps(acc + (size_t)j * acc_stride + e + 8);
    }
    for (int i = 0; i < n; ++i) {
        const uint8_t* row = v + (size_t)cells[i] * v_row_bytes;
        const __m256 v0 = load8<E>(row, e), v1 = load8<E>(row, e + 8);
        for (int j = 0; j < NQ; ++j) {
            const __m256 w = _mm256_set1_ps(p[(size_t)j * p_stride + i]);
            a0[j] = _mm256_fmadd_ps(w, v0, a0[j]);
            a1[j] = _mm256_fmadd_ps(w, v1, a1[j]);
        }
    }
    for (int j = 0; j < NQ; ++j) {
        _mm256_storeu_ps(acc + (size_t)j * acc_stride + e, a0[j]);
        _mm256_storeu_ps(acc + (size_t)j * acc_stride + e + 8, a1[j]);
    }
}

template <flash_elem E>
LP_TARGET_AVX2 void pv_avx2(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n, const float* p,
                            int p_stride, int nq, int d, float* acc, int acc_stride) {
    int e = 0;
    for (; e + 16 <= d; e += 16) {
        int qi = 0;
        for (; qi + 6 <= nq; qi += 6)
            pv_group_avx2<E, 6>(v, v_row_bytes, cells, n, p + (size_t)qi * p_stride, p_stride, e,
                                acc + (size_t)qi * acc_stride, acc_stride);
        for (; qi + 4 <= nq; qi += 4)
            pv_group_avx2<E, 4>(v, v_row_bytes, cells, n, p + (size_t)qi * p_stride, p_stride, e,
                                acc + (size_t)qi * acc_stride, acc_stride);
        for (; qi < nq; ++qi)
            pv_group_avx2<E, 1>(v, v_row_bytes, cells, n, p + (size_t)qi * p_stride, p_stride, e,
                                acc + (size_t)qi * acc_stride, acc_stride);
    }
    // Dims past a multiple of 16: one element at a time, the same FMA chain
    // over the cells for every query.
    for (; e < d; ++e)
        for (int qi = 0; qi < nq; ++qi) {
            float a = acc[(size_t)qi * acc_stride + e];
            for (int i = 0; i < n; ++i)
                a = std::fma(p[(size_t)qi * p_stride + i], elem<E>(v + (size_t)cells[i] * v_row_bytes, e), a);
            acc[(size_t)qi * acc_stride + e] = a;
        }
}


// e^x of x - max (<= 0), exactly 0 below -87.3 and for -inf.
LP_TARGET_AVX2 LP_INLINE __m256 exp_nonpos_avx2(__m256 x) {
    return _mm256_and_ps(exp256(x), _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
}

LP_TARGET_AVX2 float exp_sum_avx2(float* x, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc[8];
    for (int k = 0; k < kFlashTile / 8; ++k) {
        acc[k] = exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * k), vm));
        _mm256_storeu_ps(x + 8 * k, acc[k]);
    }
    // The sum in double: which slots hold a row's values depends on the other
    // rows' cells in the tile (zeros elsewhere), and a float tree would round
    // differently for each such layout; summed in double and rounded once,
    // the float result is the same for every layout but at double-rounding
    // ties. (An F16 cache turns a last-bit difference here into a different
    // stored key in the next layer, so it showed as ~1e-4 in the logits.)
    static_assert(kFlashTile == 64, "the sum tree below covers 8 vectors");
    __m256d d[8];
    for (int k = 0; k < 4; ++k)
        d[k] = _mm256_add_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(acc[2 * k])),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(acc[2 * k], 1))),
                             _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(acc[2 * k + 1])),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(acc[2 * k + 1], 1))));
    const __m256d t = _mm256_add_pd(_mm256_add_pd(d[0], d[1]), _mm256_add_pd(d[2], d[3]));
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    return (float)_mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

LP_TARGET_AVX2 float max_tile_avx2(const float* x) {
    __m256 m = _mm256_loadu_ps(x);
    for (int k = 1; k < kFlashTile / 8; ++k) m = _mm256_max_ps(m, _mm256_loadu_ps(x + 8 * k));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

#endif  // LP_HAVE_AVX2

#if defined(LP_HAVE_AVX512)

template <flash_elem E> LP_TARGET_AVX512 LP_INLINE __m512 load16(const uint8_t* row, int e, __mmask16 m) {
    if constexpr (E == flash_elem::f32) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + e);
    } else {
        const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + e);
        if constexpr (E == flash_elem::f16) return _mm512_cvtph_ps(h);
        else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

// The lanes of a summed with _mm512_reduce_add_ps's pairing, spelled out so
// that every compiler adds them the same way as reduce16_avx512.
LP_TARGET_AVX512 LP_INLINE float reduce1_avx512(__m512 a) {
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

// One dot product per (query, key) pair: a single 16-lane FMA chain over d
// (the last step masked), then the lanes summed by the tree of
// _mm512_reduce_add_ps (lane j with j+8, then j+4, j+2, j+1). The 4×4 block
// below and the single pair compute each pair exactly this way, so a score
// does not depend on which block it falls in.
template <flash_elem E>
LP_TARGET_AVX512 LP_INLINE float dot_pair_avx512(const uint8_t* row, const float* q, int d) {
    __m512 acc = _mm512_setzero_ps();
    for (int e = 0; e < d; e += 16) {
        const __mmask16 m = d - e >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (d - e)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + e), load16<E>(row, e, m), acc);
    }
    return reduce1_avx512(acc);
}

// Sums of the lanes of 16 accumulators, result lane i = sum of a[i], with the
// pairing of _mm512_reduce_add_ps in every lane (addition commutes, so only
// the pairing matters).
LP_TARGET_AVX512 LP_INLINE __m512 reduce16_avx512(const __m512 a[16]) {
    // lanes j + j+8: b[k] = [a[2k] folded | a[2k+1] folded] (8 lanes each)
    __m512 b[8];
    for (int k = 0; k < 8; ++k) {
        const __m512 lo = _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44);  // a.lo256 | a'.lo256
        const __m512 hi = _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee);  // a.hi256 | a'.hi256
        b[k] = _mm512_add_ps(lo, hi);
    }
    // lanes j + j+4: c[k] 128-bit lanes = [b[2k].0, b[2k+1].0, b[2k].1, b[2k+1].1] folded
    __m512 c[4];
    for (int k = 0; k < 4; ++k) {
        const __m512 lo = _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88);  // 128-bit lanes 0,2 of each
        const __m512 hi = _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xdd);  // lanes 1,3 of each
        c[k] = _mm512_add_ps(lo, hi);
    }
    // lanes j + j+2, then j + j+1, within each 128-bit lane
    __m512 e2[2];
    for (int k = 0; k < 2; ++k) {
        const __m512d x = _mm512_castps_pd(c[2 * k]), y = _mm512_castps_pd(c[2 * k + 1]);
        e2[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(e2[0], e2[1], 0x88), _mm512_shuffle_ps(e2[0], e2[1], 0xdd));
}

// Where reduce16_avx512 puts the sum of a[i]: after the first two steps
// a[4m + L] sits in 128-bit lane L of the m-th vector, and the last two
// steps put vector m's lane L at 4L + m.
constexpr int reduce16_lane(int i) { return 4 * (i % 4) + i / 4; }

// One 16-element step of a dots group: a[NC * query + cell] += q · key.
template <flash_elem E, int NQ, int NC>
LP_TARGET_AVX512 LP_INLINE void dots_step_avx512(const uint8_t* const rows[NC], const float* q0, int d, int e,
                                                 __mmask16 m, __m512 a[16]) {
    __m512 kv[NC];
    for (int c = 0; c < NC; ++c) kv[c] = load16<E>(rows[c], e, m);
    for (int j = 0; j < NQ; ++j) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, q0 + (size_t)j * d + e);
        for (int c = 0; c < NC; ++c) a[NC * j + c] = _mm512_fmadd_ps(qv, kv[c], a[NC * j + c]);
    }
}

// NQ queries × NC cells (NQ * NC == 16 accumulators) over the whole of d,
// each pair's score stored to s. Per 16-element step: NC key loads (converted
// once, shared by the NQ queries) and NQ query loads for 16 FMAs.
template <flash_elem E, int NQ, int NC>
LP_TARGET_AVX512 LP_INLINE void dots_group_avx512(const uint8_t* const rows[NC], const float* q0, int d, float* s,
                                                  int s_stride, int i) {
    static_assert(NQ * NC == 16, "one reduce16 per group");
    __m512 a[16];  // a[NC * query + cell]
    for (int t = 0; t < 16; ++t) a[t] = _mm512_setzero_ps();
    // Whole vectors, then the masked tail (the same FMA chain as masking
    // every step; a mask computed per step cost a few % at head size 64).
    const int d16 = d & ~15;
    for (int e = 0; e < d16; e += 16) dots_step_avx512<E, NQ, NC>(rows, q0, d, e, (__mmask16)0xffff, a);
    if (d16 < d) dots_step_avx512<E, NQ, NC>(rows, q0, d, d16, (__mmask16)((1u << (d - d16)) - 1), a);
    alignas(64) float sums[16];
    _mm512_store_ps(sums, reduce16_avx512(a));
    for (int j = 0; j < NQ; ++j)
        for (int c = 0; c < NC; ++c) s[(size_t)j * s_stride + i + c] = sums[reduce16_lane(NC * j + c)];
}

// Queries [0, q8) in groups of 8 × 2 cells (a block's usual 16 queries),
// the rest in 4 × 4: the 8 × 2 group reads and converts half as many key
// vectors per FMA (measured faster than 4 × 4 and 16 × 1). Every pair is the
// same FMA chain and lane tree either way.
template <flash_elem E>
LP_TARGET_AVX512 void dots_avx512(const uint8_t* k, size_t k_row_bytes, const int32_t* cells, int n, const float* q,
                                  int nq, int d, float* s, int s_stride) {
    const int q8 = nq & ~7, n2 = n & ~1;
    for (int qi = 0; qi < q8; qi += 8)
        for (int i = 0; i < n2; i += 2) {
            const uint8_t* rows[2] = {k + (size_t)cells[i] * k_row_bytes, k + (size_t)cells[i + 1] * k_row_bytes};
            dots_group_avx512<E, 8, 2>(rows, q + (size_t)qi * d, d, s + (size_t)qi * s_stride, s_stride, i);
        }
    if (n2 < n) {  // the odd last cell of the 8-query groups
        const uint8_t* row = k + (size_t)cells[n2] * k_row_bytes;
        for (int j = 0; j < q8; ++j) s[(size_t)j * s_stride + n2] = dot_pair_avx512<E>(row, q + (size_t)j * d, d);
    }
    const int qr = q8;  // queries [qr, nq): 4 × 4 groups, then pairs
    int qi;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint8_t* rows[4];
        for (int c = 0; c < 4; ++c) rows[c] = k + (size_t)cells[i + c] * k_row_bytes;
        for (qi = qr; qi + 4 <= nq; qi += 4)
            dots_group_avx512<E, 4, 4>(rows, q + (size_t)qi * d, d, s + (size_t)qi * s_stride, s_stride, i);
        for (; qi < nq; ++qi)
            for (int c = 0; c < 4; ++c) s[(size_t)qi * s_stride + i + c] = dot_pair_avx512<E>(rows[c], q + (size_t)qi * d, d);
    }
    for (; i < n; ++i) {
        const uint8_t* row = k + (size_t)cells[i] * k_row_bytes;
        for (qi = qr; qi < nq; ++qi) s[(size_t)qi * s_stride + i] = dot_pair_avx512<E>(row, q + (size_t)qi * d, d);
    }
}

// NQ queries × NV·16 output dims from e over n cells, the last vector masked
// by `last`: the NQ·NV accumulators stay in registers across the cells (the
// vector count is a template argument: with a run-time count GCC kept them
// on the stack, a load and a store per FMA).
template <flash_elem E, int NQ, int NV>
LP_TARGET_AVX512 LP_INLINE void pv_group_avx512(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n,
                                                const float* p, int p_stride, int e, __mmask16 last, float* acc,
                                                int acc_stride) {
    __m512 a[NQ][NV];
    for (int j = 0; j < NQ; ++j)
        for (int k = 0; k < NV; ++k)
            a[j][k] = _mm512_maskz_loadu_ps(k == NV - 1 ? last : (__mmask16)0xffff, acc + (size_t)j * acc_stride + e + 16 * k);
    for (int i = 0; i < n; ++i) {
        const uint8_t* row = v + (size_t)cells[i] * v_row_bytes;
        __m512 vv[NV];
        for (int k = 0; k < NV; ++k) vv[k] = load16<E>(row, e + 16 * k, k == NV - 1 ? last : (__mmask16)0xffff);
        for (int j = 0; j < NQ; ++j) {
            const __m512 w = _mm512_set1_ps(p[(size_t)j * p_stride + i]);
            for (int k = 0; k < NV; ++k) a[j][k] = _mm512_fmadd_ps(w, vv[k], a[j][k]);
        }
    }
    for (int j = 0; j < NQ; ++j)
        for (int k = 0; k < NV; ++k)
            _mm512_mask_storeu_ps(acc + (size_t)j * acc_stride + e + 16 * k, k == NV - 1 ? last : (__mmask16)0xffff,
                                  a[j][k]);
}

// The queries [q0, q1) in groups of NQ, dims in steps of NV·16, then the dims
// past the last whole step 16 (the last one masked) at a time. Returns the
// first query not done.
template <flash_elem E, int NQ, int NV>
LP_TARGET_AVX512 LP_INLINE int pv_queries_avx512(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n,
                                                 const float* p, int p_stride, int q0, int q1, int d, float* acc,
                                                 int acc_stride) {
    int qi = q0;
    for (; qi + NQ <= q1; qi += NQ) {
        const float* pq = p + (size_t)qi * p_stride;
        float* aq = acc + (size_t)qi * acc_stride;
        int e = 0;
        for (; e + 16 * NV <= d; e += 16 * NV)
            pv_group_avx512<E, NQ, NV>(v, v_row_bytes, cells, n, pq, p_stride, e, (__mmask16)0xffff, aq, acc_stride);
        for (; e < d; e += 16) {
            const int nd = std::min(16, d - e);
            const __mmask16 last = nd == 16 ? (__mmask16)0xffff : (__mmask16)((1u << nd) - 1);
            pv_group_avx512<E, NQ, 1>(v, v_row_bytes, cells, n, pq, p_stride, e, last, aq, acc_stride);
        }
    }
    return qi;
}

// 8 queries × 32 dims where there are 8 queries (a block's usual 16), the
// rest in 4 × 64 and 1 × 64 (8 × 32 measured faster than 4 × 64 and 16 × 16
// on pp512 at depth 16384). Each output element is one FMA chain over the
// cells in order whatever the grouping.
template <flash_elem E>
LP_TARGET_AVX512 void pv_avx512(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n, const float* p,
                                int p_stride, int nq, int d, float* acc, int acc_stride) {
    int qi = pv_queries_avx512<E, 8, 2>(v, v_row_bytes, cells, n, p, p_stride, 0, nq, d, acc, acc_stride);
    if (nq - qi >= 4) qi = pv_queries_avx512<E, 4, 4>(v, v_row_bytes, cells, n, p, p_stride, qi, nq, d, acc, acc_stride);
    if (qi < nq) pv_queries_avx512<E, 1, 4>(v, v_row_bytes, cells, n, p, p_stride, qi, nq, d, acc, acc_stride);
}


LP_TARGET_AVX512 float exp_sum_avx512(float* x, float m) {
    static_assert(kFlashTile == 64, "four vectors per tile");
    const __m512 vm = _mm512_set1_ps(m);
    __m512 e[4];
    for (int k = 0; k < 4; ++k) {
        e[k] = exp512_or_zero(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * k), vm));
        _mm512_storeu_ps(x + 16 * k, e[k]);
    }
    // In double, rounded once: see exp_sum_avx2.
    __m512d d[4];
    for (int k = 0; k < 4; ++k)
        d[k] = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(e[k])),
                             _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e[k]), 1))));
    return (float)_mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(d[0], d[1]), _mm512_add_pd(d[2], d[3])));
}

LP_TARGET_AVX512 float max_tile_avx512(const float* x) {
    const __m512 m = _mm512_max_ps(_mm512_max_ps(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)),
                                   _mm512_max_ps(_mm512_loadu_ps(x + 32), _mm512_loadu_ps(x + 48)));
    return _mm512_reduce_max_ps(m);
}

#endif  // LP_HAVE_AVX512

}  // namespace

void flash_kernels_x86(flash_kernels& k, isa level) {
    (void)k;
    (void)level;
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level, isa::avx2) && !isa_is_arm(level)) {
        k.dots[0] = dots_avx2<flash_elem::f32>;
        k.dots[1] = dots_avx2<flash_elem::f16>;
        k.dots[2] = dots_avx2<flash_elem::bf16>;
        k.pv[0] = pv_avx2<flash_elem::f32>;
        k.pv[1] = pv_avx2<flash_elem::f16>;
        k.pv[2] = pv_avx2<flash_elem::bf16>;
        k.exp_sum = exp_sum_avx2;
        k.max_tile = max_tile_avx2;
    }
#endif
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        k.dots[0] = dots_avx512<flash_elem::f32>;
        k.dots[1] = dots_avx512<flash_elem::f16>;
        k.dots[2] = dots_avx512<flash_elem::bf16>;
        k.pv[0] = pv_avx512<flash_elem::f32>;
        k.pv[1] = pv_avx512<flash_elem::f16>;
        k.pv[2] = pv_avx512<flash_elem::bf16>;
        k.exp_sum = exp_sum_avx512;
        k.max_tile = max_tile_avx512;
    }
#endif
}

}  // namespace lp
